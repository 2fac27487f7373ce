/* residual.c — the residual kind, a composite: out = x + f(x), f its inner layers in order.
 * Written with the public table API alone, as a user's composite would be: the inner layers'
 * tensors follow one another in its own (named "<i>.<name>"), their activations follow its
 * output, and their scratch follows the gradient buffers it passes between them; in bf16,
 * their bf16 activations follow one another and they share its bf16 scratch. */
#include <stdio.h>

#include "layers_impl.h"
#include "models_impl.h" /* tr__align_floats */

tr_layer_spec tr_layer_residual(int n, const tr_layer_spec *inner) {
  const int w = n > 0 && inner ? inner[0].in : 0;
  return (tr_layer_spec){.type = &tr_layer_residual_type, .in = w, .out = w, .n = n, .inner = inner};
}

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  TR__TRY(tr__check_same_width(l, in, err, err_size));
  if (l->n <= 0 || !l->inner) {
    return tr_errorf(err, err_size, TR_EINVAL, "has no inner layers");
  }
  char what[256];
  if (tr_layers_check(l->n, l->inner, in, 0, what, sizeof what)) {
    return tr_errorf(err, err_size, TR_EINVAL, "inner %s", what);
  }
  if (l->inner[l->n - 1].out == in) return 0;
  return tr_errorf(err, err_size, TR_EINVAL, "its inner layers lead from width %d to %d, not back",
                   in, l->inner[l->n - 1].out);
}

static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  for (int i = 0; i < l->n; i++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%d", i);
    TR__TRY(tr_tensor_list_add_layer(t, prefix, &l->inner[i], T));
  }
  return 0;
}

static size_t act_floats(const tr_layer_spec *l, int B, int T) {
  size_t at = tr__align_floats((size_t)B * T * l->out);
  for (int i = 0; i < l->n; i++) at += tr__align_floats(tr_layer_act_floats(&l->inner[i], B, T));
  return at;
}

/* Backward passes gradients between inner layers in up to two buffers that alternate. */
static int gradient_buffers(const tr_layer_spec *l) { return l->n >= 3 ? 2 : l->n - 1; }

static size_t gradient_buffer_floats(const tr_layer_spec *l, int B, int T) {
  int wide = 0;
  for (int i = 0; i + 1 < l->n; i++) wide = l->inner[i].out > wide ? l->inner[i].out : wide;
  return tr__align_floats((size_t)B * T * wide);
}

static size_t scratch_floats(const tr_layer_spec *l, int B, int T) {
  size_t inner = 0;
  for (int i = 0; i < l->n; i++) {
    const size_t s = tr__align_floats(tr_layer_scratch_floats(&l->inner[i], B, T));
    inner = s > inner ? s : inner;
  }
  return (size_t)gradient_buffers(l) * gradient_buffer_floats(l, B, T) + inner;
}

static void bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  *act = *scratch = 0;
  for (int i = 0; i < l->n; i++) {
    size_t a, s;
    tr_layer_bf16_elems(&l->inner[i], B, T, &a, &s);
    *act += tr__align_bf16(a);
    *scratch = s > *scratch ? s : *scratch;
  }
}

/* Inner layer i's bf16 activations, from those of the layers before it. */
static size_t inner_act16(const tr_layer_spec *l, int i, int B, int T) {
  size_t a, s;
  tr_layer_bf16_elems(&l->inner[i], B, T, &a, &s);
  return tr__align_bf16(a);
}

static double flops(const tr_layer_spec *l, int T) {
  double f = 0;
  for (int i = 0; i < l->n; i++) f += tr_layer_flops(&l->inner[i], T);
  return f;
}

/* Inner layer i's context, its tensors starting at tensor t, its activations at act and its
 * bf16 ones act16 elements into the composite's. */
static tr_layer_ctx inner_ctx(const tr_layer_ctx *c, int i, int t, float *act, size_t act16) {
  tr_layer_ctx in = *c;
  in.l = &c->l->inner[i];
  in.p = c->p + t;
  in.g = c->g + t;
  in.p16 = c->p16 ? c->p16 + t : NULL;
  in.act16 = c->act16 ? c->act16 + act16 : NULL;
  in.act = act;
  in.scratch = c->scratch + (size_t)gradient_buffers(c->l) * gradient_buffer_floats(c->l, c->B, c->T);
  in.seed = tr_layer_seed(c->seed, (uint64_t)i);
  return in;
}

static int tensor_count(const tr_layer_ctx *c) {
  int t = 0;
  for (int i = 0; i < c->l->n; i++) t += tr_layer_tensor_count(&c->l->inner[i], c->T);
  return t;
}

static int forward(const tr_layer_ctx *c) {
  const tr_layer_spec *l = c->l;
  const size_t n = tr__numel(c, l->out);
  float *act = c->act + tr__align_floats(n);
  size_t act16 = 0;
  const void *x = c->x;
  int t = 0;
  for (int i = 0; i < l->n; i++) {
    tr_layer_ctx in = inner_ctx(c, i, t, act, act16);
    in.x = x;
    TR__TRY(l->inner[i].type->forward(&in));
    x = act;
    t += tr_layer_tensor_count(&l->inner[i], c->T);
    act += tr__align_floats(tr_layer_act_floats(&l->inner[i], c->B, c->T));
    if (c->act16) act16 += inner_act16(l, i, c->B, c->T); /* bf16 only */
  }
  return tr_add(c->s, c->act, c->x, x, n);
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_layer_spec *l = c->l;
  const size_t n = tr__numel(c, l->out);
  /* from the last inner layer back: where its tensors and activations start */
  float *act = c->act + act_floats(l, c->B, c->T);
  size_t act16 = 0, scratch16;
  if (c->act16) bf16_elems(l, c->B, c->T, &act16, &scratch16); /* bf16 only */
  int t = tensor_count(c);
  float *buf[2] = {c->scratch, c->scratch + gradient_buffer_floats(l, c->B, c->T)};
  const float *g = dout;
  for (int i = l->n - 1; i >= 0; i--) {
    t -= tr_layer_tensor_count(&l->inner[i], c->T);
    act -= tr__align_floats(tr_layer_act_floats(&l->inner[i], c->B, c->T));
    if (c->act16) act16 -= inner_act16(l, i, c->B, c->T);
    tr_layer_ctx in = inner_ctx(c, i, t, act, act16);
    in.x = i ? act - tr__align_floats(tr_layer_act_floats(&l->inner[i - 1], c->B, c->T)) : c->x;
    float *d = i ? buf[(l->n - 1 - i) & 1] : dinp;
    TR__TRY(l->inner[i].type->backward(&in, g, d));
    g = d;
  }
  return dinp ? tr_add(c->s, dinp, dinp, dout, n) : 0; /* and the identity's share */
}

/* ---- split in two (zero-bubble schedules): each inner layer's halves in turn ---------------- */

/* What inner layer i keeps for its weight half: the gradient of its output (but the last
 * one's, which is the residual's own dout), then its own keep. */
static size_t inner_dout_floats(const tr_layer_spec *l, int i, int B, int T) {
  return i + 1 < l->n && tr_layer_splits(&l->inner[i])
             ? tr__align_floats((size_t)B * T * l->inner[i].out)
             : 0;
}

static size_t inner_keep_floats(const tr_layer_spec *l, int i, int B, int T) {
  return inner_dout_floats(l, i, B, T) +
         tr__align_floats(tr_layer_keep_floats(&l->inner[i], B, T));
}

static size_t keep_floats(const tr_layer_spec *l, int B, int T) {
  size_t at = 0;
  for (int i = 0; i < l->n; i++) at += inner_keep_floats(l, i, B, T);
  return at;
}

/* Inner layer i's context with its input and keep, walking from the last inner layer back:
 * *t, *act and *keep point just past inner layer i's tensors, activations and keep, and
 * are moved to their starts. */
static tr_layer_ctx inner_back(const tr_layer_ctx *c, int i, int *t, float **act, float **keep,
                               float **kept_dout) {
  const tr_layer_spec *l = c->l;
  *t -= tr_layer_tensor_count(&l->inner[i], c->T);
  *act -= tr__align_floats(tr_layer_act_floats(&l->inner[i], c->B, c->T));
  *keep -= inner_keep_floats(l, i, c->B, c->T);
  tr_layer_ctx in = inner_ctx(c, i, *t, *act, 0); /* split backward: fp32 only */
  in.x = i ? *act - tr__align_floats(tr_layer_act_floats(&l->inner[i - 1], c->B, c->T)) : c->x;
  *kept_dout = inner_dout_floats(l, i, c->B, c->T) ? *keep : NULL;
  in.keep = *keep + inner_dout_floats(l, i, c->B, c->T);
  return in;
}


static int backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_layer_spec *l = c->l;
  float *act = c->act + act_floats(l, c->B, c->T), *keep = c->keep + keep_floats(l, c->B, c->T);
  float *buf[2] = {c->scratch, c->scratch + gradient_buffer_floats(l, c->B, c->T)};
  int t = tensor_count(c);
  const float *g = dout;
  for (int i = l->n - 1; i >= 0; i--) {
    float *kept = NULL;
    tr_layer_ctx in = inner_back(c, i, &t, &act, &keep, &kept);
    /* the gradient of inner layer i-1's output: kept where its weight half needs it */
    float *d = !i ? dinp : inner_dout_floats(l, i - 1, c->B, c->T)
                               ? keep - inner_keep_floats(l, i - 1, c->B, c->T)
                               : buf[(l->n - 1 - i) & 1];
    TR__TRY(tr_layer_backward_input(&in, g, d));
    g = d;
  }
  return dinp ? tr_add(c->s, dinp, dinp, dout, tr__numel(c, l->out)) : 0;
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  const tr_layer_spec *l = c->l;
  float *act = c->act + act_floats(l, c->B, c->T), *keep = c->keep + keep_floats(l, c->B, c->T);
  int t = tensor_count(c);
  for (int i = l->n - 1; i >= 0; i--) {
    float *kept = NULL;
    tr_layer_ctx in = inner_back(c, i, &t, &act, &keep, &kept);
    if (tr_layer_splits(&l->inner[i])) TR__TRY(tr_layer_backward_weight(&in, kept ? kept : dout));
  }
  return 0;
}

static int draws(const tr_layer_spec *l) {
  for (int i = 0; i < l->n; i++)
    if (tr_layer_draws(&l->inner[i])) return 1;
  return 0;
}

const tr_layer_type tr_layer_residual_type = {
    .name = "residual", .check = check, .tensors = tensors, .act_floats = act_floats,
    .scratch_floats = scratch_floats, .forward = forward, .backward = backward, .flops = flops,
    .backward_input = backward_input, .backward_weight = backward_weight,
    .keep_floats = keep_floats,
    .bf16_elems = bf16_elems, .draws = draws};
