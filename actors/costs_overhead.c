/* costs_overhead.c — the runtime's own work in a step (planner.h: tr__costs_overhead): what a
 * step costs beyond its layers, copies and optimizer — the loader's batch handed to the
 * stage, the stage's report, the coordinator's step protocol, the loop thread's turns —
 * measured once per kind of device and kept in the file of costs.
 *
 * For a model whose layers take milliseconds it is noise; for one as small as simplenet it
 * is most of the step (a prediction without it was 5 times too fast). It is measured as a
 * run meets it: simplenet's job (single's wiring) trained on one device of the kind for a
 * moment, three times, the median run's time per step less what the planner predicts of that
 * run from its layers without this cost (the planner's function, given: this file does not
 * call the planner, which calls it). Never measured before a run (layers_cached: 0 where the
 * file has none).
 *
 * Beside it, a copy's bandwidth beyond the caches (64 MiB buffers): the replica group's sums
 * and a local sync pass over all the parameters, which an 8 MiB copy (the activations' pace,
 * within the caches) made look 1.5 times quicker than they ran.
 */
#include <stdio.h>
#include <string.h>

#include "planner.h"
#include "tr_graph.h"
#include "tr_job.h"

enum { RUNS = 3 };
#define RUN_SECONDS 0.2

/* Seconds a copy of `bytes` takes on d: the best of a few, between two buffers of its own. */
double tr__costs_copy_seconds(tr_device *d, size_t bytes) {
  if (bytes == 0) return 0;
  tr_stream *s = tr_device_stream(d);
  void *a = NULL, *b = NULL;
  double best = 0;
  if (tr_stream_alloc(s, bytes, &a) == 0 && tr_stream_alloc(s, bytes, &b) == 0 &&
      tr_memset(s, a, 0, bytes) == 0)
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
  int rc = tr__costs_entry(c, name, 1, 1, (const tr__costs_unit[]){TR__COSTS_PER_BYTE},
                           only ? tr__costs_not_kept : measure_bandwidth,
                           only ? (void *)name : (void *)d, per_byte, err, n);
  if (rc == TR_ESTATE && only) *per_byte = 0, rc = 0; /* not kept: none */
  return rc;
}

/* Steps a second of simplenet's job on one device (spec) for RUN_SECONDS: the job wired as
 * tr_train_run wires single (a loader feeding the stage, a coordinator), not through it (the
 * run predicts itself with this cost). */
static int job_rate(const char *spec, double *steps_per_s, char *err, size_t n) {
  tr_model *m = NULL;
  tr_device_list *devs = NULL;
  tr_data *data = NULL;
  tr_graph *g = NULL;
  tr_job *j = NULL;
  tr_actor *stage, *loader, *coordinator;
  int rc = tr_model_named(&m, "simplenet", err, n);
  if (rc == 0) rc = tr_device_list_open(&devs, spec, err, n);
  if (rc == 0) rc = tr_data_open_for(&data, m, 1, NULL, NULL, err, n);
  if (rc == 0) rc = tr_graph_new(&g, &(tr_system_config){.name = "runtime step"});
  tr_job_config c = tr_job_defaults();
  c.model = m, c.data = data;
  if (rc == 0) rc = tr_job_new(&j, g, &c, err, n);
  if (rc == 0) rc = tr_job_add_stage(j, 0, 0, tr_device_list_at(devs, 0), &stage);
  if (rc == 0) rc = tr_job_add_loader(j, 0, &loader);
  if (rc == 0) rc = tr_job_feed(j, loader, stage, stage);
  if (rc == 0) rc = tr_job_add_coordinator(j, &coordinator);
  if (rc == 0 && (rc = tr_graph_run(g, 0, 0, RUN_SECONDS)))
    snprintf(err, n, "measuring the runtime's step: %s", tr_graph_error(g));
  if (rc == 0) rc = tr_result_real(tr_job_result_of(j), "steps_per_s", steps_per_s);
  tr_graph_free(g); /* the graph first: its actors use the job */
  tr_job_free(j);
  tr_data_close(data);
  tr_device_list_close(devs);
  tr_model_free(m);
  return rc;
}

typedef struct overhead_arg {
  const tr_device *d;
  tr__plan_bare_fn bare;
} overhead_arg;

static int measure_overhead(void *arg, double *v, char *err, size_t n) {
  const overhead_arg *a = arg;
  const tr_device_info *i = tr_device_info_of(a->d);
  char spec[32]; /* one device of the kind: "host:0" would be none, "cuda:0/1" is a name */
  if (i->kind == TR_DEVICE_HOST) snprintf(spec, sizeof spec, "host:1");
  else snprintf(spec, sizeof spec, "%s:%d", tr_device_kind_name(i->kind), i->ordinal);
  double predicted = 0;
  int rc = a->bare(spec, &predicted, err, n);
  double step[RUNS];
  for (int k = 0; k < RUNS && rc == 0; k++) {
    double rate = 0;
    rc = job_rate(spec, &rate, err, n);
    step[k] = rate > 0 ? 1 / rate : 0;
  }
  if (rc) return rc;
  /* the median run: one that met another process's burst says more of it than of troupe */
  for (int k = 1; k < RUNS; k++)
    for (int l = k; l > 0 && step[l - 1] > step[l]; l--) {
      const double t = step[l];
      step[l] = step[l - 1], step[l - 1] = t;
    }
  const double median = step[RUNS / 2];
  v[0] = median > predicted ? median - predicted : 0;
  return 0;
}

int tr__costs_overhead(const tr_device *d, const tr_plan_costs_config *c, tr__plan_bare_fn bare,
                       double *seconds, char *err, size_t n) {
  *seconds = 0;
  if (tr_device_is_placeholder(d)) return 0;
  char name[256];
  tr__costs_key(d, "runtime step", name, sizeof name);
  overhead_arg a = {.d = d, .bare = bare};
  const bool only = c && c->layers_cached; /* a run of its own: not before a run */
  int rc = tr__costs_entry(c, name, 1, 1, (const tr__costs_unit[]){TR__COSTS_SECONDS_OR_0},
                           only ? tr__costs_not_kept : measure_overhead,
                           only ? (void *)name : (void *)&a, seconds, err, n);
  if (rc == TR_ESTATE && only) *seconds = 0, rc = 0; /* not kept: none assumed */
  return rc;
}
