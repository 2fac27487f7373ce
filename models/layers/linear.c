/* linear.c — the linear layer kind: (N,in) -> (N,out) = x @ weight^T + bias. */
#include "layers_impl.h"

tr_layer_spec tr_layer_linear(int in, int out, int bias) {
  return (tr_layer_spec){.type = &tr_layer_linear_type, .in = in, .out = out, .bias = bias};
}

static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  return tr__declare_linear(t, "", l->in, l->out, l->bias);
}

/* bf16: the input, kept for the weight's gradient, and the output's gradient */
static void bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  *act = (size_t)B * T * l->in;
  *scratch = (size_t)B * T * l->out;
}

static const tr_linear_bf16 *bf16_of(const tr_layer_ctx *c, tr_linear_bf16 *h) {
  if (!c->p16) return NULL;
  *h = (tr_linear_bf16){c->p16[0], c->act16, c->scratch16};
  return h;
}

static int forward(const tr_layer_ctx *c) {
  const tr_layer_spec *l = c->l;
  tr_linear_bf16 h;
  return tr_linear_forward(c->s, c->act, c->x, c->p[0], l->bias ? c->p[1] : NULL, c->B * c->T,
                           l->in, l->out, bf16_of(c, &h));
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_layer_spec *l = c->l;
  tr_linear_bf16 h;
  return tr_linear_backward(c->s, dinp, c->g[0], l->bias ? c->g[1] : NULL, dout, c->x, c->p[0],
                            c->B * c->T, l->in, l->out, bf16_of(c, &h));
}

static int backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  return tr_linear_backward_input(c->s, dinp, dout, c->p[0], c->B * c->T, c->l->in, c->l->out);
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  const tr_layer_spec *l = c->l;
  return tr_linear_backward_weight(c->s, c->g[0], l->bias ? c->g[1] : NULL, dout, c->x,
                                   c->B * c->T, l->in, l->out);
}

static double flops(const tr_layer_spec *l, int T) { return 2.0 * T * l->in * l->out; }

const tr_layer_type tr_layer_linear_type = {
    .name = "linear", .tensors = tensors, .forward = forward, .backward = backward, .flops = flops,
    .backward_input = backward_input, .backward_weight = backward_weight,
    .bf16_elems = bf16_elems, .shard = tr__linear_shard};
