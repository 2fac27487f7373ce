/* tr_stage.h — a model's layers [first, end) on one device: the stage that trains them.
 *
 * A tr_stage is layers [first, end) of a model (tr_model.h) on one device: its parameters,
 * gradients and optimizer state are each ONE device allocation holding that contiguous slice
 * of the model's parameter space, so a gradient bucket is a byte range and layer l's tensors
 * lie at tr_stage_layer_span. Activations saved for backward
 * live in `slots`, one per micro-batch in flight (GPipe: m, 1F1B: at most p); a stage that
 * recomputes keeps only each micro-batch's input there and computes the rest again in
 * backward.
 *
 *   tr_model *m;
 *   tr_model_named(&m, "simplenet", err, sizeof err);
 *   tr_stage_config c = tr_stage_defaults(m);           // all layers, workload batch and optimizer
 *   c.seed = 1;
 *   tr_stage *st;
 *   if (tr_stage_open(&st, m, dev, &c, err, sizeof err)) ...; // on the device's thread
 *   for (int step = 0; step < steps; step++) {
 *     tr_memcpy(s, tr_stage_input(st, 0), x, xbytes, TR_COPY_H2D);
 *     tr_memcpy(s, tr_stage_target(st, 0), y, ybytes, TR_COPY_H2D);
 *     tr_stage_set_samples(st, 0, (uint64_t)step * c.batch); // samples [step B, step B + B)
 *     tr_stage_zero_grads(st);
 *     tr_stage_forward(st, 0);                          // loss: tr_stage_loss(st, 0) (device)
 *     tr_stage_backward(st, 0, NULL);
 *     if (tr_stage_step(st, NULL)) fprintf(stderr, "%s\n", tr_stage_error(st));
 *   }
 *   tr_stage_close(st);
 *   tr_model_free(m);
 *
 * Pipelines: stage k's output (tr_stage_output) is copied into stage k+1's tr_stage_input of
 * the same slot; stage k+1's backward returns the gradient of its input, which is copied into
 * stage k's tr_stage_dout of that slot. Each micro-batch's loss is scaled by 1/global_batch
 * (the samples of one optimizer step over all micro-batches and replicas), so gradients
 * accumulated over micro-batches, and summed over data-parallel replicas, are the gradient
 * of the global batch's mean loss. Global-norm clipping across stages and replicas: each
 * adds tr_stage_grad_sumsq into a device scalar, the caller sums those, and every stage
 * steps with tr_stage_step(st, global_sumsq).
 *
 * Random layers (dropout) draw from (the seed, the layer's index in the model, the sample's
 * index in the data set, the element's place in the sample) alone. Whoever fills a slot says
 * which samples it holds (tr_stage_set_samples): then a batch split into micro-batches,
 * replicas and stages draws exactly the single device's masks, and trains to its results.
 *
 * Every op is issued on the device's compute stream (tr_stage_stream) and, like all device
 * work, is complete only once an event recorded after it completes. Calls come from the
 * device's owner thread. Functions return 0 or a negative TR_E... status; the message is
 * tr_stage_error (it names the stage, the device, the layer and the operation).
 *
 * Misuse (tr_base.h): a NULL stage is TR_EINVAL said on stderr; a slot the stage lacks, a
 * NULL buffer or configuration, a buffer kind outside tr_stage_buffer, or a half of a split
 * backward on a stage opened without `split` is TR_EINVAL with tr_stage_error naming the
 * call and the argument. Calls without a status do nothing for a slot or layer the stage
 * lacks (the buffers' getters answer NULL, a span 0 and 0), said on stderr; getters of a
 * NULL stage answer NULL, 0 or "". tr_stage_open and tr_stage_plan refuse NULL arguments
 * in err (opt_scratch_bytes may be NULL); tr_stage_defaults(NULL) is a zeroed
 * configuration, which tr_stage_open refuses (batch 0).
 */
#ifndef TR_STAGE_H
#define TR_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"
#include "tr_model.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ZeRO stage 1: the replicas of a stage split its optimizer. The stage's parameters are cut
 * into `count` shards of equal length (each a multiple of 16 floats, so each starts on a
 * 64-byte boundary; the last may be shorter, or empty), and a stage given shard `index`
 * holds optimizer state for that shard only and updates only its parameters: the rest of
 * them are the other replicas' to update and to copy in. count 0 or 1: the whole stage. */
typedef struct tr_stage_shard {
  int count, index;
} tr_stage_shard;
/* The elements [*offset, *offset + *n) of `numel` that shard `sh` holds. */
TR_API void tr_stage_shard_span(size_t numel, tr_stage_shard sh, size_t *offset, size_t *n);
/* How a stage computes. gemm TR_PRECISION_BF16 is mixed precision: the matrix products of the
 * kinds that have bf16 (linear, block, and residuals of them) take their weights and
 * activations in bfloat16 and sum in float32, while parameters ("master weights"),
 * gradients, optimizer state, every other op and checkpoints stay float32. The weights'
 * bf16 copy is made once per step, at the first forward after the parameters may have
 * changed (tr_stage_open, tr_stage_step, tr_stage_zero_grads, tr_stage_upload,
 * tr_stage_share_params): whoever writes tr_stage_params directly does so before the
 * stage's tr_stage_zero_grads. */
typedef struct tr_precision_config {
  tr_precision gemm;    /* TR_PRECISION_FP32 (the default) or TR_PRECISION_BF16 */
  int tf32;             /* CUDA: TF32 tensor cores in fp32 GEMMs; tr_stage_open turns it on
                           for its device (tr_device_set_tf32) */
} tr_precision_config;

/* CUDA graphs: X(name, text), the one list of settings; `text` is what --cuda-graphs takes.
 * On (the default, 0), a stage on a device that captures (tr_device_can_capture: CUDA)
 * records each of its passes (a micro-batch slot's forward, backward or backward half) the
 * second time it runs and replays it from then on, one launch instead of a launch per
 * kernel; the results are bitwise those of eager runs. Passes of a stage whose layers draw
 * per sample (dropout in training, tr_layer_type.draws) and backwards that report to a
 * grad-ready hook (data parallelism) run eagerly, and so does everything on host devices.
 * A capture that fails for any reason turns the stage's replays off: the same work runs
 * eagerly, nothing lost or done twice, and tr_stage_graphs says why. */
#define TR_GRAPHS_MAP(X)  \
  X(TR_GRAPHS_ON, "on")   \
  X(TR_GRAPHS_OFF, "off")

typedef enum tr_graphs {
#define TR__GRAPHS_ENUM(name, text) name,
  TR_GRAPHS_MAP(TR__GRAPHS_ENUM)
#undef TR__GRAPHS_ENUM
  TR_GRAPHS_COUNT
} tr_graphs;

/* "on", "off" ("?" otherwise); parse: 0, or TR_EINVAL (NULL or an unknown name). */
TR_API const char *tr_graphs_name(tr_graphs g);
TR_API int tr_graphs_parse(const char *name, tr_graphs *out);

typedef struct tr_stage_config {
  int first, end;       /* layers [first, end); end 0: to the last layer */
  int batch;            /* samples per micro-batch (rows: batch x ctx) */
  int slots;            /* micro-batches whose activations are kept at once; 0: none, the
                           stage holds parameters, gradients and optimizer state only (a
                           parameter server's copy) and cannot run forward or backward */
  int recompute;        /* activation recomputation: a slot keeps its input (and output)
                           only, and backward computes the layers' activations again, into
                           one area shared by the slots; results are bitwise the same */
  int split;            /* room for backward in two halves (tr_stage_backward_input, then
                           tr_stage_backward_weight): a slot also keeps the gradients its
                           weight half needs. fp32 only: refused with bf16 precision */
  int global_batch;     /* samples per optimizer step over all micro-batches and replicas:
                           the loss is scaled by 1/global_batch; 0: batch */
  uint64_t seed;        /* initialisation */
  tr_optim_config optim;
  tr_stage_shard shard; /* ZeRO stage 1: the part of the optimizer this stage holds */
  tr_precision_config precision;
  tr_graphs graphs;     /* TR_GRAPHS_ON (the default) or TR_GRAPHS_OFF, above */
  /* Tensor parallelism: the model is a member's (tr_model_shard) and this its comm, lent to
   * its split layers and loss; NULL: none (the model is held whole). A split layer of the
   * stage must be part rank of size, the comm's (TR_EINVAL naming the layer otherwise;
   * tr_stage_plan, which runs nothing, needs none); a stage with one runs its passes
   * eagerly (the members meet on the host). The stage's numel and memory are the
   * member's; every member is fed the same batch. */
  const tr_tensor_comm *tensor;
} tr_stage_config;

/* The whole model, its workload batch and optimizer, one slot, seed 0. */
TR_API tr_stage_config tr_stage_defaults(const tr_model *m);

typedef struct tr_stage tr_stage;

typedef struct tr_stage_info {
  int first, end, batch, rows, slots, global_batch;
  int is_first, is_last;
  size_t input_bytes;   /* per slot: tokens int32 (batch, ctx) or floats (rows, in) */
  size_t output_bytes;  /* per slot: floats (rows, out of layer end-1) */
  size_t target_bytes;  /* per slot, last stage only */
  size_t numel;         /* elements of parameters, and of gradients */
  size_t offset;        /* of the stage's first element in the model's parameter space */
  size_t shard_offset, shard_numel; /* the parameters the optimizer updates: elements
                           [shard_offset, shard_offset + shard_numel) (unsharded: 0, numel) */
  size_t state_numel;   /* optimizer state: 0 (SGD), shard_numel (momentum), 2 shard_numel
                           (AdamW: m, then v) */
  size_t slot_bytes;    /* device memory per slot */
  size_t scratch_bytes; /* device memory shared by the slots */
  size_t work_bytes;    /* recompute: the activations of one micro-batch, shared by the
                           slots; else 0 */
  size_t params16_bytes;/* the weights' bf16 copy (bf16 only, and only with slots) */
  tr_precision precision;
} tr_stage_info;

/* Allocates everything the stage will ever use and initialises the parameters (PyTorch's
 * defaults, from cfg->seed) and the optimizer state (zeros), on `d`'s compute stream. The
 * model must outlive the stage. On failure *out is NULL and err (when not NULL) says why. */
TR_API int tr_stage_open(tr_stage **out, const tr_model *m, tr_device *d, const tr_stage_config *cfg,
                  char *err, size_t err_size);
TR_API void tr_stage_close(tr_stage *st);
/* The memory plan tr_stage_open would make for `cfg` (the same checks, the same *info),
 * without a device and without allocating its memory: for finding before a run whether its
 * stages fit (actors/memory_need.c). *opt_scratch_bytes: the optimizer's scratch, which the
 * info does not count. 0, or tr_stage_open's refusals of the configuration. */
TR_API int tr_stage_plan(const tr_model *m, const tr_stage_config *cfg, tr_stage_info *info,
                         size_t *opt_scratch_bytes, char *err, size_t err_size);


TR_API const tr_stage_info *tr_stage_info_of(const tr_stage *st);
TR_API const tr_model *tr_stage_model(const tr_stage *st);
TR_API tr_device *tr_stage_device(const tr_stage *st);
TR_API tr_stream *tr_stage_stream(const tr_stage *st);
TR_API const char *tr_stage_error(const tr_stage *st);

/* The one allocation of each (device memory, numel / state_numel elements). */
TR_API float *tr_stage_params(tr_stage *st);
TR_API float *tr_stage_grads(tr_stage *st);
TR_API float *tr_stage_opt_state(tr_stage *st);  /* NULL for SGD */
/* Layer `layer` (first <= layer < end) as [offset, offset + numel) of those allocations. */
TR_API void tr_stage_layer_span(const tr_stage *st, int layer, size_t *offset, size_t *numel);

/* Per-slot device buffers (0 <= slot < slots): where the caller puts the micro-batch's
 * input (and, last stage, targets; other stages, the gradient of the output) before forward
 * (backward); where forward leaves the output and (last stage) the loss scalar. */
TR_API void *tr_stage_input(tr_stage *st, int slot);
TR_API void *tr_stage_target(tr_stage *st, int slot);   /* NULL unless last */
TR_API float *tr_stage_dout(tr_stage *st, int slot);    /* NULL when last */
TR_API const float *tr_stage_output(const tr_stage *st, int slot);
TR_API const float *tr_stage_loss(const tr_stage *st, int slot); /* NULL unless last */

/* The slot's micro-batch holds samples [first_sample, first_sample + batch) of the data set
 * (tr_data_shard's range). Random layers need it in training: their forward fails until it
 * is set. It holds for the slot's forward and backward alike, until set again. */
TR_API void tr_stage_set_samples(tr_stage *st, int slot, uint64_t first_sample);
/* Training (on, the default) or evaluation (off: dropout is the identity). Forward and
 * backward of one micro-batch must see the same setting. */
TR_API void tr_stage_set_training(tr_stage *st, int on);

/* Forward of the slot's micro-batch through the stage's layers (and the loss when last). */
TR_API int tr_stage_forward(tr_stage *st, int slot);
/* Backward of the slot's micro-batch, from the loss (last stage) or tr_stage_dout: adds its
 * gradients to the stage's. *dinput (when dinput is not NULL) receives the gradient of the
 * stage's input (input_bytes, floats), or NULL for the first stage; it stays valid through
 * the next backward call too (two buffers alternate), so sending it can overlap that one. */
TR_API int tr_stage_backward(tr_stage *st, int slot, const float **dinput);
/* The same in two halves (a stage opened with `split`), as zero-bubble schedules run it:
 * the input's gradient first (*dinput as above; what is still due is kept in the slot),
 * the weights' later, before the slot is used again. Each layer kind splits as its table
 * says (tr_layer_type.h); the sums are bitwise tr_stage_backward's. The grad-ready hook is
 * called in the second half. */
TR_API int tr_stage_backward_input(tr_stage *st, int slot, const float **dinput);
TR_API int tr_stage_backward_weight(tr_stage *st, int slot);

/* CUDA graphs (tr_stage_config.graphs): how many passes were captured and replayed so far,
 * and "" or, once a capture failed and the stage went back to eager passes, why. */
typedef struct tr_stage_graphs_figures {
  int64_t captures, launches;
  const char *note;
} tr_stage_graphs_figures;
TR_API tr_stage_graphs_figures tr_stage_graphs(const tr_stage *st);
/* Makes the stage's next capture fail as a capture that went wrong would (tests of the
 * fallback: the same results, eagerly). */
TR_API void tr_stage_graphs_fail_next(tr_stage *st);

/* Called after the backward (split: the weight half) of each layer has been issued, last
 * layer first: its gradient span (tr_stage_layer_span) is then final for this micro-batch
 * (data parallelism starts reducing it once the last micro-batch of the step reports it).
 * NULL: none. */
typedef void (*tr_grad_ready_fn)(void *arg, tr_stage *st, int layer);
TR_API void tr_stage_on_grad_ready(tr_stage *st, tr_grad_ready_fn fn, void *arg);

/* ---- optimizer ------------------------------------------------------------------------------ */

TR_API int tr_stage_zero_grads(tr_stage *st);
/* out[0] (device, this device) = (or += when accumulate) the sum of squared gradients of
 * the shard (the whole stage unless sharded): the shares of the shards of every stage add
 * up to the global norm's square. */
TR_API int tr_stage_grad_sumsq(tr_stage *st, float *out, int accumulate);
/* gradients *= factor[0] (device scalar on this device) */
TR_API int tr_stage_scale_grads(tr_stage *st, const float *factor);
/* One optimizer update of the stage (of its shard's parameters, when sharded). With
 * clipping configured, the gradients are first scaled by min(1, clip / sqrt(
 * global_sumsq[0])); global_sumsq NULL: this stage's own sum (a model on one unsharded
 * stage). Counts the step (AdamW's bias correction uses it). */
TR_API int tr_stage_step(tr_stage *st, const float *global_sumsq);
TR_API void tr_stage_set_lr(tr_stage *st, float lr);
/* New hyperparameters (learning-rate schedules, asynchrony's momentum correction) for the
 * same kind of optimizer; TR_EINVAL for another kind (its state would not fit). */
TR_API int tr_stage_set_optim(tr_stage *st, const tr_optim_config *o);
TR_API const tr_optim_config *tr_stage_optim(const tr_stage *st);
TR_API int64_t tr_stage_step_count(const tr_stage *st);
TR_API void tr_stage_set_step_count(tr_stage *st, int64_t steps); /* resuming from a checkpoint */


/* ---- asynchronous training ------------------------------------------------------------------ */

/* From now on the optimizer (tr_stage_step, clipping, tr_stage_grad_sumsq, zeroing) works on
 * `grads` (numel floats this device can read and write, e.g. a worker's pushed gradient
 * read in place by a parameter server) instead of the stage's own; NULL: its own again. */
TR_API void tr_stage_use_grads(tr_stage *st, float *grads);
/* Hogwild!: `st` reads and updates `owner`'s parameters and optimizer state from now on, with
 * no lock (its own stay unused). The same layers of the same model, the same optimizer kind,
 * on devices that reach each other's memory (host devices); TR_EINVAL otherwise. `owner`
 * must outlive every use of `st`. */
TR_API int tr_stage_share_params(tr_stage *st, const tr_stage *owner);

/* ---- host copies (checkpoints, consistency checks), asynchronous on the stream ---------- */

typedef enum tr_stage_buffer {
  TR_STAGE_PARAMS,    /* numel floats */
  TR_STAGE_GRADS,     /* numel floats */
  TR_STAGE_OPT_STATE  /* state_numel floats (of the shard, when sharded) */
} tr_stage_buffer;

/* host must hold the buffer's elements; it is complete once the stream has run the copy
 * (tr_stream_synchronize(tr_stage_stream(st)), or an event). */
TR_API int tr_stage_download(tr_stage *st, tr_stage_buffer which, float *host);
TR_API int tr_stage_upload(tr_stage *st, tr_stage_buffer which, const float *host);

#ifdef __cplusplus
}
#endif
#endif
