/* train_impl.h — what the built-in training actors share: the job, and their messages.
 *
 *   loader r ──batch (inputs)──► stage r,0 ──act──► stage r,1 ... ──► stage r,P-1
 *            ──batch (targets)─────────────────────────────────────────►┘
 *                                  ◄──grad──        ◄──grad──
 *   stage r,s ◄──ready, reduced──► stage r',s     (the replica group of stage s)
 *   stage r,s ◄──norm──► stage r,s'               (global-norm clipping over the stages)
 *   every stage ──progress, part, done──► coordinator
 *
 * Asynchronous jobs: each stage is a whole model, a worker, and instead of updating it
 *   worker w ──push (credit 1)──► server ──reply (parameters when pulled)──► worker w
 *   worker w ──leave──► server ──part, server done──► coordinator
 *
 * Credits ride on tr_graph edges (tr_graph.h); the stages own the batch buffers and lend
 * them to their loader (ring messages), so a loader is never more than `prefetch`
 * micro-batches ahead and memory stays bounded.
 */
#ifndef TR_TRAIN_IMPL_H
#define TR_TRAIN_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "tr_job.h"
#include "tr_system.h"

enum { TR__MAX_STAGES = 64 };

struct tr_job {
  tr_job_config c;
  tr_graph *g;
  const tr_schedule *sc;
  tr_schedule *own_sc;
  int cuts[TR__MAX_STAGES + 1];
  int mb_batch;        /* samples per micro-batch */
  int prefetch;        /* micro-batches */
  tr_actor **stages;   /* [replica × stages + stage], as added */
  tr_actor **loaders;  /* [replica] */
  tr_device **devs;    /* [replica × stages + stage] */
  tr_actor *coordinator;
  tr_actor *server;    /* async */
  tr_device *server_dev;
  _Atomic int64_t next_step; /* async: the next step a loader takes */
  _Atomic int64_t hogwild_version; /* updates the workers have applied */
  char strategy[16];
  tr_train_result result; /* filled by the coordinator */
};

/* Every figure not a number (JSON null) until measured. */
void tr__result_init(tr_train_result *r, const char *model, const char *strategy);

/* The number of the device of stage (r, s) in figures: r × stages + s. */
static inline int tr__device_index(const tr_job *j, int replica, int stage) {
  return replica * j->c.stages + stage;
}

/* stage → loader: the buffers it lends (inputs x, targets y, or both), `depth` of each */
typedef struct tr__ring_msg {
  tr_msg hdr;
  int depth;
  void **x, **y; /* NULL: not this stage's to lend */
} tr__ring_msg;

/* loader → stage: buffer `slot` holds micro-batch `mb` of step `step`; in asynchronous jobs,
 * step -1 (sent without a credit) says the loader has no more */
typedef struct tr__batch_msg {
  tr_msg hdr;
  int slot, mb;
  int64_t step;
} tr__batch_msg;

/* stage → neighbouring stage: an activation or its gradient, in the sender's memory, valid
 * once `ready` (recorded on the sender's stream) has completed */
typedef struct tr__tensor_msg {
  tr_msg hdr;
  tr_edge *edge;
  int mb;
  int64_t step;
  const void *data;
  tr_event *ready;
  tr_device *dev; /* the sender's */
} tr__tensor_msg;

/* replica group: bucket `bucket` of step `step` is final on the sender (event `ready`), or
 * (reduced) the sender's chunk of it is summed and written to every member */
typedef struct tr__bucket_msg {
  tr_msg hdr;
  int bucket, replica;
  bool reduced;
  int64_t step;
  tr_event *ready;
  float *grads; /* the sender's gradient allocation */
} tr__bucket_msg;

/* stages of a replica: the sender's sum of squared gradients at step `step` */
typedef struct tr__norm_msg {
  tr_msg hdr;
  int stage;
  int64_t step;
  double sumsq;
} tr__norm_msg;

/* stage → itself: look at the device's events again */
typedef struct tr__poll_msg {
  tr_msg hdr;
} tr__poll_msg;

/* last stage of replica 0 → coordinator, a few times a second */
typedef struct tr__progress_msg {
  tr_msg hdr;
  int64_t step;
  float loss; /* this replica's share of the step's loss */
} tr__progress_msg;

/* A stage's parameters and optimizer state on the host, for a checkpoint. */
typedef struct tr__part {
  int first, end;   /* layers */
  size_t offset, numel, state_numel;
  float *params, *state; /* malloc'd; the receiver frees them */
} tr__part;

/* stage of replica 0 → coordinator: its part of the checkpoint of step `step` */
typedef struct tr__part_msg {
  tr_msg hdr;
  int stage;
  int64_t step;
  tr__part part;
} tr__part_msg;

/* worker → server: the gradient of step `step` at parameters of version `version`, in the
 * worker's memory (grads, beside its parameters), final once `ready` has completed; `pull`:
 * reply with fresh parameters. Hogwild!: the worker has applied it itself, as update
 * number `applied` (no reply). */
typedef struct tr__push_msg {
  tr_msg hdr;
  int worker;
  bool pull;
  int64_t step, version, applied;
  tr_event *ready;
  float *grads, *params;
  tr_device *dev;
} tr__push_msg;

/* server → worker: the push has been read (and, with `pulled`, the worker's parameters are
 * the server's of version `version`) once `ready` has completed */
typedef struct tr__reply_msg {
  tr_msg hdr;
  bool pulled;
  int64_t version;
  tr_event *ready;
  tr_stage *share; /* Hogwild!: once, before anything: the parameters to train in place */
} tr__reply_msg;

/* worker → server: it pushes no more */
typedef struct tr__leave_msg {
  tr_msg hdr;
  int worker;
} tr__leave_msg;

/* The server's figures at the end of the run. */
typedef struct tr__server_report {
  int64_t updates;
  uint64_t busy_ns; /* after the warm-up, like the stages' */
  int64_t hist[TR_TRAIN_STALENESS_BINS];
  double staleness_sum, consistency_sum;
  int64_t staleness_max, consistency_n;
  int clock_gap_max;
} tr__server_report;

/* server → coordinator, once */
typedef struct tr__server_done_msg {
  tr_msg hdr;
  tr__server_report report;
} tr__server_done_msg;

/* A stage's figures at the end of the run. */
typedef struct tr__report {
  int replica, stage;
  int64_t steps, window_steps;
  uint64_t window_start, window_end, busy_ns;
  int peak_microbatches;
  const float *losses; /* this replica's share of each step's loss (last stages), or NULL */
  const int64_t *loss_steps; /* async: the step of each loss (workers take steps in turn) */
  size_t nlosses;
  const float *params; /* a host copy (in replica groups), for consistency, or NULL */
  size_t numel;        /* of params */
} tr__report;

/* stage → coordinator, once */
typedef struct tr__done_msg {
  tr_msg hdr;
  tr__report report;
} tr__done_msg;

extern const tr_msgtype tr__ring_type, tr__batch_type, tr__tensor_type, tr__bucket_type,
    tr__norm_type, tr__poll_type, tr__progress_type, tr__part_type, tr__done_type,
    tr__push_type, tr__reply_type, tr__leave_type, tr__server_done_type;

extern const tr_behaviour tr__loader_behaviour, tr__stage_behaviour, tr__coordinator_behaviour,
    tr__server_behaviour;

/* The actors' states (their .c files) and the wiring of their edges (job.c). */
void *tr__loader_new(tr_job *j, int replica);
void *tr__stage_new(tr_job *j, int replica, int stage, tr_device *dev);
void *tr__coordinator_new(tr_job *j);
void *tr__server_new(tr_job *j, tr_device *dev);
void tr__loader_set_edges(void *loader, tr_edge *x, tr_edge *y);
void tr__stage_set_input(void *stage, tr_edge *x, tr_edge *y);
void tr__stage_set_chain(void *stage, tr_edge *out, tr_edge *in, bool forward);
int tr__stage_set_group(void *stage, tr_actor *const *members, int n);
/* async: the worker's push edge; the server's edge from worker w */
void tr__stage_set_push(void *stage, tr_edge *push);
int tr__server_set_worker(void *server, int worker, tr_edge *push);

/* Checkpoints (checkpoint_io.c). peek: the step a checkpoint of model `m` was taken at,
 * checked before any thread starts; snapshot and load: on the stage's own thread; write:
 * the whole model from its stages' parts. */
int tr__checkpoint_peek(const char *path, const tr_model *m, int64_t *step, char *err,
                        size_t err_size);
int tr__stage_snapshot(tr_stage *st, tr__part *part);
void tr__part_free(tr__part *part);
int tr__checkpoint_write(const tr_job *j, int64_t step, const tr__part *parts, int nparts,
                         char *err, size_t err_size);
int tr__stage_load(tr_stage *st, const char *path, char *err, size_t err_size);

#endif
