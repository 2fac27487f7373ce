/* measure.c — each layer's cost, timed on the device it will run on: what cutting a model
 * into pipeline stages balances (tr_model_measure_layers, tr_model_balance_costs), and what
 * a step's prediction runs its schedule with (tr_model_measure_passes: the forward, the
 * backward, and its two halves as zero-bubble schedules run them). */
#include <stdio.h>
#include <stdlib.h>

#include "stage_impl.h"
#include "tr_system.h"

/* A layer's times in one round: forward, backward, its input half, its weight half (the
 * halves only when `halves`). */
enum { FORWARD, BACKWARD, INPUT, WEIGHT, PASSES };

/* The slots a round turns through: a run's micro-batches are not the one just computed, and
 * what a backward reads was saved a while before (other layers, other micro-batches ran in
 * between), not a moment ago in the cache. */
enum { SLOTS = 4 };

typedef int (*pass_fn)(tr_stage *st, int slot);
static int forward(tr_stage *st, int slot) { return tr_stage_forward(st, slot); }
static int backward(tr_stage *st, int slot) { return tr_stage_backward(st, slot, NULL); }
static int backward_input(tr_stage *st, int slot) {
  return tr_stage_backward_input(st, slot, NULL);
}
static int backward_weight(tr_stage *st, int slot) { return tr_stage_backward_weight(st, slot); }

/* One pass over the layers in order (or from the last, `reverse`), each timed on its own
 * into t[l × PASSES + k]. */
static int sweep(tr_stage **st, int L, int slot, pass_fn f, bool reverse, int k, double *t) {
  for (int i = 0; i < L; i++) {
    const int l = reverse ? L - 1 - i : i;
    const uint64_t t0 = tr_now_ns();
    int rc = f(st[l], slot);
    if (rc == 0) rc = tr_stream_synchronize(tr_stage_stream(st[l]));
    if (rc) return rc;
    t[l * PASSES + k] = (double)(tr_now_ns() - t0) / 1e9;
  }
  return 0;
}

/* A round as a step runs it on one device: every layer's forward, then every backward from
 * the last layer; then, for the halves, the forwards again and every backward's input half
 * from the last layer, then every weight half. */
static int round_of(tr_stage **st, int L, int slot, bool halves, double *t) {
  int rc = sweep(st, L, slot, forward, false, FORWARD, t);
  if (rc == 0) rc = sweep(st, L, slot, backward, true, BACKWARD, t);
  if (rc || !halves) return rc;
  for (int l = 0; l < L && rc == 0; l++) /* the halves need the activations again: untimed */
    rc = forward(st[l], slot);
  if (rc == 0) rc = sweep(st, L, slot, backward_input, true, INPUT, t);
  if (rc == 0) rc = sweep(st, L, slot, backward_weight, true, WEIGHT, t);
  return rc;
}

/* Each layer a stage of its own on zeroed inputs, round after round over every layer (as a
 * step on one device runs them: round_of), each in a slot of its own: what another thread
 * takes from the machine for a while then lands on every layer alike, or on none. Each pass's fastest round is kept (`median` false: a cut compares layers, and the
 * fastest is the least disturbed), or its median round (a prediction of a run's time: what
 * a run meets round after round, caches cold after the other layers, not its best). A signal
 * held during start-up (tr_signals_hold) ends it between layers: on a loaded machine a large
 * model's rounds take long, and the user asked to stop. best[l × PASSES + pass]. */
static int measure(const tr_model *m, tr_device *d, const tr_tensor_comm *tensor, int batch,
                   int reps, bool halves, bool median, double *best, char *err,
                   size_t err_size) {
  const int L = m->nlayers;
  if (reps < 1 || batch < 1) return TR_EINVAL;
  tr_stage **st = calloc((size_t)L, sizeof *st);
  double *all = malloc((size_t)reps * (size_t)L * PASSES * sizeof *all); /* [r][l][pass] */
  if (st == NULL || all == NULL) {
    free(st);
    free(all);
    return TR_ENOMEM;
  }
  int rc = tr_device_bind(d);
  for (int l = 0; l < L && rc == 0; l++) {
    tr_stage_config c = tr_stage_defaults(m);
    c.first = l;
    c.end = l + 1;
    c.batch = c.global_batch = batch;
    c.split = halves;
    c.slots = SLOTS;
    c.tensor = tensor;
    rc = tr_stage_open(&st[l], m, d, &c, err, err_size);
    if (rc == 0) tr_stage_set_samples(st[l], 0, 0); /* random layers draw as in training */
  }
  double *t = calloc((size_t)L * PASSES, sizeof *t);
  if (t == NULL) rc = rc ? rc : TR_ENOMEM;
  for (int r = -1; r < reps && rc == 0; r++) { /* r = -1: the warm-up */
    if (tr_signals_held()) {
      rc = TR_EINTR;
      if (err && err_size) snprintf(err, err_size, "measuring stopped by a signal");
      break;
    }
    rc = round_of(st, L, (r + SLOTS) % SLOTS, halves, t);
    if (rc && err && err_size) snprintf(err, err_size, "%s", tr_device_error(d));
    for (int i = 0; i < L * PASSES && r >= 0; i++) all[(size_t)r * L * PASSES + (size_t)i] = t[i];
  }
  free(t);
  for (int i = 0; i < L * PASSES && rc == 0; i++) {
    double v[64];
    const int n = reps < 64 ? reps : 64;
    for (int r = 0; r < n; r++) v[r] = all[(size_t)r * L * PASSES + (size_t)i];
    tr__sort_doubles(v, (size_t)n);
    best[i] = median ? v[n / 2] : v[0];
  }
  for (int l = 0; l < L; l++) tr_stage_close(st[l]);
  free(st);
  free(all);
  return rc;
}

/* What both calls need: 0, or TR_EINVAL in err naming the argument. */
static int measurable(const char *call, const tr_model *m, const tr_device *d, int batch,
                      int reps, const void *out, const char *out_name, char *err,
                      size_t err_size) {
  if (!m || !d || !out)
    return tr_errorf(err, err_size, TR_EINVAL, "%s: %s is NULL", call,
                     !m ? "m" : !d ? "d" : out_name);
  if (batch < 1 || reps < 1)
    return tr_errorf(err, err_size, TR_EINVAL, "%s: %s %d: give 1 or more", call,
                     batch < 1 ? "batch" : "reps", batch < 1 ? batch : reps);
  return 0;
}

int tr_model_measure_layers(const tr_model *m, tr_device *d, int batch, int reps, double *cost,
                            char *err, size_t err_size) {
  TR__TRY(measurable(__func__, m, d, batch, reps, cost, "cost", err, err_size));
  double *best = calloc((size_t)m->nlayers * PASSES, sizeof *best);
  if (best == NULL) return TR_ENOMEM;
  const int rc = measure(m, d, NULL, batch, reps, false, false, best, err, err_size);
  for (int l = 0; l < m->nlayers && rc == 0; l++)
    cost[l] = best[l * PASSES + FORWARD] + best[l * PASSES + BACKWARD];
  free(best);
  return rc;
}

int tr_model_measure_passes(const tr_model *m, tr_device *d, const tr_tensor_comm *tensor,
                            int batch, int reps, tr_layer_times *times, char *err,
                            size_t err_size) {
  TR__TRY(measurable(__func__, m, d, batch, reps, times, "times", err, err_size));
  double *best = calloc((size_t)m->nlayers * PASSES, sizeof *best);
  if (best == NULL) return TR_ENOMEM;
  const int rc = measure(m, d, tensor, batch, reps, true, true, best, err, err_size);
  for (int l = 0; l < m->nlayers && rc == 0; l++) {
    const double *b = best + l * PASSES;
    times[l] = (tr_layer_times){.forward = b[FORWARD], .backward = b[BACKWARD],
                                .backward_input = b[INPUT], .backward_weight = b[WEIGHT]};
  }
  free(best);
  return rc;
}
