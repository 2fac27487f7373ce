/* test_train.c — training runs end to end (tr_train_run, single device): they learn, they
 * repeat bitwise, a resumed run is the uninterrupted one (pipelines of chunks and of split
 * backwards too), samples made on the devices train what the loader's train, and bad input
 * is named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "train"
#include "scratch.h"
#include "specs.h"

static tr_train_options simplenet(int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = steps;
  return o;
}

static void run_ok(const tr_train_options *o, tr_train_result *r) {
  char err[1024];
  int rc = tr_train_run(o, r, err, sizeof err);
  if (rc) fail_msg("tr_train_run: %s", err);
}

static char *slurp(const char *file, size_t *size) {
  FILE *f = fopen(file, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  rewind(f);
  char *buf = malloc(*size);
  assert_int_equal(fread(buf, 1, *size, f), *size);
  fclose(f);
  return buf;
}

static void assert_same_file(const char *a, const char *b) {
  size_t na, nb;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(x, y, na);
  free(x);
  free(y);
}

static void simplenet_loss_falls_below_a_tenth(void **state) {
  (void)state;
  tr_train_options o = simplenet(1500);
  tr_train_result r;
  run_ok(&o, &r);
  assert_int_equal(r.steps, 1500);
  assert_int_equal(r.samples, 1500 * 64);
  assert_true(r.final_loss < 0.1 * r.initial_loss);
  assert_true(r.samples_per_s > 0 && r.utilization[0] > 0 && r.utilization[0] <= 1.0);
  assert_true(isnan(r.bubble_fraction) && isnan(r.staleness_mean)); /* not a pipeline, not async */
  assert_true(r.gflops > 0 && isnan(r.tokens_per_s));
}

static void two_runs_with_one_seed_are_bitwise_identical(void **state) {
  (void)state;
  tr_train_options o = simplenet(200);
  o.deterministic = 1;
  tr_train_result a, b;
  o.job.checkpoint.path = path("run1.safetensors");
  run_ok(&o, &a);
  o.job.checkpoint.path = path("run2.safetensors");
  run_ok(&o, &b);
  assert_memory_equal(&a.final_loss, &b.final_loss, sizeof a.final_loss);
  assert_same_file(path("run1.safetensors"), path("run2.safetensors"));
}

/* o run whole for 6 steps (its checkpoint written every `every` steps too, 0: at the end
 * only), then for 3 and resumed from there to 6: the two final checkpoints are one file. */
static void assert_resume_is_bitwise(tr_train_options o, int every) {
  tr_train_result r;
  o.steps = 6;
  o.job.checkpoint.path = path("whole.safetensors");
  o.job.checkpoint.every = every;
  run_ok(&o, &r);
  o.job.checkpoint.every = 0;
  o.steps = 3;
  o.job.checkpoint.path = path("half.safetensors");
  run_ok(&o, &r);
  o.steps = 6;
  o.job.checkpoint.resume = path("half.safetensors");
  o.job.checkpoint.path = path("resumed.safetensors");
  run_ok(&o, &r);
  assert_int_equal(r.first_step, 3);
  assert_int_equal(r.steps, 6);
  assert_same_file(path("whole.safetensors"), path("resumed.safetensors"));
}

static void resumed_run_is_bitwise_the_uninterrupted_one(void **state) {
  (void)state;
  static const char *const models[] = {"simplenet", "gpt"};
  for (int i = 0; i < 2; i++) {
    tr_train_options o = simplenet(6);
    o.model = models[i];
    o.job.global_batch = i ? 2 : 64; /* a small gpt batch keeps the test fast */
    assert_resume_is_bitwise(o, 0);
  }
}

/* The same through pipelines whose stages hold several chunks (a checkpoint part each) or
 * split their backward; the run that is not interrupted writes a part mid-run too. */
static void resumed_pipelines_are_bitwise_the_uninterrupted_ones(void **state) {
  (void)state;
  static const tr_schedule_kind kinds[] = {TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};
  for (int i = 0; i < 2; i++) {
    tr_train_options o = simplenet(6);
    o.model = "gpt";
    o.strategy = TR_STRATEGY_PIPELINE;
    o.devices = "host:2";
    o.job.global_batch = 4;
    o.job.layout.microbatches = 2;
    o.job.layout.schedule = kinds[i];
    o.deterministic = 1;
    assert_resume_is_bitwise(o, 4);
  }
}

static void checkpoints_every_n_steps_hold_that_step(void **state) {
  (void)state;
  tr_train_options o = simplenet(10);
  o.job.checkpoint.path = path("every.safetensors");
  o.job.checkpoint.every = 4;
  tr_train_result r;
  run_ok(&o, &r);
  tr_checkpoint *ck;
  char err[256];
  assert_int_equal(tr_checkpoint_open(&ck, o.job.checkpoint.path, err, sizeof err), 0);
  uint64_t step;
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  assert_int_equal(step, 10); /* the final one replaced the one of step 8 */
  assert_string_equal(tr_checkpoint_meta(ck, "model"), "simplenet");
  assert_non_null(tr_checkpoint_find(ck, "0.weight"));
  tr_checkpoint_close(ck);
}

static void a_timed_run_stops_on_time(void **state) {
  (void)state;
  tr_train_options o = simplenet(0);
  o.seconds = 0.3;
  tr_train_result r;
  uint64_t t0 = tr_now_ns();
  run_ok(&o, &r);
  double took = (double)(tr_now_ns() - t0) / 1e9;
  assert_true(r.steps > 10);
  /* libuv's timers count whole milliseconds: one may fire up to 1 ms early */
  if (!(took >= 0.299 && took < 5.0))
    fail_msg("a 0.3 s run took %.4f s (%lld steps)", took, (long long)r.steps);
}

/* Steps of tens of ms (a slow device): when the time is up the run ends after the steps under
 * way, not after every batch the loader had filled ahead (simplenet's ring holds 256). */
static void a_timed_run_does_not_run_through_its_prefetched_batches(void **state) {
  (void)state;
  for (int strategy = 0; strategy < 2; strategy++) {
    tr_train_options o = simplenet(0);
    o.seconds = 0.5; /* a step or more even on a busy machine */
    /* device 0 sleeps 10 ms after each GEMM (gpu/fault.h): 2 to 5 a micro-batch */
    o.devices = "fault(host:1;dev=0,op=gemm,us=10000)";
    /* a ring of 3 micro-batches of 2 per step: the loader waits for a credit mid-step when
     * the end comes, and must see the end there too */
    if (strategy)
      o.strategy = TR_STRATEGY_PIPELINE, o.devices = "fault(host:2;dev=0,op=gemm,us=10000)",
      o.job.layout.microbatches = 2, o.job.layout.prefetch = 3;
    tr_train_result r;
    run_ok(&o, &r);
    if (r.steps > 40) /* a few fit in the time; the ring, 256 */
      fail_msg("%s: a 0.5 s run of steps of 20 ms or more ran %lld steps", r.strategy, (long long)r.steps);
  }
}

/* Samples made on the devices (the stages' threads of host devices) train what the loader's
 * batches train, bit for bit: one stage (inputs and targets from one batch), a pipeline (its
 * last stage makes its targets, and the inputs they come from, itself), replicas; for float
 * data (simplenet's teacher) and tokens (a one-block gpt). Every kind's samples are test_data_gen's. */
static void data_made_on_the_devices_trains_what_the_loaders_batches_train(void **state) {
  (void)state;
  const struct {
    const char *model;
    const tr_model_spec *spec;
    const char *devices;
    tr_strategy strategy;
    int batch, microbatches;
  } cases[] = {
      {"simplenet", NULL, "host:1", TR_STRATEGY_SINGLE, 64, 1},
      {"simplenet", NULL, "host:2", TR_STRATEGY_DP, 64, 1},
      {NULL, &gpt1, "host:2", TR_STRATEGY_PIPELINE, 8, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tr_train_options o = simplenet(2); /* two updates: each on samples of its own step */
    o.model = cases[i].model;
    o.spec = cases[i].spec;
    o.devices = cases[i].devices;
    o.strategy = cases[i].strategy;
    o.job.global_batch = cases[i].batch;
    o.job.layout.microbatches = cases[i].microbatches;
    o.deterministic = 1;
    tr_train_result host, device;
    o.job.data_on = TR_DATA_ON_HOST;
    o.job.checkpoint.path = path("host.safetensors");
    run_ok(&o, &host);
    o.job.data_on = TR_DATA_ON_DEVICE;
    o.job.checkpoint.path = path("device.safetensors");
    run_ok(&o, &device);
    assert_memory_equal(&host.final_loss, &device.final_loss, sizeof host.final_loss);
    assert_same_file(path("host.safetensors"), path("device.safetensors"));
  }
}

static void expect_error(const tr_train_options *o, int status, const char *needle) {
  tr_train_result r;
  char err[1024];
  assert_int_equal(tr_train_run(o, &r, err, sizeof err), status);
  if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void bad_input_is_named(void **state) {
  (void)state;
  tr_train_options o = simplenet(10);
  o.model = "resnet";
  expect_error(&o, TR_EINVAL, "model 'resnet'");

  o = simplenet(10);
  o.devices = "host:x";
  expect_error(&o, TR_EINVAL, "host:x");

  /* a file cannot be generated on a device */
  const char *text = path("text.txt");
  FILE *t = fopen(text, "w");
  assert_non_null(t);
  for (int i = 0; i < 100; i++) fputs("1+1=2\n", t);
  fclose(t);
  o = simplenet(10);
  o.model = "gpt";
  o.data = text;
  o.job.data_on = TR_DATA_ON_DEVICE;
  expect_error(&o, TR_EINVAL, "data_on device: data");

  o = simplenet(10);
  o.job.checkpoint.resume = path("missing.safetensors");
  expect_error(&o, TR_EIO, "missing.safetensors");

  /* a checkpoint of another model */
  tr_train_options g = simplenet(2);
  g.model = "gpt";
  g.job.global_batch = 1;
  g.job.checkpoint.path = path("gpt.safetensors");
  tr_train_result r;
  run_ok(&g, &r);
  o = simplenet(10);
  o.job.checkpoint.resume = g.job.checkpoint.path;
  expect_error(&o, TR_EFORMAT, "a checkpoint of model 'gpt', not 'simplenet'");

  /* a corrupt one */
  FILE *f = fopen(path("corrupt.safetensors"), "wb");
  fputs("\x10\0\0\0\0\0\0\0{\"a\":", f);
  fclose(f);
  o.job.checkpoint.resume = path("corrupt.safetensors");
  expect_error(&o, TR_EFORMAT, "corrupt.safetensors");

  o = simplenet(10);
  o.strategy = TR_STRATEGY_ASYNC;
  o.job.layout.microbatches = 2; /* a worker takes whole batches */
  expect_error(&o, TR_EINVAL, "async: a worker trains the whole model");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(simplenet_loss_falls_below_a_tenth),
      cmocka_unit_test(two_runs_with_one_seed_are_bitwise_identical),
      cmocka_unit_test(resumed_run_is_bitwise_the_uninterrupted_one),
      cmocka_unit_test(resumed_pipelines_are_bitwise_the_uninterrupted_ones),
      cmocka_unit_test(checkpoints_every_n_steps_hold_that_step),
      cmocka_unit_test(a_timed_run_stops_on_time),
      cmocka_unit_test(a_timed_run_does_not_run_through_its_prefetched_batches),
      cmocka_unit_test(data_made_on_the_devices_trains_what_the_loaders_batches_train),
      cmocka_unit_test(bad_input_is_named),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
