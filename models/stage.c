/* stage.c — layers [first, end) of a model on one device: the forward and backward passes
 * and the accessors of a stage's buffers. Every layer is reached through its kind's table
 * (tr_layer_type.h) and nothing else. The stage's opening (its memory plan, allocations and
 * parameters' first values) and closing live in stage_open.c, the optimizer in optim.c, the
 * loss in stage_loss.c, the passes' replays from CUDA graphs in stage_passes.c, the text of
 * its failures in stage_error.c. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_impl.h"

/* ---- errors ---------------------------------------------------------------------------------- */

/* A layer's failure, in its own words when it gave some (tr_layer_fail). */
static int layer_fail(tr_stage *st, int rc, const char *pass, const tr__stage_layer *L) {
  return tr__stage_fail_why(st, rc, st->layer_err, "%s of layer %d (%s)", pass, L->index,
                            L->spec->type->name);
}

/* ---- accessors ------------------------------------------------------------------------------------- */

/* Of NULL: NULL, and the slots' buffers of a slot the stage lacks NULL, said (tr_stage.h). */
const tr_stage_info *tr_stage_info_of(const tr_stage *st) { return st ? &st->info : NULL; }
const tr_model *tr_stage_model(const tr_stage *st) { return st ? st->m : NULL; }
tr_device *tr_stage_device(const tr_stage *st) { return st ? st->dev : NULL; }
tr_stream *tr_stage_stream(const tr_stage *st) { return st ? st->s : NULL; }
float *tr_stage_params(tr_stage *st) { return st ? st->params : NULL; }
float *tr_stage_grads(tr_stage *st) { return st ? st->grads : NULL; }
float *tr_stage_opt_state(tr_stage *st) { return st ? st->state : NULL; }

void tr_stage_layer_span(const tr_stage *st, int layer, size_t *offset, size_t *numel) {
  if (offset == NULL || numel == NULL)
    return (void)tr__misuse(0, "tr_stage_layer_span: %s is NULL", offset ? "numel" : "offset");
  *offset = *numel = 0;
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_layer_span: st is NULL");
  if (layer < st->info.first || layer >= st->info.end)
    return (void)tr__misuse(0, "tr_stage_layer_span: layer %d: the stage holds layers [%d,%d)",
                            layer, st->info.first, st->info.end);
  tr_model_layer_span(st->m, layer, offset, numel);
  *offset -= st->info.offset;
}

/* A slot's buffers: `slot` is checked first (NULL for one the stage lacks, said). */
#define SLOT_OR_NULL(st, slot) \
  if (tr__stage_slot((tr_stage *)(st), slot, __func__)) return NULL

void *tr_stage_input(tr_stage *st, int slot) {
  SLOT_OR_NULL(st, slot);
  return tr__slot_base(st, slot) + st->in_off;
}
void *tr_stage_target(tr_stage *st, int slot) {
  SLOT_OR_NULL(st, slot);
  return st->info.is_last ? tr__slot_base(st, slot) + st->target_off : NULL;
}
float *tr_stage_dout(tr_stage *st, int slot) {
  SLOT_OR_NULL(st, slot);
  return st->info.is_last ? NULL : tr__slot_base(st, slot) + st->dout_off;
}
const float *tr_stage_loss(const tr_stage *st, int slot) {
  SLOT_OR_NULL(st, slot);
  return st->info.is_last ? tr__slot_base(st, slot) + st->loss_off : NULL;
}

void tr_stage_on_grad_ready(tr_stage *st, tr_grad_ready_fn fn, void *arg) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_on_grad_ready: st is NULL");
  st->ready = fn;
  st->ready_arg = arg;
}

void tr_stage_set_samples(tr_stage *st, int slot, uint64_t first_sample) {
  if (tr__stage_slot(st, slot, __func__)) return;
  st->samples[slot] = first_sample;
}

void tr_stage_set_training(tr_stage *st, int on) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_set_training: st is NULL");
  st->training = on != 0;
}

/* With recompute, the last stage's output lives in the work area until the next pass. */
const float *tr_stage_output(const tr_stage *st, int slot) {
  SLOT_OR_NULL(st, slot);
  if (st->recompute && !st->info.is_last) return tr__slot_base(st, slot) + st->out_off;
  return tr__layer_in(st, st->nl, slot);
}

/* ---- forward and backward ----------------------------------------------------------------------- */

/* What layer L's kind needs for the slot's micro-batch, its input at x. */
static tr_layer_ctx layer_ctx(tr_stage *st, const tr__stage_layer *L, int slot, const void *x) {
  st->layer_err[0] = 0;
  const int mixed = tr__stage_bf16(st);
  return (tr_layer_ctx){.s = st->s, .l = L->spec, .B = st->info.batch, .T = st->m->ctx,
                        .p = st->tensors + L->t0, .g = st->tensors + st->nt + L->t0, .x = x,
                        .act = tr__acts_of(st, slot) + L->act_off, .scratch = st->layer_scratch,
                        .seed = L->seed, .first_sample = st->samples[slot],
                        .training = st->training, .err = st->layer_err,
                        .err_size = sizeof st->layer_err,
                        .keep = st->split ? tr__slot_base(st, slot) + L->keep_off : NULL,
                        .precision = st->info.precision,
                        .p16 = mixed ? st->tensors16 + L->t0 : NULL,
                        .act16 = mixed ? (tr_bf16 *)(tr__acts_of(st, slot) + L->act16_off) : NULL,
                        .scratch16 = st->layer_scratch16,
                        .tensor = L->spec->parts > 1 ? st->tensor : NULL};
}

/* The layers' forward of the slot's micro-batch; the loss into `loss` (last stage). */
static int run_forward(tr_stage *st, int slot, float *loss) {
  for (int i = 0; i < st->nl; i++) {
    const tr__stage_layer *L = &st->layers[i];
    const tr_layer_ctx c = layer_ctx(st, L, slot, tr__layer_in(st, i, slot));
    int rc = L->spec->type->forward(&c);
    if (rc) return layer_fail(st, rc, "forward", L);
  }
  if (!st->info.is_last || loss == NULL) return 0;
  return tr__stage_loss_forward(st, slot, loss);
}

static int forward_pass(tr_stage *st, int slot, float *dfirst) {
  (void)dfirst;
  float *base = tr__slot_base(st, slot);
  TR__TRY(run_forward(st, slot, base + st->loss_off));
  if (!st->recompute || st->info.is_last) return 0;
  const size_t bytes = st->info.output_bytes;
  int rc = tr_memcpy(st->s, base + st->out_off, tr__layer_in(st, st->nl, slot), bytes, TR_COPY_D2D);
  return rc ? tr__stage_fail(st, rc, "keeping the output") : 0;
}

int tr_stage_forward(tr_stage *st, int slot) {
  TR__TRY(tr__stage_slot(st, slot, __func__));
  if (st->params16 && st->params16_stale) { /* the step's weights, once */
    int rc = tr_to_bf16(st->s, st->params16, st->params, st->info.numel);
    if (rc) return tr__stage_fail(st, rc, "weights to bf16");
    st->params16_stale = 0;
  }
  return tr__stage_run_pass(st, TR__PASS_FORWARD, slot, 0, forward_pass, NULL);
}

/* Recompute: the slot's activations again, into the work area (and what the loss keeps
 * for its gradient, cross-entropy's probabilities; the loss itself goes to a scalar of the
 * scratch). */
static int recompute(tr_stage *st, int slot) {
  if (!st->recompute) return 0;
  const tr_loss_type *loss = st->m->loss;
  const bool keeps = st->info.is_last && tr__stage_loss_floats(st, loss->keep_floats) > 0;
  return run_forward(st, slot, keeps ? st->scalars + 2 : NULL);
}

/* The gradient of the last layer's output: from the loss (last stage), into `to`; else
 * what the next stage sent. */
static int loss_gradient(tr_stage *st, int slot, float *to, const float **dout) {
  if (!st->info.is_last) {
    *dout = tr__slot_base(st, slot) + st->dout_off;
    return 0;
  }
  *dout = to;
  return tr__stage_loss_backward(st, slot, to);
}

static int backward_pass(tr_stage *st, int slot, float *dfirst) {
  const float *dout;
  TR__TRY(recompute(st, slot));
  TR__TRY(loss_gradient(st, slot, st->g[0], &dout));
  for (int i = st->nl - 1; i >= 0; i--) {
    const tr__stage_layer *L = &st->layers[i];
    float *dinp = i ? (dout == st->g[0] ? st->g[1] : st->g[0]) : dfirst;
    const tr_layer_ctx c = layer_ctx(st, L, slot, tr__layer_in(st, i, slot));
    int rc = L->spec->type->backward(&c, dout, dinp);
    if (rc) return layer_fail(st, rc, "backward", L);
    if (st->ready) st->ready(st->ready_arg, st, L->index);
    dout = dinp;
  }
  return 0;
}

/* The stage's input gradient goes to one of two buffers, alternately. */
static float *next_dinput(const tr_stage *st) {
  return st->info.is_first ? NULL : st->dinput[st->dinput_next];
}

static void dinput_done(tr_stage *st, float *dfirst, const float **dinput) {
  if (dfirst) st->dinput_next ^= 1;
  if (dinput) *dinput = dfirst;
}

int tr_stage_backward(tr_stage *st, int slot, const float **dinput) {
  TR__TRY(tr__stage_slot(st, slot, __func__));
  float *dfirst = next_dinput(st);
  TR__TRY(tr__stage_run_pass(st, TR__PASS_BACKWARD, slot, st->dinput_next, backward_pass, dfirst));
  dinput_done(st, dfirst, dinput);
  return 0;
}

/* Split: the gradient of layer i's output as its W half reads it. */
static const float *kept_dout(tr_stage *st, int i, int slot) {
  const tr__stage_layer *L = &st->layers[i];
  return tr__slot_base(st, slot) + (L->dout_off != TR__NO_DOUT ? L->dout_off : st->dout_off);
}

static int backward_input_pass(tr_stage *st, int slot, float *dfirst) {
  const float *dout;
  const int last = st->nl - 1;
  TR__TRY(recompute(st, slot));
  const size_t kept = st->layers[last].dout_off; /* set on the last stage when it splits */
  TR__TRY(loss_gradient(st, slot, kept != TR__NO_DOUT ? tr__slot_base(st, slot) + kept : st->g[0],
                        &dout));
  for (int i = last; i >= 0; i--) {
    const tr__stage_layer *L = &st->layers[i];
    /* the gradient of the layer before's output: kept for its W half where it has one */
    float *dinp = !i ? dfirst
                  : st->layers[i - 1].dout_off != TR__NO_DOUT
                      ? tr__slot_base(st, slot) + st->layers[i - 1].dout_off
                      : dout == st->g[0] ? st->g[1] : st->g[0];
    const tr_layer_ctx c = layer_ctx(st, L, slot, tr__layer_in(st, i, slot));
    int rc = tr_layer_backward_input(&c, dout, dinp);
    if (rc) return layer_fail(st, rc, "backward (input)", L);
    dout = dinp;
  }
  return 0;
}

/* The halves need room kept for the weights' half (tr_stage_config.split). */
static int split_given(tr_stage *st, int slot, const char *call) {
  TR__TRY(tr__stage_slot(st, slot, call));
  if (st->split) return 0;
  return tr__stage_misuse(st, TR_EINVAL, "%s: the stage was opened without split "
                          "(tr_stage_config.split): use tr_stage_backward", call);
}

int tr_stage_backward_input(tr_stage *st, int slot, const float **dinput) {
  TR__TRY(split_given(st, slot, __func__));
  float *dfirst = next_dinput(st);
  TR__TRY(tr__stage_run_pass(st, TR__PASS_BACKWARD_INPUT, slot, st->dinput_next, backward_input_pass,
                   dfirst));
  dinput_done(st, dfirst, dinput);
  return 0;
}

static int backward_weight_pass(tr_stage *st, int slot, float *dfirst) {
  (void)dfirst;
  if (st->weight_layers) TR__TRY(recompute(st, slot)); /* the layers' inputs, again */
  for (int i = st->nl - 1; i >= 0; i--) {
    const tr__stage_layer *L = &st->layers[i];
    if (tr_layer_splits(L->spec)) {
      const tr_layer_ctx c = layer_ctx(st, L, slot, tr__layer_in(st, i, slot));
      int rc = tr_layer_backward_weight(&c, kept_dout(st, i, slot));
      if (rc) return layer_fail(st, rc, "backward (weights)", L);
    }
    if (st->ready) st->ready(st->ready_arg, st, L->index);
  }
  return 0;
}

int tr_stage_backward_weight(tr_stage *st, int slot) {
  TR__TRY(split_given(st, slot, __func__));
  return tr__stage_run_pass(st, TR__PASS_BACKWARD_WEIGHT, slot, 0, backward_weight_pass, NULL);
}
