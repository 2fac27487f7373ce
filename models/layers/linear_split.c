/* linear_split.c — the linear layer split across a tensor group (Megatron's), the kinds its
 * shard op (linear.c) makes of a member's spec:
 *
 *   column-parallel: each member holds rows [k OC/T, (k+1) OC/T) of the weight and of the
 *     bias, and computes those output features from the whole input; in backward the input's
 *     gradient is each member's partial product, all-reduced (Megatron's f);
 *   row-parallel: each member holds columns [k C/T, (k+1) C/T) of the weight (the bias
 *     whole, on every member) and reads those input features; the members' partial
 *     products are all-reduced in forward, the bias added once after (Megatron's g); its
 *     backward needs no collective (every member has the whole gradient of the output).
 *
 * So a column layer followed, through element-wise layers, by a row layer costs one
 * all-reduce in forward and one in backward (none when the column layer is the model's
 * first, whose input gradient nobody wants). Both run fp32 and bf16 as linear does, and
 * split backward in B and W halves for zero-bubble schedules (the all-reduce is in B). The
 * member spec's in and out are the member's (column: out / T; row: in / T). */
#include <math.h>

#include "layers_impl.h"

/* PyTorch's Linear as the whole layer draws it: uniform in +-1/sqrt(the whole fan-in). */
static int column_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  const float b = 1.0f / sqrtf((float)l->in);
  TR__TRY(tr_tensor_list_add_part(t, "weight", l->out, l->in, TR_INIT_UNIFORM, b, 0, 1, l->part,
                                  l->parts));
  return l->bias ? tr_tensor_list_add_part(t, "bias", l->out, 0, TR_INIT_UNIFORM, b, 0, 1,
                                           l->part, l->parts)
                 : 0;
}

static int row_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  const float b = 1.0f / sqrtf((float)(l->in * l->parts));
  TR__TRY(tr_tensor_list_add_part(t, "weight", l->out, l->in, TR_INIT_UNIFORM, b, 1, 1, l->part,
                                  l->parts));
  return l->bias ? tr_tensor_list_add(t, "bias", l->out, 0, TR_INIT_UNIFORM, b) : 0;
}

static void bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  *act = (size_t)B * T * l->in;
  *scratch = (size_t)B * T * l->out;
}

static const tr_linear_bf16 *bf16_of(const tr_layer_ctx *c, tr_linear_bf16 *h) {
  if (!c->p16) return NULL;
  *h = (tr_linear_bf16){c->p16[0], c->act16, c->scratch16};
  return h;
}

static const float *bias_of(const tr_layer_ctx *c, float *const *p) {
  return c->l->bias ? p[1] : NULL;
}

static int comm_of(const tr_layer_ctx *c) {
  return c->tensor ? 0
                   : tr_layer_fail(c, TR_EINVAL, "part %d of %d without its tensor group "
                                   "(tr_stage_config.tensor)", c->l->part, c->l->parts);
}

/* ---- column-parallel ------------------------------------------------------------------------ */

static int column_forward(const tr_layer_ctx *c) {
  const tr_layer_spec *l = c->l;
  tr_linear_bf16 h;
  return tr_linear_forward(c->s, c->act, c->x, c->p[0], bias_of(c, c->p), c->B * c->T, l->in,
                           l->out, bf16_of(c, &h));
}

/* Megatron's f in backward: the whole input's gradient is the sum of the members' */
static int reduce_dinp(const tr_layer_ctx *c, float *dinp) {
  if (!dinp) return 0;
  TR__TRY(comm_of(c));
  return c->tensor->all_reduce(c->tensor, c->s, dinp, tr__numel(c, c->l->in), TR_REDUCE_SUM);
}

static int column_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_layer_spec *l = c->l;
  tr_linear_bf16 h;
  TR__TRY(tr_linear_backward(c->s, dinp, c->g[0], l->bias ? c->g[1] : NULL, dout, c->x, c->p[0],
                             c->B * c->T, l->in, l->out, bf16_of(c, &h)));
  return reduce_dinp(c, dinp);
}

static int column_backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  TR__TRY(tr_linear_backward_input(c->s, dinp, dout, c->p[0], c->B * c->T, c->l->in, c->l->out));
  return reduce_dinp(c, dinp);
}

static int backward_weight(const tr_layer_ctx *c, const float *dout) {
  const tr_layer_spec *l = c->l;
  return tr_linear_backward_weight(c->s, c->g[0], l->bias ? c->g[1] : NULL, dout, c->x,
                                   c->B * c->T, l->in, l->out);
}

static double flops(const tr_layer_spec *l, int T) { return 2.0 * T * l->in * l->out; }

const tr_layer_type tr__layer_linear_column_type = {
    .name = "linear (column-parallel)", .tensors = column_tensors, .forward = column_forward,
    .backward = column_backward, .flops = flops, .backward_input = column_backward_input,
    .backward_weight = backward_weight, .bf16_elems = bf16_elems};

/* ---- row-parallel --------------------------------------------------------------------------- */

static int row_forward(const tr_layer_ctx *c) {
  const tr_layer_spec *l = c->l;
  const int N = c->B * c->T;
  tr_linear_bf16 h;
  TR__TRY(comm_of(c));
  TR__TRY(tr_linear_forward(c->s, c->act, c->x, c->p[0], NULL, N, l->in, l->out, bf16_of(c, &h)));
  TR__TRY(c->tensor->all_reduce(c->tensor, c->s, c->act, tr__numel(c, l->out), TR_REDUCE_SUM));
  return l->bias ? tr_bias_add(c->s, c->act, c->p[1], (size_t)N, (size_t)l->out) : 0;
}

static int row_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const tr_layer_spec *l = c->l;
  tr_linear_bf16 h;
  return tr_linear_backward(c->s, dinp, c->g[0], l->bias ? c->g[1] : NULL, dout, c->x, c->p[0],
                            c->B * c->T, l->in, l->out, bf16_of(c, &h));
}

static int row_backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  return tr_linear_backward_input(c->s, dinp, dout, c->p[0], c->B * c->T, c->l->in, c->l->out);
}

const tr_layer_type tr__layer_linear_row_type = {
    .name = "linear (row-parallel)", .tensors = row_tensors, .forward = row_forward,
    .backward = row_backward, .flops = flops, .backward_input = row_backward_input,
    .backward_weight = backward_weight, .bf16_elems = bf16_elems};

/* ---- the shard op (linear.c's table) -------------------------------------------------------- */

int tr__linear_shard(const tr_layer_spec *l, tr_split how, int part, int parts,
                     tr_layer_spec *member, char *err, size_t err_size) {
  if (how != TR_SPLIT_COLUMN && how != TR_SPLIT_ROW)
    return tr_errorf(err, err_size, TR_EINVAL, "a linear layer splits by columns or rows only");
  const int col = how == TR_SPLIT_COLUMN, along = col ? l->out : l->in;
  if (parts < 1 || part < 0 || part >= parts || along % parts)
    return tr_errorf(err, err_size, TR_EINVAL, "%d %s features across %d members", along,
                     col ? "output" : "input", parts);
  *member = *l;
  member->type = col ? &tr__layer_linear_column_type : &tr__layer_linear_row_type;
  if (col) member->out = l->out / parts;
  else member->in = l->in / parts;
  member->part = part;
  member->parts = parts;
  return 0;
}
