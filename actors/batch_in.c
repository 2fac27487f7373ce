/* batch_in.c — a stage's batch edges and what they lend it. */
#include <stdio.h>

#include "batch_in.h"

int tr__batch_in_open(tr__batch_in *b, tr_actor *self, const tr__run *run, tr_device *dev) {
  b->self = self;
  b->run = run;
  b->dev = dev;
  for (int i = 0; i < b->n; i++)
    if (tr__queue_open(&b->in[i].q, tr_edge_credits(b->in[i].edge))) return TR_ENOMEM;
  return 0;
}

/* The edge a batch came on: its producer's; of two edges from one producer, the one that
 * carries inputs when the batch has them. */
static tr__batch_edge *edge_of(tr__batch_in *b, const tr_batch_msg *m) {
  tr__batch_edge *match = NULL;
  for (int i = 0; i < b->n; i++)
    if (tr_edge_from(b->in[i].edge) == m->hdr.from &&
        (match == NULL || ((b->in[i].what & TR_BATCH_INPUTS) != 0) == (m->x != NULL)))
      match = &b->in[i];
  return match;
}

int tr__batch_in_take(tr__batch_in *b, const tr_batch_msg *m, bool last) {
  tr__batch_edge *in = edge_of(b, m);
  const char *from = m->hdr.from ? tr_actor_name(m->hdr.from) : "?";
  if (in == NULL)
    return tr_actor_fail(b->self, TR_EINVAL, "a batch from '%s', which has no batch edge to "
                         "this stage", from);
  const char *bad = tr__batch_check(b->run, m, in->what, last, b->err, sizeof b->err);
  if (bad) return tr_actor_fail(b->self, TR_EINVAL, "a batch from '%s' %s", from, bad);
  tr__queue_push(&in->q, (tr__lent){.step = m->step, .mb = m->mb, .count = m->count,
                                    .first = m->first, .x = m->x, .y = m->y,
                                    .generate = m->generate != 0, .eval = m->eval != 0});
  return 0;
}

const tr__lent *tr__batch_in_head(const tr__batch_in *b) {
  return b->n ? tr__queue_peek(&b->in[0].q) : NULL;
}

void tr__batch_in_drop(tr__batch_in *b) {
  tr_edge_release(b->in[0].edge, 1);
  tr__queue_pop(&b->in[0].q);
}

bool tr__batch_in_drop_all(tr__batch_in *b) {
  bool end = false;
  for (const tr__lent *e; b->n && (e = tr__batch_in_head(b));) {
    end |= e->step < 0;
    tr__batch_in_drop(b);
  }
  return end;
}

void tr__batch_in_drop_stale(tr__batch_in *b, int64_t step) {
  for (int i = 0; i < b->n; i++)
    for (const tr__lent *e; (e = tr__queue_peek(&b->in[i].q)) && !(e->eval && e->step == step);) {
      tr_edge_release(b->in[i].edge, 1);
      tr__queue_pop(&b->in[i].q);
    }
}

/* Whether a forward of chunk `info` takes a batch from edge `in`: inputs for the model's
 * first layers, targets for its last. */
static bool takes(const tr__batch_edge *in, const tr_stage_info *info) {
  return ((in->what & TR_BATCH_INPUTS) && info->is_first) ||
         ((in->what & TR_BATCH_TARGETS) && info->is_last);
}

bool tr__batch_in_ready(const tr__batch_in *b, const tr_stage_info *info) {
  for (int i = 0; i < b->n; i++)
    if (takes(&b->in[i], info) && tr__queue_peek(&b->in[i].q) == NULL) return false;
  return true;
}

static int fail_device(tr__batch_in *b, const char *what) {
  return tr_actor_fail(b->self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(b->dev),
                       tr_device_error(b->dev));
}

int tr__batch_in_fill(tr__batch_in *b, tr_stream *s, tr__returns *ret,
                      const tr_stage_info *info, void *x, void *y, int64_t step, int mb,
                      int chunk, bool eval, uint64_t *first, int *count) {
  for (int i = 0; i < b->n; i++) {
    tr__batch_edge *in = &b->in[i];
    if (!takes(in, info)) continue;
    const tr__lent *e = tr__queue_peek(&in->q);
    if (e->eval != eval) /* what a relay that drops the flag sends */
      return tr_actor_fail(b->self, TR_EINVAL, "%s of step %lld, micro-batch %d came where the "
                           "schedule has %s of step %lld, micro-batch %d: a relay passes a "
                           "batch's eval flag on (tr_batch_forward)",
                           e->eval ? "a held-out batch" : "a training batch", (long long)e->step,
                           e->mb, eval ? "a held-out one" : "a training one", (long long)step, mb);
    if (e->step != step || e->mb != mb)
      return tr__out_of_order(b->self, "a batch", e, step, mb, chunk);
    *count = e->count;
    void *xi = (in->what & TR_BATCH_INPUTS) && info->is_first ? x : NULL;
    void *yi = (in->what & TR_BATCH_TARGETS) && info->is_last ? y : NULL;
    if (xi) *first = e->first;
    if (e->generate && !b->gen &&
        tr_data_gen_open(&b->gen, b->run->c.data, b->dev, b->err, sizeof b->err))
      return tr_actor_fail(b->self, TR_EINVAL, "%s", b->err);
    if (e->generate ? (xi || yi) && tr_data_gen_fill(b->gen, s, e->first, (size_t)e->count, xi, yi)
                    : (xi && tr_memcpy(s, xi, e->x, info->input_bytes, TR_COPY_H2D)) ||
                          (yi && tr_memcpy(s, yi, e->y, info->target_bytes, TR_COPY_H2D)))
      return fail_device(b, e->generate ? "generating a batch" : "copying a batch in");
    if (tr__returns_after(ret, s, in->edge)) return fail_device(b, "copying a batch in");
    tr__queue_pop(&in->q);
  }
  return TR__DONE;
}

int tr__batch_in_credits(const tr__batch_in *b) {
  int n = 0;
  for (int i = 0; i < b->n; i++) n += tr_edge_credits(b->in[i].edge);
  return n;
}

void tr__batch_in_close(tr__batch_in *b) {
  tr_data_gen_close(b->gen);
  b->gen = NULL;
}

void tr__batch_in_free(tr__batch_in *b) {
  for (int i = 0; i < b->n; i++) tr__queue_free(&b->in[i].q);
}
