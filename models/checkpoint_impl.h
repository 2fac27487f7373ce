/* checkpoint_impl.h — what the safetensors reader (checkpoint_read.c opens a file,
 * checkpoint.c looks things up in it) and writer (checkpoint_write.c) share: an open
 * checkpoint's inside, message formatting, names made safe to print, shapes' bytes. */
#ifndef TR_CHECKPOINT_IMPL_H
#define TR_CHECKPOINT_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_checkpoint.h"

#define TR__CK_ERR_SIZE 512
/* JSON numbers reach us as doubles: integers above 2^53 would round. No offset or dimension
 * of a real file comes near it. */
#define TR__CK_MAX_EXACT 9007199254740992.0

/* vsnprintf into buf (NULL or cap 0: nothing). */
void tr__ck_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
void tr__ck_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A name from a file, made safe to print: non-printable bytes as \xNN, long names cut. */
typedef struct tr__ck_quoted {
  char s[96];
} tr__ck_quoted;
tr__ck_quoted tr__ck_quote(const char *name);

/* The offset of the first byte of s[0, n) that breaks UTF-8 as tr__ck_utf8_valid reads it,
 * or n when none does. */
size_t tr__ck_utf8_invalid_at(const unsigned char *s, size_t n);
/* Whether s is UTF-8 as safetensors' Rust reader takes it (no overlong forms, surrogates or
 * code points past U+10FFFF). */
int tr__ck_utf8_valid(const char *s);

/* Element count × element size of a shape; -1 when it overflows size_t. A zero dimension
 * makes the tensor empty whatever the others are. */
int tr__ck_shape_bytes(int ndim, const int64_t *shape, size_t elem, size_t *out);

/* "[2, 3]" into buf. */
void tr__ck_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape);

/* An open checkpoint: the file's bytes, and its tensors and metadata sorted by name (the
 * order of the comparisons below, which checkpoint.c's lookups search by). */
typedef struct tr__ck_meta {
  const char *key, *value;
} tr__ck_meta;

struct tr_checkpoint {
  char *name;
  void *owned; /* the file's bytes, read by tr_checkpoint_open */
  const unsigned char *bytes;
  size_t size;
  struct cJSON *root; /* names, keys and values point into it */
  tr_checkpoint_tensor *t;
  size_t nt;
  tr__ck_meta *m;
  size_t nm;
  char error[TR__CK_ERR_SIZE];
};

int tr__ck_tensor_cmp_name(const void *a, const void *b); /* tr_checkpoint_tensor */
int tr__ck_meta_cmp(const void *a, const void *b);        /* tr__ck_meta */

#endif
