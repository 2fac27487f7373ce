/* policy_async.c — the asynchronous worker's step: the stage is a whole model training
 * whole global batches at the parameters it last pulled, and in place of an update it
 * pushes its gradient to the parameter server and waits for the reply (worker.c). Its steps
 * are its own pushes, counted from 0; the loader's batches say which step of the run each
 * one is, and a batch of step -1 ends the worker's part.
 */
#include <stdlib.h>

#include "step_policy.h"
#include "worker.h"

typedef struct async_policy {
  tr__worker *worker;
  tr_actor *self;
  tr__busy *busy;
} async_policy;

static tr_stage_shard shard(const void *state) {
  (void)state;
  return (tr_stage_shard){0};
}

static int open(void *state, const tr__policy_ctx *ctx) {
  async_policy *p = state;
  p->busy = ctx->busy;
  p->self = ctx->self;
  return tr__worker_open(p->worker, ctx->self, ctx->chunks[0]); /* one chunk (tr_job_new) */
}

static int64_t first_step(const void *state, const tr__run *run) {
  (void)state, (void)run;
  return 0;
}

/* A worker pushes about its share of the steps. */
static int64_t share(const void *state, const tr__run *run, int64_t steps) {
  (void)state;
  return steps == INT64_MAX ? steps : steps / run->c.layout.replicas;
}

/* Until the loader has no more: step -1 says so. After an early end, batches taken but not
 * started are dropped, so that a stop waits for one push at most. */
static int begin(void *state, int64_t step, const tr__lent *head, bool ended, int64_t *run_step) {
  async_policy *p = state;
  (void)step;
  if (head == NULL) return TR__BEGIN_WAIT;
  if (head->step < 0) return TR__BEGIN_END | TR__BEGIN_DROP;
  if (ended) return TR__BEGIN_DROP;
  const int rc = tr__worker_begin(p->worker);
  if (rc != TR__DONE) return rc < 0 ? rc : TR__BEGIN_WAIT;
  *run_step = head->step;
  return TR__BEGIN_GO;
}

static int last_backward(void *state, int64_t step, bool after) {
  (void)state, (void)step, (void)after;
  return 0;
}

static int update(void *state, int64_t step, int64_t run_step) {
  async_policy *p = state;
  return tr__worker_step(p->worker, step, run_step, p->busy);
}

static bool receive(void *state, const tr_msg *m, int *rc) {
  if (m->type != &tr__reply_type) return false;
  tr__worker_receive(((async_policy *)state)->worker, (const tr__reply_msg *)m);
  *rc = 0;
  return true;
}

static bool waiting(const void *state) {
  (void)state;
  return false;
}

static int finish(void *state) {
  (void)state;
  return 0;
}

static int leave(void *state) { return tr__worker_leave(((async_policy *)state)->worker); }

/* The server writes the checkpoints; the workers' parameters are not the run's. */
static bool sends_parts(const void *state, int replica) {
  (void)state, (void)replica;
  return false;
}

static bool consistency(const void *state) {
  (void)state;
  return false;
}

static int64_t skipped(const void *state) {
  (void)state;
  return 0;
}

static void figures(const void *state, tr__figures *f) { /* the worker's pushes */
  tr__figures_int(f, TR__M_COMM_BYTES, tr__worker_sent_bytes(((const async_policy *)state)->worker));
}

/* Elastic (elastic.c): the worker tells its server why it leaves, then gives back what
 * comes; its batches stay held until the server's reply says the run is over. */
static int depart(void *state, const char *why) {
  async_policy *p = state;
  return tr__worker_depart(p->worker, p->self, why);
}

static const tr__run *departed(const void *state) {
  const tr__worker *w = ((const async_policy *)state)->worker;
  return tr__worker_departed(w) ? tr__worker_run(w) : NULL;
}

static int left(void *state, const tr_msg *m) {
  tr__worker *w = ((async_policy *)state)->worker;
  if (m) tr__worker_departed_receive(w, m);
  return tr__worker_over(w) ? TR__LEFT_BACK | TR__LEFT_OVER : TR__LEFT_HOLD;
}

static void abort_(void *state) { (void)state; }
static void close_(void *state) { tr__worker_close(((async_policy *)state)->worker); }

static void free_(void *state) {
  async_policy *p = state;
  tr__worker_free(p->worker);
  free(p);
}

static const tr__policy_ops async_ops = {
    .name = "async", .run_steps = false, .shard = shard, .open = open,
    .first_step = first_step, .share = share, .begin = begin,
    .last_backward = last_backward, .update = update, .receive = receive, .waiting = waiting,
    .finish = finish, .leave = leave, .sends_parts = sends_parts, .consistency = consistency,
    .skipped = skipped, .figures = figures, .depart = depart, .departed = departed,
    .left = left, .abort = abort_, .close = close_, .free = free_};

int tr__policy_async(tr__policy *out, tr__worker *worker) {
  async_policy *p = calloc(1, sizeof *p);
  if (p == NULL) return TR_ENOMEM;
  p->worker = worker;
  *out = (tr__policy){.ops = &async_ops, .state = p};
  return 0;
}

tr__worker *tr__policy_async_worker(const tr__policy *p) {
  return p->ops == &async_ops ? ((const async_policy *)p->state)->worker : NULL;
}
