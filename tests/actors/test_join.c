/* test_join.c — workers that join a running job, in one process (tr_job_join_worker,
 * async.join_at): the joiner's actors do not exist before its turn — a relay on another
 * worker's batches prints the graph at every step and never finds it early — and exist and
 * train after it (its
 * pushes are updates the server counts, its figures name it); a joiner whose turn never comes
 * is never created and the run ends cleanly without it; the wiring calls that do not apply
 * are refused naming the rule.
 *
 * Actors never call cmocka from their threads: they record what they saw, and the test
 * asserts once tr_graph_run has returned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

enum { WORKERS = 3, JOINER = WORKERS - 1, JOIN = 40, STEPS = 120, MARGIN = 10 };

/* A relay on worker 0's batch edge: at every batch it passes on, whether the graph has the
 * joiner's stage and loader. A batch of step k is sent as its loader takes step k, so steps
 * taken by then, and the server's updates, are not far past k. */
typedef struct watch {
  tr_graph *g;
  tr_edge *in, *out;
  int64_t first_seen;  /* the step of the first batch that found the joiner (-1: never) */
  int64_t last_absent; /* of the last that did not (-1: none) */
  int early;           /* batches of steps before JOIN - MARGIN that found it */
  int batches;
  bool loader_seen, seen_at_end;
} watch;

static bool in_graph(tr_graph *g, const char *name) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  tr_graph_print(g, f);
  fclose(f);
  char actor[48];
  snprintf(actor, sizeof actor, "actor '%s%d'", name, JOINER);
  const bool has = strstr(text, actor) != NULL;
  free(text);
  return has;
}

static int watch_receive(tr_actor *self, tr_msg *msg) {
  watch *w = tr_actor_state(self);
  if (msg->type == &tr_edge_credit_type) { /* the stage released batches: so does the relay */
    tr_edge_release(w->in, ((tr_edge_credit_msg *)msg)->count);
  } else if (msg->type == &tr_batch_type) {
    tr_batch_msg *b = (tr_batch_msg *)msg;
    const bool has = in_graph(w->g, "worker"), loader = in_graph(w->g, "loader");
    w->loader_seen |= loader;
    if (b->step >= 0) {
      w->batches++;
      if (has && w->first_seen < 0) w->first_seen = b->step;
      if (!has) w->last_absent = b->step;
      if ((has || loader) && b->step < JOIN - MARGIN) w->early++;
    } else {
      w->seen_at_end = has; /* the loader's last word: no more steps */
    }
    if (!tr_edge_acquire(w->out)) return tr_actor_fail(self, TR_ESTATE, "no credit to pass on");
    tr_edge_send(w->out, tr_batch_forward(b));
  }
  return 0;
}
static const tr_behaviour watch_behaviour = {.name = "watch", .receive = watch_receive};

typedef struct job {
  tr_model *m;
  tr_data *d;
  tr_device_list *devs; /* the workers' and, last, the server's */
  tr_graph *g;
  tr_job *j;
  tr_actor *server;
} job;

/* Workers 0 .. WORKERS-2 from the start, the last joining at `join_at`; each step slowed so
 * that the workers share them. */
static void job_open(job *x, int64_t join_at, int elastic) {
  char err[512];
  memset(x, 0, sizeof *x);
  assert_int_equal(tr_model_simplenet(&x->m), 0);
  tr_job_config c = tr_job_defaults();
  if (tr_data_open_for(&x->d, x->m, c.seed, NULL, NULL, err, sizeof err)) fail_msg("%s", err);
  if (tr_device_list_open(&x->devs, "fault(host:4;op=mse,us=300)", err, sizeof err))
    fail_msg("%s", err);
  c.model = x->m;
  c.data = x->d;
  c.global_batch = 64;
  c.layout.replicas = WORKERS;
  c.async.enabled = 1;
  c.async.staleness = 0;
  c.async.join_at = join_at;
  c.async.elastic = elastic;
  assert_int_equal(tr_graph_new(&x->g, &(tr_system_config){.watchdog_ms = 20000}), 0);
  if (tr_job_new(&x->j, x->g, &c, err, sizeof err)) fail_msg("%s", err);
}

static void job_close(job *x) {
  tr_graph_free(x->g); /* its actors use the job: first */
  tr_job_free(x->j);
  tr_device_list_close(x->devs);
  tr_data_close(x->d);
  tr_model_free(x->m);
}

/* The server, the workers that train from the start with their loaders (worker 0's batches
 * through the watch), the joiner and the coordinator. */
static void job_build(job *x, watch *w) {
  tr_job *j = x->j;
  tr_actor *stage, *loader, *coordinator, *a;
  *w = (watch){.g = x->g, .first_seen = -1, .last_absent = -1};
  if (tr_job_add_server(j, tr_device_list_at(x->devs, WORKERS), &x->server))
    fail_msg("%s", tr_job_error(j));
  for (int i = 0; i < JOINER; i++) {
    if (tr_job_add_worker(j, i, tr_device_list_at(x->devs, i), &stage) ||
        tr_job_serve(j, x->server, stage) || tr_job_add_loader(j, i, &loader))
      fail_msg("%s", tr_job_error(j));
    const unsigned both = TR_BATCH_INPUTS | TR_BATCH_TARGETS;
    if (i > 0 && tr_job_feed(j, loader, stage, stage)) fail_msg("%s", tr_job_error(j));
    if (i > 0) continue;
    assert_int_equal(tr_graph_add_service(x->g, &(tr_actor_config){.name = "watch",
                                                                   .kind = TR_ACTOR_PINNED,
                                                                   .behaviour = &watch_behaviour,
                                                                   .state = w},
                                          &a),
                     0);
    if (tr_job_connect_batches(j, loader, a, both, &w->in) ||
        tr_job_connect_batches(j, a, stage, both | TR_BATCH_NOTIFY, &w->out))
      fail_msg("%s", tr_job_error(j));
  }
  if (tr_job_join_worker(j, JOINER, tr_device_list_at(x->devs, JOINER)))
    fail_msg("%s", tr_job_error(j));
  if (tr_job_add_coordinator(j, &coordinator)) fail_msg("%s", tr_job_error(j));
}

static int64_t updates_counted(const tr_train_result *r) {
  int64_t n = 0;
  for (int i = 0; i < TR_TRAIN_STALENESS_BINS; i++) n += r->staleness_hist[i];
  return n;
}

static void a_joiner_exists_only_from_its_turn_and_trains_after(void **state) {
  (void)state;
  job x;
  watch w;
  job_open(&x, JOIN, 0);
  job_build(&x, &w);
  char *before = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&before, &size);
  tr_graph_print(x.g, f);
  fclose(f);
  if (strstr(before, "worker2") || strstr(before, "loader2"))
    fail_msg("the joiner exists before the run:\n%s", before);
  free(before);
  if (tr_graph_run(x.g, 0, STEPS, 0)) fail_msg("%s", tr_graph_error(x.g));
  tr_train_result r;
  tr_job_result(x.j, &r);
  assert_true(w.batches > 0);
  /* its loader comes as its stage starts, which may be after worker 0's last batch on a
   * loaded machine (simplenet's steps are short): looked for at the end as well */
  const bool loader = w.loader_seen || in_graph(x.g, "loader");
  if (w.early || w.first_seen < JOIN - MARGIN || w.last_absent < JOIN - MARGIN - 1 || !loader)
    fail_msg("the joiner was first in the graph at the batch of step %lld (%d batches before "
             "step %d found it or its loader; last without it: %lld; its loader %sseen)",
             (long long)w.first_seen, w.early, JOIN - MARGIN, (long long)w.last_absent,
             loader ? "" : "never ");
  assert_int_equal(r.steps, STEPS);
  assert_int_equal(updates_counted(&r), STEPS); /* the server's updates: every step's */
  assert_int_equal(r.workers_alive, WORKERS);
  if (strncmp(r.workers_joined, "2@", 2) || atoll(r.workers_joined + 2) < JOIN)
    fail_msg("workers_joined '%s': expected worker 2 at step %d or after", r.workers_joined, JOIN);
  if (!(r.utilization[JOINER] > 0))
    fail_msg("the worker that joined never pushed (utilization %g)", r.utilization[JOINER]);
  assert_true(r.clock_gap_max <= 0); /* SSP counted it from its join, level with the others */
  job_close(&x);
}

/* Its step never reached, by a step limit or a time limit: the others leaving at the end
 * leave no steps to hand it, so it is never added. */
static void a_joiner_whose_turn_never_comes_is_never_created(void **state) {
  (void)state;
  for (int timed = 0; timed < 2; timed++) {
    job x;
    watch w;
    job_open(&x, 1000000, 0);
    job_build(&x, &w);
    if (tr_graph_run(x.g, 0, timed ? 0 : 30, timed ? 0.2 : 0))
      fail_msg("%s", tr_graph_error(x.g));
    tr_train_result r;
    tr_job_result(x.j, &r);
    if (!timed) assert_int_equal(r.steps, 30);
    assert_int_equal(updates_counted(&r), r.steps);
    assert_int_equal(w.first_seen, -1);
    if (w.loader_seen || w.seen_at_end || r.workers_joined[0] || in_graph(x.g, "worker") ||
        in_graph(x.g, "loader"))
      fail_msg("%s run: the joiner was created (workers_joined '%s')", timed ? "a timed" : "a",
               r.workers_joined);
    assert_int_equal(r.workers_alive, WORKERS - 1);
    int commas = 0; /* the devices of the run: the two that trained, not the joiner's */
    for (const char *p = r.devices; *p; p++) commas += *p == ',';
    if (commas != WORKERS - 2 || !r.devices[0]) fail_msg("the run's devices: '%s'", r.devices);
    job_close(&x);
  }
}

static void wiring_a_joiner_is_refused_where_it_does_not_apply(void **state) {
  (void)state;
  job x;
  job_open(&x, JOIN, 0);
  tr_job *j = x.j;
  tr_actor *stage;
  /* before the server, its hook's owner */
  assert_int_equal(tr_job_join_worker(j, JOINER, tr_device_list_at(x.devs, JOINER)), TR_ESTATE);
  assert_int_equal(tr_job_add_server(j, tr_device_list_at(x.devs, WORKERS), &x.server), 0);
  /* a worker that trains from the start does not join */
  assert_int_equal(tr_job_join_worker(j, 0, tr_device_list_at(x.devs, 0)), TR_EINVAL);
  if (!strstr(tr_job_error(j), "async.join_workers")) fail_msg("%s", tr_job_error(j));
  /* in one process the joiner is added when it joins, not wired before */
  assert_int_equal(tr_job_add_worker(j, JOINER, tr_device_list_at(x.devs, JOINER), &stage),
                   TR_EINVAL);
  if (!strstr(tr_job_error(j), "tr_job_join_worker")) fail_msg("%s", tr_job_error(j));
  assert_int_equal(tr_job_join_worker(j, JOINER, tr_device_list_at(x.devs, JOINER)), 0);
  assert_int_equal(tr_job_join_worker(j, JOINER, tr_device_list_at(x.devs, JOINER)), TR_EINVAL);
  job_close(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_joiner_exists_only_from_its_turn_and_trains_after),
      cmocka_unit_test(a_joiner_whose_turn_never_comes_is_never_created),
      cmocka_unit_test(wiring_a_joiner_is_refused_where_it_does_not_apply),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
