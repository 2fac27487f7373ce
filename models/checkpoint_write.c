/* checkpoint_write.c — safetensors checkpoints written (tr_checkpoint.h): tensors and
 * metadata gathered by a writer, laid out (the JSON header by hand, because cJSON prints
 * numbers through doubles and offsets must come out as exact integers), and saved atomically
 * or handed over as bytes. */
#include "tr_checkpoint.h"
#include "tr_file.h"

#include "checkpoint_impl.h"
#include "file_atomic.h"
#include "file_write.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ------------------------------------------------------------------------- */

typedef struct wtensor {
  char *name;
  tr_dtype dtype;
  int ndim;
  int64_t shape[TR_CHECKPOINT_MAX_DIMS];
  const void *data;
  size_t nbytes;
  size_t order; /* position in add order, the tie-break of the layout */
} wtensor;

typedef struct wmeta {
  char *key, *value;
} wmeta;

struct tr_checkpoint_writer {
  wtensor *t;
  size_t nt, cap_t;
  wmeta *m;
  size_t nm, cap_m;
  int failed; /* the status of the first failed call: save refuses to write after one */
  char error[TR__CK_ERR_SIZE];
};

static int wfail(tr_checkpoint_writer *w, int status, const char *fmt, ...) {
  if (!w->failed) {
    va_list ap;
    va_start(ap, fmt);
    tr__ck_vformat(w->error, sizeof w->error, fmt, ap);
    va_end(ap);
    w->failed = status;
  }
  return status;
}

/* Grows *p (elements of `size`) to hold one more than *n. */
static int grow(void **p, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 16;
  void *q = realloc(*p, c * size);
  if (!q) return TR_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

tr_checkpoint_writer *tr_checkpoint_writer_new(void) {
  return calloc(1, sizeof(tr_checkpoint_writer));
}

void tr_checkpoint_writer_free(tr_checkpoint_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->nt; i++) free(w->t[i].name);
  for (size_t i = 0; i < w->nm; i++) {
    free(w->m[i].key);
    free(w->m[i].value);
  }
  free(w->t);
  free(w->m);
  free(w);
}

const char *tr_checkpoint_writer_error(const tr_checkpoint_writer *w) {
  return w ? w->error : "";
}

/* A writer's call given NULL (tr_base.h, Misuse): remembered like any failure of the writer,
 * so save fails too; a NULL writer on stderr. */
#define WRITER_GIVEN(w) TR__NOT_NULL(w)
#define ARG_GIVEN(w, p) \
  if ((p) == NULL) return wfail(w, TR_EINVAL, "%s: %s is NULL", __func__, #p)

int tr_checkpoint_writer_add(tr_checkpoint_writer *w, const char *name, tr_dtype dtype,
                             int ndim, const int64_t *shape, const void *data) {
  WRITER_GIVEN(w);
  ARG_GIVEN(w, name);
  if (ndim > 0 && !shape)
    return wfail(w, TR_EINVAL, "tr_checkpoint_writer_add: tensor '%s': shape is NULL (ndim %d)",
                 tr__ck_quote(name).s, ndim);
  if (!name || !*name || strcmp(name, "__metadata__") == 0 || !tr__ck_utf8_valid(name))
    return wfail(w, TR_EINVAL, "checkpoint: tensor name '%s' is empty, reserved or not UTF-8",
                 name ? tr__ck_quote(name).s : "(null)");
  tr__ck_quoted q = tr__ck_quote(name);
  if ((unsigned)dtype >= TR_DTYPE_COUNT)
    return wfail(w, TR_EINVAL, "checkpoint: tensor '%s': unknown dtype %d", q.s, (int)dtype);
  if (ndim < 0 || ndim > TR_CHECKPOINT_MAX_DIMS || (ndim && !shape))
    return wfail(w, TR_EINVAL, "checkpoint: tensor '%s': %d dimensions (0..%d allowed)", q.s,
                 ndim, TR_CHECKPOINT_MAX_DIMS);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (double)shape[i] > TR__CK_MAX_EXACT)
      return wfail(w, TR_EINVAL, "checkpoint: tensor '%s': dimension %d is %" PRId64, q.s, i,
                   shape[i]);
  }
  size_t nbytes;
  if (tr__ck_shape_bytes(ndim, shape, tr_dtype_size(dtype), &nbytes) ||
      (double)nbytes > TR__CK_MAX_EXACT)
    return wfail(w, TR_EINVAL, "checkpoint: tensor '%s': shape too large", q.s);
  if (nbytes && !data)
    return wfail(w, TR_EINVAL, "checkpoint: tensor '%s': no data for %zu bytes", q.s, nbytes);
  for (size_t i = 0; i < w->nt; i++) {
    if (strcmp(w->t[i].name, name) == 0)
      return wfail(w, TR_EINVAL, "checkpoint: tensor '%s' added twice", q.s);
  }
  if (grow((void **)&w->t, &w->cap_t, w->nt, sizeof *w->t))
    return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  wtensor *t = &w->t[w->nt];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name))) return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->data = data;
  t->nbytes = nbytes;
  t->order = w->nt++;
  return 0;
}

int tr_checkpoint_writer_put(tr_checkpoint_writer *w, const char *key, const char *value) {
  WRITER_GIVEN(w);
  ARG_GIVEN(w, key);
  ARG_GIVEN(w, value);
  if (!key || !value || !tr__ck_utf8_valid(key) || !tr__ck_utf8_valid(value))
    return wfail(w, TR_EINVAL, "checkpoint: metadata '%s': key or value missing or not UTF-8",
                 key ? tr__ck_quote(key).s : "(null)");
  char *v = strdup(value);
  if (!v) return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  for (size_t i = 0; i < w->nm; i++) {
    if (strcmp(w->m[i].key, key) == 0) {
      free(w->m[i].value);
      w->m[i].value = v;
      return 0;
    }
  }
  char *k = strdup(key);
  if (!k || grow((void **)&w->m, &w->cap_m, w->nm, sizeof *w->m)) {
    free(k);
    free(v);
    return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  }
  w->m[w->nm++] = (wmeta){k, v};
  return 0;
}

int tr_checkpoint_writer_put_u64(tr_checkpoint_writer *w, const char *key, uint64_t value) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, value);
  return tr_checkpoint_writer_put(w, key, buf);
}

int tr_checkpoint_writer_put_u64s(tr_checkpoint_writer *w, const char *key,
                                  const uint64_t *values, size_t count) {
  WRITER_GIVEN(w);
  ARG_GIVEN(w, key);
  if (count && !values)
    return wfail(w, TR_EINVAL, "tr_checkpoint_writer_put_u64s: values is NULL (count %zu)", count);
  if (count > SIZE_MAX / 24 - 1) return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  size_t cap = 24 * count + 3, o = 1;
  char *buf = malloc(cap);
  if (!buf) return wfail(w, TR_ENOMEM, "checkpoint: out of memory");
  buf[0] = '[';
  for (size_t i = 0; i < count; i++)
    o += (size_t)snprintf(buf + o, cap - o, i ? ", %" PRIu64 : "%" PRIu64, values[i]);
  snprintf(buf + o, cap - o, "]");
  int rc = tr_checkpoint_writer_put(w, key, buf);
  free(buf);
  return rc;
}

int tr_checkpoint_writer_put_json(tr_checkpoint_writer *w, const char *key,
                                  const struct cJSON *value) {
  WRITER_GIVEN(w);
  ARG_GIVEN(w, key);
  ARG_GIVEN(w, value);
  char *text = cJSON_PrintUnformatted(value);
  if (!text) return wfail(w, TR_ENOMEM, "checkpoint: out of memory printing JSON");
  int rc = tr_checkpoint_writer_put(w, key, text);
  cJSON_free(text);
  return rc;
}

/* A growable byte buffer for the header; `oom` makes every later append a no-op. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + n + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_put(b, tmp, (size_t)n);
}

/* A JSON string: quotes, backslashes and control bytes escaped, UTF-8 passed through. */
static void sb_json_str(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                    : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
    if (esc) {
      sb_put(b, esc, 2);
    } else if (c < 0x20) {
      sb_fmt(b, "\\u%04x", c);
    } else {
      sb_put(b, p, 1);
    }
  }
  sb_put(b, "\"", 1);
}

/* Larger elements first, so that each tensor starts aligned to its element size (the data
 * section starts 8-aligned); add order otherwise. safetensors' own writer does the same. */
static int layout_cmp(const void *a, const void *b) {
  const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
  size_t sx = tr_dtype_size(x->dtype), sy = tr_dtype_size(y->dtype);
  if (sx != sy) return sx > sy ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* The whole header, 8-byte length prefix included, padded with spaces to a multiple of 8. */
static int build_header(tr_checkpoint_writer *w, wtensor **order, sbuf *b) {
  sb_put(b, "\0\0\0\0\0\0\0\0{", 9);
  int first = 1;
  if (w->nm) {
    sb_str(b, "\"__metadata__\":{");
    for (size_t i = 0; i < w->nm; i++) {
      if (i) sb_put(b, ",", 1);
      sb_json_str(b, w->m[i].key);
      sb_put(b, ":", 1);
      sb_json_str(b, w->m[i].value);
    }
    sb_put(b, "}", 1);
    first = 0;
  }
  size_t offset = 0;
  for (size_t i = 0; i < w->nt; i++) {
    const wtensor *t = order[i];
    if (!first) sb_put(b, ",", 1);
    first = 0;
    sb_json_str(b, t->name);
    sb_fmt(b, ":{\"dtype\":\"%s\",\"shape\":[", tr_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) sb_fmt(b, d ? ",%" PRId64 : "%" PRId64, t->shape[d]);
    sb_fmt(b, "],\"data_offsets\":[%zu,", offset);
    offset += t->nbytes;
    sb_fmt(b, "%zu]}", offset);
  }
  sb_put(b, "}", 1);
  while (!b->oom && b->len % 8) sb_put(b, " ", 1);
  if (b->oom) return TR_ENOMEM;
  uint64_t n = b->len - 8;
  for (int i = 0; i < 8; i++) b->p[i] = (char)(n >> (8 * i));
  return 0;
}

/* The tensors in file order (*order) and the header for them (*b): what save writes and
 * tr_checkpoint_writer_bytes lays out. `what` names the target in messages. */
static int lay_out(tr_checkpoint_writer *w, const char *what, wtensor ***order, sbuf *b) {
  if (w->failed) {
    char prev[TR__CK_ERR_SIZE];
    memcpy(prev, w->error, sizeof prev);
    tr__ck_format(w->error, sizeof w->error, "%s: not written, an earlier call failed: %s", what,
                  prev);
    return w->failed;
  }
  w->error[0] = '\0';
  *order = malloc((w->nt ? w->nt : 1) * sizeof **order);
  if (*order) {
    for (size_t i = 0; i < w->nt; i++) (*order)[i] = &w->t[i];
    qsort(*order, w->nt, sizeof **order, layout_cmp);
  }
  if (*order && !build_header(w, *order, b)) return 0;
  tr__ck_format(w->error, sizeof w->error, "%s: out of memory", what);
  return TR_ENOMEM;
}

/* Lays the checkpoint out and writes it, to `out` (a run's) or once to `path`. */
static int save(tr_checkpoint_writer *w, const char *path, tr__file_output *out,
                const char *content) {
  wtensor **order = NULL;
  sbuf b = {0};
  int rc = lay_out(w, path ? path : "(null)", &order, &b);
  tr__span *spans = rc ? NULL : malloc((w->nt + 1) * sizeof *spans);
  if (rc == 0 && spans) {
    spans[0] = (tr__span){b.p, b.len};
    for (size_t i = 0; i < w->nt; i++) spans[i + 1] = (tr__span){order[i]->data, order[i]->nbytes};
    rc = out ? tr__write_atomic_to(out, content, spans, w->nt + 1, w->error, sizeof w->error)
             : tr__write_atomic(path, spans, w->nt + 1, w->error, sizeof w->error);
  } else if (rc == 0) {
    rc = TR_ENOMEM;
    tr__ck_format(w->error, sizeof w->error, "%s: out of memory", path);
  }
  free(b.p);
  free(order);
  free(spans);
  return rc;
}

int tr_checkpoint_writer_save(tr_checkpoint_writer *w, const char *path) {
  WRITER_GIVEN(w);
  if (path == NULL && !w->failed) { /* not remembered: another save may name a path */
    tr__ck_format(w->error, sizeof w->error, "tr_checkpoint_writer_save: path is NULL");
    return TR_EINVAL;
  }
  const size_t plen = path ? strlen(path) : 0;
  if (!w->failed && (!plen || path[plen - 1] == '/')) {
    tr__ck_format(w->error, sizeof w->error, "checkpoint: '%s' is not a file path",
                  path ? path : "");
    return TR_EINVAL;
  }
  return save(w, path, NULL, NULL);
}

int tr__checkpoint_writer_save_to(tr_checkpoint_writer *w, tr__file_output *out,
                                  const char *content) {
  TR_ASSERT(out->path != NULL); /* opened (tr__file_output_open) */
  return save(w, out->path, out, content);
}

int tr_checkpoint_writer_bytes(tr_checkpoint_writer *w, void **bytes, size_t *size) {
  WRITER_GIVEN(w);
  if (bytes == NULL || size == NULL) { /* not remembered, as save's path */
    tr__ck_format(w->error, sizeof w->error, "tr_checkpoint_writer_bytes: %s is NULL",
                  bytes ? "size" : "bytes");
    return TR_EINVAL;
  }
  *bytes = NULL;
  *size = 0;
  wtensor **order = NULL;
  sbuf b = {0};
  int rc = lay_out(w, "<memory>", &order, &b);
  size_t n = b.len;
  for (size_t i = 0; rc == 0 && i < w->nt; i++) n += order[i]->nbytes;
  unsigned char *p = rc ? NULL : malloc(n);
  if (rc == 0 && p) {
    memcpy(p, b.p, b.len);
    size_t at = b.len;
    for (size_t i = 0; i < w->nt; i++) {
      if (order[i]->nbytes) memcpy(p + at, order[i]->data, order[i]->nbytes);
      at += order[i]->nbytes;
    }
    *bytes = p;
    *size = n;
  } else if (rc == 0) {
    rc = TR_ENOMEM;
    tr__ck_format(w->error, sizeof w->error, "<memory>: out of memory (%zu bytes asked for)", n);
  }
  free(b.p);
  free(order);
  return rc;
}
