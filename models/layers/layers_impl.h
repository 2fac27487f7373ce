/* layers_impl.h — what the built-in layer kinds share (private to models/). */
#ifndef TR_LAYERS_IMPL_H
#define TR_LAYERS_IMPL_H

#include "models_impl.h"
#include "tr_layer_type.h"
#include "tr_layers.h"

/* Elements of a micro-batch's activations of width w. */
static inline size_t tr__numel(const tr_layer_ctx *c, int w) { return (size_t)c->B * c->T * w; }

/* check for the kinds whose output is as wide as their input */
int tr__check_same_width(const tr_layer_spec *l, int in, char *err, size_t err_size);
/* PyTorch's Linear ("<prefix>weight", "<prefix>bias") and LayerNorm, for the kinds built of
 * them (layer.c, below every kind). */
int tr__declare_linear(tr_tensor_list *t, const char *prefix, int in, int out, int bias);
int tr__declare_layernorm(tr_tensor_list *t, const char *prefix, int width);

#endif
