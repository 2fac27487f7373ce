/* graph_impl.h — the inside of a graph (graph.c), for its remote side (graph_remote.c) and the
 * wiring: actors and edges by number, which process each lives in, and the steps of the run
 * as the ranks agree on them.
 *
 * Every rank of a job builds the same graph, in the same order: actor i and edge i are the
 * same on every rank, and each actor lives on one rank (a placeholder stands for it on the
 * others). An edge whose consumer lives elsewhere hands its messages to the transport
 * (dist/transport.h, through graph_remote.c); one whose producer lives elsewhere hands the
 * consumer's releases to it. Built without MPI, a graph has no remote side: the calls below
 * that reach it are never made, and stand-ins here say so.
 */
#ifndef TR_GRAPH_IMPL_H
#define TR_GRAPH_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tr_graph.h"
#include "tr_world.h"

struct tr_edge {
  tr_graph *g;
  int id;
  tr_actor *from, *to;
  const tr_msgtype *type;
  const tr_msgtype *const *carries; /* an untyped edge's types (tr_edge_config.carries) */
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
  bool own;          /* the library's (a job's part: tr__graph_add_part), not the user's */
  bool remote;       /* a placeholder for an actor of another rank */
  _Atomic bool done; /* its part is over (read by tr_graph_print) */
  _Atomic int64_t granted; /* a step rank 0 handed it (tr_graph_take_step), or -1 */
  bool asked;        /* a step has been asked for it */
  tr_behaviour placeholder; /* remote: never runs; destroys the state it was given */
  struct tr__member *next;
} tr__member;

/* The graph itself: graph.c builds and runs it, graph_steps.c hands out its steps and ends
 * its run (graph.c's opening comment says how it may grow while it runs). */
struct tr_graph {
  tr_system *sys;
  pthread_mutex_t lock;            /* writers: adds, connects, the end told, actors done */
  _Atomic(tr__member *) members;       /* newest first; published with release order */
  tr__member **by_id;                  /* [id]; the remote side's, which never sees it grow */
  _Atomic int nmembers;
  int cap_members, nwaited;        /* nwaited: this rank's members that are not services */
  _Atomic(tr_edge *) edges;        /* newest first, as members */
  tr_edge **edge_by_id;
  _Atomic int nedges;
  int cap_edges;
  tr_world *world;
  int rank, watchdog_ms;
  tr_actor *transport;             /* across processes */
  tr_actor *timer; /* the graph's own loop actor, for a time limit */
  _Atomic bool ran;
  /* under `lock`: every waited actor is done (the system stops; nothing more is added); the
   * end was told to every actor (tell_end), and which, for those added after */
  bool stopped, told;
  int64_t told_end;
  int64_t first_step, end_limit;
  _Atomic int64_t claimed; /* one past the highest step claimed, | PENDING, | STOP */
  _Atomic int64_t taken;   /* steps handed out by tr_graph_take_step */
  int ndone; /* under `lock` */
  char error[512]; /* a run ended in order by a signal, or a plan that failed its check */
  char warning[1536]; /* tr_graph_warning: the run ended cleanly, its end stuck (graph_quiet.c) */
  char name[32];      /* its system's, for messages */
  bool (*complete)(void *arg, char *what, size_t n); /* tr__graph_on_complete */
  void *complete_arg;
  int (*before_run)(void *arg, char *err, size_t n); /* tr__graph_before_run */
  void *before_arg;
  int (*lost)(void *arg, int rank, const char *why); /* tr__graph_on_lost */
  void *lost_arg;
};


/* The end, to one actor of this rank (idle ones would not look otherwise). */
static inline void tr__graph_send_end(tr__member *m, int64_t end) {
  tr_graph_end_msg *msg = tr_msg_new(&tr_graph_end_type);
  msg->hdr.from = NULL;
  msg->end_step = end;
  tr_actor_send_ctl(m->actor, msg);
}

/* The graph's numbers, for its remote side. */
tr_edge *tr__graph_edge(const tr_graph *g, int id);
int tr__graph_edge_count(const tr_graph *g);
tr__member *tr__graph_member(const tr_graph *g, int id);
tr__member *tr__graph_member_of(const tr_graph *g, const tr_actor *a);
int tr__graph_member_count(const tr_graph *g);
tr_world *tr__graph_world(const tr_graph *g);
/* fn(arg, err, n) runs once as tr_graph_run begins, before any actor starts (the job's plan
 * is checked and its actors wired then); its failure is the run's, err its message. */
void tr__graph_before_run(tr_graph *g, int (*fn)(void *arg, char *err, size_t n), void *arg);
/* fn(arg, rank, why), on the transport's thread, when rank `rank` is gone: 0, the run goes on
 * without it (fn has told whom it concerns); nonzero, or none set: the run fails. */
void tr__graph_on_lost(tr_graph *g, int (*fn)(void *arg, int rank, const char *why), void *arg);
int tr__graph_lost(tr_graph *g, int rank, const char *why);
int tr__graph_watchdog_ms(const tr_graph *g); /* its system's watchdog period (0: none) */
/* tr_graph_add_on for the library's own actors (a job's parts): a quiet graph
 * (graph_quiet.c) names the user's first. */
int tr__graph_add_part(tr_graph *g, int rank, const tr_actor_config *config, tr_actor **out);
/* fn(arg, what, n), on the loop thread, when the graph is quiet: true when its work is done
 * nonetheless (`what` saying what was done), so that the run ends cleanly, the actors that
 * are stuck named in tr_graph_warning; false, and the run fails, naming them. */
void tr__graph_on_complete(tr_graph *g, bool (*fn)(void *arg, char *what, size_t n), void *arg);
/* tr_system_config.on_quiet of a graph's system (graph_quiet.c). */
void tr__graph_quiet(void *graph);
/* tr_system_config.describe: the graph printed (tr_graph_print) into buf (graph_quiet.c). */
void tr__graph_describe(void *graph, char *buf, size_t size);
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

/* ---- the remote side (graph_remote.c, built with MPI) --------------------------------------
 * remote_open: the transports of every rank, members 0 .. size − 1 (this rank's the actor,
 * the others placeholders that the groups' edges name). The rest hand things to this rank's
 * transport. sum_group, sum_edges: a replica group across ranks (dist/collective.h), wired
 * the same on every rank (`outlive`: its sums go on without a rank that is lost, as local
 * SGD's elastic replicas do); transport_on: rank `rank`'s transport, for the group's edges. */
#ifdef TR_HAVE_MPI
int tr__graph_remote_open(tr_graph *g, tr_actor **transport);
void tr__graph_remote_send(tr_edge *e, tr_msg *m);
void tr__graph_remote_release(tr_edge *e, int n);
void tr__graph_remote_finish(tr_graph *g);
void tr__graph_remote_take(tr_graph *g, int member);
void tr__graph_remote_locals_done(tr_graph *g);
int tr__graph_sum_group(tr_graph *g, int group, const int *ranks, int n, bool outlive);
int tr__graph_sum_edges(tr_graph *g, int group, tr_edge *sum, tr_edge *summed);
#else
static inline int tr__graph_remote_open(tr_graph *g, tr_actor **transport) {
  (void)g, (void)transport;
  return TR_ESTATE; /* a world of one process has no other */
}
static inline void tr__graph_remote_send(tr_edge *e, tr_msg *m) { (void)e, (void)m, TR_ASSERT(0); }
static inline void tr__graph_remote_release(tr_edge *e, int n) { (void)e, (void)n, TR_ASSERT(0); }
static inline void tr__graph_remote_finish(tr_graph *g) { (void)g, TR_ASSERT(0); }
static inline void tr__graph_remote_take(tr_graph *g, int member) {
  (void)g, (void)member, TR_ASSERT(0);
}
static inline void tr__graph_remote_locals_done(tr_graph *g) { (void)g, TR_ASSERT(0); }
static inline int tr__graph_sum_group(tr_graph *g, int group, const int *ranks, int n,
                                      bool outlive) {
  (void)g, (void)group, (void)ranks, (void)n, (void)outlive;
  return TR_ESTATE;
}
static inline int tr__graph_sum_edges(tr_graph *g, int group, tr_edge *sum, tr_edge *summed) {
  (void)g, (void)group, (void)sum, (void)summed;
  return TR_ESTATE;
}
#endif
tr_actor *tr__graph_transport(const tr_graph *g); /* this rank's; NULL in a world of one */
tr_actor *tr__graph_transport_on(const tr_graph *g, int rank);

#endif
