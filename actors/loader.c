/* loader.c — the loader actor (libuv loop): fills its replica's share of every step, micro-
 * batch by micro-batch, into buffers it owns, and lends them to the stages as tr_batch_msg
 * (tr_protocol.h).
 *
 * It owns as many buffers as its edges have credits (pinned host memory of its replica's
 * first device) and fills one only with a credit of every edge it feeds in hand (inputs to
 * the first stage, targets to the last; one edge for both when they are one stage), so it
 * is at most `prefetch` micro-batches ahead. Buffers are used in ring order: each consumer
 * returns them in the order they came, so a credit means the oldest buffer is free. The
 * first stage claims each step from the graph as it starts it; the loader's part is over
 * once its next step is past the end (a timed run's end is known once its time is up).
 * Samples are a pure function of (seed, sample index) (tr_data.h), so step k's batch is the
 * same whichever thread fills it and however the run was interrupted and resumed.
 *
 * An edge whose stage generates the samples on its device (tr_job_config.data_on) gets
 * batches that only say which samples (tr_batch_msg.generate); the loader fills, and owns
 * buffers, only for the edges that do not.
 *
 * Held-out evaluation (tr_job_config.eval, evaluate.h): after the micro-batches of step
 * k-1, when an evaluation is due after step k, and after the last step's, the loader sends
 * its replica's share of the held-out samples as micro-batches flagged `eval`, in the same
 * buffers and on the same edges (a relay of the user's sees them too). The last of them may
 * hold fewer samples; the rest of its buffer repeats its first sample, so that forward reads
 * numbers. A timed run's end is known late: what the loader sent past it the stages drop.
 *
 * In an asynchronous job the loaders take steps from the graph in turn (tr_graph_take_step),
 * so every step is one worker's, whole; a loader that finds no more tells its worker so (a
 * batch of step -1).
 */
#include <stdlib.h>
#include <string.h>

#include "evaluate.h"

enum { TURN_NS = 1000 * 1000 };

typedef struct out_edge {
  tr_edge *e;
  unsigned what;
  bool generate; /* the stage makes the samples */
  bool held;     /* a credit taken */
} out_edge;

typedef struct loader {
  const tr__run *run;
  int replica;
  out_edge out[2];
  int nout;
  tr_device *dev;    /* whose pinned memory the buffers are; NULL: plain memory */
  void **x, **y;     /* [depth] */
  int depth, slot;
  int64_t step;
  int mb;
  bool claimed, done; /* claimed (async): l->step is this loader's to fill */
  bool ending;        /* async: the run has no more steps; the worker is to be told */
  bool resuming;      /* a poll to itself is on its way */
  int64_t eval_step;  /* the evaluation being sent follows this step */
  int eval_mb, eval_m; /* its next micro-batch, of eval_m (0: none being sent) */
  bool end_evaluated; /* the end's evaluation has begun */
} loader;

void *tr__loader_new(const tr__run *run, int replica) {
  loader *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->run = run;
  l->replica = replica;
  return l;
}

int tr__loader_add_edge(void *state, tr_edge *e, unsigned what, bool generate) {
  loader *l = state;
  if (l->nout == 2) return TR_EINVAL;
  l->out[l->nout++] = (out_edge){.e = e, .what = what, .generate = generate};
  return 0;
}

void tr__loader_set_device(void *state, tr_device *dev) { ((loader *)state)->dev = dev; }

/* What the loader itself fills: what its edges carry, but for those whose stage generates,
 * and inputs with targets (a source makes targets from its inputs, tr_data_fill). */
static unsigned filled(const loader *l) {
  unsigned what = 0;
  for (int i = 0; i < l->nout; i++)
    if (!l->out[i].generate) what |= l->out[i].what;
  return what ? what | TR_BATCH_INPUTS : 0;
}

static int buffer(loader *l, size_t bytes, void **out) {
  if (l->dev) return tr_host_alloc(l->dev, bytes, out);
  return (*out = aligned_alloc(64, (bytes + 63) & ~(size_t)63)) ? 0 : TR_ENOMEM;
}

static int loader_start(tr_actor *self) {
  loader *l = tr_actor_state(self);
  const tr_job_config *c = &l->run->c;
  if (l->nout == 0)
    return tr_actor_fail(self, TR_EINVAL, "the loader of replica %d feeds nothing "
                         "(tr_job_feed, tr_job_connect_batches)", l->replica);
  l->step = tr_graph_first_step(l->run->g);
  l->depth = tr_edge_credits(l->out[0].e);
  for (int i = 1; i < l->nout; i++)
    if (tr_edge_credits(l->out[i].e) < l->depth) l->depth = tr_edge_credits(l->out[i].e);
  const unsigned what = filled(l);
  const size_t n = (size_t)l->run->mb_batch;
  if ((what & TR_BATCH_INPUTS) && !(l->x = calloc((size_t)l->depth, sizeof *l->x))) return TR_ENOMEM;
  if ((what & TR_BATCH_TARGETS) && !(l->y = calloc((size_t)l->depth, sizeof *l->y))) return TR_ENOMEM;
  const size_t xb = n * tr_model_input_bytes(c->model), yb = n * tr_model_target_bytes(c->model);
  for (int i = 0; i < l->depth; i++)
    if ((l->x && buffer(l, xb, &l->x[i])) || (l->y && buffer(l, yb, &l->y[i])))
      return tr_actor_fail(self, TR_ENOMEM, "allocating %d batch buffers of %zu bytes each: "
                           "out of memory%s%s", l->depth, (l->x ? xb : 0) + (l->y ? yb : 0),
                           l->dev ? ": " : "", l->dev ? tr_device_error(l->dev) : "");
  return 0;
}

/* A credit of every edge in hand (kept across calls until used). */
static bool acquire_all(loader *l) {
  for (int i = 0; i < l->nout; i++)
    if (!l->out[i].held && !(l->out[i].held = tr_edge_acquire(l->out[i].e))) return false;
  return true;
}

/* Tells the worker fed that there is no more (async): a batch of step -1, once a credit of
 * its edges is in hand. False while it waits for one. */
static bool end_of_data(loader *l) {
  if (!acquire_all(l)) return false;
  for (int i = 0; i < l->nout; i++) {
    tr_batch_msg *b = tr_msg_new(&tr_batch_type);
    *b = (tr_batch_msg){.hdr = b->hdr, .step = -1};
    tr_edge_send(l->out[i].e, b);
    l->out[i].held = false;
  }
  return true;
}

static void begin_eval(loader *l, int64_t step) {
  l->eval_step = step;
  l->eval_mb = 0;
  l->eval_m = tr__eval_microbatches(l->run, l->replica);
}

/* The next step this loader fills (or the evaluation at the end), or false once the run has
 * no more for it. */
static bool claim(tr_actor *self, loader *l) {
  const tr__run *run = l->run;
  if (!run->c.async.enabled) { /* the first stage claims the step; the end may have come */
    const int64_t end = tr_graph_end_step(run->g);
    if (l->step < end) return true;
    if (!l->end_evaluated && tr__eval_at_end(run, end)) {
      l->end_evaluated = true;
      begin_eval(l, end);
      if (l->eval_m) return true;
    }
  } else if (!l->claimed && !l->ending) {
    l->step = tr_graph_take_step(run->g, self);
    if (l->step == -2) return false; /* rank 0 answers with a wake-up */
    l->claimed = l->step >= 0;
    l->ending = !l->claimed;
  }
  if (l->claimed) return true;
  if (l->ending && !end_of_data(l)) return false;
  l->done = true;
  tr_graph_done(run->g, self);
  return false;
}

/* Held-out micro-batch eval_mb of the evaluation after step eval_step, a credit of every
 * edge in hand. */
static int send_eval(tr_actor *self, loader *l) {
  const tr__run *run = l->run;
  const tr_model *m = run->c.model;
  const tr_data *data = run->c.eval.data;
  const size_t mb = (size_t)run->mb_batch, xb = tr_model_input_bytes(m),
               yb = tr_model_target_bytes(m);
  uint64_t first;
  size_t share;
  tr__eval_share(run, l->replica, &first, &share);
  const size_t done = (size_t)l->eval_mb * mb, count = share - done < mb ? share - done : mb;
  first += done;
  char *x = l->x ? l->x[l->slot] : NULL, *y = l->y ? l->y[l->slot] : NULL;
  const int rc = tr_data_fill(data, first, count, x, y);
  if (rc)
    return tr_actor_fail(self, rc, "eval.data '%s': held-out samples [%llu, %llu): %s",
                         tr_data_name(data), (unsigned long long)first,
                         (unsigned long long)(first + count),
                         tr_data_error(data)[0] ? tr_data_error(data) : tr_strerror(rc));
  char why[512]; /* no gradient follows to catch a NaN: a ReLU would make it 0 */
  if (tr_data_check_finite(data, m, first, count, x, y, why, sizeof why))
    return tr_actor_fail(self, TR_ENONFINITE, "eval.data '%s': held-out samples [%llu, %llu): "
                         "%s", tr_data_name(data), (unsigned long long)first,
                         (unsigned long long)(first + count), why);
  for (size_t i = count; i < mb; i++) { /* the rest: the first sample again */
    if (x) memcpy(x + i * xb, x, xb);
    if (y) memcpy(y + i * yb, y, yb);
  }
  for (int i = 0; i < l->nout; i++) {
    const unsigned what = l->out[i].what;
    tr_batch_msg *b = tr_msg_new(&tr_batch_type);
    *b = (tr_batch_msg){.hdr = b->hdr, .step = l->eval_step, .mb = l->eval_mb,
                        .count = (int)count, .first = first,
                        .x = what & TR_BATCH_INPUTS ? x : NULL,
                        .y = what & TR_BATCH_TARGETS ? y : NULL,
                        .x_bytes = what & TR_BATCH_INPUTS ? mb * xb : 0,
                        .y_bytes = what & TR_BATCH_TARGETS ? mb * yb : 0, .eval = 1};
    tr_edge_send(l->out[i].e, b);
    l->out[i].held = false;
  }
  l->slot = (l->slot + 1) % l->depth;
  if (++l->eval_mb == l->eval_m) l->eval_m = 0;
  return 0;
}

/* Fills what the credits allow, a millisecond at most in one turn: where the devices are
 * faster than the data (a GPU), credits come back as fast as batches are made, and a loader
 * that never returned would keep its loop's timers (the end of a timed run) and the other
 * loop actors waiting. It asks itself to go on instead. */
static int produce(tr_actor *self, loader *l) {
  const tr_job_config *c = &l->run->c;
  const int M = c->layout.microbatches;
  const int shards = c->async.enabled ? 1 : c->layout.replicas * M;
  const int base = c->async.enabled ? 0 : l->replica * M; /* of the shards */
  const uint64_t t0 = tr_now_ns();
  while (!l->done) {
    if (tr_now_ns() - t0 > TURN_NS) {
      if (!l->resuming) {
        tr_actor_send(self, tr_msg_new(&tr__poll_type));
        l->resuming = true;
      }
      return 0;
    }
    /* an evaluation after a step a timed run never reached is not sent */
    if (l->eval_m && l->eval_step > tr_graph_end_step(l->run->g)) l->eval_m = 0;
    /* mid-step too: the end may come while it waits there */
    if (!l->eval_m && !claim(self, l)) return 0;
    if (!acquire_all(l)) return 0;
    if (l->eval_m) {
      const int rc = send_eval(self, l);
      if (rc) return rc;
      continue;
    }
    uint64_t first;
    size_t count;
    tr_data_shard((uint64_t)l->step, (size_t)c->global_batch, base + l->mb, shards, &first, &count);
    void *x = l->x ? l->x[l->slot] : NULL, *y = l->y ? l->y[l->slot] : NULL;
    const int rc = x || y ? tr_data_fill(c->data, first, count, x, y) : 0;
    if (rc && tr_data_error(c->data)[0]) /* the source's words, which name it */
      return tr_actor_fail(self, rc, "samples [%llu, %llu) of step %lld: %s",
                           (unsigned long long)first, (unsigned long long)(first + count),
                           (long long)l->step, tr_data_error(c->data));
    if (rc)
      return tr_actor_fail(self, rc, "data '%s': samples [%llu, %llu) of step %lld: %s",
                           tr_data_name(c->data), (unsigned long long)first,
                           (unsigned long long)(first + count), (long long)l->step,
                           tr_strerror(rc));
    for (int i = 0; i < l->nout; i++) {
      const unsigned what = l->out[i].generate ? 0 : l->out[i].what;
      tr_batch_msg *b = tr_msg_new(&tr_batch_type);
      *b = (tr_batch_msg){.hdr = b->hdr,
                          .step = l->step,
                          .mb = l->mb,
                          .count = (int)count,
                          .first = first,
                          .x = what & TR_BATCH_INPUTS ? x : NULL,
                          .y = what & TR_BATCH_TARGETS ? y : NULL,
                          .x_bytes = what & TR_BATCH_INPUTS ? count * tr_model_input_bytes(c->model) : 0,
                          .y_bytes = what & TR_BATCH_TARGETS ? count * tr_model_target_bytes(c->model) : 0,
                          .generate = l->out[i].generate};
      tr_edge_send(l->out[i].e, b);
      l->out[i].held = false;
    }
    l->slot = (l->slot + 1) % l->depth;
    if (++l->mb == M) {
      l->mb = 0;
      l->step++;
      l->claimed = false;
      if (tr__eval_due(l->run, l->step)) begin_eval(l, l->step);
    }
  }
  return 0;
}

static int loader_receive(tr_actor *self, tr_msg *msg) {
  loader *l = tr_actor_state(self);
  if (msg->type == &tr__poll_type) l->resuming = false;
  /* Credits, the end of the run, the poll: try again. */
  return produce(self, l);
}

static int loader_run(tr_actor *self) {
  int rc = loader_start(self);
  return rc ? rc : produce(self, tr_actor_state(self));
}

static void loader_destroy(void *state) {
  loader *l = state;
  for (int i = 0; i < l->depth; i++) {
    void *bufs[2] = {l->x ? l->x[i] : NULL, l->y ? l->y[i] : NULL};
    for (int k = 0; k < 2; k++) {
      if (bufs[k] && l->dev) tr_host_free(l->dev, bufs[k]);
      else free(bufs[k]);
    }
  }
  free(l->x);
  free(l->y);
  free(l);
}

const tr_behaviour tr__loader_behaviour = {
    .name = "loader", .start = loader_run, .receive = loader_receive, .destroy = loader_destroy};

/* A held-out micro-batch: up to a whole micro-batch of samples of eval.data, in buffers of a
 * whole one. */
static const char *eval_check(const tr__run *run, const tr_batch_msg *b, unsigned what,
                              bool last, char *buf, size_t n) {
  const tr_model *m = run->c.model;
  const size_t k = (size_t)run->mb_batch;
  const bool want_x = what & TR_BATCH_INPUTS, want_y = (what & TR_BATCH_TARGETS) && last;
  if (run->c.eval.data && !b->generate && b->count >= 1 && b->count <= run->mb_batch &&
      (!want_x || (b->x && b->x_bytes == k * tr_model_input_bytes(m))) &&
      (!want_y || (b->y && b->y_bytes == k * tr_model_target_bytes(m))))
    return NULL;
  if (!run->c.eval.data) {
    snprintf(buf, n, "is held out (eval), and the job evaluates nothing (eval.data NULL)");
    return buf;
  }
  snprintf(buf, n, "of %d held-out samples (%zu bytes of inputs, %zu of targets): this stage "
           "takes held-out micro-batches of 1 to %d samples in buffers of %d (%zu and %zu "
           "bytes)", b->count, b->x ? b->x_bytes : 0, b->y ? b->y_bytes : 0, run->mb_batch,
           run->mb_batch, want_x ? k * tr_model_input_bytes(m) : 0,
           want_y ? k * tr_model_target_bytes(m) : 0);
  return buf;
}

const char *tr__batch_check(const tr__run *run, const tr_batch_msg *b, unsigned what,
                            bool last, char *buf, size_t n) {
  const tr_data *data = run->c.data;
  const int want = run->mb_batch;
  if (b->step < 0) return NULL; /* the end of a worker's batches */
  if (b->eval) return eval_check(run, b, what, last, buf, n);
  if (b->generate) {
    if (b->count == want && tr_data_can_generate(data)) return NULL;
    snprintf(buf, n, "of %d samples to generate on the device: this stage takes micro-batches "
             "of %d samples, and data '%s' %s be generated on a device", b->count, want,
             tr_data_name(data), tr_data_can_generate(data) ? "can" : "cannot");
    return buf;
  }
  const bool want_x = what & TR_BATCH_INPUTS, want_y = what & TR_BATCH_TARGETS;
  const tr_model *m = run->c.model;
  const size_t k = (size_t)want;
  if (b->count == want && (!want_x || (b->x && b->x_bytes == k * tr_model_input_bytes(m))) &&
      (!want_y || !last || (b->y && b->y_bytes == k * tr_model_target_bytes(m))))
    return NULL;
  snprintf(buf, n, "of %d samples (%zu bytes of inputs, %zu of targets): this stage takes "
           "micro-batches of %d samples with %s (%zu and %zu bytes)", b->count,
           b->x ? b->x_bytes : 0, b->y ? b->y_bytes : 0, want,
           want_x && want_y ? "inputs and targets" : want_x ? "inputs" : "targets",
           want_x ? k * tr_model_input_bytes(m) : 0, want_y ? k * tr_model_target_bytes(m) : 0);
  return buf;
}
