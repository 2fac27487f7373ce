/* test_comm.c — the bytes every strategy sends per step (comm_bytes_per_step, and each
 * device's part of it), against what each algorithm sends, worked out here from the model's
 * sizes: none for one device; a replica group's 2 (R − 1) B, ZeRO-1's too; a pipeline's
 * activations and input gradients over its P − 1 cuts, and the norm exchange's doubles when
 * clipping; hybrid both; async's pushes (gradient and parameters) and pulls. And every
 * strategy's JSON and summary say it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#include "specs.h"

/* mlp4: 4 × Linear(64, 64) with bias; every activation between its layers is 64 wide. */
enum { WIDTH = 64, N = 4 * (64 * 64 + 64), STEPS = 4 };
static const double B = (double)N * sizeof(float); /* the parameters' (and gradients') bytes */

static tr_train_options options(tr_strategy strategy, const char *devices) {
  tr_train_options o = tr_train_defaults();
  o.spec = &mlp4;
  o.strategy = strategy;
  o.devices = devices;
  o.steps = STEPS;
  o.job.global_batch = mlp4.batch; /* 48 */
  o.watchdog_ms = 20000;
  return o;
}

static void run(const tr_train_options *o, tr_train_result *r) {
  char err[1024];
  if (tr_train_run(o, r, err, sizeof err))
    fail_msg("%s on %s: %s", tr_strategy_name(o->strategy), o->devices, err);
  assert_int_equal(r->steps - r->first_step, STEPS);
}

/* Its figure equals `want` bytes a step (the measure is whole bytes over STEPS steps). */
static void assert_bytes(double got, double want, const char *what) {
  if (fabs(got - want) > 1e-9 * (want > 1 ? want : 1))
    fail_msg("%s: %.17g bytes a step, the algorithm sends %.17g", what, got, want);
}

static double device_sum(const tr_train_result *r) {
  double sum = 0;
  for (int i = 0; i < r->ndevices; i++) sum += r->comm_bytes_device[i];
  return sum;
}

static void one_device_sends_nothing(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = options(TR_STRATEGY_SINGLE, "host:1");
  run(&o, &r);
  assert_true(r.comm_bytes_per_step == 0 && r.comm_bytes_device[0] == 0);
}

/* Each member sends, of each bucket, what the other chunks' owners sum and its chunk's sum to
 * the others: over the group 2 (R − 1) B a step, whatever the chunks' rounding; sharded
 * (ZeRO-1) the reduce-scatter and the shards' all-gather send as much. */
static void a_replica_group_sends_two_r_minus_one_times_the_gradients(void **state) {
  (void)state;
  static const struct { const char *devices; int R, zero; } cases[] = {
      {"host:2", 2, 0}, {"host:3", 3, 0}, {"host:4", 4, 0}, {"host:2", 2, 1}, {"host:3", 3, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tr_train_result r;
    tr_train_options o = options(TR_STRATEGY_DP, cases[k].devices);
    o.job.zero = cases[k].zero;
    run(&o, &r);
    assert_int_equal(r.replicas, cases[k].R);
    assert_bytes(r.comm_bytes_per_step, 2.0 * (cases[k].R - 1) * B, cases[k].devices);
    assert_bytes(device_sum(&r), r.comm_bytes_per_step, "the devices' parts");
    if (cases[k].R == 2) /* two members: each sends the half it does not own, and its half's sum */
      for (int i = 0; i < 2; i++) assert_bytes(r.comm_bytes_device[i], B, "a member of two");
  }
}

/* Each micro-batch's activations go forward over each of the P − 1 cuts, and its input
 * gradients back: stage 0 sends activations, the last stage gradients, the others both.
 * With clipping, each stage sends its share of the norm (a double) to the P − 1 others. */
static void a_pipeline_sends_activations_and_gradients_over_each_cut(void **state) {
  (void)state;
  static const struct { const char *devices; int P, M; float clip; } cases[] = {
      {"host:2", 2, 4, 0}, {"host:3", 3, 4, 0}, {"host:2", 2, 8, 0}, {"host:3", 3, 2, 1.0f}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tr_train_result r;
    tr_train_options o = options(TR_STRATEGY_PIPELINE, cases[k].devices);
    const int P = cases[k].P, M = cases[k].M;
    o.job.layout.microbatches = M;
    o.job.optim = mlp4.optim;
    o.job.optim.clip = cases[k].clip;
    run(&o, &r);
    assert_int_equal(r.stages, P);
    const double tensor = (double)(mlp4.batch / M) * WIDTH * sizeof(float); /* a micro-batch's */
    const double norm = cases[k].clip > 0 ? (double)(P - 1) * sizeof(double) : 0;
    assert_bytes(r.comm_bytes_per_step, 2 * tensor * M * (P - 1) + P * norm, cases[k].devices);
    for (int s = 0; s < P; s++)
      assert_bytes(r.comm_bytes_device[s], tensor * M * ((s < P - 1) + (s > 0)) + norm,
                   "a stage's part");
  }
}

/* R replicas of P stages: each replica's cuts, and each stage's group over its layers. */
static void hybrid_sends_both(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = options(TR_STRATEGY_HYBRID, "host:4");
  o.job.layout.stages = 2;
  o.job.layout.microbatches = 4;
  run(&o, &r);
  assert_int_equal(r.replicas * r.stages, 4);
  const int R = 2, P = 2, M = 4;
  const double tensor = (double)(mlp4.batch / (R * M)) * WIDTH * sizeof(float);
  assert_bytes(r.comm_bytes_per_step, R * 2 * tensor * M * (P - 1) + 2.0 * (R - 1) * B, "hybrid");
}

/* A push carries the gradient and the parameters it was computed from (the server measures
 * the worker's distance and compensates its delay with them); every k-th push's reply brings
 * the parameters back. The server's bytes are in the total, no device's. */
static void async_sends_pushes_and_pulls(void **state) {
  (void)state;
  for (int k = 1; k <= 3; k += 2) {
    tr_train_result r;
    tr_train_options o = options(TR_STRATEGY_ASYNC, "host:2");
    o.job.layout.replicas = 2;
    o.job.async.pull_every = k;
    o.steps = 12;
    char err[1024];
    if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("async: %s", err);
    int64_t pushes = 0, pulls = 0;
    for (int w = 0; w < 2; w++) {
      const double mine = r.comm_bytes_device[w] * 12 / (2 * B); /* its pushes */
      assert_true(fabs(mine - llround(mine)) < 1e-6);
      pushes += llround(mine);
      pulls += llround(mine) / k; /* the k-th push since the last pull pulls */
    }
    assert_int_equal(pushes, 12); /* one update each */
    assert_bytes(r.comm_bytes_per_step, (pushes * 2 * B + pulls * B) / 12, "async");
  }
}

/* The JSON has the figure, and the list of the devices' parts, as the result holds them. */
static void check_json(const tr_train_result *r) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_int_equal(tr_train_result_json(r, f), 0);
  fclose(f);
  const char *p = strstr(buf, "\"comm_bytes_per_step\":");
  if (p == NULL) fail_msg("%s: no comm_bytes_per_step in %s", r->strategy, buf);
  char *end;
  const double v = strtod(p + strlen("\"comm_bytes_per_step\":"), &end);
  assert_bytes(v, r->comm_bytes_per_step, r->strategy);
  p = strstr(buf, "\"comm_bytes_per_step_device\":[");
  assert_non_null(p);
  p += strlen("\"comm_bytes_per_step_device\":[");
  for (int i = 0; i < r->ndevices; i++) {
    const double d = strtod(p, &end);
    if (end == p) fail_msg("%s: device %d's part is not a number: %s", r->strategy, i, p);
    if (fabs(d - r->comm_bytes_device[i]) > 1e-6 * (d > 1 ? d : 1))
      fail_msg("%s: device %d: %s", r->strategy, i, p);
    p = end + 1; /* ',' then ']' */
  }
  assert_int_equal(end[0], ']');
  free(buf);
  buf = NULL;
  f = open_memstream(&buf, &len);
  assert_int_equal(tr_train_result_summary(r, f), 0);
  fclose(f);
  if ((r->comm_bytes_per_step > 0) != (strstr(buf, "bytes sent a step") != NULL))
    fail_msg("%s: the summary: %s", r->strategy, buf);
  free(buf);
}

static void every_strategys_json_says_it(void **state) {
  (void)state;
  static const struct { tr_strategy s; const char *devices; } runs[] = {
      {TR_STRATEGY_SINGLE, "host:1"}, {TR_STRATEGY_DP, "host:2"},
      {TR_STRATEGY_MP, "host:2"},     {TR_STRATEGY_PIPELINE, "host:2"},
      {TR_STRATEGY_HYBRID, "host:4"}, {TR_STRATEGY_ASYNC, "host:2"}};
  for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
    tr_train_result r;
    tr_train_options o = options(runs[k].s, runs[k].devices);
    if (runs[k].s == TR_STRATEGY_HYBRID) o.job.layout.stages = 2;
    if (runs[k].s == TR_STRATEGY_ASYNC) o.job.layout.replicas = 2;
    char err[1024];
    if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s: %s", tr_strategy_name(o.strategy), err);
    assert_true(isfinite(r.comm_bytes_per_step));
    assert_true(r.comm_bytes_per_step > 0 || runs[k].s == TR_STRATEGY_SINGLE);
    check_json(&r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_device_sends_nothing),
      cmocka_unit_test(a_replica_group_sends_two_r_minus_one_times_the_gradients),
      cmocka_unit_test(a_pipeline_sends_activations_and_gradients_over_each_cut),
      cmocka_unit_test(hybrid_sends_both),
      cmocka_unit_test(async_sends_pushes_and_pulls),
      cmocka_unit_test(every_strategys_json_says_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
