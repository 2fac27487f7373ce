/* actor.c — sending, turns, and the life of a pinned actor's thread.
 *
 * How a parked pinned actor is woken (an eventcount on `park`):
 *   consumer: park = PARKING; mark both lanes empty (tr_mailbox_mark_empty);
 *             if both marked, futex_wait(park, PARKING) until park != PARKING.
 *   producer: push; if the push removed the mark, exchange(park, RUNNING) and, if it was
 *             PARKING, futex_wake.
 * The consumer announces (PARKING) before it re-checks (the mark's compare-and-swap fails if
 * anything arrived), and a producer that finds the mark sees the announcement: a wake-up
 * cannot be lost. Busy producers never see a mark, so they never touch `park`.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "system_impl.h"

static void futex_wait(_Atomic uint32_t *word, uint32_t expect) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void actor_wake(tr_actor *a) {
  if (a->kind == TR_ACTOR_LOOP) {
    tr__loop_wake(a->sys);
  } else if (atomic_exchange(&a->park, TR__RUNNING) == TR__PARKING) {
    futex_wake(&a->park);
  }
}

/* A send with no actor or no message: said, and the message freed (tr_base.h, Misuse). */
static bool refuse_send(const char *call, const tr_actor *to, void *msg) {
  if (__builtin_expect(to != NULL && msg != NULL, 1)) return false;
  const tr_msg *m = msg;
  tr__misuse(TR_EINVAL, "%s: %s is NULL%s%s%s", call, to ? "msg" : "to",
             m ? ": the message ('" : "", m && m->type ? m->type->name : m ? "?" : "",
             m ? "') is freed" : "");
  tr_msg_free(msg);
  return true;
}

void tr_actor_send(tr_actor *to, void *msg) {
  if (refuse_send("tr_actor_send", to, msg)) return;
  if (tr_mailbox_push(&to->data, msg)) actor_wake(to);
}

void tr_actor_send_ctl(tr_actor *to, void *msg) {
  if (refuse_send("tr_actor_send_ctl", to, msg)) return;
  if (tr_mailbox_push(&to->ctl, msg)) actor_wake(to);
}

int tr_actor_fail(tr_actor *self, int status, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (self == NULL) return tr__misuse(status, "tr_actor_fail: self is NULL (%s: %s)",
                                      tr_strerror(status), buf);
  free(self->error);
  self->error = strdup(buf);
  return status;
}

const char *tr_actor_name(const tr_actor *a) { return a ? a->name : ""; }
tr_actor_kind tr_actor_kind_of(const tr_actor *a) { return a ? a->kind : TR_ACTOR_PINNED; }
void *tr_actor_state(const tr_actor *a) { return a ? a->state : NULL; }
tr_system *tr_actor_system(const tr_actor *a) { return a ? a->sys : NULL; }

static const char *kind_name(const tr_actor *a) {
  return a->kind == TR_ACTOR_PINNED ? "pinned" : "loop";
}

/* The first failure inside an actor stops the whole system, naming what failed. */
static void actor_failed(tr_actor *a, int status, const char *during) {
  tr__system_fail(a->sys, status, "actor '%s' (%s %s) failed %s: %s%s%s", a->name,
                  kind_name(a), a->b->name ? a->b->name : "actor", during, tr_strerror(status),
                  a->error ? ": " : "", a->error ? a->error : "");
}

static int deliver(tr_actor *a, tr_msg *m) {
  int rc;
  atomic_store_explicit(&a->handling, m->type, memory_order_relaxed);
  if (__builtin_expect(a->sys->trace_on | tr__nvtx_live, 0)) rc = tr__trace_deliver(a, m);
  else rc = a->b->receive(a, m);
  atomic_store_explicit(&a->handling, NULL, memory_order_relaxed);
  atomic_store_explicit(&a->handled, atomic_load_explicit(&a->handled, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  if (rc != 0) {
    char during[160];
    snprintf(during, sizeof during, "handling '%s'", m->type->name);
    actor_failed(a, rc, during);
  }
  return rc;
}

void tr__actor_stop_now(tr_actor *a) {
  if (a->done) return;
  a->done = true;
  if (atomic_load_explicit(&a->started, memory_order_relaxed) && a->b->stop) a->b->stop(a);
}

static int turn(tr_actor *a) {
  tr_msg *m, *released;
  int n = 0;

  if (!atomic_load_explicit(&a->started, memory_order_relaxed)) {
    int rc = 0;
    if (a->b->start)
      rc = __builtin_expect(a->sys->trace_on | tr__nvtx_live, 0) ? tr__trace_start(a) : a->b->start(a);
    if (rc != 0) {
      actor_failed(a, rc, "starting");
      tr__actor_stop_now(a); /* marks it done; `stop` is only for actors that started */
      return -1;
    }
    atomic_store_explicit(&a->started, true, memory_order_relaxed);
  }

  while ((m = tr_mailbox_pop(&a->ctl, &released)) != NULL) {
    tr_msg_free(released);
    if (m->type == &tr_msg_stop_type || deliver(a, m) != 0) {
      tr__actor_stop_now(a);
      return -1;
    }
    n++;
  }

  /* The turn ends at the newest message present when it began. `head` is the producers'
   * line, so it is read only when more than one message waits: a lone message (the
   * ping-pong case) costs no extra cache miss. */
  const tr_msg *last = NULL;
  for (int i = 0; i < a->sys->turn_batch; i++) {
    m = tr_mailbox_pop(&a->data, &released);
    if (m == NULL) break;
    tr_msg_free(released);
    if (last == NULL) last = tr_mailbox_empty(&a->data) ? m : tr_mailbox_newest(&a->data);
    if (deliver(a, m) != 0) {
      tr__actor_stop_now(a);
      return -1;
    }
    n++;
    /* A stop, an error or the end of a run must not wait behind a backlog of data. */
    if (m == last || !tr_mailbox_empty(&a->ctl)) break;
  }
  return n;
}

/* A loop actor's turn records into the loop's trace, and only while it runs: the loop
 * thread may outlive the system. */
int tr__actor_turn(tr_actor *a) {
  if (a->kind != TR_ACTOR_LOOP) return turn(a);
  tr__trace_thread(a->trace, "loop");
  const int n = turn(a);
  tr__trace_thread(NULL, NULL);
  return n;
}

static void pinned_idle(tr_actor *a, tr_spin *spin) {
  if (a->spin_us != TR_SPIN_NONE) {
    uint64_t deadline = a->spin_us == TR_SPIN_FOREVER ? UINT64_MAX
                                                      : tr_now_ns() + (uint64_t)a->spin_us * 1000;
    tr_spin_begin(spin);
    for (;;) {
      tr_spin_wait(spin);
      if (!tr_mailbox_empty(&a->ctl) || !tr_mailbox_empty(&a->data)) {
        tr_spin_found(spin);
        return;
      }
      if ((spin->looks & 15) == 0 && tr_now_ns() > deadline) break;
    }
  }
  tr_msg_pool_flush(); /* what it holds for other threads must not sleep with it */
  atomic_store(&a->park, TR__PARKING);
  if (tr_mailbox_mark_empty(&a->ctl) && tr_mailbox_mark_empty(&a->data)) {
    while (atomic_load(&a->park) == TR__PARKING) futex_wait(&a->park, TR__PARKING);
  }
  atomic_store(&a->park, TR__RUNNING);
}

void *tr__pinned_main(void *arg) {
  tr_actor *a = arg;
  tr_system *sys = a->sys;
  char tname[16];
  snprintf(tname, sizeof tname, "%s", a->name);
  pthread_setname_np(pthread_self(), tname);
  if (sys->trace_on) a->trace = tr__trace_buf_new(sys, a->name, (int)a->id + 1);
  tr__trace_thread(a->trace, a->name); /* before anything it handles: NVTX names the row */
  tr_msg_pool_attach(a->pool);

  tr_spin spin = TR_SPIN_INIT;
  for (;;) {
    int n = tr__actor_turn(a);
    if (n < 0) break;
    if (n == 0) pinned_idle(a, &spin);
  }

  tr_msg_pool_attach(NULL);
  atomic_fetch_add(&sys->pinned_exited, 1);
  tr__loop_wake(sys);
  return NULL;
}
