/* stage.c — layers [first, end) of a model on one device: the memory plan made at open
 * (parameters, gradients, optimizer state, per-slot activations, shared backward scratch,
 * and in bf16 the weights' copy and the layers' bf16 activations and scratch), and the
 * forward and backward passes. Every layer is reached through its kind's table
 * (tr_layer_type.h) and nothing else. The optimizer lives in optim.c, the loss in
 * stage_loss.c, the passes' replays from CUDA graphs in stage_passes.c, the text of its
 * failures in stage_error.c, the parameters' initialisation in stage_init.c. */
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

/* ---- the memory plan ---------------------------------------------------------------------------- */

/* floats (or int32 tokens) of one row of the stage's input */
static size_t input_row(const tr_stage *st) {
  const tr_layer_spec *l = &st->m->layers[st->info.first];
  return l->type->token_input ? 1 : (size_t)l->in;
}

static int bf16(const tr_stage *st) { return st->info.precision == TR_PRECISION_BF16; }

/* The layer's bf16 elements: per micro-batch (act) and shared (scratch), 0 in fp32. */
static void layer_bf16(const tr_stage *st, const tr_layer_spec *l, size_t *act, size_t *scratch) {
  *act = *scratch = 0;
  if (bf16(st)) tr_layer_bf16_elems(l, st->info.batch, st->m->ctx, act, scratch);
}

/* Floats that hold n bf16, 64-byte aligned. */
static size_t bf16_floats(size_t n) { return tr__align_bf16(n) / 2; }

/* One micro-batch's activations from `at` on: each layer's (and its bf16 copies), then what
 * the loss keeps (cross-entropy: its probabilities). In each slot, or (recompute) once, in
 * the work area. */
static size_t plan_acts(tr_stage *st, size_t at) {
  const tr_model *m = st->m;
  const tr_stage_info *in = &st->info;
  for (int i = 0; i < st->nl; i++) {
    tr__stage_layer *L = &st->layers[i];
    size_t act16, scratch16;
    layer_bf16(st, L->spec, &act16, &scratch16);
    L->act_off = at;
    at += tr__align_floats(tr_layer_act_floats(L->spec, in->batch, m->ctx));
    L->act16_off = at;
    at += bf16_floats(act16);
  }
  if (in->is_last) {
    st->loss_keep_off = at;
    at += tr__align_floats(tr__stage_loss_floats(st, m->loss->keep_floats));
  }
  return at;
}

/* Split: what layer L's W half needs beyond the activations, from `at` on. The gradient of
 * its output is kept but where the slot's dout holds it (the last layer of a stage that is
 * not the model's last). */
static size_t plan_keep(tr_stage *st, tr__stage_layer *L, bool last_layer, size_t at) {
  const tr_stage_info *in = &st->info;
  L->dout_off = TR__NO_DOUT;
  if (tr_layer_splits(L->spec) && (!last_layer || in->is_last)) {
    L->dout_off = at;
    at += tr__align_floats((size_t)in->rows * L->spec->out);
  }
  L->keep_off = at;
  return at + tr__align_floats(tr_layer_keep_floats(L->spec, in->batch, st->m->ctx));
}

static size_t plan_slot(tr_stage *st) {
  const tr_model *m = st->m;
  const tr_stage_info *in = &st->info;
  const size_t rows = (size_t)in->rows;
  size_t at = 0;
  st->in_off = at;
  at += tr__align_floats(rows * input_row(st));
  const size_t out = (size_t)m->layers[in->end - 1].out;
  if (!st->recompute) {
    at = plan_acts(st, at);
  } else if (!in->is_last) { /* what goes to the next stage outlives the work area's turn */
    st->out_off = at;
    at += tr__align_floats(rows * out);
  }
  if (in->is_last) {
    st->target_off = at;
    at += tr__align_floats(m->loss->target == TR_LOSS_TARGET_CLASSES ? rows : rows * out);
    st->loss_off = at;
    at += TR__ALIGN_FLOATS;
  } else {
    st->dout_off = at;
    at += tr__align_floats(rows * out);
  }
  for (int i = 0; st->split && i < st->nl; i++)
    at = plan_keep(st, &st->layers[i], i == st->nl - 1, at);
  return at;
}

/* Backward's scratch: two gradient buffers that alternate through the layers, two for the
 * stage's input gradient, the layers' own scratch (the largest any asks for, and in bf16 its
 * bf16 scratch likewise) and a few device scalars. */
static size_t plan_scratch(tr_stage *st, float *base) {
  const tr_stage_info *in = &st->info;
  const size_t rows = (size_t)in->rows;
  size_t wide = 0, at = 0, layer = 0, layer16 = 0;
  for (int i = 0; i < st->nl; i++) {
    const tr_layer_spec *l = st->layers[i].spec;
    wide = wide > (size_t)l->out ? wide : (size_t)l->out;
    if (!l->type->token_input) wide = wide > (size_t)l->in ? wide : (size_t)l->in;
    const size_t s = tr__align_floats(tr_layer_scratch_floats(l, in->batch, st->m->ctx));
    layer = layer > s ? layer : s;
    size_t act16, scratch16;
    layer_bf16(st, l, &act16, &scratch16);
    layer16 = layer16 > bf16_floats(scratch16) ? layer16 : bf16_floats(scratch16);
  }
  if (in->is_last) { /* the loss's scratch is the layers': it runs apart from them */
    const size_t s = tr__align_floats(tr__stage_loss_floats(st, st->m->loss->scratch_floats));
    layer = layer > s ? layer : s;
  }
  const size_t g = tr__align_floats(rows * wide);
  st->g[0] = base ? base + at : NULL, at += g;
  st->g[1] = base ? base + at : NULL, at += g;
  if (!in->is_first) {
    const size_t d = tr__align_floats(rows * input_row(st));
    st->dinput[0] = base ? base + at : NULL, at += d;
    st->dinput[1] = base ? base + at : NULL, at += d;
  }
  st->layer_scratch = base ? base + at : NULL;
  at += layer;
  st->layer_scratch16 = base && bf16(st) ? (tr_bf16 *)(base + at) : NULL;
  at += layer16;
  st->scalars = base ? base + at : NULL;
  at += TR__ALIGN_FLOATS;
  return at;
}

/* Points the stage's tensor tables into its parameter and gradient allocations (and the
 * parameters' bf16 copy); the copy is to be made again. */
static void bind_params(tr_stage *st) {
  const tr_model *m = st->m;
  const int t0 = m->layer_tensor0[st->info.first];
  for (int t = 0; t < st->nt; t++) {
    const size_t off = m->tensors[t0 + t].offset - st->info.offset;
    st->tensors[t] = st->params + off;
    st->tensors[st->nt + t] = st->grads + off;
    if (st->params16) st->tensors16[t] = st->params16 + off;
  }
  st->params16_stale = 1;
  tr__replay_forget(&st->replay, tr_capture_close); /* captures hold the old pointers */
}

/* Shard `index` of `count` equal ones, each a multiple of 16 floats (tr_stage.h). */
void tr_stage_shard_span(size_t numel, tr_stage_shard sh, size_t *offset, size_t *n) {
  if (offset == NULL || n == NULL)
    return (void)tr__misuse(0, "tr_stage_shard_span: %s is NULL", offset ? "n" : "offset");
  if (sh.count <= 1) {
    *offset = 0, *n = numel;
    return;
  }
  const size_t per = tr__align_floats((numel + (size_t)sh.count - 1) / (size_t)sh.count);
  const size_t from = (size_t)sh.index * per, to = from + per;
  *offset = from < numel ? from : numel;
  *n = (to < numel ? to : numel) - *offset;
}

static int alloc(tr_stage *st, size_t floats, float **out) {
  *out = NULL;
  return floats ? tr_device_alloc(st->dev, floats * sizeof(float), (void **)out) : 0;
}

static int open_fail(tr_stage *st, int rc, char *err, size_t size, const char *what) {
  if (err && size)
    snprintf(err, size, "stage [%d,%d) of %s on %s: %s: %s", st->info.first, st->info.end,
             st->m->name, st->dev ? tr_device_name(st->dev) : "no device", what,
             st->dev && *tr_device_error(st->dev) ? tr_device_error(st->dev) : tr_strerror(rc));
  tr_stage_close(st);
  return rc;
}

/* Everything tr_stage_open decides before it allocates device memory: the stage, its
 * layers and its memory plan (st->info). `d` NULL: the plan only (tr_stage_plan). */
static int plan(tr_stage **out, const tr_model *m, tr_device *d, const tr_stage_config *cfg,
                char *err, size_t err_size) {
  *out = NULL;
  const int end = cfg->end ? cfg->end : m->nlayers;
  const int gb = cfg->global_batch ? cfg->global_batch : cfg->batch;
  const tr_stage_shard sh = cfg->shard;
  if (cfg->first < 0 || end <= cfg->first || end > m->nlayers || cfg->batch <= 0 ||
      cfg->slots < 0 || gb < cfg->batch || (size_t)cfg->batch * (size_t)m->ctx > INT32_MAX ||
      sh.count < 0 || sh.index < 0 || (sh.count > 1 && sh.index >= sh.count)) {
    if (err && err_size)
      snprintf(err, err_size,
               "stage of %s: layers [%d,%d) of %d, batch %d, %d slots, global batch %d, "
               "shard %d of %d: invalid",
               m->name, cfg->first, end, m->nlayers, cfg->batch, cfg->slots, gb, sh.index,
               sh.count);
    return TR_EINVAL;
  }
  tr_stage *st = calloc(1, sizeof *st);
  if (!st) return TR_ENOMEM;
  st->recompute = cfg->recompute != 0;
  st->split = cfg->split != 0;
  st->m = m;
  st->dev = d;
  st->s = d ? tr_device_stream(d) : NULL;
  st->optim = cfg->optim;
  if (!st->optim.kind) st->optim.kind = TR_OPTIM_SGD; /* a zeroed configuration's */
  tr_stage_info *in = &st->info;
  *in = (tr_stage_info){.first = cfg->first, .end = end, .batch = cfg->batch,
                        .rows = cfg->batch * m->ctx, .slots = cfg->slots, .global_batch = gb,
                        .is_first = cfg->first == 0, .is_last = end == m->nlayers,
                        .precision = cfg->precision.gemm};
  st->training = 1;
  st->nl = end - cfg->first;
  st->nt = m->layer_tensor0[end] - m->layer_tensor0[cfg->first];
  st->layers = calloc((size_t)st->nl, sizeof *st->layers);
  st->tensors = calloc(2 * (size_t)st->nt + 1, sizeof *st->tensors);
  st->tensors16 = calloc((size_t)st->nt + 1, sizeof *st->tensors16);
  st->samples = calloc((size_t)cfg->slots + 1, sizeof *st->samples);
  if (!st->layers || !st->tensors || !st->tensors16 || !st->samples)
    return open_fail(st, TR_ENOMEM, err, err_size, "out of memory");
  if ((unsigned)cfg->precision.gemm >= TR_PRECISION_COUNT)
    return open_fail(st, TR_EINVAL, err, err_size, "precision.gemm: not a precision");
  if ((unsigned)cfg->graphs >= TR_GRAPHS_COUNT)
    return open_fail(st, TR_EINVAL, err, err_size, "graphs: not TR_GRAPHS_ON or TR_GRAPHS_OFF");
  char why[200]; /* a plan alone (memory estimates before the comms exist) needs no comm */
  if (d && tr__stage_check_tensor(st, cfg, why, sizeof why))
    return open_fail(st, TR_EINVAL, err, err_size, why);
  if (cfg->split && cfg->precision.gemm != TR_PRECISION_FP32)
    return open_fail(st, TR_EINVAL, err, err_size,
                     "split: backward in two halves runs in fp32 only (precision.gemm bf16)");
  if (d && cfg->precision.tf32 && tr_device_set_tf32(d, 1))
    return open_fail(st, TR_EDEVICE, err, err_size, "precision.tf32");
  for (int i = 0; i < st->nl; i++) {
    tr__stage_layer *L = &st->layers[i];
    L->index = cfg->first + i;
    L->spec = &m->layers[L->index];
    L->t0 = m->layer_tensor0[L->index] - m->layer_tensor0[cfg->first];
    L->seed = tr_layer_seed(cfg->seed, (uint64_t)L->index);
  }
  for (int k = 0; k < cfg->slots; k++) st->samples[k] = TR_SAMPLES_UNKNOWN;
  for (int i = 0; i < st->nl; i++) {
    st->draws |= tr_layer_draws(st->layers[i].spec);
    st->weight_layers |= tr_layer_splits(st->layers[i].spec) != 0;
  }
  st->replay.on = d && cfg->graphs == TR_GRAPHS_ON && tr_device_can_capture(d);
  size_t off, n;
  tr_model_layer_span(m, cfg->first, &in->offset, &n);
  tr_model_layer_span(m, end - 1, &off, &n);
  in->numel = off + n - in->offset;
  tr_stage_shard_span(in->numel, sh, &in->shard_offset, &in->shard_numel);
  const tr_optim_type *opt = st->optim.kind;
  char what[320];
  if (tr_optim_kind_check(opt, what, sizeof what))
    return open_fail(st, TR_EINVAL, err, err_size, what);
  if (sh.count > 1 && opt->zero == TR_OPTIM_ZERO_REFUSED) {
    snprintf(what, sizeof what, "shard %d of %d: optimizer '%s' refuses ZeRO (its update is not "
             "element-wise)", sh.index, sh.count, opt->name);
    return open_fail(st, TR_EINVAL, err, err_size, what);
  }
  in->state_numel = (size_t)opt->state_copies * in->shard_numel;
  /* a parameter-only stage (slots 0) needs no activations and no backward scratch */
  const size_t slot = plan_slot(st), scratch = cfg->slots ? plan_scratch(st, NULL) : TR__ALIGN_FLOATS;
  const size_t work = st->recompute && cfg->slots ? plan_acts(st, 0) : 0;
  in->slot_bytes = slot * sizeof(float);
  in->scratch_bytes = scratch * sizeof(float);
  in->work_bytes = work * sizeof(float);
  /* the weights' copy: where a stage runs forward in bf16 */
  in->params16_bytes = bf16(st) && cfg->slots ? in->numel * sizeof(tr_bf16) : 0;
  const size_t rows = (size_t)in->rows, out_w = (size_t)m->layers[end - 1].out;
  in->input_bytes = rows * input_row(st) * 4; /* int32 tokens or floats */
  in->output_bytes = rows * out_w * sizeof(float);
  in->target_bytes = !in->is_last ? 0
                     : rows * (m->loss->target == TR_LOSS_TARGET_CLASSES ? sizeof(int32_t)
                                                                         : out_w * sizeof(float));
  st->slot_stride = slot;
  *out = st;
  return 0;
}

int tr_stage_plan(const tr_model *m, const tr_stage_config *cfg, tr_stage_info *info,
                  size_t *opt_scratch_bytes, char *err, size_t err_size) {
  if (!m || !cfg || !info)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_stage_plan: %s is NULL",
                     !m ? "m" : !cfg ? "cfg" : "info");
  tr_stage *st;
  const int rc = plan(&st, m, NULL, cfg, err, err_size);
  if (rc) return rc;
  *info = st->info;
  if (opt_scratch_bytes) *opt_scratch_bytes =
      (size_t)st->optim.kind->scratch_copies * st->info.shard_numel * sizeof(float);
  tr_stage_close(st);
  return 0;
}

int tr_stage_open(tr_stage **out, const tr_model *m, tr_device *d, const tr_stage_config *cfg,
                  char *err, size_t err_size) {
  if (!out || !m || !d || !cfg)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_stage_open: %s is NULL",
                     !out ? "out" : !m ? "m" : !d ? "d" : "cfg");
  tr_stage *st;
  int rc = plan(&st, m, d, cfg, err, err_size);
  *out = NULL;
  if (rc) return rc;
  tr_stage_info *in = &st->info;
  const tr_optim_type *opt = st->optim.kind;
  const size_t slot = st->slot_stride, scratch = in->scratch_bytes / sizeof(float),
               work = in->work_bytes / sizeof(float);
  rc = alloc(st, in->numel, &st->params);
  if (rc == 0) rc = alloc(st, in->numel, &st->grads);
  if (rc == 0) rc = alloc(st, in->state_numel, &st->state);
  if (rc == 0) rc = alloc(st, (size_t)opt->scratch_copies * in->shard_numel, &st->opt_scratch);
  st->own[0] = st->params, st->own[1] = st->grads, st->own[2] = st->state;
  if (rc || (rc = alloc(st, slot * (size_t)cfg->slots, &st->slots)) ||
      (rc = alloc(st, scratch, &st->scratch)) || (rc = alloc(st, work, &st->work)) ||
      (rc = alloc(st, in->params16_bytes / sizeof(float), (float **)&st->params16)))
    return open_fail(st, rc, err, err_size, "allocating device memory");
  if (cfg->slots) plan_scratch(st, st->scratch);
  else st->scalars = st->scratch;
  bind_params(st);
  tr_stream *s = st->s;
  /* everything starts defined: a bug that reads before writing reads zeros, every run alike */
  if ((rc = tr__stage_init_params(st, cfg->seed)) ||
      (rc = tr_memset(s, st->grads, 0, in->numel * sizeof(float))) ||
      (rc = tr_memset(s, st->state, 0, in->state_numel * sizeof(float))) ||
      (rc = tr_memset(s, st->slots, 0, in->slot_bytes * (size_t)cfg->slots)) ||
      (rc = tr_memset(s, st->scratch, 0, in->scratch_bytes)) ||
      (work && (rc = tr_memset(s, st->work, 0, in->work_bytes))))
    return open_fail(st, rc, err, err_size, "initialising");
  *out = st;
  return 0;
}

void tr_stage_close(tr_stage *st) {
  if (!st) return;
  tr__replay_free(&st->replay, tr_capture_close); /* before the memory the captures read */
  float *bufs[] = {st->own[0], st->own[1], st->own[2], st->slots, st->scratch, st->work,
                   (float *)st->params16, st->opt_scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) tr_device_free(st->dev, bufs[i]);
  free(st->layers);
  free(st->tensors);
  free(st->tensors16);
  free(st->samples);
  free(st);
}

/* ---- asynchronous training ------------------------------------------------------------------------ */

/* The optimizer's gradients only: the passes (and their captures) keep the stage's own. */
void tr_stage_use_grads(tr_stage *st, float *grads) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_use_grads: st is NULL");
  st->grads = grads ? grads : st->own[1];
}

int tr_stage_share_params(tr_stage *st, const tr_stage *owner) {
  STAGE_GIVEN(st);
  if (owner == NULL)
    return tr__stage_misuse(st, TR_EINVAL, "tr_stage_share_params: owner is NULL");
  if (owner->m != st->m || owner->info.first != st->info.first || owner->info.end != st->info.end ||
      owner->optim.kind != st->optim.kind || owner->info.state_numel != st->info.state_numel ||
      tr_device_can_access_peer(st->dev, owner->dev) != 1) {
    snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s on %s: cannot share the parameters of "
             "stage [%d,%d) of %s on %s", st->info.first, st->info.end, st->m->name,
             tr_device_name(st->dev), owner->info.first, owner->info.end, owner->m->name,
             tr_device_name(owner->dev));
    return TR_EINVAL;
  }
  st->params = owner->params;
  st->state = owner->state;
  bind_params(st);
  return 0;
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
  const int mixed = bf16(st);
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
