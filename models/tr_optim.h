/* tr_optim.h — optimizers as tables: the built-in kinds (SGD, momentum, AdamW), and how to
 * write one of your own.
 *
 * A kind is a tr_optim_type, one constant object whose address is the kind's identity
 * (tr_optim_kind), as a layer's kind is its tr_layer_type. Stages (tr_model.h) know no kind
 * by name: a stage allocates state_copies copies of the parameters it updates (zeroed), and
 * calls the kind's update once per step with the gradients (clipped already). Checkpoints
 * record the kind's name and keep copy k of the state under "<state_names[k]>.<tensor>";
 * they resume only into a registered kind of that name. ZeRO stage 1 cuts every copy where
 * it cuts the parameters, which is right for a kind whose update is element-wise (`zero`).
 * An update written with the device API alone (tr_device.h's ops on c->s) runs on host
 * devices and GPUs alike, under every parallel strategy.
 *
 * A kind of one's own: sign-SGD, param -= lr * sign(grad), no state, two scratch copies.
 *
 *   static int sign_update(const tr_optim_ctx *c) {
 *     float *pos = c->scratch, *neg = c->scratch + c->n;
 *     int rc = tr_fill(c->s, pos, c->n, 1.0f);
 *     if (!rc) rc = tr_relu_backward(c->s, pos, c->grad, pos, c->n);       // 1 where grad > 0
 *     if (!rc) rc = tr_memcpy(c->s, neg, c->grad, c->n * 4, TR_COPY_D2D);
 *     if (!rc) rc = tr_scale(c->s, neg, -1.0f, c->n);                 // -grad
 *     if (!rc) rc = tr_axpy(c->s, c->param, -c->o->lr, pos, c->n);
 *     if (!rc) rc = tr_fill(c->s, pos, c->n, 1.0f);
 *     if (!rc) rc = tr_relu_backward(c->s, pos, neg, pos, c->n);           // 1 where grad < 0
 *     return rc ? rc : tr_axpy(c->s, c->param, c->o->lr, pos, c->n);
 *   }
 *   const tr_optim_type signsgd_type = {.name = "signsgd", .scratch_copies = 2,
 *                                       .update = sign_update};
 *
 *   tr_optim_register(&signsgd_type, err, sizeof err);   // --optimizer signsgd, checkpoints
 *   spec.optim = tr_optim_defaults(&signsgd_type, 1e-3f);
 */
#ifndef TR_OPTIM_H
#define TR_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_optim_type tr_optim_type;
/* A kind: the address of its table. NULL, a zeroed configuration's, is SGD. */
typedef const tr_optim_type *tr_optim_kind;

/* The built-in kinds (PyTorch's definitions: tr_device.h's update ops). */
TR_API extern const tr_optim_type tr_optim_sgd_type;      /* "sgd": lr, weight_decay; no state */
TR_API extern const tr_optim_type tr_optim_momentum_type; /* "momentum": momentum, nesterov,
                                                      weight_decay; state "momentum" */
TR_API extern const tr_optim_type tr_optim_adamw_type;    /* "adamw": beta1, beta2, eps, decoupled
                                                      weight_decay; state "adam_m", "adam_v" */
#define TR_OPTIM_SGD (&tr_optim_sgd_type)
#define TR_OPTIM_MOMENTUM (&tr_optim_momentum_type)
#define TR_OPTIM_ADAMW (&tr_optim_adamw_type)

/* clip > 0: scale the gradients by min(1, clip / global norm) before the update (every kind:
 * the stage does it). The other fields are the kinds' hyperparameters; a kind of one's own
 * reads those it likes, and `config` for the rest. */
typedef struct tr_optim_config {
  tr_optim_kind kind;
  float lr;
  float momentum;      /* MOMENTUM */
  int nesterov;        /* MOMENTUM */
  float weight_decay;  /* SGD, MOMENTUM: L2 added to the gradient; ADAMW: decoupled */
  float beta1, beta2, eps; /* ADAMW */
  float clip;
  const void *config;  /* a kind of one's own: its own hyperparameters, not copied */
} tr_optim_config;

/* ---- what a kind is ----------------------------------------------------------------------- */

/* Most copies of the parameters a kind's state may hold. */
#define TR_OPTIM_MAX_STATE 4

/* One update of n parameters (a stage's, or its shard's under ZeRO), on stream s. */
typedef struct tr_optim_ctx {
  tr_stream *s;                /* every op goes on this stream */
  const tr_optim_config *o;    /* the hyperparameters */
  float *param;                /* n: updated in place; padding between tensors holds zeros in
                                  param, grad and state, and the update must keep it so */
  const float *grad;           /* n: the gradients, clipped already: read only */
  float *state;                /* state_copies x n: copy k at state + k n; zeros before the
                                  first update, then what the last one left */
  float *scratch;              /* scratch_copies x n: good within this update only */
  size_t n;
  int64_t step;                /* this update's number: 1 for the first (a bias correction's t) */
} tr_optim_ctx;

/* How ZeRO stage 1 shards a kind's state across the replicas of a stage. */
typedef enum tr_optim_zero {
  TR_OPTIM_ZERO_ELEMENTWISE, /* element i of each state copy is read and written with
                                element i of param and grad alone: cut where the parameters
                                are cut (every built-in kind) */
  TR_OPTIM_ZERO_REFUSED      /* the update mixes elements (a norm per tensor, say): ZeRO
                                refuses the kind */
} tr_optim_zero;

/* A kind's table. Slots marked OPTIONAL may be 0 or NULL. */
struct tr_optim_type {
  const char *name;            /* "adamw": checkpoints, --optimizer, messages */
  int state_copies;            /* copies of the parameters the state holds, 0..MAX_STATE */
  const char *const *state_names; /* state_copies names: copy k of tensor "0.weight" is
                                  "<state_names[k]>.0.weight" in checkpoints */
  tr_optim_zero zero;          /* OPTIONAL (ELEMENTWISE) */
  /* The hyperparameters tr_optim_defaults gives (its kind and lr are ignored). */
  tr_optim_config defaults;
  /* OPTIONAL (0): copies of the parameters the update gets as ctx->scratch. */
  int scratch_copies;
  /* Issues the update on c->s; returns 0 or a negative TR_E... status. */
  int (*update)(const tr_optim_ctx *c);
};

/* ---- kinds by name -------------------------------------------------------------------------- */

/* Makes the kind findable by its name: tr_optim_kind_parse (the CLI's --optimizer) and
 * checkpoints, which name their optimizer and resume only into a registered kind of that
 * name. The built-in kinds are registered from the start. Registering a table again is a
 * no-op. TR_EINVAL (err naming the table and the rule) for a table tr_optim_kind_check
 * refuses, a name another table has, or more than 32 kinds. Call it before the runs that use
 * the kind (it takes a lock; lookups from then on are safe from any thread). */
TR_API int tr_optim_register(tr_optim_kind kind, char *err, size_t err_size);
/* 1 when the kind is registered, else 0. */
TR_API int tr_optim_registered(tr_optim_kind kind);
/* A well-formed table: a name, an update, state_copies within [0, MAX_STATE] with as many
 * distinct names, scratch_copies >= 0, zero one of tr_optim_zero. NULL is SGD (fine).
 * TR_EINVAL otherwise, err naming the table and what is wrong. */
TR_API int tr_optim_kind_check(tr_optim_kind kind, char *err, size_t err_size);
/* The kind's name ("sgd" for NULL); parse: the registered kind of that name, or TR_EINVAL. */
TR_API const char *tr_optim_kind_name(tr_optim_kind kind);
TR_API int tr_optim_kind_parse(const char *name, tr_optim_kind *out);
/* "sgd, momentum, adamw" and the kinds registered after them, for messages and help (buf
 * NULL: nothing written). */
TR_API void tr_optim_kind_names(char *buf, size_t size);
/* The numbers of a configuration, each within its rule whatever the kind (a kind of one's
 * own reads them with the meanings their names give): lr, clip, weight_decay and eps finite
 * and >= 0 (lr 0: the model's, where a job takes it; clip 0: none), momentum, beta1 and beta2
 * in [0, 1). 0, or TR_EINVAL with err naming the first field at fault, its value and the
 * rule ("lr nan: a learning rate is finite and > 0 (0: the model's)"), and *field (when not
 * NULL) that field's name. tr_model_new and the jobs (tr_job_config.optim) check with it. */
TR_API int tr_optim_config_check(const tr_optim_config *o, const char **field, char *err,
                                 size_t err_size);
/* Internal: the rule of field `field` of tr_optim_config_check's ("a learning rate is ..."),
 * for messages that quote the value their own way (a checkpoint's metadata); NULL: none. */
const char *tr__optim_rule(const char *field);
/* The kind's defaults with lr as given (NULL: SGD's). The built-in kinds share theirs:
 * momentum 0.9, betas 0.9/0.999, eps 1e-8, no weight decay, no clipping. */
TR_API tr_optim_config tr_optim_defaults(tr_optim_kind kind, float lr);

#ifdef __cplusplus
}
#endif
#endif
