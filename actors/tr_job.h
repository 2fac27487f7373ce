/* tr_job.h — the built-in actors of a training graph, and how they connect.
 *
 * A job is one training run's shared description: the model, the data, the optimizer, the
 * global batch and its layout on the devices — `replicas` data-parallel copies, each cut
 * into `stages` pipeline stages, each stage training `microbatches` micro-batches per step
 * under a schedule (tr_schedule.h). Its actors:
 *
 *   loader       (loop)    one per replica: fills that replica's share of every step's
 *                          samples, micro-batch by micro-batch, into buffers the stages lend
 *   stage        (pinned)  one per device: layers [cuts[s], cuts[s+1]) of the model; runs its
 *                          schedule's action list every step; in a replica group it all-
 *                          reduces gradients bucket by bucket while backward still runs
 *   coordinator  (loop)    progress, checkpoints, and the run's figures (tr_train_result)
 *   server       (pinned)  asynchronous jobs: the master parameters and the optimizer; it
 *                          applies each worker's pushed gradient as one update and answers
 *                          with fresh parameters (a stage is then a worker)
 *
 * Every synchronous strategy of tr_train_run is this graph with other numbers: single is
 * 1 × 1 × 1; dp R × 1; mp 1 × P with one micro-batch; pipeline 1 × P × m; hybrid R × P × m.
 * async is R workers of 1 stage, each with its loader, served by one server (tr_job_serve).
 * A data-parallel pipeline, wired by hand with the calls below:
 *
 *   tr_job *j;
 *   tr_job_new(&j, g, &cfg, err, sizeof err);     // cfg.replicas = 2, cfg.stages = 2, ...
 *   tr_actor *stage[2][2], *loader, *coord;
 *   for (int r = 0; r < 2; r++) {
 *     tr_job_add_loader(j, r, &loader);
 *     for (int s = 0; s < 2; s++) tr_job_add_stage(j, r, s, devs[2 * r + s], &stage[r][s]);
 *     tr_job_feed(j, loader, stage[r][0], stage[r][1]);   // inputs to 0, targets to 1
 *     tr_job_chain(j, stage[r][0], stage[r][1]);          // activations and gradients
 *   }
 *   for (int s = 0; s < 2; s++) tr_job_group(j, (tr_actor *[]){stage[0][s], stage[1][s]}, 2);
 *   tr_job_add_coordinator(j, &coord);
 *   int rc = tr_graph_run(g, 0, 1000, 0);
 *   tr_train_result r;
 *   if (!rc) tr_job_result(j, &r);
 *
 * Edges and their credits: loader → first stage (inputs) and → last stage (targets), as
 * many micro-batches as `prefetch`; stage s → s+1 (activations), as many as stage s has
 * slots; stage s+1 → s (gradients of activations), two (the stage's two input-gradient
 * buffers). A replica group is not an edge but a collective: each member reduces its own
 * chunk of every bucket straight from the others' memory and writes the sum back to them.
 */
#ifndef TR_JOB_H
#define TR_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "tr_data.h"
#include "tr_device.h"
#include "tr_graph.h"
#include "tr_model.h"
#include "tr_schedule.h"
#include "tr_train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_job_config {
  const tr_model *model;  /* outlive the job */
  const tr_data *data;
  tr_optim_config optim;
  int global_batch;       /* samples per step, over every replica and micro-batch */
  int replicas, stages;   /* >= 1 each */
  int microbatches;       /* per step and replica, >= 1; global_batch divisible by
                             replicas × microbatches */
  tr_schedule_kind schedule;
  const int *cuts;        /* stages + 1 layer boundaries from 0 to the layer count;
                             NULL: tr_model_balance */
  uint64_t seed;
  int prefetch;           /* micro-batches each loader keeps ready; 0: as fit in 4 MiB,
                             from 2 × microbatches to 256 (async: 2) */
  const char *checkpoint; /* written at the end (and every checkpoint_every steps) */
  int64_t checkpoint_every;
  const char *resume;     /* every stage starts from this checkpoint */
  const char *strategy;   /* recorded in results and checkpoints; NULL: derived */
  int progress;           /* a progress line on stderr */
  int slow_device, slow_us; /* testing: tr_train_options */

  /* Asynchronous training: `replicas` workers (one stage each, one micro-batch of the whole
   * global batch) and a server; the fields mean what tr_train_options says. */
  int async;
  int staleness, staleness_lr, pull_every, momentum_correction, hogwild;
  float dc_lambda;
  int fail_device, fail_step;
} tr_job_config;

typedef struct tr_job tr_job;

/* Checks the configuration against the model (err names what is wrong: TR_EINVAL). The
 * graph runs the job's actors; the job must outlive tr_graph_run. */
int tr_job_new(tr_job **out, tr_graph *g, const tr_job_config *config, char *err,
               size_t err_size);
/* After the graph has been freed. */
void tr_job_free(tr_job *j);

int tr_job_add_loader(tr_job *j, int replica, tr_actor **out);
/* Stage `stage` of replica `replica` on `dev` (which that actor's thread will own). */
int tr_job_add_stage(tr_job *j, int replica, int stage, tr_device *dev, tr_actor **out);
int tr_job_add_coordinator(tr_job *j, tr_actor **out);

/* loader → `first` (inputs) and → `last` (targets): the replica's first and last stage,
 * the same actor when there is one stage. */
int tr_job_feed(tr_job *j, tr_actor *loader, tr_actor *first, tr_actor *last);
/* Stage s → stage s+1 of one replica: activations forward, their gradients back. */
int tr_job_chain(tr_job *j, tr_actor *from, tr_actor *to);
/* Stage s of every replica (in replica order): gradients all-reduced before each update. */
int tr_job_group(tr_job *j, tr_actor *const *members, int n);

/* Asynchronous jobs: the parameter server on `dev`, and worker `worker` (its stage) on
 * `dev`, fed by a loader like any stage. */
int tr_job_add_server(tr_job *j, tr_device *dev, tr_actor **out);
int tr_job_add_worker(tr_job *j, int worker, tr_device *dev, tr_actor **out);
/* worker → server: gradients pushed (one credit: a worker waits for the server's reply
 * before its next backward); server → worker: the reply, with fresh parameters when pulled. */
int tr_job_serve(tr_job *j, tr_actor *server, tr_actor *worker);

/* The figures of the run, once tr_graph_run returned 0. */
void tr_job_result(const tr_job *j, tr_train_result *r);

#ifdef __cplusplus
}
#endif
#endif
