/* train.c — tr_train_run: options → model, devices, data → the strategy's graph → figures. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "job_config.h"
#include "job_impl.h"
#include "result_impl.h"
#include "train_agree.h"
#include "train_run.h"
#include "tr_file.h"
#include "tr_trace.h"
#include "tr_train.h"

static const char *const strategy_names[] = {"single", "dp", "mp", "pipeline", "hybrid", "async",
                                             "local", "tp"};

const char *tr_strategy_name(tr_strategy s) {
  return tr__name_of(strategy_names, TR__COUNTOF(strategy_names), (int)s);
}

int tr_strategy_parse(const char *name, tr_strategy *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(strategy_names, TR__COUNTOF(strategy_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_strategy)i, 0);
}

tr_train_options tr_train_defaults(void) {
  tr_train_options o = {.model = "simplenet", .strategy = TR_STRATEGY_SINGLE, .devices = "auto",
                        .job = tr_job_defaults(), .steps = 100};
  /* the strategy and the devices decide these */
  o.job.layout.replicas = o.job.layout.stages = o.job.layout.microbatches = 0;
  return o;
}

/* The server's device: as asked, else a host device of its own beside host workers, or a
 * logical device on the first worker's GPU. Across processes it lives on rank 0. */
static int open_server(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  char spec[32];
  const tr_device_info *first = tr_device_info_of(tr_device_list_at(rn->devices, 0));
  if (o->job.async.hogwild && first->kind != TR_DEVICE_HOST)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.hogwild") ": host devices only (the workers share the "
                     "server's "
                     "memory), not %s",
                     o->devices);
  if (first->kind == TR_DEVICE_CUDA) snprintf(spec, sizeof spec, "cuda:%d", first->ordinal);
  else snprintf(spec, sizeof spec, "host:1");
  const char *want = o->server ? o->server : spec;
  char why[256];
  int rc = tr_world_size(o->world) > 1
               ? tr_world_devices(o->world, tr_world_rank(o->world) == 0 ? want : NULL,
                                  &rn->server, why, sizeof why)
               : tr_device_list_open(&rn->server, want, why, sizeof why);
  if (rc == 0 && tr_device_list_count(rn->server) != 1) {
    snprintf(why, sizeof why, "give one device");
    rc = TR_EINVAL;
  }
  if (rc) snprintf(err, n, TR__F("server") " %s: %s", want, why);
  return rc;
}

/* Pipeline stages balanced by what each layer costs on the device, timed once and kept in
 * the file of costs (planner.h: the cut a prediction of the run makes too): FLOPs miss what is
 * not a GEMM (activations, norms, attention's softmax) and what small GEMMs lose. Where
 * measuring fails, tr_job_new balances by FLOPs instead. Across processes rank 0 measures on
 * its first device and every rank takes its cut. */
static int measured_cuts(tr__train_run *rn, tr_world *w) {
  tr_job_config *c = &rn->jc;
  const int P = c->layout.stages * tr_schedule_chunks(c->layout.schedule, c->layout.chunks);
  int cut[TR__MAX_STAGES + 2] = {0}; /* cut[0]: measured; the cuts after */
  cut[0] = tr__costs_cut(rn->model, tr_device_list_at(rn->devices, 0), c, cut + 1);
  if (tr_world_size(w) > 1) {
    int *all = malloc(sizeof cut * (size_t)tr_world_size(w));
    if (all == NULL || tr_world_allgather(w, cut, sizeof cut, all)) {
      free(all);
      return TR_ESYS;
    }
    memcpy(cut, all, sizeof cut); /* rank 0's */
    free(all);
  }
  if (cut[0]) {
    memcpy(rn->cuts, cut + 1, (size_t)(P + 1) * sizeof *rn->cuts);
    c->layout.cuts = rn->cuts + 1;
    c->layout.ncuts = P - 1;
  }
  return 0;
}

/* The device of stage s of replica r (member 0 of its tensor group): tr_job_add_stages's
 * (r × stages + s) × T. */
static tr_device *device_at(const tr__train_run *rn, int r, int s) {
  const tr_layout_config *l = &rn->jc.layout;
  return tr_device_list_at(rn->devices, (r * l->stages + s) * (l->tensor > 1 ? l->tensor : 1));
}

/* ZeRO shards the optimizer within one process: the replica group of a stage must not
 * span ranks (group.h sums across them, but does not scatter and gather). */
static int check_zero_ranks(const tr__train_run *rn, const tr_world *w, char *err, size_t n) {
  const tr_layout_config *l = &rn->jc.layout;
  if (!rn->jc.zero || rn->jc.async.enabled) return 0;
  for (int s = 0; s < l->stages; s++)
    for (int r = 1; r < l->replicas; r++) {
      const tr_device *d0 = device_at(rn, 0, s);
      const tr_device *d = device_at(rn, r, s);
      const int a = tr_world_device_rank(w, d0), b = tr_world_device_rank(w, d);
      if (a != b)
        return tr_errorf(err, n, TR_EINVAL,
                         TR__F("zero") " %d: the replicas of stage %d live in ranks %d and %d; ZeRO "
                         "shards the optimizer state among replicas of one process only (run "
                         "without zero across processes)", rn->jc.zero, s, a, b);
    }
  return 0;
}

/* A tensor group's members sum their parts many times a step, through memory: devices of
 * one process (tr_job_add_stages puts a group's members side by side). */
static int check_tensor_ranks(const tr__train_run *rn, const tr_world *w, char *err, size_t n) {
  const tr_layout_config *l = &rn->jc.layout;
  const int T = l->tensor, groups = l->replicas * l->stages;
  for (int g = 0; T > 1 && g < groups; g++)
    for (int t = 1; t < T; t++) {
      const int a = tr_world_device_rank(w, tr_device_list_at(rn->devices, g * T));
      const int b = tr_world_device_rank(w, tr_device_list_at(rn->devices, g * T + t));
      if (a != b)
        return tr_errorf(err, n, TR_EINVAL,
                         TR__F("layout.tensor") " %d: the tensor group of devices %d to %d "
                         "spans ranks %d and %d; a group's members must be devices of one "
                         "process (give each rank a multiple of %d devices)", T, g * T,
                         g * T + T - 1, a, b, T);
    }
  return 0;
}

/* How each replica group will sum (tr_allreduce_choose, as tr_job_group decides): refused
 * before anything is built when allreduce nccl is asked of groups NCCL cannot join, naming
 * the group's devices; of a layout without groups, naming the strategy. Inside a process
 * the members of a group choose; a group across ranks sums inside each with peer, and its
 * leaders (one per rank) choose. */
static int check_allreduce(const tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  const tr_layout_config *l = &rn->jc.layout;
  const bool have = tr_comm_library() != NULL;
  if (rn->jc.allreduce == TR_ALLREDUCE_AUTO || rn->jc.allreduce == TR_ALLREDUCE_PEER) return 0;
  if (rn->jc.async.enabled || l->replicas < 2)
    return tr_errorf(err, n, TR_EINVAL, TR__F("allreduce") " %s: %s has no replica group to sum "
                     "(dp and hybrid with more than one replica have)",
                     tr_allreduce_name(rn->jc.allreduce), tr_strategy_name(o->strategy));
  for (int s = 0; s < l->stages; s++) {
    tr_device_info infos[TR_TRAIN_MAX_DEVICES];
    int ranks[TR_TRAIN_MAX_DEVICES]; /* whose each member is: the world's (tr_world_device_rank) */
    const tr_device *d0 = device_at(rn, 0, s);
    int m = 0, rank0 = tr_world_device_rank(o->world, d0);
    bool one_rank = true;
    for (int r = 0; r < l->replicas; r++) {
      const tr_device *d = device_at(rn, r, s);
      one_rank &= tr_world_device_rank(o->world, d) == rank0;
    }
    for (int r = 0; r < l->replicas; r++) {
      const tr_device *d = device_at(rn, r, s);
      const int rank = tr_world_device_rank(o->world, d);
      bool leader = true; /* across ranks: the first member on its rank */
      for (int k = 0; k < m && !one_rank; k++) leader &= ranks[k] != rank;
      if (one_rank || leader) infos[m] = *tr_device_info_of(d), ranks[m++] = rank;
    }
    tr_allreduce how;
    int rc = tr_allreduce_choose(rn->jc.allreduce, infos, ranks, m, have, &how, err, n);
    if (rc) {
      tr__error_mark_lead(err, n, "allreduce");
      return rc;
    }
  }
  return 0;
}

/* This rank's devices; across processes, every rank's in rank order ("none": this rank runs
 * only what lives on rank 0 — the coordinator, the async server). */
static int open_devices(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  const bool none = o->devices && !strcmp(o->devices, "none");
  int rc;
  if (tr_world_size(o->world) > 1)
    rc = tr_world_devices(o->world, none ? NULL : o->devices, &rn->devices, err, n);
  else if (none)
    return tr_errorf(err, n, TR_EINVAL, TR__F("devices") ": none is for a rank of a job "
                     "across processes (mpirun) whose other ranks have devices");
  else
    rc = tr_device_list_open(&rn->devices, o->devices, err, n);
  if (rc) tr__error_mark_lead(err, n, "devices");
  return rc;
}

/* A signal during start-up (tr_signals_hold, run_marked): the run ends where it is, saying
 * so. Across ranks only before they agree, as one rank's bad option is; after that the
 * graph acts on it (tr_system_run), every rank ending in order together. */
static int held_signal(char *err, size_t n) {
  const int s = tr_signals_held();
  return s ? tr_errorf(err, n, TR_EINTR, "stopped by %s during start-up, before the first step",
                       tr_signal_name(s))
           : 0;
}

/* Fills the run from the options: everything that can be wrong with them is found here,
 * before any thread starts. Across processes, what each rank reads alone (model, data,
 * checkpoint) comes first; then the ranks agree and share their devices, each step made by
 * every rank, so that one rank's bad option ends them all with a message. */
/* The fields of `job` that tr_train_run sets itself: each is used where it can be (data, the
 * watchdog's), else refused by name where given otherwise than the options say, never
 * silently replaced. */
static int check_job_fields(const tr_train_options *o, char *err, size_t n) {
  const tr_job_config *j = &o->job;
  const char *s = tr_strategy_name(o->strategy);
  if (j->model)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("job.model") ": tr_train_run builds the model from model or spec; "
                     "leave job.model NULL (tr_job_new takes a model of yours)");
  if (j->data && (o->data || o->labels))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("job.data") ": give the run's data once, as job.data (a source of "
                     "yours) or as data and labels (files), not both");
  if (j->strategy && strcmp(j->strategy, s) != 0)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("job.strategy") " '%s': the run's strategy is strategy (%s); leave "
                     "job.strategy NULL",
                     j->strategy, s);
  if (j->async.enabled && o->strategy != TR_STRATEGY_ASYNC)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("job.async.enabled") ": asynchronous training is strategy async, "
                     "not %s",
                     s);
  return 0;
}

/* snapshot_every hands the parameters to the observer (rank 0's: `observed`), in reports of
 * a synchronous job's steps (tr_job_snapshot). */
static int check_snapshot(const tr_train_options *o, bool observed, char *err, size_t n) {
  if (o->snapshot_every < 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("snapshot_every") " %d: give 0 (none) or more "
                     "steps", o->snapshot_every);
  if (o->snapshot_every > 0 && !observed)
    return tr_errorf(err, n, TR_EINVAL, TR__F("snapshot_every") " %d: the parameters come in "
                     "the reports to observe, which is NULL", o->snapshot_every);
  if (o->snapshot_every > 0 && o->strategy == TR_STRATEGY_ASYNC)
    return tr_errorf(err, n, TR_EINVAL, TR__F("snapshot_every") " %d: async's parameters are "
                     "the server's, with no step the workers share; snapshots are of "
                     "synchronous strategies", o->snapshot_every);
  return 0;
}

static int prepare(tr__train_run *rn, const tr_train_options *o, char *err, size_t n) {
  int rc = check_job_fields(o, err, n);
  if (rc) return rc;
  if (o->steps < 0 || (o->steps == 0 && !(o->seconds > 0 && o->seconds < 1e15)))
    rc = tr_errorf(err, n, TR_EINVAL,
                   TR__F("steps") " or " TR__F("seconds") ": give a positive number of steps "
                   "or seconds (finite)");
  else
    rc = o->spec ? tr_model_new(&rn->model, o->spec, err, n)
                 : tr_model_named(&rn->model, o->model, err, n);
  if (rc) tr__error_mark_lead(err, n, "model");
  rn->jc = o->job;
  rn->observed = o->observe != NULL; /* across ranks: rank 0's (agree) */
  tr_job_config *c = &rn->jc;
  c->model = rn->model;
  c->strategy = tr_strategy_name(o->strategy);
  if (rc == 0 && o->steps >= TR_GRAPH_STEP_LIMIT)
    rc = tr_errorf(err, n, TR_EINVAL, TR__F("steps") " %lld: at most 2^61 - 1",
                   (long long)o->steps);
  if (rc == 0) rc = tr__train_check_outputs(rn, o, err, n);
  if (rc == 0 && c->checkpoint.resume) rc = tr__train_open_resume(rn, o, err, n);
  rn->end_step = o->steps;
  if (rc == 0 && o->steps > 0 && rn->first_step >= o->steps)
    rc = tr_errorf(err, n, TR_EINVAL,
                   TR__F("checkpoint.resume") " %s: the checkpoint is at step %lld, steps %lld is "
                   "reached",
                   c->checkpoint.resume, (long long)rn->first_step, (long long)o->steps);
  if (rc == 0 && o->job.data == NULL) /* job.data: the caller's source, theirs to close */
    rc = tr_data_open_for(&rn->data, rn->model, o->job.seed, o->data, o->labels, err, n);
  if (rc) tr__error_mark_lead(err, n, "data");
  c->data = o->job.data ? o->job.data : rn->data;
  if (rc == 0) rc = tr__train_open_eval(rn, o, err, n);
  if (rc == 0) rc = held_signal(err, n);
  if (tr_world_size(o->world) > 1) rc = tr__train_agree(rn->model, o, rc, &rn->observed, err, n);
  if (rc == 0) rc = check_snapshot(o, rn->observed, err, n);
  if (rc || (rc = open_devices(rn, o, err, n))) return rc;
  const int ndev = tr_device_list_count(rn->devices);
  if ((rc = tr__job_config_layout(&rn->jc, o, o->strategy == TR_STRATEGY_SINGLE ? 1 : ndev,
                                   err, n)))
    return rc;
  if (tr_world_size(o->world) > 1 && ((rc = check_zero_ranks(rn, o->world, err, n)) ||
                                       (rc = check_tensor_ranks(rn, o->world, err, n))))
    return rc;
  if ((rc = check_allreduce(rn, o, err, n))) return rc;
  if (c->async.enabled && (rc = open_server(rn, o, err, n))) return rc;
  /* before measuring, which allocates a micro-batch */
  if ((rc = tr__train_check_memory(rn, o->world, err, n))) return rc;
  /* last: measuring takes a moment, wasted on options found wrong after it */
  if (c->layout.stages > 1 && !c->layout.cuts && !o->deterministic &&
      (rc = measured_cuts(rn, o->world)))
    return tr_errorf(err, n, rc, TR__F("layout.cuts") ": the ranks could not share rank 0's cut");
  if (tr_world_size(o->world) == 1 && (rc = held_signal(err, n))) return rc;
  /* the job's own rules (job_config.c) on a copy, as tr_job_new will check them: here its
   * message keeps the fields it names (tr_train_run_e) */
  tr_job_config job = *c;
  return tr__job_config_complete(&job, err, n);
}

/* The caller's observer (tr_train_options.observe) as an actor of the graph: each report
 * handed to its function, the edge's credit back, its part over with the last. */
typedef struct observer {
  tr_graph *g;
  tr_edge *in;
  void (*fn)(void *arg, const tr_report_msg *report);
  void *arg;
} observer;

static int observer_receive(tr_actor *self, tr_msg *msg) {
  observer *ob = tr_actor_state(self);
  if (msg->type != &tr_report_type) return 0;
  const tr_report_msg *r = (const tr_report_msg *)msg;
  ob->fn(ob->arg, r);
  tr_edge_release(ob->in, 1);
  if (r->last) tr_graph_done(ob->g, self);
  return 0;
}

static const tr_behaviour observer_behaviour = {
    .name = "observer", .receive = observer_receive, .destroy = free};

static int observe(tr_graph *g, tr_job *j, const tr_train_options *o) {
  observer *ob = calloc(1, sizeof *ob);
  if (ob == NULL) return TR_ENOMEM;
  *ob = (observer){.g = g, .fn = o->observe, .arg = o->observe_arg};
  tr_actor *a;
  int rc = tr_graph_add_on(g, 0, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                    .behaviour = &observer_behaviour,
                                                    .state = ob},
                           &a);
  if (rc) {
    free(ob);
    return rc;
  }
  rc = tr_job_observe(j, a, o->observe_every > 0 ? o->observe_every : 1, &ob->in);
  if (rc == 0 && o->snapshot_every > 0) rc = tr_job_snapshot(j, ob->in, o->snapshot_every);
  return rc;
}

/* The strategy's graph, with the public calls of tr_job.h: its stages (chained, grouped),
 * a loader per replica, one coordinator; async: a server and its workers. */
static int build(tr_job *j, const tr__train_run *rn, tr_world *world) {
  const int R = rn->jc.layout.replicas, P = rn->jc.layout.stages;
  tr_actor *stage[TR_TRAIN_MAX_DEVICES], *loader, *coordinator, *server = NULL;
  int rc = 0;
  if (rn->jc.async.enabled) {
    rc = tr_job_add_server(j, tr_device_list_at(rn->server, 0), &server);
    for (int w = 0; w < R && rc == 0; w++) {
      tr_device *dev = tr_device_list_at(rn->devices, w);
      const tr_job_config *jc = tr_job_config_of(j);
      stage[w] = NULL; /* one that joins, in one process: added when it joins, loader and all */
      if (jc->async.join_at > 0 && w >= R - jc->async.join_workers && tr_world_size(world) == 1) {
        rc = tr_job_join_worker(j, w, dev);
        continue;
      }
      rc = tr_job_add_worker(j, w, dev, &stage[w]);
      if (rc == 0) rc = tr_job_serve(j, server, stage[w]);
    }
  } else {
    rc = tr_job_add_stages(j, rn->devices, stage);
  }
  const int T = rn->jc.layout.tensor > 1 ? rn->jc.layout.tensor : 1;
  for (int q = 0; q < R * T && rc == 0; q++) { /* a loader per replica (and tensor member) */
    if (stage[q * P] == NULL) continue;
    rc = tr_job_add_loader(j, q / T, &loader);
    if (rc == 0) rc = tr_job_feed(j, loader, stage[q * P], stage[q * P + P - 1]);
  }
  if (rc == 0) rc = tr_job_add_coordinator(j, &coordinator);
  return rc;
}

/* The default watchdog: WATCHDOG_STEPS times the slowest step seen, at least a minute. Before
 * the first step has ended, the first step is guessed from its FLOPs at a rate far below
 * any device's (10 GFLOP/s, for the whole step on one device): a run whose first step takes
 * minutes on a slow machine is not a hang. */
enum { WATCHDOG_STEPS = 10, WATCHDOG_MIN_MS = 60000 };

static int default_watchdog(const tr__train_run *rn) {
  const int batch = tr__job_global_batch(&rn->jc);
  const double guess_ms = tr_model_train_flops(rn->model) * batch / 10e9 * 1e3;
  const double ms = WATCHDOG_STEPS * guess_ms;
  return ms > 24 * 3600e3 ? 24 * 3600 * 1000 : ms > WATCHDOG_MIN_MS ? (int)ms : WATCHDOG_MIN_MS;
}

/* The result of a run that ended in order, in *r: the job's figures, local SGD's settings
 * ("sync_every", ...), how far troupe plan's prediction was, and the layout chosen for it.
 * 0, or TR_ENOMEM. */
static int settle(tr_job *j, tr_result **r, const tr__train_run *rn,
                  const tr_plan_prediction *predicted, const char *choice) {
  tr_result_free(*r);
  *r = tr__job_take_result(j);
  const tr_job_config *c = &rn->jc;
  if (c->local.sync_every > 0) {
    tr__result_set_int(*r, TR__M_SYNC_EVERY, c->local.sync_every);
    tr__result_set_int(*r, TR__M_WARMUP_SYNC, c->local.warmup_sync);
    if (tr__result_set_text(*r, TR__M_OUTER, tr_outer_name(c->local.outer))) return TR_ENOMEM;
  }
  tr__plan_result(predicted, *r);
  return tr__result_set_text(*r, TR__M_LAYOUT_CHOICE, choice);
}

/* The run, its refusals' messages with their fields marked (job_config.h); *r its figures
 * (NULL: out of memory). */
static int run_marked(const tr_train_options *o, tr_result **r, char *err, size_t err_size) {
  tr__train_run rn = {0};
  tr__ck_mark mark;
  tr_graph *g = NULL;
  tr_job *j = NULL;
  err[0] = 0;
  *r = tr__result_new(o->spec ? o->spec->name : o->model ? o->model : "?",
                      tr_strategy_name(o->strategy));
  if (*r == NULL) return tr_errorf(err, err_size, TR_ENOMEM, "the run's figures: out of memory");
  if ((unsigned)o->strategy >= (unsigned)TR__COUNTOF(strategy_names)) {
    char names[128];
    size_t k = 0;
    for (int i = 0; i < TR__COUNTOF(strategy_names); i++)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", strategy_names[i]);
    return tr_errorf(err, err_size, TR_EINVAL, TR__F("strategy") " %d: not one of %s",
                     (int)o->strategy, names);
  }
  if (o->devices == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, TR__F("devices") " is NULL: give \"auto\", "
                     "\"host:N\" or \"cuda:I[,J...]\"");
  tr_signals_hold(); /* till the graph runs: a signal ends start-up, saying so */
  tr_train_options chosen; /* layout.automatic: the plan's best layout (planner.h) */
  char choice[192] = "";
  int rc = 0;
  if (o->job.layout.automatic) {
    rc = tr__plan_choose(o, &chosen, choice, sizeof choice, err, err_size);
    if (rc) goto out;
    o = &chosen;
  }
  rc = prepare(&rn, o, err, err_size);
  if (rc) goto out;
  tr_plan_prediction predicted; /* troupe plan's, to say how far it was (planner.h) */
  tr__plan_run(o, rn.devices, &predicted);
  tr_system_config sc = {.name = "train",
                         .handle_signals = 1,
                         .trace = o->trace != NULL,
                         .watchdog_ms = o->watchdog_ms > 0 ? o->watchdog_ms : default_watchdog(&rn)};
  if (o->watchdog_ms <= 0) { /* the default follows the steps as they are measured */
    if (rn.jc.watchdog_steps <= 0) rn.jc.watchdog_steps = WATCHDOG_STEPS;
    if (rn.jc.watchdog_min_ms <= 0) rn.jc.watchdog_min_ms = WATCHDOG_MIN_MS;
  }
  if ((rc = tr_graph_new(&g, &sc))) {
    snprintf(err, err_size, "creating the actor system: %s", tr_strerror(rc));
    goto out;
  }
  if (o->trace) tr_system_trace_budget(tr_graph_system(g), (size_t)o->trace_budget_mib << 20);
  if (tr_world_size(o->world) > 1 && (rc = tr_graph_set_world(g, o->world))) {
    snprintf(err, err_size, "starting the transport between processes: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&j, g, &rn.jc, err, err_size))) goto out;
  if ((rc = build(j, &rn, o->world)) || (rn.observed && (rc = observe(g, j, o)))) {
    snprintf(err, err_size, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }
  if (o->plan) { /* checked first: a plan that fails says why, where tr_graph_run would */
    if ((rc = tr_job_plan(j, err, err_size))) goto out;
    if (tr_world_rank(o->world) == 0) tr_job_print_plan(j, o->plan);
  }
  if (tr_world_size(o->world) == 1 && (rc = held_signal(err, err_size))) goto out;
  tr__checkpoint_mark(&mark, rn.jc.checkpoint.path); /* to tell this run's checkpoint */
  rc = tr_graph_run(g, rn.first_step, rn.end_step, rn.end_step ? 0 : o->seconds);
  if (rc == TR_EINTR && tr_graph_signal(g)) { /* ended in order: figures, checkpoint */
    if (settle(j, r, &rn, &predicted, choice)) {
      rc = tr_errorf(err, err_size, TR_ENOMEM, "the run's figures: out of memory");
      goto out;
    }
    tr__result_set_int(*r, TR__M_SIGNAL, tr_graph_signal(g));
    const char *ck = rn.jc.checkpoint.path;
    snprintf(err, err_size, "stopped by %s after step %lld%s%s%s",
             tr_signal_name(tr_graph_signal(g)), (long long)tr__result_int(*r, TR__M_STEPS),
             ck && tr_world_rank(o->world) == 0 ? " (checkpoint " : "",
             ck && tr_world_rank(o->world) == 0 ? ck : "",
             ck && tr_world_rank(o->world) == 0 ? " written)" : "");
  } else if (rc) {
    snprintf(err, err_size, "%s", tr_graph_error(g));
    /* a refusal trained nothing; a checkpoint kept aside is named in the error */
    if (tr_world_rank(o->world) == 0 && rc != TR_EINVAL && !tr__job_kept_aside(j))
      tr__checkpoint_lost(rn.jc.checkpoint.path, &mark, err, err_size);
    goto out;
  } else if (settle(j, r, &rn, &predicted, choice)) {
    rc = tr_errorf(err, err_size, TR_ENOMEM, "the run's figures: out of memory");
    goto out;
  } else {
    /* a run that "succeeds" without a loss to show has not (every step skipped, or none) */
    const double final = tr__result_real(*r, TR__M_FINAL_LOSS);
    if (tr_world_rank(o->world) == 0 && !isfinite(final)) {
      rc = TR_ENONFINITE;
      snprintf(err, err_size, "the run's final loss is %g: %s", final,
               tr__result_int(*r, TR__M_SKIPPED_STEPS) ? "every update of its last steps was "
                                                         "skipped (on_nonfinite skip)"
                                                       : "no step had a finite loss");
    }
  }
  if (o->trace) { /* this rank's, as the run began (file_write.h) */
    char why[1024];
    const int wrote = tr__file_output_write(&rn.trace, "the trace", tr__system_trace_fill,
                                            tr_graph_system(g), why, sizeof why);
    if (wrote) {
      rc = wrote;
      snprintf(err, err_size, "%s", why);
    }
  }
out:
  if (rc == TR_EINTR && *r && !tr__result_int(*r, TR__M_SIGNAL)) /* start-up's */
    tr__result_set_int(*r, TR__M_SIGNAL, tr_signals_held());
  tr_signals_release(); /* when the graph did not run (it took the signals over) */
  tr_graph_free(g);
  tr_job_free(j);
  tr_data_close(rn.train); /* the parts before the data they read */
  tr_data_close(rn.held);
  tr_data_close(rn.eval);
  tr_data_close(rn.data);
  tr_device_list_close(rn.devices);
  tr_device_list_close(rn.server);
  tr_checkpoint_close(rn.resume);
  tr_model_free(rn.model);
  tr_file_unlock(rn.ck_lock);
  tr__file_output_close(&rn.trace);
  return rc;
}

int tr_train_run_result(const tr_train_options *o, tr_result **out, tr_error *e) {
  char err[sizeof e->message];
  if (out) *out = NULL;
  const int rc = o && out ? run_marked(o, out, err, sizeof err)
                          : tr_errorf(err, sizeof err, TR_EINVAL, "tr_train_run_result: %s is NULL",
                                      o ? "out" : "o");
  if (e) tr__error_from_text(e, rc, rc ? err : ""); /* e NULL: the status alone */
  return rc;
}

/* The deprecated calls: the run, its figures viewed as the struct. */
static int run_viewed(const tr_train_options *o, tr_train_result *v, char *err, size_t err_size) {
  tr_result *r = NULL;
  const int rc = run_marked(o, &r, err, err_size);
  if (r) tr__result_view(r, v);
  else memset(v, 0, sizeof *v);
  tr_result_free(r);
  return rc;
}

int tr_train_run(const tr_train_options *o, tr_train_result *r, char *err, size_t err_size) {
  if (o == NULL || r == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_train_run: %s is NULL", o ? "r" : "o");
  char scratch[sizeof ((tr_error *)0)->message]; /* err NULL or of no size: nothing written */
  if (err == NULL || err_size == 0) err = scratch, err_size = sizeof scratch;
  const int rc = run_viewed(o, r, err, err_size);
  tr__error_unmark(err);
  return rc;
}

int tr_train_run_e(const tr_train_options *o, tr_train_result *r, tr_error *e) {
  char err[sizeof e->message];
  const int rc = o && r ? run_viewed(o, r, err, sizeof err)
                        : tr_errorf(err, sizeof err, TR_EINVAL, "tr_train_run_e: %s is NULL",
                                    o ? "r" : "o");
  if (e) tr__error_from_text(e, rc, rc ? err : ""); /* e NULL: the status alone */
  return rc;
}
