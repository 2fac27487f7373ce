/* graph.c — training graphs: actors, credit edges, and the protocol that ends a run.
 *
 * Credits are one atomic counter per edge. The producer flags itself starving when it finds
 * none, then looks again (a release may have come in between); a release that brings the
 * count to `wake_at` and finds the flag takes it and sends the one wake-up message. A
 * starving producer takes no credit until `wake_at` are free. Both
 * sides use sequentially consistent operations on the counter and the flag, so one of them
 * always sees the other (the pattern of the mailbox's park protocol).
 *
 * Steps and the end of a run: graph_steps.c.
 *
 * Growing while it runs: in a world of one process, actors and edges may be added from any
 * thread while the graph runs (tr_graph.h). Writers take `lock`; readers that walk the lists
 * (tr_graph_print, tell_end, member lookups) load each head with acquire order, and a node is
 * complete before its release publishes it, so they need no lock. An actor spawned during the
 * run may start before its member is published: a lookup that misses takes the lock, which
 * its adder holds until it has. `by_id` and `edge_by_id` are realloc'd as they grow: only the
 * remote side reads them, and across processes nothing is added once the graph runs.
 *
 * Traces: every message sent on an edge inside a process is a flow from its send to its
 * handling, and each edge's credits in flight are a counter track, sampled at every acquire
 * and release.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
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

typedef tr__member member;

/* A caller's mistake (tr_base.h, Misuse): refused with the graph's error naming it, or on
 * stderr when there is no graph. */
static int misuse(tr_graph *g, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int misuse(tr_graph *g, int status, const char *fmt, ...) {
  char text[sizeof g->error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (g == NULL) return tr__misuse(status, "%s", text);
  memcpy(g->error, text, sizeof text);
  return status;
}

/* A mistake that a call with no status makes inside a run (a message or a credit that would
 * be lost): said on stderr, and the run stopped with it, named as its error unless it had
 * failed already. */
static void misuse_stop(tr_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse_stop(tr_graph *g, const char *fmt, ...) {
  char text[sizeof g->error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  tr__misuse(TR_EINVAL, "%s", text);
  pthread_mutex_lock(&g->lock);
  if (!g->error[0] && !tr_system_error(g->sys)[0]) memcpy(g->error, text, sizeof text);
  pthread_mutex_unlock(&g->lock);
  tr_system_stop(g->sys, TR_EINVAL);
}

/* A signal (SIGINT, SIGTERM, ...: tr_system.h): the run ends as a timed run does, after the
 * steps claimed so far, so that its end is a clean one (figures, the last checkpoint). */
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
  TR__NOT_NULL(out);
  *out = NULL;
  tr_system_config c = config ? *config : (tr_system_config){0};
  if (c.watchdog_ms < TR_WATCHDOG_OFF)
    return tr__misuse(TR_EINVAL, "tr_graph_new: config->watchdog_ms %d: give 0 (the default), "
                      "a period in ms or TR_WATCHDOG_OFF", c.watchdog_ms);
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
  c.describe = tr__graph_describe; /* the graph printed, for the watchdog */
  c.describe_arg = g;
  c.on_quiet = tr__graph_quiet; /* quiet: nothing can ever happen in it again */
  c.quiet_arg = g;
  if (c.handle_signals && c.on_signal == NULL) {
    c.on_signal = finish_on_signal;
    c.signal_arg = g;
  }
  int rc = tr_system_new(&g->sys, &c);
  if (rc) {
    free(g);
    return rc;
  }
  pthread_mutex_init(&g->lock, NULL);
  snprintf(g->name, sizeof g->name, "%s", c.name ? c.name : "troupe");
  g->watchdog_ms = c.watchdog_ms;
  g->end_limit = INT64_MAX;
  *out = g;
  return 0;
}

void tr_graph_free(tr_graph *g) {
  if (g == NULL) return;
  tr_system_free(g->sys);
  pthread_mutex_destroy(&g->lock);
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
  TR__NOT_NULL(g);
  if (atomic_load(&g->ran) || atomic_load(&g->nmembers) || g->world)
    return misuse(g, TR_ESTATE, "tr_graph_set_world: %s: give the world first, before any "
                  "tr_graph_add", g->world ? "the graph has its world already"
                  : atomic_load(&g->ran) ? "the graph ran" : "actors were added");
  g->world = w;
  g->rank = tr_world_rank(w);
  if (tr_world_size(w) == 1) return 0;
  return tr__graph_remote_open(g, &g->transport);
}

int tr_graph_rank(const tr_graph *g) { return g ? g->rank : 0; }
int tr_graph_actor_rank(const tr_graph *g, const tr_actor *a) {
  if (g == NULL) return -1;
  const member *m = tr__graph_member_of(g, a);
  return m ? m->rank : -1;
}

tr_system *tr_graph_system(const tr_graph *g) { return g ? g->sys : NULL; }
const char *tr_graph_error(const tr_graph *g) {
  if (g == NULL) return "";
  return g->error[0] ? g->error : tr_system_error(g->sys);
}

/* Stands for an actor of another rank: edges name it; nothing is ever delivered to it. */
static int remote_receive(tr_actor *self, tr_msg *msg) {
  return tr_actor_fail(self, TR_ESTATE, "'%s' lives in another process: a '%s' came to it "
                       "outside an edge", tr_actor_name(self), msg->type->name);
}
static const tr_behaviour remote_behaviour = {.name = "remote", .receive = remote_receive};

/* Adding to a graph that runs: across processes every rank must build the same graph, so
 * nothing is added once it runs; anywhere, nothing once every waited actor is done (the
 * system is stopping). TR_ESTATE with the graph's error naming why, or 0. Under `lock`. */
static int refuse_running(tr_graph *g, const char *call, const char *name) {
  if (!atomic_load(&g->ran)) return 0;
  const char *why = g->transport ? "the graph runs across processes, where every rank must "
                                   "build the same graph before tr_graph_run"
                    : g->stopped ? "the run is ending: every actor it waited for is done"
                                 : NULL;
  if (why == NULL) return 0;
  snprintf(g->error, sizeof g->error, "%s '%s' while the graph runs: %s", call,
           name ? name : "?", why);
  return TR_ESTATE;
}

static int add(const char *call, tr_graph *g, int rank, const tr_actor_config *config,
               bool service, bool own, tr_actor **out) {
  if (g == NULL || config == NULL || out == NULL)
    return misuse(g, TR_EINVAL, "%s: %s is NULL", call, !g ? "g" : !config ? "config" : "out");
  if (config->behaviour == NULL || config->behaviour->receive == NULL)
    return misuse(g, TR_EINVAL, "%s: actor '%s': config->behaviour%s is NULL: an actor needs a "
                  "behaviour with a receive callback", call, config->name ? config->name : "?",
                  config->behaviour ? "->receive" : "");
  if (rank < 0 || rank >= tr_world_size(g->world))
    return misuse(g, TR_EINVAL, "%s: rank %d: the graph's world has ranks 0 to %d", call, rank,
                  tr_world_size(g->world) - 1);
  pthread_mutex_lock(&g->lock);
  const bool running = atomic_load(&g->ran);
  int rc = refuse_running(g, call, config->name);
  const int n = atomic_load_explicit(&g->nmembers, memory_order_relaxed);
  if (rc == 0 && n == g->cap_members) { /* never while the remote side reads it (above) */
    const int cap = g->cap_members ? 2 * g->cap_members : 32;
    member **grown = realloc(g->by_id, (size_t)cap * sizeof *grown);
    if (grown == NULL) rc = TR_ENOMEM;
    else g->by_id = grown, g->cap_members = cap;
  }
  member *m = rc ? NULL : calloc(1, sizeof *m);
  if (rc == 0 && m == NULL) rc = TR_ENOMEM;
  if (rc) {
    pthread_mutex_unlock(&g->lock);
    return rc;
  }
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
  /* during the run it starts at once: its lookups of itself wait on the lock until it is in */
  rc = tr_actor_spawn(g->sys, &c, &m->actor);
  if (rc) {
    pthread_mutex_unlock(&g->lock);
    free(m);
    return rc;
  }
  m->service = service;
  m->own = own;
  m->id = n;
  m->next = atomic_load_explicit(&g->members, memory_order_relaxed);
  g->by_id[n] = m;
  atomic_store_explicit(&g->members, m, memory_order_release);
  atomic_store(&g->nmembers, n + 1);
  g->nwaited += !service && !m->remote;
  if (running && g->told && !m->remote) /* once: tell_end is past it */
    tr__graph_send_end(m, g->told_end);
  pthread_mutex_unlock(&g->lock);
  *out = m->actor;
  return 0;
}

int tr_graph_add(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(__func__, g, g ? g->rank : 0, config, false, false, out);
}

int tr_graph_add_service(tr_graph *g, const tr_actor_config *config, tr_actor **out) {
  return add(__func__, g, g ? g->rank : 0, config, true, false, out);
}

int tr_graph_add_on(tr_graph *g, int rank, const tr_actor_config *config, tr_actor **out) {
  return add(__func__, g, rank, config, false, false, out);
}

int tr_graph_add_service_on(tr_graph *g, int rank, const tr_actor_config *config,
                            tr_actor **out) {
  return add(__func__, g, rank, config, true, false, out);
}

int tr__graph_add_part(tr_graph *g, int rank, const tr_actor_config *config, tr_actor **out) {
  return add(__func__, g, rank, config, false, true, out);
}

static member *find(const tr_graph *g, const tr_actor *a) {
  for (member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next)
    if (m->actor == a) return m;
  return NULL;
}

member *tr__graph_member_of(const tr_graph *g, const tr_actor *a) {
  member *m = find(g, a);
  if (m || !atomic_load(&g->ran)) return m;
  /* an actor spawned during the run may ask before its adder has published it */
  pthread_mutex_lock((pthread_mutex_t *)&g->lock);
  m = find(g, a);
  pthread_mutex_unlock((pthread_mutex_t *)&g->lock);
  return m;
}
/* By number: the remote side's (graph_impl.h), which never runs in a world of one, the only
 * one whose graph grows while it runs. */
member *tr__graph_member(const tr_graph *g, int id) {
  return id >= 0 && id < atomic_load(&g->nmembers) ? g->by_id[id] : NULL;
}
int tr__graph_member_count(const tr_graph *g) { return atomic_load(&g->nmembers); }
tr_edge *tr__graph_edge(const tr_graph *g, int id) {
  return id >= 0 && id < atomic_load(&g->nedges) ? g->edge_by_id[id] : NULL;
}
int tr__graph_edge_count(const tr_graph *g) { return atomic_load(&g->nedges); }
tr_world *tr__graph_world(const tr_graph *g) { return g->world; }
tr_actor *tr__graph_transport(const tr_graph *g) { return g->transport; }
tr_actor *tr__graph_transport_on(const tr_graph *g, int rank) {
  return g->transport ? g->by_id[rank]->actor : NULL; /* members 0 .. size − 1 */
}
int tr__graph_watchdog_ms(const tr_graph *g) { return g->watchdog_ms; }

void tr__graph_on_complete(tr_graph *g, bool (*fn)(void *arg, char *what, size_t n), void *arg) {
  g->complete = fn;
  g->complete_arg = arg;
}

int tr_graph_connect(tr_graph *g, const tr_edge_config *c, tr_edge **out) {
  if (g == NULL || c == NULL || out == NULL)
    return misuse(g, TR_EINVAL, "tr_graph_connect: %s is NULL", !g ? "g" : !c ? "config" : "out");
  *out = NULL;
  const char *name = c->name ? c->name : c->type ? c->type->name : "control";
  if (c->from == NULL || c->to == NULL)
    return misuse(g, TR_EINVAL, "tr_graph_connect: edge '%s': config->%s is NULL: give an actor "
                  "of the graph", name, c->from ? "to" : "from");
  const int wake_at = c->wake_at > 0 ? c->wake_at : 1;
  if (c->credits < 1)
    return misuse(g, TR_EINVAL, "tr_graph_connect: edge '%s': config->credits %d: give 1 or "
                  "more", name, c->credits);
  if (wake_at > c->credits)
    return misuse(g, TR_EINVAL, "tr_graph_connect: edge '%s': config->wake_at %d is above its "
                  "%d credits", name, wake_at, c->credits);
  pthread_mutex_lock(&g->lock);
  member *from = find(g, c->from), *to = find(g, c->to);
  /* nothing is added once the run is ending (refuse_running), nor at all across processes */
  int rc = !from || !to ? misuse(g, TR_EINVAL, "tr_graph_connect: edge '%s': config->%s is not "
                                 "an actor of this graph (tr_graph_add)", name, from ? "to" : "from")
                        : refuse_running(g, "tr_graph_connect", name);
  const int n = atomic_load_explicit(&g->nedges, memory_order_relaxed);
  if (rc == 0 && n == g->cap_edges) {
    const int cap = g->cap_edges ? 2 * g->cap_edges : 64;
    tr_edge **grown = realloc(g->edge_by_id, (size_t)cap * sizeof *grown);
    if (grown == NULL) rc = TR_ENOMEM;
    else g->edge_by_id = grown, g->cap_edges = cap;
  }
  tr_edge *e = rc ? NULL : calloc(1, sizeof *e);
  if (rc == 0 && e == NULL) rc = TR_ENOMEM;
  if (rc) {
    pthread_mutex_unlock(&g->lock);
    return rc;
  }
  *e = (tr_edge){.g = g,
                 .id = n,
                 .from = c->from,
                 .to = c->to,
                 .type = c->type,
                 .carries = c->carries,
                 .name = name,
                 .credits = c->credits,
                 .wake_at = wake_at,
                 .notify = c->notify != 0,
                 .mfrom = from,
                 .mto = to,
                 .next = atomic_load_explicit(&g->edges, memory_order_relaxed)};
  atomic_init(&e->available, c->credits);
  snprintf(e->track, sizeof e->track, "credits %s→%s %s", tr_actor_name(e->from),
           tr_actor_name(e->to), e->name);
  g->edge_by_id[n] = e;
  atomic_store_explicit(&g->edges, e, memory_order_release);
  atomic_store(&g->nedges, n + 1);
  pthread_mutex_unlock(&g->lock);
  *out = e;
  return 0;
}

int tr_edge_acquire(tr_edge *e) {
  if (e == NULL) return tr__misuse(0, "tr_edge_acquire: e is NULL: no credit");
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
  if (e == NULL) {
    tr__misuse(TR_EINVAL, "tr_edge_send: e is NULL: the message is freed");
    tr_msg_free(m);
    return;
  }
  if (m == NULL || (e->type != NULL && m->type != e->type)) {
    misuse_stop(e->g, "tr_edge_send: edge '%s' from '%s' to '%s': %s%s%s", e->name,
                tr_actor_name(e->from), tr_actor_name(e->to), m ? "a '" : "msg is NULL",
                m ? (m->type ? m->type->name : "?") : "", m ? "' on an edge of another type" : "");
    tr_msg_free(m);
    return;
  }
  m->from = e->from;
  m->sent_ns = tr_now_ns(); /* how long it waits to be handled: the receiver's idle accounting */
  if (e->mto->remote) {
    tr__graph_remote_send(e, m);
  } else {
    tr_trace_flow(m, e->name);
    tr_actor_send(e->to, m);
  }
}

int tr_edge_send_control(tr_edge *e, void *msg) {
  if (e == NULL) {
    tr_msg_free(msg);
    return tr__misuse(TR_EINVAL, "tr_edge_send_control: e is NULL: the message is freed");
  }
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
  c->hdr.sent_ns = tr_now_ns();
  tr_actor_send_ctl(e->from, c);
}

void tr_edge_release(tr_edge *e, int n) {
  if (e == NULL) {
    tr__misuse(TR_EINVAL, "tr_edge_release: e is NULL");
    return;
  }
  if (n < 0) {
    tr__misuse(TR_EINVAL, "tr_edge_release: edge '%s': n %d: give the buffers released, 1 or "
               "more", e->name, n);
    return;
  }
  if (n == 0) return;
  if (e->mfrom->remote) { /* the producer's credits are kept where it lives */
    tr__graph_remote_release(e, n);
    return;
  }
  /* more than are in flight: the consumer gave back a buffer twice, or one never sent */
  int now = atomic_load(&e->available);
  do {
    if (now + n > e->credits) {
      misuse_stop(e->g, "tr_edge_release: edge '%s' from '%s' to '%s': %d released with %d of "
                  "its %d credits in flight: a buffer given back twice, or never sent", e->name,
                  tr_actor_name(e->from), tr_actor_name(e->to), n, e->credits - now, e->credits);
      return;
    }
  } while (!atomic_compare_exchange_weak(&e->available, &now, now + n));
  now += n;
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

int tr_edge_available(const tr_edge *e) { return e ? atomic_load(&e->available) : 0; }
int tr_edge_peak(const tr_edge *e) { return e ? atomic_load(&e->peak) : 0; }
int tr_edge_credits(const tr_edge *e) { return e ? e->credits : 0; }
const char *tr_edge_name(const tr_edge *e) { return e ? e->name : ""; }
tr_actor *tr_edge_from(const tr_edge *e) { return e ? e->from : NULL; }
tr_actor *tr_edge_to(const tr_edge *e) { return e ? e->to : NULL; }

static int timer_receive(tr_actor *self, tr_msg *msg) {
  if (msg->type == &tr_timer_msg_type) tr_graph_finish(tr_actor_state(self));
  return 0;
}
static const tr_behaviour timer_behaviour = {.name = "graph", .receive = timer_receive};

int tr_graph_run(tr_graph *g, int64_t first_step, int64_t end_step, double seconds) {
  TR__NOT_NULL(g);
  if (atomic_load(&g->ran))
    return misuse(g, TR_ESTATE, "tr_graph_run: the graph ran already: a graph runs once (make "
                  "another with tr_graph_new)");
  /* each refusal's rule in tr_graph_error */
  const char *bad = first_step < 0 || first_step >= TR_GRAPH_STEP_LIMIT
                        ? "first_step %lld: give 0 to 2^61 - 1"
                    : end_step < 0 || end_step >= TR_GRAPH_STEP_LIMIT
                        ? "end_step %lld: give 0 (no step limit) to 2^61 - 1"
                    : end_step > 0 && end_step <= first_step
                        ? "end_step %lld: give a step after first_step (%lld)"
                    : !(seconds >= 0 && seconds < 1e15)
                        ? "seconds: give 0 (no time limit) or a finite time"
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
  g->error[0] = g->warning[0] = 0; /* a refusal before is not this run's error */
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
  /* Across processes the other ranks' actors are outside this system: a message of theirs
   * may come at any time, so this rank idle is never quiet (tr_system.h), and only the
   * watchdog's whole period makes it stuck. */
  if (g->transport) tr_system_work_begin(g->sys);
  int rc = tr_system_run(g->sys);
  if (g->transport) tr_system_work_end(g->sys);
  tr_system_trace_step(g->sys, INT64_MAX); /* the window ends with the run */
  if (rc && g->transport) tr__world_broken(g->world); /* the other ranks may be stuck */
  const int sig = tr_system_signal(g->sys);
  if (rc == 0 && sig) { /* ended in order, but not because its work was done */
    snprintf(g->error, sizeof g->error, "stopped by %s: the run ended after its steps in "
             "flight (step %lld)", tr_signal_name(sig),
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

const char *tr_graph_warning(const tr_graph *g) { return g ? g->warning : ""; }

int tr_graph_signal(const tr_graph *g) { return g ? tr_system_signal(g->sys) : 0; }
