/* tr_loss.h — losses as tables: the built-in ones (mean squared error, softmax cross-entropy),
 * and how to write one of your own.
 *
 * A loss is a tr_loss_type, one constant object whose address is its identity (tr_loss_kind),
 * as a layer's kind is its tr_layer_type. A model names its loss (tr_model_spec.loss); the
 * model's last stage asks the table what the targets are (their type fixes the bytes of a
 * sample's target, tr_model_target_bytes, and which data a model gets), what the mean is
 * over, what it keeps per micro-batch and what scratch it needs, and calls its forward after
 * the layers' and its backward before theirs. A loss written with the device API alone
 * (tr_device.h's ops on c->s) runs on host devices and GPUs alike, under every strategy.
 *
 * Its forward gives the batch's loss, scaled so that the losses of every micro-batch and
 * replica of a step add up to the step's mean; the per-sample losses come out of the same
 * forward run on one sample at a time (tr_stage_sample_losses).
 *
 * A loss of one's own: mean absolute error would be
 *
 *   static int mae_forward(const tr_loss_ctx *c, float *loss) { ... }  // loss[0] = scale * sum |pred - target|
 *   static int mae_backward(const tr_loss_ctx *c, float *dpred) { ... } // dpred = scale * sign(pred - target)
 *   const tr_loss_type mae_type = {.name = "mae", .target = TR_LOSS_TARGET_VALUES,
 *                                  .mean = TR_LOSS_MEAN_ELEMENTS,
 *                                  .forward = mae_forward, .backward = mae_backward};
 *   tr_loss_register(&mae_type, err, sizeof err);   // findable by name (tr_loss_kind_parse)
 *   spec.loss = &mae_type;
 *
 * tests/actors/test_user_kinds.c writes a label-smoothed cross-entropy this way.
 */
#ifndef TR_LOSS_H
#define TR_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_loss_type tr_loss_type;
/* A loss: the address of its table. NULL, a zeroed spec's, is MSE. */
typedef const tr_loss_type *tr_loss_kind;

/* The built-in losses. */
TR_API extern const tr_loss_type tr_loss_mse_type;          /* "mse": mean over all output elements;
                                                         targets float (B*T, out) */
TR_API extern const tr_loss_type tr_loss_crossentropy_type; /* "crossentropy": softmax, then the mean
                                                         over the B*T rows of -log p[target];
                                                         targets int32 (B*T) in [0, out) */
#define TR_LOSS_MSE (&tr_loss_mse_type)
#define TR_LOSS_CROSSENTROPY (&tr_loss_crossentropy_type)

/* What a sample's target is: per row of the last layer's output (N = B*T rows, V wide). */
typedef enum tr_loss_target {
  TR_LOSS_TARGET_VALUES,  /* floats (N, V): a value per output element */
  TR_LOSS_TARGET_CLASSES  /* int32 (N): a class in [0, V) per row */
} tr_loss_target;

/* What the loss is the mean over: a step's scale is 1 / (global batch x T), or x V too. */
typedef enum tr_loss_mean {
  TR_LOSS_MEAN_ROWS,      /* over the rows */
  TR_LOSS_MEAN_ELEMENTS   /* over every output element */
} tr_loss_mean;

/* One micro-batch's loss, on stream s. */
typedef struct tr_loss_ctx {
  tr_stream *s;              /* every op goes on this stream */
  const float *pred;         /* (N, V): the last layer's output; not to be written */
  const void *target;        /* floats (N, V) or int32 (N), as the table's `target` says */
  int N, V;                  /* rows, and the output's width */
  float scale;               /* 1 / what the step's mean is over (the global batch's rows or
                                elements): forward's loss and backward's gradient carry it */
  float *keep;               /* keep_floats floats, this micro-batch's own (64-byte aligned):
                                what forward leaves for backward (softmax's probabilities) */
  float *scratch;            /* scratch_floats floats (64-byte aligned), shared: good within
                                one call only */
  /* Tensor parallelism, a vocab_parallel loss only: pred holds columns [rank V, (rank+1) V)
   * of the whole output (size V wide) and the loss reduces across the group (never
   * gathering pred); NULL: pred is the whole output. */
  const struct tr_tensor_comm *tensor;
} tr_loss_ctx;

/* A loss's table. Slots marked OPTIONAL may be 0 or NULL. Functions return 0 or a negative
 * TR_E... status. */
struct tr_loss_type {
  const char *name;          /* "crossentropy": messages, tr_loss_kind_parse */
  tr_loss_target target;
  tr_loss_mean mean;
  int accuracy;              /* 1: each row's output is a score per class and its largest
                                predicts the target class (an accuracy means something); a
                                CLASSES loss */
  int vocab_parallel;        /* 1: forward and backward take a tensor group's split output
                                (tr_loss_ctx.tensor), so the last layer may be split COLUMN */
  /* OPTIONAL: whether the last layer's width V suits the loss (V > 0 checked already); on
   * failure writes what is wrong to err (the caller names the model) and returns TR_EINVAL. */
  int (*check)(int V, char *err, size_t err_size);
  /* OPTIONAL (0): floats of ctx->keep per micro-batch of N rows, and of ctx->scratch. */
  size_t (*keep_floats)(int N, int V);
  size_t (*scratch_floats)(int N, int V);
  /* loss[0] = scale x the sum of the rows' (elements') losses, a device float written, not
   * added to; leaves in ctx->keep what backward reads. */
  int (*forward)(const tr_loss_ctx *c, float *loss);
  /* dpred (N, V) = the gradient of forward's loss[0] with respect to pred, OVERWRITTEN; after
   * forward of the same micro-batch (ctx->keep as it left it). dpred does not overlap pred,
   * target or keep. */
  int (*backward)(const tr_loss_ctx *c, float *dpred);
};

/* ---- losses by name -------------------------------------------------------------------------- */

/* Makes the loss findable by its name (tr_loss_kind_parse). The built-in ones are registered
 * from the start; registering a table again is a no-op. TR_EINVAL (err naming the table and
 * the rule) for a table tr_loss_kind_check refuses, a name another table has, or more than
 * 32 losses. Takes a lock; lookups are safe from any thread. */
TR_API int tr_loss_register(tr_loss_kind kind, char *err, size_t err_size);
TR_API int tr_loss_registered(tr_loss_kind kind);
/* A well-formed table: a name, forward and backward, target and mean among their values;
 * NULL is MSE (fine). TR_EINVAL otherwise, err naming the table and what is wrong. */
TR_API int tr_loss_kind_check(tr_loss_kind kind, char *err, size_t err_size);
/* The loss's name ("mse" for NULL); parse: the registered loss of that name, or TR_EINVAL. */
TR_API const char *tr_loss_kind_name(tr_loss_kind kind);
TR_API int tr_loss_kind_parse(const char *name, tr_loss_kind *out);

/* ---- accuracy of a vocabulary-parallel output ------------------------------------------------ */

/* *correct = how many of the N rows have their target as the whole row's largest logit (the
 * first of equals), where pred (N, V) holds member tc->rank's columns [rank V, (rank+1) V)
 * of the group's logits: two all-reduces of N floats (the rows' largest, MAX; minus the first
 * column holding it, MAX), never a whole row; the same count on every member, which must
 * all call it alike. scratch: 2N floats of the device. Every device (the steps are the
 * tr_crossentropy_part_argmax, _vote and _hits ops; it waits for the stream); class indices
 * and N below 2^24. */
struct tr_tensor_comm;
TR_API int tr_crossentropy_correct_parts(const struct tr_tensor_comm *tc, tr_stream *s,
                                         const float *pred, const int32_t *target, int N, int V,
                                         float *scratch, int64_t *correct);

/* ---- per-sample losses of a stage ----------------------------------------------------------- */

typedef struct tr_stage tr_stage;
/* out[b] (device floats, b < the stage's batch) = sample b's loss, the mean over its own rows
 * (or elements): the loss's forward run on that sample alone. On the last stage, after the
 * slot's forward and (a stage that recomputes) before its next pass; ordered on the stage's
 * stream. TR_EINVAL on another stage. */
TR_API int tr_stage_sample_losses(tr_stage *st, int slot, float *out);

#ifdef __cplusplus
}
#endif
#endif
