/* optim.c — a stage's gradients and optimizer: zeroing, the sum of squares for global-norm
 * clipping, the update over the stage's whole parameter allocation by its kind's table
 * (tr_optim.h; over its shard's, under ZeRO stage 1), and copies of parameters, gradients and optimizer state to
 * and from the host. Padding between tensors holds zeros in all three, and every update
 * keeps it so. Whatever may change the parameters (a step, an upload, the start of a step)
 * makes their bf16 copy stale. */
#include <stdio.h>

#include "stage_impl.h"

tr_stage_config tr_stage_defaults(const tr_model *m) {
  if (m == NULL) return (tr_stage_config){0}; /* batch 0: tr_stage_open refuses it */
  return (tr_stage_config){.first = 0, .end = 0, .batch = m->batch, .slots = 1,
                           .global_batch = m->batch, .seed = 0, .optim = m->optim};
}

int tr_stage_zero_grads(tr_stage *st) {
  STAGE_GIVEN(st);
  st->params16_stale = 1; /* a step begins: parameters written from outside are in */
  int rc = tr_memset(st->s, st->grads, 0, st->info.numel * sizeof(float));
  return rc ? tr__stage_fail(st, rc, "zeroing gradients") : 0;
}

int tr_stage_grad_sumsq(tr_stage *st, float *out, int accumulate) {
  STAGE_GIVEN(st);
  if (out == NULL) return tr__stage_misuse(st, TR_EINVAL, "tr_stage_grad_sumsq: out is NULL");
  const tr_stage_info *in = &st->info;
  int rc = tr_sumsq(st->s, out, st->grads + in->shard_offset, in->shard_numel, accumulate);
  return rc ? tr__stage_fail(st, rc, "sum of squared gradients") : 0;
}

int tr_stage_scale_grads(tr_stage *st, const float *factor) {
  STAGE_GIVEN(st);
  if (factor == NULL) return tr__stage_misuse(st, TR_EINVAL, "tr_stage_scale_grads: factor is NULL");
  int rc = tr_scale_dev(st->s, st->grads, factor, st->info.numel);
  return rc ? tr__stage_fail(st, rc, "scaling gradients") : 0;
}

/* Scales the shard's gradients, the ones the update reads. */
static int clip(tr_stage *st, float *grads, size_t n, const float *global_sumsq) {
  float *factor = st->scalars + 1;
  if (!global_sumsq) {
    TR__TRY(tr_sumsq(st->s, st->scalars, grads, n, 0));
    global_sumsq = st->scalars;
  }
  TR__TRY(tr_clip_factor(st->s, factor, global_sumsq, st->optim.clip));
  return tr_scale_dev(st->s, grads, factor, n);
}

int tr_stage_step(tr_stage *st, const float *global_sumsq) {
  STAGE_GIVEN(st);
  const tr_optim_config *o = &st->optim;
  const size_t n = st->info.shard_numel;
  float *p = st->params + st->info.shard_offset, *g = st->grads + st->info.shard_offset;
  int rc = o->clip > 0 ? clip(st, g, n, global_sumsq) : 0;
  if (rc) return tr__stage_fail(st, rc, "clipping gradients");
  st->steps++;
  st->params16_stale = 1;
  const tr_optim_ctx c = {.s = st->s, .o = o, .param = p, .grad = g, .state = st->state,
                         .scratch = st->opt_scratch, .n = n, .step = st->steps};
  rc = o->kind->update(&c);
  return rc ? tr__stage_fail(st, rc, "%s update", o->kind->name) : 0;
}

void tr_stage_set_lr(tr_stage *st, float lr) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_set_lr: st is NULL");
  st->optim.lr = lr;
}

int tr_stage_set_optim(tr_stage *st, const tr_optim_config *o) {
  STAGE_GIVEN(st);
  if (o == NULL) return tr__stage_misuse(st, TR_EINVAL, "tr_stage_set_optim: o is NULL");
  const tr_optim_kind kind = o->kind ? o->kind : TR_OPTIM_SGD; /* a zeroed configuration's */
  if (kind != st->optim.kind) { /* not a device failure: no device message */
    snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s: optimizer %s cannot become %s",
             st->info.first, st->info.end, st->m->name, tr_optim_kind_name(st->optim.kind),
             tr_optim_kind_name(kind));
    return TR_EINVAL;
  }
  st->optim = *o;
  st->optim.kind = kind;
  return 0;
}
const tr_optim_config *tr_stage_optim(const tr_stage *st) { return st ? &st->optim : NULL; }
int64_t tr_stage_step_count(const tr_stage *st) { return st ? st->steps : 0; }
void tr_stage_set_step_count(tr_stage *st, int64_t steps) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_set_step_count: st is NULL");
  st->steps = steps;
}

static float *buffer(tr_stage *st, tr_stage_buffer which, size_t *n) {
  switch (which) {
  case TR_STAGE_PARAMS: *n = st->info.numel; return st->params;
  case TR_STAGE_GRADS: *n = st->info.numel; return st->grads;
  case TR_STAGE_OPT_STATE: *n = st->info.state_numel; return st->state;
  }
  TR_ASSERT(!"unknown stage buffer");
  return NULL;
}

/* A copy's arguments (tr_stage_download, tr_stage_upload): 0, or the refusal naming one. */
static int copy_given(tr_stage *st, tr_stage_buffer which, const float *host, const char *call) {
  if (st == NULL) return tr__misuse(TR_EINVAL, "%s: st is NULL", call);
  if ((unsigned)which > TR_STAGE_OPT_STATE)
    return tr__stage_misuse(st, TR_EINVAL, "%s: which %d: give TR_STAGE_PARAMS, TR_STAGE_GRADS "
                            "or TR_STAGE_OPT_STATE", call, (int)which);
  if (host == NULL) return tr__stage_misuse(st, TR_EINVAL, "%s: host is NULL", call);
  return 0;
}

int tr_stage_download(tr_stage *st, tr_stage_buffer which, float *host) {
  TR__TRY(copy_given(st, which, host, __func__));
  size_t n;
  float *p = buffer(st, which, &n);
  int rc = n ? tr_memcpy(st->s, host, p, n * sizeof(float), TR_COPY_D2H) : 0;
  return rc ? tr__stage_fail(st, rc, "download") : 0;
}

int tr_stage_upload(tr_stage *st, tr_stage_buffer which, const float *host) {
  TR__TRY(copy_given(st, which, host, __func__));
  st->params16_stale |= which == TR_STAGE_PARAMS;
  size_t n;
  float *p = buffer(st, which, &n);
  int rc = n ? tr_memcpy(st->s, p, host, n * sizeof(float), TR_COPY_H2D) : 0;
  return rc ? tr__stage_fail(st, rc, "upload") : 0;
}
