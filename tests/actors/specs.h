/* specs.h — what the training tests share: the small models (an mlp of four layers with
 * momentum, a gpt of one block with AdamW, beside the built-in simplenet), the macros that
 * spell a layer as a constant initialiser, and the parallel layouts a run is tried in. */
#ifndef TR_TEST_SPECS_H
#define TR_TEST_SPECS_H

#include <stdio.h>

#include "troupe.h"

#define LINEAR(i, o, b) {.type = &tr_layer_linear_type, .in = (i), .out = (o), .bias = (b)}
#define RELU(w) {.type = &tr_layer_relu_type, .in = (w), .out = (w)}
#define LAYERNORM(w) {.type = &tr_layer_layernorm_type, .in = (w), .out = (w)}
#define EMBEDDING(v, w) {.type = &tr_layer_embedding_type, .in = 1, .out = (w), .vocab = (v)}
#define DROPOUT(w, prob) {.type = &tr_layer_dropout_type, .in = (w), .out = (w), .p = (prob)}
#define RESIDUAL(w, count, layers) \
  {.type = &tr_layer_residual_type, .in = (w), .out = (w), .n = (count), .inner = (layers)}
#define BLOCK(w, h, hid) {.type = &tr_layer_block_type, .in = (w), .out = (w), .heads = (h), .hidden = (hid)}

/* 4 x Linear(64,64), ReLU between; MSE; momentum 0.9 */
static const tr_layer_spec mlp4_layers[] = {
    LINEAR(64, 64, 1), RELU(64), LINEAR(64, 64, 1), RELU(64),
    LINEAR(64, 64, 1), RELU(64), LINEAR(64, 64, 1),
};
static const tr_model_spec mlp4 = {
    .name = "mlp4",
    .ctx = 1,
    .loss = TR_LOSS_MSE,
    .nlayers = 7,
    .layers = mlp4_layers,
    .batch = 48,
    .optim = {.kind = TR_OPTIM_MOMENTUM, .lr = 0.01f, .momentum = 0.9f},
};

/* A gpt of one block: byte tokens (the arithmetic corpus), context 16, width 32; AdamW.
 * eps 1e-6, not 1e-8: the gradient of the keys' bias is zero but for rounding (softmax
 * ignores a shift shared by all keys), and with a tiny eps AdamW turns that rounding into
 * steps of full size and random sign, which no two orders of summation share. */
static const tr_layer_spec gpt1_layers[] = {
    EMBEDDING(256, 32), BLOCK(32, 2, 64), LAYERNORM(32), LINEAR(32, 256, 0),
};
static const tr_model_spec gpt1 = {
    .name = "gpt1",
    .ctx = 16,
    .loss = TR_LOSS_CROSSENTROPY,
    .nlayers = 4,
    .layers = gpt1_layers,
    .batch = 48,
    .optim = {.kind = TR_OPTIM_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f},
};

static inline const char *model_name(const tr_train_options *o) {
  return o->spec ? o->spec->name : o->model;
}

/* A parallel layout of a run, as the equivalence tests list them. */
typedef struct layout_case {
  tr_strategy strategy;
  const char *devices;
  int schedule; /* pipeline */
  int microbatches;
  int chunks;    /* interleaved */
  int recompute; /* activation recomputation */
} layout_case;

#define SINGLE_RECOMPUTE {TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 1}
#define DP(devices) {TR_STRATEGY_DP, devices, -1, 0, 0, 0}
#define MP(devices) {TR_STRATEGY_MP, devices, -1, 0, 0, 0}
#define PIPELINE(devices, schedule, m) {TR_STRATEGY_PIPELINE, devices, schedule, m, 0, 0}
#define INTERLEAVED(devices, v, m) {TR_STRATEGY_PIPELINE, devices, TR_SCHEDULE_INTERLEAVED, m, v, 0}
#define RECOMPUTING(devices, schedule, m) {TR_STRATEGY_PIPELINE, devices, schedule, m, 0, 1}
#define HYBRID(devices) {TR_STRATEGY_HYBRID, devices, -1, 0, 0, 0}
#define HYBRID_ZB1(devices) {TR_STRATEGY_HYBRID, devices, TR_SCHEDULE_ZB1, 0, 0, 0}

static inline tr_train_options with_layout(tr_train_options o, const layout_case *c) {
  o.strategy = c->strategy;
  o.devices = c->devices;
  if (c->schedule >= 0) o.job.layout.schedule = (tr_schedule_kind)c->schedule;
  o.job.layout.microbatches = c->microbatches;
  o.job.layout.chunks = c->chunks;
  o.job.memory.recompute = c->recompute;
  return o;
}

/* "1f1b", "interleaved (v 3)", "zb1, recompute", "-": what a case's schedule is. */
static inline const char *layout_schedule(const layout_case *c, char *buf, size_t n) {
  if (c->schedule < 0) {
    snprintf(buf, n, "%s", c->recompute ? "recompute" : "-");
    return buf;
  }
  int k = snprintf(buf, n, "%s", tr_schedule_kind_name((tr_schedule_kind)c->schedule));
  if (c->chunks && k > 0 && (size_t)k < n)
    k += snprintf(buf + k, n - (size_t)k, " (v %d)", c->chunks);
  if (c->recompute && k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, ", recompute");
  return buf;
}

#endif
