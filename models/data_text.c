/* data_text.c — the token sources of tr_data.h: a corpus of bytes, generated (ARITHMETIC)
 * or a file mapped read-only (FILE); sample i is ctx bytes at an offset drawn from
 * (seed, i), its targets the byte after each. */
#include <stdio.h>
#include <stdlib.h>

#include "data_impl.h"

#define TAG_CORPUS 0x636f727075733121ull /* the arithmetic corpus */

typedef struct text {
  uint64_t seed;
  int ctx;
  uint8_t *generated; /* ARITHMETIC: malloc'd */
  const uint8_t *map; /* FILE: mapped */
  size_t size;
} text;

/* Lines "a+b=c\n", a and b uniform in [0, 100), until the corpus is full. */
static int make_corpus(text *t, size_t size) {
  if (!(t->generated = malloc(size + 16))) return TR_ENOMEM;
  tr__rng r = tr__rng_for(t->seed, TAG_CORPUS, 0);
  size_t at = 0;
  while (at < size) {
    const int a = (int)(tr__rng_next(&r) % 100), b = (int)(tr__rng_next(&r) % 100);
    at += (size_t)snprintf((char *)t->generated + at, 16, "%d+%d=%d\n", a, b, a + b);
  }
  t->size = size;
  return 0;
}

static int fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const text *t = d->self;
  const uint8_t *corpus = d->corpus;
  const int T = t->ctx;
  for (size_t k = 0; k < count; k++) {
    tr__rng r = tr__rng_for(t->seed, TR__TAG_SAMPLE, first + k);
    const size_t at = (size_t)(tr__rng_next(&r) % (uint64_t)(t->size - (size_t)T));
    int32_t *xt = (int32_t *)x + k * (size_t)T, *yt = y ? (int32_t *)y + k * (size_t)T : NULL;
    for (int i = 0; i < T; i++) xt[i] = corpus[at + (size_t)i];
    if (yt)
      for (int i = 0; i < T; i++) yt[i] = corpus[at + (size_t)i + 1];
  }
  return 0;
}

static void close_text(tr_data *d) {
  text *t = d->self;
  if (t) {
    free(t->generated);
    tr__data_unmap(t->map, t->map ? t->size : 0);
  }
  free(t);
}

static const tr__data_ops text_ops = {.fill = fill, .close = close_text};

int tr__data_open_text(tr_data *d, const tr_data_config *c, char *err, size_t err_size) {
  d->ops = &text_ops;
  if (c->ctx <= 0 || (c->kind == TR_DATA_FILE && !c->path))
    return tr_errorf(err, err_size, TR_EINVAL, "data '%s': ctx %d%s: invalid", d->name, c->ctx,
                     c->kind == TR_DATA_FILE && !c->path ? ", no path" : "");
  text *t = calloc(1, sizeof *t);
  if (!(d->self = t)) return TR_ENOMEM;
  *t = (text){.seed = c->seed, .ctx = c->ctx};
  int rc;
  if (c->kind == TR_DATA_ARITHMETIC) {
    if ((rc = make_corpus(t, c->corpus_bytes ? c->corpus_bytes : (size_t)1 << 20))) return rc;
    d->corpus = t->generated;
  } else {
    if ((rc = tr__data_map(c->path, "data file", &t->map, &t->size, err, err_size))) return rc;
    d->corpus = t->map;
  }
  d->corpus_size = t->size;
  if (t->size < (size_t)c->ctx + 1)
    return tr_errorf(err, err_size, c->kind == TR_DATA_FILE ? TR_EIO : TR_EINVAL,
                     "data '%s': %zu bytes, needs at least %d (context + 1)", d->name, t->size,
                     c->ctx + 1);
  d->x_bytes = d->y_bytes = (size_t)c->ctx * sizeof(int32_t);
  return 0;
}
