/* stage_impl.h — the inside of a tr_stage, shared by the stage's files (stage.c, stage_open.c,
 * stage_loss.c, stage_passes.c, stage_error.c) and optim.c and measure.c. */
#ifndef TR_STAGE_IMPL_H
#define TR_STAGE_IMPL_H

#include "models_impl.h"
#include "replay.h"
#include "tr_model.h"
#include "tr_stage.h"

typedef struct tr__stage_layer {
  const tr_layer_spec *spec;
  int index;              /* in the model */
  int t0;                 /* its tensors: the stage's tensor t0 onwards */
  size_t act_off;         /* its activations, from a slot's start (recompute: the work
                             area's) (floats) */
  size_t act16_off;       /* its bf16 activations (bf16), likewise (floats) */
  uint64_t seed;          /* its random key */
  size_t keep_off;        /* split: what its B half keeps for its W half, from a slot's start */
  size_t dout_off;        /* split: the gradient of its output kept for its W half, from a
                             slot's start; NO_DOUT where the slot's dout serves, or no W half */
} tr__stage_layer;

#define TR__NO_DOUT SIZE_MAX

struct tr_stage {
  const tr_model *m;
  tr_device *dev;
  tr_stream *s;
  tr_stage_info info;
  tr_optim_config optim;
  int64_t steps;
  float *params, *grads, *state; /* one allocation each, or what the stage uses instead */
  float *opt_scratch;            /* the optimizer's (tr_optim_type.scratch_copies), or NULL */
  float *own[3];                  /* its own: params, grads, state (freed at close) */
  float *slots;                  /* slots x slot_stride floats */
  size_t slot_stride;
  uint64_t *samples;             /* per slot: the first sample it holds, or TR_SAMPLES_UNKNOWN */
  int training;
  size_t in_off, target_off, dout_off, loss_off; /* within a slot */
  size_t loss_keep_off;          /* last stage: what the loss keeps (tr_loss_type.keep_floats),
                                    after the layers' activations */
  size_t out_off;                /* recompute: the output, kept in the slot to be sent */
  int recompute, split;
  float *work;                   /* recompute: one micro-batch's activations */
  float *scratch;                /* one allocation: */
  float *g[2];                   /*   activation gradients, alternating */
  float *dinput[2];              /*   the stage's input gradient, alternating */
  int dinput_next;
  float *layer_scratch;          /*   the layers' (tr_layer_ctx.scratch) */
  tr_bf16 *layer_scratch16;      /*   and their bf16 scratch (bf16 only) */
  float *scalars;                /*   [0] sum of squares, [1] clip factor, [2] a loss
                                      recomputed (recompute) */
  int nl;
  tr__stage_layer *layers;
  float **tensors;               /* per tensor of the stage: its parameters, then (after nt) */
  int nt;                        /*   its gradients */
  tr_bf16 *params16;             /* bf16: the parameters' copy, one allocation (slots only) */
  const tr_bf16 **tensors16;     /*   per tensor, its copy */
  int params16_stale;            /*   made again at the next forward */
  tr__replay replay;             /* CUDA graphs: which passes are captured (replay.h) */
  int draws;                     /*   a layer draws per sample: training passes run eagerly */
  int weight_layers;             /* a layer has work in the weight half (tr_layer_splits) */
  int replay_fail_next;          /*   tr_stage_graphs_fail_next */
  const tr_tensor_comm *tensor;  /* tensor parallelism: lent to split layers and the loss */
  tr_grad_ready_fn ready;
  void *ready_arg;
  char err[512];
  char layer_err[256];           /* a layer's own account of its failure (tr_layer_fail) */
};

/* Whether the stage runs its GEMMs in bf16 (tr_stage_config.precision.gemm). */
static inline int tr__stage_bf16(const tr_stage *st) {
  return st->info.precision == TR_PRECISION_BF16;
}

/* Where a slot's buffers start. */
static inline float *tr__slot_base(const tr_stage *st, int slot) {
  TR_ASSERT(slot >= 0 && slot < st->info.slots);
  return st->slots + (size_t)slot * st->slot_stride;
}

/* Where the slot's micro-batch has its activations: in the slot, or in the work area. */
static inline float *tr__acts_of(const tr_stage *st, int slot) {
  return st->recompute ? st->work : tr__slot_base(st, slot);
}

/* Layer i's input: the stage's, or the output (the start of the activations) of the layer
 * before; i = nl: the stage's output. */
static inline const float *tr__layer_in(const tr_stage *st, int i, int slot) {
  return i ? tr__acts_of(st, slot) + st->layers[i - 1].act_off
           : tr__slot_base(st, slot) + st->in_off;
}

/* ---- opening (stage_open.c) ---- */

/* Tensor parallelism: st->tensor = cfg->tensor, which each split layer's part and parts must
 * be the rank and size of; else TR_EINVAL, err saying which layer. */
int tr__stage_check_tensor(tr_stage *st, const tr_stage_config *cfg, char *err, size_t size);
/* The parameters of layers [first, end) as the whole model starts them under `seed`. */
int tr__stage_init_params(tr_stage *st, uint64_t seed);

/* ---- passes (stage_passes.c) ---- */

/* A pass: queues a micro-batch's work on the stage's stream (dfirst: where the stage's input
 * gradient goes, or NULL). */
typedef int (*tr__pass_fn)(tr_stage *st, int slot, float *dfirst);
/* Runs fn eagerly, or records it and replays the recording (the same bits); pass is one of
 * replay.h's TR__PASS_..., parity which of the alternating input-gradient buffers it writes. */
int tr__stage_run_pass(tr_stage *st, int pass, int slot, int parity, tr__pass_fn fn,
                       float *dfirst);

/* ---- the loss (stage_loss.c) ---- */

/* A table's keep_floats or scratch_floats (NULL: 0) for the stage's micro-batch. */
size_t tr__stage_loss_floats(const tr_stage *st, size_t (*floats)(int N, int V));
/* loss[0] = the slot's scaled loss; then its gradient into dpred (rows x out floats). */
int tr__stage_loss_forward(tr_stage *st, int slot, float *loss);
int tr__stage_loss_backward(tr_stage *st, int slot, float *dpred);

/* Formats the stage's error ("stage [0,3) of gpt on host:0: <what>: <device's message>")
 * and returns rc (stage_error.c). */
int tr__stage_fail(tr_stage *st, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A caller's mistake, not the device's (tr_base.h, Misuse): "stage [f,e) of model: <what>" in
 * st's error (on stderr for st NULL), and `rc` back. tr__stage_slot: 0 when `slot` is one of
 * the stage's, else that refusal naming `call`. */
int tr__stage_misuse(tr_stage *st, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int tr__stage_slot(tr_stage *st, int slot, const char *call);
#define STAGE_GIVEN(st) \
  if ((st) == NULL) return tr__misuse(TR_EINVAL, "%s: st is NULL", __func__)
/* The same, with `why` (when not empty) in place of the device's message. */
int tr__stage_fail_why(tr_stage *st, int rc, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
