/* npy.c — the .npy header parser of npy.h: a cursor over the header's dict literal, every
 * read bounded by the header's end, every size checked for overflow. */
#include "npy.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tr_base.h"

enum { ALIGN = 16 }; /* NumPy >= 1.14 pads to 64; older versions, and the format's floor, 16 */

typedef struct cursor {
  const char *p, *end; /* the header's dict text, up to its final '\n' */
  const char *name;
  char *err;
  size_t err_size;
} cursor;

static int bad(const cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const cursor *c, const char *fmt, ...) {
  char what[512]; /* a shape of 8 dimensions of 20 digits fits */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (c->err && c->err_size) snprintf(c->err, c->err_size, "%s: %s", c->name, what);
  return TR_EINVAL;
}

static const struct {
  const char *descr, *name;
  size_t item;
} dtypes[] = {
    [TR__NPY_F4] = {"<f4", "float32", 4},
    [TR__NPY_I4] = {"<i4", "int32", 4},
    [TR__NPY_U1] = {"|u1", "uint8", 1},
};

const char *tr__npy_dtype_name(tr__npy_dtype t) { return dtypes[t].name; }
size_t tr__npy_item(tr__npy_dtype t) { return dtypes[t].item; }

void tr__npy_shape_str(const tr__npy *a, char *buf, size_t size) {
  size_t at = 0;
  int k = snprintf(buf, size, "(");
  for (int i = 0; i < a->ndim && k >= 0 && (at += (size_t)k) < size; i++)
    k = snprintf(buf + at, size - at, i ? ", %" PRIu64 : "%" PRIu64, a->shape[i]);
  if (k >= 0 && (at += (size_t)k) < size) snprintf(buf + at, size - at, a->ndim == 1 ? ",)" : ")");
}

static void skip_space(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static bool eat(cursor *c, char ch) {
  skip_space(c);
  if (c->p < c->end && *c->p == ch) return c->p++, true;
  return false;
}

/* A Python string literal without escapes, 'x' or "x", into buf (truncated, NUL-ended). */
static bool string(cursor *c, char *buf, size_t size) {
  skip_space(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
  const char q = *c->p++;
  const char *s = c->p;
  while (c->p < c->end && *c->p != q && *c->p != '\\') c->p++;
  if (c->p >= c->end || *c->p != q) return false;
  const size_t n = (size_t)(c->p - s);
  snprintf(buf, size, "%.*s", (int)(n < size ? n : size - 1), s);
  c->p++;
  return true;
}

static bool word(cursor *c, const char *w) {
  skip_space(c);
  const size_t n = strlen(w);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return false;
  c->p += n;
  return true;
}

static int descr(cursor *c, tr__npy *a) {
  char s[32];
  if (!string(c, s, sizeof s)) return bad(c, "'descr' is not a simple dtype string");
  for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++)
    if (!strcmp(s, dtypes[t].descr)) return a->dtype = (tr__npy_dtype)t, 0;
  return bad(c, "dtype '%s' is not float32, int32 or uint8 (convert with .astype(np.float32), "
                  "np.int32 or np.uint8)", s);
}

static int fortran(cursor *c) {
  if (word(c, "False")) return 0;
  if (word(c, "True"))
    return bad(c, "fortran_order is True: only C order is read (save np.ascontiguousarray(a))");
  return bad(c, "'fortran_order' is not True or False");
}

/* A tuple of non-negative integers: "()", "(3,)", "(3, 4)", "(3, 4,)". */
static int shape(cursor *c, tr__npy *a) {
  if (!eat(c, '(')) return bad(c, "'shape' is not a tuple");
  a->ndim = 0;
  bool comma = true; /* a value may follow */
  while (!eat(c, ')')) {
    skip_space(c);
    if (!comma || c->p >= c->end || *c->p < '0' || *c->p > '9')
      return bad(c, "'shape' is not a tuple of non-negative integers");
    if (a->ndim == TR__NPY_MAX_DIMS)
      return bad(c, "shape has more than %d dimensions", TR__NPY_MAX_DIMS);
    uint64_t v = 0;
    for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
      if (v > (UINT64_MAX - 9) / 10) return bad(c, "a dimension of 'shape' overflows 64 bits");
      v = v * 10 + (uint64_t)(*c->p - '0');
    }
    a->shape[a->ndim++] = v;
    comma = eat(c, ',');
    if (a->ndim == 1 && !comma && eat(c, ')')) /* "(3)" is the integer 3 in Python */
      return bad(c, "'shape' (%" PRIu64 ") is not a tuple: write (%" PRIu64 ",)", v, v);
    if (a->ndim == 1 && !comma) return bad(c, "'shape' is not a tuple of non-negative integers");
  }
  return 0;
}

/* The dict: exactly the keys 'descr', 'fortran_order' and 'shape', in any order. */
static int dict(cursor *c, tr__npy *a) {
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  bool seen[3] = {false, false, false};
  if (!eat(c, '{')) return bad(c, "the header is not a Python dict");
  while (!eat(c, '}')) {
    char key[32];
    if (!string(c, key, sizeof key)) return bad(c, "a key of the header is not a string");
    int k = 0;
    while (k < 3 && strcmp(key, keys[k])) k++;
    if (k == 3) return bad(c, "unknown key '%s' in the header", key);
    if (seen[k]) return bad(c, "key '%s' given twice", key);
    seen[k] = true;
    if (!eat(c, ':')) return bad(c, "no ':' after key '%s'", key);
    const int rc = k == 0 ? descr(c, a) : k == 1 ? fortran(c) : shape(c, a);
    if (rc) return rc;
    if (!eat(c, ',') && !(skip_space(c), c->p < c->end && *c->p == '}'))
      return bad(c, "no ',' or '}' after the value of '%s'", key);
  }
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return bad(c, "the header has no '%s'", keys[k]);
  skip_space(c);
  if (c->p != c->end) return bad(c, "text after the header's dict");
  return 0;
}

int tr__npy_parse(tr__npy *out, const uint8_t *p, size_t size, const char *name, char *err,
                  size_t err_size) {
  return tr__npy_parse_head(out, p, size, size, name, err, err_size);
}

int tr__npy_parse_head(tr__npy *out, const uint8_t *p, size_t have, uint64_t file_size,
                       const char *name, char *err, size_t err_size) {
  cursor c = {.name = name, .err = err, .err_size = err_size};
  if (file_size > SIZE_MAX || have > file_size)
    return bad(&c, "%zu bytes read of a file of %llu", have, (unsigned long long)file_size);
  const size_t size = (size_t)file_size;
  memset(out, 0, sizeof *out);
  if (size < 10 || have < 10 || memcmp(p, "\x93NUMPY", 6))
    return bad(&c, "not a .npy file (no \\x93NUMPY magic)");
  const int major = p[6], minor = p[7];
  if (major < 1 || major > 3 || minor != 0)
    return bad(&c, "version %d.%d is not 1.0, 2.0 or 3.0", major, minor);
  const size_t lead = major == 1 ? 10 : 12; /* magic, version, header length */
  if (have < lead) return bad(&c, "%zu bytes: shorter than a version %d.0 preamble", size, major);
  size_t hlen = (size_t)p[8] | (size_t)p[9] << 8;
  if (major > 1) hlen |= (size_t)p[10] << 16 | (size_t)p[11] << 24;
  if (hlen > size - lead)
    return bad(&c, "header of %zu bytes runs past the end of the file (%zu bytes)", hlen, size);
  out->offset = lead + hlen;
  if (out->offset > have)
    return bad(&c, "header of %zu bytes: longer than the %zu bytes read for it", hlen, have);
  if (out->offset % ALIGN)
    return bad(&c, "header ends at byte %zu, not on a %d-byte boundary", out->offset, ALIGN);
  if (hlen == 0 || p[out->offset - 1] != '\n') return bad(&c, "header does not end with '\\n'");
  for (size_t i = lead; i < out->offset; i++)
    if (p[i] < 0x20 ? p[i] != '\n' || i + 1 != out->offset : p[i] > 0x7e)
      return bad(&c, "header byte %zu (0x%02x) is not printable ASCII", i, p[i]);
  c.p = (const char *)p + lead;
  c.end = (const char *)p + out->offset - 1;
  int rc = dict(&c, out);
  if (rc) return rc;
  if (out->ndim == 0) return bad(&c, "shape () is one value, not rows of samples");
  uint64_t n = tr__npy_item(out->dtype);
  for (int i = 0; i < out->ndim; i++)
    if (out->shape[i] && n > UINT64_MAX / out->shape[i]) n = UINT64_MAX; /* beyond any file */
    else n *= out->shape[i];
  char s[256];
  if (n != size - out->offset) {
    tr__npy_shape_str(out, s, sizeof s);
    return bad(&c, "%zu bytes of data, but shape %s of %s needs %" PRIu64, size - out->offset, s,
               tr__npy_dtype_name(out->dtype), n);
  }
  out->bytes = (size_t)n;
  return 0;
}
