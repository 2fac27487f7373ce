/* costs_overhead.c — the runtime's own work in a step (planner.h: tr__costs_overhead): what a
 * step costs beyond its layers, copies and optimizer — the loader's batch handed to the
 * stage, the stage's report, the coordinator's step protocol, the loop thread's turns —
 * measured once per kind of device and kept in the file of costs.
 *
 * For a model whose layers take milliseconds it is noise; for one as small as simplenet it
 * is most of the step (a prediction without it was 5 times too fast). It is measured as a
 * run meets it: simplenet trained on one device of the kind for a moment, three times, the
 * median run's time per step less what the planner predicts of that run from its layers
 * (tr__plan_predict_bare: the same prediction without this cost). Never measured before a run (layers_cached: 0 where
 * the file has none).
 *
 * Beside it, a copy's bandwidth beyond the caches (64 MiB buffers): the replica group's sums
 * and a local sync pass over all the parameters, which an 8 MiB copy (the activations' pace,
 * within the caches) made look 1.5 times quicker than they ran.
 */
#include <string.h>

#include "planner.h"

enum { RUNS = 3 };
#define RUN_SECONDS 0.2

/* Seconds a copy of `bytes` takes on d: the best of a few, between two buffers of its own. */
double tr__costs_copy_seconds(tr_device *d, size_t bytes) {
  if (bytes == 0) return 0;
  tr_stream *s = tr_device_stream(d);
  void *a = NULL, *b = NULL;
  double best = 0;
  if (tr_stream_alloc(s, bytes, &a) == 0 && tr_stream_alloc(s, bytes, &b) == 0 && tr_memset(s, a, 0, bytes) == 0)
    for (int i = 0; i < 5; i++) {
      const uint64_t t0 = tr_now_ns();
      if (tr_memcpy(s, b, a, bytes, TR_COPY_D2D) || tr_stream_synchronize(s)) break;
      const double t = (double)(tr_now_ns() - t0) / 1e9;
      if (i == 0 || t < best) best = t;
    }
  if (a) tr_stream_free(s, a);
  if (b) tr_stream_free(s, b);
  return best;
}


enum { BIG = 64 << 20 };

static int measure_bandwidth(void *arg, double *v, char *err, size_t n) {
  (void)err, (void)n;
  const double t = tr__costs_copy_seconds(arg, BIG);
  if (!(t > 0)) return TR_ENOMEM;
  v[0] = t / BIG;
  return 0;
}

int tr__costs_bandwidth(tr_device *d, const tr_plan_costs_config *c, double *per_byte, char *err,
                        size_t n) {
  *per_byte = 0;
  if (tr_device_is_placeholder(d)) return 0;
  char name[256];
  tr__costs_key(d, "copy per byte, 64 MiB", name, sizeof name);
  const bool only = c && c->layers_cached; /* 128 MiB: not before a run */
  int rc = tr__costs_entry(c, name, 1, 1, only ? tr__costs_not_kept : measure_bandwidth,
                           only ? (void *)name : (void *)d, per_byte, err, n);
  if (rc == TR_ESTATE && only) *per_byte = 0, rc = 0; /* not kept: none */
  return rc;
}

static int measure_overhead(void *arg, double *v, char *err, size_t n) {
  const tr_device *d = arg;
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  const tr_device_info *i = tr_device_info_of(d);
  o.devices = i->kind == TR_DEVICE_HOST ? "host:1" : i->name; /* "host:0" would be no devices */
  o.strategy = TR_STRATEGY_SINGLE;
  o.steps = 0;
  o.seconds = RUN_SECONDS;
  tr_plan_prediction p;
  /* the layers measured, not kept: the file is written once, with this entry */
  int rc = tr__plan_predict_bare(&o, &(tr_plan_costs_config){.path = ""}, &p, err, n);
  double step[RUNS];
  for (int i = 0; i < RUNS && rc == 0; i++) {
    tr_train_result r;
    rc = tr_train_run(&o, &r, err, n);
    step[i] = r.steps_per_s > 0 ? 1 / r.steps_per_s : 0;
  }
  if (rc) return rc;
  /* the median run: one that met another process's burst says more of it than of troupe */
  for (int i = 1; i < RUNS; i++)
    for (int j = i; j > 0 && step[j - 1] > step[j]; j--) {
      const double t = step[j];
      step[j] = step[j - 1], step[j - 1] = t;
    }
  const double median = step[RUNS / 2];
  v[0] = median > p.step_seconds ? median - p.step_seconds : 0;
  return 0;
}

int tr__costs_overhead(const tr_device *d, const tr_plan_costs_config *c, double *seconds,
                       char *err, size_t n) {
  *seconds = 0;
  if (tr_device_is_placeholder(d)) return 0;
  char name[256];
  tr__costs_key(d, "runtime step", name, sizeof name);
  const bool only = c && c->layers_cached; /* a run of its own: not before a run */
  int rc = tr__costs_entry(c, name, 1, 1, only ? tr__costs_not_kept : measure_overhead,
                           only ? (void *)name : (void *)d, seconds, err, n);
  if (rc == TR_ESTATE && only) *seconds = 0, rc = 0; /* not kept: none assumed */
  return rc;
}
