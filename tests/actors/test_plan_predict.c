/* test_plan_predict.c — a layout's step predicted before it runs (tr_plan.h: tr_plan_predict).
 *
 * The prediction resolves the options as the run does (replicas, stages, tensor members,
 * micro-batches, chunks) and counts each device's activations as the run's stages count
 * them: the predicted peak is the bytes the run reports, exactly, under every schedule, with
 * recomputation, with tensor members, async workers and local SGD replicas. Its times are the
 * machine's (not asserted beyond being there), but for the costs a file of costs given here
 * fixes: the runtime's own step on every step, the replicas' meeting (two hand-overs: dp every
 * step, local SGD every H, an async worker's push and reply), the replicas' sums at the
 * memory's pace, the links between processes. Options a run would refuse are refused naming
 * the option.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"
#include "planner.h" /* the runtime's own cost, and the prediction without it */
#include "specs.h"   /* mlp4: mlp's layers, narrow enough that its costs take no time */

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/troupe-predict-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char path[128]; /* the run's cut and the prediction's from one file of costs */
  snprintf(path, sizeof path, "%s/costs.safetensors", dir);
  return setenv("TROUPE_COSTS", path, 1);
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static tr_train_options options(const char *devices, tr_strategy s) {
  tr_train_options o = tr_train_defaults();
  o.spec = &mlp4;
  o.devices = devices;
  o.strategy = s;
  o.steps = 2;
  return o;
}

/* The same with simplenet, whose layers take microseconds beside the costs a test puts. */
static tr_train_options simplenet(const char *devices, tr_strategy s) {
  tr_train_options o = options(devices, s);
  o.spec = NULL;
  o.model = "simplenet";
  return o;
}

/* Predicted, then run: the same layout, the same activation bytes on every device. */
static void expect_peaks(tr_train_options o, const char *what) {
  tr_plan_prediction p;
  char err[512] = "";
  if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s: predict: %s", what, err);
  assert_true(p.step_seconds > 0 && p.samples_per_s > 0);
  assert_true(p.bubble >= 0 && p.bubble < 1);
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s: run: %s", what, err);
  assert_int_equal(p.devices, r.ndevices);
  assert_int_equal(p.microbatches, r.microbatches);
  for (int i = 0; i < p.devices; i++) {
    assert_true(p.utilization[i] > 0 && p.utilization[i] <= 1);
    if ((int64_t)p.peak_activation_bytes[i] != r.peak_activation_bytes[i])
      fail_msg("%s: device %d: %zu bytes of activations predicted, the run held %lld", what, i,
               p.peak_activation_bytes[i], (long long)r.peak_activation_bytes[i]);
  }
}

static void activation_peaks_are_the_runs_exactly(void **state) {
  (void)state;
  expect_peaks(options("host:1", TR_STRATEGY_SINGLE), "single");
  expect_peaks(options("host:2", TR_STRATEGY_DP), "dp");
  const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B,
                                    TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    tr_train_options o = options("host:2", TR_STRATEGY_PIPELINE);
    o.job.layout.schedule = kinds[k];
    o.job.layout.microbatches = 4;
    expect_peaks(o, tr_schedule_kind_name(kinds[k]));
  }
  tr_train_options o = options("host:2", TR_STRATEGY_PIPELINE);
  o.job.memory.recompute = 1;
  expect_peaks(o, "pipeline with recomputation");
  expect_peaks(options("host:2", TR_STRATEGY_TP), "tp");
  o = options("host:4", TR_STRATEGY_HYBRID);
  o.job.layout.microbatches = 2;
  expect_peaks(o, "hybrid");
  o = options("host:2", TR_STRATEGY_ASYNC);
  o.steps = 8; /* each worker some (of 2, one may take both) */
  expect_peaks(o, "async");
  o = options("host:2", TR_STRATEGY_LOCAL);
  o.job.local.sync_every = 2;
  expect_peaks(o, "local");
}

static void expect_refused(tr_train_options o, const char *want) {
  tr_plan_prediction p;
  char err[512] = "";
  assert_int_equal(tr_plan_predict(&o, NULL, &p, err, sizeof err), TR_EINVAL);
  if (!strstr(err, want)) fail_msg("the error \"%s\" does not say \"%s\"", err, want);
}

static void what_cannot_be_predicted_is_refused_naming_it(void **state) {
  (void)state;
  tr_train_options o = options("host:2", TR_STRATEGY_LOCAL);
  expect_refused(o, "local.sync_every 0"); /* local SGD without H, as the run refuses it */
  o = simplenet("host:2", TR_STRATEGY_PIPELINE);
  o.model = "nosuchmodel";
  expect_refused(o, "nosuchmodel");
}

/* What the runtime's step is measured against: simplenet alone, predicted without it. */
static int bare(const char *spec, double *step_seconds, char *err, size_t n) {
  tr_train_options o = simplenet(spec, TR_STRATEGY_SINGLE);
  tr_plan_prediction p;
  const int rc = tr__plan_predict_bare(&o, &(tr_plan_costs_config){.path = ""}, &p, err, n);
  *step_seconds = p.step_seconds;
  return rc;
}

/* Entry `key` of the file of costs, a number of `unit`, set to `value` (as if measured so). */
static void put(const char *key, tr__costs_unit unit, double value) {
  char err[512] = "";
  if (tr__costs_keep(NULL, key, 1, 1, &unit, &value, err, sizeof err))
    fail_msg("%s: %s", key, err);
}

/* No hand-overs (the least one can be: a nanosecond) and no runtime step in the file of
 * costs: beside the layers, what a test puts is all there is. */
static void put_no_overheads(tr_device *d) {
  char key[256];
  tr__costs_key(d, "link latency", key, sizeof key);
  put(key, TR__COSTS_SECONDS, 1e-9);
  tr__costs_key(d, "runtime step", key, sizeof key);
  put(key, TR__COSTS_SECONDS_OR_0, 0);
}

/* The optimizer's step over all of m's layers, `seconds` in the file of costs. */
static void put_step(const tr_model *m, tr_device *d, double seconds) {
  char key[512];
  const tr_optim_config optim = tr_model_optim(m);
  tr__costs_step_name(m, d, &optim, false, 0, tr_model_layer_count(m), key, sizeof key);
  put(key, TR__COSTS_SECONDS, seconds);
}

/* The runtime's own work per step, kept in the file of costs, is on every device's step: a
 * file that says 10 ms makes a step of simplenet (tens of microseconds of layers) 10 ms
 * longer than the prediction without it, single or dp alike. */
static void the_runtime_step_is_on_every_step(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512] = "", key[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr__costs_key(tr_device_list_at(devs, 0), "runtime step", key, sizeof key);
  put(key, TR__COSTS_SECONDS_OR_0, 0.01);
  double kept;
  tr_device *d = tr_device_list_at(devs, 0);
  assert_int_equal(tr__costs_overhead(d, NULL, bare, &kept, err, sizeof err), 0);
  assert_true(kept == 0.01);
  const tr_strategy s[] = {TR_STRATEGY_SINGLE, TR_STRATEGY_DP};
  for (int i = 0; i < 2; i++) {
    tr_train_options o = simplenet("host:2", s[i]);
    tr_plan_prediction with, bare;
    if (tr_plan_predict(&o, NULL, &with, err, sizeof err) ||
        tr__plan_predict_bare(&o, NULL, &bare, err, sizeof err))
      fail_msg("%s", err);
    const double more = with.step_seconds - bare.step_seconds;
    if (fabs(more - 0.01) > 1e-3)
      fail_msg("%s: %g s more than the bare step, not 0.01", tr_strategy_name(s[i]), more);
  }
  tr_device_list_close(devs);
}

/* With a message's hand-over of 10 ms in the file (and no runtime step), simplenet's layers
 * (microseconds) vanish beside it: single waits for no one; dp's replicas meet every step
 * (two hand-overs: 20 ms); local SGD's every H = 4 steps (5 ms a step); an async worker's
 * push and reply are two (20 ms a cycle, two workers at once: 10 ms a global batch). */
static void the_groups_meetings_cost_two_hand_overs(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512] = "", key[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr__costs_key(tr_device_list_at(devs, 0), "link latency", key, sizeof key);
  put(key, TR__COSTS_SECONDS, 0.01);
  tr__costs_key(tr_device_list_at(devs, 0), "runtime step", key, sizeof key);
  put(key, TR__COSTS_SECONDS_OR_0, 0);
  tr_device_list_close(devs);
  const struct {
    tr_strategy s;
    int every;
    double seconds;
  } want[] = {{TR_STRATEGY_SINGLE, 0, 0}, {TR_STRATEGY_DP, 0, 0.02},
              {TR_STRATEGY_LOCAL, 4, 0.005}, {TR_STRATEGY_ASYNC, 0, 0.01}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    tr_train_options o = simplenet("host:2", want[i].s);
    o.job.local.sync_every = want[i].every;
    tr_plan_prediction p;
    if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s", err);
    if (!(p.step_seconds >= want[i].seconds && p.step_seconds < want[i].seconds + 1e-3))
      fail_msg("%s: a step of %g s, want %g s and the layers' microseconds",
               tr_strategy_name(want[i].s), p.step_seconds, want[i].seconds);
  }
}

/* Each device's step is the optimizer's over its own layers, as the file of costs holds it for
 * exactly those layers: with 50 ms there for all of simplenet's (and no hand-overs, no
 * runtime step, replicas that do not slow each other), single's step and dp's are 50 ms and
 * the layers' microseconds; ZeRO-1's replicas each update half of it. */
static void each_devices_step_is_the_optimizers_over_its_layers(void **state) {
  (void)state;
  tr_device_list *devs;
  tr_model *m;
  char err[512] = "", key[512];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  assert_int_equal(tr_model_named(&m, "simplenet", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(devs, 0);
  put_no_overheads(d);
  tr__costs_entry_name(m, d, tr_model_batch(m) / 2, key, sizeof key); /* dp's micro-batch */
  strcat(key, "|together 2"); /* two replicas as fast as one alone: their steps not slowed */
  put(key, TR__COSTS_FACTOR, 1);
  put_step(m, d, 0.05);
  tr_model_free(m);
  tr_device_list_close(devs);
  const struct {
    const char *devices;
    tr_strategy s;
    int zero;
    double seconds;
  } want[] = {{"host:1", TR_STRATEGY_SINGLE, 0, 0.05},
              {"host:2", TR_STRATEGY_DP, 0, 0.05},
              {"host:2", TR_STRATEGY_DP, 1, 0.025}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    tr_train_options o = simplenet(want[i].devices, want[i].s);
    o.job.zero = want[i].zero;
    tr_plan_prediction p;
    if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s", err);
    if (!(p.step_seconds >= want[i].seconds && p.step_seconds < want[i].seconds + 2e-3))
      fail_msg("%s zero %d: a step of %g s, want %g s and the layers' microseconds",
               tr_strategy_name(want[i].s), want[i].zero, p.step_seconds, want[i].seconds);
  }
}

/* A tensor group's members step at once, each step timed alone: more members than CPUs,
 * and each step takes as much longer as they share them. With mlp4's whole step at 40 ms in
 * the file (and no hand-overs, no runtime step), a member of 2 × CPUs updates its share,
 * 20 ms / CPUs, at half a CPU: 40 ms / CPUs, beside the layers' microseconds. */
static void a_tensor_groups_steps_share_the_cpus(void **state) {
  (void)state;
  const int cpus = tr__plan_cpus(), T = 2 * cpus;
  if (T > 8) skip(); /* mlp4's 64 features in at most 8 members */
  tr_device_list *devs;
  tr_model *m;
  char err[512] = "", spec[32];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  assert_int_equal(tr_model_new(&m, &mlp4, err, sizeof err), 0);
  put_no_overheads(tr_device_list_at(devs, 0));
  put_step(m, tr_device_list_at(devs, 0), 0.04);
  tr_model_free(m);
  tr_device_list_close(devs);
  snprintf(spec, sizeof spec, "host:%d", T);
  tr_train_options o = options(spec, TR_STRATEGY_TP);
  tr_plan_prediction p;
  if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s", err);
  const double want = 0.04 / cpus;
  if (!(p.step_seconds >= 0.95 * want && p.step_seconds < want + 5e-3))
    fail_msg("tp on %s: a step of %g s, want %g s and the layers' time", spec, p.step_seconds,
             want);
}

/* dp's sums pass twice over each replica's parameters at the memory's pace the file holds
 * (a copy beyond the caches): mlp's 33.5 MB at 1 ns a byte more is 2 × 33.5 ms more a step
 * (slowed no more than the devices at once allow), where a broken one would not move; an
 * async server's update of a push, three times (a lone worker waits for all of it). */
static void the_replicas_sums_go_at_the_memorys_pace(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512] = "", key[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr__costs_key(tr_device_list_at(devs, 0), "copy per byte, 64 MiB", key, sizeof key);
  tr_device_list_close(devs);
  tr_model *m;
  assert_int_equal(tr_model_named(&m, "mlp", err, sizeof err), 0);
  const double bytes = (double)tr_model_numel(m) * sizeof(float);
  tr_model_free(m);
  double step[2];
  for (int i = 0; i < 2; i++) {
    put(key, TR__COSTS_PER_BYTE, (i + 1) * 1e-9);
    tr_plan_prediction p;
    tr_train_options o = options("host:2", TR_STRATEGY_DP);
    o.spec = NULL;
    o.model = "mlp";
    if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s", err);
    step[i] = p.step_seconds;
  }
  const double more = step[1] - step[0], want = 2 * bytes * 1e-9;
  if (!(more > 0.9 * want && more < 2.5 * want))
    fail_msg("1 ns a byte more made dp's step %g s longer, not about %g s", more, want);
  /* an async server's update of a push: a copy of the parameters to the worker and four
   * passes that read them (the worker's distance, the gradient's norm), three copies' worth */
  for (int i = 0; i < 2; i++) {
    put(key, TR__COSTS_PER_BYTE, (i + 1) * 1e-9);
    tr_plan_prediction p;
    tr_train_options o = options("host:2", TR_STRATEGY_ASYNC);
    o.spec = NULL;
    o.model = "mlp";
    o.job.layout.replicas = 1; /* one worker: its cycle waits for every update */
    if (tr_plan_predict(&o, NULL, &p, err, sizeof err)) fail_msg("%s", err);
    step[i] = p.step_seconds;
  }
  const double longer = step[1] - step[0], server = 3 * bytes * 1e-9;
  if (!(longer > 0.9 * server && longer < 2.5 * server))
    fail_msg("1 ns a byte more made an async worker's cycle %g s longer, not about %g s",
             longer, server);
}

/* Across processes (tr__plan_predict_ranks), with 10 ms a message and 10 ms a sum between
 * ranks in the file's stead (and no hand-overs, no runtime step): mp's two stages on two
 * ranks wait for an activation and a gradient to cross, 20 ms more a step than on one rank;
 * dp's replicas on two ranks sum simplenet's one bucket by MPI, 10 ms more, hidden behind no
 * backward (its layers take microseconds); local SGD's every H = 4 steps, 2.5 ms. */
static void crossing_ranks_costs_the_links(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512] = "";
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  put_no_overheads(tr_device_list_at(devs, 0));
  tr_device_list_close(devs);
  const tr__rank_links links = {.message = 0.01, .sum = 0.01, .ranks = 2, .machines = 1};
  const int together[] = {0, 0}, apart[] = {0, 1};
  const struct {
    tr_strategy s;
    int every;
    double more;
  } want[] = {{TR_STRATEGY_MP, 0, 0.02}, {TR_STRATEGY_DP, 0, 0.01}, {TR_STRATEGY_LOCAL, 4, 0.0025}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    tr_train_options o = simplenet("host:2", want[i].s);
    o.job.local.sync_every = want[i].every;
    tr_plan_prediction one, two;
    if (tr__plan_predict_ranks(&o, NULL, together, &links, &one, err, sizeof err) ||
        tr__plan_predict_ranks(&o, NULL, apart, &links, &two, err, sizeof err))
      fail_msg("%s: %s", tr_strategy_name(want[i].s), err);
    const double more = two.step_seconds - one.step_seconds;
    if (fabs(more - want[i].more) > 5e-4)
      fail_msg("%s: %g s more a step on two ranks, want %g", tr_strategy_name(want[i].s), more,
               want[i].more);
  }
}

/* The links' latency and time per byte: the least-squares line through the sizes' times; a
 * line that would start below 0 goes through the origin; one that falls is flat. */
static void the_links_are_a_line_through_their_times(void **state) {
  (void)state;
  const double x[] = {4096, 262144, 1048576, 4194304};
  double y[4], alpha, beta;
  for (int i = 0; i < 4; i++) y[i] = 2e-5 + 1e-10 * x[i];
  tr__costs_fit_line(x, y, 4, &alpha, &beta);
  assert_true(fabs(alpha - 2e-5) < 1e-12 && fabs(beta - 1e-10) < 1e-18);
  for (int i = 0; i < 4; i++) y[i] = 1e-10 * x[i] - (i == 0 ? 0 : 1e-5);
  tr__costs_fit_line(x, y, 4, &alpha, &beta);
  assert_true(alpha == 0 && beta > 0);
  for (int i = 0; i < 4; i++) y[i] = 1e-3 - 1e-11 * x[i];
  tr__costs_fit_line(x, y, 4, &alpha, &beta);
  assert_true(beta == 0 && fabs(alpha - (1e-3 - 1e-11 * (x[0] + x[1] + x[2] + x[3]) / 4)) < 1e-12);
}

/* Measured (a short run of simplenet, less its prediction), the runtime's step is kept. */
static void the_runtime_step_is_measured_once(void **state) {
  (void)state;
  char dir2[] = "/tmp/troupe-overhead-XXXXXX", path[128], err[512] = "";
  assert_non_null(mkdtemp(dir2));
  snprintf(path, sizeof path, "%s/costs.safetensors", dir2);
  tr_device_list *devs;
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  const tr_plan_costs_config c = {.path = path};
  double a = -1, b = -1;
  tr_device *d = tr_device_list_at(devs, 0);
  if (tr__costs_overhead(d, &c, bare, &a, err, sizeof err)) fail_msg("%s", err);
  assert_true(a >= 0 && a < 0.1);
  assert_int_equal(access(path, F_OK), 0);
  assert_int_equal(tr__costs_overhead(d, &c, bare, &b, err, sizeof err), 0);
  assert_true(a == b);
  tr_device_list_close(devs);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir2);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(activation_peaks_are_the_runs_exactly),
      cmocka_unit_test(what_cannot_be_predicted_is_refused_naming_it),
      cmocka_unit_test(the_runtime_step_is_on_every_step),
      cmocka_unit_test(the_runtime_step_is_measured_once),
      cmocka_unit_test(the_groups_meetings_cost_two_hand_overs),
      cmocka_unit_test(each_devices_step_is_the_optimizers_over_its_layers),
      cmocka_unit_test(the_replicas_sums_go_at_the_memorys_pace),
      cmocka_unit_test(a_tensor_groups_steps_share_the_cpus),
      cmocka_unit_test(crossing_ranks_costs_the_links),
      cmocka_unit_test(the_links_are_a_line_through_their_times),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
