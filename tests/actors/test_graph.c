/* test_graph.c — the graph API (tr_graph.h) with actors of the test's own: credits bound what
 * is in flight and wake a starved producer once per `wake_at` (or, on a notify edge, hear of
 * every release), sources agree on the end of a run however it ends and share its steps out
 * exactly, a run ends when every actor but its services is done or one fails, a control
 * edge beyond its credits names itself, and a graph prints its actors and edges.
 *
 * Actors never call cmocka from their threads: they record what they saw in their state, and
 * the test asserts on it once tr_graph_run has returned. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../runtime/test_util.h"
#include "tr_graph.h"
#include "troupe.h"

typedef struct item_msg {
  tr_msg hdr;
  int64_t seq;
  int burst; /* burst test: the size of the burst this item belongs to */
} item_msg;
static TR_MSGTYPE_DEFINE(item_type, item_msg);

typedef struct go_msg {
  tr_msg hdr;
} go_msg;
static TR_MSGTYPE_DEFINE(go_type, go_msg);

/* producer → consumer: "I found no credit, having sent `sent` items" */
typedef struct dry_msg {
  tr_msg hdr;
  int64_t sent;
} dry_msg;
static TR_MSGTYPE_DEFINE(dry_type, dry_msg);

static tr_graph *graph_new(void) {
  tr_graph *g;
  assert_int_equal(tr_graph_new(&g, NULL), 0);
  assert_non_null(tr_graph_system(g));
  return g;
}

static tr_actor *add(tr_graph *g, const char *name, tr_actor_kind kind, const tr_behaviour *b,
                     void *state) {
  tr_actor *a;
  assert_int_equal(
      tr_graph_add(g, &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state},
                   &a),
      0);
  return a;
}

static tr_edge *connect(tr_graph *g, tr_actor *from, tr_actor *to, int credits, int wake_at) {
  tr_edge *e;
  assert_int_equal(tr_graph_connect(g, &(tr_edge_config){.from = from, .to = to, .type = &item_type,
                                                          .credits = credits, .wake_at = wake_at},
                                    &e),
                   0);
  assert_ptr_equal(tr_edge_from(e), from);
  assert_ptr_equal(tr_edge_to(e), to);
  assert_int_equal(tr_edge_credits(e), credits);
  assert_int_equal(tr_edge_available(e), credits);
  assert_int_equal(tr_edge_peak(e), 0);
  return e;
}

static void send_go(tr_actor *to) { tr_actor_send(to, tr_msg_new(&go_type)); }

/* ---- credits ------------------------------------------------------------------------------ */

/* A producer that sends `total` numbered items as fast as credits allow: on start and on
 * every credit message. `bursts` (optional): send bursts[k] items, then wait for the
 * consumer's go before the next burst. report_dry: tell the consumer each time it finds no
 * credit. */
typedef struct producer {
  tr_graph *g;
  tr_edge *e;
  int64_t total, sent;
  int wake_at;
  _Atomic int *inflight;   /* acquired and not yet released, as the test counts it */
  int over_credits;        /* times the count above exceeded the edge's credits */
  int64_t wakes;           /* credit messages received */
  int early_wakes;         /* ... with fewer than wake_at credits free on arrival */
  int foreign_wakes;       /* ... naming another edge */
  int failed_acquires;
  bool report_dry;
  const int *bursts;
  int nbursts, burst;
  bool done;
} producer;

static void produce(tr_actor *self, producer *p) {
  int64_t limit = p->total;
  if (p->bursts) {
    if (p->burst >= p->nbursts) limit = p->sent;
    else limit = p->sent + p->bursts[p->burst];
  }
  while (p->sent < limit) {
    if (!tr_edge_acquire(p->e)) {
      p->failed_acquires++;
      if (p->report_dry) {
        dry_msg *d = tr_msg_new(&dry_type);
        d->sent = p->sent;
        tr_actor_send(tr_edge_to(p->e), d);
      }
      break;
    }
    if (p->inflight && atomic_fetch_add(p->inflight, 1) + 1 > tr_edge_credits(p->e))
      p->over_credits++;
    item_msg *m = tr_msg_new(&item_type);
    m->seq = p->sent++;
    m->burst = p->bursts ? p->bursts[p->burst] : 0;
    tr_edge_send(p->e, m);
  }
  if (p->bursts && p->sent == limit) p->burst++;
  if (p->sent == p->total && !p->done) {
    p->done = true;
    tr_graph_done(p->g, self);
  }
}

static int producer_start(tr_actor *self) {
  produce(self, tr_actor_state(self));
  return 0;
}

static int producer_receive(tr_actor *self, tr_msg *msg) {
  producer *p = tr_actor_state(self);
  if (msg->type == &tr_edge_credit_type) {
    p->wakes++;
    if (((tr_edge_credit_msg *)msg)->edge != p->e) p->foreign_wakes++;
    if (tr_edge_available(p->e) < p->wake_at) p->early_wakes++;
  }
  produce(self, p);
  return 0;
}

static const tr_behaviour producer_behaviour = {
    .name = "producer", .start = producer_start, .receive = producer_receive};

/* A consumer that receives `total` items in order. hold: keep items until this many are
 * held, then give their credits back one at a time; 1: give each back as it arrives.
 * wait_dry: instead, keep them until the producer has found too few credits (a starved
 * producer waits for wake_at free ones, so it may starve with some free) and everything it
 * sent has come, so that every refill wakes a starved producer. release_all:
 * give them back in one call rather than one at a time.
 * burst_acks: when a burst is complete, give its credits back and tell the producer. */
typedef struct consumer {
  tr_graph *g;
  tr_edge *e;
  int64_t total, received;
  int64_t dry_at; /* the producer last found no credit after sending this many */
  int hold, held, most_held;
  bool wait_dry, release_all, burst_acks;
  _Atomic int *inflight;
  int64_t out_of_order;
  bool done;
} consumer;

static int consumer_receive(tr_actor *self, tr_msg *msg) {
  consumer *c = tr_actor_state(self);
  int burst = 0;
  if (msg->type == &dry_type) {
    c->dry_at = ((dry_msg *)msg)->sent;
  } else if (msg->type == &item_type) {
    item_msg *m = (item_msg *)msg;
    if (m->seq != c->received) c->out_of_order++;
    burst = m->burst;
    c->received++;
    c->held++;
    if (c->held > c->most_held) c->most_held = c->held;
  } else {
    return 0;
  }
  const bool last = c->received == c->total;
  const bool refill = c->burst_acks ? c->held > 0 && c->held == burst
                                    : c->held > 0 && ((c->wait_dry ? c->dry_at == c->received
                                                                   : c->held >= c->hold) ||
                                                      last);
  if (refill) {
    const int n = c->held;
    c->held = 0;
    if (c->release_all) {
      tr_edge_release(c->e, n);
    } else {
      for (int i = 0; i < n; i++) {
        if (c->inflight) atomic_fetch_sub(c->inflight, 1);
        tr_edge_release(c->e, 1);
      }
    }
    if (c->burst_acks) send_go(tr_edge_from(c->e));
  }
  if (last && !c->done) {
    c->done = true;
    tr_graph_done(c->g, self);
  }
  return 0;
}

static const tr_behaviour consumer_behaviour = {.name = "consumer", .receive = consumer_receive};

static void a_producer_never_has_more_than_its_credits_in_flight(void **state) {
  (void)state;
  static const struct {
    int credits, wake_at;
  } cases[] = {{1, 1}, {8, 1}, {8, 4}, {16, 8}, {16, 16}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const int credits = cases[k].credits, wake_at = cases[k].wake_at;
    const int64_t total = (int64_t)credits * 64;
    tr_graph *g = graph_new();
    producer p = {.g = g, .total = total, .wake_at = wake_at, .report_dry = true};
    consumer c = {.g = g, .total = total, .hold = credits, .wait_dry = true, .release_all = true};
    tr_actor *pa = add(g, "producer", TR_ACTOR_PINNED, &producer_behaviour, &p);
    tr_actor *ca = add(g, "consumer", TR_ACTOR_PINNED, &consumer_behaviour, &c);
    p.e = c.e = connect(g, pa, ca, credits, wake_at);
    assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
    /* The consumer gives nothing back before it holds every credit's item and the producer
     * has found no more: it held exactly the credits at once, never more, and each refill
     * (one release of them all) woke the producer exactly once. */
    const int64_t refills = total / credits - 1;
    assert_int_equal(c.received, total);
    assert_int_equal(c.out_of_order, 0);
    assert_int_equal(c.most_held, credits);
    assert_int_equal(tr_edge_peak(p.e), credits);
    assert_int_equal(tr_edge_available(p.e), credits);
    assert_int_equal(p.failed_acquires, refills);
    assert_int_equal(p.wakes, refills);
    assert_int_equal(p.foreign_wakes, 0);
    assert_int_equal(p.early_wakes, 0);
    tr_graph_free(g);
  }
}

static void peak_is_exactly_the_most_in_flight(void **state) {
  (void)state;
  static const int bursts[] = {3, 7, 5, 2, 6};
  tr_graph *g = graph_new();
  producer p = {.g = g, .total = 3 + 7 + 5 + 2 + 6, .bursts = bursts, .nbursts = 5};
  consumer c = {.g = g, .total = p.total, .burst_acks = true};
  tr_actor *pa = add(g, "producer", TR_ACTOR_LOOP, &producer_behaviour, &p);
  tr_actor *ca = add(g, "consumer", TR_ACTOR_PINNED, &consumer_behaviour, &c);
  p.e = c.e = connect(g, pa, ca, 8, 4);
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  assert_int_equal(c.received, p.total);
  assert_int_equal(c.most_held, 7);
  assert_int_equal(tr_edge_peak(p.e), 7); /* not the credits (8), not the last burst (6) */
  assert_int_equal(tr_edge_available(p.e), 8);
  assert_int_equal(p.failed_acquires, 0);
  assert_int_equal(p.wakes, 0); /* never starved, so never woken */
  tr_graph_free(g);
}

/* The consumer holds every credit until the producer is dry, then gives them back one at a
 * time: the producer is woken once wake_at are free, not once per credit. With wake_at =
 * credits / 2 that is one or two wake-ups per refill: about total / wake_at in all, never
 * one per item. (A wake-up that finds fewer than wake_at free is counted apart: see
 * a_wake_up_finds_wake_at_credits_free.) */
static void a_starved_producer_is_woken_once_per_wake_at_credits(void **state) {
  (void)state;
  static const int credit_counts[] = {4, 16, 64};
  for (size_t k = 0; k < sizeof credit_counts / sizeof *credit_counts; k++) {
    const int credits = credit_counts[k], wake_at = credits / 2;
    const int64_t total = (int64_t)credits * 100;
    tr_graph *g = graph_new();
    producer p = {.g = g, .total = total, .wake_at = wake_at, .report_dry = true};
    consumer c = {.g = g, .total = total, .hold = credits, .wait_dry = true};
    tr_actor *pa = add(g, "producer", TR_ACTOR_PINNED, &producer_behaviour, &p);
    tr_actor *ca = add(g, "consumer", TR_ACTOR_LOOP, &consumer_behaviour, &c);
    p.e = c.e = connect(g, pa, ca, credits, wake_at);
    assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
    assert_int_equal(c.received, total);
    assert_int_equal(c.most_held, credits);
    const int64_t refills = total / credits - 1; /* the producer was dry before each */
    const int64_t wakes = p.wakes - p.early_wakes;
    if (p.wakes < refills || wakes > total / wake_at)
      fail_msg("credits %d, wake_at %d, %lld items: %lld wake-ups, expected %lld to %lld",
               credits, wake_at, (long long)total, (long long)wakes, (long long)refills,
               (long long)(total / wake_at));
    tr_graph_free(g);
  }
}

static void an_edge_needs_credits_and_wake_at_within_them(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  consumer c = {0};
  tr_actor *a = add(g, "a", TR_ACTOR_PINNED, &consumer_behaviour, &c);
  tr_actor *b = add(g, "b", TR_ACTOR_LOOP, &consumer_behaviour, &c);
  static const struct {
    int credits, wake_at;
  } bad[] = {{0, 0}, {-1, 0}, {0, 1}, {4, 5}, {1, 2}, {INT32_MIN, 0}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    tr_edge *e = (tr_edge *)&c; /* not NULL, so that the test sees it cleared */
    int rc = tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .type = &item_type,
                                                   .credits = bad[k].credits,
                                                   .wake_at = bad[k].wake_at},
                              &e);
    if (rc != TR_EINVAL)
      fail_msg("credits %d, wake_at %d: status %d", bad[k].credits, bad[k].wake_at, rc);
    assert_null(e);
  }
  /* the edges of the limits are fine, in either direction */
  connect(g, a, b, 1, 0);
  connect(g, b, a, 4, 4);
  connect(g, a, b, 4, 0);
  tr_graph_free(g); /* never run */
}

/* ---- steps and the end of a run --------------------------------------------------------- */

/* A source claims steps first, first + 1, ... as fast as it can, a chunk per message to
 * itself, and counts those it claimed. It is done once a claim has failed and, unless the
 * run has a step limit only, the end message has come. */
typedef struct source {
  tr_graph *g;
  int64_t next, claimed;
  bool stopped, wait_end, done;
  int ends;                /* end messages received */
  int64_t end_said;        /* what the last one said */
  int64_t end_seen;        /* tr_graph_end_step when the claim failed */
  int64_t finish_after;    /* > 0: call tr_graph_finish after claiming this many */
  int64_t reclaim_ok;      /* claims of already-claimed steps that said yes, after the end */
  int64_t beyond_ok;       /* claims far beyond the end that said yes */
} source;

static void source_maybe_done(tr_actor *self, source *s) {
  if (s->stopped && (!s->wait_end || s->ends > 0) && !s->done) {
    s->done = true;
    tr_graph_done(s->g, self);
  }
}

static int source_start(tr_actor *self) {
  source *s = tr_actor_state(self);
  s->next = tr_graph_first_step(s->g);
  send_go(self);
  return 0;
}

static int source_receive(tr_actor *self, tr_msg *msg) {
  source *s = tr_actor_state(self);
  if (msg->type == &tr_graph_end_type) {
    s->ends++;
    s->end_said = ((tr_graph_end_msg *)msg)->end_step;
  } else if (msg->type == &go_type && !s->stopped) {
    for (int i = 0; i < 256; i++) {
      if (!tr_graph_claim_step(s->g, s->next)) {
        s->stopped = true;
        s->end_seen = tr_graph_end_step(s->g);
        for (int64_t k = s->next - 3; k < s->next; k++)
          if (k >= tr_graph_first_step(s->g) && tr_graph_claim_step(s->g, k)) s->reclaim_ok++;
        if (tr_graph_claim_step(s->g, s->next + 1000) || tr_graph_claim_step(s->g, INT64_MAX - 1))
          s->beyond_ok++;
        break;
      }
      s->next++;
      if (++s->claimed == s->finish_after) tr_graph_finish(s->g);
    }
    if (!s->stopped) send_go(self);
  }
  source_maybe_done(self, s);
  return 0;
}

static const tr_behaviour source_behaviour = {
    .name = "source", .start = source_start, .receive = source_receive};

/* An actor with nothing to do but wait for the end. */
typedef struct waiter {
  tr_graph *g;
  int ends;
  int64_t end_said;
} waiter;

static int waiter_receive(tr_actor *self, tr_msg *msg) {
  waiter *w = tr_actor_state(self);
  if (msg->type == &tr_graph_end_type) {
    if (w->ends++ == 0) tr_graph_done(w->g, self);
    w->end_said = ((tr_graph_end_msg *)msg)->end_step;
  }
  return 0;
}

static const tr_behaviour waiter_behaviour = {.name = "waiter", .receive = waiter_receive};

static void a_step_limit_bounds_claims_and_sends_no_end_message(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  source s = {.g = g};
  add(g, "source", TR_ACTOR_PINNED, &source_behaviour, &s);
  assert_int_equal(tr_graph_run(g, 5, 12, 0), 0);
  assert_int_equal(tr_graph_first_step(g), 5);
  assert_int_equal(tr_graph_end_step(g), 12);
  assert_int_equal(s.claimed, 7);  /* steps 5..11 */
  assert_int_equal(s.next, 12);
  assert_int_equal(s.end_seen, 12);
  assert_int_equal(s.reclaim_ok, 3); /* claimed steps stay claimed */
  assert_int_equal(s.beyond_ok, 0);
  assert_int_equal(s.ends, 0);
  tr_graph_free(g);
}

/* Two sources race to claim every step until the time limit: both stop at the same step,
 * the one tr_graph_end_step reports and every actor's end message names. */
static void racing_sources_stop_at_one_end_on_a_time_limit(void **state) {
  (void)state;
  int raced = 0; /* rounds that ran steps: a loaded machine may start the threads late */
  for (int round = 0; round < 12; round++) {
    tr_graph *g = graph_new();
    source a = {.g = g, .wait_end = true}, b = {.g = g, .wait_end = true};
    waiter w = {.g = g};
    add(g, "source-a", TR_ACTOR_PINNED, &source_behaviour, &a);
    add(g, "source-b", round % 3 == 2 ? TR_ACTOR_LOOP : TR_ACTOR_PINNED, &source_behaviour, &b);
    add(g, "waiter", TR_ACTOR_LOOP, &waiter_behaviour, &w);
    const int64_t first = round * 1000;
    uint64_t t0 = tr_now_ns();
    assert_int_equal(tr_graph_run(g, first, 0, 0.01), 0);
    double took = (double)(tr_now_ns() - t0) / 1e9;
    const int64_t end = tr_graph_end_step(g);
    assert_true(end >= first && end < INT64_MAX);
    raced += end > first;
    assert_int_equal(a.claimed, end - first);
    assert_int_equal(b.claimed, end - first);
    /* a source refused a claim knows where the run ends */
    if (a.end_seen != end || b.end_seen != end)
      fail_msg("round %d: refused a claim, the sources read end steps %lld and %lld, not %lld",
               round, (long long)a.end_seen, (long long)b.end_seen, (long long)end);
    assert_int_equal(a.ends, 1);
    assert_int_equal(b.ends, 1);
    assert_int_equal(w.ends, 1);
    assert_int_equal(a.end_said, end);
    assert_int_equal(b.end_said, end);
    assert_int_equal(w.end_said, end);
    assert_int_equal(a.beyond_ok + b.beyond_ok, 0);
    if (!(took >= 0.009 && took < 5)) fail_msg("a 0.01 s run took %.3f s", took);
    tr_graph_free(g);
  }
  assert_true(raced > 0);
}

/* tr_graph_finish from a source ends the run after the steps claimed, before the step
 * limit, and the other source stops at the same step. */
static void finish_ends_the_run_after_the_steps_claimed(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  source a = {.g = g, .wait_end = true, .finish_after = 1000};
  source b = {.g = g, .wait_end = true};
  waiter w = {.g = g};
  add(g, "source-a", TR_ACTOR_PINNED, &source_behaviour, &a);
  add(g, "source-b", TR_ACTOR_PINNED, &source_behaviour, &b);
  add(g, "waiter", TR_ACTOR_LOOP, &waiter_behaviour, &w);
  const int64_t limit = INT64_C(1) << 40;
  assert_int_equal(tr_graph_run(g, 0, limit, 0), 0);
  const int64_t end = tr_graph_end_step(g);
  assert_true(end >= 1000 && end < limit);
  assert_int_equal(a.claimed, end);
  assert_int_equal(b.claimed, end);
  assert_int_equal(a.end_seen, end);
  assert_int_equal(b.end_seen, end);
  assert_int_equal(a.end_said, end);
  assert_int_equal(b.end_said, end);
  assert_int_equal(w.end_said, end);
  assert_int_equal(a.ends + b.ends + w.ends, 3);
  tr_graph_free(g);
}

static void a_step_limit_ends_a_run_before_its_time_limit(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  source s = {.g = g};
  add(g, "source", TR_ACTOR_PINNED, &source_behaviour, &s);
  uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_graph_run(g, 0, 100, 30.0), 0);
  double took = (double)(tr_now_ns() - t0) / 1e9;
  assert_int_equal(s.claimed, 100);
  assert_int_equal(tr_graph_end_step(g), 100);
  if (took > 5) fail_msg("a 100-step run with a 30 s limit took %.1f s", took);
  tr_graph_free(g);
}

/* ---- done and failure ------------------------------------------------------------------- */

typedef struct finisher {
  tr_graph *g;
  int delay_ms; /* 0: done at start; else done on a timer (loop actors only) */
  bool finished;
} finisher;

static int finisher_start(tr_actor *self) {
  finisher *f = tr_actor_state(self);
  if (f->delay_ms == 0) {
    f->finished = true;
    tr_graph_done(f->g, self);
    return 0;
  }
  return tr_actor_timer_start(self, (uint64_t)f->delay_ms, 0, 7);
}

static int finisher_receive(tr_actor *self, tr_msg *msg) {
  finisher *f = tr_actor_state(self);
  if (msg->type == &tr_timer_msg_type && !f->finished) {
    f->finished = true;
    tr_graph_done(f->g, self);
  }
  return 0;
}

static const tr_behaviour finisher_behaviour = {
    .name = "finisher", .start = finisher_start, .receive = finisher_receive};

static void run_returns_once_every_actor_is_done(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  finisher quick[3] = {{.g = g}, {.g = g}, {.g = g}};
  finisher slow = {.g = g, .delay_ms = 50};
  add(g, "quick-0", TR_ACTOR_PINNED, &finisher_behaviour, &quick[0]);
  add(g, "slow", TR_ACTOR_LOOP, &finisher_behaviour, &slow);
  add(g, "quick-1", TR_ACTOR_LOOP, &finisher_behaviour, &quick[1]);
  add(g, "quick-2", TR_ACTOR_PINNED, &finisher_behaviour, &quick[2]);
  uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  double took = (double)(tr_now_ns() - t0) / 1e9;
  for (int i = 0; i < 3; i++) assert_true(quick[i].finished);
  assert_true(slow.finished);
  if (took < 0.049) fail_msg("the run returned after %.3f s, before the slow actor was done", took);
  tr_graph_free(g);
}

static int broken_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  return tr_actor_fail(self, TR_EIO, "reading shard %d: disk on fire", 3);
}
static int broken_start(tr_actor *self) {
  send_go(self);
  return 0;
}
static const tr_behaviour broken_behaviour = {
    .name = "broken", .start = broken_start, .receive = broken_receive};

static void a_failing_actor_stops_the_run_with_its_status_and_name(void **state) {
  (void)state;
  for (int kind = TR_ACTOR_PINNED; kind <= TR_ACTOR_LOOP; kind++) {
    tr_graph *g = graph_new();
    waiter w = {.g = g}; /* would wait for ever: only the failure ends the run */
    add(g, "waiter", TR_ACTOR_PINNED, &waiter_behaviour, &w);
    add(g, "shard-reader", (tr_actor_kind)kind, &broken_behaviour, NULL);
    assert_int_equal(tr_graph_run(g, 0, 0, 60.0), TR_EIO);
    const char *err = tr_graph_error(g);
    if (!strstr(err, "shard-reader") || !strstr(err, "disk on fire"))
      fail_msg("error '%s' does not name the actor and its failure", err);
    tr_graph_free(g);
  }
}

static void run_rejects_missing_or_bad_limits(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  assert_int_equal(tr_graph_run(g, 0, 10, 0), TR_EINVAL); /* no actors */
  source s = {.g = g};
  add(g, "source", TR_ACTOR_PINNED, &source_behaviour, &s);
  static const struct {
    int64_t first, end;
    double seconds;
  } bad[] = {
      {0, 0, 0},     /* no limit at all */
      {5, 5, 0},     /* an empty range */
      {5, 3, 0},     /* a backward one */
      {-1, 10, 0},   /* a negative first step */
      {0, -10, 0},   /* a negative end */
      {0, 10, -1.0}, /* negative time */
      {0, 0, NAN},
      {0, 10, NAN},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    int rc = tr_graph_run(g, bad[k].first, bad[k].end, bad[k].seconds);
    if (rc != TR_EINVAL)
      fail_msg("run(%lld, %lld, %g): status %d", (long long)bad[k].first, (long long)bad[k].end,
               bad[k].seconds, rc);
  }
  /* a rejected run leaves the graph ready for a good one */
  assert_int_equal(tr_graph_run(g, 2, 4, 0), 0);
  assert_int_equal(s.claimed, 2);
  tr_graph_free(g);
}

/* ---- stress: pairs that share nothing, each producer streaming through its own edge -------- */

enum { PAIRS = 4 };

static void many_producers_stream_in_order_within_their_credits(void **state) {
  (void)state;
  const int64_t total = (int64_t)test_scaled(20000);
  tr_graph *g = graph_new();
  producer p[PAIRS];
  consumer c[PAIRS];
  _Atomic int inflight[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    const int credits = 4 << i, wake_at = i % 2 ? credits / 2 : 1;
    atomic_init(&inflight[i], 0);
    p[i] = (producer){.g = g, .total = total, .wake_at = wake_at, .inflight = &inflight[i]};
    c[i] = (consumer){.g = g, .total = total, .hold = 1, .inflight = &inflight[i]};
    char name[32];
    snprintf(name, sizeof name, "producer-%d", i);
    tr_actor *pa = add(g, name, i % 2 ? TR_ACTOR_PINNED : TR_ACTOR_LOOP, &producer_behaviour, &p[i]);
    snprintf(name, sizeof name, "consumer-%d", i);
    tr_actor *ca = add(g, name, i % 2 ? TR_ACTOR_LOOP : TR_ACTOR_PINNED, &consumer_behaviour, &c[i]);
    p[i].e = c[i].e = connect(g, pa, ca, credits, wake_at);
  }
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  for (int i = 0; i < PAIRS; i++) {
    const int credits = tr_edge_credits(p[i].e);
    assert_int_equal(c[i].received, total);
    assert_int_equal(c[i].out_of_order, 0);
    assert_int_equal(p[i].over_credits, 0);
    assert_int_equal(p[i].foreign_wakes, 0);
    assert_true(tr_edge_peak(p[i].e) >= 1 && tr_edge_peak(p[i].e) <= credits);
    assert_int_equal(tr_edge_available(p[i].e), credits);
    /* a wake-up needs wake_at acquires since the last: at most total / wake_at of them */
    if (p[i].wakes - p[i].early_wakes > total / p[i].wake_at + 1)
      fail_msg("edge %d (wake_at %d): %lld wake-ups for %lld items", i, p[i].wake_at,
               (long long)p[i].wakes, (long long)total);
  }
  tr_graph_free(g);
}

/* Consumers give credits back one at a time as items arrive while their producers take them:
 * a wake-up sent has to find wake_at credits free, however the two interleave. */
static void a_wake_up_finds_wake_at_credits_free(void **state) {
  (void)state;
  const int64_t total = (int64_t)test_scaled(40000);
  tr_graph *g = graph_new();
  producer p[2];
  consumer c[2];
  for (int i = 0; i < 2; i++) {
    p[i] = (producer){.g = g, .total = total, .wake_at = 2};
    c[i] = (consumer){.g = g, .total = total, .hold = 1};
    tr_actor *pa = add(g, i ? "producer-1" : "producer-0", TR_ACTOR_PINNED, &producer_behaviour, &p[i]);
    tr_actor *ca = add(g, i ? "consumer-1" : "consumer-0", TR_ACTOR_PINNED, &consumer_behaviour, &c[i]);
    p[i].e = c[i].e = connect(g, pa, ca, 4, 2);
  }
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c[i].received, total);
    if (p[i].early_wakes)
      fail_msg("edge %d: %d of %lld wake-ups found fewer than wake_at (2) credits free", i,
               p[i].early_wakes, (long long)p[i].wakes);
  }
  tr_graph_free(g);
}

/* ---- notify edges, shared steps, services, control edges, printing -------------------------- */

/* A relay's view: on a notify edge every release comes back as a credit message with its
 * count, even while the producer never ran short. */
typedef struct notified {
  tr_graph *g;
  tr_edge *e;
  int64_t total, sent, credited, messages;
  bool done;
} notified;

static void notified_send(tr_actor *self, notified *n) {
  while (n->sent < n->total && tr_edge_acquire(n->e)) {
    item_msg *m = tr_msg_new(&item_type);
    m->seq = n->sent++;
    tr_edge_send(n->e, m);
  }
  if (n->credited == n->total && !n->done) {
    n->done = true;
    tr_graph_done(n->g, self);
  }
}
static int notified_start(tr_actor *self) {
  notified_send(self, tr_actor_state(self));
  return 0;
}
static int notified_receive(tr_actor *self, tr_msg *msg) {
  notified *n = tr_actor_state(self);
  if (msg->type == &tr_edge_credit_type) {
    n->credited += ((tr_edge_credit_msg *)msg)->count;
    n->messages++;
  }
  notified_send(self, n);
  return 0;
}
static const tr_behaviour notified_behaviour = {
    .name = "notified", .start = notified_start, .receive = notified_receive};

/* Releases every item at once, then says it is done after `total`. */
typedef struct releaser {
  tr_graph *g;
  tr_edge *e;
  int64_t total, received;
} releaser;
static int releaser_receive(tr_actor *self, tr_msg *msg) {
  releaser *r = tr_actor_state(self);
  if (msg->type != &item_type) return 0;
  tr_edge_release(r->e, 1);
  if (++r->received == r->total) tr_graph_done(r->g, self);
  return 0;
}
static const tr_behaviour releaser_behaviour = {.name = "releaser", .receive = releaser_receive};

static void a_notify_edge_reports_every_release_to_its_producer(void **state) {
  (void)state;
  const int64_t total = (int64_t)test_scaled(2000);
  tr_graph *g = graph_new();
  notified n = {.g = g, .total = total};
  releaser r = {.g = g, .total = total};
  tr_actor *pa = add(g, "relay", TR_ACTOR_PINNED, &notified_behaviour, &n);
  tr_actor *ca = add(g, "stage", TR_ACTOR_PINNED, &releaser_behaviour, &r);
  assert_int_equal(tr_graph_connect(g, &(tr_edge_config){.from = pa, .to = ca, .type = &item_type,
                                                          .credits = 8, .notify = 1},
                                    &n.e),
                   0);
  r.e = n.e;
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  assert_int_equal(r.received, total);
  assert_int_equal(n.credited, total);  /* every release, counted */
  assert_int_equal(n.messages, total);  /* one message per release of one */
  tr_graph_free(g);
}

/* Sources that take steps in turn: every step of the run exactly once, none beyond it. */
typedef struct taker {
  tr_graph *g;
  unsigned char *seen; /* [step] */
  int64_t taken;
} taker;
static int taker_start(tr_actor *self) {
  taker *t = tr_actor_state(self);
  for (int64_t step; (step = tr_graph_take_step(t->g, self)) >= 0; t->taken++) t->seen[step]++;
  tr_graph_done(t->g, self);
  return 0;
}
static int idle_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour taker_behaviour = {.name = "taker", .start = taker_start,
                                             .receive = idle_receive};

static void taken_steps_go_to_one_source_each(void **state) {
  (void)state;
  enum { FIRST = 5, END = 5005, SOURCES = 3 };
  unsigned char *seen = calloc(END + 100, 1);
  tr_graph *g = graph_new();
  taker t[SOURCES];
  for (int i = 0; i < SOURCES; i++) {
    t[i] = (taker){.g = g, .seen = seen};
    char name[16];
    snprintf(name, sizeof name, "taker-%d", i);
    add(g, name, TR_ACTOR_PINNED, &taker_behaviour, &t[i]);
  }
  assert_int_equal(tr_graph_run(g, FIRST, END, 0), 0);
  int64_t total = 0;
  for (int i = 0; i < SOURCES; i++) total += t[i].taken;
  assert_int_equal(total, END - FIRST);
  for (int64_t k = 0; k < END + 100; k++)
    if (seen[k] != (k >= FIRST && k < END)) fail_msg("step %lld taken %d times", (long long)k, seen[k]);
  free(seen);
  tr_graph_free(g);
}

static const tr_behaviour idle_behaviour = {.name = "idle", .receive = idle_receive};

static void a_run_ends_without_waiting_for_its_services(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  finisher f = {.g = g};
  add(g, "worker", TR_ACTOR_PINNED, &finisher_behaviour, &f);
  tr_actor *svc;
  assert_int_equal(tr_graph_add_service(g, &(tr_actor_config){.name = "relay", .kind = TR_ACTOR_LOOP,
                                                              .behaviour = &idle_behaviour},
                                        &svc),
                   0);
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  assert_true(f.finished);
  tr_graph_free(g);

  g = graph_new(); /* services alone are no run */
  assert_int_equal(tr_graph_add_service(g, &(tr_actor_config){.name = "relay", .kind = TR_ACTOR_LOOP,
                                                              .behaviour = &idle_behaviour},
                                        &svc),
                   0);
  assert_int_equal(tr_graph_run(g, 0, 1, 0), TR_EINVAL);
  tr_graph_free(g);
}

/* A control edge whose protocol allowed one message in flight sees two. */
typedef struct chatty {
  tr_graph *g;
  tr_edge *e;
} chatty;
static int chatty_start(tr_actor *self) {
  chatty *c = tr_actor_state(self);
  int rc = tr_edge_send_control(c->e, tr_msg_new(&item_type));
  return rc ? rc : tr_edge_send_control(c->e, tr_msg_new(&item_type));
}
static const tr_behaviour chatty_behaviour = {.name = "chatty", .start = chatty_start,
                                              .receive = idle_receive};

static void a_control_edge_beyond_its_credits_fails_naming_it(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  chatty c = {.g = g};
  tr_actor *a = add(g, "chatty", TR_ACTOR_PINNED, &chatty_behaviour, &c);
  tr_actor *b = add(g, "listener", TR_ACTOR_LOOP, &idle_behaviour, NULL);
  assert_int_equal(tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .name = "norms",
                                                          .credits = 1},
                                    &c.e),
                   0);
  assert_int_equal(tr_graph_run(g, 0, 0, 30.0), TR_ESTATE);
  const char *err = tr_graph_error(g);
  if (!strstr(err, "chatty") || !strstr(err, "'norms'") || !strstr(err, "listener"))
    fail_msg("the error does not name the edge and its ends: '%s'", err);
  tr_graph_free(g);
}

static void print_shows_actors_edges_and_credits_in_flight(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  tr_actor *a = add(g, "loader", TR_ACTOR_LOOP, &idle_behaviour, NULL);
  tr_actor *b = add(g, "stage0", TR_ACTOR_PINNED, &idle_behaviour, NULL);
  tr_edge *e = connect(g, a, b, 4, 1);
  assert_int_equal(tr_edge_acquire(e), 1); /* two buffers out */
  assert_int_equal(tr_edge_acquire(e), 1);
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  tr_graph_print(g, f);
  fclose(f);
  const char *want[] = {"actor 'loader' (loop)", "actor 'stage0' (pinned)",
                        "edge loader -> stage0 'item_msg' (item_msg): 2 of 4 in flight, peak 2"};
  for (size_t k = 0; k < sizeof want / sizeof *want; k++)
    if (!strstr(text, want[k])) fail_msg("the print lacks \"%s\":\n%s", want[k], text);
  free(text);
  tr_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_producer_never_has_more_than_its_credits_in_flight),
      cmocka_unit_test(peak_is_exactly_the_most_in_flight),
      cmocka_unit_test(a_starved_producer_is_woken_once_per_wake_at_credits),
      cmocka_unit_test(an_edge_needs_credits_and_wake_at_within_them),
      cmocka_unit_test(a_step_limit_bounds_claims_and_sends_no_end_message),
      cmocka_unit_test(racing_sources_stop_at_one_end_on_a_time_limit),
      cmocka_unit_test(finish_ends_the_run_after_the_steps_claimed),
      cmocka_unit_test(a_step_limit_ends_a_run_before_its_time_limit),
      cmocka_unit_test(run_returns_once_every_actor_is_done),
      cmocka_unit_test(a_failing_actor_stops_the_run_with_its_status_and_name),
      cmocka_unit_test(run_rejects_missing_or_bad_limits),
      cmocka_unit_test(many_producers_stream_in_order_within_their_credits),
      cmocka_unit_test(a_wake_up_finds_wake_at_credits_free),
      cmocka_unit_test(a_notify_edge_reports_every_release_to_its_producer),
      cmocka_unit_test(taken_steps_go_to_one_source_each),
      cmocka_unit_test(a_run_ends_without_waiting_for_its_services),
      cmocka_unit_test(a_control_edge_beyond_its_credits_fails_naming_it),
      cmocka_unit_test(print_shows_actors_edges_and_credits_in_flight),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
