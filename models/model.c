/* model.c — model descriptions: layer specs, the workloads of WORKLOADS.md, the parameter
 * space (every tensor's name, shape, offset and initialisation) and cost-balanced cuts. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models_impl.h"

/* ---- layer specs ---------------------------------------------------------------------------- */

tr_layer_spec tr_layer_linear(int in, int out, int bias) {
  return (tr_layer_spec){.kind = TR_LAYER_LINEAR, .in = in, .out = out, .bias = bias};
}
tr_layer_spec tr_layer_relu(int width) {
  return (tr_layer_spec){.kind = TR_LAYER_RELU, .in = width, .out = width};
}
tr_layer_spec tr_layer_gelu(int width) {
  return (tr_layer_spec){.kind = TR_LAYER_GELU, .in = width, .out = width};
}
tr_layer_spec tr_layer_layernorm(int width) {
  return (tr_layer_spec){.kind = TR_LAYER_LAYERNORM, .in = width, .out = width};
}
tr_layer_spec tr_layer_embedding(int vocab, int width) {
  return (tr_layer_spec){.kind = TR_LAYER_EMBEDDING, .in = 1, .out = width, .vocab = vocab};
}
tr_layer_spec tr_layer_block(int width, int heads, int hidden) {
  return (tr_layer_spec){
      .kind = TR_LAYER_BLOCK, .in = width, .out = width, .heads = heads, .hidden = hidden};
}

const char *tr_layer_kind_name(tr_layer_kind kind) {
  static const char *names[] = {"linear", "relu", "gelu", "layernorm", "embedding", "block"};
  return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

/* ---- optimizers ------------------------------------------------------------------------------ */

static const char *optim_names[] = {"sgd", "momentum", "adamw"};

const char *tr_optim_kind_name(tr_optim_kind kind) {
  return (unsigned)kind < 3 ? optim_names[kind] : "?";
}

int tr_optim_kind_parse(const char *name, tr_optim_kind *out) {
  for (int i = 0; i < 3; i++)
    if (name && !strcmp(name, optim_names[i])) {
      *out = (tr_optim_kind)i;
      return 0;
    }
  return TR_EINVAL;
}

tr_optim_config tr_optim_defaults(tr_optim_kind kind, float lr) {
  return (tr_optim_config){.kind = kind, .lr = lr, .momentum = 0.9f, .beta1 = 0.9f,
                           .beta2 = 0.999f, .eps = 1e-8f};
}

/* ---- building a model ------------------------------------------------------------------------- */

static int say(char *err, size_t size, const char *fmt, ...) {
  if (err && size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
  }
  return TR_EINVAL;
}

static int check_layer(const tr_model_spec *sp, int i, char *err, size_t size) {
  const tr_layer_spec *l = &sp->layers[i];
  const char *k = tr_layer_kind_name(l->kind);
  if (!strcmp(k, "?")) return say(err, size, "layer %d: unknown kind %d", i, (int)l->kind);
  if (l->in <= 0 || l->out <= 0)
    return say(err, size, "layer %d (%s): widths %d -> %d must be positive", i, k, l->in, l->out);
  if (l->kind != TR_LAYER_LINEAR && l->kind != TR_LAYER_EMBEDDING && l->in != l->out)
    return say(err, size, "layer %d (%s): in %d and out %d differ", i, k, l->in, l->out);
  if (l->kind == TR_LAYER_EMBEDDING && (i != 0 || l->vocab <= 0 || l->in != 1))
    return say(err, size, "layer %d (embedding): must be layer 0 with a vocabulary (has %d)", i,
               l->vocab);
  if (l->kind == TR_LAYER_BLOCK && (l->heads <= 0 || l->in % l->heads || l->hidden <= 0))
    return say(err, size, "layer %d (block): width %d, %d heads, hidden %d", i, l->in, l->heads,
               l->hidden);
  if (i > 0 && l->in != sp->layers[i - 1].out)
    return say(err, size, "layer %d (%s): takes width %d, layer %d gives %d", i, k, l->in, i - 1,
               sp->layers[i - 1].out);
  return 0;
}

/* Appends a tensor to the model's table at the next aligned offset. */
static void add_tensor(tr_model *m, int layer, const char *name, int64_t d0, int64_t d1,
                       tr__init_kind init, float bound) {
  tr_tensor_info *t = &m->tensors[m->ntensors];
  snprintf(t->name, sizeof t->name, "%d.%s", layer, name);
  t->layer = layer;
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  t->offset = m->numel;
  m->init[m->ntensors] = (tr__tensor_init){init, bound};
  m->numel += tr__align_floats(t->numel);
  m->param_count += t->numel;
  m->ntensors++;
}

/* PyTorch's Linear: weight and bias uniform in +-1/sqrt(fan_in). */
static void add_linear(tr_model *m, int layer, const char *prefix, int in, int out, int bias) {
  char name[40];
  const float b = 1.0f / sqrtf((float)in);
  snprintf(name, sizeof name, "%sweight", prefix);
  add_tensor(m, layer, name, out, in, TR__INIT_UNIFORM, b);
  snprintf(name, sizeof name, "%sbias", prefix);
  if (bias) add_tensor(m, layer, name, out, 0, TR__INIT_UNIFORM, b);
}

static void add_layernorm(tr_model *m, int layer, const char *prefix, int width) {
  char name[40];
  snprintf(name, sizeof name, "%sweight", prefix);
  add_tensor(m, layer, name, width, 0, TR__INIT_ONES, 0);
  snprintf(name, sizeof name, "%sbias", prefix);
  add_tensor(m, layer, name, width, 0, TR__INIT_ZEROS, 0);
}

/* The tensors of each layer, in the order the stage reads them. */
static void layout(tr_model *m) {
  for (int i = 0; i < m->nlayers; i++) {
    const tr_layer_spec *l = &m->layers[i];
    m->layer_tensor0[i] = m->ntensors;
    m->layer_offset[i] = m->numel;
    switch (l->kind) {
    case TR_LAYER_LINEAR: add_linear(m, i, "", l->in, l->out, l->bias); break;
    case TR_LAYER_LAYERNORM: add_layernorm(m, i, "", l->in); break;
    case TR_LAYER_EMBEDDING:
      add_tensor(m, i, "wte", l->vocab, l->out, TR__INIT_NORMAL, 0);
      add_tensor(m, i, "wpe", m->ctx, l->out, TR__INIT_NORMAL, 0);
      break;
    case TR_LAYER_BLOCK:
      add_layernorm(m, i, "ln1.", l->in);
      add_linear(m, i, "attn.qkv.", l->in, 3 * l->in, 1);
      add_linear(m, i, "attn.proj.", l->in, l->in, 1);
      add_layernorm(m, i, "ln2.", l->in);
      add_linear(m, i, "mlp.fc.", l->in, l->hidden, 1);
      add_linear(m, i, "mlp.proj.", l->hidden, l->in, 1);
      break;
    case TR_LAYER_RELU:
    case TR_LAYER_GELU: break;
    }
  }
  m->layer_tensor0[m->nlayers] = m->ntensors;
  m->layer_offset[m->nlayers] = m->numel;
}

int tr_model_new(tr_model **out, const tr_model_spec *sp, char *err, size_t err_size) {
  *out = NULL;
  if (!sp || sp->nlayers <= 0 || !sp->layers)
    return say(err, err_size, "model: no layers");
  if (sp->ctx <= 0 || sp->batch <= 0)
    return say(err, err_size, "model: context %d and batch %d must be positive", sp->ctx, sp->batch);
  for (int i = 0; i < sp->nlayers; i++) TR__TRY(check_layer(sp, i, err, err_size));
  const tr_layer_spec *last = &sp->layers[sp->nlayers - 1];
  if (sp->loss != TR_LOSS_MSE && sp->loss != TR_LOSS_CROSSENTROPY)
    return say(err, err_size, "model: unknown loss %d", (int)sp->loss);
  if (sp->loss == TR_LOSS_CROSSENTROPY && last->kind != TR_LAYER_LINEAR)
    return say(err, err_size, "model: cross-entropy needs logits from a linear last layer");

  tr_model *m = calloc(1, sizeof *m);
  int max_tensors = 12 * sp->nlayers; /* a block has the most: 12 */
  if (m) {
    m->layers = malloc((size_t)sp->nlayers * sizeof *m->layers);
    m->tensors = calloc((size_t)max_tensors, sizeof *m->tensors);
    m->init = calloc((size_t)max_tensors, sizeof *m->init);
    m->layer_tensor0 = calloc((size_t)sp->nlayers + 1, sizeof *m->layer_tensor0);
    m->layer_offset = calloc((size_t)sp->nlayers + 1, sizeof *m->layer_offset);
  }
  if (!m || !m->layers || !m->tensors || !m->init || !m->layer_tensor0 || !m->layer_offset) {
    tr_model_free(m);
    say(err, err_size, "model: out of memory");
    return TR_ENOMEM;
  }
  snprintf(m->name, sizeof m->name, "%s", sp->name ? sp->name : "model");
  m->ctx = sp->ctx;
  m->loss = sp->loss;
  m->nlayers = sp->nlayers;
  memcpy(m->layers, sp->layers, (size_t)sp->nlayers * sizeof *m->layers);
  m->batch = sp->batch;
  m->optim = sp->optim;
  layout(m);
  *out = m;
  return 0;
}

void tr_model_free(tr_model *m) {
  if (!m) return;
  free(m->layers);
  free(m->tensors);
  free(m->init);
  free(m->layer_tensor0);
  free(m->layer_offset);
  free(m);
}

/* ---- the workloads ------------------------------------------------------------------------------ */

int tr_model_simplenet(tr_model **out) {
  const tr_layer_spec layers[] = {tr_layer_linear(10, 100, 1), tr_layer_relu(100),
                                  tr_layer_linear(100, 1, 1)};
  const tr_model_spec sp = {.name = "simplenet", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 3,
                            .layers = layers, .batch = 64,
                            .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.01f)};
  return tr_model_new(out, &sp, NULL, 0);
}

int tr_model_mlp(tr_model **out, int width, int depth) {
  *out = NULL;
  if (width <= 0 || depth <= 0 || depth > 1024) return TR_EINVAL;
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
  int rc = tr_model_new(out, &sp, NULL, 0);
  free(layers);
  return rc;
}

tr_gpt_config tr_gpt_defaults(void) {
  return (tr_gpt_config){.vocab = 256, .ctx = 128, .width = 256, .layers = 4, .heads = 4,
                         .hidden = 1024};
}

int tr_model_gpt(tr_model **out, const tr_gpt_config *cfg) {
  *out = NULL;
  const tr_gpt_config c = cfg ? *cfg : tr_gpt_defaults();
  if (c.layers < 0 || c.layers > 1024) return TR_EINVAL;
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
  int rc = tr_model_new(out, &sp, NULL, 0);
  free(layers);
  return rc;
}

int tr_model_named(tr_model **out, const char *name, char *err, size_t err_size) {
  *out = NULL;
  int rc;
  if (name && !strcmp(name, "simplenet")) rc = tr_model_simplenet(out);
  else if (name && !strcmp(name, "mlp")) rc = tr_model_mlp(out, 1024, 8);
  else if (name && !strcmp(name, "gpt")) rc = tr_model_gpt(out, NULL);
  else return say(err, err_size, "model '%s': not one of simplenet, mlp, gpt", name ? name : "");
  if (rc) say(err, err_size, "model '%s': %s", name, tr_strerror(rc));
  return rc;
}

/* ---- queries ---------------------------------------------------------------------------------- */

const char *tr_model_name(const tr_model *m) { return m->name; }
int tr_model_layer_count(const tr_model *m) { return m->nlayers; }
int tr_model_ctx(const tr_model *m) { return m->ctx; }
tr_loss_kind tr_model_loss(const tr_model *m) { return m->loss; }
int tr_model_batch(const tr_model *m) { return m->batch; }
tr_optim_config tr_model_optim(const tr_model *m) { return m->optim; }
size_t tr_model_param_count(const tr_model *m) { return m->param_count; }
size_t tr_model_numel(const tr_model *m) { return m->numel; }
int tr_model_tensor_count(const tr_model *m) { return m->ntensors; }

const tr_layer_spec *tr_model_layer(const tr_model *m, int layer) {
  TR_ASSERT(layer >= 0 && layer < m->nlayers);
  return &m->layers[layer];
}

int tr_model_token_input(const tr_model *m) { return m->layers[0].kind == TR_LAYER_EMBEDDING; }

size_t tr_model_input_bytes(const tr_model *m) {
  return (size_t)m->ctx * (tr_model_token_input(m) ? sizeof(int32_t) : (size_t)m->layers[0].in * sizeof(float));
}

size_t tr_model_target_bytes(const tr_model *m) {
  return (size_t)m->ctx * (m->loss == TR_LOSS_CROSSENTROPY
                               ? sizeof(int32_t)
                               : (size_t)m->layers[m->nlayers - 1].out * sizeof(float));
}

void tr_model_layer_span(const tr_model *m, int layer, size_t *offset, size_t *numel) {
  TR_ASSERT(layer >= 0 && layer < m->nlayers);
  *offset = m->layer_offset[layer];
  *numel = m->layer_offset[layer + 1] - m->layer_offset[layer];
}

const tr_tensor_info *tr_model_tensor(const tr_model *m, int index) {
  TR_ASSERT(index >= 0 && index < m->ntensors);
  return &m->tensors[index];
}

void tr_model_layer_tensors(const tr_model *m, int layer, int *first, int *count) {
  TR_ASSERT(layer >= 0 && layer < m->nlayers);
  *first = m->layer_tensor0[layer];
  *count = m->layer_tensor0[layer + 1] - m->layer_tensor0[layer];
}

double tr_model_layer_flops(const tr_model *m, int layer) {
  const tr_layer_spec *l = tr_model_layer(m, layer);
  const double T = m->ctx, C = l->in, H = l->hidden;
  switch (l->kind) {
  case TR_LAYER_LINEAR: return 2.0 * T * l->in * l->out;
  case TR_LAYER_RELU:
  case TR_LAYER_GELU: return T * C;
  case TR_LAYER_LAYERNORM: return 8.0 * T * C;
  case TR_LAYER_EMBEDDING: return T * l->out;
  case TR_LAYER_BLOCK: return 2.0 * T * (4.0 * C * C + 2.0 * C * H) + 4.0 * T * T * C;
  }
  return 0;
}

/* WORKLOADS.md's count: 6 per weight of a Linear (forward 2, backward 4), and for token
 * models 6 per parameter per token plus attention's 12 × T × width per token and block. */
double tr_model_train_flops(const tr_model *m) {
  const double T = m->ctx;
  double flops = 0;
  if (tr_model_token_input(m)) {
    flops = 6.0 * (double)m->param_count * T;
    for (int l = 0; l < m->nlayers; l++)
      if (m->layers[l].kind == TR_LAYER_BLOCK) flops += 12.0 * T * m->layers[l].in * T;
    return flops;
  }
  for (int l = 0; l < m->nlayers; l++)
    if (m->layers[l].kind == TR_LAYER_LINEAR) flops += 6.0 * m->layers[l].in * m->layers[l].out;
  return flops;
}

/* Cuts minimising the costliest stage: dynamic programming over (layers, stages). */
int tr_model_balance(const tr_model *m, int parts, int *cuts) {
  double *flops = malloc((size_t)m->nlayers * sizeof *flops);
  if (flops == NULL) return TR_ENOMEM;
  for (int i = 0; i < m->nlayers; i++) flops[i] = tr_model_layer_flops(m, i);
  int rc = tr_model_balance_costs(m, flops, parts, cuts);
  free(flops);
  return rc;
}

int tr_model_balance_costs(const tr_model *m, const double *cost, int parts, int *cuts) {
  const int L = m->nlayers;
  if (parts < 1 || parts > L) return TR_EINVAL;
  double *pre = malloc((size_t)(L + 1) * sizeof *pre);
  double *best = malloc((size_t)(L + 1) * (size_t)(parts + 1) * sizeof *best);
  int *arg = malloc((size_t)(L + 1) * (size_t)(parts + 1) * sizeof *arg);
  if (!pre || !best || !arg) {
    free(pre), free(best), free(arg);
    return TR_ENOMEM;
  }
  pre[0] = 0;
  for (int i = 0; i < L; i++) pre[i + 1] = pre[i] + cost[i];
#define AT(a, i, k) a[(size_t)(i) * (size_t)(parts + 1) + (size_t)(k)]
  /* best(i, k): the least max cost of cutting layers [0, i) into k stages */
  for (int i = 0; i <= L; i++)
    for (int k = 0; k <= parts; k++) AT(best, i, k) = DBL_MAX;
  AT(best, 0, 0) = 0;
  for (int k = 1; k <= parts; k++)
    for (int i = k; i <= L; i++)
      for (int j = k - 1; j < i; j++) {
        if (AT(best, j, k - 1) == DBL_MAX) continue;
        double c = fmax(AT(best, j, k - 1), pre[i] - pre[j]);
        if (c < AT(best, i, k)) AT(best, i, k) = c, AT(arg, i, k) = j;
      }
  cuts[parts] = L;
  for (int k = parts; k > 0; k--) cuts[k - 1] = AT(arg, cuts[k], k);
#undef AT
  free(pre), free(best), free(arg);
  return 0;
}
