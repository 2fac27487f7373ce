/* tr_model.h — models as sequences of layers, and their optimizers.
 *
 * A tr_model is a description on the host: its layers (kinds and sizes), its loss, and the
 * layout of every parameter tensor in the model's one parameter space (names, shapes, element
 * offsets; each tensor starts on a 16-float boundary). Initialisation depends only on the
 * seed and each element's place in the whole model, so a model cut into stages (tr_stage.h:
 * layers [first, end) of a model on one device) holds exactly the parameters of the uncut
 * one.
 *
 *   tr_model *m;
 *   if (tr_model_named(&m, "simplenet", err, sizeof err)) ...;
 *   int cuts[3];
 *   tr_model_balance(m, 2, cuts);                       // two stages of about equal FLOPs
 *   tr_model_free(m);
 */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"
#include "tr_layer_type.h"
#include "tr_loss.h"  /* losses as tables */
#include "tr_optim.h" /* optimizers as tables */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models (layers: tr_layer_type.h) ----------------------------------------------------- */

typedef struct tr_model_spec {
  const char *name;           /* copied */
  int ctx;                    /* T: rows per sample (1 for plain vectors) */
  tr_loss_kind loss;          /* its table (tr_loss.h); NULL: MSE */
  int nlayers;
  const tr_layer_spec *layers; /* copied */
  int batch;                  /* default samples per step */
  tr_optim_config optim;      /* default optimizer (tr_optim.h); kind NULL: SGD */
} tr_model_spec;

typedef struct tr_model tr_model;

/* Checks the layers fit together (tr_layers_check: widths chain, a token kind only first,
 * each kind's own check, a block's width divisible by its heads, say) and deep-copies the
 * specs (composites' inner ones too); err names the layer at fault (or the argument: out or
 * spec NULL, nlayers below 1, layers NULL). The last layer's output
 * is what the loss reads: predictions (MSE) or logits (cross-entropy). */
TR_API int tr_model_new(tr_model **out, const tr_model_spec *spec, char *err, size_t err_size);
TR_API void tr_model_free(tr_model *m);

/* The workloads of docs/WORKLOADS.md, exactly (out NULL, a size out of range: TR_EINVAL,
 * said on stderr with what tr_model_new found): */
/* simplenet: Linear(10,100) -> ReLU -> Linear(100,1), MSE; SGD lr 0.01; batch 64 */
TR_API int tr_model_simplenet(tr_model **out);
/* mlp: depth x Linear(width,width), ReLU between (workload: 1024, 8); MSE; momentum 0.9,
 * lr 1e-3; batch 256 */
TR_API int tr_model_mlp(tr_model **out, int width, int depth);

typedef struct tr_gpt_config {
  int vocab, ctx, width, layers, heads, hidden;
} tr_gpt_config;
/* The workload: byte vocabulary 256, context 128, width 256, 4 blocks, 4 heads, MLP 1024. */
TR_API tr_gpt_config tr_gpt_defaults(void);
/* Embedding (+ learned positions) -> blocks -> layernorm -> Linear(width, vocab, no bias);
 * cross-entropy; AdamW lr 3e-4, betas 0.9/0.999, no weight decay; batch 8. NULL: defaults. */
TR_API int tr_model_gpt(tr_model **out, const tr_gpt_config *cfg);
/* "simplenet", "mlp" or "gpt", as above; TR_EINVAL naming the name otherwise. */
TR_API int tr_model_named(tr_model **out, const char *name, char *err, size_t err_size);

/* Of NULL: "", 0 or NULL; of a layer or tensor index the model lacks: NULL or 0 (a span 0
 * and 0), said on stderr. */
TR_API const char *tr_model_name(const tr_model *m);
TR_API int tr_model_layer_count(const tr_model *m);
TR_API const tr_layer_spec *tr_model_layer(const tr_model *m, int layer);
TR_API int tr_model_ctx(const tr_model *m);
TR_API tr_loss_kind tr_model_loss(const tr_model *m);
TR_API int tr_model_batch(const tr_model *m);
TR_API tr_optim_config tr_model_optim(const tr_model *m);
/* 1 when the input is tokens (int32, ctx per sample), 0 for floats (ctx x in per sample). */
TR_API int tr_model_token_input(const tr_model *m);
/* Bytes of one sample's input and target. */
TR_API size_t tr_model_input_bytes(const tr_model *m);
TR_API size_t tr_model_target_bytes(const tr_model *m);

/* Parameters, unpadded (what PyTorch would count), and the padded parameter space. */
TR_API size_t tr_model_param_count(const tr_model *m);
TR_API size_t tr_model_numel(const tr_model *m);
/* Layer `layer`'s tensors as one span [offset, offset + numel) of the parameter space. */
TR_API void tr_model_layer_span(const tr_model *m, int layer, size_t *offset, size_t *numel);
/* Forward FLOPs per sample of a layer, from its kind's table: matrix products only, 2 per
 * multiply-add. Linear: 2 T in out (T = ctx); block: 2 T (4 C^2 + 2 C H) for its four
 * projections plus 4 T^2 C for attention's q k^T and att v; element-wise layers, layernorm
 * and embedding: 0; residual: the sum of its inner layers'. A cost for cutting. */
TR_API double tr_model_layer_flops(const tr_model *m, int layer);
/* FLOPs of training one sample: 3 x the sum of tr_model_layer_flops (backward is two
 * products for each of forward's). What GFLOP/s figures count. */
TR_API double tr_model_train_flops(const tr_model *m);

typedef struct tr_tensor_info {
  char name[48];      /* "0.weight", "1.attn.qkv.weight", "5.wpe", "2.0.weight" (a residual's
                         first inner layer) */
  int layer;
  int ndim;           /* 1 or 2 */
  int64_t shape[2];
  size_t numel;
  size_t offset;      /* in the model's parameter space, a multiple of 16 */
} tr_tensor_info;

TR_API int tr_model_tensor_count(const tr_model *m);
TR_API const tr_tensor_info *tr_model_tensor(const tr_model *m, int index);
/* Tensors of layer `layer` are indices [*first, *first + *count). */
TR_API void tr_model_layer_tensors(const tr_model *m, int layer, int *first, int *count);

/* Layer boundaries that cut the model into `parts` stages whose costliest stage is as cheap
 * as possible: cuts[0] = 0 < cuts[1] < ... < cuts[parts] = layer count. The cost of a layer
 * is cost[layer] (>= 0: measured seconds, say), or tr_model_layer_flops for
 * tr_model_balance. TR_EINVAL when the model has fewer layers than parts, parts is below 1,
 * m, cost or cuts is NULL, or a cost is negative or not finite (said on stderr). */
TR_API int tr_model_balance(const tr_model *m, int parts, int *cuts);
TR_API int tr_model_balance_costs(const tr_model *m, const double *cost, int parts, int *cuts);

/* Times each layer's forward and backward on `d` for a micro-batch of `batch` samples, from
 * the calling thread (which becomes d's owner): cost[layer] in seconds, the fastest of `reps`
 * rounds over every layer after one that warms up, each layer a stage of its own on zeroed
 * inputs. For cutting by measured cost (tr_model_balance_costs). TR_EINTR, as soon as a layer
 * is done, once a signal is held during start-up (tr_signals_hold, tr_system.h). */
TR_API int tr_model_measure_layers(const tr_model *m, tr_device *d, int batch, int reps, double *cost,
                            char *err, size_t err_size);

/* Each pass of a layer, in seconds for a micro-batch (tr_model_measure_passes). */
typedef struct tr_layer_times {
  double forward;
  double backward;        /* both halves at once (tr_stage_backward) */
  double backward_input;  /* the input's gradient (tr_stage_backward_input) */
  double backward_weight; /* the weights' gradient (tr_stage_backward_weight) */
} tr_layer_times;

/* As tr_model_measure_layers, each pass timed on its own (each synchronised) and its median
 * round kept (what a run meets round after round, not its best): times[layer] for the
 * prediction of a step (tr_plan.h), whose zero-bubble schedules run the backward in its two
 * halves. The layers open as tr_stage_defaults says (fp32), with room for the
 * halves (tr_stage_config.split). A tensor member's model (tr_model_shard) is measured with
 * its group's comm (`tensor`; NULL for a whole model), every member at once from its own
 * thread, so that its times hold its collectives: each member's thread makes the same calls
 * in the same order. */
TR_API int tr_model_measure_passes(const tr_model *m, tr_device *d, const tr_tensor_comm *tensor,
                                   int batch, int reps, tr_layer_times *times, char *err,
                                   size_t err_size);

/* ---- tensor parallelism (tr_layer_type.h) ----------------------------------------------- */

/* Member `part` of a tensor group of `parts`: a model of the same layers, each split as its
 * kind's shard says, named like m's. The plan, in the order of the layers:
 *   - a linear layer followed, through relu, gelu or dropout layers, by another linear one:
 *     the first COLUMN-parallel (the member holds out/T of its output features: those rows
 *     of the weight and of the bias), the second ROW-parallel (in/T of its input features:
 *     those columns of the weight; the bias whole), the layers between on the member's
 *     columns (a dropout drawing, element by element, the whole layer's mask). In forward the
 *     row layer all-reduces its partial products and adds the bias once, after; in backward
 *     the column layer all-reduces its input's gradient (Megatron's g and f): one all-reduce
 *     each way per pair, none backward when the column layer is the model's first (its
 *     input's gradient is not wanted);
 *   - the last layer, a linear one outside a pair: COLUMN under a vocab_parallel loss (the
 *     loss reduces across the group, tr_loss_ctx.tensor), else held whole;
 *   - a residual: its inner layers planned the same way inside it;
 *   - any other kind with a shard op (the transformer block, the embedding): its own split
 *     (TR_SPLIT_SELF); without one, held whole, every member computing it alike.
 * Nothing is padded: a width that does not divide by parts is refused naming the layer and
 * what ("layer 2 (linear): 10 output features across 4 members"; "layer 5.0 (linear): ..." in
 * a residual). Its tensors are parts of m's (tr_model_tensor_part) under m's names, start as
 * their elements of m's do under the same seed, and the members' parts join into m's
 * checkpoint (tr_tensor_part_copy). A stage of the member takes its member's comm
 * (tr_stage_config.tensor) and runs its passes eagerly (no CUDA graphs: the members meet on
 * the host). The member's results are the whole model's within rounding (sums split across
 * members); parts 1: a copy of m, bitwise the same. TR_EINVAL also for m already a member.
 * Free with tr_model_free; it does not need m afterwards. */
TR_API int tr_model_shard(const tr_model *m, int part, int parts, tr_model **member, char *err,
                          size_t err_size);
/* Where a member's tensor `index` lies in the whole one (tr_tensor_list_add_part): parts 0
 * for a tensor held whole. */
typedef struct tr_tensor_part {
  int axis, groups, part, parts;
  int64_t whole[2];   /* the whole tensor's shape */
} tr_tensor_part;
TR_API tr_tensor_part tr_model_tensor_part(const tr_model *member, int index);
/* Moves a part's elements between host copies of the whole tensor (whole, p->whole's shape)
 * and of the part (its shape in the member's model): into `whole` when to_whole, else into
 * `part`. Checkpoints: each member writes its parts into the whole tensor, and a whole
 * tensor resumes into any layout. p->parts 0 (held whole): the whole tensor copied. */
TR_API void tr_tensor_part_copy(const tr_tensor_part *p, float *whole, float *part, int to_whole);

/* The tensor comms of a group of n devices of one process, comms[i] for devs[i], each used
 * only on its device's owner thread. Every collective is a meeting of the members' threads
 * (a barrier, twice): host devices read each other's buffers directly and reduce in member
 * order, so every member gets bitwise the same result; CUDA devices synchronise their
 * streams and copy the others' buffers in with tr_memcpy_peer (correct, not fast; NCCL is
 * not used yet, and max there is within a rounding). Devices of one kind, each once, that
 * reach each other (tr_device_can_access_peer); TR_EINVAL naming them otherwise. Members
 * that call different collectives or sizes all get TR_EINVAL, and the group goes on. Closed
 * together by tr_tensor_comms_close, once no member uses them. */
TR_API int tr_tensor_comms_open(tr_device *const *devs, int n, tr_tensor_comm **comms,
                                char *err, size_t err_size);
TR_API void tr_tensor_comms_close(tr_tensor_comm **comms, int n);
/* A member that fails, or a run that stops, says so from any thread: every collective of
 * the group then returns TR_ESTATE at once (those waiting for the others too) instead of
 * waiting for a member that will not come. The group stays unusable until closed. */
TR_API void tr_tensor_comm_abort(const tr_tensor_comm *c);
/* Collectives a comm ran, and the bytes its member sent in them as the ring algorithm would
 * send them (NCCL's): an all-reduce of n floats 2 (T-1)/T x 4n bytes, an all-gather or a
 * reduce-scatter of n-float parts (T-1) x 4n; a group of one sends none. Any thread. */
TR_API void tr_tensor_comm_counts(const tr_tensor_comm *c, uint64_t *collectives,
                                  uint64_t *bytes_sent);

#ifdef __cplusplus
}
#endif
#endif
