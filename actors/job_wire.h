/* job_wire.h — the inside of a job (struct tr_job) and the wiring helpers its parts share:
 * job.c (the configuration, stages, loaders, edges), job_async.c (an asynchronous job's
 * server and workers) and join.c (the workers that join a running job). Private to them. */
#ifndef TR_JOB_WIRE_H
#define TR_JOB_WIRE_H

#include "job_impl.h"
#include "plan.h"
#include "tr_file.h"

struct tr__join; /* join.c */

struct tr_job {
  tr__run run;
  tr_checkpoint *resume; /* opened here (checkpoint.resume without resume_from) */
  tr_schedule *sc;
  int prefetch;
  /* the actors as added, for wiring */
  tr_actor **stages;  /* [tr__stage_index: (replica × T + member) × stages + stage] */
  tr_actor **loaders; /* [replica × T + member] */
  tr_model **member_models; /* [T] (tensor_group.h), or NULL */
  tr_actor *coordinator, *server;
  tr__plan plan; /* the stages' ports, handed over when the graph runs */
  tr_file_lock *ck_lock; /* rank 0: one writer per checkpoint.path while the job lives */
  int ncross; /* replica groups over several ranks, numbered for the transports */
  struct tr__join *join; /* workers that join the running job (join.c), or NULL */
  char error[512]; /* the last refusal of a wiring call (tr_job_error) */
  tr_result *result; /* the run's figures: the coordinator fills them (tr_job_result_of) */
};

/* A wiring call refused: `status`, and tr_job_error says which argument broke which rule. */
int tr__job_refuse(tr_job *j, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An edge the graph would not make: the call, and what it was given. */
int tr__job_failed(tr_job *j, int rc, const char *call, const char *actors);
/* Adds an actor on rank `rank` (its state destroyed if that fails). */
int tr__job_add(tr_job *j, int rank, const char *name, tr_actor_kind kind, const tr_behaviour *b,
                void *state, tr_actor **out);
int tr__job_rank_of(const tr_job *j, const tr_device *dev); /* the rank whose device it is */
int tr__job_stage_index(const tr_job *j, const tr_actor *a); /* -1: not a stage of the job */
int tr__job_connect(tr_job *j, tr_actor *from, tr_actor *to, const tr_msgtype *type,
                    const char *name, int credits, tr_edge **out);
/* A stage or the server (source `source`) → the coordinator, once both exist. */
int tr__job_connect_report(tr_job *j, tr_actor *from, int source);
/* An elastic job goes on without a rank of workers only (job_async.c; the transport's thread). */
int tr__job_lost_rank(void *arg, int rank, const char *why);

/* A wiring call on no job, or with nowhere to put what it makes (tr_base.h, Misuse): on
 * stderr, and in the job's error. */
#define JOB_GIVEN(j) \
  if ((j) == NULL) return tr__misuse(TR_EINVAL, "%s: j is NULL", __func__)
#define OUT_GIVEN(out) \
  if ((out) == NULL) return tr__job_refuse(j, TR_EINVAL, "%s: out is NULL", __func__)

/* A wiring call after the plan was closed. */
#define CLOSED(call)                                                                        \
  tr__job_refuse(j, TR_ESTATE, call ": the plan is closed (tr_job_plan or tr_graph_run ran): " \
                 "wire the job before it")

#endif
