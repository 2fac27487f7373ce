/* test_quiet.c — the idle watchdog and quiet systems (tr_system.h, Watchdog): a system idle
 * but not done with nothing out that could wake it is stopped in about a second, however
 * long the period; work out — a request on libuv's thread pool (how checkpoints are
 * written), work of a thread of the program's own bracketed by tr_system_work_begin and
 * tr_system_work_end — keeps it from being called quiet, and a busy actor is never quiet;
 * the layer above hears first (on_quiet) and may end it its own way. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <uv.h>

#include "troupe.h"

enum { MINUTE_MS = 60000, OUT_MS = 2500 }; /* OUT_MS: work out, over twice the quiet second */

typedef struct num_msg {
  tr_msg hdr;
  uint64_t n;
} num_msg;
static TR_MSGTYPE_DEFINE(num_type, num_msg);

static num_msg *num_new(uint64_t n) {
  num_msg *m = tr_msg_new(&num_type);
  m->n = n;
  return m;
}

static tr_system *system_new(const tr_system_config *cfg) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, cfg), 0);
  return sys;
}

static tr_actor *spawn(tr_system *sys, const char *name, tr_actor_kind kind,
                       const tr_behaviour *b, void *state) {
  tr_actor *a;
  assert_int_equal(tr_actor_spawn(sys, &(tr_actor_config){.name = name, .kind = kind,
                                                          .behaviour = b, .state = state},
                                  &a),
                   0);
  return a;
}

static double seconds_since(uint64_t t0_ns) { return (double)(tr_now_ns() - t0_ns) / 1e9; }

/* Handles what comes; stops the system (cleanly) on a message of n = 0. */
static int stopper_receive(tr_actor *self, tr_msg *msg) {
  if (msg->type == &num_type && ((num_msg *)msg)->n == 0) tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour stopper = {.name = "stopper", .receive = stopper_receive};

/* ---- quiet: a second, not a period --------------------------------------------------------- */

static void a_quiet_system_is_stopped_in_a_second_not_a_period(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS, .watchdog_idle = 1});
  tr_actor *a = spawn(sys, "waiter", TR_ACTOR_PINNED, &stopper, NULL);
  spawn(sys, "other", TR_ACTOR_LOOP, &stopper, NULL);
  tr_actor_send(a, num_new(7)); /* handled; then nothing more will ever come */
  const uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  const double took = seconds_since(t0);
  if (!(took >= 1.0 && took < 6)) fail_msg("stopped after %.2f s", took);
  const char *err = tr_system_error(sys);
  assert_non_null(strstr(err, "idle but not done for 1000 ms, and nothing can wake it"));
  assert_non_null(strstr(err, "'waiter' (pinned stopper): parked, nothing waiting, 1 handled"));
  tr_system_free(sys);
}

/* ---- work out: not quiet ------------------------------------------------------------------- */

/* A loop actor that puts work on libuv's thread pool (uv_queue_work, as the coordinator
 * writes checkpoints) and hears of its end as a message. */
typedef struct pool_job {
  uv_work_t req;
  tr_actor *self;
} pool_job;

static void pool_work(uv_work_t *req) {
  (void)req;
  usleep(OUT_MS * 1000);
}

static void pool_done(uv_work_t *req, int status) {
  (void)status;
  pool_job *j = req->data;
  tr_actor_send(j->self, num_new(0));
}

static int pool_start(tr_actor *self) {
  pool_job *j = tr_actor_state(self);
  j->self = self;
  j->req.data = j;
  return uv_queue_work(tr_system_loop(tr_actor_system(self)), &j->req, pool_work, pool_done)
             ? tr_actor_fail(self, TR_ESYS, "uv_queue_work")
             : 0;
}
static const tr_behaviour pool_user = {.name = "writer", .start = pool_start,
                                       .receive = stopper_receive};

static void work_on_the_loops_thread_pool_keeps_a_system_from_quiet(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS, .watchdog_idle = 1});
  pool_job j = {0};
  spawn(sys, "writer", TR_ACTOR_LOOP, &pool_user, &j);
  spawn(sys, "bystander", TR_ACTOR_PINNED, &stopper, NULL);
  const uint64_t t0 = tr_now_ns();
  const int rc = tr_system_run(sys);
  if (rc) fail_msg("%s", tr_system_error(sys));
  assert_true(seconds_since(t0) >= OUT_MS / 1e3);
  tr_system_free(sys);
}

/* A thread of the program's own, not an actor, whose result comes as a message. */
typedef struct outside {
  tr_system *sys;
  tr_actor *to;
  int ms;
} outside;

static void *outside_main(void *arg) {
  outside *o = arg;
  usleep((useconds_t)o->ms * 1000);
  tr_actor_send(o->to, num_new(0));
  assert_int_equal(tr_system_work_end(o->sys), 0); /* after the send */
  return NULL;
}

static void work_begun_on_a_thread_of_the_programs_keeps_a_system_from_quiet(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS, .watchdog_idle = 1});
  outside o = {sys, spawn(sys, "waiter", TR_ACTOR_PINNED, &stopper, NULL), OUT_MS};
  assert_int_equal(tr_system_work_begin(sys), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, outside_main, &o), 0);
  const uint64_t t0 = tr_now_ns();
  const int rc = tr_system_run(sys);
  pthread_join(t, NULL);
  if (rc) fail_msg("%s", tr_system_error(sys));
  assert_true(seconds_since(t0) >= OUT_MS / 1e3);
  tr_system_free(sys);
}

/* Work out that never ends (a write stuck on a full disk) does not keep the system alive as
 * a timer does: it is idle but not done after the whole period, which the error says. */
static void work_out_for_the_whole_period_is_named_when_it_stops_a_system(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 2000, .watchdog_idle = 1});
  spawn(sys, "waiter", TR_ACTOR_PINNED, &stopper, NULL);
  assert_int_equal(tr_system_work_begin(sys), 0);
  const uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  assert_true(seconds_since(t0) >= 2.0); /* the period, not the quiet second */
  const char *err = tr_system_error(sys);
  assert_non_null(strstr(err, "idle but not done for 2000 ms"));
  assert_non_null(strstr(err, "out all along: 0 libuv requests, 1 tr_system_work_begin"));
  assert_null(strstr(err, "nothing can wake it"));
  assert_int_equal(tr_system_work_end(sys), 0);
  tr_system_free(sys);
}

static void work_ends_only_as_often_as_it_began(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  assert_int_equal(tr_system_work_end(sys), TR_ESTATE);
  assert_int_equal(tr_system_work_begin(sys), 0);
  assert_int_equal(tr_system_work_begin(sys), 0);
  assert_int_equal(tr_system_work_end(sys), 0);
  assert_int_equal(tr_system_work_end(sys), 0);
  assert_int_equal(tr_system_work_end(sys), TR_ESTATE);
  assert_int_equal(tr_system_work_begin(NULL), TR_EINVAL);
  assert_int_equal(tr_system_work_end(NULL), TR_EINVAL);
  tr_system_free(sys);
}

/* A handler that takes longer than the quiet second is busy, not quiet: the others wait. */
static int slow_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  usleep(OUT_MS * 1000);
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour slow = {.name = "device", .receive = slow_receive};

static void an_actor_busy_longer_than_a_second_is_not_quiet(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS, .watchdog_idle = 1});
  tr_actor *a = spawn(sys, "stage", TR_ACTOR_PINNED, &slow, NULL);
  spawn(sys, "loader", TR_ACTOR_LOOP, &stopper, NULL);
  tr_actor_send(a, num_new(1));
  assert_int_equal(tr_system_run(sys), 0);
  tr_system_free(sys);
}

/* ---- the layer above hears first ------------------------------------------------------------ */

typedef struct listener {
  tr_system *sys;
  int calls, status;
  pthread_t thread;
} listener;

static void on_quiet(void *arg) {
  listener *l = arg;
  l->calls++;
  l->thread = pthread_self();
  if (l->status) tr_system_fail(l->sys, l->status, "quiet: %s", "the layer above's words");
  else tr_system_stop(l->sys, 0); /* its work is done all the same */
}

static void the_layer_above_may_end_a_quiet_system_its_own_way(void **state) {
  (void)state;
  const int statuses[] = {0, TR_EIO};
  for (size_t k = 0; k < sizeof statuses / sizeof *statuses; k++) {
    const int status = statuses[k];
    listener l = {.status = status};
    tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS,
                                                    .watchdog_idle = 1,
                                                    .on_quiet = on_quiet,
                                                    .quiet_arg = &l});
    l.sys = sys;
    tr_actor *a = spawn(sys, "waiter", TR_ACTOR_PINNED, &stopper, NULL);
    tr_actor_send(a, num_new(7));
    const uint64_t t0 = tr_now_ns();
    assert_int_equal(tr_system_run(sys), status);
    assert_true(seconds_since(t0) < 6);
    assert_int_equal(l.calls, 1);
    assert_true(pthread_equal(l.thread, pthread_self())); /* the loop thread: run's caller */
    assert_string_equal(tr_system_error(sys), status ? "quiet: the layer above's words" : "");
    tr_system_free(sys);
  }
}

/* One that stops nothing leaves the watchdog to stop the system as it would have. */
static void ignore_quiet(void *arg) { ++*(int *)arg; }

static void a_quiet_system_the_layer_above_leaves_is_stopped_by_the_watchdog(void **state) {
  (void)state;
  int calls = 0;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = MINUTE_MS,
                                                  .watchdog_idle = 1,
                                                  .on_quiet = ignore_quiet,
                                                  .quiet_arg = &calls});
  spawn(sys, "waiter", TR_ACTOR_PINNED, &stopper, NULL);
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  assert_int_equal(calls, 1);
  assert_non_null(strstr(tr_system_error(sys), "nothing can wake it"));
  tr_system_free(sys);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_quiet_system_is_stopped_in_a_second_not_a_period),
      cmocka_unit_test(work_on_the_loops_thread_pool_keeps_a_system_from_quiet),
      cmocka_unit_test(work_begun_on_a_thread_of_the_programs_keeps_a_system_from_quiet),
      cmocka_unit_test(work_out_for_the_whole_period_is_named_when_it_stops_a_system),
      cmocka_unit_test(work_ends_only_as_often_as_it_began),
      cmocka_unit_test(an_actor_busy_longer_than_a_second_is_not_quiet),
      cmocka_unit_test(the_layer_above_may_end_a_quiet_system_its_own_way),
      cmocka_unit_test(a_quiet_system_the_layer_above_leaves_is_stopped_by_the_watchdog),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
