/* test_local_elastic.c — local SGD with elastic replicas (strategy local,
 * tr_async_config.elastic): a replica whose device dies leaves, and each later sync averages
 * the replicas still there. Three replicas of a tiny model (linear, relu, linear, MSE, SGD),
 * one killed (its device's loss backward fails from a given call on) at a step drawn from
 * each seed: the run finishes, every replica still there holds the same bits right after a
 * sync, and the parameters match a float64 reference of "average over the replicas alive"
 * (plain averaging, after dp's warm-up steps, and DiLoCo's outer step) within the tolerance
 * of test_local.c, and so do the last step's loss (the mean of those left) and the samples
 * trained. A checkpoint after a departure resumes, the replica that left starting from the
 * first one's parameters. All but one leaving finishes; all leaving fails naming each; a
 * held-out evaluation is over the shares of the replicas left; dp refuses elastic, and so do
 * local runs whose replicas are pipelines or sum through NCCL.
 *
 * The parameters are read from the checkpoint a run writes at its end: the replicas alive
 * at its step, the first of them unprefixed, the others under "replica<r>." (elastic.h). A
 * run ending right after a sync (H 3: steps 3, 6, 9) shows the sync's result. */
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

#define SCRATCH_NAME "local_elastic"
#include "scratch.h"

#include "../runtime/test_util.h"
#include "compare.h"
#include "specs.h"

enum { IN = 4, HID = 8, OUT = 2, BATCH = 12, R = 3, MAXP = 256 };
static const float LR = 0.1f;

#include "local_fixture.h"

/* ---- the float64 reference ------------------------------------------------------------------ */

typedef struct reference {
  int H, K;
  tr_outer outer;
  double outer_lr, mu;
  int64_t left[R]; /* the step replica r's device died in (INT64_MAX: it did not) */
  double p[R][MAXP], global[MAXP], velocity[MAXP];
  double loss; /* the last step's: the mean over the replicas alive of their samples' MSE */
} reference;

/* Adds to g the gradient of sum over samples [first, first + count) of ||f(x) − y||² ×
 * scale, at parameters p; the samples' MSE summed. */
static double gradient(const double *p, uint64_t first, size_t count, double scale, double *g) {
  double mse = 0;
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
      mse += (o[c] - y[c]) * (o[c] - y[c]) / OUT;
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
  return mse;
}

static bool alive(const reference *ref, int r, int64_t t) { return t < ref->left[r]; }

/* Local SGD over the replicas alive at each step: a replica whose device dies in step t
 * trains no more from t on (not even t's update), and takes part in no sync from t on;
 * dp's warm-up steps and every sync use the mean over the replicas alive. */
static void reference_steps(reference *ref, int64_t from, int64_t steps) {
  for (int64_t t = from; t < steps; t++) {
    const bool warm = t < ref->K;
    int k = 0;
    for (int r = 0; r < R; r++) k += alive(ref, r, t);
    double g[R][MAXP] = {{0}}, sum[MAXP] = {0};
    ref->loss = 0;
    for (int r = 0; r < R; r++) {
      if (!alive(ref, r, t)) continue;
      uint64_t first;
      size_t count;
      tr_data_shard((uint64_t)t, BATCH, r, R, &first, &count);
      /* dp: the mean over the samples of the replicas alive; local: the replica's own */
      ref->loss += gradient(ref->p[r], first, count,
                            1.0 / ((warm ? (double)k * count : (double)count) * OUT), g[r]) /
                   ((double)k * count);
      for (size_t i = 0; i < numel; i++) sum[i] += g[r][i];
    }
    for (int r = 0; r < R; r++)
      for (size_t i = 0; i < numel && alive(ref, r, t); i++)
        ref->p[r][i] -= LR * (warm ? sum[i] : g[r][i]);
    if (warm || (t + 1 - ref->K) % ref->H) continue;
    double mean[MAXP] = {0};
    for (int r = 0; r < R; r++)
      for (size_t i = 0; i < numel && alive(ref, r, t); i++) mean[i] += ref->p[r][i];
    for (size_t i = 0; i < numel; i++) mean[i] /= k;
    for (size_t i = 0; i < numel && ref->outer == TR_OUTER_NESTEROV; i++) {
      const double delta = ref->global[i] - mean[i];
      ref->velocity[i] = ref->mu * ref->velocity[i] + delta;
      ref->global[i] -= ref->outer_lr * (delta + ref->mu * ref->velocity[i]);
      mean[i] = ref->global[i];
    }
    for (int r = 0; r < R; r++)
      if (alive(ref, r, t)) memcpy(ref->p[r], mean, numel * sizeof *mean);
  }
}

static void reference_run(reference *ref, int64_t steps) {
  for (int r = 0; r < R; r++) memcpy(ref->p[r], init, sizeof init);
  memcpy(ref->global, init, sizeof init);
  memset(ref->velocity, 0, sizeof ref->velocity);
  reference_steps(ref, 0, steps);
}

/* ---- runs ----------------------------------------------------------------------------------- */

static char devices[256];
static int jitter_dev, jitter_us; /* one device's gemms slowed: the replicas' timing varied */

/* Local SGD on host:3 with elastic replicas; replica r's device dies in step kill[r] (its
 * loss backward fails from call kill[r] + 1 on; -1: it lives). */
static tr_train_options elastic(int64_t steps, int H, int K, const int64_t kill[R]) {
  tr_train_options o = tr_train_defaults();
  o.spec = &tiny;
  o.strategy = TR_STRATEGY_LOCAL;
  int len = snprintf(devices, sizeof devices, "fault(host:%d;dev=%d,op=gemm,us=%d", R,
                     jitter_dev, jitter_us);
  for (int r = 0; r < R; r++)
    if (kill[r] >= 0)
      len += snprintf(devices + len, sizeof devices - (size_t)len, ";dev=%d,op=mse_b,from=%lld",
                      r, (long long)kill[r] + 1);
  snprintf(devices + len, sizeof devices - (size_t)len, ")");
  o.devices = devices;
  o.steps = steps;
  o.job.data = data;
  o.job.async.elastic = 1;
  o.job.local.sync_every = H;
  o.job.local.warmup_sync = K;
  o.deterministic = 1;
  o.watchdog_ms = 20000;
  return o;
}

/* Replica r's tensor t in the checkpoint (the first alive replica's unprefixed), or NULL. */
static const tr_checkpoint_tensor *find(const tr_checkpoint *ck, int r, bool first, int t) {
  const char *tensor = tr_model_tensor(model, t)->name;
  char name[96];
  snprintf(name, sizeof name, "replica%d.%s", r, tensor);
  return tr_checkpoint_find(ck, first ? tensor : name);
}

/* The samples the replicas that left did not train: their share of each step from theirs. */
static int64_t lost_samples(const reference *ref, int64_t steps) {
  int64_t lost = 0;
  for (int r = 0; r < R; r++)
    if (ref->left[r] < steps) lost += (steps - ref->left[r]) * (BATCH / R);
  return lost;
}

/* The checkpoint `file` of a run to `steps` against the reference: the largest relative
 * difference of a replica's tensor (the replicas alive there; one that left is not in it),
 * and (`synced`: the run ended right after a sync) every one bitwise the first's. */
static double from_reference(const char *file, const reference *ref, int64_t steps,
                             bool synced) {
  char err[512];
  tr_checkpoint *ck = NULL;
  assert_int_equal(tr_checkpoint_open(&ck, file, err, sizeof err), 0);
  int lead = -1;
  double most = 0;
  for (int r = 0; r < R; r++) {
    const bool there = ref->left[r] >= steps;
    if (there && lead < 0) lead = r;
    for (int t = 0; t < 4; t++) {
      const tr_checkpoint_tensor *c = find(ck, r, r == lead, t);
      if (!there) { /* one that left is not in the checkpoint */
        if (r != lead && c) fail_msg("replica %d left, yet the checkpoint holds it", r);
        continue;
      }
      const tr_tensor_info *info = tr_model_tensor(model, t);
      if (c == NULL || c->nbytes != info->numel * sizeof(float))
        fail_msg("replica %d's tensor %s is not in the checkpoint", r, info->name);
      double diff = 0, norm = 0;
      for (size_t i = 0; i < info->numel; i++) {
        const double want = ref->p[r][info->offset + i], d = element(c, i) - want;
        diff += d * d;
        norm += want * want;
      }
      const double rel = sqrt(diff / norm);
      if (!(rel <= most)) most = isnan(rel) ? INFINITY : rel;
      const tr_checkpoint_tensor *l = find(ck, lead, true, t);
      if (synced && r != lead && memcmp(c->data, l->data, c->nbytes))
        fail_msg("after the sync of step %lld, replica %d's %s differs from replica %d's",
                 (long long)steps - 1, r, info->name, lead);
    }
  }
  tr_checkpoint_close(ck);
  return most;
}

/* Runs o to its end, then checks its checkpoint: the replicas alive there, each against the
 * reference (within 1e-5), and (`synced`: the run ended right after a sync) all of them
 * bitwise equal. */
static void expect(tr_train_options o, reference *ref, const int64_t kill[R], bool synced) {
  tr_train_result res;
  char err[1024];
  o.job.checkpoint.path = path("elastic.safetensors");
  if (tr_train_run(&o, &res, err, sizeof err))
    fail_msg("local H %d K %d on %s: %s", o.job.local.sync_every, o.job.local.warmup_sync,
             o.devices, err);
  assert_int_equal(res.steps, o.steps);
  ref->H = o.job.local.sync_every;
  ref->K = o.job.local.warmup_sync;
  ref->outer = o.job.local.outer;
  ref->outer_lr = o.job.local.outer_lr;
  ref->mu = o.job.local.outer_momentum;
  int gone = 0;
  for (int r = 0; r < R; r++) {
    ref->left[r] = kill[r] >= 0 && kill[r] < o.steps ? kill[r] : INT64_MAX;
    gone += ref->left[r] != INT64_MAX;
  }
  reference_run(ref, o.steps);
  assert_int_equal(res.replicas_alive, R - gone);
  /* the last step's loss: the replicas alive's mean (the final loss of a run this short) */
  if (!(fabs(res.final_loss - ref->loss) <= 1e-5 * ref->loss))
    fail_msg("final loss %.9g, but the replicas alive's mean is %.9g", res.final_loss, ref->loss);
  assert_int_equal(res.samples, o.steps * BATCH - lost_samples(ref, o.steps));
  const double most = from_reference(path("elastic.safetensors"), ref, o.steps, synced);
  printf("  H %d K %d %s to step %lld, killed %lld %lld %lld: %.3g from the float64 "
         "reference%s\n", ref->H, ref->K, tr_outer_name(ref->outer), (long long)o.steps,
         (long long)kill[0], (long long)kill[1], (long long)kill[2], most,
         synced ? ", the replicas left bitwise equal" : "");
  if (!(most < 1e-5))
    fail_msg("elastic local SGD differs from its float64 reference by %.3g", most);
}

/* The step a seed kills at, in [1, 8]. */
static int64_t drawn(unsigned seed) { return (int64_t)((seed * 2654435761u) >> 7) % 8 + 1; }

/* The stress suite (TR_TEST_SCALE > 1) draws more seeds, each with one device's steps slowed
 * by up to 300 µs, so that leaves and buckets come in other orders. */
static void one_of_three_leaves(void **state) {
  (void)state;
  static reference ref;
  const unsigned seeds = (unsigned)test_scaled(4);
  for (unsigned seed = 1; seed <= seeds; seed++) {
    jitter_dev = (int)(seed / R % R);
    jitter_us = seeds > 4 ? (int)(seed * 7919 % 300) : 0;
    const int victim = (int)(seed % R);
    int64_t kill[R] = {-1, -1, -1};
    kill[victim] = drawn(seed);
    for (int64_t steps = 3; steps <= 9; steps += 3) /* right after each sync */
      expect(elastic(steps, 3, 0, kill), &ref, kill, true);
    expect(elastic(10, 3, 0, kill), &ref, kill, false); /* mid-period: they differ */
  }
}

static void warm_up_and_diloco_average_the_replicas_left(void **state) {
  (void)state;
  static reference ref;
  const int64_t in_warm_up[R] = {-1, 1, -1}, later[R] = {5, -1, -1};
  expect(elastic(9, 3, 3, in_warm_up), &ref, in_warm_up, true);
  tr_train_options o = elastic(9, 3, 0, later);
  o.job.local.outer = TR_OUTER_NESTEROV;
  o.job.local.outer_lr = 0.7f;
  o.job.local.outer_momentum = 0.9f;
  expect(o, &ref, later, true);
  /* replica 0 left: the outer state is still in the checkpoint, once (replica 1's), and after
   * the sync of step 8 the global parameters are every replica's */
  tr_checkpoint *ck = NULL;
  char err[512];
  assert_int_equal(tr_checkpoint_open(&ck, path("elastic.safetensors"), err, sizeof err), 0);
  for (int t = 0; t < 4; t++) {
    char name[96];
    snprintf(name, sizeof name, "outer.global.%s", tr_model_tensor(model, t)->name);
    const tr_checkpoint_tensor *g = tr_checkpoint_find(ck, name), *p = find(ck, 1, true, t);
    snprintf(name, sizeof name, "outer.velocity.%s", tr_model_tensor(model, t)->name);
    assert_non_null(g);
    assert_non_null(tr_checkpoint_find(ck, name));
    assert_int_equal(g->nbytes, p->nbytes);
    assert_memory_equal(g->data, p->data, p->nbytes);
  }
  tr_checkpoint_close(ck);
}

static void all_but_one_leave_and_it_finishes(void **state) {
  (void)state;
  static reference ref;
  const int64_t kill[R] = {2, -1, 6};
  expect(elastic(9, 3, 0, kill), &ref, kill, true);
}

/* A checkpoint written after replica 1 left (mid-period, at step 7: the replicas differ)
 * holds replicas 0 and 2; resumed on three healthy devices, replica 1 starts from the
 * first's parameters (elastic.h), and the run is the reference's from there. */
static void a_checkpoint_after_a_departure_resumes(void **state) {
  (void)state;
  static reference ref;
  const int64_t kill[R] = {-1, 2, -1}, none[R] = {-1, -1, -1};
  expect(elastic(7, 3, 0, kill), &ref, kill, false);
  tr_train_options o = elastic(12, 3, 0, none);
  o.job.checkpoint.resume = path("elastic.safetensors");
  o.job.checkpoint.path = path("resumed.safetensors");
  tr_train_result res;
  char err[1024];
  if (tr_train_run(&o, &res, err, sizeof err)) fail_msg("resumed: %s", err);
  assert_int_equal(res.first_step, 7);
  assert_int_equal(res.steps, 12);
  memcpy(ref.p[1], ref.p[0], sizeof ref.p[1]);
  ref.left[1] = INT64_MAX;
  reference_steps(&ref, 7, 12);
  const double d = from_reference(path("resumed.safetensors"), &ref, 12, false);
  printf("  resumed at step 7 to 12, replica 1 from replica 0's: %.3g from the reference\n", d);
  if (!(d < 1e-5)) fail_msg("the resumed run differs from its float64 reference by %.3g", d);
}

static void every_replica_leaving_fails_naming_each(void **state) {
  (void)state;
  const int64_t kill[R] = {2, 4, 6};
  tr_train_options o = elastic(9, 3, 0, kill);
  tr_train_result res;
  char err[1024];
  assert_int_not_equal(tr_train_run(&o, &res, err, sizeof err), 0);
  printf("  %s\n", err);
  const char *want[] = {("every replica left, none is left to train: replica 0 (host:0) at step "
                         "2: host:0: mse_backward: an injected failure (call 3"),
                        "; replica 1 (host:1) at step 4: host:1: mse_backward",
                        "; replica 2 (host:2) at step 6: host:2: mse_backward"};
  for (int k = 0; k < 3; k++)
    if (!strstr(err, want[k])) fail_msg("the message lacks \"%s\"", want[k]);
}

/* Held-out samples: the training's waves further on, 12 rows (4 a replica). */
static int fill_held(void *arg, uint64_t first, size_t count, void *x, void *y) {
  return fill(arg, first + 100000, count, x, y);
}

/* The reference's MSE of replica r's parameters on the held-out shares of the replicas
 * alive after step `step`, and how many samples they hold. */
static double held_out_loss(const reference *ref, int64_t step, int lead, int *samples) {
  double total = 0;
  float x[IN], y[OUT];
  *samples = 0;
  for (int r = 0; r < R; r++) {
    uint64_t first;
    size_t count;
    tr_data_shard(0, 12, r, R, &first, &count);
    for (size_t i = first; i < first + count && step <= ref->left[r]; i++, ++*samples) {
      fill_held(NULL, (uint64_t)i, 1, x, y);
      const double *p = ref->p[lead];
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
  }
  return total / *samples;
}

/* Held-out evaluation after a sync: each replica still there evaluates its share with the
 * synced parameters; the one that left evaluates none, and the evaluation waits for it no
 * more (the last one, after step 9, is over the others' 8 samples). */
static void evaluation_is_over_the_replicas_left(void **state) {
  (void)state;
  static reference ref;
  tr_data *held = NULL;
  char err[1024];
  const tr_data_callback cb = {.name = "held", .x_bytes = IN * sizeof(float),
                               .y_bytes = OUT * sizeof(float), .fill = fill_held, .rows = 12};
  assert_int_equal(tr_data_open_callback(&held, &cb, err, sizeof err), 0);
  const int64_t kill[R] = {-1, 4, -1};
  tr_train_options o = elastic(9, 3, 0, kill);
  o.job.eval = (tr_eval_config){.data = held, .every = 3};
  tr_train_result res;
  const int rc = tr_train_run(&o, &res, err, sizeof err);
  tr_data_close(held);
  if (rc) fail_msg("%s", err);
  ref.H = 3, ref.K = 0, ref.outer = TR_OUTER_AVERAGE;
  for (int r = 0; r < R; r++) ref.left[r] = kill[r] >= 0 ? kill[r] : INT64_MAX;
  reference_run(&ref, 9);
  int samples;
  const double want = held_out_loss(&ref, 9, 0, &samples);
  printf("  held-out loss %.9g of %lld samples after step %lld (%d evaluations), the "
         "reference's %.9g of %d\n", res.eval_loss, (long long)res.eval_samples,
         (long long)res.eval_step, res.eval_count, want, samples);
  assert_int_equal(res.eval_step, 9);
  assert_int_equal(res.eval_count, 3);
  assert_int_equal(res.eval_samples, samples);
  assert_int_equal(samples, 8);
  if (!(fabs(res.eval_loss - want) <= 1e-5 * want))
    fail_msg("held-out loss %.9g, the synced model's on the shares left is %.9g", res.eval_loss,
             want);
}

static void expect_einval(tr_train_options o, const char *field, const char *words) {
  tr_error e;
  tr_train_result r;
  const int rc = tr_train_run_e(&o, &r, &e);
  if (rc != TR_EINVAL || strcmp(e.field, field) || !strstr(e.message, words))
    fail_msg("expected a refusal of %s (\"%s\"), got %d: [%s] %s", field, words, rc, e.field,
             e.message);
}

static void elastic_is_refused_where_replicas_cannot_leave(void **state) {
  (void)state;
  const int64_t none[R] = {-1, -1, -1};
  tr_train_options o = elastic(4, 2, 0, none);
  o.strategy = TR_STRATEGY_DP;
  o.job.local.sync_every = 0;
  expect_einval(o, "async.elastic", "dp's replicas sum every step's gradients together");
  o = elastic(4, 2, 0, none);
  o.devices = "host:6";
  o.job.layout.stages = 2;
  expect_einval(o, "async.elastic", "one stage each");
  /* NCCL, whose collectives every member joins (refused by the job's configuration, which
   * a run on host devices does not reach: they have no NCCL) */
  tr_job_config c = tr_job_defaults();
  c.model = model, c.data = data, c.layout.replicas = R, c.local.sync_every = 2;
  c.async.elastic = 1, c.allreduce = TR_ALLREDUCE_NCCL;
  tr_graph *g = NULL;
  tr_job *j = NULL;
  char err[512] = "";
  assert_int_equal(tr_graph_new(&g, NULL), 0);
  assert_int_equal(tr_job_new(&j, g, &c, err, sizeof err), TR_EINVAL);
  if (!strstr(err, "async.elastic: a replica cannot leave a group that sums through NCCL"))
    fail_msg("local + elastic + allreduce nccl: %s", err);
  tr_graph_free(g);
  c.allreduce = TR_ALLREDUCE_AUTO; /* auto: peer, which a member can leave */
  tr_error e;
  assert_int_equal(tr_job_check(&c, &e), 0);
  assert_int_equal(c.allreduce, TR_ALLREDUCE_PEER);
}

int main(void) {
  const struct CMUnitTest stress[] = {cmocka_unit_test(one_of_three_leaves)};
  if (test_scaled(4) > 4) return cmocka_run_group_tests(stress, open_all, close_all);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_of_three_leaves),
      cmocka_unit_test(warm_up_and_diloco_average_the_replicas_left),
      cmocka_unit_test(all_but_one_leave_and_it_finishes),
      cmocka_unit_test(a_checkpoint_after_a_departure_resumes),
      cmocka_unit_test(every_replica_leaving_fails_naming_each),
      cmocka_unit_test(evaluation_is_over_the_replicas_left),
      cmocka_unit_test(elastic_is_refused_where_replicas_cannot_leave),
  };
  return cmocka_run_group_tests(tests, open_all, close_all);
}
