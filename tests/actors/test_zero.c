/* test_zero.c — ZeRO stage 1 (tr_job_config.zero): dp and hybrid with the optimizer state
 * sharded across the replicas train the model single does (parameters within 1e-5, with
 * momentum and AdamW, whose state carries from step to step), and exactly what the unsharded
 * layout trains, optimizer state included; they repeat bitwise; they clip by the norm over
 * every shard of every stage; their checkpoints hold the whole state and resume into any
 * layout, and unsharded checkpoints resume into them; each replica holds its shard of the
 * state alone (the memory figures, in bytes); and the layouts ZeRO does not apply to are
 * refused, naming the field. Runs go through tr_train_run; parameters and state are compared
 * through the checkpoint each run writes at its end. */
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

#define SCRATCH_NAME "zero"
#include "scratch.h"

#include "compare.h"
#include "specs.h"

static const double tolerance = 1e-5;
enum { STEPS = 4 };

static tr_train_options options(const tr_model_spec *spec, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.spec = spec;
  o.devices = "host:1";
  o.steps = steps;
  o.job.global_batch = spec->batch;
  o.deterministic = 1; /* cuts by FLOPs: every hybrid run cuts alike */
  o.watchdog_ms = 20000;
  return o;
}

static tr_train_options zero(tr_train_options o, const layout_case *c) {
  o = with_layout(o, c);
  o.job.zero = 1;
  return o;
}

static void run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  if (tr_train_run(&o, r, err, sizeof err))
    fail_msg("%s%s %s on %s: %s", tr_strategy_name(o.strategy), o.job.zero ? " zero" : "",
             model_name(&o), o.devices, err);
  assert_int_equal(r->steps, o.steps);
  assert_int_equal(r->zero, o.job.zero);
}

/* The largest ||a - b|| / ||b|| over every tensor of two checkpoints, optimizer state
 * included (compare.h's params_difference leaves it out); +inf when they do not hold the
 * same tensors, or hold NaN. */
static double state_difference(const char *file_a, const char *file_b, char *worst, size_t n) {
  tr_checkpoint *a = NULL, *b = NULL;
  char err[512];
  double most = 0;
  size_t states = 0;
  snprintf(worst, n, "-");
  if (tr_checkpoint_open(&a, file_a, err, sizeof err) ||
      tr_checkpoint_open(&b, file_b, err, sizeof err)) {
    printf("  %s\n", err);
    most = INFINITY;
    goto out;
  }
  if (tr_checkpoint_count(a) != tr_checkpoint_count(b)) most = INFINITY;
  for (size_t k = 0; k < tr_checkpoint_count(b) && isfinite(most); k++) {
    const tr_checkpoint_tensor *tb = tr_checkpoint_tensor_at(b, k);
    const tr_checkpoint_tensor *ta = tr_checkpoint_find(a, tb->name);
    states += optimizer_state(tb->name);
    if (ta == NULL || ta->nbytes != tb->nbytes) {
      printf("  tensor '%s': missing or of another size in %s\n", tb->name, file_a);
      most = INFINITY;
      break;
    }
    const double rel = relative_difference(ta, tb);
    if (!(rel < most)) {
      most = isnan(rel) ? INFINITY : rel;
      snprintf(worst, n, "%s", tb->name);
    }
  }
  if (states == 0) { /* a comparison of optimizer state without any would prove nothing */
    printf("  %s holds no optimizer state\n", file_b);
    most = INFINITY;
  }
out:
  tr_checkpoint_close(a);
  tr_checkpoint_close(b);
  return most;
}

static void assert_close(const char *file, const char *reference, bool with_state,
                         double allowed, const char *what) {
  char worst[128];
  const double d = with_state ? state_difference(path(file), path(reference), worst, sizeof worst)
                              : params_difference(path(file), path(reference), worst, sizeof worst);
  if (!(d <= allowed))
    fail_msg("%s: %s differs from %s by %.3g (tensor '%s'), allowed %.0e", what, file,
             reference, d, worst, allowed);
}

static const layout_case layouts[] = {DP("host:2"), DP("host:3"), DP("host:4"), HYBRID("host:4")};
enum { NLAYOUTS = sizeof layouts / sizeof *layouts };

static void describe(char *what, size_t n, const tr_train_options *o, const layout_case *c) {
  snprintf(what, n, "%s zero %s on %s", tr_strategy_name(c->strategy), model_name(o), c->devices);
}

/* ---- equivalence ---------------------------------------------------------------------------- */

/* Against single within the tolerance; against the same layout unsharded exactly, state and
 * all: each replica sums its shard in member order as the all-reduce sums every chunk, and
 * the update is element by element. */
static void trains_like_single_and_like_dp(const tr_model_spec *spec) {
  tr_train_result r;
  const tr_train_options base = options(spec, STEPS);
  run_to(base, "single.safetensors", &r);
  tr_train_options shorter = base;
  shorter.steps--; /* the comparison can see a step */
  run_to(shorter, "shorter.safetensors", &r);
  char worst[128];
  const double step = params_difference(path("shorter.safetensors"), path("single.safetensors"),
                                        worst, sizeof worst);
  assert_true(step > 10 * tolerance && isfinite(step));
  for (int k = 0; k < NLAYOUTS; k++) {
    char what[128];
    describe(what, sizeof what, &base, &layouts[k]);
    run_to(zero(base, &layouts[k]), "zero.safetensors", &r);
    assert_close("zero.safetensors", "single.safetensors", false, tolerance, what);
    assert_close("zero.safetensors", "single.safetensors", true, 1e-4, what);
    run_to(with_layout(base, &layouts[k]), "unsharded.safetensors", &r);
    assert_close("zero.safetensors", "unsharded.safetensors", true, 0, what);
    if (!(r.consistency == 0)) fail_msg("%s: replicas differ by %g", what, r.consistency);
  }
}

static void zero_trains_like_single_with_momentum(void **state) {
  (void)state;
  trains_like_single_and_like_dp(&mlp4);
}

static void zero_trains_like_single_with_adamw(void **state) {
  (void)state;
  trains_like_single_and_like_dp(&gpt1);
}

/* The mlp workload's buckets (a MiB each, a layer per bucket) fall whole in one shard or
 * the other, where mlp4's one bucket is cut by the shards. */
static void zero_trains_the_mlp_workload_like_single(void **state) {
  (void)state;
  tr_train_options o = tr_train_defaults();
  o.model = "mlp";
  o.devices = "host:1";
  o.steps = 2;
  o.job.global_batch = 8;
  tr_train_result r;
  run_to(o, "single.safetensors", &r);
  static const layout_case dp2 = DP("host:2");
  run_to(zero(o, &dp2), "zero.safetensors", &r);
  assert_close("zero.safetensors", "single.safetensors", true, tolerance, "dp zero mlp on host:2");
}

static void zero_runs_are_bitwise_identical(void **state) {
  (void)state;
  for (int k = 0; k < NLAYOUTS; k++) {
    tr_train_options o = zero(options(&gpt1, 3), &layouts[k]);
    tr_train_result a, b;
    run_to(o, "first.safetensors", &a);
    run_to(o, "second.safetensors", &b);
    char what[128];
    describe(what, sizeof what, &o, &layouts[k]);
    if (!same_file(path("first.safetensors"), path("second.safetensors")))
      fail_msg("%s: two runs differ", what);
    assert_memory_equal(&a.final_loss, &b.final_loss, sizeof a.final_loss);
  }
}

/* ---- clipping ------------------------------------------------------------------------------- */

/* A replica's stage holds the sum of its shard alone: a clip by its own part's norm would
 * scale each shard differently and move off single. */
static void zero_clips_by_the_norm_of_every_shard_and_stage(void **state) {
  (void)state;
  for (int model = 0; model < 2; model++) {
    tr_train_options base = options(model ? &gpt1 : &mlp4, STEPS);
    base.job.optim.lr = model ? 1e-2f : 0.1f;
    tr_train_result r;
    run_to(base, "unclipped.safetensors", &r);
    base.job.optim.clip = 0.01f;
    run_to(base, "single.safetensors", &r);
    char worst[128];
    const double clipped = params_difference(path("unclipped.safetensors"),
                                             path("single.safetensors"), worst, sizeof worst);
    if (!(clipped > 100 * tolerance && isfinite(clipped)))
      fail_msg("a clip of 0.01 moved the parameters by %.3g only: it does not bind", clipped);
    for (int k = 0; k < NLAYOUTS; k++) {
      char what[128];
      describe(what, sizeof what, &base, &layouts[k]);
      run_to(zero(base, &layouts[k]), "zero.safetensors", &r);
      assert_close("zero.safetensors", "single.safetensors", false, tolerance, what);
    }
  }
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

/* A run of STEPS steps, against which every run resumed at step 2 is compared. */
static void resume_case(const tr_model_spec *spec) {
  static const layout_case dp2 = DP("host:2"), hybrid = HYBRID("host:4");
  const tr_train_options single = options(spec, STEPS);
  tr_train_result r;
  run_to(single, "reference.safetensors", &r);

  /* zero's checkpoint holds the whole state: dp's, exactly (every step, periodic parts) */
  tr_train_options half = single;
  half.steps = 2;
  tr_train_options z = zero(half, &dp2);
  z.job.checkpoint.every = 1;
  run_to(z, "zero2.safetensors", &r);
  run_to(with_layout(half, &dp2), "dp2.safetensors", &r);
  assert_close("zero2.safetensors", "dp2.safetensors", true, 0, "zero's checkpoint against dp's");

  struct {
    const char *from, *what;
    tr_train_options to;
  } cases[] = {
      {"zero2.safetensors", "zero → dp", with_layout(single, &dp2)},
      {"zero2.safetensors", "zero → single", single},
      {"zero2.safetensors", "zero → hybrid zero", zero(single, &hybrid)},
      {"dp2.safetensors", "dp → zero", zero(single, &dp2)},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tr_train_options o = cases[k].to;
    o.job.checkpoint.resume = path(cases[k].from);
    run_to(o, "resumed.safetensors", &r);
    assert_int_equal(r.first_step, 2);
    char what[128];
    snprintf(what, sizeof what, "%s (%s)", cases[k].what, spec->name);
    assert_close("resumed.safetensors", "reference.safetensors", false, tolerance, what);
    assert_close("resumed.safetensors", "reference.safetensors", true, 1e-4, what);
  }
}

static void zero_checkpoints_resume_into_any_layout(void **state) {
  (void)state;
  resume_case(&mlp4);
  resume_case(&gpt1);
}

/* ---- memory --------------------------------------------------------------------------------- */

/* mlp4: four Linear(64,64), 4096 + 64 floats each, every tensor on a 16-float boundary. */
enum { LINEAR64 = (4096 + 64) * 4 };

static int64_t linears_in(int first, int end) {
  int64_t n = 0;
  for (int l = first; l < end; l++) n += l % 2 == 0; /* Linear, ReLU, Linear, ... */
  return n;
}

/* The bytes of shard `index` of `count` of a stage of `bytes`: 64-byte multiples. */
static int64_t shard_bytes(int64_t bytes, int count, int index) {
  const int64_t per = ((bytes + count - 1) / count + 63) / 64 * 64;
  const int64_t from = per * index < bytes ? per * index : bytes;
  return (from + per < bytes ? from + per : bytes) - from;
}

static void assert_memory(const tr_train_result *r, int zeroed) {
  const int P = r->stages;
  for (int i = 0; i < r->ndevices; i++) {
    const int s = i % P, replica = i / P;
    const int64_t bytes = linears_in(r->cuts[s], r->cuts[s + 1]) * LINEAR64;
    const tr_memory_figures *m = &r->memory.devices[i];
    assert_int_equal(m->params, bytes);
    assert_int_equal(m->grads, bytes);
    /* momentum: one copy of the parameters, or of the replica's shard of them */
    assert_int_equal(m->optimizer_state, zeroed ? shard_bytes(bytes, r->replicas, replica) : bytes);
  }
  for (int replica = 0; replica < r->replicas; replica++) {
    tr_memory_figures sum = {0};
    for (int s = 0; s < P; s++) {
      const tr_memory_figures *m = &r->memory.devices[replica * P + s];
      sum.params += m->params, sum.grads += m->grads, sum.optimizer_state += m->optimizer_state;
    }
    assert_memory_equal(&r->memory.replicas[replica], &sum, sizeof sum);
  }
}

static void zero_holds_a_shard_of_the_optimizer_state(void **state) {
  (void)state;
  tr_train_result r;
  const tr_train_options base = options(&mlp4, 1);
  run_to(base, "single.safetensors", &r);
  assert_int_equal(r.memory.devices[0].optimizer_state, 4 * LINEAR64);
  assert_memory(&r, 0);
  static const layout_case dp2 = DP("host:2");
  run_to(with_layout(base, &dp2), "dp.safetensors", &r);
  assert_memory(&r, 0);
  const int64_t dp_state = r.memory.replicas[0].optimizer_state;
  for (int k = 0; k < NLAYOUTS; k++) {
    run_to(zero(base, &layouts[k]), "zero.safetensors", &r);
    assert_memory(&r, 1);
  }
  run_to(zero(base, &dp2), "zero.safetensors", &r);
  assert_int_equal(r.memory.devices[0].optimizer_state, 2 * LINEAR64);
  assert_int_equal(r.memory.replicas[1].optimizer_state, dp_state / 2);
}

/* ---- where it does not apply -------------------------------------------------------------- */

static void expect_einval(tr_train_options o, const char *needle) {
  tr_train_result r;
  char err[1024] = "";
  const int rc = tr_train_run(&o, &r, err, sizeof err);
  if (rc != TR_EINVAL || !strstr(err, "zero") || !strstr(err, needle))
    fail_msg("%s with zero %d: status %d, '%s' (expected TR_EINVAL naming zero and '%s')",
             tr_strategy_name(o.strategy), o.job.zero, rc, err, needle);
}

static void zero_is_refused_where_it_does_not_apply(void **state) {
  (void)state;
  tr_train_options o = options(&mlp4, 2);
  o.job.zero = 1;
  expect_einval(o, "has 1"); /* single */
  o.strategy = TR_STRATEGY_PIPELINE;
  o.devices = "host:2";
  expect_einval(o, "has 1");
  o.strategy = TR_STRATEGY_ASYNC;
  expect_einval(o, "server");
  o.strategy = TR_STRATEGY_DP;
  o.job.zero = 2;
  expect_einval(o, "give 0");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zero_trains_like_single_with_momentum),
      cmocka_unit_test(zero_trains_like_single_with_adamw),
      cmocka_unit_test(zero_trains_the_mlp_workload_like_single),
      cmocka_unit_test(zero_runs_are_bitwise_identical),
      cmocka_unit_test(zero_clips_by_the_norm_of_every_shard_and_stage),
      cmocka_unit_test(zero_checkpoints_resume_into_any_layout),
      cmocka_unit_test(zero_holds_a_shard_of_the_optimizer_state),
      cmocka_unit_test(zero_is_refused_where_it_does_not_apply),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
