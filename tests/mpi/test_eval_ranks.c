/* test_eval_ranks.c — held-out evaluation across two MPI ranks (mpirun -np 2): a pipeline
 * with a stage on each rank and dp with a replica on each give the held-out figures of one
 * process (within 1e-5): the held-out micro-batches cross between ranks on the batch and
 * activation edges, and the last stages' sums reach the coordinator on rank 0. Exit 0, or
 * 1 naming what differs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "troupe.h"

enum { IN = 16, CLASSES = 8, HELD = 50 };

#define LINEAR(i, o) {.type = &tr_layer_linear_type, .in = (i), .out = (o), .bias = 1}
#define RELU(w) {.type = &tr_layer_relu_type, .in = (w), .out = (w)}
#define DROPOUT(w) {.type = &tr_layer_dropout_type, .in = (w), .out = (w), .p = 0.25f}
static const tr_layer_spec layers[] = {LINEAR(IN, 32), RELU(32), DROPOUT(32), LINEAR(32, 32),
                                       RELU(32),       LINEAR(32, CLASSES)};
static const tr_model_spec net = {.name = "evalnet", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY,
                                  .nlayers = 6, .layers = layers, .batch = 24,
                                  .optim = {.kind = TR_OPTIM_SGD, .lr = 0.2f}};

/* inputs from the index (and the set's offset); the class: the largest of the first 8 */
static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  float *fx = x;
  int32_t *iy = y;
  for (size_t k = 0; k < count; k++) {
    const uint64_t s = (uint64_t)(uintptr_t)arg + first + k;
    float *row = fx + k * IN;
    for (int i = 0; i < IN; i++) {
      uint64_t h = (s * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xC2B2AE3D27D4EB4Full);
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      row[i] = (float)((h ^ (h >> 32)) % 2048) / 1024.0f - 1.0f;
    }
    if (iy) {
      int best = 0;
      for (int c = 1; c < CLASSES; c++)
        if (row[c] > row[best]) best = c;
      iy[k] = best;
    }
  }
  return 0;
}

static int run(tr_strategy strategy, tr_world *world, const tr_data *train,
               const tr_data *held, tr_train_result *r, char *err, size_t n) {
  tr_train_options o = tr_train_defaults();
  o.spec = &net;
  o.steps = 7;
  o.strategy = strategy;
  o.devices = "host:1";
  o.world = world;
  o.deterministic = 1;
  o.job.data = train;
  o.job.eval = (tr_eval_config){.data = held, .samples = HELD, .every = 3};
  if (strategy == TR_STRATEGY_PIPELINE) o.job.layout.microbatches = 4;
  return tr_train_run(&o, r, err, n);
}

int main(void) {
  char err[1024];
  tr_world *world;
  if (tr_world_open(&world, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  const int rank = tr_world_rank(world);
  tr_data *train, *held;
  tr_data_callback cb = {.name = "train", .x_bytes = IN * sizeof(float),
                         .y_bytes = sizeof(int32_t), .fill = fill};
  int rc = tr_data_open_callback(&train, &cb, err, sizeof err);
  cb.name = "held", cb.arg = (void *)(uintptr_t)(1u << 20);
  if (!rc) rc = tr_data_open_callback(&held, &cb, err, sizeof err);
  tr_train_result one, r;
  if (!rc && rank == 0) rc = run(TR_STRATEGY_SINGLE, NULL, train, held, &one, err, sizeof err);
  const tr_strategy across[] = {TR_STRATEGY_PIPELINE, TR_STRATEGY_DP};
  for (int k = 0; k < 2 && !rc; k++) {
    rc = run(across[k], world, train, held, &r, err, sizeof err);
    if (rc || rank != 0) continue;
    const char *name = tr_strategy_name(across[k]);
    if (r.eval_count != 3 || r.eval_step != 7 || r.eval_samples != HELD ||
        !(fabs(r.eval_loss - one.eval_loss) <= 1e-5 * fabs(one.eval_loss)) ||
        !(fabs(r.eval_accuracy - one.eval_accuracy) <= 1e-5)) {
      snprintf(err, sizeof err, "%s across two ranks: %d evaluations, the last after step "
               "%lld of %lld samples: loss %.9g, accuracy %.4f; one process: %d, %lld, %lld: "
               "%.9g, %.4f", name, r.eval_count, (long long)r.eval_step,
               (long long)r.eval_samples, r.eval_loss, r.eval_accuracy, one.eval_count,
               (long long)one.eval_step, (long long)one.eval_samples, one.eval_loss,
               one.eval_accuracy);
      rc = 1;
    }
  }
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, err);
  tr_data_close(train);
  tr_data_close(held);
  tr_world_close(world); /* last: after a failure it ends every rank */
  return rc != 0;
}
