/* data.c — the core of tr_data.h: opening a source through its table (data_impl.h), the
 * user's callbacks, the choice of a model's data and the check of its sizes, shards. The
 * sources themselves live in data_synth.c, data_text.c and data_npy.c, the parts of a split
 * in data_split.c, the text of a source's failure in data_error.c. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"
#include "tr_loss.h"
#include "tr_model.h"

/* ---- opening ------------------------------------------------------------------------------- */

static const struct {
  const char *name; /* FILE, NPY: named by their path instead */
  int (*open)(tr_data *d, const tr_data_config *c, char *err, size_t err_size);
} kinds[] = {
    [TR_DATA_TEACHER] = {"teacher", tr__data_open_synthetic},
    [TR_DATA_GAUSSIAN] = {"gaussian", tr__data_open_synthetic},
    [TR_DATA_CLASSIFIER] = {"classifier", tr__data_open_synthetic},
    [TR_DATA_ARITHMETIC] = {"arithmetic", tr__data_open_text},
    [TR_DATA_FILE] = {"file", tr__data_open_text},
    [TR_DATA_NPY] = {"npy", tr__data_open_npy},
};

int tr__data_open_with(tr_data **out, const char *name,
                       int (*open)(tr_data *, const void *, char *, size_t), const void *arg,
                       char *err, size_t err_size) {
  *out = NULL;
  tr_data *d = calloc(1, sizeof *d);
  int rc = d && (d->name = strdup(name)) ? open(d, arg, err, err_size) : TR_ENOMEM;
  if (rc == TR_ENOMEM) tr_errorf(err, err_size, rc, "data '%s': out of memory", name);
  if (rc) {
    tr_data_close(d);
    return rc;
  }
  *out = d;
  return 0;
}

static int open_config(tr_data *d, const void *arg, char *err, size_t err_size) {
  const tr_data_config *c = arg;
  return kinds[c->kind].open(d, c, err, err_size);
}

int tr_data_open(tr_data **out, const tr_data_config *c, char *err, size_t err_size) {
  if (!out || !c)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_open: %s is NULL", out ? "c" : "out");
  *out = NULL;
  if ((unsigned)c->kind >= sizeof kinds / sizeof *kinds || !kinds[c->kind].open)
    return tr_errorf(err, err_size, TR_EINVAL, "data: unknown kind %d", (int)c->kind);
  const int by_path = (c->kind == TR_DATA_FILE || c->kind == TR_DATA_NPY) && c->path;
  const char *name = by_path ? c->path : kinds[c->kind].name;
  return tr__data_open_with(out, name, open_config, c, err, err_size);
}

static int fill_callback(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const tr_data_callback *cb = d->self; /* its name is d->name */
  const int rc = cb->fill(cb->arg, first, count, x, y);
  return rc > 0 ? TR_EIO : rc;
}

static void close_callback(tr_data *d) { free(d->self); }

static const tr__data_ops callback_ops = {.fill = fill_callback, .close = close_callback};

static int open_callback(tr_data *d, const void *arg, char *err, size_t err_size) {
  const tr_data_callback *cb = arg;
  d->ops = &callback_ops;
  if (!cb->fill || cb->x_bytes == 0)
    return tr_errorf(err, err_size, TR_EINVAL, "data '%s': %s", d->name,
                     cb->fill ? "x_bytes is 0" : "no fill function");
  if (cb->rows < 0)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': rows %lld < 0 (0: an endless source)", d->name,
                     (long long)cb->rows);
  tr_data_callback *self = malloc(sizeof *self);
  if (!(d->self = self)) return TR_ENOMEM;
  *self = *cb;
  d->x_bytes = cb->x_bytes;
  d->y_bytes = cb->y_bytes;
  d->rows = cb->rows;
  return 0;
}

int tr_data_open_callback(tr_data **out, const tr_data_callback *cb, char *err, size_t err_size) {
  if (!out || !cb)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_open_callback: %s is NULL",
                     out ? "cb" : "out");
  return tr__data_open_with(out, cb->name ? cb->name : "callback", open_callback, cb, err,
                            err_size);
}

void tr_data_close(tr_data *d) {
  if (!d) return;
  if (d->ops) d->ops->close(d);
  free(d->name);
  free(d);
}

/* ---- a model's data ------------------------------------------------------------------------ */

void tr_data_config_for(tr_data_config *c, const struct tr_model *m, uint64_t seed,
                        const char *path) {
  if (c == NULL || m == NULL)
    return (void)tr__misuse(0, "tr_data_config_for: %s is NULL", c ? "m" : "c");
  const int L = tr_model_layer_count(m), out = tr_model_layer(m, L - 1)->out;
  const int ce = tr_model_loss(m)->target == TR_LOSS_TARGET_CLASSES; /* labels */
  *c = (tr_data_config){.seed = seed, .ctx = tr_model_ctx(m), .path = path,
                        .in = tr_model_layer(m, 0)->in, .out = out, .classes = ce ? out : 0};
  if (tr_model_token_input(m)) c->kind = path ? TR_DATA_FILE : TR_DATA_ARITHMETIC;
  else if (path) c->kind = TR_DATA_NPY;
  else if (ce) c->kind = TR_DATA_CLASSIFIER;
  /* the workload mlp measures throughput on Gaussian targets (WORKLOADS.md) */
  else c->kind = strcmp(tr_model_name(m), "mlp") ? TR_DATA_TEACHER : TR_DATA_GAUSSIAN;
}

int tr_data_open_for(tr_data **out, const struct tr_model *m, uint64_t seed, const char *path,
                     const char *labels, char *err, size_t err_size) {
  if (!out || !m)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_open_for: %s is NULL", out ? "m" : "out");
  *out = NULL;
  const char *model = tr_model_name(m);
  if (tr_model_token_input(m) && labels)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data: labels '%s' given, but model '%s' reads tokens: its data is one "
                     "byte or text file",
                     labels, model);
  if (!tr_model_token_input(m) && !path != !labels)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data: model '%s' reads floats: its data is two .npy files, features and "
                     "labels (%s '%s' alone)",
                     model, path ? "features" : "labels", path ? path : labels);
  tr_data_config c;
  tr_data_config_for(&c, m, seed, path);
  c.labels = labels;
  int rc = tr_data_open(out, &c, err, err_size);
  if (!rc && (rc = tr_data_check(*out, m, err, err_size))) {
    tr_data_close(*out);
    *out = NULL;
  }
  return rc;
}

/* "one int32 label", "128 int32 tokens", "4 rows of 8 floats" */
static void describe(char *buf, size_t size, int rows, int per_row, const char *what) {
  if (per_row == 1 && rows == 1) snprintf(buf, size, "one %s", what);
  else if (per_row == 1) snprintf(buf, size, "%d %ss", rows, what);
  else if (rows == 1) snprintf(buf, size, "%d %ss", per_row, what);
  else snprintf(buf, size, "%d rows of %d %ss", rows, per_row, what);
}

int tr_data_check(const tr_data *d, const struct tr_model *m, char *err, size_t err_size) {
  if (!d || !m)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_check: %s is NULL", d ? "m" : "d");
  const int T = tr_model_ctx(m), out = tr_model_layer(m, tr_model_layer_count(m) - 1)->out;
  const size_t want[2] = {tr_model_input_bytes(m), tr_model_target_bytes(m)};
  const size_t have[2] = {d->x_bytes, d->y_bytes};
  for (int k = 0; k < 2; k++) {
    if (have[k] == want[k]) continue;
    char what[64];
    if (k == 0 && tr_model_token_input(m)) describe(what, sizeof what, T, 1, "int32 token");
    else if (k == 0) describe(what, sizeof what, T, tr_model_layer(m, 0)->in, "float");
    else if (tr_model_loss(m)->target == TR_LOSS_TARGET_VALUES) describe(what, sizeof what, T, out, "float");
    else describe(what, sizeof what, T, 1, "int32 label");
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': %zu bytes of %s per sample, model '%s' wants %zu (%s)", d->name,
                     have[k], k ? "targets" : "inputs", tr_model_name(m), want[k], what);
  }
  return 0;
}

/* ---- values -------------------------------------------------------------------------------- */

void tr__data_where(const tr_data *d, uint64_t i, int target, size_t element, char *buf,
                    size_t size) {
  if (d->ops->where) d->ops->where(d, i, target, element, buf, size);
  else snprintf(buf, size, "data '%s': sample %llu, %s %zu", d->name, (unsigned long long)i,
                target ? "target" : "input", element);
}

/* The first of n float32 values at p that is not finite (every exponent bit set: NaN or an
 * infinity), or n. Bits, not isfinite: -ffast-math may take isfinite to be always true. */
static size_t first_nonfinite(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t k = 0; k < n; k++) {
    uint32_t u;
    memcpy(&u, b + 4 * k, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return k;
  }
  return n;
}

/* Samples [first, first + count) as filled in x and y (either NULL: not checked). */
static int check_filled(const tr_data *d, bool floats_in, bool floats_out, uint64_t first,
                        size_t count, const void *x, const void *y, char *err,
                        size_t err_size) {
  const void *at[2] = {floats_in ? x : NULL, floats_out ? y : NULL};
  const size_t bytes[2] = {d->x_bytes, d->y_bytes};
  for (size_t k = 0; k < count; k++)
    for (int t = 0; t < 2; t++) {
      if (at[t] == NULL) continue;
      const size_t n = bytes[t] / 4;
      const float *v = (const float *)((const char *)at[t] + k * bytes[t]);
      const size_t bad = first_nonfinite(v, n);
      if (bad == n) continue;
      float value;
      memcpy(&value, v + bad, 4);
      char where[320];
      tr__data_where(d, first + k, t, bad, where, sizeof where);
      return tr_errorf(err, err_size, TR_ENONFINITE, "%s holds %s: a sample's values must be "
                       "finite (replace it, or drop the row)",
                       where, value != value ? "NaN" : value > 0 ? "+Inf" : "-Inf");
    }
  return 0;
}

int tr_data_check_finite(const tr_data *d, const struct tr_model *m, uint64_t first,
                         size_t count, const void *x, const void *y, char *err,
                         size_t err_size) {
  const bool floats_in = !tr_model_token_input(m),
             floats_out = tr_model_loss(m)->target == TR_LOSS_TARGET_VALUES;
  if (x || y || !(floats_in || floats_out))
    return check_filled(d, floats_in, floats_out, first, count, x, y, err, err_size);
  enum { CHUNK = 256 }; /* samples read at a time */
  char *bx = malloc(CHUNK * d->x_bytes), *by = malloc(CHUNK * (d->y_bytes ? d->y_bytes : 1));
  int rc = bx && by ? 0 : tr_errorf(err, err_size, TR_ENOMEM, "data '%s': out of memory",
                                     d->name);
  for (size_t done = 0; done < count && rc == 0; done += CHUNK) {
    const size_t n = count - done < CHUNK ? count - done : CHUNK;
    rc = tr_data_fill(d, first + done, n, bx, d->y_bytes ? by : NULL);
    if (rc)
      tr_errorf(err, err_size, rc, "%s", *tr_data_error(d) ? tr_data_error(d) : tr_strerror(rc));
    else
      rc = check_filled(d, floats_in, floats_out, first + done, n, bx, d->y_bytes ? by : NULL,
                        err, err_size);
  }
  free(bx);
  free(by);
  return rc;
}

/* ---- samples ------------------------------------------------------------------------------- */

const char *tr_data_name(const tr_data *d) { return d ? d->name : ""; }
size_t tr_data_x_bytes(const tr_data *d) { return d ? d->x_bytes : 0; }
size_t tr_data_y_bytes(const tr_data *d) { return d ? d->y_bytes : 0; }
int64_t tr_data_rows(const tr_data *d) { return d ? d->rows : 0; }

int tr_data_fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  TR__NOT_NULL(d);
  if (x == NULL && count)
    return tr__data_fail(d, TR_EINVAL, "tr_data_fill: data '%s': x is NULL", d->name);
  return count ? d->ops->fill(d, first, count, x, y) : 0;
}

void tr_data_shard(uint64_t step, size_t global_batch, int worker, int workers, uint64_t *first,
                   size_t *count) {
  if (first == NULL || count == NULL)
    return (void)tr__misuse(0, "tr_data_shard: %s is NULL", first ? "count" : "first");
  if (workers < 1 || worker < 0 || worker >= workers) { /* no samples are this worker's */
    *first = step * global_batch;
    *count = 0;
    tr__misuse(0, "tr_data_shard: worker %d of workers %d: give workers >= 1 and 0 <= worker "
               "< workers", worker, workers);
    return;
  }
  const size_t lo = global_batch * (size_t)worker / (size_t)workers;
  const size_t hi = global_batch * ((size_t)worker + 1) / (size_t)workers;
  *first = step * global_batch + lo;
  *count = hi - lo;
}

const uint8_t *tr_data_corpus(const tr_data *d, size_t *size) {
  if (size) *size = d && d->corpus ? d->corpus_size : 0;
  if (d == NULL) return NULL;
  return d->corpus;
}
