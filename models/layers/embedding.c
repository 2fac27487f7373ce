/* embedding.c — the token embedding kind with learned positions: tokens (B,T) ->
 * (B,T,out) = wte[token] + wpe[t]. */
#include "layers_impl.h"

tr_layer_spec tr_layer_embedding(int vocab, int width) {
  return (tr_layer_spec){.type = &tr_layer_embedding_type, .in = 1, .out = width, .vocab = vocab};
}

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  (void)in;
  if (l->vocab > 0 && l->in == 1) return 0;
  return tr_errorf(err, err_size, TR_EINVAL,
                   "needs a vocabulary (has %d) and one token a row (in %d)", l->vocab, l->in);
}

/* PyTorch's Embedding: normal(0, 1) */
static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  TR__TRY(tr_tensor_list_add(t, "wte", l->vocab, l->out, TR_INIT_NORMAL, 1.0f));
  return tr_tensor_list_add(t, "wpe", T, l->out, TR_INIT_NORMAL, 1.0f);
}

static int forward(const tr_layer_ctx *c) {
  return tr_embedding_forward(c->s, c->act, c->x, c->p[0], c->p[1], c->B, c->T, c->l->out,
                          c->l->vocab);
}

/* tokens have no gradient: dinp is never asked for */
static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  (void)dinp;
  return tr_embedding_backward(c->s, c->g[0], c->g[1], dout, c->x, c->B, c->T, c->l->out,
                          c->l->vocab);
}

/* split: tokens have no gradient to hurry, so all of it is the weights' half */
static int backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  (void)c, (void)dout, (void)dinp;
  return 0;
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  return backward(c, dout, NULL);
}

const tr_layer_type tr_layer_embedding_type = {
    .name = "embedding", .token_input = 1, .check = check, .tensors = tensors,
    .forward = forward, .backward = backward, .backward_input = backward_input,
    .backward_weight = backward_weight};
