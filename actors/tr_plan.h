/* tr_plan.h — predicting a layout's training step from costs, before running it: what each
 * layer costs on a kind of device, measured once and kept (tr_plan_layer_times, below), and
 * one step of a schedule simulated with such costs (tr_plan_simulate).
 *
 * troupe's schedules are exact action lists (tr_schedule.h), and the stage runner executes
 * them as they are: so a step's time follows from what each action costs. tr_plan_simulate
 * runs one step of a schedule's lists on all of a pipeline's devices at once, as the stage
 * actors would, with the costs given: each forward, input-gradient (B) and weight-gradient
 * (W) of a micro-batch on each virtual stage, the time an activation or a gradient takes
 * from its send to its receiver, and each device's step at the end (its replica group's sum
 * and the optimizer). Messages travel on the edges the job wires, with their credits: an
 * edge of activations has the sender's slots (tr_schedule_slots), one of gradients two,
 * taken before the backward whose gradient it carries and given back when the receiver
 * takes the message. It says when each device finishes, how long each computed, the
 * bubble, and how many micro-batches' activations each device held at most.
 *
 *   double f[2] = {1e-3, 1e-3}, b[2] = {2e-3, 2e-3};   // seconds per micro-batch
 *   tr_plan_step step;
 *   char err[256];
 *   if (tr_plan_simulate(sc, &(tr_plan_costs){.forward = f, .backward = b}, &step, err,
 *                        sizeof err))
 *     fprintf(stderr, "%s\n", err);                   // bad costs, or a schedule that
 *   else                                               // cannot finish (names the device)
 *     printf("%.3f ms, bubble %.3f\n", step.seconds * 1e3, step.bubble);
 *
 * With every F the same cost and every B the same (zb1: F, B and W the same) and nothing
 * else costing time, the bubble is the schedule's own (tr_schedule_bubble).
 */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "tr_base.h"
#include "tr_device.h"
#include "tr_model.h"
#include "tr_schedule.h"
#include "tr_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most devices a simulated pipeline has (its stages). */
enum { TR_PLAN_MAX_DEVICES = 64 };

/* Costs in seconds, each array indexed by virtual stage k = chunk × p + device (k < p × v,
 * the schedule's stages times chunks). NULL: that cost is 0 everywhere. */
typedef struct tr_plan_costs {
  const double *forward;         /* [p·v] a micro-batch's forward */
  const double *backward;        /* [p·v] its backward, both halves (B + W) */
  const double *backward_weight; /* [p·v] the W part of `backward`, for schedules that split
                                    it (zb1: B takes backward − backward_weight, W the rest) */
  const double *act_latency;     /* [p·v] virtual stage k's activation, from its send until
                                    k + 1 can take it (the last entry unused) */
  const double *grad_latency;    /* [p·v] virtual stage k's input gradient, from its send
                                    until k − 1 can take it (the first entry unused) */
  const double *step;            /* [p] device s's step after its last action: the replica
                                    group's sums not overlapped, and the optimizer */
  /* Memory, for the activations' peak (tr_stage_info's, tr_stage_plan): a micro-batch's
   * activations in virtual stage k (slot_bytes) and what k holds all along (work_bytes). */
  const size_t *slot_bytes;      /* [p·v] */
  const size_t *work_bytes;      /* [p·v] */
} tr_plan_costs;

/* One simulated step. */
typedef struct tr_plan_step {
  double seconds;                       /* from the start to the last device's step end */
  double busy[TR_PLAN_MAX_DEVICES];     /* each device's forwards, backwards and step */
  double finish[TR_PLAN_MAX_DEVICES];   /* when each device's step ended */
  double bubble;                        /* 1 − Σ busy / (p × seconds), as a run's
                                           bubble_fraction is measured */
  int peak[TR_PLAN_MAX_DEVICES];        /* micro-batches (of all chunks) holding activations
                                           at once, at most */
  size_t peak_activation_bytes[TR_PLAN_MAX_DEVICES]; /* their bytes at most, with the chunks'
                                           work_bytes: as a run's --json memory.devices[i]
                                           peak_activation_bytes counts them */
  int devices;                          /* p */
} tr_plan_step;

/* Simulates one step of `sc` with costs `c` into *out. 0; TR_EINVAL (err says which cost is
 * negative or not finite, that the schedule has more than TR_PLAN_MAX_DEVICES stages, or
 * which of sc, c and out is NULL);
 * TR_ESTATE when the lists cannot finish with the edges' credits (err names where each
 * device waits); TR_ENOMEM. */
TR_API int tr_plan_simulate(const tr_schedule *sc, const tr_plan_costs *c, tr_plan_step *out,
                            char *err, size_t n);

/* ---- costs: measured once per model, kind of device and micro-batch, kept in a file ------
 *
 * What each layer's passes take (tr_layer_times, tr_model.h) on a kind of device — its kind,
 * its model and the instruction set its GEMM runs on — for a micro-batch of `batch`
 * samples. They are kept in a file of costs (a safetensors file) and measured again when the
 * file has none for that model (its name, tensors' shapes and layers' FLOPs), that kind of
 * device and batch, when its entry is older than TR_PLAN_COSTS_MAX_AGE or of another version
 * of troupe, or when asked to (`remeasure`). A measurement taken while the machine ran more
 * than a quarter slower than its pace (a short fixed piece of work timed before and after it,
 * against the fastest this process has timed) is taken once more when the pace is back, half
 * a second at most later, and the attempt at the faster pace kept. A number no machine takes
 * (not finite, not positive, a pass under a nanosecond or over an hour) is never taken from
 * the file: it is measured again, and its measurement kept in its place.
 *
 * Processes may plan at once on one file: each adds what it measured under troupe's lock
 * file beside it (".costs.safetensors.troupe-lock"), held only to read the file again,
 * merge what the others added, and write it, never while measuring; so every process's
 * entries are kept. A holder that keeps the lock for more than 5 s (a process stopped
 * there) is given up on: the entries are measured and not kept, and stderr says so once.
 *
 *   tr_layer_times t[64];
 *   bool measured;
 *   if (tr_plan_layer_times(model, dev, 32, NULL, t, &measured, err, sizeof err)) ...;
 *   // from the default file when it had them (measured false), else timed and added to it
 */

/* Seconds after which an entry is stale (the machine's load, clocks and libraries change). */
#define TR_PLAN_COSTS_MAX_AGE (7 * 24 * 3600)

typedef struct tr_plan_costs_config {
  /* The file. NULL: tr_plan_costs_default_path() (its directory made; where it cannot be
   * read or written, the layers are measured and nothing kept); "": no file, measure. A path
   * given must be a file of costs or nothing yet: anything else (a checkpoint, a FIFO, a
   * device, a symlink to such) is refused (TR_EINVAL), never replaced, and so is a lock file
   * beside it that is not troupe's. A symlink to a file of costs is written through, and a
   * rewrite keeps the file's mode. */
  const char *path;
  int remeasure; /* measure even what the file has, and keep the new times */
  int reps;      /* rounds of measurement (the median of each pass is kept); 0: 5 */
  /* The layers' times from the file only (TR_ESTATE, err saying so, where it lacks them):
   * timing them opens every layer on the device at once, which a run's own prediction must
   * not do before the run (the result's "predicted.*" figures). What else a prediction measures is
   * a layer's worth of memory at most. */
  int layers_cached;
} tr_plan_costs_config;

/* $TROUPE_COSTS, else $XDG_CACHE_HOME/troupe/costs.safetensors, else
 * $HOME/.cache/troupe/costs.safetensors ("" when neither is set). */
TR_API const char *tr_plan_costs_default_path(void);

/* times[layer] for model m on d's kind of device at micro-batch `batch`, from the file of
 * costs (c NULL: defaults) or measured on d from the calling thread (which becomes d's
 * owner, tr_model_measure_passes) and added to it; *measured says which. 0, TR_EINVAL (err
 * names the file and what is wrong with it), a measurement's failure, TR_EINTR (a signal
 * held during start-up, tr_signals_hold), TR_ENOMEM; m, d, times or measured NULL, or batch
 * below 1, TR_EINVAL naming it. */
TR_API int tr_plan_layer_times(const tr_model *m, tr_device *d, int batch,
                               const tr_plan_costs_config *c, tr_layer_times *times,
                               bool *measured, char *err, size_t n);

/* ---- a layout's step predicted ---------------------------------------------------------
 *
 * tr_plan_predict takes the options a run would be given (tr_train.h: the model, the devices,
 * the strategy and the job's layout) and, without running it, resolves them as tr_train_run
 * would (the same replicas, stages, tensor members, micro-batches, schedule and cut), takes
 * each layer's costs on the first device (tr_plan_layer_times), adds the copies of the
 * activations between stages, the replica group's sums not hidden behind the backward and
 * the optimizer's step, and simulates the schedule (tr_plan_simulate). Host devices share the
 * machine: each computes as much slower as the devices at once measured, in proportion to
 * how many are busy on average. Every strategy: local SGD as dp with its replicas' sum every
 * H steps; async workers each a whole batch's forward and backward, pushed to a server that
 * applies one update at a time (the rate of R alike workers, bounded by the server's;
 * staleness R − 1, SSP's bound of 0 making rounds).
 *
 *   tr_train_options o = tr_train_defaults();
 *   o.model = "mlp", o.devices = "host:2", o.strategy = TR_STRATEGY_PIPELINE;
 *   tr_plan_prediction p;
 *   if (tr_plan_predict(&o, NULL, &p, err, sizeof err) == 0)
 *     printf("%.0f samples/s, bubble %.2f\n", p.samples_per_s, p.bubble);
 */
typedef struct tr_plan_prediction {
  double step_seconds, samples_per_s;
  double bubble;                                     /* as tr_plan_step's */
  int devices;                                       /* R × P × T */
  double utilization[TR_PLAN_MAX_DEVICES];           /* busy / step, device (r·P + s)·T + t */
  size_t peak_activation_bytes[TR_PLAN_MAX_DEVICES]; /* as --json memory.devices[i] */
  size_t state_bytes[TR_PLAN_MAX_DEVICES];  /* parameters, gradients, optimizer state (its
                                               shard under ZeRO-1) and scratch */
  uint64_t memory_free;                      /* what the devices had free (host devices: the
                                               machine's, shared), as tr_device_info says */
  bool host;                                 /* host devices (they share memory_free) */
  int replicas, stages, tensor, microbatches, chunks; /* the layout resolved */
  tr_schedule_kind schedule;
  int microbatch_samples;
  bool measured;                                     /* costs were measured, not read */
  double staleness;  /* async: the updates' mean staleness (pushes applied since the pull) */
} tr_plan_prediction;

/* Predicts the step of the run `o` describes (its data, outputs and steps are not looked at),
 * the costs through `cc` (NULL: the default file). step_seconds is a global batch's (async:
 * the time between the server's updates). 0; TR_EINVAL with err naming the option (as
 * tr_train_run's would; o or out NULL too); a measurement's failure. */
TR_API int tr_plan_predict(const tr_train_options *o, const tr_plan_costs_config *cc,
                           tr_plan_prediction *out, char *err, size_t n);

/* ---- the strategy table: the layouts a model can run on some devices, ranked ----------- */

/* The most layouts tr_plan_layouts gives. */
enum { TR_PLAN_MAX_LAYOUTS = 24 };

typedef struct tr_plan_layout {
  char label[24];             /* "pipeline 1f1b", "dp --zero 1", "async 2 S=2" (troupe bench's
                                 row names) */
  tr_train_options o;         /* the run's options (model, devices, strategy, the job's
                                 layout; steps, seconds and outputs not set): model and
                                 devices are the strings tr_plan_layouts was given */
  bool predicted;             /* tr_plan_predict predicts it (every row tr_plan_layouts gives) */
  tr_plan_prediction p;       /* tr_plan_rank's, when predicted and it succeeded */
  int rc;                     /* tr_plan_rank: the prediction's status, with err */
  char err[256];
  uint64_t peak_bytes;        /* tr_plan_rank: the most one device holds (state_bytes and
                                 peak_activation_bytes) */
  bool fits;                  /* tr_plan_rank: within the memory limit per device, or (none
                                 given) within memory_free (host devices: all of them
                                 together) */
} tr_plan_layout;

/* The layouts of `model` on `devices` that troupe bench runs, one per strategy and variant:
 * single; with two devices or more dp, dp with ZeRO-1, mp, pipelines of 8 micro-batches under
 * each schedule (interleaved where the model has two pieces per device) and with
 * recomputation, tp; with four or more (even) hybrid, hybrid with ZeRO-1, dp of tensor groups
 * of 2; async with 1 and every device as workers (and SSP, DC-ASGD) and local SGD. *count of
 * them into out[cap]. 0, or TR_EINVAL naming the devices or model (or which argument is NULL,
 * or cap below 0). */
TR_API int tr_plan_layouts(const char *model, const char *devices, tr_plan_layout *out, int cap,
                           int *count, char *err, size_t n);

/* Predicts every layout that can be (each its rc and err where it failed), marks whether it
 * fits in `memory_limit` bytes per device (0: the devices' own memory), and sorts them: those
 * that fit and were predicted first, by predicted samples/s, highest first; then those that
 * do not fit, by peak_bytes; then the rest in their order. Returns 0: a layout's failure
 * (a bad file of costs, a measurement) is its own rc and err; TR_EINVAL for count below 0,
 * or layouts NULL with a count. */
TR_API int tr_plan_rank(tr_plan_layout *layouts, int count, uint64_t memory_limit,
                        const tr_plan_costs_config *cc, char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif
