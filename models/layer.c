/* layer.c — what every layer kind shares: checking a chain of layers, declaring tensors (into
 * the model's table, and PyTorch's Linear and LayerNorm parts for the kinds built of them), the
 * table's optional slots with their defaults, and the layers' random keys. The kinds in layers/
 * and model.c sit on it; it uses neither. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers_impl.h"
#include "models_impl.h"

int tr__check_same_width(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  return l->out == in ? 0
                      : tr_errorf(err, err_size, TR_EINVAL, "in %d and out %d differ", in, l->out);
}

static int check_one(const tr_layer_spec *l, int in, int tokens, char *err, size_t size) {
  const tr_layer_type *k = l->type;
  if (!k || !k->name || !k->forward || !k->backward)
    return tr_errorf(err, size, TR_EINVAL, "no kind, or a kind without name, forward or backward");
  if (!k->backward_input != !k->backward_weight)
    return tr_errorf(err, size, TR_EINVAL, "a split backward needs both halves (backward_input "
                     "and backward_weight), or neither");
  if (k->token_input != tokens)
    return tr_errorf(err, size, TR_EINVAL,
                     k->token_input ? "takes tokens, and only the model's first layer may"
                                    : "takes floats, not the model's tokens");
  if (l->in <= 0 || l->out <= 0)
    return tr_errorf(err, size, TR_EINVAL, "widths %d -> %d must be positive", l->in, l->out);
  if (l->in != in) return tr_errorf(err, size, TR_EINVAL, "takes width %d, is given %d", l->in, in);
  return k->check ? k->check(l, in, err, size) : 0;
}

int tr_layers_check(int n, const tr_layer_spec *layers, int in, int tokens, char *err,
                    size_t err_size) {
  if (!layers) return tr_errorf(err, err_size, TR_EINVAL, "tr_layers_check: layers is NULL");
  if (n <= 0)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_layers_check: n %d: give 1 or more layers", n);
  char what[256] = "";
  for (int i = 0; i < n; i++) {
    const tr_layer_spec *l = &layers[i];
    if (check_one(l, i ? layers[i - 1].out : in, i == 0 && tokens, what, sizeof what))
      return tr_errorf(err, err_size, TR_EINVAL, "layer %d (%s): %s", i,
                       l->type && l->type->name ? l->type->name : "?", what);
  }
  return 0;
}

/* ---- tensors ------------------------------------------------------------------------------ */

/* Appends to the model's table at the next aligned offset: the end every declaration reaches
 * (models_impl.h). A part is laid out at its own size in the member's space; its whole
 * tensor's offset in the whole model's space is counted beside (whole_numel), as the whole
 * model would lay it out, so that initialisation draws what the whole model draws. */
static int grow(tr_model *m) {
  const int cap = m->tensors_cap ? 2 * m->tensors_cap : 16;
  tr_tensor_info *t = realloc(m->tensors, (size_t)cap * sizeof *t);
  if (t) m->tensors = t;
  tr__tensor_init *in = realloc(m->init, (size_t)cap * sizeof *in);
  if (in) m->init = in;
  tr_tensor_part *pa = realloc(m->parts, (size_t)cap * sizeof *pa);
  if (pa) m->parts = pa;
  size_t *wo = realloc(m->whole_offset, (size_t)cap * sizeof *wo);
  if (wo) m->whole_offset = wo;
  if (!t || !in || !pa || !wo) return TR_ENOMEM;
  m->tensors_cap = cap;
  return 0;
}

int tr__model_add_tensor(tr_model *m, int layer, const char *name, int64_t d0, int64_t d1,
                         tr_init_kind init, float scale, const tr_tensor_part *part) {
  if (m->ntensors == m->tensors_cap) TR__TRY(grow(m));
  tr_tensor_info *t = &m->tensors[m->ntensors];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->layer = layer;
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  t->offset = m->numel;
  m->init[m->ntensors] = (tr__tensor_init){init, scale};
  m->parts[m->ntensors] = part ? *part : (tr_tensor_part){.whole = {d0, d1}};
  m->whole_offset[m->ntensors] = m->whole_numel;
  const tr_tensor_part *p = &m->parts[m->ntensors];
  m->whole_numel += tr__align_floats((size_t)p->whole[0] * (size_t)(p->whole[1] ? p->whole[1] : 1));
  m->numel += tr__align_floats(t->numel);
  m->param_count += t->numel;
  m->ntensors++;
  return 0;
}

/* The full name, checked: "<prefix><name>" fits tr_tensor_info's. */
static int full_name(const tr_tensor_list *t, const char *name, char *full, size_t size) {
  int k = snprintf(full, size, "%s%s", t->prefix, name);
  if (k < 0 || (size_t)k >= sizeof ((tr_tensor_info *)0)->name)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tensor %s: name longer than %zu characters",
                     full, sizeof((tr_tensor_info *)0)->name - 1);
  return 0;
}

int tr_tensor_list_add(tr_tensor_list *t, const char *name, int64_t d0, int64_t d1,
                       tr_init_kind init, float scale) {
  TR__NOT_NULL(t);
  if (name == NULL) return tr_errorf(t->err, t->err_size, TR_EINVAL, "tr_tensor_list_add: name is NULL");
  if (d0 <= 0 || d1 < 0 || (unsigned)init > TR_INIT_ZEROS)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tensor %s%s: shape (%lld,%lld), init %d",
                     t->prefix, name, (long long)d0, (long long)d1, (int)init);
  t->count++;
  if (!t->m) return 0;
  char full[sizeof t->prefix + 64];
  TR__TRY(full_name(t, name, full, sizeof full));
  return tr__model_add_tensor(t->m, t->layer, full, d0, d1, init, scale, NULL);
}

int tr_tensor_list_add_part(tr_tensor_list *t, const char *name, int64_t d0, int64_t d1,
                            tr_init_kind init, float scale, int axis, int groups, int part,
                            int parts) {
  TR__NOT_NULL(t);
  if (name == NULL)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tr_tensor_list_add_part: name is NULL");
  if (d0 <= 0 || d1 < 0 || (unsigned)init > TR_INIT_ZEROS)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tensor %s%s: shape (%lld,%lld), init %d",
                     t->prefix, name, (long long)d0, (long long)d1, (int)init);
  const int64_t along = axis ? d1 : d0;
  if (parts < 1 || part < 0 || part >= parts || groups < 1 || (axis != 0 && axis != 1) ||
      (axis == 1 && d1 == 0) || along % groups)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tensor %s%s: part %d of %d along axis %d "
                     "in %d groups of shape (%lld,%lld)", t->prefix, name, part, parts, axis,
                     groups, (long long)d0, (long long)d1);
  t->count++;
  if (!t->m) return 0;
  char full[sizeof t->prefix + 64];
  TR__TRY(full_name(t, name, full, sizeof full));
  const tr_tensor_part p = {.axis = axis, .groups = groups, .part = part, .parts = parts,
                            .whole = {axis ? d0 : d0 * parts, axis ? d1 * parts : d1}};
  return tr__model_add_tensor(t->m, t->layer, full, d0, d1, init, scale, &p);
}

/* Along axis 0, each group's rows of the part are one run; along axis 1, each row's columns
 * of each group are. */
int tr__tensor_part_runs(const tr_tensor_part *p, size_t numel, tr__part_run_fn fn, void *arg) {
  if (p->parts < 1) return fn(arg, 0, 0, numel);
  const size_t W0 = (size_t)p->whole[0], W1 = p->whole[1] ? (size_t)p->whole[1] : 1;
  const size_t G = (size_t)p->groups, P = (size_t)p->parts, k = (size_t)p->part;
  if (p->axis == 0) {
    const size_t block = W0 / G, rows = block / P;
    for (size_t g = 0; g < G; g++)
      TR__TRY(fn(arg, g * rows * W1, (g * block + k * rows) * W1, rows * W1));
    return 0;
  }
  const size_t block = W1 / G, cols = block / P, d1 = W1 / P;
  for (size_t r = 0; r < W0; r++)
    for (size_t g = 0; g < G; g++)
      TR__TRY(fn(arg, r * d1 + g * cols, r * W1 + g * block + k * cols, cols));
  return 0;
}

typedef struct part_copy {
  float *whole, *part;
  int to_whole;
} part_copy;

static int copy_run(void *arg, size_t part_at, size_t whole_at, size_t n) {
  const part_copy *c = arg;
  if (c->to_whole) memcpy(c->whole + whole_at, c->part + part_at, n * sizeof(float));
  else memcpy(c->part + part_at, c->whole + whole_at, n * sizeof(float));
  return 0;
}

void tr_tensor_part_copy(const tr_tensor_part *p, float *whole, float *part, int to_whole) {
  if (!p || !whole || !part)
    return (void)tr__misuse(0, "tr_tensor_part_copy: %s is NULL: nothing copied",
                            !p ? "p" : !whole ? "whole" : "part");
  const size_t numel = (size_t)p->whole[0] * (size_t)(p->whole[1] ? p->whole[1] : 1);
  part_copy c = {whole, part, to_whole};
  (void)tr__tensor_part_runs(p, numel, copy_run, &c);
}

int tr_tensor_list_add_layer(tr_tensor_list *t, const char *prefix, const tr_layer_spec *l,
                             int T) {
  TR__NOT_NULL(t);
  if (!l || !l->type || !prefix)
    return tr_errorf(t->err, t->err_size, TR_EINVAL, "tr_tensor_list_add_layer: %s is NULL",
                     !l ? "l" : !prefix ? "prefix" : "l->type");
  if (!l->type->tensors) return 0;
  const size_t len = strlen(t->prefix);
  int k = snprintf(t->prefix + len, sizeof t->prefix - len, "%s.", prefix);
  int rc = k < 0 || (size_t)k >= sizeof t->prefix - len
               ? tr_errorf(t->err, t->err_size, TR_EINVAL, "tensors of %s%s: names nested too deep",
                           t->prefix, prefix)
               : l->type->tensors(l, T, t);
  t->prefix[len] = 0;
  return rc;
}

int tr_layer_tensor_count(const tr_layer_spec *l, int T) {
  tr_tensor_list t = {0};
  return tr_tensor_list_add_layer(&t, "", l, T) ? 0 : t.count;
}

/* PyTorch's Linear: weight and bias uniform in +-1/sqrt(fan_in). */
int tr__declare_linear(tr_tensor_list *t, const char *prefix, int in, int out, int bias) {
  char name[40];
  const float b = 1.0f / sqrtf((float)in);
  snprintf(name, sizeof name, "%sweight", prefix);
  TR__TRY(tr_tensor_list_add(t, name, out, in, TR_INIT_UNIFORM, b));
  snprintf(name, sizeof name, "%sbias", prefix);
  return bias ? tr_tensor_list_add(t, name, out, 0, TR_INIT_UNIFORM, b) : 0;
}

/* PyTorch's LayerNorm: weight ones, bias zeros. */
int tr__declare_layernorm(tr_tensor_list *t, const char *prefix, int width) {
  char name[40];
  snprintf(name, sizeof name, "%sweight", prefix);
  TR__TRY(tr_tensor_list_add(t, name, width, 0, TR_INIT_ONES, 0));
  snprintf(name, sizeof name, "%sbias", prefix);
  return tr_tensor_list_add(t, name, width, 0, TR_INIT_ZEROS, 0);
}

/* ---- the optional slots ---------------------------------------------------------------------- */

/* The slots of a spec with no kind (NULL, or a zeroed spec's): nothing, 0. */
#define KIND_OR(l, none) \
  if ((l) == NULL || (l)->type == NULL) return none

size_t tr_layer_act_floats(const tr_layer_spec *l, int B, int T) {
  KIND_OR(l, 0);
  return l->type->act_floats ? l->type->act_floats(l, B, T) : (size_t)B * T * l->out;
}

size_t tr_layer_scratch_floats(const tr_layer_spec *l, int B, int T) {
  KIND_OR(l, 0);
  return l->type->scratch_floats ? l->type->scratch_floats(l, B, T) : 0;
}

void tr_layer_bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch) {
  if (act == NULL || scratch == NULL)
    return (void)tr__misuse(0, "tr_layer_bf16_elems: %s is NULL", act ? "scratch" : "act");
  *act = *scratch = 0;
  KIND_OR(l, );
  if (l->type->bf16_elems) l->type->bf16_elems(l, B, T, act, scratch);
}

double tr_layer_flops(const tr_layer_spec *l, int T) {
  KIND_OR(l, 0);
  return l->type->flops ? l->type->flops(l, T) : 0.0;
}

size_t tr_layer_keep_floats(const tr_layer_spec *l, int B, int T) {
  KIND_OR(l, 0);
  return l->type->keep_floats ? l->type->keep_floats(l, B, T) : 0;
}

int tr_layer_draws(const tr_layer_spec *l) {
  KIND_OR(l, 0);
  return l->type->draws ? l->type->draws(l) != 0 : 0;
}

int tr_layer_splits(const tr_layer_spec *l) {
  KIND_OR(l, 0);
  return l->type->backward_weight != NULL;
}

/* A pass's context names its layer's kind: 0, or TR_EINVAL said. */
static int ctx_given(const char *call, const tr_layer_ctx *c) {
  if (c && c->l && c->l->type) return 0;
  return tr__misuse(TR_EINVAL, "%s: %s is NULL", call, !c ? "c" : !c->l ? "c->l" : "c->l->type");
}

int tr_layer_backward_input(const tr_layer_ctx *c, const float *dout, float *dinp) {
  TR__TRY(ctx_given(__func__, c));
  const tr_layer_type *k = c->l->type;
  return k->backward_input ? k->backward_input(c, dout, dinp) : k->backward(c, dout, dinp);
}

int tr_layer_backward_weight(const tr_layer_ctx *c, const float *dout) {
  TR__TRY(ctx_given(__func__, c));
  const tr_layer_type *k = c->l->type;
  return k->backward_weight ? k->backward_weight(c, dout) : 0;
}

/* ---- randomness and errors ---------------------------------------------------------------------- */

/* splitmix64's finaliser over the pair: distinct (seed, index) give unrelated keys. */
uint64_t tr_layer_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed ^ (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int tr_layer_fail(const tr_layer_ctx *c, int rc, const char *fmt, ...) {
  if (c == NULL) return tr__misuse(rc, "tr_layer_fail: c is NULL (%s)", tr_strerror(rc));
  if (c->err && c->err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->err_size, fmt, ap);
    va_end(ap);
  }
  return rc;
}
