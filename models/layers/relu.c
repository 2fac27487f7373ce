/* relu.c — the ReLU layer kind: (N,in) -> (N,in) = max(x, 0). */
#include "layers_impl.h"

tr_layer_spec tr_layer_relu(int width) {
  return (tr_layer_spec){.type = &tr_layer_relu_type, .in = width, .out = width};
}

static int forward(const tr_layer_ctx *c) {
  return tr_relu_forward(c->s, c->act, c->x, tr__numel(c, c->l->in));
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  return dinp ? tr_relu_backward(c->s, dinp, c->x, dout, tr__numel(c, c->l->in)) : 0;
}

const tr_layer_type tr_layer_relu_type = {
    .name = "relu", .check = tr__check_same_width, .forward = forward, .backward = backward};
