/* test_plan_compose.c — a step composed from costs (planner.h): the devices' sharing of the
 * machine (tr__plan_slowdown) and an asynchronous job's rate (tr__plan_async).
 *
 * Sharing: D devices 1.2× slower all at once are 1.2× slower when all D compute, and in
 * proportion when fewer do on average (a pipeline's bubble); a tensor group's members were
 * measured together, so only what D at once add beyond the group's T counts (tp: nothing).
 *
 * R alike workers and one server with fixed times: free running, the rate is R over a
 * worker's cycle (compute, two hand-overs, its update at the server); a server busy all the
 * time bounds it at one update per apply; SSP's bound of 0 makes rounds (the server applies
 * all R before any reply); devices computing at once slow compute and apply alike, in
 * proportion to how many compute on average, and the server's thread at work takes its
 * share of CPUs too few for it and them. Each answer here is worked by hand.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "planner.h"

#define assert_close(a, b) assert_near_(a, b, #a, __LINE__)
static void assert_near_(double a, double b, const char *what, int line) {
  if (!(fabs(a - b) <= 1e-9 * fabs(b)))
    fail_msg("line %d: %s is %.15g, want %.15g", line, what, a, b);
}

static tr__async_step rate(tr__async_costs c) {
  tr__async_step s;
  assert_int_equal(tr__plan_async(&c, &s), 0);
  return s;
}

/* Two workers of 80 ms, hand-overs of 1 ms, updates of 8 ms: 2 / 90 ms, staleness 1. */
static void free_running_workers_take_turns(void **state) {
  (void)state;
  const tr__async_step s = rate((tr__async_costs){.workers = 2, .compute = 0.08, .latency = 1e-3,
                                                 .apply = 8e-3, .together = 1, .staleness = -1});
  assert_close(s.pushes_per_s, 2 / 0.09);
  assert_close(s.cycle, 0.09);
  assert_close(s.utilization, 0.08 / 0.09);
  assert_close(s.staleness, 1);
  assert_false(s.server_bound);
  /* a bound of a push or more holds no worker alike back */
  const tr__async_step b = rate((tr__async_costs){.workers = 2, .compute = 0.08, .latency = 1e-3,
                                                 .apply = 8e-3, .together = 1, .staleness = 2});
  assert_close(b.pushes_per_s, s.pushes_per_s);
}

/* Eight workers of 10 ms on updates of 5 ms: free running would be 8 / 15 ms = 533/s, but
 * the server applies 200 a second. Each worker's cycle is 8 / 200 = 40 ms, 10 of compute. */
static void a_busy_server_bounds_the_rate(void **state) {
  (void)state;
  const tr__async_step s = rate((tr__async_costs){.workers = 8, .compute = 0.01, .apply = 5e-3,
                                                 .together = 1, .staleness = -1});
  assert_true(s.server_bound);
  assert_close(s.pushes_per_s, 200);
  assert_close(s.cycle, 0.04);
  assert_close(s.utilization, 0.25);
}

/* SSP with bound 0: rounds of 3 workers' compute (30 ms), 2 hand-overs (2 ms) and the
 * server's 3 updates (3 × 4 ms): 3 pushes per 44 ms; staleness 0, 1, 2 in a round: 1. */
static void a_bound_of_zero_makes_rounds(void **state) {
  (void)state;
  const tr__async_step s = rate((tr__async_costs){.workers = 3, .compute = 0.03, .latency = 1e-3,
                                                 .apply = 4e-3, .together = 1, .staleness = 0});
  assert_close(s.cycle, 0.044);
  assert_close(s.pushes_per_s, 3 / 0.044);
  assert_close(s.staleness, 1);
}

/* Two workers of 90 ms, updates of 10 ms, 1.5× slower both at once: alone they compute 90%
 * of a 100 ms cycle, so 1.8 devices at once on average and 1 + 0.5 × 0.8 = 1.4× slower:
 * 126 ms and 14 ms, 2 pushes per 140 ms. */
static void devices_at_once_slow_the_workers_by_how_many_compute(void **state) {
  (void)state;
  const tr__async_step s = rate((tr__async_costs){.workers = 2, .compute = 0.09, .apply = 0.01,
                                                 .together = 1.5, .staleness = -1});
  assert_close(s.pushes_per_s, 2 / 0.14);
  assert_close(s.utilization, 0.126 / 0.14);
  /* one worker alone is not slowed */
  const tr__async_step one = rate((tr__async_costs){.workers = 1, .compute = 0.09, .apply = 0.01,
                                                   .together = 1.5, .staleness = -1});
  assert_close(one.pushes_per_s, 10);
}

/* Two workers of 90 ms and updates of 10 ms on one CPU, 2× slower both at once (the CPU's
 * halves): counting the workers alone, 1.8 at once make them 1.8× slower, 2 pushes per
 * 180 ms. The server's thread at work 0.2 of the time makes 2 threads at once for the one
 * CPU: 2× slower, 10 pushes a second, each push the CPU's 100 ms. Devices of their own
 * (cpus 0) leave the server's thread a CPU of its own. */
static void the_servers_thread_takes_its_share_of_the_cpus(void **state) {
  (void)state;
  const tr__async_costs c = {.workers = 2, .compute = 0.09, .apply = 0.01, .together = 2,
                             .staleness = -1, .cpus = 1};
  const tr__async_step s = rate(c);
  assert_close(s.pushes_per_s, 10);
  assert_close(s.utilization, 0.9);
  tr__async_costs own = c;
  own.cpus = 0;
  assert_close(rate(own).pushes_per_s, 2 / 0.18);
  own.cpus = 4; /* CPUs enough for the workers and the server */
  assert_close(rate(own).pushes_per_s, 2 / 0.18);
}

static void devices_at_once_slow_a_layout_by_what_is_beyond_its_groups(void **state) {
  (void)state;
  /* on 8 CPUs: the factors as measured */
  assert_close(tr__plan_slowdown(1.2, 1, 2, 1, 8, 2), 1.2);       /* dp of 2: both at work */
  assert_close(tr__plan_slowdown(1.2, 1, 2, 1, 8, 1.5), 1.1);     /* a pipeline, half busy */
  assert_close(tr__plan_slowdown(1.2, 1, 2, 1, 8, 1), 1);         /* mp: one at a time */
  assert_close(tr__plan_slowdown(2.2, 1.1, 4, 2, 8, 4), 2);       /* dp of tensor groups of 2 */
  assert_close(tr__plan_slowdown(2.2, 1.1, 4, 2, 8, 2.5), 1.5);   /* ... a pipeline of them */
  assert_close(tr__plan_slowdown(1.3, 1.3, 2, 2, 8, 2), 1);       /* tp: in the members' times */
  assert_close(tr__plan_slowdown(1.1, 1.3, 4, 2, 8, 4), 1);       /* never faster than measured */
  assert_close(tr__plan_slowdown(3, 1, 1, 1, 8, 1), 1);           /* one device */
  /* on 2 CPUs: 4 threads have half a CPU each, whatever a loaded machine measured (mlp
   * host:4's together 4 of 1.81 over together 2 of 1.61), and 2 members measured together
   * had a CPU each: dp of groups of 2 is twice as slow; 4 members measured together on 2
   * CPUs (tp) have it in their times already */
  assert_close(tr__plan_slowdown(1.81, 1.61, 4, 2, 2, 4), 2);
  assert_close(tr__plan_slowdown(1.81, 1, 4, 1, 2, 4), 2);        /* dp of 4 */
  assert_close(tr__plan_slowdown(1.81, 1.81, 4, 4, 2, 4), 1);     /* tp of 4 */
}

static void bad_costs_are_refused(void **state) {
  (void)state;
  tr__async_step s;
  assert_int_equal(tr__plan_async(&(tr__async_costs){.workers = 0, .compute = 1, .together = 1},
                                  &s), TR_EINVAL);
  assert_int_equal(tr__plan_async(&(tr__async_costs){.workers = 2, .compute = -1, .together = 1},
                                  &s), TR_EINVAL);
  assert_int_equal(tr__plan_async(&(tr__async_costs){.workers = 2, .compute = NAN, .together = 1},
                                  &s), TR_EINVAL);
  assert_int_equal(tr__plan_async(&(tr__async_costs){.workers = 2, .compute = 1, .together = 0.5},
                                  &s), TR_EINVAL);
  assert_int_equal(tr__plan_async(&(tr__async_costs){.workers = 2, .compute = 1, .together = 1,
                                                     .cpus = -1}, &s), TR_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(free_running_workers_take_turns),
      cmocka_unit_test(a_busy_server_bounds_the_rate),
      cmocka_unit_test(a_bound_of_zero_makes_rounds),
      cmocka_unit_test(devices_at_once_slow_the_workers_by_how_many_compute),
      cmocka_unit_test(the_servers_thread_takes_its_share_of_the_cpus),
      cmocka_unit_test(devices_at_once_slow_a_layout_by_what_is_beyond_its_groups),
      cmocka_unit_test(bad_costs_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
