/* test_job_errors.c — every refusal of a job's wiring calls says which argument broke which
 * rule (tr_job_error), not a bare status: a layout the devices cannot hold, an observer before
 * the coordinator, stages out of range or twice, batch edges that carry nothing, a chain of
 * stages not next to each other, a group of different stages, and calls after the plan. And
 * a layout that uses fewer devices than it was given says so in its figures; tr_graph_run's
 * refusals say why in tr_graph_error. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "simplenet_job.h"
#include "troupe.h"

typedef simplenet_job job;

/* A simplenet job of `replicas` × `stages` on `devices`. */
static void open_job(job *x, int replicas, int stages, const char *devices) {
  tr_job_config c = tr_job_defaults();
  c.layout.replicas = replicas;
  c.layout.stages = stages;
  simplenet_job_open(x, devices, 1, NULL, c);
  assert_string_equal(tr_job_error(x->j), "");
}

static void close_job(job *x) { simplenet_job_close(x); }

/* The call returned `status` and tr_job_error holds every one of `want`. */
#define REFUSED(x, call, status, ...)                                                   \
  do {                                                                                  \
    assert_int_equal((call), (status));                                                 \
    const char *want_[] = {__VA_ARGS__};                                                \
    for (size_t k_ = 0; k_ < sizeof want_ / sizeof *want_; k_++)                        \
      if (!strstr(tr_job_error((x)->j), want_[k_]))                                     \
        fail_msg("%s: the message lacks \"%s\": %s", #call, want_[k_], tr_job_error((x)->j)); \
  } while (0)

#define REFUSED_GRAPH(x, call, want)                                                    \
  do {                                                                                  \
    assert_int_equal((call), TR_EINVAL);                                                \
    if (!strstr(tr_graph_error((x)->g), "tr_graph_run: " want))                         \
      fail_msg("%s: the message lacks \"%s\": %s", #call, want, tr_graph_error((x)->g)); \
  } while (0)

static void a_layout_the_devices_cannot_hold_is_named(void **state) {
  (void)state;
  job x;
  open_job(&x, 2, 1, "host:1");
  tr_actor *st[2];
  REFUSED(&x, tr_job_add_stages(x.j, x.devs, st), TR_EINVAL, "tr_job_add_stages",
          "devs holds 1 devices", "needs 2", "layout.replicas 2");
  close_job(&x);
}

static int ignore(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}

static void an_observer_before_the_coordinator_is_named(void **state) {
  (void)state;
  job x;
  open_job(&x, 1, 1, "host:1");
  tr_actor *st, *obs, *coord;
  assert_int_equal(tr_job_add_stages(x.j, x.devs, &st), 0);
  static const tr_behaviour b = {.name = "observer", .receive = ignore};
  assert_int_equal(tr_graph_add(x.g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                       .behaviour = &b},
                                &obs),
                   0);
  REFUSED(&x, tr_job_observe(x.j, obs, 1, NULL), TR_EINVAL, "tr_job_observe",
          "tr_job_add_coordinator first");
  assert_int_equal(tr_job_add_coordinator(x.j, &coord), 0);
  REFUSED(&x, tr_job_observe(x.j, obs, 0, NULL), TR_EINVAL, "tr_job_observe: every 0");
  REFUSED(&x, tr_job_observe(x.j, NULL, 1, NULL), TR_EINVAL, "observer is NULL");
  REFUSED(&x, tr_job_add_coordinator(x.j, &coord), TR_EINVAL, "has its coordinator already");
  assert_int_equal(tr_job_observe(x.j, obs, 1, NULL), 0);
  close_job(&x);
}

static void wiring_mistakes_are_named(void **state) {
  (void)state;
  job x;
  open_job(&x, 1, 2, "host:2");
  tr_device *d0 = tr_device_list_at(x.devs, 0);
  tr_actor *s0, *s1, *other, *loader;
  REFUSED(&x, tr_job_add_stage(x.j, 1, 0, d0, &s0), TR_EINVAL, "replica 1",
          "replicas 0 to 0");
  REFUSED(&x, tr_job_add_stage(x.j, 0, 2, d0, &s0), TR_EINVAL, "stage 2", "stages 0 to 1");
  REFUSED(&x, tr_job_add_stage(x.j, 0, 0, NULL, &s0), TR_EINVAL, "dev is NULL");
  assert_int_equal(tr_job_add_stage(x.j, 0, 0, d0, &s0), 0);
  REFUSED(&x, tr_job_add_stage(x.j, 0, 0, d0, &other), TR_EINVAL, "added already");
  assert_int_equal(tr_job_add_stage(x.j, 0, 1, tr_device_list_at(x.devs, 1), &s1), 0);
  REFUSED(&x, tr_job_chain(x.j, s1, s0), TR_EINVAL, "tr_job_chain", "not the stage after");
  REFUSED(&x, tr_job_add_loader(x.j, 3, &loader), TR_EINVAL, "tr_job_add_loader: replica 3");
  assert_int_equal(tr_job_add_loader(x.j, 0, &loader), 0);
  REFUSED(&x, tr_job_connect_batches(x.j, loader, s0, TR_BATCH_NOTIFY, NULL), TR_EINVAL,
          "carries nothing");
  REFUSED(&x, tr_job_connect_batches(x.j, loader, NULL, TR_BATCH_INPUTS, NULL), TR_EINVAL,
          "to is NULL");
  tr_actor *group[2] = {s0, s1};
  REFUSED(&x, tr_job_group(x.j, group, 2), TR_EINVAL, "members[1] is another stage");
  REFUSED(&x, tr_job_add_worker(x.j, 0, d0, &other), TR_EINVAL, "not asynchronous");
  /* once the plan is closed, wiring is refused as such */
  tr_actor *coord;
  assert_int_equal(tr_job_chain(x.j, s0, s1), 0);
  assert_int_equal(tr_job_feed(x.j, loader, s0, s1), 0);
  assert_int_equal(tr_job_add_coordinator(x.j, &coord), 0);
  char err[512];
  if (tr_job_plan(x.j, err, sizeof err)) fail_msg("%s", err);
  REFUSED(&x, tr_job_chain(x.j, s0, s1), TR_ESTATE, "tr_job_chain: the plan is closed");
  close_job(&x);
}

/* Runs x's job of `replicas` replicas (stages of one device each) for 4 steps. */
static void run_dp(job *x, int replicas, tr_train_result *r) {
  tr_actor *st[4], *loader, *coord;
  assert_int_equal(tr_job_add_stages(x->j, x->devs, st), 0);
  for (int k = 0; k < replicas; k++) {
    assert_int_equal(tr_job_add_loader(x->j, k, &loader), 0);
    assert_int_equal(tr_job_feed(x->j, loader, st[k], st[k]), 0);
  }
  assert_int_equal(tr_job_add_coordinator(x->j, &coord), 0);
  if (tr_graph_run(x->g, 0, 4, 0)) fail_msg("%s", tr_graph_error(x->g));
  tr_job_result(x->j, r);
}

/* dp of two replicas given host:3 says, in its figures and summary, that it used two of
 * the three devices; given host:2 it says nothing of the kind. */
static void a_layout_smaller_than_its_devices_says_so(void **state) {
  (void)state;
  job x;
  tr_train_result r;
  open_job(&x, 2, 1, "host:3");
  run_dp(&x, 2, &r);
  close_job(&x);
  assert_int_equal(r.ndevices, 2);
  if (!strstr(r.devices_note, "2 of the 3 devices given"))
    fail_msg("devices_note: \"%s\"", r.devices_note);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(tr_train_result_summary(&r, f), 0);
  fclose(f);
  if (!strstr(text, "uses 2 of the 3 devices given")) fail_msg("the summary: %s", text);
  free(text);
  open_job(&x, 2, 1, "host:2");
  run_dp(&x, 2, &r);
  close_job(&x);
  assert_string_equal(r.devices_note, "");
}

/* tr_graph_run's refusals name the argument and the rule in tr_graph_error. */
static void a_graph_run_refused_says_why(void **state) {
  (void)state;
  job x;
  open_job(&x, 1, 1, "host:1");
  REFUSED_GRAPH(&x, tr_graph_run(x.g, 0, 0, 0), "end_step 0 and seconds 0");
  REFUSED_GRAPH(&x, tr_graph_run(x.g, 5, 3, 0), "end_step 3: give a step after first_step (5)");
  REFUSED_GRAPH(&x, tr_graph_run(x.g, -1, 3, 0), "first_step -1");
  close_job(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_layout_the_devices_cannot_hold_is_named),
      cmocka_unit_test(an_observer_before_the_coordinator_is_named),
      cmocka_unit_test(wiring_mistakes_are_named),
      cmocka_unit_test(a_layout_smaller_than_its_devices_says_so),
      cmocka_unit_test(a_graph_run_refused_says_why),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
