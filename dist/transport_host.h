/* transport_host.h — what the transport (transport.h) calls back into: the graph whose edges
 * it carries (actors/graph_remote.c fills the table). Apart from transport.h so that the
 * transport's own files (transport_state.h) reach the graph through the state they share,
 * not through transport.c. Internal to the library; built with MPI only. */
#ifndef TR_DIST_TRANSPORT_HOST_H
#define TR_DIST_TRANSPORT_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "tr_system.h"

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

#endif
