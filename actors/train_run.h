/* train_run.h — what one tr_train_run holds (train.c), for the parts it is made of: the
 * checks and openings of a run's inputs and outputs (train_io.c). Internal. */
#ifndef TR_TRAIN_RUN_H
#define TR_TRAIN_RUN_H
#include <stdbool.h>
#include <stddef.h>

#include "file_write.h"
#include "job_impl.h"
#include "tr_file.h"
#include "tr_train.h"

/* Everything one run holds, built from the options before any thread starts. */
typedef struct tr__train_run {
  tr_model *model;
  tr_device_list *devices;
  tr_device_list *server; /* async */
  tr_data *data;
  tr_data *eval, *train, *held; /* eval_data's files; eval_split's parts (of jc's data) */
  tr_checkpoint *resume;  /* read once; every stage reads its bytes */
  tr_job_config jc;
  int cuts[TR__MAX_STAGES + 1];
  int64_t first_step, end_step;
  bool observed; /* rank 0 was given an observer: every rank's graph has its actor */
  tr_file_lock *ck_lock; /* rank 0: one writer per checkpoint, for the run's whole life */
  tr__file_output trace; /* this rank's trace as the run began (file_write.h), or zeros */
} tr__train_run;

/* Each returns 0, or a status with its message in err (n bytes) naming the option. */

/* The files the run will write (checkpoint, this rank's trace, the checkpoint's lock file):
 * writable now, none an input or another output, the checkpoint's lock taken on rank 0
 * (rn->ck_lock), the trace opened (rn->trace). */
int tr__train_check_outputs(tr__train_run *rn, const tr_train_options *o, char *err, size_t n);
/* The checkpoint to resume from (rn->jc.checkpoint.resume): read once into rn->resume, checked,
 * its step rn->first_step. */
int tr__train_open_resume(tr__train_run *rn, const tr_train_options *o, char *err, size_t n);
/* The held-out samples into rn->jc.eval.data: eval_data's files, or eval_split's part of the
 * run's data (rn->jc.data, opened). */
int tr__train_open_eval(tr__train_run *rn, const tr_train_options *o, char *err, size_t n);
/* The run's memory on each of this rank's devices against what they have; every rank's
 * verdict shared across processes. */
int tr__train_check_memory(tr__train_run *rn, tr_world *w, char *err, size_t n);
/* Where this rank writes its trace of `path` (rank 0: path itself). */
void tr__train_trace_path(char *out, size_t n, const char *path, const tr_world *w);

#endif
