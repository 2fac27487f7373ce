/* watchdog.c — the watchdog, and the report of every actor's state it stops a system with.
 *
 * It runs on the loop thread, from a libuv timer, and reads what actors' threads publish
 * with relaxed atomics (what each is handling, how many it handled, whether it started or
 * parked, whether its lanes hold messages): it never touches a message or an actor's state.
 *
 * Mailboxes do not count their messages: a counter kept by every push (one more atomic
 * read-modify-write) measured at about half the mailbox's throughput in `troupe bench
 * mailbox`, for a figure only diagnostics want. The report says which lanes hold messages.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "system_impl.h"

/* ---- what an actor looks like from the outside ------------------------------------------ */

typedef struct actor_view {
  const tr_actor *a;
  const tr_msgtype *handling;
  uint64_t handled;
  bool started, parked, ctl, data; /* ctl, data: messages wait on that lane */
} actor_view;

static actor_view actor_look(const tr_actor *a) {
  tr_actor *m = (tr_actor *)a; /* atomics are read, never written */
  return (actor_view){
      .a = a,
      .handling = atomic_load_explicit(&m->handling, memory_order_relaxed),
      .handled = atomic_load_explicit(&m->handled, memory_order_relaxed),
      .started = atomic_load_explicit(&m->started, memory_order_relaxed),
      .parked = a->kind == TR_ACTOR_PINNED &&
                atomic_load_explicit(&m->park, memory_order_relaxed) == TR__PARKING,
      .ctl = tr_mailbox_pending(&a->ctl),
      .data = tr_mailbox_pending(&a->data),
  };
}

/* Busy: handling a message or with messages waiting. A stall is busy without progress. */
static bool view_busy(const actor_view *v) { return v->handling || v->ctl || v->data; }
/* Idle: started, and neither busy nor about to be. */
static bool view_idle(const actor_view *v) { return v->started && !view_busy(v); }

static size_t view_write(const actor_view *v, char *buf, size_t size) {
  char handling[96];
  const char *state = !v->started                ? "not started"
                      : v->parked                ? "parked"
                      : v->ctl || v->data        ? "between turns"
                                                 : "idle";
  if (v->handling) {
    snprintf(handling, sizeof handling, "handling '%s'", v->handling->name);
    state = handling;
  }
  const char *waiting = v->ctl && v->data ? "messages waiting (priority and data lanes)"
                        : v->ctl          ? "messages waiting (priority lane)"
                        : v->data         ? "messages waiting (data lane)"
                                          : "nothing waiting";
  int n = snprintf(buf, size, "'%s' (%s %s): %s, %s, %llu handled", v->a->name,
                   v->a->kind == TR_ACTOR_PINNED ? "pinned" : "loop",
                   v->a->b->name ? v->a->b->name : "actor", state, waiting,
                   (unsigned long long)v->handled);
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* ---- the report ------------------------------------------------------------------------- */

/* Appends to buf[*len..size), truncating; *len stays within the buffer. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n < size - *len ? (size_t)n : size - *len - 1;
}

enum { SUMMARY_ROOM = 64 }; /* "; 1234 more not shown; 12345 actors, 12345 idle" */

void tr_system_report(tr_system *sys, char *buf, size_t size) {
  if (buf == NULL || size == 0) return;
  buf[0] = 0;
  if (sys == NULL) return;
  /* The list only grows at its head: from one head, it is a fixed list. */
  tr_actor *head = atomic_load(&sys->actors);
  size_t n = 0, idle = 0, shown = 0, len = 0;
  for (tr_actor *a = head; a; a = a->next_all) n++;
  actor_view *views = n ? malloc(n * sizeof *views) : NULL;
  if (n && views == NULL) {
    snprintf(buf, size, "%zu actors (no memory for a report)", n);
    return;
  }
  size_t i = n;
  for (tr_actor *a = head; a; a = a->next_all) { /* each looked at once, in spawn order */
    views[--i] = actor_look(a);
    idle += view_idle(&views[i]);
  }
  /* The actors that are not idle first: in a stall, they are the story. */
  char entry[320];
  bool full = false;
  for (int pass = 0; pass < 2 && !full; pass++) {
    for (i = 0; i < n && !full; i++) {
      if (view_idle(&views[i]) != (pass == 1)) continue;
      size_t k = view_write(&views[i], entry, sizeof entry);
      full = len + k + 2 + SUMMARY_ROOM >= size;
      if (!full) {
        append(buf, size, &len, "%s%s", len ? "; " : "", entry);
        shown++;
      }
    }
  }
  if (shown < n) append(buf, size, &len, "%s%zu more not shown", len ? "; " : "", n - shown);
  append(buf, size, &len, "%s%zu actor%s, %zu idle", len ? "; " : "", n, n == 1 ? "" : "s",
         idle);
  free(views);
}

/* ---- the watchdog ------------------------------------------------------------------------ */

/* What a tick saw: progress (or nothing to worry about), a stall (busy, nothing handled
 * since the previous tick), idle but not done while work outside the actors is out (it may
 * still send a message: a libuv request, tr_system_work_begin), or quiet: idle but not done
 * with nothing that could ever wake it (nothing to handle, nothing pending, nothing out, no
 * stop). */
enum { SEEN_PROGRESS, SEEN_STALL, SEEN_IDLE, SEEN_QUIET };

/* A quiet system is quiet for good: nothing is left that could send it a message. So it is
 * told in a second, however long the period (a minute for a graph), where a stall or work
 * out has the whole period, since those may end by themselves. */
enum { QUIET_MS = 1000, TICK_MAX_MS = 250 };

typedef struct handle_walk {
  tr_system *sys;
  bool active;
} handle_walk;

static void note_active_handle(uv_handle_t *h, void *arg) {
  handle_walk *w = arg;
  tr_system *sys = w->sys;
  if (h == (uv_handle_t *)&sys->async || h == (uv_handle_t *)&sys->watchdog ||
      tr__system_signal_handle(sys, h))
    return;
  if (uv_is_active(h) && uv_has_ref(h)) w->active = true;
}

/* Whether something will still happen though no actor does anything: a timer is pending
 * (its tick is a message, so a repeating timer always is), a request for one is on its way
 * to the loop, or a loop actor keeps a handle of its own active (a socket, a timer): what
 * would keep a libuv loop alive keeps the system alive. Loop thread. */
static bool something_pending(tr_system *sys) {
  if (sys->timers != NULL || tr_mailbox_pending(&sys->requests)) return true;
  /* Without timers, the runtime's own timer handles left are closing, hence inactive. */
  handle_walk w = {sys, false};
  uv_walk(&sys->loop, note_active_handle, &w);
  return w.active;
}

/* Work outside the actors that may still send one a message: requests on the loop (a
 * checkpoint written on libuv's thread pool, uv_queue_work; a uv_fs_* call), counted by
 * libuv on this thread, and tr_system_work_begin's. It may never end (a write stuck on a
 * full disk), so it does not keep the system alive as a timer does: it only keeps an idle
 * system from being called quiet, and the whole period applies. Loop thread. */
typedef struct work_out {
  unsigned requests;
  int begun;
} work_out;

static work_out work_look(tr_system *sys) {
  return (work_out){.requests = sys->loop.active_reqs.count,
                    .begun = atomic_load_explicit(&sys->work_out, memory_order_acquire)};
}

static void watchdog_fire(tr_system *sys, int seen, int ms, work_out out) {
  char described[1024] = "";
  if (sys->describe) {
    sys->describe(sys->describe_arg, described, sizeof described);
    described[sizeof described - 1] = 0;
  }
  /* The layer above's text must survive a long report: the report gets what is left. */
  char report[sizeof sys->error];
  size_t used = strlen(described) + strlen(sys->name) + 192;
  tr_system_report(sys, report, used + 256 < sizeof report ? sizeof report - used : 256);
  if (seen == SEEN_QUIET) {
    tr__system_fail(sys, TR_ETIMEDOUT,
                    "%s: idle but not done for %d ms, and nothing can wake it (nothing to "
                    "handle, no timer pending, no I/O or other work out, no stop): %s%s%s",
                    sys->name, ms, report, described[0] ? "; " : "", described);
  } else if (seen == SEEN_IDLE) {
    tr__system_fail(sys, TR_ETIMEDOUT,
                    "%s: idle but not done for %d ms (nothing to handle, no timer pending, "
                    "no stop; out all along: %u libuv request%s, %d tr_system_work_begin): "
                    "%s%s%s",
                    sys->name, ms, out.requests, out.requests == 1 ? "" : "s", out.begun,
                    report, described[0] ? "; " : "", described);
  } else {
    tr__system_fail(sys, TR_ETIMEDOUT, "%s: no progress for %d ms: %s%s%s", sys->name, ms,
                    report, described[0] ? "; " : "", described);
  }
}

/* One sample means nothing (a message may have arrived a moment ago, an actor may be
 * between popping a message and handling it), so the watchdog fires only when every sample
 * over a whole period (a quiet system: over QUIET_MS, or the period when shorter, at least
 * four samples either way) saw the same thing. Counts of handled messages only grow, so the
 * same total at every sample means that nothing was handled in between; and what would make
 * an idle system busy between two samples (a message sent, a timer started) is still
 * visible at the next one unless it was handled. Work out is looked at before the actors:
 * work that ends sends its message first (tr_system_work_end; libuv runs a request's
 * callback on this thread), so work seen ended has left its trace in a mailbox or a count. */
static void watchdog_tick(uv_timer_t *h) {
  tr_system *sys = h->data;
  const work_out out = work_look(sys);
  uint64_t handled = 0;
  bool busy = false, idle = true;
  for (tr_actor *a = atomic_load(&sys->actors); a; a = a->next_all) {
    actor_view v = actor_look(a);
    handled += v.handled;
    busy |= view_busy(&v);
    idle &= view_idle(&v);
  }
  int seen = SEEN_PROGRESS;
  if (handled == sys->watchdog_handled && !atomic_load(&sys->stopping)) {
    if (busy) seen = SEEN_STALL;
    else if (sys->watchdog_idle && idle && !something_pending(sys))
      seen = out.requests || out.begun ? SEEN_IDLE : SEEN_QUIET;
  }
  uint64_t now = uv_now(&sys->loop);
  const int period = atomic_load(&sys->watchdog_ms);
  const int window = seen == SEEN_QUIET && period > QUIET_MS ? QUIET_MS : period;
  if (seen == SEEN_PROGRESS || seen != sys->watchdog_seen) {
    sys->watchdog_handled = handled;
    sys->watchdog_seen = seen;
    sys->watchdog_since = now;
    return;
  }
  if (now - sys->watchdog_since < (uint64_t)window) return;
  if (seen == SEEN_QUIET && sys->on_quiet) { /* the layer above may end it its own way */
    sys->on_quiet(sys->quiet_arg);
    if (atomic_load(&sys->stopping)) return; /* else the watchdog stops it, below */
  }
  watchdog_fire(sys, seen, window, out);
}

/* At least four looks per period, and four a second: a quiet system is told in a second
 * (QUIET_MS), and the period may shrink while it runs (tr_system_set_watchdog_ms). */
void tr__watchdog_start(tr_system *sys) {
  uv_timer_init(&sys->loop, &sys->watchdog);
  sys->watchdog.data = sys;
  const int period = atomic_load(&sys->watchdog_ms);
  const uint64_t tick = period >= 4 * TICK_MAX_MS ? TICK_MAX_MS
                        : period >= 4             ? (uint64_t)period / 4
                                                  : 1;
  uv_timer_start(&sys->watchdog, watchdog_tick, tick, tick);
}
