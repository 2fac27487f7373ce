/* costs.h — the layer costs a run and its prediction share (costs.c): the cut of a pipeline
 * balanced by what each layer costs, measured once and kept (tr_plan_layer_times), so that a
 * run and the plan that predicted it cut the model alike. Private to actors/. */
#ifndef TR_COSTS_H
#define TR_COSTS_H

#include "tr_job.h"
#include "tr_plan.h"

/* The cut of `c`'s model into layout.stages × chunks pieces for micro-batches of `batch`,
 * balanced by each layer's forward and backward on `d` (from the default file of costs, or
 * measured there): 1 and cuts[0 .. pieces] filled; 0 where it cannot be measured (the job
 * then cuts by FLOPs, as tr_job_new does). */
int tr__costs_cut(const tr_model *m, tr_device *d, int pieces, int batch, int *cuts);

/* A run's prediction (planner.c): tr_plan_predict of its options before it runs (false
 * where there is none: another strategy, several processes, a failure); then the result's
 * `predicted`, and its errors against what the run measured. */
bool tr__plan_run(const tr_train_options *o, tr_plan_prediction *p);
void tr__plan_result(const tr_plan_prediction *p, tr_train_result *r);

#endif
