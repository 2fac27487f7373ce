/* policy_sync.c — the synchronous step: every replica and stage updates at the same step
 * from the same gradients. The first stage claims each step as it starts it (the others
 * follow while the run's end is ahead); the last backward's buckets go to the replica group
 * as they become final (group.c); the step action waits for their sums, agrees on the
 * gradients' norm (clipnorm.c), updates (a shard of the optimizer under ZeRO-1, which then
 * goes to every member) and skips or stops on a norm that is not finite.
 */
#include <math.h>
#include <stdlib.h>

#include "clipnorm.h"
#include "group.h"
#include "step_policy.h"
#include "collective.h"

/* Where the step action is: the group's sums, the norm and the update, the shards. */
enum { REDUCE, CLIP, GATHER };

typedef struct sync_policy {
  tr__group *group;
  tr__clip *clip;
  tr__policy_ctx ctx;
  int phase;
  int64_t skipped;
} sync_policy;

static bool sharded(const sync_policy *p) {
  return p->group && tr__group_shard(p->group).count > 1;
}

static tr_stage_shard shard(const void *state) {
  const sync_policy *p = state;
  return p->group ? tr__group_shard(p->group) : (tr_stage_shard){0};
}

static int fail(const sync_policy *p, const char *what) {
  return tr_actor_fail(p->ctx.self, TR_EDEVICE, "%s on %s: %s", what,
                       tr_device_name(p->ctx.dev), tr_device_error(p->ctx.dev));
}

static int open(void *state, const tr__policy_ctx *ctx) {
  sync_policy *p = state;
  p->ctx = *ctx;
  int rc;
  if (p->group) { /* a replica group: one chunk (tr_job_new) */
    if ((rc = tr__group_open(p->group, ctx->self, ctx->chunks[0], ctx->busy))) return rc;
    tr_stage_on_grad_ready(ctx->chunks[0], tr__group_grad_ready, p->group);
  }
  /* every update checks the gradients' norm: across the stages when they must agree
   * (clipping, skipping), else this stage's own */
  if (!p->clip && !(p->clip = tr__clip_new(1, 0, NULL, NULL))) return TR_ENOMEM;
  return tr__clip_open(p->clip, ctx->self, ctx->chunks, ctx->nch, ctx->busy);
}

static int begin(void *state, int64_t step, const tr__lent *head, bool ended, int64_t *run_step) {
  (void)head, (void)ended;
  return tr__policy_claim(&((sync_policy *)state)->ctx, step, run_step);
}

static int last_backward(void *state, int64_t step, bool after) {
  sync_policy *p = state;
  if (p->group == NULL) return 0;
  if (after) return tr__group_disarm(p->group);
  tr__group_arm(p->group, step);
  return 0;
}

/* The norm is the same number on every stage and replica: none updates. */
static int skip(sync_policy *p, int64_t step, double norm2) {
  if (p->ctx.run->c.on_nonfinite != TR_NONFINITE_SKIP)
    return tr__policy_not_finite(&p->ctx, step, "the gradient norm", sqrt(norm2));
  p->skipped++;
  for (int c = 0; c < p->ctx.nch; c++)
    if (tr_stage_zero_grads(p->ctx.chunks[c])) return fail(p, "zeroing gradients");
  p->phase = REDUCE;
  return TR__DONE;
}

static int update(void *state, int64_t step, int64_t run_step) {
  sync_policy *p = state;
  (void)run_step;
  int rc;
  if (p->phase == REDUCE) {
    if (p->group && (rc = tr__group_wait(p->group, step, p->ctx.s)) != TR__DONE) return rc;
    p->phase = CLIP;
  }
  if (p->phase == CLIP) {
    const float *sumsq = NULL;
    double norm2 = 0;
    if ((rc = tr__clip_global(p->clip, step, &sumsq, &norm2)) != TR__DONE) return rc;
    if (!isfinite(norm2)) return skip(p, step, norm2);
    tr__busy *b = p->ctx.busy;
    uint64_t t0 = tr__busy_start(b, p->ctx.self, step, "update", -1); /* its range opens */
    for (int c = 0; c < p->ctx.nch; c++)
      if (tr_stage_step(p->ctx.chunks[c], sumsq) || tr_stage_zero_grads(p->ctx.chunks[c])) {
        tr__busy_add(b, p->ctx.self, step, "update", t0, -1);
        return tr_actor_fail(p->ctx.self, TR_EDEVICE, "optimizer step on %s: %s",
                             tr_device_name(p->ctx.dev), tr_stage_error(p->ctx.chunks[c]));
      }
    rc = p->group ? tr__group_gather(p->group, step) : 0; /* sharded: the shard out */
    tr__busy_add(b, p->ctx.self, step, "update", t0, -1);
    if (rc) return rc;
    p->phase = GATHER;
  }
  rc = p->group ? tr__group_gathered(p->group, step, p->ctx.s) : TR__DONE;
  if (rc == TR__DONE) p->phase = REDUCE;
  return rc;
}

static bool receive(void *state, const tr_msg *m, int *rc) {
  sync_policy *p = state;
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
  const sync_policy *p = state;
  return p->clip && tr__clip_waiting(p->clip);
}

static int finish(void *state) {
  sync_policy *p = state;
  return p->group && tr__group_sync(p->group) ? fail(p, "finishing the run") : 0;
}

static int leave(void *state) {
  (void)state;
  return TR__DONE;
}

/* Replica 0 sends the checkpoint its parameters and optimizer state; sharded, every replica
 * sends its shard of the state (the coordinator puts them together). */
static bool sends_parts(const void *state, int replica) {
  return replica == 0 || sharded(state);
}

/* What the replica group and the norm exchange sent over the run. */
static void figures(const void *state, tr__figures *f) {
  const sync_policy *p = state;
  tr__figures_int(f, TR__M_COMM_BYTES, tr__group_sent_bytes(p->group) + tr__clip_sent_bytes(p->clip));
}

static bool consistency(const void *state) { return ((const sync_policy *)state)->group != NULL; }
static int64_t skipped(const void *state) { return ((const sync_policy *)state)->skipped; }
static void abort_(void *state) { tr__group_abort(((sync_policy *)state)->group); }

static void close_(void *state) {
  sync_policy *p = state;
  tr__group_close(p->group);
  tr__clip_close(p->clip);
}

static void free_(void *state) {
  sync_policy *p = state;
  tr__group_free(p->group);
  tr__clip_free(p->clip);
  free(p);
}

static const tr__policy_ops sync_ops = {
    .name = "sync", .run_steps = true, .shard = shard, .open = open,
    .first_step = tr__policy_run_first_step, .share = tr__policy_every_step, .begin = begin,
    .last_backward = last_backward, .update = update, .receive = receive, .waiting = waiting,
    .finish = finish, .leave = leave, .sends_parts = sends_parts, .consistency = consistency,
    .skipped = skipped, .figures = figures, .abort = abort_, .close = close_, .free = free_};

int tr__policy_sync(tr__policy *out, const tr__policy_parts *parts) {
  sync_policy *p = calloc(1, sizeof *p);
  if (p == NULL) return TR_ENOMEM;
  p->group = parts->group;
  p->clip = parts->clip;
  *out = (tr__policy){.ops = &sync_ops, .state = p};
  return 0;
}

int tr__policy_not_finite(const tr__policy_ctx *ctx, int64_t step, const char *what,
                          double value) {
  return tr_actor_fail(ctx->self, TR_ENONFINITE, "step %lld, stage %d of replica %d on %s: %s "
                       "is %s: the run diverged (on_nonfinite skip goes on without such "
                       "updates)", (long long)step, ctx->stage, ctx->replica,
                       tr_device_name(ctx->dev), what, tr__nonfinite_name(value));
}
