/* train.c — tr_train_run: options → model, devices, data → the strategy's graph → figures. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_impl.h"
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
  tr_train_options o = {.model = "simplenet", .strategy = TR_STRATEGY_SINGLE, .devices = "auto",
                        .job = tr_job_defaults(), .steps = 100};
  /* the strategy and the devices decide these */
  o.job.layout.replicas = o.job.layout.stages = o.job.layout.microbatches = 0;
  return o;
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

/* The layout of a strategy on n devices: replicas × stages, micro-batches. */
static int layout(run *rn, const tr_train_options *o, int n, char *err, size_t size) {
  tr_layout_config *l = &rn->jc.layout;
  const tr_layout_config *given = &o->job.layout;
  int R = 1, P = 1;
  if (given->replicas && o->strategy != TR_STRATEGY_ASYNC)
    return tr_errorf(err, size, TR_EINVAL,
                     "layout.replicas %d: the strategy and the devices decide it (it is "
                     "async's number of workers)",
                     given->replicas);
  if (given->stages && o->strategy != TR_STRATEGY_HYBRID)
    return tr_errorf(err, size, TR_EINVAL,
                     "layout.stages %d: the strategy and the devices decide it (it is "
                     "hybrid's stages per replica)",
                     given->stages);
  switch (o->strategy) {
    case TR_STRATEGY_SINGLE: break;
    case TR_STRATEGY_DP: R = n; break;
    case TR_STRATEGY_MP:
    case TR_STRATEGY_PIPELINE: P = n; break;
    case TR_STRATEGY_HYBRID:
      P = given->stages > 0 ? given->stages : 2;
      if (n % P)
        return tr_errorf(err, size, TR_EINVAL,
                         "devices: %d devices do not make replicas of %d stages "
                         "(layout.stages)",
                         n, P);
      R = n / P;
      break;
    case TR_STRATEGY_ASYNC:
      R = given->replicas > 0 ? given->replicas : n;
      if (given->replicas < 0 || R > n)
        return tr_errorf(err, size, TR_EINVAL,
                         "layout.replicas %d: give 1 to %d workers, one per device of %s",
                         given->replicas, n, o->devices);
      if (given->microbatches > 1 || given->cuts)
        return tr_errorf(err, size, TR_EINVAL,
                         "async: a worker trains the whole model on whole batches (no "
                         "layout.microbatches or layout.cuts)");
      break;
  }
  rn->jc.async.enabled = o->strategy == TR_STRATEGY_ASYNC;
  if (o->strategy == TR_STRATEGY_MP && given->microbatches > 1)
    return tr_errorf(err, size, TR_EINVAL,
                     "layout.microbatches %d: mp trains one micro-batch at a time (that is "
                     "the pipeline strategy)",
                     given->microbatches);
  const bool pipelined = o->strategy == TR_STRATEGY_PIPELINE || o->strategy == TR_STRATEGY_HYBRID;
  l->replicas = R;
  l->stages = P;
  l->microbatches = given->microbatches > 0 ? given->microbatches : pipelined ? 2 * P : 1;
  return 0;
}

/* The server's device: as asked, else a host device of its own beside host workers, or a
 * logical device on the first worker's GPU. */
static int open_server(run *rn, const tr_train_options *o, char *err, size_t n) {
  char spec[32];
  const tr_device_info *first = tr_device_get_info(tr_device_list_get(rn->devices, 0));
  if (o->job.async.hogwild && first->kind != TR_DEVICE_HOST)
    return tr_errorf(err, n, TR_EINVAL,
                     "async.hogwild: host devices only (the workers share the server's "
                     "memory), not %s",
                     o->devices);
  if (first->kind == TR_DEVICE_CUDA) snprintf(spec, sizeof spec, "cuda:%d", first->ordinal);
  else snprintf(spec, sizeof spec, "host:1");
  const char *want = o->server ? o->server : spec;
  char why[256];
  int rc = tr_device_list_open(&rn->server, want, why, sizeof why);
  if (rc == 0 && tr_device_list_count(rn->server) != 1) {
    snprintf(why, sizeof why, "give one device");
    rc = TR_EINVAL;
  }
  if (rc) snprintf(err, n, "server %s: %s", want, why);
  return rc;
}

/* Pipeline stages balanced by what each layer costs on the device, timed before the run:
 * FLOPs miss what is not a GEMM (activations, norms, attention's softmax) and what small
 * GEMMs lose. Where measuring fails, tr_job_new balances by FLOPs instead. */
static void measured_cuts(run *rn) {
  tr_job_config *c = &rn->jc;
  const int L = tr_model_layer_count(rn->model), P = c->layout.stages;
  const int parts = c->layout.replicas * c->layout.microbatches;
  const int global = c->global_batch ? c->global_batch : tr_model_batch(rn->model);
  const int batch = global / parts;
  if (P > L || P > TR__MAX_STAGES || batch < 1 || global % parts)
    return; /* not a layout: tr_job_new says why */
  double *cost = malloc((size_t)L * sizeof *cost);
  if (cost &&
      tr_model_measure_layers(rn->model, tr_device_list_get(rn->devices, 0), batch, 5, cost,
                              NULL, 0) == 0 &&
      tr_model_balance_costs(rn->model, cost, P, rn->cuts) == 0) {
    c->layout.cuts = rn->cuts + 1;
    c->layout.ncuts = P - 1;
  }
  free(cost);
}

/* Fills the run from the options: everything that can be wrong with them is found here,
 * before any thread starts. */
static int prepare(run *rn, const tr_train_options *o, char *err, size_t n) {
  int rc;
  if (o->steps < 0 || (o->steps == 0 && !(o->seconds > 0)))
    return tr_errorf(err, n, TR_EINVAL,
                     "steps or seconds: give a positive number of steps or seconds");
  rc = o->spec ? tr_model_new(&rn->model, o->spec, err, n)
               : tr_model_named(&rn->model, o->model, err, n);
  if (rc) return rc;
  rn->jc = o->job;
  tr_job_config *c = &rn->jc;
  c->model = rn->model;
  c->strategy = tr_strategy_name(o->strategy);
  if ((rc = tr_device_list_open(&rn->devices, o->devices, err, n))) return rc;
  const int ndev = tr_device_list_count(rn->devices);
  if ((rc = layout(rn, o, o->strategy == TR_STRATEGY_SINGLE ? 1 : ndev, err, n))) return rc;
  if (c->async.enabled && (rc = open_server(rn, o, err, n))) return rc;
  const char *resume = c->checkpoint.resume;
  if (resume && (rc = tr__checkpoint_peek(resume, rn->model, &rn->first_step, err, n))) return rc;
  rn->end_step = o->steps;
  if (o->steps > 0 && rn->first_step >= o->steps)
    return tr_errorf(err, n, TR_EINVAL,
                     "checkpoint.resume %s: the checkpoint is at step %lld, steps %lld is "
                     "reached",
                     resume, (long long)rn->first_step, (long long)o->steps);
  if ((rc = tr_data_open_for(&rn->data, rn->model, o->job.seed, o->data, o->labels, err, n)))
    return rc;
  c->data = rn->data;
  /* last: measuring takes a moment, wasted on options found wrong after it */
  if (c->layout.stages > 1 && !c->layout.cuts && !o->deterministic) measured_cuts(rn);
  return 0;
}

/* The strategy's graph, with the public calls of tr_job.h: its stages (chained, grouped),
 * a loader per replica, one coordinator; async: a server and its workers. */
static int build(tr_job *j, const run *rn) {
  const int R = rn->jc.layout.replicas, P = rn->jc.layout.stages;
  tr_actor *stage[TR_TRAIN_MAX_DEVICES], *loader, *coordinator, *server = NULL;
  int rc = 0;
  if (rn->jc.async.enabled) {
    rc = tr_job_add_server(j, tr_device_list_get(rn->server, 0), &server);
    for (int w = 0; w < R && rc == 0; w++) {
      rc = tr_job_add_worker(j, w, tr_device_list_get(rn->devices, w), &stage[w]);
      if (rc == 0) rc = tr_job_serve(j, server, stage[w]);
    }
  } else {
    rc = tr_job_add_stages(j, rn->devices, stage);
  }
  for (int r = 0; r < R && rc == 0; r++) {
    rc = tr_job_add_loader(j, r, &loader);
    if (rc == 0) rc = tr_job_feed(j, loader, stage[r * P], stage[r * P + P - 1]);
  }
  if (rc == 0) rc = tr_job_add_coordinator(j, &coordinator);
  return rc;
}

int tr__train_run_hooked(const tr_train_options *o, const tr__test_hooks *hooks,
                         tr_train_result *r, char *err, size_t err_size) {
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
  if (hooks) tr__job_set_test_hooks(j, hooks);
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
    snprintf(err, err_size, "trace %s: cannot write the trace", o->trace);
out:
  tr_graph_free(g);
  tr_job_free(j);
  tr_data_close(rn.data);
  tr_device_list_close(rn.devices);
  tr_device_list_close(rn.server);
  tr_model_free(rn.model);
  return rc;
}

int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size) {
  return tr__train_run_hooked(o, NULL, r, err, err_size);
}
