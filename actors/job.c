/* job.c — a training job: its configuration checked and completed, its actors added, their
 * edges wired. Errors name the field of tr_job_config at fault. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "tr_file.h"
#include "group.h"
#include "transport.h"
#include "worker.h"

TR_MSGTYPE_DEFINE(tr_batch_type, tr_batch_msg);
/* one struct, two types with names of their own (a name says what a message is, on the wire
 * and in traces) */
const tr_msgtype tr_activation_type = {"tr_activation_msg", (uint32_t)sizeof(tr_tensor_msg)};
const tr_msgtype tr_gradient_type = {"tr_gradient_msg", (uint32_t)sizeof(tr_tensor_msg)};
TR_MSGTYPE_DEFINE(tr_report_type, tr_report_msg);
TR_MSGTYPE_DEFINE(tr__poll_type, tr__poll_msg);
TR_MSGTYPE_DEFINE(tr__loss_type, tr__loss_msg);
TR_MSGTYPE_DEFINE(tr__part_type, tr__part_msg);
TR_MSGTYPE_DEFINE(tr__done_type, tr__done_msg);
TR_MSGTYPE_DEFINE(tr__server_done_type, tr__server_done_msg);

tr_batch_msg *tr_batch_forward(const tr_batch_msg *b) {
  tr_batch_msg *f = tr_msg_new(&tr_batch_type);
  *f = (tr_batch_msg){.hdr = f->hdr, .step = b->step, .mb = b->mb, .count = b->count,
                      .first = b->first, .x = b->x, .y = b->y, .x_bytes = b->x_bytes,
                      .y_bytes = b->y_bytes};
  return f;
}

struct tr_job {
  tr__run run;
  tr_checkpoint *resume; /* opened here (checkpoint.resume without resume_from) */
  tr_schedule *sc;
  int prefetch;
  /* the actors as added, for wiring */
  tr_actor **stages;  /* [replica × stages + stage] */
  tr_actor **loaders; /* [replica] */
  int *chained;       /* [replica]: links of its chain made */
  tr_actor *coordinator, *server;
  int ncross; /* replica groups over several ranks, numbered for the transports */
  int grouped; /* calls of tr_job_group */
};

static const char *const nonfinite_names[] = {"stop", "skip"};
static const char *const data_on_names[] = {"auto", "host", "device"};

const char *tr_data_on_name(tr_data_on w) {
  return tr__name_of(data_on_names, TR__COUNTOF(data_on_names), (int)w);
}

int tr_data_on_parse(const char *name, tr_data_on *out) {
  const int i = tr__name_index(data_on_names, TR__COUNTOF(data_on_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_data_on)i, 0);
}

const char *tr_nonfinite_policy_name(tr_nonfinite_policy p) {
  return tr__name_of(nonfinite_names, TR__COUNTOF(nonfinite_names), (int)p);
}

int tr_nonfinite_policy_parse(const char *name, tr_nonfinite_policy *out) {
  const int i = tr__name_index(nonfinite_names, TR__COUNTOF(nonfinite_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_nonfinite_policy)i, 0);
}

tr_job_config tr_job_defaults(void) {
  return (tr_job_config){.seed = 1,
                         .layout = {.replicas = 1, .stages = 1, .microbatches = 1,
                                    .schedule = TR_SCHEDULE_1F1B},
                         .optim = {.kind = TR_OPTIM_MODEL},
                         .async = {.staleness = -1}};
}

/* As many micro-batches as fit in 4 MiB, from 2 × m (a step and the next) to 256: a deep
 * ring means few wake-ups of the loader's loop where a step takes microseconds, a shallow
 * one a short overrun of a timed run where a step takes long. */
static int default_prefetch(const tr_job_config *c, int mb_batch) {
  const tr_model *m = c->model;
  const size_t bytes = (tr_model_input_bytes(m) + tr_model_target_bytes(m)) * (size_t)mb_batch;
  const size_t fit = bytes ? ((size_t)4 << 20) / bytes : 256;
  const size_t lo = 2 * (size_t)c->layout.microbatches, hi = lo > 256 ? lo : 256;
  return (int)(fit < lo ? lo : fit > hi ? hi : fit);
}

/* The model's optimizer where the configuration leaves it to the model. */
static tr_optim_config resolve_optim(tr_optim_config o, const tr_model *m) {
  const tr_optim_config model = tr_model_optim(m);
  if (o.kind == TR_OPTIM_MODEL) {
    tr_optim_config r = model;
    if (o.lr > 0) r.lr = o.lr;
    if (o.clip > 0) r.clip = o.clip;
    return r;
  }
  if (!(o.lr > 0)) o.lr = model.lr;
  return o;
}

/* Chunks: the interleaved schedule's, v >= 2 per device of a pipeline of one replica; one
 * for the others. */
static int check_chunks(const tr_job_config *c, int layers, char *err, size_t n) {
  const tr_layout_config *l = &c->layout;
  const int P = l->stages, V = l->chunks;
  if (l->schedule != TR_SCHEDULE_INTERLEAVED)
    return V == 1 ? 0
                  : tr_errorf(err, n, TR_EINVAL, "layout.chunks %d: only the interleaved "
                              "schedule puts several chunks on a device (layout.schedule is %s)",
                              V, tr_schedule_kind_name(l->schedule));
  if (V < 2)
    return tr_errorf(err, n, TR_EINVAL, "layout.chunks %d: the interleaved schedule puts 2 or "
                     "more chunks on each device", V);
  if (P < 2)
    return tr_errorf(err, n, TR_EINVAL, "layout.schedule: interleaved needs 2 or more stages "
                     "(on one device it is 1f1b)");
  if (l->replicas > 1)
    return tr_errorf(err, n, TR_EINVAL, "layout.schedule: interleaved runs one replica (%d "
                     "given): a replica group reduces one chunk per device", l->replicas);
  if ((long)P * V > TR__MAX_STAGES || P * V > layers)
    return tr_errorf(err, n, TR_EINVAL, "layout.chunks: %d stages × %d chunks are %d pieces, "
                     "but model '%s' has %d layers to cut (and at most %d pieces)", P, V, P * V,
                     tr_model_name(c->model), layers, TR__MAX_STAGES);
  return 0;
}

static int check_layout(const tr_job_config *c, int layers, char *err, size_t n) {
  const tr_layout_config *l = &c->layout;
  const int R = l->replicas, P = l->stages, M = l->microbatches;
  if (R < 1 || P < 1 || M < 1 || R * P > TR_TRAIN_MAX_DEVICES || P > TR__MAX_STAGES)
    return tr_errorf(err, n, TR_EINVAL,
                     "layout: %d replicas × %d stages × %d micro-batches is not a layout "
                     "(at most %d devices)",
                     R, P, M, TR_TRAIN_MAX_DEVICES);
  if (P > layers)
    return tr_errorf(err, n, TR_EINVAL,
                     "layout.stages: %d stages, but model '%s' has %d layers to cut", P,
                     tr_model_name(c->model), layers);
  if ((unsigned)l->schedule >= TR_SCHEDULE_COUNT)
    return tr_errorf(err, n, TR_EINVAL, "layout.schedule: %d is not a schedule", (int)l->schedule);
  int rc = check_chunks(c, layers, err, n);
  if (rc) return rc;
  const int pieces = P * l->chunks;
  if (l->prefetch < 0)
    return tr_errorf(err, n, TR_EINVAL, "layout.prefetch %d: give 0 or more", l->prefetch);
  if (c->async.enabled && (P != 1 || M != 1))
    return tr_errorf(err, n, TR_EINVAL,
                     "async: a worker trains the whole model on whole batches (layout has "
                     "%d stages and %d micro-batches)",
                     P, M);
  const int parts = c->async.enabled ? 1 : R * M; /* an asynchronous worker takes whole batches */
  if (c->global_batch < parts || c->global_batch % parts)
    return tr_errorf(err, n, TR_EINVAL,
                     "global_batch %d: not divisible by replicas × micro-batches (%d × %d)",
                     c->global_batch, R, M);
  if (l->cuts && l->ncuts != pieces - 1)
    return l->chunks > 1
               ? tr_errorf(err, n, TR_EINVAL, "layout.cuts: %d boundaries given, %d stages × "
                           "%d chunks need %d", l->ncuts, P, l->chunks, pieces - 1)
               : tr_errorf(err, n, TR_EINVAL, "layout.cuts: %d boundaries given, %d stages "
                           "need %d", l->ncuts, P, P - 1);
  for (int s = 0; l->cuts && s < l->ncuts; s++)
    if (l->cuts[s] < 1 || l->cuts[s] >= layers || (s && l->cuts[s] <= l->cuts[s - 1]))
      return tr_errorf(err, n, TR_EINVAL,
                       "layout.cuts: %d pieces need %d increasing layer boundaries inside "
                       "1..%d",
                       pieces, pieces - 1, layers - 1);
  return 0;
}

static int check_async(const tr_async_config *a, char *err, size_t n) {
  if (!a->enabled) return 0;
  if (a->staleness < -1)
    return tr_errorf(err, n, TR_EINVAL, "async.staleness %d: give a number of pushes >= 0, or -1",
                     a->staleness);
  if (a->pull_every < 0)
    return tr_errorf(err, n, TR_EINVAL, "async.pull_every %d: give 1 or more", a->pull_every);
  if (!(a->dc_lambda >= 0))
    return tr_errorf(err, n, TR_EINVAL, "async.dc_lambda %g: give a number >= 0",
                     (double)a->dc_lambda);
  if (a->hogwild && (a->staleness >= 0 || a->dc_lambda > 0 || a->pull_every > 1 || a->staleness_lr))
    return tr_errorf(err, n, TR_EINVAL,
                     "async.hogwild: the workers update the shared parameters themselves, so "
                     "async.staleness, async.dc_lambda, async.pull_every and async.staleness_lr do "
                     "not apply");
  return 0;
}

static int check_zero(const tr_job_config *c, char *err, size_t n) {
  if (c->zero == 0) return 0;
  if (c->zero != 1)
    return tr_errorf(err, n, TR_EINVAL, "zero %d: give 0 (off) or 1 (ZeRO stage 1: optimizer "
                     "state sharded across the replicas)", c->zero);
  if (c->async.enabled)
    return tr_errorf(err, n, TR_EINVAL, "zero %d: asynchronous training keeps the optimizer "
                     "state on the parameter server; ZeRO shards it across the replicas of dp "
                     "and hybrid", c->zero);
  if (c->layout.replicas < 2)
    return tr_errorf(err, n, TR_EINVAL, "zero %d: ZeRO shards the optimizer state across "
                     "data-parallel replicas (dp, hybrid); this job has %d replica",
                     c->zero, c->layout.replicas);
  return 0;
}

/* Checks the configuration and fills in what it leaves to the model. */
static int complete(tr_job_config *c, char *err, size_t n) {
  if (c->model == NULL) return tr_errorf(err, n, TR_EINVAL, "model: none given");
  if (c->data == NULL) return tr_errorf(err, n, TR_EINVAL, "data: none given");
  if (c->global_batch == 0) c->global_batch = tr_model_batch(c->model);
  c->layout.chunks = tr_schedule_chunks(c->layout.schedule, c->layout.chunks);
  c->optim = resolve_optim(c->optim, c->model);
  int rc;
  if ((rc = tr_data_check(c->data, c->model, err, n)) || (rc = check_layout(c, tr_model_layer_count(c->model), err, n)) ||
      (rc = check_async(&c->async, err, n)))
    return rc;
  if ((unsigned)c->data_on > TR_DATA_ON_DEVICE)
    return tr_errorf(err, n, TR_EINVAL, "data_on %d: not auto, host or device", (int)c->data_on);
  if (c->data_on == TR_DATA_ON_DEVICE && !tr_data_can_generate(c->data))
    return tr_errorf(err, n, TR_EINVAL, "data_on device: data '%s' cannot be generated on a "
                     "device (the synthetic sources and the arithmetic corpus can; files are "
                     "read by the loader: give host or auto)", tr_data_name(c->data));
  if ((unsigned)c->on_nonfinite > TR_NONFINITE_SKIP)
    return tr_errorf(err, n, TR_EINVAL, "on_nonfinite %d: not stop or skip", (int)c->on_nonfinite);
  if ((rc = check_zero(c, err, n))) return rc;
  if (c->layout.stages > 1 && c->layout.schedule == TR_SCHEDULE_ZB1 &&
      c->precision.gemm != TR_PRECISION_FP32)
    return tr_errorf(err, n, TR_EINVAL, "layout.schedule zb1: its backward in two halves runs "
                     "in fp32 only, not with precision.gemm bf16");
  if ((unsigned)c->optim.kind > TR_OPTIM_ADAMW)
    return tr_errorf(err, n, TR_EINVAL, "optim.kind %d: not an optimizer", (int)c->optim.kind);
  if (!(c->optim.lr > 0))
    return tr_errorf(err, n, TR_EINVAL, "optim.lr %g: give a positive rate", (double)c->optim.lr);
  if (c->checkpoint.every < 0 || (c->checkpoint.every > 0 && !c->checkpoint.path))
    return tr_errorf(err, n, TR_EINVAL, "checkpoint.every %lld: needs checkpoint.path, and >= 0",
                     (long long)c->checkpoint.every);
  if (c->profile.from < 0 || c->profile.to < 0 || (c->profile.to && c->profile.to <= c->profile.from))
    return tr_errorf(err, n, TR_EINVAL, "profile.from %lld, profile.to %lld: give steps [from, to) "
                     "with to > from >= 0 (to 0: to the end)",
                     (long long)c->profile.from, (long long)c->profile.to);
  /* Asynchrony with W workers acts like extra momentum of about 1 − 1/W (Mitliagkas et al.,
   * "Asynchrony begets momentum", 2016): take it off the explicit momentum. */
  if (c->async.enabled && c->async.momentum_correction && c->optim.kind == TR_OPTIM_MOMENTUM) {
    const float mu = c->optim.momentum - (1.0f - 1.0f / (float)c->layout.replicas);
    c->optim.momentum = mu > 0 ? mu : 0;
  }
  return 0;
}

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

int tr_job_new(tr_job **out, tr_graph *g, const tr_job_config *config, char *err, size_t n) {
  *out = NULL;
  tr_job_config c = *config;
  int rc = complete(&c, err, n);
  if (rc) return rc;
  /* found now, not after the run it was to save; rank 0 writes the checkpoints */
  if (c.checkpoint.path && tr_graph_rank(g) == 0 &&
      (rc = tr_file_check_output(c.checkpoint.path, "checkpoint.path", err, n)))
    return rc;
  const int R = c.layout.replicas, P = c.layout.stages, M = c.layout.microbatches;
  tr_job *j = calloc(1, sizeof *j);
  if (j == NULL) return TR_ENOMEM;
  if ((rc = open_resume(j, &c, err, n))) {
    tr_job_free(j);
    return rc;
  }
  tr__run *run = &j->run;
  run->g = g;
  run->mb_batch = c.global_batch / (c.async.enabled ? 1 : R * M);
  /* An asynchronous worker's loader keeps one batch ready: a step a loader has taken is its
   * worker's, so a deep ring would hand a fast loader steps a slow worker could have had. */
  j->prefetch = c.layout.prefetch > 0 ? c.layout.prefetch
                : c.async.enabled     ? 2
                                      : default_prefetch(&c, run->mb_batch);
  c.layout.prefetch = j->prefetch;
  snprintf(run->strategy, sizeof run->strategy, "%s",
           c.strategy        ? c.strategy
           : c.async.enabled ? "async"
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
  j->stages = calloc((size_t)(R * P), sizeof *j->stages);
  j->loaders = calloc((size_t)R, sizeof *j->loaders);
  j->chained = calloc((size_t)R, sizeof *j->chained);
  if (rc == 0 && (!j->stages || !j->loaders || !j->chained)) rc = TR_ENOMEM;
  if (rc) {
    tr_job_free(j);
    return rc;
  }
  *out = j;
  return 0;
}

void tr_job_free(tr_job *j) {
  if (j == NULL) return;
  tr_checkpoint_close(j->resume);
  tr_schedule_free(j->sc);
  free(j->stages);
  free(j->loaders);
  free(j->chained);
  free(j);
}

const tr_job_config *tr_job_get_config(const tr_job *j) { return &j->run.c; }
int tr_job_microbatch_samples(const tr_job *j) { return j->run.mb_batch; }

/* ---- actors -------------------------------------------------------------------------------- */

/* Adds an actor on rank `rank` (tr_graph_add_on: elsewhere its state is kept, never run). */
static int add(tr_job *j, int rank, const char *name, tr_actor_kind kind, const tr_behaviour *b,
               void *state, tr_actor **out) {
  if (state == NULL) return TR_ENOMEM;
  int rc = tr_graph_add_on(
      j->run.g, rank,
      &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state}, out);
  if (rc) b->destroy(state);
  return rc;
}

/* Actors live where their device is: a device list of tr_world_devices names the rank. */
static int rank_of(const tr_device *dev) { return tr_device_get_info(dev)->rank; }

static int stage_index_of(const tr_job *j, const tr_actor *a) {
  const int n = j->run.c.layout.replicas * j->run.c.layout.stages;
  for (int i = 0; a && i < n; i++)
    if (j->stages[i] == a) return i;
  return -1;
}

static int loader_index_of(const tr_job *j, const tr_actor *a) {
  for (int r = 0; a && r < j->run.c.layout.replicas; r++)
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
  int rc = connect(j, from, j->coordinator, NULL, "report", TR__REPORT_CREDITS, &e);
  if (rc == 0) rc = tr__coordinator_add_source(tr_actor_state(j->coordinator), source, e);
  if (rc) return rc;
  if (from == j->server) tr__server_set_report(tr_actor_state(from), e);
  else tr__stage_set_report(tr_actor_state(from), e);
  return 0;
}

int tr_job_add_loader(tr_job *j, int replica, tr_actor **out) {
  if (replica < 0 || replica >= j->run.c.layout.replicas || j->loaders[replica]) return TR_EINVAL;
  char name[32];
  snprintf(name, sizeof name, j->run.c.layout.replicas > 1 ? "loader%d" : "loader", replica);
  /* beside the replica's first stage, whose pinned memory the batches live in */
  tr_actor *first = j->stages[tr__device_index(&j->run, replica, 0)];
  tr_device *dev = first ? tr__stage_device(tr_actor_state(first)) : NULL;
  if (!dev && tr_world_size(tr__graph_world(j->run.g)) > 1)
    return TR_ESTATE; /* across processes, its rank is its first stage's: add that first */
  void *state = tr__loader_new(&j->run, replica);
  int rc = add(j, dev ? rank_of(dev) : tr_graph_rank(j->run.g), name, TR_ACTOR_LOOP,
               &tr__loader_behaviour, state, out);
  if (rc) return rc;
  j->loaders[replica] = *out;
  if (dev) tr__loader_set_device(state, dev);
  return 0;
}

int tr_job_add_stage(tr_job *j, int replica, int stage, tr_device *dev, tr_actor **out) {
  const tr_job_config *c = &j->run.c;
  if (replica < 0 || replica >= c->layout.replicas || stage < 0 || stage >= c->layout.stages ||
      dev == NULL)
    return TR_EINVAL;
  const int i = tr__device_index(&j->run, replica, stage);
  if (j->stages[i]) return TR_EINVAL;
  char name[32];
  if (c->async.enabled) snprintf(name, sizeof name, "worker%d", replica);
  else if (c->layout.replicas > 1 && c->layout.stages > 1) snprintf(name, sizeof name, "r%d.stage%d", replica, stage);
  else if (c->layout.replicas > 1) snprintf(name, sizeof name, "replica%d", replica);
  else snprintf(name, sizeof name, "stage%d", stage);
  int rc = add(j, rank_of(dev), name, TR_ACTOR_PINNED, &tr__stage_behaviour,
               tr__stage_new(&j->run, replica, stage, dev), out);
  if (rc) return rc;
  j->stages[i] = *out;
  if (stage == 0 && j->loaders[replica])
    tr__loader_set_device(tr_actor_state(j->loaders[replica]), dev);
  return connect_report(j, *out, i);
}

int tr_job_add_stages(tr_job *j, const tr_device_list *devs, tr_actor **out) {
  const int R = j->run.c.layout.replicas, P = j->run.c.layout.stages;
  if (tr_device_list_count(devs) < R * P) return TR_EINVAL;
  tr_actor **st = j->stages;
  int rc = 0;
  for (int i = 0; i < R * P && rc == 0; i++)
    rc = tr_job_add_stage(j, i / P, i % P, tr_device_list_get(devs, i), &st[i]);
  for (int i = 0; i < R * P && rc == 0; i++)
    if (i % P < P - 1) rc = tr_job_chain(j, st[i], st[i + 1]);
    else if (j->run.c.layout.chunks > 1) rc = tr_job_chain(j, st[i], st[i - P + 1]);
  for (int s = 0; s < P && rc == 0; s++) {
    tr_actor *group[TR_TRAIN_MAX_DEVICES];
    for (int r = 0; r < R; r++) group[r] = st[r * P + s];
    rc = tr_job_group(j, group, R);
  }
  if (rc == 0 && out) memcpy(out, st, (size_t)(R * P) * sizeof *out);
  return rc;
}

int tr_job_add_coordinator(tr_job *j, tr_actor **out) {
  if (j->coordinator) return TR_EINVAL;
  int rc = add(j, 0, "coordinator", TR_ACTOR_LOOP, &tr__coordinator_behaviour,
               tr__coordinator_new(&j->run), &j->coordinator);
  const int n = j->run.c.layout.replicas * j->run.c.layout.stages;
  for (int i = 0; i < n && rc == 0; i++) rc = connect_report(j, j->stages[i], i);
  if (rc == 0) rc = connect_report(j, j->server, n);
  *out = j->coordinator;
  return rc;
}

int tr_job_add_server(tr_job *j, tr_device *dev, tr_actor **out) {
  if (!j->run.c.async.enabled || j->server || dev == NULL) return TR_EINVAL;
  int rc = add(j, rank_of(dev), "server", TR_ACTOR_PINNED, &tr__server_behaviour,
               tr__server_new(&j->run, dev), &j->server);
  *out = j->server;
  if (rc == 0) rc = connect_report(j, j->server, j->run.c.layout.replicas);
  return rc;
}

int tr_job_add_worker(tr_job *j, int worker, tr_device *dev, tr_actor **out) {
  if (!j->run.c.async.enabled) return TR_EINVAL;
  return tr_job_add_stage(j, worker, 0, dev, out);
}

/* ---- edges --------------------------------------------------------------------------------- */

/* Whether the loader leaves a stage on `dev` to generate its samples (tr_data_on). */
static bool generates_on(const tr_job_config *c, const tr_device *dev) {
  switch (c->data_on) {
  case TR_DATA_ON_DEVICE: return true; /* complete() checked that the source can */
  case TR_DATA_ON_HOST: return false;
  default:
    return tr_device_get_info(dev)->kind != TR_DEVICE_HOST && tr_data_can_generate(c->data);
  }
}

int tr_job_connect_batches(tr_job *j, tr_actor *from, tr_actor *to, unsigned what,
                           tr_edge **out) {
  const unsigned carries = what & (TR_BATCH_INPUTS | TR_BATCH_TARGETS);
  if (carries == 0 || from == NULL || to == NULL) return TR_EINVAL;
  const int depth = j->prefetch, notify = (what & TR_BATCH_NOTIFY) != 0;
  tr_edge *e;
  int rc = tr_graph_connect(
      j->run.g,
      &(tr_edge_config){.from = from, .to = to, .type = &tr_batch_type,
                        .name = carries == TR_BATCH_TARGETS ? "targets" : "inputs",
                        .credits = depth, .wake_at = notify || depth < 2 ? 1 : depth / 2,
                        .notify = notify},
      &e);
  if (rc) return rc;
  const int loader = loader_index_of(j, from), stage = stage_index_of(j, to);
  const bool generate = loader >= 0 && stage >= 0 &&
                        generates_on(&j->run.c, tr__stage_device(tr_actor_state(to)));
  if (loader >= 0) ++*(generate ? &j->run.batches_made : &j->run.batches_loaded);
  if (loader >= 0 && (rc = tr__loader_add_edge(tr_actor_state(from), e, carries, generate)))
    return rc;
  if (stage >= 0 && (rc = tr__stage_add_input(tr_actor_state(to), e, carries))) return rc;
  if (out) *out = e;
  return 0;
}

int tr_job_feed(tr_job *j, tr_actor *loader, tr_actor *first, tr_actor *last) {
  if (first == last)
    return tr_job_connect_batches(j, loader, first, TR_BATCH_INPUTS | TR_BATCH_TARGETS, NULL);
  int rc = tr_job_connect_batches(j, loader, first, TR_BATCH_INPUTS, NULL);
  return rc ? rc : tr_job_connect_batches(j, loader, last, TR_BATCH_TARGETS, NULL);
}

/* Whether the stages exchange their gradients' norms: to clip by the global one, or to skip
 * a step whose norm is not finite on every stage alike. */
static bool agree_on_norms(const tr_job_config *c) {
  return c->optim.clip > 0 || c->on_nonfinite == TR_NONFINITE_SKIP;
}

/* Every two of the stages [first, first + n) exchange gradient norms when clipping: the
 * stages of one replica, whose gradients are whole after the all-reduce; sharded (ZeRO),
 * every stage of every replica, each of which holds the sum of its shard alone. */
static int connect_clip(tr_job *j, int first, int n) {
  tr_edge *(*e)[TR_TRAIN_MAX_DEVICES] = calloc((size_t)n, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  int rc = 0;
  for (int s = 0; s < n && rc == 0; s++)
    for (int t = 0; t < n && rc == 0; t++)
      if (s != t)
        rc = connect(j, j->stages[first + s], j->stages[first + t], &tr__norm_type, "norm",
                     TR__CLIP_CREDITS, &e[s][t]);
  for (int s = 0; s < n && rc == 0; s++) {
    tr_edge *out[TR_TRAIN_MAX_DEVICES], *in[TR_TRAIN_MAX_DEVICES];
    for (int t = 0; t < n; t++) out[t] = e[s][t], in[t] = e[t][s];
    rc = tr__stage_set_clip(tr_actor_state(j->stages[first + s]), n, s, out, in);
  }
  free(e);
  return rc;
}

/* One round of every rank (tr_world_allgather, in the same order on each) for an NCCL
 * communicator across ranks: rank `owner` makes its id, and each rank says whether it takes
 * part (`yes`; the owner's yes also says the id was made). (*all)[r]: rank r's word, to free.
 * TR_ENOMEM, or TR_ESYS when MPI failed. */
typedef struct nccl_word {
  int yes;
  tr_comm_id id;
} nccl_word;

static int nccl_round(tr_job *j, int owner, bool yes, nccl_word **all, char *why, size_t size) {
  tr_world *w = tr__graph_world(j->run.g);
  nccl_word mine = {0};
  if (yes)
    mine.yes = tr_graph_rank(j->run.g) != owner ||
               tr_comm_id_new(TR_DEVICE_CUDA, &mine.id, why, size) == 0;
  if (!(*all = calloc((size_t)tr_world_size(w), sizeof **all))) return TR_ENOMEM;
  if (tr_world_allgather(w, &mine, sizeof mine, *all) == 0) return 0;
  free(*all);
  *all = NULL;
  return TR_ESYS;
}

/* What carries the tensors of edge `e` from stage `from` to stage `to` when they live on two
 * ranks (tr_edge_carrier_choose): NCCL, on a communicator of the two opened here, or the
 * transport over MPI. Every rank takes part in the same order (the id, made on the
 * producer's rank, and each end's yes go round with tr_world_allgather), so both ends open
 * their member or neither does. A choice that fails here (NCCL asked but impossible) was
 * refused by tr_train_run first; an opening that fails leaves the edge to MPI. */
static int carry(tr_job *j, tr_actor *from, tr_actor *to, tr_edge *e, const char *what) {
  tr_graph *g = j->run.g;
  const int rf = tr_graph_actor_rank(g, from), rt = tr_graph_actor_rank(g, to);
  if (rf == rt) return 0;
  tr_device *dev[2] = {tr__stage_device(tr_actor_state(from)), tr__stage_device(tr_actor_state(to))};
  const tr_device_info *in[2] = {tr_device_get_info(dev[0]), tr_device_get_info(dev[1])};
  tr_edge_carrier how = TR_EDGE_CARRIER_MPI;
  if (tr_edge_carrier_choose(j->run.c.allreduce, in[0], in[1], tr_comm_library() != NULL, &how,
                             NULL, 0))
    return TR_EINVAL;
  /* Whether the ranks go round for a communicator is decided on what every rank knows
   * alike: the devices and the option, as if every build had NCCL (each end's own build
   * then says yes or no in the round) */
  tr_edge_carrier able;
  tr_edge_carrier_choose(j->run.c.allreduce, in[0], in[1], true, &able, NULL, 0);
  if (able != TR_EDGE_CARRIER_NCCL) {
    j->run.edges_mpi++;
    return 0;
  }
  const int me = tr_graph_rank(g);
  char why[256] = "";
  nccl_word *all;
  const int rc = nccl_round(j, rf, (me == rf || me == rt) && how == TR_EDGE_CARRIER_NCCL, &all,
                            why, sizeof why);
  if (rc) return rc;
  const bool both = all[rf].yes && all[rt].yes;
  const tr_comm_id id = all[rf].id;
  free(all);
  tr_comm *c = NULL;
  if (both && (me == rf || me == rt) &&
      tr_comm_open_rank(dev[me == rt], &id, 2, me == rt, &c, why, sizeof why))
    c = NULL; /* the other end fails too (NCCL's init is collective) */
  if (why[0]) /* the edge still runs, over MPI: say why NCCL did not take it */
    fprintf(stderr, "troupe: the %s edge from %s to %s goes over MPI: %s\n", what,
            in[0]->name, in[1]->name, why);
  if (c) tr__stage_use_nccl_edge(tr_actor_state(me == rf ? from : to), e, c);
  if (both && !why[0]) j->run.edges_nccl++;
  else j->run.edges_mpi++;
  return 0;
}

int tr_job_chain(tr_job *j, tr_actor *from, tr_actor *to) {
  const int i = stage_index_of(j, from), P = j->run.c.layout.stages;
  const bool wrap = j->run.c.layout.chunks > 1 && i % P == P - 1; /* chunk c → c + 1 */
  if (i < 0 || stage_index_of(j, to) != (wrap ? i - P + 1 : i + 1) || (!wrap && i % P == P - 1))
    return TR_EINVAL;
  const int s = i % P, r = i / P;
  tr_edge *act, *grad;
  /* Stage s holds at most its slot count of micro-batches (of all its chunks), and each
   * one's activation is read by the next before s can release the slot; the input gradient
   * alternates two buffers. */
  int rc = connect(j, from, to, &tr_activation_type, "act", tr_schedule_slots(j->sc, s), &act);
  if (rc == 0) rc = connect(j, to, from, &tr_gradient_type, "grad", 2, &grad);
  if (rc) return rc;
  tr__stage_set_chain(tr_actor_state(from), act, grad, true);
  tr__stage_set_chain(tr_actor_state(to), grad, act, false);
  if (rc == 0) rc = carry(j, from, to, act, "act");
  if (rc == 0) rc = carry(j, to, from, grad, "grad");
  /* the stages agree on the gradients' norm: to clip alike, to skip an update alike (sharded,
   * every stage of every replica does: tr_job_group) */
  if (++j->chained[r] == P - 1 && agree_on_norms(&j->run.c) && !j->run.c.zero)
    return connect_clip(j, tr__device_index(&j->run, r, 0), P);
  return 0;
}

/* The device infos of members[0, n). */
static void member_infos(tr_actor *const *members, int n, tr_device **devs, tr_device_info *infos) {
  for (int i = 0; i < n; i++) {
    devs[i] = tr__stage_device(tr_actor_state(members[i]));
    infos[i] = *tr_device_get_info(devs[i]);
  }
}

/* The bucket edges between every two of members[0, n) (all on one rank), each told its
 * own where it lives here. `nccl`: the members may share an NCCL communicator
 * (tr_allreduce_choose), opened here, on the thread that builds the graph. */
static int mesh(tr_job *j, tr_actor *const *members, int n, int credits, bool nccl) {
  tr_device *devs[TR_TRAIN_MAX_DEVICES];
  tr_device_info infos[TR_TRAIN_MAX_DEVICES];
  tr_edge *(*e)[TR_TRAIN_MAX_DEVICES] = calloc((size_t)n, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  member_infos(members, n, devs, infos);
  int rc = 0;
  for (int a = 0; a < n && rc == 0; a++)
    for (int b = 0; b < n && rc == 0; b++)
      if (a != b) rc = connect(j, members[a], members[b], &tr__bucket_type, "bucket", credits, &e[a][b]);
  const bool here = tr_graph_actor_rank(j->run.g, members[0]) == tr_graph_rank(j->run.g);
  for (int a = 0; a < n && rc == 0 && here; a++) {
    tr_edge *out[TR_TRAIN_MAX_DEVICES], *in[TR_TRAIN_MAX_DEVICES];
    for (int b = 0; b < n; b++) out[b] = e[a][b], in[b] = e[b][a];
    rc = tr__stage_set_group(tr_actor_state(members[a]), n, a, out, in, devs);
  }
  tr_allreduce how = TR_ALLREDUCE_PEER;
  char why[256] = "";
  if (rc == 0 && here && nccl &&
      tr_allreduce_choose(j->run.c.allreduce, infos, n, tr_comm_library() != NULL, &how, NULL, 0))
    rc = TR_EINVAL; /* tr_train_run says why, first */
  if (rc == 0 && how == TR_ALLREDUCE_NCCL) {
    tr_comm *comms[TR_TRAIN_MAX_DEVICES] = {NULL};
    if (tr_comm_open_all(devs, n, comms, why, sizeof why)) /* each member fails at open */
      snprintf(why + strlen(why), sizeof why - strlen(why), " (allreduce peer sums without NCCL)");
    for (int a = 0; a < n; a++) tr__stage_use_nccl(tr_actor_state(members[a]), comms[a], NULL, why);
    j->run.nccl = true;
  }
  free(e);
  return rc;
}

/* A group over several ranks: the leaders' communicator through NCCL where they are GPUs
 * and the build has it (tr_allreduce_choose over the leaders): an id made on the group's
 * first rank reaches the others over MPI (every rank takes part, in the same order), and
 * each rank holding members opens its leader's member. NULL: the transport's MPI sums. */
static tr_comm *leaders_comm(tr_job *j, tr_actor *const *leaders, const int *ranks, int nranks,
                             char *why, size_t size) {
  tr_graph *g = j->run.g;
  tr_device *devs[TR_TRAIN_MAX_DEVICES];
  tr_device_info infos[TR_TRAIN_MAX_DEVICES];
  member_infos(leaders, nranks, devs, infos);
  tr_allreduce how;
  if (tr_allreduce_choose(j->run.c.allreduce, infos, nranks, tr_comm_library() != NULL, &how,
                          NULL, 0) || how != TR_ALLREDUCE_NCCL)
    return NULL;
  const int me = tr_graph_rank(g);
  nccl_word *all;
  const int rc = nccl_round(j, ranks[0], me == ranks[0], &all, why, size);
  if (rc == TR_ENOMEM) {
    snprintf(why, size, "out of memory");
    return NULL;
  }
  const nccl_word first = rc ? (nccl_word){0} : all[ranks[0]];
  free(all);
  if (rc || !first.yes) {
    if (!why[0]) snprintf(why, size, "rank %d could not make an NCCL id%s", ranks[0], rc ? " (MPI failed)" : "");
    return NULL;
  }
  tr_comm *c = NULL;
  for (int i = 0; i < nranks; i++)
    if (ranks[i] == me && tr_comm_open_rank(devs[i], &first.id, nranks, i, &c, why, size))
      snprintf(why + strlen(why), size - strlen(why), " (allreduce peer sums across ranks over MPI)");
  return c;
}

/* A group over several ranks: a mesh on each, and each rank's leader (its member of lowest
 * index) sums with the other ranks' through its transport. Every rank makes the same edges
 * in the same order. */
static int span_ranks(tr_job *j, tr_actor *const *members, int n, int credits) {
  tr_graph *g = j->run.g;
  const int me = tr_graph_rank(g), size = tr_world_size(tr__graph_world(g)), k = j->ncross++;
  int ranks[TR_TRAIN_MAX_DEVICES], nranks = 0;
  tr_actor *leaders[TR_TRAIN_MAX_DEVICES] = {NULL}; /* each rank's member of lowest index */
  for (int rank = 0; rank < size; rank++)
    for (int i = 0; i < n; i++)
      if (tr_graph_actor_rank(g, members[i]) == rank) {
        ranks[nranks] = rank;
        leaders[nranks++] = members[i];
        break;
      }
  int rc = tr__transport_group(tr__graph_transport(g), k, ranks, nranks);
  char why[256] = "";
  tr_comm *across = rc == 0 ? leaders_comm(j, leaders, ranks, nranks, why, sizeof why) : NULL;
  for (int rank = 0; rank < size && rc == 0; rank++) {
    tr_actor *here[TR_TRAIN_MAX_DEVICES];
    int m = 0;
    for (int i = 0; i < n; i++)
      if (tr_graph_actor_rank(g, members[i]) == rank) here[m++] = members[i];
    if (m == 0) continue;
    tr_actor *transport = tr__graph_transport_on(g, rank);
    tr_edge *sum, *summed;
    rc = mesh(j, here, m, credits, false); /* inside a process: peer (group.h) */
    if (rc == 0) rc = connect(j, here[0], transport, &tr__sum_type, "sum", credits, &sum);
    if (rc == 0) rc = connect(j, transport, here[0], &tr__summed_type, "summed", credits, &summed);
    if (rc == 0 && rank == me)
      rc = tr__transport_group_edges(tr__graph_transport(g), k, sum, summed);
    for (int i = 0; i < m && rc == 0 && rank == me; i++)
      tr__stage_span_ranks(tr_actor_state(here[i]), k, i ? NULL : sum, i ? NULL : summed);
    if (rc == 0 && rank == me && (across || why[0])) {
      tr__stage_use_nccl(tr_actor_state(here[0]), NULL, across, why);
      j->run.nccl |= across != NULL;
      across = NULL;
    }
  }
  tr_comm_abort(across); /* not handed over: the build failed */
  return rc;
}

int tr_job_group(tr_job *j, tr_actor *const *members, int n) {
  if (n < 1 || n > TR_TRAIN_MAX_DEVICES) return TR_EINVAL;
  const int P = j->run.c.layout.stages;
  const int s = stage_index_of(j, members[0]) % P;
  bool one_rank = true;
  for (int i = 0; i < n; i++) {
    const int k = stage_index_of(j, members[i]);
    if (k < 0 || k % P != s) return TR_EINVAL;
    one_rank &= tr_graph_actor_rank(j->run.g, members[i]) == tr_graph_actor_rank(j->run.g, members[0]);
  }
  const int credits =
      tr__group_credits(tr__group_buckets(j->run.c.model, j->run.cuts[s], j->run.cuts[s + 1]));
  if (!one_rank && j->run.c.zero) return TR_EINVAL; /* tr_train_run says why, first */
  int rc = !one_rank ? span_ranks(j, members, n, credits)
           : n == 1  ? 0
                     : mesh(j, members, n, credits, true);
  /* sharded, once every stage is grouped: the norms of clipping go between every two */
  const int R = j->run.c.layout.replicas;
  if (rc == 0 && ++j->grouped == P && j->run.c.zero && agree_on_norms(&j->run.c))
    rc = connect_clip(j, 0, R * P);
  return rc;
}

int tr_job_observe(tr_job *j, tr_actor *observer, int every, tr_edge **out) {
  if (j->coordinator == NULL || observer == NULL || every < 1) return TR_EINVAL;
  tr_edge *e;
  int rc = connect(j, j->coordinator, observer, &tr_report_type, "report", 4, &e);
  if (rc == 0) rc = tr__coordinator_add_observer(tr_actor_state(j->coordinator), e, every);
  if (rc == 0 && out) *out = e;
  return rc;
}

int tr_job_serve(tr_job *j, tr_actor *server, tr_actor *worker) {
  const int w = stage_index_of(j, worker);
  if (!j->run.c.async.enabled || server == NULL || server != j->server || w < 0) return TR_EINVAL;
  tr_edge *push, *reply;
  int rc = connect(j, worker, server, NULL, "push", 1, &push);
  if (rc == 0) rc = connect(j, server, worker, &tr__reply_type, "reply", TR__REPLY_CREDITS, &reply);
  if (rc == 0) rc = tr__stage_set_server(tr_actor_state(worker), push, reply);
  if (rc == 0)
    rc = tr__server_set_worker(tr_actor_state(server), w, push, reply,
                               tr__stage_device(tr_actor_state(worker)));
  return rc;
}

void tr__result_init(tr_train_result *r, const char *model, const char *strategy) {
  memset(r, 0, sizeof *r);
  snprintf(r->model, sizeof r->model, "%s", model);
  snprintf(r->strategy, sizeof r->strategy, "%s", strategy);
  r->ranks = 1;
  r->initial_loss = r->final_loss = r->samples_per_s = r->steps_per_s = NAN;
  r->bubble_fraction = r->bubble_theory = r->staleness_mean = r->staleness_max = NAN;
  r->consistency = r->gflops = r->tokens_per_s = r->momentum = r->server_utilization = NAN;
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) r->utilization[i] = NAN;
}

void tr_job_result(const tr_job *j, tr_train_result *r) {
  if (j->coordinator) *r = *tr__coordinator_result(tr_actor_state(j->coordinator));
  else tr__result_init(r, tr_model_name(j->run.c.model), j->run.strategy);
}
