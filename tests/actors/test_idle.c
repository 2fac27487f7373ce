/* test_idle.c — where a device's time goes when it is not busy (actors/idle.h): the split of
 * a gap between two ranges of work on synthetic times (handling, waiting charged to its
 * reason, handover; the window; nested work; a forgotten evaluation), and in a run: every
 * device's busy time and idle kinds make its window, the stage in front of a slow one spends
 * its idle time waiting on its edge, and the schedule simulated at the run's own costs
 * leaves about the bubble the run measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "idle.h"
#include "troupe.h"

/* A tr__idle on synthetic times: no thread counters (the OS's kind stays 0). */
static tr__idle idle_from(uint64_t start) {
  tr__idle d = {.schedstat = -1, .window_start = start, .gap = start};
  return d;
}

static tr_msg stamped(uint64_t sent) { return (tr_msg){.sent_ns = sent}; }

/* A gap in which the actor never stopped is all its own handling. */
static void a_gap_without_a_stop_is_handling(void **state) {
  (void)state;
  tr__idle d = idle_from(1000);
  tr__idle_work(&d, 1000);
  tr__idle_rest(&d, 2000);
  tr__idle_work(&d, 2300);
  assert_int_equal(d.ns[TR__IDLE_HANDLING], 300);
  for (int k = 0; k < TR__WAIT_COUNT; k++) assert_int_equal(d.ns[k], 0);
  assert_int_equal(d.ns[TR__IDLE_HANDOVER], 0);
}

/* Handling until the stop, waiting (its reason's) until the newest message heard was sent,
 * handover from that send to the work. */
static void a_stop_is_waiting_until_the_send_then_handover(void **state) {
  (void)state;
  tr__idle d = idle_from(1000);
  tr__idle_work(&d, 1000);
  tr__idle_rest(&d, 2000);
  tr__idle_block(&d, TR__WAIT_EDGE, 0, 2100);
  tr__idle_block(&d, TR__WAIT_CREDIT, 0, 2200); /* the first reason holds */
  tr_msg early = stamped(2500), late = stamped(2900), older = stamped(2600);
  tr__idle_heard(&d, &early);
  tr__idle_heard(&d, &late);
  tr__idle_heard(&d, &older); /* the newest stamp counts, in whatever order they come */
  tr__idle_work(&d, 3000);
  assert_int_equal(d.ns[TR__IDLE_HANDLING], 100);
  assert_int_equal(d.ns[TR__WAIT_EDGE], 800);
  assert_int_equal(d.ns[TR__WAIT_CREDIT], 0);
  assert_int_equal(d.ns[TR__IDLE_HANDOVER], 100);
}

/* What was sent before the actor stopped was waiting in its mailbox: no one else's wait. A
 * stop without any stamp heard is all waiting. */
static void a_message_sent_before_the_stop_is_all_handover(void **state) {
  (void)state;
  tr__idle d = idle_from(1000);
  tr__idle_rest(&d, 1000);
  tr__idle_block(&d, TR__WAIT_LOADER, 0, 1000);
  tr_msg m = stamped(900);
  tr__idle_heard(&d, &m);
  tr__idle_work(&d, 1400);
  assert_int_equal(d.ns[TR__WAIT_LOADER], 0);
  assert_int_equal(d.ns[TR__IDLE_HANDOVER], 400);
  tr__idle_rest(&d, 2000);
  tr__idle_block(&d, TR__WAIT_STEP, 0, 2000);
  tr_msg none = stamped(0); /* not sent by an edge */
  tr__idle_heard(&d, &none);
  tr__idle_work(&d, 2500);
  assert_int_equal(d.ns[TR__WAIT_STEP], 500);
  assert_int_equal(d.ns[TR__IDLE_HANDOVER], 400);
}

/* Gaps count from the window's opening, a gap across it only from there; work inside work
 * (a bucket's sum inside a backward) opens no gap. */
static void only_the_window_counts_and_nested_work_is_one(void **state) {
  (void)state;
  tr__idle d = idle_from(1000);
  d.window_start = 0; /* not open yet */
  tr__idle_work(&d, 1500); /* before the window: not counted */
  tr__idle_rest(&d, 2000);
  tr__idle_open(&d, 2400);
  tr__idle_block(&d, TR__WAIT_EDGE, 3, 2000);
  tr__idle_work(&d, 2600); /* 2000..2600, counted from 2400 */
  assert_int_equal(d.ns[TR__WAIT_EDGE], 200);
  tr__idle_work(&d, 2700); /* nested */
  tr__idle_rest(&d, 2800); /* the inner ends: still at work */
  tr__idle_rest(&d, 3000); /* the outer ends: a gap opens */
  tr__idle_work(&d, 3050);
  assert_int_equal(d.ns[TR__IDLE_HANDLING], 50);
  tr__idle_rest(&d, 4000);
  tr__idle_forget(&d); /* an evaluation took the time: the gap starts again now */
  assert_true(d.gap > 4000);
  tr__idle_work(&d, d.gap + 10);
  assert_int_equal(d.ns[TR__IDLE_HANDLING], 60);
}

/* The actions that cannot run yet say what they wait for. */
static void each_action_names_what_it_waits_for(void **state) {
  (void)state;
  assert_int_equal(tr__idle_wait_of(TR_ACTION_RECV_ACT), TR__WAIT_EDGE);
  assert_int_equal(tr__idle_wait_of(TR_ACTION_RECV_GRAD), TR__WAIT_EDGE);
  assert_int_equal(tr__idle_wait_of(TR_ACTION_FORWARD), TR__WAIT_LOADER);
  assert_int_equal(tr__idle_wait_of(TR_ACTION_SEND_ACT), TR__WAIT_CREDIT);
  assert_int_equal(tr__idle_wait_of(TR_ACTION_BACKWARD_INPUT), TR__WAIT_CREDIT);
  assert_int_equal(tr__idle_wait_of(TR_ACTION_STEP), TR__WAIT_STEP);
}

static double idle_sum(const tr_idle_figures *f) {
  return f->edge + f->credit + f->loader + f->step + f->handover + f->handling + f->os + f->other;
}

/* host:1 sleeps 4 ms in each loss pass: host:0, in front of it, waits for its gradients. Every
 * device's busy time and idle kinds make the window, and the JSON says them. */
static void the_stage_before_a_slow_one_waits_on_its_edge(void **state) {
  (void)state;
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.strategy = TR_STRATEGY_PIPELINE;
  o.devices = "fault(host:2;dev=1,op=mse,us=4000)";
  o.steps = 30;
  tr_train_result r;
  char err[512];
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("tr_train_run: %s", err);
  assert_int_equal(r.ndevices, 2);
  for (int i = 0; i < r.ndevices; i++) {
    const tr_idle_figures *f = &r.idle[i];
    if (fabs(r.utilization[i] + idle_sum(f) - 1) > 1e-9)
      fail_msg("device %d: utilization %.4f and idle %.4f do not make the window", i,
               r.utilization[i], idle_sum(f));
    const double kinds[] = {f->edge, f->credit, f->loader, f->step, f->handover, f->handling, f->os};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) assert_true(kinds[k] >= 0);
  }
  const double idle0 = 1 - r.utilization[0];
  if (!(idle0 > 0.5 && r.idle[0].edge > 0.7 * idle0))
    fail_msg("host:0 idle %.3f, of which waiting on its edge %.3f", idle0, r.idle[0].edge);
  assert_true(r.utilization[1] > 0.5); /* the slow one works: its sleeps are inside its work */
  /* the schedule at the run's own costs: one slow stage leaves the other idle about half the
   * step, and what the run added to that (messages, the OS) is small beside the sleeps */
  if (!(r.bubble_schedule > 0.3 && fabs(r.bubble_fraction - r.bubble_schedule) < 0.1))
    fail_msg("bubble %.3f, at the run's own costs %.3f (theory %.3f)", r.bubble_fraction,
             r.bubble_schedule, r.bubble_theory);

  char *json = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&json, &len);
  assert_non_null(f);
  assert_int_equal(tr_train_result_json(&r, f), 0);
  fclose(f);
  const char *at = strstr(json, "\"idle_breakdown\":{\"devices\":[{\"edge\":");
  if (!at) fail_msg("no idle_breakdown in %s", json);
  assert_null(strstr(at, "\"replicas\":[{}")); /* nothing summed per replica: no replicas */
  free(json);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_gap_without_a_stop_is_handling),
      cmocka_unit_test(a_stop_is_waiting_until_the_send_then_handover),
      cmocka_unit_test(a_message_sent_before_the_stop_is_all_handover),
      cmocka_unit_test(only_the_window_counts_and_nested_work_is_one),
      cmocka_unit_test(each_action_names_what_it_waits_for),
      cmocka_unit_test(the_stage_before_a_slow_one_waits_on_its_edge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
