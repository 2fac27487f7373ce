/* tensor_group.h — tensor parallelism's part of a job (tr_layout_config.tensor T > 1): each
 * (replica, stage) of the layout is a tensor group of T stages on T devices of one process,
 * member t holding member t's model (tr_model_shard, made once per job) and its comm of the
 * group's collectives (tr_tensor_comms_open over the members' devices). Like a replica
 * group, a tensor group is a part the plan records, opens while the graph is wired (every
 * member present, all in this process) and closes with the job:
 *
 *   tr__tensor_models_open(&c, &models, err, n);     // tr_job_new: run->member_models
 *   tr__tensor_group_open(&g, devs, T, err, n);      // the plan's pass, per (replica, stage)
 *   ports.tensor = (tr__tensor_member){.member = t, .comm = g.comms[t]};
 *   tr__tensor_group_close(&g);                      // with the plan
 *
 * Member 0 of a group speaks for it: a last stage's losses and held-out sums; every member
 * sends its checkpoint parts, which the writer joins into whole tensors (tr__tensor_join),
 * and the norm exchange counts a tensor held whole once per group (tr__tensor_grad_sumsq).
 */
#ifndef TR_TENSOR_GROUP_H
#define TR_TENSOR_GROUP_H

#include "job_impl.h"

/* What a stage is of its tensor group: lent with its ports. */
typedef struct tr__tensor_member {
  int member;                 /* t, 0 to T-1 (0 without tensor parallelism) */
  const tr_tensor_comm *comm; /* member t's collectives; NULL: none (whole members) */
} tr__tensor_member;

/* The members' models, [T] (malloc'd, each tr_model_shard(c.model, t, T)), or NULL where
 * T <= 1. TR_EINVAL, err naming layout.tensor and the layer that does not divide. */
int tr__tensor_models_open(const tr_job_config *c, tr_model ***out, char *err, size_t n);
void tr__tensor_models_close(tr_model **models, int T);

/* One group's comms, [n] for devs[0, n). */
typedef struct tr__tensor_group {
  int n;
  tr_tensor_comm *comms[TR_TRAIN_MAX_DEVICES];
} tr__tensor_group;

int tr__tensor_group_open(tr__tensor_group *g, tr_device *const *devs, int n, char *err,
                          size_t err_size);
void tr__tensor_group_close(tr__tensor_group *g);

/* Whether a member's model holds a split tensor (tr_model_shard splits no layer of a model
 * without a kind that splits: its members then hold it whole and compute alike). */
bool tr__tensor_split(const tr_model *member);
/* The stage's share of the gradients' global sum of squares (tr_stage_grad_sumsq, into or
 * added to *out): a split member's parts count once each, a tensor held whole once over the
 * group (member 0's; the others leave theirs out). A stage of a whole model: all of it. 0, or
 * the stage's failure. */
int tr__tensor_grad_sumsq(tr_stage *st, float *out, int accumulate);

/* A checkpoint's whole parts from its split members' (members[tr__part_slot(run, t, k)],
 * each merged whole): wholes[k] for each piece k (zeroed; malloc'd, tr__part_free), each
 * tensor of each member put in its place of the whole (tr_tensor_part_copy), a tensor held
 * whole taken from member 0. 0, or TR_ENOMEM. */
int tr__tensor_join(const tr__run *run, const tr__part *members, tr__part *wholes);

#endif
