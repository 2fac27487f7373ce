/* tp_harness.h — training a model held whole and its tensor group's members side by side, for
 * the tensor-parallel tests: each member on a host device and a thread of its own with its
 * tensor comm, the whole on the main thread; the members' losses, gradients (against the
 * whole's parts, tr_tensor_part_copy) and parameters after several optimizer steps compared,
 * and the collectives each pass made counted (tr_tensor_comm_counts). */
#ifndef TP_HARNESS_H
#define TP_HARNESS_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtest.h"
#include "tr_layer_type.h"
#include "tr_model.h"
#include "tr_stage.h"

enum { TP_MAXT = 4, TP_STEPS = 3, TP_MAXB = 16 };

typedef struct tp_opts {
  int split;              /* backward in halves (zero-bubble) */
  int bf16;               /* mixed precision */
  int recompute;          /* activation recomputation */
} tp_opts;

/* One model trained TP_STEPS steps of AdamW on one batch. */
typedef struct tp_job {
  const tr_model *m;
  tr_device *dev;
  const tr_tensor_comm *comm;   /* NULL: held whole */
  const void *x, *y;
  tp_opts o;
  /* out */
  float loss[TP_STEPS];
  float samples[TP_MAXB];       /* the first step's per-sample losses (tr_stage_sample_losses) */
  float *grads;                 /* after the first step's backward: numel */
  float *params;                /* after the last step */
  size_t numel;
  uint64_t fwd, bwd;            /* collectives of the first step's forward, backward */
  int rc;
  char err[512];
} tp_job;

static uint64_t tp_count(const tr_tensor_comm *c) {
  uint64_t n = 0, bytes = 0;
  if (c) tr_tensor_comm_counts(c, &n, &bytes);
  return n;
}

static int tp_train(tp_job *j) {
  tr_stage_config cfg = tr_stage_defaults(j->m);
  cfg.seed = 1234, cfg.tensor = j->comm, cfg.split = j->o.split, cfg.graphs = TR_GRAPHS_OFF;
  cfg.recompute = j->o.recompute;
  cfg.optim = tr_optim_defaults(TR_OPTIM_ADAMW, 1e-2f);
  /* The key bias's gradient is 0 in exact arithmetic (softmax ignores a shift), rounding
   * noise here; Adam's default eps would blow that noise up to steps of lr. */
  cfg.optim.eps = 1e-4f;
  if (j->o.bf16) cfg.precision.gemm = TR_PRECISION_BF16;
  tr_stage *st;
  int rc = tr_stage_open(&st, j->m, j->dev, &cfg, j->err, sizeof j->err);
  if (rc) return rc;
  const tr_stage_info *in = tr_stage_info_of(st);
  tr_stream *s = tr_stage_stream(st);
  j->numel = in->numel;
  j->grads = malloc(in->numel * 4), j->params = malloc(in->numel * 4);
  for (int step = 0; step < TP_STEPS && !rc; step++) {
    rc = tr_stage_zero_grads(st);
    if (!rc) rc = tr_memcpy(s, tr_stage_input(st, 0), j->x, in->input_bytes, TR_COPY_H2D);
    if (!rc) rc = tr_memcpy(s, tr_stage_target(st, 0), j->y, in->target_bytes, TR_COPY_H2D);
    const uint64_t c0 = tp_count(j->comm);
    if (!rc) rc = tr_stage_forward(st, 0);
    const uint64_t c1 = tp_count(j->comm);
    if (!rc && j->o.split) {
      rc = tr_stage_backward_input(st, 0, NULL);
      if (!rc) rc = tr_stage_backward_weight(st, 0);
    } else if (!rc) {
      rc = tr_stage_backward(st, 0, NULL);
    }
    const uint64_t c2 = tp_count(j->comm);
    if (!rc) rc = tr_memcpy(s, &j->loss[step], tr_stage_loss(st, 0), 4, TR_COPY_D2H);
    if (!rc && step == 0) {
      float *dev_samples = NULL;
      j->fwd = c1 - c0, j->bwd = c2 - c1;
      assert_true(in->batch <= TP_MAXB);
      rc = tr_device_alloc(j->dev, TP_MAXB * 4, (void **)&dev_samples);
      if (!rc) rc = tr_stage_sample_losses(st, 0, dev_samples);
      if (!rc) rc = tr_memcpy(s, j->samples, dev_samples, (size_t)in->batch * 4, TR_COPY_D2H);
      if (!rc) rc = tr_stream_synchronize(s);
      if (dev_samples) tr_device_free(j->dev, dev_samples);
      rc = tr_stage_download(st, TR_STAGE_GRADS, j->grads);
    }
    if (!rc) rc = tr_stage_step(st, NULL);
    if (!rc) rc = tr_stream_synchronize(s);
  }
  if (!rc) rc = tr_stage_download(st, TR_STAGE_PARAMS, j->params);
  if (!rc) rc = tr_stream_synchronize(s);
  if (rc) snprintf(j->err, sizeof j->err, "%s", tr_stage_error(st));
  tr_stage_close(st);
  return rc;
}

static void *tp_member_main(void *arg) {
  tp_job *j = arg;
  if (tr_device_bind(j->dev)) abort();
  j->rc = tp_train(j);
  return NULL;
}

static void tp_job_free(tp_job *j) { free(j->grads), free(j->params); }

/* The whole on devs[T], members 0..T-1 on devs[0..T) (bound to their threads), members[i]
 * member i's model. */
static void tp_run(tr_device_list *devs, const tr_model *whole, tr_model *const *members, int T,
                   const void *x, const void *y, tp_opts o, tp_job *wj, tp_job *mj) {
  tr_device *d[TP_MAXT];
  tr_tensor_comm *comms[TP_MAXT];
  char err[256];
  for (int i = 0; i < T; i++) d[i] = tr_device_list_at(devs, i);
  if (tr_tensor_comms_open(d, T, comms, err, sizeof err)) fail_msg("comms: %s", err);
  pthread_t th[TP_MAXT];
  for (int i = 0; i < T; i++) {
    mj[i] = (tp_job){.m = members[i], .dev = d[i], .comm = T > 1 ? comms[i] : NULL, .x = x,
                     .y = y, .o = o};
    assert_int_equal(pthread_create(&th[i], NULL, tp_member_main, &mj[i]), 0);
  }
  *wj = (tp_job){.m = whole, .dev = tr_device_list_at(devs, TP_MAXT), .x = x, .y = y, .o = o};
  if (tr_device_bind(wj->dev)) abort();
  wj->rc = tp_train(wj);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  tr_tensor_comms_close(comms, T);
  if (wj->rc) fail_msg("whole: %s", wj->err);
  for (int i = 0; i < T; i++)
    if (mj[i].rc) fail_msg("member %d of %d: %s", i, T, mj[i].err);
}

/* The largest |a - b| over the largest |b| (1 when b is all zero) */
static double tp_rel(const float *a, const float *b, size_t n) {
  double e = 0, top = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    const double d = fabs((double)a[i] - b[i]);
    e = d > e ? d : e;
    top = fabs(b[i]) > top ? fabs(b[i]) : top;
  }
  return e / (top > 0 ? top : 1);
}

/* Member mm's buffer (its parameter space) against the whole's buffer's parts it holds,
 * tensor by tensor: the worst relative error; *where names the tensor. */
static double tp_compare(const tr_model *whole, const float *wbuf, const tr_model *mm,
                         const float *mbuf, const char **where) {
  double worst = 0;
  for (int t = 0; t < tr_model_tensor_count(mm); t++) {
    const tr_tensor_info *mi = tr_model_tensor(mm, t), *wi = tr_model_tensor(whole, t);
    assert_string_equal(mi->name, wi->name);
    const tr_tensor_part p = tr_model_tensor_part(mm, t);
    float *want = malloc(mi->numel * 4);
    tr_tensor_part_copy(&p, (float *)(wbuf + wi->offset), want, 0);
    const double e = tp_rel(mbuf + mi->offset, want, mi->numel);
    if (e > worst) worst = e, *where = wi->name;
    free(want);
  }
  return worst;
}

#endif
