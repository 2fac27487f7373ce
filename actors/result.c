/* result.c — a run's figures by key (tr_result.h): a value of every row of the table of run
 * metrics (run_metrics.h) for any number of devices, read through each row's scope and
 * functions (result_impl.h); the public getters over it, and the deprecated struct as a
 * view of it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "result_impl.h"

/* Row k's value: one, one per device, or a list. */
typedef struct slot {
  int n;         /* values kept: 1 for a one-value row */
  tr__value *v;  /* the n values: &one, or allocated */
  tr__value one;
  char *text;    /* TEXT rows: owned; NULL reads "" */
} slot;

struct tr_result {
  int ndevices;
  slot s[TR__METRIC_COUNT];
};

static const tr__metric *row(tr__metric_id id) {
  TR_ASSERT(id >= 0 && id < TR__METRIC_COUNT);
  return &tr__metrics[id];
}

static void drop(slot *s) {
  if (s->v != &s->one) free(s->v);
  s->v = NULL;
  s->n = 0;
}

tr_result *tr__result_new(const char *model, const char *strategy) {
  tr_result *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  for (int k = 0; k < TR__METRIC_COUNT; k++)
    if (tr__metric_shape(&tr__metrics[k]) == TR_FIGURE_ONE) r->s[k].v = &r->s[k].one, r->s[k].n = 1;
  /* not a number (JSON null) until measured; "seconds", the caller's yardstick and the
   * prediction are 0 where there is none */
  static const tr__metric_id unmeasured[] = {
      TR__M_INITIAL_LOSS,    TR__M_FINAL_LOSS,      TR__M_SAMPLES_PER_S,   TR__M_STEPS_PER_S,
      TR__M_BUBBLE_FRACTION, TR__M_BUBBLE_THEORY,   TR__M_BUBBLE_SCHEDULE, TR__M_STALENESS_MEAN,
      TR__M_STALENESS_MAX,   TR__M_CONSISTENCY,     TR__M_GFLOPS,          TR__M_TOKENS_PER_S,
      TR__M_MOMENTUM,        TR__M_SERVER_UTILIZATION, TR__M_COMM_BYTES_PER_STEP,
      TR__M_EVAL_LOSS,       TR__M_EVAL_ACCURACY};
  for (size_t i = 0; i < sizeof unmeasured / sizeof *unmeasured; i++)
    r->s[unmeasured[i]].one.f = NAN;
  r->s[TR__M_RANKS].one.i = 1;
  r->s[TR__M_EVAL_STEP].one.i = -1; /* no held-out evaluation */
  if (tr__result_set_text(r, TR__M_MODEL, model) || tr__result_set_text(r, TR__M_STRATEGY, strategy)) {
    tr_result_free(r);
    return NULL;
  }
  return r;
}

void tr_result_free(tr_result *r) {
  if (r == NULL) return;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    drop(&r->s[k]);
    free(r->s[k].text);
  }
  free(r);
}

int tr__result_set_devices(tr_result *r, int n) {
  TR_ASSERT(n >= 0);
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    if (tr__metric_shape(&tr__metrics[k]) != TR_FIGURE_DEVICES) continue;
    TR_ASSERT(tr__metrics[k].type != TR__TEXT);
    slot *s = &r->s[k];
    drop(s);
    if (n > 0 && (s->v = calloc((size_t)n, sizeof *s->v)) == NULL) return TR_ENOMEM;
    for (int i = 0; i < n && tr__metrics[k].type == TR__REAL; i++) s->v[i].f = NAN;
    s->n = n;
  }
  r->ndevices = n;
  return 0;
}

int tr__result_devices(const tr_result *r) { return r->ndevices; }

/* ---- what a row keeps --------------------------------------------------------------------- */

static slot *one(tr_result *r, tr__metric_id id, tr__type type) {
  TR_ASSERT(row(id)->type == type && tr__metric_shape(row(id)) == TR_FIGURE_ONE);
  return &r->s[id];
}

static slot *each(tr_result *r, tr__metric_id id, int i, tr__type type) {
  TR_ASSERT(row(id)->type == type && tr__metric_shape(row(id)) != TR_FIGURE_ONE);
  TR_ASSERT(i >= 0 && i < r->s[id].n);
  return &r->s[id];
}

void tr__result_set_int(tr_result *r, tr__metric_id id, int64_t v) { one(r, id, TR__INT)->one.i = v; }
void tr__result_set_real(tr_result *r, tr__metric_id id, double v) { one(r, id, TR__REAL)->one.f = v; }

int tr__result_set_text(tr_result *r, tr__metric_id id, const char *text) {
  slot *s = one(r, id, TR__TEXT);
  char *copy = strdup(text ? text : "");
  if (copy == NULL) return TR_ENOMEM;
  free(s->text);
  s->text = copy;
  return 0;
}

void tr__result_set_int_at(tr_result *r, tr__metric_id id, int i, int64_t v) {
  each(r, id, i, TR__INT)->v[i].i = v;
}

void tr__result_set_real_at(tr_result *r, tr__metric_id id, int i, double v) {
  each(r, id, i, TR__REAL)->v[i].f = v;
}

int tr__result_set_list(tr_result *r, tr__metric_id id, const int64_t *v, int n) {
  TR_ASSERT(row(id)->type == TR__INT && tr__metric_shape(row(id)) == TR_FIGURE_LIST && n >= 0);
  tr__value *values = calloc(n > 0 ? (size_t)n : 1, sizeof *values);
  if (values == NULL) return TR_ENOMEM;
  for (int i = 0; i < n; i++) values[i].i = v[i];
  drop(&r->s[id]);
  r->s[id].v = values;
  r->s[id].n = n;
  return 0;
}

int64_t tr__result_int(const tr_result *r, tr__metric_id id) {
  return one((tr_result *)r, id, TR__INT)->one.i;
}

double tr__result_real(const tr_result *r, tr__metric_id id) {
  if (row(id)->type == TR__INT) return (double)tr__result_int(r, id);
  return one((tr_result *)r, id, TR__REAL)->one.f;
}

const char *tr__result_text(const tr_result *r, tr__metric_id id) {
  const char *s = one((tr_result *)r, id, TR__TEXT)->text;
  return s ? s : "";
}

int64_t tr__result_int_at(const tr_result *r, tr__metric_id id, int i) {
  return each((tr_result *)r, id, i, TR__INT)->v[i].i;
}

double tr__result_real_at(const tr_result *r, tr__metric_id id, int i) {
  if (row(id)->type == TR__INT) return (double)tr__result_int_at(r, id, i);
  return each((tr_result *)r, id, i, TR__REAL)->v[i].f;
}

int tr__result_length(const tr_result *r, tr__metric_id id) { return r->s[id].n; }

/* ---- reading --------------------------------------------------------------------------------- */

tr_figure_type tr__metric_type(const tr__metric *m) {
  return m->name ? TR_FIGURE_TEXT : m->type == TR__REAL ? TR_FIGURE_REAL
                                    : m->type == TR__INT ? TR_FIGURE_INT
                                                         : TR_FIGURE_TEXT;
}

bool tr__result_applies(const tr_result *r, tr__metric_id id) {
  switch (row(id)->scope) {
  case TR__SCOPE_ASYNC: return !strcmp(tr__result_text(r, TR__M_STRATEGY), "async");
  case TR__SCOPE_RANKS:
    return tr__result_int(r, TR__M_EDGES_NCCL) + tr__result_int(r, TR__M_EDGES_MPI) != 0;
  case TR__SCOPE_PREDICTED: return tr__result_real(r, TR__M_PREDICTED_SAMPLES_PER_S) > 0;
  default: return true;
  }
}

static int pieces(const tr_result *r) {
  const int64_t chunks = tr__result_int(r, TR__M_CHUNKS);
  return (int)(tr__result_int(r, TR__M_STAGES) * (chunks > 0 ? chunks : 1));
}

bool tr__result_null(const tr_result *r, tr__metric_id id) {
  const tr__metric *m = row(id);
  if (!tr__result_applies(r, id)) return true;
  switch (tr__metric_shape(m)) {
  case TR_FIGURE_DEVICES: return false; /* a device's value may be null, the row is not */
  case TR_FIGURE_LIST: return m->json == TR__JSON_CUTS && pieces(r) <= 1; /* bins: maybe [] */
  default: break;
  }
  if (m->name) return m->name(r) == NULL;
  if (m->real) return !isfinite(m->real(r));
  return m->type == TR__REAL && !isfinite(r->s[id].one.f);
}

int tr__result_count(const tr_result *r, tr__metric_id id) {
  const tr__metric *m = row(id);
  if (tr__result_null(r, id)) return 0;
  switch (tr__metric_shape(m)) {
  case TR_FIGURE_DEVICES: return r->ndevices;
  case TR_FIGURE_LIST: {
    int n = r->s[id].n;
    if (m->json == TR__JSON_CUTS) return pieces(r) + 1 < n ? pieces(r) + 1 : n;
    while (n > 0 && r->s[id].v[n - 1].i == 0) n--; /* bins: up to the last that is not 0 */
    return n;
  }
  default: return 1;
  }
}

tr__cell tr__result_read(const tr_result *r, tr__metric_id id, int i) {
  const tr__metric *m = row(id);
  tr__cell c = {.f = NAN};
  if (i < 0 && tr__result_null(r, id)) {
    c.null = true;
    return c;
  }
  if (i < 0 && m->name) {
    c.text = m->name(r);
  } else if (i < 0 && m->real) {
    c.f = m->real(r);
    c.i = isfinite(c.f) ? (int64_t)c.f : 0;
  } else if (m->type == TR__TEXT) {
    c.text = tr__result_text(r, id);
  } else {
    TR_ASSERT(i < r->s[id].n);
    const tr__value v = i < 0 ? r->s[id].one : r->s[id].v[i];
    if (m->type == TR__REAL) c.f = v.f, c.i = isfinite(v.f) ? (int64_t)v.f : 0;
    else c.i = v.i, c.f = (double)v.i;
  }
  c.null = m->type == TR__TEXT || m->name ? c.text == NULL : !isfinite(c.f);
  return c;
}

int tr__result_replicas(const tr_result *r) {
  const int64_t tensor = tr__result_int(r, TR__M_TENSOR);
  const int64_t per = tr__result_int(r, TR__M_STAGES) * (tensor > 1 ? tensor : 1);
  return per > 0 ? (int)(r->ndevices / per) : 0;
}

int64_t tr__result_replica_sum(const tr_result *r, tr__metric_id id, int g) {
  const int64_t tensor = tr__result_int(r, TR__M_TENSOR);
  const int per = (int)(tr__result_int(r, TR__M_STAGES) * (tensor > 1 ? tensor : 1));
  int64_t sum = 0;
  for (int d = g * per; d < (g + 1) * per && d < r->ndevices; d++) sum += r->s[id].v[d].i;
  return sum;
}

/* ---- by key ---------------------------------------------------------------------------------- */

/* The row of `key`, or TR_EINVAL said on stderr: naming the key, and the one it may have
 * meant (the key that begins with most of it). */
static int find(const char *call, const tr_result *r, const char *key) {
  if (r == NULL || key == NULL) return tr__misuse(TR_EINVAL, "%s: %s is NULL", call, r ? "key" : "r");
  int near = -1;
  size_t best = 2;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const char *a = tr__metrics[k].key;
    if (!strcmp(a, key)) return k;
    size_t same = 0;
    while (a[same] && a[same] == key[same]) same++;
    if (same > best) best = same, near = k;
  }
  return tr__misuse(TR_EINVAL, "%s: \"%s\": no such figure%s%s%s (tr_result_figure_at lists "
                    "the %d there are)", call, key, near >= 0 ? "; did you mean \"" : "",
                    near >= 0 ? tr__metrics[near].key : "", near >= 0 ? "\"?" : "",
                    TR__METRIC_COUNT);
}

static const char *const type_names[] = {"an integer", "a real", "a text"};
static const char *const type_calls[] = {"tr_result_int", "tr_result_real", "tr_result_text"};

/* Row `k` read as `type` (reals read integers too), one value (i -1) or value i. */
static int check(const char *call, const tr_result *r, int k, tr_figure_type type, int i) {
  const tr__metric *m = &tr__metrics[k];
  const tr_figure_type is = tr__metric_type(m);
  if (is != type && !(type == TR_FIGURE_REAL && is == TR_FIGURE_INT))
    return tr__misuse(TR_EINVAL, "%s: \"%s\" is %s: read it with %s%s", call, m->key,
                      type_names[is], type_calls[is], i < 0 ? "" : "_at");
  const bool many = tr__metric_shape(m) != TR_FIGURE_ONE;
  if (many && i < 0)
    return tr__misuse(TR_EINVAL, "%s: \"%s\" has %s: read value i with %s_at", call, m->key,
                      tr__metric_shape(m) == TR_FIGURE_DEVICES ? "a value per device" : "a list",
                      type_calls[is]);
  if (!many && i >= 0)
    return tr__misuse(TR_EINVAL, "%s: \"%s\" has one value: read it with %s", call, m->key,
                      type_calls[is]);
  const int n = many ? tr__result_count(r, k) : 1;
  if (many && i >= n)
    return tr__misuse(TR_EINVAL, "%s: \"%s\" value %d: it has %d in this run (0 <= i < %d)",
                      call, m->key, i, n, n);
  return 0;
}

/* -2: an index below 0 was given */
static int read_as(const char *call, const tr_result *r, const char *key, tr_figure_type type,
                   int i, tr__cell *c) {
  const int k = find(call, r, key);
  if (k < 0) return k;
  if (i < -1) return tr__misuse(TR_EINVAL, "%s: \"%s\": an index is 0 or more", call, key);
  const int rc = check(call, r, k, type, i);
  if (rc) return rc;
  *c = tr__result_read(r, k, i);
  return 0;
}

int tr_result_figure_count(const tr_result *r) {
  return r ? TR__METRIC_COUNT : tr__misuse(0, "tr_result_figure_count: r is NULL");
}

static void describe(const tr_result *r, int k, tr_figure *out) {
  const tr__metric *m = &tr__metrics[k];
  *out = (tr_figure){.key = m->key, .unit = m->unit, .type = tr__metric_type(m),
                     .shape = tr__metric_shape(m), .count = tr__result_count(r, k),
                     .null = tr__result_null(r, k)};
}

int tr_result_figure_at(const tr_result *r, int i, tr_figure *out) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(out);
  if (i < 0 || i >= TR__METRIC_COUNT)
    return tr__misuse(TR_EINVAL, "tr_result_figure_at: i %d: the result has %d figures (0 <= i "
                      "< %d)", i, TR__METRIC_COUNT, TR__METRIC_COUNT);
  describe(r, i, out);
  return 0;
}

int tr_result_figure(const tr_result *r, const char *key, tr_figure *out) {
  TR__NOT_NULL(out);
  const int k = find(__func__, r, key);
  if (k < 0) return k;
  describe(r, k, out);
  return 0;
}

int tr_result_int(const tr_result *r, const char *key, int64_t *out) {
  TR__NOT_NULL(out);
  tr__cell c;
  const int rc = read_as(__func__, r, key, TR_FIGURE_INT, -1, &c);
  *out = rc || c.null ? 0 : c.i;
  return rc;
}

int tr_result_real(const tr_result *r, const char *key, double *out) {
  TR__NOT_NULL(out);
  tr__cell c;
  const int rc = read_as(__func__, r, key, TR_FIGURE_REAL, -1, &c);
  *out = rc || c.null ? NAN : c.f;
  return rc;
}

int tr_result_text(const tr_result *r, const char *key, const char **out) {
  TR__NOT_NULL(out);
  tr__cell c;
  const int rc = read_as(__func__, r, key, TR_FIGURE_TEXT, -1, &c);
  *out = rc || c.null ? NULL : c.text;
  return rc;
}

int tr_result_int_at(const tr_result *r, const char *key, int i, int64_t *out) {
  TR__NOT_NULL(out);
  tr__cell c;
  const int rc = read_as(__func__, r, key, TR_FIGURE_INT, i < 0 ? -2 : i, &c);
  *out = rc ? 0 : c.i;
  return rc;
}

int tr_result_real_at(const tr_result *r, const char *key, int i, double *out) {
  TR__NOT_NULL(out);
  tr__cell c;
  const int rc = read_as(__func__, r, key, TR_FIGURE_REAL, i < 0 ? -2 : i, &c);
  *out = rc || c.null ? NAN : c.f;
  return rc;
}

int tr_result_set_real(tr_result *r, const char *key, double v) {
  const int k = find(__func__, r, key);
  if (k < 0) return k;
  if (tr__metrics[k].combine != TR__COMBINE_CALLER)
    return tr__misuse(TR_EINVAL, "tr_result_set_real: \"%s\" is the run's own figure: only one "
                      "the caller measures (\"sgemm_gflops\") may be given", key);
  tr__result_set_real(r, k, v);
  return 0;
}

/* ---- the view: tr_train_result ---------------------------------------------------------------- */

/* The bytes of one value of row m in the struct, and how many values its field has room for
 * (a per-device field: 64; a list: its array's; else 1). */
static size_t width(const tr__metric *m) {
  if (m->stride == 0) return m->size;
  return m->size > m->stride ? m->stride : sizeof(int64_t); /* memory, idle: a struct's field */
}

static int room(const tr__metric *m) {
  if (m->stride == 0) return 1;
  return m->size > m->stride ? (int)(m->size / m->stride) : TR_TRAIN_MAX_DEVICES;
}

static void store(char *p, size_t bytes, tr__type type, tr__value v) {
  if (type == TR__REAL) memcpy(p, &v.f, sizeof v.f);
  else if (bytes == sizeof(int)) memcpy(p, &(int){(int)v.i}, sizeof(int));
  else memcpy(p, &v.i, sizeof v.i);
}

static tr__value load(const char *p, size_t bytes, tr__type type) {
  tr__value v = {0};
  if (type == TR__REAL) {
    memcpy(&v.f, p, sizeof v.f);
  } else if (bytes == sizeof(int)) {
    int x;
    memcpy(&x, p, sizeof x);
    v.i = x;
  } else {
    memcpy(&v.i, p, sizeof v.i);
  }
  return v;
}

void tr__result_view(const tr_result *r, tr_train_result *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) /* as the struct always was past its devices */
    out->utilization[i] = out->comm_bytes_device[i] = NAN;
  char *base = (char *)out;
  const int devices = r->ndevices < TR_TRAIN_MAX_DEVICES ? r->ndevices : TR_TRAIN_MAX_DEVICES;
  out->ndevices = devices;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    const slot *s = &r->s[k];
    if (m->at < 0) continue;
    if (m->type == TR__TEXT) {
      snprintf(base + m->at, m->size, "%s", s->text ? s->text : "");
      continue;
    }
    const int n = tr__metric_shape(m) == TR_FIGURE_ONE ? 1 : s->n < room(m) ? s->n : room(m);
    for (int i = 0; i < n; i++)
      store(base + m->at + (size_t)i * m->stride, width(m), m->type, s->v[i]);
    if (m->combine != TR__COMBINE_REPLICA) continue;
    const int replicas = tr__result_replicas(r);
    for (int g = 0; g < replicas && g < TR_TRAIN_MAX_DEVICES; g++)
      store(base + m->replica_at + (size_t)g * m->stride, width(m), m->type,
            (tr__value){.i = tr__result_replica_sum(r, k, g)});
  }
}

tr_result *tr__result_of_view(const tr_train_result *v) {
  char model[sizeof v->model + 1], strategy[sizeof v->strategy + 1];
  snprintf(model, sizeof model, "%.*s", (int)sizeof v->model, v->model);
  snprintf(strategy, sizeof strategy, "%.*s", (int)sizeof v->strategy, v->strategy);
  tr_result *r = tr__result_new(model, strategy);
  const int devices = v->ndevices < 0                    ? 0
                      : v->ndevices > TR_TRAIN_MAX_DEVICES ? TR_TRAIN_MAX_DEVICES
                                                         : v->ndevices;
  if (r == NULL || tr__result_set_devices(r, devices)) goto fail;
  const char *base = (const char *)v;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    slot *s = &r->s[k];
    if (m->at < 0) continue;
    if (m->type == TR__TEXT) {
      char *text = strndup(base + m->at, m->size); /* a field filled to its end has no 0 */
      if (text == NULL) goto fail;
      free(s->text);
      s->text = text;
      continue;
    }
    if (tr__metric_shape(m) == TR_FIGURE_LIST) {
      tr__value *values = calloc((size_t)room(m), sizeof *values);
      if (values == NULL) goto fail;
      drop(s);
      s->v = values, s->n = room(m);
    }
    const int n = tr__metric_shape(m) == TR_FIGURE_DEVICES ? devices : s->n;
    for (int i = 0; i < n; i++) s->v[i] = load(base + m->at + (size_t)i * m->stride, width(m), m->type);
  }
  return r;
fail:
  tr_result_free(r);
  return NULL;
}

/* ---- the deprecated calls over the struct ---------------------------------------------------- */

int tr_train_result_json(const tr_train_result *r, FILE *f) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(f);
  tr_result *res = tr__result_of_view(r);
  const int rc = res ? tr_result_json(res, f) : TR_ENOMEM;
  tr_result_free(res);
  return rc;
}

int tr_train_result_summary(const tr_train_result *r, FILE *f) {
  TR__NOT_NULL(r);
  TR__NOT_NULL(f);
  tr_result *res = tr__result_of_view(r);
  const int rc = res ? tr_result_summary(res, f) : TR_ENOMEM;
  tr_result_free(res);
  return rc;
}
