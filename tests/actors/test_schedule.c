/* test_schedule.c — pipeline schedules (tr_schedule.h) run in a discrete-event simulator.
 *
 * The simulator runs the action lists of all p devices at once: F takes tf, B tb and W tw
 * (a backward not split takes tb + tw), the optimizer step and communication take no time.
 * Messages travel on one edge per kind and pair of devices, as the stage actors' do, with
 * their credits: an edge of activations has the sender's slots (tr_schedule_slots), one
 * of gradients two, taken before the backward whose gradient it carries; a receive returns
 * the credit and must find the message it expects first in its edge (the actors match in
 * arrival order). Since devices share nothing but messages, each action starts at
 * max(its device's clock, the time its message was sent), so sweeping the devices
 * round-robin until none can move gives the same times as an event queue, and a sweep
 * that moves nobody while actions remain is a deadlock. For every schedule, p ≤ 8, m ≤ 32
 * (and v ≤ 4 chunks for interleaved) it checks each action once per micro-batch and chunk,
 * the order of computation across virtual stages, the makespan and bubble against the
 * papers', and the activations each device holds against the schedule's bound. (An
 * evaluation pass's lists: test_schedule_eval.c.)
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

enum { P_MAX = 8, V_MAX = 4, M_MAX = 32, VS_MAX = P_MAX * V_MAX, Q_MAX = V_MAX * M_MAX };
enum { ACT = 0, GRAD = 1, GRAD_CREDITS = 2 };

static const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B,
                                         TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};

static bool split_kind(tr_schedule_kind k) { return k == TR_SCHEDULE_ZB1; }

/* What one simulated step of the pipeline did. */
typedef struct outcome {
  bool finished;         /* every device reached the end of its list */
  char error[240];       /* the first broken rule, "" if none */
  long makespan, busy;   /* busy: the sum over devices of time inside F, B and W */
  int peak[P_MAX];       /* most (chunk, micro-batch) pairs with live activations, per device */
} outcome;

/* A message in flight: for virtual stage vs, micro-batch mb, sent at `at`. */
typedef struct msg {
  int vs, mb;
  long at;
} msg;

typedef struct edge {
  msg q[Q_MAX];
  int head, n, credits;
} edge;

typedef struct sim {
  int p, m, v;
  long tf, tb, tw;
  const tr_action *list[P_MAX];
  size_t n[P_MAX], pc[P_MAX];
  long clock[P_MAX];
  int live[P_MAX];
  bool holding[P_MAX];                    /* a gradient credit taken for the next send */
  int last[P_MAX][V_MAX][M_MAX];          /* index of the pair's last action on its device */
  bool begun[P_MAX][V_MAX][M_MAX];
  long f_end[VS_MAX][M_MAX], b_end[VS_MAX][M_MAX]; /* -1 until done */
  int nf[VS_MAX][M_MAX], nb[VS_MAX][M_MAX], nw[VS_MAX][M_MAX];
  int sent[2][VS_MAX][M_MAX], received[2][VS_MAX][M_MAX]; /* by the receiving virtual stage */
  edge e[2][P_MAX][P_MAX];                /* [kind][from][to] */
  outcome *o;
} sim;

static void broken(sim *x, int s, const tr_action *a, const char *rule) {
  if (x->o->error[0]) return;
  snprintf(x->o->error, sizeof x->o->error,
           "p=%d v=%d m=%d device %d chunk %d, %s of micro-batch %d: %s", x->p, x->v, x->m, s,
           a->chunk, tr_action_kind_name(a->kind), a->mb, rule);
}

static int device_of(const sim *x, int vs) { return vs % x->p; }

static bool done_by(long end, long clock) { return end >= 0 && end <= clock; }

/* The edge a send or receive uses and the virtual stage at its other end; false (and the
 * rule broken) if its peer is not the device that virtual stage lives on. */
static bool route_of(sim *x, int s, const tr_action *a, edge **e, int *other) {
  const bool sending = a->kind == TR_ACTION_SEND_ACT || a->kind == TR_ACTION_SEND_GRAD;
  const bool act = a->kind == TR_ACTION_SEND_ACT || a->kind == TR_ACTION_RECV_ACT;
  const int vs = a->chunk * x->p + s;
  *other = act == sending ? vs + 1 : vs - 1; /* sends go down, receives come from above */
  if (*other < 0 || *other >= x->p * x->v || a->peer != device_of(x, *other)) {
    broken(x, s, a, "peer is not the device of the neighbouring virtual stage");
    return false;
  }
  const int from = sending ? s : a->peer, to = sending ? a->peer : s;
  *e = &x->e[act ? ACT : GRAD][from][to];
  return true;
}

static bool receive(sim *x, int s, const tr_action *a) {
  edge *e;
  int other, vs = a->chunk * x->p + s, kind = a->kind == TR_ACTION_RECV_ACT ? ACT : GRAD;
  if (!route_of(x, s, a, &e, &other)) return false;
  if (e->n == 0) return false;
  const msg *head = &e->q[e->head];
  if (head->vs != vs || head->mb != a->mb) {
    broken(x, s, a, "the first message on its edge is another's: the actors would fail");
    return false;
  }
  if (++x->received[kind][vs][a->mb] > 1) broken(x, s, a, "received twice");
  if (head->at > x->clock[s]) x->clock[s] = head->at;
  e->head = (e->head + 1) % Q_MAX, e->n--;
  e->credits++; /* back to the sender */
  return true;
}

static bool send(sim *x, int s, const tr_action *a) {
  edge *e;
  int other, vs = a->chunk * x->p + s, kind = a->kind == TR_ACTION_SEND_ACT ? ACT : GRAD;
  if (!route_of(x, s, a, &e, &other)) return false;
  if (kind == ACT) {
    if (e->credits == 0) return false;
    e->credits--;
  } else if (!x->holding[s]) {
    broken(x, s, a, "a gradient sent without the credit its backward took");
  }
  x->holding[s] &= kind != GRAD;
  if (++x->sent[kind][other][a->mb] > 1) broken(x, s, a, "sent twice");
  if (!(kind == ACT ? x->nf[vs][a->mb] : x->nb[vs][a->mb])) broken(x, s, a, "sent before computed");
  if (e->n == Q_MAX) broken(x, s, a, "more messages in flight than the simulator holds");
  e->q[(e->head + e->n++) % Q_MAX] = (msg){other, a->mb, x->clock[s]};
  return true;
}

static void work(sim *x, int s, long t) {
  x->clock[s] += t;
  x->o->busy += t;
}

/* B, or a whole backward: its gradient's credit first, as the actor takes it. */
static bool backward(sim *x, int s, const tr_action *a) {
  const int vs = a->chunk * x->p + s, i = a->mb;
  if (vs > 0 && !x->holding[s]) {
    edge *e = &x->e[GRAD][s][device_of(x, vs - 1)];
    if (e->credits == 0) return false;
    e->credits--, x->holding[s] = true;
  }
  if (x->nb[vs][i]++) broken(x, s, a, "a second backward");
  if (!done_by(x->f_end[vs][i], x->clock[s])) broken(x, s, a, "backward before its forward");
  if (vs + 1 < x->p * x->v && !done_by(x->b_end[vs + 1][i], x->clock[s]))
    broken(x, s, a, "backward before the next virtual stage's backward ended");
  const bool whole = a->kind == TR_ACTION_BACKWARD;
  work(x, s, whole ? x->tb + x->tw : x->tb);
  x->b_end[vs][i] = x->clock[s];
  if (whole) x->nw[vs][i]++;
  return true;
}

/* Runs device s's next action if it can start; false if it waits on a message or credit. */
static bool advance(sim *x, int s) {
  const tr_action *a = &x->list[s][x->pc[s]];
  const int i = a->mb, c = a->chunk, vs = c * x->p + s;
  if (a->kind != TR_ACTION_STEP && (i < 0 || i >= x->m || c < 0 || c >= x->v)) {
    broken(x, s, a, "no such micro-batch or chunk");
    return false;
  }
  switch (a->kind) {
  case TR_ACTION_RECV_ACT:
  case TR_ACTION_RECV_GRAD:
    if (!receive(x, s, a)) return false;
    break;
  case TR_ACTION_SEND_ACT:
  case TR_ACTION_SEND_GRAD:
    if (!send(x, s, a)) return false;
    break;
  case TR_ACTION_FORWARD:
    if (x->nf[vs][i]++) broken(x, s, a, "a second forward");
    if (vs > 0 && !done_by(x->f_end[vs - 1][i], x->clock[s]))
      broken(x, s, a, "forward before the previous virtual stage's forward ended");
    work(x, s, x->tf);
    x->f_end[vs][i] = x->clock[s];
    break;
  case TR_ACTION_BACKWARD:
  case TR_ACTION_BACKWARD_INPUT:
    if (!backward(x, s, a)) return false;
    break;
  case TR_ACTION_BACKWARD_WEIGHT:
    if (x->nw[vs][i]++) broken(x, s, a, "a second weight gradient");
    if (!done_by(x->b_end[vs][i], x->clock[s])) broken(x, s, a, "W before its B");
    work(x, s, x->tw);
    break;
  case TR_ACTION_STEP:
    if (x->pc[s] != x->n[s] - 1) broken(x, s, a, "a step before the end of the list");
    for (int ch = 0; ch < x->v; ch++)
      for (int j = 0; j < x->m; j++)
        if (x->nf[ch * x->p + s][j] != 1 || x->nb[ch * x->p + s][j] != 1 ||
            x->nw[ch * x->p + s][j] != 1)
          broken(x, s, a, "step before every F, B and W of every chunk");
    break;
  default:
    broken(x, s, a, "unknown action");
    return false;
  }
  if (a->kind != TR_ACTION_STEP) { /* the pair's slot: from its first action to its last */
    if (!x->begun[s][c][i]) {
      x->begun[s][c][i] = true;
      if (++x->live[s] > x->o->peak[s]) x->o->peak[s] = x->live[s];
    }
    if (x->last[s][c][i] == (int)x->pc[s]) x->live[s]--;
  }
  x->pc[s]++;
  return true;
}

static void simulate(const tr_schedule *sc, long tf, long tb, long tw, outcome *o) {
  static sim x; /* about 400 KB */
  memset(&x, 0, sizeof x);
  memset(o, 0, sizeof *o);
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  x.p = c->stages, x.m = c->microbatches, x.v = c->chunks;
  x.tf = tf, x.tb = tb, x.tw = tw, x.o = o;
  assert_true(x.p <= P_MAX && x.m <= M_MAX && x.v <= V_MAX);
  for (int s = 0; s < x.p; s++) {
    x.list[s] = tr_schedule_actions(sc, s, &x.n[s]);
    for (size_t k = 0; k < x.n[s]; k++)
      if (x.list[s][k].mb >= 0 && x.list[s][k].chunk >= 0 && x.list[s][k].chunk < x.v &&
          x.list[s][k].mb < x.m)
        x.last[s][x.list[s][k].chunk][x.list[s][k].mb] = (int)k;
    for (int t = 0; t < x.p; t++) {
      x.e[ACT][s][t].credits = tr_schedule_slots(sc, s);
      x.e[GRAD][s][t].credits = GRAD_CREDITS;
    }
  }
  for (int vs = 0; vs < VS_MAX; vs++)
    for (int i = 0; i < M_MAX; i++) x.f_end[vs][i] = x.b_end[vs][i] = -1;
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
  if (!o->finished && !o->error[0]) { /* where each device waits */
    int len = snprintf(o->error, sizeof o->error, "p=%d v=%d m=%d: deadlock:", x.p, x.v, x.m);
    for (int s = 0; s < x.p && len < (int)sizeof o->error; s++) {
      const tr_action *a = x.pc[s] < x.n[s] ? &x.list[s][x.pc[s]] : NULL;
      len += snprintf(o->error + len, sizeof o->error - (size_t)len, " %d at %s %d.%d", s,
                      a ? tr_action_kind_name(a->kind) : "end", a ? a->chunk : 0, a ? a->mb : 0);
    }
    return;
  }
  /* every message that should flow flowed once, and no other */
  const int last = x.p * x.v - 1;
  for (int k = 0; k < 2 && !o->error[0]; k++)
    for (int vs = 0; vs <= last; vs++)
      for (int i = 0; i < x.m; i++) {
        const int want = k == ACT ? vs > 0 : vs < last;
        if (x.sent[k][vs][i] != want || x.received[k][vs][i] != want)
          snprintf(o->error, sizeof o->error,
                   "p=%d v=%d m=%d: %s of micro-batch %d for virtual stage %d sent %d, "
                   "received %d times (want %d)",
                   x.p, x.v, x.m, k == ACT ? "activation" : "gradient", i, vs,
                   x.sent[k][vs][i], x.received[k][vs][i], want);
      }
}

/* ---- what runs ---------------------------------------------------------------------------- */

typedef void (*check_fn)(const tr_schedule *sc, int p, int m);

/* Calls f for every schedule, p ≤ 8 and m ≤ 32; interleaved with 2, 3 and 4 chunks. */
static void for_each_schedule(check_fn f) {
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    const bool il = kinds[k] == TR_SCHEDULE_INTERLEAVED;
    for (int v = il ? 2 : 1; v <= (il ? V_MAX : 1); v++)
      for (int p = il ? 2 : 1; p <= P_MAX; p++)
        for (int m = 1; m <= M_MAX; m++) {
          tr_schedule *sc;
          assert_int_equal(tr_schedule_new(&sc, &(tr_schedule_config){kinds[k], p, m, v}), 0);
          f(sc, p, m);
          tr_schedule_free(sc);
        }
  }
}

static const char *name_of(const tr_schedule *sc) {
  return tr_schedule_kind_name(tr_schedule_config_of(sc)->kind);
}

static int chunks_of(const tr_schedule *sc) { return tr_schedule_config_of(sc)->chunks; }

/* ---- the lists themselves --------------------------------------------------------------- */

static void check_pairing(const tr_schedule *sc, int p, int m) {
  const int v = chunks_of(sc), last_vs = p * v - 1;
  const bool split = split_kind(tr_schedule_config_of(sc)->kind);
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    assert_true(n >= 1);
    assert_int_equal(a[n - 1].kind, TR_ACTION_STEP);
    int nf[V_MAX] = {0}, nb[V_MAX] = {0}, nw[V_MAX] = {0};
    for (size_t k = 0; k < n; k++) {
      const tr_action *prev = k > 0 ? &a[k - 1] : NULL, *next = k + 1 < n ? &a[k + 1] : NULL;
      const int c = a[k].chunk, vs = c * p + s;
      assert_true(c >= 0 && c < v);
#define SAME(x) ((x) && (x)->mb == a[k].mb && (x)->chunk == c)
      switch (a[k].kind) {
      case TR_ACTION_FORWARD:
        nf[c]++;
        if (vs > 0) /* received right before, sent right after: nothing else in between */
          assert_true(SAME(prev) && prev->kind == TR_ACTION_RECV_ACT);
        if (vs < last_vs) assert_true(SAME(next) && next->kind == TR_ACTION_SEND_ACT);
        break;
      case TR_ACTION_BACKWARD:
      case TR_ACTION_BACKWARD_INPUT:
        if ((a[k].kind == TR_ACTION_BACKWARD_INPUT) != split)
          fail_msg("%s: a %s", name_of(sc), tr_action_kind_name(a[k].kind));
        nb[c]++;
        if (vs < last_vs) assert_true(SAME(prev) && prev->kind == TR_ACTION_RECV_GRAD);
        if (vs > 0) assert_true(SAME(next) && next->kind == TR_ACTION_SEND_GRAD);
        break;
      case TR_ACTION_BACKWARD_WEIGHT:
        assert_true(split);
        nw[c]++;
        break;
      case TR_ACTION_RECV_ACT:
      case TR_ACTION_SEND_GRAD: assert_true(vs > 0); break;
      case TR_ACTION_SEND_ACT:
      case TR_ACTION_RECV_GRAD: assert_true(vs < last_vs); break;
      case TR_ACTION_STEP: assert_true(k == n - 1); break;
      default: fail_msg("%s stage %d: unknown action %d", name_of(sc), s, (int)a[k].kind);
      }
#undef SAME
    }
    for (int c = 0; c < v; c++) {
      assert_int_equal(nf[c], m);
      assert_int_equal(nb[c], m);
      assert_int_equal(nw[c], split ? m : 0);
    }
  }
}

static void each_compute_action_carries_its_own_communication(void **state) {
  (void)state;
  for_each_schedule(check_pairing);
}

/* Slots: a micro-batch keeps one slot of its chunk from its first action on the device to
 * its last, no two live micro-batches share one, and each chunk opens exactly
 * tr_schedule_chunk_slots. */
static void check_slots(const tr_schedule *sc, int p, int m) {
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    for (int c = 0; c < chunks_of(sc); c++) {
      int slots = tr_schedule_chunk_slots(sc, s, c), owner[M_MAX], slot_of[M_MAX], last[M_MAX];
      int used = 0, live = 0;
      for (int i = 0; i < m; i++) owner[i] = slot_of[i] = -1;
      for (size_t k = 0; k < n; k++)
        if (a[k].mb >= 0 && a[k].chunk == c) last[a[k].mb] = (int)k;
      for (size_t k = 0; k < n; k++) {
        int i = a[k].mb, sl = a[k].slot;
        if (i < 0) {
          assert_int_equal(sl, -1);
          continue;
        }
        if (a[k].chunk != c) continue;
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
}

static void live_microbatches_never_share_a_slot(void **state) {
  (void)state;
  for_each_schedule(check_slots);
}

/* Backwards (and W) run in micro-batch order on every device and chunk, so every schedule
 * adds up a gradient in the same order: their steps agree bitwise. */
static void check_backward_order(const tr_schedule *sc, int p, int m) {
  (void)m;
  for (int s = 0; s < p; s++) {
    size_t n;
    const tr_action *a = tr_schedule_actions(sc, s, &n);
    int next_b[V_MAX] = {0}, next_w[V_MAX] = {0};
    for (size_t k = 0; k < n; k++) {
      const tr_action_kind kind = a[k].kind;
      int *next = kind == TR_ACTION_BACKWARD_WEIGHT ? next_w
                  : kind == TR_ACTION_BACKWARD || kind == TR_ACTION_BACKWARD_INPUT ? next_b
                                                                                   : NULL;
      if (next && a[k].mb != next[a[k].chunk]++)
        fail_msg("%s p=%d m=%d stage %d chunk %d: %s of %d where %d was due", name_of(sc), p,
                 m, s, a[k].chunk, tr_action_kind_name(kind), a[k].mb, next[a[k].chunk] - 1);
    }
  }
}

static void backwards_run_in_microbatch_order_under_every_schedule(void **state) {
  (void)state;
  for_each_schedule(check_backward_order);
}

/* ---- the lists run ---------------------------------------------------------------------- */

/* Simulates, failing on any broken rule or a deadlock. */
static void run_ok(const tr_schedule *sc, long tf, long tb, long tw, outcome *o) {
  simulate(sc, tf, tb, tw, o);
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  if (o->error[0]) fail_msg("%s %s", name_of(sc), o->error);
  if (!o->finished)
    fail_msg("%s p=%d v=%d m=%d: deadlock", name_of(sc), c->stages, c->chunks, c->microbatches);
}

static void check_runs(const tr_schedule *sc, int p, int m) {
  (void)p, (void)m;
  outcome o;
  run_ok(sc, 1, 1, 1, &o);
  run_ok(sc, 2, 3, 1, &o); /* other ratios move the sends around */
}

static void every_send_meets_one_receive_in_order_and_nothing_deadlocks(void **state) {
  (void)state;
  for_each_schedule(check_runs);
}

static double bubble_of(const outcome *o, int p) {
  return 1.0 - (double)o->busy / ((double)p * (double)o->makespan);
}

static void expect_bubble(const tr_schedule *sc, const outcome *o, long tb, long want_makespan,
                          double want) {
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  if (o->makespan != want_makespan)
    fail_msg("%s p=%d v=%d m=%d tb=%ld: makespan %ld, want %ld", name_of(sc), c->stages,
             c->chunks, c->microbatches, tb, o->makespan, want_makespan);
  if (fabs(bubble_of(o, c->stages) - want) > 1e-12 || fabs(tr_schedule_bubble(sc) - want) > 1e-12)
    fail_msg("%s p=%d v=%d m=%d tb=%ld: bubble %g simulated, %g by tr_schedule_bubble, want %g",
             name_of(sc), c->stages, c->chunks, c->microbatches, tb, bubble_of(o, c->stages),
             tr_schedule_bubble(sc), want);
}

/* gpipe, 1f1b: (m+p-1)(F+B) whatever B/F. Interleaved, where p divides m: every one of the
 * p-1 steps of the ramps is a chunk's, (vm+p-1)(F+B) in chunk units; where it does not, the
 * missing micro-batches of the last group leave holes, but never more than 1F1B's
 * (m+p-1)v(F+B). ZB-H1 with F = B = W and m >= p:
 * 3m + p - 1, the (p-1)(F+B-W) of Qi et al.; with m < p the way of one micro-batch down
 * and back, 2m + 2p - 1. */
static void check_bubble(const tr_schedule *sc, int p, int m) {
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  const long v = c->chunks;
  static const long tbs[] = {1, 2}; /* B = F, and B = 2F */
  for (int r = 0; r < 2; r++) {
    const long tb = tbs[r];
    outcome o;
    switch (c->kind) {
    case TR_SCHEDULE_GPIPE:
    case TR_SCHEDULE_1F1B:
      run_ok(sc, 1, tb, 0, &o);
      assert_int_equal(o.busy, (long)p * m * (1 + tb));
      expect_bubble(sc, &o, tb, (m + p - 1) * (1 + tb), (double)(p - 1) / (m + p - 1));
      break;
    case TR_SCHEDULE_INTERLEAVED:
      run_ok(sc, 1, tb, 0, &o);
      assert_int_equal(o.busy, (long)p * v * m * (1 + tb));
      if (m % p == 0)
        expect_bubble(sc, &o, tb, (v * m + p - 1) * (1 + tb), (double)(p - 1) / (v * m + p - 1));
      else if (o.makespan > (m + p - 1) * v * (1 + tb) ||
               o.makespan < (v * m + p - 1) * (1 + tb))
        fail_msg("interleaved p=%d v=%ld m=%d tb=%ld: makespan %ld outside [%ld, %ld]", p, v,
                 m, tb, o.makespan, (v * m + p - 1) * (1 + tb), (m + p - 1) * v * (1 + tb));
      break;
    case TR_SCHEDULE_ZB1:
      run_ok(sc, 1, 1, 1, &o);
      assert_int_equal(o.busy, (long)p * m * 3);
      if (m >= p)
        expect_bubble(sc, &o, 1, 3L * m + p - 1, (double)(p - 1) / (3 * m + p - 1));
      else
        expect_bubble(sc, &o, 1, 2L * m + 2 * p - 1, 1 - 3.0 * m / (2 * m + 2 * p - 1));
      return;
    default: fail_msg("no bubble for %s", name_of(sc));
    }
  }
}

static void bubble_is_the_papers_fraction(void **state) {
  (void)state;
  for_each_schedule(check_bubble);
}

/* Against 1F1B on the same pipeline with backward split alike (B = W = F): zb1 is never
 * slower, and faster wherever there is a bubble to fill. */
static void check_zb1_beats_1f1b(const tr_schedule *sc, int p, int m) {
  if (tr_schedule_config_of(sc)->kind != TR_SCHEDULE_ZB1) return;
  tr_schedule *base;
  assert_int_equal(tr_schedule_new(&base, &(tr_schedule_config){TR_SCHEDULE_1F1B, p, m, 0}), 0);
  outcome zb, onef1b;
  run_ok(sc, 1, 1, 1, &zb);
  run_ok(base, 1, 1, 1, &onef1b);
  if (p > 1 ? zb.makespan >= onef1b.makespan : zb.makespan != onef1b.makespan)
    fail_msg("p=%d m=%d: zb1's makespan %ld, 1f1b's %ld", p, m, zb.makespan, onef1b.makespan);
  tr_schedule_free(base);
}

static void zb1_finishes_before_1f1b(void **state) {
  (void)state;
  for_each_schedule(check_zb1_beats_1f1b);
}

/* The activations held: gpipe m, 1f1b min(p-s, m), zb1 min(p, m) on every stage (1F1B's
 * peak), interleaved at most its warm-up plus one, and tr_schedule_slots says so. */
static void check_peak(const tr_schedule *sc, int p, int m) {
  outcome o;
  run_ok(sc, 1, 1, 1, &o);
  const tr_schedule_config *c = tr_schedule_config_of(sc);
  const int v = c->chunks;
  for (int s = 0; s < p; s++) {
    const int warm = (p - s - 1) * 2 + (v - 1) * p + 1;
    int bound = m;
    switch (c->kind) {
    case TR_SCHEDULE_1F1B: bound = p - s < m ? p - s : m; break;
    case TR_SCHEDULE_ZB1: bound = p < m ? p : m; break;
    case TR_SCHEDULE_INTERLEAVED: bound = warm < v * m ? warm : v * m; break;
    default: break;
    }
    if (c->kind == TR_SCHEDULE_INTERLEAVED ? o.peak[s] > bound : o.peak[s] != bound)
      fail_msg("%s p=%d v=%d m=%d stage %d: %d micro-batches alive, want %s%d", name_of(sc), p,
               v, m, s, o.peak[s], c->kind == TR_SCHEDULE_INTERLEAVED ? "at most " : "", bound);
    if (c->kind == TR_SCHEDULE_1F1B || c->kind == TR_SCHEDULE_ZB1) assert_true(o.peak[s] <= p);
    assert_int_equal(tr_schedule_slots(sc, s), o.peak[s]);
  }
  if ((p == 4 && m == 8) || (p == 8 && m == 32)) {
    char line[160];
    int len = snprintf(line, sizeof line, "%-11s p=%d v=%d m=%2d peak per stage:", name_of(sc),
                       p, v, m);
    for (int s = 0; s < p; s++) len += snprintf(line + len, sizeof line - len, " %d", o.peak[s]);
    print_message("%s, bubble %.3f\n", line, bubble_of(&o, p));
  }
}

static void each_schedule_holds_no_more_than_its_bound(void **state) {
  (void)state;
  for_each_schedule(check_peak);
}

/* ---- names and bad input ---------------------------------------------------------------- */

static void names_round_trip_and_unknown_names_fail(void **state) {
  (void)state;
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_GPIPE), "gpipe");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_1F1B), "1f1b");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_INTERLEAVED), "interleaved");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_ZB1), "zb1");
  assert_string_equal(tr_schedule_kind_name(TR_SCHEDULE_COUNT), "?");
  assert_string_equal(tr_schedule_kind_list(), "gpipe, 1f1b, interleaved or zb1");
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
  assert_string_equal(tr_action_kind_name(TR_ACTION_BACKWARD_WEIGHT), "backward_weight");
  assert_string_equal(tr_action_kind_name(TR_ACTION_EVAL_FORWARD), "eval_forward");
  assert_string_equal(tr_action_kind_name(TR_ACTION_EVAL_END), "eval_end");
  assert_string_equal(tr_action_kind_name(TR_ACTION_COUNT), "?");
}

static void chunks_default_by_kind(void **state) {
  (void)state;
  tr_schedule *sc;
  const tr_schedule_config il = {TR_SCHEDULE_INTERLEAVED, 2, 4, 0};
  assert_int_equal(tr_schedule_new(&sc, &il), 0);
  assert_int_equal(tr_schedule_config_of(sc)->chunks, 2);
  tr_schedule_free(sc);
  assert_int_equal(tr_schedule_new(&sc, &(tr_schedule_config){TR_SCHEDULE_ZB1, 2, 4, 0}), 0);
  assert_int_equal(tr_schedule_config_of(sc)->chunks, 1);
  tr_schedule_free(sc);
}

static void bad_arguments_are_einval(void **state) {
  (void)state;
  static const tr_schedule_config bad[] = {
      {TR_SCHEDULE_GPIPE, 0, 4, 0},       {TR_SCHEDULE_1F1B, -1, 4, 0},
      {TR_SCHEDULE_GPIPE, 4, 0, 0},       {TR_SCHEDULE_1F1B, 4, -3, 0},
      {TR_SCHEDULE_COUNT, 4, 4, 0},       {(tr_schedule_kind)-1, 4, 4, 0},
      {TR_SCHEDULE_1F1B, 1, 1 << 30, 0},  {TR_SCHEDULE_1F1B, 4, 4, 2},
      {TR_SCHEDULE_ZB1, 4, 4, 2},         {TR_SCHEDULE_INTERLEAVED, 4, 4, 1},
      {TR_SCHEDULE_INTERLEAVED, 1, 4, 2}, {TR_SCHEDULE_INTERLEAVED, 4, 4, -2},
      {TR_SCHEDULE_GPIPE, 4, 4, -1},
  };
  static char sentinel;
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    tr_schedule *sc = (tr_schedule *)(void *)&sentinel;
    if (tr_schedule_new(&sc, &bad[k]) != TR_EINVAL)
      fail_msg("%s p=%d m=%d v=%d: not refused", tr_schedule_kind_name(bad[k].kind),
               bad[k].stages, bad[k].microbatches, bad[k].chunks);
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
      cmocka_unit_test(backwards_run_in_microbatch_order_under_every_schedule),
      cmocka_unit_test(every_send_meets_one_receive_in_order_and_nothing_deadlocks),
      cmocka_unit_test(bubble_is_the_papers_fraction),
      cmocka_unit_test(zb1_finishes_before_1f1b),
      cmocka_unit_test(each_schedule_holds_no_more_than_its_bound),
      cmocka_unit_test(names_round_trip_and_unknown_names_fail),
      cmocka_unit_test(chunks_default_by_kind),
      cmocka_unit_test(bad_arguments_are_einval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
