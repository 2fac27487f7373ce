/* system.c — creating, running and stopping a system; the libuv loop side.
 *
 * The loop thread owns: loop actors (their turns run in the async callback), timers,
 * signals, and the shutdown protocol, which advances in phases each time the loop wakes:
 *   0 running    → on tr_system_stop: a stop on every pinned actor's priority lane
 *   1 draining   → once every pinned thread has exited: join them, stop the loop actors
 *   2 closing    → close every handle; uv_run returns once they are closed
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "system_impl.h"

enum { PHASE_RUNNING, PHASE_DRAINING, PHASE_CLOSING };

/* Timers live on the loop thread; other threads ask for them through `requests`. */
typedef struct timer_request {
  tr_msg hdr;
  tr_actor *actor;
  uint64_t timeout_ms, repeat_ms, tag;
  bool start;
} timer_request;
static TR_MSGTYPE_DEFINE(timer_request_type, timer_request);

struct tr__timer {
  uv_timer_t handle;
  tr_actor *actor;
  uint64_t tag;
  bool repeat;
  tr__timer *next;
};

static void push_actor(_Atomic(tr_actor *) *list, tr_actor *a, size_t next_offset) {
  tr_actor *head = atomic_load(list);
  do {
    *(tr_actor **)((char *)a + next_offset) = head;
  } while (!atomic_compare_exchange_weak(list, &head, a));
}

void tr__loop_wake(tr_system *sys) {
  if (!atomic_load_explicit(&sys->async_closed, memory_order_acquire))
    uv_async_send(&sys->async);
}

static void system_vfail(tr_system *sys, int status, const char *fmt, va_list ap) {
  if (status != 0) {
    pthread_mutex_lock(&sys->lock);
    if (sys->status == 0) {
      sys->status = status;
      vsnprintf(sys->error, sizeof sys->error, fmt, ap);
      tr__run_error_set(sys->error);
    }
    pthread_mutex_unlock(&sys->lock);
  }
  atomic_store(&sys->stopping, 1);
  tr__loop_wake(sys);
}

void tr__system_fail(tr_system *sys, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  system_vfail(sys, status, fmt, ap);
  va_end(ap);
}

void tr_system_fail(tr_system *sys, int status, const char *fmt, ...) {
  if (sys == NULL || fmt == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  system_vfail(sys, status, fmt, ap);
  va_end(ap);
}

void tr_system_stop(tr_system *sys, int status) {
  if (sys == NULL) {
    tr__misuse(TR_EINVAL, "tr_system_stop: sys is NULL: nothing stopped");
    return;
  }
  tr__system_fail(sys, status, "%s: stopped with %s", sys->name, tr_strerror(status));
}

const char *tr_system_error(const tr_system *sys) { return sys ? sys->error : ""; }
uv_loop_t *tr_system_loop(tr_system *sys) { return sys ? &sys->loop : NULL; }

/* ---- timers ---------------------------------------------------------------------------- */

static void timer_closed(uv_handle_t *h) { free(h->data); }

static void timer_fired(uv_timer_t *h) {
  tr__timer *t = h->data;
  tr_timer_msg *m = tr_msg_new(&tr_timer_msg_type);
  m->tag = t->tag;
  tr_actor_send(t->actor, m);
  if (!t->repeat) {
    tr_system *sys = t->actor->sys;
    for (tr__timer **p = &sys->timers; *p; p = &(*p)->next) {
      if (*p == t) {
        *p = t->next;
        break;
      }
    }
    uv_close((uv_handle_t *)h, timer_closed);
  }
}

static int timer_request_send(tr_actor *a, bool start, uint64_t timeout_ms, uint64_t repeat_ms,
                              uint64_t tag) {
  timer_request *r = tr_msg_new(&timer_request_type);
  r->actor = a;
  r->start = start;
  r->timeout_ms = timeout_ms;
  r->repeat_ms = repeat_ms;
  r->tag = tag;
  if (tr_mailbox_push(&a->sys->requests, &r->hdr)) tr__loop_wake(a->sys);
  return 0;
}

int tr_actor_timer_start(tr_actor *a, uint64_t timeout_ms, uint64_t repeat_ms, uint64_t tag) {
  TR__NOT_NULL(a);
  return timer_request_send(a, true, timeout_ms, repeat_ms, tag);
}

int tr_actor_timer_stop(tr_actor *a, uint64_t tag) {
  TR__NOT_NULL(a);
  return timer_request_send(a, false, 0, 0, tag);
}

static void timer_apply(tr_system *sys, timer_request *r) {
  if (r->start) {
    tr__timer *t = calloc(1, sizeof *t);
    TR_ASSERT(t != NULL);
    t->actor = r->actor;
    t->tag = r->tag;
    t->repeat = r->repeat_ms != 0;
    uv_timer_init(&sys->loop, &t->handle);
    t->handle.data = t;
    /* libuv counts from the loop's cached time, which may be older than this request by
     * however long this pass has run: the timeout counts from now. */
    uv_update_time(&sys->loop);
    uv_timer_start(&t->handle, timer_fired, r->timeout_ms, r->repeat_ms);
    t->next = sys->timers;
    sys->timers = t;
    return;
  }
  for (tr__timer **p = &sys->timers; *p;) {
    tr__timer *t = *p;
    if (t->actor == r->actor && t->tag == r->tag) {
      *p = t->next;
      uv_close((uv_handle_t *)&t->handle, timer_closed);
    } else {
      p = &t->next;
    }
  }
}

static void drain_requests(tr_system *sys) {
  tr_msg *m, *released;
  while ((m = tr_mailbox_pop(&sys->requests, &released)) != NULL) {
    tr_msg_free(released);
    if (sys->shutdown_phase == PHASE_RUNNING) timer_apply(sys, (timer_request *)m);
  }
  tr_mailbox_mark_empty(&sys->requests);
}

/* ---- the loop -------------------------------------------------------------------------- */

static void close_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void advance_shutdown(tr_system *sys) {
  if (sys->shutdown_phase == PHASE_RUNNING) {
    sys->shutdown_phase = PHASE_DRAINING;
    for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
      if (a->kind == TR_ACTOR_PINNED) tr_actor_send_ctl(a, tr_msg_new(&tr_msg_stop_type));
    }
  }
  if (sys->shutdown_phase == PHASE_DRAINING &&
      atomic_load(&sys->pinned_exited) == atomic_load(&sys->pinned_started)) {
    sys->shutdown_phase = PHASE_CLOSING;
    for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
      if (a->has_thread) {
        pthread_join(a->thread, NULL);
        a->has_thread = false;
      }
    }
    for (tr_actor *a = atomic_load(&sys->loop_actors); a; a = a->next_loop)
      tr__actor_stop_now(a);
    /* No thread but this one can send now: closing the async handle is safe. */
    atomic_store_explicit(&sys->async_closed, 1, memory_order_release);
    for (tr__timer *t = sys->timers; t; t = t->next)
      uv_close((uv_handle_t *)&t->handle, timer_closed);
    sys->timers = NULL;
    /* Whatever handles loop actors left open would keep the loop alive forever. */
    uv_walk(&sys->loop, close_handle, NULL);
  }
}

static void on_async(uv_async_t *h) {
  tr_system *sys = h->data;
  bool again = false;
  drain_requests(sys);
  for (tr_actor *a = atomic_load(&sys->loop_actors); a; a = a->next_loop) {
    if (a->done || tr__actor_turn(a) < 0) continue;
    if (!tr_mailbox_mark_empty(&a->ctl) || !tr_mailbox_mark_empty(&a->data)) again = true;
  }
  if (atomic_load(&sys->stopping)) advance_shutdown(sys);
  tr_msg_pool_flush();
  /* A turn is bounded: come back for the rest after timers and I/O had their chance. */
  if (again) tr__loop_wake(sys);
}

/* The signals a run ends on in order, as SIGTERM (tr_system.h): a terminal's (Ctrl-C,
 * hanging up, Ctrl-\), a service manager's, and a batch scheduler's warning before a job's
 * time limit (Slurm's --signal=USR1@60, and the scripts of PBS, LSF or a container's
 * preStop hook send SIGUSR1 or SIGUSR2): each wants the work kept, which a core dump or an
 * abrupt end would lose. */
static const int signums[TR__SIGNALS] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static const char *const signames[TR__SIGNALS] = {"SIGINT",  "SIGTERM", "SIGHUP",
                                                  "SIGQUIT", "SIGUSR1", "SIGUSR2"};

static bool hup_known, hup_ignored;

static bool hup_wanted(void) {
  if (!hup_known) {
    struct sigaction now;
    hup_ignored = sigaction(SIGHUP, NULL, &now) == 0 && now.sa_handler == SIG_IGN;
    hup_known = true;
  }
  return !hup_ignored;
}

/* Whether the system takes signal i: SIGHUP ignored when the process began (nohup) stays
 * ignored. */
static bool taken(int i) { return signums[i] != SIGHUP || hup_wanted(); }

/* The first signal is the system's; the second is the process's: once the handlers are
 * stopped, libuv restores the default action, which ends the process however busy its
 * threads are. */
static void on_signal(uv_signal_t *h, int signum) {
  tr_system *sys = h->data;
  int none = 0;
  if (!atomic_compare_exchange_strong(&sys->signal, &none, signum)) return;
  if (sys->on_signal == NULL) {
    tr__system_fail(sys, TR_EINTR, "%s: stopped by %s", sys->name, tr_signal_name(signum));
    return;
  }
  for (int i = 0; i < TR__SIGNALS; i++)
    if (taken(i)) uv_signal_stop(&sys->sigs[i]);
  sys->on_signal(sys->signal_arg, signum);
}

/* libuv's loop takes the lowest free descriptors (its eventfd, its signals' pipe): with
 * standard input, output or error closed (`prog <&- >&- 2>&-`) one of them would be taken
 * for a standard stream, and a message written to stderr would land in libuv's pipe (an
 * assertion ends the process). A closed one is opened on /dev/null instead; descriptors
 * are taken lowest first, so each lands where it is missing. */
void tr_stdio_reserve(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got >= 0 && got != fd) { /* another thread took it first: put it in place */
      dup2(got, fd);
      close(got);
    }
  }
}

const char *tr_signal_name(int signum) {
  for (int i = 0; i < TR__SIGNALS; i++)
    if (signums[i] == signum) return signames[i];
  return "a signal";
}

int tr_signal_parse(const char *name, int *signum) {
  TR__NOT_NULL(signum);
  for (int i = 0; i < TR__SIGNALS && name; i++)
    if (!strcmp(signames[i], name)) return *signum = signums[i], 0;
  return TR_EINVAL;
}

/* Start-up (tr_signals_hold): the first signal is kept for the run, and acted on at once by
 * whoever asks (tr_signals_held); a system that runs takes it over, and gives it back when
 * it ends without a signal to a program that still holds (holds > 0: a bench between its
 * runs). SIGHUP ignored when the process began (nohup) stays ignored, for the run too. */
static struct sigaction held_before[TR__SIGNALS];
static int holds;       /* tr_signals_hold calls not yet released */
static bool installed;  /* hold_signal is the handler now (a running system's is not) */
static volatile sig_atomic_t held;

static void hold_signal(int signum) {
  if (!held) held = signum;
}

/* before: where to keep what was there (NULL: it is kept already) */
static void install_hold(struct sigaction *before) {
  struct sigaction sa = {.sa_handler = hold_signal};
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < TR__SIGNALS; i++)
    if (taken(i)) sigaction(signums[i], &sa, before ? &before[i] : NULL);
  installed = true;
}

void tr_signals_hold(void) {
  if (holds++ > 0) return;
  held = 0;
  install_hold(held_before);
}

int tr_signals_held(void) { return held; }

void tr_signals_release(void) {
  if (holds == 0 || --holds > 0) return;
  if (installed) /* else a system took the signals over: libuv put back the defaults */
    for (int i = 0; i < TR__SIGNALS; i++)
      if (taken(i)) sigaction(signums[i], &held_before[i], NULL);
  installed = false;
  held = 0; /* dropped: a system run later must not raise it again */
}

int tr_system_signal(const tr_system *sys) {
  return sys ? atomic_load(&((tr_system *)sys)->signal) : 0;
}

int tr_system_watchdog_ms(const tr_system *sys) {
  return sys ? atomic_load(&((tr_system *)sys)->watchdog_ms) : 0;
}

void tr_system_set_watchdog_ms(tr_system *sys, int ms) {
  if (sys == NULL) {
    tr__misuse(TR_EINVAL, "tr_system_set_watchdog_ms: sys is NULL");
    return;
  }
  if (ms >= 1 && atomic_load(&sys->watchdog_ms) > 0) atomic_store(&sys->watchdog_ms, ms);
}

int tr_system_work_begin(tr_system *sys) {
  if (sys == NULL) return TR_EINVAL;
  atomic_fetch_add(&sys->work_out, 1);
  return 0;
}

int tr_system_work_end(tr_system *sys) {
  if (sys == NULL) return TR_EINVAL;
  int out = atomic_load(&sys->work_out);
  do {
    if (out == 0) return TR_ESTATE; /* more ends than begins */
  } while (!atomic_compare_exchange_weak(&sys->work_out, &out, out - 1));
  return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

int tr_system_new(tr_system **out, const tr_system_config *config) {
  static const tr_system_config defaults = {0};
  if (config == NULL) config = &defaults;
  TR__NOT_NULL(out);
  *out = NULL;
  const struct { const char *name; int value; } counts[] = {
      {"turn_batch", config->turn_batch}, {"spin_us", config->spin_us},
      {"watchdog_ms", config->watchdog_ms}};
  for (int i = 0; i < TR__COUNTOF(counts); i++)
    if (counts[i].value < 0)
      return tr__misuse(TR_EINVAL, "tr_system_new: config->%s %d: give 0 (the default) or more",
                        counts[i].name, counts[i].value);
  tr_stdio_reserve();

  tr_system *sys = calloc(1, sizeof *sys);
  if (sys == NULL) return TR_ENOMEM;
  sys->name = strdup(config->name ? config->name : "troupe");
  sys->turn_batch = config->turn_batch ? config->turn_batch : 64;
  sys->spin_us = config->spin_us ? config->spin_us : 20;
  sys->trace_on = config->trace != 0;
  sys->handle_signals = config->handle_signals != 0;
  sys->watchdog_ms = config->watchdog_ms;
  sys->watchdog_idle = config->watchdog_idle != 0;
  sys->describe = config->describe;
  sys->describe_arg = config->describe_arg;
  sys->on_signal = config->on_signal;
  sys->signal_arg = config->signal_arg;
  sys->on_quiet = config->on_quiet;
  sys->quiet_arg = config->quiet_arg;
  tr_mailbox_init(&sys->requests);
  pthread_mutex_init(&sys->lock, NULL);
  if (sys->name == NULL || uv_loop_init(&sys->loop) != 0) {
    free(sys->name);
    free(sys);
    return TR_ENOMEM;
  }
  uv_async_init(&sys->loop, &sys->async, on_async);
  sys->async.data = sys;
  *out = sys;
  return 0;
}

static int start_thread(tr_actor *a) {
  atomic_fetch_add(&a->sys->pinned_started, 1);
  if (pthread_create(&a->thread, NULL, tr__pinned_main, a) != 0) {
    atomic_fetch_sub(&a->sys->pinned_started, 1);
    return TR_ESYS;
  }
  a->has_thread = true;
  return 0;
}

int tr_actor_spawn(tr_system *sys, const tr_actor_config *config, tr_actor **out) {
  TR__NOT_NULL(out);
  *out = NULL;
  TR__NOT_NULL(sys);
  TR__NOT_NULL(config);
  const char *name = config->name ? config->name : "(unnamed)";
  if (config->behaviour == NULL || config->behaviour->receive == NULL)
    return tr__misuse(TR_EINVAL, "tr_actor_spawn: actor '%s': config->behaviour%s is NULL: "
                      "an actor needs a behaviour with a receive callback", name,
                      config->behaviour ? "->receive" : "");
  if (config->kind != TR_ACTOR_PINNED && config->kind != TR_ACTOR_LOOP)
    return tr__misuse(TR_EINVAL, "tr_actor_spawn: actor '%s': config->kind %d: give "
                      "TR_ACTOR_PINNED or TR_ACTOR_LOOP", name, (int)config->kind);
  if (config->spin_us < TR_SPIN_FOREVER)
    return tr__misuse(TR_EINVAL, "tr_actor_spawn: actor '%s': config->spin_us %d: give µs, 0, "
                      "TR_SPIN_NONE or TR_SPIN_FOREVER", name, config->spin_us);

  tr_actor *a = aligned_alloc(TR_CACHE_LINE, sizeof *a);
  if (a == NULL) return TR_ENOMEM;
  memset(a, 0, sizeof *a);
  tr_mailbox_init(&a->ctl);
  tr_mailbox_init(&a->data);
  atomic_init(&a->park, TR__RUNNING);
  a->sys = sys;
  a->b = config->behaviour;
  a->state = config->state;
  a->kind = config->kind;
  a->spin_us = config->spin_us ? config->spin_us : sys->spin_us;
  a->id = atomic_fetch_add(&sys->next_id, 1);
  if (config->name) {
    a->name = strdup(config->name);
  } else if (asprintf(&a->name, "%s-%u", a->b->name ? a->b->name : "actor", a->id) < 0) {
    a->name = NULL;
  }
  if (a->name == NULL) {
    free(a);
    return TR_ENOMEM;
  }
  if (a->kind == TR_ACTOR_LOOP) a->trace = sys->loop_trace;
  else a->pool = tr_msg_pool_new();

  if (a->kind == TR_ACTOR_PINNED && atomic_load(&sys->running)) {
    int rc = start_thread(a);
    if (rc != 0) {
      tr_msg_pool_free(a->pool);
      free(a->name);
      free(a);
      return rc;
    }
  }
  push_actor(&sys->actors, a, offsetof(tr_actor, next_all));
  if (a->kind == TR_ACTOR_LOOP) {
    push_actor(&sys->loop_actors, a, offsetof(tr_actor, next_loop));
    tr__loop_wake(sys); /* its start runs on the loop's next pass */
  }
  /* Spawned while the stop went out: it must not miss its stop (a second one is harmless). */
  if (a->kind == TR_ACTOR_PINNED && atomic_load(&sys->stopping))
    tr_actor_send_ctl(a, tr_msg_new(&tr_msg_stop_type));
  *out = a;
  return 0;
}

int tr_system_run(tr_system *sys) {
  TR__NOT_NULL(sys);
  if (sys->ran)
    return tr__misuse(TR_ESTATE, "tr_system_run: system '%s' ran already: a system runs once "
                      "(make another with tr_system_new)", sys->name);
  sys->ran = true;
  tr__run_error_set(""); /* an earlier run's failure is not this one's */
  if (sys->trace_on) {
    sys->loop_trace = tr__trace_buf_new(sys, "loop", 0);
    for (tr_actor *a = atomic_load(&sys->loop_actors); a; a = a->next_loop)
      a->trace = sys->loop_trace;
  }
  if (sys->handle_signals) {
    for (int i = 0; i < TR__SIGNALS; i++) {
      if (!taken(i)) continue;
      uv_signal_init(&sys->loop, &sys->sigs[i]);
      sys->sigs[i].data = sys;
      uv_signal_start(&sys->sigs[i], on_signal, signums[i]);
    }
    /* libuv's handlers replaced the start-up's: a signal held is raised again for them */
    const int early = held;
    installed = false;
    held = 0;
    if (early) raise(early);
  }
  if (sys->watchdog_ms > 0) tr__watchdog_start(sys);
  /* Actors spawned from now on start their own threads; these were spawned before the run. */
  tr_actor *before = atomic_load(&sys->actors);
  atomic_store(&sys->running, 1);
  for (tr_actor *a = before; a; a = a->next_all) {
    if (a->kind == TR_ACTOR_PINNED && !a->has_thread && start_thread(a) != 0) {
      tr__system_fail(sys, TR_ESYS, "%s: cannot create the thread of actor '%s'", sys->name,
                      a->name);
      break;
    }
  }
  sys->loop_pool = tr_msg_pool_new();
  tr_msg_pool_attach(sys->loop_pool);
  uv_async_send(&sys->async); /* first pass: start the loop actors */
  uv_run(&sys->loop, UV_RUN_DEFAULT);
  /* libuv put back the defaults: a program still holding holds again, unless a signal came
   * (the next one is the process's, as during the run) */
  if (sys->handle_signals && holds > 0 && !atomic_load(&sys->signal)) install_hold(NULL);
  tr_msg_pool_attach(NULL);
  return sys->status;
}

void tr_system_free(tr_system *sys) {
  if (sys == NULL) return;
  TR_ASSERT(!sys->ran || sys->shutdown_phase == PHASE_CLOSING);
  if (!sys->ran) {
    atomic_store(&sys->async_closed, 1);
    uv_close((uv_handle_t *)&sys->async, NULL);
  }
  uv_run(&sys->loop, UV_RUN_DEFAULT); /* close callbacks */
  TR_ASSERT(uv_loop_close(&sys->loop) == 0);

  /* Every queued message first (they may come from any pool), then the pools. */
  for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
    tr_mailbox_drain(&a->ctl);
    tr_mailbox_drain(&a->data);
  }
  tr_mailbox_drain(&sys->requests);
  tr_actor *a = atomic_load(&sys->actors);
  while (a) {
    tr_actor *next = a->next_all;
    if (a->b->destroy) a->b->destroy(a->state);
    tr_msg_pool_free(a->pool);
    free(a->error);
    free(a->name);
    free(a);
    a = next;
  }
  tr_msg_pool_free(sys->loop_pool);
  tr__trace_free_all(sys);
  pthread_mutex_destroy(&sys->lock);
  free(sys->name);
  free(sys);
}
