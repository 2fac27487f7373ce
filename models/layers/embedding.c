/* embedding.c — the token embedding kind with learned positions: tokens (B,T) ->
 * (B,T,out) = wte[token] + wpe[t].
 *
 * Tensor parallelism (shard: Megatron's vocabulary-parallel embedding): member `part` of
 * `parts` holds rows [part V/parts, (part+1) V/parts) of wte, wpe whole. Its forward gives a
 * token outside its rows zeros, one all-reduce sums the members' (each token's row comes from
 * the one member that holds it, so the sum is the row itself, bitwise), and wpe is added
 * after; backward adds into the member's rows alone (wpe's gradient, whole, on every member).
 * Megatron pads the vocabulary to a multiple of the members; this kind refuses one that does
 * not divide instead (say 50257 across 2): pad the vocabulary in the model.
 *
 * The masked gather and scatter are the device ops tr_embedding_part_forward and _backward,
 * so a member runs on every device; a host member also checks its tokens against the whole
 * vocabulary first (a GPU cannot, cheaply: there a token outside gives zeros everywhere). */
#include <stdio.h>

#include "layers_impl.h"

tr_layer_spec tr_layer_embedding(int vocab, int width) {
  return (tr_layer_spec){.type = &tr_layer_embedding_type, .in = 1, .out = width, .vocab = vocab};
}

static int split(const tr_layer_spec *l) { return l->parts > 1; }

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  (void)in;
  if (l->vocab > 0 && l->in == 1) return 0;
  return tr_errorf(err, err_size, TR_EINVAL,
                   "needs a vocabulary (has %d) and one token a row (in %d)", l->vocab, l->in);
}

static int shard(const tr_layer_spec *l, tr_split how, int part, int parts, tr_layer_spec *member,
                 char *err, size_t err_size) {
  (void)how; /* the embedding splits itself, by its vocabulary */
  if (parts < 1 || part < 0 || part >= parts || split(l))
    return tr_errorf(err, err_size, TR_EINVAL, "part %d of %d of an embedding%s", part, parts,
                     split(l) ? " already split" : "");
  if (l->vocab % parts)
    return tr_errorf(err, err_size, TR_EINVAL, "a vocabulary of %d across %d members: it must "
                     "divide (Megatron pads it; pad the model's vocabulary)", l->vocab, parts);
  *member = *l;
  if (parts == 1) return 0;
  member->vocab = l->vocab / parts, member->part = part, member->parts = parts;
  return 0;
}

/* PyTorch's Embedding: normal(0, 1) */
static int tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  if (split(l))
    TR__TRY(tr_tensor_list_add_part(t, "wte", l->vocab, l->out, TR_INIT_NORMAL, 1.0f, 0, 1,
                                    l->part, l->parts));
  else
    TR__TRY(tr_tensor_list_add(t, "wte", l->vocab, l->out, TR_INIT_NORMAL, 1.0f));
  return tr_tensor_list_add(t, "wpe", T, l->out, TR_INIT_NORMAL, 1.0f);
}

/* ---- a member's rows --------------------------------------------------------------------- */

/* Its comm; on a host device, every token below the whole vocabulary. */
static int member_ready(const tr_layer_ctx *c) {
  const tr_layer_spec *l = c->l;
  if (!c->tensor || c->tensor->size != l->parts)
    return tr_layer_fail(c, TR_EINVAL, "embedding: part %d of %d needs its tensor group's comm",
                         l->part, l->parts);
  if (tr_device_info_of(tr_stream_device(c->s))->kind != TR_DEVICE_HOST) return 0;
  const int32_t *idx = c->x;
  const int64_t V = (int64_t)l->vocab * l->parts;
  for (size_t i = 0; i < (size_t)c->B * c->T; i++)
    if (idx[i] < 0 || idx[i] >= V)
      return tr_layer_fail(c, TR_EINVAL, "embedding: token %d at %zu outside the vocabulary "
                           "[0, %lld)", idx[i], i, (long long)V);
  return 0;
}

static int forward_part(const tr_layer_ctx *c) {
  TR__TRY(member_ready(c));
  const size_t C = (size_t)c->l->out, N = (size_t)c->B * c->T, T = (size_t)c->T;
  const int64_t lo = (int64_t)c->l->part * c->l->vocab;
  /* the member's rows; zeros for the others' tokens */
  TR__TRY(tr_embedding_part_forward(c->s, c->act, c->x, c->p[0], N, C, (size_t)c->l->vocab, lo));
  TR__TRY(c->tensor->all_reduce(c->tensor, c->s, c->act, N * C, TR_REDUCE_SUM));
  for (size_t b = 0; b < (size_t)c->B; b++) /* the positions, whole on every member */
    TR__TRY(tr_add(c->s, c->act + b * T * C, c->act + b * T * C, c->p[1], T * C));
  return 0;
}

/* dwte's rows of the member's tokens, and dwpe, in tr_embedding_backward's (b, t) order */
static int backward_part(const tr_layer_ctx *c, const float *dout) {
  TR__TRY(member_ready(c));
  const int64_t lo = (int64_t)c->l->part * c->l->vocab;
  return tr_embedding_part_backward(c->s, c->g[0], c->g[1], dout, c->x, (size_t)c->B,
                                    (size_t)c->T, (size_t)c->l->out, (size_t)c->l->vocab, lo);
}

/* ---- the table ----------------------------------------------------------------------------- */

static int forward(const tr_layer_ctx *c) {
  if (split(c->l)) return forward_part(c);
  return tr_embedding_forward(c->s, c->act, c->x, c->p[0], c->p[1], c->B, c->T, c->l->out,
                          c->l->vocab);
}

/* tokens have no gradient: dinp is never asked for */
static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  (void)dinp;
  if (split(c->l)) return backward_part(c, dout);
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
    .backward_weight = backward_weight, .shard = shard};
