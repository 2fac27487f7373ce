/* coordinator.c — the coordinator actor (libuv loop): gathers every step's loss from the
 * stages that compute it, shows progress, sends observers their reports, writes checkpoints
 * from the stages' parts, and turns the final reports into the run's figures (the
 * definitions of docs/WORKLOADS.md).
 *
 * Every message comes on a report edge from one source (a stage, or the server) and gives
 * its credit back as soon as it is handled. A step's loss is complete once every replica's
 * last stage has sent its share (asynchronous jobs: the worker that took the step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_impl.h"

enum { PENDING = 4,              /* checkpoints being assembled at once */
       PROGRESS_NS = 100 * 1000 * 1000 };

typedef struct pending {
  int64_t step;
  int got;
  tr__part parts[TR__MAX_STAGES];
} pending;

typedef struct observer {
  tr_edge *edge;
  int every;
  int64_t reported;  /* steps [first, reported) have been reported */
  uint64_t at;       /* when the last report was sent */
  bool told_last;
} observer;

typedef struct coordinator {
  const tr__run *run;
  tr_actor *self;
  uint64_t t_start, last_progress;
  bool printed;
  int nsources;
  tr_edge **sources;         /* [source]: its report edge */
  observer *obs;
  int nobs;
  pending ck[PENDING];
  tr__report *dones;         /* [stage source] */
  tr__server_report server;  /* async */
  int ndone;
  bool finished;             /* every source is done: the figures are in */
  /* step k's loss: the sum of sum[k - first] over `needed` shares */
  double *sum;
  uint8_t *parts;
  int64_t nsteps, complete;  /* steps with room, and the steps [first, first + complete)
                                whose loss is whole */
  int needed;
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
  c->needed = run->c.async.enabled ? 1 : l->replicas;
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
      return tr_actor_fail(self, TR_EINVAL, "the coordinator hears from %s %d of %d: add every "
                           "stage (and the server) before running", "no source", s, c->nsources);
  c->t_start = tr_now_ns();
  for (int i = 0; i < c->nobs; i++) c->obs[i].at = c->t_start;
  return 0;
}

static double step_loss(const coordinator *c, int64_t k) { return c->sum[k]; }

/* ---- observers -------------------------------------------------------------------------- */

/* The steps observer `o` has not heard of, as a report: whole intervals of `every` steps
 * (all there are, when its consumer has fallen behind), or what is left when `last`. */
static void tell(coordinator *c, observer *o, bool last) {
  const int64_t first = tr_graph_first_step(c->run->g);
  int64_t upto = last ? c->complete : o->reported + (c->complete - o->reported) / o->every * o->every;
  if ((upto == o->reported && !last) || o->told_last || !tr_edge_acquire(o->edge)) return;
  const uint64_t now = tr_now_ns();
  double sum = 0;
  for (int64_t k = o->reported; k < upto; k++) sum += step_loss(c, k);
  const int64_t steps = upto - o->reported;
  tr_report_msg *r = tr_msg_new(&tr_report_type);
  r->step = first + upto;
  r->steps = steps;
  r->loss = steps ? sum / (double)steps : NAN;
  r->last_loss = upto > 0 ? step_loss(c, upto - 1) : NAN;
  r->samples = upto * c->run->c.global_batch;
  r->seconds = (double)(now - c->t_start) / 1e9;
  r->step_seconds = steps ? (double)(now - o->at) / 1e9 / (double)steps : NAN;
  r->last = last;
  tr_edge_send(o->edge, r);
  o->reported = upto;
  o->at = now;
  o->told_last = last;
}

/* Every observer told of the end: the coordinator's part is over. */
static void maybe_done(coordinator *c) {
  if (!c->finished) return;
  for (int i = 0; i < c->nobs; i++) {
    tell(c, &c->obs[i], true);
    if (!c->obs[i].told_last) return;
  }
  tr_graph_done(c->run->g, c->self);
}

/* ---- losses and progress ------------------------------------------------------------------ */

static int add_losses(coordinator *c, const tr__loss_msg *m) {
  const int64_t first = tr_graph_first_step(c->run->g);
  for (int i = 0; i < m->n; i++) {
    const int64_t k = m->e[i].step - first;
    if (k < 0) continue;
    if (k >= c->nsteps) {
      int64_t n = c->nsteps ? 2 * c->nsteps : 1024;
      while (n <= k) n *= 2;
      double *sum = realloc(c->sum, (size_t)n * sizeof *sum);
      if (sum) c->sum = sum;
      uint8_t *parts = realloc(c->parts, (size_t)n);
      if (parts) c->parts = parts;
      if (!sum || !parts) return TR_ENOMEM;
      memset(c->sum + c->nsteps, 0, (size_t)(n - c->nsteps) * sizeof *sum);
      memset(c->parts + c->nsteps, 0, (size_t)(n - c->nsteps));
      c->nsteps = n;
    }
    c->sum[k] += m->e[i].loss; /* the replicas' shares, added in the order they come */
    c->parts[k]++;
  }
  while (c->complete < c->nsteps && c->parts[c->complete] == c->needed) c->complete++;
  return 0;
}

static void show_progress(coordinator *c) {
  const uint64_t now = tr_now_ns();
  if (c->complete == 0 || now - c->last_progress < PROGRESS_NS) return;
  c->last_progress = now;
  tr_graph *g = c->run->g;
  const int64_t first = tr_graph_first_step(g), end = tr_graph_end_step(g);
  const int64_t step = first + c->complete;
  const double secs = (double)(now - c->t_start) / 1e9;
  const double rate = secs > 0 ? (double)c->complete / secs : 0;
  const double eta = end == INT64_MAX || rate <= 0 ? 0 : (double)(end - step) / rate;
  fprintf(stderr, "\r\033[Kstep %lld", (long long)step);
  if (end != INT64_MAX) fprintf(stderr, "/%lld", (long long)end);
  fprintf(stderr, "  loss %.4g  %.0f samples/s  ETA %.0fs", step_loss(c, c->complete - 1),
          rate * c->run->c.global_batch, eta > 0 ? eta : 0);
  c->printed = true;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

static int add_part(tr_actor *self, coordinator *c, tr__part_msg *p) {
  const int P = c->run->c.layout.stages;
  pending *slot = NULL;
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step == p->step) slot = &c->ck[i];
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step < 0) slot = &c->ck[i], slot->step = p->step;
  TR_ASSERT(slot != NULL);
  slot->parts[p->stage] = p->part;
  p->part.params = p->part.state = NULL; /* the slot owns them now */
  if (++slot->got < P) return 0;
  char err[512];
  int rc = tr__checkpoint_write(c->run, slot->step, slot->parts, P, err, sizeof err);
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
  r->ndevices = n;
  memcpy(r->cuts, run->cuts, (size_t)(P + 1) * sizeof *run->cuts);
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
    if (len < sizeof r->devices)
      len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s", i ? "," : "",
                              d->device);
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
    busy += (double)c->dones[i].busy_ns;
  }
  if (P > 1) {
    r->bubble_fraction = window > 0 ? 1 - busy / (n * window) : NAN;
    r->bubble_theory = tr_schedule_bubble(run->sc);
  }
  if (jc->async.enabled) record_async(c, window);
  else r->consistency = R > 1 ? consistency(c) : 0;

  const int64_t nl = c->complete;
  if (nl > 0) {
    const int64_t tail = nl / 100 ? nl / 100 : 1;
    double sum = 0;
    for (int64_t k = nl - tail; k < nl; k++) sum += step_loss(c, k);
    r->initial_loss = step_loss(c, 0);
    r->final_loss = sum / (double)tail;
  }
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

static int coordinator_receive(tr_actor *self, tr_msg *msg) {
  coordinator *c = tr_actor_state(self);
  const tr__run *run = c->run;
  int rc = 0;
  if (msg->type == &tr__loss_type) {
    const tr__loss_msg *m = (const tr__loss_msg *)msg;
    source_of(c, m->source);
    if ((rc = add_losses(c, m))) return rc;
    if (run->c.progress) show_progress(c);
    for (int i = 0; i < c->nobs; i++) tell(c, &c->obs[i], false);
  } else if (msg->type == &tr__part_type) {
    tr__part_msg *p = (tr__part_msg *)msg;
    source_of(c, p->source);
    rc = add_part(self, c, p);
  } else if (msg->type == &tr__done_type) {
    const tr__done_msg *d = (const tr__done_msg *)msg;
    c->dones[source_of(c, d->source)] = d->report;
    c->ndone++;
  } else if (msg->type == &tr__server_done_type) {
    const tr__server_done_msg *d = (const tr__server_done_msg *)msg;
    source_of(c, d->source);
    c->server = d->report; /* not its header: the mailbox's */
    c->ndone++;
  }
  if (rc) return rc;
  if (!c->finished && c->ndone == c->nsources) {
    if (c->printed) fputc('\n', stderr);
    record_result(c);
    c->finished = true;
  }
  maybe_done(c); /* also on credits of the observers' edges */
  return 0;
}

static void coordinator_destroy(void *state) {
  coordinator *c = state;
  for (int i = 0; i < PENDING; i++)
    for (int s = 0; s < TR__MAX_STAGES; s++) tr__part_free(&c->ck[i].parts[s]);
  const int n = c->run->c.layout.replicas * c->run->c.layout.stages;
  for (int i = 0; i < n; i++) free((void *)c->dones[i].params);
  free(c->dones);
  free(c->sources);
  free(c->obs);
  free(c->sum);
  free(c->parts);
  free(c);
}

const tr_behaviour tr__coordinator_behaviour = {.name = "coordinator",
                                                .start = coordinator_start,
                                                .receive = coordinator_receive,
                                                .destroy = coordinator_destroy};
