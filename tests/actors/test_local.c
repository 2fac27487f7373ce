/* test_local.c — local SGD, post-local SGD and DiLoCo (strategy local, tr_job_config.local):
 * with H = 1 and plain SGD local SGD is dp (within 1e-6: the replicas' parameters are
 * averaged where dp sums gradients); with H > 1 it is not dp but the algorithm itself,
 * against a float64 reference of it written out here (linear, relu, linear, MSE, SGD, two
 * replicas, each its own share of every batch): plain averaging, K steps of dp first, and
 * DiLoCo's outer Nesterov step. Runs go through tr_train_run; the parameters compared are
 * replica 0's, from the checkpoint each run writes at its end (a step that is not a sync's,
 * so the replicas then differ). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "local"
#include "scratch.h"

#include "compare.h"
#include "specs.h"

enum { IN = 4, HID = 8, OUT = 2, BATCH = 8, R = 2, MAXP = 256 };
static const float LR = 0.1f;

#include "local_fixture.h"

/* ---- the float64 reference ------------------------------------------------------------------ */

typedef struct reference {
  int H, K;
  tr_outer outer;
  double outer_lr, mu;
  double p[R][MAXP], global[MAXP], velocity[MAXP];
  double divergence; /* the largest ||θ_r − mean|| / ||mean|| before a sync */
} reference;

/* Adds to g the gradient of sum over samples [first, first + count) of ||f(x) − y||² ×
 * scale, at parameters p. */
static void gradient(const double *p, uint64_t first, size_t count, double scale, double *g) {
  float x[IN], y[OUT];
  for (size_t s = 0; s < count; s++) {
    fill(NULL, first + s, 1, x, y);
    double h[HID], a[HID], o[OUT], dout[OUT], da[HID];
    for (int j = 0; j < HID; j++) {
      h[j] = p[off[1] + j];
      for (int k = 0; k < IN; k++) h[j] += p[off[0] + j * IN + k] * x[k];
      a[j] = h[j] > 0 ? h[j] : 0;
    }
    for (int c = 0; c < OUT; c++) {
      o[c] = p[off[3] + c];
      for (int j = 0; j < HID; j++) o[c] += p[off[2] + c * HID + j] * a[j];
      dout[c] = 2 * (o[c] - y[c]) * scale;
      g[off[3] + c] += dout[c];
      for (int j = 0; j < HID; j++) g[off[2] + c * HID + j] += dout[c] * a[j];
    }
    for (int j = 0; j < HID; j++) {
      da[j] = 0;
      for (int c = 0; c < OUT; c++) da[j] += p[off[2] + c * HID + j] * dout[c];
      const double dh = h[j] > 0 ? da[j] : 0;
      g[off[1] + j] += dh;
      for (int k = 0; k < IN; k++) g[off[0] + j * IN + k] += dh * x[k];
    }
  }
}

static void reference_run(reference *ref, int64_t steps) {
  for (int r = 0; r < R; r++) memcpy(ref->p[r], init, sizeof init);
  memcpy(ref->global, init, sizeof init);
  memset(ref->velocity, 0, sizeof ref->velocity);
  ref->divergence = 0;
  for (int64_t t = 0; t < steps; t++) {
    const bool warm = t < ref->K;
    double g[R][MAXP] = {{0}};
    for (int r = 0; r < R; r++) {
      uint64_t first;
      size_t count;
      tr_data_shard((uint64_t)t, BATCH, r, R, &first, &count);
      /* dp: the global batch's mean; local: the replica's own samples' */
      gradient(ref->p[r], first, count, 1.0 / ((warm ? BATCH : (double)count) * OUT), g[r]);
    }
    for (int r = 0; r < R; r++)
      for (size_t i = 0; i < numel; i++)
        ref->p[r][i] -= LR * (warm ? g[0][i] + g[1][i] : g[r][i]);
    if (warm || (t + 1 - ref->K) % ref->H) continue;
    double mean[MAXP], norm = 0;
    for (size_t i = 0; i < numel; i++) {
      mean[i] = (ref->p[0][i] + ref->p[1][i]) / R;
      norm += mean[i] * mean[i];
    }
    for (int r = 0; r < R; r++) {
      double d = 0;
      for (size_t i = 0; i < numel; i++) d += (ref->p[r][i] - mean[i]) * (ref->p[r][i] - mean[i]);
      if (sqrt(d / norm) > ref->divergence) ref->divergence = sqrt(d / norm);
    }
    for (size_t i = 0; i < numel && ref->outer == TR_OUTER_NESTEROV; i++) {
      const double delta = ref->global[i] - mean[i];
      ref->velocity[i] = ref->mu * ref->velocity[i] + delta;
      ref->global[i] -= ref->outer_lr * (delta + ref->mu * ref->velocity[i]);
      mean[i] = ref->global[i];
    }
    for (int r = 0; r < R; r++) memcpy(ref->p[r], mean, numel * sizeof *mean);
  }
}

/* ||run − reference|| / ||reference|| of replica 0's parameters, the largest over tensors. */
static double from_reference(const char *file, const reference *ref) {
  tr_checkpoint *ck = NULL;
  char err[512];
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) {
    printf("  %s\n", err);
    return INFINITY;
  }
  double most = 0;
  for (int t = 0; t < 4; t++) {
    const tr_tensor_info *info = tr_model_tensor(model, t);
    const tr_checkpoint_tensor *c = tr_checkpoint_find(ck, info->name);
    if (c == NULL || c->nbytes != info->numel * sizeof(float)) {
      most = INFINITY;
      break;
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < info->numel; i++) {
      const double want = ref->p[0][info->offset + i], d = element(c, i) - want;
      diff += d * d;
      norm += want * want;
    }
    const double rel = sqrt(diff / norm);
    if (!(rel <= most)) most = isnan(rel) ? INFINITY : rel;
  }
  tr_checkpoint_close(ck);
  return most;
}

/* ||a − b|| / ||b|| of the model's parameters in two checkpoints (replica 0's: a local
 * run's also holds its other replicas'), the largest over tensors; +inf when one lacks it. */
static double model_difference(const char *file_a, const char *file_b) {
  tr_checkpoint *a = NULL, *b = NULL;
  char err[512];
  double most = INFINITY;
  if (tr_checkpoint_open(&a, file_a, err, sizeof err) ||
      tr_checkpoint_open(&b, file_b, err, sizeof err)) {
    printf("  %s\n", err);
    goto out;
  }
  most = 0;
  for (int t = 0; t < 4 && isfinite(most); t++) {
    const char *name = tr_model_tensor(model, t)->name;
    const tr_checkpoint_tensor *ta = tr_checkpoint_find(a, name), *tb = tr_checkpoint_find(b, name);
    const double rel = ta && tb && ta->nbytes == tb->nbytes ? relative_difference(ta, tb) : INFINITY;
    if (!(rel <= most)) most = isnan(rel) ? INFINITY : rel;
  }
out:
  tr_checkpoint_close(a);
  tr_checkpoint_close(b);
  return most;
}

/* ---- runs ----------------------------------------------------------------------------------- */

static tr_train_options options(tr_strategy strategy, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.spec = &tiny;
  o.strategy = strategy;
  o.devices = "host:2";
  o.steps = steps;
  o.job.data = data;
  o.deterministic = 1;
  o.watchdog_ms = 20000;
  return o;
}

static tr_train_options local(int64_t steps, int H, int K) {
  tr_train_options o = options(TR_STRATEGY_LOCAL, steps);
  o.job.local.sync_every = H;
  o.job.local.warmup_sync = K;
  return o;
}

static void run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  if (tr_train_run(&o, r, err, sizeof err))
    fail_msg("%s H %d K %d on %s: %s", tr_strategy_name(o.strategy), o.job.local.sync_every,
             o.job.local.warmup_sync, o.devices, err);
  assert_int_equal(r->steps, o.steps);
}

static double dp_bytes_per_step; /* local_every_step_is_dp's dp run's */

static void expect_reference(tr_train_options o, reference *ref, const char *file) {
  tr_train_result r;
  run_to(o, file, &r);
  ref->H = o.job.local.sync_every;
  ref->K = o.job.local.warmup_sync;
  ref->outer = o.job.local.outer;
  ref->outer_lr = o.job.local.outer_lr;
  ref->mu = o.job.local.outer_momentum;
  reference_run(ref, o.steps);
  const double d = from_reference(path(file), ref);
  printf("  H %d K %d %s: %.3g from the float64 reference\n", ref->H, ref->K,
         tr_outer_name(ref->outer), d);
  if (!(d < 1e-5)) fail_msg("local SGD differs from its float64 reference by %.3g", d);
  /* the divergence before the syncs: the run's consistency */
  printf("  consistency %.6g, the reference's %.6g\n", r.consistency, ref->divergence);
  if (!(fabs(r.consistency - ref->divergence) <= 1e-4 * ref->divergence))
    fail_msg("consistency %.6g, but the replicas' divergence before a sync is %.6g",
             r.consistency, ref->divergence);
  /* an all-reduce as large as dp's gradients' at each sync and each warm-up step */
  const int64_t syncs = (o.steps - ref->K) / ref->H + ref->K;
  const double want = dp_bytes_per_step * (double)syncs / (double)o.steps;
  printf("  %.6g bytes a step (dp %.6g, %lld all-reduces in %lld steps)\n", r.comm_bytes_per_step,
         dp_bytes_per_step, (long long)syncs, (long long)o.steps);
  if (!(fabs(r.comm_bytes_per_step - want) <= 1e-9 * want))
    fail_msg("local SGD sent %.6g bytes a step; dp's all-reduces as often would be %.6g",
             r.comm_bytes_per_step, want);
  assert_int_equal(r.sync_every, ref->H);
  assert_int_equal(r.warmup_sync, ref->K);
  assert_string_equal(r.outer, tr_outer_name(ref->outer));
}

static void local_every_step_is_dp(void **state) {
  (void)state;
  tr_train_result r;
  run_to(options(TR_STRATEGY_DP, 5), "dp.safetensors", &r);
  dp_bytes_per_step = r.comm_bytes_per_step;
  assert_true(dp_bytes_per_step > 0);
  run_to(local(5, 1, 0), "h1.safetensors", &r);
  assert_true(r.comm_bytes_per_step == dp_bytes_per_step); /* an all-reduce a step alike */
  const double d = model_difference(path("h1.safetensors"), path("dp.safetensors"));
  printf("  H 1: %.3g from dp\n", d);
  if (!(d < 1e-6)) fail_msg("local SGD with H 1 differs from dp by %.3g", d);
}

static void local_matches_its_reference_and_is_not_dp(void **state) {
  (void)state;
  static reference ref;
  expect_reference(local(7, 3, 0), &ref, "h3.safetensors");
  tr_train_result r;
  run_to(options(TR_STRATEGY_DP, 7), "dp7.safetensors", &r);
  const double d = model_difference(path("h3.safetensors"), path("dp7.safetensors"));
  printf("  H 3: %.3g from dp\n", d);
  if (!(d > 1e-4 && isfinite(d))) fail_msg("local SGD with H 3 is dp (%.3g apart): nothing was local", d);
}

static void post_local_sgd_is_dp_then_local(void **state) {
  (void)state;
  static reference ref;
  expect_reference(local(8, 2, 3), &ref, "k3.safetensors");
}

static void diloco_matches_its_reference(void **state) {
  (void)state;
  static reference ref;
  tr_train_options o = local(8, 3, 0);
  o.job.local.outer = TR_OUTER_NESTEROV;
  o.job.local.outer_lr = 0.7f;
  o.job.local.outer_momentum = 0.9f;
  expect_reference(o, &ref, "diloco.safetensors");
  o.job.local.warmup_sync = 2; /* and after dp's steps */
  expect_reference(o, &ref, "diloco-k2.safetensors");
}

/* Held-out samples: the training's waves further on, 12 rows. */
static int fill_held(void *arg, uint64_t first, size_t count, void *x, void *y) {
  return fill(arg, first + 100000, count, x, y);
}

/* The reference's MSE of replica 0's parameters on held-out rows [0, n). */
static double held_out_loss(const reference *ref, int n) {
  double total = 0;
  float x[IN], y[OUT];
  for (int i = 0; i < n; i++) {
    fill_held(NULL, (uint64_t)i, 1, x, y);
    const double *p = ref->p[0];
    double a[HID];
    for (int j = 0; j < HID; j++) {
      double h = p[off[1] + j];
      for (int k = 0; k < IN; k++) h += p[off[0] + j * IN + k] * x[k];
      a[j] = h > 0 ? h : 0;
    }
    for (int c = 0; c < OUT; c++) {
      double o = p[off[3] + c];
      for (int j = 0; j < HID; j++) o += p[off[2] + c * HID + j] * a[j];
      total += (o - y[c]) * (o - y[c]) / OUT;
    }
  }
  return total / n;
}

/* Held-out evaluation after a sync (every replica then holds the same parameters): each
 * replica's share of the samples with its own, the loss of the synced model. */
static void local_evaluates_the_synced_model(void **state) {
  (void)state;
  static reference ref;
  tr_data *held = NULL;
  char err[512];
  const tr_data_callback cb = {.name = "held", .x_bytes = IN * sizeof(float),
                               .y_bytes = OUT * sizeof(float), .fill = fill_held, .rows = 12};
  assert_int_equal(tr_data_open_callback(&held, &cb, err, sizeof err), 0);
  tr_train_options o = local(6, 3, 0);
  o.job.eval = (tr_eval_config){.data = held, .every = 3};
  tr_train_result r;
  run_to(o, "eval.safetensors", &r);
  tr_data_close(held);
  ref.H = 3;
  reference_run(&ref, 6);
  const double want = held_out_loss(&ref, 12);
  printf("  held-out loss %.9g after step %lld (%d evaluations), the reference's %.9g\n",
         r.eval_loss, (long long)r.eval_step, r.eval_count, want);
  assert_int_equal(r.eval_step, 6);
  assert_int_equal(r.eval_count, 2);
  if (!(fabs(r.eval_loss - want) <= 1e-5 * want))
    fail_msg("held-out loss %.9g, the synced model's is %.9g", r.eval_loss, want);
}

/* Pipelines inside a replica (layout.stages 2 on host:4): each stage's replica group syncs
 * its own layers, so the run is the one-stage run's (within rounding: a replica's
 * micro-batches add up its gradient in another order), and with H 1 hybrid's. */
static void local_pipelines_are_local_sgd(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = local(7, 3, 1);
  o.job.local.outer = TR_OUTER_NESTEROV;
  o.job.local.outer_lr = 0.7f;
  run_to(o, "flat.safetensors", &r);
  const double flat = r.consistency;
  o.devices = "host:4";
  o.job.layout.stages = 2;
  run_to(o, "staged.safetensors", &r);
  assert_int_equal(r.stages, 2);
  assert_int_equal(r.replicas, 2);
  double d = model_difference(path("staged.safetensors"), path("flat.safetensors"));
  printf("  2 stages a replica: %.3g from 1 (consistency %.6g, %.6g)\n", d, r.consistency, flat);
  if (!(d < 1e-5)) fail_msg("local SGD of pipelines differs from local SGD by %.3g", d);
  assert_true(r.consistency > 0 && isfinite(r.consistency));
  tr_train_options h = options(TR_STRATEGY_HYBRID, 5);
  h.devices = "host:4";
  h.job.layout.stages = 2;
  run_to(h, "hybrid.safetensors", &r);
  o = local(5, 1, 0);
  o.devices = "host:4";
  o.job.layout.stages = 2;
  run_to(o, "staged1.safetensors", &r);
  d = model_difference(path("staged1.safetensors"), path("hybrid.safetensors"));
  printf("  2 stages a replica, H 1: %.3g from hybrid\n", d);
  if (!(d < 1e-6)) fail_msg("local SGD of pipelines with H 1 differs from hybrid by %.3g", d);
}

/* o run whole for 8 steps (checkpoints every 2 too), then for 4 (mid-period: H 3 syncs
 * after steps 2, 5, 8) and resumed from there: the final checkpoints are one file, every
 * replica's parameters and state and DiLoCo's outer state included. */
static void assert_resume_is_bitwise(tr_train_options o, const char *what) {
  tr_train_result r;
  o.steps = 8;
  o.job.checkpoint.every = 2;
  run_to(o, "whole.safetensors", &r);
  o.job.checkpoint.every = 0;
  o.steps = 4;
  run_to(o, "half.safetensors", &r);
  o.steps = 8;
  o.job.checkpoint.resume = path("half.safetensors");
  run_to(o, "resumed.safetensors", &r);
  assert_int_equal(r.first_step, 4);
  if (!same_file(path("whole.safetensors"), path("resumed.safetensors")))
    fail_msg("%s resumed at step 4 differs from the uninterrupted run", what);
  /* the checkpoint holds replica 1's own, and (DiLoCo) the outer state */
  tr_checkpoint *ck = NULL;
  char err[512];
  assert_int_equal(tr_checkpoint_open(&ck, path("half.safetensors"), err, sizeof err), 0);
  assert_non_null(tr_checkpoint_find(ck, "replica1.0.weight"));
  if (o.job.optim.kind == TR_OPTIM_MOMENTUM)
    assert_non_null(tr_checkpoint_find(ck, "replica1.momentum.0.weight"));
  if (o.job.local.outer == TR_OUTER_NESTEROV) {
    assert_non_null(tr_checkpoint_find(ck, "outer.global.2.bias"));
    assert_non_null(tr_checkpoint_find(ck, "outer.velocity.0.weight"));
  }
  tr_checkpoint_close(ck);
}

static void resume_mid_period_is_bitwise(void **state) {
  (void)state;
  assert_resume_is_bitwise(local(8, 3, 0), "local SGD");
  tr_train_options o = local(8, 3, 1);
  o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0.05f); /* each replica's own state */
  o.job.local.outer = TR_OUTER_NESTEROV;
  o.job.local.outer_lr = 0.7f;
  assert_resume_is_bitwise(o, "DiLoCo with momentum");
}

static void expect_einval(tr_train_options o, const char *field, const char *words) {
  tr_error e;
  tr_train_result r;
  const int rc = tr_train_run_e(&o, &r, &e);
  if (rc != TR_EINVAL || strcmp(e.field, field) || !strstr(e.message, words))
    fail_msg("expected a refusal of %s (\"%s\"), got %d: [%s] %s", field, words, rc, e.field,
             e.message);
}

static void local_settings_are_refused_by_field(void **state) {
  (void)state;
  expect_einval(local(4, 0, 0), "local.sync_every", "give H >= 1");
  expect_einval(local(4, -1, 0), "local.sync_every", "give steps >= 1");
  expect_einval(local(4, 2, -1), "local.warmup_sync", "give data-parallel steps >= 0");
  tr_train_options o = local(4, 2, 0);
  o.job.local.outer = TR_OUTER_NESTEROV;
  expect_einval(o, "local.outer_lr", "positive rate");
  o.job.local.outer_lr = -1;
  expect_einval(o, "local.outer_lr", "positive rate");
  o = options(TR_STRATEGY_DP, 4);
  o.job.local.sync_every = 2;
  expect_einval(o, "local.sync_every", "strategy local's");
  o = local(4, 2, 0);
  o.job.zero = 1;
  expect_einval(o, "zero", "own optimizer state");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(local_every_step_is_dp),
      cmocka_unit_test(local_matches_its_reference_and_is_not_dp),
      cmocka_unit_test(post_local_sgd_is_dp_then_local),
      cmocka_unit_test(diloco_matches_its_reference),
      cmocka_unit_test(local_evaluates_the_synced_model),
      cmocka_unit_test(local_pipelines_are_local_sgd),
      cmocka_unit_test(resume_mid_period_is_bitwise),
      cmocka_unit_test(local_settings_are_refused_by_field),
  };
  return cmocka_run_group_tests(tests, open_all, close_all);
}
