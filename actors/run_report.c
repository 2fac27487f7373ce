/* run_report.c — a run's figures written out from the table of run metrics (run_metrics.h)
 * and the run's tr_result: the JSON object of docs/WORKLOADS.md (tr_result_json) and the one
 * line of words `troupe train` prints (tr_result_summary). Neither names a figure: each
 * walks the rows, reading each as the getters do (tr__result_read). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "result_impl.h"

/* ---- the rows whose text or value is read from the result's other rows -------------------- */

static int64_t I(const tr_result *r, tr__metric_id id) { return tr__result_int(r, id); }
static double F(const tr_result *r, tr__metric_id id) { return tr__result_real(r, id); }
static const char *S(const tr_result *r, tr__metric_id id) { return tr__result_text(r, id); }

const char *tr__metric_schedule(const tr_result *r) {
  return S(r, TR__M_SCHEDULE)[0] ? S(r, TR__M_SCHEDULE) : NULL;
}

const char *tr__metric_allreduce(const tr_result *r) { /* AUTO: no group summed */
  const tr_allreduce a = (tr_allreduce)I(r, TR__M_ALLREDUCE);
  return a == TR_ALLREDUCE_AUTO ? NULL : tr_allreduce_name(a);
}

const char *tr__metric_data_on(const tr_result *r) {
  return !I(r, TR__M_BATCHES_MADE) ? "host" : !I(r, TR__M_BATCHES_LOADED) ? "device" : "mixed";
}

const char *tr__metric_graphs(const tr_result *r) {
  return tr_graphs_name((tr_graphs)I(r, TR__M_GRAPHS));
}

const char *tr__metric_signal(const tr_result *r) {
  return I(r, TR__M_SIGNAL) ? tr_signal_name((int)I(r, TR__M_SIGNAL)) : NULL;
}

double tr__metric_sgemm(const tr_result *r) {
  return F(r, TR__M_SGEMM_GFLOPS) > 0 ? F(r, TR__M_SGEMM_GFLOPS) : NAN;
}

double tr__metric_hardware_fraction(const tr_result *r) {
  const double sgemm = F(r, TR__M_SGEMM_GFLOPS);
  return sgemm > 0 ? F(r, TR__M_GFLOPS) / (sgemm * tr__result_devices(r)) : NAN;
}

double tr__metric_eval_step(const tr_result *r) {
  return I(r, TR__M_EVAL_STEP) >= 0 ? (double)I(r, TR__M_EVAL_STEP) : NAN;
}

double tr__metric_eval_percent(const tr_result *r) {
  return I(r, TR__M_EVAL_STEP) >= 0 ? 100 * F(r, TR__M_EVAL_ACCURACY) : NAN;
}

double tr__metric_tensor(const tr_result *r) {
  return I(r, TR__M_TENSOR) > 1 ? (double)I(r, TR__M_TENSOR) : NAN;
}

/* Local SGD's settings (strategy local): null in other runs. */
double tr__metric_sync_every(const tr_result *r) {
  return I(r, TR__M_SYNC_EVERY) > 0 ? (double)I(r, TR__M_SYNC_EVERY) : NAN;
}

double tr__metric_warmup_sync(const tr_result *r) {
  return I(r, TR__M_SYNC_EVERY) > 0 ? (double)I(r, TR__M_WARMUP_SYNC) : NAN;
}

const char *tr__metric_outer(const tr_result *r) {
  return S(r, TR__M_OUTER)[0] ? S(r, TR__M_OUTER) : NULL;
}

double tr__metric_replicas_alive(const tr_result *r) {
  return I(r, TR__M_REPLICAS_ALIVE) > 0 ? (double)I(r, TR__M_REPLICAS_ALIVE) : NAN;
}

const char *tr__metric_replicas_left(const tr_result *r) {
  return S(r, TR__M_REPLICAS_LEFT)[0] ? S(r, TR__M_REPLICAS_LEFT) : NULL;
}

const char *tr__metric_layout_choice(const tr_result *r) {
  return S(r, TR__M_LAYOUT_CHOICE)[0] ? S(r, TR__M_LAYOUT_CHOICE) : NULL;
}

double tr__metric_prediction_off(const tr_result *r) {
  const double e = F(r, TR__M_PREDICTED_ERROR);
  return F(r, TR__M_PREDICTED_SAMPLES_PER_S) > 0 && fabs(e) > 0.10 ? 100 * e : NAN;
}

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

static void json_real(FILE *f, const char *format, tr__cell c) {
  if (!c.null) fprintf(f, format, c.f);
  else fputs("null", f);
}

/* One value of row k: value i of a per-device row (-1: the row's one value, a list whole). */
static void json_value(FILE *f, const tr_result *r, int k, int i) {
  const tr__metric *m = &tr__metrics[k];
  if (tr__metric_shape(m) == TR_FIGURE_LIST) { /* cuts: null for one piece; bins: maybe [] */
    if (tr__result_null(r, k)) {
      fputs("null", f);
      return;
    }
    const int n = tr__result_count(r, k);
    fputc('[', f);
    for (int j = 0; j < n; j++) fprintf(f, "%s%lld", j ? "," : "", (long long)tr__result_int_at(r, k, j));
    fputc(']', f);
    return;
  }
  const tr__cell c = tr__result_read(r, k, i);
  switch (m->json) {
  case TR__JSON_REAL4: json_real(f, "%.4f", c); return;
  case TR__JSON_REAL6: json_real(f, "%.6g", c); return;
  case TR__JSON_BOOL: fputs(c.i ? "true" : "false", f); return;
  case TR__JSON_FN: json_real(f, "%.9g", c); return;
  default:
    if (c.null) fputs("null", f);
    else if (m->name || m->type == TR__TEXT) json_string(f, c.text);
    else if (m->type == TR__REAL) json_real(f, "%.9g", c);
    else fprintf(f, "%lld", (long long)c.i);
    return;
  }
}

/* A row's whole value: null outside its scope, an array over the devices for a per-device
 * one. */
static void json_row(FILE *f, const tr_result *r, int k) {
  if (!tr__result_applies(r, k)) {
    fputs("null", f);
  } else if (tr__metric_shape(&tr__metrics[k]) != TR_FIGURE_DEVICES) {
    json_value(f, r, k, -1);
  } else {
    fputc('[', f);
    for (int i = 0; i < tr__result_devices(r); i++) {
      if (i) fputc(',', f);
      json_value(f, r, k, i);
    }
    fputc(']', f);
  }
}

/* Rows [k, end) are members of one object, `key` before the dot: per-device rows make an
 * object per device ("devices") and, where some are summed per replica, one per replica
 * ("replicas"). An object whose first member is null is null. */
static void json_object(FILE *f, const tr_result *r, int k, int end, size_t prefix) {
  const tr__metric *first = &tr__metrics[k];
  if (tr__result_null(r, k)) {
    fputs("null", f);
    return;
  }
  if (tr__metric_shape(first) != TR_FIGURE_DEVICES) {
    for (int j = k; j < end; j++) {
      fprintf(f, "%s\"%s\":", j > k ? "," : "{", tr__metrics[j].key + prefix + 1);
      json_row(f, r, j);
    }
    fputc('}', f);
    return;
  }
  bool summed = false; /* rows summed per replica: else no "replicas" */
  for (int j = k; j < end; j++) summed |= tr__metrics[j].combine == TR__COMBINE_REPLICA;
  for (int pass = 0; pass < 1 + summed; pass++) {
    const int n = pass ? tr__result_replicas(r) : tr__result_devices(r);
    fprintf(f, pass ? "],\"replicas\":[" : "{\"devices\":[");
    for (int i = 0; i < n; i++) {
      bool any = false;
      fputs(i ? ",{" : "{", f);
      for (int j = k; j < end; j++) {
        const tr__metric *m = &tr__metrics[j];
        if (pass && m->combine != TR__COMBINE_REPLICA) continue;
        fprintf(f, "%s\"%s\":", any ? "," : "", m->key + prefix + 1);
        if (pass) fprintf(f, "%lld", (long long)tr__result_replica_sum(r, j, i));
        else json_value(f, r, j, i);
        any = true;
      }
      fputc('}', f);
    }
  }
  fputs("]}", f);
}

int tr_result_json(const tr_result *r, FILE *f) {
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
      json_row(f, r, k);
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

/* Value i of row k (-1: its one value) in the words of its format: 0 where there is nothing
 * to say (null, zero, empty text). A row with a function gives the format a double. */
static int say(FILE *f, const tr_result *r, int k, const char *format, int i) {
  const tr__metric *m = &tr__metrics[k];
  const tr__cell c = tr__result_read(r, k, i);
  if (c.null) return 0;
  if (m->name || m->type == TR__TEXT) return c.text[0] ? fprintf(f, format, c.text) : 0;
  if (m->type == TR__REAL || m->real) return c.f != 0 ? fprintf(f, format, c.f) : 0;
  return c.i ? fprintf(f, format, (long long)c.i) : 0;
}

int tr_result_summary(const tr_result *r, FILE *f) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(f);
  bool any = false;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    if (!m->summary || !tr__result_applies(r, k)) continue;
    /* a per-device row: the words before its number once, then a number per device */
    const char *conv = tr__metric_shape(m) == TR_FIGURE_DEVICES ? strchr(m->summary, '%') : NULL;
    char *line = NULL;
    size_t len = 0;
    FILE *piece = open_memstream(&line, &len);
    if (piece == NULL) return TR_ENOMEM;
    bool said = false;
    if (conv == NULL) {
      said = say(piece, r, k, m->summary, -1) > 0;
    } else {
      fprintf(piece, "%.*s", (int)(conv - m->summary), m->summary);
      for (int i = 0; i < tr__result_devices(r); i++) {
        /* a device with nothing to say (a worker that left: NaN) takes no room */
        char *one = NULL;
        size_t n = 0;
        FILE *e = open_memstream(&one, &n);
        if (e == NULL) break;
        const bool says = say(e, r, k, conv, i) > 0;
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
