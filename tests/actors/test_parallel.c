/* test_parallel.c — the parallel strategies train the model single does: dp, mp, pipeline
 * (gpipe, 1f1b, interleaved, zb1, with and without activation recomputation) and hybrid end
 * with the parameters of a single-device run of the same global batch (relative difference
 * 1e-5 per tensor); the newer schedules and recomputation give 1f1b's parameters bitwise;
 * runs repeat bitwise when deterministic, report their figures, clip by the global norm,
 * hold micro-batches within the schedule's bound, and name bad layouts. Everything goes
 * through tr_train_run; parameters are compared through the checkpoint each run writes at
 * its end. */
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

#define SCRATCH_NAME "parallel"
#include "scratch.h"

/* ---- the models: specs.h's, and a chain of four ---------------------------------------- */

#include "compare.h"
#include "specs.h"

/* Four layers of width 8, one per stage on host:4. */
static const tr_layer_spec chain4_layers[] = {
    LINEAR(8, 8, 1), RELU(8), LINEAR(8, 8, 1), LINEAR(8, 8, 1),
};
static const tr_model_spec chain4 = {
    .name = "chain4",
    .ctx = 1,
    .loss = TR_LOSS_MSE,
    .nlayers = 4,
    .layers = chain4_layers,
    .batch = 8,
    .optim = {.kind = TR_OPTIM_SGD, .lr = 0.05f},
};

/* simplenet (3 layers) with a batch 3 and 8 divide; the specs above; the mlp workload. */
static tr_train_options options(const char *model, const tr_model_spec *spec, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = model;
  o.spec = spec;
  o.devices = "host:1";
  o.steps = steps;
  o.job.global_batch = spec ? spec->batch : 48;
  o.watchdog_ms = 20000; /* a stuck graph fails with a report of each actor, not a timeout */
  return o;
}

static tr_train_options layout(tr_train_options o, tr_strategy strategy, const char *devices) {
  o.strategy = strategy;
  o.devices = devices;
  return o;
}

static tr_train_options pipeline(tr_train_options o, const char *devices, int schedule, int m) {
  o = layout(o, TR_STRATEGY_PIPELINE, devices);
  o.job.layout.schedule = schedule;
  o.job.layout.microbatches = m;
  return o;
}

static void run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  if (tr_train_run(&o, r, err, sizeof err))
    fail_msg("%s %s on %s: %s", tr_strategy_name(o.strategy), model_name(&o),
             o.devices, err);
  assert_int_equal(r->steps, o.steps);
  assert_int_equal(r->samples, o.steps * o.job.global_batch);
}

/* ---- comparing checkpoints ------------------------------------------------------------- */

static void assert_same_params(const char *file, const char *reference, double tolerance,
                               const char *what) {
  char worst[128] = "";
  const double d = params_difference(file, reference, worst, sizeof worst);
  if (!(d <= tolerance))
    fail_msg("%s: parameters differ from the reference by %.3g (tensor '%s'), allowed %.0e",
             what, d, worst, tolerance);
}

static void assert_same_file(const char *a, const char *b, const char *what) {
  if (!same_file(a, b)) fail_msg("%s: %s and %s differ", what, a, b);
}

/* ---- equivalence with one device -------------------------------------------------------- */

enum { TOLERANCE_STEPS = 4 };
static const double tolerance = 1e-5;

static const layout_case all_layouts[] = {
    DP("host:2"),
    DP("host:4"),
    MP("host:2"),
    PIPELINE("host:2", TR_SCHEDULE_GPIPE, 1),
    PIPELINE("host:2", TR_SCHEDULE_GPIPE, 3),
    PIPELINE("host:2", TR_SCHEDULE_GPIPE, 8),
    PIPELINE("host:2", TR_SCHEDULE_1F1B, 1),
    PIPELINE("host:2", TR_SCHEDULE_1F1B, 3),
    PIPELINE("host:2", TR_SCHEDULE_1F1B, 8),
    PIPELINE("host:2", TR_SCHEDULE_ZB1, 1),
    PIPELINE("host:2", TR_SCHEDULE_ZB1, 3),
    PIPELINE("host:2", TR_SCHEDULE_ZB1, 8),
    RECOMPUTING("host:2", TR_SCHEDULE_GPIPE, 3),
    RECOMPUTING("host:2", TR_SCHEDULE_ZB1, 8),
    SINGLE_RECOMPUTE,
    HYBRID("host:4"),
    HYBRID_ZB1("host:4"),
};

/* Interleaving cuts stages × chunks pieces: the models of four layers or more, on 2 devices
 * (m a multiple of 2, and not), 3 devices and 3 chunks, and recomputing. */
static const layout_case interleaved_layouts[] = {
    INTERLEAVED("host:2", 2, 4),
    INTERLEAVED("host:2", 2, 3),
    INTERLEAVED("host:2", 2, 8),
    {TR_STRATEGY_PIPELINE, "host:2", TR_SCHEDULE_INTERLEAVED, 8, 2, 1},
};
static const layout_case interleaved_deep[] = {
    INTERLEAVED("host:3", 2, 6),
    INTERLEAVED("host:2", 3, 4),
};

/* The comparison can see a step: one step less than `base` is well beyond the tolerance
 * (so a layout that skipped an update, or trained nothing, would fail). */
static void assert_a_step_shows(tr_train_options base) {
  tr_train_result r;
  run_to(base, "whole.safetensors", &r);
  base.steps--;
  run_to(base, "shorter.safetensors", &r);
  char worst[128];
  const double step = params_difference(path("shorter.safetensors"), path("whole.safetensors"),
                                        worst, sizeof worst);
  if (!(step > 10 * tolerance && isfinite(step)))
    fail_msg("%s: the last step moved the parameters by %.3g only",
             model_name(&base), step);
}

static void each_layout_matches_single(tr_train_options base, const layout_case *cases,
                                       size_t ncases) {
  tr_train_result r;
  run_to(base, "single.safetensors", &r);
  for (size_t k = 0; k < ncases; k++) {
    const layout_case *c = &cases[k];
    tr_train_options o = with_layout(base, c);
    run_to(o, "parallel.safetensors", &r);
    char what[160], sched[48];
    snprintf(what, sizeof what, "%s %s on %s (%s, m %d)", tr_strategy_name(c->strategy),
             model_name(&base), c->devices, layout_schedule(c, sched, sizeof sched),
             c->microbatches);
    assert_same_params(path("parallel.safetensors"), path("single.safetensors"), tolerance, what);
  }
}

static void simplenet_trains_alike_on_every_layout(void **state) {
  (void)state;
  assert_a_step_shows(options("simplenet", NULL, TOLERANCE_STEPS));
  each_layout_matches_single(options("simplenet", NULL, TOLERANCE_STEPS), all_layouts,
                             sizeof all_layouts / sizeof *all_layouts);
  /* mp on three devices: a layer each */
  static const layout_case mp3 = MP("host:3");
  each_layout_matches_single(options("simplenet", NULL, TOLERANCE_STEPS), &mp3, 1);
}

static void mlp_trains_alike_on_every_layout(void **state) {
  (void)state;
  assert_a_step_shows(options(NULL, &mlp4, TOLERANCE_STEPS));
  each_layout_matches_single(options(NULL, &mlp4, TOLERANCE_STEPS), all_layouts,
                             sizeof all_layouts / sizeof *all_layouts);
  each_layout_matches_single(options(NULL, &mlp4, TOLERANCE_STEPS), interleaved_layouts,
                             sizeof interleaved_layouts / sizeof *interleaved_layouts);
  each_layout_matches_single(options(NULL, &mlp4, TOLERANCE_STEPS), interleaved_deep,
                             sizeof interleaved_deep / sizeof *interleaved_deep);
}

/* Dropout and a residual span: the masks depend on each sample's place in the data set, so
 * every layout draws single's, and the residual is never split. */
static const tr_layer_spec res_inner[] = {LINEAR(32, 32, 1), RELU(32), DROPOUT(32, 0.25f),
                                          LINEAR(32, 32, 1)};
static const tr_layer_spec dropnet_layers[] = {
    LINEAR(16, 32, 1), DROPOUT(32, 0.1f), RESIDUAL(32, 4, res_inner), RELU(32), LINEAR(32, 8, 1),
};
static const tr_model_spec dropnet = {
    .name = "dropnet",
    .ctx = 1,
    .loss = TR_LOSS_MSE,
    .nlayers = 5,
    .layers = dropnet_layers,
    .batch = 48,
    .optim = {.kind = TR_OPTIM_MOMENTUM, .lr = 0.01f, .momentum = 0.9f},
};

static void dropout_and_residual_train_alike_on_every_layout(void **state) {
  (void)state;
  assert_a_step_shows(options(NULL, &dropnet, TOLERANCE_STEPS));
  each_layout_matches_single(options(NULL, &dropnet, TOLERANCE_STEPS), all_layouts,
                             sizeof all_layouts / sizeof *all_layouts);
  each_layout_matches_single(options(NULL, &dropnet, TOLERANCE_STEPS), interleaved_layouts,
                             sizeof interleaved_layouts / sizeof *interleaved_layouts);
}

static void gpt_trains_alike_on_every_layout(void **state) {
  (void)state;
  assert_a_step_shows(options(NULL, &gpt1, TOLERANCE_STEPS));
  each_layout_matches_single(options(NULL, &gpt1, TOLERANCE_STEPS), all_layouts,
                             sizeof all_layouts / sizeof *all_layouts);
  each_layout_matches_single(options(NULL, &gpt1, TOLERANCE_STEPS), interleaved_layouts,
                             sizeof interleaved_layouts / sizeof *interleaved_layouts);
}

/* The mlp workload itself (8 layers of 1024 x 1024: gradient buckets of real size), two
 * steps of a small batch. Its 8.4 M parameters are what cost time (initialising, updating,
 * checkpointing), in sanitizer builds above all, so it runs one layout. */
static void mlp_workload_trains_alike_data_parallel(void **state) {
  (void)state;
  static const layout_case dp2 = DP("host:2");
  tr_train_options o = options("mlp", NULL, 2);
  o.job.global_batch = 8;
  each_layout_matches_single(o, &dp2, 1);
}

/* Every schedule adds each gradient up in micro-batch order and a cut changes no layer's
 * arithmetic, so with the same micro-batches zb1, interleaved and recomputation give 1f1b's
 * parameters and losses bit for bit. */
static void schedules_and_recomputation_agree_with_1f1b_bitwise(void **state) {
  (void)state;
  static const layout_case same[] = {
      PIPELINE("host:2", TR_SCHEDULE_ZB1, 4),
      INTERLEAVED("host:2", 2, 4),
      RECOMPUTING("host:2", TR_SCHEDULE_1F1B, 4),
      RECOMPUTING("host:2", TR_SCHEDULE_ZB1, 4),
      {TR_STRATEGY_PIPELINE, "host:2", TR_SCHEDULE_INTERLEAVED, 4, 2, 1},
  };
  static const layout_case onef1b = PIPELINE("host:2", TR_SCHEDULE_1F1B, 4);
  const tr_model_spec *specs[] = {&mlp4, &gpt1, &dropnet};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    tr_train_result base, r;
    run_to(with_layout(options(NULL, specs[k], TOLERANCE_STEPS), &onef1b), "1f1b.safetensors",
           &base);
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
      run_to(with_layout(options(NULL, specs[k], TOLERANCE_STEPS), &same[i]), "other.safetensors",
             &r);
      char what[128], sched[48], worst[128];
      snprintf(what, sizeof what, "%s under %s", specs[k]->name,
               layout_schedule(&same[i], sched, sizeof sched));
      const double d = params_difference(path("other.safetensors"), path("1f1b.safetensors"),
                                         worst, sizeof worst);
      if (d != 0)
        fail_msg("%s: parameters differ from 1f1b's by %.3g (tensor '%s')", what, d, worst);
      if (memcmp(&r.final_loss, &base.final_loss, sizeof r.final_loss))
        fail_msg("%s: final loss %.9g, 1f1b's %.9g", what, r.final_loss, base.final_loss);
    }
  }
}

/* ---- repeatability ------------------------------------------------------------------------ */

static void deterministic_parallel_runs_are_bitwise_identical(void **state) {
  (void)state;
  static const layout_case cases[] = {
      DP("host:4"),
      MP("host:2"),
      PIPELINE("host:2", TR_SCHEDULE_1F1B, 3),
      PIPELINE("host:4", TR_SCHEDULE_GPIPE, 4),
      HYBRID("host:4"),
      PIPELINE("host:4", TR_SCHEDULE_ZB1, 4),
      INTERLEAVED("host:2", 2, 3),
      RECOMPUTING("host:2", TR_SCHEDULE_1F1B, 3),
      HYBRID_ZB1("host:4"),
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tr_train_options o = with_layout(options(NULL, &mlp4, 5), &cases[k]);
    o.deterministic = 1;
    tr_train_result a, b;
    run_to(o, "first.safetensors", &a);
    run_to(o, "second.safetensors", &b);
    char what[96];
    snprintf(what, sizeof what, "%s on %s", tr_strategy_name(o.strategy), o.devices);
    assert_same_file(path("first.safetensors"), path("second.safetensors"), what);
    assert_memory_equal(&a.final_loss, &b.final_loss, sizeof a.final_loss);
  }
}

/* ---- the figures of a run ---------------------------------------------------------------- */

static void assert_utilization_per_device(const tr_train_result *r, int devices) {
  assert_int_equal(r->ndevices, devices);
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) {
    const double u = r->utilization[i];
    if (i < devices ? !(u > 0 && u <= 1) : !isnan(u))
      fail_msg("%s on %d devices: utilization[%d] = %g", r->strategy, devices, i, u);
  }
}

static void runs_report_their_layout_and_figures(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = layout(options(NULL, &mlp4, 4), TR_STRATEGY_DP, "host:4");
  run_to(o, "dp.safetensors", &r);
  assert_string_equal(r.strategy, "dp");
  assert_int_equal(r.replicas, 4);
  assert_int_equal(r.stages, 1);
  assert_utilization_per_device(&r, 4);
  if (!(r.consistency >= 0 && r.consistency <= 1e-6))
    fail_msg("dp on host:4: consistency %g, expected a number <= 1e-6", r.consistency);
  assert_true(isnan(r.bubble_fraction));

  o = pipeline(options(NULL, &mlp4, 4), "host:2", TR_SCHEDULE_GPIPE, 3);
  run_to(o, "pipeline.safetensors", &r);
  assert_string_equal(r.strategy, "pipeline");
  assert_string_equal(r.schedule, "gpipe");
  assert_int_equal(r.replicas, 1);
  assert_int_equal(r.stages, 2);
  assert_int_equal(r.microbatches, 3);
  assert_utilization_per_device(&r, 2);
  if (!(r.bubble_fraction >= 0 && r.bubble_fraction < 1))
    fail_msg("pipeline: bubble fraction %g, expected a number in [0, 1)", r.bubble_fraction);
  /* the schedule's own: (p-1)/(m+p-1) */
  assert_true(fabs(r.bubble_theory - 1.0 / 4.0) < 1e-9);

  for (int i = 0; i < 2; i++) assert_true(r.peak_activation_bytes[i] > 0);
  assert_int_equal(r.chunks, 1);
  assert_false(r.recompute);

  /* interleaved: 2 × 2 pieces, (p-1)/(v m + p-1) = 1/9 with m = 4 */
  o = with_layout(options(NULL, &mlp4, 4), &(layout_case)INTERLEAVED("host:2", 2, 4));
  run_to(o, "interleaved.safetensors", &r);
  assert_string_equal(r.schedule, "interleaved");
  assert_int_equal(r.chunks, 2);
  assert_int_equal(r.cuts[0], 0);
  assert_int_equal(r.cuts[4], mlp4.nlayers);
  for (int k = 0; k < 4; k++) assert_true(r.cuts[k] < r.cuts[k + 1]);
  assert_utilization_per_device(&r, 2);
  assert_true(r.bubble_fraction >= 0 && r.bubble_fraction < 1);
  assert_true(fabs(r.bubble_theory - 1.0 / 9.0) < 1e-9);

  /* zb1: (p-1)/(3m + p-1) = 1/13 with m = 4 */
  o = pipeline(options(NULL, &mlp4, 4), "host:2", TR_SCHEDULE_ZB1, 4);
  run_to(o, "zb1.safetensors", &r);
  assert_string_equal(r.schedule, "zb1");
  assert_true(fabs(r.bubble_theory - 1.0 / 13.0) < 1e-9);

  /* recomputing keeps less: gpipe's 8 micro-batches each keep their input and output only,
   * and one at a time all the rest again (device 0: 41,472 bytes against 61,440). The cut is
   * given: timed under ThreadSanitizer, it once left device 1 the last layer alone, where input
   * and output are most of what a micro-batch keeps anyway (26,624 bytes against 37,376) */
  static const int cut_after_3[] = {3};
  tr_train_result kept;
  o = pipeline(options(NULL, &mlp4, 4), "host:2", TR_SCHEDULE_GPIPE, 8);
  o.job.layout.cuts = cut_after_3;
  o.job.layout.ncuts = 1;
  run_to(o, "kept.safetensors", &kept);
  o.job.memory.recompute = 1;
  run_to(o, "recomputed.safetensors", &r);
  assert_true(r.recompute);
  for (int i = 0; i < 2; i++)
    if (!(r.peak_activation_bytes[i] > 0 &&
          r.peak_activation_bytes[i] * 4 < kept.peak_activation_bytes[i] * 3))
      fail_msg("device %d: %lld activation bytes at the peak recomputing, %lld keeping: "
               "expected under three quarters", i, (long long)r.peak_activation_bytes[i],
               (long long)kept.peak_activation_bytes[i]);

  o = layout(options(NULL, &mlp4, 4), TR_STRATEGY_HYBRID, "host:4");
  run_to(o, "hybrid.safetensors", &r);
  assert_string_equal(r.strategy, "hybrid");
  assert_string_equal(r.schedule, "1f1b");
  assert_int_equal(r.replicas, 2);
  assert_int_equal(r.stages, 2);
  assert_int_equal(r.microbatches, 4); /* 2 x stages by default */
  assert_utilization_per_device(&r, 4);
  assert_true(r.bubble_fraction >= 0 && r.bubble_fraction < 1);
}

/* A timed run too short to get past its 3 warm-up steps measures the whole run instead of
 * an empty window (it once reported the last step's few microseconds as its window, with
 * every step in it and no device busy). */
static void a_timed_run_that_ends_warming_up_reports_the_whole_run(void **state) {
  (void)state;
  enum { SLOW_US = 20000 };
  /* device 1, the last stage, sleeps SLOW_US after each loss pass (gpu/fault.h) */
  char devices[64];
  snprintf(devices, sizeof devices, "fault(host:2;dev=1,op=mse,us=%d)", SLOW_US);
  tr_train_options o = pipeline(options(NULL, &mlp4, 0), devices, TR_SCHEDULE_1F1B, 3);
  o.seconds = 0.05;
  tr_train_result r;
  char err[1024];
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  assert_true(r.steps >= 1 && r.steps <= 3);
  assert_int_equal(r.window_steps, r.steps);
  /* each step sleeps 6 times on device 1: steps/s is bounded by that */
  if (!(r.steps_per_s > 0 && r.steps_per_s <= 1e6 / (6.0 * SLOW_US)))
    fail_msg("%lld steps in %.4g s: %.4g steps/s", (long long)r.steps, r.seconds, r.steps_per_s);
  for (int i = 0; i < 2; i++) assert_true(r.utilization[i] > 0 && r.utilization[i] <= 1);
  assert_true(r.bubble_fraction >= 0 && r.bubble_fraction < 1);
}

/* ---- clipping by the global norm --------------------------------------------------------- */

/* With a clip that binds, every stage and replica must scale by the norm of the whole
 * gradient: a norm of its own part would clip each part less and move off the single run. */
static void clipping_uses_the_norm_across_stages_and_replicas(void **state) {
  (void)state;
  for (int model = 0; model < 2; model++) {
    tr_train_options base = model ? options(NULL, &mlp4, TOLERANCE_STEPS)
                                  : options("simplenet", NULL, TOLERANCE_STEPS);
    base.job.optim.lr = 0.1f; /* clipped steps are short: a larger rate keeps them visible */
    tr_train_result r;
    run_to(base, "unclipped.safetensors", &r);
    base.job.optim.clip = 0.01f;
    assert_a_step_shows(base);
    static const layout_case cases[] = {
        DP("host:2"),
        PIPELINE("host:2", TR_SCHEDULE_1F1B, 3),
        PIPELINE("host:2", TR_SCHEDULE_ZB1, 3),
        HYBRID("host:4"),
    };
    each_layout_matches_single(base, cases, sizeof cases / sizeof *cases);
    /* a stage's share of the norm sums its chunks' */
    static const layout_case il = INTERLEAVED("host:2", 2, 3);
    if (model) each_layout_matches_single(base, &il, 1);
    char worst[128];
    const double clipped = params_difference(path("unclipped.safetensors"),
                                             path("single.safetensors"), worst, sizeof worst);
    if (!(clipped > 100 * tolerance && isfinite(clipped)))
      fail_msg("a clip of 0.01 moved the parameters by %.3g only: it does not bind", clipped);
  }
}

/* ---- micro-batches held ------------------------------------------------------------------ */

/* A slow last stage lets the stages before it run ahead as far as the schedule allows, and
 * no further: 1f1b's stage s holds at most min(p - s, m) micro-batches, gpipe's m, zb1's
 * min(p, m) (1F1B's peak), interleaved's its warm-up plus one (chunk, micro-batch) pairs. */
static void stages_hold_no_more_microbatches_than_their_schedule(void **state) {
  (void)state;
  enum { M = 8 };
  static const layout_case cases[] = {
      PIPELINE("host:4", TR_SCHEDULE_GPIPE, M),
      PIPELINE("host:4", TR_SCHEDULE_1F1B, M),
      PIPELINE("host:4", TR_SCHEDULE_ZB1, M),
      INTERLEAVED("host:2", 2, M),
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const layout_case *c = &cases[k];
    tr_train_options o = with_layout(options(NULL, &chain4, 3), c);
    const int P = c->schedule == TR_SCHEDULE_INTERLEAVED ? 2 : 4, V = c->chunks ? c->chunks : 1;
    char devices[64]; /* the last stage sleeps 2 ms after each loss pass (gpu/fault.h) */
    snprintf(devices, sizeof devices, "fault(%s;dev=%d,op=mse,us=2000)", c->devices, P - 1);
    o.devices = devices;
    tr_train_result r;
    run_to(o, "slow.safetensors", &r);
    for (int s = 0; s < P; s++) {
      int bound = M;
      if (c->schedule == TR_SCHEDULE_1F1B) bound = P - s < M ? P - s : M;
      if (c->schedule == TR_SCHEDULE_ZB1) bound = P < M ? P : M;
      if (c->schedule == TR_SCHEDULE_INTERLEAVED) bound = (P - s - 1) * 2 + (V - 1) * P + 1;
      if (r.peak_microbatches[s] < 1 || r.peak_microbatches[s] > bound)
        fail_msg("%s: stage %d held %d micro-batches at once, allowed 1 to %d",
                 tr_schedule_kind_name((tr_schedule_kind)c->schedule), s,
                 r.peak_microbatches[s], bound);
    }
  }
}

/* ---- bad layouts ------------------------------------------------------------------------- */

static void expect_einval(const tr_train_options *o, const char *needle, const char *or_needle) {
  tr_train_result r;
  char err[1024] = "";
  int rc = tr_train_run(o, &r, err, sizeof err);
  if (rc != TR_EINVAL)
    fail_msg("%s on %s: status %d, expected TR_EINVAL ('%s')", tr_strategy_name(o->strategy),
             o->devices, rc, err);
  if (!strstr(err, needle) && !(or_needle && strstr(err, or_needle)))
    fail_msg("error '%s' names neither '%s' nor '%s'", err, needle, or_needle ? or_needle : "-");
}

static void bad_layouts_are_named(void **state) {
  (void)state;
  /* 50 samples do not split into 4 replicas */
  tr_train_options o = layout(options("simplenet", NULL, 2), TR_STRATEGY_DP, "host:4");
  o.job.global_batch = 50;
  expect_einval(&o, "global_batch", NULL);
  /* nor 48 into 4 replicas x 5 micro-batches */
  o.job.global_batch = 48;
  o.job.layout.microbatches = 5;
  expect_einval(&o, "global_batch", "layout.microbatches");
  /* nor 50 into 4 micro-batches of a pipeline */
  o = pipeline(options("simplenet", NULL, 2), "host:2", TR_SCHEDULE_1F1B, 4);
  o.job.global_batch = 50;
  expect_einval(&o, "global_batch", "layout.microbatches");
  /* simplenet has 3 layers: not 4 stages */
  o = pipeline(options("simplenet", NULL, 2), "host:4", TR_SCHEDULE_1F1B, 4);
  expect_einval(&o, "layout.stages", "layers");
  o = layout(options("simplenet", NULL, 2), TR_STRATEGY_MP, "host:4");
  expect_einval(&o, "layout.stages", "layers");
  /* 3 devices are no whole number of 2-stage replicas */
  o = layout(options(NULL, &mlp4, 2), TR_STRATEGY_HYBRID, "host:3");
  expect_einval(&o, "devices", "layout.stages");
  /* chunks belong to the interleaved schedule, which takes 2 or more, on 2 or more stages
   * of one replica, with a piece of the cut for each */
  o = pipeline(options(NULL, &mlp4, 2), "host:2", TR_SCHEDULE_1F1B, 4);
  o.job.layout.chunks = 2;
  expect_einval(&o, "layout.chunks 2: only the interleaved schedule", NULL);
  o = pipeline(options(NULL, &mlp4, 2), "host:2", TR_SCHEDULE_INTERLEAVED, 4);
  o.job.layout.chunks = 1;
  expect_einval(&o, "layout.chunks 1: the interleaved schedule puts 2 or more", NULL);
  o = pipeline(options("simplenet", NULL, 2), "host:2", TR_SCHEDULE_INTERLEAVED, 4);
  expect_einval(&o, "layout.chunks: 2 stages × 2 chunks are 4 pieces, but model 'simplenet' "
                    "has 3 layers", NULL);
  o = pipeline(options(NULL, &mlp4, 2), "host:1", TR_SCHEDULE_INTERLEAVED, 4);
  expect_einval(&o, "layout.schedule: interleaved needs 2 or more stages", NULL);
  o = layout(options(NULL, &mlp4, 2), TR_STRATEGY_HYBRID, "host:4");
  o.job.layout.schedule = TR_SCHEDULE_INTERLEAVED;
  expect_einval(&o, "layout.schedule: interleaved runs one replica", NULL);
  o = pipeline(options(NULL, &mlp4, 2), "host:2", TR_SCHEDULE_INTERLEAVED, 4);
  o.job.layout.cuts = (const int[]){2};
  o.job.layout.ncuts = 1;
  expect_einval(&o, "layout.cuts: 1 boundaries given, 2 stages × 2 chunks need 3", NULL);
}

/* ---- stress: a long pipeline run repeats itself --------------------------------------------- */

static void a_long_pipeline_run_repeats_bitwise(void **state) {
  (void)state;
  tr_train_options o = pipeline(options(NULL, &chain4, (int64_t)test_scaled(1000)), "host:4",
                                TR_SCHEDULE_1F1B, 4);
  o.deterministic = 1;
  tr_train_result a, b;
  run_to(o, "long1.safetensors", &a);
  run_to(o, "long2.safetensors", &b);
  assert_same_file(path("long1.safetensors"), path("long2.safetensors"), "1f1b on host:4");
  assert_false(isnan(a.final_loss));
  assert_memory_equal(&a.final_loss, &b.final_loss, sizeof a.final_loss);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(simplenet_trains_alike_on_every_layout),
      cmocka_unit_test(mlp_trains_alike_on_every_layout),
      cmocka_unit_test(gpt_trains_alike_on_every_layout),
      cmocka_unit_test(dropout_and_residual_train_alike_on_every_layout),
      cmocka_unit_test(mlp_workload_trains_alike_data_parallel),
      cmocka_unit_test(schedules_and_recomputation_agree_with_1f1b_bitwise),
      cmocka_unit_test(deterministic_parallel_runs_are_bitwise_identical),
      cmocka_unit_test(runs_report_their_layout_and_figures),
      cmocka_unit_test(a_timed_run_that_ends_warming_up_reports_the_whole_run),
      cmocka_unit_test(clipping_uses_the_norm_across_stages_and_replicas),
      cmocka_unit_test(stages_hold_no_more_microbatches_than_their_schedule),
      cmocka_unit_test(bad_layouts_are_named),
      cmocka_unit_test(a_long_pipeline_run_repeats_bitwise),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
