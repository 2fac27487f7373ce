/* gelu.c — the GELU layer kind (tanh approximation): (N,in) -> (N,in). */
#include "layers_impl.h"

tr_layer_spec tr_layer_gelu(int width) {
  return (tr_layer_spec){.type = &tr_layer_gelu_type, .in = width, .out = width};
}

static int forward(const tr_layer_ctx *c) {
  return tr_gelu_forward(c->s, c->act, c->x, tr__numel(c, c->l->in));
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  return dinp ? tr_gelu_backward(c->s, dinp, c->x, dout, tr__numel(c, c->l->in)) : 0;
}

const tr_layer_type tr_layer_gelu_type = {
    .name = "gelu", .check = tr__check_same_width, .forward = forward, .backward = backward};
