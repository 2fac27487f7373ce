/* block.c — the pre-LN transformer block kind (tr_block_forward): (B,T,C) -> (B,T,C) with
 * `heads` heads and an MLP of `hidden`; its tensors are named as nanoGPT names them.
 *
 * Tensor parallelism (shard, Megatron's split): member `part` of `parts` holds heads / parts
 * heads (its rows of the fused qkv weight in each of the q, k and v blocks; the attention
 * projection's matching input columns, row-parallel) and hidden / parts of the MLP's units
 * (fc column-parallel, its projection row-parallel); the layernorms and the two output
 * biases are whole on every member (a bias is added once, after the all-reduce). A member's
 * spec is the same kind with its own heads and hidden, and part and parts set. */
#include <math.h>
#include <stdio.h>

#include "layers_impl.h"

tr_layer_spec tr_layer_block(int width, int heads, int hidden) {
  return (tr_layer_spec){
      .type = &tr_layer_block_type, .in = width, .out = width, .heads = heads, .hidden = hidden};
}

static int split(const tr_layer_spec *l) { return l->parts > 1; }

/* attention's width on this member: its heads' columns of q, k and v */
static int attn_width(const tr_layer_spec *l) { return split(l) ? l->in / l->parts : l->in; }

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  TR__TRY(tr__check_same_width(l, in, err, err_size));
  if (l->heads > 0 && l->in % l->heads == 0 && l->hidden > 0 &&
      (!split(l) || (l->in % l->parts == 0 && attn_width(l) % l->heads == 0)))
    return 0;
  return tr_errorf(err, err_size, TR_EINVAL, "width %d, %d heads, hidden %d", l->in, l->heads,
                   l->hidden);
}

static int shard(const tr_layer_spec *l, tr_split how, int part, int parts, tr_layer_spec *member,
                 char *err, size_t err_size) {
  (void)how; /* the block splits itself */
  if (parts < 1 || part < 0 || part >= parts || split(l))
    return tr_errorf(err, err_size, TR_EINVAL, "part %d of %d of a block%s", part, parts,
                     split(l) ? " already split" : "");
  if (l->heads % parts || l->hidden % parts)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "%d heads and an MLP of %d across %d members: both must divide", l->heads,
                     l->hidden, parts);
  *member = *l;
  if (parts == 1) return 0; /* held whole */
  member->heads = l->heads / parts, member->hidden = l->hidden / parts;
  member->part = part, member->parts = parts;
  return 0;
}

static tr_block_dims dims(const tr_layer_spec *l, int B, int T) {
  return (tr_block_dims){B, T, l->in, l->heads, l->hidden};
}

/* A member's parts of the whole block's tensors, each initialised as the whole one's
 * elements it holds (PyTorch's Linear: uniform in +-1/sqrt(whole in)). */
static int part_linear(tr_tensor_list *t, const char *prefix, const tr_layer_spec *l, int in,
                       int out, int axis, int groups) {
  char name[40];
  const int whole_in = axis == 1 ? in * l->parts : in;
  const float b = 1.0f / sqrtf((float)whole_in);
  snprintf(name, sizeof name, "%sweight", prefix);
  TR__TRY(tr_tensor_list_add_part(t, name, out, in, TR_INIT_UNIFORM, b, axis, groups, l->part,
                                  l->parts));
  snprintf(name, sizeof name, "%sbias", prefix);
  /* a row-parallel linear's bias is whole, added once */
  return axis == 1 ? tr_tensor_list_add(t, name, out, 0, TR_INIT_UNIFORM, b)
                   : tr_tensor_list_add_part(t, name, out, 0, TR_INIT_UNIFORM, b, 0, groups,
                                             l->part, l->parts);
}

/* In tr_block_params order. */
static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  const int C = l->in, A = attn_width(l);
  TR__TRY(tr__declare_layernorm(t, "ln1.", C));
  if (!split(l)) {
    TR__TRY(tr__declare_linear(t, "attn.qkv.", C, 3 * C, 1));
    TR__TRY(tr__declare_linear(t, "attn.proj.", C, C, 1));
  } else {
    TR__TRY(part_linear(t, "attn.qkv.", l, C, 3 * A, 0, 3)); /* q, k, v: 3 blocks of rows */
    TR__TRY(part_linear(t, "attn.proj.", l, A, C, 1, 1));
  }
  TR__TRY(tr__declare_layernorm(t, "ln2.", C));
  if (!split(l)) {
    TR__TRY(tr__declare_linear(t, "mlp.fc.", C, l->hidden, 1));
    return tr__declare_linear(t, "mlp.proj.", l->hidden, C, 1);
  }
  TR__TRY(part_linear(t, "mlp.fc.", l, C, l->hidden, 0, 1));
  return part_linear(t, "mlp.proj.", l, l->hidden, C, 1, 1);
}

static tr_block_params params(float *const *t) {
  return (tr_block_params){t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]};
}

/* the carve puts the output first, where the stage looks for it */
static size_t act_floats(const tr_layer_spec *l, int B, int T) {
  return tr__block_acts_carve(NULL, NULL, dims(l, B, T), attn_width(l));
}

static size_t scratch_floats(const tr_layer_spec *l, int B, int T) {
  return tr__block_scratch_carve(NULL, NULL, dims(l, B, T), attn_width(l));
}

static void bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  tr_block_bf16 h;
  tr__block_bf16_carve(&h, NULL, NULL, dims(l, B, T), attn_width(l), act, scratch);
}

/* The bf16 operands in the micro-batch's and the shared buffers, the weights' copies in
 * tr_block_params order; NULL in fp32. */
static const tr_block_bf16 *bf16_of(const tr_layer_ctx *c, tr_block_bf16 *h) {
  if (!c->p16) return NULL;
  size_t act, scratch;
  tr__block_bf16_carve(h, c->act16, c->scratch16, dims(c->l, c->B, c->T), attn_width(c->l), &act,
                       &scratch);
  h->qkvw = c->p16[2], h->projw = c->p16[4], h->fcw = c->p16[8], h->fcprojw = c->p16[10];
  return h;
}

/* The member's comm: a split block without one cannot join its partial sums. */
static int comm_of(const tr_layer_ctx *c, const tr_tensor_comm **tc) {
  *tc = split(c->l) ? c->tensor : NULL;
  if (split(c->l) && (!c->tensor || c->tensor->size != c->l->parts))
    return tr_layer_fail(c, TR_EINVAL, "block: part %d of %d needs its tensor group's comm",
                         c->l->part, c->l->parts);
  return 0;
}

static int forward(const tr_layer_ctx *c) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const tr_block_params p = params(c->p);
  const tr_tensor_comm *tc;
  tr_block_acts a;
  tr_block_bf16 h;
  TR__TRY(comm_of(c, &tc));
  tr__block_acts_carve(&a, c->act, d, attn_width(c->l));
  return tr__block_forward(c->s, &a, &p, c->x, d, attn_width(c->l), tc, bf16_of(c, &h));
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const int A = attn_width(c->l);
  const tr_block_params p = params(c->p), g = params(c->g);
  const tr_tensor_comm *tc;
  tr_block_acts a;
  tr_block_scratch sc;
  tr_block_bf16 h;
  TR__TRY(comm_of(c, &tc));
  tr__block_acts_carve(&a, c->act, d, A);
  tr__block_scratch_carve(&sc, c->scratch, d, A);
  return tr__block_backward(c->s, dinp, &g, &sc, dout, c->x, &p, &a, d, A, tc, bf16_of(c, &h));
}

static size_t keep_floats(const tr_layer_spec *l, int B, int T) {
  return tr__block_keep_carve(NULL, NULL, dims(l, B, T), attn_width(l));
}

static int backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const int A = attn_width(c->l);
  const tr_block_params p = params(c->p), g = params(c->g);
  const tr_tensor_comm *tc;
  tr_block_acts a;
  tr_block_scratch sc;
  tr_block_keep k;
  TR__TRY(comm_of(c, &tc));
  tr__block_acts_carve(&a, c->act, d, A);
  tr__block_scratch_carve(&sc, c->scratch, d, A);
  tr__block_keep_carve(&k, c->keep, d, A);
  return tr__block_backward_input(c->s, dinp, &g, &sc, &k, dout, c->x, &p, &a, d, A, tc);
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  const tr_block_dims d = dims(c->l, c->B, c->T);
  const int A = attn_width(c->l);
  const tr_block_params g = params(c->g);
  tr_block_acts a;
  tr_block_keep k;
  tr__block_acts_carve(&a, c->act, d, A);
  tr__block_keep_carve(&k, c->keep, d, A);
  return tr__block_backward_weight(c->s, &g, &k, dout, &a, d, A);
}

/* the four projections, and attention's q k^T and att v (a member's share of them) */
static double flops(const tr_layer_spec *l, int T) {
  const double C = l->in, A = attn_width(l), H = l->hidden;
  return 2.0 * T * (4.0 * C * A + 2.0 * C * H) + 4.0 * T * T * A;
}

const tr_layer_type tr_layer_block_type = {
    .name = "block", .check = check, .tensors = tensors, .act_floats = act_floats,
    .scratch_floats = scratch_floats, .forward = forward, .backward = backward, .flops = flops,
    .backward_input = backward_input, .backward_weight = backward_weight,
    .keep_floats = keep_floats,
    .bf16_elems = bf16_elems, .shard = shard};
