/* loader.c — the loader actor (libuv loop): fills its replica's share of every step, micro-
 * batch by micro-batch, into the buffers its stages lend it.
 *
 * It fills a buffer only with a credit of every edge it feeds in hand (inputs to the first
 * stage, targets to the last; one edge for both when they are one stage), so it is at most
 * `prefetch` micro-batches ahead. Buffers are used in ring order: each consumer returns
 * them in the order they came, so a credit means the oldest buffer is free. The first stage
 * claims each step from the graph as it starts it; the loader's part is over once its next
 * step is past the end (a timed run's end is known once its time is up). Samples are a pure function of (seed, sample index) (tr_data.h),
 * so step k's batch is the same whichever thread fills it and however the run was
 * interrupted and resumed.
 *
 * In an asynchronous job the loaders take steps from one counter and claim them, so every
 * step is one worker's, whole (two batches ahead at most: tr_job_new); a loader whose claim
 * fails tells its worker so (a batch of step -1).
 */
#include <stdlib.h>

#include "train_impl.h"

enum { TURN_NS = 1000 * 1000 };

typedef struct loader {
  tr_job *j;
  int replica;
  tr_edge *ex, *ey;  /* ey: NULL when ex brings targets too */
  bool held_x, held_y;
  void **x, **y;
  int depth, slot, rings;
  int64_t step;
  int mb;
  bool claimed, done; /* claimed (async): l->step is this loader's to fill */
  bool resuming;      /* a poll to itself is on its way */
} loader;

void *tr__loader_new(tr_job *j, int replica) {
  loader *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->j = j;
  l->replica = replica;
  return l;
}

void tr__loader_set_edges(void *state, tr_edge *x, tr_edge *y) {
  loader *l = state;
  l->ex = x;
  l->ey = y;
}

/* The next step this loader fills, or false once the run has no more for it. */
static bool claim(tr_actor *self, loader *l) {
  tr_job *j = l->j;
  if (!j->c.async) { /* the first stage claims the step; the end may have come meanwhile */
    if (l->step < tr_graph_end_step(j->g)) return true;
  } else if (!l->claimed) {
    l->step = tr_graph_first_step(j->g) + atomic_fetch_add(&j->next_step, 1);
    l->claimed = tr_graph_claim_step(j->g, l->step);
  }
  if (l->claimed) return true;
  l->done = true;
  if (j->c.async) {
    tr__batch_msg *b = tr_msg_new(&tr__batch_type);
    b->step = -1;
    b->slot = -1;
    b->mb = 0;
    tr_actor_send(tr_edge_to(l->ex), b);
  }
  tr_graph_done(j->g, self);
  return false;
}

/* Fills what the credits allow, a millisecond at most in one turn: where the devices are
 * faster than the data (a GPU), credits come back as fast as batches are made, and a loader
 * that never returned would keep its loop's timers (the end of a timed run) and the other
 * loop actors waiting. It asks itself to go on instead. */
static int produce(tr_actor *self, loader *l) {
  tr_job *j = l->j;
  const int workers = j->c.async ? 1 : j->c.replicas * j->c.microbatches;
  const int base = j->c.async ? 0 : l->replica * j->c.microbatches; /* of the shards */
  const uint64_t t0 = tr_now_ns();
  while (!l->done) {
    if (tr_now_ns() - t0 > TURN_NS) {
      if (!l->resuming) {
        tr__poll_msg *p = tr_msg_new(&tr__poll_type);
        p->hdr.from = self;
        tr_actor_send(self, p);
        l->resuming = true;
      }
      return 0;
    }
    if (!claim(self, l)) return 0; /* mid-step too: the end may come while it waits there */
    if (!l->held_x && !(l->held_x = tr_edge_acquire(l->ex))) return 0;
    if (l->ey && !l->held_y && !(l->held_y = tr_edge_acquire(l->ey))) return 0;
    uint64_t first;
    size_t count;
    tr_data_shard((uint64_t)l->step, (size_t)j->c.global_batch, base + l->mb, workers,
                  &first, &count);
    const int rc = tr_data_fill(j->c.data, first, count, l->x[l->slot], l->y[l->slot]);
    if (rc)
      return tr_actor_fail(self, rc, "data '%s': samples [%llu, %llu): %s", tr_data_name(j->c.data),
                           (unsigned long long)first, (unsigned long long)(first + count),
                           tr_strerror(rc));
    for (int e = 0; e < (l->ey ? 2 : 1); e++) {
      tr__batch_msg *b = tr_msg_new(&tr__batch_type);
      b->slot = l->slot;
      b->mb = l->mb;
      b->step = l->step;
      tr_edge_send(e ? l->ey : l->ex, b);
    }
    l->held_x = l->held_y = false;
    l->slot = (l->slot + 1) % l->depth;
    if (++l->mb == j->c.microbatches) {
      l->mb = 0;
      l->step++;
      l->claimed = false;
    }
  }
  return 0;
}

static int loader_receive(tr_actor *self, tr_msg *msg) {
  loader *l = tr_actor_state(self);
  if (msg->type == &tr__poll_type) l->resuming = false;
  if (msg->type == &tr__ring_type) {
    const tr__ring_msg *r = (const tr__ring_msg *)msg;
    if (r->x) l->x = r->x;
    if (r->y) l->y = r->y;
    l->depth = r->depth;
    l->rings++;
  }
  /* Credits, the end of the run: try again. Both rings are needed before anything. */
  return l->rings == (l->ey ? 2 : 1) ? produce(self, l) : 0;
}

static int loader_start(tr_actor *self) {
  loader *l = tr_actor_state(self);
  l->step = tr_graph_first_step(l->j->g);
  return 0;
}

const tr_behaviour tr__loader_behaviour = {
    .name = "loader", .start = loader_start, .receive = loader_receive, .destroy = free};
