/* train.c — tr_train_run: options → model, devices, data → the strategy's graph → figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "tr_trace.h"

TR_MSGTYPE_DEFINE(tr__ring_type, tr__ring_msg);
TR_MSGTYPE_DEFINE(tr__batch_type, tr__batch_msg);
TR_MSGTYPE_DEFINE(tr__credit_type, tr__credit_msg);
TR_MSGTYPE_DEFINE(tr__progress_type, tr__progress_msg);
TR_MSGTYPE_DEFINE(tr__done_type, tr__done_msg);
TR_MSGTYPE_DEFINE(tr__finish_type, tr__finish_msg);
TR_MSGTYPE_DEFINE(tr__poll_type, tr__poll_msg);

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
                            .seed = 1};
}

static void result_init(tr_train_result *r, const tr_train_options *o, const tr__run *run) {
  memset(r, 0, sizeof *r);
  snprintf(r->model, sizeof r->model, "%s", o->spec ? o->spec->name : o->model);
  snprintf(r->strategy, sizeof r->strategy, "%s", tr_strategy_name(o->strategy));
  r->first_step = r->steps = run->first_step;
  r->initial_loss = r->final_loss = r->samples_per_s = r->steps_per_s = NAN;
  r->bubble_fraction = r->staleness_mean = r->staleness_max = r->consistency = NAN;
  r->gflops = r->tokens_per_s = NAN;
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) r->utilization[i] = NAN;
}

/* As many batch buffers as fit in 1 MiB, from 16 to 256: the stage returns credits half a
 * ring at a time (stage_actor.c), so a deep ring means few wake-ups of the loader's loop,
 * and a long queue to cover a slow one (a VM's idle CPU can take long to wake), which
 * matters where a step takes microseconds (simplenet: 256); large batches keep 16. */
static int default_prefetch(const tr_model *m, int batch) {
  const size_t bytes = (tr_model_input_bytes(m) + tr_model_target_bytes(m)) * (size_t)batch;
  const size_t fit = bytes ? ((size_t)1 << 20) / bytes : 64;
  return fit < 16 ? 16 : fit > 256 ? 256 : (int)fit;
}

/* Fills the run from the options: everything that can be wrong with them is found here,
 * before any thread starts. */
static int prepare(tr__run *run, const tr_train_options *o, char *err, size_t n) {
  int rc;
  if (o->strategy != TR_STRATEGY_SINGLE) {
    snprintf(err, n, "--strategy %s: not built yet (this build trains 'single')",
             tr_strategy_name(o->strategy));
    return TR_EINVAL;
  }
  if (o->steps < 0 || (o->steps == 0 && !(o->seconds > 0))) {
    snprintf(err, n, "--steps or --seconds: give a positive number of steps or seconds");
    return TR_EINVAL;
  }
  rc = o->spec ? tr_model_new(&run->model, o->spec, err, n)
              : tr_model_named(&run->model, o->model, err, n);
  if (rc) return rc;
  run->batch = o->batch > 0 ? o->batch : tr_model_batch(run->model);
  run->optim = tr_model_optim(run->model);
  if (o->optimizer >= 0) {
    float lr = run->optim.lr;
    run->optim = tr_optim_defaults((tr_optim_kind)o->optimizer, lr);
  }
  if (o->lr > 0) run->optim.lr = o->lr;
  if (o->clip > 0) run->optim.clip = o->clip;
  run->prefetch = o->prefetch > 0 ? o->prefetch : default_prefetch(run->model, run->batch);

  if ((rc = tr_device_list_open(&run->devices, o->devices, err, n))) return rc;
  if (o->resume && (rc = tr__checkpoint_peek(o->resume, run->model, &run->first_step, err, n)))
    return rc;
  run->end_step = o->steps > 0 ? o->steps : INT64_MAX;
  if (run->first_step >= run->end_step) {
    snprintf(err, n, "--resume %s: the checkpoint is at step %lld, --steps %lld is reached",
             o->resume, (long long)run->first_step, (long long)o->steps);
    return TR_EINVAL;
  }
  tr_data_config dc;
  tr_data_config_for(&dc, run->model, o->seed, o->data);
  return tr_data_open(&run->data, &dc, err, n);
}

static int spawn(tr__run *run, const char *name, tr_actor_kind kind, const tr_behaviour *b,
                 void *state, tr_actor **out) {
  if (state == NULL) return TR_ENOMEM;
  int rc = tr_actor_spawn(
      run->sys, &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state},
      out);
  if (rc) b->destroy(state);
  return rc;
}

int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size) {
  tr__run run = {.opt = o, .result = r};
  err[0] = 0;
  int rc = prepare(&run, o, err, err_size);
  result_init(r, o, &run);
  if (rc) goto out;

  tr_device *dev = tr_device_list_get(run.devices, 0);
  snprintf(r->devices, sizeof r->devices, "%s", tr_device_name(dev));
  r->ndevices = 1;
  tr_system_config sc = {.name = "train",
                         .handle_signals = 1,
                         .trace = o->trace != NULL,
                         .watchdog_ms = o->watchdog_ms > 0 ? o->watchdog_ms : 60000};
  if ((rc = tr_system_new(&run.sys, &sc))) {
    snprintf(err, err_size, "creating the actor system: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = spawn(&run, "loader", TR_ACTOR_LOOP, &tr__loader_behaviour, tr__loader_new(&run),
                  &run.loader)) ||
      (rc = spawn(&run, "stage0", TR_ACTOR_PINNED, &tr__stage_behaviour,
                  tr__stage_new(&run, dev), &run.stage)) ||
      (rc = spawn(&run, "coordinator", TR_ACTOR_LOOP, &tr__coordinator_behaviour,
                  tr__coordinator_new(&run), &run.coordinator))) {
    snprintf(err, err_size, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_system_run(run.sys))) {
    snprintf(err, err_size, "%s", tr_system_error(run.sys));
    goto out;
  }
  if (o->trace && (rc = tr_system_trace_write(run.sys, o->trace)))
    snprintf(err, err_size, "--trace %s: cannot write the trace", o->trace);
out:
  tr_system_free(run.sys);
  tr_data_close(run.data);
  tr_device_list_close(run.devices);
  tr_model_free(run.model);
  return rc;
}
