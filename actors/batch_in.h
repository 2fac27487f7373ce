/* batch_in.h — a stage's batch edges: the batches the loader (or a relay) lends it, queued
 * in arrival order, which is schedule order, and put into a chunk's slot when its forward
 * comes — copied in from the host, or made on the device (the job's data copied there
 * first, tr_data_gen) when the batch says which samples instead of carrying them.
 *
 *   tr__batch_in_add(&b, edge, TR_BATCH_INPUTS);            // the plan's ports
 *   tr__batch_in_open(&b, self, run, dev);                  // on the device's thread
 *   rc = tr__batch_in_take(&b, msg, last);                  // a batch came
 *   if (tr__batch_in_ready(&b, info)) rc = tr__batch_in_fill(&b, s, &ret, info, x, y, step, mb, chunk, &first);
 */
#ifndef TR_BATCH_IN_H
#define TR_BATCH_IN_H

#include "inbox.h"

typedef struct tr__batch_edge {
  tr_edge *edge;
  unsigned what; /* TR_BATCH_INPUTS | TR_BATCH_TARGETS */
  tr__queue q;
} tr__batch_edge;

typedef struct tr__batch_in {
  tr__batch_edge in[2];
  int n;
  tr_actor *self;
  const tr__run *run;
  tr_device *dev;
  tr_data_gen *gen; /* the job's data on this device, once a batch asks for it */
  char err[512];
} tr__batch_in;

int tr__batch_in_open(tr__batch_in *b, tr_actor *self, const tr__run *run, tr_device *dev);
/* Batch m came (`last`: the stage's layers end in the loss): queued, or the actor fails. */
int tr__batch_in_take(tr__batch_in *b, const tr_batch_msg *m, bool last);
/* The first edge's next batch (NULL: none yet), and dropping it unstarted (its credit back). */
const tr__lent *tr__batch_in_head(const tr__batch_in *b);
void tr__batch_in_drop(tr__batch_in *b);
/* Every batch the first edge holds dropped unstarted (a worker that left); whether one of
 * them was the run's end (a step < 0). */
bool tr__batch_in_drop_all(tr__batch_in *b);
/* Before the evaluation at the run's end: every batch ahead of its held-out ones of `step`
 * on each edge (what a loader ahead of a timed run's end sent) goes back unused. */
void tr__batch_in_drop_stale(tr__batch_in *b, int64_t step);
/* Whether every edge a forward of chunk `info` takes from has its batch. */
bool tr__batch_in_ready(const tr__batch_in *b, const tr_stage_info *info);
/* Micro-batch `mb` of the run's step `step` (`eval`: of the held-out evaluation after step
 * `step`) into x and y (the chunk's slot; NULL where the chunk takes none), each edge's
 * credit owed through `ret` until the copy has run; *first: the micro-batch's first
 * sample, *count: its samples. TR__DONE or a status. */
int tr__batch_in_fill(tr__batch_in *b, tr_stream *s, tr__returns *ret,
                      const tr_stage_info *info, void *x, void *y, int64_t step, int mb,
                      int chunk, bool eval, uint64_t *first, int *count);
int tr__batch_in_credits(const tr__batch_in *b); /* every edge's, together */
void tr__batch_in_close(tr__batch_in *b); /* on the device's thread */
void tr__batch_in_free(tr__batch_in *b);

#endif
