/* worker.h — the asynchronous protocol between workers and the parameter server, and the
 * worker's side of it: what a stage does in place of its update when it is a worker.
 *
 * A worker trains whole global batches at the parameters it last pulled. Its step pushes
 * the gradient to the server (one credit: the next push waits for the reply) and waits for
 * the reply, which says the gradient has been read — and, every `pull_every` pushes, that
 * the server's parameters have been written into the worker's. Hogwild!: the server's first
 * reply lends its parameters, which the worker then updates in place itself, pushing only
 * to count the update. A worker that joins a running job (tr_async_config.join_at) waits
 * for the server's first reply, which brings the parameters of the moment it joins. At the
 * end the worker leaves, so the server knows whom to wait for.
 *
 *   tr__worker_open(w, self, st);
 *   rc = tr__worker_begin(w);                        // before each step (Hogwild!: shared;
 *                                                    // joining: the parameters)
 *   rc = tr__worker_step(w, pushes, batch_step, &busy); // in place of the update
 *   rc = tr__worker_leave(w);                        // at the end
 * Each returns 1 when done, 0 while it waits for a message, or a negative status.
 */
#ifndef TR_WORKER_H
#define TR_WORKER_H

#include <stdbool.h>

#include "job_impl.h"
#include "metrics.h"
#include "step_policy.h"

/* worker → server: the gradient of step `step` at parameters of version `version`, in the
 * worker's memory (grads, beside its parameters), final once `ready` has completed; `pull`:
 * reply with fresh parameters. Hogwild!: the worker has applied it itself, as update
 * number `applied` (no reply). */
typedef struct tr__push_msg {
  tr_msg hdr;
  int worker;
  bool pull;
  bool skipped; /* Hogwild!: the update was not applied, its gradient norm not finite */
  int64_t step, version, applied;
  tr_event *ready;
  float *grads, *params; /* numel each; in host memory (dev NULL) when from another process */
  size_t numel;
  tr_device *dev;
} tr__push_msg;

/* server → worker: the push has been read (and, with `pulled`, the worker's parameters are
 * the server's of version `version`) once `ready` has completed. Hogwild!: once, before
 * anything, the parameters to train in place and the count of updates applied to them. */
typedef struct tr__reply_msg {
  tr_msg hdr;
  bool pulled;
  int64_t version;
  tr_event *ready;
  const float *params; /* to a worker of another process: the parameters pulled (numel, host
                          memory), which it copies in itself; NULL: written into its memory */
  size_t numel;
  tr_stage *share;
  _Atomic int64_t *applied;
  bool ended; /* to a worker that left (tr_async_config.elastic): the server is done, the run
                 over; nothing else in it */
} tr__reply_msg;

/* worker → server: it pushes no more; `left`: because it failed (tr_async_config.elastic),
 * saying why */
typedef struct tr__leave_msg {
  tr_msg hdr;
  int worker;
  bool left;
  char why[256];
} tr__leave_msg;

extern const tr_msgtype tr__push_type, tr__reply_type, tr__leave_type;
/* What a worker's untyped push edge carries (tr_edge_config.carries): pushes, and its leave. */
extern const tr_msgtype *const tr__push_carries[];

/* Replies in flight to one worker at most: the Hogwild! share, then one per push. */
enum { TR__REPLY_CREDITS = 2 };

typedef struct tr__worker tr__worker;

tr__worker *tr__worker_new(const tr__run *run, int index, tr_edge *push, tr_edge *reply);
/* Whether worker `index` joins the running job (tr_async_config.join_at): it trains nothing
 * until the server's first reply, which brings the parameters it starts from. */
bool tr__worker_joins(const tr_job_config *c, int index);
int tr__worker_open(tr__worker *w, tr_actor *self, tr_stage *st);
void tr__worker_receive(tr__worker *w, const tr__reply_msg *m);
int tr__worker_begin(tr__worker *w);
int tr__worker_step(tr__worker *w, int64_t pushes, int64_t batch_step, tr__busy *busy);
int tr__worker_leave(tr__worker *w);
void tr__worker_close(tr__worker *w);
void tr__worker_free(tr__worker *w);
/* The bytes the worker pushed over the run (the run's figures): per push its gradient and
 * the parameters it computed it from (the server measures its distance and compensates
 * the delay with them), numel floats each; Hogwild!'s pushes carry no tensor. */
int64_t tr__worker_sent_bytes(const tr__worker *w);

/* ---- a worker that left (tr_async_config.elastic; elastic.c) -------------------------------
 * Its stage failed: it tells the server why (a leave that says so, once the push in flight,
 * if any, has been read), then only gives back what comes to it — replies, and batches (the
 * caller's) — until the server's reply says the run is over.
 *
 *   tr__worker_depart(w, self, why);              // once, after the failure
 *   over = tr__worker_departed_receive(w, msg);   // every message after it
 *   if (over && batches_back && tr__worker_finish_departed(w)) tr_graph_done(g, self);
 */
tr__worker *tr__policy_async_worker(const tr__policy *p); /* NULL: not a worker's policy */
const tr__run *tr__worker_run(const tr__worker *w);
int tr__worker_depart(tr__worker *w, tr_actor *self, const char *why); /* TR_ESTATE: it
                                                                          never opened */
bool tr__worker_departed(const tr__worker *w);
/* true: the server's reply that the run is over (tr__worker_over from then on) */
bool tr__worker_departed_receive(tr__worker *w, const tr_msg *m);
bool tr__worker_over(const tr__worker *w);
/* true once, when the run is over: the caller's part is done (tr_graph_done) */
bool tr__worker_finish_departed(tr__worker *w);

/* The stage of an elastic job's worker (tr_job_add_stage): the stage runner's behaviour,
 * but a failure of the worker's stage makes it leave the run instead of failing it. */
extern const tr_behaviour tr__elastic_behaviour;
/* Rank `rank` is gone (tr__graph_on_lost): 0 when it held only workers and loaders (of the
 * job's `n`; local SGD's replicas, server NULL), whose leaving the server, or the
 * coordinator, if it lives here, is told of; -1 otherwise. */
int tr__elastic_lost_rank(tr_graph *g, tr_actor *server, tr_actor *coordinator,
                          tr_actor *const *workers, tr_actor *const *loaders, int n, int rank,
                          const char *why);

#endif
