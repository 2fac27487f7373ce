/* measure.c — each layer's cost, timed on the device it will run on: what cutting a model
 * into pipeline stages balances (tr_model_balance_costs). */
#include <stdio.h>
#include <stdlib.h>

#include "stage_impl.h"
#include "tr_system.h"

int tr_model_measure_layers(const tr_model *m, tr_device *d, int batch, int reps, double *cost,
                            char *err, size_t err_size) {
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
    rc = tr_stage_open(&st[l], m, d, &c, err, err_size);
    if (rc == 0) tr_stage_set_samples(st[l], 0, 0); /* random layers draw as in training */
  }
  /* Round after round over every layer, keeping each layer's fastest: what another thread
   * takes from the machine for a while then lands on every layer alike, or on none. A
   * signal held during start-up (tr_signals_hold) ends it between layers: on a loaded
   * machine a large model's rounds take long, and the user asked to stop. */
  for (int r = -1; r < reps && rc == 0; r++) { /* r = -1: the warm-up */
    for (int l = 0; l < L && rc == 0; l++) {
      if (tr_signals_held()) {
        rc = TR_EINTR;
        if (err && err_size) snprintf(err, err_size, "measuring stopped by a signal");
        break;
      }
      const uint64_t t0 = tr_now_ns();
      rc = tr_stage_forward(st[l], 0);
      if (rc == 0) rc = tr_stage_backward(st[l], 0, NULL);
      if (rc == 0) rc = tr_stream_synchronize(tr_stage_stream(st[l]));
      const double t = (double)(tr_now_ns() - t0) / 1e9;
      if (r == 0 || (r > 0 && t < cost[l])) cost[l] = t;
      if (rc && err && err_size) snprintf(err, err_size, "%s", tr_stage_error(st[l]));
    }
  }
  for (int l = 0; l < L; l++) tr_stage_close(st[l]);
  free(st);
  return rc;
}
