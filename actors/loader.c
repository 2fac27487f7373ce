/* loader.c — the loader actor (libuv loop): fills the stage's batch buffers ahead of it.
 *
 * It fills a buffer only with a credit in hand, so it is at most `prefetch` batches ahead.
 * Samples are a pure function of (seed, sample index) (tr_data.h), so step k's batch is the
 * same whichever thread fills it and however the run was interrupted and resumed.
 */
#include <stdlib.h>

#include "train_impl.h"

typedef struct loader {
  tr__run *run;
  void **x, **y;
  int depth;
  int64_t next_step;
} loader;

void *tr__loader_new(tr__run *run) {
  loader *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->run = run;
  l->next_step = run->first_step;
  return l;
}

static void fill_and_send(tr_actor *self, loader *l, int slot) {
  tr__run *run = l->run;
  if (l->next_step >= run->end_step) return; /* the credit stays here: nothing left to load */
  uint64_t first;
  size_t count;
  tr_data_shard((uint64_t)l->next_step, (size_t)run->batch, 0, 1, &first, &count);
  tr_data_fill(run->data, first, count, l->x[slot], l->y[slot]);
  tr__batch_msg *b = tr_msg_new(&tr__batch_type);
  b->hdr.from = self;
  b->slot = slot;
  b->step = l->next_step++;
  tr_actor_send(run->stage, b);
}

static int loader_receive(tr_actor *self, tr_msg *msg) {
  loader *l = tr_actor_state(self);
  if (msg->type == &tr__credit_type) {
    fill_and_send(self, l, ((tr__credit_msg *)msg)->slot);
  } else if (msg->type == &tr__ring_type) {
    tr__ring_msg *r = (tr__ring_msg *)msg;
    l->x = r->x;
    l->y = r->y;
    l->depth = r->depth;
    for (int slot = 0; slot < l->depth; slot++) fill_and_send(self, l, slot);
  }
  return 0;
}

const tr_behaviour tr__loader_behaviour = {
    .name = "loader", .receive = loader_receive, .destroy = free};
