/* workloads.c — the built-in models of docs/WORKLOADS.md (tr_model.h), by name: specs built of
 * the layer kinds' constructors (layers/), made through tr_model_new (model.c). */
#include <stdlib.h>
#include <string.h>

#include "tr_model.h"

/* A workload's model, its refusal said on stderr: these calls have no err of their own. */
static int made(const char *call, tr_model **out, const tr_model_spec *sp) {
  char err[256];
  const int rc = tr_model_new(out, sp, err, sizeof err);
  return rc ? tr__misuse(rc, "%s: %s", call, err) : 0;
}

int tr_model_simplenet(tr_model **out) {
  TR__NOT_NULL(out);
  const tr_layer_spec layers[] = {tr_layer_linear(10, 100, 1), tr_layer_relu(100),
                                  tr_layer_linear(100, 1, 1)};
  const tr_model_spec sp = {.name = "simplenet", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 3,
                            .layers = layers, .batch = 64,
                            .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.01f)};
  return made(__func__, out, &sp);
}

int tr_model_mlp(tr_model **out, int width, int depth) {
  TR__NOT_NULL(out);
  *out = NULL;
  if (width <= 0) return tr__misuse(TR_EINVAL, "tr_model_mlp: width %d: give 1 or more", width);
  if (depth <= 0 || depth > 1024)
    return tr__misuse(TR_EINVAL, "tr_model_mlp: depth %d: give 1 to 1024 layers", depth);
  tr_layer_spec *layers = malloc((size_t)(2 * depth - 1) * sizeof *layers);
  if (!layers) return TR_ENOMEM;
  int n = 0;
  for (int i = 0; i < depth; i++) {
    if (i) layers[n++] = tr_layer_relu(width);
    layers[n++] = tr_layer_linear(width, width, 1);
  }
  tr_optim_config o = tr_optim_defaults(TR_OPTIM_MOMENTUM, 1e-3f);
  o.momentum = 0.9f;
  const tr_model_spec sp = {.name = "mlp", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = n,
                            .layers = layers, .batch = 256, .optim = o};
  int rc = made(__func__, out, &sp);
  free(layers);
  return rc;
}

tr_gpt_config tr_gpt_defaults(void) {
  return (tr_gpt_config){.vocab = 256, .ctx = 128, .width = 256, .layers = 4, .heads = 4,
                         .hidden = 1024};
}

int tr_model_gpt(tr_model **out, const tr_gpt_config *cfg) {
  TR__NOT_NULL(out);
  *out = NULL;
  const tr_gpt_config c = cfg ? *cfg : tr_gpt_defaults();
  if (c.layers < 0 || c.layers > 1024)
    return tr__misuse(TR_EINVAL, "tr_model_gpt: layers %d: give 0 to 1024 blocks", c.layers);
  const int n = c.layers + 3;
  tr_layer_spec *layers = malloc((size_t)n * sizeof *layers);
  if (!layers) return TR_ENOMEM;
  layers[0] = tr_layer_embedding(c.vocab, c.width);
  for (int i = 0; i < c.layers; i++) layers[1 + i] = tr_layer_block(c.width, c.heads, c.hidden);
  layers[n - 2] = tr_layer_layernorm(c.width);
  layers[n - 1] = tr_layer_linear(c.width, c.vocab, 0);
  tr_optim_config o = tr_optim_defaults(TR_OPTIM_ADAMW, 3e-4f);
  const tr_model_spec sp = {.name = "gpt", .ctx = c.ctx, .loss = TR_LOSS_CROSSENTROPY,
                            .nlayers = n, .layers = layers, .batch = 8, .optim = o};
  int rc = made(__func__, out, &sp);
  free(layers);
  return rc;
}

int tr_model_named(tr_model **out, const char *name, char *err, size_t err_size) {
  if (!out || !name)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_model_named: %s is NULL", out ? "name" : "out");
  *out = NULL;
  int rc;
  if (name && !strcmp(name, "simplenet")) rc = tr_model_simplenet(out);
  else if (name && !strcmp(name, "mlp")) rc = tr_model_mlp(out, 1024, 8);
  else if (name && !strcmp(name, "gpt")) rc = tr_model_gpt(out, NULL);
  else
    return tr_errorf(err, err_size, TR_EINVAL, "model '%s': not one of simplenet, mlp, gpt",
                     name ? name : "");
  if (rc) tr_errorf(err, err_size, TR_EINVAL, "model '%s': %s", name, tr_strerror(rc));
  return rc;
}
