/* test_mistakes.c — the four mistakes a user's own actors make in a job composed with the
 * public API (examples/custom_pipeline.c's shape: a relay between the loader and the stage,
 * an observer of the reports), each under the default watchdog of a minute
 * (tr_graph_new(&g, NULL)): the graph is quiet at once, every actor waiting for a message no
 * one will send, so the run ends within seconds, not a period, naming the user's actor and
 * the fix. Where every step trained and only the end is stuck, the run returns 0 with the
 * results and the final checkpoint, the mistake in tr_graph_warning.
 *
 *   a relay that never gives its credits back            fails: the relay, tr_edge_release
 *   a relay edge made without TR_BATCH_NOTIFY            fails: the relay, TR_BATCH_NOTIFY
 *   a relay added with tr_graph_add (an actor)           kept:  the relay, tr_graph_add_service
 *   an observer that never releases a report             kept:  the observer, tr_edge_release
 *
 * And the other side: runs with long silent stretches that are not mistakes — a device op
 * slower than the quiet window, work of the user's own out on a thread of theirs
 * (tr_system_work_begin) — are left to end by themselves. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "simplenet_job.h"
#include "troupe.h"

#define SCRATCH_NAME "mistakes"
#include "scratch.h"

enum { STEPS = 500, SEED = 1, PREFETCH = 4 };

/* Well under the 10 s on a loaded machine: the graph is quiet within a step's time,
 * and found so in about a second (TR_GRAPH_WATCHDOG_MS is a minute). */
static const double ENDS_WITHIN_S = 6;

/* ---- the user's actors ------------------------------------------------------------------- */

/* Between the loader and the stage: passes each batch on, and (unless it forgets) each
 * release of the stage's back to the loader. */
typedef struct relay {
  tr_edge *in, *out;
  bool gives_back;
} relay;

static int relay_receive(tr_actor *self, tr_msg *msg) {
  relay *r = tr_actor_state(self);
  if (msg->type == &tr_batch_type) {
    if (!tr_edge_acquire(r->out)) return tr_actor_fail(self, TR_ESTATE, "no credit");
    tr_edge_send(r->out, tr_batch_forward((tr_batch_msg *)msg));
  } else if (msg->type == &tr_edge_credit_type && r->gives_back) {
    tr_edge_release(r->in, ((tr_edge_credit_msg *)msg)->count);
  }
  return 0;
}
static const tr_behaviour relay_behaviour = {.name = "relay", .receive = relay_receive};

/* Follows the reports; done on the last one. */
typedef struct observer {
  tr_graph *g;
  tr_edge *in;
  bool releases;
  int heard;
} observer;

static int observer_receive(tr_actor *self, tr_msg *msg) {
  observer *o = tr_actor_state(self);
  if (msg->type != &tr_report_type) return 0;
  o->heard++;
  if (o->releases) tr_edge_release(o->in, 1);
  if (((const tr_report_msg *)msg)->last) tr_graph_done(o->g, self);
  return 0;
}
static const tr_behaviour observer_behaviour = {.name = "observer", .receive = observer_receive};

/* ---- a single-stage simplenet job, checkpointed at its end --------------------------------- */

typedef struct run {
  union {
    simplenet_job base;
    struct {
      SIMPLENET_JOB_FIELDS;
    };
  };
  tr_actor *stage, *loader, *coordinator;
  const char *checkpoint;
} run;

static void open_run(run *r, const char *devices, const char *checkpoint) {
  memset(r, 0, sizeof *r);
  tr_job_config c = tr_job_defaults();
  c.layout.prefetch = PREFETCH; /* fewer batches ahead than the run has steps */
  c.checkpoint.path = checkpoint;
  r->checkpoint = checkpoint;
  if (checkpoint) remove(checkpoint);
  simplenet_job_open(&r->base, devices, SEED, NULL, c); /* the default watchdog */
  assert_int_equal(tr_job_add_stage(r->j, 0, 0, tr_device_list_at(r->devs, 0), &r->stage), 0);
  assert_int_equal(tr_job_add_loader(r->j, 0, &r->loader), 0);
  assert_int_equal(tr_job_add_coordinator(r->j, &r->coordinator), 0);
}

/* loader -> relay -> stage for the inputs (notify: whether the relay's way out tells it of
 * releases), loader -> stage for the targets; the relay a service, or (the mistake) not. */
static void add_relay(run *r, relay *rel, bool service, bool notify) {
  const tr_actor_config c = {.name = "relay", .kind = TR_ACTOR_PINNED,
                             .behaviour = &relay_behaviour, .state = rel};
  tr_actor *a;
  assert_int_equal(service ? tr_graph_add_service(r->g, &c, &a) : tr_graph_add(r->g, &c, &a), 0);
  assert_int_equal(tr_job_connect_batches(r->j, r->loader, a, TR_BATCH_INPUTS, &rel->in), 0);
  assert_int_equal(tr_job_connect_batches(r->j, a, r->stage,
                                          TR_BATCH_INPUTS | (notify ? TR_BATCH_NOTIFY : 0),
                                          &rel->out),
                   0);
  assert_int_equal(tr_job_connect_batches(r->j, r->loader, r->stage, TR_BATCH_TARGETS, NULL), 0);
}

static void add_observer(run *r, observer *o) {
  tr_actor *a;
  o->g = r->g;
  assert_int_equal(tr_graph_add(r->g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                         .behaviour = &observer_behaviour,
                                                         .state = o},
                                &a),
                   0);
  assert_int_equal(tr_job_observe(r->j, a, 50, &o->in), 0);
}

/* Runs the graph for `steps`: its status, and how long it took in *took. */
static int run_timed(run *r, int64_t steps, double *took) {
  const uint64_t t0 = tr_now_ns();
  const int rc = tr_graph_run(r->g, 0, steps, 0);
  *took = (double)(tr_now_ns() - t0) / 1e9;
  return rc;
}

static void holds_all(const char *text, const char *const *want, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (!strstr(text, want[k])) fail_msg("the text lacks \"%s\": %s", want[k], text);
}

/* A run that fails, within seconds, its error naming every `want`. */
static void fails_naming(run *r, const char *const *want, size_t n) {
  double took;
  const int rc = run_timed(r, STEPS, &took);
  const char *e = tr_graph_error(r->g);
  if (rc != TR_ETIMEDOUT) fail_msg("the run returned %s, not stuck: %s", tr_strerror(rc), e);
  if (!(took < ENDS_WITHIN_S)) fail_msg("the stuck run ended only after %.1f s: %s", took, e);
  holds_all(e, want, n);
  assert_string_equal(tr_graph_warning(r->g), "");
}

/* A run whose every step trained: 0 within seconds, its warning naming every `want`, the
 * results of every step, and its final checkpoint on disk. */
static void keeps_the_run_naming(run *r, const char *const *want, size_t n) {
  double took;
  const int rc = run_timed(r, STEPS, &took);
  if (rc != 0) fail_msg("the run returned %s: %s", tr_strerror(rc), tr_graph_error(r->g));
  const char *w = tr_graph_warning(r->g);
  if (!(took < ENDS_WITHIN_S)) fail_msg("the run ended only after %.1f s: %s", took, w);
  holds_all(w, want, n);
  tr_train_result res;
  tr_job_result(r->j, &res);
  assert_int_equal(res.steps, STEPS);
  assert_int_equal(res.samples, (int64_t)STEPS * tr_job_config_of(r->j)->global_batch);
  if (!(res.final_loss < res.initial_loss))
    fail_msg("loss %.4f -> %.4f: the results are not the run's", res.initial_loss, res.final_loss);
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, r->checkpoint, err, sizeof err)) fail_msg("%s", err);
  uint64_t step = 0;
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  assert_int_equal(step, STEPS);
  tr_checkpoint_close(ck);
}

/* ---- the mistakes ------------------------------------------------------------------------- */

static void a_relay_that_keeps_its_credits_is_named_with_the_fix_in_seconds(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = false}; /* hears each release, passes none back */
  open_run(&r, "host:1", NULL);
  add_relay(&r, &rel, true, true);
  const char *want[] = {"'relay'", "edge loader -> relay 'inputs'", "all 4 credits",
                        "tr_edge_release", "tr_edge_credit_msg"};
  fails_naming(&r, want, sizeof want / sizeof *want);
  simplenet_job_close(&r.base);
}

static void a_relay_edge_without_notify_is_named_with_the_fix_in_seconds(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = true};
  open_run(&r, "host:1", NULL);
  add_relay(&r, &rel, true, false); /* TR_BATCH_INPUTS alone on its way out */
  const char *want[] = {"'relay'", "edge relay -> stage0 'inputs'", "TR_BATCH_NOTIFY",
                        "tr_edge_release"};
  fails_naming(&r, want, sizeof want / sizeof *want);
  simplenet_job_close(&r.base);
}

static void a_relay_added_as_an_actor_keeps_the_finished_run_and_names_the_fix(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = true};
  open_run(&r, "host:1", path("relay.safetensors"));
  add_relay(&r, &rel, false, true); /* tr_graph_add: the run waits for its tr_graph_done */
  const char *want[] = {"'relay'", "tr_graph_add", "tr_graph_done",
                        "must be a service (tr_graph_add_service)"};
  keeps_the_run_naming(&r, want, sizeof want / sizeof *want);
  simplenet_job_close(&r.base);
}

static void an_observer_that_keeps_a_report_keeps_the_finished_run_and_names_the_fix(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = true};
  observer o = {.releases = false};
  open_run(&r, "host:1", path("observer.safetensors"));
  add_relay(&r, &rel, true, true);
  add_observer(&r, &o);
  const char *want[] = {"'observer'", "edge coordinator -> observer 'report'",
                        "tr_edge_release", "last report"};
  keeps_the_run_naming(&r, want, sizeof want / sizeof *want);
  assert_true(o.heard >= 1 && o.heard <= 4); /* the edge's credits, then none */
  simplenet_job_close(&r.base);
}

/* ---- silent stretches that are not mistakes --------------------------------------------- */

/* The loss's backward pass of the stage's device sleeps 2 s, twice the quiet window, at each
 * of two steps: every other actor waits on the stage meanwhile, and the run ends by itself. */
static void a_device_op_slower_than_the_quiet_window_is_waited_for(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = true};
  open_run(&r, "fault(host:1;op=mse_b,us=2000000)", NULL);
  add_relay(&r, &rel, true, true);
  double took;
  const int rc = run_timed(&r, 2, &took);
  if (rc) fail_msg("the run returned %s: %s", tr_strerror(rc), tr_graph_error(r.g));
  assert_true(took >= 4);
  assert_string_equal(tr_graph_warning(r.g), "");
  simplenet_job_close(&r.base);
}

/* An observer that hands each report to a thread of its own, which takes 3 s over it and
 * then gives the report's credit back: once the stages are done, every actor waits, the
 * coordinator for those credits, but the work is out (tr_system_work_begin), so the graph
 * is not stuck. */
enum { SLOW_S = 3, SLOW_MAX = 16 };

typedef struct slow_observer {
  tr_graph *g;
  tr_edge *in;
  pthread_t threads[SLOW_MAX];
  int n;
} slow_observer;

static void *slow_release(void *arg) {
  slow_observer *o = arg;
  sleep(SLOW_S);
  tr_edge_release(o->in, 1);
  tr_system_work_end(tr_graph_system(o->g)); /* after the release: nothing is out then */
  return NULL;
}

static int slow_observer_receive(tr_actor *self, tr_msg *msg) {
  slow_observer *o = tr_actor_state(self);
  if (msg->type != &tr_report_type) return 0;
  if (((const tr_report_msg *)msg)->last) {
    tr_edge_release(o->in, 1);
    tr_graph_done(o->g, self);
    return 0;
  }
  if (o->n == SLOW_MAX) return tr_actor_fail(self, TR_ESTATE, "more reports than threads");
  tr_system_work_begin(tr_graph_system(o->g)); /* before the thread can end it */
  if (pthread_create(&o->threads[o->n], NULL, slow_release, o)) {
    tr_system_work_end(tr_graph_system(o->g));
    return tr_actor_fail(self, TR_ESYS, "pthread_create");
  }
  o->n++;
  return 0;
}
static const tr_behaviour slow_observer_behaviour = {.name = "observer",
                                                     .receive = slow_observer_receive};

static void work_out_on_a_thread_of_the_users_is_waited_for(void **state) {
  (void)state;
  run r;
  relay rel = {.gives_back = true};
  slow_observer o = {0};
  open_run(&r, "host:1", NULL);
  add_relay(&r, &rel, true, true);
  tr_actor *a;
  o.g = r.g;
  assert_int_equal(tr_graph_add(r.g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                        .behaviour = &slow_observer_behaviour,
                                                        .state = &o},
                                &a),
                   0);
  /* reports at 100, 200, 300, 400 take the edge's 4 credits; 500's and the last wait */
  assert_int_equal(tr_job_observe(r.j, a, 100, &o.in), 0);
  double took;
  const int rc = run_timed(&r, STEPS, &took);
  for (int i = 0; i < o.n; i++) pthread_join(o.threads[i], NULL);
  if (rc) fail_msg("the run returned %s: %s", tr_strerror(rc), tr_graph_error(r.g));
  assert_true(took >= SLOW_S);
  assert_string_equal(tr_graph_warning(r.g), "");
  simplenet_job_close(&r.base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_relay_that_keeps_its_credits_is_named_with_the_fix_in_seconds),
      cmocka_unit_test(a_relay_edge_without_notify_is_named_with_the_fix_in_seconds),
      cmocka_unit_test(a_relay_added_as_an_actor_keeps_the_finished_run_and_names_the_fix),
      cmocka_unit_test(an_observer_that_keeps_a_report_keeps_the_finished_run_and_names_the_fix),
      cmocka_unit_test(a_device_op_slower_than_the_quiet_window_is_waited_for),
      cmocka_unit_test(work_out_on_a_thread_of_the_users_is_waited_for),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
