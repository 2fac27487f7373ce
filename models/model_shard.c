/* model_shard.c — tensor parallelism's plan (tr_model_shard): which layers a member of a
 * tensor group holds in part, and how, and the member's model made of the parts.
 *
 * The plan walks the layers in order:
 *   - a linear layer followed, through layers that act element by element (relu, gelu,
 *     dropout), by another linear layer: the first COLUMN, the second ROW (Megatron's pair:
 *     one all-reduce after the second in forward, one before the first in backward), the
 *     element-wise layers between them on the member's columns (dropout drawing, for each
 *     of its elements, the whole layer's mask element);
 *   - the model's last layer, a linear one not in a pair, COLUMN when the loss is
 *     vocab_parallel (the loss reduces across the group), else held whole;
 *   - a residual: its inner layers planned the same way inside it (its inner chain must end
 *     at its input's width, which a pair's row layer gives back whole);
 *   - any other kind with a shard op (the transformer block, the embedding): split its own
 *     way (TR_SPLIT_SELF); without one, held whole: every member computes it alike.
 * A width that does not divide is refused, naming the layer ("layer 2 (linear): 10 output
 * features across 4 members"): nothing is padded here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models_impl.h"

typedef struct planner {
  const tr_model *m;
  int part, parts;
  int split;                /* layers split so far */
  char *err;
  size_t err_size;
} planner;

static int count_specs(int n, const tr_layer_spec *l) {
  int total = n;
  for (int i = 0; i < n; i++)
    if (l[i].n > 0 && l[i].inner) total += count_specs(l[i].n, l[i].inner);
  return total;
}

static int elementwise(const tr_layer_type *k) {
  return k == &tr_layer_relu_type || k == &tr_layer_gelu_type || k == &tr_layer_dropout_type;
}

/* "3" at the top, "3.1" inside layer 3 */
static void name_of(char *to, size_t size, const char *path, int i) {
  snprintf(to, size, "%s%s%d", path, *path ? "." : "", i);
}

static int shard(planner *p, tr_layer_spec *l, tr_split how, const char *name) {
  char what[200] = "";
  tr_layer_spec member;
  const int rc = l->type->shard(l, how, p->part, p->parts, &member, what, sizeof what);
  if (rc)
    return tr_errorf(p->err, p->err_size, rc, "layer %s (%s): %s", name, l->type->name,
                     *what ? what : tr_strerror(rc));
  *l = member;
  p->split++;
  return 0;
}

/* An element-wise layer between a pair: the member's columns of it (dropout draws the whole
 * layer's mask on them: dropout.c). */
static void narrow(planner *p, tr_layer_spec *l) {
  l->in /= p->parts;
  l->out /= p->parts;
  l->part = p->part;
  l->parts = p->parts;
}

static int plan_list(planner *p, tr_layer_spec *L, int n, const char *path, int top) {
  for (int i = 0; i < n; i++) {
    tr_layer_spec *l = &L[i];
    char name[64];
    name_of(name, sizeof name, path, i);
    if (l->type == &tr_layer_linear_type) {
      int j = i + 1;
      while (j < n && elementwise(L[j].type)) j++;
      if (j < n && L[j].type == &tr_layer_linear_type) {
        char second[64];
        name_of(second, sizeof second, path, j);
        TR__TRY(shard(p, l, TR_SPLIT_COLUMN, name));
        for (int k = i + 1; k < j; k++) narrow(p, &L[k]);
        TR__TRY(shard(p, &L[j], TR_SPLIT_ROW, second));
        i = j;
      } else if (top && i == n - 1 && p->m->loss->vocab_parallel) {
        TR__TRY(shard(p, l, TR_SPLIT_COLUMN, name));
      }
    } else if (l->type == &tr_layer_residual_type && l->n > 0 && l->inner) {
      const int before = p->split;
      TR__TRY(plan_list(p, (tr_layer_spec *)l->inner, l->n, name, 0));
      if (p->split > before) l->part = p->part, l->parts = p->parts; /* lent the comm */
    } else if (l->type->shard) {
      TR__TRY(shard(p, l, TR_SPLIT_SELF, name));
    }
  }
  return 0;
}

/* The specs of m in one array, inner ones after the top level as m holds them, their inner
 * pointers into the copy. */
static tr_layer_spec *copy_specs(const tr_model *m, int *count) {
  const int n = count_specs(m->nlayers, m->layers);
  tr_layer_spec *to = malloc((size_t)n * sizeof *to);
  if (!to) return NULL;
  memcpy(to, m->layers, (size_t)n * sizeof *to);
  for (int i = 0; i < n; i++)
    if (to[i].inner) to[i].inner = to + (to[i].inner - m->layers);
  *count = n;
  return to;
}

/* Every tensor of the member is the part of m's of the same name, shape and place that the
 * plan meant: a kind's shard that declared otherwise is caught here, not in a checkpoint. */
static int check_parts(const tr_model *m, const tr_model *member, char *err, size_t size) {
  if (member->ntensors != m->ntensors)
    return tr_errorf(err, size, TR_EINVAL, "model '%s': a member has %d tensors, the whole %d",
                     m->name, member->ntensors, m->ntensors);
  for (int t = 0; t < m->ntensors; t++) {
    const tr_tensor_info *w = &m->tensors[t], *a = &member->tensors[t];
    const tr_tensor_part *p = &member->parts[t];
    if (strcmp(w->name, a->name) || p->whole[0] != w->shape[0] || p->whole[1] != w->shape[1] ||
        member->whole_offset[t] != w->offset)
      return tr_errorf(err, size, TR_EINVAL, "model '%s': member tensor %s (whole %lldx%lld) is "
                       "not a part of the whole's %s (%lldx%lld)", m->name, a->name,
                       (long long)p->whole[0], (long long)p->whole[1], w->name,
                       (long long)w->shape[0], (long long)w->shape[1]);
  }
  return 0;
}

int tr_model_shard(const tr_model *m, int part, int parts, tr_model **member, char *err,
                   size_t err_size) {
  if (!m || !member)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_model_shard: %s is NULL", m ? "member" : "m");
  *member = NULL;
  if (parts < 1 || part < 0 || part >= parts)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_model_shard: model '%s': part %d of parts %d: "
                     "give parts >= 1 and 0 <= part < parts", m->name, part, parts);
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].parts > 1)
      return tr_errorf(err, err_size, TR_EINVAL, "model '%s': layer %d is already part %d of %d "
                       "(split a whole model)", m->name, i, m->layers[i].part, m->layers[i].parts);
  int n;
  tr_layer_spec *specs = copy_specs(m, &n);
  if (!specs) return tr_errorf(err, err_size, TR_ENOMEM, "model '%s': out of memory", m->name);
  planner p = {.m = m, .part = part, .parts = parts, .err = err, .err_size = err_size};
  int rc = parts > 1 ? plan_list(&p, specs, m->nlayers, "", 1) : 0;
  if (rc == 0) {
    const tr_model_spec sp = {.name = m->name, .ctx = m->ctx, .loss = m->loss,
                              .nlayers = m->nlayers, .layers = specs, .batch = m->batch,
                              .optim = m->optim};
    char what[256] = "";
    rc = tr_model_new(member, &sp, what, sizeof what);
    if (rc)
      tr_errorf(err, err_size, rc, "model '%s', member %d of %d: %s", m->name, part, parts, what);
  }
  free(specs);
  if (rc == 0 && (rc = check_parts(m, *member, err, err_size))) {
    tr_model_free(*member);
    *member = NULL;
  }
  return rc;
}
