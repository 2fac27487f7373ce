/* eval_pass.c — a stage's held-out evaluation pass (evaluate.h): its action list, what its
 * own actions compute (the held-out forward on slot 0 and its credits, the pass's end), and
 * the sums a replica's last stage keeps. Apart from evaluate.c, which the loader and the
 * coordinator use too, so that what the pass calls (batch edges, the reporter) does not
 * make a circle with them. */
#include <stdlib.h>

#include "evaluate.h"
#include "reporter.h"

int tr__eval_pass_open(tr__eval_pass *p, const tr__run *run, int replica, int stage,
                       tr_device *dev, const tr_stage_info *info) {
  if (run->c.eval.data == NULL) return 0;
  const int m = tr__eval_microbatches(run, replica);
  const size_t n = tr_schedule_eval_actions(run->sc, stage, m, NULL, 0);
  if (!(p->acts = malloc((n + 1) * sizeof *p->acts))) return TR_ENOMEM;
  tr_schedule_eval_actions(run->sc, stage, m, p->acts, n);
  for (size_t k = 0; k < n; k++)
    if (p->acts[k].kind == TR_ACTION_FORWARD) p->acts[k].kind = TR_ACTION_EVAL_FORWARD;
  p->acts[n] = (tr_action){.kind = TR_ACTION_EVAL_END, .mb = -1, .peer = -1, .slot = -1};
  p->n = n + 1;
  p->mb_batch = run->mb_batch;
  if (!info->is_last) return 0;
  p->last = p->reports = true;
  p->dev = dev;
  p->rows = info->rows;
  p->batch = info->batch;
  p->V = (int)(info->output_bytes / sizeof(float) / (size_t)info->rows);
  const tr_loss_kind loss = tr_model_loss(run->c.model);
  p->accuracy = loss && loss->accuracy && loss->target == TR_LOSS_TARGET_CLASSES;
  const size_t rows = (size_t)info->rows;
  p->loss = malloc((size_t)info->batch * sizeof *p->loss);
  if (p->accuracy) {
    p->out = malloc(rows * (size_t)p->V * sizeof *p->out);
    p->target = malloc(rows * sizeof *p->target);
  }
  if (p->loss == NULL || (p->accuracy && (p->out == NULL || p->target == NULL))) return TR_ENOMEM;
  if (tr_device_alloc(dev, (size_t)info->batch * sizeof(float), (void **)&p->dloss))
    return TR_EDEVICE;
  return 0;
}

void tr__eval_pass_begin(tr__eval_pass *p, int64_t step, bool ending, tr_stage *const *chunks,
                         int n) {
  p->step = step;
  p->ending = ending;
  p->t0 = tr_now_ns();
  for (int k = 0; k < n; k++) tr_stage_set_training(chunks[k], 0);
  if (p->last) p->sums = (tr__eval_sums){.step = step, .correct = p->accuracy ? 0 : -1};
}

void tr__eval_pass_drop_stale(const tr__eval_pass *p, tr__batch_in *in, int64_t step) {
  if (p->ending) tr__batch_in_drop_stale(in, step);
}

/* The row's largest output (the first of equals) is its target. */
static bool correct(const float *row, int V, int32_t target) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (row[v] > row[best]) best = v;
  return best == target;
}

/* The forward of the held-out micro-batch in `slot` of `st` has been queued: its first
 * `count` samples added to the sums (waits for the device). 0, or TR_EDEVICE. */
static int add_figures(tr__eval_pass *p, tr_stage *st, int slot, int count) {
  tr_stream *s = tr_stage_stream(st);
  const int per = p->rows / p->batch; /* rows of a sample: gpt's ctx, else 1 */
  const size_t rows = (size_t)count * (size_t)per;
  if (tr_stage_sample_losses(st, slot, p->dloss) ||
      tr_memcpy(s, p->loss, p->dloss, (size_t)count * sizeof *p->loss, TR_COPY_D2H) ||
      (p->accuracy && !p->tensor &&
       (tr_memcpy(s, p->out, tr_stage_output(st, slot), rows * (size_t)p->V * sizeof *p->out,
                  TR_COPY_D2H) ||
        tr_memcpy(s, p->target, tr_stage_target(st, slot), rows * sizeof *p->target,
                  TR_COPY_D2H))) ||
      tr_stream_synchronize(s))
    return TR_EDEVICE;
  for (int b = 0; b < count; b++) p->sums.loss += p->loss[b];
  int64_t right = 0; /* a split last layer's: over the group's parts of each row */
  if (p->accuracy && p->tensor &&
      tr_crossentropy_correct_parts(p->tensor, s, tr_stage_output(st, slot),
                                    tr_stage_target(st, slot), (int)rows, p->V, p->dscratch,
                                    &right))
    return TR_EDEVICE;
  p->sums.correct += right;
  if (p->accuracy && !p->tensor)
    for (size_t r = 0; r < rows; r++)
      p->sums.correct += correct(p->out + r * (size_t)p->V, p->V, p->target[r]);
  p->sums.rows += (int64_t)rows;
  p->sums.samples += count;
  return 0;
}

int tr__eval_forward(tr__eval_pass *p, tr__batch_in *in, tr__returns *ret, tr_stream *s,
                     tr__chunk *c, tr_edge *act_out, int64_t step, const tr_action *act,
                     const char **what) {
  if (!tr__batch_in_ready(in, c->info)) return TR__BLOCKED;
  if (!c->info->is_last && act_out)
    for (; p->held < tr_edge_credits(act_out); p->held++)
      if (!tr_edge_acquire(act_out)) return TR__BLOCKED;
  int count = p->mb_batch;
  int rc = tr__batch_in_fill(in, s, ret, c->info, tr_stage_input(c->st, 0),
                             tr_stage_target(c->st, 0), step, act->mb, act->chunk, true,
                             &c->slot_first[0], &count);
  if (rc != TR__DONE) return rc;
  if (tr_stage_forward(c->st, 0)) {
    *what = "forward of held-out samples";
    return TR_EDEVICE;
  }
  if (c->info->is_last && add_figures(p, c->st, 0, count)) {
    *what = "reading held-out losses";
    return TR_EDEVICE;
  }
  return TR__DONE;
}

bool tr__eval_pass_spend(tr__eval_pass *p) {
  if (p->held == 0) return false;
  p->held--;
  return true;
}

int tr__eval_pass_end(tr__eval_pass *p, tr__reporter *rep, tr_stream *s, tr_edge *act_out,
                      tr_stage *const *chunks, int n, tr__busy *busy) {
  const int64_t step = p->step;
  /* The last held-out activation sent is copied out of slot 0 before a training forward
   * writes there (training's schedule orders its own slots, not this one): every credit of
   * the edge in hand first, as before each held-out forward. First, so that waiting here
   * never sends the sums twice. */
  if (act_out)
    for (; p->held < tr_edge_credits(act_out); p->held++)
      if (!tr_edge_acquire(act_out)) return TR__BLOCKED;
  if (p->last && p->reports) {
    const int rc = tr_stream_synchronize(s) ? TR_EDEVICE : tr__reporter_flush(rep, step);
    if (rc != TR__DONE) return rc;
    if (tr__reporter_eval(rep, &p->sums) == TR__REPORTER_WAIT) return TR__BLOCKED;
  }
  if (p->held) tr_edge_release(act_out, p->held); /* training's again */
  p->held = 0;
  p->ending = false;
  for (int k = 0; k < n; k++) tr_stage_set_training(chunks[k], 1);
  tr__busy_aside(busy, step, p->t0);
  return TR__DONE;
}

int tr__eval_pass_tensor(tr__eval_pass *p, const tr_tensor_comm *tensor, int member,
                         const tr_stage *last) {
  if (!p->last) return 0;
  p->reports = member == 0;
  const tr_model *m = tr_stage_model(last);
  if (!tensor || !p->accuracy || tr_model_layer(m, tr_model_layer_count(m) - 1)->parts < 2)
    return 0;
  p->tensor = tensor;
  return tr_device_alloc(p->dev, 2 * (size_t)p->rows * sizeof(float), (void **)&p->dscratch)
             ? TR_EDEVICE : 0;
}

void tr__eval_pass_close(tr__eval_pass *p) {
  if (p->dscratch) tr_device_free(p->dev, p->dscratch);
  if (p->dloss) tr_device_free(p->dev, p->dloss);
  free(p->loss);
  free(p->out);
  free(p->target);
  free(p->acts);
  *p = (tr__eval_pass){0};
}

