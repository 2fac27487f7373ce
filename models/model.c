/* model.c — model descriptions: layer specs, the parameter space (every tensor's name, shape,
 * offset and initialisation) and cost-balanced cuts. The workloads of docs/WORKLOADS.md are
 * in workloads.c, above this file and the layer kinds they are built of. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models_impl.h"

/* ---- building a model ------------------------------------------------------------------------- */

/* Specs in a tree (composites' inner layers) up to this deep. */
enum { MAX_DEPTH = 16 };

/* Specs of layers[0..n) and everything inside them, or -1 when nested too deep. */
static int count_specs(int n, const tr_layer_spec *layers, int depth) {
  if (depth > MAX_DEPTH) return -1;
  int total = n;
  for (int i = 0; i < n; i++) {
    if (layers[i].n <= 0 || !layers[i].inner) continue;
    int k = count_specs(layers[i].n, layers[i].inner, depth + 1);
    if (k < 0) return -1;
    total += k;
  }
  return total;
}

/* Copies layers[0..n) to `to`, and their inner specs after them, depth first; returns the
 * next free spec. */
static tr_layer_spec *copy_specs(tr_layer_spec *to, int n, const tr_layer_spec *layers) {
  memcpy(to, layers, (size_t)n * sizeof *to);
  tr_layer_spec *next = to + n;
  for (int i = 0; i < n; i++) {
    if (to[i].n <= 0 || !to[i].inner) continue;
    tr_layer_spec *inner = next;
    next = copy_specs(inner, to[i].n, to[i].inner);
    to[i].inner = inner;
  }
  return next;
}

/* The tensors of each layer, as its kind declares them, in the order the stage reads them. */
static int layout(tr_model *m, char *err, size_t size) {
  for (int i = 0; i < m->nlayers; i++) {
    const tr_layer_spec *l = &m->layers[i];
    char what[256] = "", prefix[16];
    m->layer_tensor0[i] = m->ntensors;
    m->layer_offset[i] = m->numel;
    tr_tensor_list t = {.m = m, .layer = i, .err = what, .err_size = sizeof what};
    snprintf(prefix, sizeof prefix, "%d", i);
    int rc = tr_tensor_list_add_layer(&t, prefix, l, m->ctx);
    if (rc) {
      tr_errorf(err, size, TR_EINVAL, "layer %d (%s): its tensors: %s", i, l->type->name,
                *what ? what : tr_strerror(rc));
      return rc;
    }
  }
  m->layer_tensor0[m->nlayers] = m->ntensors;
  m->layer_offset[m->nlayers] = m->numel;
  return 0;
}

/* The loss's table and the optimizer's (tr_loss.h, tr_optim.h), and the last layer's width
 * as the loss's own check sees it. */
static int check_loss_and_optim(const tr_model_spec *sp, char *err, size_t size) {
  char what[256] = "";
  const tr_loss_type *loss = sp->loss ? sp->loss : TR_LOSS_MSE;
  const int V = sp->layers[sp->nlayers - 1].out;
  const char *name = sp->name ? sp->name : "model";
  if (tr_loss_kind_check(loss, what, sizeof what) ||
      tr_optim_kind_check(sp->optim.kind, what, sizeof what) ||
      (loss->check && loss->check(V, what, sizeof what)))
    return tr_errorf(err, size, TR_EINVAL, "model '%s': %s", name,
                     *what ? what : "refused by its loss");
  if (tr_optim_config_check(&sp->optim, NULL, what, sizeof what))
    return tr_errorf(err, size, TR_EINVAL, "model '%s': optim.%s", name, what);
  return 0;
}

int tr_model_new(tr_model **out, const tr_model_spec *sp, char *err, size_t err_size) {
  if (!out || !sp)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_model_new: %s is NULL", out ? "spec" : "out");
  *out = NULL;
  if (sp->nlayers <= 0 || !sp->layers)
    return tr_errorf(err, err_size, TR_EINVAL, sp->nlayers <= 0 ? "tr_model_new: spec->nlayers %d: "
                     "a model has 1 layer or more" : "tr_model_new: spec->layers is NULL "
                     "(spec->nlayers %d)", sp->nlayers);
  if (sp->ctx <= 0 || sp->batch <= 0)
    return tr_errorf(err, err_size, TR_EINVAL, "model: context %d and batch %d must be positive",
                     sp->ctx, sp->batch);
  const int nspecs = count_specs(sp->nlayers, sp->layers, 0);
  if (nspecs < 0)
    return tr_errorf(err, err_size, TR_EINVAL, "model: layers nested more than %d deep", MAX_DEPTH);
  const tr_layer_spec *first = &sp->layers[0];
  const int tokens = first->type && first->type->token_input;
  TR__TRY(tr_layers_check(sp->nlayers, sp->layers, first->in, tokens, err, err_size));
  TR__TRY(check_loss_and_optim(sp, err, err_size));

  tr_model *m = calloc(1, sizeof *m);
  if (m) {
    m->layers = malloc((size_t)nspecs * sizeof *m->layers);
    m->layer_tensor0 = calloc((size_t)sp->nlayers + 1, sizeof *m->layer_tensor0);
    m->layer_offset = calloc((size_t)sp->nlayers + 1, sizeof *m->layer_offset);
  }
  if (!m || !m->layers || !m->layer_tensor0 || !m->layer_offset) {
    tr_model_free(m);
    tr_errorf(err, err_size, TR_EINVAL, "model: out of memory");
    return TR_ENOMEM;
  }
  snprintf(m->name, sizeof m->name, "%s", sp->name ? sp->name : "model");
  m->ctx = sp->ctx;
  m->loss = sp->loss ? sp->loss : TR_LOSS_MSE; /* a zeroed spec's, as it always was */
  m->nlayers = sp->nlayers;
  copy_specs(m->layers, sp->nlayers, sp->layers);
  m->batch = sp->batch;
  m->optim = sp->optim;
  if (!m->optim.kind) m->optim.kind = TR_OPTIM_SGD; /* likewise */
  int rc = layout(m, err, err_size);
  if (rc) {
    tr_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

void tr_model_free(tr_model *m) {
  if (!m) return;
  free(m->layers);
  free(m->tensors);
  free(m->init);
  free(m->parts);
  free(m->whole_offset);
  free(m->layer_tensor0);
  free(m->layer_offset);
  free(m);
}

/* ---- queries ---------------------------------------------------------------------------------- */

/* Getters of NULL answer "", 0 or NULL; of a layer or tensor the model lacks, 0 or NULL, said
 * (tr_base.h, Misuse). */
const char *tr_model_name(const tr_model *m) { return m ? m->name : ""; }
int tr_model_layer_count(const tr_model *m) { return m ? m->nlayers : 0; }
int tr_model_ctx(const tr_model *m) { return m ? m->ctx : 0; }
tr_loss_kind tr_model_loss(const tr_model *m) { return m ? m->loss : NULL; }
int tr_model_batch(const tr_model *m) { return m ? m->batch : 0; }
tr_optim_config tr_model_optim(const tr_model *m) { return m ? m->optim : (tr_optim_config){0}; }
size_t tr_model_param_count(const tr_model *m) { return m ? m->param_count : 0; }
size_t tr_model_numel(const tr_model *m) { return m ? m->numel : 0; }
int tr_model_tensor_count(const tr_model *m) { return m ? m->ntensors : 0; }

static bool has(const tr_model *m, int i, int n, const char *what, const char *call) {
  if (m == NULL) return false;
  if (i >= 0 && i < n) return true;
  return tr__misuse(false, "%s: %s %d: model '%s' has %ss 0 to %d", call, what, i, m->name, what,
                    n - 1);
}
#define HAS_LAYER(m, l) has(m, l, (m) ? (m)->nlayers : 0, "layer", __func__)

const tr_layer_spec *tr_model_layer(const tr_model *m, int layer) {
  return HAS_LAYER(m, layer) ? &m->layers[layer] : NULL;
}

int tr_model_token_input(const tr_model *m) { return m ? m->layers[0].type->token_input : 0; }

size_t tr_model_input_bytes(const tr_model *m) {
  if (m == NULL) return 0;
  return (size_t)m->ctx * (tr_model_token_input(m) ? sizeof(int32_t) : (size_t)m->layers[0].in * sizeof(float));
}

size_t tr_model_target_bytes(const tr_model *m) {
  if (m == NULL) return 0;
  return (size_t)m->ctx * (m->loss->target == TR_LOSS_TARGET_CLASSES
                               ? sizeof(int32_t)
                               : (size_t)m->layers[m->nlayers - 1].out * sizeof(float));
}

void tr_model_layer_span(const tr_model *m, int layer, size_t *offset, size_t *numel) {
  if (offset == NULL || numel == NULL) return (void)tr__misuse(0, "tr_model_layer_span: %s is NULL",
                                                               offset ? "numel" : "offset");
  *offset = *numel = 0;
  if (!HAS_LAYER(m, layer)) return;
  *offset = m->layer_offset[layer];
  *numel = m->layer_offset[layer + 1] - m->layer_offset[layer];
}

const tr_tensor_info *tr_model_tensor(const tr_model *m, int index) {
  return has(m, index, m ? m->ntensors : 0, "tensor", __func__) ? &m->tensors[index] : NULL;
}

tr_tensor_part tr_model_tensor_part(const tr_model *member, int index) {
  if (!has(member, index, member ? member->ntensors : 0, "tensor", __func__))
    return (tr_tensor_part){0};
  return member->parts[index];
}

void tr_model_layer_tensors(const tr_model *m, int layer, int *first, int *count) {
  if (first == NULL || count == NULL)
    return (void)tr__misuse(0, "tr_model_layer_tensors: %s is NULL", first ? "count" : "first");
  *first = *count = 0;
  if (!HAS_LAYER(m, layer)) return;
  *first = m->layer_tensor0[layer];
  *count = m->layer_tensor0[layer + 1] - m->layer_tensor0[layer];
}

double tr_model_layer_flops(const tr_model *m, int layer) {
  return HAS_LAYER(m, layer) ? tr_layer_flops(&m->layers[layer], m->ctx) : 0;
}

/* Backward costs twice forward: the input's gradient and the weights' are a product each. */
double tr_model_train_flops(const tr_model *m) {
  double flops = 0;
  for (int l = 0; m && l < m->nlayers; l++) flops += tr_model_layer_flops(m, l);
  return 3.0 * flops;
}

/* Cuts minimising the costliest stage: dynamic programming over (layers, stages). */
/* A cut of m into `parts` pieces into cuts[parts + 1] can be asked for: 0, or TR_EINVAL said. */
static int cuttable(const char *call, const tr_model *m, int parts, const int *cuts) {
  if (m == NULL || cuts == NULL) return tr__misuse(TR_EINVAL, "%s: %s is NULL", call, m ? "cuts" : "m");
  if (parts < 1 || parts > m->nlayers)
    return tr__misuse(TR_EINVAL, "%s: parts %d: model '%s' has %d layers, so 1 to %d parts", call,
                      parts, m->name, m->nlayers, m->nlayers);
  return 0;
}

int tr_model_balance(const tr_model *m, int parts, int *cuts) {
  TR__TRY(cuttable(__func__, m, parts, cuts));
  double *flops = malloc((size_t)m->nlayers * sizeof *flops);
  if (flops == NULL) return TR_ENOMEM;
  for (int i = 0; i < m->nlayers; i++) flops[i] = tr_model_layer_flops(m, i);
  int rc = tr_model_balance_costs(m, flops, parts, cuts);
  free(flops);
  return rc;
}

int tr_model_balance_costs(const tr_model *m, const double *cost, int parts, int *cuts) {
  TR__TRY(cuttable(__func__, m, parts, cuts));
  TR__NOT_NULL(cost);
  const int L = m->nlayers;
  for (int i = 0; i < L; i++)
    if (!(cost[i] >= 0) || isinf(cost[i]))
      return tr__misuse(TR_EINVAL, "tr_model_balance_costs: cost[%d] %g: give a finite cost, 0 "
                        "or more", i, cost[i]);
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
