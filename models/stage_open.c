/* stage_open.c — a stage as it opens and its memory: the memory plan (parameters,
 * gradients, optimizer state, per-slot activations, shared backward scratch, and in bf16 the
 * weights' copy and the layers' bf16 activations and scratch), its checks (tr_stage_plan
 * makes the plan alone), the allocations, the parameters' first values (each element drawn
 * as the whole model draws it, a tensor parallel member's parts included) and the check of a
 * member's tensor comm, tr_stage_close, and the memory an asynchronous worker shares or lends
 * (tr_stage_share_params, tr_stage_use_grads). The passes over that memory are stage.c's. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_impl.h"

/* ---- the memory plan ---------------------------------------------------------------------------- */

/* floats (or int32 tokens) of one row of the stage's input */
static size_t input_row(const tr_stage *st) {
  const tr_layer_spec *l = &st->m->layers[st->info.first];
  return l->type->token_input ? 1 : (size_t)l->in;
}

/* The layer's bf16 elements: per micro-batch (act) and shared (scratch), 0 in fp32. */
static void layer_bf16(const tr_stage *st, const tr_layer_spec *l, size_t *act, size_t *scratch) {
  *act = *scratch = 0;
  if (tr__stage_bf16(st)) tr_layer_bf16_elems(l, st->info.batch, st->m->ctx, act, scratch);
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
  st->layer_scratch16 = base && tr__stage_bf16(st) ? (tr_bf16 *)(base + at) : NULL;
  at += layer16;
  st->scalars = base ? base + at : NULL;
  at += TR__ALIGN_FLOATS;
  return at;
}

/* ---- the parameters' first values, and a tensor parallel member's comm --------------------- */

/* Tensor parallelism: a member's split layers are part `rank` of `size`, the comm's. */
int tr__stage_check_tensor(tr_stage *st, const tr_stage_config *cfg, char *err, size_t size) {
  const tr_tensor_comm *c = cfg->tensor;
  st->tensor = NULL; /* kept only where a layer is split: its passes then run eagerly */
  for (int i = cfg->first; i < st->info.end; i++) {
    const tr_layer_spec *l = &st->m->layers[i];
    if (l->parts <= 1) continue;
    st->tensor = c;
    if (!c || c->size != l->parts || c->rank != l->part) {
      snprintf(err, size, "tensor: layer %d (%s) is part %d of %d, the stage's tensor "
               "comm %s", i, l->type->name, l->part, l->parts,
               c ? "is another member's or another group's" : "is NULL");
      if (c)
        snprintf(err + strlen(err), size - strlen(err), " (member %d of %d)", c->rank, c->size);
      return TR_EINVAL;
    }
  }
  return 0;
}

/* One run of a tensor's elements, drawn as the whole model draws them (tr_device.h's
 * counter-based initialisers: each element from (seed, its index in the whole model)). */
typedef struct init_run {
  tr_stream *s;
  float *p;
  const tr__tensor_init *it;
  uint64_t seed;
  size_t whole_offset;
} init_run;

static int init_one_run(void *arg, size_t part_at, size_t whole_at, size_t n) {
  const init_run *r = arg;
  float *p = r->p + part_at;
  const uint64_t at = r->whole_offset + whole_at;
  switch (r->it->kind) {
  case TR_INIT_UNIFORM:
    return tr_init_uniform(r->s, p, n, -r->it->scale, r->it->scale, r->seed, at);
  case TR_INIT_NORMAL: return tr_init_normal(r->s, p, n, 0.0f, r->it->scale, r->seed, at);
  case TR_INIT_ONES: return tr_fill(r->s, p, n, 1.0f);
  case TR_INIT_ZEROS: break;
  }
  return 0;
}

int tr__stage_init_params(tr_stage *st, uint64_t seed) {
  const tr_model *m = st->m;
  tr_stream *s = st->s;
  TR__TRY(tr_memset(s, st->params, 0, st->info.numel * sizeof(float))); /* and the padding */
  int t0, t1, n;
  tr_model_layer_tensors(m, st->info.first, &t0, &n);
  tr_model_layer_tensors(m, st->info.end - 1, &t1, &n);
  for (int t = t0; t < t1 + n; t++) {
    const tr_tensor_info *ti = &m->tensors[t];
    /* every element from (seed, its offset in the whole model): the same however cut, and
     * a member's part (tensor parallelism) as the whole tensor's elements it holds */
    init_run r = {s, st->params + (ti->offset - st->info.offset), &m->init[t], seed,
                  m->whole_offset[t]};
    TR__TRY(tr__tensor_part_runs(&m->parts[t], ti->numel, init_one_run, &r));
  }
  return 0;
}

/* ---- opening and closing ----------------------------------------------------------------- */

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
  in->params16_bytes = tr__stage_bf16(st) && cfg->slots ? in->numel * sizeof(tr_bf16) : 0;
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
