/* transport_state.h — the inside of the transport (transport.h): its state, its tags on the
 * wire and the messages its progress thread hands it, shared by the three files that make it
 * up: progress.c (the thread that progresses MPI: sends, probes, heartbeats, the lifelines
 * that say a rank died; and the sends it completes), collective.c (the replica groups' sums:
 * a thread per group, or gathered to the group's first rank) and transport.c (the actor:
 * messages out and in, credits, the end of a run, goodbyes). Each calls only the files before
 * it in that order; the graph above (transport_host.h) is reached through the state's host.
 * Private to dist/. */
#ifndef TR_DIST_TRANSPORT_STATE_H
#define TR_DIST_TRANSPORT_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buffers.h"
#include "transport_host.h"
#include "world_impl.h"

enum {
  TAG_MSG = 1, TAG_RELEASE, TAG_FINISH, TAG_FREEZE, TAG_FROZEN, TAG_END, TAG_TAKE, TAG_GRANT,
  TAG_BYE, TAG_ABORT, TAG_HEARTBEAT, TAG_PART, TAG_TOTAL
};
enum { HEAD = 64, NAME = 48, MAX_GROUPS = 64 };

/* What the progress thread hands the actor (progress.c defines their types). */
typedef struct in_msg { /* from the progress thread: what another rank sent */
  tr_msg hdr;
  int source, tag;
  uint8_t *buf;
  size_t n;
} in_msg;

typedef struct silent_msg { /* from the progress thread */
  tr_msg hdr;
  int rank;
  double seconds;
} silent_msg;

typedef struct died_msg { /* from the progress thread: its lifeline closed (lifelines.h) */
  tr_msg hdr;
  int rank;
} died_msg;

typedef struct broken_msg { /* from the progress thread: MPI failed a request */
  tr_msg hdr;
  int rank; /* the send's destination; -1: a sum across ranks */
  char why[MPI_MAX_ERROR_STRING];
} broken_msg;

extern const tr_msgtype tr__mpi_in_type, tr__mpi_silent_type, tr__mpi_died_type,
    tr__mpi_broken_type;

/* ---- its state ------------------------------------------------------------------------------ */

typedef struct held { /* a receive buffer a message points into, until its credit comes back */
  uint8_t *buf;
  struct held *next;
} held;

typedef struct queue {
  held *head, *tail;
} queue;

typedef struct request { /* a send the progress thread completes */
  MPI_Request r;
  int dest;
  uint8_t *buf;   /* given back to the buffers once complete */
  struct request *next;
} request;

typedef struct incoming { /* a message being received (the progress thread's) */
  MPI_Request r;
  uint8_t *buf;
  int count, source, tag;
  bool complete;
  struct incoming *next;
} incoming;

typedef struct summer summer; /* collective.c's: a group's sums on a thread of its own */
typedef struct gather gather; /* collective.c's: a group's sums that outlive a rank */

typedef struct deferred { /* a step asked of rank 0 while the ranks agree on the end */
  int rank, member;
  struct deferred *next;
} deferred;

typedef struct transport {
  tr__transport_host host; /* the graph whose edges it carries */
  tr_actor *self;
  MPI_Comm world; /* the world's */
  MPI_Comm comm;  /* this run's own duplicate: nothing of an earlier graph's reaches it */
  int rank, size;
  uint64_t limit_ns;     /* a rank silent this long has stopped */
  tr__lifelines *lines;  /* the world's: a rank whose process ended (progress thread only) */
  queue *held;           /* [edge id] */
  int nheld;
  /* groups: a communicator each among the ranks that hold members */
  int ngroups;
  int group_ranks[MAX_GROUPS][64], group_n[MAX_GROUPS];
  MPI_Comm group_comm[MAX_GROUPS];
  summer *summers[MAX_GROUPS]; /* where this rank holds members */
  gather *gathers[MAX_GROUPS]; /* in place of the summer, for a group whose sums outlive a rank */
  bool outlive[MAX_GROUPS];
  int sum_in[MAX_GROUPS], summed[MAX_GROUPS]; /* the group's edges with its leader here */
  /* the end of a timed run (rank 0 gathers); steps handed out */
  bool finishing, asked_finish;
  int frozen;
  int64_t frozen_max;
  deferred *deferred;
  /* goodbyes */
  bool said_bye, done;
  int byes;
  bool *bye_from; /* [rank] */
  /* the progress thread, and what it shares with the actor under the lock */
  pthread_t thread;
  bool thread_started;
  _Atomic bool running;
  pthread_mutex_t lock;
  tr__buffers buffers;   /* every message's bytes, out and in (buffers.h) */
  request *requests;
  uint64_t *heard;       /* [rank]: last message from it (progress thread only) */
  incoming *incoming;    /* messages being received, in the order they were matched (progress
                            thread only; those of a lost rank are abandoned to MPI) */
  bool *waits;           /* [rank]: the progress thread's, while it hands messages over */
  bool *reported;        /* [rank]: reported silent or dead (progress thread only): what it
                            began to send, and what is sent to it, abandoned to MPI */
  bool remote_failure;   /* the run ends for another rank's failure: no abort sent back */
  bool *lost;            /* [rank]: gone, and the graph goes on without it (host.lose) */
  int nlost;
} transport;

/* progress.c: an MPI_Isend of `buf` (t->buffers', given back once sent; NULL with n 0) to
 * `dest`, unless it is lost (then given back at once), from the actor's thread; an MPI_Isend
 * of q's message, q then on the list the progress thread completes; an MPI failure for the
 * actor to report (rank -1: not one rank's), from another thread; the progress thread itself
 * (its argument the transport). */
int tr__transport_post(transport *t, int dest, int tag, uint8_t *buf, size_t n);
int tr__mpi_isend(transport *t, request *q, int dest, int tag, const void *buf, int n);
void tr__mpi_broken(transport *t, int rank, int rc);
void *tr__mpi_progress(void *arg);

/* collective.c: group k's thread (open, stop: one inside a sum whose other ranks are gone is
 * left behind; free), a bucket handed to it, and one it has summed (the leader told). */
struct tr__sum_msg; /* collective.h */
int tr__sums_open(transport *t, int k);
void tr__sums_stop(summer *u);
void tr__sums_free(transport *t, int k);
int tr__sums_start(transport *t, const struct tr__sum_msg *s);
int tr__sums_complete(transport *t, const struct tr__sum_msg *s, int members);

/* collective.c: group k's sums that outlive a rank (open, free); a bucket handed to it; a part
 * (at the root) or a total that came (TAG_PART, TAG_TOTAL: the buffer is its); whether rank
 * r cannot be lost (the root of a group of this rank's, or in one summed by MPI); rank r
 * lost (its part of the step in hand not summed). */
int tr__gather_open(transport *t, int k);
void tr__gather_free(transport *t, int k);
int tr__gather_start(transport *t, const struct tr__sum_msg *s);
int tr__gather_receive(transport *t, in_msg *in);
bool tr__gather_needs(const transport *t, int r);
int tr__gather_lose(transport *t, int r);

#endif
