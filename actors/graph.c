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
 * sources that share them (tr_graph_take_step). Across processes (graph_impl.h), finishing
 * first sets PENDING on every rank — claims beyond what each has claimed wait — and then
 * every rank takes the largest of those claims as the end; rank 0 hands the shared steps
 * out to every rank's sources. Each new claim tells the tracer that a step begins (its
 * profiling window opens and closes on steps).
 *
 * Traces: every message sent on an edge inside a process is a flow from its send to its
 * handling, and each edge's credits in flight are a counter track, sampled at every acquire
 * and release.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "tr_trace.h"
#include "world.h"

TR_MSGTYPE_DEFINE(tr_edge_credit_type, tr_edge_credit_msg);
TR_MSGTYPE_DEFINE(tr_graph_end_type, tr_graph_end_msg);
TR_MSGTYPE_DEFINE(tr_graph_wake_type, tr_graph_wake_msg);

#define STOP (INT64_C(1) << 62)
#define PENDING (INT64_C(1) << 61)
#define CLAIMS (~(STOP | PENDING))

typedef tr__member member;

struct tr_graph {
  tr_system *sys;
  member *members;                 /* newest first */
  member **by_id;                  /* [id] */
  int nmembers, cap_members, nwaited; /* nwaited: this rank's members that are not services */
  tr_edge *edges;                  /* newest first */
  tr_edge **edge_by_id;
  int nedges, cap_edges;
  tr_world *world;
  int rank, watchdog_ms;
  tr_actor *transport;             /* across processes */
  tr_actor *timer; /* the graph's own loop actor, for a time limit */
  bool ran;
  int64_t first_step, end_limit;
  _Atomic int64_t claimed; /* one past the highest step claimed, | PENDING, | STOP */
  _Atomic int64_t taken;   /* steps handed out by tr_graph_take_step */
  _Atomic int ndone;
  char error[512]; /* a run ended in order by a signal, or a plan that failed its check */
  int (*before_run)(void *arg, char *err, size_t n); /* tr__graph_before_run */
  void *before_arg;
  int (*lost)(void *arg, int rank, const char *why); /* tr__graph_on_lost */
  void *lost_arg;
};

static void describe(void *arg, char *buf, size_t size) {
  FILE *f = fmemopen(buf, size, "w");
  if (f == NULL) return;
  tr_graph_print(arg, f);
  fclose(f);
}

/* SIGINT, SIGTERM: the run ends as a timed run does, after the steps claimed so far, so
 * that its end is a clean one (figures, the last checkpoint). */
static void finish_on_signal(void *arg, int signum) {
  (void)signum;
  tr_graph_finish(arg);
}

/* The period of a graph's watchdog when its config leaves it 0: TR_WATCHDOG_MS from the
 * environment when it holds a positive number of ms (a test's way to see the default catch a
 * hang quickly), else TR_GRAPH_WATCHDOG_MS. */
static int default_watchdog_ms(void) {
  const char *env = getenv("TR_WATCHDOG_MS");
  if (env && *env) {
    char *end;
    const long ms = strtol(env, &end, 10);
    if (*end == '\0' && ms > 0 && ms <= INT32_MAX) return (int)ms;
  }
  return TR_GRAPH_WATCHDOG_MS;
}

int tr_graph_new(tr_graph **out, const tr_system_config *config) {
  *out = NULL;
  tr_system_config c = config ? *config : (tr_system_config){0};
  if (c.watchdog_ms < TR_WATCHDOG_OFF) return TR_EINVAL;
  tr_graph *g = calloc(1, sizeof *g);
  if (g == NULL) return TR_ENOMEM;
  /* A graph whose actors all wait for messages no one will send is stuck as surely as one
   * whose actor never returns: the watchdog reports both, with the graph's own picture. It
   * is on unless turned off: a wiring mistake (an observer that never says it is done, a
   * credit never released) must end in a report naming the edge, never in a silent hang. */
  c.watchdog_ms = c.watchdog_ms == TR_WATCHDOG_OFF ? 0
                  : c.watchdog_ms == 0             ? default_watchdog_ms()
                                                   : c.watchdog_ms;
  c.watchdog_idle = c.watchdog_ms > 0;
  c.describe = describe;
  c.describe_arg = g;
  if (c.handle_signals && c.on_signal == NULL) {
    c.on_signal = finish_on_signal;
    c.signal_arg = g;
  }
  int rc = tr_system_new(&g->sys, &c);
  if (rc) {
    free(g);
    return rc;
  }
  g->watchdog_ms = c.watchdog_ms;
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
  free(g->by_id);
  free(g->edge_by_id);
  free(g);
}

int tr_graph_set_world(tr_graph *g, tr_world *w) {
  if (g->ran || g->nmembers || g->world) return TR_ESTATE;
  g->world = w;
  g->rank = tr_world_rank(w);
  if (tr_world_size(w) == 1) return 0;
  return tr__graph_remote_open(g, &g->transport);
}

int tr_graph_rank(const tr_graph *g) { return g->rank; }
int tr_graph_actor_rank(const tr_graph *g, const tr_actor *a) {
  const member *m = tr__graph_member_of(g, a);
  return m ? m->rank : -1;
}

tr_system *tr_graph_system(const tr_graph *g) { return g->sys; }
const char *tr_graph_error(const tr_graph *g) {
  return g->error[0] ? g->error : tr_system_error(g->sys);
}

/* Stands for an actor of another rank: edges name it; nothing is ever delivered to it. */
static int remote_receive(tr_actor *self, tr_msg *msg) {
  return tr_actor_fail(self, TR_ESTATE, "'%s' lives in another process: a '%s' came to it "
                       "outside an edge", tr_actor_name(self), msg->type->name);
}
static const tr_behaviour remote_behaviour = {.name = "remote", .receive = remote_receive};

static int add(tr_graph *g, int rank, const tr_actor_config *config, bool service,
               tr_actor **out) {
  TR_ASSERT(!g->ran);
  if (rank < 0 || rank >= tr_world_size(g->world)) return TR_EINVAL;
  if (g->nmembers == g->cap_members) {
    const int cap = g->cap_members ? 2 * g->cap_members : 32;
    member **grown = realloc(g->by_id, (size_t)cap * sizeof *grown);
    if (grown == NULL) return TR_ENOMEM;
    g->by_id = grown;
    g->cap_members = cap;
  }
  member *m = calloc(1, sizeof *m);
  if (m == NULL) return TR_ENOMEM;
  m->rank = rank;
  m->remote = rank != g->rank;
  atomic_init(&m->granted, -1);
  tr_actor_config c = *config;
  if (m->remote) { /* it runs on the rank it lives on; its state here is only kept */
    m->placeholder = remote_behaviour;
    m->placeholder.destroy = config->state ? config->behaviour->destroy : NULL;
    c = (tr_actor_config){.name = config->name, .kind = TR_ACTOR_LOOP,
                          .behaviour = &m->placeholder, .state = config->state};
  }
  int rc = tr_actor_spawn(g->sys, &c, &m->actor);
  if (rc) {
    free(m);
    return rc;
  }
  m->service = service;
  m->id = g->nmembers;
  m->next = g->members;
  g->members = m;
  g->by_id[g->nmembers++] = m;
  g->nwaited += !service && !m->remote;
  *out = m->actor;
  return 0;
}

int tr_graph_add(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(g, g->rank, config, false, out);
}

int tr_graph_add_service(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(g, g->rank, config, true, out);
}

int tr_graph_add_on(tr_graph *g, int rank, const tr_actor_config *config, tr_actor **out) {
  return add(g, rank, config, false, out);
}

int tr_graph_add_service_on(tr_graph *g, int rank, const tr_actor_config *config,
                            tr_actor **out) {
  return add(g, rank, config, true, out);
}

member *tr__graph_member_of(const tr_graph *g, const tr_actor *a) {
  for (member *m = g->members; m; m = m->next)
    if (m->actor == a) return m;
  return NULL;
}
member *tr__graph_member(const tr_graph *g, int id) {
  return id >= 0 && id < g->nmembers ? g->by_id[id] : NULL;
}
int tr__graph_member_count(const tr_graph *g) { return g->nmembers; }
tr_edge *tr__graph_edge(const tr_graph *g, int id) {
  return id >= 0 && id < g->nedges ? g->edge_by_id[id] : NULL;
}
int tr__graph_edge_count(const tr_graph *g) { return g->nedges; }
tr_world *tr__graph_world(const tr_graph *g) { return g->world; }
tr_actor *tr__graph_transport(const tr_graph *g) { return g->transport; }
tr_actor *tr__graph_transport_on(const tr_graph *g, int rank) {
  return g->transport ? g->by_id[rank]->actor : NULL; /* members 0 .. size − 1 */
}
int tr__graph_watchdog_ms(const tr_graph *g) { return g->watchdog_ms; }

int tr_graph_connect(tr_graph *g, const tr_edge_config *c, tr_edge **out) {
  TR_ASSERT(!g->ran && c->from && c->to);
  *out = NULL;
  const int wake_at = c->wake_at > 0 ? c->wake_at : 1;
  member *from = tr__graph_member_of(g, c->from), *to = tr__graph_member_of(g, c->to);
  if (c->credits < 1 || wake_at > c->credits || !from || !to) return TR_EINVAL;
  if (g->nedges == g->cap_edges) {
    const int cap = g->cap_edges ? 2 * g->cap_edges : 64;
    tr_edge **grown = realloc(g->edge_by_id, (size_t)cap * sizeof *grown);
    if (grown == NULL) return TR_ENOMEM;
    g->edge_by_id = grown;
    g->cap_edges = cap;
  }
  tr_edge *e = calloc(1, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  *e = (tr_edge){.g = g,
                 .id = g->nedges,
                 .from = c->from,
                 .to = c->to,
                 .type = c->type,
                 .carries = c->carries,
                 .name = c->name ? c->name : c->type->name,
                 .credits = c->credits,
                 .wake_at = wake_at,
                 .notify = c->notify != 0,
                 .mfrom = from,
                 .mto = to,
                 .next = g->edges};
  atomic_init(&e->available, c->credits);
  snprintf(e->track, sizeof e->track, "credits %s→%s %s", tr_actor_name(e->from),
           tr_actor_name(e->to), e->name);
  g->edges = e;
  g->edge_by_id[g->nedges++] = e;
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
  if (e->mto->remote) {
    tr__graph_remote_send(e, m);
  } else {
    tr_trace_flow(m, e->name);
    tr_actor_send(e->to, m);
  }
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
  if (e->mfrom->remote) { /* the producer's credits are kept where it lives */
    tr__graph_remote_release(e, n);
    return;
  }
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
  if (step >= g->end_limit || step >= TR_GRAPH_STEP_LIMIT - 1) return 0;
  int64_t c = atomic_load(&g->claimed);
  for (;;) {
    if (step < (c & CLAIMS)) return 1;
    if (c & STOP) return 0;
    if (c & PENDING) return -1; /* the ranks are agreeing on the end: a message will come */
    if (atomic_compare_exchange_weak(&g->claimed, &c, step + 1)) {
      tr_system_trace_step(g->sys, step);
      return 1;
    }
  }
}

int64_t tr__graph_take_local(tr_graph *g) {
  const int64_t step = g->first_step + atomic_fetch_add(&g->taken, 1);
  const int claim = tr_graph_claim_step(g, step);
  if (claim < 0) atomic_fetch_sub(&g->taken, 1); /* asked again once the end is known */
  return claim > 0 ? step : claim < 0 ? -2 : -1;
}

int64_t tr_graph_take_step(tr_graph *g, tr_actor *self) {
  if (g->rank == 0) return tr__graph_take_local(g);
  member *m = tr__graph_member_of(g, self); /* rank 0 hands every rank's steps out */
  TR_ASSERT(m != NULL && !m->remote);
  const int64_t granted = atomic_exchange(&m->granted, -1);
  if (granted != -1) {
    m->asked = false;
    return granted == INT64_MIN ? -1 : granted;
  }
  if (!m->asked) {
    m->asked = true;
    tr__graph_remote_take(g, m->id);
  }
  return -2;
}

void tr__graph_grant(tr_graph *g, int id, int64_t step) {
  member *m = tr__graph_member(g, id);
  TR_ASSERT(m != NULL && !m->remote);
  atomic_store(&m->granted, step < 0 ? INT64_MIN : step); /* INT64_MIN: none, but answered */
  tr_graph_wake_msg *w = tr_msg_new(&tr_graph_wake_type);
  w->hdr.from = NULL;
  tr_actor_send_ctl(m->actor, w);
}

/* Read from `claimed`, which the STOP bit freezes, so a source refused a claim reads the end
 * that refused it. */
int64_t tr_graph_end_step(const tr_graph *g) {
  int64_t c = atomic_load(&g->claimed);
  if (!(c & STOP)) return g->end_limit;
  return (c & CLAIMS) < g->end_limit ? c & CLAIMS : g->end_limit;
}
int64_t tr_graph_first_step(const tr_graph *g) { return g->first_step; }

/* Every actor of this rank learns the end (idle ones would not look otherwise). */
static void tell_end(tr_graph *g, int64_t end) {
  for (member *m = g->members; m; m = m->next) {
    if (m->remote) continue;
    tr_graph_end_msg *msg = tr_msg_new(&tr_graph_end_type);
    msg->hdr.from = NULL;
    msg->end_step = end;
    tr_actor_send_ctl(m->actor, msg);
  }
}

void tr_graph_finish(tr_graph *g) {
  if (g->transport) { /* the ranks agree on the end first */
    tr__graph_remote_finish(g);
    return;
  }
  int64_t c = atomic_fetch_or(&g->claimed, STOP);
  if (c & STOP) return;
  tell_end(g, c < g->end_limit ? c : g->end_limit);
}

int64_t tr__graph_freeze(tr_graph *g) {
  return atomic_fetch_or(&g->claimed, PENDING) & CLAIMS;
}

void tr__graph_set_end(tr_graph *g, int64_t end) {
  int64_t c = atomic_load(&g->claimed);
  TR_ASSERT((c & PENDING) && (c & CLAIMS) <= end);
  atomic_store(&g->claimed, end | STOP);
  tell_end(g, end < g->end_limit ? end : g->end_limit);
}

void tr_graph_done(tr_graph *g, tr_actor *self) {
  member *m = tr__graph_member_of(g, self);
  TR_ASSERT(m != NULL && !m->remote && !atomic_load(&m->done));
  atomic_store(&m->done, true);
  if (m->service) return;
  const int done = atomic_fetch_add(&g->ndone, 1) + 1;
  /* With a transport, the run is over once it has said goodbye to the other ranks: it is
   * told when it is the last of this rank's actors left. */
  if (done == g->nwaited) tr_system_stop(g->sys, 0);
  else if (g->transport && done == g->nwaited - 1) tr__graph_remote_locals_done(g);
}

void tr_graph_print(tr_graph *g, FILE *f) {
  fprintf(f, "graph of %d actors and their edges", g->nmembers);
  if (g->transport) fprintf(f, " (rank %d of %d)", g->rank, tr_world_size(g->world));
  fprintf(f, ":\n");
  for (const member *m = g->members; m; m = m->next) {
    if (m->remote) {
      fprintf(f, "  actor '%s' on rank %d\n", tr_actor_name(m->actor), m->rank);
      continue;
    }
    fprintf(f, "  actor '%s' (%s)%s%s\n", tr_actor_name(m->actor),
            tr_actor_kind_of(m->actor) == TR_ACTOR_PINNED ? "pinned" : "loop",
            m->service ? ", a service" : "", atomic_load(&m->done) ? ", done" : "");
  }
  for (const tr_edge *e = g->edges; e; e = e->next) {
    if (e->mfrom->remote && e->mto->remote) continue; /* between two other ranks */
    if (e->mfrom->remote) {
      fprintf(f, "  edge %s -> %s '%s' (%s): from rank %d, its credits kept there\n",
              tr_actor_name(e->from), tr_actor_name(e->to), e->name,
              e->type ? e->type->name : "control", e->mfrom->rank);
      continue;
    }
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
  /* each refusal's rule in tr_graph_error */
  const char *bad = first_step < 0 || first_step >= TR_GRAPH_STEP_LIMIT
                        ? "first_step %lld: give 0 to 2^61 - 1"
                    : end_step < 0 || end_step >= TR_GRAPH_STEP_LIMIT
                        ? "end_step %lld: give 0 (no step limit) to 2^61 - 1"
                    : end_step > 0 && end_step <= first_step
                        ? "end_step %lld: give a step after first_step (%lld)"
                    : !(seconds >= 0) ? "seconds: give 0 (no time limit) or more"
                    : end_step == 0 && seconds == 0
                        ? "end_step 0 and seconds 0: give a step limit, a time limit or both"
                    : g->nwaited == (g->transport != NULL)
                        ? "the graph has no actor to wait for (tr_graph_add)"
                        : NULL;
  if (bad) {
    const long long v = first_step < 0 || first_step >= TR_GRAPH_STEP_LIMIT ? first_step : end_step;
    char rule[256];
    snprintf(rule, sizeof rule, bad, v, (long long)first_step);
    snprintf(g->error, sizeof g->error, "tr_graph_run: %s", rule);
    return TR_EINVAL;
  }
  g->error[0] = 0; /* a refusal before is not this run's error */
  if (g->before_run) {
    int rc = g->before_run(g->before_arg, g->error, sizeof g->error);
    g->before_run = NULL;
    if (rc) {
      tr__run_error_set(g->error); /* an assertion after it says it first (tr_base.h) */
      return rc;
    }
  }
  g->ran = true;
  g->first_step = first_step;
  g->end_limit = end_step > 0 ? end_step : INT64_MAX;
  atomic_store(&g->claimed, first_step);
  tr_system_trace_step(g->sys, first_step); /* the window is open from the start if it holds it */
  if (seconds > 0 && g->rank == 0) { /* one clock for every rank: rank 0's */
    int rc = tr_actor_spawn(g->sys,
                            &(tr_actor_config){.name = "graph", .kind = TR_ACTOR_LOOP,
                                               .behaviour = &timer_behaviour, .state = g},
                            &g->timer);
    if (rc == 0) rc = tr_actor_timer_start(g->timer, (uint64_t)(seconds * 1e3), 0, 0);
    if (rc) return rc;
  }
  int rc = tr_system_run(g->sys);
  tr_system_trace_step(g->sys, INT64_MAX); /* the window ends with the run */
  if (rc && g->transport) tr__world_broken(g->world); /* the other ranks may be stuck */
  const int sig = tr_system_signal(g->sys);
  if (rc == 0 && sig) { /* ended in order, but not because its work was done */
    snprintf(g->error, sizeof g->error, "stopped by %s: the run ended after its steps in "
             "flight (step %lld)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             (long long)tr_graph_end_step(g));
    rc = TR_EINTR;
  }
  return rc;
}

void tr__graph_on_lost(tr_graph *g, int (*fn)(void *arg, int rank, const char *why), void *arg) {
  g->lost = fn;
  g->lost_arg = arg;
}

int tr__graph_lost(tr_graph *g, int rank, const char *why) {
  return g->lost ? g->lost(g->lost_arg, rank, why) : -1;
}

void tr__graph_before_run(tr_graph *g, int (*fn)(void *arg, char *err, size_t n), void *arg) {
  g->before_run = fn;
  g->before_arg = arg;
}

int tr_graph_signal(const tr_graph *g) { return tr_system_signal(g->sys); }
