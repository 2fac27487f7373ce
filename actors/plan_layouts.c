/* plan_layouts.c — the strategy table (tr_plan.h): the layouts a model can run on some
 * devices, as troupe bench runs them, predicted and ranked (tr_plan_layouts, tr_plan_rank).
 * One list for both: bench measures these rows, plan predicts them, and a run with
 * --layout auto takes the first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_config.h"
#include "tr_plan.h"

int tr_plan_layouts(const char *model, const char *devices, tr_plan_layout *out, int cap,
                    int *count, char *err, size_t n) {
  *count = 0;
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
    out[k].predicted = o->strategy != TR_STRATEGY_ASYNC && o->strategy != TR_STRATEGY_LOCAL; \
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
  (void)err, (void)n;
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
