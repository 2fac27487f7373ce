/* gather.c — the sums of a group that outlive a rank (collective.h, transport_impl.h): local
 * SGD's elastic replicas across ranks, where a rank that dies must leave the others summing
 * on without it, and no two ranks may take different sums for one step.
 *
 * MPI_Allreduce cannot: a sum whose other rank died never returns, and one that died midway
 * may have left some ranks the whole sum and others none (Open MPI 4.1 has no ULFM to say
 * which). So each step's buckets are gathered to the group's first rank (its root): every
 * other rank's leader sends each bucket there (TAG_PART), and once the root holds every
 * bucket of the step from every rank still alive, it sums each in rank order (the same bits
 * whatever came first), writes the sum into its own and sends it back to each (TAG_TOTAL),
 * saying how many members took part. A rank lost before the root had all of its buckets
 * takes no part in that step, whatever of it had come; one lost after, took part. Nothing of
 * a step goes back before the whole step is summed, so a step's buckets are summed over one
 * set of ranks, and a member's mean divides by one count. The root itself cannot be lost
 * (tr__gather_needs): the run fails then, naming it.
 *
 * One step at a time: a leader hands the next step's buckets once it has every sum of this
 * one (group.h), and the root sends those sums only once it has all of the step's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_impl.h"

typedef struct head { /* a part's or a total's, before its floats */
  int32_t group, bucket, buckets, members;
  int64_t step;
} head;

struct gather {
  int n;                /* the group's ranks (t->group_ranks[k]) */
  int me;               /* this rank's index among them; the root's is 0 */
  bool *gone;           /* [index]: lost */
  int64_t step;         /* the step in hand; -1: none */
  int buckets;          /* its buckets (every rank's leader holds the same stage) */
  tr__sum_msg **mine;   /* [bucket]: this rank's, handed over and not yet summed */
  int own, members;     /* how many of them; the members taking part here */
  int *got, *theirs;    /* [index]: the root's count of each rank's buckets, its members */
  uint8_t **parts;      /* [index × bucket]: their buffers, at the root */
};

static int index_of(const transport *t, int k, int rank) {
  for (int i = 0; i < t->group_n[k]; i++)
    if (t->group_ranks[k][i] == rank) return i;
  return -1;
}

int tr__gather_open(transport *t, int k) {
  gather *g = calloc(1, sizeof *g);
  if (g == NULL) return TR_ENOMEM;
  t->gathers[k] = g;
  g->n = t->group_n[k];
  g->me = index_of(t, k, t->rank);
  g->step = -1;
  g->gone = calloc((size_t)g->n, sizeof *g->gone);
  g->got = calloc((size_t)g->n, sizeof *g->got);
  g->theirs = calloc((size_t)g->n, sizeof *g->theirs);
  return g->gone && g->got && g->theirs ? 0 : TR_ENOMEM;
}

/* Step `step` of `buckets` buckets is in hand (its arrays made on its first message). */
static int begin(transport *t, gather *g, int64_t step, int buckets) {
  if (g->step == step && buckets == g->buckets) return 0;
  if (g->step == step)
    return tr_actor_fail(t->self, TR_ESTATE, "summing step %lld across ranks: %d buckets, and "
                         "%d: the ranks hold different stages", (long long)step, buckets,
                         g->buckets);
  if (g->step >= 0 || buckets < 1)
    return tr_actor_fail(t->self, TR_ESTATE, "summing across ranks: step %lld came while step "
                         "%lld was being summed", (long long)step, (long long)g->step);
  free(g->mine);
  free(g->parts);
  g->mine = calloc((size_t)buckets, sizeof *g->mine);
  g->parts = calloc((size_t)buckets * (size_t)g->n, sizeof *g->parts);
  if (!g->mine || !g->parts) return TR_ENOMEM;
  g->step = step;
  g->buckets = buckets;
  g->own = g->members = 0;
  memset(g->got, 0, (size_t)g->n * sizeof *g->got);
  memset(g->theirs, 0, (size_t)g->n * sizeof *g->theirs);
  return 0;
}

/* A part or a total: its head, then n floats, to rank `dest`. */
static int post_floats(transport *t, int dest, int tag, const head *h, const float *p, size_t n) {
  const size_t bytes = sizeof *h + n * sizeof *p;
  uint8_t *buf = tr__buffer_take(&t->buffers, bytes);
  if (buf == NULL) return TR_ENOMEM;
  memcpy(buf, h, sizeof *h);
  memcpy(buf + sizeof *h, p, n * sizeof *p);
  return tr__transport_post(t, dest, tag, buf, bytes);
}

/* The root: every bucket of the step from every rank alive is here — summed in rank order
 * into this rank's, sent back, and this rank's leader told. */
static int complete(transport *t, int k) {
  gather *g = t->gathers[k];
  if (g->step < 0 || g->own < g->buckets) return 0;
  int members = g->members;
  for (int i = 1; i < g->n; i++) {
    if (!g->gone[i] && g->got[i] < g->buckets) return 0;
    if (!g->gone[i]) members += g->theirs[i];
  }
  int rc = 0;
  for (int b = 0; b < g->buckets && rc == 0; b++) {
    tr__sum_msg *s = g->mine[b];
    for (int i = 1; i < g->n; i++) {
      const uint8_t *part = g->parts[(size_t)i * g->buckets + b];
      if (g->gone[i] || part == NULL) continue;
      const float *q = (const float *)(part + sizeof(head));
      for (size_t e = 0; e < s->n; e++) s->p[e] += q[e];
    }
    const head h = {.group = k, .bucket = b, .buckets = g->buckets, .members = members,
                    .step = g->step};
    for (int i = 1; i < g->n && rc == 0; i++)
      if (!g->gone[i]) rc = post_floats(t, t->group_ranks[k][i], TAG_TOTAL, &h, s->p, s->n);
  }
  for (int b = 0; b < g->buckets && rc == 0; b++) rc = tr__sums_complete(t, g->mine[b], members);
  for (int b = 0; b < g->buckets; b++) tr_msg_free(g->mine[b]);
  for (size_t i = 0; i < (size_t)g->n * g->buckets; i++) tr__buffer_give(&t->buffers, g->parts[i]);
  memset(g->mine, 0, (size_t)g->buckets * sizeof *g->mine);
  memset(g->parts, 0, (size_t)g->n * g->buckets * sizeof *g->parts);
  g->step = -1;
  return rc;
}

int tr__gather_start(transport *t, const tr__sum_msg *s) {
  gather *g = t->gathers[s->group];
  int rc = begin(t, g, s->step, s->buckets);
  if (rc) return rc;
  if (s->bucket < 0 || s->bucket >= g->buckets || g->mine[s->bucket])
    return tr_actor_fail(t->self, TR_ESTATE, "summing bucket %d of step %lld across ranks twice",
                         s->bucket, (long long)s->step);
  tr__sum_msg *c = tr_msg_new(&tr__sum_type); /* the fields: s's header is the mailbox's */
  *c = (tr__sum_msg){.hdr = c->hdr, .group = s->group, .bucket = s->bucket,
                     .buckets = s->buckets, .members = s->members, .step = s->step, .p = s->p,
                     .n = s->n};
  g->mine[s->bucket] = c;
  g->own++;
  g->members = s->members;
  if (g->me == 0) return complete(t, s->group);
  const head h = {.group = s->group, .bucket = s->bucket, .buckets = s->buckets,
                  .members = s->members, .step = s->step};
  return post_floats(t, t->group_ranks[s->group][0], TAG_PART, &h, s->p, s->n);
}

/* What came from `source` with tag TAG_PART or TAG_TOTAL: its group, its head read. NULL
 * where it is not one (the actor fails, saying so). */
static gather *group_of(transport *t, const in_msg *in, head *h) {
  if (in->n < sizeof *h) return NULL;
  memcpy(h, in->buf, sizeof *h);
  if (h->group < 0 || h->group >= t->ngroups || !t->gathers[h->group]) return NULL;
  const size_t floats = (in->n - sizeof *h) / sizeof(float);
  const gather *g = t->gathers[h->group];
  if (h->bucket < 0 || h->bucket >= h->buckets) return NULL;
  if (in->tag == TAG_TOTAL) /* for a bucket this rank handed over, of its size */
    return g->step == h->step && h->buckets == g->buckets && g->mine[h->bucket] &&
           g->mine[h->bucket]->n == floats ? t->gathers[h->group] : NULL;
  return g->me == 0 && index_of(t, h->group, in->source) > 0 ? t->gathers[h->group] : NULL;
}

int tr__gather_receive(transport *t, in_msg *in) {
  head h;
  gather *g = group_of(t, in, &h);
  if (g == NULL) {
    tr__buffer_give(&t->buffers, in->buf);
    return tr_actor_fail(t->self, TR_ESTATE, "rank %d sent a sum's %s of %zu bytes that no "
                         "group here awaits", in->source, in->tag == TAG_TOTAL ? "total" : "part",
                         in->n);
  }
  if (in->tag == TAG_TOTAL) {
    tr__sum_msg *s = g->mine[h.bucket];
    memcpy(s->p, in->buf + sizeof h, s->n * sizeof *s->p);
    tr__buffer_give(&t->buffers, in->buf);
    g->mine[h.bucket] = NULL;
    const int rc = tr__sums_complete(t, s, h.members);
    tr_msg_free(s);
    if (--g->own == 0) g->step = -1; /* every sum of the step is here */
    return rc;
  }
  const int i = index_of(t, h.group, in->source);
  int rc = begin(t, g, h.step, h.buckets);
  if (rc == 0 && g->parts[(size_t)i * g->buckets + h.bucket])
    rc = tr_actor_fail(t->self, TR_ESTATE, "rank %d sent bucket %d of step %lld twice",
                       in->source, h.bucket, (long long)h.step);
  if (rc) {
    tr__buffer_give(&t->buffers, in->buf);
    return rc;
  }
  g->parts[(size_t)i * g->buckets + h.bucket] = in->buf; /* kept until the step is summed */
  g->got[i]++;
  g->theirs[i] = h.members;
  return complete(t, h.group);
}

bool tr__gather_needs(const transport *t, int r) {
  for (int k = 0; k < t->ngroups; k++) {
    if (index_of(t, k, t->rank) < 0 || index_of(t, k, r) < 0) continue; /* not ours, or theirs */
    if (!t->gathers[k] || t->group_ranks[k][0] == r) return true; /* an MPI sum; its root */
  }
  return false;
}

int tr__gather_lose(transport *t, int r) {
  int rc = 0;
  for (int k = 0; k < t->ngroups && rc == 0; k++) {
    gather *g = t->gathers[k];
    const int i = index_of(t, k, r);
    if (g == NULL || i < 0) continue;
    g->gone[i] = true;
    if (g->me != 0 || g->step < 0) continue;
    for (int b = 0; b < g->buckets; b++) { /* what came of the step is not summed */
      tr__buffer_give(&t->buffers, g->parts[(size_t)i * g->buckets + b]);
      g->parts[(size_t)i * g->buckets + b] = NULL;
    }
    g->got[i] = 0;
    rc = complete(t, k);
  }
  return rc;
}

void tr__gather_free(transport *t, int k) {
  gather *g = t->gathers[k];
  if (g == NULL) return;
  for (int b = 0; g->mine && b < g->buckets; b++)
    if (g->mine[b]) tr_msg_free(g->mine[b]);
  for (size_t i = 0; g->parts && i < (size_t)g->n * g->buckets; i++)
    tr__buffer_give(&t->buffers, g->parts[i]);
  free(g->mine);
  free(g->parts);
  free(g->gone);
  free(g->got);
  free(g->theirs);
  free(g);
  t->gathers[k] = NULL;
}
