/* run_settings.c — what the coordinator writes into a run's result besides the figures the
 * table reduces (run_metrics.h): the layout and settings that ran, the devices by name, the
 * figures docs/WORKLOADS.md derives from the reduced measures, and the replicas' consistency
 * from the copies of their parameters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "idle.h"
#include "join.h"
#include "result_impl.h"

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

/* What docs/WORKLOADS.md derives from the measures: the window (less the held-out
 * evaluations' time, the longest a stage spent in them), the samples and the rates, each
 * device's utilization and idle time, the bubbles, the server's utilization. */
void tr__result_rates(const tr__run *run, const tr__reduced *red, tr_result *r) {
  const tr_job_config *jc = &run->c;
  const int P = jc->layout.stages, n = tr__stage_count(run);
  const int64_t start = tr__reduced_int(red, TR__M_WINDOW_START);
  const int64_t end = tr__reduced_int(red, TR__M_WINDOW_END);
  const double aside = (double)tr__reduced_int(red, TR__M_ASIDE_NS);
  const double window = (double)(end - start) > aside ? (double)(end - start) - aside : 0;
  /* the steps every stage ran; async: the server's updates, each one worker's push */
  if (jc->async.enabled)
    tr__result_set_int(r, TR__M_WINDOW_STEPS, tr__reduced_int(red, TR__M_WINDOW_PUSHES));
  const int64_t window_steps = tr__result_int(r, TR__M_WINDOW_STEPS);
  const double seconds = window / 1e9;
  const double steps_per_s = window > 0 ? (double)window_steps / seconds : NAN;
  tr__result_set_int(r, TR__M_SAMPLES, (tr__result_int(r, TR__M_STEPS) -
                                        tr__result_int(r, TR__M_FIRST_STEP)) * jc->global_batch);
  tr__result_set_real(r, TR__M_SECONDS, seconds);
  tr__result_set_real(r, TR__M_STEPS_PER_S, steps_per_s);
  tr__result_set_real(r, TR__M_SAMPLES_PER_S, steps_per_s * jc->global_batch);
  for (int i = 0; i < n; i++) {
    const tr__value *d = tr__reduced_device(red, i);
    const double utilization = window > 0 ? (double)d[TR__M_BUSY_NS].i / window : NAN;
    tr__result_set_real_at(r, TR__M_UTILIZATION, i, utilization);
    tr__idle_result(d, window, utilization, r, i);
  }
  if (P > 1) {
    tr__result_set_real(r, TR__M_BUBBLE_FRACTION,
                        window > 0 ? 1 - (double)tr__reduced_int(red, TR__M_BUSY_NS) / (n * window)
                                   : NAN);
    tr__result_set_real(r, TR__M_BUBBLE_SCHEDULE,
                        tr__idle_schedule_bubble(run->sc, red, P, tr__members(run),
                                                 jc->layout.microbatches, window_steps));
  }
  if (jc->async.enabled)
    tr__result_set_real(r, TR__M_SERVER_UTILIZATION,
                        window > 0 ? (double)tr__reduced_int(red, TR__M_SERVER_BUSY_NS) / window
                                   : NAN);
}

/* The run's settings, as the figures record them; dones[i] and rank[i]: device i's report
 * and process. */
int tr__result_settings(const tr__run *run, const tr__report *dones, const int *rank,
                        tr_result *r) {
  const tr_job_config *jc = &run->c;
  const int R = jc->layout.replicas, P = jc->layout.stages, n = tr__stage_count(run);
  int rc = tr__result_set_devices(r, n);
  if (rc) return rc;
  tr__result_set_int(r, TR__M_REPLICAS, R);
  tr__result_set_int(r, TR__M_STAGES, P);
  tr__result_set_int(r, TR__M_TENSOR, tr__members(run));
  tr__result_set_int(r, TR__M_MICROBATCHES, jc->layout.microbatches);
  tr__result_set_int(r, TR__M_ZERO, jc->zero);
  tr__result_set_int(r, TR__M_ALLREDUCE, R > 1 ? (run->nccl ? TR_ALLREDUCE_NCCL : TR_ALLREDUCE_PEER)
                                               : TR_ALLREDUCE_AUTO);
  tr__result_set_int(r, TR__M_EDGES_NCCL, run->edges_nccl);
  tr__result_set_int(r, TR__M_EDGES_MPI, run->edges_mpi);
  tr__result_set_int(r, TR__M_BATCHES_MADE, run->batches_made);
  tr__result_set_int(r, TR__M_BATCHES_LOADED, run->batches_loaded);
  tr__result_set_int(r, TR__M_CHUNKS, jc->layout.chunks);
  tr__result_set_int(r, TR__M_RECOMPUTE, jc->memory.recompute != 0);
  tr__result_set_int(r, TR__M_GRAPHS, jc->graphs);
  tr__result_set_int(r, TR__M_RANKS, tr_world_size(tr__graph_world(run->g)));
  tr__result_set_int(r, TR__M_FIRST_STEP, tr_graph_first_step(run->g));
  int64_t cuts[TR__MAX_STAGES + 1];
  for (int k = 0; k <= tr__pieces(run); k++) cuts[k] = run->cuts[k];
  if ((rc = tr__result_set_list(r, TR__M_CUTS, cuts, tr__pieces(run) + 1))) return rc;
  if (P > 1) {
    if ((rc = tr__result_set_text(r, TR__M_SCHEDULE, tr_schedule_kind_name(jc->layout.schedule))))
      return rc;
    tr__result_set_real(r, TR__M_BUBBLE_THEORY, tr_schedule_bubble(run->sc));
  }
  if (jc->async.enabled) {
    tr__result_set_int(r, TR__M_WORKERS, R);
    tr__result_set_real(r, TR__M_MOMENTUM, jc->optim.kind == TR_OPTIM_MOMENTUM ? jc->optim.momentum : NAN);
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return TR_ENOMEM;
  if (run->devices_given > n) /* a layout smaller than the devices it was given */
    fprintf(f, "%d of the %d devices given (layout: %d replicas x %d stages%s)", n,
            run->devices_given, R, P, tr__members(run) > 1 ? " x tensor members" : "");
  rc = fclose(f) ? TR_ENOMEM : tr__result_set_text(r, TR__M_DEVICES_NOTE, text);
  free(text), text = NULL;
  if (rc || (f = open_memstream(&text, &len)) == NULL) return rc ? rc : TR_ENOMEM;
  for (int i = 0, named = 0; i < n; i++) {
    tr__result_set_int_at(r, TR__M_RANK, i, rank[i]);
    /* a worker that was to join, never created (join.h): the last ones, no device of the run */
    if (!dones[i].device[0] && tr__joins_later(run, i)) continue;
    fprintf(f, "%s%s", named++ ? "," : "", dones[i].device);
    if (tr__result_int(r, TR__M_RANKS) > 1) fprintf(f, "@r%d", rank[i]); /* host:0 of rank 1 */
  }
  rc = fclose(f) ? TR_ENOMEM : tr__result_set_text(r, TR__M_DEVICES, text);
  free(text);
  return rc;
}
