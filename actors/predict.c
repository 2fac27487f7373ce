/* predict.c — one step of a schedule simulated with given costs (tr_plan.h: tr_plan_simulate).
 *
 * Every device runs its action list in order; an action starts at the latest of its
 * device's clock, the arrival of the message it takes, and the return of the credit it
 * needs. Devices share nothing but messages and credits, so the start of every action is a
 * function of actions before it on its own device and of the one that sent (or gave back)
 * what it waits for: sweeping the devices round-robin, each as far as it can go, computes the
 * same times as an event queue would, whatever the order, and a sweep that moves no device
 * while actions remain is a deadlock.
 *
 * Each device has one edge of each kind out, as the job wires them: activations to the
 * device of the next virtual stage, (s + 1) mod p (the ring back to device 0 for interleaved
 * chunks), input gradients to the previous one's, (s − 1) mod p. A credit is a time: when it
 * became free (0 for those the edge starts with); a send takes the earliest free one.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "job_impl.h" /* the edges' credits, as the job wires them */
#include "tr_plan.h"

enum { ACT = 0, GRAD = 1 };

typedef struct message {
  int vs, mb;
  double at; /* when the receiver may take it */
} message;

/* An edge: its messages in flight (a ring) and its free credits, each with its time. */
typedef struct edge {
  message *q;
  int head, n, cap;
  double *free_at;
  int nfree;
} edge;

typedef struct sim {
  const tr_schedule *sc;
  const tr_plan_costs *c;
  int p, v, m;
  const tr_action *list[TR_PLAN_MAX_DEVICES];
  size_t n[TR_PLAN_MAX_DEVICES], pc[TR_PLAN_MAX_DEVICES];
  double clock[TR_PLAN_MAX_DEVICES];
  edge e[2][TR_PLAN_MAX_DEVICES]; /* [kind][sender] */
  int *last;    /* [s][chunk][mb]: the index of the pair's last action on its device */
  bool *begun;  /* [s][chunk][mb] */
  int live[TR_PLAN_MAX_DEVICES];
  size_t live_bytes[TR_PLAN_MAX_DEVICES];
  tr_plan_step *out;
  char *err;
  size_t errn;
} sim;

static double cost(const double *a, int k) { return a ? a[k] : 0.0; }

static size_t pair(const sim *x, int s, int chunk, int mb) {
  return ((size_t)s * (size_t)x->v + (size_t)chunk) * (size_t)x->m + (size_t)mb;
}

/* The earliest free credit of e (its time), taken; false when none is free yet. */
static bool take_credit(edge *e, double *at) {
  if (e->nfree == 0) return false;
  int best = 0;
  for (int i = 1; i < e->nfree; i++)
    if (e->free_at[i] < e->free_at[best]) best = i;
  *at = e->free_at[best];
  e->free_at[best] = e->free_at[--e->nfree];
  return true;
}

static int broken(sim *x, int s, const tr_action *a, const char *rule) {
  snprintf(x->err, x->errn, "tr_plan_simulate: device %d, %s of micro-batch %d (chunk %d): %s",
           s, tr_action_kind_name(a->kind), a->mb, a->chunk, rule);
  return TR_ESTATE;
}

/* Takes the message `a` waits for from the edge into s; 0 when it has not been sent yet. */
static int receive(sim *x, int s, const tr_action *a, int kind, bool *moved) {
  const int from = kind == ACT ? (s + x->p - 1) % x->p : (s + 1) % x->p;
  edge *e = &x->e[kind][from];
  if (e->n == 0) return 0;
  const message *head = &e->q[e->head];
  if (head->vs != a->chunk * x->p + s || head->mb != a->mb)
    return broken(x, s, a, "the first message on its edge is another's: the lists do not pair");
  if (head->at > x->clock[s]) x->clock[s] = head->at;
  e->head = (e->head + 1) % e->cap, e->n--;
  e->free_at[e->nfree++] = x->clock[s]; /* the credit goes back as the message is taken */
  *moved = true;
  return 0;
}

static int send(sim *x, int s, const tr_action *a, int kind, double latency) {
  edge *e = &x->e[kind][s];
  if (e->n == e->cap) return broken(x, s, a, "more messages in flight than its edge has credits");
  e->q[(e->head + e->n++) % e->cap] =
      (message){.vs = a->chunk * x->p + s + (kind == ACT ? 1 : -1), .mb = a->mb,
                .at = x->clock[s] + latency};
  return 0;
}

static void work(sim *x, int s, double t) {
  x->clock[s] += t;
  x->out->busy[s] += t;
}

/* Runs device s's next action if it can start: *moved says whether it did. */
static int advance(sim *x, int s, bool *moved) {
  const tr_action *a = &x->list[s][x->pc[s]];
  const int vs = a->chunk * x->p + s, vlast = x->p * x->v - 1;
  if (a->kind != TR_ACTION_STEP && (a->mb < 0 || a->mb >= x->m || a->chunk < 0 || a->chunk >= x->v))
    return broken(x, s, a, "no such micro-batch or chunk");
  const tr_plan_costs *c = x->c;
  double at;
  *moved = false;
  switch (a->kind) {
  case TR_ACTION_RECV_ACT:
  case TR_ACTION_RECV_GRAD: {
    const int rc = receive(x, s, a, a->kind == TR_ACTION_RECV_ACT ? ACT : GRAD, moved);
    if (rc || !*moved) return rc;
    break;
  }
  case TR_ACTION_SEND_ACT:
    if (vs == vlast) return broken(x, s, a, "the last virtual stage sends no activation");
    if (!take_credit(&x->e[ACT][s], &at)) return 0;
    if (at > x->clock[s]) x->clock[s] = at;
    if (send(x, s, a, ACT, cost(c->act_latency, vs))) return TR_ESTATE;
    break;
  case TR_ACTION_SEND_GRAD: /* its credit was taken before the backward */
    if (vs == 0) return broken(x, s, a, "the first virtual stage sends no gradient");
    if (send(x, s, a, GRAD, cost(c->grad_latency, vs))) return TR_ESTATE;
    break;
  case TR_ACTION_FORWARD:
    work(x, s, cost(c->forward, vs));
    break;
  case TR_ACTION_BACKWARD:
  case TR_ACTION_BACKWARD_INPUT:
    if (vs > 0) { /* the gradient's credit first, as the stage takes it */
      if (!take_credit(&x->e[GRAD][s], &at)) return 0;
      if (at > x->clock[s]) x->clock[s] = at;
    }
    work(x, s, cost(c->backward, vs) -
                   (a->kind == TR_ACTION_BACKWARD ? 0.0 : cost(c->backward_weight, vs)));
    break;
  case TR_ACTION_BACKWARD_WEIGHT:
    work(x, s, cost(c->backward_weight, vs));
    break;
  case TR_ACTION_STEP:
    work(x, s, cost(c->step, s));
    x->out->finish[s] = x->clock[s];
    break;
  default:
    return broken(x, s, a, "not an action of a training step");
  }
  if (a->kind != TR_ACTION_STEP) { /* the pair's activations: its first action to its last */
    const size_t k = pair(x, s, a->chunk, a->mb);
    const size_t bytes = c->slot_bytes ? c->slot_bytes[vs] : 0;
    if (!x->begun[k]) {
      x->begun[k] = true;
      if (++x->live[s] > x->out->peak[s]) x->out->peak[s] = x->live[s];
      x->live_bytes[s] += bytes;
      if (x->live_bytes[s] > x->out->peak_activation_bytes[s])
        x->out->peak_activation_bytes[s] = x->live_bytes[s];
    }
    if (x->last[k] == (int)x->pc[s]) x->live[s]--, x->live_bytes[s] -= bytes;
  }
  x->pc[s]++;
  *moved = true;
  return 0;
}

/* Every cost finite and >= 0, and W no more than the backward it is part of. */
static int check_costs(const sim *x) {
  const struct {
    const char *name;
    const double *a;
    int n;
  } arrays[] = {{"forward", x->c->forward, x->p * x->v},
                {"backward", x->c->backward, x->p * x->v},
                {"backward_weight", x->c->backward_weight, x->p * x->v},
                {"act_latency", x->c->act_latency, x->p * x->v},
                {"grad_latency", x->c->grad_latency, x->p * x->v},
                {"step", x->c->step, x->p}};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    for (int k = 0; arrays[i].a && k < arrays[i].n; k++)
      if (!(arrays[i].a[k] >= 0) || !isfinite(arrays[i].a[k])) {
        snprintf(x->err, x->errn, "tr_plan_simulate: costs.%s[%d] is %g: give a finite number "
                 "of seconds >= 0", arrays[i].name, k, arrays[i].a[k]);
        return TR_EINVAL;
      }
  for (int k = 0; x->c->backward_weight && k < x->p * x->v; k++)
    if (x->c->backward_weight[k] > cost(x->c->backward, k)) {
      snprintf(x->err, x->errn, "tr_plan_simulate: costs.backward_weight[%d] %g is more than "
               "the backward it is part of (costs.backward[%d] %g)", k,
               x->c->backward_weight[k], k, cost(x->c->backward, k));
      return TR_EINVAL;
    }
  return 0;
}

/* Where each device waits, into err. */
static int deadlock(sim *x) {
  int len = snprintf(x->err, x->errn, "tr_plan_simulate: the lists cannot finish with the "
                     "edges' credits: ");
  for (int s = 0; s < x->p && len > 0 && (size_t)len < x->errn; s++) {
    const tr_action *a = x->pc[s] < x->n[s] ? &x->list[s][x->pc[s]] : NULL;
    len += a ? snprintf(x->err + len, x->errn - (size_t)len, "%sdevice %d waits at %s of %d.%d",
                        s ? ", " : "", s, tr_action_kind_name(a->kind), a->chunk, a->mb)
             : snprintf(x->err + len, x->errn - (size_t)len, "%sdevice %d finished", s ? ", " : "",
                        s);
  }
  return TR_ESTATE;
}

static int run(sim *x) {
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < x->p; s++)
      for (bool went = true; went && x->pc[s] < x->n[s];) {
        const int rc = advance(x, s, &went);
        if (rc) return rc;
        moved |= went;
      }
  }
  for (int s = 0; s < x->p; s++)
    if (x->pc[s] < x->n[s]) return deadlock(x);
  return 0;
}

static int open_sim(sim *x) {
  const size_t pairs = (size_t)x->p * (size_t)x->v * (size_t)x->m;
  x->last = malloc(pairs * sizeof *x->last);
  x->begun = calloc(pairs, sizeof *x->begun);
  if (!x->last || !x->begun) return TR_ENOMEM;
  for (int s = 0; s < x->p; s++) {
    for (int ch = 0; x->c->work_bytes && ch < x->v; ch++) /* held all along */
      x->live_bytes[s] += x->c->work_bytes[ch * x->p + s];
    x->out->peak_activation_bytes[s] = x->live_bytes[s];
    x->list[s] = tr_schedule_actions(x->sc, s, &x->n[s]);
    for (size_t k = 0; k < x->n[s]; k++) {
      const tr_action *a = &x->list[s][k];
      if (a->mb >= 0 && a->mb < x->m && a->chunk >= 0 && a->chunk < x->v)
        x->last[pair(x, s, a->chunk, a->mb)] = (int)k;
    }
    for (int kind = 0; kind < 2; kind++) {
      edge *e = &x->e[kind][s];
      const int credits = kind == ACT ? tr_schedule_slots(x->sc, s) : TR__GRAD_CREDITS;
      e->cap = credits;
      e->q = malloc((size_t)credits * sizeof *e->q);
      e->free_at = calloc((size_t)credits, sizeof *e->free_at);
      if (!e->q || !e->free_at) return TR_ENOMEM;
      e->nfree = credits;
    }
  }
  return 0;
}

static void close_sim(sim *x) {
  free(x->last);
  free(x->begun);
  for (int kind = 0; kind < 2; kind++)
    for (int s = 0; s < x->p; s++) {
      free(x->e[kind][s].q);
      free(x->e[kind][s].free_at);
    }
}

int tr_plan_simulate(const tr_schedule *sc, const tr_plan_costs *c, tr_plan_step *out,
                     char *err, size_t n) {
  if (sc == NULL || c == NULL || out == NULL)
    return tr_errorf(err, n, TR_EINVAL, "tr_plan_simulate: %s is NULL",
                     !sc ? "sc" : !c ? "c" : "out");
  const tr_schedule_config *cf = tr_schedule_config_of(sc);
  *out = (tr_plan_step){.devices = cf->stages};
  if (cf->stages > TR_PLAN_MAX_DEVICES) {
    snprintf(err, n, "tr_plan_simulate: %d stages: at most %d", cf->stages, TR_PLAN_MAX_DEVICES);
    return TR_EINVAL;
  }
  sim *x = calloc(1, sizeof *x);
  if (x == NULL) return TR_ENOMEM;
  *x = (sim){.sc = sc, .c = c, .p = cf->stages, .v = cf->chunks, .m = cf->microbatches,
             .out = out, .err = err, .errn = n};
  int rc = check_costs(x);
  if (rc == 0) rc = open_sim(x);
  if (rc == 0) rc = run(x);
  if (rc == 0) {
    double busy = 0;
    for (int s = 0; s < x->p; s++) {
      busy += out->busy[s];
      if (out->finish[s] > out->seconds) out->seconds = out->finish[s];
    }
    out->bubble = out->seconds > 0 ? 1.0 - busy / (x->p * out->seconds) : 0.0;
  }
  close_sim(x);
  free(x);
  return rc;
}
