/* codec.c — the generic pieces of message codecs (codec.h), and byte for byte
 * (tr_msg_codec_flat, tr_msg.h). */
#include <stdlib.h>
#include <string.h>

#include "codec.h"

enum { ALIGN = 64 };

static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

size_t tr__codec_floats(size_t n) {
  return n < TR__CODEC_TOO_BIG / sizeof(float) ? n * sizeof(float) : TR__CODEC_TOO_BIG;
}

tr__codec_layout tr__codec_lay(size_t head, const size_t *bytes, int n) {
  TR_ASSERT(n >= 0 && n <= 4);
  tr__codec_layout l = {.n = n, .total = up(head)};
  for (int i = 0; i < n; i++) {
    l.at[i] = l.total;
    l.bytes[i] = bytes[i];
    l.total = bytes[i] < TR__CODEC_TOO_BIG && l.total < TR__CODEC_TOO_BIG ? l.total + up(bytes[i])
                                                                         : SIZE_MAX;
  }
  return l;
}

static size_t body(const tr_msgtype *t) { return t->size - sizeof(tr_msg); }

void tr__codec_put_struct(const tr_msg *m, uint8_t *out) {
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), body(m->type));
}

tr_msg *tr__codec_get_struct(const tr_msgtype *t, const uint8_t *in, size_t n, size_t need) {
  if (n < need || n < body(t)) return NULL;
  tr_msg *m = tr_msg_new(t);
  memcpy((uint8_t *)m + sizeof(tr_msg), in, body(t));
  return m;
}

float *tr__codec_copy_out(const uint8_t *in, size_t at, size_t bytes) {
  float *f = malloc(bytes ? bytes : 1);
  if (f && bytes) memcpy(f, in + at, bytes);
  return f;
}

/* ---- byte for byte (a message's allocated size: variable-size types included) ---------- */

static size_t flat_size(const tr_msg *m) { return m->size - sizeof(tr_msg); }

static void flat_put(const tr_msg *m, uint8_t *out) {
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), m->size - sizeof(tr_msg));
}

static tr_msg *flat_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  if (n < body(type) || n > UINT32_MAX / 2) return NULL;
  tr_msg *m = tr_msg_new_size(type, sizeof(tr_msg) + n);
  memcpy((uint8_t *)m + sizeof(tr_msg), in, n);
  return m;
}

const tr_msg_codec tr_msg_codec_flat = {.size = flat_size, .put = flat_put, .get = flat_get};

const tr_msg_codec *tr__codec_of(const tr_msgtype *type, const tr_msgtype *edge) {
  if (type->codec) return type->codec;
  return type == edge ? &tr_msg_codec_flat : NULL;
}
