/* step_policy.h — what a stage runner does at the fixed points of a step, without knowing
 * which strategy it serves. The runner interprets its schedule's actions; where a step
 * begins, where the gradients of its last backward become final, at the step action and at
 * the end of the run it calls its policy, and the policy is the strategy: synchronous
 * (policy_sync.c: the replica group's sums, the norm exchange, the optimizer, ZeRO-1) or an
 * asynchronous worker (policy_async.c: push, pull, staleness). A new strategy is a new
 * policy: one file with one table of these operations, made by the job's plan.
 *
 *   tr__policy p = tr__policy_sync(&parts);            // the plan makes it, the stage owns it
 *   p.ops->open(p.state, &ctx);                        // on the device's thread
 *   flags = p.ops->begin(p.state, step, head, ended, &run_step);   // each step's start
 *   p.ops->last_backward(p.state, step, true); ...backward...; p.ops->last_backward(.., false)
 *   rc = p.ops->update(p.state, step, run_step);       // the step action: 1 done, 0 waits
 *   rc = p.ops->leave(p.state);                        // the end: 1 done, 0 waits
 *   if (p.ops->figures) p.ops->figures(p.state, &f);  // the reporter, with the figures
 *   rc = p.ops->depart(p.state, why);                  // elastic: it failed, it leaves
 *
 * Operations return 1 (TR__DONE) when done, 0 when they wait for a message (the stage runs
 * again when one comes), or a negative status after failing the actor.
 */
#ifndef TR_STEP_POLICY_H
#define TR_STEP_POLICY_H

#include <stdbool.h>

#include "inbox.h"
#include "metrics.h"
#include "run_metrics.h"

/* What begin says of the step about to start. */
enum {
  TR__BEGIN_WAIT = 0,  /* not yet: a message will say */
  TR__BEGIN_GO = 1,    /* run it, for the run's step *run_step */
  TR__BEGIN_END = 2,   /* the stage's part of the run is over */
  TR__BEGIN_DROP = 4,  /* the batch at the head of the first input goes back unstarted */
};

/* What the stage lends its policy when it opens, on the device's thread. */
typedef struct tr__policy_ctx {
  tr_actor *self;
  const tr__run *run;
  int replica, stage;
  tr_device *dev;
  tr_stream *s;             /* the compute stream of every chunk */
  tr_stage *const *chunks;  /* the stage's model chunks, [nch] */
  int nch;
  tr__busy *busy;
} tr__policy_ctx;

typedef struct tr__policy_ops {
  const char *name;
  bool run_steps; /* the stage's steps are the run's (an asynchronous worker's are its pushes) */
  /* Before the chunks open: the part of the optimizer state they hold (ZeRO). */
  tr_stage_shard (*shard)(const void *p);
  int (*open)(void *p, const tr__policy_ctx *ctx);
  /* The stage's first step number, and how many of the run's `steps` it takes part in. */
  int64_t (*first_step)(const void *p, const tr__run *run);
  int64_t (*share)(const void *p, const tr__run *run, int64_t steps);
  /* `head`: the batch at the head of the stage's first input (NULL: none yet); `ended`: the
   * run was ended early. TR__BEGIN_* flags. */
  int (*begin)(void *p, int64_t step, const tr__lent *head, bool ended, int64_t *run_step);
  /* Around the backward that makes the step's weight gradients final (its last
   * micro-batch's); `after` false before it, true after (0 or a status). */
  int (*last_backward)(void *p, int64_t step, bool after);
  int (*update)(void *p, int64_t step, int64_t run_step);
  /* A message of the policy's own protocols: true when it was (*rc its status). */
  bool (*receive)(void *p, const tr_msg *m, int *rc);
  bool (*waiting)(const void *p); /* on the device: the stage polls its events meanwhile */
  int (*finish)(void *p);         /* the device is done: the policy's streams too (0, status) */
  int (*leave)(void *p);          /* the last message of the run */
  /* Whether this stage of `replica` sends checkpoint parts, and a copy of its parameters
   * with its figures (the replicas' consistency). */
  bool (*sends_parts)(const void *p, int replica);
  bool (*consistency)(const void *p);
  int64_t (*skipped)(const void *p); /* updates skipped for a norm that was not finite */
  /* OPTIONAL (NULL: none): the policy's parts' figures, added at the end of the run to the
   * stage's (the reporter calls it), e.g. the bytes its parts sent over the run:
   * tr__figures_int(f, TR__M_COMM_BYTES, bytes). */
  void (*figures)(const void *p, tr__figures *f);
  /* OPTIONAL (NULL: none): adds the policy's own to the stage's checkpoint part of the step
   * just ended (its replica's parameters, its state: local SGD's); 0, or a status after
   * failing the actor. */
  int (*part)(void *p, struct tr__part *part);
  /* OPTIONAL (NULL: a failure of the stage fails the run): elastic jobs (elastic.c). The
   * stage failed, `why` says how: the policy leaves the run, telling whoever counts on it
   * (an asynchronous worker its server, a local SGD replica its group and the coordinator).
   * 0: it left; a status: it cannot (it never opened, or peers may have used part of what
   * it was sending), and the failure stands — the policy may have failed the actor saying
   * why, which the stage's failure then is. */
  int (*depart)(void *p, const char *why);
  /* The run it left, once depart succeeded; NULL while it takes part. */
  const tr__run *(*departed)(const void *p);
  /* After depart: a message that came (NULL: a batch, which the stage holds). TR__LEFT_*
   * flags: whether the batches held go back now, and whether the run is over for it. */
  int (*left)(void *p, const tr_msg *m);
  void (*abort)(void *p);         /* a failed run: nothing waits for a peer that is gone */
  void (*close)(void *p);         /* device resources, on the device's thread */
  void (*free)(void *p);
} tr__policy_ops;

/* What a policy that left says of what comes after (its left op). */
enum {
  TR__LEFT_HOLD = 0, /* the batches stay held (a step the loader claimed is not lost) */
  TR__LEFT_BACK = 1, /* every batch held, and every one that comes, goes back */
  TR__LEFT_OVER = 2, /* the run is over for it: once its batches are back (a policy whose
                        steps are not the run's: its loader's end among them), its part is
                        done (tr_graph_done) */
};

typedef struct tr__policy {
  const tr__policy_ops *ops;
  void *state;
} tr__policy;

/* The policies a plan can give its stages, one row each: its name, whether it serves a
 * configuration when none is named (tr_job_config.step_policy NULL), and how it is made from
 * the parts the plan wired for a stage. A new strategy is a policy file and a row: the
 * built-in rows are policies.c's; tr__policy_add puts a row of a program's own first. */
/* The parts a plan wires for a stage (NULL: not in this job). */
typedef struct tr__policy_parts {
  struct tr__group *group;   /* the replica group of this stage */
  struct tr__clip *clip;     /* the norm exchange between stages */
  struct tr__worker *worker; /* an asynchronous worker's link to its server */
} tr__policy_parts;

/* The synchronous policy uses group and clip; the asynchronous one, worker. */
int tr__policy_sync(tr__policy *out, const tr__policy_parts *parts);
int tr__policy_async(tr__policy *out, struct tr__worker *worker);

typedef struct tr__policy_row {
  const char *name;
  bool (*serves)(const tr_job_config *c);
  /* What a stage's wiring lacks that the policy needs ("a server (tr_job_serve)"), or NULL.
   * make takes the parts over (it frees what it does not use). */
  const char *(*lacks)(const tr_job_config *c, const tr__policy_parts *parts);
  int (*make)(tr__policy *out, const tr__policy_parts *parts);
} tr__policy_row;

/* The row named `name`, or (NULL) the first that serves c; NULL: none. */
const tr__policy_row *tr__policy_find(const char *name, const tr_job_config *c);
/* A row of the program's own, looked at before the built-in ones (at most a few; the row
 * must outlive every job). 0, or TR_ENOMEM when the table is full. */
int tr__policy_add(const tr__policy_row *row);

/* The synchronous way to begin a step (a policy's begin may be it): the first stage claims
 * each step of the run as it starts it, the others follow while the run's end is ahead;
 * *run_step is the step itself. TR__BEGIN_* flags. */
int tr__policy_claim(const tr__policy_ctx *ctx, int64_t step, int64_t *run_step);
/* The synchronous first_step and share (a policy's ops may be them): the stage starts at the
 * run's first step and takes part in every step. */
int64_t tr__policy_run_first_step(const void *p, const tr__run *run);
int64_t tr__policy_every_step(const void *p, const tr__run *run, int64_t steps);

/* Step `step` diverged: fails the actor, naming the stage and what was not finite. */
int tr__policy_not_finite(const tr__policy_ctx *ctx, int64_t step, const char *what,
                          double value);

#endif
