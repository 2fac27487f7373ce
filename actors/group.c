/* group.c — the replica group's bucketed all-reduce, or reduce-scatter and all-gather when
 * the optimizer is sharded (group.h), over the members that take part in each step: every
 * member, unless one left (tr__group_leave: local SGD's elastic replicas). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group_impl.h"
#include "collective.h"

TR_MSGTYPE_DEFINE(tr__bucket_type, tr__bucket_msg);

enum { BUCKET_FLOATS = (1 << 20) / 4 }; /* 1 MiB: a bucket per mlp layer, overlap for the rest */

/* `floats` elements sent from this member (tr__group_sent_bytes says what counts). */
static void sent(tr__group *g, size_t floats) { g->sent += (int64_t)(floats * sizeof(float)); }

int64_t tr__group_sent_bytes(const tr__group *g) { return g ? g->sent : 0; }

/* Buckets, last layers first, each at least BUCKET_FLOATS unless the stage runs out. */
static int plan(const tr_model *m, int first, int end, bucket *out) {
  size_t base, n, hi = 0;
  tr_model_layer_span(m, first, &base, &n);
  int nb = 0;
  bool open = false;
  for (int l = end - 1; l >= first; l--) {
    size_t off;
    tr_model_layer_span(m, l, &off, &n);
    off -= base;
    if (!open) hi = off + n, open = true;
    if (hi - off >= BUCKET_FLOATS || l == first) {
      if (out) out[nb] = (bucket){.lo = off, .hi = hi, .low_layer = l};
      nb++;
      open = false;
    }
  }
  return nb;
}

int tr__group_buckets(const tr_model *m, int first, int end) { return plan(m, first, end, NULL); }

int tr__group_bucket_plan(const tr_model *m, int first, int end, int *low_layer,
                          size_t *floats) {
  bucket *b = malloc((size_t)plan(m, first, end, NULL) * sizeof *b);
  if (b == NULL) return TR_ENOMEM;
  const int nb = plan(m, first, end, b);
  for (int i = 0; i < nb; i++) low_layer[i] = b[i].low_layer, floats[i] = b[i].hi - b[i].lo;
  free(b);
  return 0;
}

void tr__group_use_nccl(tr__group *g, tr_comm *inside, tr_comm *across, const char *error) {
  g->nccl = inside;
  g->across = across;
  snprintf(g->nccl_error, sizeof g->nccl_error, "%s", error ? error : "");
}

void tr__group_span_ranks(tr__group *g, int group, int ranks, int whole, tr_edge *sum,
                          tr_edge *summed) {
  g->cross = group;
  g->ranks = ranks;
  g->whole = whole;
  g->sum = sum;
  g->summed = summed;
}

tr__group *tr__group_new(int n, int me, tr_edge *const *out, tr_edge *const *in,
                         tr_device *const *devs, bool sharded) {
  tr__group *g = calloc(1, sizeof *g);
  if (g == NULL) return NULL;
  g->n = n;
  g->me = me;
  g->out = malloc((size_t)n * sizeof *g->out);
  g->in = malloc((size_t)n * sizeof *g->in);
  g->devs = malloc((size_t)n * sizeof *g->devs);
  g->grads = calloc((size_t)n, sizeof *g->grads);
  g->params = calloc((size_t)n, sizeof *g->params);
  g->left_at = malloc((size_t)n * sizeof *g->left_at);
  if (!g->out || !g->in || !g->devs || !g->grads || !g->params || !g->left_at) {
    tr__group_free(g);
    return NULL;
  }
  memcpy(g->out, out, (size_t)n * sizeof *out);
  memcpy(g->in, in, (size_t)n * sizeof *in);
  memcpy(g->devs, devs, (size_t)n * sizeof *devs);
  for (int r = 0; r < n; r++) g->left_at[r] = INT64_MAX;
  g->last_ready = -1;
  g->cross = -1;
  g->sharded = sharded && n > 1;
  return g;
}

tr_stage_shard tr__group_shard(const tr__group *g) {
  return g->sharded ? (tr_stage_shard){.count = g->n, .index = g->me} : (tr_stage_shard){0};
}

static int fail(tr__group *g, const char *what) {
  return tr_actor_fail(g->self, TR_EDEVICE, "all-reduce: %s on %s: %s", what,
                       tr_device_name(g->dev), tr_device_error(g->dev));
}

/* Member m's shard of the stage's elements: what its stage holds (tr_stage_shard_span). */
static void shard_of(const tr__group *g, int m, size_t *lo, size_t *hi) {
  size_t n;
  tr_stage_shard_span(tr_stage_info_of(g->st)->numel, (tr_stage_shard){g->n, m}, lo, &n);
  *hi = *lo + n;
}

/* Member m's part of bucket b inside m's shard (maybe none). */
static void shard_chunk(const tr__group *g, int b, int m, size_t *lo, size_t *hi) {
  const bucket *bk = &g->buckets[b];
  size_t slo, shi;
  shard_of(g, m, &slo, &shi);
  *lo = bk->lo > slo ? bk->lo : slo;
  *hi = bk->hi < shi ? bk->hi : shi;
  if (*hi < *lo) *hi = *lo;
}

int tr__group_open(tr__group *g, tr_actor *self, tr_stage *st, tr__busy *busy) {
  const tr_stage_info *info = tr_stage_info_of(st);
  g->self = self;
  g->st = st;
  g->dev = tr_stage_device(st);
  g->busy = busy;
  if (g->nccl_error[0])
    return tr_actor_fail(self, TR_EDEVICE, "all-reduce on %s: %s", tr_device_name(g->dev),
                         g->nccl_error);
  g->buckets = calloc((size_t)(info->end - info->first), sizeof *g->buckets);
  if (g->buckets == NULL) return TR_ENOMEM;
  g->nb = plan(tr_stage_model(st), info->first, info->end, g->buckets);
  const int n = g->n, nb = g->nb;
  g->shard_lo = info->shard_offset;
  g->shard_hi = info->shard_offset + info->shard_numel;
  size_t largest = 0;
  for (int b = 0; b < nb; b++)
    if (g->buckets[b].hi - g->buckets[b].lo > largest) largest = g->buckets[b].hi - g->buckets[b].lo;
  for (int p = 0; p < 2; p++) {
    group_step *s = &g->gs[p];
    s->ready = calloc((size_t)nb, sizeof *s->ready);
    s->peer_ev = calloc((size_t)(nb * n), sizeof *s->peer_ev);
    s->reduced = calloc((size_t)(nb * n), sizeof *s->reduced);
    s->own_ready = calloc((size_t)nb, sizeof *s->own_ready);
    s->own_reduced = calloc((size_t)nb, sizeof *s->own_reduced);
    s->own_final = calloc((size_t)nb, sizeof *s->own_final);
    s->reduced_n = calloc((size_t)nb, sizeof *s->reduced_n);
    s->final_ev = calloc((size_t)nb, sizeof *s->final_ev);
    s->gathered = calloc((size_t)n, sizeof *s->gathered);
    if (!s->ready || !s->peer_ev || !s->reduced || !s->own_ready || !s->own_reduced ||
        !s->own_final || !s->reduced_n || !s->final_ev || !s->gathered)
      return TR_ENOMEM;
    if (g->sharded && (tr_event_open(g->dev, TR_EVENT_DEFAULT, &s->updated) ||
                       tr_event_open(g->dev, TR_EVENT_DEFAULT, &s->own_gathered)))
      return fail(g, "opening events");
    for (int b = 0; b < nb; b++)
      if (tr_event_open(g->dev, TR_EVENT_DEFAULT, &s->own_ready[b]) ||
          tr_event_open(g->dev, TR_EVENT_DEFAULT, &s->own_reduced[b]) ||
          tr_event_open(g->dev, TR_EVENT_DEFAULT, &s->own_final[b]))
        return fail(g, "opening events");
  }
  const tr_device_info *di = tr_device_info_of(g->dev);
  if (g->cross >= 0 && g->me == 0 && di->kind != TR_DEVICE_HOST && !g->across &&
      tr_host_alloc(g->dev, (info->numel ? info->numel : 1) * sizeof(float), (void **)&g->host))
    return fail(g, "allocating the gradients' staging for MPI");
  if (tr_stream_open(g->dev, "allreduce", &g->comm)) return fail(g, "opening its stream");
  /* Where a member's memory is not readable here, its chunks are staged through scratch. */
  g->direct = true;
  for (int r = 0; r < n && !g->nccl; r++) g->direct &= tr_device_can_access_peer(g->dev, g->devs[r]) == 1;
  if (!g->direct &&
      tr_device_alloc(g->dev, ((largest + (size_t)n - 1) / (size_t)n + 16) * sizeof(float),
                      (void **)&g->scratch))
    return fail(g, "allocating scratch");
  return 0;
}

/* This member's chunk of bucket b at step `step`: its share among the members taking part
 * (64-byte aligned), or sharded, the part in its shard (maybe none). */
static void own_chunk(const tr__group *g, int64_t step, int b, size_t *lo, size_t *hi) {
  const bucket *bk = &g->buckets[b];
  if (g->sharded) {
    shard_chunk(g, b, g->me, lo, hi);
    return;
  }
  int place = 0;
  const int k = tr__group_members_in(g, step, &place);
  size_t from, n; /* the bucket cut as a stage is into shards */
  tr_stage_shard_span(bk->hi - bk->lo, (tr_stage_shard){k, place}, &from, &n);
  *lo = bk->lo + from;
  *hi = *lo + n;
}

static int announce(tr__group *g, int64_t step, int b, tr_event *ev, tr__bucket_news news);

/* What this member sends of bucket b: the B − c elements the other chunks' owners read, and
 * (unsharded) its chunk's sum to the n − 1 others. */
static size_t bucket_sent(const tr__group *g, int64_t step, int b) {
  size_t lo, hi;
  own_chunk(g, step, b, &lo, &hi);
  const size_t c = hi - lo, whole = g->buckets[b].hi - g->buckets[b].lo;
  return whole - c + (g->sharded ? 0 : (size_t)(tr__group_members_in(g, step, NULL) - 1) * c);
}

/* Every member's bucket b is final: sum this member's chunk over them, in member order,
 * and write the sum into every member's gradients (sharded: only its own needs it). The
 * members are those taking part in the step: f, the first of them, leads the sum. */
int tr__group_reduce_chunk(tr__group *g, group_step *s, int64_t step, int b) {
  const uint64_t t0 = tr__busy_start(g->busy, g->self, step, "allreduce", b);
  size_t lo, hi;
  own_chunk(g, step, b, &lo, &hi);
  const size_t n = hi - lo;
  float *mine = tr_stage_grads(g->st) + lo;
  int f = 0;
  while (!tr__group_takes_part(g, f, step)) f++;
  for (int r = 0; r < g->n; r++)
    if (tr__group_takes_part(g, r, step) && tr_stream_wait_event(g->comm, s->peer_ev[b * g->n + r]))
      return fail(g, "waiting for a member");
  for (int r = f; r < g->n && n; r++) {
    const float *theirs = g->grads[r] + lo;
    /* mine: already in place, summed below in order */
    if (!tr__group_takes_part(g, r, step) || (r == g->me && r > f)) continue;
    if (!g->direct && r != g->me) {
      if (tr_memcpy_peer(g->comm, g->scratch, g->dev, theirs, g->devs[r], n * sizeof(float)))
        return fail(g, "staging a chunk");
      theirs = g->scratch;
    }
    int rc = 0;
    if (r == f && g->me != f) rc = tr_add(g->comm, mine, theirs, mine, n); /* g_f + g_me ... */
    else if (r > f) rc = tr_axpy(g->comm, mine, 1.0f, theirs, n);
    if (rc) return fail(g, "summing");
  }
  for (int r = 0; r < g->n && n && !g->sharded; r++) {
    if (r == g->me || !tr__group_takes_part(g, r, step)) continue;
    if (tr_memcpy_peer(g->comm, g->grads[r] + lo, g->devs[r], mine, g->dev, n * sizeof(float)))
      return fail(g, "writing the sum");
  }
  if (tr_event_record(s->own_reduced[b], g->comm)) return fail(g, "recording");
  sent(g, bucket_sent(g, step, b));
  int rc = announce(g, step, b, s->own_reduced[b], TR__BUCKET_REDUCED);
  tr__busy_add(g->busy, g->self, step, "allreduce", t0, b);
  return rc;
}

static int deliver_total(tr__group *g, int64_t step, int b, int members);

/* The leader: buckets whose every chunk is summed here go to the other ranks, in bucket
 * order (every rank issues the same collectives in the same order): through NCCL on the
 * group's stream (device memory, no staging), or the transport's MPI_Allreduce. */
static int sum_across(tr__group *g, group_step *s, int64_t step) {
  while (s->next_cross < g->nb && s->reduced_n[s->next_cross] == g->n) {
    const int b = s->next_cross++;
    const bucket *bk = &g->buckets[b];
    float *p = tr_stage_grads(g->st) + bk->lo;
    for (int r = 0; r < g->n; r++)
      if (tr_stream_wait_event(g->comm, s->reduced[b * g->n + r])) return fail(g, "waiting");
    if (g->across) {
      if (tr_comm_allreduce(g->across, g->comm, p, p, bk->hi - bk->lo))
        return fail(g, "summing a bucket across ranks");
      const size_t k = (size_t)tr_comm_count(g->across);
      sent(g, k > 1 ? 2 * (k - 1) * (bk->hi - bk->lo) / k : 0); /* the ring's */
      int rc = deliver_total(g, step, b, 0);
      if (rc) return rc;
      continue;
    }
    if (g->host) { /* MPI reads host memory: stage the bucket through it */
      if (tr_memcpy(g->comm, g->host + bk->lo, p, (bk->hi - bk->lo) * sizeof(float), TR_COPY_D2H))
        return fail(g, "staging a bucket");
      p = g->host + bk->lo;
    }
    if (tr_stream_synchronize(g->comm)) return fail(g, "finishing a bucket");
    tr__sum_msg *m = tr_msg_new(&tr__sum_type);
    *m = (tr__sum_msg){.hdr = m->hdr, .group = g->cross, .bucket = b, .buckets = g->nb,
                       .members = tr__group_members_in(g, step, NULL), .step = step, .p = p,
                       .n = bk->hi - bk->lo};
    int rc = tr_edge_send_control(g->sum, m);
    if (rc) return rc;
    /* handed to MPI, counted as the ring over the ranks sends it: 2 (k - 1) / k of it */
    const size_t k = (size_t)g->ranks, n = bk->hi - bk->lo;
    sent(g, k > 1 ? 2 * (k - 1) * n / k : 0);
  }
  return 0;
}

/* The leader: bucket b holds the sum over every rank (staged: on the host); it goes to the
 * members here, and they are told. */
static int summed(tr__group *g, const tr__summed_msg *m) {
  tr_edge_release(g->summed, 1);
  return deliver_total(g, m->step, m->bucket, m->members);
}

/* The leader: bucket b's sum over every rank (over `members`, 0: all) is in its gradients
 * (or staged on the host), or queued there on the group's stream; it goes to the members
 * here, and they are told. */
static int deliver_total(tr__group *g, int64_t step, int b, int members) {
  group_step *s = &g->gs[step & 1];
  s->across = members;
  const bucket *bk = &g->buckets[b];
  const size_t n = bk->hi - bk->lo;
  float *mine = tr_stage_grads(g->st) + bk->lo;
  if (g->host && tr_memcpy(g->comm, mine, g->host + bk->lo, n * sizeof(float), TR_COPY_H2D))
    return fail(g, "taking a bucket's sum");
  for (int r = 1; r < g->n; r++)
    if (tr_memcpy_peer(g->comm, g->grads[r] + bk->lo, g->devs[r], mine, g->dev, n * sizeof(float)))
      return fail(g, "writing the sum");
  if (tr_event_record(s->own_final[b], g->comm)) return fail(g, "recording");
  sent(g, (size_t)(g->n - 1) * n);
  return announce(g, step, b, s->own_final[b], TR__BUCKET_FINAL);
}

int tr__group_receive(tr__group *g, const tr_msg *msg) {
  if (msg->type == &tr__summed_type) return summed(g, (const tr__summed_msg *)msg);
  const tr__bucket_msg *m = (const tr__bucket_msg *)msg;
  if (m->member != g->me) tr_edge_release(g->in[m->member], 1);
  group_step *s = &g->gs[m->step & 1];
  switch (m->news) {
  case TR__BUCKET_FINAL: /* across ranks: the leader has the whole sum written here */
    s->final_ev[m->bucket] = m->ready;
    s->across = m->members;
    s->nfinal++;
    return 0;
  case TR__BUCKET_REDUCED:
    s->reduced[m->bucket * g->n + m->member] = m->ready;
    s->nreduced++;
    s->reduced_n[m->bucket]++;
    return g->cross >= 0 && g->me == 0 ? sum_across(g, s, m->step) : 0;
  case TR__BUCKET_GATHERED:
    s->gathered[m->member] = m->ready;
    s->ngathered++;
    return 0;
  case TR__BUCKET_LEFT: return tr__group_left(g, m->member, m->step);
  case TR__BUCKET_READY: break;
  }
  s->peer_ev[m->bucket * g->n + m->member] = m->ready;
  g->grads[m->member] = m->grads;
  g->params[m->member] = m->params;
  if (++s->ready[m->bucket] < tr__group_members_in(g, m->step, NULL)) return 0;
  s->ready[m->bucket] = 0;
  return tr__group_reduce_chunk(g, s, m->step, m->bucket);
}

/* Tells every member the news of bucket b (final here, this member's chunk of it summed,
 * ...), itself directly. */
static int announce(tr__group *g, int64_t step, int b, tr_event *ev, tr__bucket_news news) {
  const tr__bucket_msg own = {.hdr.type = &tr__bucket_type, .bucket = b, .member = g->me,
                              .news = news, .step = step, .ready = ev,
                              .grads = tr_stage_grads(g->st), .params = tr_stage_params(g->st),
                              .members = g->gs[step & 1].across};
  if (news == TR__BUCKET_READY) g->last_ready = step, g->mid = true;
  for (int r = 0; r < g->n; r++) {
    if (r == g->me || !tr__group_takes_part(g, r, step)) continue;
    tr__bucket_msg *m = tr_msg_new(&tr__bucket_type);
    tr_msg hdr = m->hdr;
    *m = own;
    m->hdr = hdr;
    int rc = tr_edge_send_control(g->out[r], m);
    if (rc) return rc;
  }
  return tr__group_receive(g, &own.hdr);
}

void tr__group_arm(tr__group *g, int64_t step) {
  g->armed = true;
  g->step = step;
  g->next_bucket = 0;
}

/* NCCL: bucket b is final here; its sum is queued on the group's stream at once (every
 * member issues the same calls in bucket order, and NCCL meets them on the GPUs): all of
 * it (ncclAllReduce, in place), or sharded each member's part to that member (ncclReduce). */
static int nccl_bucket(tr__group *g, int64_t step, int b) {
  group_step *s = &g->gs[step & 1];
  const uint64_t t0 = tr__busy_start(g->busy, g->self, step, "allreduce", b);
  float *grads = tr_stage_grads(g->st);
  if (tr_stream_wait_event(g->comm, s->own_ready[b])) return fail(g, "waiting for backward");
  if (!g->sharded) {
    const bucket *bk = &g->buckets[b];
    if (tr_comm_allreduce(g->nccl, g->comm, grads + bk->lo, grads + bk->lo, bk->hi - bk->lo))
      return fail(g, "summing a bucket through NCCL");
  }
  for (int m = 0; m < g->n && g->sharded; m++) {
    size_t lo, hi;
    shard_chunk(g, b, m, &lo, &hi);
    if (hi > lo && tr_comm_reduce(g->nccl, g->comm, grads + lo, grads + lo, hi - lo, m))
      return fail(g, "reduce-scattering a bucket through NCCL");
  }
  if (tr_event_record(s->own_reduced[b], g->comm)) return fail(g, "recording");
  sent(g, bucket_sent(g, step, b)); /* counted as the peer algorithm's (tr__group_sent_bytes) */
  s->nreduced++;
  tr__busy_add(g->busy, g->self, step, "allreduce", t0, b);
  return 0;
}

void tr__group_grad_ready(void *group, tr_stage *st, int layer) {
  (void)st;
  tr__group *g = group;
  while (g->armed && g->hook_rc == 0 && g->next_bucket < g->nb &&
         layer <= g->buckets[g->next_bucket].low_layer) {
    const int b = g->next_bucket++;
    tr_event *ev = g->gs[g->step & 1].own_ready[b];
    g->hook_rc = tr_event_record(ev, tr_stage_stream(g->st)) ? fail(g, "recording")
                 : g->nccl ? nccl_bucket(g, g->step, b)
                           : announce(g, g->step, b, ev, TR__BUCKET_READY);
  }
}

int tr__group_disarm(tr__group *g) {
  tr__group_grad_ready(g, g->st, tr_stage_info_of(g->st)->first); /* every bucket announced */
  g->armed = false;
  return g->hook_rc;
}

int tr__group_wait(tr__group *g, int64_t step, tr_stream *s) {
  group_step *gs = &g->gs[step & 1];
  if (g->nccl) { /* every bucket queued on the group's stream, the last after the others */
    if (gs->nreduced < g->nb) return 0;
    if (g->nb && tr_stream_wait_event(s, gs->own_reduced[g->nb - 1]))
      return fail(g, "waiting for the sums");
    gs->nreduced = 0;
    return 1;
  }
  const int k = tr__group_members_in(g, step, NULL); /* every member, unless one left */
  if (g->cross >= 0 ? gs->nfinal < g->nb : gs->nreduced < g->nb * k) return 0;
  const int n = g->cross >= 0 ? g->nb : g->nb * g->n;
  tr_event **ev = g->cross >= 0 ? gs->final_ev : gs->reduced;
  for (int i = 0; i < n; i++)
    if ((g->cross >= 0 || tr__group_takes_part(g, i % g->n, step)) &&
        tr_stream_wait_event(s, ev[i]))
      return fail(g, "waiting for the sums");
  g->mid = false;
  gs->nreduced = gs->nfinal = gs->next_cross = 0;
  memset(gs->reduced_n, 0, (size_t)g->nb * sizeof *gs->reduced_n);
  return 1;
}

/* Every member's gradients of the step were read by their owners before this member's
 * update (tr__group_wait), and so were its parameters by its forward and backward: the
 * shard goes out on the group's stream once the update has run. */
int tr__group_gather(tr__group *g, int64_t step) {
  if (!g->sharded) return 0;
  group_step *s = &g->gs[step & 1];
  const size_t lo = g->shard_lo, n = g->shard_hi - g->shard_lo;
  const float *mine = tr_stage_params(g->st) + lo;
  if (tr_event_record(s->updated, tr_stage_stream(g->st)) ||
      tr_stream_wait_event(g->comm, s->updated))
    return fail(g, "waiting for the update");
  if (g->nccl) { /* every member's shard from it to the others, in member order */
    float *params = tr_stage_params(g->st);
    for (int m = 0; m < g->n; m++) {
      size_t lo, hi;
      shard_of(g, m, &lo, &hi);
      if (hi > lo && tr_comm_broadcast(g->nccl, g->comm, params + lo, params + lo, hi - lo, m))
        return fail(g, "all-gathering the updated shards through NCCL");
    }
    if (tr_event_record(s->own_gathered, g->comm)) return fail(g, "recording");
    sent(g, (size_t)(g->n - 1) * n);
    s->ngathered = g->n;
    return 0;
  }
  for (int r = 0; r < g->n && n; r++) {
    if (r == g->me) continue;
    if (tr_memcpy_peer(g->comm, g->params[r] + lo, g->devs[r], mine, g->dev, n * sizeof(float)))
      return fail(g, "writing the updated shard");
  }
  if (tr_event_record(s->own_gathered, g->comm)) return fail(g, "recording");
  sent(g, (size_t)(g->n - 1) * n);
  return announce(g, step, -1, s->own_gathered, TR__BUCKET_GATHERED);
}

int tr__group_gathered(tr__group *g, int64_t step, tr_stream *s) {
  if (!g->sharded) return 1;
  group_step *gs = &g->gs[step & 1];
  if (gs->ngathered < g->n) return 0;
  if (g->nccl) {
    if (tr_stream_wait_event(s, gs->own_gathered)) return fail(g, "waiting for the updated shards");
    gs->ngathered = 0;
    return 1;
  }
  for (int r = 0; r < g->n; r++)
    if (r != g->me && tr_stream_wait_event(s, gs->gathered[r]))
      return fail(g, "waiting for the updated shards");
  gs->ngathered = 0;
  return 1;
}

int tr__group_sync(tr__group *g) {
  return g->comm && tr_stream_synchronize(g->comm) ? fail(g, "finishing") : 0;
}

void tr__group_abort(tr__group *g) {
  if (g == NULL) return;
  tr_comm_abort(g->nccl);
  tr_comm_abort(g->across);
  g->nccl = g->across = NULL;
}

void tr__group_close(tr__group *g) {
  if (g == NULL) return;
  if (g->comm) tr_stream_synchronize(g->comm);
  for (int p = 0; p < 2; p++)
    for (int b = 0; b < g->nb; b++) {
      if (g->gs[p].own_ready && g->gs[p].own_ready[b]) tr_event_close(g->gs[p].own_ready[b]);
      if (g->gs[p].own_reduced && g->gs[p].own_reduced[b]) tr_event_close(g->gs[p].own_reduced[b]);
      if (g->gs[p].own_final && g->gs[p].own_final[b]) tr_event_close(g->gs[p].own_final[b]);
    }
  for (int p = 0; p < 2; p++) {
    if (g->gs[p].updated) tr_event_close(g->gs[p].updated);
    if (g->gs[p].own_gathered) tr_event_close(g->gs[p].own_gathered);
    g->gs[p].updated = g->gs[p].own_gathered = NULL;
  }
  if (g->host) tr_host_free(g->dev, g->host);
  g->host = NULL;
  tr_comm_close(g->nccl); /* here, on the member's thread, once its stream has run */
  tr_comm_close(g->across);
  g->nccl = g->across = NULL;
  if (g->scratch) tr_device_free(g->dev, g->scratch);
  if (g->comm) tr_stream_close(g->comm);
  g->scratch = NULL;
  g->comm = NULL;
  g->nb = 0;
}

void tr__group_free(tr__group *g) {
  if (g == NULL) return;
  tr__group_abort(g); /* never opened, or its thread failed: the others may not come */
  for (int p = 0; p < 2; p++) {
    group_step *s = &g->gs[p];
    free(s->ready);
    free(s->peer_ev);
    free(s->reduced);
    free(s->own_ready);
    free(s->own_reduced);
    free(s->own_final);
    free(s->reduced_n);
    free(s->final_ev);
    free(s->gathered);
  }
  free(g->out);
  free(g->in);
  free(g->devs);
  free(g->grads);
  free(g->params);
  free(g->left_at);
  free(g->buckets);
  free(g);
}
