/* planner.h — what a run takes from the planner (tr_plan.h): the cut of a pipeline balanced
 * by what each layer costs, measured once and kept (costs.c), so that a run and the plan
 * that predicted it cut the model alike; the prediction of the run and its error
 * (planner.c); the layout chosen for it (plan_layouts.c). Private to actors/. */
#ifndef TR_PLANNER_H
#define TR_PLANNER_H

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

/* layout.automatic: `o` with the strategy and layout troupe plan ranks best (tr_plan_rank)
 * into *chosen, and the line that says which and why into `why`. 0, or TR_EINVAL naming a
 * layout field given beside it, or that none fits (err). */
int tr__plan_choose(const tr_train_options *o, tr_train_options *chosen, char *why, size_t nwhy,
                    char *err, size_t n);

#endif
