/* graph_remote.c — a graph's side across processes (graph_impl.h), built with MPI only: the
 * host that dist/'s transport calls back into (it knows no graph: edges and members are
 * numbers to it), and what the graph hands the transport.
 *
 * A message for another rank crosses as its type's codec writes it (tr_msg_codec): the
 * edge's own type, or one it says it carries (tr_edge_config.carries), so that the
 * receiving rank finds the type by the name the bytes come with. */
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "collective.h"
#include "graph_impl.h"
#include "transport.h"

/* The type named `name` that edge e carries, or NULL. */
static const tr_msgtype *carried_named(const tr_edge *e, const char *name) {
  if (e->type && !strcmp(e->type->name, name)) return e->type;
  for (const tr_msgtype *const *t = e->carries; t && *t; t++)
    if (!strcmp((*t)->name, name)) return *t;
  return NULL;
}

static bool carries(const tr_edge *e, const tr_msgtype *type) {
  if (type == e->type) return true;
  for (const tr_msgtype *const *t = e->carries; t && *t; t++)
    if (*t == type) return true;
  return false;
}

/* ---- the host: what the transport asks of the graph ---------------------------------------- */

static int edge_count(void *arg) { return tr__graph_edge_count(arg); }

static int deliver(void *arg, int source, int id, const char *name, const uint8_t *in, size_t n,
                   char *why, size_t size) {
  tr_edge *e = tr__graph_edge(arg, id);
  if (e == NULL || e->mto->remote) {
    snprintf(why, size, "rank %d sent a '%s' on edge %d, which has no consumer here: the "
             "ranks built different graphs", source, name, id);
    return TR_ESTATE;
  }
  const tr_msgtype *type = carried_named(e, name);
  const tr_msg_codec *c = type ? tr__codec_of(type, e->type) : NULL;
  tr_msg *m = c ? c->get(type, in, n) : NULL;
  if (m == NULL) {
    snprintf(why, size, "edge '%s' from '%s' on rank %d: a '%s' of %zu bytes could not be read",
             e->name, tr_actor_name(e->from), source, name, n);
    return TR_EINVAL;
  }
  if (atomic_load(&e->mto->done)) { /* its part is over: the run is ending */
    tr_msg_free(m);
    return 1;
  }
  m->from = e->from;
  m->sent_ns = tr_now_ns(); /* its arrival here: another process's clock is not this one's */
  tr_actor_send(e->to, m);
  return 0;
}

static void release(void *arg, int id, int n) {
  tr_edge *e = tr__graph_edge(arg, id);
  if (e && !e->mfrom->remote) tr_edge_release(e, n);
}

static int send(void *arg, int id, tr_msg *m) {
  tr_edge *e = tr__graph_edge(arg, id);
  TR_ASSERT(e != NULL && !e->mfrom->remote);
  return tr_edge_send_control(e, m);
}

static void describe_edge(void *arg, int id, char *buf, size_t size) {
  const tr_edge *e = tr__graph_edge(arg, id);
  if (e == NULL) snprintf(buf, size, "edge %d", id);
  else snprintf(buf, size, "edge '%s' from '%s' to '%s'", e->name, tr_actor_name(e->from),
                tr_actor_name(e->to));
}

/* The names of the actors that live on `rank` (its transport aside). */
static void describe_rank(void *arg, int rank, char *buf, size_t size) {
  const tr_graph *g = arg;
  const int transports = tr_world_size(tr__graph_world(g)); /* members 0 .. size − 1 */
  size_t len = 0;
  buf[0] = 0;
  for (int i = transports; i < tr__graph_member_count(g) && len < size; i++) {
    const tr__member *m = tr__graph_member(g, i);
    if (m->rank == rank)
      len += (size_t)snprintf(buf + len, size - len, "%s'%s'", len ? ", " : "",
                              tr_actor_name(m->actor));
  }
}

static int64_t freeze(void *arg) { return tr__graph_freeze(arg); }
static void set_end(void *arg, int64_t end) { tr__graph_set_end(arg, end); }
static int64_t take(void *arg) { return tr__graph_take_local(arg); }
static void grant(void *arg, int member, int64_t step) { tr__graph_grant(arg, member, step); }
static void done(void *arg, tr_actor *self) { tr_graph_done(arg, self); }
static int lose(void *arg, int rank, const char *why) { return tr__graph_lost(arg, rank, why); }

/* ---- what the graph hands the transport ------------------------------------------------------ */

int tr__graph_remote_open(tr_graph *g, tr_actor **out) {
  tr_world *w = tr__graph_world(g);
  const tr__transport_host host = {
      .arg = g, .edge_count = edge_count, .deliver = deliver, .release = release,
      .send = send, .describe_edge = describe_edge, .describe_rank = describe_rank,
      .freeze = freeze, .set_end = set_end, .take = take, .grant = grant, .done = done,
      .lose = lose};
  void *state;
  int rc = tr__transport_new(w, &host, tr__graph_watchdog_ms(g), &state);
  for (int r = 0; r < tr_world_size(w) && rc == 0; r++) {
    char name[32];
    snprintf(name, sizeof name, "transport%d", r);
    tr_actor *a;
    const bool mine = r == tr_world_rank(w);
    rc = tr_graph_add_on(g, r,
                         &(tr_actor_config){.name = name, .kind = TR_ACTOR_PINNED,
                                            .behaviour = &tr__transport_behaviour,
                                            .state = mine ? state : NULL},
                         &a);
    if (rc == 0 && mine) *out = a, state = NULL; /* the graph owns it now */
  }
  tr__transport_free(state);
  return rc;
}

void tr__graph_remote_send(tr_edge *e, tr_msg *m) {
  const tr_msg_codec *c = carries(e, m->type) ? tr__codec_of(m->type, e->type) : NULL;
  tr__transport_send(tr__graph_transport(e->g), e->mto->rank, e->id, m, c);
}

void tr__graph_remote_release(tr_edge *e, int n) {
  tr__transport_release(tr__graph_transport(e->g), e->mfrom->rank, e->id, n);
}

void tr__graph_remote_finish(tr_graph *g) { tr__transport_finish(tr__graph_transport(g)); }
void tr__graph_remote_take(tr_graph *g, int member) {
  tr__transport_take(tr__graph_transport(g), member);
}
void tr__graph_remote_locals_done(tr_graph *g) {
  tr__transport_locals_done(tr__graph_transport(g));
}

int tr__graph_sum_group(tr_graph *g, int group, const int *ranks, int n, bool outlive) {
  return tr__transport_group(tr__graph_transport(g), group, ranks, n, outlive);
}

int tr__graph_sum_edges(tr_graph *g, int group, tr_edge *sum, tr_edge *summed) {
  return tr__transport_group_edges(tr__graph_transport(g), group, sum->id, summed->id);
}
