/* checkpoint.c — safetensors checkpoints: the dtypes, what the reader and the writer share
 * (checkpoint_impl.h), and the lookups in an open checkpoint (tr_checkpoint.h): tensors by
 * name, checked against the shape and dtype the caller expects, and the metadata with its
 * typed getters. Opening and validating a file is checkpoint_read.c's, writing one
 * checkpoint_write.c's. */
#include "tr_checkpoint.h"

#include "checkpoint_impl.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes -------------------------------------------------------------------------- */

static const struct {
  const char *name;
  size_t size;
} dtypes[TR_DTYPE_COUNT] = {
#define TR__DTYPE_ROW(name, text, size) [TR_DTYPE_##name] = {text, size},
    TR_DTYPE_MAP(TR__DTYPE_ROW)
#undef TR__DTYPE_ROW
};

size_t tr_dtype_size(tr_dtype dtype) {
  return (unsigned)dtype < TR_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *tr_dtype_name(tr_dtype dtype) {
  return (unsigned)dtype < TR_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

int tr_dtype_parse(const char *name, tr_dtype *out) {
  TR__NOT_NULL(out);
  TR__NOT_NULL(name);
  for (int i = 0; i < TR_DTYPE_COUNT; i++) {
    if (strcmp(name, dtypes[i].name) == 0) {
      *out = (tr_dtype)i;
      return 0;
    }
  }
  return TR_EFORMAT;
}

/* ---- shared helpers ---------------------------------------------------------------- */

void tr__ck_vformat(char *buf, size_t cap, const char *fmt, va_list ap) {
  if (buf && cap) vsnprintf(buf, cap, fmt, ap);
}

void tr__ck_format(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tr__ck_vformat(buf, cap, fmt, ap);
  va_end(ap);
}

tr__ck_quoted tr__ck_quote(const char *name) {
  tr__ck_quoted q;
  size_t o = 0, i = 0;
  for (; name[i] && o + 8 < sizeof q.s; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c >= 0x20 && c != 0x7f && c != '\\')
      q.s[o++] = (char)c;
    else
      o += (size_t)snprintf(q.s + o, sizeof q.s - o, "\\x%02x", c);
  }
  if (name[i]) memcpy(q.s + o, "...", 4);
  else q.s[o] = '\0';
  return q;
}

void tr__ck_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, i ? ", %" PRId64 : "%" PRId64, shape[i]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
 * past U+10FFFF included, as safetensors' Rust reader rejects them), or n when valid. */
size_t tr__ck_utf8_invalid_at(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    unsigned min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80, c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800, c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000, c &= 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      c = (c << 6) | (s[i + k] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return i;
    i += len;
  }
  return n;
}

int tr__ck_utf8_valid(const char *s) {
  size_t n = strlen(s);
  return tr__ck_utf8_invalid_at((const unsigned char *)s, n) == n;
}

int tr__ck_shape_bytes(int ndim, const int64_t *shape, size_t elem, size_t *out) {
  size_t n = elem;
  int overflow = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) {
      *out = 0;
      return 0;
    }
    if ((uint64_t)shape[i] > SIZE_MAX / n) overflow = 1;
    else n *= (size_t)shape[i];
  }
  if (overflow) return -1;
  *out = n;
  return 0;
}

int tr__ck_tensor_cmp_name(const void *a, const void *b) {
  return strcmp(((const tr_checkpoint_tensor *)a)->name, ((const tr_checkpoint_tensor *)b)->name);
}

int tr__ck_meta_cmp(const void *a, const void *b) {
  return strcmp(((const tr__ck_meta *)a)->key, ((const tr__ck_meta *)b)->key);
}

/* ---- lookups ----------------------------------------------------------------------- */

static int ckfail(tr_checkpoint *ck, int status, const char *fmt, ...) {
  int n = snprintf(ck->error, sizeof ck->error, "%s: ", ck->name);
  if (n >= 0 && (size_t)n < sizeof ck->error) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ck->error + n, sizeof ck->error - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return status;
}

/* Of NULL (and a name or key NULL): "", 0, NULL (tr_base.h, Misuse). */
const char *tr_checkpoint_error(const tr_checkpoint *ck) { return ck ? ck->error : ""; }

size_t tr_checkpoint_count(const tr_checkpoint *ck) { return ck ? ck->nt : 0; }

const tr_checkpoint_tensor *tr_checkpoint_tensor_at(const tr_checkpoint *ck, size_t index) {
  return ck && index < ck->nt ? &ck->t[index] : NULL;
}

const tr_checkpoint_tensor *tr_checkpoint_find(const tr_checkpoint *ck, const char *name) {
  if (ck == NULL || name == NULL) return NULL;
  tr_checkpoint_tensor key = {.name = name};
  return bsearch(&key, ck->t, ck->nt, sizeof *ck->t, tr__ck_tensor_cmp_name);
}

/* What a lookup of a tensor is given (expect, read): 0, or TR_EINVAL naming `call`. */
static int lookup_given(tr_checkpoint *ck, const char *call, const char *name, int ndim,
                        const int64_t *shape) {
  if (ck == NULL) return tr__misuse(TR_EINVAL, "%s: ck is NULL", call);
  if (name == NULL) return ckfail(ck, TR_EINVAL, "%s: name is NULL", call);
  if (ndim < 0 || ndim > TR_CHECKPOINT_MAX_DIMS)
    return ckfail(ck, TR_EINVAL, "%s: tensor '%s': ndim %d: give 0 to %d", call,
                  tr__ck_quote(name).s, ndim, TR_CHECKPOINT_MAX_DIMS);
  if (ndim && shape == NULL)
    return ckfail(ck, TR_EINVAL, "%s: tensor '%s': shape is NULL (ndim %d)", call,
                  tr__ck_quote(name).s, ndim);
  return 0;
}

int tr_checkpoint_expect(tr_checkpoint *ck, const char *name, tr_dtype dtype, int ndim,
                         const int64_t *shape, const tr_checkpoint_tensor **out) {
  if (out) *out = NULL;
  TR__TRY(lookup_given(ck, __func__, name, ndim, shape));
  const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, name);
  tr__ck_quoted q = tr__ck_quote(name);
  if (!t)
    return ckfail(ck, TR_EFORMAT, "no tensor '%s' among its %zu (a checkpoint of another "
                  "model?)", q.s, ck->nt);
  if (t->dtype != dtype)
    return ckfail(ck, TR_EFORMAT, "tensor '%s' has dtype %s, expected %s", q.s,
                  tr_dtype_name(t->dtype), tr_dtype_name(dtype));
  int same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char have[200], want[200];
    tr__ck_format_shape(have, sizeof have, t->ndim, t->shape);
    tr__ck_format_shape(want, sizeof want, ndim, shape);
    return ckfail(ck, TR_EFORMAT, "tensor '%s' has shape %s, expected %s", q.s, have, want);
  }
  if (out) *out = t;
  return 0;
}

int tr_checkpoint_read(tr_checkpoint *ck, const char *name, tr_dtype dtype, int ndim,
                       const int64_t *shape, void *dst) {
  TR__TRY(lookup_given(ck, __func__, name, ndim, shape));
  if (dst == NULL) return ckfail(ck, TR_EINVAL, "tr_checkpoint_read: dst is NULL");
  const tr_checkpoint_tensor *t;
  int rc = tr_checkpoint_expect(ck, name, dtype, ndim, shape, &t);
  if (rc) return rc;
  if (t->nbytes) memcpy(dst, t->data, t->nbytes);
  return 0;
}

size_t tr_checkpoint_meta_count(const tr_checkpoint *ck) { return ck ? ck->nm : 0; }

void tr_checkpoint_meta_at(const tr_checkpoint *ck, size_t index, const char **key,
                           const char **value) {
  const bool have = ck && index < ck->nm; /* an entry it lacks: NULL and NULL */
  if (ck && !have) tr__misuse(0, "tr_checkpoint_meta_at: index %zu: '%s' has %zu entries", index,
                              ck->name, ck->nm);
  if (key) *key = have ? ck->m[index].key : NULL;
  if (value) *value = have ? ck->m[index].value : NULL;
}

const char *tr_checkpoint_meta(const tr_checkpoint *ck, const char *key) {
  if (ck == NULL || key == NULL) return NULL;
  tr__ck_meta k = {key, NULL};
  const tr__ck_meta *m = ck->nm ? bsearch(&k, ck->m, ck->nm, sizeof *ck->m, tr__ck_meta_cmp) : NULL;
  return m ? m->value : NULL;
}

static const char *meta_need(tr_checkpoint *ck, const char *key) {
  const char *v = tr_checkpoint_meta(ck, key);
  if (!v) ckfail(ck, TR_EFORMAT, "metadata key '%s' is missing", tr__ck_quote(key).s);
  return v;
}

/* Decimal digits only, no sign or space, within 64 bits. Advances *s past them. */
static int parse_u64(const char **s, uint64_t *out) {
  const char *p = *s;
  uint64_t v = 0;
  if (*p < '0' || *p > '9') return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *s = p;
  *out = v;
  return 0;
}

/* A typed getter's arguments: 0, or TR_EINVAL naming `call`. */
static int meta_given(tr_checkpoint *ck, const char *call, const char *key, const void *out) {
  if (ck == NULL) return tr__misuse(TR_EINVAL, "%s: ck is NULL", call);
  if (key == NULL || out == NULL)
    return ckfail(ck, TR_EINVAL, "%s: %s is NULL", call, key ? "out" : "key");
  return 0;
}

int tr_checkpoint_meta_u64(tr_checkpoint *ck, const char *key, uint64_t *out) {
  TR__TRY(meta_given(ck, __func__, key, out));
  const char *v = meta_need(ck, key), *p = v;
  if (!v) return TR_EFORMAT;
  if (parse_u64(&p, out) || *p)
    return ckfail(ck, TR_EFORMAT, "metadata '%s' is \"%s\", not an unsigned 64-bit integer",
                  tr__ck_quote(key).s, tr__ck_quote(v).s);
  return 0;
}

int tr_checkpoint_meta_u64s(tr_checkpoint *ck, const char *key, uint64_t *out, size_t count) {
  TR__TRY(meta_given(ck, __func__, key, count ? (const void *)out : ""));
  const char *v = meta_need(ck, key), *p = v;
  if (!v) return TR_EFORMAT;
  size_t n = 0;
  int ok = *p++ == '[';
  while (ok && *p == ' ') p++;
  if (ok && *p != ']') {
    for (;;) {
      uint64_t x;
      if (parse_u64(&p, &x)) {
        ok = 0;
        break;
      }
      if (n < count) out[n] = x;
      n++;
      while (*p == ' ') p++;
      if (*p != ',') break;
      p++;
      while (*p == ' ') p++;
    }
  }
  ok = ok && *p++ == ']' && *p == '\0';
  if (!ok)
    return ckfail(ck, TR_EFORMAT, "metadata '%s' is \"%s\", not a JSON array of unsigned "
                  "64-bit integers", tr__ck_quote(key).s, tr__ck_quote(v).s);
  if (n != count)
    return ckfail(ck, TR_EFORMAT, "metadata '%s' has %zu values, expected %zu", tr__ck_quote(key).s,
                  n, count);
  return 0;
}

int tr_checkpoint_meta_json(tr_checkpoint *ck, const char *key, struct cJSON **out) {
  TR__TRY(meta_given(ck, __func__, key, out));
  *out = NULL;
  const char *v = meta_need(ck, key);
  if (!v) return TR_EFORMAT;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithOpts(v, &end, 1);
  if (!j)
    return ckfail(ck, TR_EFORMAT, "metadata '%s' is not valid JSON (error near byte %zu)",
                  tr__ck_quote(key).s, end ? (size_t)(end - v) : 0);
  *out = j;
  return 0;
}
