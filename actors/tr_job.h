/* tr_job.h — the built-in actors of a training graph, their configuration, and how they
 * connect.
 *
 * A job is one training run's description: the model, the data, the optimizer, the global
 * batch and its layout on the devices — `replicas` data-parallel copies, each cut into
 * `stages` pipeline stages, each stage training `microbatches` micro-batches per step under
 * a schedule (tr_schedule.h). Its actors:
 *
 *   loader       (loop)    one per replica: fills that replica's share of every step's
 *                          samples, micro-batch by micro-batch, into buffers it owns
 *   stage        (pinned)  one per device: layers of the model between two cuts; runs its
 *                          schedule's action list every step; in a replica group it all-
 *                          reduces gradients bucket by bucket while backward still runs
 *   coordinator  (loop)    checkpoints, reports to observers, the run's figures
 *   server       (pinned)  asynchronous jobs: the master parameters and the optimizer; it
 *                          applies each worker's pushed gradient as one update and answers
 *                          with fresh parameters (a stage is then a worker)
 *
 * Every synchronous strategy of tr_train_run is this graph with other numbers: single is
 * 1 × 1 × 1; dp R × 1; mp 1 × P with one micro-batch; pipeline 1 × P × m; hybrid R × P × m.
 * async is R workers of 1 stage, each with its loader, served by one server (tr_job_serve).
 * Tensor parallelism (layout.tensor T) makes each stage a group of T: tp is 1 × 1 × 1 × T.
 * A data-parallel pipeline, wired by hand:
 *
 *   tr_job_config cfg = tr_job_defaults();
 *   cfg.model = model;  cfg.data = data;                  // the model's batch and optimizer
 *   cfg.layout = (tr_layout_config){.replicas = 2, .stages = 2, .microbatches = 4};
 *   tr_job *j;
 *   if (tr_job_new(&j, g, &cfg, err, sizeof err)) ...;    // err names the field at fault
 *   tr_actor *stage[2][2], *loader, *coord;
 *   for (int r = 0; r < 2; r++) {
 *     for (int s = 0; s < 2; s++) tr_job_add_stage(j, r, s, devs[2 * r + s], &stage[r][s]);
 *     tr_job_add_loader(j, r, &loader);
 *     tr_job_feed(j, loader, stage[r][0], stage[r][1]);   // inputs to 0, targets to 1
 *     tr_job_chain(j, stage[r][0], stage[r][1]);          // activations and gradients
 *   }
 *   for (int s = 0; s < 2; s++) tr_job_group(j, (tr_actor *[]){stage[0][s], stage[1][s]}, 2);
 *   tr_job_add_coordinator(j, &coord);
 *   // (tr_job_add_stages does the stages, chains and groups in one call)
 *   int rc = tr_graph_run(g, 0, 1000, 0);
 *   double loss;
 *   if (!rc) tr_result_real(tr_job_result_of(j), "final_loss", &loss);
 *
 * Every path between the job's actors is an edge of the graph (tr_graph_print shows them):
 * loader → first stage (inputs) and → last stage (targets), `layout.prefetch` micro-batches
 * each; stage s → s+1 (activations), as many as stage s has slots; s+1 → s (gradients of
 * activations), two (interleaved: around the ring, the last stage → the first too);
 * between the members of a replica group (gradient buckets, ready and
 * reduced); between the stages of a replica when clipping (gradient norms); worker ↔ server
 * (pushes, replies); every stage and the server → coordinator (losses, checkpoint parts,
 * final figures); coordinator → each observer (reports). Actors of your own take part
 * through the messages of tr_protocol.h: tr_job_connect_batches puts one between the loader
 * and a stage, or in the loader's place; tr_job_observe sends one reports.
 *
 * Across processes (a graph given a world, tr_graph_set_world; devices from
 * tr_world_devices), every rank makes the same calls in the same order, and each actor lives
 * on a rank: a stage, a worker and the server on their device's, a loader on its replica's
 * first stage's (add that stage before the loader: TR_ESTATE otherwise), the coordinator on
 * rank 0. A replica group spanning ranks sums inside each rank first, then across ranks
 * through the transports. Observers are yours to place (tr_graph_add_on); a report crosses
 * to them like any message.
 *
 * Misuse (tr_base.h): a wiring call on a NULL job says so on stderr and returns TR_EINVAL;
 * one given a NULL out (where it makes an actor), NULL actors or members, or a count out of
 * range returns TR_EINVAL with tr_job_error naming the call and the argument; one made after
 * the plan closed, TR_ESTATE. tr_job_new refuses NULL arguments (TR_EINVAL) and a graph that
 * ran (TR_ESTATE) in err, which may be NULL. Getters of a NULL job answer "", NULL or 0;
 * tr_job_print_plan and tr_job_result of NULL do nothing.
 */
#ifndef TR_JOB_H
#define TR_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tr_data.h"
#include "tr_device.h"
#include "tr_graph.h"
#include "tr_model.h"
#include "tr_stage.h"
#include "tr_protocol.h"
#include "tr_result.h"
#include "tr_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the global batch is laid out on the devices. */
typedef struct tr_layout_config {
  int replicas;            /* data-parallel copies (asynchronous jobs: workers), >= 1 */
  int stages;              /* pipeline stages of each replica, >= 1 */
  int microbatches;        /* per step and replica, >= 1; the global batch is divisible by
                              replicas × microbatches */
  tr_schedule_kind schedule;
  int chunks;              /* model chunks per device: the interleaved schedule's v >= 2
                              (0: 2); every other schedule 1 (0: 1) */
  const int *cuts;         /* ncuts = stages × chunks - 1 increasing layer indices where a
                              piece begins (piece c × stages + s is chunk c of stage s);
                              NULL: tr_model_balance (by FLOPs) */
  int ncuts;
  int prefetch;            /* micro-batches each loader keeps ready; 0: as fit in 4 MiB, from
                              2 × microbatches to 256 (asynchronous jobs: 2) */
  int tensor;              /* tensor parallelism: members per tensor group, T (0 or 1: none).
                              Each (replica, stage) is T stages on T devices of one process,
                              member t holding tr_model_shard(model, t, T)'s layers and the
                              group's comm (tr_tensor_comms_open); member t of stage s feeds
                              member t of stage s+1, the replica groups join member t of each
                              replica, and member 0 of a last stage reports the losses. Not
                              with async.enabled */
  int automatic;           /* tr_train_run: run the layout troupe plan ranks best for the
                              model on the devices (tr_plan.h), which sets the strategy and
                              every field above (give none of them); the result's
                              layout_choice says which and why. tr_job_new refuses it: a job
                              is wired for the layout it is given */
} tr_layout_config;

/* Asynchronous training: `layout.replicas` workers (one stage each, whole global batches)
 * push gradients to a parameter server, which applies each as one update. */
typedef struct tr_async_config {
  int enabled;
  int staleness;           /* SSP: a worker more than this many pushes ahead of the slowest
                              waits; -1: unbounded (tr_job_defaults) */
  float dc_lambda;         /* delay compensation (DC-ASGD): g + λ g⊙g⊙(θ_now − θ_pulled) */
  int momentum_correction; /* take off the explicit momentum the 1 − 1/workers that
                              asynchrony adds (Mitliagkas et al. 2016) */
  int staleness_lr;        /* divide the step size by the update's staleness (when > 1) */
  int pull_every;          /* pull fresh parameters every this many pushes; 0: 1 */
  int hogwild;             /* host devices: the workers update the server's parameters in
                              place, with no lock (Hogwild!, Niu et al. 2011) */
  int elastic;             /* a worker that fails (an op of its device returns an error, or
                              its actor fails while it trains) leaves the run instead of
                              failing it: the server goes on with the others, SSP counts only
                              those, every update applied stays, and stderr and the figures
                              (workers_left, workers_alive) say who left at which step. The
                              run fails only when every worker has left. Not with hogwild.
                              Strategy local (tr_local_config; one stage a replica, peer
                              sums in one process) reads it too: a replica that fails while
                              it trains leaves, and each later sync averages the replicas
                              still there (replicas_left, replicas_alive); one that fails
                              after it began sending a sync's parameters fails the run, and
                              so does the last one's leaving. dp refuses it */
  /* Workers that join a running job: the last `join_workers` (0 with join_at: 1) join once
   * the server has applied step `join_at` (or none of the others is left while steps are),
   * pull its parameters of that moment and push; SSP counts each from its join. In one
   * process each is added to the running graph then (tr_job_join_worker), never if the run
   * ends first; across ranks they are wired before the run and wait, training nothing.
   * 0: every worker from the start. Not with hogwild */
  int64_t join_at;
  int join_workers;
} tr_async_config;

/* Checkpoints: safetensors files written atomically (tr_checkpoint.h). */
typedef struct tr_checkpoint_config {
  const char *path;        /* written at the end, and every `every` steps; NULL: none. Its
                              directory must exist and be writable (tr_job_new checks) */
  int64_t every;
  const char *resume;      /* every stage starts from this checkpoint, read once by
                              tr_job_new (each stage takes a view of its bytes), and checked
                              first: format, model, step, optimizer, every tensor's shape,
                              its values finite */
  const struct tr_checkpoint *resume_from; /* the same already open (tr_checkpoint_open;
                              `resume` names it in messages; it outlives the job): a caller
                              that read it to learn its step passes it on, so that one
                              reading of the file serves the whole run. NULL: open `resume` */
} tr_checkpoint_config;

/* What a step whose gradient norm or loss is not a finite number (NaN, ±Inf) does. */
typedef enum tr_nonfinite_policy {
  TR_NONFINITE_STOP, /* the run fails (TR_ENONFINITE), naming the step and the stage */
  TR_NONFINITE_SKIP  /* the update is skipped on every stage (the parameters stay as they
                        were), counted in the result's "skipped_steps", and the run goes on */
} tr_nonfinite_policy;

/* "stop", "skip"; parse: 0, or TR_EINVAL. */
TR_API const char *tr_nonfinite_policy_name(tr_nonfinite_policy p);
TR_API int tr_nonfinite_policy_parse(const char *name, tr_nonfinite_policy *out);
/* Where a job's samples are made (tr_job_config.data_on). */
typedef enum tr_data_on {
  TR_DATA_ON_AUTO,   /* on each GPU that takes them, where the source can be generated there
                        (tr_data_can_generate: the synthetic sources and the arithmetic
                        corpus); otherwise, and for host devices, by the loader */
  TR_DATA_ON_HOST,   /* by the loader, on the host, for every device (each batch copied in) */
  TR_DATA_ON_DEVICE  /* on the device of every stage that takes them, host devices included
                        (the stage's thread fills); the source must be a generated one */
} tr_data_on;

/* "auto", "host", "device"; parse: 0, or TR_EINVAL. */
TR_API const char *tr_data_on_name(tr_data_on w);
TR_API int tr_data_on_parse(const char *name, tr_data_on *out);

/* Evaluation on held-out samples (tr_job_config.eval). After every `every` steps of a
 * synchronous job (once step k has ended, k a multiple of `every`) and once more at its end,
 * every replica runs forward alone, with dropout off, over its share of samples [0,
 * samples) of `data`, cut into micro-batches of the training's size (the last one filled
 * only in part), in the layout that trains and with the parameters as they are after step
 * k; no update follows and training goes on as if it had not happened (the same bits).
 * The held-out micro-batches take the training's batch edges (tr_batch_msg.eval), so an
 * actor of yours between a loader and a stage treats them as it treats training ones (a
 * producer of yours in a loader's place sends them too: after step k-1's micro-batches
 * those of the evaluation after step k, tr_data_shard's share of [0, samples) over the
 * replicas).
 * Its figures, the mean loss over the samples (each sample's loss as tr_stage_sample_losses
 * gives it) and for a loss with an accuracy (tr_loss_type.accuracy) the fraction of rows
 * whose largest output is the target, reach observers in reports (tr_report_msg.eval_*)
 * and the result ("eval.loss", ...). Asynchronous jobs are refused (eval.data).
 * Every held-out value the model reads as a number must be finite: a NaN input would pass
 * a ReLU as 0 and a NaN target drop out of the mean unseen, so the loader checks each
 * held-out micro-batch as it reads it (tr_data_check_finite) and the run fails with
 * TR_ENONFINITE naming the sample and the value; tr_train_run reads a finite source's
 * held-out samples once before the run instead, and refuses them (TR_EINVAL, eval_data or
 * eval_split) before anything trains. */
typedef struct tr_eval_config {
  const tr_data *data;     /* held-out samples of the model's sizes (tr_data_check); NULL: no
                              evaluation. Outlives the job */
  int64_t samples;         /* samples [0, samples) of data; 0: each of a finite source's rows
                              once (tr_data_rows; an endless source is refused: give it) */
  int64_t every;           /* steps between evaluations; 0: at the end only */
} tr_eval_config;

/* Levers that trade time for memory. */
typedef struct tr_memory_config {
  int recompute;           /* activation recomputation: each stage keeps only its micro-
                              batches' inputs and computes the rest again in backward (about
                              a forward's time more); results are bitwise the same */
} tr_memory_config;

/* Profiling a window of a long run (README "Profiling"): the trace and the NVTX ranges cover
 * steps [from, to) only, and on CUDA cudaProfilerStart/Stop bracket them (what nsys
 * --capture-range=cudaProfilerApi waits for). from = to = 0: every step. */
typedef struct tr_profile_config {
  int64_t from, to;        /* to > from, or to 0: from `from` to the end */
} tr_profile_config;

/* Local SGD (Stich 2019), post-local SGD (Lin et al. 2020) and DiLoCo (Douillard et al. 2023):
 * tr_job_config.local, troupe train --strategy local. Each replica (a stage, or a pipeline of
 * layout.stages) trains on its own share of every global batch with its own optimizer, its
 * gradient the mean over its own samples, and every `sync_every` steps the replicas' parameters
 * are summed by the replica group (one all-reduce of parameters, not gradients):
 *   average   every replica takes their mean (local SGD);
 *   nesterov  DiLoCo's outer step: the pseudo-gradient Δ = θ_global − mean (θ_global: the
 *             parameters every replica took at the last sync) goes to an outer SGD with
 *             Nesterov momentum μ of its own state v: v = μ v + Δ; θ_global −= outer_lr (Δ +
 *             μ v); every replica takes θ_global.
 * The first `warmup_sync` steps are plain data parallelism (gradients all-reduced every step),
 * then the periods of sync_every local steps begin. A replica's optimizer state is its own
 * (never averaged). The replicas' divergence before each sync is the run's `consistency`:
 * each replica's stage's largest ||θ_r − mean|| / ||mean|| over the syncs, the mean of
 * those over every replica and stage (the result's "consistency"). */
#define TR_OUTER_MAP(X)                  \
  X(TR_OUTER_AVERAGE, "average")         \
  X(TR_OUTER_NESTEROV, "nesterov")

typedef enum tr_outer {
#define TR__OUTER_ENUM(name, text) name,
  TR_OUTER_MAP(TR__OUTER_ENUM)
#undef TR__OUTER_ENUM
  TR_OUTER_COUNT
} tr_outer;

/* "average", "nesterov"; parse: 0, or TR_EINVAL. */
TR_API const char *tr_outer_name(tr_outer o);
TR_API int tr_outer_parse(const char *name, tr_outer *out);

typedef struct tr_local_config {
  int sync_every;          /* H >= 1: steps between syncs; 0: not local SGD (tr_job_defaults) */
  int warmup_sync;         /* K >= 0: data-parallel steps first (post-local SGD) */
  tr_outer outer;          /* what a sync does with the replicas' mean */
  float outer_lr;          /* nesterov: the outer step size, > 0 (average: 0) */
  float outer_momentum;    /* nesterov: μ in [0, 1) (tr_job_defaults: 0.9) */
} tr_local_config;

typedef struct tr_job_config {
  const tr_model *model;   /* outlives the job */
  const tr_data *data;     /* samples of the model's input and target sizes (tr_data_check) */
  tr_data_on data_on;      /* where they are made: generated on the GPUs where they can be
                              (TR_DATA_ON_AUTO, tr_job_defaults), by the loader, or on the
                              devices; the samples are the same wherever they are made */
  int global_batch;        /* samples per step over every replica and micro-batch; 0: the
                              model's batch */
  uint64_t seed;           /* initialisation (the data has its own) */
  tr_layout_config layout;
  /* The optimizer: kind TR_OPTIM_MODEL (tr_job_defaults) takes the model's (tr_model_optim),
   * with lr and clip overriding it when > 0; another kind is used as given, lr 0 meaning the
   * model's learning rate. A number outside its rule (tr_optim_config_check: NaN, infinite,
   * a negative rate, a momentum or beta outside [0, 1)) is refused naming its field
   * ("optim.lr"), never replaced by the model's. */
  tr_optim_config optim;
  tr_async_config async;
  tr_checkpoint_config checkpoint;
  tr_memory_config memory;
  tr_precision_config precision; /* every stage's (tr_stage.h) */
  tr_graphs graphs;        /* CUDA graphs for every stage's passes: TR_GRAPHS_ON (the
                              default) or TR_GRAPHS_OFF (tr_stage.h, tr_stage_config.graphs) */
  tr_profile_config profile;
  tr_eval_config eval;     /* held-out evaluation; none by default */
  /* Every update first checks that the gradients' global norm is finite (and every loss
   * read back is): a step that diverged never reaches the parameters. */
  tr_nonfinite_policy on_nonfinite;
  /* The graph's watchdog (tr_system_config.watchdog_ms, when on) follows the run: once a
   * step has ended, the coordinator keeps it at watchdog_steps times the slowest step seen,
   * never below watchdog_min_ms, so that a run whose steps are slow is not taken for a hung
   * one. 0: the watchdog stays as configured (tr_job_defaults). */
  int watchdog_steps;
  int watchdog_min_ms;
  /* ZeRO stage: 0, or 1: the replicas of each stage split its optimizer state into equal
   * shards (tr_stage_shard), their gradients are reduce-scattered (each replica sums the
   * shard it updates) and the updated shards all-gathered into every replica's parameters.
   * Synchronous jobs with layout.replicas > 1 (dp, hybrid), in one process per replica
   * group; checkpoints hold the whole state, as unsharded runs write it. */
  int zero;
  /* How replica groups sum (TR_ALLREDUCE_AUTO: NCCL where every member is a GPU of its own
   * and the build has NCCL, else troupe's peer reduction). */
  tr_allreduce allreduce;
  const char *strategy;    /* recorded in figures and checkpoints; NULL: derived */
  /* What every stage does at its step (the stages' step policy, by name): NULL, the one that
   * serves the configuration ("async" for async.enabled, else "sync": replica groups, the
   * norm exchange, the optimizer). A name no policy has is refused, naming this field. */
  const char *step_policy;
  tr_local_config local;   /* local SGD, post-local SGD, DiLoCo (strategy local); off by default */
} tr_job_config;

/* A configuration refused, as data: what tr_job_check (and tr_train_run_e, tr_train.h) say
 * of a field at fault, for a caller that names fields otherwise (the command line names its
 * flags). `message` names fields as the library does; each span says where it names one,
 * so that a caller can write its own name there:
 *
 *   tr_error e;
 *   if (tr_job_check(&cfg, &e))            // e.field "layout.chunks", e.message
 *     ...                                  // "layout.chunks 3: only the interleaved schedule
 *                                          //  ... (layout.schedule is 1f1b)", two spans */
enum { TR_ERROR_SPANS = 8 };
typedef struct tr_error_span {
  uint16_t at, len;        /* message[at, at + len) is a field's name */
} tr_error_span;
typedef struct tr_error {
  int status;              /* 0, or the negative TR_E* code of the refusal */
  char field[64];          /* the field at fault ("optim.lr"; of tr_train_options too:
                              "devices", "steps"); "" when the refusal names none */
  char message[1024];      /* the whole message, beginning with the field when there is one */
  int nspans;              /* where message names fields, in order; spans[0] is `field` */
  tr_error_span spans[TR_ERROR_SPANS];
} tr_error;

/* The model's optimizer, as an optim.kind. */
#define TR_OPTIM_MODEL ((tr_optim_kind)(intptr_t)-1) /* no table: never dereferenced */

/* One replica, one stage, one micro-batch under 1F1B, the model's batch and optimizer,
 * unbounded asynchrony, seed 1, no checkpoints. */
TR_API tr_job_config tr_job_defaults(void);

typedef struct tr_job tr_job;

/* Checks the configuration against the model and fills in its defaults: TR_EINVAL with err
 * naming the field at fault ("layout.microbatches: ..."). The graph runs the job's actors;
 * the job must outlive tr_graph_run. */
TR_API int tr_job_new(tr_job **out, tr_graph *g, const tr_job_config *config, char *err,
               size_t err_size);
/* What tr_job_new checks and fills in, alone: 0 with *config completed (the model's batch
 * and optimizer, chunks), or TR_EINVAL with `e` naming the field at fault (e NULL: the status
 * alone). Every rule of a job's configuration lives behind it (job_config.c). */
TR_API int tr_job_check(tr_job_config *config, tr_error *e);
/* After the graph has been freed. */
TR_API void tr_job_free(tr_job *j);

/* The configuration as the job runs it: defaults filled in, cuts chosen. */
TR_API const tr_job_config *tr_job_config_of(const tr_job *j);
/* Samples in every micro-batch: what a producer of batches sends (tr_batch_msg.count). */
TR_API int tr_job_microbatch_samples(const tr_job *j);

/* Replica `replica`'s loader; with tensor groups (layout.tensor T > 1), T loaders per
 * replica, the t-th call making member t's (each feeds its member's first and last stage
 * the replica's samples: the members take the same ones). */
TR_API int tr_job_add_loader(tr_job *j, int replica, tr_actor **out);
/* Stage `stage` of replica `replica` on `dev` (which that actor's thread will own). With
 * tensor groups, T calls per (replica, stage), the t-th adding member t ("stage0.t1"), on a
 * device of member 0's process (TR_EINVAL otherwise). */
TR_API int tr_job_add_stage(tr_job *j, int replica, int stage, tr_device *dev, tr_actor **out);
TR_API int tr_job_add_coordinator(tr_job *j, tr_actor **out);
/* Every stage of the layout, stage s of replica r on device r × stages + s of `devs`, each
 * replica's stages chained and each stage's replicas grouped: the whole graph of a
 * synchronous strategy but for how batches come in (loaders, or actors of yours) and the
 * coordinator. stages (when not NULL) receives the actors, [r × stages + s]. With tensor
 * groups (layout.tensor T > 1): member t of stage s of replica r on device (r × stages + s)
 * × T + t (a group's members side by side), each member's stages chained, member t of
 * every replica grouped; stages receives [(r × T + t) × stages + s]. */
TR_API int tr_job_add_stages(tr_job *j, const tr_device_list *devs, tr_actor **stages);

/* What a batch edge carries (tr_job_connect_batches). */
enum {
  TR_BATCH_INPUTS = 1,  /* tr_batch_msg.x */
  TR_BATCH_TARGETS = 2, /* tr_batch_msg.y */
  TR_BATCH_NOTIFY = 4   /* the producer is told of every release (a relay's way out) */
};

/* A batch edge from `from` (a loader, or an actor of yours that sends tr_batch_msg) to `to`
 * (a stage: its inputs if it is its replica's first, targets if its last; or an actor of
 * yours), carrying `what`; layout.prefetch credits. *out (when not NULL): the edge, for
 * actors of yours. */
TR_API int tr_job_connect_batches(tr_job *j, tr_actor *from, tr_actor *to, unsigned what,
                           tr_edge **out);
/* loader → `first` (inputs) and → `last` (targets): the replica's first and last stage,
 * the same actor when there is one stage (one edge carries both). */
TR_API int tr_job_feed(tr_job *j, tr_actor *loader, tr_actor *first, tr_actor *last);
/* Stage s → stage s+1 of one replica (tensor groups: of one member, member t to member t):
 * activations forward, their gradients back. With
 * several chunks per device (interleaved), also the last stage → the first: chunk c's
 * output on to chunk c+1. */
TR_API int tr_job_chain(tr_job *j, tr_actor *from, tr_actor *to);
/* Stage s of every replica (in replica order; with tensor groups, member t of each):
 * gradients all-reduced before each update
 * (with zero: reduce-scattered, and the updated shards all-gathered, member i holding shard
 * i; TR_EINVAL when the members live in more than one process). */
TR_API int tr_job_group(tr_job *j, tr_actor *const *members, int n);
/* The coordinator → `observer`: a tr_report_msg every `every` steps (>= 1) and a last one
 * when the run is over. The observer releases the edge's credit after each; it is a member
 * of the graph like any other, whose part is over after the last report. After
 * tr_job_add_coordinator: the reports are the coordinator's (before it: TR_EINVAL).
 * Checkpoints come first: a report of step k goes out only once every checkpoint of a step
 * up to k (checkpoint.every's) is on disk, renamed in place, and the last report once the
 * last checkpoint is; an observer that hears of step k may open checkpoint.path and finds
 * step k there or later. */
TR_API int tr_job_observe(tr_job *j, tr_actor *observer, int every, tr_edge **out);
/* The parameters of a running job, in memory, for the observer on `report` (the edge
 * tr_job_observe gave): its reports of steps that are multiples of `every` (>= 1), and its
 * last, carry them (tr_report_msg.params), as they are after that step on every stage; the
 * observer also hears at those steps when its own `every` does not fall on them. They are a
 * checkpoint in memory: the names, metadata and bytes a checkpoint of that step holds
 * (tr_checkpoint.h), valid until the observer gives that report's credit back; the same
 * gathering from the stages serves a checkpoint due at that step. The others' params are
 * NULL. The observer lives on the coordinator's rank (TR_EINVAL otherwise), and the job is
 * synchronous (the server's parameters have no step the workers share).
 *
 *   tr_edge *in;
 *   tr_job_observe(j, watcher, 10, &in);      // a report every 10 steps
 *   tr_job_snapshot(j, in, 100);              // with the parameters every 100, and the last
 *   // in the watcher, on a report r:
 *   const tr_checkpoint_tensor *w = r->params ? tr_checkpoint_find(r->params, "0.weight") : NULL;
 *   ... read w->data (w->nbytes) ...
 *   tr_edge_release(in, 1);                   // r->params is closed after this
 */
TR_API int tr_job_snapshot(tr_job *j, tr_edge *report, int every);

/* Asynchronous jobs: the parameter server on `dev`, and worker `worker` (its stage) on
 * `dev`, fed by a loader like any stage. Workers that come and go are the configuration's
 * (tr_async_config): with `elastic`, a worker that fails leaves the run; with `join_at`, the
 * last `join_workers` workers join the running job at that step, pulling the server's
 * parameters of that moment. In one process such a worker is added when it joins, through
 * tr_job_join_worker (after tr_job_add_server, before tr_job_add_coordinator; not
 * tr_job_add_worker): its stage actor, loader and edges are added to the running graph
 * then, and never if the run ends first.
 *
 *   c.async.join_at = 500;                        // worker 3 of 4 joins after update 500
 *   tr_job_join_worker(j, 3, gpu3);               // added to the graph then, wired, fed
 *
 * Across processes every rank builds the same graph before it runs: a worker that joins is
 * wired like the others and waits, training nothing, counted by SSP only from its join. */
TR_API int tr_job_add_server(tr_job *j, tr_device *dev, tr_actor **out);
TR_API int tr_job_add_worker(tr_job *j, int worker, tr_device *dev, tr_actor **out);
/* Worker `worker` (of the last async.join_workers) joins on `dev` when its turn comes, in a
 * world of one process (above); TR_EINVAL naming the rule otherwise. */
TR_API int tr_job_join_worker(tr_job *j, int worker, tr_device *dev);
/* worker → server: gradients pushed (one credit: a worker waits for the server's reply
 * before its next backward); server → worker: the reply, with fresh parameters when pulled. */
TR_API int tr_job_serve(tr_job *j, tr_actor *server, tr_actor *worker);

/* The plan, checked as a whole once the wiring calls are made: the norm exchange between
 * the stages and what carries each edge between processes are decided (under mpirun every
 * rank calls it, in step), then every stage of this process is checked for what it lacks:
 * TR_EINVAL, err naming the stage and the edge or part ("stage 1 of replica 0 ('stage1')
 * is not wired: it lacks activations from stage s-1"). tr_graph_run plans the job itself
 * when it was not done; after it the stages' wiring is closed (TR_ESTATE). */
TR_API int tr_job_plan(tr_job *j, char *err, size_t err_size);
/* Each stage of the plan: its device and process, its step policy and that policy's parts,
 * each of its edges with the actor at the other end, its credits and what carries it.
 * (tr_graph_print shows every actor and edge of the graph.) */
TR_API void tr_job_print_plan(const tr_job *j, FILE *f);

/* Why the job's last refused wiring call (tr_job_add_*, tr_job_connect_batches, tr_job_feed,
 * tr_job_chain, tr_job_group, tr_job_observe, tr_job_serve) was refused: the call, the
 * argument and the rule ("tr_job_add_stages: devs holds 1 devices; the layout needs 2, ...");
 * "" when none was. Those calls can return only a status: their message is here. */
TR_API const char *tr_job_error(const tr_job *j);

/* The figures of the run (tr_result.h), once tr_graph_run returned 0 (also where only the end
 * of the run was stuck, an actor of yours waited on after every step had trained:
 * tr_graph_warning); before, its model and strategy only. The job's, valid until
 * tr_job_free. Across processes rank 0's holds the figures (the coordinator's rank). */
TR_API const tr_result *tr_job_result_of(const tr_job *j);
/* Deprecated: tr_job_result_of's figures in the struct (tr_result.h: its devices up to 64). */
TR_API void tr_job_result(const tr_job *j, tr_train_result *r)
    TR_DEPRECATED("use tr_job_result_of (tr_result.h)");

#ifdef __cplusplus
}
#endif
#endif
