/* coordinator.c — the coordinator actor (libuv loop): ends the run on time, shows progress,
 * and turns the stages' reports into the run's figures (WORKLOADS.md's definitions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

typedef struct coordinator {
  tr__run *run;
  uint64_t t_start;
  bool printed;
} coordinator;

void *tr__coordinator_new(tr__run *run) {
  coordinator *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->run = run;
  return c;
}

static int coordinator_start(tr_actor *self) {
  coordinator *c = tr_actor_state(self);
  c->t_start = tr_now_ns();
  if (c->run->end_step == INT64_MAX)
    return tr_actor_timer_start(self, (uint64_t)(c->run->opt->seconds * 1e3), 0, 0);
  return 0;
}

static void show_progress(coordinator *c, const tr__progress_msg *p) {
  tr__run *run = c->run;
  double secs = (double)(tr_now_ns() - c->t_start) / 1e9;
  double done = (double)(p->step - run->first_step);
  double rate = secs > 0 ? done / secs : 0;
  double eta = run->end_step == INT64_MAX
                   ? run->opt->seconds - secs
                   : (rate > 0 ? (double)(run->end_step - p->step) / rate : 0);
  fprintf(stderr, "\r\033[Kstep %lld", (long long)p->step);
  if (run->end_step != INT64_MAX) fprintf(stderr, "/%lld", (long long)run->end_step);
  fprintf(stderr, "  loss %.4g  %.0f samples/s  ETA %.0fs", p->loss, rate * run->batch,
          eta > 0 ? eta : 0);
  c->printed = true;
}

static void record_result(coordinator *c, const tr__done_msg *d) {
  tr__run *run = c->run;
  tr_train_result *r = run->result;
  r->steps = d->steps;
  r->samples = (d->steps - run->first_step) * run->batch;
  r->window_steps = d->window_steps;
  r->seconds = (double)d->window_ns / 1e9;
  r->steps_per_s = r->seconds > 0 ? (double)d->window_steps / r->seconds : NAN;
  r->samples_per_s = r->steps_per_s * run->batch;
  r->initial_loss = d->initial_loss;
  r->final_loss = d->final_loss;
  r->utilization[0] = d->window_ns ? (double)d->busy_ns / (double)d->window_ns : NAN;
  r->consistency = 0; /* one replica: trivially consistent */

  /* FLOPs per sample as WORKLOADS.md counts them: 6 per weight of a Linear (forward 2,
   * backward 4), and for token models 6 per parameter per token plus attention's 12 × T ×
   * width per token and block. */
  const tr_model *m = run->model;
  double flops = 0;
  int T = tr_model_ctx(m);
  if (tr_model_token_input(m)) {
    flops = 6.0 * (double)tr_model_param_count(m) * T;
    for (int l = 0; l < tr_model_layer_count(m); l++) {
      const tr_layer_spec *ls = tr_model_layer(m, l);
      if (ls->kind == TR_LAYER_BLOCK) flops += 12.0 * T * ls->in * T;
    }
    r->tokens_per_s = r->samples_per_s * T;
  } else {
    for (int l = 0; l < tr_model_layer_count(m); l++) {
      const tr_layer_spec *ls = tr_model_layer(m, l);
      if (ls->kind == TR_LAYER_LINEAR) flops += 6.0 * ls->in * ls->out;
    }
  }
  r->gflops = flops * r->samples_per_s / 1e9;
}

static int coordinator_receive(tr_actor *self, tr_msg *msg) {
  coordinator *c = tr_actor_state(self);
  if (msg->type == &tr_timer_msg_type) {
    tr_msg *f = tr_msg_new(&tr__finish_type);
    f->from = self;
    tr_actor_send_ctl(c->run->stage, f); /* time is up: finish after the current step */
  } else if (msg->type == &tr__progress_type) {
    if (c->run->opt->progress) show_progress(c, (const tr__progress_msg *)msg);
  } else if (msg->type == &tr__done_type) {
    if (c->printed) fputc('\n', stderr);
    record_result(c, (const tr__done_msg *)msg);
    tr_system_stop(tr_actor_system(self), 0);
  }
  return 0;
}

const tr_behaviour tr__coordinator_behaviour = {.name = "coordinator",
                                                .start = coordinator_start,
                                                .receive = coordinator_receive,
                                                .destroy = free};
