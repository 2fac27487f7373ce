/* server.c — the parameter server (pinned): the master parameters and the optimizer state of
 * an asynchronous job, on one device.
 *
 * The protocol's messages are worker.h's. Each push is one update, whole within one
 * callback, so the parameters are never seen half updated: the gradient is copied in from the worker's memory, its staleness (versions
 * applied since the worker pulled) and the worker's distance from the server are measured,
 * delay compensation (DC-ASGD) and the staleness-scaled step size apply when asked, and the
 * optimizer steps (clipping, when configured, by this push's own norm). Then the push's
 * credit goes back and the worker gets its reply — with the parameters copied into its
 * memory when it pulled — unless SSP holds it: a worker more than `staleness` pushes ahead
 * of the slowest worker still running waits until that one catches up or leaves.
 *
 * The worker's gradient and parameters (those it pulled: it never changes them) are read in
 * place where the device can (host devices; logical devices of one GPU), else staged. A
 * worker of another process pushes host copies and gets the parameters it pulls with its
 * reply (worker.c's codecs).
 *
 * Hogwild!: the server's first reply lends each worker its parameters and optimizer state;
 * the workers update them in place with no lock, and their pushes only count the updates
 * and their staleness. The parameters then outlive the workers: they are freed once every
 * thread has stopped (server_destroy).
 *
 * Checkpoint parts and, at the end, the figures go to the coordinator on the report edge;
 * a part that finds no credit waits, superseded by a later one, so updates never wait.
 *
 * Workers come and go (server_members.c): one that joins a running job (async.join_at) is
 * welcomed with the parameters of that moment — in one process its slot stays empty until
 * then: the server asks for it (join.h) and fills the slot from the first message on its
 * push edge; one that fails leaves (async.elastic), and
 * the server goes on with the others, SSP counting only those still running.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "metrics.h"
#include "server_impl.h"
#include "tr_trace.h"

/* The server's figures: flat (it crosses the untyped report edge). */
TR_MSGTYPE_DEFINE_CODEC(tr__server_done_type, tr__server_done_msg, &tr_msg_codec_flat);
/* A worker that joined: its edges (join.h), in one process only. */
TR_MSGTYPE_DEFINE(tr__joined_type, tr__joined_msg);



void *tr__server_new(const tr__run *run, tr_device *dev) {
  server *sv = calloc(1, sizeof *sv);
  if (sv == NULL) return NULL;
  sv->run = run;
  sv->dev = dev;
  sv->W = run->c.layout.replicas;
  if ((sv->w = calloc((size_t)sv->W, sizeof *sv->w)) == NULL) {
    free(sv);
    return NULL;
  }
  return sv;
}

int tr__server_set_worker(void *state, int w, tr_edge *push, tr_edge *reply, tr_device *dev) {
  server *sv = state;
  if (w < 0 || w >= sv->W || sv->w[w].push) return TR_EINVAL;
  sv->w[w].push = push;
  sv->w[w].reply = reply;
  sv->w[w].dev = dev;
  sv->w[w].active = true;
  sv->active++;
  return 0;
}

void tr__server_set_report(void *state, tr_edge *report) { ((server *)state)->report = report; }

int tr__server_fail_device(tr_actor *self, server *sv, const char *what) {
  const char *why = sv->st ? tr_stage_error(sv->st) : tr_device_error(sv->dev);
  return tr_actor_fail(self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(sv->dev), why);
}

/* Worker i's events and buffers, once its device is known: at the start, or as it joins. */
int tr__server_open_worker(server *sv, int i) {
  const tr_job_config *jc = &sv->run->c;
  tr_actor *self = sv->self;
  worker *w = &sv->w[i];
  if (tr_event_open(sv->dev, TR_EVENT_DEFAULT, &w->reply_ev))
    return tr__server_fail_device(self, sv, "opening events");
  w->remote = tr_device_is_placeholder(w->dev);
  w->direct = !w->remote && tr_device_can_access_peer(sv->dev, w->dev) == 1;
  w->joined = !tr__worker_joins(jc, i);
  if (jc->async.hogwild && !w->direct)
    return tr_actor_fail(self, TR_EINVAL, "async.hogwild: worker %d on %s cannot reach the "
                         "server's memory on %s (host devices of one process only)", i,
                         tr_device_name(w->dev), tr_device_name(sv->dev));
  if ((w->remote || !w->joined) && /* a joining worker's parameters go with the reply */
      tr_host_alloc(sv->dev, (sv->numel ? sv->numel : 1) * sizeof(float), (void **)&w->host))
    return tr__server_fail_device(self, sv, "allocating a remote worker's pull buffer");
  if (!sv->scratch && !w->direct &&
      tr_device_alloc(sv->dev, (sv->numel ? sv->numel : 1) * sizeof(float), (void **)&sv->scratch))
    return tr__server_fail_device(self, sv, "allocating the staging buffer");
  return 0;
}

static int server_open(tr_actor *self) {
  server *sv = tr_actor_state(self);
  const tr__run *run = sv->run;
  const tr_job_config *jc = &run->c;
  sv->self = self;
  int deferred = 0; /* workers that join the running job: their slots filled then */
  for (int i = 0; i < sv->W; i++) deferred += sv->w[i].deferred;
  if (sv->active < sv->W - deferred || sv->report == NULL)
    return tr_actor_fail(self, TR_EINVAL, "the server is not wired: it serves %d of %d workers "
                         "(tr_job_serve)%s", sv->active, sv->W - deferred,
                         sv->report ? "" : " and has no coordinator (tr_job_add_coordinator)");
  if (tr_device_bind(sv->dev)) return tr__server_fail_device(self, sv, "binding the device");
  tr_trace_label(self, tr_device_name(sv->dev));
  tr_stage_config c = {.batch = run->mb_batch,
                       .slots = 0,
                       .global_batch = jc->global_batch,
                       .seed = jc->seed,
                       .optim = jc->optim};
  if (tr_stage_open(&sv->st, jc->model, sv->dev, &c, sv->err, sizeof sv->err))
    return tr_actor_fail(self, TR_EDEVICE, "opening the server's parameters on %s: %s",
                         tr_device_name(sv->dev), sv->err);
  if (jc->checkpoint.resume_from &&
      tr__stage_load(sv->st, jc->checkpoint.resume_from, sv->err, sizeof sv->err))
    return tr_actor_fail(self, TR_EFORMAT, "%s", sv->err);
  sv->s = tr_stage_stream(sv->st);
  sv->numel = tr_stage_info_of(sv->st)->numel;
  sv->lr = jc->optim.lr;
  for (int i = 0; i < sv->W; i++) {
    int rc = sv->w[i].deferred ? 0 : tr__server_open_worker(sv, i);
    if (rc) return rc;
  }
  /* two per push in flight, and the gradient's norm at NORM */
  if (tr_device_alloc(sv->dev, (NORM + 1) * sizeof(float), (void **)&sv->stats_dev) ||
      tr_host_alloc(sv->dev, (NORM + 1) * sizeof(float), (void **)&sv->stats_host))
    return tr__server_fail_device(self, sv, "allocating the statistics");
  for (int i = 0; i < STATS_RING; i++)
    if (tr_event_open(sv->dev, TR_EVENT_DEFAULT, &sv->stats_ev[i]))
      return tr__server_fail_device(self, sv, "opening events");
  const int64_t end = tr_graph_end_step(run->g);
  sv->busy = tr__busy_begin(0, end == INT64_MAX ? INT64_MAX : end - tr_graph_first_step(run->g));
  for (int i = 0; i < sv->W && jc->async.hogwild; i++) {
    tr__reply_msg *r = tr_msg_new(&tr__reply_type);
    r->pulled = false;
    r->version = 0;
    r->ready = NULL;
    r->params = NULL;
    r->numel = 0;
    r->share = sv->st;
    r->applied = &sv->applied;
    r->ended = false;
    sv->lent = true;
    int rc = tr_edge_send_control(sv->w[i].reply, r);
    if (rc) return rc;
  }
  return tr__server_welcome(self, sv); /* a resumed run may be past the step they join at */
}

/* Reads the distance measurements that have landed (all of them, `wait`ing if asked). */
static int harvest(tr_actor *self, server *sv, bool wait) {
  while (sv->stats_read < sv->stats_issued) {
    const int k = (int)(sv->stats_read % STATS_RING);
    int q = wait ? (tr_event_synchronize(sv->stats_ev[k]) ? -1 : 1) : tr_event_query(sv->stats_ev[k]);
    if (q < 0) return tr__server_fail_device(self, sv, "reading the workers' distance");
    if (q == 0) break;
    const double diff = sv->stats_host[2 * k], norm = sv->stats_host[2 * k + 1];
    sv->fig.consistency_sum += norm > 0 ? sqrt(diff / norm) : sqrt(diff);
    sv->fig.consistency_n++;
    sv->stats_read++;
  }
  return 0;
}

/* Replies to every held worker SSP lets go: one at most `staleness` pushes ahead of the
 * slowest worker still running (that has joined). */
static int serve(tr_actor *self, server *sv) {
  int64_t slowest = INT64_MAX;
  for (int i = 0; i < sv->W; i++)
    if (sv->w[i].active && sv->w[i].joined && sv->w[i].clock < slowest) slowest = sv->w[i].clock;
  const int S = sv->run->c.async.staleness;
  for (int i = 0; i < sv->W; i++) {
    worker *w = &sv->w[i];
    if (!w->waiting) continue;
    const int64_t gap = w->clock - slowest;
    if (S >= 0 && gap > S) continue;
    if (gap > sv->fig.clock_gap_max) sv->fig.clock_gap_max = (int)gap;
    const size_t bytes = sv->numel * sizeof(float);
    if (w->pull && (w->remote ? tr_memcpy(sv->s, w->host, tr_stage_params(sv->st), bytes,
                                          TR_COPY_D2H) || tr_stream_synchronize(sv->s)
                              : tr_memcpy_peer(sv->s, w->params, w->dev,
                                               tr_stage_params(sv->st), sv->dev, bytes)))
      return tr__server_fail_device(self, sv, "sending parameters");
    if (w->pull) sv->fig.sent += (int64_t)bytes;
    if (tr_event_record(w->reply_ev, sv->s)) return tr__server_fail_device(self, sv, "replying");
    tr__reply_msg *r = tr_msg_new(&tr__reply_type);
    r->pulled = w->pull;
    r->version = sv->version;
    r->ready = w->reply_ev;
    r->params = w->remote && w->pull ? w->host : NULL; /* the worker copies them in */
    r->numel = sv->numel;
    r->share = NULL;
    r->applied = NULL;
    r->ended = false;
    w->waiting = false;
    int rc = tr_edge_send_control(w->reply, r);
    if (rc) return rc;
  }
  return 0;
}

/* A copy of the parameters after update `step`, for the coordinator: held until the report
 * edge has a credit, and superseded by a later one meanwhile (the file would be
 * overwritten by it anyway), so the updates never wait for the checkpoint's writer. */
static int snapshot(tr_actor *self, server *sv, int64_t step) {
  tr__part_msg *p = tr_msg_new(&tr__part_type);
  p->source = sv->W;
  p->stage = 0;
  p->step = step;
  p->due = TR__DUE_CHECKPOINT;
  if (tr__stage_snapshot(sv->st, &p->part, true)) {
    tr_msg_free(p);
    return tr__server_fail_device(self, sv, "copying the parameters for a checkpoint");
  }
  if (sv->pending) {
    tr__part_free(&sv->pending->part);
    tr_msg_free(sv->pending);
  }
  sv->pending = p;
  return 0;
}

/* 1 when no checkpoint part waits any more, 0 while one waits for a credit. */
static int send_pending(server *sv) {
  if (sv->pending == NULL) return 1;
  if (!tr_edge_acquire(sv->report)) return 0;
  tr_edge_send(sv->report, sv->pending);
  sv->pending = NULL;
  return 1;
}

/* An update applied (by the server, or a Hogwild! worker): its staleness, the worker's clock,
 * the push's credit back, checkpoints. */
static int count_update(tr_actor *self, server *sv, worker *w, int64_t stale) {
  const tr__run *run = sv->run;
  sv->fig.hist[stale < TR_TRAIN_STALENESS_BINS ? stale : TR_TRAIN_STALENESS_BINS - 1]++;
  sv->fig.staleness_sum += (double)stale;
  if (stale > sv->fig.staleness_max) sv->fig.staleness_max = stale;
  sv->version++;
  w->clock++;
  /* The gradient is read by everything queued on the stream so far: the worker's next push
   * may come (it waits for the reply's event before writing its gradients again). */
  tr_edge_release(w->push, 1);
  const int64_t step = tr_graph_first_step(run->g) + sv->version;
  const int64_t every = run->c.checkpoint.every;
  if (run->c.checkpoint.path && every > 0 && step % every == 0 && step < tr_graph_end_step(run->g)) {
    int rc = snapshot(self, sv, step);
    if (rc) return rc;
    send_pending(sv);
  }
  return 0;
}

/* One push, one update. */
static int apply(tr_actor *self, server *sv, const tr__push_msg *m) {
  const tr_async_config *ac = &sv->run->c.async;
  worker *w = &sv->w[m->worker];
  if (ac->hogwild) {
    sv->fig.skipped += m->skipped;
    return count_update(self, sv, w, m->applied - m->version);
  }
  const uint64_t t0 = tr__busy_start(&sv->busy, self, sv->version, "update", -1);
  const size_t bytes = sv->numel * sizeof(float);
  float *params = tr_stage_params(sv->st), *grads = m->grads;
  const float *pulled = m->params;
  if (w->remote) { /* host memory of its message, complete; given back with the credit */
    grads = NULL;
    if (tr_memcpy(sv->s, tr_stage_grads(sv->st), m->grads, bytes, TR_COPY_H2D) ||
        tr_memcpy(sv->s, sv->scratch, m->params, bytes, TR_COPY_H2D) ||
        tr_stream_synchronize(sv->s))
      return tr__server_fail_device(self, sv, "copying a push from another process");
    pulled = sv->scratch;
  } else if (tr_stream_wait_event(sv->s, m->ready)) {
    return tr__server_fail_device(self, sv, "waiting for a push");
  } else if (!w->direct) {
    grads = NULL;
    if (tr_memcpy_peer(sv->s, tr_stage_grads(sv->st), sv->dev, m->grads, m->dev, bytes) ||
        tr_memcpy_peer(sv->s, sv->scratch, sv->dev, m->params, m->dev, bytes))
      return tr__server_fail_device(self, sv, "copying a push");
    pulled = sv->scratch;
  }
  tr_stage_use_grads(sv->st, grads); /* the worker's, in place; NULL: the copy */
  grads = tr_stage_grads(sv->st);

  /* the worker's distance from the server at the push */
  const int64_t stale = sv->version - m->version;
  if (sv->stats_issued - sv->stats_read == STATS_RING && harvest(self, sv, true)) return TR_EDEVICE;
  const int k = (int)(sv->stats_issued % STATS_RING);
  float *d2 = &sv->stats_dev[2 * k];
  if (tr_mse_forward(sv->s, &d2[0], pulled, params, sv->numel, 1.0f) || /* Σ (θ_w − θ)² */
      tr_sumsq(sv->s, &d2[1], params, sv->numel, 0) ||
      tr_memcpy(sv->s, &sv->stats_host[2 * k], d2, 2 * sizeof(float), TR_COPY_D2H) ||
      tr_event_record(sv->stats_ev[k], sv->s))
    return tr__server_fail_device(self, sv, "measuring a worker's distance");
  sv->stats_issued++;

  if (ac->dc_lambda > 0 && tr_dc_asgd(sv->s, grads, params, pulled, sv->numel, ac->dc_lambda))
    return tr__server_fail_device(self, sv, "delay compensation");
  if (ac->staleness_lr) tr_stage_set_lr(sv->st, stale > 1 ? sv->lr / (float)stale : sv->lr);
  double norm2;
  if (tr__norm2_now(sv->s, grads, sv->numel, &sv->stats_dev[NORM], &sv->stats_host[NORM], &norm2))
    return tr__server_fail_device(self, sv, "the gradient's norm");
  if (!isfinite(norm2)) {
    if (sv->run->c.on_nonfinite != TR_NONFINITE_SKIP)
      return tr_actor_fail(self, TR_ENONFINITE, "update %lld (worker %d's gradient of step "
                           "%lld) on %s: the gradient norm is %s: the run diverged "
                           "(on_nonfinite skip goes on without such updates)",
                           (long long)(tr_graph_first_step(sv->run->g) + sv->version + 1),
                           m->worker, (long long)m->step, tr_device_name(sv->dev),
                           tr__nonfinite_name(norm2));
    sv->fig.skipped++; /* the parameters stay as they were */
  } else if (tr_stage_step(sv->st, NULL)) {
    return tr__server_fail_device(self, sv, "optimizer step");
  }
  tr_stage_use_grads(sv->st, NULL);
  w->params = m->params;
  w->waiting = true;
  w->pull = m->pull;
  int rc = count_update(self, sv, w, stale);
  if (rc == 0) rc = harvest(self, sv, false);
  if (rc == 0) rc = tr__server_welcome(self, sv);
  if (rc == 0) rc = serve(self, sv);
  tr__busy_add(&sv->busy, self, sv->version - 1, "update", t0, -1);
  return rc;
}

/* The server's figures, as pairs of the table of run metrics (run_metrics.h): the run's
 * steps are its updates. */
static void send_figures(const server *sv, tr__figures *f) {
  const figures *g = &sv->fig;
  const int64_t n = sv->version;
  *f = (tr__figures){0};
  tr__figures_int(f, TR__M_STEPS, tr_graph_first_step(sv->run->g) + n);
  tr__figures_int(f, TR__M_SERVER_BUSY_NS, (int64_t)sv->busy.busy_ns);
  tr__figures_int(f, TR__M_SKIPPED_STEPS, g->skipped);
  tr__figures_real(f, TR__M_STALENESS_MEAN, n ? g->staleness_sum / (double)n : NAN);
  tr__figures_real(f, TR__M_STALENESS_MAX, n ? (double)g->staleness_max : NAN);
  for (int b = 0; b < TR_TRAIN_STALENESS_BINS; b++)
    if (g->hist[b]) tr__figures_bin(f, TR__M_STALENESS_HIST, b, g->hist[b]);
  tr__figures_int(f, TR__M_CLOCK_GAP_MAX, g->clock_gap_max);
  tr__figures_int(f, TR__M_COMM_BYTES, g->sent);
  tr__figures_real(f, TR__M_CONSISTENCY, g->consistency_n ? g->consistency_sum /
                                                                (double)g->consistency_n
                                                          : NAN);
  tr__server_members_figures(sv, f);
}

/* Every worker has left: the last checkpoint part and the figures go to the coordinator,
 * each once a credit is free. */
static int finish(tr_actor *self, server *sv) {
  const tr__run *run = sv->run;
  if (!sv->finishing) {
    if (tr_stream_synchronize(sv->s)) return tr__server_fail_device(self, sv, "finishing the run");
    int rc = harvest(self, sv, true);
    if (rc == 0) rc = tr__server_tell_departed(sv);
    if (rc) return rc;
    sv->finishing = true;
  }
  if (!sv->saved && run->c.checkpoint.path) {
    int rc = snapshot(self, sv, tr_graph_first_step(run->g) + sv->version);
    if (rc) return rc;
  }
  sv->saved = true;
  if (!send_pending(sv) || !tr_edge_acquire(sv->report)) return 0;
  tr__server_done_msg *d = tr_msg_new(&tr__server_done_type);
  d->source = sv->W;
  send_figures(sv, &d->fig);
  tr_edge_send(sv->report, d);
  sv->done = true;
  tr_graph_done(run->g, self);
  return 0;
}

static int server_receive(tr_actor *self, tr_msg *msg) {
  server *sv = tr_actor_state(self);
  if (sv->done) return 0;
  if (sv->finishing) return finish(self, sv); /* a credit of the report edge */
  if (msg->type == &tr_edge_credit_type) send_pending(sv);
  if (msg->type == &tr__push_type) {
    const tr__push_msg *m = (const tr__push_msg *)msg;
    if (!sv->w[m->worker].active) { /* of a rank lost meanwhile (job.c: lost_rank) */
      tr_edge_release(sv->w[m->worker].push, 1);
      return 0;
    }
    return apply(self, sv, m);
  }
  if (msg->type == &tr__joined_type) return tr__server_joined(self, sv, (const tr__joined_msg *)msg);
  if (msg->type == &tr__leave_type) {
    const tr__leave_msg *l = (const tr__leave_msg *)msg;
    if (!sv->w[l->worker].active) return 0; /* its rank lost after it had left */
    tr_edge_release(sv->w[l->worker].push, 1);
    sv->w[l->worker].active = false;
    if (l->left) tr__server_depart(sv, l);
    else sv->no_steps = true; /* its loader found no more steps (a worker that joins: none) */
    sv->active--;
    int rc = tr__server_welcome(self, sv); /* the last that trained may have left */
    if (rc == 0 && sv->active == 0)
      return sv->departed == sv->W ? tr__server_all_departed(self, sv) : finish(self, sv);
    return rc ? rc : serve(self, sv); /* the slowest may have left */
  }
  return 0; /* credits; tr_graph_end_msg: the workers' leaving says when it is over */
}

static void server_stop(tr_actor *self) {
  server *sv = tr_actor_state(self);
  if (sv->s) tr_stream_synchronize(sv->s);
  for (int i = 0; i < sv->W; i++) {
    if (sv->w[i].reply_ev) tr_event_close(sv->w[i].reply_ev);
    if (sv->w[i].host) tr_host_free(sv->dev, sv->w[i].host);
    sv->w[i].host = NULL;
  }
  for (int i = 0; i < STATS_RING; i++)
    if (sv->stats_ev[i]) tr_event_close(sv->stats_ev[i]);
  if (sv->stats_dev) tr_device_free(sv->dev, sv->stats_dev);
  if (sv->stats_host) tr_host_free(sv->dev, sv->stats_host);
  if (sv->scratch) tr_device_free(sv->dev, sv->scratch);
  if (!sv->lent) {
    tr_stage_close(sv->st);
    sv->st = NULL;
  }
}

static int server_start(tr_actor *self) {
  int rc = server_open(self);
  if (rc) server_stop(self); /* a failed start gets no stop callback */
  return rc;
}

static void server_destroy(void *state) {
  server *sv = state;
  if (sv->st) { /* lent to Hogwild! workers, whose threads have all stopped by now */
    tr_device_bind(sv->dev);
    tr_stage_close(sv->st);
  }
  if (sv->pending) {
    tr__part_free(&sv->pending->part);
    tr_msg_free(sv->pending);
  }
  free(sv->w);
  free(sv);
}

const tr_behaviour tr__server_behaviour = {.name = "server",
                                           .start = server_start,
                                           .receive = server_receive,
                                           .stop = server_stop,
                                           .destroy = server_destroy};
