/* chunks.c — a stage's model chunks and the slots they hold. */
#include <stdlib.h>

#include "chunks.h"

static int fail(tr__chunks *c, tr_stage *st, const char *what) {
  return tr_actor_fail(c->self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(c->dev),
                       st ? tr_stage_error(st) : tr_device_error(c->dev));
}

int tr__chunks_open(tr__chunks *c, tr_actor *self, const tr__run *run, int stage,
                    tr_device *dev, tr_stage_shard shard, const tr__tensor_member *tp) {
  const tr_job_config *cf = &run->c;
  c->self = self;
  c->dev = dev;
  c->stage = stage;
  c->stages = cf->layout.stages;
  c->n = cf->layout.chunks;
  c->ch = calloc((size_t)c->n, sizeof *c->ch);
  c->st = calloc((size_t)c->n, sizeof *c->st);
  if (c->ch == NULL || c->st == NULL) return TR_ENOMEM;
  for (int k = 0; k < c->n; k++) {
    tr__chunk *ch = &c->ch[k];
    const int piece = k * c->stages + stage;
    tr_stage_config sc = {.first = run->cuts[piece],
                          .end = run->cuts[piece + 1],
                          .batch = run->mb_batch,
                          .slots = tr_schedule_chunk_slots(run->sc, stage, k),
                          .recompute = cf->memory.recompute,
                          .split = cf->layout.schedule == TR_SCHEDULE_ZB1,
                          .global_batch = cf->global_batch,
                          .seed = cf->seed,
                          .optim = cf->optim,
                          .precision = cf->precision,
                          .graphs = cf->graphs,
                          .shard = shard,
                          .tensor = tp->comm};
    if (tr_stage_open(&ch->st, tr__member_model(run, tp->member), dev, &sc, c->err,
                      sizeof c->err))
      return tr_actor_fail(self, TR_EDEVICE, "opening the stage on %s: %s", tr_device_name(dev),
                           c->err);
    c->st[k] = ch->st;
    ch->info = tr_stage_info_of(ch->st);
    if (cf->checkpoint.resume_from &&
        tr__stage_load(ch->st, cf->checkpoint.resume_from, c->err, sizeof c->err))
      return tr_actor_fail(self, TR_EFORMAT, "%s", c->err);
    if (tr_stage_zero_grads(ch->st)) return fail(c, ch->st, "zeroing gradients");
    ch->slot_first = calloc((size_t)ch->info->slots, sizeof *ch->slot_first);
    ch->act_ev = calloc((size_t)ch->info->slots, sizeof *ch->act_ev);
    if (!ch->slot_first || !ch->act_ev) return TR_ENOMEM;
    c->live_bytes += (int64_t)ch->info->work_bytes; /* always in use */
  }
  c->peak_bytes = c->live_bytes;
  return 0;
}

int tr__chunks_open_events(tr__chunks *c) {
  for (int k = 0; k < c->n; k++)
    for (int i = 0; i < c->ch[k].info->slots; i++)
      if (tr_event_open(c->dev, TR_EVENT_DEFAULT, &c->ch[k].act_ev[i]))
        return fail(c, NULL, "opening events");
  return 0;
}

int tr__chunks_plan_holds(tr__chunks *c, const tr_action *acts, size_t nacts, int m) {
  int *last = malloc((size_t)(c->n * m) * sizeof *last);
  c->holds = calloc(nacts ? nacts : 1, 1);
  if (last == NULL || c->holds == NULL) {
    free(last);
    return TR_ENOMEM;
  }
  for (int i = 0; i < c->n * m; i++) last[i] = -1;
  for (size_t k = 0; k < nacts; k++) {
    const tr_action *x = &acts[k];
    if (x->mb < 0) continue;
    if (last[x->chunk * m + x->mb] < 0) c->holds[k] = 1;
    last[x->chunk * m + x->mb] = (int)k;
  }
  for (int i = 0; i < c->n * m; i++)
    if (last[i] >= 0) c->holds[last[i]] -= 1;
  free(last);
  return 0;
}

void tr__chunks_hold(tr__chunks *c, size_t k, const tr_action *act) {
  const int delta = c->holds[k];
  if (delta == 0) return;
  c->live += delta;
  c->live_bytes += delta * (int64_t)c->ch[act->chunk].info->slot_bytes;
  if (c->live > c->peak) c->peak = c->live;
  if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
}

size_t tr__chunks_largest(const tr__chunks *c, bool outputs) {
  size_t most = 0;
  for (int k = 0; k < c->n; k++) {
    const size_t b = outputs ? c->ch[k].info->output_bytes : c->ch[k].info->input_bytes;
    most = b > most ? b : most;
  }
  return most;
}

void tr__chunks_close(tr__chunks *c) {
  for (int k = 0; k < c->n && c->ch; k++) {
    tr__chunk *ch = &c->ch[k];
    for (int i = 0; ch->info && ch->act_ev && i < ch->info->slots; i++)
      if (ch->act_ev[i]) tr_event_close(ch->act_ev[i]);
    tr_stage_close(ch->st);
    ch->st = NULL;
    ch->info = NULL;
  }
}

void tr__chunks_free(tr__chunks *c) {
  for (int k = 0; k < c->n && c->ch; k++) {
    free(c->ch[k].act_ev);
    free(c->ch[k].slot_first);
  }
  free(c->ch);
  free(c->st);
  free(c->holds);
}
