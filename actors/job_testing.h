/* job_testing.h — hooks that let tests slow a device down or make a worker fail, to check
 * that credits hold and that failures stop a run with a clear message. Not installed: no
 * program but the tests has a use for them.
 *
 *   tr__test_hooks h = {.slow_device = 1, .slow_us = 2000};
 *   rc = tr__train_run_hooked(&options, &h, &result, err, sizeof err);
 */
#ifndef TR_JOB_TESTING_H
#define TR_JOB_TESTING_H

#include <stddef.h>

#include "tr_train.h"

typedef struct tr__test_hooks {
  int slow_device, slow_us;  /* device slow_device sleeps slow_us after each forward and
                                backward (0: off) */
  int slow_growth_us;        /* ... and this much longer at every step (steps that slow
                                down as the run goes) */
  int fail_device, fail_step; /* async: worker fail_device fails its push number fail_step
                                 (from 1; 0: off) */
  int64_t nan_step;          /* float models: the inputs of step nan_step - 1 of the run are
                                NaN on every replica's first stage (0: off) */
  int graphs_fail;           /* every stage's first capture fails (tr_stage_graphs_fail_next):
                                CUDA graphs' fallback to eager passes */
} tr__test_hooks;

void tr__job_set_test_hooks(tr_job *j, const tr__test_hooks *hooks);
int tr__train_run_hooked(const tr_train_options *o, const tr__test_hooks *hooks,
                         tr_train_result *r, char *err, size_t err_size);

#endif
