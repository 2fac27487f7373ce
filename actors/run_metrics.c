/* run_metrics.c — the table of run metrics, the pairs the parts send, and their reduction
 * by each row's combine rule into the run's result (run_metrics.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "result_impl.h"
#include "tr_base.h"

const tr__metric tr__metrics[TR__METRIC_COUNT] = {
#define TR__METRIC_ROW(id, key_, unit_, combine_, scope_, type_, where, json_, fn, summary_)   \
  [TR__M_##id] = {.key = key_, .unit = unit_, .combine = TR__COMBINE_##combine_,             \
                  .scope = TR__SCOPE_##scope_, .type = TR__##type_, where,                  \
                  .json = TR__JSON_##json_, TR__METRIC_FN_##json_(fn), .summary = summary_},
#define TR__METRIC_FN_NAME(fn) .name = fn
#define TR__METRIC_FN_FN(fn) .real = fn
#define TR__METRIC_FN_VALUE(fn) .name = NULL
#define TR__METRIC_FN_REAL4(fn) .name = NULL
#define TR__METRIC_FN_REAL6(fn) .name = NULL
#define TR__METRIC_FN_BOOL(fn) .name = NULL
#define TR__METRIC_FN_CUTS(fn) .name = NULL
#define TR__METRIC_FN_BINS(fn) .name = NULL
#define TR__METRIC_FN_NONE(fn) .real = fn /* a figure of the summary's only */
    TR__RUN_METRICS(TR__METRIC_ROW)
#undef TR__METRIC_ROW
};

/* ---- pairs ---------------------------------------------------------------------------- */

static tr__pair *add(tr__figures *f, tr__metric_id key, tr__type type) {
  TR_ASSERT(key >= 0 && key < TR__METRIC_COUNT && tr__metrics[key].type == type);
  TR_ASSERT(f->n < TR__FIGURES_PAIRS);
  tr__pair *p = &f->pairs[f->n++];
  *p = (tr__pair){.key = (uint16_t)key};
  return p;
}

void tr__figures_int(tr__figures *f, tr__metric_id key, int64_t v) {
  add(f, key, TR__INT)->v.i = v;
}

void tr__figures_bin(tr__figures *f, tr__metric_id key, int bin, int64_t v) {
  TR_ASSERT(tr__metrics[key].combine == TR__COMBINE_BINS && bin >= 0 &&
            bin < TR_TRAIN_STALENESS_BINS);
  tr__pair *p = add(f, key, TR__INT);
  p->index = (uint16_t)bin;
  p->v.i = v;
}

void tr__figures_real(tr__figures *f, tr__metric_id key, double v) {
  add(f, key, TR__REAL)->v.f = v;
}

void tr__figures_text(tr__figures *f, tr__metric_id key, const char *text) {
  const size_t len = strlen(text);
  TR_ASSERT(len < (size_t)(TR__FIGURES_TEXT - f->text_used));
  add(f, key, TR__TEXT)->v.i = f->text_used;
  memcpy(f->text + f->text_used, text, len + 1);
  f->text_used += (int)len + 1;
}

void tr__figures_shift_clock(tr__figures *f, int64_t offset) {
  for (int i = 0; i < f->n && i < TR__FIGURES_PAIRS; i++) {
    tr__pair *p = &f->pairs[i];
    if (p->key < TR__METRIC_COUNT && !strcmp(tr__metrics[p->key].unit, "clock"))
      p->v.i += offset;
  }
}

/* ---- the reduction ---------------------------------------------------------------------- */

/* The text a pair names in its figures, or NULL where the bytes do not hold one. */
static const char *text_of(const tr__figures *f, const tr__pair *p) {
  if (p->v.i < 0 || p->v.i >= TR__FIGURES_TEXT) return NULL;
  const char *s = f->text + p->v.i;
  return memchr(s, 0, (size_t)(TR__FIGURES_TEXT - p->v.i)) ? s : NULL;
}

static void combine(tr__reduced *out, const tr__figures *f, const tr__pair *p, int device) {
  const int k = p->key;
  const tr__metric *m = &tr__metrics[k];
  const bool real = m->type == TR__REAL;
  tr__value *v = &out->v[k];
  tr__value *d = device >= 0 ? &out->device[(size_t)device * TR__METRIC_COUNT + k] : NULL;
  bool *sent = device >= 0 ? &out->sent[(size_t)device * TR__METRIC_COUNT + k] : NULL;
  if (m->type == TR__TEXT) { /* FIRST: the first that is not empty */
    const char *s = text_of(f, p);
    if (s && s[0] && !out->text[k]) out->text[k] = s, out->count[k]++;
    return;
  }
  if (real && isnan(p->v.f) && m->combine != TR__COMBINE_DEVICE) return; /* not measured */
  const bool first = out->count[k]++ == 0;
  switch (m->combine) {
  case TR__COMBINE_SUM:
  case TR__COMBINE_MEAN:
    if (real) v->f = (first ? 0 : v->f) + p->v.f;
    else v->i += p->v.i;
    if (d && m->combine == TR__COMBINE_SUM) { /* each device's part kept too */
      if (real) d->f = (*sent ? d->f : 0) + p->v.f;
      else d->i += p->v.i;
      *sent = true;
    }
    break;
  case TR__COMBINE_MAX:
    if (real) v->f = first || p->v.f > v->f ? p->v.f : v->f;
    else v->i = first || p->v.i > v->i ? p->v.i : v->i;
    break;
  case TR__COMBINE_MIN:
    if (real) v->f = first || p->v.f < v->f ? p->v.f : v->f;
    else v->i = first || p->v.i < v->i ? p->v.i : v->i;
    break;
  case TR__COMBINE_FIRST:
    if (first) *v = p->v;
    break;
  case TR__COMBINE_DEVICE:
  case TR__COMBINE_REPLICA: /* the replicas' sums are the devices' (tr__result_replica_sum) */
    if (d == NULL) { /* a figure of a device from a source that has none */
      out->count[k]--;
      return;
    }
    *d = p->v;
    *sent = true;
    if (real) v->f = (first ? 0 : v->f) + p->v.f;
    else v->i += p->v.i;
    break;
  case TR__COMBINE_BINS:
    if (p->index < TR_TRAIN_STALENESS_BINS) out->bins[k][p->index] += p->v.i;
    break;
  default: /* SETTING, CALLER, DERIVED: never sent */
    out->count[k]--;
    break;
  }
}

int tr__metrics_reduce(tr__reduced *out, const tr__figures *const *sources, int n, int ndevices) {
  memset(out, 0, sizeof *out);
  out->ndevices = ndevices > 0 ? ndevices : 0;
  const size_t cells = (size_t)out->ndevices * TR__METRIC_COUNT;
  out->device = calloc(cells ? cells : 1, sizeof *out->device);
  out->sent = calloc(cells ? cells : 1, sizeof *out->sent);
  if (out->device == NULL || out->sent == NULL) {
    tr__reduced_free(out);
    return TR_ENOMEM;
  }
  for (int s = 0; s < n; s++) {
    const tr__figures *f = sources[s];
    if (f == NULL) continue;
    const int device = s < out->ndevices ? s : -1;
    for (int i = 0; i < f->n && i < TR__FIGURES_PAIRS; i++)
      if (f->pairs[i].key < TR__METRIC_COUNT) combine(out, f, &f->pairs[i], device);
  }
  for (int k = 0; k < TR__METRIC_COUNT; k++)
    if (tr__metrics[k].combine == TR__COMBINE_MEAN && out->count[k] > 0) {
      if (tr__metrics[k].type == TR__REAL) out->v[k].f /= (double)out->count[k];
      else out->v[k].i /= out->count[k];
    }
  return 0;
}

void tr__reduced_free(tr__reduced *red) {
  free(red->device);
  free(red->sent);
  red->device = NULL;
  red->sent = NULL;
}

double tr__reduced_real(const tr__reduced *red, tr__metric_id key) {
  if (red->count[key] == 0) return NAN;
  return tr__metrics[key].type == TR__REAL ? red->v[key].f : (double)red->v[key].i;
}

int64_t tr__reduced_int(const tr__reduced *red, tr__metric_id key) {
  return red->count[key] == 0                  ? 0
         : tr__metrics[key].type == TR__REAL ? (int64_t)red->v[key].f
                                               : red->v[key].i;
}

/* The bytes sent per step: every source's together, and each device's (run_metrics.h). */
static void comm_figures(const tr__reduced *red, tr_result *r) {
  const int64_t steps = tr__result_int(r, TR__M_STEPS) - tr__result_int(r, TR__M_FIRST_STEP);
  if (red->count[TR__M_COMM_BYTES] == 0 || steps <= 0) return; /* NaN: not measured */
  tr__result_set_real(r, TR__M_COMM_BYTES_PER_STEP, (double)red->v[TR__M_COMM_BYTES].i / (double)steps);
  for (int d = 0; d < red->ndevices && d < tr__result_devices(r); d++) {
    const size_t at = (size_t)d * TR__METRIC_COUNT + TR__M_COMM_BYTES;
    tr__result_set_real_at(r, TR__M_COMM_BYTES_DEVICE, d,
                           red->sent[at] ? (double)red->device[at].i / (double)steps : NAN);
  }
}

int tr__metrics_apply(const tr__reduced *red, tr_result *r) {
  int rc = 0;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    if (m->combine == TR__COMBINE_SETTING || m->combine == TR__COMBINE_CALLER ||
        m->combine == TR__COMBINE_DERIVED || red->count[k] == 0)
      continue;
    switch (m->combine) {
    case TR__COMBINE_DEVICE:
    case TR__COMBINE_REPLICA:
      for (int d = 0; d < red->ndevices && d < tr__result_devices(r); d++) {
        const size_t at = (size_t)d * TR__METRIC_COUNT + k;
        if (!red->sent[at]) continue;
        if (m->type == TR__REAL) tr__result_set_real_at(r, k, d, red->device[at].f);
        else tr__result_set_int_at(r, k, d, red->device[at].i);
      }
      break;
    case TR__COMBINE_BINS:
      rc = rc ? rc : tr__result_set_list(r, k, red->bins[k], TR_TRAIN_STALENESS_BINS);
      break;
    default:
      if (m->type == TR__TEXT) rc = rc ? rc : tr__result_set_text(r, k, red->text[k]);
      else if (m->type == TR__REAL) tr__result_set_real(r, k, red->v[k].f);
      else tr__result_set_int(r, k, red->v[k].i);
      break;
    }
  }
  comm_figures(red, r);
  return rc;
}
