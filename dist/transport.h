/* transport.h — the actor that carries a graph's edges between processes over MPI, one per
 * rank (transport.c): messages as bytes, the credits that come back for them, the ranks'
 * agreement on the end of a run and on shared steps, and the replica groups' sums
 * (collective.h). Internal to the library; built with MPI only.
 *
 * dist/ knows no graph: the graph that owns the edges (actors/graph_remote.c) gives the
 * transport a host, a table of callbacks it calls from its actor's thread, and spawns the
 * actor itself, as a member of the graph on every rank (the state on this rank, a
 * placeholder on the others). Edges and graph members are numbers here: every rank builds
 * the same graph in the same order, so number i is the same on every rank.
 *
 *   void *state;
 *   tr__transport_new(world, &host, watchdog_ms, &state);
 *   ... spawn an actor with tr__transport_behaviour and `state` (its destroy frees it) ...
 *   tr__transport_send(actor, rank, edge, msg, codec);   // an edge's message for `rank`
 *   tr__transport_release(actor, rank, edge, n);         // a consumer here gave credits back
 */
#ifndef TR_DIST_TRANSPORT_H
#define TR_DIST_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_system.h"
#include "tr_world.h"

/* What the transport calls back into: the graph whose edges it carries. Every call comes
 * from the transport's actor, on its thread. */
typedef struct tr__transport_host {
  void *arg;
  int (*edge_count)(void *arg); /* once the graph is built, when the actor starts */
  /* A message for edge `edge` came from `source`: its type's name and its payload
   * [in, in + n). The host decodes and delivers it: 0, delivered (the payload stays until
   * the edge's credit comes back, tr__transport_release); 1, dropped (its consumer's part is
   * over); negative, refused, with `why` saying so. */
  int (*deliver)(void *arg, int source, int edge, const char *type, const uint8_t *in,
                 size_t n, char *why, size_t size);
  /* `n` credits of edge `edge` came back (its producer lives here), or the sum of its
   * "sum" edge is done. */
  void (*release)(void *arg, int edge, int n);
  /* The transport's own message on edge `edge` (a group's "summed"). */
  int (*send)(void *arg, int edge, tr_msg *m);
  /* For messages: "edge 'act' from 'stage0' to 'stage1'"; the actors living on `rank`. */
  void (*describe_edge)(void *arg, int edge, char *buf, size_t size);
  void (*describe_rank)(void *arg, int rank, char *buf, size_t size);
  /* The ranks' agreement on the end of a timed run: this rank's claims stop at what it has
   * claimed (returned), then every rank takes the end, the most any rank had claimed. */
  int64_t (*freeze)(void *arg);
  void (*set_end)(void *arg, int64_t end);
  /* Rank 0: the next step for a source of any rank (>= 0; -1: the run has no more; -2: the
   * ranks are agreeing on the end, ask again once it is known). */
  int64_t (*take)(void *arg);
  /* A step rank 0 handed member `member` of this rank (< 0: none). */
  void (*grant)(void *arg, int member, int64_t step);
  /* Every rank has said goodbye: the transport's part of the run is over. */
  void (*done)(void *arg, tr_actor *self);
  /* Rank `rank` is gone (its process died, it was silent for the limit, or MPI failed a
   * send to it; `why` says which, after "its rank N": "died (its process ended: its
   * connection closed)"): 0, the graph goes on without it — nothing more is sent to it, no goodbye or
   * agreement waits for it; nonzero, or no callback: the run fails, naming it. */
  int (*lose)(void *arg, int rank, const char *why);
} tr__transport_host;

/* This rank's transport for a graph on `w` (of more than one rank); a rank silent for
 * `watchdog_ms` (0: a minute) has stopped. *state goes to an actor of
 * tr__transport_behaviour, whose destroy frees it (tr__transport_free before then). */
int tr__transport_new(tr_world *w, const tr__transport_host *host, int watchdog_ms,
                      void **state);
void tr__transport_free(void *state);
extern const tr_behaviour tr__transport_behaviour;

/* What the graph and its actors hand it, from any thread. */
/* Edge `edge`'s message for its consumer on `rank`, as `codec` writes it (NULL: the type
 * cannot cross; the transport fails the run naming the edge). */
void tr__transport_send(tr_actor *t, int rank, int edge, tr_msg *m, const tr_msg_codec *codec);
/* A consumer here gave `n` credits of edge `edge` back to its producer on `rank`. */
void tr__transport_release(tr_actor *t, int rank, int edge, int n);
void tr__transport_finish(tr_actor *t);           /* this rank wants the run to end */
void tr__transport_take(tr_actor *t, int member); /* a step for member `member`, of rank 0 */
void tr__transport_locals_done(tr_actor *t);      /* this rank's actors are done */

/* Replica group `group` (numbered from 0 in the order groups are made) spans `ranks`; its
 * leader here sends on edge `sum` and hears on edge `summed` (collective.h). `outlive`: its
 * sums go on without a rank that is lost (gathered to its first rank), else MPI_Allreduce.
 * Wiring: every rank makes the same calls in the same order, before the run. */
int tr__transport_group(tr_actor *t, int group, const int *ranks, int n, bool outlive);
int tr__transport_group_edges(tr_actor *t, int group, int sum, int summed);

#endif
