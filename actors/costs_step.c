/* costs_step.c — a device's optimizer step over its stage's parameters (planner.h:
 * tr__costs_step), timed on a stage of exactly those layers and kept in the file of costs.
 *
 * A step is a few passes over the stage's parameters, gradients and optimizer state (the
 * gradients' norm where they are clipped or checked, their scaling, the update): its time is
 * the pace of those bytes, within the caches or beyond them, so it is measured over the
 * stage's own bytes, not scaled from one layer's. One linear layer of mlp (16 MiB with its
 * gradients and momentum) stepped 4.8 times faster per parameter than mlp's whole stage did
 * (134 MiB): the run's step was predicted at 1.3 ms where it took 6.3 ms.
 *
 * The entry is the median of a few steps after a warm-up, keyed by the layers and what of
 * the optimizer changes its passes (its kind, Nesterov, weight decay, the norm); the
 * learning rate does not. Between two steps 64 MiB are written, as a run's forwards and
 * backwards pass over more than the caches hold: mlp's step timed back to back took 4.2 ms,
 * after such a pass 4.8 ms, after a forward and backward of the stage itself 4.8 to 5.1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "tr_system.h"

/* Steps timed after a warm-up; the bytes written between two, beyond the caches. */
enum { STEPS = 5, AWAY = 64 << 20 };

typedef struct step_arg {
  const tr_model *m;
  tr_device *d;
  const tr_optim_config *o;
  int first, end;
  bool norm; /* the norm computed though the step does not clip (a run checking it) */
} step_arg;

static int measure_step(void *arg, double *v, char *err, size_t n) {
  const step_arg *a = arg;
  tr_stage_config c = tr_stage_defaults(a->m);
  c.first = a->first, c.end = a->end;
  c.optim = *a->o;
  c.slots = 0; /* parameters, gradients and optimizer state only */
  tr_stage *st = NULL;
  float *sumsq = NULL;
  int rc = tr_device_bind(a->d);
  if (rc == 0) rc = tr_stage_open(&st, a->m, a->d, &c, err, n);
  if (rc == 0 && a->norm && (rc = tr_device_alloc(a->d, sizeof *sumsq, (void **)&sumsq)))
    snprintf(err, n, "timing the step of %s: %s", tr_model_name(a->m), tr_device_error(a->d));
  unsigned char *away = rc == 0 ? malloc(AWAY) : NULL;
  if (rc == 0 && away == NULL) {
    rc = TR_ENOMEM;
    snprintf(err, n, "timing the step of %s: out of memory", tr_model_name(a->m));
  }
  double t[STEPS];
  for (int i = -1; i < STEPS && rc == 0; i++) { /* i = -1: the warm-up */
    memset(away, i & 0xff, AWAY); /* what a run's forwards and backwards pass over */
    const uint64_t t0 = tr_now_ns();
    if (sumsq) rc = tr_stage_grad_sumsq(st, sumsq, 0);
    if (rc == 0) rc = tr_stage_step(st, NULL);
    if (rc == 0) rc = tr_stage_zero_grads(st); /* the step's end, as the policies run it */
    if (rc == 0) rc = tr_stream_synchronize(tr_stage_stream(st));
    if (rc) snprintf(err, n, "timing the step of %s: %s", tr_model_name(a->m),
                     tr_stage_error(st));
    else if (i >= 0) t[i] = (double)(tr_now_ns() - t0) / 1e9;
  }
  if (rc == 0) {
    tr__sort_doubles(t, STEPS);
    v[0] = t[STEPS / 2];
  }
  free(away);
  if (sumsq) tr_device_free(a->d, sumsq);
  tr_stage_close(st);
  return rc;
}

void tr__costs_step_name(const tr_model *m, const tr_device *d, const tr_optim_config *o,
                         bool norm, int first, int end, char *out, size_t n) {
  char what[256];
  snprintf(what, sizeof what, "step [%d,%d) %s%s%s%s%s", first, end,
           tr_optim_kind_name(o->kind), o->nesterov ? " nesterov" : "",
           o->weight_decay != 0 ? " decay" : "", o->clip > 0 ? " clip" : "",
           norm && !(o->clip > 0) ? " norm" : "");
  tr__costs_model_key(m, d, what, out, n);
}

int tr__costs_step(const tr_model *m, tr_device *d, const tr_optim_config *o, bool norm,
                   int first, int end, const tr_plan_costs_config *c, double *seconds,
                   char *err, size_t n) {
  *seconds = 0;
  if (first >= end || tr_device_is_placeholder(d)) return 0;
  char name[512];
  tr__costs_step_name(m, d, o, norm, first, end, name, sizeof name);
  step_arg a = {.m = m, .d = d, .o = o, .first = first, .end = end,
                .norm = norm && !(o->clip > 0)}; /* clipping computes it within the step */
  return tr__costs_entry(c, name, 1, 1, (const tr__costs_unit[]){TR__COSTS_SECONDS}, measure_step,
                         &a, seconds, err, n);
}
