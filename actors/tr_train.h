/* tr_train.h — training runs: a model, a strategy, devices, and the figures of the run.
 *
 * tr_train_run_result builds the message graph of a strategy on a fresh system and runs it
 * to the end: a loader actor on the libuv loop fills batches ahead (its prefetch depth is
 * the credit count of the loader → stage edge), a stage actor pinned to each device trains,
 * and a coordinator on the loop drives the run, has checkpoints written and collects the
 * figures docs/WORKLOADS.md defines into a tr_result (tr_result.h: each by its key), which
 * tr_result_json writes as JSON; an observer of yours (tr_train_options.observe) hears of
 * the steps as they go. It is what `troupe train` runs, its progress line such an observer.
 *
 *   tr_train_options o = tr_train_defaults();
 *   o.model = "simplenet";
 *   o.steps = 2000;
 *   tr_result *r;
 *   tr_error e;
 *   double rate, loss;
 *   if (tr_train_run_result(&o, &r, &e)) fprintf(stderr, "%s\n", e.message);
 *   else if (!tr_result_real(r, "samples_per_s", &rate) && !tr_result_real(r, "final_loss", &loss))
 *     printf("%.0f samples/s, final loss %g\n", rate, loss);
 *   tr_result_free(r);
 */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tr_base.h"
#include "tr_job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_strategy {
  TR_STRATEGY_SINGLE,
  TR_STRATEGY_DP,
  TR_STRATEGY_MP,
  TR_STRATEGY_PIPELINE,
  TR_STRATEGY_HYBRID,
  TR_STRATEGY_ASYNC,
  TR_STRATEGY_LOCAL,  /* local SGD, post-local SGD, DiLoCo (tr_job_config.local) */
  TR_STRATEGY_TP      /* one tensor group (job.layout.tensor) across the devices */
} tr_strategy;

/* "single", "dp", ...; parse: 0, or TR_EINVAL. */
TR_API const char *tr_strategy_name(tr_strategy s);
TR_API int tr_strategy_parse(const char *name, tr_strategy *out);

struct tr_model_spec;

typedef struct tr_train_options {
  const char *model;       /* "simplenet", "mlp", "gpt" */
  const struct tr_model_spec *spec; /* a model of your own instead (tr_model.h); NULL: model */
  tr_strategy strategy;
  const char *devices;     /* "host:N", "cuda:0,1", "auto"; across processes also "none" */
  /* The job (tr_job.h) as tr_train_run builds it. job.model is built from model or spec
   * (job.model must be NULL); job.data, a source of yours (tr_data.h, closed by you after
   * the run), is the run's data, else data and labels are opened (giving both is refused);
   * job.strategy and job.async.enabled follow from strategy (refused where they say
   * otherwise); job.watchdog_steps and _min_ms, when 0, follow watchdog_ms (below).
   * job.layout.replicas and .stages follow from the strategy and the devices:
   * single: one device. dp: a replica per device. mp: the layers cut across the devices,
   * one micro-batch. pipeline: the same cut, layout.microbatches per step (0: 2 × stages)
   * under layout.schedule. hybrid: layout.stages per replica (0: 2), replicas = devices /
   * stages, each replica a pipeline. async: layout.replicas workers (0: one per device).
   * tp: one tensor group of every device (job.layout.tensor = devices). With
   * job.layout.tensor T > 1, dp, mp, pipeline and hybrid lay out tensor groups of T
   * devices (devices / T places; devices side by side make a group).
   * Cuts not given are balanced by each layer's time, measured on the first device before
   * the run (by FLOPs when deterministic: the same cut every run). */
  tr_job_config job;
  int64_t steps;           /* the run's last step (a resumed run continues to it); 0: seconds */
  double seconds;          /* with steps 0: train this long */
  const char *data;        /* a byte or text file (token models) or a .npy array of inputs
                              (float models, with labels); NULL: the model's default data */
  const char *labels;      /* a .npy array of targets beside data (float models) */
  /* Held-out evaluation (job.eval: its `every` and `samples` are used as given): eval_data
   * (and eval_labels), files as data and labels are, opened as job.eval.data; or eval_split
   * > 0: that fraction of data's rows held out (tr_data_split, seeded by job.seed), the
   * others trained on. Either with job.eval.data set, or both, is refused; eval_split needs
   * a finite source (.npy files, or a job.data of yours with rows). A token model's eval_data
   * is a byte or text file, an endless source: with job.eval.samples 0 its first 1024
   * samples are evaluated. The eval files are inputs: no output may be one of them. */
  const char *eval_data;
  const char *eval_labels;
  double eval_split;
  int deterministic;       /* bitwise-repeatable runs (host devices always are) */
  const char *trace;       /* Chrome trace JSON written here after the run; NULL: none */
  int64_t trace_budget_mib; /* the trace's events take at most this much (0: 64 MiB); a
                              longer run keeps its last steps, and the file says which
                              were dropped (tr_trace.h) */
  int watchdog_ms;         /* no progress for this long fails the run; 0: the default, which
                              follows the run: 10 times the slowest step seen (the first one
                              guessed from its FLOPs), at least a minute */
  const char *server;      /* async: the server's device; NULL: host:1 for host workers,
                              else a logical device on the first worker's GPU */
  /* The processes the job spans (tr_world.h); NULL: this one alone. Every rank calls
   * tr_train_run with the same options but its own `devices`: the job's devices are every
   * rank's in rank order, and each rank runs the stages on its own. The ranks compare every
   * option that changes the result first (data and labels: the same files) and refuse to
   * start, naming the option and the ranks, where they differ.
   * The result is rank 0's (the others' holds no figures); the async server lives on rank
   * 0, and a trace is written by each rank, rank r's named with ".rank<r>". */
  tr_world *world;
  FILE *notes;             /* what the user should know of the run before it starts (a
                              resumed checkpoint taken with another batch, seed or strategy);
                              NULL: keep it to yourself */
  FILE *plan;              /* the job's plan (tr_job_print_plan), checked, before it runs;
                              NULL: not printed */
  /* An observer of the run (troupe train draws its progress line with one): called on the
   * loop thread of rank 0 with a report (tr_protocol.h) every `observe_every` complete steps
   * (0: every step) and a last one when the run is over. It must return quickly: the
   * loaders share that thread. NULL: none. */
  void (*observe)(void *arg, const tr_report_msg *report);
  void *observe_arg;
  int observe_every;
  /* With observe: the reports of steps that are multiples of this (and the last) carry the
   * parameters (report->params, a checkpoint in memory: tr_job_snapshot), valid while the
   * callback runs; 0: none. Across processes every rank gives the same.
   *
   *   static void watch(void *arg, const tr_report_msg *r) {
   *     if (r->params) keep(arg, tr_checkpoint_find(r->params, "0.weight"));   // copy it
   *   }
   *   o.observe = watch;  o.observe_arg = &mine;  o.snapshot_every = 50; */
  int snapshot_every;
} tr_train_options;

/* single, auto devices, 100 steps, everything else as tr_job_defaults: the workload's
 * batch and optimizer, 1f1b, unbounded staleness, seed 1. */
TR_API tr_train_options tr_train_defaults(void);

/* Runs the training; *out (always set, but for TR_ENOMEM, and NULL arguments) is its figures,
 * to free with tr_result_free: a run that failed has its model and strategy only, one that a
 * signal ended all of them. 0, or a negative status with e (which may be NULL) naming the
 * actor, device and operation that failed; for a bad option the status is TR_EINVAL and
 * e->field names it ("devices", or one of job, "layout.cuts"), as e->message's fields do
 * (tr_job.h: tr_error), for a front end that names them its own way. o or out NULL:
 * TR_EINVAL. TR_EINTR with "signal" set (a text, "SIGINT"): a signal (SIGINT, SIGTERM,
 * SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2, tr_system.h; one that came during start-up too:
 * tr_signals_hold) ended the run in order after the step in flight, the result holds its
 * figures and the checkpoint (when one was asked for) holds that step; a second signal ends
 * the process at once. Before the first step, what the run will need is tried: each
 * output's write in place (tr_file_probe_output), and its memory on each device against what
 * the device has (TR_EINVAL naming global_batch, with the figures and the largest batch that
 * fits). */
TR_API int tr_train_run_result(const tr_train_options *o, tr_result **out, tr_error *e);

/* Deprecated: tr_train_run_result, with the figures in the struct (its devices up to 64; r
 * is filled as tr_train_run_result fills its result, r->signal the signal's number) and the
 * failure in `err` (which may be NULL, or of size 0: nothing written) or as a tr_error (e
 * NULL: the status alone). o or r NULL: TR_EINVAL. */
TR_API int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size)
    TR_DEPRECATED("use tr_train_run_result (tr_result.h)");
TR_API int tr_train_run_e(const tr_train_options *o, tr_train_result *r, tr_error *e)
    TR_DEPRECATED("use tr_train_run_result (tr_result.h)");

/* Deprecated: tr_result_json and tr_result_summary of the struct's figures (those of devices
 * up to 64; memory.replicas: the sums of the devices' memory, as the run fills them). */
TR_API int tr_train_result_json(const tr_train_result *r, FILE *f)
    TR_DEPRECATED("use tr_result_json (tr_result.h)");
TR_API int tr_train_result_summary(const tr_train_result *r, FILE *f)
    TR_DEPRECATED("use tr_result_summary (tr_result.h)");

#ifdef __cplusplus
}
#endif
#endif
