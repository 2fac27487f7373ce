/* losses.c — the built-in losses as rows of tr_loss_type (tr_loss.h), each its ops of
 * tr_device.h, and the losses by name. */
#include <math.h>
#include <stdio.h>

#include "registry.h"
#include "tr_layer_type.h" /* tr_tensor_comm */
#include "tr_loss.h"

/* ---- mean squared error ------------------------------------------------------------------- */

static int mse_forward(const tr_loss_ctx *c, float *loss) {
  return tr_mse_forward(c->s, loss, c->pred, c->target, (size_t)c->N * c->V, c->scale);
}

static int mse_backward(const tr_loss_ctx *c, float *dpred) {
  return tr_mse_backward(c->s, dpred, c->pred, c->target, (size_t)c->N * c->V, c->scale);
}

const tr_loss_type tr_loss_mse_type = {.name = "mse", .target = TR_LOSS_TARGET_VALUES,
                                       .mean = TR_LOSS_MEAN_ELEMENTS, .forward = mse_forward,
                                       .backward = mse_backward};

/* ---- softmax cross-entropy: the probabilities kept for backward ---------------------------- */

/* Vocabulary-parallel (Megatron's, tr_loss_ctx.tensor set): pred is the member's V columns
 * [rank V, (rank+1) V) of the whole logits, and the whole softmax is reached through N-float
 * reductions only, never a whole row: each row's largest logit (all-reduce MAX), then its sum
 * of exp(z - max) beside the target's logit (one all-reduce SUM of the pair; the member whose
 * columns hold the target gives the logit, the others 0). Every member then has each row's
 * loss log(sum) + max - z_target, so every member's loss[0] is the whole's, and keeps its
 * columns of the probabilities; backward writes its columns of scale (p - onehot) with no
 * collective. keep: N x (the member's) V; scratch: 3N. The pieces between the collectives
 * are the device ops tr_crossentropy_part_* (max; exps and the pair; the probabilities and
 * the loss; backward), so a member runs on every device. */
static size_t ce_keep(int N, int V) { return (size_t)N * V; }

static size_t ce_scratch(int N, int V) {
  (void)V;
  return 3 * (size_t)N;
}

static int vp_forward(const tr_loss_ctx *c, float *loss) {
  const tr_tensor_comm *tc = c->tensor;
  const size_t N = (size_t)c->N, V = (size_t)c->V;
  const int64_t lo = (int64_t)tc->rank * c->V, whole = (int64_t)tc->size * c->V;
  float *mx = c->scratch, *pair = c->scratch + N; /* pair: (sum of exp, the target's logit) */
  TR__TRY(tr_crossentropy_part_max(c->s, mx, c->pred, N, V));
  TR__TRY(tc->all_reduce(tc, c->s, mx, N, TR_REDUCE_MAX));
  TR__TRY(tr_crossentropy_part_sum(c->s, pair, c->keep, c->pred, mx, c->target, N, V, lo, whole));
  TR__TRY(tc->all_reduce(tc, c->s, pair, 2 * N, TR_REDUCE_SUM));
  return tr_crossentropy_part_finish(c->s, loss, c->keep, pair, mx, N, V, c->scale);
}

static int vp_backward(const tr_loss_ctx *c, float *dpred) {
  return tr_crossentropy_part_backward(c->s, dpred, c->keep, c->target, (size_t)c->N,
                                       (size_t)c->V, (int64_t)c->tensor->rank * c->V, c->scale);
}

/* The count comes back as one float (rows below 2^24: exact), summed on the device. */
int tr_crossentropy_correct_parts(const tr_tensor_comm *tc, tr_stream *s, const float *pred,
                                  const int32_t *target, int N, int V, float *scratch,
                                  int64_t *correct) {
  *correct = 0;
  if (N <= 0) return 0;
  const int64_t lo = (int64_t)tc->rank * V;
  const size_t n = (size_t)N;
  float *top = scratch, *at = scratch + N; /* each row's largest, minus the first index of it */
  TR__TRY(tr_crossentropy_part_argmax(s, top, at, pred, n, (size_t)V, lo));
  TR__TRY(tc->all_reduce(tc, s, top, n, TR_REDUCE_MAX));
  /* a member whose largest is not the row's has no say */
  TR__TRY(tr_crossentropy_part_vote(s, at, pred, top, n, (size_t)V, lo));
  TR__TRY(tc->all_reduce(tc, s, at, n, TR_REDUCE_MAX));
  TR__TRY(tr_crossentropy_part_hits(s, at, at, target, n));
  TR__TRY(tr_sum(s, top, at, n, 0));
  float hits = 0;
  TR__TRY(tr_memcpy(s, &hits, top, sizeof hits, TR_COPY_D2H));
  TR__TRY(tr_stream_synchronize(s));
  *correct = (int64_t)hits;
  return 0;
}

static int ce_forward(const tr_loss_ctx *c, float *loss) {
  if (c->tensor) return vp_forward(c, loss);
  return tr_crossentropy_forward(c->s, loss, c->keep, c->pred, c->target, c->N, c->V, c->scale);
}

static int ce_backward(const tr_loss_ctx *c, float *dpred) {
  if (c->tensor) return vp_backward(c, dpred);
  return tr_crossentropy_backward(c->s, dpred, c->keep, c->target, c->N, c->V, c->scale);
}

const tr_loss_type tr_loss_crossentropy_type = {
    .name = "crossentropy", .target = TR_LOSS_TARGET_CLASSES, .mean = TR_LOSS_MEAN_ROWS,
    .accuracy = 1, .vocab_parallel = 1, .keep_floats = ce_keep, .scratch_floats = ce_scratch,
    .forward = ce_forward, .backward = ce_backward};

/* ---- losses by name --------------------------------------------------------------------------- */

static tr__registry losses = {.lock = PTHREAD_MUTEX_INITIALIZER,
                              .n = 2,
                              .rows = {&tr_loss_mse_type, &tr_loss_crossentropy_type},
                              .names = {"mse", "crossentropy"}};

int tr_loss_kind_check(tr_loss_kind k, char *err, size_t err_size) {
  if (!k) return 0;
  const char *name = k->name && *k->name ? k->name : "?";
  if (!k->name || !*k->name || !k->forward || !k->backward)
    return tr_errorf(err, err_size, TR_EINVAL, "loss '%s': a loss needs a name, a forward and a "
                     "backward", name);
  if ((unsigned)k->target > TR_LOSS_TARGET_CLASSES || (unsigned)k->mean > TR_LOSS_MEAN_ELEMENTS)
    return tr_errorf(err, err_size, TR_EINVAL, "loss '%s': target %d and mean %d must be a "
                     "tr_loss_target and a tr_loss_mean", name, (int)k->target, (int)k->mean);
  if (k->accuracy && k->target != TR_LOSS_TARGET_CLASSES)
    return tr_errorf(err, err_size, TR_EINVAL, "loss '%s': accuracy needs class targets "
                     "(TR_LOSS_TARGET_CLASSES)", name);
  return 0;
}

int tr_loss_register(tr_loss_kind k, char *err, size_t err_size) {
  if (!k) return tr_errorf(err, err_size, TR_EINVAL, "loss: no table (NULL)");
  TR__TRY(tr_loss_kind_check(k, err, err_size));
  return tr__registry_add(&losses, k, k->name, "loss", err, err_size);
}

int tr_loss_registered(tr_loss_kind k) { return !k || tr__registry_has(&losses, k); }

const char *tr_loss_kind_name(tr_loss_kind k) { return k ? k->name : tr_loss_mse_type.name; }

int tr_loss_kind_parse(const char *name, tr_loss_kind *out) {
  TR__NOT_NULL(out);
  const tr_loss_type *k = tr__registry_find(&losses, name);
  return k ? (*out = k, 0) : TR_EINVAL;
}
