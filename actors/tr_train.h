/* tr_train.h — training runs: a model, a strategy, devices, and the figures of the run.
 *
 * tr_train_run builds the message graph of a strategy on a fresh system and runs it to the
 * end: a loader actor on the libuv loop fills batches ahead (its prefetch depth is the
 * credit count of the loader → stage edge), a stage actor pinned to each device trains,
 * and a coordinator on the loop drives the run, prints progress and collects the figures
 * WORKLOADS.md defines. It is what `troupe train` runs.
 *
 *   tr_train_options o = tr_train_defaults();
 *   o.model = "simplenet";
 *   o.steps = 2000;
 *   tr_train_result r;
 *   char err[512];
 *   if (tr_train_run(&o, &r, err, sizeof err)) fprintf(stderr, "%s\n", err);
 *   else printf("%.0f samples/s, final loss %g\n", r.samples_per_s, r.final_loss);
 */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_strategy {
  TR_STRATEGY_SINGLE,
  TR_STRATEGY_DP,
  TR_STRATEGY_MP,
  TR_STRATEGY_PIPELINE,
  TR_STRATEGY_HYBRID,
  TR_STRATEGY_ASYNC
} tr_strategy;

/* "single", "dp", ...; parse: 0, or TR_EINVAL. */
const char *tr_strategy_name(tr_strategy s);
int tr_strategy_parse(const char *name, tr_strategy *out);

struct tr_model_spec;

typedef struct tr_train_options {
  const char *model;       /* "simplenet", "mlp", "gpt" */
  const struct tr_model_spec *spec; /* a model of your own instead (tr_model.h); NULL: model */
  tr_strategy strategy;
  const char *devices;     /* "host:N", "cuda:0,1", "auto" */
  /* The layout. single: one device. dp: a replica per device. mp: the layers cut across
   * the devices, one micro-batch. pipeline: the same cut, `microbatches` per step under
   * `schedule`. hybrid: `stages` per replica (default 2), replicas = devices / stages, each
   * replica a pipeline. */
  int microbatches;        /* per step and replica; 0: 1 (single, dp, mp), else 2 × stages */
  int schedule;            /* a tr_schedule_kind (tr_schedule.h); -1: 1f1b */
  int stages;              /* hybrid: devices per replica; 0: 2 */
  const int *cuts;         /* stage boundaries: ncuts = stages - 1 layer indices, increasing;
                              NULL: balanced by each layer's time, measured on the first
                              device before the run (by FLOPs when deterministic: the same
                              cut every run) */
  int ncuts;
  int64_t steps;           /* the run's last step (a resumed run continues to it); 0: seconds */
  double seconds;          /* with steps 0: train this long */
  int batch;               /* samples per step; 0: the workload's */
  float lr;                /* 0: the workload's */
  int optimizer;           /* -1: the workload's; else a tr_optim_kind */
  float clip;              /* global-norm clipping; 0: none */
  const char *data;        /* a byte or text file (gpt); NULL: the workload's data */
  uint64_t seed;
  int deterministic;       /* bitwise-repeatable runs (host devices always are) */
  const char *trace;       /* Chrome trace JSON written here after the run; NULL: none */
  const char *checkpoint;  /* safetensors file written at the end (and every N steps) */
  int64_t checkpoint_every;
  const char *resume;      /* start from this checkpoint */
  int progress;            /* a progress line on stderr (set it when stderr is a TTY) */
  int prefetch;            /* batches the loader keeps ready; 0: as fit in 1 MiB, 16 to 256 */
  int watchdog_ms;         /* no progress for this long fails the run; 0: the default */
  int slow_device;         /* testing: device `slow_device` sleeps `slow_us` after each */
  int slow_us;             /* forward and backward (0: off), to check credits hold */

  /* async: a parameter server holds the parameters and the optimizer; `workers` workers,
   * one per device, each pull a snapshot, compute the gradient of a whole global batch and
   * push it; every push is one update (one step). */
  int workers;             /* 0: one per device */
  int staleness;           /* SSP: a worker's pull waits while it is more than this many
                              pushes ahead of the slowest worker; -1: unbounded */
  float dc_lambda;         /* delay compensation (DC-ASGD): g + λ g⊙g⊙(θ_now − θ_pulled) */
  int momentum_correction; /* reduce the explicit momentum by the 1 − 1/workers that
                              asynchrony adds (Mitliagkas et al. 2016) */
  int staleness_lr;        /* divide the step size by the update's staleness (when > 1) */
  int pull_every;          /* pull every this many pushes (between pulls a worker computes
                              on the parameters it has); 0: 1 */
  const char *server;      /* the server's device; NULL: host:1 for host workers, else a
                              logical device on the first worker's GPU */
  int hogwild;             /* host devices: the workers update the server's parameters in
                              place, with no lock (Hogwild!, Niu et al. 2011), for comparison */
  int fail_device;         /* testing: worker `fail_device` fails its push number */
  int fail_step;           /* `fail_step` (from 1; 0: off) */
} tr_train_options;

/* single, auto devices, 100 steps, seed 1, 1f1b, unbounded staleness, everything else the
 * workload's. */
tr_train_options tr_train_defaults(void);

enum { TR_TRAIN_MAX_DEVICES = 64, TR_TRAIN_STALENESS_BINS = 32 };

/* The figures of WORKLOADS.md. Not-a-number marks what does not apply to a run (JSON null). */
typedef struct tr_train_result {
  char model[32], strategy[16], devices[256];
  int ndevices;
  int64_t first_step;      /* where the run began: 0, or the resumed checkpoint's step */
  int64_t steps;           /* the last step reached */
  int64_t samples;         /* samples trained in this run */
  double seconds;          /* of the measured window (after warm-up steps) */
  int64_t window_steps;
  double samples_per_s, steps_per_s;
  double initial_loss;     /* the first step's */
  double final_loss;       /* mean of the last 1% of steps (at least one) */
  int replicas, stages, microbatches; /* the layout that ran */
  int cuts[TR_TRAIN_MAX_DEVICES + 1]; /* stage s: layers [cuts[s], cuts[s + 1]) */
  char schedule[8];        /* "gpipe", "1f1b"; "" unless pipelined */
  double utilization[TR_TRAIN_MAX_DEVICES]; /* device i: replica i / stages, stage i % stages */
  double bubble_fraction;  /* measured; and the schedule's own (equal unit costs) */
  double bubble_theory;
  int peak_microbatches[TR_TRAIN_MAX_DEVICES]; /* the most micro-batches a device's stage
                                                  held activations of at once */
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
   * ||θ_worker − θ_server|| / ||θ_server|| */
  double consistency;
  double gflops;           /* WORKLOADS.md's FLOP count × samples/s */
  double tokens_per_s;     /* gpt */
} tr_train_result;

/* Runs the training. 0, or a negative status with `err` naming the actor, device and
 * operation that failed (a bad option: TR_EINVAL naming the option). */
int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
