/* data_text.c — the token sources of tr_data.h: a corpus of bytes, generated (ARITHMETIC)
 * or a file (FILE); sample i is ctx bytes at an offset drawn from (seed, i), its targets the
 * byte after each. The generated corpus is filled by synth_impl.h's generator, which can
 * also run on a GPU (tr_data_gen).
 *
 * A file is read with pread as it is trained on, not mapped: a file cut short under a
 * mapping kills the process with SIGBUS at the first access past its new end, where a read
 * comes back short and the run ends with a message naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "data_impl.h"
#include "tr_file.h"

#define TAG_CORPUS 0x636f727075733121ull /* the arithmetic corpus */

typedef struct text {
  uint64_t seed;
  int ctx;
  uint8_t *generated; /* ARITHMETIC: malloc'd */
  tr_synth src;       /* ARITHMETIC: the corpus as tr_synth_fill reads it */
  int fd;             /* FILE: open for reading, -1 otherwise */
  size_t size;        /* of the corpus; a file's when it was opened */
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
  t->src = (tr_synth){.kind = TR_SYNTH_TOKENS, .seed = t->seed, .corpus = t->generated,
                      .corpus_size = size, .ctx = t->ctx};
  return 0;
}

/* The ctx + 1 bytes of a sample from the file, into `buf`. */
static int read_sample(const tr_data *d, const text *t, size_t at, uint8_t *buf) {
  char why[384];
  const int rc = tr_file_read_at(t->fd, buf, (size_t)t->ctx + 1, at, "data", d->name, why,
                                 sizeof why);
  return rc ? tr__data_fail(d, rc, "%s", why) : 0;
}

static int fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const text *t = d->self;
  if (t->generated) {
    tr__synth_fill_cpu(&t->src, first, count, x, y);
    return 0;
  }
  const int T = t->ctx;
  uint8_t *buf = malloc((size_t)T + 1);
  if (buf == NULL)
    return tr__data_fail(d, TR_ENOMEM, "data '%s': out of memory (%d bytes asked for)", d->name,
                         T + 1);
  int rc = 0;
  for (size_t k = 0; k < count && rc == 0; k++) {
    const size_t at = tr__synth_offset(t->seed, first + k, t->size, T);
    if ((rc = read_sample(d, t, at, buf))) break;
    int32_t *xt = (int32_t *)x + k * (size_t)T, *yt = y ? (int32_t *)y + k * (size_t)T : NULL;
    for (int i = 0; i < T; i++) xt[i] = buf[i];
    if (yt)
      for (int i = 0; i < T; i++) yt[i] = buf[i + 1];
  }
  free(buf);
  return rc;
}

/* The generated corpus can be made on a device; a file is read as it trains. */
static const tr_synth *describe(const tr_data *d) {
  const text *t = d->self;
  return t->generated ? &t->src : NULL;
}

static void close_text(tr_data *d) {
  text *t = d->self;
  if (t) {
    free(t->generated);
    if (t->fd >= 0) close(t->fd);
  }
  free(t);
}

static const tr__data_ops text_ops = {.fill = fill, .close = close_text, .synth = describe};

int tr__data_open_text(tr_data *d, const tr_data_config *c, char *err, size_t err_size) {
  d->ops = &text_ops;
  if (c->ctx <= 0 || (c->kind == TR_DATA_FILE && !c->path))
    return tr_errorf(err, err_size, TR_EINVAL, "data '%s': ctx %d%s: invalid", d->name, c->ctx,
                     c->kind == TR_DATA_FILE && !c->path ? ", no path" : "");
  text *t = calloc(1, sizeof *t);
  if (!(d->self = t)) return TR_ENOMEM;
  *t = (text){.seed = c->seed, .ctx = c->ctx, .fd = -1};
  int rc;
  if (c->kind == TR_DATA_ARITHMETIC) {
    if ((rc = make_corpus(t, c->corpus_bytes ? c->corpus_bytes : (size_t)1 << 20))) return rc;
    d->corpus = t->generated;
    d->corpus_size = t->size;
  } else {
    uint64_t size;
    if ((rc = tr_file_open_regular(c->path, "data", &t->fd, &size, err, err_size))) return rc;
    t->size = (size_t)size;
  }
  if (t->size < (size_t)c->ctx + 1)
    return tr_errorf(err, err_size, c->kind == TR_DATA_FILE ? TR_EIO : TR_EINVAL,
                     "data '%s': %zu bytes, needs at least %d (context + 1)", d->name, t->size,
                     c->ctx + 1);
  d->x_bytes = d->y_bytes = (size_t)c->ctx * sizeof(int32_t);
  return 0;
}
