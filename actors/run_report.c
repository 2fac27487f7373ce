/* run_report.c — a run's figures written out from the table of run metrics (run_metrics.h):
 * the JSON object of docs/WORKLOADS.md (tr_train_result_json) and the one line of words
 * `troupe train` prints (tr_train_result_summary). Neither names a figure: each walks the
 * rows. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_metrics.h"

/* ---- the rows whose text or value is read from the result -------------------------------- */

const char *tr__metric_schedule(const tr_train_result *r) {
  return r->schedule[0] ? r->schedule : NULL;
}

const char *tr__metric_allreduce(const tr_train_result *r) { /* AUTO: no group summed */
  return r->allreduce == TR_ALLREDUCE_AUTO ? NULL : tr_allreduce_name(r->allreduce);
}

const char *tr__metric_data_on(const tr_train_result *r) {
  return !r->batches_made ? "host" : !r->batches_loaded ? "device" : "mixed";
}

const char *tr__metric_graphs(const tr_train_result *r) { return tr_graphs_name(r->graphs); }

const char *tr__metric_signal(const tr_train_result *r) {
  return r->signal ? tr_signal_name(r->signal) : NULL;
}

double tr__metric_sgemm(const tr_train_result *r) {
  return r->sgemm_gflops > 0 ? r->sgemm_gflops : NAN;
}

double tr__metric_hardware_fraction(const tr_train_result *r) {
  return r->sgemm_gflops > 0 ? r->gflops / (r->sgemm_gflops * r->ndevices) : NAN;
}

double tr__metric_eval_step(const tr_train_result *r) {
  return r->eval_step >= 0 ? (double)r->eval_step : NAN;
}

double tr__metric_eval_percent(const tr_train_result *r) {
  return r->eval_step >= 0 ? 100 * r->eval_accuracy : NAN;
}

/* Local SGD's settings (strategy local): null in other runs. */
double tr__metric_tensor(const tr_train_result *r) { return r->tensor > 1 ? r->tensor : NAN; }

double tr__metric_sync_every(const tr_train_result *r) {
  return r->sync_every > 0 ? r->sync_every : NAN;
}

double tr__metric_warmup_sync(const tr_train_result *r) {
  return r->sync_every > 0 ? r->warmup_sync : NAN;
}

const char *tr__metric_outer(const tr_train_result *r) { return r->outer[0] ? r->outer : NULL; }

double tr__metric_replicas_alive(const tr_train_result *r) {
  return r->replicas_alive > 0 ? r->replicas_alive : NAN;
}

const char *tr__metric_replicas_left(const tr_train_result *r) {
  return r->replicas_left[0] ? r->replicas_left : NULL;
}

const char *tr__metric_layout_choice(const tr_train_result *r) {
  return r->layout_choice[0] ? r->layout_choice : NULL;
}

double tr__metric_prediction_off(const tr_train_result *r) {
  const double e = r->predicted.error;
  return r->predicted.samples_per_s > 0 && fabs(e) > 0.10 ? 100 * e : NAN;
}

/* ---- reading a row ------------------------------------------------------------------------- */

/* Whether the row applies to this run at all (outside its scope: null). */
static bool applies(const tr_train_result *r, const tr__metric *m) {
  if (m->scope == TR__SCOPE_ASYNC) return !strcmp(r->strategy, "async");
  if (m->scope == TR__SCOPE_RANKS) return r->edges_nccl + r->edges_mpi != 0;
  if (m->scope == TR__SCOPE_PREDICTED) return r->predicted.samples_per_s > 0;
  return true;
}

/* Bytes of one value: the field's, or an element's of a per-device (replica) array. */
static size_t width(const tr__metric *m) {
  if (m->stride == 0) return m->size;
  return m->size > m->stride ? m->stride : sizeof(int64_t);
}

static int64_t int_at(const tr_train_result *r, ptrdiff_t at, size_t bytes) {
  const char *p = (const char *)r + at;
  if (bytes == sizeof(int)) {
    int x;
    memcpy(&x, p, sizeof x);
    return x;
  }
  int64_t x;
  memcpy(&x, p, sizeof x);
  return x;
}

static double real_at(const tr_train_result *r, ptrdiff_t at) {
  double x;
  memcpy(&x, (const char *)r + at, sizeof x);
  return x;
}

/* The offset of element `i` of row `m` (i < 0: the scalar; replica: of the replicas' sums). */
static ptrdiff_t offset(const tr__metric *m, int i, bool replica) {
  if (i < 0) return m->at;
  return (replica ? m->replica_at : m->at) + (ptrdiff_t)((size_t)i * m->stride);
}

static int pieces(const tr_train_result *r) { return r->stages * (r->chunks > 0 ? r->chunks : 1); }

/* ---- JSON ------------------------------------------------------------------------------------ */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_real(FILE *f, const char *format, double v) {
  if (isfinite(v)) fprintf(f, format, v);
  else fputs("null", f);
}

/* One value of row m: element i of a per-device row (-1: the row's scalar). */
static void json_value(FILE *f, const tr_train_result *r, const tr__metric *m, int i,
                       bool replica) {
  const ptrdiff_t at = offset(m, i, replica);
  switch (m->json) {
  case TR__JSON_REAL4: json_real(f, "%.4f", real_at(r, at)); return;
  case TR__JSON_REAL6: json_real(f, "%.6g", real_at(r, at)); return;
  case TR__JSON_BOOL: fputs(int_at(r, at, width(m)) ? "true" : "false", f); return;
  case TR__JSON_FN: json_real(f, "%.9g", m->real(r)); return;
  case TR__JSON_NAME: {
    const char *s = m->name(r);
    if (s) json_string(f, s);
    else fputs("null", f);
    return;
  }
  case TR__JSON_CUTS:
    if (pieces(r) <= 1) fputs("null", f);
    else for (int k = 0; k <= pieces(r) && k <= TR_TRAIN_MAX_DEVICES; k++)
      fprintf(f, "%s%d", k ? "," : "[", r->cuts[k]);
    if (pieces(r) > 1) fputc(']', f);
    return;
  case TR__JSON_BINS: { /* up to the last bin that is not 0 */
    int bins = TR_TRAIN_STALENESS_BINS;
    while (bins > 0 && r->staleness_hist[bins - 1] == 0) bins--;
    fputc('[', f);
    for (int b = 0; b < bins; b++) fprintf(f, "%s%lld", b ? "," : "", (long long)r->staleness_hist[b]);
    fputc(']', f);
    return;
  }
  default:
    if (m->type == TR__TEXT) json_string(f, (const char *)r + at);
    else if (m->type == TR__REAL) json_real(f, "%.9g", real_at(r, at));
    else fprintf(f, "%lld", (long long)int_at(r, at, width(m)));
    return;
  }
}

/* A row's whole value: null outside its scope, an array over the devices for a per-device
 * one. */
static void json_row(FILE *f, const tr_train_result *r, const tr__metric *m) {
  if (!applies(r, m)) fputs("null", f);
  else if (m->scope != TR__SCOPE_DEVICE) json_value(f, r, m, -1, false);
  else {
    fputc('[', f);
    for (int i = 0; i < r->ndevices && i < TR_TRAIN_MAX_DEVICES; i++) {
      if (i) fputc(',', f);
      json_value(f, r, m, i, false);
    }
    fputc(']', f);
  }
}

/* Whether the row's value is null in this run (an object whose first member is null is). */
static bool is_null(const tr_train_result *r, const tr__metric *m) {
  if (!applies(r, m)) return true;
  if (m->json == TR__JSON_NAME) return m->name(r) == NULL;
  if (m->json == TR__JSON_FN) return !isfinite(m->real(r));
  return m->type == TR__REAL && m->scope != TR__SCOPE_DEVICE && !isfinite(real_at(r, m->at));
}

/* Rows [k, end) are members of one object, `key` before the dot: per-device rows make an
 * object per device ("devices") and, where some are summed per replica, one per replica
 * ("replicas"). */
static void json_object(FILE *f, const tr_train_result *r, int k, int end, size_t prefix) {
  const tr__metric *first = &tr__metrics[k];
  if (is_null(r, first)) {
    fputs("null", f);
    return;
  }
  if (first->scope != TR__SCOPE_DEVICE) {
    for (int j = k; j < end; j++) {
      fprintf(f, "%s\"%s\":", j > k ? "," : "{", tr__metrics[j].key + prefix + 1);
      json_row(f, r, &tr__metrics[j]);
    }
    fputc('}', f);
    return;
  }
  const int per = r->stages * (r->tensor > 1 ? r->tensor : 1); /* a replica's devices */
  const int replicas = per ? r->ndevices / per : 0;
  bool summed = false; /* rows summed per replica: else no "replicas" */
  for (int j = k; j < end; j++) summed |= tr__metrics[j].combine == TR__COMBINE_REPLICA;
  for (int pass = 0; pass < 1 + summed; pass++) {
    const int n = pass ? replicas : r->ndevices < TR_TRAIN_MAX_DEVICES ? r->ndevices
                                                                        : TR_TRAIN_MAX_DEVICES;
    fprintf(f, pass ? "],\"replicas\":[" : "{\"devices\":[");
    for (int i = 0; i < n; i++) {
      bool any = false;
      fputs(i ? ",{" : "{", f);
      for (int j = k; j < end; j++) {
        const tr__metric *m = &tr__metrics[j];
        if (pass && m->combine != TR__COMBINE_REPLICA) continue;
        fprintf(f, "%s\"%s\":", any ? "," : "", m->key + prefix + 1);
        json_value(f, r, m, i, pass == 1);
        any = true;
      }
      fputc('}', f);
    }
  }
  fputs("]}", f);
}

int tr_train_result_json(const tr_train_result *r, FILE *f) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(f);
  bool any = false;
  fputc('{', f);
  for (int k = 0; k < TR__METRIC_COUNT;) {
    const tr__metric *m = &tr__metrics[k];
    if (m->json == TR__JSON_NONE) {
      k++;
      continue;
    }
    const char *dot = strchr(m->key, '.');
    const size_t prefix = dot ? (size_t)(dot - m->key) : strlen(m->key);
    fprintf(f, "%s\"%.*s\":", any ? "," : "", (int)prefix, m->key);
    any = true;
    if (!dot) {
      json_row(f, r, m);
      k++;
      continue;
    }
    int end = k + 1;
    while (end < TR__METRIC_COUNT && tr__metrics[end].json != TR__JSON_NONE &&
           !strncmp(tr__metrics[end].key, m->key, prefix + 1))
      end++;
    json_object(f, r, k, end, prefix);
    k = end;
  }
  fputs("}\n", f);
  return ferror(f) ? TR_EIO : 0;
}

/* ---- the summary --------------------------------------------------------------------------- */

/* Element i of the row (-1: its scalar) in the words of its format: 0 where there is nothing
 * to say (not a number, zero, empty text). */
static int say(FILE *f, const tr_train_result *r, const tr__metric *m, const char *format, int i) {
  const ptrdiff_t at = offset(m, i, false);
  if (m->json == TR__JSON_NAME) {
    const char *s = m->name(r);
    return s ? fprintf(f, format, s) : 0;
  }
  if (m->type == TR__TEXT) {
    const char *s = (const char *)r + at;
    return s[0] ? fprintf(f, format, s) : 0;
  }
  if (m->type == TR__REAL || m->real) { /* a row's function, where it has one */
    const double v = m->real ? m->real(r) : real_at(r, at);
    return isfinite(v) && v != 0 ? fprintf(f, format, v) : 0;
  }
  const long long v = (long long)int_at(r, at, width(m));
  return v ? fprintf(f, format, v) : 0;
}

int tr_train_result_summary(const tr_train_result *r, FILE *f) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(f);
  bool any = false;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    if (!m->summary || !applies(r, m)) continue;
    /* a per-device row: the words before its number once, then a number per device */
    const char *conv = m->scope == TR__SCOPE_DEVICE ? strchr(m->summary, '%') : NULL;
    char *line = NULL;
    size_t len = 0;
    FILE *piece = open_memstream(&line, &len);
    if (piece == NULL) return TR_ENOMEM;
    bool said = false;
    if (conv == NULL) {
      said = say(piece, r, m, m->summary, -1) > 0;
    } else {
      fprintf(piece, "%.*s", (int)(conv - m->summary), m->summary);
      for (int i = 0; i < r->ndevices && i < TR_TRAIN_MAX_DEVICES; i++) {
        /* a device with nothing to say (a worker that left: NaN) takes no room */
        char *one = NULL;
        size_t n = 0;
        FILE *e = open_memstream(&one, &n);
        if (e == NULL) break;
        const bool says = say(e, r, m, conv, i) > 0;
        fclose(e);
        if (says) fprintf(piece, "%s%s", said ? " " : "", one);
        said |= says;
        free(one);
      }
    }
    fclose(piece);
    if (said) fprintf(f, "%s%s", any ? " · " : "", line);
    any |= said;
    free(line);
  }
  fputc('\n', f);
  return ferror(f) ? TR_EIO : 0;
}
