/* stage.c — layers [first, end) of a model on one device: the memory plan made at open
 * (parameters, gradients, optimizer state, per-slot activations, shared backward scratch),
 * initialisation, and the forward and backward passes. The optimizer lives in optim.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_impl.h"

/* ---- errors ---------------------------------------------------------------------------------- */

int tr__stage_fail(tr_stage *st, int rc, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *dev = tr_device_error(st->dev);
  snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s on %s: %s: %s", st->info.first,
           st->info.end, st->m->name, tr_device_name(st->dev), what,
           dev && *dev ? dev : tr_strerror(rc));
  return rc;
}

const char *tr_stage_error(const tr_stage *st) { return st->err; }

/* ---- the memory plan ---------------------------------------------------------------------------- */

static size_t plan_slot(tr_stage *st) {
  const tr_model *m = st->m;
  const tr_stage_info *in = &st->info;
  const size_t rows = (size_t)in->rows;
  size_t at = 0;
  st->in_off = at;
  at += tr__align_floats(in->is_first && tr_model_token_input(m) ? rows
                                                                  : rows * (size_t)m->layers[in->first].in);
  for (int i = 0; i < st->nl; i++) {
    tr__stage_layer *L = &st->layers[i];
    const tr_layer_spec *l = L->spec;
    L->act_off = at;
    if (l->kind == TR_LAYER_BLOCK) {
      at += tr_block_acts_carve(NULL, NULL, L->dims);
      continue;
    }
    at += tr__align_floats(rows * (size_t)l->out);
    if (l->kind == TR_LAYER_LAYERNORM) at += 2 * tr__align_floats(rows);
  }
  const size_t out = (size_t)m->layers[in->end - 1].out;
  if (in->is_last) {
    if (m->loss == TR_LOSS_CROSSENTROPY) {
      st->probs_off = at;
      at += tr__align_floats(rows * out);
    }
    st->target_off = at;
    at += tr__align_floats(m->loss == TR_LOSS_CROSSENTROPY ? rows : rows * out);
    st->loss_off = at;
    at += TR__ALIGN_FLOATS;
  } else {
    st->dout_off = at;
    at += tr__align_floats(rows * out);
  }
  return at;
}

/* Backward's scratch: two gradient buffers that alternate through the layers, two for the
 * stage's input gradient, the blocks' temporaries and a few device scalars. */
static size_t plan_scratch(tr_stage *st, float *base) {
  const tr_stage_info *in = &st->info;
  const size_t rows = (size_t)in->rows;
  size_t wide = 0, at = 0, block = 0;
  for (int i = 0; i < st->nl; i++) {
    const tr_layer_spec *l = st->layers[i].spec;
    wide = wide > (size_t)l->out ? wide : (size_t)l->out;
    if (l->kind != TR_LAYER_EMBEDDING) wide = wide > (size_t)l->in ? wide : (size_t)l->in;
    if (l->kind == TR_LAYER_BLOCK) block = tr_block_scratch_carve(NULL, NULL, st->layers[i].dims);
  }
  const size_t g = tr__align_floats(rows * wide);
  st->g[0] = base ? base + at : NULL, at += g;
  st->g[1] = base ? base + at : NULL, at += g;
  if (!in->is_first) {
    const size_t d = tr__align_floats(rows * (size_t)st->m->layers[in->first].in);
    st->dinput[0] = base ? base + at : NULL, at += d;
    st->dinput[1] = base ? base + at : NULL, at += d;
  }
  for (int i = 0; i < st->nl && base; i++)
    if (st->layers[i].spec->kind == TR_LAYER_BLOCK)
      tr_block_scratch_carve(&st->bsc, base + at, st->layers[i].dims);
  at += block;
  st->scalars = base ? base + at : NULL;
  at += TR__ALIGN_FLOATS;
  return at;
}

/* Points each layer at its tensors inside the stage's parameter and gradient allocations. */
static void bind_params(tr_stage *st) {
  const tr_model *m = st->m;
  for (int i = 0; i < st->nl; i++) {
    tr__stage_layer *L = &st->layers[i];
    int t0, nt;
    tr_model_layer_tensors(m, L->index, &t0, &nt);
    float **p = L->p.t, **g = L->g.t;
    TR_ASSERT(nt <= (int)(sizeof L->p.t / sizeof L->p.t[0]));
    for (int k = 0; k < nt; k++) {
      const size_t off = m->tensors[t0 + k].offset - st->info.offset;
      p[k] = st->params + off;
      g[k] = st->grads + off;
    }
  }
}

static int init_params(tr_stage *st, uint64_t seed) {
  const tr_model *m = st->m;
  tr_stream *s = st->s;
  TR__TRY(tr_memset(s, st->params, 0, st->info.numel * sizeof(float))); /* and the padding */
  int t0, t1, n;
  tr_model_layer_tensors(m, st->info.first, &t0, &n);
  tr_model_layer_tensors(m, st->info.end - 1, &t1, &n);
  for (int t = t0; t < t1 + n; t++) {
    const tr_tensor_info *ti = &m->tensors[t];
    const tr__tensor_init *it = &m->init[t];
    float *p = st->params + (ti->offset - st->info.offset);
    /* every element from (seed, its offset in the whole model): the same however cut */
    switch (it->kind) {
    case TR__INIT_UNIFORM:
      TR__TRY(tr_init_uniform(s, p, ti->numel, -it->bound, it->bound, seed, ti->offset));
      break;
    case TR__INIT_NORMAL: TR__TRY(tr_init_normal(s, p, ti->numel, 0.0f, 1.0f, seed, ti->offset)); break;
    case TR__INIT_ONES: TR__TRY(tr_fill(s, p, ti->numel, 1.0f)); break;
    case TR__INIT_ZEROS: break;
    }
  }
  return 0;
}

static int alloc(tr_stage *st, size_t floats, float **out) {
  *out = NULL;
  return floats ? tr_device_alloc(st->dev, floats * sizeof(float), (void **)out) : 0;
}

static int open_fail(tr_stage *st, int rc, char *err, size_t size, const char *what) {
  if (err && size)
    snprintf(err, size, "stage [%d,%d) of %s on %s: %s: %s", st->info.first, st->info.end,
             st->m->name, tr_device_name(st->dev), what,
             *tr_device_error(st->dev) ? tr_device_error(st->dev) : tr_strerror(rc));
  tr_stage_close(st);
  return rc;
}

int tr_stage_open(tr_stage **out, const tr_model *m, tr_device *d, const tr_stage_config *cfg,
                  char *err, size_t err_size) {
  *out = NULL;
  const int end = cfg->end ? cfg->end : m->nlayers;
  const int gb = cfg->global_batch ? cfg->global_batch : cfg->batch;
  if (cfg->first < 0 || end <= cfg->first || end > m->nlayers || cfg->batch <= 0 ||
      cfg->slots < 0 || gb < cfg->batch || (size_t)cfg->batch * (size_t)m->ctx > INT32_MAX) {
    if (err && err_size)
      snprintf(err, err_size,
               "stage of %s: layers [%d,%d) of %d, batch %d, %d slots, global batch %d: invalid",
               m->name, cfg->first, end, m->nlayers, cfg->batch, cfg->slots, gb);
    return TR_EINVAL;
  }
  tr_stage *st = calloc(1, sizeof *st);
  if (!st) return TR_ENOMEM;
  st->m = m;
  st->dev = d;
  st->s = tr_device_stream(d);
  st->optim = cfg->optim;
  tr_stage_info *in = &st->info;
  *in = (tr_stage_info){.first = cfg->first, .end = end, .batch = cfg->batch,
                        .rows = cfg->batch * m->ctx, .slots = cfg->slots, .global_batch = gb,
                        .is_first = cfg->first == 0, .is_last = end == m->nlayers};
  st->nl = end - cfg->first;
  st->layers = calloc((size_t)st->nl, sizeof *st->layers);
  if (!st->layers) return open_fail(st, TR_ENOMEM, err, err_size, "out of memory");
  for (int i = 0; i < st->nl; i++) {
    tr__stage_layer *L = &st->layers[i];
    L->index = cfg->first + i;
    L->spec = &m->layers[L->index];
    L->dims = (tr_block_dims){cfg->batch, m->ctx, L->spec->in, L->spec->heads, L->spec->hidden};
  }
  size_t off, n;
  tr_model_layer_span(m, cfg->first, &in->offset, &n);
  tr_model_layer_span(m, end - 1, &off, &n);
  in->numel = off + n - in->offset;
  in->state_numel = cfg->optim.kind == TR_OPTIM_ADAMW      ? 2 * in->numel
                    : cfg->optim.kind == TR_OPTIM_MOMENTUM ? in->numel
                                                           : 0;
  /* a parameter-only stage (slots 0) needs no activations and no backward scratch */
  const size_t slot = plan_slot(st), scratch = cfg->slots ? plan_scratch(st, NULL) : TR__ALIGN_FLOATS;
  in->slot_bytes = slot * sizeof(float);
  in->scratch_bytes = scratch * sizeof(float);
  const size_t rows = (size_t)in->rows, out_w = (size_t)m->layers[end - 1].out;
  in->input_bytes = rows * (in->is_first && tr_model_token_input(m) ? sizeof(int32_t)
                                                                    : m->layers[cfg->first].in * sizeof(float));
  in->output_bytes = rows * out_w * sizeof(float);
  in->target_bytes = !in->is_last ? 0
                     : rows * (m->loss == TR_LOSS_CROSSENTROPY ? sizeof(int32_t) : out_w * sizeof(float));
  st->slot_stride = slot;
  int rc;
  rc = alloc(st, in->numel, &st->params);
  if (rc == 0) rc = alloc(st, in->numel, &st->grads);
  if (rc == 0) rc = alloc(st, in->state_numel, &st->state);
  st->own[0] = st->params, st->own[1] = st->grads, st->own[2] = st->state;
  if (rc || (rc = alloc(st, slot * (size_t)cfg->slots, &st->slots)) ||
      (rc = alloc(st, scratch, &st->scratch)))
    return open_fail(st, rc, err, err_size, "allocating device memory");
  if (cfg->slots) plan_scratch(st, st->scratch);
  else st->scalars = st->scratch;
  bind_params(st);
  tr_stream *s = st->s;
  /* everything starts defined: a bug that reads before writing reads zeros, every run alike */
  if ((rc = init_params(st, cfg->seed)) ||
      (rc = tr_memset(s, st->grads, 0, in->numel * sizeof(float))) ||
      (rc = tr_memset(s, st->state, 0, in->state_numel * sizeof(float))) ||
      (rc = tr_memset(s, st->slots, 0, in->slot_bytes * (size_t)cfg->slots)) ||
      (rc = tr_memset(s, st->scratch, 0, in->scratch_bytes)))
    return open_fail(st, rc, err, err_size, "initialising");
  *out = st;
  return 0;
}

void tr_stage_close(tr_stage *st) {
  if (!st) return;
  float *bufs[] = {st->own[0], st->own[1], st->own[2], st->slots, st->scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) tr_device_free(st->dev, bufs[i]);
  free(st->layers);
  free(st);
}

/* ---- asynchronous training ------------------------------------------------------------------------ */

void tr_stage_use_grads(tr_stage *st, float *grads) { st->grads = grads ? grads : st->own[1]; }

int tr_stage_share_params(tr_stage *st, const tr_stage *owner) {
  if (owner->m != st->m || owner->info.first != st->info.first || owner->info.end != st->info.end ||
      owner->optim.kind != st->optim.kind ||
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

const tr_stage_info *tr_stage_get_info(const tr_stage *st) { return &st->info; }
const tr_model *tr_stage_model(const tr_stage *st) { return st->m; }
tr_device *tr_stage_device(const tr_stage *st) { return st->dev; }
tr_stream *tr_stage_stream(const tr_stage *st) { return st->s; }
float *tr_stage_params(tr_stage *st) { return st->params; }
float *tr_stage_grads(tr_stage *st) { return st->grads; }
float *tr_stage_opt_state(tr_stage *st) { return st->state; }

void tr_stage_layer_span(const tr_stage *st, int layer, size_t *offset, size_t *numel) {
  TR_ASSERT(layer >= st->info.first && layer < st->info.end);
  tr_model_layer_span(st->m, layer, offset, numel);
  *offset -= st->info.offset;
}

static float *slot_base(const tr_stage *st, int slot) {
  TR_ASSERT(slot >= 0 && slot < st->info.slots);
  return st->slots + (size_t)slot * st->slot_stride;
}

void *tr_stage_input(tr_stage *st, int slot) { return slot_base(st, slot) + st->in_off; }
void *tr_stage_target(tr_stage *st, int slot) {
  return st->info.is_last ? slot_base(st, slot) + st->target_off : NULL;
}
float *tr_stage_dout(tr_stage *st, int slot) {
  return st->info.is_last ? NULL : slot_base(st, slot) + st->dout_off;
}
const float *tr_stage_loss(const tr_stage *st, int slot) {
  return st->info.is_last ? slot_base(st, slot) + st->loss_off : NULL;
}

void tr_stage_on_grad_ready(tr_stage *st, tr_grad_ready_fn fn, void *arg) {
  st->ready = fn;
  st->ready_arg = arg;
}

/* A layer's output in a slot; a block's is the last of its activations. */
static float *layer_out(const tr__stage_layer *L, float *base, tr_block_acts *acts) {
  if (L->spec->kind != TR_LAYER_BLOCK) return base + L->act_off;
  tr_block_acts_carve(acts, base + L->act_off, L->dims);
  return acts->out;
}

const float *tr_stage_output(const tr_stage *st, int slot) {
  tr_block_acts a;
  return layer_out(&st->layers[st->nl - 1], slot_base(st, slot), &a);
}

/* ---- forward and backward ----------------------------------------------------------------------- */

static float loss_scale(const tr_stage *st) {
  const tr_model *m = st->m;
  double n = (double)st->info.global_batch * m->ctx;
  if (m->loss == TR_LOSS_MSE) n *= m->layers[m->nlayers - 1].out;
  return (float)(1.0 / n);
}

static int layer_forward(tr_stage *st, const tr__stage_layer *L, float *base, const float *x) {
  tr_stream *s = st->s;
  const tr_layer_spec *l = L->spec;
  const int N = st->info.rows;
  float *out = base + L->act_off;
  switch (l->kind) {
  case TR_LAYER_LINEAR: return tr_linear_forward(s, out, x, L->p.w, l->bias ? L->p.b : NULL, N, l->in, l->out);
  case TR_LAYER_RELU: return tr_relu_forward(s, out, x, (size_t)N * l->in);
  case TR_LAYER_GELU: return tr_gelu_forward(s, out, x, (size_t)N * l->in);
  case TR_LAYER_LAYERNORM: {
    float *mean = out + tr__align_floats((size_t)N * l->in), *rstd = mean + tr__align_floats(N);
    return tr_layernorm_forward(s, out, mean, rstd, x, L->p.w, L->p.b, N, l->in);
  }
  case TR_LAYER_EMBEDDING:
    return tr_embedding_forward(s, out, (const int32_t *)x, L->p.w, L->p.b, L->dims.B, L->dims.T,
                                l->out, l->vocab);
  case TR_LAYER_BLOCK: {
    tr_block_acts a;
    tr_block_acts_carve(&a, out, L->dims);
    return tr_block_forward(s, &a, &L->p.block, x, L->dims);
  }
  }
  return TR_EINVAL;
}

int tr_stage_forward(tr_stage *st, int slot) {
  float *base = slot_base(st, slot);
  const float *x = base + st->in_off;
  tr_block_acts a;
  for (int i = 0; i < st->nl; i++) {
    const tr__stage_layer *L = &st->layers[i];
    int rc = layer_forward(st, L, base, x);
    if (rc) return tr__stage_fail(st, rc, "forward of layer %d (%s)", L->index,
                                  tr_layer_kind_name(L->spec->kind));
    x = layer_out(L, base, &a);
  }
  if (!st->info.is_last) return 0;
  const tr_model *m = st->m;
  const int N = st->info.rows, V = m->layers[m->nlayers - 1].out;
  float *loss = base + st->loss_off;
  int rc = m->loss == TR_LOSS_MSE
               ? tr_mse_forward(st->s, loss, x, base + st->target_off, (size_t)N * V, loss_scale(st))
               : tr_crossentropy_forward(st->s, loss, base + st->probs_off, x,
                                         (const int32_t *)(base + st->target_off), N, V,
                                         loss_scale(st));
  return rc ? tr__stage_fail(st, rc, "loss") : 0;
}

static int layer_backward(tr_stage *st, const tr__stage_layer *L, float *base, const float *x,
                          const float *dout, float *dinp, float *spare) {
  tr_stream *s = st->s;
  const tr_layer_spec *l = L->spec;
  const int N = st->info.rows;
  const size_t n = (size_t)N * l->in;
  const float *out = base + L->act_off;
  switch (l->kind) {
  case TR_LAYER_LINEAR:
    return tr_linear_backward(s, dinp, L->g.w, l->bias ? L->g.b : NULL, dout, x, L->p.w, N,
                              l->in, l->out);
  case TR_LAYER_RELU: return dinp ? tr_relu_backward(s, dinp, dout, x, n) : 0;
  case TR_LAYER_GELU: return dinp ? tr_gelu_backward(s, dinp, dout, x, n) : 0;
  case TR_LAYER_LAYERNORM: {
    const float *mean = out + tr__align_floats(n), *rstd = mean + tr__align_floats(N);
    return tr_layernorm_backward(s, dinp ? dinp : spare, L->g.w, L->g.b, dout, x, L->p.w, mean,
                                 rstd, N, l->in);
  }
  case TR_LAYER_EMBEDDING:
    return tr_embedding_backward(s, L->g.w, L->g.b, dout, (const int32_t *)x, L->dims.B,
                                 L->dims.T, l->out, l->vocab);
  case TR_LAYER_BLOCK: {
    tr_block_acts a;
    tr_block_acts_carve(&a, base + L->act_off, L->dims);
    return tr_block_backward(s, dinp, &L->g.block, &st->bsc, dout, x, &L->p.block, &a, L->dims);
  }
  }
  return TR_EINVAL;
}

int tr_stage_backward(tr_stage *st, int slot, const float **dinput) {
  float *base = slot_base(st, slot);
  const tr_model *m = st->m;
  const float *dout;
  int rc = 0;
  if (st->info.is_last) {
    const int N = st->info.rows, V = m->layers[m->nlayers - 1].out;
    const float *pred = tr_stage_output(st, slot);
    rc = m->loss == TR_LOSS_MSE
             ? tr_mse_backward(st->s, st->g[0], pred, base + st->target_off, (size_t)N * V,
                               loss_scale(st))
             : tr_crossentropy_backward(st->s, st->g[0], base + st->probs_off,
                                        (const int32_t *)(base + st->target_off), N, V,
                                        loss_scale(st));
    if (rc) return tr__stage_fail(st, rc, "loss gradient");
    dout = st->g[0];
  } else {
    dout = base + st->dout_off;
  }
  float *dfirst = st->info.is_first ? NULL : st->dinput[st->dinput_next];
  tr_block_acts a;
  for (int i = st->nl - 1; i >= 0; i--) {
    const tr__stage_layer *L = &st->layers[i];
    const float *x = i ? layer_out(&st->layers[i - 1], base, &a) : base + st->in_off;
    float *other = dout == st->g[0] ? st->g[1] : st->g[0];
    float *dinp = i ? other : dfirst;
    rc = layer_backward(st, L, base, x, dout, dinp, other);
    if (rc) return tr__stage_fail(st, rc, "backward of layer %d (%s)", L->index,
                                  tr_layer_kind_name(L->spec->kind));
    if (st->ready) st->ready(st->ready_arg, st, L->index);
    dout = dinp;
  }
  if (dfirst) st->dinput_next ^= 1;
  if (dinput) *dinput = dfirst;
  return 0;
}
