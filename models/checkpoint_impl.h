/* checkpoint_impl.h — what the safetensors reader (checkpoint.c) and writer
 * (checkpoint_write.c) share: message formatting, names made safe to print, shapes' bytes. */
#ifndef TR_CHECKPOINT_IMPL_H
#define TR_CHECKPOINT_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

/* Whether s is UTF-8 as safetensors' Rust reader takes it (no overlong forms, surrogates or
 * code points past U+10FFFF). */
int tr__ck_utf8_valid(const char *s);

/* Element count × element size of a shape; -1 when it overflows size_t. A zero dimension
 * makes the tensor empty whatever the others are. */
int tr__ck_shape_bytes(int ndim, const int64_t *shape, size_t elem, size_t *out);

#endif
