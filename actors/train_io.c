/* train_io.c — the checks and openings of a run's inputs and outputs, for tr_train_run
 * (train.c) before a job is made: the files it will write, the checkpoint it resumes from,
 * the held-out samples, and the memory it will hold (train_run.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_config.h"
#include "memory_need.h"
#include "train_run.h"

/* What the run will hold on each of this rank's devices against what they have
 * (memory_need.h), on the job completed as tr_job_new will see it. Across processes each
 * rank counts its own, and all end when one refuses (naming it), as on a bad option. */
int tr__train_check_memory(tr__train_run *rn, tr_world *w, char *err, size_t n) {
  tr_job_config job = rn->jc;
  char why[8];
  int rc = 0; /* a job that is not complete: prepare's last check says why, in its order */
  if (tr__job_config_complete(&job, why, sizeof why) == 0)
    rc = tr__memory_check(&job, rn->devices, err, n);
  const int size = tr_world_size(w);
  if (size == 1) return rc;
  int *all = malloc(sizeof *all * (size_t)size);
  if (all == NULL || tr_world_allgather(w, &rc, sizeof rc, all)) {
    free(all);
    return rc ? rc : tr_errorf(err, n, TR_ESYS, "the ranks could not compare their memory");
  }
  for (int r = 0; r < size && rc == 0; r++)
    if (all[r])
      rc = tr_errorf(err, n, all[r], TR__F("global_batch") " %d: rank %d cannot hold the run "
                     "(it says why)", job.global_batch, r);
  free(all);
  return rc;
}

/* Rank 0 writes the trace where asked; rank r beside it, ".rank<r>" before the extension. */
void tr__train_trace_path(char *out, size_t n, const char *path, const tr_world *w) {
  const int rank = tr_world_rank(w);
  const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
  if (rank == 0) snprintf(out, n, "%s", path);
  else if (dot && (!slash || dot > slash))
    snprintf(out, n, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
  else snprintf(out, n, "%s.rank%d", path, rank);
}

/* The files the run will write: each must be writable now, not after the run, and must not
 * be one the run reads or another it writes. Rank 0 writes the checkpoints, and holds the
 * checkpoint's lock from here to the run's end (tr_file_lock_output); every rank writes its
 * trace, under the name it derives from the one given (tr__train_trace_path), which is held
 * to the same rules: rank 1's "t.rank1.json" is no more an input than "t.json" is. */
int tr__train_check_outputs(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  int rc = 0;
  const int rank = tr_world_rank(o->world);
  const char *ck = rank == 0 ? o->job.checkpoint.path : NULL;
  char trace[4096], trace_what[4200], *lock = NULL, lock_what[4200];
  if (o->trace) tr__train_trace_path(trace, sizeof trace, o->trace, o->world);
  if (o->trace && rank == 0) snprintf(trace_what, sizeof trace_what, TR__F("trace"));
  else if (o->trace)
    snprintf(trace_what, sizeof trace_what, TR__F("trace") " '%s': rank %d's trace", o->trace,
             rank);
  if (ck && (rc = tr_file_output_target(ck, &lock)) == 0) {
    char *name = tr__file_lock_name(lock);
    free(lock);
    lock = name;
    if (lock == NULL) rc = TR_ENOMEM;
    snprintf(lock_what, sizeof lock_what, TR__F("checkpoint.path") " '%s': its lock file", ck);
  }
  if (rc == TR_ENOMEM) return tr_errorf(err, n, rc, "out of memory");
  rc = 0; /* a loop of links: the probe names it */
  /* each write tried in place now (tr_file_probe_output), where it will be made */
  if (ck) rc = tr_file_probe_output(ck, TR__F("checkpoint.path"), err, n);
  if (rc == 0 && o->trace) rc = tr_file_probe_output(trace, trace_what, err, n);
  /* No output overwrites an input or another output. A checkpoint may replace the one it
   * resumes from: that is read before it is replaced, and replaced by a rename. */
  const char *in[] = {o->data,        o->eval_data,           o->labels,
                      o->eval_labels, o->job.checkpoint.resume, o->job.checkpoint.path};
  const char *in_what[] = {TR__F("data"),        TR__F("eval_data"),
                           TR__F("labels"),      TR__F("eval_labels"),
                           TR__F("checkpoint.resume"), TR__F("checkpoint.path")};
  for (int i = 0; i < 6 && rc == 0; i++) { /* the checkpoint: the files read */
    if (i < 4)
      rc = tr_file_check_distinct(ck, TR__F("checkpoint.path"), in[i], in_what[i], err, n);
    if (rc == 0)
      rc = tr_file_check_distinct(lock, lock_what, in[i], in_what[i], err, n);
    if (rc == 0 && o->trace)
      rc = tr_file_check_distinct(trace, trace_what, in[i], in_what[i], err, n);
  }
  if (rc == 0 && o->trace) rc = tr_file_check_distinct(lock, lock_what, trace, trace_what, err, n);
  free(lock);
  if (rc == 0 && ck) rc = tr_file_lock_output(ck, TR__F("checkpoint.path"), &rn->ck_lock, err, n);
  if (rc == 0 && o->trace) rc = tr__file_output_open(&rn->trace, trace, trace_what, true, err, n);
  return rc;
}

/* The checkpoint to resume from, read once, checked, and its step; what differs legally
 * from this run (batch, seed, strategy) goes to the notes. The stages read its bytes. */
int tr__train_open_resume(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  tr_job_config *c = &rn->jc;
  const char *path = c->checkpoint.resume;
  const tr_optim_kind kind = tr__job_optim(c).kind;
  char why[768];
  int rc = tr_checkpoint_open(&rn->resume, path, why, sizeof why);
  if (rc == 0)
    rc = tr__checkpoint_check(rn->resume, path, rn->model, kind, &rn->first_step, why,
                              sizeof why);
  if (rc) return tr_errorf(err, n, rc, TR__F("checkpoint.resume") ": %s", why);
  c->checkpoint.resume_from = rn->resume;
  char differ[512];
  const int batch = tr__job_global_batch(c);
  tr__checkpoint_differences(rn->resume, (uint64_t)batch, c->seed, c->strategy, differ,
                             sizeof differ);
  if (differ[0] && o->notes && tr_world_rank(o->world) == 0)
    fprintf(o->notes, "troupe: resuming %s at step %lld, taken with %s\n", path,
            (long long)rn->first_step, differ);
  return 0;
}

/* The held-out samples (tr_train_options.eval_*, job.eval): eval_data's files opened as the
 * run's data is, or the run's data (rn->jc.data, opened) split in two by eval_split, its
 * training part trained on. A held-out byte file of a token model is endless: with
 * job.eval.samples 0 its first EVAL_SAMPLES samples are evaluated. */
enum { EVAL_SAMPLES = 1024 };

/* The held-out samples a finite source will be evaluated on, read once now: a value the
 * model reads as a number that is not finite is refused before anything trains, naming the
 * file's row and column (the loader checks each held-out micro-batch too, but only when
 * the first evaluation comes; an endless source is checked then). */
static int check_held_values(const tr__train_run *rn, char *why, size_t n) {
  const tr_eval_config *e = &rn->jc.eval;
  char sizes[8];
  if (tr_data_check(e->data, rn->model, sizes, sizeof sizes)) return 0; /* the job's says */
  const int64_t rows = tr_data_rows(e->data);
  const int64_t count = e->samples > 0 && e->samples < rows ? e->samples : rows;
  const int rc = tr_data_check_finite(e->data, rn->model, 0, (size_t)count, NULL, NULL, why, n);
  return rc == TR_ENONFINITE ? TR_EINVAL : rc; /* an input refused, as a label out of range */
}

int tr__train_open_eval(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  tr_job_config *c = &rn->jc;
  const bool files = o->eval_data || o->eval_labels, split = o->eval_split != 0;
  const char *model = tr_model_name(rn->model);
  const bool tokens = tr_model_token_input(rn->model);
  char why[768];
  if (o->job.eval.data && (files || split))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("job.eval.data") ": give the held-out samples once, as job.eval.data "
                     "(a source of yours) or as %s, not both",
                     files ? TR__F("eval_data") " (files)"
                           : TR__F("eval_split") " (a part of " TR__F("data") ")");
  if (files && split)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("eval_split") " %g: the held-out samples are the files of "
                     TR__F("eval_data") " or a part of " TR__F("data") " split off, not both",
                     o->eval_split);
  if (split) {
    if (!(o->eval_split > 0 && o->eval_split < 1))
      return tr_errorf(err, n, TR_EINVAL,
                       TR__F("eval_split") " %g: the fraction of the rows of " TR__F("data")
                       " held out is in (0, 1)",
                       o->eval_split);
    int rc = tr_data_split(c->data, o->eval_split, c->seed, &rn->train, &rn->held, why,
                           sizeof why);
    if (rc) return tr_errorf(err, n, rc, TR__F("eval_split") " %g: %s", o->eval_split, why);
    c->data = rn->train;
    c->eval.data = rn->held;
    if ((rc = check_held_values(rn, why, sizeof why)))
      return tr_errorf(err, n, rc, TR__F("eval_split") " %g: %s", o->eval_split, why);
    return 0;
  }
  if (!files) {
    const int rc = c->eval.data ? check_held_values(rn, why, sizeof why) : 0;
    return rc ? tr_errorf(err, n, rc, TR__F("job.eval.data") ": %s", why) : 0;
  }
  if (!o->eval_data || (tokens && o->eval_labels) || (!tokens && !o->eval_labels))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("%s") ": model '%s' reads %s: its held-out samples are %s",
                     o->eval_data ? "eval_labels" : "eval_data", model,
                     tokens ? "tokens" : "floats",
                     tokens ? "one byte or text file (" TR__F("eval_data") "), no labels"
                            : "two .npy files, features (" TR__F("eval_data") ") and labels ("
                              TR__F("eval_labels") ")");
  int rc = tr_data_open_for(&rn->eval, rn->model, c->seed, o->eval_data, o->eval_labels, why,
                            sizeof why);
  if (rc) return tr_errorf(err, n, rc, TR__F("eval_data") ": %s", why);
  c->eval.data = rn->eval;
  if (tr_data_rows(rn->eval) == 0 && c->eval.samples == 0) c->eval.samples = EVAL_SAMPLES;
  if ((rc = check_held_values(rn, why, sizeof why)))
    return tr_errorf(err, n, rc, TR__F("eval_data") ": %s", why);
  return 0;
}

