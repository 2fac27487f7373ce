/* evaluate.h — held-out evaluation (tr_job_config.eval), its arithmetic in one part: when an
 * evaluation is due, which held-out samples a replica takes and in how many micro-batches,
 * the sums a replica's last stage keeps over a pass, the message that takes them to the
 * coordinator, and the coordinator's book of them (evaluate.c). What a stage's pass and its
 * own actions compute (a held-out forward, the credits of slot 0, the pass's end) is here
 * too (eval_pass.c): the stage only dispatches them.
 *
 * The loader puts the held-out micro-batches (tr_batch_msg.eval) into its sequence after
 * the micro-batches of the step the evaluation follows; the stage runner runs its pass, an
 * action list of its own (tr_schedule_eval_actions), at that step's boundary; both ask here
 * when and how many, so they agree without a message.
 *
 *   if (tr__eval_due(run, step) || (ending && tr__eval_at_end(run, step))) ...;
 *   m = tr__eval_microbatches(run, replica);                  // the loader's sends
 *   tr__eval_pass_open(&p, run, replica, stage, dev, info);   // a stage, on its thread
 *   tr__eval_pass_begin(&p, step, ending, chunks, n);         // dropout off
 *   ... p.acts[0 .. p.n), run by the stage's one interpreter: receive, send, and
 *   tr__eval_forward(&p, &in, &ret, s, chunk, act_out, step, act, &what);  // EVAL_FORWARD
 *   tr__eval_pass_end(&p, &rep, s, act_out, chunks, n, &busy);            // EVAL_END
 *   tr__eval_book_add(&book, replica, &msg->sums);            // the coordinator
 */
#ifndef TR_EVALUATE_H
#define TR_EVALUATE_H

#include <stdbool.h>

#include "batch_in.h"
#include "chunks.h"
#include "metrics.h"

struct tr__reporter;

/* An evaluation after step k (k steps done): a multiple of eval.every past the run's first
 * step. */
bool tr__eval_due(const tr__run *run, int64_t k);
/* The one at the run's end, step `end`: unless the periodic one was that step's, or the run
 * trained no step. */
bool tr__eval_at_end(const tr__run *run, int64_t end);
/* Replica r's share of held-out samples [0, eval.samples): tr_data_shard's rule, and the
 * micro-batches of the job's size it makes (the last one part-filled; 0 for an empty share). */
void tr__eval_share(const tr__run *run, int replica, uint64_t *first, size_t *count);
int tr__eval_microbatches(const tr__run *run, int replica);

/* What an evaluation of one replica adds up: the sum of its samples' losses, its rows whose
 * largest output is the target (-1: the loss has no accuracy), its rows, its samples. */
typedef struct tr__eval_sums {
  int64_t step, samples, rows, correct;
  double loss;
} tr__eval_sums;

/* a replica's last stage → coordinator: its sums of the evaluation after step sums.step */
typedef struct tr__eval_msg {
  tr_msg hdr;
  int source;
  tr__eval_sums sums;
} tr__eval_msg;
extern const tr_msgtype tr__eval_type;

/* A stage's pass: its action list for its replica's share — tr_schedule_eval_actions' with
 * each forward a TR_ACTION_EVAL_FORWARD, then a TR_ACTION_EVAL_END that closes it (none where
 * the job evaluates nothing) — where it is, and on the last stage where each held-out
 * micro-batch's figures are read to the host. */
typedef struct tr__eval_pass {
  tr_action *acts;
  size_t n;
  int mb_batch;            /* the samples of a whole micro-batch */
  int held;                /* credits of the activations' edge in hand (see tr__eval_forward) */
  int64_t step;            /* the pass in hand follows this step */
  bool ending;             /* the run's last: batches sent past a timed end go back */
  uint64_t t0;             /* when it began: its time is set aside from the run's window */
  bool last;               /* the stage's layers end in the loss: it keeps the sums */
  tr_device *dev;
  float *dloss;            /* device: a loss per sample of a micro-batch */
  float *loss, *out;       /* host: the losses, the outputs (rows, V) */
  int32_t *target;         /* host: the target classes (losses with an accuracy) */
  int rows, V, batch;      /* a micro-batch's rows, the output's width, its samples */
  bool accuracy;
  tr__eval_sums sums;
  /* Tensor parallelism: every member of a last stage's group computes the sums (a split
   * last layer's accuracy is a collective over its parts), member 0 sends them. */
  bool reports;
  const tr_tensor_comm *tensor; /* the group's, where the last layer is split; else NULL */
  float *dscratch;              /* device: 2 × rows floats for its collectives */
} tr__eval_pass;

/* Stage `stage` of `replica` on dev, `info` its last chunk's. 0 (nothing where the job
 * evaluates nothing), TR_ENOMEM or TR_EDEVICE. */
int tr__eval_pass_open(tr__eval_pass *p, const tr__run *run, int replica, int stage,
                       tr_device *dev, const tr_stage_info *info);
/* The pass after step `step` begins (`ending`: the run's last): the stage's chunks evaluate
 * (dropout off) until its end. */
void tr__eval_pass_begin(tr__eval_pass *p, int64_t step, bool ending, tr_stage *const *chunks,
                         int n);
/* A last pass's batches that a loader ahead of a timed run's end sent before its held-out
 * ones go back unused (each time messages may have brought some; nothing otherwise). */
void tr__eval_pass_drop_stale(const tr__eval_pass *p, tr__batch_in *in, int64_t step);
/* A held-out micro-batch's forward (TR_ACTION_EVAL_FORWARD, slot 0 of chunk `c`) on stream
 * `s`, its samples from `in`; on the last stage its figures added. Every held-out
 * micro-batch takes slot 0, so the output sent last must be copied out before a forward
 * writes over it: every credit of `act_out` is taken into the pass's hands first (each one
 * not back waits for its release's message), and the pass's sends spend them
 * (tr__eval_pass_spend). TR__DONE, TR__BLOCKED, or a status; *what names what failed on the
 * device (the caller fails the actor with it), else stays NULL. */
int tr__eval_forward(tr__eval_pass *p, tr__batch_in *in, tr__returns *ret, tr_stream *s,
                     tr__chunk *c, tr_edge *act_out, int64_t step, const tr_action *act,
                     const char **what);
/* A send's credit from the pass's hands: false when none is (training's sends acquire). */
bool tr__eval_pass_spend(tr__eval_pass *p);
/* The pass's end (TR_ACTION_EVAL_END): on the last stage the losses of the steps before it
 * go first (a report of step k, its loss, never tells of the evaluation after it), then its
 * sums; the credits in hand go back to training, dropout on, its time set aside in `busy`.
 * TR__DONE, TR__BLOCKED, TR_EDEVICE (reading a loss) or the reporter's status. */
int tr__eval_pass_end(tr__eval_pass *p, struct tr__reporter *rep, tr_stream *s, tr_edge *act_out,
                      tr_stage *const *chunks, int n, tr__busy *busy);
void tr__eval_pass_close(tr__eval_pass *p); /* on the device's thread */
/* After open, a tensor group's member `member` of comm `tensor` (NULL: none), `last` its
 * last chunk: member 0 alone sends the sums; a split last layer counts the rows whose whole
 * row's largest output is the target across the members (tr_crossentropy_correct_parts).
 * 0, or TR_EDEVICE. */
int tr__eval_pass_tensor(tr__eval_pass *p, const tr_tensor_comm *tensor, int member,
                         const tr_stage *last);

/* The coordinator's: the replicas' sums of each evaluation, and the latest whole one. */
enum { TR__EVAL_PENDING = 4 };
typedef struct tr__eval_book {
  int replicas;
  tr__eval_sums pending[TR__EVAL_PENDING];
  int got[TR__EVAL_PENDING]; /* 0: a free place */
  double loss[TR__EVAL_PENDING][TR_TRAIN_MAX_DEVICES]; /* per replica, added in their order */
  int64_t step, samples;     /* the latest whole evaluation (step -1: none yet) */
  double loss_mean, accuracy;
  int count;
} tr__eval_book;

void tr__eval_book_init(tr__eval_book *b, int replicas);
/* Replica `replica`'s sums. 0, or TR_EINVAL when more evaluations are open at once than
 * replicas can be apart. */
int tr__eval_book_add(tr__eval_book *b, int replica, const tr__eval_sums *s);
void tr__eval_book_report(const tr__eval_book *b, tr_report_msg *r);
/* The latest whole evaluation as the result's "eval.*" figures. */
void tr__eval_book_result(const tr__eval_book *b, tr_result *r);

#endif
