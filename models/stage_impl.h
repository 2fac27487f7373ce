/* stage_impl.h — the inside of a tr_stage, shared by stage.c and optim.c. */
#ifndef TR_STAGE_IMPL_H
#define TR_STAGE_IMPL_H

#include "models_impl.h"
#include "tr_layers.h"
#include "tr_model.h"

/* A layer's tensors, in the model's table order: t[k] is its k-th tensor. */
typedef union tr__layer_tensors {
  float *t[12];
  struct {
    float *w, *b; /* linear, layernorm: weight, bias; embedding: wte, wpe */
  };
  tr_block_params block;
} tr__layer_tensors;

typedef struct tr__stage_layer {
  const tr_layer_spec *spec;
  int index;              /* in the model */
  tr_block_dims dims;     /* B, T, width, heads, hidden */
  size_t act_off;         /* its activations, from a slot's start (floats) */
  tr__layer_tensors p, g; /* parameters and their gradients */
} tr__stage_layer;

struct tr_stage {
  const tr_model *m;
  tr_device *dev;
  tr_stream *s;
  tr_stage_info info;
  tr_optim_config optim;
  int64_t steps;
  float *params, *grads, *state; /* one allocation each, or what the stage uses instead */
  float *own[3];                  /* its own: params, grads, state (freed at close) */
  float *slots;                  /* slots x slot_stride floats */
  size_t slot_stride;
  size_t in_off, target_off, dout_off, probs_off, loss_off; /* within a slot */
  float *scratch;                /* one allocation: */
  float *g[2];                   /*   activation gradients, alternating */
  float *dinput[2];              /*   the stage's input gradient, alternating */
  int dinput_next;
  tr_block_scratch bsc;          /*   the blocks' temporaries */
  float *scalars;                /*   [0] sum of squares, [1] clip factor */
  int nl;
  tr__stage_layer *layers;
  tr_grad_ready_fn ready;
  void *ready_arg;
  char err[512];
};

/* Formats the stage's error ("stage [0,3) of gpt on host:0: <what>: <device's message>")
 * and returns rc. */
int tr__stage_fail(tr_stage *st, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
