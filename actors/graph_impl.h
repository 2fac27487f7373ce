/* graph_impl.h — the inside of a graph, for its transport (transport.c): actors and edges by
 * number, which process each lives in, and the steps of the run as the ranks agree on them.
 *
 * Every rank of a job builds the same graph, in the same order: actor i and edge i are the
 * same on every rank, and each actor lives on one rank (a placeholder stands for it on the
 * others). An edge whose consumer lives elsewhere hands its messages to the transport; one
 * whose producer lives elsewhere hands the consumer's releases to it.
 */
#ifndef TR_GRAPH_IMPL_H
#define TR_GRAPH_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "tr_graph.h"
#include "tr_world.h"

struct tr_edge {
  tr_graph *g;
  int id;
  tr_actor *from, *to;
  const tr_msgtype *type;
  const char *name;
  int credits, wake_at;
  bool notify;
  struct tr__member *mfrom, *mto; /* its producer's and consumer's places in the graph: their
                                     ranks, and whether they live in another process */
  _Atomic int available;
  _Atomic int starving;
  _Atomic int peak; /* written by the producer only */
  tr_edge *next;
  char track[96];   /* the trace's counter: "credits producer→consumer name" */
};

typedef struct tr__member {
  tr_actor *actor;
  int id, rank;
  bool service;      /* not waited for */
  bool remote;       /* a placeholder for an actor of another rank */
  _Atomic bool done; /* its part is over (read by tr_graph_print) */
  _Atomic int64_t granted; /* a step rank 0 handed it (tr_graph_take_step), or -1 */
  bool asked;        /* a step has been asked for it */
  tr_behaviour placeholder; /* remote: never runs; destroys the state it was given */
  struct tr__member *next;
} tr__member;

/* The messages a rank's transport takes from the graph and its actors. */
void tr__transport_send(tr_actor *transport, tr_edge *e, tr_msg *m);
void tr__transport_release(tr_actor *transport, tr_edge *e, int n);
void tr__transport_finish(tr_actor *transport); /* this rank wants the run to end */
void tr__transport_take(tr_actor *transport, int member);
void tr__transport_locals_done(tr_actor *transport);
int tr__transport_add(tr_graph *g, tr_world *w, tr_actor **out);

/* What the transport asks of the graph. */
tr_edge *tr__graph_edge(const tr_graph *g, int id);
int tr__graph_edge_count(const tr_graph *g);
tr__member *tr__graph_member(const tr_graph *g, int id);
tr__member *tr__graph_member_of(const tr_graph *g, const tr_actor *a);
int tr__graph_member_count(const tr_graph *g);
tr_world *tr__graph_world(const tr_graph *g);
/* fn(arg, err, n) runs once as tr_graph_run begins, before any actor starts (the job's plan
 * is checked and its actors wired then); its failure is the run's, err its message. */
void tr__graph_before_run(tr_graph *g, int (*fn)(void *arg, char *err, size_t n), void *arg);
int tr__graph_watchdog_ms(const tr_graph *g); /* its system's watchdog period (0: none) */
/* The ranks' agreement on the end of a timed run: this rank's claims stop at what it has
 * claimed (returned; claims beyond it wait), then every rank takes the end E, the most any
 * rank had claimed, and its actors are told. */
int64_t tr__graph_freeze(tr_graph *g);
void tr__graph_set_end(tr_graph *g, int64_t end);
/* Rank 0: the next step for a source of any rank: >= 0, -1 when the run has no more, -2
 * while the ranks agree on the end. */
int64_t tr__graph_take_local(tr_graph *g);
/* A step rank 0 handed member `id` of this rank. */
void tr__graph_grant(tr_graph *g, int id, int64_t step);

#endif
