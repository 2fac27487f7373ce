/* test_park.c — parking and waking: two pinned actors ping-pong with random delays, so the
 * receiver parks (or is about to) at random points of the protocol. A lost wake-up hangs
 * the exchange; a watchdog then fails the test instead of letting it hang. */
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

static void ping_pong(uint64_t rounds, int spin_us, unsigned max_delay_spins) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, NULL), 0);
  _Atomic uint64_t progress = 0;
  player pa = {NULL, rounds, 0x9E3779B97F4A7C15ULL, max_delay_spins, &progress};
  player pb = {NULL, rounds, 0xD1B54A32D192ED03ULL, max_delay_spins, &progress};
  tr_actor *a, *b;
  assert_int_equal(tr_actor_spawn(sys,
                                  &(tr_actor_config){.name = "ping",
                                                     .kind = TR_ACTOR_PINNED,
                                                     .behaviour = &player_behaviour,
                                                     .state = &pa,
                                                     .spin_us = spin_us},
                                  &a),
                   0);
  assert_int_equal(tr_actor_spawn(sys,
                                  &(tr_actor_config){.name = "pong",
                                                     .kind = TR_ACTOR_PINNED,
                                                     .behaviour = &player_behaviour,
                                                     .state = &pb,
                                                     .spin_us = spin_us},
                                  &b),
                   0);
  pa.peer = b;
  pb.peer = a;
  ball *first = tr_msg_new(&ball_type);
  first->n = 0;
  tr_actor_send(a, first);

  watchdog w = {sys, &progress, 0, 0};
  pthread_t wt;
  assert_int_equal(pthread_create(&wt, NULL, watch, &w), 0);
  int rc = tr_system_run(sys);
  atomic_store(&w.done, 1);
  pthread_join(wt, NULL);
  if (w.stalled) fail_msg("no progress for 5 s after %llu exchanges: lost wake-up",
                          (unsigned long long)atomic_load(&progress));
  assert_int_equal(rc, 0);
  assert_int_equal(atomic_load(&progress), rounds);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(park_wake_loses_no_wakeup_when_parking_at_once),
      cmocka_unit_test(park_wake_loses_no_wakeup_at_the_spin_boundary),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
