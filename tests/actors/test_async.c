/* test_async.c — asynchronous training through a parameter server (--strategy async): one
 * worker is single-device training bitwise (whatever the staleness bound, delay compensation
 * or pull period leave nothing to do); SSP holds a fast worker at its bound; DC-ASGD is the
 * hand-computed correction; every pushed gradient is clipped; momentum correction takes
 * 1 − 1/workers off; pulling every k pushes makes updates k − 1 stale; several workers
 * converge like one; a failing worker stops the run by name and leaves a checkpoint that
 * resumes; the figures add up; bad options are named. Parameters are compared through the
 * checkpoints the runs write, as test_parallel.c does.
 *
 * The stress suite (TR_TEST_SCALE > 1) runs only the long test: thousands of steps of four
 * workers under a tight bound. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../runtime/test_util.h"
#include "troupe.h"

#define SCRATCH_NAME "async"
#include "scratch.h"

/* ---- the models: specs.h's ------------------------------------------------------------- */

#include "compare.h"
#include "specs.h"

/* A single-device run on host:1; async() turns it into `workers` workers on `devices`. */
static tr_train_options options(const char *model, const tr_model_spec *spec, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = model;
  o.spec = spec;
  o.devices = "host:1";
  o.steps = steps;
  o.job.global_batch = spec ? spec->batch : 64;
  o.watchdog_ms = 20000; /* a stuck graph fails with a report of each actor, not a timeout */
  return o;
}

static tr_train_options async(tr_train_options o, const char *devices, int workers) {
  o.strategy = TR_STRATEGY_ASYNC;
  o.devices = devices;
  o.job.layout.replicas = workers;
  return o;
}

static void run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = file ? path(file) : NULL;
  if (tr_train_run(&o, r, err, sizeof err))
    fail_msg("%s %s on %s (%d workers): %s", tr_strategy_name(o.strategy), model_name(&o),
             o.devices, o.job.layout.replicas, err);
  assert_int_equal(r->steps, o.steps);
  assert_int_equal(r->samples, (o.steps - r->first_step) * o.job.global_batch);
}

/* ---- comparing checkpoints ------------------------------------------------------------- */

static tr_checkpoint *open_ck(const char *file) {
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) fail_msg("%s", err);
  return ck;
}

/* The largest relative difference of the parameters of two checkpoints (compare.h); fails
 * where they cannot be compared. */
static double difference(const char *file_a, const char *file_b) {
  char worst[128];
  const double d = params_difference(file_a, file_b, worst, sizeof worst);
  if (isinf(d)) fail_msg("%s and %s cannot be compared (above)", file_a, file_b);
  return d;
}

/* Every tensor of `reference` (parameters and optimizer state) is in `file`, bit for bit. */
static void assert_same_tensors(const char *file, const char *reference, const char *what) {
  tr_checkpoint *a = open_ck(file), *b = open_ck(reference);
  size_t state = 0;
  for (size_t k = 0; k < tr_checkpoint_count(b); k++) {
    const tr_checkpoint_tensor *tb = tr_checkpoint_tensor_at(b, k);
    const tr_checkpoint_tensor *ta = tr_checkpoint_find(a, tb->name);
    if (ta == NULL) fail_msg("%s: no tensor '%s'", what, tb->name);
    if (ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, tb->nbytes))
      fail_msg("%s: tensor '%s' differs from single's (relative %.3g overall)", what, tb->name,
               difference(file, reference));
    state += optimizer_state(tb->name);
  }
  assert_true(tr_checkpoint_count(b) > state); /* parameters were compared */
  tr_checkpoint_close(a);
  tr_checkpoint_close(b);
}

static uint64_t checkpoint_step(const char *file) {
  tr_checkpoint *ck = open_ck(file);
  uint64_t step;
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  tr_checkpoint_close(ck);
  return step;
}

static int64_t hist_sum(const tr_train_result *r) {
  int64_t n = 0;
  for (int i = 0; i < TR_TRAIN_STALENESS_BINS; i++) n += r->staleness_hist[i];
  return n;
}

/* The staleness figures of a run agree with each other and count every update. */
static void assert_staleness_adds_up(const tr_train_result *r) {
  const int64_t updates = r->steps - r->first_step;
  if (hist_sum(r) != updates)
    fail_msg("the staleness histogram counts %lld updates, the run made %lld",
             (long long)hist_sum(r), (long long)updates);
  assert_true(r->staleness_mean >= 0 && r->staleness_mean <= r->staleness_max);
  if (r->staleness_max < TR_TRAIN_STALENESS_BINS - 1) {
    double sum = 0;
    int top = 0;
    for (int i = 0; i < TR_TRAIN_STALENESS_BINS; i++) {
      sum += (double)i * (double)r->staleness_hist[i];
      if (r->staleness_hist[i]) top = i;
    }
    if (fabs(sum / (double)updates - r->staleness_mean) > 1e-9 * (1 + r->staleness_mean))
      fail_msg("staleness mean %g, the histogram's %g", r->staleness_mean, sum / (double)updates);
    assert_int_equal(top, (int)r->staleness_max);
  }
}

/* ---- one worker is single-device training ------------------------------------------------ */

enum { EQUAL_STEPS = 6 };

static void assert_one_worker_is_single(tr_train_options base, const char *what_options) {
  tr_train_result single, r;
  run_to(base, "single.safetensors", &single);
  run_to(async(base, "host:1", 1), "async.safetensors", &r);
  char what[160];
  snprintf(what, sizeof what, "one async worker, %s, %s", what_options, model_name(&base));
  assert_same_tensors(path("async.safetensors"), path("single.safetensors"), what);
  if (memcmp(&single.final_loss, &r.final_loss, sizeof r.final_loss))
    fail_msg("%s: final loss %.9g, single's %.9g", what, r.final_loss, single.final_loss);
  assert_string_equal(r.strategy, "async");
  assert_int_equal(r.workers, 1);
  assert_staleness_adds_up(&r);
  if (!(r.staleness_mean == 0 && r.staleness_max == 0 && r.clock_gap_max == 0 &&
        r.consistency == 0))
    fail_msg("%s: staleness mean %g max %g, clock gap %d, consistency %g: expected all 0", what,
             r.staleness_mean, r.staleness_max, r.clock_gap_max, r.consistency);
}

static void one_worker_equals_single_bitwise(void **state) {
  (void)state;
  const tr_train_options models[] = {options("simplenet", NULL, EQUAL_STEPS),
                                     options(NULL, &mlp4, EQUAL_STEPS),
                                     options(NULL, &gpt1, EQUAL_STEPS)};
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
    tr_train_options o = models[k];
    o.job.async.staleness = 0;
    assert_one_worker_is_single(o, "staleness 0");
    o.job.async.staleness = -1;
    assert_one_worker_is_single(o, "unbounded");
  }
}

/* ---- SSP ---------------------------------------------------------------------------------- */

/* Worker 1 sleeps 3 ms after each forward and backward; worker 0 takes microseconds a step,
 * so it runs ahead until the bound holds it. */
static void a_fast_worker_is_held_at_the_staleness_bound(void **state) {
  (void)state;
  /* worker 1 sleeps after each loss pass, forward and backward (gpu/fault.h) */
  tr_train_options o = async(options("simplenet", NULL, 60), "fault(host:2;dev=1,op=mse,us=3000)", 2);
  o.job.async.staleness = 2;
  tr_train_result r;
  run_to(o, NULL, &r);
  assert_staleness_adds_up(&r);
  if (r.clock_gap_max != 2)
    fail_msg("staleness 2, a slow worker: pulls were served %d pushes ahead of the slowest "
             "(expected the fast worker held at exactly 2; utilization %.3f and %.3f, "
             "staleness max %.0f)", r.clock_gap_max, r.utilization[0], r.utilization[1],
             r.staleness_max);

  o.job.async.staleness = -1;
  run_to(o, NULL, &r);
  assert_staleness_adds_up(&r);
  if (!(r.clock_gap_max > 2))
    fail_msg("unbounded, a slow worker: the fast one ran only %d pushes ahead, so the run "
             "before shows no bound (utilization %.3f and %.3f, staleness max %.0f)",
             r.clock_gap_max, r.utilization[0], r.utilization[1], r.staleness_max);
}

/* ---- DC-ASGD ------------------------------------------------------------------------------- */

/* grad += lambda * grad * grad * (now - pulled), lambda 0.5:
 *   grad    1      -2      0.5     3
 *   now     0.5     1      2      -1
 *   pulled  0.25    2      2       1
 *   g²·Δ    1·0.25  4·(-1) 0.25·0  9·(-2)
 *   result  1 + 0.125 = 1.125   -2 - 2 = -4   0.5 + 0 = 0.5   3 - 9 = -6
 * Every intermediate is exact in float. */
static void dc_asgd_op_matches_a_hand_computed_example(void **state) {
  (void)state;
  tr_device_list *list;
  char err[256];
  if (tr_device_list_open(&list, "host:1", err, sizeof err)) fail_msg("%s", err);
  tr_device *d = tr_device_list_at(list, 0);
  tr_stream *s = tr_device_stream(d);
  float *buf;
  assert_int_equal(tr_device_alloc(d, 12 * sizeof(float), (void **)&buf), 0);
  float *grad = buf, *now = buf + 4, *pulled = buf + 8;
  memcpy(grad, (const float[]){1, -2, 0.5f, 3}, 4 * sizeof(float));
  memcpy(now, (const float[]){0.5f, 1, 2, -1}, 4 * sizeof(float));
  memcpy(pulled, (const float[]){0.25f, 2, 2, 1}, 4 * sizeof(float));
  assert_int_equal(tr_dc_asgd(s, grad, now, pulled, 4, 0.5f), 0);
  assert_int_equal(tr_stream_synchronize(s), 0);
  const float want[4] = {1.125f, -4, 0.5f, -6};
  for (int i = 0; i < 4; i++)
    if (grad[i] != want[i]) fail_msg("grad[%d] = %.9g, expected %g", i, grad[i], want[i]);
  /* now and pulled are read only */
  assert_true(now[0] == 0.5f && pulled[3] == 1);
  tr_device_free(d, buf);
  tr_device_list_close(list);
}

/* With one worker the parameters it pulled are the server's: the correction is zero. */
static void dc_asgd_with_one_worker_changes_nothing(void **state) {
  (void)state;
  tr_train_options o = options(NULL, &mlp4, EQUAL_STEPS);
  o.job.async.dc_lambda = 0.5f;
  assert_one_worker_is_single(o, "dc_lambda 0.5");
  o = options("simplenet", NULL, EQUAL_STEPS);
  o.job.async.dc_lambda = 2.0f;
  assert_one_worker_is_single(o, "dc_lambda 2");
}

/* One worker that pulls every 4 pushes makes stale updates deterministically: compensation
 * changes the parameters, and runs without it repeat bitwise (so the change is its own). */
static void dc_asgd_corrects_the_stale_updates_of_one_worker(void **state) {
  (void)state;
  tr_train_options o = async(options("simplenet", NULL, 12), "host:1", 1);
  o.job.async.pull_every = 4;
  tr_train_result r;
  run_to(o, "plain1.safetensors", &r);
  run_to(o, "plain2.safetensors", &r);
  assert_same_tensors(path("plain2.safetensors"), path("plain1.safetensors"),
                      "one worker pulling every 4, twice");
  o.job.async.dc_lambda = 4.0f;
  run_to(o, "dc.safetensors", &r);
  const double dc = difference(path("dc.safetensors"), path("plain1.safetensors"));
  if (!(dc > 1e-6))
    fail_msg("dc_lambda 4 on updates up to 3 stale moved the parameters by %.3g only", dc);
}

/* Two workers: compensation changes the parameters by far more than runs without it differ
 * among themselves. Staleness 0 keeps the workers in lockstep and the slow one makes the
 * order within each round the same in every run (the fast worker's update first, fresh;
 * the slow one's second, one update stale); what still differs between runs is which steps
 * the two loaders took (measured on 2 cores: 0 but for rounding, mostly 2.6e-3, once
 * 7.7e-3), against the 5.6e-2 to 6.9e-2 that lambda 1000 makes (its correction to a
 * gradient g is lambda · g² · lr · g', tiny for simplenet's small gradients). */
static void dc_asgd_with_two_workers_changes_the_parameters(void **state) {
  (void)state;
  tr_train_options o = async(options("simplenet", NULL, 40), "fault(host:2;dev=1,op=mse,us=1000)", 2);
  o.job.async.staleness = 0;
  tr_train_result r;
  for (int k = 0; k < 3; k++) {
    o.job.async.dc_lambda = k < 2 ? 0 : 1000.0f;
    run_to(o, k == 0 ? "plain1.safetensors" : k == 1 ? "plain2.safetensors" : "dc.safetensors", &r);
    if (r.staleness_hist[0] != 20 || r.staleness_hist[1] != 20)
      fail_msg("staleness 0, one slow worker of 2: %lld fresh and %lld one-stale updates of 40, "
               "expected 20 and 20 (utilization %.3f and %.3f)", (long long)r.staleness_hist[0],
               (long long)r.staleness_hist[1], r.utilization[0], r.utilization[1]);
  }
  const double noise = difference(path("plain1.safetensors"), path("plain2.safetensors"));
  const double dc = difference(path("dc.safetensors"), path("plain1.safetensors"));
  fprintf(stderr, "dc_lambda 1000 moved the parameters by %.3g; two runs without it differ by %.3g\n",
          dc, noise);
  if (!(dc > 2e-2 && dc > 4 * noise))
    fail_msg("dc_lambda 1000 moved the parameters by %.3g only; runs without it differ by %.3g",
             dc, noise);
}

/* ---- clipping ------------------------------------------------------------------------------ */

/* θ0: the parameters a run with this seed starts from, opened as a stage on a host device. */
static float *initial_params(const tr_train_options *o, tr_model **model) {
  char err[512];
  if (o->spec ? tr_model_new(model, o->spec, err, sizeof err)
              : tr_model_named(model, o->model, err, sizeof err))
    fail_msg("%s", err);
  tr_device_list *list;
  if (tr_device_list_open(&list, "host:1", err, sizeof err)) fail_msg("%s", err);
  tr_stage_config c = tr_stage_defaults(*model);
  c.seed = o->job.seed;
  tr_stage *st;
  if (tr_stage_open(&st, *model, tr_device_list_at(list, 0), &c, err, sizeof err))
    fail_msg("%s", err);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(st)), 0);
  const size_t n = tr_stage_info_of(st)->numel;
  float *p = malloc(n * sizeof *p);
  memcpy(p, tr_stage_params(st), n * sizeof *p);
  tr_stage_close(st);
  tr_device_list_close(list);
  return p;
}

/* ||θ − θ0|| over every parameter tensor of a checkpoint. */
static double distance_from(const float *theta0, const tr_model *m, const char *file) {
  tr_checkpoint *ck = open_ck(file);
  double sum = 0;
  for (int t = 0; t < tr_model_tensor_count(m); t++) {
    const tr_tensor_info *info = tr_model_tensor(m, t);
    const tr_checkpoint_tensor *ct = tr_checkpoint_find(ck, info->name);
    if (ct == NULL) fail_msg("%s: no tensor '%s'", file, info->name);
    assert_int_equal(ct->nbytes, info->numel * sizeof(float));
    for (size_t i = 0; i < info->numel; i++) {
      const double d = element(ct, i) - (double)theta0[info->offset + i];
      if (isnan(d)) fail_msg("%s: tensor '%s' holds NaN", file, info->name);
      sum += d * d;
    }
  }
  tr_checkpoint_close(ck);
  return sqrt(sum);
}

/* SGD moves the parameters by lr × the clipped gradient: by exactly lr × clip when the clip
 * binds, and k updates by at most k × lr × clip, however stale. */
static void every_pushed_gradient_is_clipped(void **state) {
  (void)state;
  const float lr = 0.1f, clip = 0.05f;
  tr_train_options o = async(options("simplenet", NULL, 1), "host:1", 1);
  o.job.optim.lr = lr;
  o.job.optim.clip = clip;
  tr_model *m;
  float *theta0 = initial_params(&o, &m);
  tr_train_result r;
  run_to(o, "clip1.safetensors", &r);
  const double one = distance_from(theta0, m, path("clip1.safetensors"));
  if (fabs(one - (double)lr * clip) > 1e-4 * (double)lr * clip)
    fail_msg("one clipped step moved the parameters by %.6g, expected lr × clip = %.6g", one,
             (double)lr * clip);

  enum { K = 20 };
  o = async(options("simplenet", NULL, K), "host:2", 2);
  o.job.optim.lr = lr;
  o.job.optim.clip = clip;
  run_to(o, "clipk.safetensors", &r);
  assert_int_equal(hist_sum(&r), K);
  const double bound = K * (double)lr * clip;
  const double clipped = distance_from(theta0, m, path("clipk.safetensors"));
  if (!(clipped <= bound * (1 + 1e-4)))
    fail_msg("%d clipped updates of 2 workers moved the parameters by %.6g, more than "
             "%d × lr × clip = %.6g", K, clipped, K, bound);
  o.job.optim.clip = 0;
  run_to(o, "free.safetensors", &r);
  const double free_ = distance_from(theta0, m, path("free.safetensors"));
  if (!(free_ > 3 * bound))
    fail_msg("without clipping the same run moved by %.6g only (clipped: %.6g, bound %.6g): "
             "the clip did not bind", free_, clipped, bound);
  free(theta0);
  tr_model_free(m);
}

/* ---- momentum correction ----------------------------------------------------------------- */

static void momentum_correction_takes_off_what_asynchrony_adds(void **state) {
  (void)state;
  tr_train_options o = async(options(NULL, &mlp4, 4), "host:2", 2);
  tr_train_result r;
  run_to(o, NULL, &r);
  if (!(fabs(r.momentum - 0.9) < 1e-6)) fail_msg("no correction: momentum %g, expected 0.9", r.momentum);
  o.job.async.momentum_correction = 1;
  run_to(o, NULL, &r);
  if (!(fabs(r.momentum - 0.4) < 1e-6))
    fail_msg("2 workers, corrected: momentum %g, expected 0.9 - (1 - 1/2) = 0.4", r.momentum);
  o = async(options(NULL, &mlp4, 4), "host:1", 1);
  o.job.async.momentum_correction = 1;
  run_to(o, NULL, &r);
  if (!(fabs(r.momentum - 0.9) < 1e-6))
    fail_msg("1 worker, corrected: momentum %g, expected 0.9 (asynchrony adds none)", r.momentum);
}

/* ---- pulling every k pushes --------------------------------------------------------------- */

/* A worker that pulls every 4 pushes computes 4 gradients at the parameters of one version:
 * they are applied 0, 1, 2 and 3 updates after it. */
static void pulling_every_four_pushes_makes_updates_up_to_three_stale(void **state) {
  (void)state;
  enum { N = 12 };
  tr_train_options o = options("simplenet", NULL, N);
  tr_train_result r;
  run_to(o, "single.safetensors", &r);
  o = async(o, "host:1", 1);
  o.job.async.pull_every = 4;
  run_to(o, "every4.safetensors", &r);
  assert_staleness_adds_up(&r);
  for (int s = 0; s < TR_TRAIN_STALENESS_BINS; s++)
    if (r.staleness_hist[s] != (s < 4 ? N / 4 : 0))
      fail_msg("pull every 4: %lld updates of staleness %d, expected %d", (long long)r.staleness_hist[s],
               s, s < 4 ? N / 4 : 0);
  assert_true(r.staleness_max == 3);
  assert_true(fabs(r.staleness_mean - 1.5) < 1e-12);
  assert_true(r.consistency > 0); /* the worker's parameters lag the server's */
  const double d = difference(path("every4.safetensors"), path("single.safetensors"));
  if (!(d > 1e-6)) fail_msg("pull every 4 ends %.3g from single: stale gradients changed nothing", d);
}

/* ---- convergence -------------------------------------------------------------------------- */

/* Step k's batch is single's step k, so after the same steps the final losses (the mean of
 * the last 1% of steps) compare like for like. */
static void more_workers_converge_like_one(void **state) {
  (void)state;
  enum { STEPS = 3000 };
  static const struct {
    const char *devices;
    int workers;
  } cases[] = {{"host:2", 2}, {"host:4", 4}};
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {0, 0};
  for (uint64_t seed = 1; seed <= 3; seed++) {
    tr_train_options o = options("simplenet", NULL, STEPS);
    o.job.seed = seed;
    tr_train_result single, r;
    run_to(o, NULL, &single);
    assert_true(single.final_loss < 0.1 * single.initial_loss);
    for (int c = 0; c < 2; c++) {
      run_to(async(o, cases[c].devices, cases[c].workers), NULL, &r);
      assert_staleness_adds_up(&r);
      const double ratio = r.final_loss / single.final_loss;
      fprintf(stderr, "convergence: seed %llu, %d workers: final loss %.5g, single %.5g, ratio "
              "%.3f, staleness mean %.2f max %.0f\n", (unsigned long long)seed, cases[c].workers,
              r.final_loss, single.final_loss, ratio, r.staleness_mean, r.staleness_max);
      if (ratio < lo[c]) lo[c] = ratio;
      if (ratio > hi[c]) hi[c] = ratio;
      if (!(ratio <= 1.2))
        fail_msg("seed %llu, %d workers: final loss %.5g, %.3f × single's %.5g (allowed 1.2)",
                 (unsigned long long)seed, cases[c].workers, r.final_loss, ratio,
                 single.final_loss);
    }
  }
  for (int c = 0; c < 2; c++)
    fprintf(stderr, "convergence: %d workers, %d steps, 3 seeds: final loss %.3f to %.3f × single's\n",
            cases[c].workers, STEPS, lo[c], hi[c]);
}

/* Hogwild!: the workers update the server's parameters in place, with no lock. One worker is
 * single training bitwise; two converge like one. Those two race on purpose (that is the
 * method), so a ThreadSanitizer build runs only the one-worker half. */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif

static void hogwild_workers_train_the_shared_parameters(void **state) {
  (void)state;
  tr_train_options o = options(NULL, &mlp4, EQUAL_STEPS);
  o.job.async.hogwild = 1;
  tr_train_result r;
  run_to(o, "single.safetensors", &r);
  run_to(async(o, "host:1", 1), "hogwild.safetensors", &r);
  assert_same_tensors(path("hogwild.safetensors"), path("single.safetensors"), "Hogwild!, one worker");
  assert_staleness_adds_up(&r);
  assert_true(r.staleness_max == 0 && isnan(r.consistency));
#ifndef TSAN
  o = options("simplenet", NULL, 3000);
  tr_train_result single;
  run_to(o, NULL, &single);
  o.job.async.hogwild = 1;
  run_to(async(o, "host:2", 2), NULL, &r);
  assert_staleness_adds_up(&r);
  fprintf(stderr, "Hogwild!, 2 workers: final loss %.5g, %.3f × single's, staleness mean %.2f "
          "max %.0f\n", r.final_loss, r.final_loss / single.final_loss, r.staleness_mean,
          r.staleness_max);
  if (!(r.final_loss <= 1.2 * single.final_loss))
    fail_msg("Hogwild!, 2 workers: final loss %.5g against single's %.5g", r.final_loss,
             single.final_loss);
#endif
}

/* ---- a failing worker --------------------------------------------------------------------- */

/* Worker 1 (slow, so checkpoints are written before) fails its fifth step: the run stops with
 * its name, in moments; the last checkpoint is whole and resumes. */
static void a_failing_worker_stops_the_run_by_name(void **state) {
  (void)state;
  /* worker 1 sleeps 2 ms after each loss pass, and its 10th, the fifth step's backward,
   * fails (gpu/fault.h): it never makes its fifth push */
  tr_train_options o = async(options("simplenet", NULL, 1000),
                             "fault(host:2;dev=1,op=mse,us=2000,fail=10)", 2);
  o.job.async.staleness = 2; /* worker 0 cannot finish the run alone before worker 1 fails */
  o.job.checkpoint.path = path("failing.safetensors");
  o.job.checkpoint.every = 2;
  tr_train_result r;
  char err[1024] = "";
  const uint64_t t0 = tr_now_ns();
  int rc = tr_train_run(&o, &r, err, sizeof err);
  const double took = (double)(tr_now_ns() - t0) / 1e9;
  if (rc == 0) fail_msg("worker 1 failed its 5th step, yet the run succeeded");
  if (!strstr(err, "worker1")) fail_msg("the error does not name worker1: '%s'", err);
  if (!(took < 10)) fail_msg("the failed run took %.1f s to stop", took);

  if (access(o.job.checkpoint.path, F_OK)) fail_msg("no checkpoint was left by the failed run");
  const uint64_t step = checkpoint_step(o.job.checkpoint.path);
  if (!(step >= 2 && step % 2 == 0 && step < 1000))
    fail_msg("the checkpoint left is of step %llu", (unsigned long long)step);
  difference(o.job.checkpoint.path, o.job.checkpoint.path); /* every tensor is there and a number */

  tr_train_options resumed = async(options("simplenet", NULL, (int64_t)step + 6), "host:2", 2);
  resumed.job.checkpoint.resume = o.job.checkpoint.path;
  run_to(resumed, "resumed.safetensors", &r);
  assert_int_equal(r.first_step, (int64_t)step);
  assert_staleness_adds_up(&r);
}

/* ---- figures ------------------------------------------------------------------------------- */

/* A bound of 4 makes both workers take their share even where the two compete for the
 * cores with the server and the loaders (on two cores one may otherwise starve and make
 * fewer pushes than its warm-up, which leaves it no measured utilization). */
static void async_runs_report_their_figures(void **state) {
  (void)state;
  enum { N = 300 };
  tr_train_options o = async(options("simplenet", NULL, N), "host:2", 2);
  o.job.async.staleness = 4;
  tr_train_result r;
  run_to(o, NULL, &r);
  assert_string_equal(r.strategy, "async");
  assert_int_equal(r.workers, 2);
  assert_int_equal(r.ndevices, 2);
  assert_staleness_adds_up(&r);
  assert_true(r.samples_per_s > 0 && r.steps_per_s > 0);
  assert_true(fabs(r.samples_per_s - r.steps_per_s * o.job.global_batch) < 1e-6 * r.samples_per_s);
  for (int i = 0; i < 2; i++)
    if (!(r.utilization[i] > 0 && r.utilization[i] <= 1))
      fail_msg("2 workers: utilization[%d] = %g, expected (0, 1]", i, r.utilization[i]);
  if (!(r.server_utilization > 0 && r.server_utilization <= 1))
    fail_msg("server utilization %g, expected (0, 1]", r.server_utilization);
  if (!(r.consistency > 0 && r.consistency < 1))
    fail_msg("2 workers: consistency %g, expected a small positive number", r.consistency);
  if (!(r.clock_gap_max >= 0 && r.clock_gap_max <= 4))
    fail_msg("staleness 4: a pull served %d pushes ahead of the slowest", r.clock_gap_max);
  assert_true(isnan(r.bubble_fraction));
  assert_true(isnan(r.momentum)); /* SGD has none */
  assert_true(r.final_loss < r.initial_loss);
}

/* A run of 0.3 s (what troupe bench runs) ends on time, and its steps are its updates. */
static void a_timed_async_run_stops_on_time_and_counts_its_updates(void **state) {
  (void)state;
  tr_train_options o = async(options("simplenet", NULL, 0), "host:2", 2);
  o.seconds = 0.3;
  tr_train_result r;
  char err[1024];
  const uint64_t t0 = tr_now_ns();
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("a timed async run: %s", err);
  const double took = (double)(tr_now_ns() - t0) / 1e9;
  if (!(took >= 0.299 && took < 5.0)) fail_msg("a 0.3 s async run took %.3f s", took);
  assert_true(r.steps > 10);
  assert_int_equal(r.samples, r.steps * o.job.global_batch);
  assert_staleness_adds_up(&r);
  assert_true(r.steps_per_s > 0 && r.window_steps > 0 && r.window_steps <= r.steps);
}

/* ---- bad options --------------------------------------------------------------------------- */

static void expect_einval(const tr_train_options *o, const char *needle) {
  tr_train_result r;
  char err[1024] = "";
  int rc = tr_train_run(o, &r, err, sizeof err);
  if (rc != TR_EINVAL) fail_msg("status %d, expected TR_EINVAL naming '%s' ('%s')", rc, needle, err);
  if (!strstr(err, needle)) fail_msg("error '%s' does not name '%s'", err, needle);
}

static void bad_async_options_are_named(void **state) {
  (void)state;
  const tr_train_options base = async(options("simplenet", NULL, 2), "host:2", 2);
  tr_train_options o = base;
  o.job.layout.replicas = 3;
  expect_einval(&o, "layout.replicas");
  o = base;
  o.job.async.dc_lambda = -0.1f;
  expect_einval(&o, "async.dc_lambda");
  o = base;
  o.job.async.dc_lambda = NAN;
  expect_einval(&o, "async.dc_lambda");
  o = base;
  o.job.async.staleness = -2;
  expect_einval(&o, "async.staleness");
  o = base;
  o.job.async.pull_every = -1;
  expect_einval(&o, "async.pull_every");
  o = base;
  o.server = "gpu:0";
  expect_einval(&o, "server");
  o = base;
  o.server = "host:2"; /* one device */
  expect_einval(&o, "server");
}

/* ---- resume --------------------------------------------------------------------------------- */

static void a_resumed_async_run_continues_to_its_last_step(void **state) {
  (void)state;
  tr_train_options o = async(options(NULL, &mlp4, 6), "host:2", 2);
  tr_train_result r;
  run_to(o, "half.safetensors", &r);
  assert_int_equal(checkpoint_step(path("half.safetensors")), 6);
  o.steps = 14;
  o.job.checkpoint.resume = path("half.safetensors");
  run_to(o, "whole.safetensors", &r);
  assert_int_equal(r.first_step, 6);
  assert_int_equal(r.steps, 14);
  assert_staleness_adds_up(&r); /* 8 updates in this run */
  assert_int_equal(checkpoint_step(path("whole.safetensors")), 14);
  /* the resumed run started where the first ended, and trained on */
  assert_true(difference(path("whole.safetensors"), path("half.safetensors")) > 1e-6);
}

/* ---- stress ------------------------------------------------------------------------------ */

static void four_workers_hold_a_tight_bound_for_thousands_of_steps(void **state) {
  (void)state;
  const int64_t steps = (int64_t)test_scaled(1000);
  tr_train_options o = async(options("simplenet", NULL, steps), "host:4", 4);
  o.job.async.staleness = 1;
  tr_train_result r;
  run_to(o, "long.safetensors", &r);
  assert_staleness_adds_up(&r);
  if (r.clock_gap_max > 1) fail_msg("staleness 1: a pull served %d pushes ahead", r.clock_gap_max);
  /* While a worker at clock c computes, every other worker (at c − 1 or later when it
   * pulled) can push until it is at c + 2 (it pulls at most 1 ahead, then pushes): 3 pushes
   * each, 9 in all. */
  if (!(r.staleness_max <= 3 * 3))
    fail_msg("staleness 1, 4 workers: an update %.0f versions stale, SSP allows 9", r.staleness_max);
  assert_true(r.final_loss < 0.1 * r.initial_loss);
  fprintf(stderr, "4 workers, staleness 1, %lld steps: staleness mean %.2f max %.0f, %.0f "
          "updates/s, final loss %.4g\n", (long long)steps, r.staleness_mean, r.staleness_max,
          r.steps_per_s, r.final_loss);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_worker_equals_single_bitwise),
      cmocka_unit_test(a_fast_worker_is_held_at_the_staleness_bound),
      cmocka_unit_test(dc_asgd_op_matches_a_hand_computed_example),
      cmocka_unit_test(dc_asgd_with_one_worker_changes_nothing),
      cmocka_unit_test(dc_asgd_corrects_the_stale_updates_of_one_worker),
      cmocka_unit_test(dc_asgd_with_two_workers_changes_the_parameters),
      cmocka_unit_test(every_pushed_gradient_is_clipped),
      cmocka_unit_test(momentum_correction_takes_off_what_asynchrony_adds),
      cmocka_unit_test(pulling_every_four_pushes_makes_updates_up_to_three_stale),
      cmocka_unit_test(more_workers_converge_like_one),
      cmocka_unit_test(hogwild_workers_train_the_shared_parameters),
      cmocka_unit_test(a_failing_worker_stops_the_run_by_name),
      cmocka_unit_test(async_runs_report_their_figures),
      cmocka_unit_test(a_timed_async_run_stops_on_time_and_counts_its_updates),
      cmocka_unit_test(bad_async_options_are_named),
      cmocka_unit_test(a_resumed_async_run_continues_to_its_last_step),
  };
  const struct CMUnitTest stress[] = {
      cmocka_unit_test(four_workers_hold_a_tight_bound_for_thousands_of_steps),
  };
  /* the stress suite sets TR_TEST_SCALE: there only the long run */
  if (test_scaled(1000) > 1000) return cmocka_run_group_tests(stress, setup, teardown);
  return cmocka_run_group_tests(tests, setup, teardown);
}
