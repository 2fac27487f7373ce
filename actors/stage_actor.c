/* stage_actor.c — the stage actor: one device, layers [cuts[s], cuts[s+1]) of the model,
 * and every step the action list its schedule gives it (tr_schedule.h).
 *
 * The actor never waits inside a callback. Messages (batches, activations, gradients,
 * replica-group and norm messages) are queued on arrival, then the action list runs as far
 * as it can: an action whose input has not come yet stops it until the next message. Work
 * goes to the device's streams in order; what other devices need is handed over with an
 * event, and a buffer lent by another actor goes back (its edge's credit) once the event of
 * the copy out of it has completed. On host devices every event has completed by the time
 * it is queried, so credits go back at once; on CUDA the actor polls itself while any copy
 * is in flight.
 *
 * Replica groups: during the last micro-batch's backward, each bucket of layers (about
 * BUCKET_FLOATS gradients, last layers first) is announced to the group once final. The
 * member that owns chunk c of a bucket sums chunk c over all members, in replica order (the
 * same bits on every replica, whatever the timing), on its communication stream, writes
 * the sum into every member's gradients and announces it. A member updates once every
 * chunk of every bucket has been announced. Bucket messages of the next step may arrive
 * before this one is over, but never those of the step after (it needs this member's
 * chunks), so the counts are kept per step parity.
 *
 * Asynchronous jobs: the stage is a worker (the whole model, one micro-batch of a whole
 * global batch). Its step action pushes the gradient to the server instead of updating,
 * then waits for the reply (the gradient read, and fresh parameters when it pulled) before
 * the next backward may write the gradients again. `step` counts the worker's own pushes;
 * the loader's batches say which step of the run each one is, and a batch of step -1 ends
 * the worker's part. Hogwild!: the server's first reply names its parameters, which the
 * worker then trains in place and updates itself, telling the server only that it did.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"
#include "tr_trace.h"

enum {
  LOSS_RING = 256,
  REPORT_NS = 100 * 1000 * 1000,
  BUCKET_FLOATS = (1 << 20) / 4, /* 1 MiB: a bucket per mlp layer, overlap for the rest */
};

/* A queued message: a batch (slot) or a tensor (data, ready, dev). */
typedef struct entry {
  int64_t step;
  int mb, slot;
  const void *data;
  tr_event *ready;
  tr_device *dev;
} entry;

typedef struct fifo {
  entry *e;
  int cap, head, n;
} fifo;

typedef struct bucket {
  size_t lo, hi;  /* elements of the stage's gradients */
  int low_layer;  /* final once this layer's backward is issued */
} bucket;

/* What the members of a replica group tell each other, per step parity. */
typedef struct group_step {
  int *ready;          /* [bucket]: members whose bucket is final */
  tr_event **peer_ev;  /* [bucket × R]: their events */
  tr_event **reduced;  /* [bucket × R]: the owners' events, waited for before the update */
  int nreduced;
  tr_event **own_ready, **own_reduced; /* [bucket]: this member's */
} group_step;

typedef struct stage_actor {
  tr_actor *self;
  tr_job *j;
  int replica, stage, device_index;
  tr_device *dev;
  tr_stage *st;
  const tr_stage_info *info;
  tr_stream *s, *comm;
  int m;
  const tr_action *acts;
  size_t nacts, pc;
  int64_t step;

  /* inputs from the loader: x (first stage; with one stage, y too) and y (last stage) */
  tr_edge *in_x, *in_y;
  int depth;
  void **x, **y;
  fifo xq, yq;
  /* the chain */
  tr_edge *act_out, *act_in, *grad_out, *grad_in;
  fifo actq, gradq;
  tr_event **act_ev; /* [slot] */
  tr_event *grad_ev[2];
  int grad_parity;
  bool grad_credit;
  const float *dinput;
  /* credits to return once a copy has run: a ring of (edge, event) */
  tr_edge **rel_edge;
  tr_event **rel_ev;
  int rel_cap, rel_head, rel_n;

  /* replica group */
  tr_actor **group;
  tr_device **member_dev; /* [R] */
  float **member_grads;   /* [R]: their gradient allocations, as their messages say */
  int R, me, nb, next_bucket;
  bucket *buckets;
  group_step gs[2];
  float *scratch; /* chunks staged from members this device cannot read directly */
  bool direct;    /* every member's memory is readable here */
  bool final_backward; /* the step's last backward: buckets are announced */
  int hook_rc;         /* a failure inside on_grad_ready */

  /* global-norm clipping over the stages of this replica */
  bool clip_across;
  float *norm_host, *norm_dev;
  tr_event *norm_ev;
  double norm_part[2][TR__MAX_STAGES];
  int norm_got[2];
  int step_phase;

  /* asynchronous worker: the push edge, the version of the parameters held, the step of the
   * batch in hand, and the server's reply to the push in flight */
  tr_edge *push;
  tr_event *push_ev;
  int64_t version, batch_step;
  int since_pull;
  bool pushed, replied, shared;
  tr__reply_msg reply;

  /* losses (last stage): device → loss_ring[step % LOSS_RING][mb] → losses; async workers
   * keep the run's step of each too */
  float *loss_ring;
  tr_event *loss_ev[LOSS_RING];
  int64_t loss_step[LOSS_RING];
  int64_t harvested;
  float *losses;
  int64_t *loss_steps;
  size_t nlosses, cap;

  /* figures */
  int live, peak;
  int64_t warm_step;
  uint64_t window_start, busy_ns, last_report, now;
  bool done, polling;
  char err[512];
} stage_actor;

void *tr__stage_new(tr_job *j, int replica, int stage, tr_device *dev) {
  stage_actor *a = calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->j = j;
  a->replica = replica;
  a->stage = stage;
  a->device_index = tr__device_index(j, replica, stage);
  a->dev = dev;
  a->m = j->c.microbatches;
  a->R = 1;
  return a;
}

void tr__stage_set_input(void *state, tr_edge *x, tr_edge *y) {
  stage_actor *a = state;
  if (x) a->in_x = x;
  if (y) a->in_y = y;
}

void tr__stage_set_chain(void *state, tr_edge *out, tr_edge *in, bool forward) {
  stage_actor *a = state;
  if (forward) {
    a->act_out = out; /* to the next stage */
    a->grad_in = in;
  } else {
    a->grad_out = out; /* to the previous stage */
    a->act_in = in;
  }
}

void tr__stage_set_push(void *state, tr_edge *push) { ((stage_actor *)state)->push = push; }

int tr__stage_set_group(void *state, tr_actor *const *members, int n) {
  stage_actor *a = state;
  a->group = malloc((size_t)n * sizeof *a->group);
  a->member_dev = malloc((size_t)n * sizeof *a->member_dev);
  a->member_grads = calloc((size_t)n, sizeof *a->member_grads);
  if (!a->group || !a->member_dev || !a->member_grads) return TR_ENOMEM;
  memcpy(a->group, members, (size_t)n * sizeof *members);
  a->R = n;
  for (int i = 0; i < n; i++) {
    const stage_actor *m = tr_actor_state(members[i]);
    a->member_dev[i] = m->dev; /* set when the actor was made, before any thread runs */
    if (m == a) a->me = i;
  }
  return 0;
}

/* Time inside ops on the device's thread counts as busy (after the warm-up), and is traced. */
static void busy(tr_actor *self, stage_actor *a, const char *what, uint64_t t0, int mb) {
  uint64_t t1 = tr_now_ns();
  if (a->step >= a->warm_step) a->busy_ns += t1 - t0;
  if (tr_trace_enabled(self)) tr_trace_record(self, what, t0, t1, mb);
}

static int fail_device(tr_actor *self, stage_actor *a, const char *what) {
  const char *why = a->st ? tr_stage_error(a->st) : tr_device_error(a->dev);
  return tr_actor_fail(self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(a->dev), why);
}

/* ---- queues ------------------------------------------------------------------------------ */

static int fifo_open(fifo *q, int cap) {
  q->cap = cap;
  q->e = calloc((size_t)cap, sizeof *q->e);
  return q->e ? 0 : TR_ENOMEM;
}
static entry *fifo_peek(fifo *q) { return q->n ? &q->e[q->head] : NULL; }
static void fifo_pop(fifo *q) {
  q->head = (q->head + 1) % q->cap;
  q->n--;
}
/* The edge's credits bound what can be queued: a full queue is a broken protocol. */
static void fifo_push(fifo *q, entry e) {
  TR_ASSERT(q->n < q->cap);
  q->e[(q->head + q->n++) % q->cap] = e;
}

/* Returns the credit of `e` once everything queued on the compute stream so far (the copy
 * out of its buffer) has run. */
static int release_after_copy(stage_actor *a, tr_edge *e) {
  tr_event *ev = a->rel_ev[(a->rel_head + a->rel_n) % a->rel_cap];
  if (tr_event_record(ev, a->s)) return TR_EDEVICE;
  if (a->rel_n == 0 && tr_event_query(ev) == 1) { /* host devices: always */
    tr_edge_release(e, 1);
    return 0;
  }
  TR_ASSERT(a->rel_n < a->rel_cap);
  a->rel_edge[(a->rel_head + a->rel_n++) % a->rel_cap] = e;
  return 0;
}

static int drain_releases(stage_actor *a) {
  while (a->rel_n) {
    int q = tr_event_query(a->rel_ev[a->rel_head]);
    if (q < 0) return TR_EDEVICE;
    if (q == 0) break;
    tr_edge_release(a->rel_edge[a->rel_head], 1);
    a->rel_head = (a->rel_head + 1) % a->rel_cap;
    a->rel_n--;
  }
  return 0;
}

/* ---- opening ------------------------------------------------------------------------------ */

static int plan_buckets(stage_actor *a) {
  const tr_stage_info *info = a->info;
  a->buckets = calloc((size_t)(info->end - info->first), sizeof *a->buckets);
  if (a->buckets == NULL) return TR_ENOMEM;
  size_t hi = 0, lo = 0;
  bool open = false;
  for (int l = info->end - 1; l >= info->first; l--) {
    size_t off, n;
    tr_stage_layer_span(a->st, l, &off, &n);
    if (!open) hi = off + n, open = true;
    lo = off;
    if (hi - lo >= BUCKET_FLOATS || l == info->first) {
      a->buckets[a->nb++] = (bucket){.lo = lo, .hi = hi, .low_layer = l};
      open = false;
    }
  }
  return 0;
}

static int open_group(tr_actor *self, stage_actor *a) {
  int rc = plan_buckets(a);
  if (rc) return rc;
  const int R = a->R, nb = a->nb;
  size_t largest = 0;
  for (int b = 0; b < nb; b++)
    if (a->buckets[b].hi - a->buckets[b].lo > largest) largest = a->buckets[b].hi - a->buckets[b].lo;
  for (int p = 0; p < 2; p++) {
    group_step *g = &a->gs[p];
    g->ready = calloc((size_t)nb, sizeof *g->ready);
    g->peer_ev = calloc((size_t)(nb * R), sizeof *g->peer_ev);
    g->reduced = calloc((size_t)(nb * R), sizeof *g->reduced);
    g->own_ready = calloc((size_t)nb, sizeof *g->own_ready);
    g->own_reduced = calloc((size_t)nb, sizeof *g->own_reduced);
    if (!g->ready || !g->peer_ev || !g->reduced || !g->own_ready || !g->own_reduced)
      return TR_ENOMEM;
    for (int b = 0; b < nb; b++)
      if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &g->own_ready[b]) ||
          tr_event_open(a->dev, TR_EVENT_DEFAULT, &g->own_reduced[b]))
        return fail_device(self, a, "opening the replica group's events");
  }
  if (tr_stream_open(a->dev, "allreduce", &a->comm))
    return fail_device(self, a, "opening the all-reduce stream");
  /* Where a member's memory is not readable here, its chunks are staged through scratch. */
  a->direct = true;
  for (int r = 0; r < R; r++) a->direct &= tr_device_can_access_peer(a->dev, a->member_dev[r]) == 1;
  if (!a->direct && tr_device_alloc(a->dev, ((largest + (size_t)R - 1) / (size_t)R + 16) * sizeof(float),
                                    (void **)&a->scratch))
    return fail_device(self, a, "allocating the all-reduce scratch");
  return 0;
}

static void on_grad_ready(void *arg, tr_stage *st, int layer);

static int stage_open(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  tr_job *j = a->j;
  a->self = self;
  if (tr_device_bind(a->dev)) return fail_device(self, a, "binding the device");

  tr_stage_config c = {.first = j->cuts[a->stage],
                       .end = j->cuts[a->stage + 1],
                       .batch = j->mb_batch,
                       .slots = tr_schedule_slots(j->sc, a->stage),
                       .global_batch = j->c.global_batch,
                       .seed = j->c.seed,
                       .optim = j->c.optim};
  if (tr_stage_open(&a->st, j->c.model, a->dev, &c, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EDEVICE, "opening the stage on %s: %s",
                         tr_device_name(a->dev), a->err);
  a->info = tr_stage_get_info(a->st);
  a->s = tr_stage_stream(a->st);
  a->acts = tr_schedule_actions(j->sc, a->stage, &a->nacts);
  if (j->c.resume && tr__stage_load(a->st, j->c.resume, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EFORMAT, "%s", a->err);
  if (tr_stage_zero_grads(a->st)) return fail_device(self, a, "zeroing gradients");

  const tr_stage_info *info = a->info;
  a->depth = j->prefetch;
  int slots = info->slots, rel = 0, rc = 0;
  /* an asynchronous worker's loader ends with a batch that takes no credit */
  if (a->in_x) rc |= fifo_open(&a->xq, a->depth + (j->c.async != 0)), rel += a->depth;
  if (a->in_y) rc |= fifo_open(&a->yq, a->depth), rel += a->depth;
  if (a->act_in) rc |= fifo_open(&a->actq, tr_edge_credits(a->act_in)), rel += tr_edge_credits(a->act_in);
  if (a->grad_in) rc |= fifo_open(&a->gradq, tr_edge_credits(a->grad_in)), rel += tr_edge_credits(a->grad_in);
  a->rel_cap = rel ? rel : 1;
  a->rel_edge = calloc((size_t)a->rel_cap, sizeof *a->rel_edge);
  a->rel_ev = calloc((size_t)a->rel_cap, sizeof *a->rel_ev);
  a->act_ev = calloc((size_t)slots, sizeof *a->act_ev);
  if (rc || !a->rel_edge || !a->rel_ev || !a->act_ev) return TR_ENOMEM;
  for (int i = 0; i < a->rel_cap; i++)
    if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->rel_ev[i]))
      return fail_device(self, a, "opening events");
  for (int i = 0; i < slots && a->act_out; i++)
    if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->act_ev[i]))
      return fail_device(self, a, "opening events");
  for (int i = 0; i < 2 && a->grad_out; i++)
    if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->grad_ev[i]))
      return fail_device(self, a, "opening events");

  /* The batch buffers this stage lends its loader. With one stage, one edge brings inputs
   * and targets together. */
  TR_ASSERT(!(a->in_x && a->in_y));
  if (a->in_x && !(a->x = calloc((size_t)a->depth, sizeof *a->x))) return TR_ENOMEM;
  if ((a->in_y || (a->in_x && info->is_last)) &&
      !(a->y = calloc((size_t)a->depth, sizeof *a->y)))
    return TR_ENOMEM;
  for (int i = 0; i < a->depth; i++) {
    if ((a->x && tr_host_alloc(a->dev, info->input_bytes, &a->x[i])) ||
        (a->y && tr_host_alloc(a->dev, info->target_bytes, &a->y[i])))
      return fail_device(self, a, "allocating batch buffers");
  }

  if (info->is_last) {
    if (tr_host_alloc(a->dev, (size_t)LOSS_RING * (size_t)a->m * sizeof(float),
                      (void **)&a->loss_ring))
      return fail_device(self, a, "allocating the loss ring");
    for (int i = 0; i < LOSS_RING; i++)
      if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->loss_ev[i]))
        return fail_device(self, a, "opening events");
  }
  if (a->R > 1) {
    if ((rc = open_group(self, a))) return rc;
    tr_stage_on_grad_ready(a->st, on_grad_ready, a);
  }
  if (a->push && tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->push_ev))
    return fail_device(self, a, "opening events");
  a->clip_across = j->c.optim.clip > 0 && j->c.stages > 1;
  if (a->clip_across &&
      (tr_host_alloc(a->dev, 2 * sizeof(float), (void **)&a->norm_host) ||
       tr_device_alloc(a->dev, sizeof(float), (void **)&a->norm_dev) ||
       tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->norm_ev)))
    return fail_device(self, a, "allocating the clipping norm");

  a->step = a->harvested = a->push ? 0 : tr_graph_first_step(j->g);
  /* an asynchronous worker pushes about its share of the steps */
  int64_t end = tr_graph_end_step(j->g), total = (end - a->step) / (j->c.async ? j->c.replicas : 1);
  /* A tenth of the steps (at most 100) warm up; a timed run, whose count is unknown, 3. */
  a->warm_step = a->step + (end == INT64_MAX ? 3 : total < 10 ? 0 : total / 10 < 100 ? total / 10 : 100);
  a->window_start = a->last_report = tr_now_ns();
  if (a->x || a->y) {
    tr__ring_msg *r = tr_msg_new(&tr__ring_type);
    r->hdr.from = self;
    r->depth = a->depth;
    r->x = a->x;
    r->y = a->y;
    tr_actor_send(j->loaders[a->replica], r);
  }
  return 0;
}

/* ---- the replica group ------------------------------------------------------------------ */

static void chunk_of(const stage_actor *a, int b, int c, size_t *lo, size_t *hi) {
  const bucket *bk = &a->buckets[b];
  size_t len = bk->hi - bk->lo, per = ((len + (size_t)a->R - 1) / (size_t)a->R + 15) & ~(size_t)15;
  size_t from = (size_t)c * per < len ? (size_t)c * per : len;
  size_t to = from + per < len ? from + per : len;
  *lo = bk->lo + from;
  *hi = bk->lo + to;
}

static int send_bucket(stage_actor *a, tr_actor *self, int64_t step, int b, tr_event *ev,
                       bool reduced);

/* All members' bucket b is final: sum this member's chunk over them, in replica order, and
 * write the sum into every member's gradients. */
static int reduce_chunk(tr_actor *self, stage_actor *a, group_step *g, int64_t step, int b) {
  const uint64_t t0 = tr_now_ns();
  size_t lo, hi;
  chunk_of(a, b, a->me, &lo, &hi);
  const size_t n = hi - lo;
  float *mine = tr_stage_grads(a->st) + lo;
  for (int r = 0; r < a->R; r++)
    if (tr_stream_wait_event(a->comm, g->peer_ev[b * a->R + r]))
      return fail_device(self, a, "all-reduce: waiting for a member");
  for (int r = 0; r < a->R && n; r++) {
    const float *theirs = a->member_grads[r] + lo;
    if (r == a->me && r > 0) continue; /* already in place: summed below in order */
    if (!a->direct && r != a->me) {
      if (tr_memcpy_peer(a->comm, a->scratch, a->dev, theirs, a->member_dev[r], n * sizeof(float)))
        return fail_device(self, a, "all-reduce: staging a chunk");
      theirs = a->scratch;
    }
    int rc = 0;
    if (r == 0 && a->me != 0) rc = tr_add(a->comm, mine, theirs, mine, n); /* g0 + g_me ... */
    else if (r > 0) rc = tr_axpy(a->comm, mine, 1.0f, theirs, n);
    if (rc) return fail_device(self, a, "all-reduce: summing");
  }
  for (int r = 0; r < a->R && n; r++) {
    if (r == a->me) continue;
    if (tr_memcpy_peer(a->comm, a->member_grads[r] + lo, a->member_dev[r], mine, a->dev,
                       n * sizeof(float)))
      return fail_device(self, a, "all-reduce: writing the sum");
  }
  if (tr_event_record(g->own_reduced[b], a->comm)) return fail_device(self, a, "all-reduce");
  int rc = send_bucket(a, self, step, b, g->own_reduced[b], true);
  busy(self, a, "allreduce", t0, b);
  return rc;
}

static int bucket_arrived(tr_actor *self, stage_actor *a, const tr__bucket_msg *m) {
  group_step *g = &a->gs[m->step & 1];
  if (m->reduced) {
    g->reduced[g->nreduced++] = m->ready;
    return 0;
  }
  g->peer_ev[m->bucket * a->R + m->replica] = m->ready;
  a->member_grads[m->replica] = m->grads;
  if (++g->ready[m->bucket] < a->R) return 0;
  g->ready[m->bucket] = 0;
  return reduce_chunk(self, a, g, m->step, m->bucket);
}

/* Announces bucket b (final, or this member's chunk reduced) to every member, itself
 * directly. */
static int send_bucket(stage_actor *a, tr_actor *self, int64_t step, int b, tr_event *ev,
                       bool reduced) {
  tr__bucket_msg own = {.hdr.from = self, .bucket = b, .replica = a->me, .reduced = reduced,
                        .step = step, .ready = ev, .grads = tr_stage_grads(a->st)};
  for (int r = 0; r < a->R; r++) {
    if (r == a->me) continue;
    tr__bucket_msg *m = tr_msg_new(&tr__bucket_type);
    tr_msg hdr = m->hdr;
    *m = own;
    m->hdr = hdr;
    m->hdr.from = self;
    tr_actor_send(a->group[r], m);
  }
  return bucket_arrived(self, a, &own);
}

static void on_grad_ready(void *arg, tr_stage *st, int layer) {
  (void)st;
  stage_actor *a = arg;
  while (a->final_backward && a->hook_rc == 0 && a->next_bucket < a->nb &&
         layer <= a->buckets[a->next_bucket].low_layer) {
    int b = a->next_bucket++;
    tr_event *ev = a->gs[a->step & 1].own_ready[b];
    a->hook_rc = tr_event_record(ev, a->s) ? fail_device(a->self, a, "all-reduce")
                                           : send_bucket(a, a->self, a->step, b, ev, false);
  }
}

/* ---- the actions -------------------------------------------------------------------------- */

enum { BLOCKED = 0, DONE = 1 };

static void slow_down(stage_actor *a) {
  if (a->j->c.slow_us > 0 && a->device_index == a->j->c.slow_device) usleep((useconds_t)a->j->c.slow_us);
}

static void hold(stage_actor *a, int delta) {
  a->live += delta;
  if (a->live > a->peak) a->peak = a->live;
}

/* A tensor from a neighbour into this stage's `dst`, then its credit goes back. */
static int receive_tensor(tr_actor *self, stage_actor *a, fifo *q, tr_edge *e, void *dst,
                          size_t bytes, const tr_action *act) {
  entry *in = fifo_peek(q);
  if (in == NULL) return BLOCKED;
  TR_ASSERT(in->step == a->step && in->mb == act->mb); /* edges deliver in schedule order */
  uint64_t t0 = tr_now_ns();
  if (tr_stream_wait_event(a->s, in->ready) ||
      tr_memcpy_peer(a->s, dst, a->dev, in->data, in->dev, bytes) || release_after_copy(a, e))
    return fail_device(self, a, "receiving a tensor");
  fifo_pop(q);
  busy(self, a, act->kind == TR_ACTION_RECV_ACT ? "recv act" : "recv grad", t0, act->mb);
  return DONE;
}

static int send_tensor(tr_actor *self, stage_actor *a, tr_edge *e, const void *data,
                       tr_event *ev, int mb) {
  if (tr_event_record(ev, a->s)) return fail_device(self, a, "sending a tensor");
  tr__tensor_msg *t = tr_msg_new(&tr__tensor_type);
  t->edge = e;
  t->mb = mb;
  t->step = a->step;
  t->data = data;
  t->ready = ev;
  t->dev = a->dev;
  tr_edge_send(e, t);
  return DONE;
}

static int forward(tr_actor *self, stage_actor *a, const tr_action *act) {
  const tr_stage_info *info = a->info;
  entry *x = NULL, *y = NULL;
  if (a->in_x && (x = fifo_peek(&a->xq)) == NULL) return BLOCKED;
  if (a->in_y && (y = fifo_peek(&a->yq)) == NULL) return BLOCKED;
  uint64_t t0 = tr_now_ns();
  if (x) {
    TR_ASSERT((a->push || x->step == a->step) && x->mb == act->mb);
    a->batch_step = x->step;
    if (tr_memcpy(a->s, tr_stage_input(a->st, act->slot), a->x[x->slot], info->input_bytes,
                  TR_COPY_H2D) ||
        (info->is_last && tr_memcpy(a->s, tr_stage_target(a->st, act->slot), a->y[x->slot],
                                    info->target_bytes, TR_COPY_H2D)) ||
        release_after_copy(a, a->in_x))
      return fail_device(self, a, "copying a batch in");
    fifo_pop(&a->xq);
    hold(a, 1);
  }
  if (y) {
    TR_ASSERT(y->step == a->step && y->mb == act->mb);
    if (tr_memcpy(a->s, tr_stage_target(a->st, act->slot), a->y[y->slot], info->target_bytes,
                  TR_COPY_H2D) ||
        release_after_copy(a, a->in_y))
      return fail_device(self, a, "copying targets in");
    fifo_pop(&a->yq);
  }
  if (tr_stage_forward(a->st, act->slot)) return fail_device(self, a, "forward");
  if (info->is_last) {
    int k = (int)(a->step % LOSS_RING);
    a->loss_step[k] = a->batch_step;
    if (tr_memcpy(a->s, &a->loss_ring[k * a->m + act->mb], tr_stage_loss(a->st, act->slot),
                  sizeof(float), TR_COPY_D2H) ||
        (act->mb == a->m - 1 && tr_event_record(a->loss_ev[k], a->s)))
      return fail_device(self, a, "copying the loss out");
  }
  slow_down(a);
  busy(self, a, "forward", t0, act->mb);
  return DONE;
}

static int backward(tr_actor *self, stage_actor *a, const tr_action *act) {
  /* The input gradient lands in one of two buffers: the one sent two backwards ago must
   * have been copied out (its credit back) first. */
  if (a->grad_out && !a->grad_credit) {
    if (!tr_edge_acquire(a->grad_out)) return BLOCKED;
    a->grad_credit = true;
  }
  uint64_t t0 = tr_now_ns();
  a->final_backward = a->R > 1 && act->mb == a->m - 1;
  if (a->final_backward) a->next_bucket = 0;
  int rc = tr_stage_backward(a->st, act->slot, &a->dinput);
  if (rc) return fail_device(self, a, "backward");
  if (a->final_backward) on_grad_ready(a, a->st, a->info->first); /* every bucket announced */
  a->final_backward = false;
  if (a->hook_rc) return a->hook_rc;
  if (a->info->is_first) hold(a, -1);
  slow_down(a);
  busy(self, a, "backward", t0, act->mb);
  return DONE;
}

static int keep_loss(stage_actor *a, float loss, int64_t step) {
  if (a->nlosses == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 1024;
    float *grown = realloc(a->losses, cap * sizeof *grown);
    if (grown == NULL) return TR_ENOMEM;
    a->losses = grown;
    if (a->push) {
      int64_t *steps = realloc(a->loss_steps, cap * sizeof *steps);
      if (steps == NULL) return TR_ENOMEM;
      a->loss_steps = steps;
    }
    a->cap = cap;
  }
  if (a->push) a->loss_steps[a->nlosses] = step;
  a->losses[a->nlosses++] = loss;
  return 0;
}

/* Reads the losses that have landed: each step's is the sum over its micro-batches (each
 * already scaled by 1/global batch), in micro-batch order. */
static int harvest(tr_actor *self, stage_actor *a) {
  if (drain_releases(a)) return fail_device(self, a, "returning credits");
  while (a->loss_ring && a->harvested < a->step) {
    int k = (int)(a->harvested % LOSS_RING);
    int q = tr_event_query(a->loss_ev[k]);
    if (q < 0) return fail_device(self, a, "reading a loss");
    if (q == 0) break;
    double sum = 0;
    for (int mb = 0; mb < a->m; mb++) sum += a->loss_ring[k * a->m + mb];
    if (keep_loss(a, (float)sum, a->loss_step[k])) return TR_ENOMEM;
    a->harvested++;
  }
  return 0;
}

static int snapshot_to(tr_actor *self, stage_actor *a, int64_t step) {
  tr__part_msg *p = tr_msg_new(&tr__part_type);
  p->hdr.from = self;
  p->stage = a->stage;
  p->step = step;
  if (tr__stage_snapshot(a->st, &p->part)) {
    tr_msg_free(p);
    return fail_device(self, a, "copying the stage for a checkpoint");
  }
  tr_actor_send(a->j->coordinator, p);
  return 0;
}

/* The norm exchange of clipping across stages, then the update. */
static int update(tr_actor *self, stage_actor *a) {
  const int par = (int)(a->step & 1), P = a->j->c.stages;
  if (a->step_phase == 0) {
    if (a->R > 1) {
      group_step *g = &a->gs[par];
      if (g->nreduced < a->nb * a->R) return BLOCKED;
      for (int i = 0; i < g->nreduced; i++)
        if (tr_stream_wait_event(a->s, g->reduced[i]))
          return fail_device(self, a, "waiting for the all-reduce");
      g->nreduced = 0;
    }
    a->step_phase = 1;
    if (a->clip_across) {
      if (tr_stage_grad_sumsq(a->st, a->norm_dev, 0) ||
          tr_memcpy(a->s, a->norm_host, a->norm_dev, sizeof(float), TR_COPY_D2H) ||
          tr_event_record(a->norm_ev, a->s))
        return fail_device(self, a, "the gradient norm");
    }
  }
  if (a->step_phase == 1 && a->clip_across) {
    int q = tr_event_query(a->norm_ev);
    if (q < 0) return fail_device(self, a, "the gradient norm");
    if (q == 0) return BLOCKED;
    for (int s = 0; s < P; s++) {
      if (s == a->stage) continue;
      tr__norm_msg *n = tr_msg_new(&tr__norm_type);
      n->hdr.from = self;
      n->stage = a->stage;
      n->step = a->step;
      n->sumsq = a->norm_host[0];
      tr_actor_send(a->j->stages[tr__device_index(a->j, a->replica, s)], n);
    }
    a->norm_part[par][a->stage] = a->norm_host[0];
    a->norm_got[par]++;
    a->step_phase = 2;
  }
  if (a->step_phase == 2 && a->clip_across) {
    if (a->norm_got[par] < P) return BLOCKED;
    double total = 0; /* in stage order: every stage adds the same numbers alike */
    for (int s = 0; s < P; s++) total += a->norm_part[par][s];
    a->norm_got[par] = 0;
    a->norm_host[1] = (float)total;
    if (tr_memcpy(a->s, a->norm_dev, &a->norm_host[1], sizeof(float), TR_COPY_H2D))
      return fail_device(self, a, "the gradient norm");
  }
  uint64_t t0 = tr_now_ns();
  if (tr_stage_step(a->st, a->clip_across ? a->norm_dev : NULL) || tr_stage_zero_grads(a->st))
    return fail_device(self, a, "optimizer step");
  a->step_phase = 0;
  busy(self, a, "update", t0, -1);
  return DONE;
}

/* An asynchronous worker's step: push the gradient, then wait for the server's reply; the
 * next backward may write the gradients only after the server has read them. */
static int push_update(tr_actor *self, stage_actor *a) {
  tr_job *j = a->j;
  if (!a->pushed) {
    if (j->c.fail_step > 0 && a->replica == j->c.fail_device && a->step + 1 == j->c.fail_step)
      return tr_actor_fail(self, TR_EDEVICE, "push %d of step %lld on %s: an injected failure "
                           "(tr_train_options.fail_step)", j->c.fail_step,
                           (long long)a->batch_step, tr_device_name(a->dev));
    if (!tr_edge_acquire(a->push)) return BLOCKED; /* the server still reads the last one */
    int64_t applied = -1;
    if (j->c.hogwild) {
      const uint64_t t0 = tr_now_ns();
      if (tr_stage_step(a->st, NULL) || tr_stage_zero_grads(a->st))
        return fail_device(self, a, "optimizer step (Hogwild!)");
      applied = atomic_fetch_add(&j->hogwild_version, 1);
      busy(self, a, "update", t0, -1);
    } else if (tr_event_record(a->push_ev, a->s)) {
      return fail_device(self, a, "pushing the gradient");
    }
    const int every = j->c.pull_every > 0 ? j->c.pull_every : 1;
    tr__push_msg *m = tr_msg_new(&tr__push_type);
    m->hdr.from = self;
    m->worker = a->replica;
    m->pull = a->since_pull + 1 >= every;
    m->step = a->batch_step;
    m->version = a->version;
    m->applied = applied;
    m->ready = NULL;
    m->grads = m->params = NULL;
    m->dev = a->dev;
    if (j->c.hogwild) {
      tr_edge_send(a->push, m);
      return DONE;
    }
    m->ready = a->push_ev;
    m->grads = tr_stage_grads(a->st);
    m->params = tr_stage_params(a->st);
    tr_edge_send(a->push, m);
    a->pushed = true;
  }
  if (!a->replied) return BLOCKED;
  if (tr_stream_wait_event(a->s, a->reply.ready) || tr_stage_zero_grads(a->st))
    return fail_device(self, a, "taking the server's reply");
  if (a->reply.pulled) a->version = a->reply.version, a->since_pull = 0;
  else a->since_pull++;
  a->pushed = a->replied = false;
  return DONE;
}

static int finish(tr_actor *self, stage_actor *a);

/* One step is over: figures, progress, checkpoints. */
static int step_done(tr_actor *self, stage_actor *a) {
  tr_job *j = a->j;
  a->step++;
  a->pc = 0;
  a->now = tr_now_ns();
  if (a->step == a->warm_step) {
    /* The window opens once the warm-up steps have really run. */
    if (tr_stream_synchronize(a->s)) return fail_device(self, a, "warming up");
    a->window_start = tr_now_ns();
    a->busy_ns = 0;
  }
  /* Before the loss of a step may overwrite a ring entry, that entry must be read. */
  if (a->loss_ring && a->step - a->harvested >= LOSS_RING &&
      tr_event_synchronize(a->loss_ev[a->harvested % LOSS_RING]))
    return fail_device(self, a, "waiting for a loss");
  int rc = harvest(self, a);
  if (rc) return rc;
  if (a->loss_ring && a->replica == 0 && a->now - a->last_report >= REPORT_NS && a->nlosses) {
    a->last_report = a->now;
    tr__progress_msg *p = tr_msg_new(&tr__progress_type);
    p->hdr.from = self;
    p->step = a->push ? a->batch_step + 1 : a->step;
    p->loss = a->losses[a->nlosses - 1];
    tr_actor_send(j->coordinator, p);
  }
  int64_t every = j->c.checkpoint_every;
  if (j->c.checkpoint && every > 0 && !a->push && a->replica == 0 && a->step % every == 0 &&
      a->step < tr_graph_end_step(j->g) && (rc = snapshot_to(self, a, a->step)))
    return rc;
  return 0;
}

/* Runs the action list as far as the messages that have come allow. */
static int run_actions(tr_actor *self, stage_actor *a) {
  while (!a->done) {
    if (a->pc == 0 && a->push) { /* asynchronous: until the loader has no more */
      const entry *x = fifo_peek(&a->xq);
      if (x == NULL) break;
      if (x->step < 0) return finish(self, a);
      if (a->j->c.hogwild) {
        if (!a->shared) { /* the server's parameters, before the first step */
          if (!a->replied) break;
          if (tr_stage_share_params(a->st, a->reply.share))
            return tr_actor_fail(self, TR_EINVAL, "%s", tr_stage_error(a->st));
          a->shared = true;
          a->replied = false;
        }
        a->version = atomic_load(&a->j->hogwild_version);
      }
    } else if (a->pc == 0 && (a->stage == 0 ? !tr_graph_claim_step(a->j->g, a->step)
                                            : a->step >= tr_graph_end_step(a->j->g))) {
      return finish(self, a); /* the first stage claims each step as it starts it */
    }
    const tr_action *act = &a->acts[a->pc];
    const tr_stage_info *info = a->info;
    int rc;
    switch (act->kind) {
      case TR_ACTION_RECV_ACT:
        rc = receive_tensor(self, a, &a->actq, a->act_in, tr_stage_input(a->st, act->slot),
                            info->input_bytes, act);
        if (rc == DONE) hold(a, 1);
        break;
      case TR_ACTION_FORWARD: rc = forward(self, a, act); break;
      case TR_ACTION_SEND_ACT:
        if (!tr_edge_acquire(a->act_out)) {
          rc = BLOCKED;
          break;
        }
        rc = send_tensor(self, a, a->act_out, tr_stage_output(a->st, act->slot),
                         a->act_ev[act->slot], act->mb);
        break;
      case TR_ACTION_RECV_GRAD:
        rc = receive_tensor(self, a, &a->gradq, a->grad_in, tr_stage_dout(a->st, act->slot),
                            info->output_bytes, act);
        break;
      case TR_ACTION_BACKWARD: rc = backward(self, a, act); break;
      case TR_ACTION_SEND_GRAD:
        TR_ASSERT(a->grad_credit);
        a->grad_credit = false;
        rc = send_tensor(self, a, a->grad_out, a->dinput, a->grad_ev[a->grad_parity], act->mb);
        a->grad_parity ^= 1;
        if (rc == DONE) hold(a, -1);
        break;
      case TR_ACTION_STEP:
        rc = a->push ? push_update(self, a) : update(self, a);
        if (rc == DONE && (rc = step_done(self, a)) == 0) continue;
        break;
      default: TR_ASSERT(!"an action kind the stage does not know");
    }
    if (rc < 0) return rc;
    if (rc == BLOCKED) break;
    a->pc++;
  }
  return 0;
}

/* ---- the end ------------------------------------------------------------------------------- */

static int finish(tr_actor *self, stage_actor *a) {
  tr_job *j = a->j;
  if (tr_stream_synchronize(a->s) || (a->comm && tr_stream_synchronize(a->comm)))
    return fail_device(self, a, "finishing the run");
  uint64_t end = tr_now_ns();
  int rc = harvest(self, a);
  if (rc) return rc;
  if (j->c.checkpoint && !a->push && a->replica == 0 && (rc = snapshot_to(self, a, a->step)))
    return rc;

  tr__done_msg *msg = tr_msg_new(&tr__done_type);
  msg->hdr.from = self;
  tr__report *d = &msg->report;
  *d = (tr__report){.replica = a->replica,
                    .stage = a->stage,
                    .steps = a->step,
                    .window_start = a->window_start,
                    .window_end = end,
                    .busy_ns = a->busy_ns,
                    .peak_microbatches = a->peak,
                    .losses = a->losses,
                    .loss_steps = a->loss_steps,
                    .nlosses = a->loss_ring ? a->nlosses : 0};
  int64_t first = a->push ? 0 : tr_graph_first_step(j->g);
  d->window_steps = a->step > a->warm_step ? a->step - a->warm_step : a->step - first;
  if (a->R > 1) {
    float *host = malloc((a->info->numel ? a->info->numel : 1) * sizeof *host);
    if (host == NULL || tr_stage_download(a->st, TR_STAGE_PARAMS, host) ||
        tr_stream_synchronize(a->s)) {
      free(host);
      tr_msg_free(msg);
      return fail_device(self, a, "copying the parameters for the consistency check");
    }
    d->params = host; /* the coordinator frees it */
    d->numel = a->info->numel;
  }
  tr_actor_send(j->coordinator, msg);
  if (a->push) {
    tr__leave_msg *l = tr_msg_new(&tr__leave_type);
    l->hdr.from = self;
    l->worker = a->replica;
    tr_actor_send(j->server, l);
  }
  a->done = true;
  tr_graph_done(j->g, self);
  return 0;
}

static void poll_later(tr_actor *self, stage_actor *a) {
  bool waiting = a->rel_n > 0 || (a->clip_across && a->step_phase == 1) ||
                 (a->loss_ring && a->harvested < a->step);
  if (!waiting || a->polling || a->done) return;
  a->polling = true;
  tr_msg *p = tr_msg_new(&tr__poll_type);
  p->from = self;
  tr_actor_send(self, p);
}

static int stage_receive(tr_actor *self, tr_msg *msg) {
  stage_actor *a = tr_actor_state(self);
  if (a->done) return 0;
  const tr_msgtype *t = msg->type;
  int rc = 0;
  if (t == &tr__batch_type) {
    const tr__batch_msg *b = (const tr__batch_msg *)msg;
    entry e = {.step = b->step, .mb = b->mb, .slot = b->slot};
    fifo_push(a->in_x ? &a->xq : &a->yq, e); /* a stage has one input edge at most */
  } else if (t == &tr__tensor_type) {
    const tr__tensor_msg *m = (const tr__tensor_msg *)msg;
    entry e = {.step = m->step, .mb = m->mb, .data = m->data, .ready = m->ready, .dev = m->dev};
    fifo_push(m->edge == a->act_in ? &a->actq : &a->gradq, e);
  } else if (t == &tr__bucket_type) {
    rc = bucket_arrived(self, a, (const tr__bucket_msg *)msg);
  } else if (t == &tr__reply_type) {
    const tr__reply_msg *r = (const tr__reply_msg *)msg; /* not its header: the mailbox's */
    a->reply.pulled = r->pulled;
    a->reply.version = r->version;
    a->reply.ready = r->ready;
    a->reply.share = r->share;
    a->replied = true;
  } else if (t == &tr__norm_type) {
    const tr__norm_msg *n = (const tr__norm_msg *)msg;
    a->norm_part[n->step & 1][n->stage] = n->sumsq;
    a->norm_got[n->step & 1]++;
  } else if (t == &tr__poll_type) {
    a->polling = false;
    rc = harvest(self, a);
  }
  /* tr_edge_credit_msg and tr_graph_end_msg only say "look again". */
  if (rc == 0) rc = run_actions(self, a);
  if (rc == 0) poll_later(self, a);
  return rc;
}

/* Device resources go back on the device's own thread; the batch buffers lent to the loader,
 * which may still be filling one when a failure stops the run, once every thread has
 * stopped (stage_destroy). */
static void stage_stop(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  if (a->s) tr_stream_synchronize(a->s);
  if (a->comm) tr_stream_synchronize(a->comm);
  for (int i = 0; i < a->rel_cap && a->rel_ev; i++)
    if (a->rel_ev[i]) tr_event_close(a->rel_ev[i]);
  for (int i = 0; a->info && i < a->info->slots && a->act_ev; i++)
    if (a->act_ev[i]) tr_event_close(a->act_ev[i]);
  for (int i = 0; i < 2; i++)
    if (a->grad_ev[i]) tr_event_close(a->grad_ev[i]);
  for (int i = 0; i < LOSS_RING; i++)
    if (a->loss_ev[i]) tr_event_close(a->loss_ev[i]);
  if (a->loss_ring) tr_host_free(a->dev, a->loss_ring);
  for (int p = 0; p < 2; p++)
    for (int b = 0; b < a->nb; b++) {
      if (a->gs[p].own_ready && a->gs[p].own_ready[b]) tr_event_close(a->gs[p].own_ready[b]);
      if (a->gs[p].own_reduced && a->gs[p].own_reduced[b]) tr_event_close(a->gs[p].own_reduced[b]);
    }
  if (a->scratch) tr_device_free(a->dev, a->scratch);
  if (a->comm) tr_stream_close(a->comm);
  if (a->norm_host) tr_host_free(a->dev, a->norm_host);
  if (a->norm_dev) tr_device_free(a->dev, a->norm_dev);
  if (a->norm_ev) tr_event_close(a->norm_ev);
  if (a->push_ev) tr_event_close(a->push_ev);
  tr_stage_close(a->st);
  a->st = NULL;
  a->info = NULL;
}

static int stage_start(tr_actor *self) {
  int rc = stage_open(self);
  if (rc) stage_stop(self); /* a failed start gets no stop callback: release what it got */
  else rc = run_actions(self, tr_actor_state(self)); /* a run may be over before it starts */
  return rc;
}

static void stage_destroy(void *state) {
  stage_actor *a = state;
  if (a->x || a->y) tr_device_bind(a->dev);
  for (int i = 0; i < a->depth; i++) {
    if (a->x && a->x[i]) tr_host_free(a->dev, a->x[i]);
    if (a->y && a->y[i]) tr_host_free(a->dev, a->y[i]);
  }
  free(a->x);
  free(a->y);
  free(a->xq.e);
  free(a->yq.e);
  free(a->actq.e);
  free(a->gradq.e);
  free(a->act_ev);
  free(a->rel_edge);
  free(a->rel_ev);
  free(a->group);
  free(a->member_dev);
  free(a->member_grads);
  free(a->buckets);
  for (int p = 0; p < 2; p++) {
    group_step *g = &a->gs[p];
    free(g->ready);
    free(g->peer_ev);
    free(g->reduced);
    free(g->own_ready);
    free(g->own_reduced);
  }
  free(a->losses);
  free(a->loss_steps);
  free(a);
}

const tr_behaviour tr__stage_behaviour = {.name = "stage",
                                          .start = stage_start,
                                          .receive = stage_receive,
                                          .stop = stage_stop,
                                          .destroy = stage_destroy};
