/* stage_init.c — a stage's parameters as it opens: each element drawn as the whole model
 * draws it (a tensor parallel member's parts included: tr_tensor_list_add_part), and the
 * check that a member's split layers have their member's tensor comm. stage.c calls both
 * from tr_stage_open. */
#include <stdio.h>
#include <string.h>

#include "stage_impl.h"

/* Tensor parallelism: a member's split layers are part `rank` of `size`, the comm's. */
int tr__stage_check_tensor(tr_stage *st, const tr_stage_config *cfg, char *err, size_t size) {
  const tr_tensor_comm *c = cfg->tensor;
  st->tensor = NULL; /* kept only where a layer is split: its passes then run eagerly */
  for (int i = cfg->first; i < st->info.end; i++) {
    const tr_layer_spec *l = &st->m->layers[i];
    if (l->parts <= 1) continue;
    st->tensor = c;
    if (!c || c->size != l->parts || c->rank != l->part) {
      snprintf(err, size, "tensor: layer %d (%s) is part %d of %d, the stage's tensor "
               "comm %s", i, l->type->name, l->part, l->parts,
               c ? "is another member's or another group's" : "is NULL");
      if (c)
        snprintf(err + strlen(err), size - strlen(err), " (member %d of %d)", c->rank, c->size);
      return TR_EINVAL;
    }
  }
  return 0;
}

/* One run of a tensor's elements, drawn as the whole model draws them (tr_device.h's
 * counter-based initialisers: each element from (seed, its index in the whole model)). */
typedef struct init_run {
  tr_stream *s;
  float *p;
  const tr__tensor_init *it;
  uint64_t seed;
  size_t whole_offset;
} init_run;

static int init_one_run(void *arg, size_t part_at, size_t whole_at, size_t n) {
  const init_run *r = arg;
  float *p = r->p + part_at;
  const uint64_t at = r->whole_offset + whole_at;
  switch (r->it->kind) {
  case TR_INIT_UNIFORM:
    return tr_init_uniform(r->s, p, n, -r->it->scale, r->it->scale, r->seed, at);
  case TR_INIT_NORMAL: return tr_init_normal(r->s, p, n, 0.0f, r->it->scale, r->seed, at);
  case TR_INIT_ONES: return tr_fill(r->s, p, n, 1.0f);
  case TR_INIT_ZEROS: break;
  }
  return 0;
}

int tr__stage_init_params(tr_stage *st, uint64_t seed) {
  const tr_model *m = st->m;
  tr_stream *s = st->s;
  TR__TRY(tr_memset(s, st->params, 0, st->info.numel * sizeof(float))); /* and the padding */
  int t0, t1, n;
  tr_model_layer_tensors(m, st->info.first, &t0, &n);
  tr_model_layer_tensors(m, st->info.end - 1, &t1, &n);
  for (int t = t0; t < t1 + n; t++) {
    const tr_tensor_info *ti = &m->tensors[t];
    /* every element from (seed, its offset in the whole model): the same however cut, and
     * a member's part (tensor parallelism) as the whole tensor's elements it holds */
    init_run r = {s, st->params + (ti->offset - st->info.offset), &m->init[t], seed,
                  m->whole_offset[t]};
    TR__TRY(tr__tensor_part_runs(&m->parts[t], ti->numel, init_one_run, &r));
  }
  return 0;
}
