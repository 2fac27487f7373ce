/* block.c — the pre-LN transformer block kind (tr_block_forward): (B,T,C) -> (B,T,C) with
 * `heads` heads and an MLP of `hidden`; its tensors are named as nanoGPT names them. */
#include "layers_impl.h"

tr_layer_spec tr_layer_block(int width, int heads, int hidden) {
  return (tr_layer_spec){
      .type = &tr_layer_block_type, .in = width, .out = width, .heads = heads, .hidden = hidden};
}

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  TR__TRY(tr__check_same_width(l, in, err, err_size));
  if (l->heads > 0 && l->in % l->heads == 0 && l->hidden > 0) return 0;
  return tr_errorf(err, err_size, TR_EINVAL, "width %d, %d heads, hidden %d", l->in, l->heads,
                   l->hidden);
}

static tr_block_dims dims(const tr_layer_spec *l, int B, int T) {
  return (tr_block_dims){B, T, l->in, l->heads, l->hidden};
}

/* In tr_block_params order. */
static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  TR__TRY(tr__declare_layernorm(t, "ln1.", l->in));
  TR__TRY(tr__declare_linear(t, "attn.qkv.", l->in, 3 * l->in, 1));
  TR__TRY(tr__declare_linear(t, "attn.proj.", l->in, l->in, 1));
  TR__TRY(tr__declare_layernorm(t, "ln2.", l->in));
  TR__TRY(tr__declare_linear(t, "mlp.fc.", l->in, l->hidden, 1));
  return tr__declare_linear(t, "mlp.proj.", l->hidden, l->in, 1);
}

static tr_block_params params(float *const *t) {
  return (tr_block_params){t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]};
}

/* the carve puts the output first, where the stage looks for it */
static size_t act_floats(const tr_layer_spec *l, int B, int T) {
  return tr_block_acts_carve(NULL, NULL, dims(l, B, T));
}

static size_t scratch_floats(const tr_layer_spec *l, int B, int T) {
  return tr_block_scratch_carve(NULL, NULL, dims(l, B, T));
}

static void bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  tr_block_bf16 h;
  tr_block_bf16_carve(&h, NULL, NULL, dims(l, B, T), act, scratch);
}

/* The bf16 operands in the micro-batch's and the shared buffers, the weights' copies in
 * tr_block_params order; NULL in fp32. */
static const tr_block_bf16 *bf16_of(const tr_layer_ctx *c, tr_block_bf16 *h) {
  if (!c->p16) return NULL;
  size_t act, scratch;
  tr_block_bf16_carve(h, c->act16, c->scratch16, dims(c->l, c->B, c->T), &act, &scratch);
  h->qkvw = c->p16[2], h->projw = c->p16[4], h->fcw = c->p16[8], h->fcprojw = c->p16[10];
  return h;
}

static int forward(const tr_layer_ctx *c) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const tr_block_params p = params(c->p);
  tr_block_acts a;
  tr_block_bf16 h;
  tr_block_acts_carve(&a, c->act, d);
  return tr_block_forward(c->s, &a, &p, c->x, d, bf16_of(c, &h));
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const tr_block_params p = params(c->p), g = params(c->g);
  tr_block_acts a;
  tr_block_scratch sc;
  tr_block_bf16 h;
  tr_block_acts_carve(&a, c->act, d);
  tr_block_scratch_carve(&sc, c->scratch, d);
  return tr_block_backward(c->s, dinp, &g, &sc, dout, c->x, &p, &a, d, bf16_of(c, &h));
}

static size_t keep_floats(const tr_layer_spec *l, int B, int T) {
  return tr_block_keep_carve(NULL, NULL, dims(l, B, T));
}

static int backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const tr_block_params p = params(c->p), g = params(c->g);
  tr_block_acts a;
  tr_block_scratch sc;
  tr_block_keep k;
  tr_block_acts_carve(&a, c->act, d);
  tr_block_scratch_carve(&sc, c->scratch, d);
  tr_block_keep_carve(&k, c->keep, d);
  return tr_block_backward_input(c->s, dinp, &g, &sc, &k, dout, c->x, &p, &a, d);
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const tr_block_params g = params(c->g);
  tr_block_acts a;
  tr_block_keep k;
  tr_block_acts_carve(&a, c->act, d);
  tr_block_keep_carve(&k, c->keep, d);
  return tr_block_backward_weight(c->s, &g, &k, dout, &a, d);
}

/* the four projections, and attention's q k^T and att v */
static double flops(const tr_layer_spec *l, int T) {
  const double C = l->in, H = l->hidden;
  return 2.0 * T * (4.0 * C * C + 2.0 * C * H) + 4.0 * T * T * C;
}

const tr_layer_type tr_layer_block_type = {
    .name = "block", .check = check, .tensors = tensors, .act_floats = act_floats,
    .scratch_floats = scratch_floats, .forward = forward, .backward = backward, .flops = flops,
    .backward_input = backward_input, .backward_weight = backward_weight,
    .keep_floats = keep_floats,
    .bf16_elems = bf16_elems};
