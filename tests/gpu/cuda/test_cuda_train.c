/* test_cuda_train.c — training runs on CUDA devices, end to end through tr_train_run: one
 * GPU trains the parameters one host device trains; every parallel layout on logical
 * devices of one GPU (cuda:0,cuda:0,...: the all-reduce and the stage hand-overs go through
 * peer copies), under every schedule (interleaved, zero-bubble) and with recomputation,
 * trains what single on cuda:0 trains; deterministic runs repeat bitwise, and CUDA graphs
 * (on, off, or a capture that fails) change no bit of what they train; the
 * figures of a run are sane; a checkpoint moves between cuda:0 and host:1 both ways.
 * Parameters are compared through the checkpoint each run writes at its end, as
 * tests/actors/test_parallel.c does on host devices.
 *
 * Each test runs all of its cases and prints each measured difference before it fails, so
 * that one run on a GPU says everything it can. Exits 77 (skipped) when there is no GPU. */
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

#define SCRATCH_NAME "cuda-train"
#include "../../actors/scratch.h"

/* One GPU, and two and four logical devices on it. */
#define GPU1 "cuda:0"
#define GPU2 "cuda:0,cuda:0"
#define GPU4 "cuda:0,cuda:0,cuda:0,cuda:0"
#define HOST1 "host:1"

/* ---- the models: specs.h's ------------------------------------------------------------- */

#include "../../actors/compare.h"
#include "../../actors/specs.h"

/* simplenet (SGD, no optimizer state), mlp4 (momentum), gpt1 (AdamW, attention, embedding) */
typedef struct model_case {
  const char *model;
  const tr_model_spec *spec;
} model_case;
static const model_case models[] = {{"simplenet", NULL}, {NULL, &mlp4}, {NULL, &gpt1}};
enum { NMODELS = sizeof models / sizeof *models };

static const char *case_name(model_case m) { return m.spec ? m.spec->name : m.model; }

/* batch 48: 2 and 4 replicas, 3 and 8 micro-batches, 2 replicas x 4 micro-batches divide it */
static tr_train_options options(model_case m, const char *devices, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = m.model;
  o.spec = m.spec;
  o.devices = devices;
  o.steps = steps;
  o.job.global_batch = 48;
  o.watchdog_ms = 20000; /* a stuck graph fails with a report of each actor, not a timeout */
  return o;
}

/* Runs o to its end, writing its checkpoint to file; 0, or the failure printed. */
static int run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  int rc = tr_train_run(&o, r, err, sizeof err);
  if (rc) {
    printf("  %s %s on %s: FAILED: %s\n", tr_strategy_name(o.strategy), model_name(&o),
           o.devices, err);
  } else if (r->steps != o.steps || r->samples != (o.steps - r->first_step) * o.job.global_batch) {
    printf("  %s %s on %s: FAILED: ran to step %lld with %lld samples\n",
           tr_strategy_name(o.strategy), model_name(&o), o.devices, (long long)r->steps,
           (long long)r->samples);
    rc = -1;
  }
  return rc;
}

/* ---- comparing checkpoints --------------------------------------------------------------- */

/* Prints the difference of a from the reference b; false when it exceeds the tolerance. */
static bool same_params(const char *a, const char *b, double tolerance, const char *what) {
  char worst[128];
  const double d = params_difference(path(a), path(b), worst, sizeof worst);
  const bool ok = d <= tolerance;
  printf("  %-52s %9.3g %s (tensor %s, allowed %.0e)\n", what, d, ok ? "ok  " : "FAIL", worst,
         tolerance);
  return ok;
}

static bool bitwise(const char *a, const char *b, const char *what) {
  const bool ok = same_file(path(a), path(b));
  printf("  %-52s %s\n", what, ok ? "bitwise identical" : "FAIL: the checkpoints differ");
  return ok;
}

/* ---- one GPU against one host device ------------------------------------------------------ */

/* cuBLAS and OpenBLAS sum each GEMM's products in different orders, and CUDA's expf, tanhf
 * and rsqrtf round otherwise than glibc's: each op agrees with the host to a few float32
 * ulps (test_cuda_ops checks that). Reordered float32 sums are what separates dp from
 * single on host devices too, and there these models end 2e-9 to 3e-7 apart per tensor
 * after 4 steps; the transcendental functions add about as much again. 1e-4 leaves two
 * orders of magnitude for that, and is still a tenth or less of what the fifth step alone
 * moves the parameters (2e-3 for mlp4, 0.09 simplenet, 0.2 gpt1, checked below): a run that
 * skipped or doubled an update, or lost optimizer state, fails. It rests on GEMMs being
 * exact FP32: tr_train_run never asks for TF32, and test_cuda_devices checks it is off
 * unless asked for (TF32's 10-bit mantissa would put each GEMM ~5e-4 off). */
enum { CROSS_STEPS = 5 };
static const double cross_tolerance = 1e-4;

/* One step more must move the parameters well beyond the tolerance, or the comparison could
 * not see a step. */
static bool a_step_shows(model_case m, const char *devices, double tolerance) {
  tr_train_result r;
  tr_train_options o = options(m, devices, CROSS_STEPS);
  if (run_to(o, "whole.safetensors", &r)) return false;
  o.steps--;
  if (run_to(o, "shorter.safetensors", &r)) return false;
  char worst[128], what[96];
  const double step = params_difference(path("shorter.safetensors"), path("whole.safetensors"),
                                        worst, sizeof worst);
  const bool ok = step > 10 * tolerance && isfinite(step);
  snprintf(what, sizeof what, "%s on %s: step %d moves the parameters by", model_name(&o),
           devices, CROSS_STEPS);
  printf("  %-52s %9.3g %s (tensor %s, needed > %.0e)\n", what, step, ok ? "ok  " : "FAIL",
         worst, 10 * tolerance);
  return ok;
}

static void cuda_trains_the_parameters_the_host_trains(void **state) {
  (void)state;
  int failures = 0;
  for (int k = 0; k < NMODELS; k++) {
    tr_train_result r;
    char what[96];
    failures += !a_step_shows(models[k], HOST1, cross_tolerance);
    if (run_to(options(models[k], HOST1, CROSS_STEPS), "host.safetensors", &r) ||
        run_to(options(models[k], GPU1, CROSS_STEPS), "cuda.safetensors", &r)) {
      failures++;
      continue;
    }
    snprintf(what, sizeof what, "%s: single on " GPU1 " vs " HOST1, case_name(models[k]));
    failures += !same_params("cuda.safetensors", "host.safetensors", cross_tolerance, what);
  }
  if (failures) fail_msg("%d comparison(s) of cuda:0 with host:1 failed (above)", failures);
}

/* ---- every layout on logical devices of one GPU against single on cuda:0 ------------------- */

/* The same arithmetic in another order (replicas' gradients summed by the all-reduce,
 * micro-batches' accumulated): test_parallel.c's tolerance on host devices. */
enum { LAYOUT_STEPS = 4 };
static const double layout_tolerance = 1e-5;

static const layout_case gpu_layouts[] = {
    DP(GPU2),
    DP(GPU4),
    MP(GPU2),
    PIPELINE(GPU2, TR_SCHEDULE_GPIPE, 3),
    PIPELINE(GPU2, TR_SCHEDULE_GPIPE, 8),
    PIPELINE(GPU2, TR_SCHEDULE_1F1B, 3),
    PIPELINE(GPU2, TR_SCHEDULE_1F1B, 8),
    PIPELINE(GPU2, TR_SCHEDULE_ZB1, 3),
    PIPELINE(GPU2, TR_SCHEDULE_ZB1, 8),
    RECOMPUTING(GPU2, TR_SCHEDULE_1F1B, 3),
    RECOMPUTING(GPU2, TR_SCHEDULE_ZB1, 8),
    HYBRID(GPU4),
    HYBRID_ZB1(GPU4),
};

/* Interleaving cuts 2 devices × 2 chunks: the models of four layers or more. */
static const layout_case gpu_interleaved[] = {
    INTERLEAVED(GPU2, 2, 4),
    INTERLEAVED(GPU2, 2, 3),
    {TR_STRATEGY_PIPELINE, GPU2, TR_SCHEDULE_INTERLEAVED, 8, 2, 1},
};

static int layout_matches(const tr_train_options *base, const layout_case *c) {
  tr_train_result r;
  if (run_to(with_layout(*base, c), "parallel.safetensors", &r)) return 1;
  char what[160], sched[48];
  snprintf(what, sizeof what, "%s %s on %d x " GPU1 " (%s, m %d)", tr_strategy_name(c->strategy),
           model_name(base), r.ndevices, layout_schedule(c, sched, sizeof sched), r.microbatches);
  return !same_params("parallel.safetensors", "single.safetensors", layout_tolerance, what);
}

static void every_layout_matches_single_on_cuda(model_case m) {
  int failures = 0;
  tr_train_result r;
  const tr_train_options base = options(m, GPU1, LAYOUT_STEPS);
  failures += !a_step_shows(m, GPU1, layout_tolerance);
  if (run_to(base, "single.safetensors", &r)) fail_msg("single %s on " GPU1 " failed", model_name(&base));
  for (size_t k = 0; k < sizeof gpu_layouts / sizeof *gpu_layouts; k++)
    failures += layout_matches(&base, &gpu_layouts[k]);
  const int layers = m.spec ? m.spec->nlayers : 3;
  for (size_t k = 0; k < sizeof gpu_interleaved / sizeof *gpu_interleaved && layers >= 4; k++)
    failures += layout_matches(&base, &gpu_interleaved[k]);
  if (failures) fail_msg("%s: %d layout(s) on cuda:0 failed or differ from single (above)",
                         model_name(&base), failures);
}

static void simplenet_trains_alike_on_every_cuda_layout(void **state) {
  (void)state;
  every_layout_matches_single_on_cuda(models[0]);
}

static void mlp_trains_alike_on_every_cuda_layout(void **state) {
  (void)state;
  every_layout_matches_single_on_cuda(models[1]);
}

static void gpt_trains_alike_on_every_cuda_layout(void **state) {
  (void)state;
  every_layout_matches_single_on_cuda(models[2]);
}

/* ---- repeatability ------------------------------------------------------------------------- */

static int repeats_bitwise(model_case m, const layout_case *c) {
  tr_train_options o = with_layout(options(m, GPU1, 5), c);
  o.deterministic = 1;
  tr_train_result a, b;
  if (run_to(o, "first.safetensors", &a) || run_to(o, "second.safetensors", &b)) return 1;
  char what[96];
  snprintf(what, sizeof what, "%s %s on %s, twice", tr_strategy_name(o.strategy),
           model_name(&o), o.devices);
  int failures = !bitwise("first.safetensors", "second.safetensors", what);
  if (memcmp(&a.final_loss, &b.final_loss, sizeof a.final_loss)) {
    printf("  %-52s FAIL: final loss %.9g, then %.9g\n", what, a.final_loss, b.final_loss);
    failures++;
  }
  return failures;
}

static void deterministic_layouts_on_cuda_are_bitwise_repeatable(void **state) {
  (void)state;
  static const layout_case dp2 = DP(GPU2), il = INTERLEAVED(GPU2, 2, 4),
                           zb1 = RECOMPUTING(GPU2, TR_SCHEDULE_ZB1, 4);
  int failures = repeats_bitwise(models[0], &dp2) + repeats_bitwise(models[1], &dp2) +
                 repeats_bitwise(models[1], &il) + repeats_bitwise(models[1], &zb1);
  if (failures) fail_msg("%d deterministic run(s) did not repeat bitwise (above)", failures);
}

/* gpt's embedding gradient is a scatter-add where tokens repeat: the CUDA kernel adds rows in
 * order, with no atomics, so --deterministic holds for gpt too. */
static void deterministic_gpt_on_cuda_is_bitwise_repeatable(void **state) {
  (void)state;
  static const layout_case single = {TR_STRATEGY_SINGLE, GPU1, -1, 0, 0, 0};
  static const layout_case dp2 = DP(GPU2);
  int failures = repeats_bitwise(models[2], &single) + repeats_bitwise(models[2], &dp2);
  if (failures) fail_msg("%d deterministic gpt run(s) did not repeat bitwise (above)", failures);
}

/* ---- CUDA graphs ------------------------------------------------------------------------------- */

/* Deterministic runs with graphs on (passes replayed), and with the first capture of every
 * stage made to fail (back to eager passes), against graphs off: the same checkpoint and
 * final loss, bit for bit. Replays must have happened where they can (single, a pipeline's
 * passes; data parallelism's forwards, its backwards reporting to the group's hook run
 * eagerly), and a failed capture must be said. */
static int graphs_change_nothing(model_case m, const layout_case *c) {
  tr_train_options o = with_layout(options(m, GPU1, 5), c);
  o.deterministic = 1;
  tr_train_result off, on, failed;
  char what[128];
  o.job.graphs = TR_GRAPHS_OFF;
  if (run_to(o, "graphs-off.safetensors", &off)) return 1;
  o.job.graphs = TR_GRAPHS_ON;
  if (run_to(o, "graphs-on.safetensors", &on)) return 1;
  /* every device's first capture fails (gpu/fault.h): each stage's */
  char devices[96];
  snprintf(devices, sizeof devices, "fault(%s;op=capture,fail=1)", c->devices);
  tr_train_options failing = o;
  failing.devices = devices;
  if (run_to(failing, "graphs-failed.safetensors", &failed)) return 1;
  snprintf(what, sizeof what, "%s %s on %s, graphs on", tr_strategy_name(o.strategy),
           model_name(&o), o.devices);
  int failures = !bitwise("graphs-on.safetensors", "graphs-off.safetensors", what);
  printf("    %lld passes replayed from %lld captures%s%s\n", (long long)on.graph_launches,
         (long long)on.graph_captures, on.graphs_note[0] ? "; " : "", on.graphs_note);
  if (on.graph_launches == 0 || on.graphs_note[0] || memcmp(&on.final_loss, &off.final_loss, sizeof on.final_loss)) {
    printf("  %-52s FAIL: no replays, a note, or final loss %.9g against %.9g\n", what,
           on.final_loss, off.final_loss);
    failures++;
  }
  snprintf(what, sizeof what, "%s %s on %s, a capture failed", tr_strategy_name(o.strategy),
           model_name(&o), o.devices);
  failures += !bitwise("graphs-failed.safetensors", "graphs-off.safetensors", what);
  printf("    said: %s\n", failed.graphs_note);
  if (!strstr(failed.graphs_note, "eagerly") || failed.graph_launches ||
      memcmp(&failed.final_loss, &off.final_loss, sizeof off.final_loss)) {
    printf("  %-52s FAIL: not said, replays anyway, or final loss %.9g against %.9g\n", what,
           failed.final_loss, off.final_loss);
    failures++;
  }
  if (off.graph_captures || off.graph_launches) {
    printf("  %s: graphs off captured %lld passes\n", what, (long long)off.graph_captures);
    failures++;
  }
  return failures;
}

static void graphs_on_trains_bitwise_what_graphs_off_trains(void **state) {
  (void)state;
  static const layout_case single = {TR_STRATEGY_SINGLE, GPU1, -1, 0, 0, 0},
                           pipe = PIPELINE(GPU2, TR_SCHEDULE_1F1B, 4), dp2 = DP(GPU2),
                           zb1 = RECOMPUTING(GPU2, TR_SCHEDULE_ZB1, 4);
  int failures = 0;
  for (int k = 1; k < NMODELS; k++) /* mlp4, gpt1 */
    failures += graphs_change_nothing(models[k], &single) +
                graphs_change_nothing(models[k], &pipe) + graphs_change_nothing(models[k], &dp2);
  failures += graphs_change_nothing(models[1], &zb1);
  if (failures) fail_msg("%d run(s) with CUDA graphs differ from eager ones (above)", failures);
}

/* ---- the figures of a run ------------------------------------------------------------------- */

static int check_utilization(const tr_train_result *r, int devices) {
  int failures = 0;
  if (r->ndevices != devices) {
    printf("  %s: %d devices reported, %d used\n", r->strategy, r->ndevices, devices);
    failures++;
  }
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) {
    const double u = r->utilization[i];
    if (i < devices ? !(u > 0 && u <= 1) : !isnan(u)) {
      printf("  %s on %s: utilization[%d] = %g\n", r->strategy, r->devices, i, u);
      failures++;
    }
  }
  return failures;
}

static void print_figures(const tr_train_result *r) {
  printf("  %-8s %-5s on %d: %lld steps, %.0f samples/s, loss %.4g -> %.4g, %.3g GFLOP/s, "
         "utilization", r->strategy, r->model, r->ndevices, (long long)r->steps,
         r->samples_per_s, r->initial_loss, r->final_loss, r->gflops);
  for (int i = 0; i < r->ndevices; i++) printf(" %.2f", r->utilization[i]);
  if (isfinite(r->bubble_fraction))
    printf(", bubble %.3f (theory %.3f)", r->bubble_fraction, r->bubble_theory);
  if (r->replicas > 1) printf(", replicas differ by %.2g", r->consistency);
  printf("\n");
}

static int check_common(const tr_train_result *r, int devices) {
  int failures = check_utilization(r, devices);
  if (!(r->samples_per_s > 0 && r->steps_per_s > 0 && r->seconds > 0 && r->gflops > 0)) {
    printf("  %s: samples/s %g, steps/s %g over %g s, %g GFLOP/s: expected positive numbers\n",
           r->strategy, r->samples_per_s, r->steps_per_s, r->seconds, r->gflops);
    failures++;
  }
  if (!isfinite(r->initial_loss) || !isfinite(r->final_loss)) {
    printf("  %s: loss %g -> %g: expected finite numbers\n", r->strategy, r->initial_loss,
           r->final_loss);
    failures++;
  }
  return failures;
}

static void runs_on_cuda_report_sane_figures(void **state) {
  (void)state;
  int failures = 0;
  tr_train_result r;
  /* simplenet learns: 400 steps of SGD take its loss from 0.17 to 0.007 on host:1; half
   * is the bound */
  tr_train_options o = options(models[0], GPU1, 400);
  if (run_to(o, "figures.safetensors", &r)) {
    failures++;
  } else {
    print_figures(&r);
    failures += check_common(&r, 1);
    if (!(r.final_loss < 0.5 * r.initial_loss)) {
      printf("  simplenet on " GPU1 ": loss %g -> %g in 400 steps, expected below half\n",
             r.initial_loss, r.final_loss);
      failures++;
    }
    if (!isnan(r.bubble_fraction) || !isnan(r.tokens_per_s)) {
      printf("  single simplenet: bubble %g, tokens/s %g: expected neither (NaN)\n",
             r.bubble_fraction, r.tokens_per_s);
      failures++;
    }
  }
  /* dp: its replicas hold the same parameters (the all-reduce is exact across replicas) */
  o = with_layout(options(models[1], GPU2, 30), &(layout_case)DP(GPU2));
  if (run_to(o, "figures.safetensors", &r)) {
    failures++;
  } else {
    print_figures(&r);
    failures += check_common(&r, 2);
    if (r.replicas != 2 || r.stages != 1 || !(r.consistency >= 0 && r.consistency <= 1e-6)) {
      printf("  dp: %d replicas x %d stages, replicas differ by %g: expected 2 x 1, <= 1e-6\n",
             r.replicas, r.stages, r.consistency);
      failures++;
    }
  }
  /* pipeline: a bubble in [0, 1); gpipe's own with p = 2, m = 3 is (p-1)/(m+p-1) = 1/4 */
  o = with_layout(options(models[1], GPU2, 30), &(layout_case)PIPELINE(GPU2, TR_SCHEDULE_GPIPE, 3));
  if (run_to(o, "figures.safetensors", &r)) {
    failures++;
  } else {
    print_figures(&r);
    failures += check_common(&r, 2);
    if (!(r.bubble_fraction >= 0 && r.bubble_fraction < 1) ||
        !(fabs(r.bubble_theory - 0.25) < 1e-9) || strcmp(r.schedule, "gpipe") ||
        r.microbatches != 3) {
      printf("  pipeline: %s, m %d, bubble %g (theory %g): expected gpipe, 3, [0, 1) (0.25)\n",
             r.schedule, r.microbatches, r.bubble_fraction, r.bubble_theory);
      failures++;
    }
  }
  /* interleaved, 2 chunks on each of 2: (p-1)/(v m + p-1) = 1/9 with m = 4; the device's
   * activation bytes are counted */
  o = with_layout(options(models[1], GPU2, 30), &(layout_case)INTERLEAVED(GPU2, 2, 4));
  if (run_to(o, "figures.safetensors", &r)) {
    failures++;
  } else {
    print_figures(&r);
    failures += check_common(&r, 2);
    if (!(r.bubble_fraction >= 0 && r.bubble_fraction < 1) ||
        !(fabs(r.bubble_theory - 1.0 / 9) < 1e-9) || strcmp(r.schedule, "interleaved") ||
        r.chunks != 2 || r.cuts[4] != mlp4.nlayers || !(r.peak_activation_bytes[0] > 0) ||
        !(r.peak_activation_bytes[1] > 0)) {
      printf("  interleaved: %s, %d chunks, bubble %g (theory %g), cut ends at %d, peak bytes "
             "%lld %lld: expected interleaved, 2, [0, 1) (1/9), %d, > 0\n", r.schedule,
             r.chunks, r.bubble_fraction, r.bubble_theory, r.cuts[4],
             (long long)r.peak_activation_bytes[0], (long long)r.peak_activation_bytes[1],
             mlp4.nlayers);
      failures++;
    }
  }
  /* hybrid on 4: 2 replicas of 2 stages; gpt reports tokens/s */
  o = with_layout(options(models[2], GPU4, 30), &(layout_case)HYBRID(GPU4));
  if (run_to(o, "figures.safetensors", &r)) {
    failures++;
  } else {
    print_figures(&r);
    failures += check_common(&r, 4);
    if (r.replicas != 2 || r.stages != 2 || !(r.bubble_fraction >= 0 && r.bubble_fraction < 1) ||
        !(r.tokens_per_s > 0)) {
      printf("  hybrid gpt: %d x %d, bubble %g, tokens/s %g: expected 2 x 2, [0, 1), > 0\n",
             r.replicas, r.stages, r.bubble_fraction, r.tokens_per_s);
      failures++;
    }
  }
  if (failures) fail_msg("%d figure(s) of runs on cuda:0 are not sane (above)", failures);
}

/* ---- asynchronous training ------------------------------------------------------------------ */

/* A server on a logical device of the GPU: one worker is single training (the same ops on
 * the same GPU); two workers on two logical devices train, with their staleness counted, the
 * pushes read in place and DC-ASGD on the GPU; Hogwild! is refused by name (host only). */
static void async_training_runs_on_cuda(void **state) {
  (void)state;
  int failures = 0;
  tr_train_result r;
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
    tr_train_options o = options(models[k], GPU1, LAYOUT_STEPS);
    if (run_to(o, "single.safetensors", &r)) fail_msg("single %s failed", case_name(models[k]));
    o.strategy = TR_STRATEGY_ASYNC;
    o.job.async.staleness = 0;
    char what[96];
    snprintf(what, sizeof what, "async %s, 1 worker on " GPU1, case_name(models[k]));
    failures += run_to(o, "async.safetensors", &r) != 0 ||
                !same_params("async.safetensors", "single.safetensors", layout_tolerance, what);
  }
  tr_train_options o = options(models[0], GPU2, 400);
  o.strategy = TR_STRATEGY_ASYNC;
  for (int dc = 0; dc < 2; dc++) {
    o.job.async.dc_lambda = dc ? 0.5f : 0;
    if (run_to(o, "async2.safetensors", &r)) {
      failures++;
      continue;
    }
    print_figures(&r);
    int64_t updates = 0;
    for (int b = 0; b < TR_TRAIN_STALENESS_BINS; b++) updates += r.staleness_hist[b];
    printf("  async simplenet, 2 workers%s: staleness mean %.2f max %.0f, consistency %.3g, "
           "server busy %.2f\n", dc ? ", dc 0.5" : "", r.staleness_mean, r.staleness_max,
           r.consistency, r.server_utilization);
    if (updates != 400 || !(r.final_loss < 0.5 * r.initial_loss) || !isfinite(r.consistency) ||
        r.workers != 2) {
      printf("  FAIL: %lld updates counted, loss %g -> %g, consistency %g, %d workers\n",
             (long long)updates, r.initial_loss, r.final_loss, r.consistency, r.workers);
      failures++;
    }
    failures += check_utilization(&r, 2);
  }
  o.job.async.dc_lambda = 0;
  o.job.async.hogwild = 1;
  char err[512];
  if (tr_train_run(&o, &r, err, sizeof err) == 0 || !strstr(err, "hogwild")) {
    printf("  --hogwild on " GPU2 ": expected a refusal naming it, got '%s'\n", err);
    failures++;
  }
  if (failures) fail_msg("%d asynchronous check(s) failed (above)", failures);
}

/* ---- checkpoints between cuda:0 and host:1 ------------------------------------------------- */

/* A run stopped at step 3 on one device and resumed to 6 on the other ends where 6 steps on
 * host:1 end, within the tolerance of the two devices (parameters and optimizer state went
 * across: a lost momentum or Adam moment would move steps 4 to 6 far beyond it); resumed on
 * the same GPU it is the uninterrupted run bit for bit (gpt's scatter-add aside). */
static void checkpoints_move_between_cuda_and_host(void **state) {
  (void)state;
  int failures = 0;
  for (int k = 0; k < NMODELS; k++) {
    const model_case m = models[k];
    const char *name = case_name(m);
    tr_train_result r;
    char what[96];
    if (run_to(options(m, HOST1, 6), "host6.safetensors", &r) ||
        run_to(options(m, GPU1, 6), "cuda6.safetensors", &r) ||
        run_to(options(m, HOST1, 3), "host3.safetensors", &r) ||
        run_to(options(m, GPU1, 3), "cuda3.safetensors", &r)) {
      failures++;
      continue;
    }
    static const struct {
      const char *from, *to, *reference;
      const char *from_devices, *devices;
    } legs[] = {
        {"cuda3.safetensors", "cuda-host.safetensors", "host6.safetensors", GPU1, HOST1},
        {"host3.safetensors", "host-cuda.safetensors", "host6.safetensors", HOST1, GPU1},
        {"cuda3.safetensors", "cuda-cuda.safetensors", "cuda6.safetensors", GPU1, GPU1},
    };
    for (size_t l = 0; l < sizeof legs / sizeof *legs; l++) {
      tr_train_options o = options(m, legs[l].devices, 6);
      o.job.checkpoint.resume = path(legs[l].from);
      if (run_to(o, legs[l].to, &r)) {
        failures++;
        continue;
      }
      if (r.first_step != 3) {
        printf("  %s resumed from %s began at step %lld, not 3\n", name, legs[l].from,
               (long long)r.first_step);
        failures++;
      }
      snprintf(what, sizeof what, "%s: 3 steps on %s, 3 on %s", name, legs[l].from_devices,
               legs[l].devices);
      if (l < 2)
        failures += !same_params(legs[l].to, legs[l].reference, cross_tolerance, what);
      else if (m.spec == &gpt1)
        failures += !same_params(legs[l].to, legs[l].reference, layout_tolerance, what);
      else
        failures += !bitwise(legs[l].to, legs[l].reference, what);
    }
  }
  if (failures) fail_msg("%d resumed run(s) failed or differ (above)", failures);
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_train: no GPU on this machine: skipped\n");
    return 77;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* the differences interleave with cmocka's lines */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cuda_trains_the_parameters_the_host_trains),
      cmocka_unit_test(simplenet_trains_alike_on_every_cuda_layout),
      cmocka_unit_test(mlp_trains_alike_on_every_cuda_layout),
      cmocka_unit_test(gpt_trains_alike_on_every_cuda_layout),
      cmocka_unit_test(deterministic_layouts_on_cuda_are_bitwise_repeatable),
      cmocka_unit_test(deterministic_gpt_on_cuda_is_bitwise_repeatable),
      cmocka_unit_test(graphs_on_trains_bitwise_what_graphs_off_trains),
      cmocka_unit_test(runs_on_cuda_report_sane_figures),
      cmocka_unit_test(async_training_runs_on_cuda),
      cmocka_unit_test(checkpoints_move_between_cuda_and_host),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
