/* layernorm.c — the layernorm layer kind: (N,in) -> (N,in), weight and bias (in); keeps
 * each row's mean and 1/std after its output. */
#include "layers_impl.h"
#include "models_impl.h" /* tr__align_floats */

tr_layer_spec tr_layer_layernorm(int width) {
  return (tr_layer_spec){.type = &tr_layer_layernorm_type, .in = width, .out = width};
}

static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  return tr__declare_layernorm(t, "", l->in);
}

/* out (N,C), mean (N), rstd (N) */
static size_t act_floats(const tr_layer_spec *l, int B, int T) {
  const size_t N = (size_t)B * T;
  return tr__align_floats(N * l->in) + 2 * tr__align_floats(N);
}

/* where the input gradient goes when nobody wants it: the weights' need it on the way */
static size_t scratch_floats(const tr_layer_spec *l, int B, int T) { return (size_t)B * T * l->in; }

static int forward(const tr_layer_ctx *c) {
  const int N = c->B * c->T, C = c->l->in;
  float *mean = c->act + tr__align_floats((size_t)N * C), *rstd = mean + tr__align_floats(N);
  return tr_layernorm_forward(c->s, c->act, mean, rstd, c->x, c->p[0], c->p[1], N, C,
                          TR_LAYERNORM_EPS);
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const int N = c->B * c->T, C = c->l->in;
  const float *mean = c->act + tr__align_floats((size_t)N * C), *rstd = mean + tr__align_floats(N);
  return tr_layernorm_backward(c->s, dinp ? dinp : c->scratch, c->g[0], c->g[1], dout, c->x,
                          c->p[0], mean, rstd, N, C);
}

const tr_layer_type tr_layer_layernorm_type = {
    .name = "layernorm", .check = tr__check_same_width, .tensors = tensors,
    .act_floats = act_floats, .scratch_floats = scratch_floats, .forward = forward,
    .backward = backward};
