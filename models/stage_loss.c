/* stage_loss.c — the last stage's loss through its table (tr_loss.h): the scale that makes
 * the micro-batches' losses of a step add up to its mean, forward after the layers, the
 * gradient before them, and each sample's loss on its own. */
#include <stdio.h>

#include "stage_impl.h"

static int out_width(const tr_stage *st) { return st->m->layers[st->m->nlayers - 1].out; }

size_t tr__stage_loss_floats(const tr_stage *st, size_t (*floats)(int N, int V)) {
  return floats ? floats(st->info.rows, out_width(st)) : 0;
}

/* 1 / what the mean is over: `samples` samples' rows, or their elements. */
static float scale_of(const tr_stage *st, double samples) {
  double n = samples * st->m->ctx;
  if (st->m->loss->mean == TR_LOSS_MEAN_ELEMENTS) n *= out_width(st);
  return (float)(1.0 / n);
}

/* Tensor parallelism: the last layer split COLUMN, each member holding columns of the output
 * that a vocab_parallel loss reduces across the group. */
static int vocab_split(const tr_stage *st) {
  return st->m->loss->vocab_parallel && st->m->layers[st->m->nlayers - 1].parts > 1;
}

static tr_loss_ctx loss_ctx(tr_stage *st, int slot) {
  float *base = tr__slot_base(st, slot);
  return (tr_loss_ctx){.s = st->s, .pred = tr__layer_in(st, st->nl, slot),
                       .target = base + st->target_off, .N = st->info.rows, .V = out_width(st),
                       .scale = scale_of(st, st->info.global_batch),
                       .keep = tr__acts_of(st, slot) + st->loss_keep_off,
                       .scratch = st->layer_scratch,
                       .tensor = vocab_split(st) ? st->tensor : NULL};
}

int tr__stage_loss_forward(tr_stage *st, int slot, float *loss) {
  const tr_loss_ctx c = loss_ctx(st, slot);
  int rc = st->m->loss->forward(&c, loss);
  return rc ? tr__stage_fail(st, rc, "loss (%s)", st->m->loss->name) : 0;
}

int tr__stage_loss_backward(tr_stage *st, int slot, float *dpred) {
  const tr_loss_ctx c = loss_ctx(st, slot);
  int rc = st->m->loss->backward(&c, dpred);
  return rc ? tr__stage_fail(st, rc, "loss gradient (%s)", st->m->loss->name) : 0;
}

/* Each sample by the same forward, on its rows alone, with room of its own for what the loss
 * keeps and its scratch (the slot's keep stays what backward needs). */
int tr_stage_sample_losses(tr_stage *st, int slot, float *out) {
  TR__TRY(tr__stage_slot(st, slot, __func__));
  if (out == NULL) return tr__stage_misuse(st, TR_EINVAL, "tr_stage_sample_losses: out is NULL");
  const tr_loss_type *loss = st->m->loss;
  if (!st->info.is_last) {
    snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s: per-sample losses: only the last "
             "stage has the loss", st->info.first, st->info.end, st->m->name);
    return TR_EINVAL;
  }
  const int T = st->m->ctx, V = out_width(st);
  const size_t keep = tr__align_floats(loss->keep_floats ? loss->keep_floats(T, V) : 0);
  const size_t scratch = loss->scratch_floats ? loss->scratch_floats(T, V) : 0;
  const size_t per_target = loss->target == TR_LOSS_TARGET_CLASSES ? 1 : (size_t)V; /* 4 bytes */
  tr_loss_ctx c = loss_ctx(st, slot);
  c.N = T;
  c.scale = scale_of(st, 1);
  float *room = NULL;
  int rc = keep + scratch ? tr_stream_alloc(st->s, (keep + scratch) * sizeof(float), (void **)&room)
                          : 0;
  if (rc) return tr__stage_fail(st, rc, "per-sample losses: allocating");
  c.keep = room;
  c.scratch = room ? room + keep : NULL;
  const float *pred = c.pred;
  const float *target = c.target;
  for (int b = 0; b < st->info.batch && rc == 0; b++) {
    c.pred = pred + (size_t)b * T * V;
    c.target = target + (size_t)b * T * per_target;
    rc = loss->forward(&c, out + b);
  }
  if (room) {
    const int frc = tr_stream_free(st->s, room);
    if (rc == 0) rc = frc;
  }
  return rc ? tr__stage_fail(st, rc, "per-sample losses (%s)", loss->name) : 0;
}
