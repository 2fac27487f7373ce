/* models_impl.h — what the models sources share and callers need not see. */
#ifndef TR_MODELS_IMPL_H
#define TR_MODELS_IMPL_H

#include <stddef.h>

#include "tr_base.h"
#include "tr_model.h"

/* Returns the status of a failing call from the enclosing function. */
#define TR__TRY(call)           \
  do {                          \
    int tr__rc_ = (call);       \
    if (tr__rc_) return tr__rc_; \
  } while (0)

/* Tensors and buffer parts start on 64-byte boundaries: 16 floats. */
#define TR__ALIGN_FLOATS 16

static inline size_t tr__align_floats(size_t n) {
  return (n + TR__ALIGN_FLOATS - 1) / TR__ALIGN_FLOATS * TR__ALIGN_FLOATS;
}

/* How a tensor starts out (PyTorch's defaults). */
typedef enum tr__init_kind { TR__INIT_UNIFORM, TR__INIT_NORMAL, TR__INIT_ONES, TR__INIT_ZEROS } tr__init_kind;

typedef struct tr__tensor_init {
  tr__init_kind kind;
  float bound; /* uniform: [-bound, bound) */
} tr__tensor_init;

struct tr_model {
  char name[32];
  int ctx;
  tr_loss_kind loss;
  int nlayers;
  tr_layer_spec *layers;
  int batch;
  tr_optim_config optim;
  int ntensors;
  tr_tensor_info *tensors;
  tr__tensor_init *init;   /* per tensor */
  int *layer_tensor0;      /* per layer + 1: tensors of layer l are [l0[l], l0[l+1]) */
  size_t *layer_offset;    /* per layer + 1: spans are [off[l], off[l+1]) */
  size_t numel, param_count;
};

#endif
