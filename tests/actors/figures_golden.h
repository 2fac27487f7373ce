/* figures_golden.h — the runs figures_golden.txt was written from: tr_train_result structs with
 * every field set (three runs: a hybrid pipeline across ranks that troupe plan predicted and a
 * signal stopped, an asynchronous one with a worker that left and two that joined, an elastic
 * local SGD of tensor groups), each as tr_train_result_json and then tr_train_result_summary
 * wrote it before the figures were keyed (commit 7553c66). test_result.c checks that the
 * library writes the same bytes: --json is the same document, and the summary the same words.
 */
#ifndef FIGURES_GOLDEN_H
#define FIGURES_GOLDEN_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

enum { GOLDEN_RUNS = 3 };

/* A figure of its own for every field, from a sequence no two of them share. */
static double golden_next(double *x) {
  *x = fmod(*x * 1.37 + 0.011, 997.0);
  return *x;
}

static void golden_fill(tr_train_result *r, int run) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) /* as a run's, past its devices */
    r->utilization[i] = r->comm_bytes_device[i] = NAN;
  double x = 1.25 + run;
  const bool hybrid = run == 0, async = run == 1, local = run == 2;
  snprintf(r->model, sizeof r->model, "mlp");
  snprintf(r->strategy, sizeof r->strategy, hybrid ? "hybrid" : async ? "async" : "local");
  r->ndevices = async ? 3 : 4;
  for (int i = 0, len = 0; i < r->ndevices; i++)
    len += snprintf(r->devices + len, sizeof r->devices - (size_t)len, "%shost:%d@r%d",
                    i ? "," : "", i, i % 2);
  snprintf(r->devices_note, sizeof r->devices_note, hybrid ? "4 of the 5 \"given\"" : "");
  r->ranks = 2;
  for (int i = 0; i < r->ndevices; i++) {
    r->rank[i] = i % 2;
    r->utilization[i] = async && i == 1 ? NAN : golden_next(&x) / 1000;
    r->idle[i] = (tr_idle_figures){golden_next(&x) / 1e3, golden_next(&x) / 1e3,
                                   golden_next(&x) / 1e3, golden_next(&x) / 1e3,
                                   golden_next(&x) / 1e3, golden_next(&x) / 1e3,
                                   golden_next(&x) / 1e3, golden_next(&x) / 1e3};
    r->peak_microbatches[i] = i + 1;
    r->peak_activation_bytes[i] = 1000 + i;
    r->comm_bytes_device[i] = i == 2 ? NAN : golden_next(&x);
    r->memory.devices[i] = (tr_memory_figures){100 + i, 200 + i, 300 + i};
    r->predicted.peak_activation_bytes[i] = 2000 + i;
  }
  r->first_step = hybrid ? 3 : 0;
  r->steps = 40;
  r->samples = 777;
  r->seconds = golden_next(&x);
  r->window_steps = 30;
  r->samples_per_s = golden_next(&x);
  r->steps_per_s = golden_next(&x);
  r->initial_loss = golden_next(&x);
  r->final_loss = golden_next(&x);
  r->replicas = async ? 3 : 2;
  r->stages = hybrid ? 2 : 1;
  r->tensor = local ? 2 : 1;
  const int per = r->stages * r->tensor; /* a replica's devices: its memory is theirs */
  for (int g = 0; g < r->ndevices / per; g++)
    for (int k = g * per; k < (g + 1) * per; k++) {
      r->memory.replicas[g].params += r->memory.devices[k].params;
      r->memory.replicas[g].grads += r->memory.devices[k].grads;
      r->memory.replicas[g].optimizer_state += r->memory.devices[k].optimizer_state;
    }
  r->microbatches = hybrid ? 4 : 1;
  r->zero = hybrid;
  r->allreduce = async ? TR_ALLREDUCE_AUTO : TR_ALLREDUCE_PEER;
  r->edges_nccl = hybrid ? 2 : 0;
  r->edges_mpi = hybrid ? 3 : 0;
  r->batches_made = run;
  r->batches_loaded = !async;
  r->chunks = hybrid ? 2 : 1;
  for (int k = 0; k <= r->stages * r->chunks; k++) r->cuts[k] = 2 * k;
  snprintf(r->schedule, sizeof r->schedule, hybrid ? "interleaved" : "");
  r->recompute = local;
  r->bubble_fraction = hybrid ? golden_next(&x) : NAN;
  r->bubble_theory = hybrid ? golden_next(&x) : NAN;
  r->bubble_schedule = hybrid ? golden_next(&x) : NAN;
  r->staleness_mean = async ? golden_next(&x) : NAN;
  r->staleness_max = async ? 9 : NAN;
  for (int b = 0; b < TR_TRAIN_STALENESS_BINS; b++) r->staleness_hist[b] = async && b < 10 ? 3 * b : 0;
  r->clock_gap_max = 5;
  r->workers = async ? 3 : 0;
  r->momentum = async ? 0.9f : NAN;
  r->server_utilization = async ? golden_next(&x) : NAN;
  r->consistency = golden_next(&x);
  r->gflops = golden_next(&x);
  r->tokens_per_s = local ? golden_next(&x) : NAN;
  r->sgemm_gflops = async ? 0 : 50;
  r->signal = hybrid ? SIGINT : 0;
  r->skipped_steps = 2;
  r->graphs = hybrid ? TR_GRAPHS_OFF : TR_GRAPHS_ON;
  r->graph_captures = 4;
  r->graph_launches = 9;
  snprintf(r->graphs_note, sizeof r->graphs_note, hybrid ? "stage 0: no capture" : "");
  r->eval_step = async ? -1 : 40;
  r->eval_samples = 64;
  r->eval_loss = golden_next(&x);
  r->eval_accuracy = 0.5;
  r->eval_count = 3;
  r->comm_bytes_per_step = golden_next(&x);
  r->sync_every = local ? 8 : 0;
  r->warmup_sync = 2;
  snprintf(r->outer, sizeof r->outer, local ? "nesterov" : "");
  r->workers_alive = 2;
  snprintf(r->workers_left, sizeof r->workers_left, async ? "1@37" : "");
  snprintf(r->workers_joined, sizeof r->workers_joined, async ? "2@9" : "");
  r->replicas_alive = local ? 1 : 0;
  snprintf(r->replicas_left, sizeof r->replicas_left, local ? "1@37" : "");
  snprintf(r->layout_choice, sizeof r->layout_choice, hybrid ? "hybrid 2x2: the fastest" : "");
  if (!async) {
    r->predicted.samples_per_s = golden_next(&x);
    r->predicted.step_seconds = golden_next(&x);
    r->predicted.error = hybrid ? 0.5 : 0.01;
    r->predicted.peak_error = golden_next(&x) / 1000;
  }
}

#endif
