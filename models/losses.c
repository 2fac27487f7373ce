/* losses.c — the built-in losses as rows of tr_loss_type (tr_loss.h), each its ops of
 * tr_device.h, and the losses by name. */
#include <stdio.h>

#include "models_impl.h"
#include "registry.h"

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

static size_t ce_keep(int N, int V) { return (size_t)N * V; }

static int ce_forward(const tr_loss_ctx *c, float *loss) {
  return tr_crossentropy_forward(c->s, loss, c->keep, c->pred, c->target, c->N, c->V, c->scale);
}

static int ce_backward(const tr_loss_ctx *c, float *dpred) {
  return tr_crossentropy_backward(c->s, dpred, c->keep, c->target, c->N, c->V, c->scale);
}

const tr_loss_type tr_loss_crossentropy_type = {
    .name = "crossentropy", .target = TR_LOSS_TARGET_CLASSES, .mean = TR_LOSS_MEAN_ROWS,
    .accuracy = 1, .keep_floats = ce_keep, .forward = ce_forward, .backward = ce_backward};

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
  const tr_loss_type *k = tr__registry_find(&losses, name);
  return k ? (*out = k, 0) : TR_EINVAL;
}
