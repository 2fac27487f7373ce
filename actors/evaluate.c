/* evaluate.c — held-out evaluation's arithmetic (evaluate.h): when, how many, and the
 * coordinator's book of the sums (a stage's pass: eval_pass.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "evaluate.h"
#include "result_impl.h"

TR_MSGTYPE_DEFINE_CODEC(tr__eval_type, tr__eval_msg, &tr_msg_codec_flat);

bool tr__eval_due(const tr__run *run, int64_t k) {
  const int64_t every = run->c.eval.every;
  return run->c.eval.data && every > 0 && k % every == 0 && k > tr_graph_first_step(run->g);
}

bool tr__eval_at_end(const tr__run *run, int64_t end) {
  return run->c.eval.data && end > tr_graph_first_step(run->g) && !tr__eval_due(run, end);
}

void tr__eval_share(const tr__run *run, int replica, uint64_t *first, size_t *count) {
  tr_data_shard(0, (size_t)run->c.eval.samples, replica, run->c.layout.replicas, first, count);
}

int tr__eval_microbatches(const tr__run *run, int replica) {
  uint64_t first;
  size_t count;
  tr__eval_share(run, replica, &first, &count);
  return (int)((count + (size_t)run->mb_batch - 1) / (size_t)run->mb_batch);
}

/* ---- the coordinator's book ---------------------------------------------------------------- */

void tr__eval_book_init(tr__eval_book *b, int replicas) {
  *b = (tr__eval_book){.replicas = replicas, .step = -1, .loss_mean = NAN, .accuracy = NAN};
}

int tr__eval_book_add(tr__eval_book *b, int replica, const tr__eval_sums *s) {
  int at = -1;
  for (int i = 0; i < TR__EVAL_PENDING && at < 0; i++)
    if (b->got[i] && b->pending[i].step == s->step) at = i;
  for (int i = 0; i < TR__EVAL_PENDING && at < 0; i++)
    if (!b->got[i]) at = i, b->pending[i] = (tr__eval_sums){.step = s->step};
  if (at < 0 || replica < 0 || replica >= b->replicas) return TR_EINVAL;
  tr__eval_sums *t = &b->pending[at];
  t->samples += s->samples;
  t->rows += s->rows;
  t->correct = t->correct < 0 || s->correct < 0 ? -1 : t->correct + s->correct;
  b->loss[at][replica] = s->loss;
  if (++b->got[at] < b->replicas) return 0;
  b->got[at] = 0;
  if (t->step < b->step) return 0; /* an older one completing late: the latest stays */
  double sum = 0; /* in replica order: the same bits whichever came first */
  for (int r = 0; r < b->replicas; r++) sum += b->loss[at][r];
  b->step = t->step;
  b->samples = t->samples;
  b->loss_mean = t->samples ? sum / (double)t->samples : NAN;
  b->accuracy = t->rows && t->correct >= 0 ? (double)t->correct / (double)t->rows : NAN;
  b->count++;
  return 0;
}

void tr__eval_book_report(const tr__eval_book *b, tr_report_msg *r) {
  r->eval_step = b->step;
  r->eval_samples = b->samples;
  r->eval_loss = b->loss_mean;
  r->eval_accuracy = b->accuracy;
}

void tr__eval_book_result(const tr__eval_book *b, tr_result *r) {
  tr__result_set_int(r, TR__M_EVAL_STEP, b->step);
  tr__result_set_int(r, TR__M_EVAL_SAMPLES, b->samples);
  tr__result_set_real(r, TR__M_EVAL_LOSS, b->loss_mean);
  tr__result_set_real(r, TR__M_EVAL_ACCURACY, b->accuracy);
  tr__result_set_int(r, TR__M_EVAL_COUNT, b->count);
}
