/* policy_frozen.c — a step policy written outside the stage runner, to show that a strategy
 * is a policy file and a table row (step_policy.h): "frozen" runs every step's forward and
 * backward and updates nothing (its step zeroes the gradients), as an evaluation pass or a
 * frozen model would. Its row serves no configuration by itself: a job names it
 * (tr_job_config.step_policy = "frozen"). */
#include <stdlib.h>

#include "clipnorm.h"
#include "group.h"
#include "policy_frozen.h"
#include "worker.h"

typedef struct frozen {
  tr__policy_ctx ctx;
} frozen;

static tr_stage_shard shard(const void *p) {
  (void)p;
  return (tr_stage_shard){0};
}

static int open(void *p, const tr__policy_ctx *ctx) {
  ((frozen *)p)->ctx = *ctx;
  return 0;
}

/* As the synchronous policy: the first stage claims each step. */
static int begin(void *state, int64_t step, const tr__lent *head, bool ended, int64_t *run_step) {
  (void)head, (void)ended;
  return tr__policy_claim(&((frozen *)state)->ctx, step, run_step);
}

static int last_backward(void *p, int64_t step, bool after) {
  (void)p, (void)step, (void)after;
  return 0;
}

static int update(void *state, int64_t step, int64_t run_step) {
  frozen *p = state;
  (void)step, (void)run_step;
  for (int c = 0; c < p->ctx.nch; c++)
    if (tr_stage_zero_grads(p->ctx.chunks[c]))
      return tr_actor_fail(p->ctx.self, TR_EDEVICE, "zeroing gradients");
  return TR__DONE;
}

static bool receive(void *p, const tr_msg *m, int *rc) {
  (void)p, (void)m, (void)rc;
  return false;
}

static bool waiting(const void *p) {
  (void)p;
  return false;
}

static int finish(void *p) {
  (void)p;
  return 0;
}

static int leave(void *p) {
  (void)p;
  return TR__DONE;
}

static bool sends_parts(const void *p, int replica) {
  (void)p;
  return replica == 0;
}

static bool consistency(const void *p) {
  (void)p;
  return false;
}

static int64_t skipped(const void *p) {
  (void)p;
  return 0;
}

static void nothing(void *p) { (void)p; }

static const tr__policy_ops ops = {
    .name = "frozen", .run_steps = true, .shard = shard, .open = open,
    .first_step = tr__policy_run_first_step, .share = tr__policy_every_step, .begin = begin,
    .last_backward = last_backward,
    .update = update, .receive = receive, .waiting = waiting, .finish = finish, .leave = leave,
    .sends_parts = sends_parts, .consistency = consistency, .skipped = skipped,
    .abort = nothing, .close = nothing, .free = free};

/* The policy takes the parts the plan wired; a frozen one needs none of them. */
static int make(tr__policy *out, const tr__policy_parts *parts) {
  tr__group_free(parts->group);
  tr__clip_free(parts->clip);
  tr__worker_free(parts->worker);
  frozen *p = calloc(1, sizeof *p);
  if (p == NULL) return TR_ENOMEM;
  *out = (tr__policy){.ops = &ops, .state = p};
  return 0;
}

const tr__policy_row policy_frozen = {.name = "frozen", .make = make};
