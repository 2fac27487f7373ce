/* elastic.h — what the coordinator keeps of local SGD's replicas that left
 * (tr_async_config.elastic; elastic.c, policy_local.c): the step each left at, the last step
 * of each source's losses heard before it left, and what follows from them — the
 * checkpoint parts a step's checkpoint waits for, the parts laid out for the writer, and the
 * figures (replicas_alive, replicas_left, the samples trained).
 *
 * A replica that left sends a done message whose figures hold TR__M_REPLICA_LEFT_AT and
 * TR__M_REPLICA_LEFT_WHY alone,
 * on its report edge behind its losses and parts (FIFO): every loss it sent has come, and
 * the steps after the last of them are the others' (tr__loss_book_depart). It sent its part
 * of each checkpoint up to the step it left at (the step it was training), none after.
 *
 * Its checkpoint decision: a checkpoint holds the replicas alive at its step, the first of
 * them as the model's parameters (unprefixed), the others under "replica<r>."; a resume
 * gives a replica the checkpoint does not hold (one that left) those first parameters, as
 * it gives every replica replica 0's after a checkpoint taken at a sync. DiLoCo's outer
 * state, the same on every replica, comes with every replica's part in an elastic run (one
 * may leave), and the checkpoint keeps the first's.
 */
#ifndef TR_ELASTIC_H
#define TR_ELASTIC_H

#include <stdbool.h>

#include "job_impl.h"

typedef struct tr__left_book {
  int replicas;
  int64_t heard[TR_TRAIN_MAX_DEVICES]; /* [source]: its last loss's step (-1: none) */
  int64_t at[TR_TRAIN_MAX_DEVICES];    /* [replica]: the step it left at (-1: it did not) */
  int n;                               /* replicas that left */
} tr__left_book;

void tr__left_init(tr__left_book *b, const tr__run *run);
/* A chunk of losses from `source`. */
void tr__left_heard(tr__left_book *b, const tr__loss_msg *m);
/* Whether a done message's report says its replica left: its two pairs, the step (the
 * first's value) and why. */
bool tr__left_said(const tr__report *r);
/* Source `source`'s replica left at `step`: the first step it sent no loss of. */
int64_t tr__left_add(tr__left_book *b, const tr__run *run, int source, int64_t step);
/* The parts the checkpoint of `step` waits for (`all`: with no replica gone). */
int tr__left_parts(const tr__left_book *b, const tr__run *run, int64_t step, int all);
/* The parts of an elastic local SGD checkpoint moved so that those of the replicas it holds
 * come first, in replica order, the outer state kept with the first alone; how many there
 * are. */
int tr__left_compact(const tr__left_book *b, const tr__run *run, int64_t step, tr__part *parts,
                     int nparts);
/* Every replica left: the coordinator `self` fails, naming each ("replica 0 (host:0) at step
 * 3: why; ..."); else 0. */
int tr__left_none(const tr__left_book *b, const tr__report *dones, tr_actor *self);
/* The held-out evaluation (evaluate.h): each replica evaluates its share of the samples,
 * and one that left evaluates none after the step it left at, so the evaluations after it
 * are over the others' shares (an empty share stands for its own). The sums of `replica`,
 * an evaluation's empty shares first if it is new; on a departure, the evaluations pending
 * get the empty share of `replica`. 0, or tr__eval_book_add's status. */
struct tr__eval_book;
struct tr__eval_sums;
int tr__left_eval(const tr__left_book *b, struct tr__eval_book *e, int replica,
                  const struct tr__eval_sums *s);
int tr__left_eval_gone(const tr__left_book *b, struct tr__eval_book *e, int replica);
/* The figures: replicas_alive, replicas_left, the samples trained and their rate (after
 * samples_per_s is set from the steps, before what derives from it). 0, or TR_ENOMEM. */
int tr__left_result(const tr__left_book *b, const tr__run *run, tr_result *r);

#endif
