/* job_impl.h — what the built-in training actors share: the run's read-only description,
 * the private messages of their protocols, and how job.c makes and wires them.
 *
 *   loader r ──batch (inputs)──► stage r,0 ──act──► stage r,1 ... ──► stage r,P-1
 *            ──batch (targets)─────────────────────────────────────────►┘
 *                                  ◄──grad──        ◄──grad──
 *   stage r,s ◄──bucket──► stage r',s     (the replica group of stage s: group.c)
 *   stage r,s ◄──norm──► stage r,s'       (global-norm clipping over the stages: clipnorm.c)
 *   every stage ──report (losses, checkpoint parts, final figures)──► coordinator
 *   coordinator ──report──► each observer
 *
 * Asynchronous jobs: each stage is a whole model, a worker (worker.c), and instead of
 * updating it
 *   worker w ──push (gradient; leave at the end)──► server ──reply──► worker w
 *   server ──report──► coordinator
 *
 * Every arrow is an edge of the graph (tr_graph.h) with its credits. Actors know each other
 * only through their edges; what they share is the tr__run, written by tr_job_new and read
 * only afterwards.
 */
#ifndef TR_JOB_IMPL_H
#define TR_JOB_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h> /* tr__ck_mark */
#include <time.h>

#include "run_metrics.h"
#include "tr_job.h"
#include "tr_system.h"

enum {
  TR__MAX_STAGES = 64,
  TR__REPORT_CREDITS = 4, /* stage → coordinator: a loss chunk, a checkpoint part, the end */
  TR__GRAD_CREDITS = 2,   /* stage → the stage before: input gradients in flight (the two
                             buffers tr_stage_backward alternates); the planner's too */
};

/* The run as every actor of the job sees it: read-only once tr_job_new has returned. */
typedef struct tr__run {
  tr_job_config c;          /* defaults filled in; c.layout.cuts points at cuts + 1 */
  tr_graph *g;
  const tr_schedule *sc;
  int cuts[TR__MAX_STAGES + 1]; /* piece k: layers [cuts[k], cuts[k + 1]); chunk c of stage s
                                   is piece c × stages + s */
  int mb_batch;             /* samples per micro-batch */
  char strategy[16];
  bool nccl;                /* a replica group here sums through NCCL (set while the graph
                               is wired by tr_job_group, before it runs) */
  int edges_nccl, edges_mpi; /* pipeline edges between ranks, by what carries their tensors
                                (tr_job_chain: the same count on every rank) */
  int batches_made, batches_loaded; /* batch edges: samples made by the stage, or loaded */
  int devices_given; /* tr_job_add_stages's list (0: stages added one by one) */
  int64_t snapshot_every; /* the stages send their parts every this many steps and at the
                             end for observers of the parameters (tr_job_snapshot: the gcd of
                             their `every`, set while the graph is wired); 0: none */
  /* Tensor parallelism: member t's model (tr_model_shard, made once by the job), [T]; NULL
   * (or T 1): every member holds c.model whole. */
  const tr_model *const *member_models;
} tr__run;

/* The model member t of a tensor group holds (c.model without tensor parallelism). */
static inline const tr_model *tr__member_model(const tr__run *run, int member) {
  return run->member_models ? run->member_models[member] : run->c.model;
}

/* What a stage's parts of one step are for (tr__part_msg.due): the checkpoint file, the
 * observers' parameters (tr_job_snapshot), or both from one gathering. */
enum { TR__DUE_CHECKPOINT = 1, TR__DUE_PARAMS = 2 };

/* Whether something done every `every` steps (0: never) and at the end is due at `step`:
 * at the end (`end`), or at a multiple of `every` before the run's last step. */
static inline bool tr__due_at(int64_t every, int64_t step, bool end, int64_t end_step) {
  return end || (every > 0 && step % every == 0 && step < end_step);
}

/* How a value that is not a finite number reads in a message: "NaN", "+Inf", "-Inf". */
static inline const char *tr__nonfinite_name(double v) {
  return v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

/* The pieces the model is cut into: stages × chunks. */
static inline int tr__pieces(const tr__run *run) {
  return run->c.layout.stages * run->c.layout.chunks;
}

/* Tensor parallelism (layout.tensor T > 1): member t of replica r's stages is a chain of
 * its own, chain r × T + t, whose stages are numbered as a replica's are; 1: none. */
static inline int tr__members(const tr__run *run) {
  return run->c.layout.tensor > 1 ? run->c.layout.tensor : 1;
}

/* The number of stage s of member t of replica r, in the plan and in figures:
 * (r × T + t) × stages + s (stage s of a chain is its number mod stages). */
static inline int tr__stage_index(const tr__run *run, int replica, int member, int stage) {
  return (replica * tr__members(run) + member) * run->c.layout.stages + stage;
}

/* The number of stage (r, s) in figures (member 0's, under tensor parallelism). */
static inline int tr__device_index(const tr__run *run, int replica, int stage) {
  return tr__stage_index(run, replica, 0, stage);
}

/* Every stage of the job: replicas × T × stages. */
static inline int tr__stage_count(const tr__run *run) {
  return run->c.layout.replicas * tr__members(run) * run->c.layout.stages;
}

/* A checkpoint's parts: one per piece, and of each member where the members' models are
 * split (the writer joins their tensors); slot `member`, `piece` of them. Whole members
 * are alike: member 0 sends the parts. */
static inline int tr__part_count(const tr__run *run) {
  return tr__pieces(run) * (run->member_models ? tr__members(run) : 1);
}
static inline int tr__part_slot(const tr__run *run, int member, int piece) {
  return (run->member_models ? member : 0) * tr__pieces(run) + piece;
}
static inline bool tr__member_sends_parts(const tr__run *run, int member) {
  return member == 0 || run->member_models != NULL;
}

/* ---- private messages ------------------------------------------------------------------ */

/* An actor to itself: look at the device's events again. */
typedef struct tr__poll_msg {
  tr_msg hdr;
} tr__poll_msg;

/* A stage's losses (losses.h): its share of step `step`'s loss (of the global batch's mean),
 * and when the step ended there. Variable size. */
typedef struct tr__loss_entry {
  int64_t step;
  uint64_t t;
  float loss;
} tr__loss_entry;

typedef struct tr__loss_msg {
  tr_msg hdr;
  int source; /* tr__device_index of the sender */
  int n;
  tr__loss_entry e[];
} tr__loss_msg;

/* A stage's parameters and optimizer state on the host, for a checkpoint: the whole of
 * them, or (ZeRO) a shard of the state, with or without the parameters. */
enum { TR__PART_EXTRAS = 4 };

typedef struct tr__part {
  int first, end;   /* layers */
  size_t offset, numel;
  size_t shard_offset, shard_numel; /* the state's elements of the stage: [shard_offset,
                                       shard_offset + shard_numel); whole: 0, numel */
  size_t state_numel;    /* copies (tr_stage_info.state_numel) × shard_numel */
  float *params, *state; /* malloc'd (params NULL: not sent); the receiver frees them */
  /* Whose they are: replica 0's are the model's; a policy whose replicas differ (local SGD)
   * has every replica send its own, written under "replica<r>." */
  int replica;
  /* A policy's own tensors beside them (DiLoCo's outer state), each shaped as the part's
   * parameters: copy k is extra[k × numel, ...), written as "<extra_names[k]>.<tensor>" */
  int extra_copies;
  char extra_names[TR__PART_EXTRAS][24];
  float *extra;
} tr__part;

/* stage of replica 0 (or the server) → coordinator: its part of the checkpoint of `step` */
typedef struct tr__part_msg {
  tr_msg hdr;
  int source, stage; /* stage: the piece (interleaved: chunk × stages + stage) */
  int64_t step;
  unsigned due;      /* TR__DUE_*: what the parts of this step are for */
  tr__part part;
} tr__part_msg;

/* A stage's figures at the end of the run: (key, value) pairs of the table of run metrics
 * (run_metrics.h), which the coordinator reduces by the table's rules. */
typedef struct tr__report {
  char device[32];     /* its device's name */
  tr__figures fig;
  const float *params; /* a host copy (in replica groups), for consistency, or NULL */
  size_t numel;        /* of params */
} tr__report;

/* run_settings.c: the result's settings (the layout and devices that ran: dones[i] and
 * rank[i] are device i's report and process; 0, or TR_ENOMEM), and the most any replica's
 * parameters are apart from replica 0's, ||θ_r − θ_0|| / ||θ_0||, from the reports' copies. */
int tr__result_settings(const tr__run *run, const tr__report *dones, const int *rank,
                        tr_result *r);
/* The figures docs/WORKLOADS.md derives from the measures reduced (`red`, applied to r): the
 * window's seconds, samples and rates, each device's utilization and idle time, the
 * bubbles, the server's utilization. */
void tr__result_rates(const tr__run *run, const tr__reduced *red, tr_result *r);
double tr__replicas_consistency(const tr__run *run, const tr__report *dones);

typedef struct tr__done_msg {
  tr_msg hdr;
  int source;
  tr__report report;
} tr__done_msg;

/* The server's figures at the end of the run (pairs, as a stage's). */
typedef struct tr__server_done_msg {
  tr_msg hdr;
  int source;
  tr__figures fig;
} tr__server_done_msg;

extern const tr_msgtype tr__poll_type, tr__loss_type, tr__part_type, tr__done_type,
    tr__server_done_type;

/* ---- the actors, as job.c makes and wires them ------------------------------------------- */

extern const tr_behaviour tr__loader_behaviour, tr__coordinator_behaviour, tr__server_behaviour;

void *tr__loader_new(const tr__run *run, int replica);
/* What is wrong with batch b for a stage taking `what` (TR_BATCH_*; `last`: its layers end
 * in the loss) of this run, as the rest of a sentence "a batch from 'x' ...", or NULL. */
const char *tr__batch_check(const tr__run *run, const tr_batch_msg *b, unsigned what,
                            bool last, char *buf, size_t n);
/* An outgoing batch edge carrying `what` (TR_BATCH_INPUTS | TR_BATCH_TARGETS); `generate`:
 * its batches say which samples, and the stage makes them on its device (tr_data_on). */
int tr__loader_add_edge(void *loader, tr_edge *e, unsigned what, bool generate);
/* The device whose pinned host memory the batches live in (the replica's first stage's). */
void tr__loader_set_device(void *loader, tr_device *dev);

void *tr__server_new(const tr__run *run, tr_device *dev);
int tr__server_set_worker(void *server, int worker, tr_edge *push, tr_edge *reply,
                          tr_device *dev);
void tr__server_set_report(void *server, tr_edge *report);

/* The coordinator fills `result` (the job's) with the run's figures once every source's are
 * in. */
void *tr__coordinator_new(const tr__run *run, tr_result *result);
/* The report edge from source `source` (tr__device_index; the server: replicas × stages). */
int tr__coordinator_add_source(void *coordinator, int source, tr_edge *e);
int tr__coordinator_add_observer(void *coordinator, tr_edge *e, int every);
/* The reports on `e` (an observer's, tr__coordinator_add_observer) at steps that are
 * multiples of `every`, and the last, carry the parameters. 0, TR_ENOMEM. */
int tr__coordinator_snapshot(void *coordinator, tr_edge *e, int every);
/* Its work is done but for telling observers: every source's figures are in (the result is
 * recorded) and every checkpoint is on disk; `what` says so. Loop thread. */
bool tr__coordinator_complete(const void *coordinator, char *what, size_t n);
/* Whether a checkpoint refused where the run was to write it was kept aside, in the file
 * the run's error names (file_write.h): then the run's state is there, not lost. */
bool tr__coordinator_kept_aside(const void *coordinator);
bool tr__job_kept_aside(const tr_job *j);
/* The job's result, now the caller's (to free with tr_result_free): the job's is then NULL.
 * After the run, which fills it. */
tr_result *tr__job_take_result(tr_job *j);

/* ---- checkpoints (checkpoint_io.c) --------------------------------------------------------- */

#define TR__CHECKPOINT_FORMAT "troupe checkpoint 1"

/* Whether `ck` (read from `path`) can resume model `m` under optimizer `kind`, before any
 * thread starts: its format, model, step (below TR_GRAPH_STEP_LIMIT: *step), optimizer,
 * and every tensor the stages will read — there, float32, of its shape, finite. TR_EFORMAT
 * naming what is wrong. */
int tr__checkpoint_check(tr_checkpoint *ck, const char *path, const tr_model *m,
                         tr_optim_kind kind, int64_t *step, char *err, size_t err_size);
/* What a run that failed leaves of its state: its stages stop mid-step, so what is left is
 * the last checkpoint on disk. tr__checkpoint_mark, before the run, notes the file at `path`
 * as it was; tr__checkpoint_lost, after it failed, appends to `buf` (which holds the error)
 * "; the last checkpoint, ck.safetensors, holds the state after step 40: the steps done
 * since are lost", or that this run wrote none (and the step of an earlier run's file).
 * Nothing without a path. */
typedef struct tr__ck_mark {
  bool had;
  dev_t dev;
  ino_t ino;
  struct timespec start;
} tr__ck_mark;
void tr__checkpoint_mark(tr__ck_mark *m, const char *path);
void tr__checkpoint_lost(const char *path, const tr__ck_mark *m, char *buf, size_t n);
/* What differs, legally, between the run that wrote `ck` and this one (batch, seed,
 * strategy), as text for the user ("batch 64 (this run: 32)"); "" when nothing does. */
void tr__checkpoint_differences(tr_checkpoint *ck, uint64_t batch, uint64_t seed,
                                const char *strategy, char *buf, size_t n);
/* On the stage's own thread: its share to the host (its parameters too when `params`), and
 * back from the checkpoint every stage resumes from (read once: each stage takes its own
 * view of its bytes). */
int tr__stage_snapshot(tr_stage *st, tr__part *part, bool params);
void tr__part_free(tr__part *part);
/* Adds `part` (parameters, or a shard of the optimizer state, or both) to `whole`, that
 * stage's whole part (zeroed at first: it is allocated then), and frees part's buffers. */
int tr__part_merge(tr__part *whole, tr__part *part, tr_optim_kind kind);
int tr__stage_load(tr_stage *st, const tr_checkpoint *ck, char *err, size_t err_size);
/* Whether the checkpoint holds the stage's tensors under `lead` ("replica1":
 * "replica1.0.weight" ...); and the stage loaded from them, optimizer state included. */
bool tr__stage_saved_as(const tr_stage *st, const tr_checkpoint *ck, const char *lead);
int tr__stage_load_as(tr_stage *st, const tr_checkpoint *ck, const char *lead, char *err,
                      size_t err_size);
/* A policy's copy `name` of the stage's parameters ("outer.global": "outer.global.0.weight"
 * ...) into host (numel floats); there when tr__stage_saved_as(st, ck, name). */
int tr__stage_read_extra(const tr_stage *st, const tr_checkpoint *ck, const char *name,
                         float *host, char *err, size_t err_size);
/* The whole model from its stages' parts, as `due` says (TR__DUE_*): to `out`, the run's
 * checkpoint.path opened when the run began (runtime/file_write.h: a path changed since is
 * left as it is, the checkpoint kept aside and named), and in memory for observers of the
 * parameters (tr_job_snapshot): *image (malloc'd) holds the bytes the file would,
 * *image_size of them. One gathering, one layout, for both. */
struct tr__file_output; /* file_write.h */
int tr__checkpoint_write(const tr__run *run, struct tr__file_output *out, int64_t step,
                         const tr__part *parts, int nparts, unsigned due, void **image,
                         size_t *image_size, char *err, size_t err_size);

#endif
