/* data_npy.c — the NPY source of tr_data.h: features and labels as two .npy files, read
 * row by row with pread (a file cut short while it is trained on fails the read, not the
 * process), one row per sample. Sample i is row perm_e(i mod N) of both, e = i / N its
 * epoch, perm_e a bijection of [0, N) keyed by (seed, e) (tr__perm, data_impl.h). So every
 * epoch visits each row once, in an order of its own, and a sample is still a function of
 * (seed, i) alone. */
#include <inttypes.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_impl.h"
#include "file_atomic.h"
#include "npy.h"
#include "tr_file.h"

#define TAG_EPOCH 0x65706f6368733121ull /* the key of each epoch's order */

enum { HEADER_MAX = 65536 + 12 }; /* the most of a file read for its header */

typedef struct file {
  char *path;
  const char *what;  /* "features", "labels" */
  int fd;
  tr__npy h;
  size_t row;        /* elements per row */
  size_t row_bytes;
} file;

typedef struct npy_source {
  file x, y;
  uint64_t rows;
  tr__perm epochs; /* each epoch's order of the rows */
  bool y_int;     /* labels delivered as int32 (cross-entropy), else float32 */
} npy_source;

static inline uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* n elements of dtype t at p, as float32 or as int32 */
static void row_float(float *dst, const uint8_t *p, tr__npy_dtype t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == TR__NPY_U1) {
      dst[i] = p[i];
    } else {
      const uint32_t u = le32(p + 4 * i);
      if (t == TR__NPY_I4) dst[i] = (float)(int32_t)u;
      else memcpy(dst + i, &u, 4);
    }
  }
}

static void row_int(int32_t *dst, const uint8_t *p, tr__npy_dtype t, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = t == TR__NPY_U1 ? p[i] : (int32_t)le32(p + 4 * i);
}

/* Row r of the file into buf. */
static int read_row(const tr_data *d, const file *f, uint64_t r, uint8_t *buf) {
  char why[384];
  const int rc = tr_file_read_at(f->fd, buf, f->row_bytes, f->h.offset + r * f->row_bytes,
                                 f->what, f->path, why, sizeof why);
  return rc ? tr__data_fail(d, rc, "%s", why) : 0;
}

static int fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const npy_source *s = d->self;
  const size_t most = s->x.row_bytes > s->y.row_bytes ? s->x.row_bytes : s->y.row_bytes;
  uint8_t *buf = malloc(most);
  if (buf == NULL)
    return tr__data_fail(d, TR_ENOMEM, "data '%s': out of memory (%zu bytes asked for)",
                         d->name, most);
  int rc = 0;
  for (size_t k = 0; k < count && rc == 0; k++) {
    const uint64_t i = first + k, r = tr__perm_at(&s->epochs, i / s->rows, i % s->rows);
    if ((rc = read_row(d, &s->x, r, buf))) break;
    row_float((float *)x + k * s->x.row, buf, s->x.h.dtype, s->x.row);
    if (!y) continue;
    if ((rc = read_row(d, &s->y, r, buf))) break;
    if (s->y_int) row_int((int32_t *)y + k * s->y.row, buf, s->y.h.dtype, s->y.row);
    else row_float((float *)y + k * s->y.row, buf, s->y.h.dtype, s->y.row);
  }
  free(buf);
  return rc;
}

static void close_file(file *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->path);
}

static void close_npy(tr_data *d) {
  npy_source *s = d->self;
  if (s) {
    close_file(&s->x);
    close_file(&s->y);
  }
  free(s);
}

/* Sample i's row of the file, and the element's place in it: "x.npy: row 17, column 3" for
 * a table, "y.npy: row 17" for one value a row, "x.npy: row 17, element 40" otherwise. */
static void where(const tr_data *d, uint64_t i, int target, size_t element, char *buf,
                  size_t size) {
  const npy_source *s = d->self;
  const file *f = target ? &s->y : &s->x;
  const uint64_t r = tr__perm_at(&s->epochs, i / s->rows, i % s->rows);
  if (f->row == 1) snprintf(buf, size, "%s: row %" PRIu64, f->path, r);
  else snprintf(buf, size, "%s: row %" PRIu64 ", %s %zu", f->path, r,
                f->h.ndim == 2 ? "column" : "element", element);
}

static const tr__data_ops npy_ops = {.fill = fill, .close = close_npy, .where = where};

static int open_file(file *f, const char *path, const char *what, char *err, size_t err_size) {
  f->what = what;
  if ((f->path = strdup(path)) == NULL)
    return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
  uint64_t size;
  int rc = tr_file_open_regular(path, what, &f->fd, &size, err, err_size);
  if (rc) return rc;
  const size_t head = size < HEADER_MAX ? (size_t)size : HEADER_MAX;
  uint8_t *h = malloc(head ? head : 1);
  if (h == NULL)
    return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory (%zu bytes asked for)",
                     what, path, head);
  rc = tr_file_read_at(f->fd, h, head, 0, what, path, err, err_size);
  if (rc == 0) rc = tr__npy_parse_head(&f->h, h, head, size, path, err, err_size);
  free(h);
  if (rc) return rc;
  f->row = 1;
  /* exact (the data's size is), or 0 when a dimension is 0, wrapping or not: refused */
  for (int k = 1; k < f->h.ndim; k++) f->row *= (size_t)f->h.shape[k];
  if (f->h.shape[0] == 0 || f->row == 0) {
    char s[256];
    tr__npy_shape_str(&f->h, s, sizeof s);
    return tr_errorf(err, err_size, TR_EINVAL, "%s: shape %s has no %s", path, s,
                     f->h.shape[0] ? "values in its rows" : "rows");
  }
  f->row_bytes = f->row * tr__npy_item(f->h.dtype);
  return 0;
}

/* Cross-entropy's labels: int32 or uint8, each in [0, classes). */
static int check_labels(const file *f, int classes, char *err, size_t err_size) {
  if (f->h.dtype == TR__NPY_F4)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "%s: dtype float32, but a classifier's labels are int32 or uint8 class "
                     "indices",
                     f->path);
  const uint64_t n = f->h.shape[0] * f->row;
  const size_t item = tr__npy_item(f->h.dtype);
  enum { CHUNK = 1 << 16 }; /* labels, a chunk at a time */
  uint8_t *p = malloc(CHUNK);
  if (p == NULL)
    return tr_errorf(err, err_size, TR_ENOMEM, "%s: out of memory (%d bytes asked for)",
                     f->path, CHUNK);
  int rc = 0;
  for (uint64_t at = 0; at < n && rc == 0; at += CHUNK / item) {
    const uint64_t m = n - at < CHUNK / item ? n - at : CHUNK / item;
    if ((rc = tr_file_read_at(f->fd, p, (size_t)m * item, f->h.offset + at * item, f->what,
                              f->path, err, err_size)))
      break;
    for (uint64_t i = 0; i < m && rc == 0; i++) {
      const int64_t v = f->h.dtype == TR__NPY_U1 ? p[i] : (int32_t)le32(p + 4 * i);
      if (v < 0 || v >= classes)
        rc = tr_errorf(err, err_size, TR_EINVAL,
                       "%s: label %" PRId64 " at row %" PRIu64
                       " is outside [0, %d), the model's classes",
                       f->path, v, (at + i) / f->row, classes);
    }
  }
  free(p);
  return rc;
}

int tr__data_open_npy(tr_data *d, const tr_data_config *c, char *err, size_t err_size) {
  d->ops = &npy_ops;
  if (!c->path || !c->labels)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': .npy data is two files, features (path) and labels (labels)",
                     c->path     ? c->path
                     : c->labels ? c->labels
                                 : d->name);
  if (c->classes < 0)
    return tr_errorf(err, err_size, TR_EINVAL, "data '%s': classes %d < 0", d->name, c->classes);
  npy_source *s = calloc(1, sizeof *s);
  if (!(d->self = s)) return TR_ENOMEM;
  s->x.fd = s->y.fd = -1;
  s->y_int = c->classes > 0;
  int rc;
  if ((rc = open_file(&s->x, c->path, "features", err, err_size)) ||
      (rc = open_file(&s->y, c->labels, "labels", err, err_size)))
    return rc;
  s->rows = s->x.h.shape[0];
  if (s->y.h.shape[0] != s->rows) {
    char sh[256];
    tr__npy_shape_str(&s->y.h, sh, sizeof sh);
    return tr_errorf(err, err_size, TR_EINVAL, "%s: shape %s but features have %" PRIu64 " rows",
                     c->labels, sh, s->rows);
  }
  if (s->y_int && (rc = check_labels(&s->y, c->classes, err, err_size))) return rc;
  s->epochs = tr__perm_make(s->rows, c->seed, TAG_EPOCH);
  d->rows = (int64_t)s->rows;
  d->x_bytes = s->x.row * sizeof(float);
  d->y_bytes = s->y.row * (s->y_int ? sizeof(int32_t) : sizeof(float));
  return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

int tr_data_write_npy(const char *path, tr_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, char *err, size_t err_size) {
  if (!path || (!shape && ndim > 0))
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_write_npy: %s is NULL",
                     path ? "shape" : "path");
  const char *descr = dtype == TR_DTYPE_F32 ? "<f4" : dtype == TR_DTYPE_I32 ? "<i4"
                      : dtype == TR_DTYPE_U8  ? "|u1" : NULL;
  if (descr == NULL || ndim < 1 || ndim > TR__NPY_MAX_DIMS)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "%s: cannot write dtype %s with %d dimensions "
                     "as .npy (float32, int32 or uint8; 1 to %d dimensions)",
                     path ? path : "(null)", tr_dtype_name(dtype), ndim, TR__NPY_MAX_DIMS);
  /* magic, version 1.0, a 2-byte header length, the dict padded with spaces and ended by a
   * newline so that the data starts at a multiple of 64, as NumPy writes it */
  char h[512];
  size_t elements = 1;
  int n = snprintf(h + 10, sizeof h - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   descr);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return tr_errorf(err, err_size, TR_EINVAL, "%s: dimension %d is %lld", path, d,
                       (long long)shape[d]);
    elements *= (size_t)shape[d];
    n += snprintf(h + 10 + n, sizeof h - 10 - (size_t)n, "%s%lld", d ? ", " : "",
                  (long long)shape[d]);
  }
  n += snprintf(h + 10 + n, sizeof h - 10 - (size_t)n, "%s), }", ndim == 1 ? "," : "");
  if (data == NULL && elements)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_write_npy: %s: data is NULL (%zu "
                     "elements)", path, elements);
  size_t total = 10 + (size_t)n + 1;
  total = (total + 63) / 64 * 64;
  memcpy(h, "\x93NUMPY\x01\x00", 8);
  h[8] = (char)((total - 10) & 0xff);
  h[9] = (char)((total - 10) >> 8);
  memset(h + 10 + n, ' ', total - 10 - (size_t)n - 1);
  h[total - 1] = '\n';
  const tr__span spans[2] = {{h, total}, {data, elements * tr_dtype_size(dtype)}};
  return tr__write_atomic(path, spans, 2, err, err_size);
}
