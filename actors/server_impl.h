/* server_impl.h — the parameter server's state (server.c), shared with the part that keeps
 * its book of workers that come and go (server_members.c). Private to the server. */
#ifndef TR_SERVER_IMPL_H
#define TR_SERVER_IMPL_H

#include "join.h"
#include "worker.h"

enum { STATS_RING = 64,    /* distance measurements in flight to the host */
       NORM = 2 * STATS_RING }; /* where a push's gradient norm is measured */

typedef struct worker {
  tr_edge *push, *reply;
  tr_event *reply_ev;
  int64_t clock;    /* pushes applied */
  bool direct;      /* its memory is readable here */
  bool remote;      /* it lives in another process: pushes come in host memory, and the
                       parameters pulled go back with the reply, from `host` */
  float *host;
  bool active;      /* has not left */
  bool joined;      /* trains: from the start, or since step `joined_at` (async.join_at) */
  bool deferred;    /* it joins a running job: its slot is empty until it is added (join.h) */
  bool asked;       /* ... and it has been asked for, its edges to come */
  int64_t joined_at;
  bool left;        /* left because it failed (elastic), at update `left_at`, saying `why` */
  int64_t left_at;
  char why[256];
  bool waiting;     /* its reply is held (SSP) */
  bool pull;        /* the held reply brings parameters */
  float *params;    /* its memory, as its last push said */
  tr_device *dev;
} worker;

/* What the server measures for the run's figures, sent as pairs at the end (finish). */
typedef struct figures {
  int64_t hist[TR_TRAIN_STALENESS_BINS];
  double staleness_sum, consistency_sum;
  int64_t staleness_max, consistency_n;
  int clock_gap_max;
  int64_t skipped;  /* updates skipped for a norm that was not finite */
  int64_t sent;     /* bytes of parameters sent with replies (pulls) */
} figures;

typedef struct server {
  tr_actor *self;
  const tr__run *run;
  tr_edge *report;
  tr_device *dev;
  tr_stage *st;
  tr_stream *s;
  size_t numel;
  float *scratch;   /* a worker's parameters, staged where they cannot be read in place */
  int W, active;
  int departed;     /* workers that left because they failed (elastic) */
  worker *w;
  int64_t version;  /* updates applied in this run */
  _Atomic int64_t applied; /* Hogwild!: updates the workers applied */
  float lr;

  /* ||θ_worker − θ_server||² and ||θ_server||² per push: device → host ring */
  float *stats_dev, *stats_host;
  tr_event *stats_ev[STATS_RING];
  int64_t stats_issued, stats_read;

  figures fig;
  tr__busy busy;
  bool finishing, done, lent; /* lent: Hogwild! workers hold the parameters */
  bool saved;                 /* the last checkpoint part is taken */
  int (*join)(void *arg, int worker); /* asks for a deferred worker (tr__server_defer) */
  bool no_steps;              /* a worker left at the end: the run has no step left to hand out */
  void *join_arg;
  tr__part_msg *pending;      /* a checkpoint part waiting for a credit */
  char err[512];
} server;

int tr__server_fail_device(tr_actor *self, server *sv, const char *what);

/* ---- workers that come and go (server_members.c) ------------------------------------------
 * welcome: workers that join (tr_async_config.join_at) get the parameters of the moment it
 * is their turn; depart: worker l->worker failed and left (elastic); all_departed: every
 * worker left, the run fails naming them; tell_departed: the run is over, each worker that
 * left is told (elastic.c); members_figures: who left and joined, and how many still ran. */
int tr__server_welcome(tr_actor *self, server *sv);
int tr__server_open_worker(server *sv, int i); /* server.c: its events and buffers */
int tr__server_joined(tr_actor *self, server *sv, const tr__joined_msg *m);
void tr__server_depart(server *sv, const tr__leave_msg *l);
int tr__server_all_departed(tr_actor *self, server *sv);
int tr__server_tell_departed(server *sv);
void tr__server_members_figures(const server *sv, tr__figures *f);

#endif
