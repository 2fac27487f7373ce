/* layers_impl.h — what the built-in layer kinds share (private to models/). */
#ifndef TR_LAYERS_IMPL_H
#define TR_LAYERS_IMPL_H

#include "tr_layer_type.h"
#include "tr_layers.h"

/* Elements of a micro-batch's activations of width w. */
static inline size_t tr__numel(const tr_layer_ctx *c, int w) { return (size_t)c->B * c->T * w; }

/* Tensor parallelism's kinds (layers/linear_split.c): what a member holds of a linear layer
 * split by output features (column) or input features (row); linear's shard op makes them. */
extern const tr_layer_type tr__layer_linear_column_type;
extern const tr_layer_type tr__layer_linear_row_type;
int tr__linear_shard(const tr_layer_spec *l, tr_split how, int part, int parts,
                     tr_layer_spec *member, char *err, size_t err_size);

/* check for the kinds whose output is as wide as their input */
int tr__check_same_width(const tr_layer_spec *l, int in, char *err, size_t err_size);
/* PyTorch's Linear ("<prefix>weight", "<prefix>bias") and LayerNorm, for the kinds built of
 * them (layer.c, below every kind). */
int tr__declare_linear(tr_tensor_list *t, const char *prefix, int in, int out, int bias);
int tr__declare_layernorm(tr_tensor_list *t, const char *prefix, int width);

/* The transformer block split across a tensor group (attention.c; Megatron's split, block.c's
 * shard): d.NH and d.H are the member's heads and hidden units, d.C the whole width, `ca`
 * attention's width on the member (C / parts: its q, k, v columns and the projection's input
 * features), tc its comm. ca == d.C with tc NULL is the block held whole, bitwise
 * tr_block_*'s. Forward all-reduces twice (after each row-parallel projection), backward
 * twice (the input gradients of the column-parallel qkv and fc); the weight half never. */
size_t tr__block_acts_carve(tr_block_acts *a, float *base, tr_block_dims d, int ca);
size_t tr__block_scratch_carve(tr_block_scratch *sc, float *base, tr_block_dims d, int ca);
size_t tr__block_keep_carve(tr_block_keep *k, float *base, tr_block_dims d, int ca);
void tr__block_bf16_carve(tr_block_bf16 *h, tr_bf16 *act, tr_bf16 *scratch, tr_block_dims d,
                          int ca, size_t *act_elems, size_t *scratch_elems);
int tr__block_forward(tr_stream *s, const tr_block_acts *a, const tr_block_params *p,
                      const float *inp, tr_block_dims d, int ca, const tr_tensor_comm *tc,
                      const tr_block_bf16 *mp);
int tr__block_backward(tr_stream *s, float *dinp, const tr_block_params *g,
                       const tr_block_scratch *sc, const float *dout, const float *inp,
                       const tr_block_params *p, const tr_block_acts *a, tr_block_dims d, int ca,
                       const tr_tensor_comm *tc, const tr_block_bf16 *mp);
int tr__block_backward_input(tr_stream *s, float *dinp, const tr_block_params *g,
                             const tr_block_scratch *sc, const tr_block_keep *k,
                             const float *dout, const float *inp, const tr_block_params *p,
                             const tr_block_acts *a, tr_block_dims d, int ca,
                             const tr_tensor_comm *tc);
int tr__block_backward_weight(tr_stream *s, const tr_block_params *g, const tr_block_keep *k,
                              const float *dout, const tr_block_acts *a, tr_block_dims d,
                              int ca);

#endif
