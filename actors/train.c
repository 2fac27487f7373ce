/* train.c — tr_train_run: options → model, devices, data → the strategy's graph → figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "tr_trace.h"

static const char *const strategy_names[] = {"single", "dp", "mp", "pipeline", "hybrid", "async"};

const char *tr_strategy_name(tr_strategy s) {
  return (unsigned)s < sizeof strategy_names / sizeof *strategy_names ? strategy_names[s] : "?";
}

int tr_strategy_parse(const char *name, tr_strategy *out) {
  for (unsigned i = 0; i < sizeof strategy_names / sizeof *strategy_names; i++) {
    if (!strcmp(name, strategy_names[i])) {
      *out = (tr_strategy)i;
      return 0;
    }
  }
  return TR_EINVAL;
}

tr_train_options tr_train_defaults(void) {
  return (tr_train_options){.model = "simplenet",
                            .strategy = TR_STRATEGY_SINGLE,
                            .devices = "auto",
                            .steps = 100,
                            .optimizer = -1,
                            .schedule = -1,
                            .staleness = -1,
                            .seed = 1};
}

/* Everything one run holds, built from the options before any thread starts. */
typedef struct run {
  tr_model *model;
  tr_device_list *devices;
  tr_device_list *server; /* async */
  tr_data *data;
  tr_job_config jc;
  int cuts[TR__MAX_STAGES + 1];
  int64_t first_step, end_step;
} run;

/* The layout of a strategy on n devices: replicas × stages, micro-batches, schedule. */
static int layout(run *rn, const tr_train_options *o, int n, char *err, size_t size) {
  tr_job_config *c = &rn->jc;
  int R = 1, P = 1;
  switch (o->strategy) {
    case TR_STRATEGY_SINGLE: break;
    case TR_STRATEGY_DP: R = n; break;
    case TR_STRATEGY_MP:
    case TR_STRATEGY_PIPELINE: P = n; break;
    case TR_STRATEGY_HYBRID:
      P = o->stages > 0 ? o->stages : 2;
      if (n % P) {
        snprintf(err, size, "--devices: %d devices do not make replicas of %d stages", n, P);
        return TR_EINVAL;
      }
      R = n / P;
      break;
    case TR_STRATEGY_ASYNC:
      R = o->workers > 0 ? o->workers : n;
      if (o->workers < 0 || R > n) {
        snprintf(err, size, "--workers %d: give 1 to %d, one worker per device of --devices %s",
                 o->workers, n, o->devices);
        return TR_EINVAL;
      }
      if (o->microbatches > 1 || o->cuts) {
        snprintf(err, size, "--strategy async: a worker trains the whole model on whole batches "
                 "(no --microbatches or --cuts)");
        return TR_EINVAL;
      }
      c->async = 1;
      c->staleness = o->staleness;
      c->dc_lambda = o->dc_lambda;
      c->momentum_correction = o->momentum_correction;
      c->staleness_lr = o->staleness_lr;
      c->pull_every = o->pull_every;
      c->hogwild = o->hogwild;
      c->fail_device = o->fail_device;
      c->fail_step = o->fail_step;
      break;
  }
  c->replicas = R;
  c->stages = P;
  const bool pipelined = o->strategy == TR_STRATEGY_PIPELINE || o->strategy == TR_STRATEGY_HYBRID;
  if (o->strategy == TR_STRATEGY_MP && o->microbatches > 1) {
    snprintf(err, size, "--microbatches %d: mp trains one micro-batch at a time (that is "
             "--strategy pipeline)", o->microbatches);
    return TR_EINVAL;
  }
  c->microbatches = o->microbatches > 0 ? o->microbatches : pipelined ? 2 * P : 1;
  c->schedule = o->schedule >= 0 ? (tr_schedule_kind)o->schedule : TR_SCHEDULE_1F1B;
  if (o->cuts) {
    if (o->ncuts != P - 1) {
      snprintf(err, size, "--cuts: %d boundaries given, %d stages need %d", o->ncuts, P, P - 1);
      return TR_EINVAL;
    }
    rn->cuts[0] = 0;
    for (int s = 1; s < P; s++) rn->cuts[s] = o->cuts[s - 1];
    rn->cuts[P] = tr_model_layer_count(rn->model);
    c->cuts = rn->cuts;
  }
  return 0;
}

/* The server's device: as asked, else a host device of its own beside host workers, or a
 * logical device on the first worker's GPU. */
static int open_server(run *rn, const tr_train_options *o, char *err, size_t n) {
  char spec[32];
  const tr_device_info *first = tr_device_get_info(tr_device_list_get(rn->devices, 0));
  if (o->hogwild && first->kind != TR_DEVICE_HOST) {
    snprintf(err, n, "--hogwild: host devices only (the workers share the server's memory), "
             "not %s", o->devices);
    return TR_EINVAL;
  }
  if (first->kind == TR_DEVICE_CUDA) snprintf(spec, sizeof spec, "cuda:%d", first->ordinal);
  else snprintf(spec, sizeof spec, "host:1");
  const char *want = o->server ? o->server : spec;
  char why[256];
  int rc = tr_device_list_open(&rn->server, want, why, sizeof why);
  if (rc == 0 && tr_device_list_count(rn->server) != 1) {
    snprintf(why, sizeof why, "give one device");
    rc = TR_EINVAL;
  }
  if (rc) snprintf(err, n, "--server %s: %s", want, why);
  return rc;
}

/* Pipeline stages balanced by what each layer costs on the device, timed before the run:
 * FLOPs miss what is not a GEMM (activations, norms, attention's softmax) and what small
 * GEMMs lose. Where measuring fails, tr_job_new balances by FLOPs instead. */
static void measured_cuts(run *rn) {
  tr_job_config *c = &rn->jc;
  const int L = tr_model_layer_count(rn->model);
  const int parts = c->replicas * c->microbatches, batch = c->global_batch / parts;
  if (c->stages > L || c->stages > TR__MAX_STAGES || batch < 1 || c->global_batch % parts)
    return; /* not a layout: tr_job_new says why */
  double *cost = malloc((size_t)L * sizeof *cost);
  if (cost &&
      tr_model_measure_layers(rn->model, tr_device_list_get(rn->devices, 0), batch, 5, cost,
                              NULL, 0) == 0 &&
      tr_model_balance_costs(rn->model, cost, c->stages, rn->cuts) == 0)
    c->cuts = rn->cuts;
  free(cost);
}

/* Fills the run from the options: everything that can be wrong with them is found here,
 * before any thread starts. */
static int prepare(run *rn, const tr_train_options *o, char *err, size_t n) {
  int rc;
  if (o->steps < 0 || (o->steps == 0 && !(o->seconds > 0))) {
    snprintf(err, n, "--steps or --seconds: give a positive number of steps or seconds");
    return TR_EINVAL;
  }
  rc = o->spec ? tr_model_new(&rn->model, o->spec, err, n)
               : tr_model_named(&rn->model, o->model, err, n);
  if (rc) return rc;
  tr_job_config *c = &rn->jc;
  c->model = rn->model;
  c->global_batch = o->batch > 0 ? o->batch : tr_model_batch(rn->model);
  c->optim = tr_model_optim(rn->model);
  if (o->optimizer >= 0) c->optim = tr_optim_defaults((tr_optim_kind)o->optimizer, c->optim.lr);
  if (o->lr > 0) c->optim.lr = o->lr;
  if (o->clip > 0) c->optim.clip = o->clip;
  c->seed = o->seed;
  c->prefetch = o->prefetch;
  c->checkpoint = o->checkpoint;
  c->checkpoint_every = o->checkpoint_every;
  c->resume = o->resume;
  c->strategy = tr_strategy_name(o->strategy);
  c->progress = o->progress;
  c->slow_device = o->slow_device;
  c->slow_us = o->slow_us;

  if ((rc = tr_device_list_open(&rn->devices, o->devices, err, n))) return rc;
  const int ndev = tr_device_list_count(rn->devices);
  if ((rc = layout(rn, o, o->strategy == TR_STRATEGY_SINGLE ? 1 : ndev, err, n))) return rc;
  if (c->async && (rc = open_server(rn, o, err, n))) return rc;
  if (o->resume && (rc = tr__checkpoint_peek(o->resume, rn->model, &rn->first_step, err, n)))
    return rc;
  rn->end_step = o->steps;
  if (o->steps > 0 && rn->first_step >= o->steps) {
    snprintf(err, n, "--resume %s: the checkpoint is at step %lld, --steps %lld is reached",
             o->resume, (long long)rn->first_step, (long long)o->steps);
    return TR_EINVAL;
  }
  tr_data_config dc;
  tr_data_config_for(&dc, rn->model, o->seed, o->data);
  if ((rc = tr_data_open(&rn->data, &dc, err, n))) return rc;
  /* last: measuring takes a moment, wasted on options found wrong after it */
  if (c->stages > 1 && !c->cuts && !o->deterministic) measured_cuts(rn);
  c->data = rn->data;
  return 0;
}

/* The strategy's graph, with the public calls of tr_job.h: per replica a loader and a
 * chain of stages, per stage index a replica group, and one coordinator. */
static int build(tr_job *j, const run *rn) {
  const int R = rn->jc.replicas, P = rn->jc.stages;
  tr_actor *stage[TR_TRAIN_MAX_DEVICES], *loader, *coordinator, *server = NULL;
  int rc = 0;
  if (rn->jc.async) {
    rc = tr_job_add_server(j, tr_device_list_get(rn->server, 0), &server);
    for (int w = 0; w < R && rc == 0; w++) {
      rc = tr_job_add_worker(j, w, tr_device_list_get(rn->devices, w), &stage[w]);
      if (rc == 0) rc = tr_job_add_loader(j, w, &loader);
      if (rc == 0) rc = tr_job_feed(j, loader, stage[w], stage[w]);
      if (rc == 0) rc = tr_job_serve(j, server, stage[w]);
    }
    if (rc == 0) rc = tr_job_add_coordinator(j, &coordinator);
    return rc;
  }
  for (int r = 0; r < R && rc == 0; r++) {
    for (int s = 0; s < P && rc == 0; s++)
      rc = tr_job_add_stage(j, r, s, tr_device_list_get(rn->devices, r * P + s),
                            &stage[r * P + s]);
    if (rc == 0) rc = tr_job_add_loader(j, r, &loader);
    if (rc == 0) rc = tr_job_feed(j, loader, stage[r * P], stage[r * P + P - 1]);
    for (int s = 0; s + 1 < P && rc == 0; s++)
      rc = tr_job_chain(j, stage[r * P + s], stage[r * P + s + 1]);
  }
  for (int s = 0; s < P && rc == 0; s++) {
    tr_actor *group[TR_TRAIN_MAX_DEVICES];
    for (int r = 0; r < R; r++) group[r] = stage[r * P + s];
    rc = tr_job_group(j, group, R);
  }
  if (rc == 0) rc = tr_job_add_coordinator(j, &coordinator);
  return rc;
}

int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size) {
  run rn = {0};
  tr_graph *g = NULL;
  tr_job *j = NULL;
  err[0] = 0;
  tr__result_init(r, o->spec ? o->spec->name : o->model ? o->model : "?",
                  tr_strategy_name(o->strategy));
  int rc = prepare(&rn, o, err, err_size);
  if (rc) goto out;
  tr_system_config sc = {.name = "train",
                         .handle_signals = 1,
                         .trace = o->trace != NULL,
                         .watchdog_ms = o->watchdog_ms > 0 ? o->watchdog_ms : 60000};
  if ((rc = tr_graph_new(&g, &sc))) {
    snprintf(err, err_size, "creating the actor system: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&j, g, &rn.jc, err, err_size))) goto out;
  if ((rc = build(j, &rn))) {
    snprintf(err, err_size, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_graph_run(g, rn.first_step, rn.end_step, rn.end_step ? 0 : o->seconds))) {
    snprintf(err, err_size, "%s", tr_graph_error(g));
    goto out;
  }
  tr_job_result(j, r);
  if (o->trace && (rc = tr_system_trace_write(tr_graph_system(g), o->trace)))
    snprintf(err, err_size, "--trace %s: cannot write the trace", o->trace);
out:
  tr_graph_free(g);
  tr_job_free(j);
  tr_data_close(rn.data);
  tr_device_list_close(rn.devices);
  tr_device_list_close(rn.server);
  tr_model_free(rn.model);
  return rc;
}
