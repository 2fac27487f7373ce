/* coordinator.c — the coordinator actor (libuv loop): gathers every step's loss from the
 * stages that compute it, shows progress, sends observers their reports, writes checkpoints
 * from the stages' parts, and turns the final reports into the run's figures (the
 * definitions of docs/WORKLOADS.md).
 *
 * Every message comes on a report edge from one source (a stage, or the server) and gives
 * its credit back as soon as it is handled. A step's loss is complete once every replica's
 * last stage has sent its share (asynchronous jobs: the worker that took the step;
 * losses.h). Each observer gets a report per `every` complete steps, timed by when the
 * steps ended on their stages; reports wait for credits, and one that falls far behind
 * hears of several intervals at once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "losses.h"
#include "world.h"

enum { PENDING = 4,              /* checkpoints being assembled at once */
       PROGRESS_NS = 100 * 1000 * 1000 };

typedef struct pending {
  int64_t step;
  int got;
  tr__part parts[TR__MAX_STAGES];
} pending;

/* An observer's reports: the interval being gathered, and those waiting for a credit. */
typedef struct observer {
  tr_edge *edge;
  int every;
  double sum;          /* of the interval's finite losses */
  int64_t n, finite;   /* its steps so far, those with a finite loss */
  uint64_t from_t;     /* when the step before it ended */
  tr_report_msg *queue; /* waiting for a credit (the headers unused) */
  int nq, capq;
  bool told_last;
} observer;

enum { QUEUE_MAX = 64 }; /* reports an observer may fall behind before they merge */

typedef struct coordinator {
  const tr__run *run;
  tr_actor *self;
  uint64_t t_start, last_progress;
  uint64_t last_end, slowest; /* when the last complete step ended; the longest step */
  bool printed;
  int nsources;
  tr_edge **sources;         /* [source]: its report edge */
  observer *obs;
  int nobs;
  pending ck[PENDING];
  tr__report *dones;         /* [stage source] */
  tr__server_report server;  /* async */
  int ndone;
  bool finished, done;       /* every source is done: the figures are in; so are the reports */
  tr__loss_book losses;
  tr_train_result result;
} coordinator;

void *tr__coordinator_new(const tr__run *run) {
  coordinator *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  const tr_layout_config *l = &run->c.layout;
  c->run = run;
  c->nsources = l->replicas * l->stages + (run->c.async.enabled != 0);
  c->sources = calloc((size_t)c->nsources, sizeof *c->sources);
  c->dones = calloc((size_t)(l->replicas * l->stages), sizeof *c->dones);
  if (c->sources == NULL || c->dones == NULL) {
    free(c->sources);
    free(c->dones);
    free(c);
    return NULL;
  }
  for (int i = 0; i < PENDING; i++) c->ck[i].step = -1;
  return c;
}

int tr__coordinator_add_source(void *state, int source, tr_edge *e) {
  coordinator *c = state;
  if (source < 0 || source >= c->nsources || c->sources[source]) return TR_EINVAL;
  c->sources[source] = e;
  return 0;
}

int tr__coordinator_add_observer(void *state, tr_edge *e, int every) {
  coordinator *c = state;
  observer *grown = realloc(c->obs, (size_t)(c->nobs + 1) * sizeof *grown);
  if (grown == NULL) return TR_ENOMEM;
  c->obs = grown;
  c->obs[c->nobs++] = (observer){.edge = e, .every = every};
  return 0;
}

const tr_train_result *tr__coordinator_result(const void *state) {
  return &((const coordinator *)state)->result;
}

static int coordinator_start(tr_actor *self) {
  coordinator *c = tr_actor_state(self);
  c->self = self;
  for (int s = 0; s < c->nsources; s++)
    if (c->sources[s] == NULL)
      return tr_actor_fail(self, TR_EINVAL, "the coordinator has no report edge from %s %d: "
                           "every stage (and the server) must be added to the job",
                           s < c->run->c.layout.replicas * c->run->c.layout.stages ? "stage"
                                                                                 : "the server",
                           s);
  const tr_job_config *jc = &c->run->c;
  tr_graph *g = c->run->g;
  const int64_t end = tr_graph_end_step(g), first = tr_graph_first_step(g);
  if (tr__loss_book_init(&c->losses, first, jc->async.enabled ? 1 : jc->layout.replicas,
                         jc->async.enabled, end == INT64_MAX ? 0 : end - first))
    return tr_actor_fail(self, TR_ENOMEM, "the losses of the last 1%% of %lld steps: out of "
                         "memory (%lld bytes asked for)", (long long)(end - first),
                         (long long)(((end - first) / 100 + 1) * (int64_t)sizeof(double)));
  c->t_start = c->last_end = tr_now_ns();
  for (int i = 0; i < c->nobs; i++) c->obs[i].from_t = c->t_start;
  return 0;
}

/* The watchdog fits the run: a step much slower than any seen so far is a hang, a step as
 * slow as the others is not. Asynchronous steps end interleaved, a worker's each in turn. */
static void fit_watchdog(coordinator *c, uint64_t t) {
  const tr_job_config *jc = &c->run->c;
  uint64_t took = t > c->last_end ? t - c->last_end : 0;
  c->last_end = t > c->last_end ? t : c->last_end;
  if (jc->async.enabled) took *= (uint64_t)jc->layout.replicas;
  if (jc->watchdog_steps <= 0 || took <= c->slowest) return;
  c->slowest = took;
  const double ms = (double)took / 1e6 * jc->watchdog_steps;
  const int want = ms > INT32_MAX ? INT32_MAX : ms > jc->watchdog_min_ms ? (int)ms : jc->watchdog_min_ms;
  tr_system *sys = tr_graph_system(c->run->g);
  if (want != tr_system_watchdog_ms(sys)) tr_system_set_watchdog_ms(sys, want);
}

/* ---- observers -------------------------------------------------------------------------- */

/* Sends what waits while credits last. */
static void flush(observer *o) {
  int sent = 0;
  while (sent < o->nq && tr_edge_acquire(o->edge)) {
    tr_report_msg *r = tr_msg_new(&tr_report_type);
    const tr_msg hdr = r->hdr;
    *r = o->queue[sent++];
    r->hdr = hdr;
    tr_edge_send(o->edge, r);
    o->told_last |= r->last;
  }
  if (sent == 0) return;
  memmove(o->queue, o->queue + sent, (size_t)(o->nq - sent) * sizeof *o->queue);
  o->nq -= sent;
}

/* The stages' clocks and the coordinator's are one monotonic clock, but a step may end on
 * a stage a moment before the coordinator started. */
static double seconds_between(uint64_t t0, uint64_t t1) {
  return t1 > t0 ? (double)(t1 - t0) / 1e9 : 0;
}

/* The mean of two means of n and m values (NaN stands for none: n or m is 0). */
static double mean_of(double x, int64_t n, double y, int64_t m) {
  return n + m == 0 ? NAN : ((n ? x * (double)n : 0) + (m ? y * (double)m : 0)) / (double)(n + m);
}

/* The interval gathered so far, as a report, queued; one that falls far behind merges its
 * last two reports into one. */
static int report(coordinator *c, observer *o, int64_t step, double last_loss, uint64_t t,
                  bool last) {
  if (o->nq == o->capq) {
    const int cap = o->capq ? 2 * o->capq : 4;
    tr_report_msg *q = realloc(o->queue, (size_t)cap * sizeof *q);
    if (q == NULL) return TR_ENOMEM;
    o->queue = q;
    o->capq = cap;
  }
  const int64_t first = tr_graph_first_step(c->run->g);
  o->queue[o->nq++] = (tr_report_msg){
      .step = step,
      .steps = o->n,
      .loss = o->finite ? o->sum / (double)o->finite : NAN,
      .last_loss = last_loss,
      .samples = (step - first) * c->run->c.global_batch,
      .seconds = seconds_between(c->t_start, t),
      .step_seconds = o->n ? seconds_between(o->from_t, t) / (double)o->n : NAN,
      .last = last};
  if (o->nq > QUEUE_MAX) { /* the older of the last two takes the newer in */
    tr_report_msg *a = &o->queue[o->nq - 2], *b = &o->queue[o->nq - 1];
    a->loss = mean_of(a->loss, a->steps, b->loss, b->steps);
    a->step_seconds = mean_of(a->step_seconds, a->steps, b->step_seconds, b->steps);
    a->steps += b->steps;
    a->step = b->step;
    a->last_loss = b->last_loss;
    a->samples = b->samples;
    a->seconds = b->seconds;
    a->last = b->last;
    o->nq--;
  }
  o->sum = 0;
  o->n = o->finite = 0;
  o->from_t = t;
  return 0;
}

typedef struct step_ctx {
  coordinator *c;
  int rc;
} step_ctx;

static void on_step(void *arg, int64_t step, double loss, uint64_t t) {
  step_ctx *x = arg;
  fit_watchdog(x->c, t);
  for (int i = 0; i < x->c->nobs && x->rc == 0; i++) {
    observer *o = &x->c->obs[i];
    if (isfinite(loss)) o->sum += loss, o->finite++; /* a skipped step's (on_nonfinite) */
    if (++o->n == o->every) x->rc = report(x->c, o, step + 1, loss, t, false);
  }
}

/* Every observer told of the end (the rest of its steps in a last report): the
 * coordinator's part is over. */
static int maybe_done(coordinator *c) {
  if (!c->finished || c->done) return 0;
  bool all = true;
  for (int i = 0; i < c->nobs; i++) {
    observer *o = &c->obs[i];
    const bool queued = o->nq && o->queue[o->nq - 1].last;
    if (!o->told_last && !queued) {
      int rc = report(c, o, tr_graph_first_step(c->run->g) + c->losses.complete,
                      tr__loss_book_last(&c->losses), tr_now_ns(), true);
      if (rc) return rc;
    }
    flush(o);
    all &= o->told_last;
  }
  if (!all) return 0; /* a credit message brings the coordinator back */
  c->done = true;
  tr_graph_done(c->run->g, c->self);
  return 0;
}

/* ---- progress ------------------------------------------------------------------------------ */

static void show_progress(coordinator *c) {
  const uint64_t now = tr_now_ns();
  const int64_t done = c->losses.complete;
  if (done == 0 || now - c->last_progress < PROGRESS_NS) return;
  c->last_progress = now;
  tr_graph *g = c->run->g;
  const int64_t first = tr_graph_first_step(g), end = tr_graph_end_step(g);
  const int64_t step = first + done;
  const double secs = (double)(now - c->t_start) / 1e9;
  const double rate = secs > 0 ? (double)done / secs : 0;
  const double eta = end == INT64_MAX || rate <= 0 ? 0 : (double)(end - step) / rate;
  fprintf(stderr, "\r\033[Kstep %lld", (long long)step);
  if (end != INT64_MAX) fprintf(stderr, "/%lld", (long long)end);
  fprintf(stderr, "  loss %.4g  %.0f samples/s  ETA %.0fs", tr__loss_book_last(&c->losses),
          rate * c->run->c.global_batch, eta > 0 ? eta : 0);
  c->printed = true;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

/* Each stage of replica 0 sends its part; under ZeRO every replica's stage sends its shard
 * of the optimizer state too, and the stage's part is whole once all have come. */
static int add_part(tr_actor *self, coordinator *c, tr__part_msg *p) {
  const tr_job_config *jc = &c->run->c;
  const int P = tr__pieces(c->run); /* a part per chunk of each stage */
  const int parts = P * (jc->zero ? jc->layout.replicas : 1);
  pending *slot = NULL;
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step == p->step) slot = &c->ck[i];
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step < 0) slot = &c->ck[i], slot->step = p->step;
  TR_ASSERT(slot != NULL);
  int rc = tr__part_merge(&slot->parts[p->stage], &p->part, jc->optim.kind);
  if (rc) return tr_actor_fail(self, rc, "assembling the checkpoint of step %lld: out of memory",
                               (long long)p->step);
  if (++slot->got < parts) return 0;
  char err[512];
  rc = tr__checkpoint_write(c->run, slot->step, slot->parts, P, err, sizeof err);
  for (int s = 0; s < P; s++) tr__part_free(&slot->parts[s]);
  slot->step = -1;
  slot->got = 0;
  return rc ? tr_actor_fail(self, rc, "%s", err) : 0;
}

/* ---- the figures ---------------------------------------------------------------------------- */

/* max over replicas of ||θ_r - θ_0|| / ||θ_0||, each replica's parameters over its stages */
static double consistency(const coordinator *c) {
  const tr__run *run = c->run;
  const int R = run->c.layout.replicas, P = run->c.layout.stages;
  double worst = 0, norm0 = 0;
  for (int s = 0; s < P; s++) {
    const tr__report *d0 = &c->dones[tr__device_index(run, 0, s)];
    for (size_t i = 0; i < d0->numel; i++) norm0 += (double)d0->params[i] * d0->params[i];
  }
  for (int r = 1; r < R; r++) {
    double diff = 0;
    for (int s = 0; s < P; s++) {
      const tr__report *d0 = &c->dones[tr__device_index(run, 0, s)];
      const float *pr = c->dones[tr__device_index(run, r, s)].params;
      for (size_t i = 0; i < d0->numel; i++) {
        double d = (double)pr[i] - d0->params[i];
        diff += d * d;
      }
    }
    double rel = norm0 > 0 ? sqrt(diff / norm0) : sqrt(diff);
    if (rel > worst) worst = rel;
  }
  return worst;
}

/* The server's own figures. */
static void record_async(coordinator *c, double window) {
  tr_train_result *r = &c->result;
  const tr__server_report *s = &c->server;
  r->server_utilization = window > 0 ? (double)s->busy_ns / window : NAN;
  r->staleness_mean = s->updates ? s->staleness_sum / (double)s->updates : NAN;
  r->staleness_max = s->updates ? (double)s->staleness_max : NAN;
  memcpy(r->staleness_hist, s->hist, sizeof r->staleness_hist);
  r->clock_gap_max = s->clock_gap_max;
  r->consistency = s->consistency_n ? s->consistency_sum / (double)s->consistency_n : NAN;
}

static void record_result(coordinator *c) {
  const tr__run *run = c->run;
  const tr_job_config *jc = &run->c;
  tr_train_result *r = &c->result;
  const int R = jc->layout.replicas, P = jc->layout.stages, n = R * P;
  const int64_t first = tr_graph_first_step(run->g);
  tr__result_init(r, tr_model_name(jc->model), run->strategy);
  r->replicas = R;
  r->stages = P;
  r->microbatches = jc->layout.microbatches;
  r->zero = jc->zero;
  r->allreduce = R > 1 ? (run->nccl ? TR_ALLREDUCE_NCCL : TR_ALLREDUCE_PEER) : TR_ALLREDUCE_AUTO;
  r->edges_nccl = run->edges_nccl;
  r->edges_mpi = run->edges_mpi;
  r->batches_made = run->batches_made;
  r->batches_loaded = run->batches_loaded;
  r->chunks = jc->layout.chunks;
  r->recompute = jc->memory.recompute != 0;
  r->graphs = jc->graphs;
  r->ndevices = n;
  r->ranks = tr_world_size(tr__graph_world(run->g));
  memcpy(r->cuts, run->cuts, (size_t)(tr__pieces(run) + 1) * sizeof *run->cuts);
  if (P > 1) snprintf(r->schedule, sizeof r->schedule, "%s", tr_schedule_kind_name(jc->layout.schedule));
  if (jc->async.enabled) {
    r->workers = R;
    r->momentum = jc->optim.kind == TR_OPTIM_MOMENTUM ? jc->optim.momentum : NAN;
  }
  uint64_t start = UINT64_MAX, end = 0;
  double busy = 0;
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    const tr__report *d = &c->dones[i];
    if (d->window_start < start) start = d->window_start;
    if (d->window_end > end) end = d->window_end;
    if (len < sizeof r->devices && r->ranks > 1) /* host:0@r1: host:0 of rank 1 */
      len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s@r%d",
                              i ? "," : "", d->device, d->rank);
    else if (len < sizeof r->devices)
      len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s", i ? "," : "",
                              d->device);
    if (i < TR_TRAIN_MAX_DEVICES) r->rank[i] = d->rank;
  }
  const double window = end > start ? (double)(end - start) : 0;
  r->first_step = first;
  /* The steps every stage ran; async: the server's updates, each one worker's push. */
  int64_t steps = c->dones[0].steps, window_steps = c->dones[0].window_steps;
  if (jc->async.enabled) {
    steps = first + c->server.updates;
    window_steps = 0;
    for (int w = 0; w < R; w++) window_steps += c->dones[w].window_steps;
  }
  r->steps = steps;
  r->samples = (steps - first) * jc->global_batch;
  r->window_steps = window_steps;
  r->seconds = window / 1e9;
  r->steps_per_s = window > 0 ? (double)window_steps / r->seconds : NAN;
  r->samples_per_s = r->steps_per_s * jc->global_batch;
  for (int i = 0; i < n && i < TR_TRAIN_MAX_DEVICES; i++) {
    r->utilization[i] = window > 0 ? (double)c->dones[i].busy_ns / window : NAN;
    r->peak_microbatches[i] = c->dones[i].peak_microbatches;
    r->peak_activation_bytes[i] = c->dones[i].peak_activation_bytes;
    r->graph_captures += c->dones[i].graph_captures;
    r->graph_launches += c->dones[i].graph_launches;
    if (!r->graphs_note[0] && c->dones[i].graphs_note[0])
      snprintf(r->graphs_note, sizeof r->graphs_note, "%s", c->dones[i].graphs_note);
    busy += (double)c->dones[i].busy_ns;
    const tr_memory_figures *d = &c->dones[i].memory;
    tr_memory_figures *replica = &r->memory.replicas[i / P];
    r->memory.devices[i] = *d;
    replica->params += d->params;
    replica->grads += d->grads;
    replica->optimizer_state += d->optimizer_state;
  }
  if (P > 1) {
    r->bubble_fraction = window > 0 ? 1 - busy / (n * window) : NAN;
    r->bubble_theory = tr_schedule_bubble(run->sc);
  }
  if (jc->async.enabled) record_async(c, window);
  else r->consistency = R > 1 ? consistency(c) : 0;

  r->initial_loss = c->losses.initial;
  r->final_loss = tr__loss_book_final(&c->losses);
  r->skipped_steps = jc->async.enabled ? c->server.skipped : c->dones[0].skipped;
  const tr_model *m = jc->model;
  if (tr_model_token_input(m)) r->tokens_per_s = r->samples_per_s * tr_model_ctx(m);
  r->gflops = tr_model_train_flops(m) * r->samples_per_s / 1e9;
}

/* ---- messages ------------------------------------------------------------------------------- */

static int source_of(const coordinator *c, int source) {
  TR_ASSERT(source >= 0 && source < c->nsources);
  tr_edge_release(c->sources[source], 1);
  return source;
}

/* What to add to a time the sender of `m` took, to read it on this process's clock. */
static int64_t clock_offset(const coordinator *c, const tr_msg *m) {
  tr_graph *g = c->run->g;
  return tr__world_clock_offset(tr__graph_world(g), tr_graph_actor_rank(g, m->from));
}

static int coordinator_receive(tr_actor *self, tr_msg *msg) {
  coordinator *c = tr_actor_state(self);
  int rc = 0;
  if (msg->type == &tr__loss_type) {
    const tr__loss_msg *m = (const tr__loss_msg *)msg;
    source_of(c, m->source);
    step_ctx x = {.c = c};
    if ((rc = tr__loss_book_add(&c->losses, m, clock_offset(c, msg), on_step, &x)) ||
        (rc = x.rc))
      return rc;
    if (c->run->c.progress) show_progress(c);
  } else if (msg->type == &tr__part_type) {
    tr__part_msg *p = (tr__part_msg *)msg;
    source_of(c, p->source);
    rc = add_part(self, c, p);
  } else if (msg->type == &tr__done_type) {
    const tr__done_msg *d = (const tr__done_msg *)msg;
    tr__report *r = &c->dones[source_of(c, d->source)];
    *r = d->report;
    r->rank = tr_graph_actor_rank(c->run->g, msg->from);
    r->window_start += (uint64_t)clock_offset(c, msg);
    r->window_end += (uint64_t)clock_offset(c, msg);
    c->ndone++;
  } else if (msg->type == &tr__server_done_type) {
    const tr__server_done_msg *d = (const tr__server_done_msg *)msg;
    source_of(c, d->source);
    c->server = d->report; /* not its header: the mailbox's */
    c->ndone++;
  }
  if (rc) return rc;
  for (int i = 0; i < c->nobs; i++) flush(&c->obs[i]); /* also on their credits */
  if (!c->finished && c->ndone == c->nsources) {
    if (c->printed) fputc('\n', stderr);
    record_result(c);
    c->finished = true;
  }
  return maybe_done(c);
}

static void coordinator_destroy(void *state) {
  coordinator *c = state;
  for (int i = 0; i < PENDING; i++)
    for (int s = 0; s < TR__MAX_STAGES; s++) tr__part_free(&c->ck[i].parts[s]);
  const int n = c->run->c.layout.replicas * c->run->c.layout.stages;
  for (int i = 0; i < n; i++) free((void *)c->dones[i].params);
  free(c->dones);
  free(c->sources);
  for (int i = 0; i < c->nobs; i++) free(c->obs[i].queue);
  free(c->obs);
  tr__loss_book_free(&c->losses);
  free(c);
}

const tr_behaviour tr__coordinator_behaviour = {.name = "coordinator",
                                                .start = coordinator_start,
                                                .receive = coordinator_receive,
                                                .destroy = coordinator_destroy};
