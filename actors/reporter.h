/* reporter.h — what a stage tells the coordinator, on its one report edge: the losses of
 * its steps (when its layers end in the loss: losses.h's ring and log), its parts of each
 * checkpoint, and its figures at the end of the run. The stage runner measures; the
 * reporter packs and sends, each message once a credit of the edge is free.
 *
 *   tr__reporter_open(&r, self, dev, losses, m, first_step);   // on the device's thread
 *   tr__reporter_copy_loss(&r, s, step, mb, tr_stage_loss(st, slot), run_step); // a forward
 *   tr__reporter_step_ended(&r, step);
 *   rc = tr__reporter_read(&r, step, room);                 // now and then: losses landed
 *   rc = tr__reporter_parts(&r, &chunks, step, due, params); // 1 sent, 0 waits for a credit
 *   rc = tr__reporter_eval(&r, &sums);                      // an evaluation's sums
 *   rc = tr__reporter_figures(&r, &figures);                // the end of the run
 */
#ifndef TR_REPORTER_H
#define TR_REPORTER_H

#include "chunks.h"
#include "evaluate.h"
#include "losses.h"
#include "metrics.h"

enum { TR__REPORTER_WAIT = 0, TR__REPORTER_SENT = 1 };

typedef struct tr__reporter {
  tr_actor *self;
  tr_device *dev;
  tr__loss_ring ring; /* ring.dev NULL: the stage computes no loss */
  tr__loss_log log;   /* log.edge: to the coordinator; log.source: the stage's device index */
  int parts_sent;
} tr__reporter;

/* What a stage measured over the run. */
typedef struct tr__stage_figures {
  bool run_steps; /* its steps are the run's (a worker's are its own pushes) */
  int64_t steps, first_step, skipped;
  uint64_t window_end;
  int peak_microbatches;
  int64_t peak_activation_bytes;
  const tr__busy *busy;
  bool params; /* a host copy of the parameters goes along (the replicas' consistency) */
  int64_t edge_bytes; /* the tensors the stage's edges sent (activations, input gradients) */
  const tr_tensor_comm *tensor; /* its tensor group's comm (NULL: none): its bytes too */
  const struct tr__policy *policy; /* adds its parts' figures (its optional figures op) */
} tr__stage_figures;

void tr__reporter_init(tr__reporter *r, tr_edge *edge, int source);
/* `losses`: the stage's last chunk ends in the loss; m micro-batches a step, from `first`. */
int tr__reporter_open(tr__reporter *r, tr_actor *self, tr_device *dev, bool losses, int m,
                      int64_t first);
static inline bool tr__reporter_room(const tr__reporter *r, int64_t step) {
  return r->ring.dev == NULL || tr__loss_ring_free(&r->ring, step);
}
int tr__reporter_copy_loss(tr__reporter *r, tr_stream *s, int64_t step, int mb,
                           const float *loss, int64_t run_step);
void tr__reporter_step_ended(tr__reporter *r, int64_t step);
/* The losses of steps before `upto` that have landed, into the log, sent as it fills
 * (`room`: first waits for the oldest if step `upto` would overwrite it). 0, TR_EDEVICE. */
int tr__reporter_read(tr__reporter *r, int64_t upto, bool room);
/* Whether losses wait on the device (the stage polls meanwhile). */
static inline bool tr__reporter_waiting(const tr__reporter *r, int64_t step) {
  return r->ring.dev && r->ring.read < step && r->log.n < TR__LOSS_CHUNK;
}
/* Every loss read and sent, at the end: 1 done, 0 waits for a credit. */
int tr__reporter_flush(tr__reporter *r, int64_t upto);
/* The stage's parts of `step`, a chunk's each (with its parameters when `params`, and what
 * the policy adds to it, its optional part op), for
 * what `due` says (TR__DUE_*: the checkpoint, the observers' parameters); 1 sent, 0 waits
 * for a credit, or a status. */
int tr__reporter_parts(tr__reporter *r, const tr__chunks *c, int64_t step, unsigned due,
                       bool params, const struct tr__policy *policy);
/* A replica's sums of a held-out evaluation (evaluate.h): 1 sent, 0 waits for a credit. */
int tr__reporter_eval(tr__reporter *r, const tr__eval_sums *sums);
int tr__reporter_figures(tr__reporter *r, const tr__chunks *c, const tr__stage_figures *f);
void tr__reporter_close(tr__reporter *r);
void tr__reporter_free(tr__reporter *r);

#endif
