/* test_park.c — parking and waking: two pinned actors ping-pong with random delays, and a
 * thread streams bursts to a pinned actor, so the receiver parks (or is about to) at random
 * points of the protocol and of its spin. A lost wake-up hangs the exchange; a watchdog then
 * fails the test instead of letting it hang. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_util.h"
#include "troupe.h"

typedef struct ball {
  tr_msg hdr;
  uint64_t n;
} ball;
static TR_MSGTYPE_DEFINE(ball_type, ball);

typedef struct player {
  tr_actor *peer;
  uint64_t rounds; /* stop once a ball with this count arrives */
  uint64_t rng;
  unsigned max_delay_spins;
  _Atomic uint64_t *progress;
} player;

static int player_receive(tr_actor *self, tr_msg *m) {
  player *p = tr_actor_state(self);
  uint64_t n = ((ball *)m)->n;
  atomic_store_explicit(p->progress, n, memory_order_relaxed);
  if (n >= p->rounds) {
    tr_system_stop(tr_actor_system(self), 0);
    return 0;
  }
  /* A random pause before answering: sometimes the peer is still spinning, sometimes it is
   * announcing its sleep, sometimes asleep. */
  unsigned spins = (unsigned)(test_rand(&p->rng) % (p->max_delay_spins + 1));
  for (unsigned i = 0; i < spins; i++) tr_cpu_relax();
  ball *b = tr_msg_new(&ball_type);
  b->n = n + 1;
  tr_actor_send(p->peer, b);
  return 0;
}
static const tr_behaviour player_behaviour = {.name = "player", .receive = player_receive};

typedef struct watchdog {
  tr_system *sys;
  _Atomic uint64_t *progress;
  _Atomic int done;
  int stalled;
} watchdog;

static void *watch(void *arg) {
  watchdog *w = arg;
  uint64_t last = UINT64_MAX;
  while (!atomic_load(&w->done)) {
    for (int i = 0; i < 50 && !atomic_load(&w->done); i++) usleep(100 * 1000);
    uint64_t now = atomic_load(w->progress);
    if (!atomic_load(&w->done) && now == last) {
      w->stalled = 1; /* 5 s without a single exchange: a wake-up was lost */
      tr_system_stop(w->sys, TR_ETIMEDOUT);
      return NULL;
    }
    last = now;
  }
  return NULL;
}

static tr_actor *spawn_pinned(tr_system *sys, const char *name, const tr_behaviour *b,
                              void *state, int spin_us) {
  tr_actor *a;
  assert_int_equal(tr_actor_spawn(sys,
                                  &(tr_actor_config){.name = name,
                                                     .kind = TR_ACTOR_PINNED,
                                                     .behaviour = b,
                                                     .state = state,
                                                     .spin_us = spin_us},
                                  &a),
                   0);
  return a;
}

/* Runs `sys` while a watchdog looks at `progress`; fails the test if it stalled. */
static void run_watched(tr_system *sys, _Atomic uint64_t *progress, uint64_t expect,
                        const char *what) {
  watchdog w = {sys, progress, 0, 0};
  pthread_t wt;
  assert_int_equal(pthread_create(&wt, NULL, watch, &w), 0);
  int rc = tr_system_run(sys);
  atomic_store(&w.done, 1);
  pthread_join(wt, NULL);
  if (w.stalled) fail_msg("no progress for 5 s after %llu of %llu %s: lost wake-up",
                          (unsigned long long)atomic_load(progress),
                          (unsigned long long)expect, what);
  assert_int_equal(rc, 0);
  assert_int_equal(atomic_load(progress), expect);
}

static void ping_pong(uint64_t rounds, int spin_us, unsigned max_delay_spins) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, NULL), 0);
  _Atomic uint64_t progress = 0;
  player pa = {NULL, rounds, 0x9E3779B97F4A7C15ULL, max_delay_spins, &progress};
  player pb = {NULL, rounds, 0xD1B54A32D192ED03ULL, max_delay_spins, &progress};
  tr_actor *a = spawn_pinned(sys, "ping", &player_behaviour, &pa, spin_us);
  tr_actor *b = spawn_pinned(sys, "pong", &player_behaviour, &pb, spin_us);
  pa.peer = b;
  pb.peer = a;
  ball *first = tr_msg_new(&ball_type);
  first->n = 0;
  tr_actor_send(a, first);
  run_watched(sys, &progress, rounds, "exchanges");
  tr_system_free(sys);
}

/* Both actors park at once when idle: every exchange goes through the futex path. */
static void park_wake_loses_no_wakeup_when_parking_at_once(void **state) {
  (void)state;
  ping_pong(test_scaled(500000), TR_SPIN_NONE, 200);
}

/* A short spin: the reply lands before, during or after the switch to parking. */
static void park_wake_loses_no_wakeup_at_the_spin_boundary(void **state) {
  (void)state;
  ping_pong(test_scaled(500000), 1, 300);
}

/* A pinned actor's spin learns streams (tr_spin): its first look after an empty mailbox
 * comes later and later while messages stream, at once again when one comes alone. */
static void spin_waits_longer_only_while_messages_stream(void **state) {
  (void)state;
  tr_spin s = TR_SPIN_INIT;
  for (int i = 0; i < 12; i++) { /* every first look finds a message */
    tr_spin_begin(&s);
    assert_int_equal(s.pauses, i < 10 ? 1u << i : TR_SPIN_GAP_MAX);
    tr_spin_wait(&s);
    tr_spin_found(&s);
  }
  assert_int_equal(s.gap, TR_SPIN_GAP_MAX);
  /* The first look finds nothing: the next looks come after 1, 2, 4, then 8 pauses. */
  tr_spin_begin(&s);
  unsigned expect[] = {TR_SPIN_GAP_MAX, 1, 2, 4, 8, 8, 8};
  for (int i = 0; i < 7; i++) {
    assert_int_equal(s.pauses, expect[i]);
    tr_spin_wait(&s);
  }
  tr_spin_found(&s);
  assert_int_equal(s.gap, 1); /* and the next idle period starts looking at once */
}

/* Bursts of messages from a thread teach the receiver's spin a long first wait; pauses
 * between them make it park at random points of that wait. A lost wake-up stalls the
 * stream and the watchdog fails the test. */
typedef struct counter {
  uint64_t expect;
  _Atomic uint64_t *progress;
} counter;

static int counter_receive(tr_actor *self, tr_msg *m) {
  (void)m;
  counter *c = tr_actor_state(self);
  uint64_t n = atomic_load_explicit(c->progress, memory_order_relaxed) + 1;
  atomic_store_explicit(c->progress, n, memory_order_relaxed);
  if (n == c->expect) tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour counter_behaviour = {.name = "counter", .receive = counter_receive};

typedef struct bursts {
  tr_actor *to;
  uint64_t total, rng;
} bursts;

static void *send_bursts(void *arg) {
  bursts *b = arg;
  tr_msg_pool *pool = tr_msg_pool_new();
  tr_msg_pool_attach(pool);
  for (uint64_t sent = 0; sent < b->total;) {
    uint64_t n = 1 + test_rand(&b->rng) % 2000;
    for (uint64_t i = 0; i < n && sent < b->total; i++, sent++)
      tr_actor_send(b->to, tr_msg_new(&ball_type));
    unsigned spins = (unsigned)(test_rand(&b->rng) % 4000); /* up to ~100 µs */
    for (unsigned i = 0; i < spins; i++) tr_cpu_relax();
  }
  tr_msg_pool_attach(NULL);
  return pool; /* freed once the receiver has freed every message */
}

static void stream_bursts(uint64_t total, int spin_us) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, NULL), 0);
  _Atomic uint64_t progress = 0;
  counter c = {total, &progress};
  bursts b = {spawn_pinned(sys, "counter", &counter_behaviour, &c, spin_us), total,
              0x243F6A8885A308D3ULL};
  pthread_t st;
  assert_int_equal(pthread_create(&st, NULL, send_bursts, &b), 0);
  run_watched(sys, &progress, total, "messages");
  void *pool;
  pthread_join(st, &pool);
  tr_system_free(sys);
  tr_msg_pool_free(pool);
}

static void park_wake_loses_no_wakeup_after_streams(void **state) {
  (void)state;
  stream_bursts(test_scaled(4000000), 0);
}

/* A spin shorter than the learnt first wait: the actor parks right after it. */
static void park_wake_loses_no_wakeup_after_streams_with_a_short_spin(void **state) {
  (void)state;
  stream_bursts(test_scaled(4000000), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(park_wake_loses_no_wakeup_when_parking_at_once),
      cmocka_unit_test(park_wake_loses_no_wakeup_at_the_spin_boundary),
      cmocka_unit_test(spin_waits_longer_only_while_messages_stream),
      cmocka_unit_test(park_wake_loses_no_wakeup_after_streams),
      cmocka_unit_test(park_wake_loses_no_wakeup_after_streams_with_a_short_spin),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
