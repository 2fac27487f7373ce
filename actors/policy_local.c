/* policy_local.c — local SGD, post-local SGD and DiLoCo (tr_job_config.local, strategy
 * local): each replica updates from its own gradient (the mean over its own samples) for
 * sync_every steps, then the replica group sums the replicas' parameters (one all-reduce of
 * parameters, through the same buckets as dp's gradients: group.c) and every replica takes
 * their mean, or DiLoCo's outer step from it. The first warmup_sync steps are dp's: the
 * gradients summed every step, as policy_sync.c does.
 *
 * The parameters go through the group in the gradients' allocation (the sum is written
 * there, member order, the same bits on every member): at a sync the update has run and the
 * gradients are zero, so the stage's parameters are copied into it, every bucket announced
 * at once, and once summed the mean is taken from it. The stage's loss is scaled by
 * 1/global_batch (dp's sum of the replicas' gradients is the global mean); a local step
 * scales its gradients by the replicas first, so that each replica's is the mean over its
 * own share of the batch.
 *
 * Elastic (tr_async_config.elastic, elastic.c): a replica whose stage fails leaves. It tells
 * its group (group.h: tr__group_leave, behind the buckets it sent) and the coordinator (a
 * done message whose figures say the step it left at), and says so on stderr. Each later
 * sync averages the replicas taking part in it: their sum over their count (DiLoCo's
 * pseudo-gradient: their mean change); a warm-up step's gradient sum is scaled likewise to
 * their mean. A replica that fails after it began sending a sync's parameters cannot leave
 * consistently: the run fails, saying so.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "group.h"
#include "step_policy.h"
#include "collective.h"
#include "graph_impl.h"

/* Where the step action is: dp's sums (warm-up), the update, the parameters sent, summed. */
enum { REDUCE, UPDATE, SEND, AVERAGE };

typedef struct local_policy {
  tr__group *group; /* NULL: one replica (its syncs are DiLoCo's outer step alone) */
  tr__clip *clip;
  tr__policy_ctx ctx;
  tr_local_config cf;
  int replicas;
  int phase;
  int64_t skipped;
  size_t numel;
  float *global, *velocity; /* DiLoCo: the parameters of the last sync, the outer momentum */
  float *sums;              /* [2] on the device: ||θ_r − mean||², ||mean||² */
  float *host;              /* [2] the last sync's, copied out */
  tr_event *landed;         /* host holds them */
  bool pending;             /* host's not yet read */
  double divergence;        /* the largest ||θ_r − mean|| / ||mean|| before a sync */
  int64_t syncs;
  /* elastic: the step in hand, and once it left, at which step and whether the coordinator
   * has been told */
  int64_t step;
  bool opened, gone, told;
  char why[256];
} local_policy;

static bool warm(const local_policy *p, int64_t step) { return step < p->cf.warmup_sync; }

/* Whether the replicas sync after step `step`'s update. */
static bool syncs_after(const local_policy *p, int64_t step) {
  return !warm(p, step) && (step + 1 - p->cf.warmup_sync) % p->cf.sync_every == 0;
}

static tr_stage *stage_of(const local_policy *p) { return p->ctx.chunks[0]; }

/* The replicas taking part in step `step`'s sums: every one but those that left (a group
 * across processes holds this process's members, and none of them leaves: group.h). */
static int alive(const local_policy *p, int64_t step) {
  return p->replicas - tr__group_gone(p->group, step);
}

static int fail(const local_policy *p, const char *what) {
  return tr_actor_fail(p->ctx.self, TR_EDEVICE, "local SGD: %s on %s: %s", what,
                       tr_device_name(p->ctx.dev), tr_device_error(p->ctx.dev));
}

static tr_stage_shard shard(const void *state) {
  (void)state;
  return (tr_stage_shard){0};
}

/* A resumed run: replica r's parameters and state where the checkpoint holds them (it
 * was written mid-period: the replicas differed), and DiLoCo's outer state; a checkpoint
 * without them (at a sync, or of dp) leaves every replica replica 0's, and the outer
 * parameters those, its momentum zero. */
static int resume(local_policy *p, const tr_checkpoint *ck) {
  tr_stage *st = stage_of(p);
  char lead[24], err[512] = "";
  snprintf(lead, sizeof lead, "replica%d", p->ctx.replica);
  int rc = 0;
  if (p->ctx.replica > 0 && tr__stage_saved_as(st, ck, lead))
    rc = tr__stage_load_as(st, ck, lead, err, sizeof err);
  const char *outer[2] = {"outer.global", "outer.velocity"};
  float *host = NULL;
  for (int k = 0; k < 2 && rc == 0 && p->global; k++) {
    if (!tr__stage_saved_as(st, ck, outer[k])) continue;
    if (!host && !(host = malloc((p->numel ? p->numel : 1) * sizeof *host))) return TR_ENOMEM;
    if ((rc = tr__stage_read_extra(st, ck, outer[k], host, err, sizeof err)) == 0 &&
        (tr_memcpy(p->ctx.s, k ? p->velocity : p->global, host, p->numel * sizeof *host,
                   TR_COPY_H2D) || tr_stream_synchronize(p->ctx.s)))
      rc = fail(p, "resuming DiLoCo's outer state");
  }
  free(host);
  return rc && rc != TR_EDEVICE ? tr_actor_fail(p->ctx.self, TR_EFORMAT, "%s", err) : rc;
}

static int open(void *state, const tr__policy_ctx *ctx) {
  local_policy *p = state;
  p->ctx = *ctx;
  p->replicas = ctx->run->c.layout.replicas;
  p->cf = ctx->run->c.local;
  tr_stage *st = ctx->chunks[0]; /* one chunk: job_config refuses interleaving */
  p->numel = tr_stage_info_of(st)->numel;
  const size_t bytes = (p->numel ? p->numel : 1) * sizeof(float);
  int rc;
  if (p->group) {
    if ((rc = tr__group_open(p->group, ctx->self, st, ctx->busy))) return rc;
    tr_stage_on_grad_ready(st, tr__group_grad_ready, p->group);
    if (tr_device_alloc(ctx->dev, 2 * sizeof(float), (void **)&p->sums) ||
        tr_host_alloc(ctx->dev, 2 * sizeof(float), (void **)&p->host) ||
        tr_event_open(ctx->dev, TR_EVENT_DEFAULT, &p->landed))
      return fail(p, "allocating the divergence's sums");
  }
  if (p->cf.outer == TR_OUTER_NESTEROV &&
      (tr_device_alloc(ctx->dev, bytes, (void **)&p->global) ||
       tr_device_alloc(ctx->dev, bytes, (void **)&p->velocity) ||
       tr_memcpy(ctx->s, p->global, tr_stage_params(st), p->numel * sizeof(float), TR_COPY_D2D) ||
       tr_memset(ctx->s, p->velocity, 0, p->numel * sizeof(float))))
    return fail(p, "allocating DiLoCo's outer state");
  const tr_checkpoint *ck = ctx->run->c.checkpoint.resume_from;
  if (ck && (rc = resume(p, ck))) return rc;
  if (!p->clip && !(p->clip = tr__clip_new(1, 0, NULL, NULL))) return TR_ENOMEM;
  if ((rc = tr__clip_open(p->clip, ctx->self, ctx->chunks, ctx->nch, ctx->busy))) return rc;
  p->opened = true;
  return 0;
}

static int begin(void *state, int64_t step, const tr__lent *head, bool ended, int64_t *run_step) {
  (void)head, (void)ended;
  ((local_policy *)state)->step = step;
  return tr__policy_claim(&((local_policy *)state)->ctx, step, run_step);
}

/* Warm-up: dp's buckets. A local step: the replica's gradient made its own mean. */
static int last_backward(void *state, int64_t step, bool after) {
  local_policy *p = state;
  if (p->group == NULL) return 0;
  if (warm(p, step)) {
    if (after) return tr__group_disarm(p->group);
    tr__group_arm(p->group, step);
    return 0;
  }
  if (after && tr_scale(p->ctx.s, tr_stage_grads(stage_of(p)), (float)p->replicas, p->numel))
    return fail(p, "scaling the gradients");
  return 0;
}

/* The last sync's divergence, once copied out (read at the next sync, or the end: it is
 * not waited for where it is made). */
static int read_divergence(local_policy *p) {
  if (!p->pending) return 0;
  if (tr_event_synchronize(p->landed)) return fail(p, "reading the divergence");
  const double d = p->host[0], m = p->host[1];
  const double rel = m > 0 ? sqrt(d / m) : sqrt(d);
  if (!(rel <= p->divergence)) p->divergence = rel; /* NaN stays */
  p->pending = false;
  return 0;
}

/* The group's sum of the parameters is in the gradients' allocation: their mean, this
 * replica's distance from it, then what every replica takes (the mean, or DiLoCo's step). */
static int outer_step(local_policy *p, int64_t step) {
  tr_stream *s = p->ctx.s;
  tr_stage *st = stage_of(p);
  float *params = tr_stage_params(st), *mean = params;
  const size_t n = p->numel;
  if (p->group) {
    mean = tr_stage_grads(st);
    if (read_divergence(p) ||
        tr_scale(s, mean, 1.0f / (float)alive(p, step), n) ||
        tr_axpy(s, params, -1.0f, mean, n) || /* θ_r − mean, θ_r no longer needed */
        tr_sumsq(s, p->sums, params, n, 0) || tr_sumsq(s, p->sums + 1, mean, n, 0) ||
        tr_memcpy(s, p->host, p->sums, 2 * sizeof(float), TR_COPY_D2H) ||
        tr_event_record(p->landed, s))
      return fail(p, "averaging the parameters");
    p->pending = true;
  }
  p->syncs++;
  if (p->cf.outer == TR_OUTER_NESTEROV) {
    /* mean := Δ = θ_global − mean; v = μ v + Δ; θ_global −= lr (Δ + μ v) */
    const float mu = p->cf.outer_momentum;
    if (tr_scale(s, mean, -1.0f, n) || tr_axpy(s, mean, 1.0f, p->global, n) ||
        tr_scale(s, p->velocity, mu, n) || tr_axpy(s, p->velocity, 1.0f, mean, n) ||
        tr_axpy(s, mean, mu, p->velocity, n) || tr_axpy(s, p->global, -p->cf.outer_lr, mean, n))
      return fail(p, "DiLoCo's outer step");
    mean = p->global;
  }
  if (mean != params && tr_memcpy(s, params, mean, n * sizeof(float), TR_COPY_D2D))
    return fail(p, "taking the synced parameters");
  if (tr_stage_zero_grads(st)) /* after writing the parameters (tr_stage.h) */
    return tr_actor_fail(p->ctx.self, TR_EDEVICE, "local SGD on %s: %s",
                         tr_device_name(p->ctx.dev), tr_stage_error(st));
  return 0;
}

/* The replica's own update (every replica's alike in warm-up), or none when the norm is not
 * finite and on_nonfinite skips: the sync that may follow takes place all the same. */
static int own_update(local_policy *p, int64_t step) {
  const float *sumsq = NULL;
  double norm2 = 0;
  int rc = tr__clip_global(p->clip, step, &sumsq, &norm2);
  if (rc != TR__DONE) return rc;
  tr_stage *st = stage_of(p);
  if (!isfinite(norm2)) {
    if (p->ctx.run->c.on_nonfinite != TR_NONFINITE_SKIP)
      return tr__policy_not_finite(&p->ctx, step, "the gradient norm", sqrt(norm2));
    p->skipped++;
  }
  tr__busy *b = p->ctx.busy;
  const uint64_t t0 = tr__busy_start(b, p->ctx.self, step, "update", -1);
  rc = (isfinite(norm2) && tr_stage_step(st, sumsq)) || tr_stage_zero_grads(st);
  tr__busy_add(b, p->ctx.self, step, "update", t0, -1);
  if (rc)
    return tr_actor_fail(p->ctx.self, TR_EDEVICE, "optimizer step on %s: %s",
                         tr_device_name(p->ctx.dev), tr_stage_error(st));
  return TR__DONE;
}

static int update(void *state, int64_t step, int64_t run_step) {
  local_policy *p = state;
  (void)run_step;
  int rc;
  if (p->phase == REDUCE) {
    if (warm(p, step) && p->group) {
      if ((rc = tr__group_wait(p->group, step, p->ctx.s)) != TR__DONE) return rc;
      const int k = alive(p, step); /* their mean, when one left */
      if (k < p->replicas && tr_scale(p->ctx.s, tr_stage_grads(stage_of(p)),
                                      (float)p->replicas / (float)k, p->numel))
        return fail(p, "scaling the gradients");
    }
    p->phase = UPDATE;
  }
  if (p->phase == UPDATE) {
    if ((rc = own_update(p, step)) != TR__DONE) return rc;
    p->phase = SEND;
  }
  if (p->phase == SEND) {
    if (!syncs_after(p, step)) {
      p->phase = REDUCE;
      return TR__DONE;
    }
    if (p->group) { /* the parameters into the (zeroed) gradients, every bucket announced */
      tr_stage *st = stage_of(p);
      if (tr_memcpy(p->ctx.s, tr_stage_grads(st), tr_stage_params(st), p->numel * sizeof(float),
                    TR_COPY_D2D))
        return fail(p, "sending the parameters");
      tr__group_arm(p->group, step);
      if ((rc = tr__group_disarm(p->group))) return rc;
    }
    p->phase = AVERAGE;
  }
  if (p->group && (rc = tr__group_wait(p->group, step, p->ctx.s)) != TR__DONE) return rc;
  const uint64_t t0 = tr__busy_start(p->ctx.busy, p->ctx.self, step, "sync", -1);
  rc = outer_step(p, step);
  tr__busy_add(p->ctx.busy, p->ctx.self, step, "sync", t0, -1);
  if (rc) return rc;
  p->phase = REDUCE;
  return TR__DONE;
}

/* ---- elastic: a replica that leaves ------------------------------------------------------ */

/* The stage's report edge to the coordinator (the job wires one per stage). */
static tr_edge *report_edge(const local_policy *p) {
  tr_graph *g = p->ctx.run->g;
  for (int i = 0; i < tr__graph_edge_count(g); i++) {
    tr_edge *e = tr__graph_edge(g, i);
    if (tr_edge_from(e) == p->ctx.self && !strcmp(tr_edge_name(e), "report")) return e;
  }
  return NULL;
}

/* The coordinator hears it left, once a credit of the report edge is free: a done message
 * whose figures hold only the step and why (it counts the replica out of the steps after its
 * last loss, the evaluations and checkpoints after that step, and the run's end). */
static void tell(local_policy *p) {
  tr_edge *e = report_edge(p);
  if (p->told || e == NULL || !tr_edge_acquire(e)) return;
  tr__done_msg *d = tr_msg_new(&tr__done_type);
  d->report = (tr__report){0}; /* its figures: these two pairs alone */
  d->source = tr__stage_index(p->ctx.run, p->ctx.replica, 0, p->ctx.stage);
  snprintf(d->report.device, sizeof d->report.device, "%s", tr_device_name(p->ctx.dev));
  tr__figures_int(&d->report.fig, TR__M_REPLICA_LEFT_AT, p->step);
  char why[200]; /* the figures' text holds it */
  snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, p->why);
  tr__figures_text(&d->report.fig, TR__M_REPLICA_LEFT_WHY, why);
  tr_edge_send(e, d);
  p->told = true;
}

static int depart(void *state, const char *why) {
  local_policy *p = state;
  if (!p->opened) return TR_ESTATE; /* it never trained: the failure is the job's more likely */
  char err[256] = "";
  const int rc = p->group ? tr__group_leave(p->group, err, sizeof err) : 0;
  if (rc)
    return tr_actor_fail(p->ctx.self, rc, "replica %d (%s) failed at step %lld (%s), and %s",
                         p->ctx.replica, tr_device_name(p->ctx.dev), (long long)p->step, why,
                         err);
  snprintf(p->why, sizeof p->why, "%s", why);
  fprintf(stderr, "troupe: replica %d (%s) left at step %lld: %s\n", p->ctx.replica,
          tr_device_name(p->ctx.dev), (long long)p->step, why);
  p->gone = true;
  tell(p);
  return 0;
}

static const tr__run *departed(const void *state) {
  const local_policy *p = state;
  return p->gone ? p->ctx.run : NULL;
}

/* Its batches go back as they come (its loader runs on to the run's end); its part is over
 * once the coordinator has heard. */
static int left(void *state, const tr_msg *m) {
  local_policy *p = state;
  if (m && m->type == &tr__bucket_type) tr__group_left_receive(p->group, m);
  tell(p); /* a credit of the report edge may have come */
  return TR__LEFT_BACK | (p->told ? TR__LEFT_OVER : 0);
}

static bool receive(void *state, const tr_msg *m, int *rc) {
  local_policy *p = state;
  if (m->type == &tr__bucket_type || m->type == &tr__summed_type) {
    *rc = tr__group_receive(p->group, m);
    return true;
  }
  if (m->type == &tr__norm_type) {
    *rc = tr__clip_receive(p->clip, (const tr__norm_msg *)m);
    return true;
  }
  return false;
}

static bool waiting(const void *state) {
  const local_policy *p = state;
  return p->clip && tr__clip_waiting(p->clip);
}

static int finish(void *state) {
  local_policy *p = state;
  if (p->group && tr__group_sync(p->group)) return fail(p, "finishing the run");
  return read_divergence(p);
}

static int leave(void *state) {
  (void)state;
  return TR__DONE;
}

/* Every replica sends its parameters and state (they differ between syncs), replica 0
 * DiLoCo's outer state too: a run resumed mid-period goes on as it would have. */
static int no_memory(const local_policy *p, size_t floats) {
  return tr_actor_fail(p->ctx.self, TR_ENOMEM, "local SGD: copying a checkpoint part: out of "
                       "memory (%zu bytes asked for)", floats * sizeof(float));
}

static bool sends_parts(const void *state, int replica) {
  (void)state, (void)replica;
  return true;
}

static int part(void *state, tr__part *part) {
  local_policy *p = state;
  tr_stage *st = stage_of(p);
  const size_t n = p->numel ? p->numel : 1;
  part->replica = p->ctx.replica;
  if (!part->params) { /* another replica's: the parameters too */
    if (!(part->params = malloc(n * sizeof *part->params))) return no_memory(p, n);
    if (tr_stage_download(st, TR_STAGE_PARAMS, part->params)) return fail(p, "copying a part");
  }
  /* elastic: every replica's (replica 0 may leave); the coordinator keeps the first's */
  if (p->global && (p->ctx.replica == 0 || p->ctx.run->c.async.elastic)) {
    if (!(part->extra = malloc(2 * n * sizeof *part->extra))) return no_memory(p, 2 * n);
    part->extra_copies = 2;
    snprintf(part->extra_names[0], sizeof part->extra_names[0], "outer.global");
    snprintf(part->extra_names[1], sizeof part->extra_names[1], "outer.velocity");
    if (tr_memcpy(p->ctx.s, part->extra, p->global, p->numel * sizeof(float), TR_COPY_D2H) ||
        tr_memcpy(p->ctx.s, part->extra + p->numel, p->velocity, p->numel * sizeof(float),
                  TR_COPY_D2H))
      return fail(p, "copying DiLoCo's outer state");
  }
  return tr_stream_synchronize(p->ctx.s) ? fail(p, "copying a part") : 0;
}

/* The replicas' divergence is measured before each sync (not at the end, when they differ
 * by the steps since the last). */
static bool consistency(const void *state) {
  (void)state;
  return false;
}

/* The bytes its all-reduces (dp's gradients in warm-up, then the parameters every
 * sync_every steps: the group counts both alike) and norm exchange sent, and its largest
 * divergence before a sync (the run's consistency: the mean of every replica's stage's). */
static void figures(const void *state, tr__figures *f) {
  const local_policy *p = state;
  tr__figures_int(f, TR__M_COMM_BYTES,
                  tr__group_sent_bytes(p->group) + tr__clip_sent_bytes(p->clip));
  tr__figures_real(f, TR__M_CONSISTENCY, p->divergence);
}

static int64_t skipped(const void *state) { return ((const local_policy *)state)->skipped; }
static void abort_(void *state) { tr__group_abort(((local_policy *)state)->group); }

static void close_(void *state) {
  local_policy *p = state;
  tr__group_close(p->group);
  tr__clip_close(p->clip);
  if (p->global) tr_device_free(p->ctx.dev, p->global);
  if (p->velocity) tr_device_free(p->ctx.dev, p->velocity);
  if (p->sums) tr_device_free(p->ctx.dev, p->sums);
  if (p->host) tr_host_free(p->ctx.dev, p->host);
  if (p->landed) tr_event_close(p->landed);
  p->global = p->velocity = p->sums = p->host = NULL;
  p->landed = NULL;
}

static void free_(void *state) {
  local_policy *p = state;
  tr__group_free(p->group);
  tr__clip_free(p->clip);
  free(p);
}

static const tr__policy_ops local_ops = {
    .name = "local", .run_steps = true, .shard = shard, .open = open,
    .first_step = tr__policy_run_first_step, .share = tr__policy_every_step, .begin = begin,
    .last_backward = last_backward, .update = update, .receive = receive, .waiting = waiting,
    .finish = finish, .leave = leave, .sends_parts = sends_parts, .consistency = consistency,
    .skipped = skipped, .figures = figures, .part = part, .depart = depart,
    .departed = departed, .left = left, .abort = abort_, .close = close_, .free = free_};

int tr__policy_local(tr__policy *out, const tr__policy_parts *parts) {
  local_policy *p = calloc(1, sizeof *p);
  if (p == NULL) return TR_ENOMEM;
  p->group = parts->group;
  p->clip = parts->clip;
  *out = (tr__policy){.ops = &local_ops, .state = p};
  return 0;
}
