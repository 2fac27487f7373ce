/* run_settings.c — what the coordinator writes into a run's result besides the figures the
 * table reduces (run_metrics.h): the layout and settings that ran, the devices by name, and
 * the replicas' consistency from the copies of their parameters. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_impl.h"
#include "join.h"
#include "run_metrics.h"

/* max over replicas of ||θ_r - θ_0|| / ||θ_0||, each replica's parameters over its stages */
double tr__replicas_consistency(const tr__run *run, const tr__report *dones) {
  const int R = run->c.layout.replicas, P = run->c.layout.stages;
  double worst = 0, norm0 = 0;
  for (int s = 0; s < P; s++) {
    const tr__report *d0 = &dones[tr__device_index(run, 0, s)];
    for (size_t i = 0; i < d0->numel; i++) norm0 += (double)d0->params[i] * d0->params[i];
  }
  for (int r = 1; r < R; r++) {
    double diff = 0;
    for (int s = 0; s < P; s++) {
      const tr__report *d0 = &dones[tr__device_index(run, 0, s)];
      const tr__report *dr = &dones[tr__device_index(run, r, s)];
      for (size_t i = 0; i < d0->numel && i < dr->numel; i++) {
        double d = (double)dr->params[i] - d0->params[i];
        diff += d * d;
      }
    }
    double rel = norm0 > 0 ? sqrt(diff / norm0) : sqrt(diff);
    if (rel > worst) worst = rel;
  }
  return worst;
}

/* The run's settings, as the figures record them; dones[i] and rank[i]: device i's report
 * and process. */
void tr__result_settings(const tr__run *run, const tr__report *dones, const int *rank,
                         tr_train_result *r) {
  const tr_job_config *jc = &run->c;
  const int R = jc->layout.replicas, P = jc->layout.stages, n = tr__stage_count(run);
  tr__result_init(r, tr_model_name(jc->model), run->strategy);
  r->replicas = R;
  r->stages = P;
  r->tensor = tr__members(run);
  r->microbatches = jc->layout.microbatches;
  r->zero = jc->zero;
  r->allreduce = R > 1 ? (run->nccl ? TR_ALLREDUCE_NCCL : TR_ALLREDUCE_PEER) : TR_ALLREDUCE_AUTO;
  r->edges_nccl = run->edges_nccl;
  r->edges_mpi = run->edges_mpi;
  r->batches_made = run->batches_made;
  r->batches_loaded = run->batches_loaded;
  r->chunks = jc->layout.chunks;
  r->recompute = jc->memory.recompute != 0;
  r->graphs = jc->graphs;
  r->ndevices = n;
  if (run->devices_given > n) /* a layout smaller than the devices it was given */
    snprintf(r->devices_note, sizeof r->devices_note,
             "%d of the %d devices given (layout: %d replicas x %d stages%s)", n,
             run->devices_given, R, P, tr__members(run) > 1 ? " x tensor members" : "");
  r->ranks = tr_world_size(tr__graph_world(run->g));
  r->first_step = tr_graph_first_step(run->g);
  memcpy(r->cuts, run->cuts, (size_t)(tr__pieces(run) + 1) * sizeof *run->cuts);
  if (P > 1) {
    snprintf(r->schedule, sizeof r->schedule, "%s", tr_schedule_kind_name(jc->layout.schedule));
    r->bubble_theory = tr_schedule_bubble(run->sc);
  }
  if (jc->async.enabled) {
    r->workers = R;
    r->momentum = jc->optim.kind == TR_OPTIM_MOMENTUM ? jc->optim.momentum : NAN;
  }
  size_t len = 0;
  for (int i = 0; i < n && i < TR_TRAIN_MAX_DEVICES; i++) {
    const char *sep = i ? "," : "";
    r->rank[i] = rank[i];
    /* a worker that was to join, never created (join.h): the last ones, no device of the run */
    if (len >= sizeof r->devices || (!dones[i].device[0] && tr__joins_later(run, i))) continue;
    if (r->ranks > 1) /* host:0@r1: host:0 of rank 1 */
      len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s@r%d", sep,
                              dones[i].device, rank[i]);
    else
      len += (size_t)snprintf(r->devices + len, sizeof r->devices - len, "%s%s", sep,
                              dones[i].device);
  }
}
