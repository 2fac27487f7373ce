/* tr_result.h — what a training run measured, by key: its speed, losses, each device's
 * utilization and where its idle time went, memory, staleness, the prediction troupe plan
 * made of it (the figures of docs/WORKLOADS.md). Every figure is one row of the library's
 * table of run metrics: a key ("samples_per_s", "memory.params"), a unit, a type (integer,
 * real, text) and a shape (one value, one per device of the run, a list of its own); a new
 * figure is a new row, never a new field of a struct.
 *
 * tr_train_run_result (tr_train.h) and tr_job_result_of (tr_job.h) give a run's result;
 * tr_result_json writes it as `troupe train --json` does, tr_result_summary as its summary.
 *
 *   tr_result *r;
 *   tr_error e;
 *   if (tr_train_run_result(&o, &r, &e)) fprintf(stderr, "%s\n", e.message);
 *   double rate, loss;
 *   tr_result_real(r, "samples_per_s", &rate);
 *   tr_result_real(r, "final_loss", &loss);
 *   tr_figure f;
 *   tr_result_figure(r, "utilization", &f);                // one value per device
 *   for (int i = 0; i < f.count; i++) {
 *     double u;
 *     tr_result_real_at(r, "utilization", i, &u);
 *   }
 *   for (int k = 0; k < tr_result_figure_count(r); k++) {   // every figure, in the table's order
 *     tr_result_figure_at(r, k, &f);
 *     printf("%s (%s): %d values%s\n", f.key, f.unit, f.count, f.null ? ", none" : "");
 *   }
 *   tr_result_free(r);
 *
 * A figure that does not apply to the run (staleness outside asynchronous runs, a real that
 * is not a number) has no value: its `null` is set, as --json writes null, and it reads as
 * NaN, 0 or NULL. The getters refuse, with TR_EINVAL and a line on stderr naming the key, a
 * key the table has none of, a reading of another type (tr_result_real reads integers too),
 * a scalar read with _at or a per-device figure without, and an index out of range.
 *
 * tr_train_result, below, is the figures as a struct with room for 64 devices: a view of the
 * result, filled from it, kept for the programs written against it (CHANGELOG.md). */
#ifndef TR_RESULT_H
#define TR_RESULT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tr_allreduce.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_result tr_result;

typedef enum tr_figure_type { TR_FIGURE_INT, TR_FIGURE_REAL, TR_FIGURE_TEXT } tr_figure_type;

typedef enum tr_figure_shape {
  TR_FIGURE_ONE,     /* one value */
  TR_FIGURE_DEVICES, /* one per device of the run, in the order of "devices" */
  TR_FIGURE_LIST     /* a list of its own: "cuts" (layer indices), "staleness.histogram" */
} tr_figure_shape;

/* A figure of a run: what it is, and how many values it has in this one. */
typedef struct tr_figure {
  const char *key;         /* "samples_per_s"; "a.b": member b of --json's object a */
  const char *unit;        /* "samples/s", "bytes", "fraction"; "" for a name or a count */
  tr_figure_type type;
  tr_figure_shape shape;
  int count;               /* its values: 1, the devices, the list's length; 0 when null */
  bool null;               /* the run has none (JSON null) */
} tr_figure;

/* The figures: their number (every row of the table, the same for every run of this
 * library), and figure i of them (0 <= i < count), or the one of `key`. 0, or TR_EINVAL. */
TR_API int tr_result_figure_count(const tr_result *r);
TR_API int tr_result_figure_at(const tr_result *r, int i, tr_figure *out);
TR_API int tr_result_figure(const tr_result *r, const char *key, tr_figure *out);

/* A figure of one value: an integer; a number (an integer's too) as a double, NaN when
 * null; a text (valid while r is), NULL when null. 0, or TR_EINVAL (above). */
TR_API int tr_result_int(const tr_result *r, const char *key, int64_t *out);
TR_API int tr_result_real(const tr_result *r, const char *key, double *out);
TR_API int tr_result_text(const tr_result *r, const char *key, const char **out);
/* Value i of a per-device figure or a list (0 <= i < its count): as above (a device's real
 * that is not a number, JSON null, reads NaN). */
TR_API int tr_result_int_at(const tr_result *r, const char *key, int i, int64_t *out);
TR_API int tr_result_real_at(const tr_result *r, const char *key, int i, double *out);

/* Gives a figure that the caller measures, and that the result derives others from: the
 * only one is "sgemm_gflops", the hardware's yardstick (troupe train: single-thread sgemm
 * 2048² on host devices, measured after the run; "hardware_fraction" follows from it; 0 or
 * less: none). Any other key is refused (TR_EINVAL naming it: the run measured it). */
TR_API int tr_result_set_real(tr_result *r, const char *key, double v);

/* The figures as one JSON object and a newline, docs/WORKLOADS.md's keys (what `troupe
 * train --json` prints), null marking what does not apply to the run; and in words, one
 * line, those that apply and are not zero (`troupe train`'s summary). 0, TR_EIO when `f`
 * fails, TR_ENOMEM; r or f NULL: TR_EINVAL (said on stderr). */
TR_API int tr_result_json(const tr_result *r, FILE *f);
TR_API int tr_result_summary(const tr_result *r, FILE *f);

/* NULL does nothing. */
TR_API void tr_result_free(tr_result *r);

/* ---- tr_train_result: the figures as a struct (deprecated) -------------------------------- */

/* The most devices a job lays out (tr_job_config.layout), and the struct's room for them;
 * the bins of the asynchronous server's staleness histogram. */
enum { TR_TRAIN_MAX_DEVICES = 64, TR_TRAIN_STALENESS_BINS = 32 };

/* Bytes of device memory a stage allocated for the model (tr_stage_info): its parameters,
 * their gradients, and the optimizer state it holds (under ZeRO, its shard's). */
typedef struct tr_memory_figures {
  int64_t params, grads, optimizer_state;
} tr_memory_figures;

/* Where device i's time went while it was not busy, as fractions of the run's window (the
 * window of utilization[i]: with it they add up to 1). Each gap between two of its ranges of
 * work is, in time order: its own handling until it had to stop, the wait until the message
 * that let it go on was sent (charged to what it waited for), and the handover from that
 * send to the work; the time its thread was runnable and not running after it stopped is the
 * OS's, taken out of the handover first. docs/WORKLOADS.md says more. */
typedef struct tr_idle_figures {
  double edge;     /* a neighbour's activation or gradient, not yet sent */
  double credit;   /* a credit to send: the receiver still held the buffers */
  double loader;   /* a batch the loader had not yet sent */
  double step;     /* the step's begin, the group's sums, the coordinator */
  double handover; /* sent, not yet at work: the mailbox, the thread's wake-up, the handling */
  double handling; /* the actor's own work between two of its ranges before it stopped:
                      sending, bookkeeping */
  double os;       /* stopped, then runnable but not running: another thread had the core */
  double other;    /* the rest: the ends of the run's window that are not the device's */
} tr_idle_figures;

typedef struct tr_memory_result {
  tr_memory_figures devices[TR_TRAIN_MAX_DEVICES];  /* device i (as utilization[i]) */
  tr_memory_figures replicas[TR_TRAIN_MAX_DEVICES]; /* replica (async: worker) r: the sum
                                                       over its stages */
} tr_memory_result;

/* The figures of docs/WORKLOADS.md as a struct, a view of the run's tr_result filled from its
 * rows (those of devices 64 and on left out; texts cut to their fields). Not-a-number marks
 * what does not apply to a run (JSON null). Deprecated: the calls that fill and write it
 * (tr_train_run, tr_job_result, tr_train_result_json) have keyed ones beside them, and a
 * figure added to the library is in those only. */
typedef struct tr_train_result {
  char model[32], strategy[16];
  char devices[256];       /* the devices' names in order ("host:0,host:1"); across processes
                              with their ranks ("host:0@r0,host:0@r1") */
  char devices_note[128];  /* "" or, when the layout used fewer devices than it was given
                              (tr_job_add_stages), how many of them ("2 of the 3 given") */
  int ndevices;
  int ranks;               /* the processes the job spanned (tr_world.h): 1 in one */
  int rank[TR_TRAIN_MAX_DEVICES]; /* the process that ran device i (as utilization[i]) */
  int64_t first_step;      /* where the run began: 0, or the resumed checkpoint's step */
  int64_t steps;           /* the last step reached */
  int64_t samples;         /* samples trained in this run */
  double seconds;          /* of the measured window (after warm-up steps) */
  int64_t window_steps;
  double samples_per_s, steps_per_s;
  double initial_loss;     /* the first step's (the first finite one's) */
  double final_loss;       /* mean of the last 1% of steps (at least one), of those whose loss
                              is finite; a successful run always has one. Async: of the last
                              1% of steps to complete, in the order the workers ended them */
  int replicas, stages, microbatches; /* the layout that ran */
  int tensor;              /* members per tensor group (layout.tensor; 1: none) */
  int zero;                /* the ZeRO stage that ran (tr_job_config.zero) */
  tr_allreduce allreduce;  /* how the replica groups summed here: PEER, or NCCL (some group
                              did through NCCL); AUTO: there were none (one replica) */
  int edges_nccl, edges_mpi; /* pipeline edges between processes (act and grad each)
                              whose tensors NCCL carried, and MPI (tr_edge_carrier) */
  int batches_made, batches_loaded; /* batch edges (of this process) whose stage made its
                              samples on its device, and those the loader filled (data_on) */
  int chunks;              /* model chunks per device (interleaved), else 1 */
  int cuts[TR_TRAIN_MAX_DEVICES + 1]; /* piece k: layers [cuts[k], cuts[k + 1]); piece
                                         c × stages + s is chunk c of stage s */
  char schedule[16];       /* "gpipe", "1f1b", "interleaved", "zb1"; "" unless pipelined */
  int recompute;           /* activations were recomputed in backward */
  double utilization[TR_TRAIN_MAX_DEVICES]; /* device i: replica i / stages, stage i % stages
                                               (tensor groups: replica i / (T × stages),
                                               member i / stages % T) */
  tr_idle_figures idle[TR_TRAIN_MAX_DEVICES]; /* device i's time not busy (as utilization[i]) */
  double bubble_fraction;  /* measured; and the schedule's own (equal unit costs) */
  double bubble_theory;
  double bubble_schedule;  /* the schedule's at this run's own work times: one step of it
                              simulated (tr_plan_simulate) with each stage's measured mean
                              forward, backward and step, messages free. bubble_fraction less
                              this is what messaging, the runtime and the OS added */
  int peak_microbatches[TR_TRAIN_MAX_DEVICES]; /* the most micro-batches a device's stage
                                                  held activations of at once (interleaved:
                                                  (chunk, micro-batch) pairs) */
  int64_t peak_activation_bytes[TR_TRAIN_MAX_DEVICES]; /* device i's most bytes of memory
                                                  per micro-batch (its slots: inputs, saved
                                                  activations, gradients kept for W) held at
                                                  once, plus what recomputing uses */
  /* async: per update, server version at apply − version the gradient was computed from */
  double staleness_mean, staleness_max;
  int64_t staleness_hist[TR_TRAIN_STALENESS_BINS]; /* updates of staleness 0, 1, ...; the
                                                      last bin: that much or more */
  int clock_gap_max;       /* SSP: the most pushes a worker was ahead of the slowest when
                              its pull was served */
  int workers;
  double momentum;         /* the explicit momentum the server used (after correction) */
  double server_utilization;
  /* sync: max over replicas of ||θ_r − θ_0|| / ||θ_0||; async: the mean over pushes of
   * ||θ_worker − θ_server|| / ||θ_server||; local: over every replica's stages, the mean of
   * the largest ||θ_r − mean|| / ||mean|| before a sync (mean: the replicas' average) */
  double consistency;
  double gflops;           /* docs/WORKLOADS.md's FLOP count × samples/s */
  double tokens_per_s;     /* gpt */
  double sgemm_gflops;     /* the caller's yardstick, measured after the run (troupe train:
                              single-thread sgemm 2048² on host devices); 0: none (JSON null) */
  int signal;              /* the signal that ended the run early (tr_train.h), or 0 */
  int64_t skipped_steps;   /* updates skipped for a gradient norm that was not finite
                              (on_nonfinite TR_NONFINITE_SKIP) */
  tr_memory_result memory;
  /* CUDA graphs (tr_job_config.graphs): passes captured and replayed, over every stage, and
   * "" or the first stage's account of a capture that failed (its passes then ran eagerly) */
  tr_graphs graphs;        /* the setting that ran */
  int64_t graph_captures, graph_launches;
  char graphs_note[256];
  /* The run's last evaluation on held-out samples (tr_job_config.eval): after step
   * eval_step (-1: none ran), of eval_samples samples; their mean loss, and the fraction of
   * rows whose largest output is the target class (losses with an accuracy: cross-entropy;
   * else NaN). eval_count: evaluations in this run. */
  int64_t eval_step, eval_samples;
  double eval_loss, eval_accuracy;
  int eval_count;
  /* Communication: the bytes every sender of the run (each device, and the async server)
   * sent per step together, all collectives and edges (docs/WORKLOADS.md), and device i's
   * own part of it; NaN: not measured (no step ran) */
  double comm_bytes_per_step;
  double comm_bytes_device[TR_TRAIN_MAX_DEVICES];
  /* Local SGD (strategy local, tr_local_config): H, K and the outer step that ran ("" and
   * 0 in other runs: JSON null) */
  int sync_every, warmup_sync;
  char outer[16];
  /* async: the workers still running at the end, and those that left
   * (tr_async_config.elastic) as "worker@step,..." ("2@37": worker 2 left when the server
   * had applied the updates up to step 37); "" when none left */
  int workers_alive;
  char workers_left[128];
  char workers_joined[128]; /* async: workers that joined (tr_async_config.join_at) as
                               "worker@step,..."; "" when none did */
  /* local SGD with tr_async_config.elastic: the replicas still running at the end (0 in
   * other runs: JSON null), and those that left as "replica@step,..." ("1@37": replica 1
   * failed while it trained step 37); "" when none left (JSON null) */
  int replicas_alive;
  char replicas_left[128];
  /* troupe plan's prediction of this run (tr_plan.h: tr_plan_predict of its options, made
   * before it ran), and how far it was: error = predicted / measured − 1 (samples/s), and
   * the activations' peak of the device where it was furthest off. Every strategy, async and
   * local SGD too; across processes (mpirun) runs of host devices, on rank 0, with the links
   * between the ranks timed before the first step where the file of costs has none;
   * samples_per_s 0 where there is none (JSON null). */
  char layout_choice[192]; /* layout.automatic: the layout chosen and why ("" otherwise) */
  struct {
    double samples_per_s, step_seconds, error, peak_error;
    int64_t peak_activation_bytes[TR_TRAIN_MAX_DEVICES];
  } predicted;
} tr_train_result;

#ifdef __cplusplus
}
#endif

#endif
