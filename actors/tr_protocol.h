/* tr_protocol.h — the messages of the built-in training actors, for actors of your own that
 * take part in a training graph (tr_job.h): replace the loader, sit between the loader and
 * the first stage, or observe the run every N steps.
 *
 * Batches. A tr_batch_msg lends one micro-batch of samples: `count` samples (the job's
 * micro-batch, tr_job_microbatch_samples) starting at sample `first` of the data set, as
 * host memory the producer owns. The consumer reads x (and y) and then releases the credit
 * of the edge the batch came on (tr_edge_release): that tells the producer the buffer is
 * free again. Credits come back in the order batches were sent, so a producer with N
 * credits needs N buffers, used in ring order. A stage takes batches in schedule order:
 * step by step, micro-batch 0 .. m-1 within a step.
 *
 *   // a producer of your own, on start and on every tr_edge_credit_msg
 *   while (next_step < tr_graph_end_step(g) && tr_edge_acquire(out)) {
 *     tr_batch_msg *b = tr_msg_new(&tr_batch_type);
 *     *b = (tr_batch_msg){.hdr = b->hdr, .step = next_step, .mb = mb, .count = n,
 *                         .first = (uint64_t)next_step * global_batch + mb * n,
 *                         .x = xs[slot], .y = ys[slot], .x_bytes = n * xb, .y_bytes = n * yb};
 *     fill(xs[slot], ys[slot], ...);
 *     tr_edge_send(out, b);
 *     slot = (slot + 1) % credits; ...
 *   }
 *
 * A batch may instead only name its samples (`generate` set, x and y NULL): the stage then
 * generates them on its device from the job's data, which must be a generated source
 * (tr_data_can_generate); it releases the credit once it has queued that.
 *
 * A relay between a producer and a stage (normalising inputs, say) can change the samples
 * in place and pass the batch on with tr_batch_forward. Its outgoing edge is made with
 * TR_BATCH_NOTIFY (tr_job_connect_batches), so the relay receives a tr_edge_credit_msg for
 * every batch the stage has released; it then releases as many on its incoming edge:
 *
 *   if (msg->type == &tr_batch_type) {
 *     tr_batch_msg *b = (tr_batch_msg *)msg;
 *     normalise(b->x, b->count);
 *     tr_edge_acquire(r->out);                 // as many credits as the incoming edge
 *     tr_edge_send(r->out, tr_batch_forward(b));
 *   } else if (msg->type == &tr_edge_credit_type) {
 *     tr_edge_release(r->in, ((tr_edge_credit_msg *)msg)->count);
 *   }
 *
 * Activations and gradients. Between the stages of a pipeline, a tr_tensor_msg names a
 * tensor in the sender's device memory, valid once its `ready` event has completed; the
 * receiver releases the edge's credit once its copy out of it has run.
 *
 * Reports. An observer (tr_job_observe) receives a tr_report_msg every N steps, and a last
 * one (`last` set) when the run is over; it releases the edge's credit after each. Those of
 * an observer of the parameters (tr_job_snapshot) carry them at its steps (`params`).
 */
#ifndef TR_PROTOCOL_H
#define TR_PROTOCOL_H

#include <stdint.h>

#include "tr_device.h"
#include "tr_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_checkpoint; /* tr_checkpoint.h */

typedef struct tr_batch_msg {
  tr_msg hdr;
  int64_t step;   /* the run's step; < 0: the producer has no more (an asynchronous worker's
                     loader says so once) */
  int mb;         /* micro-batch of the step, 0 .. m-1 */
  int count;      /* samples */
  uint64_t first; /* the data set's index of the first sample */
  void *x, *y;    /* count × input bytes, count × target bytes (tr_model.h); NULL where the
                     edge does not carry them */
  size_t x_bytes, y_bytes; /* at x and at y (0 where NULL) */
  int generate;   /* 1: x and y are NULL, and the stage makes samples [first, first + count)
                     of the job's data on its device (tr_data_gen; tr_job_config.data_on) */
  int eval;       /* 1: held-out samples (tr_job_config.eval), evaluated and not trained on:
                     samples [first, first + count) of eval.data, micro-batch mb of the
                     evaluation after step `step`; count may be below the job's
                     micro-batch (the last one), the buffers hold a whole micro-batch
                     (x_bytes and y_bytes are its; the rest repeats a sample) */
} tr_batch_msg;
TR_API extern const tr_msgtype tr_batch_type;

/* A new batch message with the contents of `b` (the same buffers), to send on; b NULL:
 * NULL, said on stderr. */
TR_API tr_batch_msg *tr_batch_forward(const tr_batch_msg *b);

typedef struct tr_tensor_msg {
  tr_msg hdr;
  int64_t step;
  int mb;
  int chunk;        /* the receiver's model chunk it is for (interleaved); else 0 */
  uint64_t first;   /* the micro-batch's first sample */
  const void *data; /* in the sender's device memory; from another process: in host memory
                       of this one, or NULL where NCCL carries the bytes on the edge's own
                       communicator (the receiving stage then receives them itself) */
  size_t bytes;
  tr_event *ready;  /* the data is valid once this has completed */
  tr_device *dev;   /* the sender's */
} tr_tensor_msg;
/* stage s → s+1: its output; stage s+1 → s: the gradient of that output (interleaved: also
 * the last stage's output of chunk c → the first stage's chunk c+1, and back). */
TR_API extern const tr_msgtype tr_activation_type, tr_gradient_type;

typedef struct tr_report_msg {
  tr_msg hdr;
  int64_t step;         /* steps [step - steps, step) are reported */
  int64_t steps;
  double loss;          /* their mean loss (each step's: the global batch's mean) */
  double last_loss;     /* the loss of step - 1 */
  int64_t samples;      /* trained in this run so far */
  double seconds;       /* since the run started */
  double step_seconds;  /* wall time per step over these steps */
  int last;             /* the run's last report */
  /* The latest evaluation on held-out samples (tr_job_config.eval): after step eval_step
   * (-1: none yet), of eval_samples samples; its mean loss and accuracy (NaN: none, or a
   * loss without one). A report of a step after which one was due waits for it: report k
   * carries the evaluation after step k itself. */
  int64_t eval_step, eval_samples;
  double eval_loss, eval_accuracy;
  /* The parameters after step `step` (tr_job_snapshot), or NULL: a checkpoint in memory,
   * with the checkpoint file's names, metadata and bytes ("0.weight", "momentum.0.weight";
   * tr_checkpoint_find, tr_checkpoint_read, tr_checkpoint_meta_u64(params, "step")). The
   * observer's own view of them, valid until it releases this report's credit (credits go
   * back in the order reports came). Never crosses processes: NULL there. */
  struct tr_checkpoint *params;
} tr_report_msg;
TR_API extern const tr_msgtype tr_report_type;

#ifdef __cplusplus
}
#endif
#endif
