/* test_system.c — actors' lives: spawn and stop, errors, shutdown with messages in flight,
 * the priority lane, pinned ↔ loop traffic, timers, signals, the watchdog and its report,
 * and tracing. */
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <uv.h>

#include "test_util.h"
#include "troupe.h"

typedef struct num_msg {
  tr_msg hdr;
  uint64_t n;
} num_msg;
static TR_MSGTYPE_DEFINE(num_type, num_msg);

static num_msg *num_new(uint64_t n, tr_actor *from) {
  num_msg *m = tr_msg_new(&num_type);
  m->n = n;
  m->hdr.from = from;
  return m;
}

static tr_system *system_new(const tr_system_config *cfg) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, cfg), 0);
  return sys;
}

static tr_actor *spawn(tr_system *sys, const char *name, tr_actor_kind kind,
                       const tr_behaviour *b, void *state) {
  tr_actor *a;
  int rc = tr_actor_spawn(
      sys, &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state}, &a);
  assert_int_equal(rc, 0);
  return a;
}

/* ---- a mesh of hundreds of actors, stopped with messages in flight --------------------- */

enum { MESH = 150 }; /* of each kind */

typedef struct mesh {
  tr_actor *actors[2 * MESH];
  _Atomic uint64_t handled;
  _Atomic int started, stopped, destroyed;
  uint64_t stop_after;
} mesh;

typedef struct mesh_node {
  mesh *m;
  uint64_t rng;
} mesh_node;

static int mesh_start(tr_actor *self) {
  mesh_node *n = tr_actor_state(self);
  atomic_fetch_add(&n->m->started, 1);
  return 0;
}

/* Every message fans out to two random actors: traffic grows until the stop. */
static int mesh_receive(tr_actor *self, tr_msg *msg) {
  mesh_node *n = tr_actor_state(self);
  mesh *m = n->m;
  uint64_t h = atomic_fetch_add(&m->handled, 1) + 1;
  if (h == m->stop_after) tr_system_stop(tr_actor_system(self), 0);
  for (int i = 0; i < 2; i++)
    tr_actor_send(m->actors[test_rand(&n->rng) % (2 * MESH)], num_new(((num_msg *)msg)->n + 1, self));
  return 0;
}

static void mesh_stop(tr_actor *self) {
  mesh_node *n = tr_actor_state(self);
  atomic_fetch_add(&n->m->stopped, 1);
}

static void mesh_destroy(void *state) {
  mesh_node *n = state;
  atomic_fetch_add(&n->m->destroyed, 1);
  free(n);
}

static const tr_behaviour mesh_behaviour = {.name = "mesh",
                                            .start = mesh_start,
                                            .receive = mesh_receive,
                                            .stop = mesh_stop,
                                            .destroy = mesh_destroy};

static void hundreds_of_actors_start_stop_and_free_with_messages_in_flight(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.spin_us = 5});
  mesh m = {.stop_after = test_scaled(100000)};
  for (int i = 0; i < 2 * MESH; i++) {
    mesh_node *n = malloc(sizeof *n);
    n->m = &m;
    n->rng = 0x1234567ULL * (uint64_t)(i + 1);
    char name[32];
    snprintf(name, sizeof name, "mesh-%d", i);
    m.actors[i] = spawn(sys, name, i < MESH ? TR_ACTOR_PINNED : TR_ACTOR_LOOP, &mesh_behaviour, n);
  }
  for (int i = 0; i < 2 * MESH; i += 7) tr_actor_send(m.actors[i], num_new(0, NULL));
  assert_int_equal(tr_system_run(sys), 0);
  assert_true(atomic_load(&m.handled) >= m.stop_after);
  assert_int_equal(atomic_load(&m.started), 2 * MESH);
  assert_int_equal(atomic_load(&m.stopped), 2 * MESH);
  tr_system_free(sys); /* frees the messages still queued: LeakSanitizer checks */
  assert_int_equal(atomic_load(&m.destroyed), 2 * MESH);
}

/* ---- errors ---------------------------------------------------------------------------- */

static int failing_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  return tr_actor_fail(self, TR_EDEVICE, "cudaMemcpyAsync on device %d: %s", 1, "bad copy");
}
static const tr_behaviour failing = {.name = "stage", .receive = failing_receive};

static int counting_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  atomic_fetch_add((_Atomic int *)tr_actor_state(self), 1);
  return 0;
}
static void counting_stop(tr_actor *self) {
  atomic_fetch_add((_Atomic int *)tr_actor_state(self), 1000);
}
static const tr_behaviour counting = {
    .name = "counter", .receive = counting_receive, .stop = counting_stop};

static void handler_error_stops_the_system_naming_actor_and_message(void **state) {
  (void)state;
  for (int kind = TR_ACTOR_PINNED; kind <= TR_ACTOR_LOOP; kind++) {
    tr_system *sys = system_new(NULL);
    _Atomic int bystander = 0;
    spawn(sys, "bystander", TR_ACTOR_PINNED, &counting, &bystander);
    tr_actor *bad = spawn(sys, "stage1", (tr_actor_kind)kind, &failing, NULL);
    tr_actor_send(bad, num_new(1, NULL));
    assert_int_equal(tr_system_run(sys), TR_EDEVICE);
    const char *err = tr_system_error(sys);
    assert_non_null(strstr(err, "'stage1'"));
    assert_non_null(strstr(err, kind == TR_ACTOR_PINNED ? "pinned" : "loop"));
    assert_non_null(strstr(err, "'num_msg'"));
    assert_non_null(strstr(err, "TR_EDEVICE"));
    assert_non_null(strstr(err, "cudaMemcpyAsync on device 1: bad copy"));
    assert_int_equal(atomic_load(&bystander), 1000); /* it was stopped, cleanly */
    tr_system_free(sys);
  }
}

static int failing_start(tr_actor *self) {
  return tr_actor_fail(self, TR_ENODEV, "no device cuda:7");
}
static const tr_behaviour failing_starter = {
    .name = "stage", .start = failing_start, .receive = counting_receive, .stop = counting_stop};

static void start_error_stops_the_system(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  _Atomic int calls = 0;
  tr_actor *a = spawn(sys, "stage0", TR_ACTOR_PINNED, &failing_starter, &calls);
  tr_actor_send(a, num_new(1, NULL));
  assert_int_equal(tr_system_run(sys), TR_ENODEV);
  assert_int_equal(atomic_load(&calls), 0); /* no message handled, no stop without a start */
  assert_non_null(strstr(tr_system_error(sys), "'stage0'"));
  assert_non_null(strstr(tr_system_error(sys), "starting"));
  assert_non_null(strstr(tr_system_error(sys), "no device cuda:7"));
  tr_system_free(sys);
}

static void spawn_rejects_a_missing_receive(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  static const tr_behaviour none = {.name = "none"};
  tr_actor *a;
  assert_int_equal(tr_actor_spawn(sys, &(tr_actor_config){.behaviour = &none}, &a), TR_EINVAL);
  assert_null(a);
  tr_system_free(sys);
}

static void free_without_run_frees_queued_messages(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  _Atomic int count = 0;
  tr_actor *a = spawn(sys, "idle", TR_ACTOR_PINNED, &counting, &count);
  tr_actor *b = spawn(sys, "idle-loop", TR_ACTOR_LOOP, &counting, &count);
  for (int i = 0; i < 100; i++) {
    tr_actor_send(a, num_new(i, NULL));
    tr_actor_send_ctl(b, num_new(i, NULL));
  }
  tr_system_free(sys);
  assert_int_equal(atomic_load(&count), 0);
}

/* ---- the priority lane ------------------------------------------------------------------ */

typedef struct order_log {
  uint64_t seen[64];
  int n;
} order_log;

static int order_receive(tr_actor *self, tr_msg *msg) {
  order_log *log = tr_actor_state(self);
  log->seen[log->n++] = ((num_msg *)msg)->n;
  if (log->n == 20) tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour order_behaviour = {.name = "order", .receive = order_receive};

static void priority_lane_overtakes_queued_data(void **state) {
  (void)state;
  for (int kind = TR_ACTOR_PINNED; kind <= TR_ACTOR_LOOP; kind++) {
    tr_system *sys = system_new(NULL);
    order_log log = {.n = 0};
    tr_actor *a = spawn(sys, "order", (tr_actor_kind)kind, &order_behaviour, &log);
    for (uint64_t i = 0; i < 10; i++) tr_actor_send(a, num_new(i, NULL));
    for (uint64_t i = 100; i < 110; i++) tr_actor_send_ctl(a, num_new(i, NULL));
    assert_int_equal(tr_system_run(sys), 0);
    for (int i = 0; i < 10; i++) assert_int_equal(log.seen[i], 100 + i);
    for (int i = 10; i < 20; i++) assert_int_equal(log.seen[i], i - 10);
    tr_system_free(sys);
  }
}

/* A control message sent while a turn works through queued data is handled next, not after
 * the rest of the turn's batch: a stop overtakes a backlog. */
static int interrupt_receive(tr_actor *self, tr_msg *msg) {
  order_log *log = tr_actor_state(self);
  const uint64_t n = ((num_msg *)msg)->n;
  log->seen[log->n++] = n;
  if (n == 2) tr_actor_send_ctl(self, num_new(100, NULL)); /* mid-turn */
  if (log->n == 11) tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour interrupt_behaviour = {.name = "order", .receive = interrupt_receive};

static void a_control_message_cuts_a_turn_of_queued_data_short(void **state) {
  (void)state;
  for (int kind = TR_ACTOR_PINNED; kind <= TR_ACTOR_LOOP; kind++) {
    tr_system *sys = system_new(NULL);
    order_log log = {.n = 0};
    tr_actor *a = spawn(sys, "order", (tr_actor_kind)kind, &interrupt_behaviour, &log);
    for (uint64_t i = 0; i < 10; i++) tr_actor_send(a, num_new(i, NULL));
    assert_int_equal(tr_system_run(sys), 0);
    const uint64_t want[11] = {0, 1, 2, 100, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 0; i < 11; i++) assert_int_equal(log.seen[i], want[i]);
    tr_system_free(sys);
  }
}

/* ---- pinned ↔ loop traffic ------------------------------------------------------------- */

typedef struct echo {
  uint64_t rounds;
  uint64_t last;
  bool on_loop_thread_ok;
  pthread_t loop_thread;
} echo;

static int echo_receive(tr_actor *self, tr_msg *msg) {
  echo *e = tr_actor_state(self);
  uint64_t n = ((num_msg *)msg)->n;
  e->last = n;
  if (tr_actor_kind_of(self) == TR_ACTOR_LOOP && !pthread_equal(pthread_self(), e->loop_thread))
    e->on_loop_thread_ok = false;
  if (n >= e->rounds) {
    tr_system_stop(tr_actor_system(self), 0);
    return 0;
  }
  tr_actor_send(msg->from, num_new(n + 1, self));
  return 0;
}
static const tr_behaviour echo_behaviour = {.name = "echo", .receive = echo_receive};

static void pinned_and_loop_actors_exchange_in_both_directions(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.spin_us = 2});
  uint64_t rounds = test_scaled(20000);
  echo pe = {rounds, 0, true, pthread_self()}, le = pe;
  tr_actor *p = spawn(sys, "pinned", TR_ACTOR_PINNED, &echo_behaviour, &pe);
  tr_actor *l = spawn(sys, "loop", TR_ACTOR_LOOP, &echo_behaviour, &le);
  tr_actor_send(l, num_new(0, p));
  assert_int_equal(tr_system_run(sys), 0);
  assert_int_equal(le.last > pe.last ? le.last : pe.last, rounds);
  assert_true(le.on_loop_thread_ok); /* loop actors run on the thread that called run */
  tr_system_free(sys);
}

/* ---- timers and signals ------------------------------------------------------------------ */

typedef struct ticks {
  int once, repeat, foreign;
  int repeat_at_stop; /* counted when the stop had surely taken effect */
  uint64_t t0, once_at;
} ticks;

static int ticks_receive(tr_actor *self, tr_msg *msg) {
  ticks *t = tr_actor_state(self);
  if (msg->type != &tr_timer_msg_type) {
    t->foreign++; /* checked on the test's thread: cmocka must not fail from an actor's */
    return 0;
  }
  uint64_t tag = ((tr_timer_msg *)msg)->tag;
  if (tag == 1) {
    t->once++;
    t->once_at = tr_now_ns();
  } else if (tag == 2 && ++t->repeat == 5) {
    tr_actor_timer_stop(self, 2);
    tr_actor_timer_start(self, 30, 0, 3);
  } else if (tag == 3) {
    /* Ticks posted before the stop took effect are ahead of this one in the mailbox and
     * counted now; a stopped timer must not tick over the next 30 ms (it would, 15 times). */
    t->repeat_at_stop = t->repeat;
    tr_actor_timer_start(self, 30, 0, 4);
  } else if (tag == 4) {
    tr_system_stop(tr_actor_system(self), 0);
  }
  return 0;
}
static const tr_behaviour ticks_behaviour = {.name = "ticks", .receive = ticks_receive};

static void timers_fire_once_or_repeatedly_until_stopped(void **state) {
  (void)state;
  for (int kind = TR_ACTOR_PINNED; kind <= TR_ACTOR_LOOP; kind++) {
    tr_system *sys = system_new(NULL);
    ticks t = {.t0 = tr_now_ns()};
    tr_actor *a = spawn(sys, "ticks", (tr_actor_kind)kind, &ticks_behaviour, &t);
    assert_int_equal(tr_actor_timer_start(a, 20, 0, 1), 0);
    assert_int_equal(tr_actor_timer_start(a, 1, 2, 2), 0);
    assert_int_equal(tr_system_run(sys), 0);
    assert_int_equal(t.once, 1);
    assert_true(t.once_at - t.t0 >= 19 * 1000000ull);
    assert_int_equal(t.foreign, 0);
    assert_true(t.repeat >= 5);
    assert_int_equal(t.repeat, t.repeat_at_stop);
    tr_system_free(sys);
  }
}

static int raise_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  raise(SIGINT);
  return 0;
}
static const tr_behaviour raiser = {.name = "raiser", .receive = raise_receive};

static void sigint_stops_the_system_gracefully(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.handle_signals = 1});
  _Atomic int count = 0;
  spawn(sys, "bystander", TR_ACTOR_PINNED, &counting, &count);
  tr_actor *r = spawn(sys, "raiser", TR_ACTOR_PINNED, &raiser, NULL);
  tr_actor_timer_start(r, 5, 0, 0);
  assert_int_equal(tr_system_run(sys), TR_EINTR);
  assert_non_null(strstr(tr_system_error(sys), "SIGINT"));
  assert_int_equal(atomic_load(&count), 1000); /* stop ran */
  tr_system_free(sys);
}

/* With on_signal, the first signal is the layer above's to act on (here: a clean stop after
 * a last message); the system notes which signal came. */
typedef struct signalled {
  tr_system *sys;
  int signum, calls;
} signalled;

static void note_signal(void *arg, int signum) {
  signalled *s = arg;
  s->signum = signum;
  s->calls++;
  tr_system_stop(s->sys, 0);
}

static void on_signal_takes_the_first_signal_instead_of_a_stop(void **state) {
  (void)state;
  signalled s = {0};
  tr_system *sys = system_new(&(tr_system_config){.handle_signals = 1, .on_signal = note_signal,
                                                  .signal_arg = &s});
  s.sys = sys;
  tr_actor *r = spawn(sys, "raiser", TR_ACTOR_PINNED, &raiser, NULL);
  tr_actor_timer_start(r, 5, 0, 0);
  assert_int_equal(tr_system_run(sys), 0); /* the hook's clean stop */
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.signum, SIGINT);
  assert_int_equal(tr_system_signal(sys), SIGINT);
  tr_system_free(sys);
}

/* Every signal a run ends on in order (tr_system_config.handle_signals) is handed over and
 * named, and kept during start-up: SIGQUIT and the batch schedulers' SIGUSR1 and SIGUSR2 as
 * SIGINT is (their defaults would end the process with no checkpoint). */
static _Atomic int to_raise;

static int raise_it(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  raise(atomic_load(&to_raise));
  return 0;
}
static const tr_behaviour raise_some = {.name = "raiser", .receive = raise_it};

static void each_signal_a_run_takes_is_handed_over_and_named(void **state) {
  (void)state;
  static const struct {
    int signum;
    const char *name;
  } sigs[] = {{SIGINT, "SIGINT"},   {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"},
              {SIGQUIT, "SIGQUIT"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
  struct sigaction hup;
  const bool nohup = sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler == SIG_IGN;
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    assert_string_equal(tr_signal_name(sigs[i].signum), sigs[i].name);
    if (sigs[i].signum == SIGHUP && nohup) continue; /* stays ignored, as it should */
    signalled s = {0};
    tr_system *sys = system_new(&(tr_system_config){.handle_signals = 1,
                                                    .on_signal = note_signal, .signal_arg = &s});
    s.sys = sys;
    atomic_store(&to_raise, sigs[i].signum);
    tr_actor *r = spawn(sys, "raiser", TR_ACTOR_PINNED, &raise_some, NULL);
    tr_actor_timer_start(r, 5, 0, 0);
    assert_int_equal(tr_system_run(sys), 0);
    if (s.calls != 1 || s.signum != sigs[i].signum)
      fail_msg("%s: on_signal called %d times, with %d", sigs[i].name, s.calls, s.signum);
    tr_system_free(sys);
    tr_signals_hold(); /* start-up: kept, then dropped by the release */
    raise(sigs[i].signum);
    assert_int_equal(tr_signals_held(), sigs[i].signum);
    tr_signals_release();
  }
}

static void ignore_signal(void *arg, int signum) { (void)arg, (void)signum; }
static int tick_receive(tr_actor *self, tr_msg *msg) { return (void)self, (void)msg, 0; }
static const tr_behaviour ticking = {.name = "ticks", .receive = tick_receive};

/* The second signal has its default effect: it ends the process at once, however busy (a
 * child process here, whose system runs on and would never stop by itself). */
static void a_second_signal_ends_the_process(void **state) {
  (void)state;
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  const pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    tr_system *sys;
    if (tr_system_new(&sys, &(tr_system_config){.handle_signals = 1, .on_signal = ignore_signal}))
      _exit(3);
    tr_actor *a;
    if (tr_actor_spawn(sys, &(tr_actor_config){.name = "ticks", .kind = TR_ACTOR_LOOP,
                                               .behaviour = &ticking}, &a) ||
        tr_actor_timer_start(a, 1, 1, 7))
      _exit(4);
    if (write(ready[1], "r", 1) != 1) _exit(5);
    tr_system_run(sys);
    _exit(6); /* never: only the signals end it */
  }
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  usleep(200 * 1000); /* its handlers are in place once its loop runs */
  kill(child, SIGINT);
  usleep(200 * 1000);
  int status;
  assert_int_equal(waitpid(child, &status, WNOHANG), 0); /* the first: handed to the hook */
  kill(child, SIGINT);
  const uint64_t t0 = tr_now_ns();
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(tr_now_ns() - t0 < 2000000000ull);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGINT);
  close(ready[0]);
  close(ready[1]);
}

static int stop_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour stopper = {.name = "stopper", .receive = stop_receive};

/* A program holding the signals (a bench) around a run that holds them too: a system that
 * ends without a signal gives them back to the hold, so a Ctrl-C between two runs is kept
 * for the program; once the last hold is released, a signal has its default effect again
 * (a child process here: a broken hold would end it at the first raise). */
static void signals_are_held_again_between_runs_until_the_last_release(void **state) {
  (void)state;
  int report[2];
  assert_int_equal(pipe(report), 0);
  const pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    tr_signals_hold(); /* the program's */
    tr_signals_hold(); /* the run's */
    tr_system *sys;
    tr_actor *a;
    if (tr_system_new(&sys, &(tr_system_config){.handle_signals = 1}) ||
        tr_actor_spawn(sys, &(tr_actor_config){.name = "stopper", .kind = TR_ACTOR_LOOP,
                                               .behaviour = &stopper}, &a) ||
        tr_actor_timer_start(a, 5, 0, 0) || tr_system_run(sys) != 0)
      _exit(3);
    tr_system_free(sys);
    tr_signals_release(); /* the run's: the program still holds */
    raise(SIGINT);
    if (write(report[1], tr_signals_held() == SIGINT ? "h" : "-", 1) != 1) _exit(4);
    tr_signals_release(); /* the program's: the default again */
    raise(SIGINT);
    _exit(5); /* never */
  }
  close(report[1]); /* a child ended early: the read sees the end */
  char c = 0;
  assert_int_equal(read(report[0], &c, 1), 1);
  assert_int_equal(c, 'h');
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGINT);
  close(report[0]);
}

/* ---- the watchdog ----------------------------------------------------------------------- */

static int sleepy_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  usleep(600 * 1000); /* stuck, as far as a 150 ms watchdog can tell */
  return 0;
}
static const tr_behaviour sleepy = {.name = "stage", .receive = sleepy_receive};

static void watchdog_names_the_actor_that_makes_no_progress(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 150});
  _Atomic int count = 0;
  spawn(sys, "bystander", TR_ACTOR_PINNED, &counting, &count);
  tr_actor *s = spawn(sys, "sleeper", TR_ACTOR_PINNED, &sleepy, NULL);
  tr_actor_send(s, num_new(1, NULL));
  tr_actor_send(s, num_new(2, NULL));
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  const char *err = tr_system_error(sys);
  assert_non_null(strstr(err, "no progress for 150 ms"));
  const char *sleeper = strstr(
      err, "'sleeper' (pinned stage): handling 'num_msg', messages waiting (data lane), 0 handled");
  const char *bystander =
      strstr(err, "'bystander' (pinned counter): parked, nothing waiting, 0 handled");
  assert_non_null(sleeper);
  assert_non_null(bystander);
  assert_true(sleeper < bystander); /* the busy first: in a stall they are the story */
  assert_non_null(strstr(err, "2 actors, 1 idle"));
  assert_null(strstr(err, "idle but not done"));
  tr_system_free(sys);
}

static int stop_on_tick(tr_actor *self, tr_msg *msg) {
  (void)msg;
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour ticker = {.name = "ticker", .receive = stop_on_tick};

/* A watchdog period lengthened during the run is the one it keeps to: a handler slower than
 * the configured period is no stall any more. */
static int lengthen_then_sleep(tr_actor *self, tr_msg *msg) {
  (void)msg;
  tr_system_set_watchdog_ms(tr_actor_system(self), 5000);
  usleep(600 * 1000);
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour lengthener = {.name = "stage", .receive = lengthen_then_sleep};

static void a_watchdog_period_can_grow_while_the_system_runs(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 150});
  assert_int_equal(tr_system_watchdog_ms(sys), 150);
  tr_actor *a = spawn(sys, "slow", TR_ACTOR_PINNED, &lengthener, NULL);
  tr_actor_send(a, num_new(1, NULL));
  assert_int_equal(tr_system_run(sys), 0);
  assert_int_equal(tr_system_watchdog_ms(sys), 5000);
  tr_system_free(sys);
  tr_system *off = system_new(NULL); /* a system without a watchdog gets none */
  tr_system_set_watchdog_ms(off, 1000);
  assert_int_equal(tr_system_watchdog_ms(off), 0);
  tr_system_free(off);
}

static void watchdog_leaves_an_idle_system_alone(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 40});
  tr_actor *t = spawn(sys, "ticker", TR_ACTOR_PINNED, &ticker, NULL);
  tr_actor_timer_start(t, 400, 0, 0); /* ten periods with nothing to do: idle, not stuck */
  assert_int_equal(tr_system_run(sys), 0);
  tr_system_free(sys);
}

/* ---- the watchdog: idle but not done ------------------------------------------------------ */

static uint64_t ms_since(uint64_t t0_ns) { return (tr_now_ns() - t0_ns) / 1000000; }

/* Passes a countdown along a ring; at 0 it stops passing, and nobody stops the system. */
typedef struct relay {
  tr_actor *next;
} relay;

static int relay_receive(tr_actor *self, tr_msg *msg) {
  relay *r = tr_actor_state(self);
  uint64_t n = ((num_msg *)msg)->n;
  if (n > 0) tr_actor_send(r->next, num_new(n - 1, self));
  return 0;
}
static const tr_behaviour relay_behaviour = {.name = "relay", .receive = relay_receive};

static void watchdog_stops_an_idle_system_that_nobody_stops_naming_each_actor(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 200, .watchdog_idle = 1});
  relay ra, rb, rl;
  tr_actor *a = spawn(sys, "relay-a", TR_ACTOR_PINNED, &relay_behaviour, &ra);
  tr_actor *b = spawn(sys, "relay-b", TR_ACTOR_PINNED, &relay_behaviour, &rb);
  tr_actor *l = spawn(sys, "relay-l", TR_ACTOR_LOOP, &relay_behaviour, &rl);
  ra.next = b, rb.next = l, rl.next = a;
  tr_actor_send(a, num_new(5, NULL)); /* a 5, b 4, l 3, a 2, b 1, l 0: two each */
  uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  assert_true(ms_since(t0) >= 200); /* a whole period of idleness first */
  const char *err = tr_system_error(sys);
  assert_non_null(strstr(err, "idle but not done for 200 ms"));
  assert_null(strstr(err, "no progress"));
  assert_non_null(strstr(err, "'relay-a' (pinned relay): parked, nothing waiting, 2 handled"));
  assert_non_null(strstr(err, "'relay-b' (pinned relay): parked, nothing waiting, 2 handled"));
  assert_non_null(strstr(err, "'relay-l' (loop relay): idle, nothing waiting, 2 handled"));
  assert_non_null(strstr(err, "3 actors, 3 idle"));
  tr_system_free(sys);
}

typedef struct describer {
  int calls;
  pthread_t thread;
  const char *text;
} describer;

static void describe_graph(void *arg, char *buf, size_t size) {
  describer *d = arg;
  d->calls++;
  d->thread = pthread_self();
  snprintf(buf, size, "%s", d->text);
}

static void watchdog_error_carries_the_describe_hook_text(void **state) {
  (void)state;
  for (int idle = 0; idle <= 1; idle++) { /* a stall, then idle but not done */
    describer d = {.text = "graph: edge loader->stage0 holds 0 of 2 credits"};
    tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 150,
                                                    .watchdog_idle = 1,
                                                    .describe = describe_graph,
                                                    .describe_arg = &d});
    tr_actor *s = spawn(sys, "stage0", TR_ACTOR_PINNED, idle ? &counting : &sleepy,
                        idle ? calloc(1, sizeof(_Atomic int)) : NULL);
    if (!idle) tr_actor_send(s, num_new(1, NULL));
    assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
    const char *err = tr_system_error(sys);
    assert_non_null(strstr(err, idle ? "idle but not done" : "no progress"));
    const char *actor = strstr(err, "'stage0'");
    const char *graph = strstr(err, "; graph: edge loader->stage0 holds 0 of 2 credits");
    assert_non_null(actor);
    assert_non_null(graph);
    assert_true(actor < graph); /* appended to the runtime's report */
    assert_int_equal(d.calls, 1);
    assert_true(pthread_equal(d.thread, pthread_self())); /* the loop thread: run's caller */
    if (idle) free(tr_actor_state(s));
    tr_system_free(sys);
  }
}

static void describe_hook_text_survives_a_report_too_long_for_the_error(void **state) {
  (void)state;
  char text[1000];
  memset(text, 'x', sizeof text);
  memcpy(text + sizeof text - 5, "END.", 5);
  describer d = {.text = text};
  tr_system *sys = system_new(&(tr_system_config){
      .watchdog_ms = 100, .watchdog_idle = 1, .describe = describe_graph, .describe_arg = &d});
  _Atomic int count = 0;
  for (int i = 0; i < 200; i++) {
    char name[64];
    snprintf(name, sizeof name, "an-actor-with-a-rather-long-name-%03d", i);
    spawn(sys, name, TR_ACTOR_LOOP, &counting, &count);
  }
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  const char *err = tr_system_error(sys);
  assert_non_null(strstr(err, "'an-actor-with-a-rather-long-name-000' (loop counter): idle"));
  assert_non_null(strstr(err, " more not shown; 200 actors, 200 idle; xxxx"));
  assert_non_null(strstr(err, "xxxxEND."));
  tr_system_free(sys);
}

typedef struct alarm_clock {
  int ticks, stop_after;
  uint64_t tick_at;
} alarm_clock;

static int alarm_receive(tr_actor *self, tr_msg *msg) {
  alarm_clock *c = tr_actor_state(self);
  if (msg->type != &tr_timer_msg_type) return tr_actor_fail(self, TR_EINVAL, "not a tick");
  c->tick_at = tr_now_ns();
  if (++c->ticks == c->stop_after) tr_actor_timer_stop(self, ((tr_timer_msg *)msg)->tag);
  return 0;
}
static const tr_behaviour alarm_behaviour = {.name = "alarm", .receive = alarm_receive};

static void watchdog_waits_for_a_pending_timer_before_calling_a_system_idle(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 100, .watchdog_idle = 1});
  alarm_clock c = {0};
  tr_actor *a = spawn(sys, "alarm", TR_ACTOR_PINNED, &alarm_behaviour, &c);
  uint64_t t0 = tr_now_ns();
  tr_actor_timer_start(a, 500, 0, 7); /* five periods with nothing to do but wait */
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT);
  assert_int_equal(c.ticks, 1); /* the watchdog let the timer fire... */
  assert_true((c.tick_at - t0) / 1000000 >= 499);
  assert_true(ms_since(c.tick_at) >= 100); /* ...and called it idle a period after */
  assert_non_null(strstr(tr_system_error(sys), "idle but not done"));
  assert_non_null(strstr(tr_system_error(sys),
                         "'alarm' (pinned alarm): parked, nothing waiting, 1 handled"));
  tr_system_free(sys);
}

static void a_repeating_timer_keeps_an_idle_watched_system_alive(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 100, .watchdog_idle = 1});
  alarm_clock c = {.stop_after = 4};
  tr_actor *a = spawn(sys, "metronome", TR_ACTOR_LOOP, &alarm_behaviour, &c);
  /* Ticks 250 ms apart: between two, every sample sees nothing handled for longer than a
   * period; only the pending timer tells the watchdog that something will happen. */
  tr_actor_timer_start(a, 250, 250, 1);
  assert_int_equal(tr_system_run(sys), TR_ETIMEDOUT); /* once the timer is stopped */
  assert_int_equal(c.ticks, 4);
  assert_true(ms_since(c.tick_at) >= 100);
  assert_non_null(strstr(tr_system_error(sys),
                         "'metronome' (loop alarm): idle, nothing waiting, 4 handled"));
  tr_system_free(sys);
}

typedef struct rally {
  tr_actor *peer;
  uint64_t rounds;
} rally;

static int rally_receive(tr_actor *self, tr_msg *msg) {
  rally *r = tr_actor_state(self);
  uint64_t n = ((num_msg *)msg)->n;
  usleep(80 * 1000); /* slower than a tick (50 ms): some ticks see no progress */
  if (n >= r->rounds) tr_system_stop(tr_actor_system(self), 0);
  else tr_actor_send(r->peer, num_new(n + 1, self));
  return 0;
}
static const tr_behaviour rally_behaviour = {.name = "rally", .receive = rally_receive};

static void watchdog_never_stops_a_busy_system_that_makes_progress(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 200, .watchdog_idle = 1});
  rally ra = {.rounds = 12}, rb = ra;
  tr_actor *a = spawn(sys, "rally-a", TR_ACTOR_PINNED, &rally_behaviour, &ra);
  tr_actor *b = spawn(sys, "rally-b", TR_ACTOR_LOOP, &rally_behaviour, &rb);
  ra.peer = b, rb.peer = a;
  tr_actor_send(a, num_new(0, NULL));
  assert_int_equal(tr_system_run(sys), 0); /* 960 ms, five periods, none without progress */
  tr_system_free(sys);
}

typedef struct late_stop {
  tr_system *sys;
  int ms;
} late_stop;

static void *stop_later(void *arg) {
  late_stop *s = arg;
  usleep((useconds_t)s->ms * 1000);
  tr_system_stop(s->sys, 0);
  return NULL;
}

static void watchdog_without_the_idle_option_leaves_an_idle_system_alone(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 80});
  _Atomic int count = 0;
  tr_actor *a = spawn(sys, "idler", TR_ACTOR_PINNED, &counting, &count);
  tr_actor_send(a, num_new(1, NULL));
  /* Ten periods idle, no timer pending: only a thread the runtime cannot see will stop it. */
  late_stop s = {sys, 800};
  pthread_t t;
  pthread_create(&t, NULL, stop_later, &s);
  assert_int_equal(tr_system_run(sys), 0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&count), 1001);
  tr_system_free(sys);
}

static int slow_start(tr_actor *self) {
  usleep(400 * 1000); /* a device coming up: four periods without a message */
  tr_actor_send(self, num_new(1, self));
  return 0;
}
static const tr_behaviour slow_starter = {
    .name = "stage", .start = slow_start, .receive = stop_on_tick};

static void an_actor_still_starting_is_not_idle(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 100, .watchdog_idle = 1});
  spawn(sys, "stage0", TR_ACTOR_PINNED, &slow_starter, NULL);
  assert_int_equal(tr_system_run(sys), 0);
  tr_system_free(sys);
}

typedef struct own_timer {
  uv_timer_t handle;
  tr_system *sys;
} own_timer;

static void own_timer_fired(uv_timer_t *h) {
  own_timer *t = h->data;
  tr_system_stop(t->sys, 0);
}

static int own_timer_start(tr_actor *self) {
  own_timer *t = tr_actor_state(self);
  t->sys = tr_actor_system(self);
  uv_timer_init(tr_system_loop(t->sys), &t->handle);
  t->handle.data = t;
  uv_timer_start(&t->handle, own_timer_fired, 400, 0);
  return 0;
}
static void own_timer_stop(tr_actor *self) {
  own_timer *t = tr_actor_state(self);
  uv_close((uv_handle_t *)&t->handle, NULL);
}
static const tr_behaviour own_timer_behaviour = {
    .name = "io", .start = own_timer_start, .receive = counting_receive, .stop = own_timer_stop};

static void a_loop_actors_own_active_handle_keeps_an_idle_system_alive(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.watchdog_ms = 100, .watchdog_idle = 1});
  own_timer t;
  spawn(sys, "io", TR_ACTOR_LOOP, &own_timer_behaviour, &t);
  assert_int_equal(tr_system_run(sys), 0); /* its own timer stops it, 400 ms in */
  tr_system_free(sys);
}

/* ---- the report ----------------------------------------------------------------------------- */

static void report_names_each_actor_its_state_and_which_lanes_hold_messages(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  _Atomic int count = 0;
  tr_actor *p = spawn(sys, "p", TR_ACTOR_PINNED, &counting, &count);
  tr_actor *l = spawn(sys, "l", TR_ACTOR_LOOP, &counting, &count);
  spawn(sys, "q", TR_ACTOR_LOOP, &counting, &count);
  tr_actor_send(p, num_new(1, NULL));
  tr_actor_send(p, num_new(2, NULL));
  tr_actor_send_ctl(l, num_new(3, NULL));
  tr_actor_send(l, num_new(4, NULL));
  char buf[1024];
  tr_system_report(sys, buf, sizeof buf);
  assert_string_equal(buf,
                      "'p' (pinned counter): not started, messages waiting (data lane), 0 handled; "
                      "'l' (loop counter): not started, messages waiting (priority and data "
                      "lanes), 0 handled; "
                      "'q' (loop counter): not started, nothing waiting, 0 handled; "
                      "3 actors, 0 idle");
  tr_system_free(sys);
}

static void report_that_does_not_fit_counts_the_actors_it_left_out(void **state) {
  (void)state;
  tr_system *sys = system_new(NULL);
  _Atomic int count = 0;
  for (int i = 0; i < 50; i++) {
    char name[16];
    snprintf(name, sizeof name, "a%02d", i);
    spawn(sys, name, TR_ACTOR_LOOP, &counting, &count);
  }
  char buf[300];
  memset(buf, '#', sizeof buf);
  tr_system_report(sys, buf, sizeof buf);
  assert_true(strlen(buf) < sizeof buf);
  const char *more = strstr(buf, " more not shown; 50 actors, 0 idle");
  assert_non_null(more);
  while (more > buf && more[-1] != ' ') more--; /* back to the count */
  int shown = 0;
  const char *entry = "(loop counter): not started, nothing waiting, 0 handled; ";
  for (const char *e = buf; (e = strstr(e, entry)); e++) shown++;
  assert_true(shown > 0);
  assert_int_equal(shown + atoi(more), 50); /* whole entries, and the rest counted */
  assert_true(strncmp(buf, "'a00' (loop counter)", 20) == 0);
  buf[0] = '#';
  tr_system_report(sys, buf, 1);
  assert_int_equal(buf[0], 0);
  tr_system_report(sys, buf, 0); /* writes nothing at all */
  assert_int_equal(buf[0], 0);
  tr_system_free(sys);
}

/* ---- spawning during a run, tracing ----------------------------------------------------- */

static const tr_behaviour spawner;

static int spawner_receive(tr_actor *self, tr_msg *msg) {
  uint64_t n = ((num_msg *)msg)->n;
  if (n == 0) {
    tr_system_stop(tr_actor_system(self), 0);
    return 0;
  }
  tr_actor *child;
  int rc = tr_actor_spawn(tr_actor_system(self),
                          &(tr_actor_config){.kind = n % 2 ? TR_ACTOR_PINNED : TR_ACTOR_LOOP,
                                             .behaviour = &spawner},
                          &child);
  if (rc) return tr_actor_fail(self, rc, "spawn");
  tr_actor_send(child, num_new(n - 1, self));
  return 0;
}
static const tr_behaviour spawner = {.name = "spawner", .receive = spawner_receive};

static void actors_spawned_during_a_run_start_and_stop(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.trace = 1});
  tr_actor *root = spawn(sys, "root", TR_ACTOR_PINNED, &spawner, NULL);
  tr_actor_send(root, num_new(40, NULL));
  assert_int_equal(tr_system_run(sys), 0);
  /* 41 actors each handled one message, and the trace saw each. */
  assert_int_equal(tr_system_trace_count(sys), 41);
  char path[] = "/tmp/troupe-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(tr_system_trace_write(sys, path), 0);
  FILE *f = fopen(path, "r");
  char head[64] = {0};
  assert_non_null(fgets(head, sizeof head, f));
  assert_non_null(strstr(head, "traceEvents"));
  fclose(f);
  unlink(path);
  tr_system_free(sys);
}

/* tr_trace_label: a pinned actor's lane is named with what it runs on; a loop actor's
 * label does not rename the loop's lane, which its fellow loop actors share. */
static int labelling_start(tr_actor *self) {
  tr_trace_label(self, "dev:7");
  return 0;
}
static int labelling_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  if (tr_actor_state(self)) tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour labelling = {
    .name = "labelling", .start = labelling_start, .receive = labelling_receive};

static void trace_names_a_pinned_lane_by_its_label(void **state) {
  (void)state;
  tr_system *sys = system_new(&(tr_system_config){.trace = 1});
  static int stops;
  tr_actor *pinned = spawn(sys, "stage0", TR_ACTOR_PINNED, &labelling, &stops);
  tr_actor *loop = spawn(sys, "loader", TR_ACTOR_LOOP, &labelling, NULL);
  tr_actor_send(loop, num_new(0, NULL));
  tr_actor_send(pinned, num_new(0, NULL));
  assert_int_equal(tr_system_run(sys), 0);
  char path[] = "/tmp/troupe-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(tr_system_trace_write(sys, path), 0);
  FILE *f = fopen(path, "r");
  char text[4096] = {0};
  assert_true(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  unlink(path);
  assert_non_null(strstr(text, "\"args\":{\"name\":\"stage0 (dev:7)\",\"label\":\"dev:7\"}"));
  assert_non_null(strstr(text, "\"args\":{\"name\":\"loop\"}"));
  tr_system_free(sys);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hundreds_of_actors_start_stop_and_free_with_messages_in_flight),
      cmocka_unit_test(handler_error_stops_the_system_naming_actor_and_message),
      cmocka_unit_test(start_error_stops_the_system),
      cmocka_unit_test(spawn_rejects_a_missing_receive),
      cmocka_unit_test(free_without_run_frees_queued_messages),
      cmocka_unit_test(priority_lane_overtakes_queued_data),
      cmocka_unit_test(a_control_message_cuts_a_turn_of_queued_data_short),
      cmocka_unit_test(pinned_and_loop_actors_exchange_in_both_directions),
      cmocka_unit_test(timers_fire_once_or_repeatedly_until_stopped),
      cmocka_unit_test(sigint_stops_the_system_gracefully),
      cmocka_unit_test(on_signal_takes_the_first_signal_instead_of_a_stop),
      cmocka_unit_test(each_signal_a_run_takes_is_handed_over_and_named),
      cmocka_unit_test(a_second_signal_ends_the_process),
      cmocka_unit_test(signals_are_held_again_between_runs_until_the_last_release),
      cmocka_unit_test(a_watchdog_period_can_grow_while_the_system_runs),
      cmocka_unit_test(watchdog_names_the_actor_that_makes_no_progress),
      cmocka_unit_test(watchdog_leaves_an_idle_system_alone),
      cmocka_unit_test(watchdog_stops_an_idle_system_that_nobody_stops_naming_each_actor),
      cmocka_unit_test(watchdog_error_carries_the_describe_hook_text),
      cmocka_unit_test(describe_hook_text_survives_a_report_too_long_for_the_error),
      cmocka_unit_test(watchdog_waits_for_a_pending_timer_before_calling_a_system_idle),
      cmocka_unit_test(a_repeating_timer_keeps_an_idle_watched_system_alive),
      cmocka_unit_test(watchdog_never_stops_a_busy_system_that_makes_progress),
      cmocka_unit_test(watchdog_without_the_idle_option_leaves_an_idle_system_alone),
      cmocka_unit_test(an_actor_still_starting_is_not_idle),
      cmocka_unit_test(a_loop_actors_own_active_handle_keeps_an_idle_system_alive),
      cmocka_unit_test(report_names_each_actor_its_state_and_which_lanes_hold_messages),
      cmocka_unit_test(report_that_does_not_fit_counts_the_actors_it_left_out),
      cmocka_unit_test(actors_spawned_during_a_run_start_and_stop),
      cmocka_unit_test(trace_names_a_pinned_lane_by_its_label),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
