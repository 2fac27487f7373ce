/* tensor_group.c — a job's tensor groups (tensor_group.h): the members' models, made once
 * per job, and each group's comms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_group.h"

int tr__tensor_models_open(const tr_job_config *c, tr_model ***out, char *err, size_t n) {
  *out = NULL;
  const int T = c->layout.tensor;
  if (T <= 1) return 0;
  tr_model **m = calloc((size_t)T, sizeof *m);
  if (m == NULL) return TR_ENOMEM;
  char why[400];
  for (int t = 0; t < T; t++) {
    const int rc = tr_model_shard(c->model, t, T, &m[t], why, sizeof why);
    if (rc) {
      snprintf(err, n, "layout.tensor %d: model '%s' across %d members: %s", T,
               tr_model_name(c->model), T, why);
      tr__tensor_models_close(m, T);
      return rc;
    }
  }
  *out = m;
  return 0;
}

void tr__tensor_models_close(tr_model **models, int T) {
  for (int t = 0; models && t < T; t++) tr_model_free(models[t]);
  free(models);
}

int tr__tensor_group_open(tr__tensor_group *g, tr_device *const *devs, int n, char *err,
                          size_t err_size) {
  memset(g, 0, sizeof *g);
  const int rc = tr_tensor_comms_open(devs, n, g->comms, err, err_size);
  if (rc == 0) g->n = n;
  return rc;
}

void tr__tensor_group_close(tr__tensor_group *g) {
  if (g->n) tr_tensor_comms_close(g->comms, g->n);
  g->n = 0;
}

/* Where tensor i lies in a part (and in its optimizer state's copy k) of model m. */
static float *tensor_in(const tr__part *p, const tr_model *m, int i, int copy) {
  const size_t at = tr_model_tensor(m, i)->offset - p->offset;
  return copy < 0 ? p->params + at : p->state + (size_t)copy * p->numel + at;
}

int tr__tensor_join(const tr__run *run, const tr__part *members, tr__part *wholes) {
  const tr_model *m = run->c.model;
  const int T = tr__members(run), pieces = tr__pieces(run), L = tr_model_layer_count(m);
  const int copies = run->c.optim.kind->state_copies;
  for (int k = 0; k < pieces; k++) {
    const tr__part *m0 = &members[tr__part_slot(run, 0, k)];
    size_t offset, numel, end = tr_model_numel(m);
    tr_model_layer_span(m, m0->first, &offset, &numel);
    if (m0->end < L) tr_model_layer_span(m, m0->end, &end, &numel);
    tr__part *w = &wholes[k];
    *w = (tr__part){.first = m0->first, .end = m0->end, .offset = offset, .numel = end - offset,
                    .shard_numel = end - offset, .state_numel = (size_t)copies * (end - offset)};
    w->params = calloc(w->numel ? w->numel : 1, sizeof *w->params);
    w->state = calloc(w->state_numel ? w->state_numel : 1, sizeof *w->state);
    if (w->params == NULL || w->state == NULL) return TR_ENOMEM; /* the caller frees */
    for (int t = 0; t < T; t++) {
      const tr__part *p = &members[tr__part_slot(run, t, k)];
      const tr_model *mm = run->member_models[t];
      for (int layer = p->first; layer < p->end; layer++) {
        int first, count;
        tr_model_layer_tensors(mm, layer, &first, &count);
        for (int i = first; i < first + count; i++) {
          const tr_tensor_part part = tr_model_tensor_part(mm, i);
          if (part.parts == 0 && t > 0) continue; /* held whole: member 0's */
          for (int copy = -1; copy < copies; copy++)
            tr_tensor_part_copy(&part, tensor_in(w, m, i, copy), tensor_in(p, mm, i, copy), 1);
        }
      }
    }
  }
  return 0;
}

/* The member a model is, from its split tensors, anywhere in it (a stage may hold none):
 * -1 where none is split (whole members: the norm exchange keeps to each member's chain). */
static int member_of(const tr_model *m) {
  for (int i = 0; i < tr_model_tensor_count(m); i++) {
    const tr_tensor_part part = tr_model_tensor_part(m, i);
    if (part.parts > 0) return part.part;
  }
  return -1;
}

bool tr__tensor_split(const tr_model *member) { return member_of(member) >= 0; }

int tr__tensor_grad_sumsq(tr_stage *st, float *out, int accumulate) {
  const tr_model *m = tr_stage_model(st);
  const tr_stage_info *in = tr_stage_info_of(st);
  int first, count, last, n;
  tr_model_layer_tensors(m, in->first, &first, &count);
  tr_model_layer_tensors(m, in->end - 1, &last, &n);
  const int end = last + n;
  if (member_of(m) <= 0) return tr_stage_grad_sumsq(st, out, accumulate);
  /* its split tensors' elements in its shard (ZeRO) of the stage's gradients */
  const size_t lo = in->offset + in->shard_offset, hi = lo + in->shard_numel;
  const float *grads = tr_stage_grads(st);
  tr_stream *s = tr_stage_stream(st);
  int rc = accumulate ? 0 : tr_memset(s, out, 0, sizeof *out);
  for (int i = first; i < end && rc == 0; i++) {
    const tr_tensor_info *t = tr_model_tensor(m, i);
    const size_t a = t->offset > lo ? t->offset : lo;
    const size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
    if (tr_model_tensor_part(m, i).parts > 0 && a < b)
      rc = tr_sumsq(s, out, grads + (a - in->offset), b - a, 1);
  }
  return rc ? TR_EDEVICE : 0;
}
