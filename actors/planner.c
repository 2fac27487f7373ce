/* planner.c — a layout's step predicted before it runs (tr_plan.h: tr_plan_predict).
 *
 * The options are resolved as tr_train_run resolves them (job_config.c: the layout; planner.h:
 * the cut), every virtual stage gets the sum of its layers' measured passes and its memory
 * plan (tr_stage_plan, as chunks.c opens it), and one step of the schedule is simulated
 * (predict.c). What the layer costs leave out is added where the runtime spends it:
 *
 * - an activation or a gradient crossing to the next device is a message (its hand-over to
 *   a waiting stage, links.c) and a copy by its receiver (its bytes at the device's copy
 *   bandwidth, measured here); a micro-batch's inputs and targets are copied into the first
 *   and last stages' slots;
 * - each device's step costs the runtime's own work (a batch handed over, a report, the
 *   coordinator's protocol: costs_overhead.c), measured once;
 * - each device's step ends with the replica group's sums (R > 1: on host devices a member
 *   sums its chunk of every bucket on its own thread, in order with its backward, so about
 *   the gradients' bytes read and written once more; ZeRO-1 also gathers the updated
 *   shards) and the optimizer's step (timed on a stage of the device's layers);
 * - host devices share the machine's cores, caches and memory: each computes slower when
 *   others compute too, by the slowdown measured with all of them at work (costs_together.c),
 *   scaled by how many are busy on average in a first simulation.
 *
 * Local SGD is dp whose replicas sum their parameters every H steps instead of their
 * gradients every step. An async worker's step is a whole batch's, its update the server's:
 * the workers' rate follows from the simulated step, the server's update and the hand-overs
 * (predict_async.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "group.h"
#include "job_config.h"
#include "job_impl.h"
#include "result_impl.h"
#include "tr_train.h"

/* The run resolved: what tr_train_run would build. */
typedef struct resolved {
  tr_model *model, *member; /* member: tensor member 0's model (T > 1), else model */
  tr_data *data;
  tr_device_list *devs;
  tr_job_config c;
  tr_schedule *sc;
  int R, P, T, M, v, mb, cuts[TR__MAX_STAGES + 1];
  bool async; /* R workers and a server (predict_async.c), else synchronous */
  const int *rank_of; /* across processes: each device's rank (the server's is 0); else NULL */
  const tr__rank_links *links;
} resolved;

/* The rank of device (r·P + s)·T of the layout: 0 in one process. */
static int rank_at(const resolved *r, int replica, int stage) {
  return r->rank_of ? r->rank_of[(replica * r->P + stage) * r->T] : 0;
}

/* A message of `bytes` between two ranks: to the transport's actor and from it (two
 * hand-overs), its bytes copied into the transport's buffer at `per_byte`, and MPI's time
 * for them. */
static double crossing(const resolved *r, double latency, double per_byte, double bytes) {
  return 2 * latency + r->links->message + bytes * (per_byte + r->links->message_per_byte);
}

static void release(resolved *r) {
  tr_schedule_free(r->sc);
  if (r->member != r->model) tr_model_free(r->member);
  tr_model_free(r->model);
  tr_data_close(r->data);
  tr_device_list_close(r->devs);
}

static int resolve(const tr_train_options *o, resolved *r, char *err, size_t n) {
  const tr_strategy s = o->strategy;
  int rc = o->spec ? tr_model_new(&r->model, o->spec, err, n)
                   : tr_model_named(&r->model, o->model, err, n);
  if (rc == 0) rc = tr_data_open_for(&r->data, r->model, o->job.seed, NULL, NULL, err, n);
  if (rc == 0) rc = tr_device_list_open(&r->devs, o->devices, err, n);
  if (rc) return rc;
  r->c = o->job;
  r->c.model = r->model;
  r->c.data = r->data;
  r->c.strategy = tr_strategy_name(s);
  const int ndev = s == TR_STRATEGY_SINGLE ? 1 : tr_device_list_count(r->devs);
  if ((rc = tr__job_config_layout(&r->c, o, ndev, err, n))) return rc;
  const tr_layout_config *l = &r->c.layout;
  r->R = l->replicas, r->P = l->stages, r->T = l->tensor > 1 ? l->tensor : 1;
  r->M = l->microbatches > 0 ? l->microbatches : 1;
  r->v = tr_schedule_chunks(l->schedule, l->chunks);
  const int global = tr__job_global_batch(&r->c), pieces = r->P * r->v;
  r->async = s == TR_STRATEGY_ASYNC;
  r->mb = r->async ? global : global / (r->R * r->M); /* a worker trains whole batches */
  if (r->P * r->R * r->T > TR_PLAN_MAX_DEVICES || pieces > TR__MAX_STAGES)
    return tr_errorf(err, n, TR_EINVAL, TR__F("devices") ": %d devices: the planner predicts "
                     "at most %d", r->R * r->P * r->T, TR_PLAN_MAX_DEVICES);
  /* the cut the run makes: given, measured (planner.h), or by FLOPs */
  r->cuts[0] = 0;
  r->cuts[pieces] = tr_model_layer_count(r->model);
  if (l->cuts) memcpy(r->cuts + 1, l->cuts, (size_t)(pieces - 1) * sizeof *r->cuts);
  else if (pieces > 1 &&
           (o->deterministic || !tr__costs_cut(r->model, tr_device_list_at(r->devs, 0), &r->c,
                                                r->cuts)))
    tr_model_balance(r->model, pieces, r->cuts);
  r->c.layout.cuts = r->cuts + 1;
  r->c.layout.ncuts = pieces - 1;
  tr_job_config full = r->c; /* its rules, as tr_job_new checks them */
  if ((rc = tr__job_config_complete(&full, err, n))) return rc;
  r->c = full;
  r->member = r->model;
  if (r->T > 1 && (rc = tr_model_shard(r->model, 0, r->T, &r->member, err, n))) return rc;
  rc = tr_schedule_new(&r->sc, &(tr_schedule_config){.kind = r->c.layout.schedule, .stages = r->P,
                                                     .microbatches = r->M, .chunks = r->v});
  if (rc) snprintf(err, n, "layout.schedule: %s", tr_strerror(rc));
  return rc;
}

/* The layers' times of the run's member 0: the whole model's, or a tensor member's measured
 * beside the group's other members (their collectives meet: costs.c). */
static int member_times(const resolved *r, tr_device *d, const tr_plan_costs_config *cc,
                        tr_layer_times *t, bool *measured, char *err, size_t n) {
  if (r->T == 1) return tr_plan_layer_times(r->model, d, r->mb, cc, t, measured, err, n);
  tr_model *m[TR_PLAN_MAX_DEVICES] = {r->member};
  int rc = 0;
  for (int k = 1; k < r->T && rc == 0; k++) rc = tr_model_shard(r->model, k, r->T, &m[k], err, n);
  if (rc == 0) rc = tr__costs_member_times(m, r->devs, r->T, r->mb, cc, t, measured, err, n);
  for (int k = 1; k < r->T; k++) tr_model_free(m[k]);
  return rc;
}

typedef struct arrays {
  double per_byte; /* a copy on the device, per byte (tr__costs_copy_seconds, 8 MiB) */
  double per_byte_big; /* per byte of passes over the parameters beyond the caches */
  double f[TR__MAX_STAGES], b[TR__MAX_STAGES], w[TR__MAX_STAGES];
  double act[TR__MAX_STAGES], grad[TR__MAX_STAGES], step[TR_PLAN_MAX_DEVICES];
  double runtime; /* each device's step: its batch handed over, its report, the protocol */
  double latency; /* a message's hand-over to a parked actor (links.c) */
  double meet[TR_PLAN_MAX_DEVICES]; /* each device's replica group meeting, per step */
  double per_byte_params[TR_PLAN_MAX_DEVICES]; /* fill_steps': per_byte or per_byte_big */
  double opt[TR_PLAN_MAX_DEVICES], bytes[TR_PLAN_MAX_DEVICES]; /* each device's optimizer
                                                 step, its parameters' bytes (fill_steps) */
  size_t slot[TR__MAX_STAGES], work[TR__MAX_STAGES], state[TR_PLAN_MAX_DEVICES];
} arrays;

/* Each virtual stage's passes and memory, each device's step. */
static int fill(const resolved *r, const tr_layer_times *t, tr_device *d,
                const tr_plan_costs_config *cc, arrays *a, char *err, size_t n) {
  const bool split = r->c.layout.schedule == TR_SCHEDULE_ZB1, re = r->c.memory.recompute;
  const double per_byte = a->per_byte =
      tr__costs_copy_seconds(d, (size_t)8 << 20) / (double)(8 << 20);
  double latency = 0; /* edges between stages, the replica group's meetings, async pushes */
  const int rc = r->P > 1 || r->R > 1 ? tr__costs_link(d, cc, &latency, err, n) : 0;
  a->latency = latency;
  if (rc) return rc;
  for (int k = 0; k < r->P * r->v; k++) {
    double f = 0, b = 0, w = 0;
    for (int l = r->cuts[k]; l < r->cuts[k + 1]; l++) {
      f += t[l].forward;
      b += split ? t[l].backward_input + t[l].backward_weight : t[l].backward;
      w += split ? t[l].backward_weight : 0;
    }
    a->f[k] = f, a->b[k] = b + (re ? f : 0), a->w[k] = w; /* recomputation: a forward again */
    tr_stage_config c = {.first = r->cuts[k], .end = r->cuts[k + 1], .batch = r->mb,
                         .slots = tr_schedule_chunk_slots(r->sc, k % r->P, k / r->P),
                         .recompute = re, .split = split, .global_batch = r->c.global_batch,
                         .optim = r->c.optim, .precision = r->c.precision};
    tr_stage_info info;
    size_t scratch;
    const int planned = tr_stage_plan(r->member, &c, &info, &scratch, err, n);
    if (planned) return planned;
    a->slot[k] = info.slot_bytes, a->work[k] = info.work_bytes;
    const size_t state = r->c.zero && r->R > 1 ? info.state_numel / (size_t)r->R : info.state_numel;
    a->state[k % r->P] += (2 * info.numel + state) * sizeof(float) + info.scratch_bytes +
                          info.params16_bytes + scratch;
    a->act[k] = latency + (double)info.output_bytes * per_byte; /* the receiver's copy */
    a->grad[k] = latency + (double)info.input_bytes * per_byte;
    /* replica 0's edges that cross to another rank go through the transports */
    const int here = rank_at(r, 0, k % r->P);
    if (k + 1 < r->P * r->v && rank_at(r, 0, (k + 1) % r->P) != here)
      a->act[k] += crossing(r, latency, per_byte, (double)info.output_bytes) - latency;
    if (k > 0 && rank_at(r, 0, (k - 1) % r->P) != here)
      a->grad[k] += crossing(r, latency, per_byte, (double)info.input_bytes) - latency;
    /* the micro-batch's inputs into the first stage's slot, its targets into the last's */
    if (info.is_first) a->f[k] += (double)info.input_bytes * per_byte;
    if (info.is_last) a->f[k] += (double)info.target_bytes * per_byte;
  }
  return 0;
}

/* How many ranks stage s's replica group spans, and the most of its members on one. */
static void group_ranks(const resolved *r, int s, int *ranks, int *local) {
  *ranks = 0, *local = 0;
  for (int i = 0; i < r->R; i++) {
    int same = 0, seen = 0;
    for (int j = 0; j < r->R; j++) same += rank_at(r, j, s) == rank_at(r, i, s);
    for (int j = 0; j < i; j++) seen |= rank_at(r, j, s) == rank_at(r, i, s);
    *ranks += !seen;
    if (same > *local) *local = same;
  }
}

/* What stage s's sums across ranks add to its step (group.c: each rank's leader hands a
 * bucket to the transport's thread once its members have summed it, which sums it with the
 * other ranks' by MPI and hands it back): the buckets, last layers first, each final once
 * the backward of the step's last micro-batch passes its lowest layer, summed one after
 * another; what is left when that backward ends. MPI's sums between processes of one machine
 * are copies by the CPUs: with every CPU computing (`spare` false) they take their time from
 * the devices' and hide nothing (mlp dp on 2 ranks of 2 CPUs ran 10% slower than in one
 * process, where hidden sums would have made it faster). Local SGD's sums (every H steps, of
 * the parameters) and those of chunks (interleaved) come after the backward, none hidden. */
static int across_ranks(const resolved *r, const tr_layer_times *t, int s, double latency,
                        bool spare, double *seconds) {
  *seconds = 0;
  const bool hidden = spare && r->v == 1 && r->c.local.sync_every <= 0;
  for (int k = s; k < r->P * r->v; k += r->P) {
    const int first = r->cuts[k], end = r->cuts[k + 1];
    const int nb = tr__group_buckets(r->member, first, end);
    int *low = malloc((size_t)nb * sizeof *low);
    size_t *floats = malloc((size_t)nb * sizeof *floats);
    int rc = low && floats ? tr__group_bucket_plan(r->member, first, end, low, floats) : TR_ENOMEM;
    double backward = 0, done = 0; /* the backward so far; the last sum's end */
    for (int b = 0, l = end - 1; b < nb && rc == 0; b++) {
      for (; l >= low[b]; l--) backward += hidden ? t[l].backward : 0;
      const double start = backward > done ? backward : done;
      done = start + 2 * latency + r->links->sum +
             (double)floats[b] * sizeof(float) * r->links->sum_per_byte;
    }
    for (int l = first; l < end && hidden; l++) done -= t[l].backward; /* past the backward */
    *seconds += done > 0 ? done : 0;
    free(low);
    free(floats);
    if (rc) return rc;
  }
  return 0;
}

/* Each device's step: the optimizer's and, with replicas, the group's sums (local SGD: of the
 * parameters, every H steps; an async worker: none, the server updates). On host devices
 * a member sums its chunk of every bucket over the members and writes it to each of them on
 * its own thread: about the gradients' bytes read and written once more, after the backward
 * (host streams run in order on the device's thread, hiding nothing). ZeRO-1 updates a shard
 * of 1/R and gathers the others: the parameters' bytes written once more. */
static int fill_steps(const resolved *r, const tr_layer_times *t, tr_device *d,
                      const tr_plan_costs_config *cc, arrays *a, char *err, size_t n) {
  int rc = tr__costs_bandwidth(d, cc, &a->per_byte_big, err, n);
  const bool norm = r->c.on_nonfinite == TR_NONFINITE_SKIP; /* checked: computed each step */
  /* a machine's host devices leave CPUs to the transports' threads only where fewer */
  const int machines = r->links ? r->links->machines : 1;
  const bool spare = tr_device_info_of(d)->kind != TR_DEVICE_HOST ||
                     (r->R * r->P * r->T + machines - 1) / machines < tr__plan_cpus();
  for (int s = 0; s < r->P && rc == 0; s++) {
    size_t numel = 0;
    double opt = 0; /* its chunks' steps, each over a stage of its own */
    for (int k = s; k < r->P * r->v && rc == 0; k += r->P) {
      size_t off, cnt, mine = 0, whole = 0;
      for (int l = r->cuts[k]; l < r->cuts[k + 1]; l++) {
        tr_model_layer_span(r->member, l, &off, &cnt);
        mine += cnt;
        tr_model_layer_span(r->model, l, &off, &cnt);
        whole += cnt;
      }
      numel += mine;
      /* a tensor member's stage opens only beside its group: its share of the whole's */
      double chunk;
      rc = tr__costs_step(r->model, d, &r->c.optim, norm, r->cuts[k], r->cuts[k + 1], cc,
                          &chunk, err, n);
      opt += whole ? chunk * (double)mine / (double)whole : 0;
    }
    const double bytes = (double)numel * sizeof(float);
    /* passes over parameters larger than the caches go at the memory's pace (the file's;
     * fill's 8 MiB copy where it has none) */
    const double per_byte = bytes > (8 << 20) && a->per_byte_big > a->per_byte ? a->per_byte_big
                                                                               : a->per_byte;
    a->per_byte_params[s] = per_byte;
    const int H = r->c.local.sync_every; /* local SGD: the parameters summed every H steps */
    a->opt[s] = opt, a->bytes[s] = bytes;
    /* across ranks, the members on one rank sum in memory first (none alone) */
    int ranks = 1, local = r->R;
    if (r->rank_of && r->R > 1 && !r->async) group_ranks(r, s, &ranks, &local);
    const double sums = local > 1 ? 2 * bytes * per_byte : 0;
    /* a local sync (policy_local.c) copies the parameters into the gradients' allocation,
     * sums them, takes their mean, each replica's distance from it and the divergence's two
     * sums, and copies the mean back: about 8 passes over the parameters where dp's sum is 2
     * (mlp host:2 --sync-every 1 ran 20 ms a step slower than dp: 6 passes of 33.5 MB) */
    const double sync = 8 * bytes * per_byte;
    a->step[s] = r->async               ? 0 /* the server's update: predict_async.c */
                 : r->R > 1 && r->c.zero ? opt / r->R + sums
                 : r->R > 1 && H > 0     ? opt + sync / H
                 : r->R > 1              ? opt + sums
                                         : opt;
    /* the group's last bucket is a meeting: each member waits for the others' chunks, then
     * for their sums (two hand-overs to a parked thread), whatever the bytes; waiting, not
     * computing, so not slowed by the devices at once */
    a->meet[s] = r->R > 1 && !r->async ? 2 * a->latency / (H > 0 ? H : 1) : 0;
    double across = 0; /* communication, as the meeting: not slowed by the devices at once */
    if (rc == 0 && ranks > 1) rc = across_ranks(r, t, s, a->latency, spare, &across);
    a->meet[s] += across / (H > 0 ? H : 1);
  }
  return rc;
}

/* One step simulated with the costs scaled by `slow` (host devices sharing threads). */
static int simulate(const resolved *r, const arrays *a, double slow, double step_slow,
                    tr_plan_step *st, char *err, size_t n) {
  arrays x = *a;
  for (int k = 0; k < r->P * r->v; k++) x.f[k] *= slow, x.b[k] *= slow, x.w[k] *= slow;
  for (int s = 0; s < r->P; s++) /* the runtime's work and the meetings are not compute */
    x.step[s] = x.step[s] * step_slow + a->runtime + a->meet[s];
  return tr_plan_simulate(r->sc,
                          &(tr_plan_costs){.forward = x.f, .backward = x.b, .backward_weight = x.w,
                                           .act_latency = x.act, .grad_latency = x.grad,
                                           .step = x.step, .slot_bytes = a->slot,
                                           .work_bytes = a->work},
                          st, err, n);
}

/* Host devices that compute at once share the machine: each is as much slower as its
 * measured slowdown with all D at work, in proportion to how many are busy on average; the
 * step simulated again with it. */
static int shared_machine(const resolved *r, const arrays *a, tr_device *d,
                          const tr_plan_costs_config *cc, tr_plan_step *st, char *err, size_t n) {
  int D = r->R * r->P * r->T;
  const int machines = r->links ? r->links->machines : 1; /* each machine's devices share it */
  D = (D + machines - 1) / machines;
  double together = 1, within = 1; /* within: a tensor group's own, in its members' times */
  int rc = 0;
  if (tr_device_info_of(d)->kind == TR_DEVICE_HOST && D > r->T && st->seconds > 0)
    rc = tr__costs_together(r->model, r->devs, D, r->mb, cc, &together, err, n);
  if (rc == 0 && together > 1 && r->T > 1)
    rc = tr__costs_together(r->model, r->devs, r->T, r->mb, cc, &within, err, n);
  if (rc) return rc;
  double busy = 0; /* devices at work, on average: every replica and member alike */
  for (int s = 0; s < r->P; s++) busy += st->busy[s] / st->seconds * r->R * r->T / machines;
  const bool host = tr_device_info_of(d)->kind == TR_DEVICE_HOST;
  const int cpus = host ? tr__plan_cpus() : D; /* devices of their own share no CPUs */
  const double slow = tr__plan_slowdown(together, within, D, r->T, cpus, busy);
  /* every device steps at once, each timed alone: a tensor group's members too, whose
   * passes were timed beside each other (within) but whose steps were not */
  const double all = D > cpus ? (double)D / cpus : 1, step_slow = slow > all ? slow : all;
  return slow > 1 || step_slow > 1 ? simulate(r, a, slow, step_slow, st, err, n) : 0;
}

double tr__plan_slowdown(double together, double within, int D, int T, int cpus, double busy) {
  double beyond = within > 0 && together / within > 1 ? together / within : 1;
  /* D threads on fewer CPUs each have cpus / D of one at most, the T measured together
   * cpus / T at most (a factor measured on a loaded machine can say less) */
  const double share = (D > cpus ? (double)D / cpus : 1) / (T > cpus ? (double)T / cpus : 1);
  if (beyond < share) beyond = share;
  if (D < 2 || busy <= 1) return 1;
  return 1 + (beyond - 1) * (busy < D ? busy - 1 : D - 1) / (D - 1);
}

/* R async workers and their server (predict_async.c): a worker's compute is the step just
 * simulated (its forwards and backwards of a whole batch, its inputs' copies); the server's
 * update of a push (server.c) is the optimizer over the parameters, the copy of them into
 * the worker's memory with the reply, four passes that read them (the worker's distance from
 * the server's: the two sets' difference and the server's own sum of squares; the gradient's
 * norm, checked for every push), as much traffic as two copies, and delay compensation's
 * three passes when asked. Without those reads, mlp's async rows on host:2 came out 27-31%
 * fast. */
enum { SERVER_COPIES = 3, DC_COPIES = 3 };
static int async_rate(const resolved *r, const arrays *a, tr_device *d,
                      const tr_plan_costs_config *cc, const tr_plan_step *st, tr__async_step *as,
                      char *err, size_t n) {
  tr__async_costs c = {.workers = r->R, .compute = st->seconds, .together = 1,
                       .staleness = r->c.async.staleness,
                       .apply = a->opt[0] + a->bytes[0] * a->per_byte_params[0] *
                                                (SERVER_COPIES +
                                                 (r->c.async.dc_lambda > 0 ? DC_COPIES : 0))};
  c.latency = a->latency; /* fill's */
  int rc = 0;
  if (r->R == 1) rc = tr__costs_link(d, cc, &c.latency, err, n);
  if (r->links) { /* the pushes and replies of workers on other ranks than the server's (0) */
    int away = 0;
    for (int i = 0; i < r->R; i++) away += rank_at(r, i, 0) != 0;
    const double cross = crossing(r, c.latency, a->per_byte_params[0], a->bytes[0]);
    c.latency += (cross - c.latency) * away / r->R;
  }
  if (tr_device_info_of(d)->kind == TR_DEVICE_HOST) c.cpus = tr__plan_cpus();
  if (rc == 0 && tr_device_info_of(d)->kind == TR_DEVICE_HOST && r->R > 1)
    rc = tr__costs_together(r->model, r->devs, r->R, r->mb, cc, &c.together, err, n);
  if (rc == 0 && tr__plan_async(&c, as))
    rc = tr_errorf(err, n, TR_EINVAL, "the async workers' costs: compute %g s, apply %g s",
                   c.compute, c.apply);
  return rc;
}

/* Across processes: each device's rank and the links between them (NULL in one process). */
typedef struct ranks {
  const int *rank_of;
  const tr__rank_links *links;
} ranks;

static int predict(const tr_train_options *o, const tr_plan_costs_config *cc, bool overhead,
                   const ranks *rk, tr_plan_prediction *out, char *err, size_t n);

/* tr__costs_overhead's reference: simplenet alone on `spec`, its layers measured and not
 * kept (the file is written once, with the overhead's entry). */
static int bare_single(const char *spec, double *step_seconds, char *err, size_t n) {
  tr_train_options o = tr_train_defaults();
  o.devices = spec;
  o.model = "simplenet";
  o.strategy = TR_STRATEGY_SINGLE;
  tr_plan_prediction p;
  const int rc = predict(&o, &(tr_plan_costs_config){.path = ""}, false, NULL, &p, err, n);
  *step_seconds = p.step_seconds;
  return rc;
}

/* The prediction, with the runtime's own work per step (costs_overhead.c) or without it
 * (what that cost is measured against). */
static int predict(const tr_train_options *o, const tr_plan_costs_config *cc, bool overhead,
                   const ranks *rk, tr_plan_prediction *out, char *err, size_t n) {
  *out = (tr_plan_prediction){0};
  resolved r = {.rank_of = rk ? rk->rank_of : NULL, .links = rk ? rk->links : NULL};
  arrays *a = calloc(1, sizeof *a);
  int rc = a ? resolve(o, &r, err, n) : TR_ENOMEM;
  tr_layer_times *t = NULL;
  tr_device *d = r.devs ? tr_device_list_at(r.devs, 0) : NULL;
  if (rc == 0 && !(t = malloc((size_t)tr_model_layer_count(r.member) * sizeof *t))) rc = TR_ENOMEM;
  if (rc == 0) rc = member_times(&r, d, cc, t, &out->measured, err, n);
  if (rc == 0) rc = tr_device_bind(d); /* its copies and steps timed here */
  if (rc == 0) rc = fill(&r, t, d, cc, a, err, n);
  if (rc == 0) rc = fill_steps(&r, t, d, cc, a, err, n);
  if (rc == 0 && overhead) rc = tr__costs_overhead(d, cc, bare_single, &a->runtime, err, n);
  if (r.links) a->runtime += 2 * r.links->message; /* a step handed out by rank 0, its report */
  tr_plan_step st;
  if (rc == 0) rc = simulate(&r, a, 1.0, 1.0, &st, err, n);
  const int D = r.R * r.P * r.T;
  tr__async_step as = {0};
  if (rc == 0 && !r.async) rc = shared_machine(&r, a, d, cc, &st, err, n);
  if (rc == 0 && r.async) rc = async_rate(&r, a, d, cc, &st, &as, err, n);
  if (rc == 0) {
    const double seconds = r.async ? 1 / as.pushes_per_s : st.seconds; /* a global batch */
    *out = (tr_plan_prediction){.step_seconds = seconds,
                                .samples_per_s = seconds > 0 ? r.c.global_batch / seconds : 0,
                                .bubble = r.async ? 1 - as.utilization : st.bubble,
                                .devices = D, .replicas = r.R,
                                .stages = r.P, .tensor = r.T, .microbatches = r.M, .chunks = r.v,
                                .schedule = r.c.layout.schedule, .microbatch_samples = r.mb,
                                .staleness = r.async ? as.staleness : 0,
                                .measured = out->measured};
    for (int i = 0; i < D; i++) { /* device (r·P + s)·T + t */
      const int s = i / r.T % r.P;
      out->utilization[i] = r.async ? as.utilization : st.seconds > 0 ? st.busy[s] / st.seconds : 0;
      out->peak_activation_bytes[i] = st.peak_activation_bytes[s];
      out->state_bytes[i] = a->state[s];
    }
    out->memory_free = tr_device_info_of(d)->memory_free;
    out->host = tr_device_info_of(d)->kind == TR_DEVICE_HOST;
  }
  tr__error_unmark(err);
  free(t);
  free(a);
  release(&r);
  return rc;
}

int tr_plan_predict(const tr_train_options *o, const tr_plan_costs_config *cc,
                    tr_plan_prediction *out, char *err, size_t n) {
  if (o == NULL || out == NULL)
    return tr_errorf(err, n, TR_EINVAL, "tr_plan_predict: %s is NULL", o ? "out" : "o");
  char scratch[512]; /* err NULL or of no size: nothing written (tr_base.h) */
  if (err == NULL || n == 0) err = scratch, n = sizeof scratch;
  return predict(o, cc, true, NULL, out, err, n);
}

int tr__plan_predict_ranks(const tr_train_options *o, const tr_plan_costs_config *cc,
                           const int *rank_of, const tr__rank_links *links,
                           tr_plan_prediction *out, char *err, size_t n) {
  return predict(o, cc, true, &(ranks){rank_of, links}, out, err, n);
}

int tr__plan_predict_bare(const tr_train_options *o, const tr_plan_costs_config *cc,
                          tr_plan_prediction *out, char *err, size_t n) {
  return predict(o, cc, false, NULL, out, err, n);
}

/* A run across processes: the links timed where rank 0's file of costs has none (every rank
 * together), and the run predicted on rank 0 as its devices in one process, each on its rank.
 * Host devices only: GPUs' edges and sums go by NCCL, whose links are not timed. */
static bool across_processes(const tr_train_options *o, const tr_device_list *devices,
                             bool faulty, const tr_plan_costs_config *cc, tr_plan_prediction *p) {
  tr_world *w = o->world;
  const int D = tr_device_list_count(devices), size = tr_world_size(w);
  bool host = D > 0 && D <= TR_PLAN_MAX_DEVICES && size <= TR_PLAN_MAX_DEVICES;
  for (int i = 0; i < D && host; i++) /* every rank's list is the job's: alike everywhere */
    host = tr_device_info_of(tr_device_list_at(devices, i))->kind == TR_DEVICE_HOST;
  char err[256];
  tr__rank_links links;
  if (!host || tr__costs_ranks(w, tr_device_list_at(devices, 0), cc, &links, err, sizeof err))
    return false;
  bool slowed[TR_PLAN_MAX_DEVICES]; /* a rank's devices slowed on purpose slow the job */
  if (tr_world_allgather(w, &faulty, sizeof faulty, slowed)) return false;
  for (int r = 0; r < size; r++) faulty |= slowed[r];
  if (tr_world_rank(w) != 0 || faulty) return false;
  int rank_of[TR_PLAN_MAX_DEVICES];
  for (int i = 0; i < D; i++) rank_of[i] = tr_world_device_rank(w, tr_device_list_at(devices, i));
  char spec[32];
  snprintf(spec, sizeof spec, "host:%d", D);
  tr_train_options one = *o;
  one.devices = spec;
  one.world = NULL;
  return tr__plan_predict_ranks(&one, cc, rank_of, &links, p, err, sizeof err) == 0;
}

bool tr__plan_run(const tr_train_options *o, const tr_device_list *devices,
                  tr_plan_prediction *p) {
  char err[256];
  *p = (tr_plan_prediction){0};
  const tr_plan_costs_config cc = {.layers_cached = 1}; /* no model's worth before the run */
  /* devices slowed or failing on purpose (fault(...), tests'): no costs say what they do */
  const bool faulty = o->devices && !strncmp(o->devices, "fault(", 6);
  if (tr_world_size(o->world) > 1) return across_processes(o, devices, faulty, &cc, p);
  return !faulty && tr_plan_predict(o, &cc, p, err, sizeof err) == 0;
}

void tr__plan_result(const tr_plan_prediction *p, tr_result *r) {
  if (!(p->samples_per_s > 0) || p->devices != tr__result_devices(r)) return;
  tr__result_set_real(r, TR__M_PREDICTED_SAMPLES_PER_S, p->samples_per_s);
  tr__result_set_real(r, TR__M_PREDICTED_STEP_SECONDS, p->step_seconds);
  tr__result_set_real(r, TR__M_PREDICTED_ERROR,
                      p->samples_per_s / tr__result_real(r, TR__M_SAMPLES_PER_S) - 1);
  double worst = 0;
  for (int i = 0; i < p->devices; i++) {
    tr__result_set_int_at(r, TR__M_PREDICTED_PEAK, i, (int64_t)p->peak_activation_bytes[i]);
    const double m = (double)tr__result_int_at(r, TR__M_PEAK_ACTIVATION_BYTES, i);
    const double e = m > 0 ? fabs((double)p->peak_activation_bytes[i] / m - 1) : 0;
    if (e > worst) worst = e;
  }
  tr__result_set_real(r, TR__M_PREDICTED_PEAK_ERROR, worst);
}
