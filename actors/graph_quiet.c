/* graph_quiet.c — a graph that does not go on, explained: printed (tr_graph_print, and for
 * the watchdog's error), and gone quiet (tr_system_config.on_quiet): every actor waits for a
 * message no one will send, and nothing out (a timer, a write, another rank) could send
 * one. It says why in the terms of the mistakes an actor of the user's makes, each with its
 * fix: a relay that keeps the credits of its way in, a relay whose way out does not notify,
 * a consumer that keeps its messages, an actor that never says its part is done (a relay
 * added as an actor, not a service). Where the graph's work is done nonetheless (the job's
 * every step trained, its checkpoints on disk: tr__graph_on_complete), the run ends
 * cleanly, the mistake kept as the graph's warning; otherwise it fails, naming it.
 *
 * It runs on the loop thread while the actors are quiet: it reads their edges' atomics and
 * the members' flags as tr_graph_print does, and touches no actor's state. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph_impl.h"
#include "tr_protocol.h"

typedef tr__member member;

typedef struct text {
  char *buf;
  size_t size, len;
} text;

static void say(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(text *t, const char *fmt, ...) {
  if (t->len + 1 >= t->size) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(t->buf + t->len, t->size - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n < t->size - t->len ? (size_t)n : t->size - t->len - 1;
}

static bool local(const tr_edge *e) { return !e->mfrom->remote && !e->mto->remote; }

/* The consumer holds every credit of `e`, and its producer waits for one: the consumer is
 * the only one that could move, and nothing will make it. */
static bool held(const tr_edge *e) {
  return local(e) && atomic_load(&e->available) == 0 && atomic_load(&e->starving);
}

/* The way out of a relay that came in on `in`: an edge from its consumer, of its type if
 * there is one. */
static const tr_edge *way_out(tr_graph *g, const tr_edge *in) {
  const tr_edge *any = NULL;
  for (const tr_edge *f = atomic_load_explicit(&g->edges, memory_order_acquire); f; f = f->next) {
    if (f->from != in->to || !local(f)) continue;
    if (f->type == in->type) return f;
    any = any ? any : f;
  }
  return any;
}

static void edge_name(text *t, const tr_edge *e) {
  say(t, "edge %s -> %s '%s'", tr_actor_name(e->from), tr_actor_name(e->to), e->name);
}

/* What `e`'s consumer does wrong, and the fix. */
static void holder(text *t, tr_graph *g, const tr_edge *e) {
  const char *c = tr_actor_name(e->to), *p = tr_actor_name(e->from);
  say(t, "'%s' holds all %d credit%s of ", c, e->credits, e->credits == 1 ? "" : "s");
  edge_name(t, e);
  say(t, " and '%s' waits for one", p);
  const tr_edge *f = way_out(g, e);
  if (f == NULL && e->type == &tr_report_type) {
    say(t, " to send the reports it has left (the run's last report among them): an observer "
           "gives each report's credit back once it has read it (tr_edge_release(in, 1))");
  } else if (f == NULL) {
    say(t, ", but '%s' never gives them back: a consumer gives each message's credit back once "
           "it is done with it (tr_edge_release(in, 1))", c);
  } else if (atomic_load(&f->peak) == 0) {
    say(t, ", but '%s' passed nothing on along ", c);
    edge_name(t, f);
    say(t, ": a relay passes each message on (tr_edge_acquire, tr_edge_send) and, once '%s' "
           "has released it (a tr_edge_credit_msg, TR_BATCH_NOTIFY), gives its credit back on "
           "its way in (tr_edge_release(in, msg->count))", tr_actor_name(f->to));
  } else if (!f->notify) {
    say(t, ", but '%s' passes them on along ", c);
    edge_name(t, f);
    say(t, ", made without TR_BATCH_NOTIFY (tr_edge_config.notify), so it never hears that "
           "'%s' released them and never gives them back: connect that edge with "
           "TR_BATCH_NOTIFY, and on each tr_edge_credit_msg give as many back on the way in "
           "(tr_edge_release(in, msg->count))", tr_actor_name(f->to));
  } else {
    say(t, ", but '%s' hears of every release on ", c);
    edge_name(t, f);
    say(t, " (a tr_edge_credit_msg, TR_BATCH_NOTIFY) and never gives the credits back on its "
           "way in: on each one, call tr_edge_release(in, msg->count)");
  }
}

/* Whether `a` consumes an edge (in), or produces one. */
static bool has_edge(tr_graph *g, const tr_actor *a, bool in) {
  for (const tr_edge *e = atomic_load_explicit(&g->edges, memory_order_acquire); e; e = e->next)
    if ((in ? e->to : e->from) == a) return true;
  return false;
}

/* A waited actor that never called tr_graph_done while every other one did. */
static void not_done(text *t, tr_graph *g, const member *m) {
  const char *a = tr_actor_name(m->actor);
  say(t, "'%s' was added with tr_graph_add, so the run waits for its tr_graph_done, which it "
         "never called", a);
  if (has_edge(g, m->actor, true) && has_edge(g, m->actor, false))
    say(t, ": a relay that never calls tr_graph_done must be a service "
           "(tr_graph_add_service)");
  else
    say(t, ": call it once its part is over (an observer: on the report whose `last` is set), "
           "or add an actor with no part of its own as a service (tr_graph_add_service)");
}

/* Why the quiet graph waits: the user's actors first (the job's are added with
 * tr__graph_add_part). */
static void diagnose(tr_graph *g, text *t) {
  int found = 0;
  for (int users = 1; users >= 0 && !found; users--)
    for (const tr_edge *e = atomic_load_explicit(&g->edges, memory_order_acquire); e; e = e->next)
      if (held(e) && e->mto->own != users) {
        say(t, "%s", found++ ? "; " : "");
        holder(t, g, e);
      }
  if (found) return;
  int own = 0, users = 0;
  for (const member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next)
    if (!m->remote && !m->service && !atomic_load(&m->done)) m->own ? own++ : users++;
  if (own == 0 && users > 0) { /* only the user's are not done */
    for (const member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next)
      if (!m->remote && !m->service && !atomic_load(&m->done)) {
        say(t, "%s", found++ ? "; " : "");
        not_done(t, g, m);
      }
    return;
  }
  say(t, "every actor waits for a message no one will send, and no producer waits for a "
         "credit; not done:");
  for (const member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next)
    if (!m->remote && !m->service && !atomic_load(&m->done))
      say(t, "%s '%s'", found++ ? "," : "", tr_actor_name(m->actor));
}

void tr_graph_print(tr_graph *g, FILE *f) {
  if (g == NULL || f == NULL) {
    tr__misuse(TR_EINVAL, "tr_graph_print: %s is NULL", g ? "f" : "g");
    return;
  }
  fprintf(f, "graph of %d actors and their edges", atomic_load(&g->nmembers));
  if (g->transport) fprintf(f, " (rank %d of %d)", g->rank, tr_world_size(g->world));
  fprintf(f, ":\n");
  for (const member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next) {
    if (m->remote) {
      fprintf(f, "  actor '%s' on rank %d\n", tr_actor_name(m->actor), m->rank);
      continue;
    }
    fprintf(f, "  actor '%s' (%s)%s%s\n", tr_actor_name(m->actor),
            tr_actor_kind_of(m->actor) == TR_ACTOR_PINNED ? "pinned" : "loop",
            m->service ? ", a service" : "", atomic_load(&m->done) ? ", done" : "");
  }
  for (const tr_edge *e = atomic_load_explicit(&g->edges, memory_order_acquire); e; e = e->next) {
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

void tr__graph_describe(void *arg, char *buf, size_t size) {
  FILE *f = fmemopen(buf, size, "w");
  if (f == NULL) return;
  tr_graph_print(arg, f);
  fclose(f);
}

void tr__graph_quiet(void *arg) {
  tr_graph *g = arg;
  char why[1024] = "";
  text t = {why, sizeof why, 0};
  diagnose(g, &t);
  char done[256];
  if (g->complete && g->complete(g->complete_arg, done, sizeof done)) { /* only the end is stuck */
    snprintf(g->warning, sizeof g->warning, "the run's work is done (%s), but its end was "
             "stuck: %s", done, why);
    fprintf(stderr, "troupe: %s\n", g->warning);
    pthread_mutex_lock(&g->lock);
    g->stopped = true; /* nothing more is added */
    pthread_mutex_unlock(&g->lock);
    tr_system_stop(g->sys, 0);
    return;
  }
  /* why, the graph, then each actor's state in what room is left */
  char msg[4096], report[2048];
  text m = {msg, sizeof msg, 0};
  say(&m, "%s: idle but not done, and nothing can wake it (no timer, no I/O or other work "
          "out): %s; ", g->name, why);
  msg[sizeof msg - 1] = 0; /* the print stops short of it, full or not */
  FILE *f = fmemopen(msg + m.len, m.size - m.len - 1, "w");
  if (f) {
    tr_graph_print(g, f);
    fclose(f);
    m.len += strlen(msg + m.len);
  }
  tr_system_report(g->sys, report, sizeof report);
  say(&m, "actors: %s", report); /* in what room is left */
  tr_system_fail(g->sys, TR_ETIMEDOUT, "%s", msg);
}
