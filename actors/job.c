/* job.c — a training job: its configuration checked and completed, its actors added, their
 * edges wired. Errors name the field of tr_job_config at fault. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "collective.h"
#include "evaluate.h"
#include "graph_impl.h"
#include "tr_file.h"
#include "group.h"
#include "job_config.h"
#include "job_wire.h"
#include "result_impl.h"
#include "join.h"
#include "tensor_group.h"
#include "worker.h"

/* tr_protocol.h's messages are protocol.c's; losses: losses.c; parts: checkpoint_io.c; the
 * end-of-run figures: reporter.c and server.c; held-out sums: evaluate.c (each defined with
 * its wire codec). */

/* A wiring call refused: `status`, and tr_job_error says which argument broke which rule
 * (tr__job_refuse: the same for the job's other parts, job_wire.h). */
static int vrefuse(tr_job *j, int status, const char *fmt, va_list ap) {
  vsnprintf(j->error, sizeof j->error, fmt, ap);
  return status;
}
static int refuse(tr_job *j, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(tr_job *j, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrefuse(j, status, fmt, ap);
  va_end(ap);
  return status;
}
int tr__job_refuse(tr_job *j, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrefuse(j, status, fmt, ap);
  va_end(ap);
  return status;
}

/* An edge the graph would not make (tr_graph_connect: TR_EINVAL for an actor not its own,
 * else memory): the call, and what it was given. */
static int failed(tr_job *j, int rc, const char *call, const char *actors) {
  if (rc == TR_EINVAL)
    return refuse(j, rc, "%s: %s not an actor of the job's graph (tr_graph_add)", call, actors);
  return refuse(j, rc, "%s: connecting its edge: %s", call, tr_strerror(rc));
}

const char *tr_job_error(const tr_job *j) { return j ? j->error : ""; }

/* The checkpoint to resume from, read once and checked against the job. */
static int open_resume(tr_job *j, tr_job_config *c, char *err, size_t n) {
  tr_checkpoint_config *k = &c->checkpoint;
  if (!k->resume && !k->resume_from) return 0;
  const char *path = k->resume ? k->resume : "checkpoint.resume_from";
  if (!k->resume_from) {
    int rc = tr_checkpoint_open(&j->resume, k->resume, err, n);
    if (rc) return rc;
    k->resume_from = j->resume;
  }
  int64_t step;
  return tr__checkpoint_check((tr_checkpoint *)k->resume_from, path, c->model, c->optim.kind,
                              &step, err, n);
}

/* The graph runs: the plan is checked as a whole and the stages get their ports. */
static int wire_plan(void *arg, char *err, size_t n) {
  tr_job *j = arg;
  return tr__plan_wire(&j->plan, err, n);
}

int tr_job_new(tr_job **out, tr_graph *g, const tr_job_config *config, char *err, size_t n) {
  if (out == NULL || g == NULL || config == NULL)
    return tr_errorf(err, n, TR_EINVAL, "tr_job_new: %s is NULL",
                     !out ? "out" : !g ? "g" : "config");
  *out = NULL;
  if (atomic_load(&g->ran))
    return tr_errorf(err, n, TR_ESTATE, "tr_job_new: the graph ran already: a job is wired on a "
                     "graph before its run (make another with tr_graph_new)");
  char scratch[sizeof ((tr_error *)0)->message]; /* refusals are worded whether err is or not */
  if (err == NULL || n == 0) err = scratch, n = sizeof scratch;
  tr_job_config c = *config;
  int rc = tr__job_config_complete(&c, err, n);
  tr__error_unmark(err);
  if (rc) return rc;
  /* found now, not after the run it was to save; rank 0 writes the checkpoints */
  tr_file_lock *lock = NULL;
  if (c.checkpoint.path && tr_graph_rank(g) == 0 &&
      ((rc = tr_file_probe_output(c.checkpoint.path, "checkpoint.path", err, n)) ||
       (rc = tr_file_lock_output(c.checkpoint.path, "checkpoint.path", &lock, err, n))))
    return rc;
  const int R = c.layout.replicas, P = c.layout.stages, M = c.layout.microbatches;
  tr_job *j = calloc(1, sizeof *j);
  if (j == NULL) {
    tr_file_unlock(lock);
    return TR_ENOMEM;
  }
  j->ck_lock = lock;
  if ((rc = open_resume(j, &c, err, n))) {
    tr_job_free(j);
    return rc;
  }
  tr__run *run = &j->run;
  run->g = g;
  if (c.async.elastic) tr__graph_on_lost(g, tr__job_lost_rank, j); /* async or local SGD */
  run->mb_batch = c.global_batch / (c.async.enabled ? 1 : R * M);
  /* An asynchronous worker's loader keeps one batch ready: a step a loader has taken is its
   * worker's, so a deep ring would hand a fast loader steps a slow worker could have had. */
  j->prefetch = c.layout.prefetch > 0 ? c.layout.prefetch
                : c.async.enabled     ? 2
                                      : tr__job_default_prefetch(&c, run->mb_batch);
  c.layout.prefetch = j->prefetch;
  const int T = c.layout.tensor > 1 ? c.layout.tensor : 1;
  snprintf(run->strategy, sizeof run->strategy, "%s",
           c.strategy        ? c.strategy
           : c.async.enabled ? "async"
           : T > 1 && R == 1 && P == 1 ? "tp"
           : R > 1 && P > 1  ? "hybrid"
           : R > 1           ? "dp"
           : P > 1           ? (M > 1 ? "pipeline" : "mp")
                             : "single");
  const int layers = tr_model_layer_count(c.model), pieces = P * c.layout.chunks;
  run->cuts[0] = 0;
  run->cuts[pieces] = layers;
  if (c.layout.cuts) {
    for (int k = 1; k < pieces; k++) run->cuts[k] = c.layout.cuts[k - 1];
  } else if ((rc = tr_model_balance(c.model, pieces, run->cuts))) {
    snprintf(err, n, "layout.stages: cutting model '%s' into %d pieces: %s",
             tr_model_name(c.model), pieces, tr_strerror(rc));
  }
  c.layout.cuts = run->cuts + 1;
  c.layout.ncuts = pieces - 1;
  c.strategy = run->strategy;
  run->c = c;
  if (rc == 0 &&
      (rc = tr_schedule_new(&j->sc, &(tr_schedule_config){.kind = c.layout.schedule,
                                                          .stages = P, .microbatches = M,
                                                          .chunks = c.layout.chunks})))
    snprintf(err, n, "layout.schedule: %s", tr_strerror(rc));
  run->sc = j->sc;
  tr__profile_attach(g, &c.profile);
  j->stages = calloc((size_t)(R * T * P), sizeof *j->stages);
  j->loaders = calloc((size_t)(R * T), sizeof *j->loaders);
  if (rc == 0 && (!j->stages || !j->loaders)) rc = TR_ENOMEM;
  if (rc == 0 && (rc = tr__tensor_models_open(&c, &j->member_models, err, n)) == 0)
    run->member_models = (const tr_model *const *)j->member_models;
  if (rc == 0) rc = tr__plan_open(&j->plan, run, R * T * P);
  if (rc == 0 && (j->result = tr__result_new(tr_model_name(c.model), run->strategy)) == NULL)
    rc = TR_ENOMEM;
  if (rc) {
    tr_job_free(j);
    return rc;
  }
  tr__graph_before_run(g, wire_plan, j);
  *out = j;
  return 0;
}

void tr_job_free(tr_job *j) {
  if (j == NULL) return;
  tr__join_free(j->join); /* after the graph, whose joiners' behaviours it holds */
  tr__plan_free(&j->plan);
  tr_checkpoint_close(j->resume);
  tr_schedule_free(j->sc);
  tr__tensor_models_close(j->member_models, tr__members(&j->run));
  tr_file_unlock(j->ck_lock);
  tr_result_free(j->result);
  free(j->stages);
  free(j->loaders);
  free(j);
}

const tr_job_config *tr_job_config_of(const tr_job *j) { return j ? &j->run.c : NULL; }
int tr_job_microbatch_samples(const tr_job *j) { return j ? j->run.mb_batch : 0; }

/* ---- actors -------------------------------------------------------------------------------- */

/* Adds an actor on rank `rank` (tr_graph_add_on: elsewhere its state is kept, never run),
 * one of the library's. */
static int add(tr_job *j, int rank, const char *name, tr_actor_kind kind, const tr_behaviour *b,
               void *state, tr_actor **out) {
  if (state == NULL) return TR_ENOMEM;
  int rc = tr__graph_add_part(
      j->run.g, rank,
      &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state}, out);
  if (rc) b->destroy(state);
  return rc;
}

/* Actors live where their device is: the world says whose (tr_world_devices). */
static int rank_of(const tr_job *j, const tr_device *dev) {
  return tr_world_device_rank(tr__graph_world(j->run.g), dev);
}

static int stage_index_of(const tr_job *j, const tr_actor *a) {
  const int n = tr__stage_count(&j->run);
  for (int i = 0; a && i < n; i++)
    if (j->stages[i] == a) return i;
  return -1;
}

static int loader_index_of(const tr_job *j, const tr_actor *a) {
  for (int r = 0; a && r < j->run.c.layout.replicas * tr__members(&j->run); r++)
    if (j->loaders[r] == a) return r;
  return -1;
}

static int connect(tr_job *j, tr_actor *from, tr_actor *to, const tr_msgtype *type,
                   const char *name, int credits, tr_edge **out) {
  return tr_graph_connect(j->run.g, &(tr_edge_config){.from = from, .to = to, .type = type,
                                                      .name = name, .credits = credits},
                          out);
}

/* A stage or the server → the coordinator, once both exist. */
static int connect_report(tr_job *j, tr_actor *from, int source) {
  if (j->coordinator == NULL || from == NULL) return 0;
  tr_edge *e;
  /* untyped: what a stage or the server reports, each type with its codec */
  static const tr_msgtype *const reports[] = {&tr__loss_type, &tr__part_type, &tr__done_type,
                                              &tr__server_done_type, &tr__eval_type, NULL};
  int rc = tr_graph_connect(j->run.g,
                            &(tr_edge_config){.from = from, .to = j->coordinator, .name = "report",
                                              .credits = TR__REPORT_CREDITS, .carries = reports},
                            &e);
  if (rc == 0) rc = tr__coordinator_add_source(tr_actor_state(j->coordinator), source, e);
  if (rc) return rc;
  if (from == j->server) tr__server_set_report(tr_actor_state(from), e);
  else j->plan.st[source].ports.report = e;
  return 0;
}

/* The helpers above, for the job's other parts (job_wire.h). */
int tr__job_failed(tr_job *j, int rc, const char *call, const char *actors) {
  return failed(j, rc, call, actors);
}
int tr__job_add(tr_job *j, int rank, const char *name, tr_actor_kind kind, const tr_behaviour *b,
                void *state, tr_actor **out) {
  return add(j, rank, name, kind, b, state, out);
}
int tr__job_rank_of(const tr_job *j, const tr_device *dev) { return rank_of(j, dev); }
int tr__job_stage_index(const tr_job *j, const tr_actor *a) { return stage_index_of(j, a); }
int tr__job_connect(tr_job *j, tr_actor *from, tr_actor *to, const tr_msgtype *type,
                    const char *name, int credits, tr_edge **out) {
  return connect(j, from, to, type, name, credits, out);
}
int tr__job_connect_report(tr_job *j, tr_actor *from, int source) {
  return connect_report(j, from, source);
}

int tr_job_add_loader(tr_job *j, int replica, tr_actor **out) {
  JOB_GIVEN(j);
  OUT_GIVEN(out);
  const int T = tr__members(&j->run);
  if (replica < 0 || replica >= j->run.c.layout.replicas)
    return refuse(j, TR_EINVAL, "tr_job_add_loader: replica %d: the job has replicas 0 to %d "
                  "(layout.replicas)", replica, j->run.c.layout.replicas - 1);
  int t = 0; /* under tensor parallelism, each member's in turn: the same samples each */
  while (t < T && j->loaders[replica * T + t]) t++;
  if (t == T)
    return refuse(j, TR_EINVAL, "tr_job_add_loader: replica %d has its loader%s already",
                  replica, T > 1 ? "s (one per tensor member, layout.tensor)" : "");
  char name[32];
  if (j->run.c.layout.replicas > 1) snprintf(name, sizeof name, "loader%d", replica);
  else snprintf(name, sizeof name, "loader");
  if (T > 1) snprintf(name + strlen(name), sizeof name - strlen(name), ".t%d", t);
  /* beside the replica's first stage, whose pinned memory the batches live in */
  tr_actor *first = j->stages[tr__stage_index(&j->run, replica, t, 0)];
  tr_device *dev = first ? tr__stage_device(tr_actor_state(first)) : NULL;
  if (!dev && tr_world_size(tr__graph_world(j->run.g)) > 1)
    return refuse(j, TR_ESTATE, "tr_job_add_loader: replica %d: across processes a loader "
                  "lives beside its replica's first stage: add that stage first", replica);
  void *state = tr__loader_new(&j->run, replica);
  int rc = add(j, dev ? rank_of(j, dev) : tr_graph_rank(j->run.g), name, TR_ACTOR_LOOP,
               &tr__loader_behaviour, state, out);
  if (rc) return rc;
  j->loaders[replica * T + t] = *out;
  if (dev) tr__loader_set_device(state, dev);
  return 0;
}

int tr_job_add_stage(tr_job *j, int replica, int stage, tr_device *dev, tr_actor **out) {
  JOB_GIVEN(j);
  OUT_GIVEN(out);
  if (j->plan.planned) return CLOSED("tr_job_add_stage");
  const tr_job_config *c = &j->run.c;
  if (replica < 0 || replica >= c->layout.replicas)
    return refuse(j, TR_EINVAL, "tr_job_add_stage: replica %d: the job has replicas 0 to %d "
                  "(layout.replicas)", replica, c->layout.replicas - 1);
  if (stage < 0 || stage >= c->layout.stages)
    return refuse(j, TR_EINVAL, "tr_job_add_stage: stage %d: the job has stages 0 to %d "
                  "(layout.stages)", stage, c->layout.stages - 1);
  if (dev == NULL) return refuse(j, TR_EINVAL, "tr_job_add_stage: dev is NULL: give a device");
  const int T = tr__members(&j->run);
  int t = 0; /* under tensor parallelism, each member of the group in turn */
  while (t < T && j->stages[tr__stage_index(&j->run, replica, t, stage)]) t++;
  if (t == T)
    return refuse(j, TR_EINVAL, "tr_job_add_stage: stage %d of replica %d was added already%s",
                  stage, replica, T > 1 ? " (each of its layout.tensor members)" : "");
  const int i = tr__stage_index(&j->run, replica, t, stage);
  const tr_actor *m0 = t ? j->stages[tr__stage_index(&j->run, replica, 0, stage)] : NULL;
  if (m0 && tr_graph_actor_rank(j->run.g, m0) != rank_of(j, dev))
    return refuse(j, TR_EINVAL, "tr_job_add_stage: stage %d of replica %d: tensor member %d's "
                  "device is rank %d's, member 0's rank %d's: a tensor group's members must be "
                  "devices of one process (layout.tensor)", stage, replica, t, rank_of(j, dev),
                  tr_graph_actor_rank(j->run.g, m0));
  char name[32];
  if (c->async.enabled) snprintf(name, sizeof name, "worker%d", replica);
  else if (c->layout.replicas > 1 && c->layout.stages > 1) snprintf(name, sizeof name, "r%d.stage%d", replica, stage);
  else if (c->layout.replicas > 1) snprintf(name, sizeof name, "replica%d", replica);
  else snprintf(name, sizeof name, "stage%d", stage);
  if (T > 1) /* member t of the tensor group */
    snprintf(name + strlen(name), sizeof name - strlen(name), ".t%d", t);
  /* an elastic job's worker (or local SGD replica) leaves when it fails (elastic.c) */
  const tr_behaviour *b = c->async.elastic ? &tr__elastic_behaviour : &tr__stage_behaviour;
  int rc = add(j, rank_of(j, dev), name, TR_ACTOR_PINNED, b,
               tr__stage_new(&j->run, replica, stage, dev), out);
  if (rc) return rc;
  j->stages[i] = j->plan.st[i].actor = *out;
  j->plan.st[i].ports.tensor.member = t;
  if (stage == 0 && j->loaders[replica * T + t])
    tr__loader_set_device(tr_actor_state(j->loaders[replica * T + t]), dev);
  return connect_report(j, *out, i);
}

int tr_job_add_stages(tr_job *j, const tr_device_list *devs, tr_actor **out) {
  JOB_GIVEN(j);
  const int R = j->run.c.layout.replicas, P = j->run.c.layout.stages, T = tr__members(&j->run);
  if (devs == NULL || tr_device_list_count(devs) < R * P * T)
    return refuse(j, TR_EINVAL, "tr_job_add_stages: devs holds %d devices; the layout needs "
                  "%d, one per stage (layout.replicas %d x layout.stages %d%s)",
                  devs ? tr_device_list_count(devs) : 0, R * P * T, R, P,
                  T > 1 ? " x layout.tensor members" : "");
  tr_actor **st = j->stages;
  int rc = 0;
  j->run.devices_given = tr_device_list_count(devs); /* the figures say what went unused */
  /* device (r × P + s) × T + t: a tensor group's members side by side */
  for (int k = 0; k < R * P * T && rc == 0; k++) {
    const int r = k / (P * T), s = k / T % P;
    rc = tr_job_add_stage(j, r, s, tr_device_list_at(devs, k), &(tr_actor *){NULL});
  }
  for (int i = 0; i < R * T * P && rc == 0; i++) /* each member's chain */
    if (i % P < P - 1) rc = tr_job_chain(j, st[i], st[i + 1]);
    else if (j->run.c.layout.chunks > 1) rc = tr_job_chain(j, st[i], st[i - P + 1]);
  for (int k = 0; k < P * T && rc == 0; k++) { /* stage s, member t of every replica */
    tr_actor *group[TR_TRAIN_MAX_DEVICES];
    for (int r = 0; r < R; r++) group[r] = st[tr__stage_index(&j->run, r, k / P, k % P)];
    rc = tr_job_group(j, group, R);
  }
  if (rc == 0 && out) memcpy(out, st, (size_t)(R * T * P) * sizeof *out);
  return rc;
}

/* A quiet graph's work is done when the coordinator's is (graph_quiet.c): the run then ends
 * cleanly, its figures and checkpoints kept, though an actor of the user's is stuck. */
static bool coordinator_complete(void *arg, char *what, size_t n) {
  const tr_job *j = arg;
  return tr__coordinator_complete(tr_actor_state(j->coordinator), what, n);
}

int tr_job_add_coordinator(tr_job *j, tr_actor **out) {
  JOB_GIVEN(j);
  OUT_GIVEN(out);
  if (j->coordinator)
    return refuse(j, TR_EINVAL, "tr_job_add_coordinator: the job has its coordinator already");
  int rc = add(j, 0, "coordinator", TR_ACTOR_LOOP, &tr__coordinator_behaviour,
               tr__coordinator_new(&j->run, j->result), &j->coordinator);
  const int n = tr__stage_count(&j->run);
  for (int i = 0; i < n && rc == 0; i++) rc = connect_report(j, j->stages[i], i);
  if (rc == 0) rc = connect_report(j, j->server, n);
  if (rc == 0 && tr_graph_actor_rank(j->run.g, j->coordinator) == tr_graph_rank(j->run.g))
    tr__graph_on_complete(j->run.g, coordinator_complete, j);
  *out = j->coordinator;
  return rc;
}

/* ---- edges --------------------------------------------------------------------------------- */

int tr_job_connect_batches(tr_job *j, tr_actor *from, tr_actor *to, unsigned what,
                           tr_edge **out) {
  JOB_GIVEN(j);
  if (j->plan.planned) return CLOSED("tr_job_connect_batches");
  const unsigned carries = what & (TR_BATCH_INPUTS | TR_BATCH_TARGETS);
  if (carries == 0)
    return refuse(j, TR_EINVAL, "tr_job_connect_batches: what 0x%x carries nothing: give "
                  "TR_BATCH_INPUTS, TR_BATCH_TARGETS or both", what);
  if (from == NULL || to == NULL)
    return refuse(j, TR_EINVAL, "tr_job_connect_batches: %s is NULL: give an actor of the graph",
                  from == NULL ? "from" : "to");
  const int depth = j->prefetch, notify = (what & TR_BATCH_NOTIFY) != 0;
  tr_edge *e;
  int rc = tr_graph_connect(
      j->run.g,
      &(tr_edge_config){.from = from, .to = to, .type = &tr_batch_type,
                        .name = carries == TR_BATCH_TARGETS ? "targets" : "inputs",
                        .credits = depth, .wake_at = notify || depth < 2 ? 1 : depth / 2,
                        .notify = notify},
      &e);
  if (rc) return failed(j, rc, "tr_job_connect_batches", "from or to is");
  const int loader = loader_index_of(j, from), stage = stage_index_of(j, to);
  const bool generate = loader >= 0 && stage >= 0 &&
                        tr__job_generates_on(&j->run.c, tr__stage_device(tr_actor_state(to)));
  if (loader >= 0) ++*(generate ? &j->run.batches_made : &j->run.batches_loaded);
  if (loader >= 0 && (rc = tr__loader_add_edge(tr_actor_state(from), e, carries, generate)))
    return rc;
  if (stage >= 0) {
    tr__stage_ports *p = &j->plan.st[stage].ports;
    if (p->nin == 2)
      return refuse(j, TR_EINVAL, "tr_job_connect_batches: to (stage %d) has its two batch "
                    "edges already (inputs and targets)", stage);
    p->in[p->nin++] = (tr__stage_input){.edge = e, .what = carries};
  }
  if (out) *out = e;
  return 0;
}

int tr_job_feed(tr_job *j, tr_actor *loader, tr_actor *first, tr_actor *last) {
  JOB_GIVEN(j);
  if (first == last)
    return tr_job_connect_batches(j, loader, first, TR_BATCH_INPUTS | TR_BATCH_TARGETS, NULL);
  int rc = tr_job_connect_batches(j, loader, first, TR_BATCH_INPUTS, NULL);
  return rc ? rc : tr_job_connect_batches(j, loader, last, TR_BATCH_TARGETS, NULL);
}

int tr_job_chain(tr_job *j, tr_actor *from, tr_actor *to) {
  JOB_GIVEN(j);
  if (j->plan.planned) return CLOSED("tr_job_chain");
  const int i = stage_index_of(j, from), P = j->run.c.layout.stages;
  const bool wrap = j->run.c.layout.chunks > 1 && i % P == P - 1; /* chunk c → c + 1 */
  if (i < 0 || stage_index_of(j, to) < 0)
    return refuse(j, TR_EINVAL, "tr_job_chain: %s is not a stage of the job",
                  i < 0 ? "from" : "to");
  if (stage_index_of(j, to) != (wrap ? i - P + 1 : i + 1) || (!wrap && i % P == P - 1))
    return refuse(j, TR_EINVAL, "tr_job_chain: to is not the stage after from in its replica");
  const int s = i % P;
  tr_edge *act, *grad;
  /* Stage s holds at most its slot count of micro-batches (of all its chunks), and each
   * one's activation is read by the next before s can release the slot; the input gradient
   * alternates two buffers. */
  int rc = connect(j, from, to, &tr_activation_type, "act", tr_schedule_slots(j->sc, s), &act);
  if (rc == 0) rc = connect(j, to, from, &tr_gradient_type, "grad", TR__GRAD_CREDITS, &grad);
  if (rc) return rc;
  tr__stage_ports *pf = &j->plan.st[i].ports, *pt = &j->plan.st[stage_index_of(j, to)].ports;
  pf->act_out.edge = act; /* to the next stage */
  pf->grad_in.edge = grad;
  pt->grad_out.edge = grad; /* to the previous stage */
  pt->act_in.edge = act;
  /* what carries them between processes, and the norm exchange once the chain is whole:
   * the plan's pass, when the graph runs */
  return tr__plan_add_link(&j->plan, &(tr__plan_link){.from = i, .to = stage_index_of(j, to),
                                                      .act = act, .grad = grad});
}

/* The bucket edges between every two of members[0, n) (all on one rank), each told its
 * own where it lives here. */
static int mesh(tr_job *j, tr_actor *const *members, int n, int credits) {
  tr_device *devs[TR_TRAIN_MAX_DEVICES];
  tr_edge *(*e)[TR_TRAIN_MAX_DEVICES] = calloc((size_t)n, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  for (int i = 0; i < n; i++) devs[i] = tr__stage_device(tr_actor_state(members[i]));
  int rc = 0;
  for (int a = 0; a < n && rc == 0; a++)
    for (int b = 0; b < n && rc == 0; b++)
      if (a != b) rc = connect(j, members[a], members[b], &tr__bucket_type, "bucket", credits, &e[a][b]);
  const bool here = tr_graph_actor_rank(j->run.g, members[0]) == tr_graph_rank(j->run.g);
  for (int a = 0; a < n && rc == 0 && here; a++) {
    tr_edge *out[TR_TRAIN_MAX_DEVICES], *in[TR_TRAIN_MAX_DEVICES];
    for (int b = 0; b < n; b++) out[b] = e[a][b], in[b] = e[b][a];
    tr__group **g = &j->plan.st[stage_index_of(j, members[a])].parts.group;
    tr__group_free(*g);
    if (!(*g = tr__group_new(n, a, out, in, devs, j->run.c.zero != 0))) rc = TR_ENOMEM;
  }
  free(e);
  return rc;
}

/* A group over several ranks: a mesh on each, and each rank's leader (its member of lowest
 * index) sums with the other ranks' through its transport — sums that go on without a rank
 * that dies where the job's replicas may leave (elastic local SGD). Every rank makes the
 * same edges in the same order. */
static int span_ranks(tr_job *j, tr_actor *const *members, int n, int credits) {
  tr_graph *g = j->run.g;
  const int me = tr_graph_rank(g), size = tr_world_size(tr__graph_world(g)), k = j->ncross++;
  int ranks[TR_TRAIN_MAX_DEVICES], nranks = 0;
  for (int rank = 0; rank < size; rank++)
    for (int i = 0; i < n; i++)
      if (tr_graph_actor_rank(g, members[i]) == rank) {
        ranks[nranks++] = rank;
        break;
      }
  int rc = tr__graph_sum_group(g, k, ranks, nranks, j->run.c.async.elastic);
  for (int rank = 0; rank < size && rc == 0; rank++) {
    tr_actor *here[TR_TRAIN_MAX_DEVICES];
    int m = 0;
    for (int i = 0; i < n; i++)
      if (tr_graph_actor_rank(g, members[i]) == rank) here[m++] = members[i];
    if (m == 0) continue;
    tr_actor *transport = tr__graph_transport_on(g, rank);
    tr_edge *sum, *summed;
    rc = mesh(j, here, m, credits); /* inside a process: peer (group.h) */
    if (rc == 0) rc = connect(j, here[0], transport, &tr__sum_type, "sum", credits, &sum);
    if (rc == 0) rc = connect(j, transport, here[0], &tr__summed_type, "summed", credits, &summed);
    if (rc == 0 && rank == me)
      rc = tr__graph_sum_edges(g, k, sum, summed);
    for (int i = 0; i < m && rc == 0 && rank == me; i++)
      tr__group_span_ranks(j->plan.st[stage_index_of(j, here[i])].parts.group, k, nranks, n,
                           i ? NULL : sum, i ? NULL : summed);
  }
  return rc;
}

int tr_job_group(tr_job *j, tr_actor *const *members, int n) {
  JOB_GIVEN(j);
  if (j->plan.planned) return CLOSED("tr_job_group");
  if (members == NULL) return refuse(j, TR_EINVAL, "tr_job_group: members is NULL");
  if (n < 1 || n > TR_TRAIN_MAX_DEVICES)
    return refuse(j, TR_EINVAL, "tr_job_group: n %d: give 1 to %d members", n,
                  TR_TRAIN_MAX_DEVICES);
  const int P = j->run.c.layout.stages, T = tr__members(&j->run);
  const int s = stage_index_of(j, members[0]) % P, t = stage_index_of(j, members[0]) / P % T;
  bool one_rank = true;
  for (int i = 0; i < n; i++) {
    const int k = stage_index_of(j, members[i]);
    if (k < 0 || k % P != s || k / P % T != t)
      return refuse(j, TR_EINVAL, "tr_job_group: members[%d] is %s", i,
                    k < 0       ? "not a stage of the job"
                    : k % P != s ? "another stage than members[0]"
                                 : "another tensor member than members[0] (a replica group "
                                   "joins member t of every replica)");
    one_rank &= tr_graph_actor_rank(j->run.g, members[i]) == tr_graph_actor_rank(j->run.g, members[0]);
  }
  const int credits =
      tr__group_credits(tr__group_buckets(j->run.c.model, j->run.cuts[s], j->run.cuts[s + 1]));
  if (!one_rank && j->run.c.zero)
    return refuse(j, TR_EINVAL, "tr_job_group: members live in more than one process: zero "
                  "shards a group within one process only");
  int rc = !one_rank ? span_ranks(j, members, n, credits)
           : n == 1  ? 0
                     : mesh(j, members, n, credits);
  /* its communicators, and (sharded, once every stage is grouped) the norm exchange: the
   * plan's pass, when the graph runs */
  tr__plan_group gr = {.n = n, .across = !one_rank};
  for (int i = 0; i < n; i++) gr.members[i] = stage_index_of(j, members[i]);
  return rc ? rc : tr__plan_add_group(&j->plan, &gr);
}

int tr_job_observe(tr_job *j, tr_actor *observer, int every, tr_edge **out) {
  JOB_GIVEN(j);
  if (j->coordinator == NULL)
    return refuse(j, TR_EINVAL, "tr_job_observe: the job has no coordinator yet: the reports "
                  "are its, call tr_job_add_coordinator first");
  if (observer == NULL) return refuse(j, TR_EINVAL, "tr_job_observe: observer is NULL");
  if (every < 1)
    return refuse(j, TR_EINVAL, "tr_job_observe: every %d: give 1 or more steps", every);
  tr_edge *e;
  int rc = connect(j, j->coordinator, observer, &tr_report_type, "report", 4, &e);
  if (rc) return failed(j, rc, "tr_job_observe", "observer is");
  if (rc == 0) rc = tr__coordinator_add_observer(tr_actor_state(j->coordinator), e, every);
  if (rc == 0 && out) *out = e;
  return rc;
}

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

int tr_job_snapshot(tr_job *j, tr_edge *report, int every) {
  JOB_GIVEN(j);
  if (j->plan.planned) return CLOSED("tr_job_snapshot");
  if (report == NULL || j->coordinator == NULL || tr_edge_from(report) != j->coordinator)
    return refuse(j, TR_EINVAL, "tr_job_snapshot: report is %s: give the edge tr_job_observe "
                  "made (its `out`), the parameters come in its reports",
                  report ? "not an observer's report edge" : "NULL");
  if (every < 1)
    return refuse(j, TR_EINVAL, "tr_job_snapshot: every %d: give 1 or more steps", every);
  if (j->run.c.async.enabled)
    return refuse(j, TR_EINVAL, "tr_job_snapshot: the job is asynchronous (async.enabled): its "
                  "parameters are the server's, with no step boundary the workers share; "
                  "snapshots are of synchronous jobs");
  const int orank = tr_graph_actor_rank(j->run.g, tr_edge_to(report));
  const int crank = tr_graph_actor_rank(j->run.g, j->coordinator);
  if (orank != crank)
    return refuse(j, TR_EINVAL, "tr_job_snapshot: the observer lives on rank %d, the coordinator "
                  "on rank %d: the parameters are handed over in the coordinator's memory, so "
                  "their observer lives on its rank (tr_graph_add_on)", orank, crank);
  int rc = tr__coordinator_snapshot(tr_actor_state(j->coordinator), report, every);
  if (rc) return refuse(j, rc, "tr_job_snapshot: out of memory");
  j->run.snapshot_every = gcd(j->run.snapshot_every, every); /* the stages send parts then */
  return 0;
}

int tr_job_plan(tr_job *j, char *err, size_t err_size) {
  if (j == NULL) return tr_errorf(err, err_size, TR_EINVAL, "tr_job_plan: j is NULL");
  return tr__plan_check(&j->plan, err, err_size);
}

void tr_job_print_plan(const tr_job *j, FILE *f) {
  if (j == NULL || f == NULL) {
    tr__misuse(TR_EINVAL, "tr_job_print_plan: %s is NULL", j ? "f" : "j");
    return;
  }
  tr__plan_print(&j->plan, f);
}

bool tr__job_kept_aside(const tr_job *j) {
  return j->coordinator && tr__coordinator_kept_aside(tr_actor_state(j->coordinator));
}

const tr_result *tr_job_result_of(const tr_job *j) {
  if (j == NULL) tr__misuse(TR_EINVAL, "tr_job_result_of: j is NULL");
  return j ? j->result : NULL;
}

tr_result *tr__job_take_result(tr_job *j) {
  tr_result *r = j->result;
  j->result = NULL;
  return r;
}

void tr_job_result(const tr_job *j, tr_train_result *r) {
  if (j == NULL || r == NULL) {
    tr__misuse(TR_EINVAL, "tr_job_result: %s is NULL", r ? "j" : "r");
    return;
  }
  tr__result_view(j->result, r);
}
