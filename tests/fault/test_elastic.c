/* test_elastic.c — asynchronous workers that come and go. Leaving (--elastic,
 * tr_async_config.elastic): a
 * worker whose device dies at a random step (the fault decorator's from=N on its loss
 * backward, gpu/fault.h: torchft's fail_at(rank, step) by composition) leaves, and the run
 * finishes with the others; so does a run where all but one leave. The server's update count
 * is every update it applied (the staleness histogram's count, the final checkpoint's step),
 * the final checkpoint resumes, the figures say who left at which step, a worker that left
 * never holds the others at SSP's bound, every worker gone fails the run naming them, and
 * the option is refused where it does not apply. Joining (--join-at, tr_async_config.join_at):
 * a worker that joins at a step pulls the parameters of that moment and pushes from there,
 * SSP counting it from its join, and the run's checkpoint resumes; one joins at once when no
 * other worker is left to train (a worker leaves, one joins).
 *
 * The random steps come from TR_TEST_SEED when set, else from the clock; the seed is
 * printed, so a failure can be replayed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "../runtime/test_util.h"
#include "troupe.h"

#define SCRATCH_NAME "elastic"
#include "../actors/scratch.h"

enum { STEPS = 240, BOUND = 4, LOST_PER_WORKER = 4 };

static uint64_t seed;

/* Workers on host devices, each step slowed a little so that they share the steps, SSP's
 * bound keeping them together: a worker told to die at its step N < STEPS / workers gets
 * there. */
static tr_train_options elastic(const char *devices, int workers) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.strategy = TR_STRATEGY_ASYNC;
  o.devices = devices;
  o.steps = STEPS;
  o.job.global_batch = 64;
  o.job.layout.replicas = workers;
  o.job.async.staleness = BOUND;
  o.job.async.elastic = 1;
  o.watchdog_ms = 20000; /* a stuck graph fails with a report of each actor, not a timeout */
  return o;
}

/* "fault(host:W;op=mse,us=300;dev=D,op=mse_b,from=N;...)": worker die[k].dev dies at its
 * step die[k].step (its loss backward of that step fails, and every later op). */
typedef struct death {
  int dev, step;
} death;

static const char *spec(int workers, const death *die, int n) {
  static char buf[512];
  int k = snprintf(buf, sizeof buf, "fault(host:%d;op=mse,us=300", workers);
  for (int i = 0; i < n; i++)
    k += snprintf(buf + k, sizeof buf - (size_t)k, ";dev=%d,op=mse_b,from=%d", die[i].dev,
                  die[i].step);
  snprintf(buf + k, sizeof buf - (size_t)k, ")");
  return buf;
}

static int64_t updates_counted(const tr_train_result *r) {
  int64_t n = 0;
  for (int i = 0; i < TR_TRAIN_STALENESS_BINS; i++) n += r->staleness_hist[i];
  return n;
}

static uint64_t checkpoint_step(const char *file) {
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) fail_msg("%s", err);
  uint64_t step;
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  tr_checkpoint_close(ck);
  return step;
}

/* `die` leave; the run finishes with the others: the figures name who left, the server's
 * updates are the ones it counted and the final checkpoint's, and the checkpoint resumes. */
static void run_and_check(int workers, const death *die, int n, const char *file) {
  tr_train_options o = elastic(spec(workers, die, n), workers);
  o.job.checkpoint.path = path(file);
  tr_train_result r;
  char err[1024] = "";
  if (tr_train_run(&o, &r, err, sizeof err))
    fail_msg("seed %llu: %s: the run failed: %s", (unsigned long long)seed, o.devices, err);
  if (r.workers_alive != workers - n)
    fail_msg("seed %llu: %s: %d workers alive at the end, expected %d (left: '%s')",
             (unsigned long long)seed, o.devices, r.workers_alive, workers - n, r.workers_left);
  for (int i = 0; i < n; i++) { /* "d@step" for each, the step one the run reached */
    char want[16];
    snprintf(want, sizeof want, "%d@", die[i].dev);
    const char *at = strstr(r.workers_left, want);
    if (at == NULL || (at != r.workers_left && at[-1] != ','))
      fail_msg("seed %llu: workers_left '%s' does not name worker %d", (unsigned long long)seed,
               r.workers_left, die[i].dev);
    const long long step = atoll(at + strlen(want));
    if (!(step >= 0 && step <= r.steps))
      fail_msg("workers_left '%s': worker %d left at step %lld, after the run's %lld",
               r.workers_left, die[i].dev, step, (long long)r.steps);
  }
  /* every update the server applied is counted, in the figures and in the checkpoint; the
   * steps a dying worker's loader had claimed are all that is missing */
  assert_int_equal(updates_counted(&r), r.steps - r.first_step);
  if (!(r.steps <= STEPS && r.steps >= STEPS - LOST_PER_WORKER * n))
    fail_msg("seed %llu: the run reached step %lld of %d", (unsigned long long)seed,
             (long long)r.steps, STEPS);
  assert_int_equal((int64_t)checkpoint_step(o.job.checkpoint.path), r.steps);
  assert_int_equal(r.samples, (r.steps - r.first_step) * o.job.global_batch);

  tr_train_options resumed = elastic("host:2", 2); /* it resumes, on other devices */
  resumed.steps = r.steps + 6;
  resumed.job.checkpoint.resume = o.job.checkpoint.path;
  tr_train_result r2;
  if (tr_train_run(&resumed, &r2, err, sizeof err)) fail_msg("resuming %s: %s", file, err);
  assert_int_equal(r2.first_step, r.steps);
  assert_int_equal(r2.steps, r.steps + 6);
  assert_int_equal(r2.workers_alive, 2);
  assert_string_equal(r2.workers_left, "");
}

/* A random step in [2, STEPS / workers / 2]: one the worker surely reaches. */
static int random_step(int workers) {
  return 2 + (int)(test_rand(&seed) % (uint64_t)(STEPS / workers / 2 - 1));
}

static void one_worker_leaves_at_a_random_step_and_the_run_finishes(void **state) {
  (void)state;
  enum { W = 3 };
  for (int round = 0; round < 2; round++) {
    const death die = {.dev = (int)(test_rand(&seed) % W), .step = random_step(W)};
    run_and_check(W, &die, 1, "one.safetensors");
  }
}

static void all_but_one_leave_at_random_steps_and_the_run_finishes(void **state) {
  (void)state;
  enum { W = 4 };
  const int keep = (int)(test_rand(&seed) % W);
  death die[W - 1];
  for (int i = 0, n = 0; i < W; i++)
    if (i != keep) die[n++] = (death){.dev = i, .step = random_step(W)};
  run_and_check(W, die, W - 1, "all_but_one.safetensors");
}

/* Under a bound of 0 each worker waits for the slowest after every push: one that left and
 * were still counted would hold the others for ever (the watchdog would fail the run). */
static void a_worker_that_left_never_holds_the_others_back(void **state) {
  (void)state;
  const death die = {.dev = 1, .step = 3};
  tr_train_options o = elastic(spec(3, &die, 1), 3);
  o.job.async.staleness = 0;
  o.steps = 60;
  o.watchdog_ms = 5000;
  tr_train_result r;
  char err[1024] = "";
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(r.workers_alive, 2);
  assert_true(strncmp(r.workers_left, "1@", 2) == 0);
  assert_true(r.steps >= 60 - LOST_PER_WORKER && r.clock_gap_max <= 0);
}

static void every_worker_leaving_fails_the_run_naming_them(void **state) {
  (void)state;
  const death die[] = {{.dev = 0, .step = 3}, {.dev = 1, .step = 5}};
  tr_train_options o = elastic(spec(2, die, 2), 2);
  tr_train_result r;
  char err[1024] = "";
  const int rc = tr_train_run(&o, &r, err, sizeof err);
  if (rc == 0) fail_msg("both workers died, yet the run succeeded");
  if (!strstr(err, "every worker left") || !strstr(err, "worker 0 (host:0)") ||
      !strstr(err, "worker 1 (host:1)") || !strstr(err, "injected failure"))
    fail_msg("the error does not name both workers and why they left: '%s'", err);
}

/* Without elastic a worker that fails still fails the run (test_async.c says more). */
static void without_elastic_a_failing_worker_fails_the_run(void **state) {
  (void)state;
  const death die = {.dev = 1, .step = 3};
  tr_train_options o = elastic(spec(2, &die, 1), 2);
  o.job.async.elastic = 0;
  tr_train_result r;
  char err[1024] = "";
  if (tr_train_run(&o, &r, err, sizeof err) == 0) fail_msg("worker 1 died, yet the run succeeded");
  if (!strstr(err, "worker1")) fail_msg("the error does not name worker1: '%s'", err);
}

/* ---- joining ------------------------------------------------------------------------------ */

/* Under a bound of 0, a worker counted before it joined would hold the others at its clock
 * of 0 for ever; one that joined with the parameters of version 0 would push gradients
 * JOIN updates stale. */
static void a_worker_that_joins_pulls_the_parameters_and_pushes_from_its_join(void **state) {
  (void)state;
  enum { JOIN = 40 };
  tr_train_options o = elastic("fault(host:3;op=mse,us=300)", 3);
  o.job.async.elastic = 0;
  o.job.async.staleness = 0;
  o.job.async.join_at = JOIN;
  o.steps = 200; /* 160 steps after the join: its stage opens in time on a loaded machine */
  o.watchdog_ms = 5000;
  o.job.checkpoint.path = path("joined.safetensors");
  tr_train_result r;
  char err[1024] = "";
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("a run with a worker joining: %s", err);
  assert_int_equal(r.steps, 200);
  assert_int_equal(updates_counted(&r), 200);
  assert_int_equal(r.workers_alive, 3);
  if (strncmp(r.workers_joined, "2@", 2) || atoll(r.workers_joined + 2) < JOIN ||
      atoll(r.workers_joined + 2) > 200)
    fail_msg("workers_joined '%s': expected worker 2 at step %d or after", r.workers_joined, JOIN);
  if (!(r.staleness_max < JOIN / 2))
    fail_msg("an update %g stale: the worker that joined pushed from old parameters",
             r.staleness_max);
  assert_true(r.clock_gap_max <= 0);
  if (!(r.utilization[2] > 0)) fail_msg("the worker that joined never pushed (utilization %g)",
                                        r.utilization[2]);
  /* the checkpoint resumes, past the step they join at: the joiner is added at once */
  tr_train_options resumed = o;
  resumed.steps = 280; /* long enough for the joiner's stage to open on a loaded machine */
  resumed.job.checkpoint.resume = o.job.checkpoint.path;
  resumed.job.checkpoint.path = path("joined2.safetensors");
  tr_train_result r2;
  if (tr_train_run(&resumed, &r2, err, sizeof err)) fail_msg("resuming a run that joined: %s", err);
  assert_int_equal(r2.first_step, 200);
  assert_int_equal(r2.steps, 280);
  assert_int_equal(updates_counted(&r2), 80); /* 200 to 280 */
  assert_int_equal(r2.workers_alive, 3);
  /* asked for at once, joined as its edges came: while its stage opens, the others may push
   * a few steps of 300 µs (more on a loaded machine), never the whole run */
  if (strncmp(r2.workers_joined, "2@", 2) || atoll(r2.workers_joined + 2) < 200 ||
      atoll(r2.workers_joined + 2) >= 280)
    fail_msg("resumed at step 200: workers_joined '%s', expected worker 2 at once", r2.workers_joined);
}

/* A worker told to join at a step the run never reaches joins at once when the only other
 * worker leaves (elastic), and trains the rest of the run. */
static void a_worker_joins_at_once_when_no_other_is_left(void **state) {
  (void)state;
  const death die = {.dev = 0, .step = 4};
  tr_train_options o = elastic(spec(2, &die, 1), 2);
  o.job.async.join_at = 1000000;
  o.steps = 60;
  o.watchdog_ms = 5000;
  tr_train_result r;
  char err[1024] = "";
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(r.workers_alive, 1);
  assert_true(strncmp(r.workers_left, "0@", 2) == 0);
  assert_true(strncmp(r.workers_joined, "1@", 2) == 0);
  assert_true(r.steps >= 60 - LOST_PER_WORKER);
  assert_int_equal(updates_counted(&r), r.steps);
}

static void expect_einval(const tr_train_options *o, const char *needle) {
  tr_train_result r;
  char err[1024] = "";
  const int rc = tr_train_run(o, &r, err, sizeof err);
  if (rc != TR_EINVAL) fail_msg("status %d, expected TR_EINVAL naming '%s' ('%s')", rc, needle, err);
  if (!strstr(err, needle)) fail_msg("error '%s' does not name '%s'", err, needle);
}

static void elastic_is_refused_where_it_does_not_apply(void **state) {
  (void)state;
  tr_train_options o = elastic("host:2", 2);
  o.strategy = TR_STRATEGY_DP;
  o.job.layout.replicas = 0;
  o.job.async.staleness = -1;
  expect_einval(&o, "async.elastic");
  o = elastic("host:2", 2);
  o.job.async.staleness = -1;
  o.job.async.hogwild = 1;
  expect_einval(&o, "async.hogwild");
  o = elastic("host:2", 2);
  o.job.async.join_at = 5;
  o.job.async.join_workers = 2;
  expect_einval(&o, "async.join_workers");
  o.job.async.join_workers = 0;
  o.job.async.join_at = -1;
  expect_einval(&o, "async.join_at");
}

int main(void) {
  const char *s = getenv("TR_TEST_SEED");
  seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
  if (seed == 0) seed = 1;
  printf("test_elastic: TR_TEST_SEED=%llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_worker_leaves_at_a_random_step_and_the_run_finishes),
      cmocka_unit_test(all_but_one_leave_at_random_steps_and_the_run_finishes),
      cmocka_unit_test(a_worker_that_left_never_holds_the_others_back),
      cmocka_unit_test(every_worker_leaving_fails_the_run_naming_them),
      cmocka_unit_test(without_elastic_a_failing_worker_fails_the_run),
      cmocka_unit_test(a_worker_that_joins_pulls_the_parameters_and_pushes_from_its_join),
      cmocka_unit_test(a_worker_joins_at_once_when_no_other_is_left),
      cmocka_unit_test(elastic_is_refused_where_it_does_not_apply),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
