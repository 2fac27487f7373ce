/* models_impl.h — the inside of a tr_model (its table of tensors: how each starts out, where
 * each lies) and the 64-byte alignment of tensors and buffers, for the models sources that
 * build, shard and run models; callers need not see it. Elsewhere, so that a file takes only
 * what it uses: TR__TRY in tr_base.h, the atomic file writes in file_atomic.h, the split
 * linear kinds in layers/layers_impl.h. */
#ifndef TR_MODELS_IMPL_H
#define TR_MODELS_IMPL_H

#include <stddef.h>

#include "tr_base.h"
#include "tr_model.h"

/* Tensors and buffer parts start on 64-byte boundaries: 16 floats. */
#define TR__ALIGN_FLOATS 16

static inline size_t tr__align_floats(size_t n) {
  return (n + TR__ALIGN_FLOATS - 1) / TR__ALIGN_FLOATS * TR__ALIGN_FLOATS;
}

/* The same for bf16: 32 of them to 64 bytes. */
static inline size_t tr__align_bf16(size_t n) { return (n + 31) / 32 * 32; }

/* How a tensor starts out (tr_tensor_list_add). */
typedef struct tr__tensor_init {
  tr_init_kind kind;
  float scale;
} tr__tensor_init;

/* Where a kind's `tensors` declares to: the model's table, or a count alone (m NULL). */
struct tr_tensor_list {
  tr_model *m;
  int layer;
  char prefix[48]; /* "3." at the top, "3.0." inside a composite */
  int count;
  char *err;       /* what is wrong with a declaration, or NULL */
  size_t err_size;
};

/* Appends a tensor named `name` to m's table at the next aligned offset (layer.c, where
 * tr_tensor_list_add ends); `part` NULL for a tensor held whole, else where it lies in the
 * whole one (tr_tensor_list_add_part). */
int tr__model_add_tensor(tr_model *m, int layer, const char *name, int64_t d0, int64_t d1,
                         tr_init_kind init, float scale, const tr_tensor_part *part);

/* A part's elements as runs that are consecutive both in the part and in the whole tensor
 * (row-major): fn(arg, at in the part, at in the whole, length) for each, in the part's
 * order; a tensor held whole (parts 0, numel elements) is one run. Stops at fn's first
 * non-zero status and returns it (layer.c). */
typedef int (*tr__part_run_fn)(void *arg, size_t part_at, size_t whole_at, size_t n);
int tr__tensor_part_runs(const tr_tensor_part *p, size_t numel, tr__part_run_fn fn, void *arg);

struct tr_model {
  char name[32];
  int ctx;
  tr_loss_kind loss;
  int nlayers;
  tr_layer_spec *layers;   /* one allocation with every inner spec (deep copies) */
  int batch;
  tr_optim_config optim;
  int ntensors, tensors_cap;
  tr_tensor_info *tensors;
  tr__tensor_init *init;   /* per tensor */
  int *layer_tensor0;      /* per layer + 1: tensors of layer l are [l0[l], l0[l+1]) */
  size_t *layer_offset;    /* per layer + 1: spans are [off[l], off[l+1]) */
  size_t numel, param_count;
  /* Tensor parallelism (a member's model, tr_model_shard): per tensor, where it lies in the
   * whole one (parts 0: held whole), and the whole tensor's offset in the whole model's
   * parameter space, which initialisation counts from (a model held whole: its offset) */
  tr_tensor_part *parts;
  size_t *whole_offset;
  size_t whole_numel;      /* the whole model's parameter space */
};

#endif
