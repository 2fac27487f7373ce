/* checkpoint_read.c — opening a safetensors checkpoint (tr_checkpoint.h): the file read
 * whole (not mapped), its header checked as safetensors' own reader checks it (the length,
 * UTF-8, JSON, each tensor's dtype, shape and offsets, a data section the tensors tile with
 * no hole or overlap), and the tables of tensors and metadata that checkpoint.c's lookups
 * search. The JSON header is parsed by cJSON. */
#include "tr_checkpoint.h"
#include "tr_file.h"

#include "checkpoint_impl.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- reading ------------------------------------------------------------------------- */

/* The parse state: every failure message starts with the file's name. */
typedef struct parse {
  tr_checkpoint *ck;
  char *err;
  size_t err_size;
} parse;

static int pfail(parse *p, int status, const char *fmt, ...) {
  if (p->err && p->err_size) {
    int n = snprintf(p->err, p->err_size, "%s: ", p->ck->name);
    if (n >= 0 && (size_t)n < p->err_size) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return status;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *j, double *out) {
  if (!cJSON_IsNumber(j)) return -1;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= TR__CK_MAX_EXACT) || (double)(uint64_t)v != v) return -1;
  *out = v;
  return 0;
}

static int tensor_cmp_offset(const void *a, const void *b) {
  const tr_checkpoint_tensor *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* One tensor entry of the header, checked against the data section's length. */
static int parse_tensor(parse *p, const cJSON *j, size_t data_len, tr_checkpoint_tensor *t) {
  tr__ck_quoted q = tr__ck_quote(j->string);
  t->name = j->string;
  if (!cJSON_IsObject(j))
    return pfail(p, TR_EFORMAT, "tensor '%s': entry is not a JSON object", q.s);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsString(dt))
    return pfail(p, TR_EFORMAT, "tensor '%s': \"dtype\" missing or not a string", q.s);
  if (tr_dtype_parse(dt->valuestring, &t->dtype))
    return pfail(p, TR_EFORMAT, "tensor '%s': unknown dtype '%s'", q.s,
                 tr__ck_quote(dt->valuestring).s);
  if (!cJSON_IsArray(sh))
    return pfail(p, TR_EFORMAT, "tensor '%s': \"shape\" missing or not an array", q.s);
  int nd = cJSON_GetArraySize(sh);
  if (nd > TR_CHECKPOINT_MAX_DIMS)
    return pfail(p, TR_EFORMAT, "tensor '%s': shape has %d dimensions, troupe reads at most %d",
                 q.s, nd, TR_CHECKPOINT_MAX_DIMS);
  t->ndim = nd;
  int d = 0;
  for (const cJSON *e = sh->child; e; e = e->next, d++) {
    double v;
    if (json_uint(e, &v))
      return pfail(p, TR_EFORMAT, "tensor '%s': shape dimension %d is not a non-negative integer",
                   q.s, d);
    t->shape[d] = (int64_t)v;
  }
  char shape_text[200];
  tr__ck_format_shape(shape_text, sizeof shape_text, t->ndim, t->shape);
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return pfail(p, TR_EFORMAT, "tensor '%s': \"data_offsets\" missing or not [begin, end]", q.s);
  double begin, end;
  if (json_uint(off->child, &begin) || json_uint(off->child->next, &end))
    return pfail(p, TR_EFORMAT, "tensor '%s': data_offsets are not non-negative integers", q.s);
  if (begin > end)
    return pfail(p, TR_EFORMAT, "tensor '%s': data_offsets [%.0f, %.0f) begin after their end",
                 q.s, begin, end);
  if (end > (double)data_len)
    return pfail(p, TR_EFORMAT,
                 "tensor '%s': data_offsets [%.0f, %.0f) end past the data section (%zu bytes)",
                 q.s, begin, end, data_len);
  t->offset = (size_t)begin;
  t->nbytes = (size_t)end - (size_t)begin;
  size_t want;
  if (tr__ck_shape_bytes(t->ndim, t->shape, tr_dtype_size(t->dtype), &want))
    return pfail(p, TR_EFORMAT, "tensor '%s': shape %s overflows", q.s, shape_text);
  if (want != t->nbytes)
    return pfail(p, TR_EFORMAT,
                 "tensor '%s': shape %s of %s needs %zu bytes, data_offsets [%.0f, %.0f) hold %zu",
                 q.s, shape_text, tr_dtype_name(t->dtype), want, begin, end, t->nbytes);
  return 0;
}

static int parse_metadata(parse *p, const cJSON *j) {
  tr_checkpoint *ck = p->ck;
  if (ck->m) return pfail(p, TR_EFORMAT, "\"__metadata__\" appears twice in the header");
  /* safetensors' reader takes null for "no metadata"; so do we. */
  if (!cJSON_IsNull(j) && !cJSON_IsObject(j))
    return pfail(p, TR_EFORMAT, "\"__metadata__\" is not a JSON object");
  size_t n = (size_t)cJSON_GetArraySize(j);
  if (!(ck->m = calloc(n ? n : 1, sizeof *ck->m))) return pfail(p, TR_ENOMEM, "out of memory");
  for (const cJSON *e = j->child; e; e = e->next) {
    if (!cJSON_IsString(e))
      return pfail(p, TR_EFORMAT, "\"__metadata__\" value of '%s' is not a string",
                   tr__ck_quote(e->string).s);
    ck->m[ck->nm++] = (tr__ck_meta){e->string, e->valuestring};
  }
  qsort(ck->m, ck->nm, sizeof *ck->m, tr__ck_meta_cmp);
  for (size_t i = 1; i < ck->nm; i++) {
    if (strcmp(ck->m[i - 1].key, ck->m[i].key) == 0)
      return pfail(p, TR_EFORMAT, "metadata key '%s' appears twice", tr__ck_quote(ck->m[i].key).s);
  }
  return 0;
}

/* Tensors must tile the data section: in offset order, each begins where the previous
 * ended and the last ends at the section's end (safetensors forbids holes, so that no
 * bytes hide in a file unaccounted for). */
static int check_layout(parse *p, size_t data_len) {
  tr_checkpoint *ck = p->ck;
  qsort(ck->t, ck->nt, sizeof *ck->t, tensor_cmp_offset);
  size_t at = 0;
  for (size_t i = 0; i < ck->nt; i++) {
    const tr_checkpoint_tensor *t = &ck->t[i];
    if (t->offset < at) {
      const tr_checkpoint_tensor *prev = &ck->t[i - 1];
      return pfail(p, TR_EFORMAT,
                   "tensor '%s': data_offsets [%zu, %zu) overlap tensor '%s' [%zu, %zu)",
                   tr__ck_quote(t->name).s, t->offset, t->offset + t->nbytes,
                   tr__ck_quote(prev->name).s,
                   prev->offset, prev->offset + prev->nbytes);
    }
    if (t->offset > at)
      return pfail(p, TR_EFORMAT, "bytes [%zu, %zu) of the data section belong to no tensor "
                   "(before tensor '%s')", at, t->offset, tr__ck_quote(t->name).s);
    at = t->offset + t->nbytes;
  }
  if (at != data_len)
    return pfail(p, TR_EFORMAT, "bytes [%zu, %zu) of the data section belong to no tensor "
                 "(after the last one)", at, data_len);
  return 0;
}

/* A \u0000 escape would cut a C string short (cJSON decodes it to a NUL byte), making two
 * different names look alike: refuse it. Outside strings a backslash is invalid JSON anyway. */
static int has_nul_escape(const char *s, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (s[i] != '\\') continue;
    if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) return 1;
    i++;
  }
  return 0;
}

static int parse_file(parse *p) {
  tr_checkpoint *ck = p->ck;
  const unsigned char *b = ck->bytes;
  size_t size = ck->size;
  if (size < 8)
    return pfail(p, TR_EFORMAT, "%zu bytes, too short for the 8-byte header length", size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  if (n > TR_CHECKPOINT_MAX_HEADER)
    return pfail(p, TR_EFORMAT, "header length %" PRIu64 " exceeds safetensors' limit of %u "
                 "bytes (not a safetensors file?)", n, TR_CHECKPOINT_MAX_HEADER);
  if (n > size - 8)
    return pfail(p, TR_EFORMAT, "header length %" PRIu64 " runs past the end of the file "
                 "(%zu bytes; truncated?)", n, size);
  const char *h = (const char *)b + 8;
  size_t hlen = (size_t)n, data_len = size - 8 - hlen;
  if (hlen == 0 || h[0] != '{') return pfail(p, TR_EFORMAT, "header does not begin with '{'");
  size_t bad = tr__ck_utf8_invalid_at((const unsigned char *)h, hlen);
  if (bad < hlen) return pfail(p, TR_EFORMAT, "header is not UTF-8 at byte %zu", bad);
  if (memchr(h, '\0', hlen)) return pfail(p, TR_EFORMAT, "header contains a NUL byte");
  if (has_nul_escape(h, hlen))
    return pfail(p, TR_EFORMAT, "header contains a \\u0000 escape");
  while (hlen && h[hlen - 1] == ' ') hlen--; /* the padding */

  /* cJSON wants a terminated string; the mapping has none. */
  char *text = malloc(hlen + 1);
  if (!text) return pfail(p, TR_ENOMEM, "out of memory");
  memcpy(text, h, hlen);
  text[hlen] = '\0';
  const char *end = NULL;
  ck->root = cJSON_ParseWithOpts(text, &end, 1);
  size_t at = end ? (size_t)(end - text) : 0;
  free(text);
  if (!ck->root)
    return pfail(p, TR_EFORMAT, "header is not valid JSON (error near byte %zu of %zu)", at,
                 hlen);
  if (!cJSON_IsObject(ck->root)) return pfail(p, TR_EFORMAT, "header is not a JSON object");

  size_t count = (size_t)cJSON_GetArraySize(ck->root);
  if (!(ck->t = calloc(count ? count : 1, sizeof *ck->t)))
    return pfail(p, TR_ENOMEM, "out of memory");
  for (const cJSON *e = ck->root->child; e; e = e->next) {
    int rc = strcmp(e->string, "__metadata__") == 0
                 ? parse_metadata(p, e)
                 : parse_tensor(p, e, data_len, &ck->t[ck->nt++]);
    if (rc) return rc;
  }
  qsort(ck->t, ck->nt, sizeof *ck->t, tr__ck_tensor_cmp_name);
  for (size_t i = 1; i < ck->nt; i++) {
    if (strcmp(ck->t[i - 1].name, ck->t[i].name) == 0)
      return pfail(p, TR_EFORMAT, "tensor '%s' appears twice in the header",
                   tr__ck_quote(ck->t[i].name).s);
  }
  int rc = check_layout(p, data_len);
  if (rc) return rc;
  const unsigned char *data = b + 8 + n;
  for (size_t i = 0; i < ck->nt; i++) ck->t[i].data = data + ck->t[i].offset;
  qsort(ck->t, ck->nt, sizeof *ck->t, tr__ck_tensor_cmp_name);
  return 0;
}

void tr_checkpoint_close(tr_checkpoint *ck) {
  if (!ck) return;
  free(ck->owned);
  cJSON_Delete(ck->root);
  free(ck->t);
  free(ck->m);
  free(ck->name);
  free(ck);
}

static tr_checkpoint *checkpoint_new(const char *name, char *err, size_t err_size) {
  tr_checkpoint *ck = calloc(1, sizeof *ck);
  if (ck && !(ck->name = strdup(name))) {
    free(ck);
    ck = NULL;
  }
  if (!ck) tr__ck_format(err, err_size, "%s: out of memory", name);
  return ck;
}

int tr_checkpoint_open_memory(tr_checkpoint **out, const void *bytes, size_t size,
                              const char *name, char *err, size_t err_size) {
  if (out == NULL || (bytes == NULL && size))
    return tr_errorf(err, err_size, TR_EINVAL, "tr_checkpoint_open_memory: %s is NULL%s",
                     out ? "bytes" : "out", out ? " (size is not 0)" : "");
  *out = NULL;
  tr_checkpoint *ck = checkpoint_new(name ? name : "<memory>", err, err_size);
  if (!ck) return TR_ENOMEM;
  ck->bytes = bytes;
  ck->size = bytes ? size : 0;
  parse p = {ck, err, err_size};
  int rc = parse_file(&p);
  if (rc) {
    tr_checkpoint_close(ck);
    return rc;
  }
  *out = ck;
  return 0;
}

int tr_checkpoint_open(tr_checkpoint **out, const char *path, char *err, size_t err_size) {
  if (out == NULL || path == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_checkpoint_open: %s is NULL",
                     out ? "path" : "out");
  *out = NULL;
  int fd;
  uint64_t size64;
  int rc = tr_file_open_regular(path, NULL, &fd, &size64, err, err_size);
  if (rc) return rc;
  /* Read, not mapped: a file cut short under a mapping would kill the process (SIGBUS);
   * a read of one comes back short, and the file is refused. */
  const size_t size = (size_t)size64;
  void *bytes = size ? malloc(size) : NULL;
  if (size && bytes == NULL) {
    close(fd);
    tr__ck_format(err, err_size, "%s: out of memory (%zu bytes asked for)", path, size);
    return TR_ENOMEM;
  }
  rc = size ? tr_file_read_at(fd, bytes, size, 0, "checkpoint", path, err, err_size) : 0;
  close(fd);
  tr_checkpoint *ck = NULL;
  if (rc == 0) rc = tr_checkpoint_open_memory(&ck, bytes, size, path, err, err_size);
  if (rc) {
    free(bytes);
    return rc;
  }
  ck->owned = bytes;
  *out = ck;
  return 0;
}

int tr_checkpoint_view(const tr_checkpoint *ck, tr_checkpoint **out, char *err,
                       size_t err_size) {
  if (ck == NULL || out == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_checkpoint_view: %s is NULL", ck ? "out" : "ck");
  return tr_checkpoint_open_memory(out, ck->bytes, ck->size, ck->name, err, err_size);
}
