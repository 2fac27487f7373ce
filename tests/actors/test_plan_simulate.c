/* test_plan_simulate.c — a step predicted from costs (tr_plan.h: tr_plan_simulate).
 *
 * With equal costs the simulated bubble is each schedule's own, exactly (tr_schedule_bubble,
 * the papers' fractions); with unequal ones the makespan is what the pipeline's algebra says
 * (a slow stage paces 1F1B: the stages before it, then m of its own micro-batches);
 * latencies and the step add where they lie on the critical path; a device holds no more
 * micro-batches than the schedule's slots; the gradient edge's two credits hold the last
 * stage back as they hold the stage actors; bad costs are refused naming the entry.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

enum { VS_MAX = 8 * 4 };

/* a == b within tol (cmocka's float assertion is single precision) */
#define assert_close(a, b, tol) assert_near_(a, b, tol, #a, __LINE__)
static void assert_near_(double a, double b, double tol, const char *what, int line) {
  if (!(fabs(a - b) <= tol)) fail_msg("line %d: %s is %.15g, want %.15g", line, what, a, b);
}

static tr_schedule *schedule(tr_schedule_kind kind, int p, int m, int v) {
  tr_schedule *sc;
  assert_int_equal(tr_schedule_new(&sc, &(tr_schedule_config){.kind = kind, .stages = p,
                                                              .microbatches = m, .chunks = v}),
                   0);
  return sc;
}

/* Simulates sc with every F costing f, every B b and every W w (w 0: not split). */
static tr_plan_step uniform(const tr_schedule *sc, double f, double b, double w) {
  double F[VS_MAX], B[VS_MAX], W[VS_MAX];
  for (int k = 0; k < VS_MAX; k++) F[k] = f, B[k] = b + w, W[k] = w;
  tr_plan_step st;
  char err[256] = "";
  const int rc = tr_plan_simulate(sc, &(tr_plan_costs){.forward = F, .backward = B,
                                                      .backward_weight = W},
                                  &st, err, sizeof err);
  if (rc) fail_msg("%s", err);
  return st;
}

/* Every schedule, p ≤ 8, m ≤ 16 (interleaved: p ≥ 2, v 2 to 4, p dividing m, where its
 * formula is exact): the bubble is tr_schedule_bubble's, to rounding. */
static void equal_costs_give_each_schedules_own_bubble(void **state) {
  (void)state;
  const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B,
                                    TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};
  int checked = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (int p = 1; p <= 8; p++)
      for (int m = 1; m <= 16; m++)
        for (int v = 1; v <= 4; v++) {
          const bool inter = kinds[i] == TR_SCHEDULE_INTERLEAVED;
          if (inter ? p < 2 || v < 2 || m % p || p * v > VS_MAX : v > 1) continue;
          tr_schedule *sc = schedule(kinds[i], p, m, v);
          /* zb1's formula has F, B and W alike; the others', any F and B */
          const tr_plan_step st =
              kinds[i] == TR_SCHEDULE_ZB1 ? uniform(sc, 1, 1, 1) : uniform(sc, 1, 2, 0);
          const double want = tr_schedule_bubble(sc);
          if (fabs(st.bubble - want) > 1e-12)
            fail_msg("%s p=%d m=%d v=%d: bubble %.15g simulated, the schedule's %.15g",
                     tr_schedule_kind_name(kinds[i]), p, m, v, st.bubble, want);
          assert_int_equal(st.devices, p);
          for (int s = 0; s < p; s++) {
            assert_true(st.peak[s] >= 1 && st.peak[s] <= tr_schedule_slots(sc, s));
            assert_true(st.finish[s] <= st.seconds);
          }
          tr_schedule_free(sc);
          checked++;
        }
  assert_true(checked > 300);
}

/* 1F1B and gpipe with equal costs: (m + p − 1)(F + B), the pipeline's fill and drain. */
static void makespan_is_fill_plus_drain(void **state) {
  (void)state;
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 12; m++) {
      tr_schedule *sc = schedule(TR_SCHEDULE_1F1B, p, m, 1);
      const tr_plan_step st = uniform(sc, 0.25, 0.5, 0);
      assert_close(st.seconds, (m + p - 1) * 0.75, 1e-12);
      /* each device computed m forwards and m backwards */
      for (int s = 0; s < p; s++) assert_close(st.busy[s], m * 0.75, 1e-12);
      tr_schedule_free(sc);
    }
}

/* One slow stage k paces 1F1B. Its warm-up forwards (3 each) last as long as the way down
 * and back of its first micro-batch below it (3 a stage), so from its first forward on it
 * never waits: the step is the stages above it once (F + B of the first micro-batch's way
 * down and of the last one's way back), then m micro-batches of its own. */
static void the_slowest_stage_paces_1f1b(void **state) {
  (void)state;
  for (int p = 2; p <= 4; p++)
    for (int slow = 0; slow < p; slow++)
      for (int m = p; m <= 10; m++) {
        double F[VS_MAX], B[VS_MAX], sum = 0, max = 0;
        for (int s = 0; s < p; s++) {
          F[s] = s == slow ? 3 : 1;
          B[s] = 2 * F[s];
          if (s < slow) sum += F[s] + B[s];
          if (s == slow) max = F[s] + B[s];
        }
        tr_schedule *sc = schedule(TR_SCHEDULE_1F1B, p, m, 1);
        tr_plan_step st;
        char err[256];
        assert_int_equal(tr_plan_simulate(sc, &(tr_plan_costs){.forward = F, .backward = B},
                                          &st, err, sizeof err),
                         0);
        if (fabs(st.seconds - (sum + m * max)) > 1e-12)
          fail_msg("p=%d slow=%d m=%d: %g simulated, %g by the algebra", p, slow, m, st.seconds,
                   sum + m * max);
        tr_schedule_free(sc);
      }
}

/* Latencies lie on the critical path of one micro-batch's way down and back; a device's
 * step ends its part and counts as busy. */
static void latencies_and_the_step_add_where_they_lie(void **state) {
  (void)state;
  tr_schedule *sc = schedule(TR_SCHEDULE_1F1B, 3, 1, 1);
  const double F[] = {1, 1, 1}, B[] = {2, 2, 2}, act[] = {0.5, 0.25, 0}, grad[] = {0, 0.125, 4};
  const double step[] = {0.5, 0, 0};
  tr_plan_step st;
  char err[256];
  assert_int_equal(tr_plan_simulate(sc, &(tr_plan_costs){.forward = F, .backward = B,
                                                        .act_latency = act,
                                                        .grad_latency = grad, .step = step},
                                    &st, err, sizeof err),
                   0);
  /* down: 1 + 0.5 + 1 + 0.25 + 1; back: 2 + 4 + 2 + 0.125 + 2; then device 0's step */
  assert_close(st.finish[0], 3.75 + 10.125 + 0.5, 1e-12);
  assert_close(st.seconds, st.finish[0], 1e-12);
  assert_close(st.finish[2], 1 + 0.5 + 1 + 0.25 + 1 + 2, 1e-12);
  assert_close(st.busy[0], 3.5, 1e-12);
  assert_close(st.bubble, 1 - (3.5 + 3 + 3) / (3 * st.seconds), 1e-12);
  tr_schedule_free(sc);
}

/* The gradient edge has two credits, as the job wires it, each back when the previous
 * stage takes its gradient: under gpipe the last stage's third backward waits for the
 * first gradient to land (a slow link: 10), its fourth for the second. */
static void two_gradient_credits_hold_the_last_stage_back(void **state) {
  (void)state;
  tr_schedule *sc = schedule(TR_SCHEDULE_GPIPE, 2, 4, 1);
  const double one[] = {1, 1}, grad[] = {0, 10};
  tr_plan_step st;
  char err[256];
  assert_int_equal(tr_plan_simulate(sc, &(tr_plan_costs){.forward = one, .backward = one,
                                                        .grad_latency = grad},
                                    &st, err, sizeof err),
                   0);
  /* device 1: F [1, 5), B0 B1 [5, 7) landing at 16 and 17; B2 at 16 (lands 27), B3 at 17;
   * device 0: B0 16, B1 17, B2 27, B3 28 → 29 (with credits enough it would be 20) */
  assert_close(st.finish[1], 18, 1e-12);
  assert_close(st.seconds, 29, 1e-12);
  tr_schedule_free(sc);
}

/* zb1 puts the weight gradients where 1F1B idles: faster with the same total work. */
static void zero_bubble_fills_what_1f1b_leaves_idle(void **state) {
  (void)state;
  tr_schedule *zb = schedule(TR_SCHEDULE_ZB1, 4, 8, 1), *ofob = schedule(TR_SCHEDULE_1F1B, 4, 8, 1);
  const tr_plan_step a = uniform(zb, 1, 1, 1), b = uniform(ofob, 1, 1, 1);
  assert_true(a.seconds < b.seconds);
  for (int s = 0; s < 4; s++) assert_close(a.busy[s], b.busy[s], 1e-12);
  tr_schedule_free(zb);
  tr_schedule_free(ofob);
}

static void expect_refused(const tr_plan_costs *c, const char *want) {
  tr_schedule *sc = schedule(TR_SCHEDULE_1F1B, 2, 2, 1);
  tr_plan_step st;
  char err[256] = "";
  assert_int_equal(tr_plan_simulate(sc, c, &st, err, sizeof err), TR_EINVAL);
  if (!strstr(err, want)) fail_msg("the error \"%s\" does not say \"%s\"", err, want);
  tr_schedule_free(sc);
}

static void bad_costs_are_refused_naming_the_entry(void **state) {
  (void)state;
  const double ok[] = {1, 1}, neg[] = {1, -1}, nan_[] = {NAN, 1}, big[] = {2, 1};
  expect_refused(&(tr_plan_costs){.forward = neg}, "costs.forward[1] is -1");
  expect_refused(&(tr_plan_costs){.forward = ok, .backward = ok, .step = nan_},
                 "costs.step[0] is nan");
  expect_refused(&(tr_plan_costs){.forward = ok, .backward = ok, .backward_weight = big},
                 "costs.backward_weight[0] 2 is more than the backward");
}

/* No cost at all: nothing takes time, the bubble is 0 and nothing divides by zero. */
static void a_step_of_no_cost_takes_no_time(void **state) {
  (void)state;
  tr_schedule *sc = schedule(TR_SCHEDULE_GPIPE, 3, 4, 1);
  tr_plan_step st;
  char err[256];
  assert_int_equal(tr_plan_simulate(sc, &(tr_plan_costs){0}, &st, err, sizeof err), 0);
  assert_close(st.seconds, 0, 0);
  assert_close(st.bubble, 0, 0);
  tr_schedule_free(sc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(equal_costs_give_each_schedules_own_bubble),
      cmocka_unit_test(makespan_is_fill_plus_drain),
      cmocka_unit_test(the_slowest_stage_paces_1f1b),
      cmocka_unit_test(latencies_and_the_step_add_where_they_lie),
      cmocka_unit_test(two_gradient_credits_hold_the_last_stage_back),
      cmocka_unit_test(zero_bubble_fills_what_1f1b_leaves_idle),
      cmocka_unit_test(bad_costs_are_refused_naming_the_entry),
      cmocka_unit_test(a_step_of_no_cost_takes_no_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
