/* transport.h — the actor that carries a graph's edges between processes over MPI, one per
 * rank (transport.c): messages as bytes, the credits that come back for them, the ranks'
 * agreement on the end of a run and on shared steps, and the replica groups' sums
 * (collective.h). Internal to the library; built with MPI only.
 *
 * dist/ knows no graph: the graph that owns the edges (actors/graph_remote.c) gives the
 * transport a host, a table of callbacks it calls from its actor's thread (transport_host.h),
 * and spawns the actor itself, as a member of the graph on every rank (the state on this rank,
 * a placeholder on the others). Edges and graph members are numbers here: every rank builds
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
#include "transport_host.h"

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
