/* chunks.h — the model chunks a stage runs on its device: one piece of the model, or under
 * an interleaved schedule several (chunk c of stage s is piece c × stages + s), each a
 * tr_stage with its slots for micro-batches in flight; and the activation memory they hold
 * as the schedule's actions take and free those slots (the peak is a figure of the run).
 *
 *   tr__chunks_open(&c, self, run, stage, dev, shard, &tp); // on the device's thread
 *   tr__chunks_plan_holds(&c, acts, nacts, m);
 *   ... after action k has run: tr__chunks_hold(&c, k, &acts[k]);
 */
#ifndef TR_CHUNKS_H
#define TR_CHUNKS_H

#include "tensor_group.h"

typedef struct tr__chunk {
  tr_stage *st;
  const tr_stage_info *info;
  tr_event **act_ev;    /* [slot]: the activation sent from it may be overwritten */
  uint64_t *slot_first; /* [slot]: the first sample of the micro-batch in it */
} tr__chunk;

typedef struct tr__chunks {
  tr__chunk *ch;
  tr_stage **st;       /* [n]: each chunk's stage */
  int n;
  int stage, stages;   /* the stage's number, and the job's */
  tr_actor *self;
  tr_device *dev;
  signed char *holds;  /* [action]: +1 where a micro-batch takes its slot, -1 where it frees it */
  int live, peak;      /* micro-batches held */
  int64_t live_bytes, peak_bytes;
  char err[512];
} tr__chunks;

/* Each chunk's stage: its layers (of its tensor member's model), its slots, `shard` of the
 * optimizer state, and its share of the checkpoint it resumes from. 0, or the actor failed. */
int tr__chunks_open(tr__chunks *c, tr_actor *self, const tr__run *run, int stage,
                    tr_device *dev, tr_stage_shard shard, const tr__tensor_member *tp);
/* Events for the activations each slot sends. */
int tr__chunks_open_events(tr__chunks *c);
/* Where each (chunk, micro-batch) takes its slot and frees it: its first action and its
 * last, as the schedule assigned the slots. */
int tr__chunks_plan_holds(tr__chunks *c, const tr_action *acts, size_t nacts, int m);
void tr__chunks_hold(tr__chunks *c, size_t k, const tr_action *act);
/* The most bytes a tensor of this kind takes over the chunks. */
size_t tr__chunks_largest(const tr__chunks *c, bool outputs);
void tr__chunks_close(tr__chunks *c); /* on the device's thread */
void tr__chunks_free(tr__chunks *c);

#endif
