/* graph.c — training graphs: actors, credit edges, and the protocol that ends a run.
 *
 * Credits are one atomic counter per edge. The producer flags itself starving when it finds
 * none, then looks again (a release may have come in between); a release that brings the
 * count to `wake_at` and finds the flag takes it and sends the one wake-up message. A
 * starving producer takes no credit until `wake_at` are free. Both
 * sides use sequentially consistent operations on the counter and the flag, so one of them
 * always sees the other (the pattern of the mailbox's park protocol).
 *
 * Steps: `claimed` is one past the highest step any source claimed; finishing sets its STOP
 * bit, freezing it, so the end every source sees is the same. `taken` hands steps out to
 * sources that share them (tr_graph_take_step). Each new claim tells the tracer that a step
 * begins (its profiling window opens and closes on steps).
 *
 * Traces: every message sent on an edge is a flow from its send to its handling, and each
 * edge's credits in flight are a counter track, sampled at every acquire and release.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tr_graph.h"
#include "tr_trace.h"

TR_MSGTYPE_DEFINE(tr_edge_credit_type, tr_edge_credit_msg);
TR_MSGTYPE_DEFINE(tr_graph_end_type, tr_graph_end_msg);

#define STOP (INT64_C(1) << 62)

struct tr_edge {
  tr_actor *from, *to;
  const tr_msgtype *type;
  const char *name;
  int credits, wake_at;
  bool notify;
  _Atomic int available;
  _Atomic int starving;
  _Atomic int peak; /* written by the producer only */
  tr_edge *next;
  char track[96];   /* the trace's counter: "credits producer→consumer name" */
};

typedef struct member {
  tr_actor *actor;
  bool service;     /* not waited for */
  _Atomic bool done; /* its part is over (read by tr_graph_print) */
  struct member *next;
} member;

struct tr_graph {
  tr_system *sys;
  member *members;
  int nmembers, nwaited; /* nwaited: members that are not services */
  tr_edge *edges;
  tr_actor *timer; /* the graph's own loop actor, for a time limit */
  bool ran;
  int64_t first_step, end_limit;
  _Atomic int64_t claimed; /* one past the highest step claimed, | STOP once finished */
  _Atomic int64_t taken;   /* steps handed out by tr_graph_take_step */
  _Atomic int ndone;
};

static void describe(void *arg, char *buf, size_t size) {
  FILE *f = fmemopen(buf, size, "w");
  if (f == NULL) return;
  tr_graph_print(arg, f);
  fclose(f);
}

int tr_graph_new(tr_graph **out, const tr_system_config *config) {
  *out = NULL;
  tr_graph *g = calloc(1, sizeof *g);
  if (g == NULL) return TR_ENOMEM;
  /* A graph whose actors all wait for messages no one will send is stuck as surely as one
   * whose actor never returns: the watchdog reports both, with the graph's own picture. */
  tr_system_config c = config ? *config : (tr_system_config){0};
  c.watchdog_idle = c.watchdog_ms > 0;
  c.describe = describe;
  c.describe_arg = g;
  int rc = tr_system_new(&g->sys, &c);
  if (rc) {
    free(g);
    return rc;
  }
  g->end_limit = INT64_MAX;
  *out = g;
  return 0;
}

void tr_graph_free(tr_graph *g) {
  if (g == NULL) return;
  tr_system_free(g->sys);
  for (member *m = g->members, *next; m; m = next) {
    next = m->next;
    free(m);
  }
  for (tr_edge *e = g->edges, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  free(g);
}

tr_system *tr_graph_system(const tr_graph *g) { return g->sys; }
const char *tr_graph_error(const tr_graph *g) { return tr_system_error(g->sys); }

static int add(tr_graph *g, const tr_actor_config *config, bool service, tr_actor **out) {
  TR_ASSERT(!g->ran);
  member *m = calloc(1, sizeof *m);
  if (m == NULL) return TR_ENOMEM;
  int rc = tr_actor_spawn(g->sys, config, &m->actor);
  if (rc) {
    free(m);
    return rc;
  }
  m->service = service;
  m->next = g->members;
  g->members = m;
  g->nmembers++;
  g->nwaited += !service;
  *out = m->actor;
  return 0;
}

int tr_graph_add(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(g, config, false, out);
}

int tr_graph_add_service(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(g, config, true, out);
}

int tr_graph_connect(tr_graph *g, const tr_edge_config *c, tr_edge **out) {
  TR_ASSERT(!g->ran && c->from && c->to);
  *out = NULL;
  const int wake_at = c->wake_at > 0 ? c->wake_at : 1;
  if (c->credits < 1 || wake_at > c->credits) return TR_EINVAL;
  tr_edge *e = calloc(1, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  *e = (tr_edge){.from = c->from,
                 .to = c->to,
                 .type = c->type,
                 .name = c->name ? c->name : c->type->name,
                 .credits = c->credits,
                 .wake_at = wake_at,
                 .notify = c->notify != 0,
                 .next = g->edges};
  atomic_init(&e->available, c->credits);
  snprintf(e->track, sizeof e->track, "credits %s→%s %s", tr_actor_name(e->from),
           tr_actor_name(e->to), e->name);
  g->edges = e;
  *out = e;
  return 0;
}

int tr_edge_acquire(tr_edge *e) {
  /* Once starved, the producer waits for wake_at free credits, even when asked to try
   * again by something else: so every wake-up finds them. */
  bool starved = atomic_load(&e->starving);
  if (!starved && atomic_load(&e->available) == 0) {
    atomic_store(&e->starving, 1);
    starved = true;
  }
  /* A release between the load and the flag saw no flag: look again. Taking the flag
   * back means no wake-up is on its way; finding it gone means one is. */
  if (starved && (atomic_load(&e->available) < e->wake_at || !atomic_exchange(&e->starving, 0)))
    return 0;
  int out = e->credits - atomic_fetch_sub(&e->available, 1) + 1;
  if (out > atomic_load_explicit(&e->peak, memory_order_relaxed))
    atomic_store_explicit(&e->peak, out, memory_order_relaxed);
  tr_trace_counter(e->track, out);
  return 1;
}

void tr_edge_send(tr_edge *e, void *msg) {
  tr_msg *m = msg;
  TR_ASSERT(e->type == NULL || m->type == e->type);
  m->from = e->from;
  tr_trace_flow(m, e->name);
  tr_actor_send(e->to, m);
}

int tr_edge_send_control(tr_edge *e, void *msg) {
  if (!tr_edge_acquire(e)) {
    tr_msg_free(msg);
    return tr_actor_fail(e->from, TR_ESTATE, "edge '%s' from '%s' to '%s': all %d credits in "
                         "flight, which its protocol never allows", e->name,
                         tr_actor_name(e->from), tr_actor_name(e->to), e->credits);
  }
  tr_edge_send(e, msg);
  return 0;
}

static void send_credit(tr_edge *e, int count) {
  tr_edge_credit_msg *c = tr_msg_new(&tr_edge_credit_type);
  c->hdr.from = e->to;
  c->edge = e;
  c->count = count;
  tr_actor_send_ctl(e->from, c);
}

void tr_edge_release(tr_edge *e, int n) {
  int now = atomic_fetch_add(&e->available, n) + n;
  TR_ASSERT(now <= e->credits);
  tr_trace_counter(e->track, e->credits - now);
  if (e->notify) {
    atomic_store(&e->starving, 0);
    send_credit(e, n);
    return;
  }
  /* `now` may be stale by the time the flag is taken (the producer may have run on and
   * starved again): taken with too few free, the flag goes back, and the count is read
   * again, since a release in between may have missed the flag. */
  while (now >= e->wake_at && atomic_load(&e->starving) && atomic_exchange(&e->starving, 0)) {
    if (atomic_load(&e->available) >= e->wake_at) {
      send_credit(e, atomic_load(&e->available));
      return;
    }
    atomic_store(&e->starving, 1);
    now = atomic_load(&e->available);
  }
}

int tr_edge_available(const tr_edge *e) { return atomic_load(&e->available); }
int tr_edge_peak(const tr_edge *e) { return atomic_load(&e->peak); }
int tr_edge_credits(const tr_edge *e) { return e->credits; }
const char *tr_edge_name(const tr_edge *e) { return e->name; }
tr_actor *tr_edge_from(const tr_edge *e) { return e->from; }
tr_actor *tr_edge_to(const tr_edge *e) { return e->to; }

/* ---- steps and the end of the run ------------------------------------------------------- */

int tr_graph_claim_step(tr_graph *g, int64_t step) {
  if (step >= g->end_limit) return 0;
  int64_t c = atomic_load(&g->claimed);
  for (;;) {
    if (step < (c & ~STOP)) return 1;
    if (c & STOP) return 0;
    if (atomic_compare_exchange_weak(&g->claimed, &c, step + 1)) {
      tr_system_trace_step(g->sys, step);
      return 1;
    }
  }
}

int64_t tr_graph_take_step(tr_graph *g) {
  const int64_t step = g->first_step + atomic_fetch_add(&g->taken, 1);
  return tr_graph_claim_step(g, step) ? step : -1;
}

/* Read from `claimed`, which the STOP bit freezes, so a source refused a claim reads the end
 * that refused it. */
int64_t tr_graph_end_step(const tr_graph *g) {
  int64_t c = atomic_load(&g->claimed);
  if (!(c & STOP)) return g->end_limit;
  return (c & ~STOP) < g->end_limit ? c & ~STOP : g->end_limit;
}
int64_t tr_graph_first_step(const tr_graph *g) { return g->first_step; }

void tr_graph_finish(tr_graph *g) {
  int64_t c = atomic_fetch_or(&g->claimed, STOP);
  if (c & STOP) return;
  int64_t end = c < g->end_limit ? c : g->end_limit;
  for (member *m = g->members; m; m = m->next) {
    tr_graph_end_msg *msg = tr_msg_new(&tr_graph_end_type);
    msg->hdr.from = NULL;
    msg->end_step = end;
    tr_actor_send_ctl(m->actor, msg);
  }
}

void tr_graph_done(tr_graph *g, tr_actor *self) {
  member *m = g->members;
  while (m && m->actor != self) m = m->next;
  TR_ASSERT(m != NULL && !atomic_load(&m->done));
  atomic_store(&m->done, true);
  if (!m->service && atomic_fetch_add(&g->ndone, 1) + 1 == g->nwaited) tr_system_stop(g->sys, 0);
}

void tr_graph_print(tr_graph *g, FILE *f) {
  fprintf(f, "graph of %d actors and their edges:\n", g->nmembers);
  for (const member *m = g->members; m; m = m->next) {
    fprintf(f, "  actor '%s' (%s)%s%s\n", tr_actor_name(m->actor),
            tr_actor_kind_of(m->actor) == TR_ACTOR_PINNED ? "pinned" : "loop",
            m->service ? ", a service" : "", atomic_load(&m->done) ? ", done" : "");
  }
  for (const tr_edge *e = g->edges; e; e = e->next) {
    const int out = e->credits - atomic_load(&e->available);
    fprintf(f, "  edge %s -> %s '%s' (%s): %d of %d in flight, peak %d%s%s\n",
            tr_actor_name(e->from), tr_actor_name(e->to), e->name,
            e->type ? e->type->name : "control", out, e->credits, atomic_load(&e->peak),
            atomic_load(&e->starving) ? ", producer waits for credit" : "",
            e->notify ? ", notifies" : "");
  }
}

static int timer_receive(tr_actor *self, tr_msg *msg) {
  if (msg->type == &tr_timer_msg_type) tr_graph_finish(tr_actor_state(self));
  return 0;
}
static const tr_behaviour timer_behaviour = {.name = "graph", .receive = timer_receive};

int tr_graph_run(tr_graph *g, int64_t first_step, int64_t end_step, double seconds) {
  TR_ASSERT(!g->ran);
  if (first_step < 0 || end_step < 0 || (end_step > 0 && end_step <= first_step) ||
      !(seconds >= 0) || (end_step == 0 && seconds == 0) || g->nwaited == 0)
    return TR_EINVAL;
  g->ran = true;
  g->first_step = first_step;
  g->end_limit = end_step > 0 ? end_step : INT64_MAX;
  atomic_store(&g->claimed, first_step);
  tr_system_trace_step(g->sys, first_step); /* the window is open from the start if it holds it */
  if (seconds > 0) {
    int rc = tr_actor_spawn(g->sys,
                            &(tr_actor_config){.name = "graph", .kind = TR_ACTOR_LOOP,
                                               .behaviour = &timer_behaviour, .state = g},
                            &g->timer);
    if (rc == 0) rc = tr_actor_timer_start(g->timer, (uint64_t)(seconds * 1e3), 0, 0);
    if (rc) return rc;
  }
  const int rc = tr_system_run(g->sys);
  tr_system_trace_step(g->sys, INT64_MAX); /* the window ends with the run */
  return rc;
}
