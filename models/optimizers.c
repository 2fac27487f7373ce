/* optimizers.c — the built-in optimizer kinds as rows of tr_optim_type (tr_optim.h), each its
 * update op of tr_device.h, and the kinds by name. */
#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "models_impl.h"
#include "registry.h"

/* ---- the built-in rows ------------------------------------------------------------------- */

/* What every built-in kind starts from (tr_optim_defaults). */
#define BUILTIN_DEFAULTS {.momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}

static int sgd_update(const tr_optim_ctx *c) {
  return tr_sgd_update(c->s, c->param, c->grad, c->n, c->o->lr, c->o->weight_decay);
}

static int momentum_update(const tr_optim_ctx *c) {
  const tr_optim_config *o = c->o;
  return tr_momentum_update(c->s, c->param, c->grad, c->state, c->n, o->lr, o->momentum,
                            o->weight_decay, o->nesterov);
}

static int adamw_update(const tr_optim_ctx *c) {
  const tr_optim_config *o = c->o;
  return tr_adamw_update(c->s, c->param, c->grad, c->state, c->state + c->n, c->n, o->lr,
                         o->beta1, o->beta2, o->eps, o->weight_decay, c->step);
}

static const char *const momentum_state[] = {"momentum"};
static const char *const adamw_state[] = {"adam_m", "adam_v"};

const tr_optim_type tr_optim_sgd_type = {.name = "sgd", .defaults = BUILTIN_DEFAULTS,
                                         .update = sgd_update};
const tr_optim_type tr_optim_momentum_type = {.name = "momentum", .state_copies = 1,
                                              .state_names = momentum_state,
                                              .defaults = BUILTIN_DEFAULTS,
                                              .update = momentum_update};
const tr_optim_type tr_optim_adamw_type = {.name = "adamw", .state_copies = 2,
                                           .state_names = adamw_state,
                                           .defaults = BUILTIN_DEFAULTS, .update = adamw_update};

static tr__registry kinds = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .n = 3,
                             .rows = {&tr_optim_sgd_type, &tr_optim_momentum_type,
                                      &tr_optim_adamw_type},
                             .names = {"sgd", "momentum", "adamw"}};

/* ---- kinds ----------------------------------------------------------------------------------- */

int tr_optim_kind_check(tr_optim_kind k, char *err, size_t err_size) {
  if (!k) return 0;
  const char *name = k->name && *k->name ? k->name : "?";
  if (!k->name || !*k->name || !k->update)
    return tr_errorf(err, err_size, TR_EINVAL, "optimizer '%s': a kind needs a name and an "
                     "update", name);
  if (k->state_copies < 0 || k->state_copies > TR_OPTIM_MAX_STATE || k->scratch_copies < 0)
    return tr_errorf(err, err_size, TR_EINVAL, "optimizer '%s': state_copies %d (0 to %d) and "
                     "scratch_copies %d (>= 0)", name, k->state_copies, TR_OPTIM_MAX_STATE,
                     k->scratch_copies);
  if ((unsigned)k->zero > TR_OPTIM_ZERO_REFUSED)
    return tr_errorf(err, err_size, TR_EINVAL, "optimizer '%s': zero %d is not a tr_optim_zero",
                     name, (int)k->zero);
  for (int i = 0; i < k->state_copies; i++) {
    const char *s = k->state_names ? k->state_names[i] : NULL;
    if (!s || !*s)
      return tr_errorf(err, err_size, TR_EINVAL, "optimizer '%s': state copy %d has no name "
                       "(state_names: one per copy, checkpoints store the state by them)",
                       name, i);
    for (int j = 0; j < i; j++)
      if (strcmp(s, k->state_names[j]) == 0)
        return tr_errorf(err, err_size, TR_EINVAL, "optimizer '%s': state copies %d and %d are "
                         "both named '%s'", name, j, i, s);
  }
  return 0;
}

/* The numbers of tr_optim_config and the rule each obeys, whatever the kind: a field holds
 * what its name says, for the built-in kinds and a kind of one's own alike. */
static const struct {
  const char *name;
  size_t at;       /* offsetof(tr_optim_config, name) */
  bool below_one;  /* in [0, 1); else finite and >= 0 */
  const char *rule;
} numbers[] = {
    {"lr", offsetof(tr_optim_config, lr), false,
     "a learning rate is finite and > 0 (0: the model's)"},
    {"clip", offsetof(tr_optim_config, clip), false,
     "a clipping norm is finite and > 0 (0: none)"},
    {"weight_decay", offsetof(tr_optim_config, weight_decay), false,
     "a weight decay is finite and >= 0"},
    {"momentum", offsetof(tr_optim_config, momentum), true, "momentum is in [0, 1)"},
    {"beta1", offsetof(tr_optim_config, beta1), true, "Adam's betas are in [0, 1)"},
    {"beta2", offsetof(tr_optim_config, beta2), true, "Adam's betas are in [0, 1)"},
    {"eps", offsetof(tr_optim_config, eps), false, "Adam's eps is finite and >= 0"},
};

const char *tr__optim_rule(const char *field) {
  for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++)
    if (!strcmp(numbers[i].name, field)) return numbers[i].rule;
  return NULL;
}

int tr_optim_config_check(const tr_optim_config *o, const char **field, char *err,
                          size_t err_size) {
  for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
    float x;
    memcpy(&x, (const char *)o + numbers[i].at, sizeof x);
    if (x >= 0 && x <= FLT_MAX && !(numbers[i].below_one && x >= 1)) continue;
    if (field) *field = numbers[i].name;
    return tr_errorf(err, err_size, TR_EINVAL, "%s %g: %s", numbers[i].name, (double)x,
                     numbers[i].rule);
  }
  return 0;
}

int tr_optim_register(tr_optim_kind k, char *err, size_t err_size) {
  if (!k) return tr_errorf(err, err_size, TR_EINVAL, "optimizer: no table (NULL)");
  TR__TRY(tr_optim_kind_check(k, err, err_size));
  return tr__registry_add(&kinds, k, k->name, "optimizer", err, err_size);
}

int tr_optim_registered(tr_optim_kind k) { return !k || tr__registry_has(&kinds, k); }

const char *tr_optim_kind_name(tr_optim_kind k) {
  return k ? k->name : tr_optim_sgd_type.name;
}

int tr_optim_kind_parse(const char *name, tr_optim_kind *out) {
  TR__NOT_NULL(out);
  const tr_optim_type *k = tr__registry_find(&kinds, name);
  return k ? (*out = k, 0) : TR_EINVAL;
}

void tr_optim_kind_names(char *buf, size_t size) {
  if (buf) tr__registry_names(&kinds, buf, size); /* NULL: nowhere to write, nothing written */
}

tr_optim_config tr_optim_defaults(tr_optim_kind k, float lr) {
  if (!k) k = TR_OPTIM_SGD;
  tr_optim_config o = k->defaults;
  o.kind = k;
  o.lr = lr;
  return o;
}
