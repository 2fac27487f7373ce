/* coordinator.c — the coordinator actor (libuv loop): shows progress, writes checkpoints
 * from the stages' parts, and turns the stages' reports into the run's figures
 * (WORKLOADS.md's definitions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

enum { PENDING = 4 }; /* checkpoints being assembled at once (the stages are within a step) */

typedef struct pending {
  int64_t step;
  int got;
  tr__part parts[TR__MAX_STAGES];
} pending;

typedef struct coordinator {
  tr_job *j;
  uint64_t t_start;
  bool printed;
  pending ck[PENDING];
  tr__report *dones; /* [device] */
  int ndone;
  tr__server_report server; /* async */
} coordinator;

void *tr__coordinator_new(tr_job *j) {
  coordinator *c = calloc(1, sizeof *c);
  int n = j->c.replicas * j->c.stages;
  if (c == NULL || (c->dones = calloc((size_t)n, sizeof *c->dones)) == NULL) {
    free(c);
    return NULL;
  }
  c->j = j;
  for (int i = 0; i < PENDING; i++) c->ck[i].step = -1;
  return c;
}

static int coordinator_start(tr_actor *self) {
  coordinator *c = tr_actor_state(self);
  c->t_start = tr_now_ns();
  return 0;
}

static void show_progress(coordinator *c, const tr__progress_msg *p) {
  tr_job *j = c->j;
  const int64_t first = tr_graph_first_step(j->g), end = tr_graph_end_step(j->g);
  double secs = (double)(tr_now_ns() - c->t_start) / 1e9;
  double rate = secs > 0 ? (double)(p->step - first) / secs : 0;
  double eta = end == INT64_MAX ? 0 : rate > 0 ? (double)(end - p->step) / rate : 0;
  fprintf(stderr, "\r\033[Kstep %lld", (long long)p->step);
  if (end != INT64_MAX) fprintf(stderr, "/%lld", (long long)end);
  /* Replica 0's share of the loss stands for the whole: replicas see alike data. */
  /* an asynchronous worker's loss is a whole batch's */
  fprintf(stderr, "  loss %.4g  %.0f samples/s  ETA %.0fs", p->loss * (j->c.async ? 1 : j->c.replicas),
          rate * j->c.global_batch, eta > 0 ? eta : 0);
  c->printed = true;
}

static int add_part(tr_actor *self, coordinator *c, tr__part_msg *p) {
  tr_job *j = c->j;
  pending *slot = NULL;
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step == p->step) slot = &c->ck[i];
  for (int i = 0; i < PENDING && !slot; i++)
    if (c->ck[i].step < 0) slot = &c->ck[i], slot->step = p->step;
  TR_ASSERT(slot != NULL);
  slot->parts[p->stage] = p->part;
  p->part.params = p->part.state = NULL; /* the slot owns them now */
  if (++slot->got < j->c.stages) return 0;
  char err[512];
  int rc = tr__checkpoint_write(j, slot->step, slot->parts, j->c.stages, err, sizeof err);
  for (int s = 0; s < j->c.stages; s++) tr__part_free(&slot->parts[s]);
  slot->step = -1;
  slot->got = 0;
  return rc ? tr_actor_fail(self, rc, "%s", err) : 0;
}

/* max over replicas of ||θ_r - θ_0|| / ||θ_0||, each replica's parameters over its stages */
static double consistency(const coordinator *c) {
  const tr_job *j = c->j;
  const int R = j->c.replicas, P = j->c.stages;
  double worst = 0, norm0 = 0;
  for (int s = 0; s < P; s++) {
    const tr__report *d0 = &c->dones[tr__device_index(j, 0, s)];
    for (size_t i = 0; i < d0->numel; i++) norm0 += (double)d0->params[i] * d0->params[i];
  }
  for (int r = 1; r < R; r++) {
    double diff = 0;
    for (int s = 0; s < P; s++) {
      const tr__report *d0 = &c->dones[tr__device_index(j, 0, s)];
      const float *pr = c->dones[tr__device_index(j, r, s)].params;
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

/* Each step's loss, by step: the replicas' shares added up, or (async) the loss of the worker
 * that took the step. Returns how many steps have one. */
static size_t step_losses(const coordinator *c, double **out) {
  const tr_job *j = c->j;
  const int R = j->c.replicas, P = j->c.stages;
  size_t nl = SIZE_MAX;
  *out = NULL;
  if (j->c.async) {
    nl = (size_t)c->server.updates;
    double *l = nl ? calloc(nl, sizeof *l) : NULL;
    const int64_t first = tr_graph_first_step(j->g);
    for (int w = 0; w < R && l; w++) {
      const tr__report *d = &c->dones[w];
      for (size_t k = 0; k < d->nlosses; k++)
        if ((size_t)(d->loss_steps[k] - first) < nl) l[d->loss_steps[k] - first] = d->losses[k];
    }
    *out = l;
    return l ? nl : 0;
  }
  for (int rep = 0; rep < R; rep++) {
    size_t k = c->dones[tr__device_index(j, rep, P - 1)].nlosses;
    if (k < nl) nl = k;
  }
  double *l = nl && nl != SIZE_MAX ? calloc(nl, sizeof *l) : NULL;
  for (size_t k = 0; l && k < nl; k++)
    for (int rep = 0; rep < R; rep++) l[k] += c->dones[tr__device_index(j, rep, P - 1)].losses[k];
  *out = l;
  return l ? nl : 0;
}

/* The server's own figures. */
static void record_async(coordinator *c, double window) {
  tr_train_result *r = &c->j->result;
  const tr__server_report *s = &c->server;
  r->server_utilization = window > 0 ? (double)s->busy_ns / window : NAN;
  r->staleness_mean = s->updates ? s->staleness_sum / (double)s->updates : NAN;
  r->staleness_max = s->updates ? (double)s->staleness_max : NAN;
  memcpy(r->staleness_hist, s->hist, sizeof r->staleness_hist);
  r->clock_gap_max = s->clock_gap_max;
  r->consistency = s->consistency_n ? s->consistency_sum / (double)s->consistency_n : NAN;
}

static void record_result(coordinator *c) {
  tr_job *j = c->j;
  tr_train_result *r = &j->result;
  const int R = j->c.replicas, P = j->c.stages, n = R * P;
  const int64_t first = tr_graph_first_step(j->g);
  uint64_t start = UINT64_MAX, end = 0;
  double busy = 0;
  for (int i = 0; i < n; i++) {
    if (c->dones[i].window_start < start) start = c->dones[i].window_start;
    if (c->dones[i].window_end > end) end = c->dones[i].window_end;
  }
  const double window = end > start ? (double)(end - start) : 0;
  const tr__report *d0 = &c->dones[0];
  r->first_step = first;
  size_t len = 0;
  for (int i = 0; i < n && len < sizeof r->devices; i++)
    len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s", i ? "," : "",
                            tr_device_name(j->devs[i]));
  /* The steps every stage ran; async: the server's updates, each one worker's push. */
  int64_t steps = d0->steps, window_steps = d0->window_steps;
  if (j->c.async) {
    steps = first + c->server.updates;
    window_steps = 0;
    for (int w = 0; w < R; w++) window_steps += c->dones[w].window_steps;
  }
  r->steps = steps;
  r->samples = (steps - first) * j->c.global_batch;
  r->window_steps = window_steps;
  r->seconds = window / 1e9;
  r->steps_per_s = window > 0 ? (double)window_steps / r->seconds : NAN;
  r->samples_per_s = r->steps_per_s * j->c.global_batch;
  for (int i = 0; i < n && i < TR_TRAIN_MAX_DEVICES; i++) {
    r->utilization[i] = window > 0 ? (double)c->dones[i].busy_ns / window : NAN;
    r->peak_microbatches[i] = c->dones[i].peak_microbatches;
    busy += (double)c->dones[i].busy_ns;
  }
  if (P > 1) {
    r->bubble_fraction = window > 0 ? 1 - busy / (n * window) : NAN;
    r->bubble_theory = tr_schedule_bubble(j->sc);
  }
  if (j->c.async) record_async(c, window);
  else r->consistency = R > 1 ? consistency(c) : 0;

  double *losses;
  size_t nl = step_losses(c, &losses);
  if (nl > 0) {
    size_t tail = nl / 100 ? nl / 100 : 1;
    double sum = 0;
    for (size_t k = nl - tail; k < nl; k++) sum += losses[k];
    r->initial_loss = losses[0];
    r->final_loss = sum / (double)tail;
  }
  free(losses);
  const tr_model *m = j->c.model;
  if (tr_model_token_input(m)) r->tokens_per_s = r->samples_per_s * tr_model_ctx(m);
  r->gflops = tr_model_train_flops(m) * r->samples_per_s / 1e9;
}

static int coordinator_receive(tr_actor *self, tr_msg *msg) {
  coordinator *c = tr_actor_state(self);
  tr_job *j = c->j;
  if (msg->type == &tr__progress_type) {
    if (j->c.progress) show_progress(c, (const tr__progress_msg *)msg);
  } else if (msg->type == &tr__part_type) {
    return add_part(self, c, (tr__part_msg *)msg);
  } else if (msg->type == &tr__done_type) {
    const tr__report *d = &((const tr__done_msg *)msg)->report;
    c->dones[tr__device_index(j, d->replica, d->stage)] = *d;
  } else if (msg->type == &tr__server_done_type) {
    c->server = ((const tr__server_done_msg *)msg)->report; /* not its header: the mailbox's */
  }
  if (msg->type == &tr__done_type || msg->type == &tr__server_done_type) {
    if (++c->ndone < j->c.replicas * j->c.stages + (j->c.async != 0)) return 0;
    if (c->printed) fputc('\n', stderr);
    record_result(c);
    tr_graph_done(j->g, self);
  }
  return 0;
}

static void coordinator_destroy(void *state) {
  coordinator *c = state;
  for (int i = 0; i < PENDING; i++)
    for (int s = 0; s < TR__MAX_STAGES; s++) tr__part_free(&c->ck[i].parts[s]);
  for (int i = 0; i < c->j->c.replicas * c->j->c.stages; i++) free((void *)c->dones[i].params);
  free(c->dones);
  free(c);
}

const tr_behaviour tr__coordinator_behaviour = {.name = "coordinator",
                                                .start = coordinator_start,
                                                .receive = coordinator_receive,
                                                .destroy = coordinator_destroy};
