/* measure.c — each layer's cost, timed on the device it will run on: what cutting a model
 * into pipeline stages balances (tr_model_measure_layers, tr_model_balance_costs), and what
 * a step's prediction runs its schedule with (tr_model_measure_passes: the forward, the
 * backward, and its two halves as zero-bubble schedules run them). */
#include <stdio.h>
#include <stdlib.h>

#include "stage_impl.h"
#include "tr_system.h"

/* One round's times of a layer: [0] forward, [1] backward, [2] its input half, [3] its
 * weight half (the halves only when `halves`). */
enum { FORWARD, BACKWARD, INPUT, WEIGHT, PASSES };

static int time_layer(tr_stage *st, bool halves, double t[PASSES]) {
  tr_stream *s = tr_stage_stream(st);
  uint64_t t0 = tr_now_ns();
  int rc = tr_stage_forward(st, 0);
  if (rc == 0) rc = tr_stream_synchronize(s);
  const uint64_t t1 = tr_now_ns();
  if (rc == 0) rc = tr_stage_backward(st, 0, NULL);
  if (rc == 0) rc = tr_stream_synchronize(s);
  const uint64_t t2 = tr_now_ns();
  t[FORWARD] = (double)(t1 - t0) / 1e9;
  t[BACKWARD] = (double)(t2 - t1) / 1e9;
  if (rc || !halves) return rc;
  rc = tr_stage_forward(st, 0); /* the halves need the slot's activations again */
  if (rc == 0) rc = tr_stream_synchronize(s);
  t0 = tr_now_ns();
  if (rc == 0) rc = tr_stage_backward_input(st, 0, NULL);
  if (rc == 0) rc = tr_stream_synchronize(s);
  const uint64_t t3 = tr_now_ns();
  if (rc == 0) rc = tr_stage_backward_weight(st, 0);
  if (rc == 0) rc = tr_stream_synchronize(s);
  t[INPUT] = (double)(t3 - t0) / 1e9;
  t[WEIGHT] = (double)(tr_now_ns() - t3) / 1e9;
  return rc;
}

/* Each layer a stage of its own on zeroed inputs, round after round over every layer,
 * keeping each pass's fastest: what another thread takes from the machine for a while then
 * lands on every layer alike, or on none. A signal held during start-up (tr_signals_hold)
 * ends it between layers: on a loaded machine a large model's rounds take long, and the
 * user asked to stop. best[l × PASSES + pass]. */
static int measure(const tr_model *m, tr_device *d, int batch, int reps, bool halves,
                   double *best, char *err, size_t err_size) {
  const int L = m->nlayers;
  if (reps < 1 || batch < 1) return TR_EINVAL;
  tr_stage **st = calloc((size_t)L, sizeof *st);
  if (st == NULL) return TR_ENOMEM;
  int rc = tr_device_bind(d);
  for (int l = 0; l < L && rc == 0; l++) {
    tr_stage_config c = tr_stage_defaults(m);
    c.first = l;
    c.end = l + 1;
    c.batch = c.global_batch = batch;
    c.split = halves;
    rc = tr_stage_open(&st[l], m, d, &c, err, err_size);
    if (rc == 0) tr_stage_set_samples(st[l], 0, 0); /* random layers draw as in training */
  }
  for (int r = -1; r < reps && rc == 0; r++) { /* r = -1: the warm-up */
    for (int l = 0; l < L && rc == 0; l++) {
      if (tr_signals_held()) {
        rc = TR_EINTR;
        if (err && err_size) snprintf(err, err_size, "measuring stopped by a signal");
        break;
      }
      double t[PASSES] = {0};
      rc = time_layer(st[l], halves, t);
      for (int k = 0; k < PASSES && r >= 0; k++)
        if (r == 0 || t[k] < best[l * PASSES + k]) best[l * PASSES + k] = t[k];
      if (rc && err && err_size) snprintf(err, err_size, "%s", tr_stage_error(st[l]));
    }
  }
  for (int l = 0; l < L; l++) tr_stage_close(st[l]);
  free(st);
  return rc;
}

int tr_model_measure_layers(const tr_model *m, tr_device *d, int batch, int reps, double *cost,
                            char *err, size_t err_size) {
  double *best = calloc((size_t)m->nlayers * PASSES, sizeof *best);
  if (best == NULL) return TR_ENOMEM;
  const int rc = measure(m, d, batch, reps, false, best, err, err_size);
  for (int l = 0; l < m->nlayers && rc == 0; l++)
    cost[l] = best[l * PASSES + FORWARD] + best[l * PASSES + BACKWARD];
  free(best);
  return rc;
}

int tr_model_measure_passes(const tr_model *m, tr_device *d, int batch, int reps,
                            tr_layer_times *times, char *err, size_t err_size) {
  double *best = calloc((size_t)m->nlayers * PASSES, sizeof *best);
  if (best == NULL) return TR_ENOMEM;
  const int rc = measure(m, d, batch, reps, true, best, err, err_size);
  for (int l = 0; l < m->nlayers && rc == 0; l++) {
    const double *b = best + l * PASSES;
    times[l] = (tr_layer_times){.forward = b[FORWARD], .backward = b[BACKWARD],
                                .backward_input = b[INPUT], .backward_weight = b[WEIGHT]};
  }
  free(best);
  return rc;
}
