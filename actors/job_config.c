/* job_config.c — the rules of a job's configuration, checked in one place: names of its
 * enumerations, its defaults, the layout each strategy makes of its devices, every check of
 * tr_job_config against the model, and the structured error (tr_error) the checks make of
 * their messages. tr_job_new, tr_job_check and tr_train_run read them all from here. */
#include "job_config.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "job_impl.h"
#include "step_policy.h"

static const char *const nonfinite_names[] = {"stop", "skip"};
static const char *const data_on_names[] = {"auto", "host", "device"};

const char *tr_data_on_name(tr_data_on w) {
  return tr__name_of(data_on_names, TR__COUNTOF(data_on_names), (int)w);
}

int tr_data_on_parse(const char *name, tr_data_on *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(data_on_names, TR__COUNTOF(data_on_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_data_on)i, 0);
}

const char *tr_nonfinite_policy_name(tr_nonfinite_policy p) {
  return tr__name_of(nonfinite_names, TR__COUNTOF(nonfinite_names), (int)p);
}

int tr_nonfinite_policy_parse(const char *name, tr_nonfinite_policy *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(nonfinite_names, TR__COUNTOF(nonfinite_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_nonfinite_policy)i, 0);
}

tr_job_config tr_job_defaults(void) {
  return (tr_job_config){.seed = 1,
                         .layout = {.replicas = 1, .stages = 1, .microbatches = 1,
                                    .schedule = TR_SCHEDULE_1F1B},
                         .optim = {.kind = TR_OPTIM_MODEL},
                         .async = {.staleness = -1},
                         .local = {.outer_momentum = 0.9f}};
}

/* As many micro-batches as fit in 4 MiB, from 2 × m (a step and the next) to 256: a deep
 * ring means few wake-ups of the loader's loop where a step takes microseconds, a shallow
 * one a short overrun of a timed run where a step takes long. */
int tr__job_default_prefetch(const tr_job_config *c, int mb_batch) {
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
                  : tr_errorf(err, n, TR_EINVAL,
                              TR__F("layout.chunks") " %d: only the interleaved schedule puts "
                              "several chunks on a device (" TR__F("layout.schedule") " is %s)",
                              V, tr_schedule_kind_name(l->schedule));
  if (V < 2)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.chunks") " %d: the interleaved schedule puts 2 or more chunks "
                     "on each device", V);
  if (P < 2)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.schedule") ": interleaved needs 2 or more stages (on one "
                     "device it is 1f1b)");
  if (l->replicas > 1)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.schedule") ": interleaved runs one replica (%d given): a "
                     "replica group reduces one chunk per device", l->replicas);
  if ((long)P * V > TR__MAX_STAGES || P * V > layers)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.chunks") ": %d stages × %d chunks are %d pieces, but model "
                     "'%s' has %d layers to cut (and at most %d pieces)", P, V, P * V,
                     tr_model_name(c->model), layers, TR__MAX_STAGES);
  return 0;
}

/* Tensor parallelism: T members of each (replica, stage), a device each. */
static int check_tensor(const tr_job_config *c, int pieces, char *err, size_t n) {
  const tr_layout_config *l = &c->layout;
  const int T = l->tensor;
  if (T < 0)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.tensor") " %d: give the members of each tensor group (0 or 1: "
                     "none)", T);
  if (T <= 1) return 0;
  if (c->async.enabled)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.tensor") " %d with " TR__F("async.enabled") ": a worker "
                     "trains the whole model on one device (tensor groups are synchronous)", T);
  if ((long)l->replicas * l->stages * T > TR_TRAIN_MAX_DEVICES || (long)pieces * T > TR__MAX_STAGES)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.tensor") " %d: %d replicas × %d stages × %d members is more "
                     "than %d devices (or %d pieces × members)", T, l->replicas, l->stages, T,
                     TR_TRAIN_MAX_DEVICES, TR__MAX_STAGES);
  tr_model *member; /* every member splits alike: the first says what does not divide */
  char why[400];
  const int rc = tr_model_shard(c->model, 0, T, &member, why, sizeof why);
  /* strategy tp chose T (the devices), not the user: the message says where it came from */
  if (rc && c->strategy && strcmp(c->strategy, "tp") == 0)
    return tr_errorf(err, n, rc, TR__F("strategy") " tp: one tensor group of the %d devices: "
                     "model '%s' across %d members: %s", T, tr_model_name(c->model), T, why);
  if (rc)
    return tr_errorf(err, n, rc, TR__F("layout.tensor") " %d: model '%s' across %d members: %s",
                     T, tr_model_name(c->model), T, why);
  tr_model_free(member);
  return 0;
}

static int check_layout(const tr_job_config *c, int layers, char *err, size_t n) {
  const tr_layout_config *l = &c->layout;
  if (l->automatic)
    return tr_errorf(err, n, TR_EINVAL, TR__F("layout.automatic") ": a job is wired for the "
                     "layout it is given; tr_train_run chooses one (troupe train --layout auto)");
  const int R = l->replicas, P = l->stages, M = l->microbatches;
  if (R < 1 || P < 1 || M < 1 || R * P > TR_TRAIN_MAX_DEVICES || P > TR__MAX_STAGES)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout") ": %d replicas × %d stages × %d micro-batches is not a "
                     "layout (at most %d devices)",
                     R, P, M, TR_TRAIN_MAX_DEVICES);
  if (P > layers)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.stages") ": %d stages, but model '%s' has %d layers to cut", P,
                     tr_model_name(c->model), layers);
  if ((unsigned)l->schedule >= TR_SCHEDULE_COUNT)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.schedule") ": %d is not a schedule", (int)l->schedule);
  int rc = check_chunks(c, layers, err, n);
  if (rc) return rc;
  const int pieces = P * l->chunks;
  if ((rc = check_tensor(c, pieces, err, n))) return rc;
  if (l->prefetch < 0)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.prefetch") " %d: give 0 or more", l->prefetch);
  if (c->async.enabled && (P != 1 || M != 1))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.enabled") ": a worker trains the whole model on whole batches "
                     "(layout has %d stages and %d micro-batches)",
                     P, M);
  const int parts = c->async.enabled ? 1 : R * M; /* an asynchronous worker takes whole batches */
  if (c->global_batch < parts || c->global_batch % parts)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("global_batch") " %d: not divisible by replicas × micro-batches (%d × "
                     "%d)",
                     c->global_batch, R, M);
  if (l->cuts && l->ncuts != pieces - 1)
    return l->chunks > 1
               ? tr_errorf(err, n, TR_EINVAL,
                           TR__F("layout.cuts") ": %d boundaries given, %d stages × %d chunks "
                           "need %d", l->ncuts, P, l->chunks, pieces - 1)
               : tr_errorf(err, n, TR_EINVAL,
                           TR__F("layout.cuts") ": %d boundaries given, %d stages need %d",
                           l->ncuts, P, P - 1);
  for (int s = 0; l->cuts && s < l->ncuts; s++)
    if (l->cuts[s] < 1 || l->cuts[s] >= layers || (s && l->cuts[s] <= l->cuts[s - 1]))
      return tr_errorf(err, n, TR_EINVAL,
                       TR__F("layout.cuts") ": %d pieces need %d increasing layer boundaries "
                       "inside 1..%d",
                       pieces, pieces - 1, layers - 1);
  return 0;
}

static int check_async(const tr_async_config *a, int workers, bool local, char *err, size_t n) {
  if (a->elastic && !a->enabled && !local)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.elastic") ": replicas that leave are asynchronous training's "
                     "(" TR__F("async.enabled") ") or local SGD's (" TR__F("local.sync_every")
                     "): dp's replicas sum every step's gradients together, and a step "
                     "summed without one would not be the step asked for");
  if (!a->enabled) return 0;
  if (a->elastic && a->hogwild)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.elastic") ": not with " TR__F("async.hogwild") ": a Hogwild! "
                     "worker that fails mid-update leaves the shared parameters half written");
  if (a->join_at < 0 || a->join_workers < 0 || (a->join_workers > 0 && a->join_at == 0))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.join_at") " %lld, " TR__F("async.join_workers") " %d: give "
                     "the step after which workers join (>= 1) and how many (>= 0)",
                     (long long)a->join_at, a->join_workers);
  if (a->join_at > 0 && a->join_workers >= workers)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.join_workers") " %d of %d workers: at least one must train "
                     "from the start", a->join_workers, workers);
  if (a->join_at > 0 && a->hogwild)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.join_at") ": not with " TR__F("async.hogwild") " (a worker "
                     "that joins pulls the parameters; Hogwild! workers share them)");
  if (a->staleness < -1)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.staleness") " %d: give a number of pushes >= 0, or -1",
                     a->staleness);
  if (a->pull_every < 0)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.pull_every") " %d: give 1 or more", a->pull_every);
  if (!(a->dc_lambda >= 0 && isfinite(a->dc_lambda)))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.dc_lambda") " %g: give a finite number >= 0",
                     (double)a->dc_lambda);
  if (a->hogwild && (a->staleness >= 0 || a->dc_lambda > 0 || a->pull_every > 1 || a->staleness_lr))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("async.hogwild") ": the workers update the shared parameters "
                     "themselves, so " TR__F("async.staleness") ", " TR__F("async.dc_lambda") ", "
                     TR__F("async.pull_every") " and " TR__F("async.staleness_lr") " do not apply");
  return 0;
}

static int check_zero(const tr_job_config *c, char *err, size_t n) {
  if (c->zero == 0) return 0;
  if (c->zero != 1)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("zero") " %d: give 0 (off) or 1 (ZeRO stage 1: optimizer state sharded "
                     "across the replicas)", c->zero);
  if (c->async.enabled)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("zero") " %d: asynchronous training keeps the optimizer state on the "
                     "parameter server; ZeRO shards it across the replicas of dp and hybrid",
                     c->zero);
  if (c->layout.replicas < 2)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("zero") " %d: ZeRO shards the optimizer state across data-parallel "
                     "replicas (dp, hybrid); this job has %d replica",
                     c->zero, c->layout.replicas);
  return 0;
}

/* Held-out evaluation (tr_job_config.eval): samples 0 resolved to a finite source's rows.
 * The held-out micro-batches take the loader's batch edges, so a stage that makes its
 * samples on the device has no way to get them. */
static int check_eval(tr_job_config *c, char *err, size_t n) {
  tr_eval_config *e = &c->eval;
  if (e->data == NULL && (e->every || e->samples))
    return tr_errorf(err, n, TR_EINVAL, TR__F("%s") " %lld: there are no held-out samples to "
                     "evaluate: give them as " TR__F("eval.data"), e->every ? "eval.every" : "eval.samples",
                     (long long)(e->every ? e->every : e->samples));
  if (e->data == NULL) return 0;
  if (c->async.enabled)
    return tr_errorf(err, n, TR_EINVAL, TR__F("eval.data") ": asynchronous jobs have no step "
                     "after which every worker's parameters are the model's: evaluate a "
                     "synchronous job, or a checkpoint");
  if (c->data_on == TR_DATA_ON_DEVICE)
    return tr_errorf(err, n, TR_EINVAL, TR__F("data_on") " device with " TR__F("eval.data") ": "
                     "held-out samples come from the loader; give host or auto");
  char why[400];
  int rc = tr_data_check(e->data, c->model, why, sizeof why);
  if (rc) return tr_errorf(err, n, rc, TR__F("eval.data") ": %s", why);
  if (e->every < 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("eval.every") " %lld: give steps >= 0 (0: at the "
                     "end only)", (long long)e->every);
  if (e->samples < 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("eval.samples") " %lld: give a number >= 0 (0: "
                     "each row of a finite source once)", (long long)e->samples);
  const int64_t rows = tr_data_rows(e->data);
  if (e->samples == 0 && (e->samples = rows) == 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("eval.samples") " 0: data '%s' is endless "
                     "(no rows to take each of once): give the number of samples to "
                     "evaluate", tr_data_name(e->data));
  if (rows > 0 && e->samples > rows) /* past its rows a source repeats them */
    return tr_errorf(err, n, TR_EINVAL, TR__F("eval.samples") " %lld: data '%s' holds %lld "
                     "rows (0: each of them once)", (long long)e->samples,
                     tr_data_name(e->data), (long long)rows);
  return 0;
}

#define TR__OUTER_TEXT(name, text) text,
static const char *const outer_names[] = {TR_OUTER_MAP(TR__OUTER_TEXT)};
#undef TR__OUTER_TEXT

const char *tr_outer_name(tr_outer o) {
  return tr__name_of(outer_names, TR__COUNTOF(outer_names), (int)o);
}

int tr_outer_parse(const char *name, tr_outer *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(outer_names, TR__COUNTOF(outer_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_outer)i, 0);
}

/* Local SGD (tr_local_config): its numbers, and the jobs it is not. */
static int check_local(const tr_job_config *c, char *err, size_t n) {
  const tr_local_config *l = &c->local;
  if (l->sync_every < 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.sync_every") " %d: give steps >= 1 between "
                     "syncs (0: not local SGD)", l->sync_every);
  if (l->sync_every == 0) {
    if (l->warmup_sync || l->outer != TR_OUTER_AVERAGE || l->outer_lr != 0)
      return tr_errorf(err, n, TR_EINVAL, TR__F("%s") ": local SGD's, which "
                       TR__F("local.sync_every") " 0 turns off",
                       l->warmup_sync ? "local.warmup_sync" : l->outer_lr != 0 ? "local.outer_lr"
                                                                                 : "local.outer");
    return 0;
  }
  if (l->warmup_sync < 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.warmup_sync") " %d: give data-parallel "
                     "steps >= 0", l->warmup_sync);
  if ((unsigned)l->outer >= TR_OUTER_COUNT)
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.outer") " %d: not average or nesterov",
                     (int)l->outer);
  if (l->outer == TR_OUTER_NESTEROV && !(l->outer_lr > 0 && isfinite(l->outer_lr)))
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.outer_lr") " %g: DiLoCo's outer step needs "
                     "a positive rate", (double)l->outer_lr);
  if (l->outer == TR_OUTER_AVERAGE && l->outer_lr != 0)
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.outer_lr") " %g: the outer step's rate, "
                     "and " TR__F("local.outer") " average has none (give nesterov)",
                     (double)l->outer_lr);
  if (!(l->outer_momentum >= 0 && l->outer_momentum < 1))
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.outer_momentum") " %g: give μ in [0, 1)",
                     (double)l->outer_momentum);
  if (c->async.enabled)
    return tr_errorf(err, n, TR_EINVAL, TR__F("local.sync_every") " %d: local SGD is "
                     "synchronous; not with " TR__F("async.enabled"), l->sync_every);
  if (c->zero)
    return tr_errorf(err, n, TR_EINVAL, TR__F("zero") " %d: local SGD's replicas keep each its "
                     "own optimizer state, which ZeRO would shard across them", c->zero);
  if (c->layout.chunks > 1)
    return tr_errorf(err, n, TR_EINVAL, TR__F("layout.chunks") " %d: local SGD's replica group "
                     "holds one chunk a stage (not interleaved)", c->layout.chunks);
  if (c->layout.tensor > 1)
    return tr_errorf(err, n, TR_EINVAL, TR__F("layout.tensor") " %d: local SGD's replicas' "
                     "checkpoint parts are kept whole per replica, not joined from tensor "
                     "groups' members (not built)", c->layout.tensor);
  if (c->async.elastic && c->layout.stages > 1)
    return tr_errorf(err, n, TR_EINVAL, TR__F("async.elastic") ": local SGD's replicas leave "
                     "whole, one stage each; this job has " TR__F("layout.stages") " %d (a "
                     "pipeline's other stages would wait for the one that left)",
                     c->layout.stages);
  if (c->async.elastic && c->allreduce == TR_ALLREDUCE_NCCL)
    return tr_errorf(err, n, TR_EINVAL, TR__F("async.elastic") ": a replica cannot leave a "
                     "group that sums through NCCL (" TR__F("allreduce") " nccl: every member "
                     "joins each collective); give peer or auto (elastic local SGD sums with "
                     "peer)");
  return 0;
}

int tr__job_config_complete(tr_job_config *c, char *err, size_t n) {
  if (c->model == NULL) return tr_errorf(err, n, TR_EINVAL,
                                         TR__F("model") ": none given");
  if (c->data == NULL) return tr_errorf(err, n, TR_EINVAL,
                                        TR__F("data") ": none given");
  c->global_batch = tr__job_global_batch(c);
  c->layout.chunks = tr_schedule_chunks(c->layout.schedule, c->layout.chunks);
  const char *field; /* before the model's fill in 0s: a NaN or negative rate is refused */
  char why[320];
  if (tr_optim_config_check(&c->optim, &field, why, sizeof why))
    return tr_errorf(err, n, TR_EINVAL, TR__F("optim.%s") "%s", field, why + strlen(field));
  c->optim = resolve_optim(c->optim, c->model);
  int rc;
  if ((rc = tr_data_check(c->data, c->model, err, n))) {
    tr__error_mark_lead(err, n, "data");
    return rc;
  }
  if (c->async.join_at > 0 && c->async.join_workers == 0) c->async.join_workers = 1;
  if ((rc = check_layout(c, tr_model_layer_count(c->model), err, n)) ||
      (rc = check_async(&c->async, c->layout.replicas, c->local.sync_every > 0, err, n)))
    return rc;
  if ((unsigned)c->data_on > TR_DATA_ON_DEVICE)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("data_on") " %d: not auto, host or device", (int)c->data_on);
  if (c->data_on == TR_DATA_ON_DEVICE && !tr_data_can_generate(c->data))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("data_on") " device: data '%s' cannot be generated on a device (the "
                     "synthetic sources and the arithmetic corpus can; files are read by the "
                     "loader: give host or auto)", tr_data_name(c->data));
  if ((rc = check_eval(c, err, n))) return rc;
  if ((unsigned)c->on_nonfinite > TR_NONFINITE_SKIP)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("on_nonfinite") " %d: not stop or skip", (int)c->on_nonfinite);
  if ((rc = check_zero(c, err, n)) || (rc = check_local(c, err, n))) return rc;
  /* elastic local SGD: its groups sum with peer, which a member can leave (group.h) */
  if (c->async.elastic && c->local.sync_every > 0 && c->allreduce == TR_ALLREDUCE_AUTO)
    c->allreduce = TR_ALLREDUCE_PEER;
  if (c->layout.stages > 1 && c->layout.schedule == TR_SCHEDULE_ZB1 &&
      c->precision.gemm != TR_PRECISION_FP32)
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("layout.schedule") " zb1: its backward in two halves runs in fp32 "
                     "only, not with " TR__F("precision.gemm") " bf16");
  if (c->step_policy && !tr__policy_find(c->step_policy, c))
    return tr_errorf(err, n, TR_EINVAL, TR__F("step_policy") " '%s': no step policy of that "
                     "name (sync, async, or one the program added)", c->step_policy);
  if (!c->optim.kind) c->optim.kind = TR_OPTIM_SGD; /* a zeroed optim's, as stages read it */
  if (tr_optim_kind_check(c->optim.kind, why, sizeof why))
    return tr_errorf(err, n, TR_EINVAL, TR__F("optim.kind") ": %s", why);
  if (!(c->optim.lr > 0))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("optim.lr") " %g: give a positive rate", (double)c->optim.lr);
  if (c->checkpoint.every < 0 || (c->checkpoint.every > 0 && !c->checkpoint.path))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("checkpoint.every") " %lld: needs " TR__F("checkpoint.path") ", and >= "
                     "0",
                     (long long)c->checkpoint.every);
  if (c->profile.from < 0 || c->profile.to < 0 ||
      (c->profile.to && c->profile.to <= c->profile.from))
    return tr_errorf(err, n, TR_EINVAL,
                     TR__F("profile.from") " %lld, " TR__F("profile.to") " %lld: give steps "
                     "[from, to) with to > from >= 0 (to 0: to the end)",
                     (long long)c->profile.from, (long long)c->profile.to);
  /* Asynchrony with W workers acts like extra momentum of about 1 − 1/W (Mitliagkas et al.,
   * "Asynchrony begets momentum", 2016): take it off the explicit momentum. */
  if (c->async.enabled && c->async.momentum_correction && c->optim.kind == TR_OPTIM_MOMENTUM) {
    const float mu = c->optim.momentum - (1.0f - 1.0f / (float)c->layout.replicas);
    c->optim.momentum = mu > 0 ? mu : 0;
  }
  return 0;
}

/* Whether the loader leaves a stage on `dev` to generate its samples (tr_data_on). */
bool tr__job_generates_on(const tr_job_config *c, const tr_device *dev) {
  switch (c->data_on) {
  case TR_DATA_ON_DEVICE: return true; /* complete() checked that the source can */
  case TR_DATA_ON_HOST: return false;
  default: /* held-out samples come from the loader (tr_job_config.eval) */
    return tr_device_info_of(dev)->kind != TR_DEVICE_HOST && tr_data_can_generate(c->data) &&
           c->eval.data == NULL;
  }
}

tr_optim_config tr__job_optim(const tr_job_config *c) { return resolve_optim(c->optim, c->model); }

int tr__job_global_batch(const tr_job_config *c) {
  return c->global_batch ? c->global_batch : tr_model_batch(c->model);
}

int tr__job_config_layout(tr_job_config *c, const tr_train_options *o, int n, char *err,
                          size_t size) {
  tr_layout_config *l = &c->layout;
  const tr_layout_config *given = &o->job.layout;
  int R = 1, P = 1, T = given->tensor > 1 ? given->tensor : 1;
  if (o->strategy == TR_STRATEGY_TP) { /* one tensor group across the devices */
    if (given->tensor > 1 && given->tensor != n)
      return tr_errorf(err, size, TR_EINVAL,
                       TR__F("layout.tensor") " %d: strategy tp makes one tensor group of the %d "
                       "devices (for replicas or stages of groups: dp, pipeline or hybrid with "
                       TR__F("layout.tensor") ")", given->tensor, n);
    T = n;
  } else if (T > 1 && (o->strategy == TR_STRATEGY_ASYNC || o->strategy == TR_STRATEGY_SINGLE)) {
    return tr_errorf(err, size, TR_EINVAL,
                     TR__F("layout.tensor") " %d: strategy %s %s", T,
                     o->strategy == TR_STRATEGY_ASYNC ? "async" : "single",
                     o->strategy == TR_STRATEGY_ASYNC
                         ? "trains the whole model on each worker's device (tensor groups are "
                           "synchronous: tp, dp, mp, pipeline, hybrid)"
                         : "runs on one device (a tensor group is tp: --strategy tp)");
  } else if (n % T) {
    return tr_errorf(err, size, TR_EINVAL,
                     TR__F("devices") ": %d devices do not make tensor groups of %d ("
                     TR__F("layout.tensor") ")", n, T);
  }
  n /= T; /* the strategy lays out tensor groups, a device's place each */
  if (given->replicas && o->strategy != TR_STRATEGY_ASYNC)
    return tr_errorf(err, size, TR_EINVAL,
                     TR__F("layout.replicas") " %d: the strategy and the devices decide it (it is "
                     "async's number of workers)",
                     given->replicas);
  if (given->stages && o->strategy != TR_STRATEGY_HYBRID && o->strategy != TR_STRATEGY_LOCAL)
    return tr_errorf(err, size, TR_EINVAL,
                     TR__F("layout.stages") " %d: the strategy and the devices decide it (it is "
                     "hybrid's and local's stages per replica)",
                     given->stages);
  if (o->job.local.sync_every == 0 && o->strategy == TR_STRATEGY_LOCAL)
    return tr_errorf(err, size, TR_EINVAL, TR__F("local.sync_every") " 0: strategy local "
                     "averages the replicas every H steps: give H >= 1");
  if (o->job.local.sync_every != 0 && o->strategy != TR_STRATEGY_LOCAL)
    return tr_errorf(err, size, TR_EINVAL, TR__F("local.sync_every") " %d: local SGD is "
                     "strategy local's (give " TR__F("strategy") " local)",
                     o->job.local.sync_every);
  switch (o->strategy) {
    case TR_STRATEGY_SINGLE:
    case TR_STRATEGY_TP: break;
    case TR_STRATEGY_DP: R = n; break;
    case TR_STRATEGY_MP:
    case TR_STRATEGY_PIPELINE: P = n; break;
    case TR_STRATEGY_HYBRID:
    case TR_STRATEGY_LOCAL: /* a replica per device, or a pipeline of layout.stages */
      P = given->stages > 0 ? given->stages : o->strategy == TR_STRATEGY_LOCAL ? 1 : 2;
      if (n % P)
        return tr_errorf(err, size, TR_EINVAL,
                         TR__F("devices") ": %d devices do not make replicas of %d stages ("
                         TR__F("layout.stages") ")",
                         n, P);
      R = n / P;
      break;
    case TR_STRATEGY_ASYNC:
      R = given->replicas > 0 ? given->replicas : n;
      if (given->replicas < 0 || R > n)
        return tr_errorf(err, size, TR_EINVAL,
                         TR__F("layout.replicas") " %d: give 1 to %d workers, one per device of %s",
                         given->replicas, n, o->devices);
      if (given->microbatches > 1 || given->cuts)
        return tr_errorf(err, size, TR_EINVAL,
                         TR__F("strategy") " async: a worker trains the whole model on whole "
                         "batches (no " TR__F("layout.microbatches") " or " TR__F("layout.cuts")
                         ")");
      break;
  }
  c->async.enabled = o->strategy == TR_STRATEGY_ASYNC;
  if (o->strategy == TR_STRATEGY_MP && given->microbatches > 1)
    return tr_errorf(err, size, TR_EINVAL,
                     TR__F("layout.microbatches") " %d: mp trains one micro-batch at a time (that "
                     "is the pipeline strategy)",
                     given->microbatches);
  const bool pipelined = o->strategy == TR_STRATEGY_PIPELINE || o->strategy == TR_STRATEGY_HYBRID ||
                         (o->strategy == TR_STRATEGY_LOCAL && P > 1);
  l->replicas = R;
  l->stages = P;
  l->tensor = T > 1 ? T : given->tensor;
  l->microbatches = given->microbatches > 0 ? given->microbatches : pipelined ? 2 * P : 1;
  return 0;
}

void tr__error_mark_lead(char *err, size_t n, const char *field) {
  const size_t f = strlen(field), len = strlen(err);
  if (strncmp(err, field, f) != 0 || (err[f] && err[f] != ' ' && err[f] != ':') || len + 2 >= n)
    return;
  memmove(err + f + 2, err + f, len - f + 1);
  memmove(err + 1, err, f);
  err[0] = TR__FIELD_OPEN;
  err[f + 1] = TR__FIELD_CLOSE;
}

void tr__error_unmark(char *s) {
  char *w = s;
  for (const char *r = s; *r; r++)
    if (*r != TR__FIELD_OPEN && *r != TR__FIELD_CLOSE) *w++ = *r;
  *w = 0;
}

void tr__error_from_text(tr_error *e, int status, const char *marked) {
  memset(e, 0, sizeof *e);
  e->status = status;
  size_t w = 0, open = 0;
  bool in = false;
  for (const char *r = marked; *r && w + 1 < sizeof e->message; r++) {
    if (*r == TR__FIELD_OPEN) {
      in = true;
      open = w;
    } else if (*r == TR__FIELD_CLOSE && in) {
      in = false;
      if (e->nspans < TR_ERROR_SPANS)
        e->spans[e->nspans++] = (tr_error_span){(uint16_t)open, (uint16_t)(w - open)};
    } else if (*r != TR__FIELD_CLOSE) {
      e->message[w++] = *r;
    }
  }
  e->message[w] = 0;
  if (e->nspans)
    snprintf(e->field, sizeof e->field, "%.*s", (int)e->spans[0].len,
             e->message + e->spans[0].at);
}

int tr_job_check(tr_job_config *config, tr_error *e) {
  char err[sizeof e->message];
  err[0] = 0;
  const int rc = config ? tr__job_config_complete(config, err, sizeof err)
                        : tr_errorf(err, sizeof err, TR_EINVAL, "tr_job_check: config is NULL");
  if (e) tr__error_from_text(e, rc, rc ? err : ""); /* e NULL: the status alone */
  return rc;
}
