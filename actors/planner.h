/* planner.h — what a run takes from the planner (tr_plan.h): the cut of a pipeline balanced
 * by what each layer costs, measured once and kept (costs.c), so that a run and the plan
 * that predicted it cut the model alike; the prediction of the run and its error
 * (planner.c); the layout chosen for it (plan_layouts.c). Private to actors/. */
#ifndef TR_PLANNER_H
#define TR_PLANNER_H

#include "tr_job.h"
#include "tr_plan.h"

/* The cut of m into c's layout.stages × chunks pieces for its micro-batches, balanced by each
 * layer's forward and backward on `d` (from the default file of costs, or measured there):
 * 1 and cuts[0 .. pieces] filled; 0 for one piece, a layout that is none (tr_job_new says
 * why), or where it cannot be measured (the job then cuts by FLOPs, as tr_job_new does). */
int tr__costs_cut(const tr_model *m, tr_device *d, const tr_job_config *c, int *cuts);

/* The file of costs' key for `what` on d's kind of device (its kind, model and ISA). */
void tr__costs_key(const tr_device *d, const char *what, char *out, size_t n);

/* What a number of the file of costs is, and so what a machine can make of it (costs.c): a
 * number outside that range (not finite, 0 where nothing is not a cost, 1e-300 s or 1e300 s
 * for a pass) is never taken from the file, where it is measured again, nor kept there. */
typedef enum tr__costs_unit {
  TR__COSTS_SECONDS,      /* a pass, a step, a hand-over: 1 ns to 1 hour */
  TR__COSTS_SECONDS_OR_0, /* the same, or 0: none (the runtime's own work, a line's start) */
  TR__COSTS_PER_BYTE,     /* seconds a byte: 1e-15 (a PB/s) to 1e-3 (a kB/s) */
  TR__COSTS_PER_BYTE_OR_0,
  TR__COSTS_FACTOR,       /* a slowdown: 1 to 10^4 */
} tr__costs_unit;

/* Entry `name` of the file of costs `c` (rows × cols numbers, into v; units[j] the unit of
 * column j), or measured by measure(arg, v) and kept there (costs.c). */
int tr__costs_entry(const tr_plan_costs_config *c, const char *name, int rows, int cols,
                    const tr__costs_unit *units,
                    int (*measure)(void *arg, double *v, char *err, size_t n), void *arg,
                    double *v, char *err, size_t n);

/* Figures in hand kept as entry `name` of the file of costs `c`, whatever it had; TR_EINVAL
 * for a number outside its unit's range (err names it). */
int tr__costs_keep(const tr_plan_costs_config *c, const char *name, int rows, int cols,
                   const tr__costs_unit *units, const double *v, char *err, size_t n);

/* The machine's pace (costs_pace.c): the seconds a fixed piece of work takes now (the
 * process's fastest kept), and the fastest this process has timed (timing one if none). */
double tr__pace_probe(void);
double tr__pace_best(void);

/* The file of costs' key for `what` of model m (its name and fingerprint: a model changed
 * under the same name is another) on d's kind of device. */
void tr__costs_model_key(const tr_model *m, const tr_device *d, const char *what, char *out,
                         size_t n);

/* The name of model m's entry at micro-batch `batch` on d's kind of device (costs.c); what
 * a measure function gives when the config asks for cached layers only and the file lacks
 * them (TR_ESTATE, err naming the entry `arg`). */
void tr__costs_entry_name(const tr_model *m, const tr_device *d, int batch, char *out, size_t n);
int tr__costs_not_kept(void *arg, double *v, char *err, size_t n);

/* The latency of a message between two of d's kind of devices' actors, in seconds: a hand-over
 * to a parked pinned actor (links.c). */
int tr__costs_link(tr_device *d, const tr_plan_costs_config *c, double *latency, char *err,
                   size_t n);

/* How much slower each of k host devices computes the model's forwards and backwards at
 * micro-batch `batch` when all k compute at once than one alone (costs_together.c), from the
 * file of costs or measured on devs[0, k) and kept; with c->layers_cached never measured
 * (1 where the file has none). At least 1, and k / tr__plan_cpus() where k is more. */
int tr__costs_together(const tr_model *m, tr_device_list *devs, int k, int batch,
                       const tr_plan_costs_config *c, double *slowdown, char *err, size_t n);

/* The CPUs this process may run on (its affinity), at least 1. */
int tr__plan_cpus(void);

/* The devices-at-once factor from alternating phases (costs_together.c): alone[p] seconds
 * per round of device 0 alone, with[p × k + i] device i's with all k at work; the median of
 * the pairs' ratios (their mean over the k against alone), never below 1. */
double tr__costs_together_ratio(const double *alone, const double *with, int pairs, int k);

/* The layers' times of tensor member 0 of a group of T (m[0..T): each member's model), its
 * members measured together on devs[0, T) with their comms, so the times hold the group's
 * collectives (costs.c); from the file of costs or measured and kept, as tr_plan_layer_times. */
int tr__costs_member_times(tr_model *const *m, tr_device_list *devs, int T, int batch,
                           const tr_plan_costs_config *c, tr_layer_times *times, bool *measured,
                           char *err, size_t n);

/* How much slower each device of a synchronous layout computes for sharing the machine
 * (planner.c): D devices on `cpus` CPUs (host devices; D where they do not share), `busy` of
 * them computing on average (1 to D), `together` the slowdown of all D at once
 * (tr__costs_together), `within` the part of it a tensor group of T already has in its
 * members' times (the slowdown of T at once; 1 without groups). What is beyond the group's
 * own, never less than D threads on the CPUs allow beside T, in proportion to the devices
 * busy beside the first: 1 + (beyond − 1) (busy − 1) / (D − 1). */
double tr__plan_slowdown(double together, double within, int D, int T, int cpus, double busy);

/* An asynchronous job's costs, in seconds (predict_async.c): R workers, each a forward and
 * backward of a whole batch alone (compute), a message's hand-over (latency: a push and its
 * reply each take one), the server's update of one push (apply); the slowdown of R devices
 * computing at once (>= 1); SSP's bound (-1: none); the CPUs the workers and the server's
 * thread share (host devices), or 0 (devices of their own, which the server's thread leaves
 * alone). */
typedef struct tr__async_costs {
  int workers;
  double compute, latency, apply, together;
  int staleness;
  int cpus;
} tr__async_costs;

/* Its rate: pushes (steps of a global batch) a second, a worker's cycle, each worker's share
 * of it computing, the updates' mean staleness, and whether the server is what bounds it. */
typedef struct tr__async_step {
  double pushes_per_s, cycle, utilization, staleness;
  bool server_bound;
} tr__async_step;

/* 0, or TR_EINVAL for costs that are negative, not finite, or no workers. */
int tr__plan_async(const tr__async_costs *c, tr__async_step *out);

/* The step the planner predicts of simplenet alone on the device `spec` names, without the
 * runtime's own work (planner.c gives it: what tr__costs_overhead measures against). */
typedef int (*tr__plan_bare_fn)(const char *spec, double *step_seconds, char *err, size_t n);

/* The runtime's own work in a step on d's kind of device, in seconds (costs_overhead.c): from
 * the file of costs, or measured (a short run of simplenet, less bare's prediction of it) and
 * kept; with c->layers_cached never measured (0 where the file has none). */
int tr__costs_overhead(const tr_device *d, const tr_plan_costs_config *c, tr__plan_bare_fn bare,
                       double *seconds, char *err, size_t n);

/* Seconds a copy of `bytes` takes on d (the best of five between two buffers of its own; 0
 * where they cannot be had), and the seconds per byte of one beyond the caches (64 MiB),
 * from the file of costs or measured and kept; with c->layers_cached never measured (0 where
 * the file has none). costs_overhead.c. */
double tr__costs_copy_seconds(tr_device *d, size_t bytes);
int tr__costs_bandwidth(tr_device *d, const tr_plan_costs_config *c, double *per_byte, char *err,
                        size_t n);

/* Seconds the optimizer o's step over layers [first, end) of m takes on d's kind of device,
 * the gradients' norm included (o clips, or `norm`: the run checks it): timed on a stage of
 * exactly those layers, so the passes go at the pace their bytes meet (costs_step.c); from
 * the file of costs, or measured and kept. 0 for no layers. Its entry's name: _name. */
void tr__costs_step_name(const tr_model *m, const tr_device *d, const tr_optim_config *o,
                         bool norm, int first, int end, char *out, size_t n);
int tr__costs_step(const tr_model *m, tr_device *d, const tr_optim_config *o, bool norm,
                   int first, int end, const tr_plan_costs_config *c, double *seconds,
                   char *err, size_t n);

/* The links between the processes of a job (costs_ranks.c): a message's seconds from one
 * rank to another, alone and per byte, and an MPI sum's over every rank; the ranks and the
 * machines they run on. */
typedef struct tr__rank_links {
  double message, message_per_byte;
  double sum, sum_per_byte;
  int ranks, machines;
} tr__rank_links;

/* The links of world w (every rank calls it at the same point: timing them is a collective),
 * from rank 0's file of costs or timed and kept there (with c->remeasure, timed again); the
 * same figures on every rank. d: the kind of device they are kept for. */
int tr__costs_ranks(tr_world *w, const tr_device *d, const tr_plan_costs_config *c,
                    tr__rank_links *out, char *err, size_t n);

/* The line y = alpha + per_unit x through the n points (x[i], y[i]) by least squares; where
 * that crosses below 0, the line through the origin instead (neither is ever negative). */
void tr__costs_fit_line(const double *x, const double *y, int n, double *alpha,
                        double *per_unit);

/* tr_plan_predict of a run across processes: device i of the run's list on rank rank_of[i],
 * linked as `links` says (the async server on rank 0). */
int tr__plan_predict_ranks(const tr_train_options *o, const tr_plan_costs_config *cc,
                           const int *rank_of, const tr__rank_links *links,
                           tr_plan_prediction *out, char *err, size_t n);

/* tr_plan_predict without the runtime's own work. */
int tr__plan_predict_bare(const tr_train_options *o, const tr_plan_costs_config *cc,
                          tr_plan_prediction *out, char *err, size_t n);

/* A run's prediction (planner.c): tr_plan_predict of its options before it runs, `devices`
 * the run's (across processes every rank's, tr_world_devices: every rank calls this, and the
 * links between them are timed where the file of costs has none; rank 0 predicts), false
 * where there is none (devices slowed on purpose, GPUs across processes, a rank other than
 * 0, a failure); then the result's `predicted`, and its errors against what the run
 * measured. */
bool tr__plan_run(const tr_train_options *o, const tr_device_list *devices,
                  tr_plan_prediction *p);
void tr__plan_result(const tr_plan_prediction *p, tr_result *r);

/* layout.automatic: `o` with the strategy and layout troupe plan ranks best (tr_plan_rank)
 * into *chosen, and the line that says which and why into `why`. 0, or TR_EINVAL naming a
 * layout field given beside it, or that none fits (err). */
int tr__plan_choose(const tr_train_options *o, tr_train_options *chosen, char *why, size_t nwhy,
                    char *err, size_t n);

#endif
