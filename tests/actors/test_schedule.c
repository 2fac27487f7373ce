/* test_schedule.c — pipeline schedules (tr_schedule.h) run in a discrete-event simulator.
 *
 * The simulator runs the action lists of all p stages at once: F takes tf, B takes tb, the
 * optimizer step and communication take no time, buffers are unbounded, and a receive
 * waits until the matching send has happened. Since stages share nothing but messages,
 * each action starts at max(its stage's clock, the time its message was sent), so sweeping
 * the stages round-robin until none can move gives the same times as an event queue, and
 * a sweep that moves nobody while actions remain is a deadlock. For every p ≤ 8, m ≤ 32 and
 * schedule it checks the pairing of messages, the order of computation, the makespan and
 * bubble against the textbook, and the activations each stage holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

enum { P_MAX = 8, M_MAX = 32, ACT = 0, GRAD = 1 };

static const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B};

/* What one simulated step of the pipeline did. */
typedef struct outcome {
  bool finished;         /* every stage reached the end of its list */
  char error[200];       /* the first broken rule, "" if none */
  long makespan, busy;   /* busy: the sum over stages of time inside F and B */
  int peak[P_MAX];       /* most micro-batches with live activations, per stage */
} outcome;

typedef struct sim {
  int p, m;
  long tf, tb;
  const tr_action *list[P_MAX];
  size_t n[P_MAX], pc[P_MAX];
  long clock[P_MAX];
  int live[P_MAX];
  long f_end[P_MAX][M_MAX], b_end[P_MAX][M_MAX]; /* -1 until done */
  int nf[P_MAX][M_MAX], nb[P_MAX][M_MAX];
  /* messages [ACT or GRAD][from][to][mb] */
  int sent[2][P_MAX][P_MAX][M_MAX], received[2][P_MAX][P_MAX][M_MAX];
  long sent_at[2][P_MAX][P_MAX][M_MAX];
  outcome *o;
} sim;

static void broken(sim *x, int s, const tr_action *a, const char *rule) {
  if (x->o->error[0]) return;
  snprintf(x->o->error, sizeof x->o->error, "p=%d m=%d stage %d, %s of micro-batch %d: %s",
           x->p, x->m, s, tr_action_kind_name(a->kind), a->mb, rule);
}

/* The message a send or receive is about: [ACT or GRAD][from][to]; false if its peer is not
 * the neighbour that kind of message goes to. */
typedef struct route {
  int kind, from, to;
} route;

static bool route_of(sim *x, int s, const tr_action *a, route *r) {
  bool sending = a->kind == TR_ACTION_SEND_ACT || a->kind == TR_ACTION_SEND_GRAD;
  bool down = a->kind == TR_ACTION_SEND_ACT || a->kind == TR_ACTION_RECV_GRAD;
  if (a->peer != (down ? s + 1 : s - 1) || a->peer < 0 || a->peer >= x->p) {
    broken(x, s, a, "peer is not the neighbour this kind of message goes to");
    return false;
  }
  r->kind = a->kind == TR_ACTION_SEND_ACT || a->kind == TR_ACTION_RECV_ACT ? ACT : GRAD;
  r->from = sending ? s : a->peer;
  r->to = sending ? a->peer : s;
  return true;
}

/* Runs stage s's next action if it can start; false if it waits on a message. */
static bool advance(sim *x, int s) {
  const tr_action *a = &x->list[s][x->pc[s]];
  int i = a->mb;
  route r;
  if (a->kind != TR_ACTION_STEP && (i < 0 || i >= x->m)) {
    broken(x, s, a, "no such micro-batch");
    return false;
  }
  switch (a->kind) {
  case TR_ACTION_RECV_ACT:
  case TR_ACTION_RECV_GRAD:
    if (!route_of(x, s, a, &r) || !x->sent[r.kind][r.from][r.to][i]) return false;
    if (++x->received[r.kind][r.from][r.to][i] > 1) broken(x, s, a, "received twice");
    if (x->sent_at[r.kind][r.from][r.to][i] > x->clock[s])
      x->clock[s] = x->sent_at[r.kind][r.from][r.to][i];
    break;
  case TR_ACTION_SEND_ACT:
  case TR_ACTION_SEND_GRAD:
    if (!route_of(x, s, a, &r)) return false;
    if (++x->sent[r.kind][r.from][r.to][i] > 1) broken(x, s, a, "sent twice");
    if (!(r.kind == ACT ? x->nf[s][i] : x->nb[s][i])) broken(x, s, a, "sent before computed");
    x->sent_at[r.kind][r.from][r.to][i] = x->clock[s];
    break;
  case TR_ACTION_FORWARD:
    if (x->nf[s][i]++) broken(x, s, a, "a second forward");
    if (s > 0 && !(x->f_end[s - 1][i] >= 0 && x->f_end[s - 1][i] <= x->clock[s]))
      broken(x, s, a, "forward before the previous stage's forward ended");
    if (++x->live[s] > x->o->peak[s]) x->o->peak[s] = x->live[s];
    x->clock[s] += x->tf;
    x->f_end[s][i] = x->clock[s];
    x->o->busy += x->tf;
    break;
  case TR_ACTION_BACKWARD:
    if (x->nb[s][i]++) broken(x, s, a, "a second backward");
    if (!(x->f_end[s][i] >= 0 && x->f_end[s][i] <= x->clock[s]))
      broken(x, s, a, "backward before this stage's forward");
    if (s < x->p - 1 && !(x->b_end[s + 1][i] >= 0 && x->b_end[s + 1][i] <= x->clock[s]))
      broken(x, s, a, "backward before the next stage's backward ended");
    x->clock[s] += x->tb;
    x->b_end[s][i] = x->clock[s];
    x->o->busy += x->tb;
    x->live[s]--;
    break;
  case TR_ACTION_STEP:
    if (x->pc[s] != x->n[s] - 1) broken(x, s, a, "a step before the end of the list");
    for (int j = 0; j < x->m; j++)
      if (x->nf[s][j] != 1 || x->nb[s][j] != 1) broken(x, s, a, "step before every F and B");
    break;
  default:
    broken(x, s, a, "unknown action");
    return false;
  }
  x->pc[s]++;
  return true;
}

static void simulate(const tr_schedule *sc, long tf, long tb, outcome *o) {
  sim x; /* about 70 KB */
  memset(&x, 0, sizeof x);
  memset(o, 0, sizeof *o);
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  x.p = c->stages, x.m = c->microbatches, x.tf = tf, x.tb = tb, x.o = o;
  assert_true(x.p <= P_MAX && x.m <= M_MAX);
  for (int s = 0; s < x.p; s++) {
    x.list[s] = tr_schedule_actions(sc, s, &x.n[s]);
    for (int i = 0; i < x.m; i++) x.f_end[s][i] = x.b_end[s][i] = -1;
  }
  for (bool moved = true; moved && !o->error[0];) {
    moved = false;
    for (int s = 0; s < x.p; s++)
      while (x.pc[s] < x.n[s] && !o->error[0] && advance(&x, s)) moved = true;
  }
  o->finished = true;
  for (int s = 0; s < x.p; s++) {
    if (x.pc[s] < x.n[s]) o->finished = false;
    if (x.clock[s] > o->makespan) o->makespan = x.clock[s];
  }
  /* every message that should flow flowed once, and no other */
  for (int k = 0; k < 2 && !o->error[0]; k++)
    for (int from = 0; from < x.p; from++)
      for (int to = 0; to < x.p; to++)
        for (int i = 0; i < x.m; i++) {
          int want = to == (k == ACT ? from + 1 : from - 1);
          if (x.sent[k][from][to][i] != want || x.received[k][from][to][i] != want)
            snprintf(o->error, sizeof o->error,
                     "p=%d m=%d: %s of micro-batch %d from stage %d to %d sent %d, received %d "
                     "times (want %d)",
                     x.p, x.m, k == ACT ? "activation" : "gradient", i, from, to,
                     x.sent[k][from][to][i], x.received[k][from][to][i], want);
        }
}

/* Calls f for every schedule, p ≤ 8 and m ≤ 32. */
static void for_each_schedule(void (*f)(const tr_schedule *sc, int p, int m)) {
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (int p = 1; p <= P_MAX; p++)
      for (int m = 1; m <= M_MAX; m++) {
        tr_schedule *sc;
        assert_int_equal(tr_schedule_new(&sc, &(tr_schedule_config){kinds[k], p, m}), 0);
        f(sc, p, m);
        tr_schedule_free(sc);
      }
}

static const char *name_of(const tr_schedule *sc) {
  return tr_schedule_kind_name(tr_schedule_config_of(sc)->kind);
}

/* ---- the lists themselves --------------------------------------------------------------- */

static void check_pairing(const tr_schedule *sc, int p, int m) {
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    assert_true(n >= 1);
    assert_int_equal(a[n - 1].kind, TR_ACTION_STEP);
    int nf = 0, nb = 0;
    for (size_t k = 0; k < n; k++) {
      const tr_action *prev = k > 0 ? &a[k - 1] : NULL, *next = k + 1 < n ? &a[k + 1] : NULL;
      assert_int_equal(a[k].chunk, 0);
      switch (a[k].kind) {
      case TR_ACTION_FORWARD:
        nf++;
        if (s > 0) /* received right before, sent right after: nothing else in between */
          assert_true(prev && prev->kind == TR_ACTION_RECV_ACT && prev->mb == a[k].mb);
        if (s < p - 1)
          assert_true(next && next->kind == TR_ACTION_SEND_ACT && next->mb == a[k].mb);
        break;
      case TR_ACTION_BACKWARD:
        nb++;
        if (s < p - 1)
          assert_true(prev && prev->kind == TR_ACTION_RECV_GRAD && prev->mb == a[k].mb);
        if (s > 0)
          assert_true(next && next->kind == TR_ACTION_SEND_GRAD && next->mb == a[k].mb);
        break;
      case TR_ACTION_RECV_ACT:
      case TR_ACTION_SEND_GRAD: assert_true(s > 0); break;
      case TR_ACTION_SEND_ACT:
      case TR_ACTION_RECV_GRAD: assert_true(s < p - 1); break;
      case TR_ACTION_STEP: assert_true(k == n - 1); break;
      default: fail_msg("%s stage %d: unknown action %d", name_of(sc), s, (int)a[k].kind);
      }
    }
    assert_int_equal(nf, m);
    assert_int_equal(nb, m);
  }
}

static void each_compute_action_carries_its_own_communication(void **state) {
  (void)state;
  for_each_schedule(check_pairing);
}

/* Slots: a micro-batch keeps one slot from its first action on the stage to its last, no
 * two live micro-batches share one, and the stage opens exactly tr_schedule_slots. */
static void check_slots(const tr_schedule *sc, int p, int m) {
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    int slots = tr_schedule_slots(sc, s), owner[M_MAX], slot_of[M_MAX], last[M_MAX];
    int used = 0, live = 0;
    for (int i = 0; i < m; i++) owner[i] = slot_of[i] = -1;
    for (size_t k = 0; k < n; k++)
      if (a[k].mb >= 0) last[a[k].mb] = (int)k;
    for (size_t k = 0; k < n; k++) {
      int i = a[k].mb, sl = a[k].slot;
      if (i < 0) {
        assert_int_equal(sl, -1);
        continue;
      }
      assert_true(sl >= 0 && sl < slots);
      if (slot_of[i] < 0) {
        assert_int_equal(owner[sl], -1);
        owner[sl] = i, slot_of[i] = sl;
        if (++live > used) used = live;
      }
      assert_int_equal(sl, slot_of[i]);
      if (last[i] == (int)k) owner[sl] = -1, live--;
    }
    assert_int_equal(used, slots);
  }
}

static void live_microbatches_never_share_a_slot(void **state) {
  (void)state;
  for_each_schedule(check_slots);
}

/* Backwards run in micro-batch order on every stage under both schedules, so a stage adds
 * up its gradient in the same order whichever schedule runs: gpipe and 1f1b steps agree
 * bitwise. */
static void check_backward_order(const tr_schedule *sc, int p, int m) {
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    int next = 0;
    for (size_t k = 0; k < n; k++)
      if (a[k].kind == TR_ACTION_BACKWARD && a[k].mb != next++)
        fail_msg("%s p=%d m=%d stage %d: backward of %d where %d was due", name_of(sc), p, m,
                 s, a[k].mb, next - 1);
  }
}

static void backwards_run_in_microbatch_order_under_both_schedules(void **state) {
  (void)state;
  for_each_schedule(check_backward_order);
}

/* ---- the lists run ---------------------------------------------------------------------- */

/* Simulates, failing on any broken rule or a deadlock. */
static void run_ok(const tr_schedule *sc, long tf, long tb, outcome *o) {
  simulate(sc, tf, tb, o);
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  if (o->error[0]) fail_msg("%s %s", name_of(sc), o->error);
  if (!o->finished) fail_msg("%s p=%d m=%d: deadlock", name_of(sc), c->stages, c->microbatches);
}

static void check_runs(const tr_schedule *sc, int p, int m) {
  (void)p, (void)m;
  outcome o;
  run_ok(sc, 1, 1, &o);
}

static void every_send_meets_one_receive_and_nothing_deadlocks(void **state) {
  (void)state;
  for_each_schedule(check_runs);
}

static void check_bubble(const tr_schedule *sc, int p, int m) {
  static const long tb[] = {1, 2}; /* B = F, and B = 2F */
  for (int r = 0; r < 2; r++) {
    outcome o;
    run_ok(sc, 1, tb[r], &o);
    assert_int_equal(o.busy, (long)p * m * (1 + tb[r]));
    if (o.makespan != (m + p - 1) * (1 + tb[r]))
      fail_msg("%s p=%d m=%d tb=%ld: makespan %ld, want %ld", name_of(sc), p, m, tb[r],
               o.makespan, (m + p - 1) * (1 + tb[r]));
    double bubble = 1.0 - (double)o.busy / ((double)p * (double)o.makespan);
    double want = (double)(p - 1) / (m + p - 1);
    if (fabs(bubble - want) > 1e-12 || fabs(tr_schedule_bubble(sc) - want) > 1e-12)
      fail_msg("%s p=%d m=%d tb=%ld: bubble %g simulated, %g by tr_schedule_bubble, want %g",
               name_of(sc), p, m, tb[r], bubble, tr_schedule_bubble(sc), want);
  }
}

static void bubble_is_the_textbook_fraction(void **state) {
  (void)state;
  for_each_schedule(check_bubble);
}

static void check_peak(const tr_schedule *sc, int p, int m) {
  outcome o;
  run_ok(sc, 1, 1, &o);
  bool onef1b = tr_schedule_config_of(sc)->kind == TR_SCHEDULE_1F1B;
  for (int s = 0; s < p; s++) {
    int want = onef1b ? (p - s < m ? p - s : m) : m;
    if (o.peak[s] != want)
      fail_msg("%s p=%d m=%d stage %d: %d micro-batches alive, want %d", name_of(sc), p, m, s,
               o.peak[s], want);
    if (onef1b) assert_true(o.peak[s] <= p);
    assert_int_equal(tr_schedule_slots(sc, s), o.peak[s]);
  }
  if ((p == 4 && m == 8) || (p == 8 && m == 32)) {
    char line[128];
    int len = snprintf(line, sizeof line, "%-5s p=%d m=%2d peak per stage:", name_of(sc), p, m);
    for (int s = 0; s < p; s++) len += snprintf(line + len, sizeof line - len, " %d", o.peak[s]);
    print_message("%s\n", line);
  }
}

static void onef1b_holds_min_p_minus_s_m_microbatches_gpipe_holds_m(void **state) {
  (void)state;
  for_each_schedule(check_peak);
}

/* ---- names and bad input ---------------------------------------------------------------- */

static void names_round_trip_and_unknown_names_fail(void **state) {
  (void)state;
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_GPIPE), "gpipe");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_1F1B), "1f1b");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_COUNT), "?");
  for (int k = 0; k < TR_SCHEDULE_COUNT; k++) {
    tr_schedule_kind got = TR_SCHEDULE_COUNT;
    assert_int_equal(tr_schedule_kind_parse(tr_schedule_kind_name((tr_schedule_kind)k), &got), 0);
    assert_int_equal(got, k);
  }
  tr_schedule_kind got = TR_SCHEDULE_1F1B;
  assert_int_equal(tr_schedule_kind_parse("GPipe", &got), TR_EINVAL);
  assert_int_equal(tr_schedule_kind_parse("", &got), TR_EINVAL);
  assert_int_equal(tr_schedule_kind_parse("1f1b ", &got), TR_EINVAL);
  assert_int_equal(tr_schedule_kind_parse(NULL, &got), TR_EINVAL);
  assert_int_equal(got, TR_SCHEDULE_1F1B); /* untouched on failure */
  assert_string_equal(tr_action_kind_name(TR_ACTION_FORWARD), "forward");
  assert_string_equal(tr_action_kind_name(TR_ACTION_COUNT), "?");
}

static void bad_arguments_are_einval(void **state) {
  (void)state;
  static const tr_schedule_config bad[] = {
      {TR_SCHEDULE_GPIPE, 0, 4},  {TR_SCHEDULE_1F1B, -1, 4},      {TR_SCHEDULE_GPIPE, 4, 0},
      {TR_SCHEDULE_1F1B, 4, -3},  {TR_SCHEDULE_COUNT, 4, 4},      {(tr_schedule_kind)-1, 4, 4},
      {TR_SCHEDULE_1F1B, 1, 1 << 30},
  };
  static char sentinel;
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    tr_schedule *sc = (tr_schedule *)(void *)&sentinel;
    assert_int_equal(tr_schedule_new(&sc, &bad[k]), TR_EINVAL);
    assert_null(sc);
  }
  tr_schedule *sc = (tr_schedule *)(void *)&sentinel;
  assert_int_equal(tr_schedule_new(&sc, NULL), TR_EINVAL);
  assert_null(sc);
  tr_schedule_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_compute_action_carries_its_own_communication),
      cmocka_unit_test(live_microbatches_never_share_a_slot),
      cmocka_unit_test(backwards_run_in_microbatch_order_under_both_schedules),
      cmocka_unit_test(every_send_meets_one_receive_and_nothing_deadlocks),
      cmocka_unit_test(bubble_is_the_textbook_fraction),
      cmocka_unit_test(onef1b_holds_min_p_minus_s_m_microbatches_gpipe_holds_m),
      cmocka_unit_test(names_round_trip_and_unknown_names_fail),
      cmocka_unit_test(bad_arguments_are_einval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
