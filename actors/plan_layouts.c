/* plan_layouts.c — the strategy table (tr_plan.h): the layouts a model can run on some
 * devices, as troupe bench runs them, predicted and ranked (tr_plan_layouts, tr_plan_rank).
 * One list for both: bench measures these rows, plan predicts them, and a run with
 * --layout auto takes the first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_config.h"
#include "planner.h"

int tr_plan_layouts(const char *model, const char *devices, tr_plan_layout *out, int cap,
                    int *count, char *err, size_t n) {
  if (!model || !devices || !out || !count)
    return tr_errorf(err, n, TR_EINVAL, "tr_plan_layouts: %s is NULL",
                     !model ? "model" : !devices ? "devices" : !out ? "out" : "count");
  *count = 0;
  if (cap < 0) return tr_errorf(err, n, TR_EINVAL, "tr_plan_layouts: cap %d: give 0 or more", cap);
  tr_model *m;
  tr_device_list *list;
  int rc = tr_model_named(&m, model, err, n);
  if (rc) return rc;
  const int layers = tr_model_layer_count(m);
  tr_model_free(m);
  if ((rc = tr_device_list_open(&list, devices, err, n))) return rc;
  const int d = tr_device_list_count(list);
  tr_device_list_close(list);
  tr_train_options base = tr_train_defaults();
  base.model = model;
  base.devices = devices;
  int k = 0;
#define ROW(lbl, ...)                                                            \
  do {                                                                           \
    if (k == cap) break;                                                         \
    out[k] = (tr_plan_layout){.o = base};                                        \
    snprintf(out[k].label, sizeof out[k].label, "%s", lbl);                      \
    tr_train_options *o = &out[k].o;                                             \
    __VA_ARGS__;                                                                 \
    out[k].predicted = true;                                                     \
    k++;                                                                         \
  } while (0)
  char label[24];
  ROW("single", o->strategy = TR_STRATEGY_SINGLE);
  if (d > 1) {
    ROW("dp", o->strategy = TR_STRATEGY_DP);
    ROW("dp --zero 1", o->strategy = TR_STRATEGY_DP, o->job.zero = 1);
    ROW("mp", o->strategy = TR_STRATEGY_MP);
    const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B,
                                      TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
      if (kinds[i] == TR_SCHEDULE_INTERLEAVED && layers < 2 * d) continue; /* 2 pieces each */
      snprintf(label, sizeof label, "pipeline %s", tr_schedule_kind_name(kinds[i]));
      ROW(label, o->strategy = TR_STRATEGY_PIPELINE, o->job.layout.schedule = kinds[i],
          o->job.layout.microbatches = 8);
    }
    ROW("1f1b recompute", o->strategy = TR_STRATEGY_PIPELINE,
        o->job.layout.schedule = TR_SCHEDULE_1F1B, o->job.layout.microbatches = 8,
        o->job.memory.recompute = 1);
  }
  if (d >= 4 && d % 2 == 0) {
    ROW("hybrid", o->strategy = TR_STRATEGY_HYBRID, o->job.layout.microbatches = 4);
    ROW("hybrid --zero 1", o->strategy = TR_STRATEGY_HYBRID, o->job.layout.microbatches = 4,
        o->job.zero = 1);
  }
  if (d > 1) ROW("tp", o->strategy = TR_STRATEGY_TP);
  if (d >= 4 && d % 2 == 0)
    ROW("dp --tensor 2", o->strategy = TR_STRATEGY_DP, o->job.layout.tensor = 2);
  ROW("async 1", o->strategy = TR_STRATEGY_ASYNC, o->job.layout.replicas = 1);
  if (d > 1) {
    snprintf(label, sizeof label, "async %d", d);
    ROW(label, o->strategy = TR_STRATEGY_ASYNC, o->job.layout.replicas = d);
    snprintf(label, sizeof label, "async %d S=2", d);
    ROW(label, o->strategy = TR_STRATEGY_ASYNC, o->job.layout.replicas = d,
        o->job.async.staleness = 2);
    snprintf(label, sizeof label, "async %d dc .04", d);
    ROW(label, o->strategy = TR_STRATEGY_ASYNC, o->job.layout.replicas = d,
        o->job.async.dc_lambda = 0.04f);
    ROW("local", o->strategy = TR_STRATEGY_LOCAL, o->job.local.sync_every = 8);
  }
#undef ROW
  *count = k;
  return 0;
}

/* The most one device of the layout holds: each of its virtual stages' parameters, gradients,
 * optimizer state (a shard of it under ZeRO-1) and scratch, and the predicted activations. */
static uint64_t peak_bytes(const tr_plan_layout *l, uint64_t *sum) {
  uint64_t most = 0;
  *sum = 0;
  for (int i = 0; i < l->p.devices; i++) {
    const uint64_t b = l->p.state_bytes[i] + l->p.peak_activation_bytes[i];
    if (b > most) most = b;
    *sum += b;
  }
  return most;
}

static int better(const void *pa, const void *pb) {
  const tr_plan_layout *a = pa, *b = pb;
  const int ra = a->predicted && a->rc == 0 ? (a->fits ? 0 : 1) : 2;
  const int rb = b->predicted && b->rc == 0 ? (b->fits ? 0 : 1) : 2;
  if (ra != rb) return ra - rb;
  if (ra == 0 && a->p.samples_per_s != b->p.samples_per_s)
    return a->p.samples_per_s > b->p.samples_per_s ? -1 : 1;
  if (ra == 1 && a->peak_bytes != b->peak_bytes) return a->peak_bytes < b->peak_bytes ? -1 : 1;
  return 0;
}

int tr_plan_rank(tr_plan_layout *layouts, int count, uint64_t memory_limit,
                 const tr_plan_costs_config *cc, char *err, size_t n) {
  if (count < 0 || (layouts == NULL && count > 0))
    return tr_errorf(err, n, TR_EINVAL, count < 0 ? "tr_plan_rank: count %d: give 0 or more"
                                                  : "tr_plan_rank: layouts is NULL (count %d)",
                     count);
  for (int i = 0; i < count; i++) {
    tr_plan_layout *l = &layouts[i];
    if (!l->predicted) continue;
    l->rc = tr_plan_predict(&l->o, cc, &l->p, l->err, sizeof l->err);
    if (l->rc) continue;
    uint64_t sum;
    l->peak_bytes = peak_bytes(l, &sum);
    l->fits = memory_limit ? l->peak_bytes <= memory_limit
              : !l->p.memory_free ? true
              : (l->p.host ? sum : l->peak_bytes) <= l->p.memory_free;
  }
  /* qsort is not stable: the table's order breaks ties */
  for (int i = 1; i < count; i++)
    for (int j = i; j > 0 && better(&layouts[j - 1], &layouts[j]) > 0; j--) {
      tr_plan_layout t = layouts[j];
      layouts[j] = layouts[j - 1];
      layouts[j - 1] = t;
    }
  return 0;
}

int tr__plan_choose(const tr_train_options *o, tr_train_options *chosen, char *why, size_t nwhy,
                    char *err, size_t n) {
  const tr_layout_config *l = &o->job.layout;
  const tr_train_options d = tr_train_defaults(); /* a field left as it is is not given */
  const tr_layout_config *dl = &d.job.layout;
  const char *given = o->strategy != d.strategy               ? "strategy"
                      : l->replicas != dl->replicas           ? "layout.replicas"
                      : l->stages != dl->stages               ? "layout.stages"
                      : l->microbatches != dl->microbatches   ? "layout.microbatches"
                      : l->schedule != dl->schedule           ? "layout.schedule"
                      : l->chunks != dl->chunks               ? "layout.chunks"
                      : l->cuts                               ? "layout.cuts"
                      : l->tensor > 1                         ? "layout.tensor"
                      : o->job.zero != d.job.zero             ? "zero"
                      : o->job.memory.recompute               ? "memory.recompute"
                                                              : NULL;
  if (given)
    return tr_errorf(err, n, TR_EINVAL, TR__F("layout.automatic") ": the plan chooses the "
                     "strategy and the layout: give no " TR__F("%s") " beside it", given);
  if (tr_world_size(o->world) > 1)
    return tr_errorf(err, n, TR_EINVAL, TR__F("layout.automatic") ": the plan chooses in one "
                     "process (run troupe plan, then give its layout to every rank)");
  tr_plan_layout *ls = calloc(TR_PLAN_MAX_LAYOUTS, sizeof *ls);
  if (ls == NULL) return TR_ENOMEM;
  int count = 0;
  int rc = tr_plan_layouts(o->spec ? o->spec->name : o->model, o->devices, ls,
                           TR_PLAN_MAX_LAYOUTS, &count, err, n);
  for (int i = 0; rc == 0 && i < count; i++) {
    /* the exact layouts only: async workers and local SGD train other numbers (stale or
     * averaged parameters), which a run that asked for a layout did not choose */
    const tr_strategy s = ls[i].o.strategy;
    ls[i].predicted = s != TR_STRATEGY_ASYNC && s != TR_STRATEGY_LOCAL;
    const tr_train_options base = ls[i].o; /* the run's own options, its layout the row's */
    ls[i].o = *o;
    ls[i].o.strategy = base.strategy;
    ls[i].o.job.layout = base.job.layout;
    ls[i].o.job.zero = base.job.zero;
    ls[i].o.job.memory.recompute = base.job.memory.recompute;
  }
  if (rc == 0) rc = tr_plan_rank(ls, count, 0, NULL, err, n);
  if (rc == 0 && !(ls[0].predicted && ls[0].rc == 0 && ls[0].fits))
    rc = tr_errorf(err, n, TR_EINVAL, TR__F("layout.automatic") ": no layout of the model fits "
                   "on the devices%s%s", ls[0].rc ? ": " : "", ls[0].rc ? ls[0].err : "");
  if (rc == 0) {
    *chosen = ls[0].o;
    chosen->job.layout.automatic = 0;
    int others = 0;
    for (int i = 1; i < count; i++) others += ls[i].predicted && ls[i].rc == 0 && ls[i].fits;
    if (others)
      snprintf(why, nwhy, "layout %s: the fastest of %d predicted (%.0f samples/s; next %s, %.0f)",
               ls[0].label, others + 1, ls[0].p.samples_per_s, ls[1].label, ls[1].p.samples_per_s);
    else
      snprintf(why, nwhy, "layout %s: the only one predicted to fit (%.0f samples/s)",
               ls[0].label, ls[0].p.samples_per_s);
  }
  free(ls);
  return rc;
}
