/* test_wiring.c — a graph made with tr_graph_new(&g, NULL) never hangs silently: each of the
 * three one-line wiring mistakes a user's own actors make is named within seconds. A relay
 * connected without TR_BATCH_NOTIFY ends the run with TR_ETIMEDOUT, the error naming the
 * edge; an observer that never calls tr_graph_done, or never releases its report edge, is
 * stuck only at the end, when every step has trained: the run returns 0 and
 * tr_graph_warning names it. The default period is a minute; this test shortens it with the
 * TR_WATCHDOG_MS environment variable (set in tests/meson.build), which is how the default
 * itself is shown to catch each mistake; one case sets the period through the config and one
 * shows that TR_WATCHDOG_OFF turns the watchdog off. (test_mistakes.c: the same under the
 * default period, which a quiet graph does not wait for.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "simplenet_job.h"
#include "troupe.h"

enum { STEPS = 20, SEED = 1 };

/* ---- the user's actors, each with its mistake ------------------------------------------- */

typedef struct observer {
  tr_graph *g;
  tr_edge *in;
  bool release, done; /* what it does with each report */
  int heard;
} observer;

static int observer_receive(tr_actor *self, tr_msg *msg) {
  observer *o = tr_actor_state(self);
  if (msg->type != &tr_report_type) return 0;
  o->heard++;
  if (o->release) tr_edge_release(o->in, 1);
  if (((const tr_report_msg *)msg)->last && o->done) tr_graph_done(o->g, self);
  return 0;
}
static const tr_behaviour observer_behaviour = {.name = "observer", .receive = observer_receive};

/* A relay between the loader and the stage: passes each batch on and each release back. */
typedef struct relay {
  tr_edge *in, *out;
} relay;

static int relay_receive(tr_actor *self, tr_msg *msg) {
  relay *r = tr_actor_state(self);
  if (msg->type == &tr_batch_type) {
    if (!tr_edge_acquire(r->out)) return tr_actor_fail(self, TR_ESTATE, "no credit");
    tr_edge_send(r->out, tr_batch_forward((tr_batch_msg *)msg));
  } else if (msg->type == &tr_edge_credit_type) {
    tr_edge_release(r->in, ((tr_edge_credit_msg *)msg)->count);
  }
  return 0;
}
static const tr_behaviour relay_behaviour = {.name = "relay", .receive = relay_receive};

/* ---- a single-stage simplenet job ---------------------------------------------------------- */

typedef struct run {
  union {
    simplenet_job base;
    struct {
      SIMPLENET_JOB_FIELDS;
    };
  };
  tr_actor *stage;
} run;

static void open_run(run *r, const tr_system_config *config, int prefetch) {
  memset(r, 0, sizeof *r);
  tr_job_config c = tr_job_defaults();
  c.layout.prefetch = prefetch; /* fewer batches ahead than the run has steps */
  simplenet_job_open(&r->base, "host:1", SEED, config, c);
  assert_int_equal(tr_job_add_stage(r->j, 0, 0, tr_device_list_at(r->devs, 0), &r->stage), 0);
}

static void close_run(run *r) { simplenet_job_close(&r->base); }

static void add_observer(run *r, observer *o) {
  tr_actor *coordinator, *a;
  o->g = r->g;
  assert_int_equal(tr_job_add_coordinator(r->j, &coordinator), 0);
  assert_int_equal(tr_graph_add(r->g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                         .behaviour = &observer_behaviour,
                                                         .state = o},
                                &a),
                   0);
  assert_int_equal(tr_job_observe(r->j, a, 5, &o->in), 0);
}

/* Runs the graph, which must stop as stuck within seconds, its error holding every `want`. */
static void stops_naming(run *r, const char *const *want, size_t n) {
  const uint64_t t0 = tr_now_ns();
  const int rc = tr_graph_run(r->g, 0, STEPS, 0);
  const double took = (double)(tr_now_ns() - t0) / 1e9;
  const char *e = tr_graph_error(r->g);
  if (rc != TR_ETIMEDOUT) fail_msg("the run returned %s, not stuck: %s", tr_strerror(rc), e);
  for (size_t k = 0; k < n; k++)
    if (!strstr(e, want[k])) fail_msg("the error lacks \"%s\": %s", want[k], e);
  if (!(took < 10)) fail_msg("the stuck run stopped only after %.1f s", took);
}

/* Runs the graph, whose steps all train but whose end is stuck: it ends cleanly within
 * seconds, its warning holding every `want`, its figures those of every step. */
static void ends_warning_of(run *r, const char *const *want, size_t n) {
  const uint64_t t0 = tr_now_ns();
  const int rc = tr_graph_run(r->g, 0, STEPS, 0);
  const double took = (double)(tr_now_ns() - t0) / 1e9;
  const char *w = tr_graph_warning(r->g);
  if (rc != 0) fail_msg("the run returned %s: %s", tr_strerror(rc), tr_graph_error(r->g));
  for (size_t k = 0; k < n; k++)
    if (!strstr(w, want[k])) fail_msg("the warning lacks \"%s\": %s", want[k], w);
  if (!(took < 10)) fail_msg("the stuck end took %.1f s", took);
  tr_train_result res;
  tr_job_result(r->j, &res);
  assert_int_equal(res.steps, STEPS);
}

/* ---- the mistakes ----------------------------------------------------------------------- */

static void an_observer_that_never_says_done_is_named_and_the_run_kept(void **state) {
  (void)state;
  run r;
  observer o = {.release = true, .done = false};
  open_run(&r, NULL, 0);
  tr_actor *loader;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_job_feed(r.j, loader, r.stage, r.stage), 0);
  add_observer(&r, &o);
  const char *want[] = {"'observer'", "tr_graph_done", "last"};
  ends_warning_of(&r, want, 3);
  assert_true(o.heard >= 1);
  close_run(&r);
}

static void an_observer_that_never_releases_is_named_and_the_run_kept(void **state) {
  (void)state;
  run r;
  observer o = {.release = false, .done = true};
  open_run(&r, NULL, 0);
  tr_actor *loader;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_job_feed(r.j, loader, r.stage, r.stage), 0);
  add_observer(&r, &o);
  const char *want[] = {"'observer'", "edge coordinator -> observer", "tr_edge_release"};
  ends_warning_of(&r, want, 3);
  close_run(&r);
}

static void a_relay_without_notify_is_reported(void **state) {
  (void)state;
  run r;
  relay rel = {0};
  open_run(&r, &(tr_system_config){.watchdog_ms = 400}, 4); /* the period: the config's */
  tr_actor *loader, *relay_actor, *coordinator;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_graph_add_service(r.g, &(tr_actor_config){.name = "relay",
                                                                .kind = TR_ACTOR_LOOP,
                                                                .behaviour = &relay_behaviour,
                                                                .state = &rel},
                                        &relay_actor),
                   0);
  assert_int_equal(tr_job_connect_batches(r.j, loader, relay_actor, TR_BATCH_INPUTS, &rel.in), 0);
  /* the mistake: TR_BATCH_INPUTS alone, so the relay never hears of the stage's releases */
  assert_int_equal(tr_job_connect_batches(r.j, relay_actor, r.stage, TR_BATCH_INPUTS, &rel.out), 0);
  assert_int_equal(tr_job_connect_batches(r.j, loader, r.stage, TR_BATCH_TARGETS, NULL), 0);
  assert_int_equal(tr_job_add_coordinator(r.j, &coordinator), 0);
  const char *want[] = {"idle but not done", "'relay'", "edge loader -> relay 'inputs'"};
  stops_naming(&r, want, 3);
  close_run(&r);
}

/* TR_WATCHDOG_OFF: no watchdog, the period of the environment notwithstanding. A healthy run
 * with no watchdog at all says nothing of one; a config below TR_WATCHDOG_OFF is refused. */
static void the_watchdog_is_turned_off_not_on(void **state) {
  (void)state;
  tr_graph *g;
  assert_int_equal(tr_graph_new(&g, &(tr_system_config){.watchdog_ms = -2}), TR_EINVAL);
  assert_int_equal(tr_graph_new(&g, &(tr_system_config){.watchdog_ms = TR_WATCHDOG_OFF}), 0);
  assert_int_equal(tr_system_watchdog_ms(tr_graph_system(g)), 0);
  tr_graph_free(g);
  assert_int_equal(tr_graph_new(&g, NULL), 0);
  const char *env = getenv("TR_WATCHDOG_MS");
  assert_int_equal(tr_system_watchdog_ms(tr_graph_system(g)),
                   env ? atoi(env) : TR_GRAPH_WATCHDOG_MS);
  tr_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_observer_that_never_says_done_is_named_and_the_run_kept),
      cmocka_unit_test(an_observer_that_never_releases_is_named_and_the_run_kept),
      cmocka_unit_test(a_relay_without_notify_is_reported),
      cmocka_unit_test(the_watchdog_is_turned_off_not_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
