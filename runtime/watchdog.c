/* watchdog.c — the watchdog, and the report of every actor's state it stops a system with.
 *
 * It runs on the loop thread, from a libuv timer, and reads what actors' threads publish
 * with relaxed atomics (what each is handling, how many it handled, its mailboxes): it
 * never touches a message or an actor's state.
 */
#include <stdio.h>

#include "system_impl.h"

static bool actor_busy(tr_actor *a) {
  return atomic_load_explicit(&a->handling, memory_order_relaxed) != NULL ||
         tr_mailbox_pending(&a->ctl) || tr_mailbox_pending(&a->data);
}

void tr_system_report(tr_system *sys, char *buf, size_t size) {
  size_t len = 0;
  int idle = 0;
  buf[0] = 0;
  for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
    const tr_msgtype *t = atomic_load_explicit(&a->handling, memory_order_relaxed);
    bool waiting = tr_mailbox_pending(&a->ctl) || tr_mailbox_pending(&a->data);
    if (t == NULL && !waiting) {
      idle++;
      continue;
    }
    const char *state = t ? "handling" : a->kind == TR_ACTOR_PINNED &&
                                                 atomic_load(&a->park) == TR__PARKING
                                             ? "parked with messages waiting"
                                             : "messages waiting";
    int n = snprintf(buf + len, size - len, "%s'%s' (%s %s): %s%s%s%s, %llu handled", len ? "; " : "",
                     a->name, a->kind == TR_ACTOR_PINNED ? "pinned" : "loop",
                     a->b->name ? a->b->name : "actor", state, t ? " '" : "", t ? t->name : "",
                     t ? "'" : "",
                     (unsigned long long)atomic_load_explicit(&a->handled, memory_order_relaxed));
    if (n < 0 || (size_t)n >= size - len) return;
    len += (size_t)n;
  }
  snprintf(buf + len, size - len, "%s%d idle", len ? "; " : "", idle);
}

/* A stall is "busy and no message handled"; one sample of it means nothing (a message may
 * have arrived a moment ago), so the watchdog samples four times per period and fires only
 * when every sample over a whole period saw the same stall. */
static void watchdog_tick(uv_timer_t *h) {
  tr_system *sys = h->data;
  uint64_t handled = 0;
  bool busy = false;
  for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
    handled += atomic_load_explicit(&a->handled, memory_order_relaxed);
    busy |= actor_busy(a);
  }
  uint64_t now = uv_now(&sys->loop) + 1; /* + 1: never 0, which means "no stall" */
  if (handled != sys->watchdog_handled || !busy || atomic_load(&sys->stopping)) {
    sys->watchdog_handled = handled;
    sys->watchdog_stalled_at = 0;
  } else if (sys->watchdog_stalled_at == 0) {
    sys->watchdog_stalled_at = now;
  } else if (now - sys->watchdog_stalled_at >= (uint64_t)sys->watchdog_ms) {
    char report[768];
    tr_system_report(sys, report, sizeof report);
    tr__system_fail(sys, TR_ETIMEDOUT, "%s: no progress for %d ms: %s", sys->name,
                    sys->watchdog_ms, report);
  }
}

void tr__watchdog_start(tr_system *sys) {
  uv_timer_init(&sys->loop, &sys->watchdog);
  sys->watchdog.data = sys;
  uint64_t tick = sys->watchdog_ms >= 4 ? (uint64_t)sys->watchdog_ms / 4 : 1;
  uv_timer_start(&sys->watchdog, watchdog_tick, tick, tick);
}
