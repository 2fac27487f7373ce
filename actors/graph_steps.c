/* graph_steps.c — a graph's steps and the end of its run (graph_impl.h's struct tr_graph).
 *
 * `claimed` is one past the highest step any source claimed; finishing sets its STOP
 * bit, freezing it, so the end every source sees is the same. `taken` hands steps out to
 * sources that share them (tr_graph_take_step). Across processes (graph_impl.h), finishing
 * first sets PENDING on every rank — claims beyond what each has claimed wait — and then
 * every rank takes the largest of those claims as the end; rank 0 hands the shared steps
 * out to every rank's sources. Each new claim tells the tracer that a step begins (its
 * profiling window opens and closes on steps).
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "graph_impl.h"
#include "tr_trace.h"

#define STOP (INT64_C(1) << 62)
#define PENDING (INT64_C(1) << 61)
#define CLAIMS (~(STOP | PENDING))

typedef tr__member member;

int tr_graph_claim_step(tr_graph *g, int64_t step) {
  if (g == NULL) return tr__misuse(0, "tr_graph_claim_step: g is NULL: no step is claimed");
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
  if (g == NULL) return tr__misuse(-1, "tr_graph_take_step: g is NULL: no step is taken");
  if (g->rank == 0) return tr__graph_take_local(g);
  member *m = tr__graph_member_of(g, self); /* rank 0 hands every rank's steps out */
  if (m == NULL || m->remote)
    return tr__misuse(-1, "tr_graph_take_step: self ('%s') is not an actor of this graph on "
                      "this rank: no step is taken", tr_actor_name(self));
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
  if (g == NULL) return 0;
  int64_t c = atomic_load(&g->claimed);
  if (!(c & STOP)) return g->end_limit;
  return (c & CLAIMS) < g->end_limit ? c & CLAIMS : g->end_limit;
}
int64_t tr_graph_first_step(const tr_graph *g) { return g ? g->first_step : 0; }

/* Every actor of this rank learns the end (idle ones would not look otherwise); one added
 * after this learns it as it is added (add), so each once. */
static void tell_end(tr_graph *g, int64_t end) {
  pthread_mutex_lock(&g->lock);
  g->told = true;
  g->told_end = end;
  for (member *m = atomic_load_explicit(&g->members, memory_order_acquire); m; m = m->next)
    if (!m->remote) tr__graph_send_end(m, end);
  pthread_mutex_unlock(&g->lock);
}

void tr_graph_finish(tr_graph *g) {
  if (g == NULL) {
    tr__misuse(TR_EINVAL, "tr_graph_finish: g is NULL");
    return;
  }
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
  member *m = g && self ? tr__graph_member_of(g, self) : NULL;
  /* said and ignored: the count of actors done stays right */
  if (m == NULL || m->remote || atomic_exchange(&m->done, true)) {
    if (!g || !self) tr__misuse(TR_EINVAL, "tr_graph_done: %s is NULL", g ? "self" : "g");
    else tr__misuse(TR_EINVAL, "tr_graph_done: actor '%s' %s", tr_actor_name(self),
                    !m          ? "is not an actor of this graph"
                    : m->remote ? "lives in another process"
                                : "said it was done twice: once per actor");
    return;
  }
  if (m->service) return;
  pthread_mutex_lock(&g->lock); /* against an actor added meanwhile: one more to wait for */
  const int done = ++g->ndone, waited = g->nwaited;
  g->stopped = done == waited;
  pthread_mutex_unlock(&g->lock);
  /* With a transport, the run is over once it has said goodbye to the other ranks: it is
   * told when it is the last of this rank's actors left. */
  if (done == waited) tr_system_stop(g->sys, 0);
  else if (g->transport && done == waited - 1) tr__graph_remote_locals_done(g);
}
