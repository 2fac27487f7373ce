/* data_impl.h — the table behind every data source of tr_data.h, and what sources share:
 * counter-based random streams and a read-only file mapping.
 *
 * A source is opened by the core (data.c), which allocates the tr_data and fills in its
 * name; the source's opener sets ops first (so that a failure half-way is undone by
 * ops->close), then self, the sample sizes and, for the generated text, the corpus. fill
 * must be safe to call from several threads at once: a built-in source keeps no mutable
 * state after open but the text of its first failure (tr__data_fail). The generated sources
 * describe themselves as a tr_synth (tr_device.h), which is how they fill on the host too
 * (tr__synth_fill_cpu) and what tr_data_gen copies to a device.
 *
 * The counter-based random streams the sources share are synth_impl.h's (gpu/), where the
 * GPU's generator finds them too. A finite source (tr_data_rows) sets rows; its orders of
 * rows (a .npy source's epochs, a split's choice of rows) are tr__perm's bijections.
 */
#ifndef TR_DATA_IMPL_H
#define TR_DATA_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "synth_impl.h"
#include "tr_data.h"

typedef struct tr__data_ops {
  /* samples [first, first + count) into x and (when not NULL) y; 0 or a TR_E... status */
  int (*fill)(const tr_data *d, uint64_t first, size_t count, void *x, void *y);
  /* frees self and what it holds; called once, also after a failed open */
  void (*close)(tr_data *d);
  /* OPTIONAL: the source as tr_synth_fill generates it, its tables in host memory (they live
   * as long as the source); NULL: it cannot be generated on a device */
  const tr_synth *(*synth)(const tr_data *d);
  /* OPTIONAL: where value `element` of sample i's inputs (target 0) or targets (1) comes
   * from, as a message names it ("x.npy: row 17, column 3"); NULL: by the sample ("data
   * 'mine': sample 17, input 3"). For tr_data_check_finite. */
  void (*where)(const tr_data *d, uint64_t i, int target, size_t element, char *buf,
                size_t size);
} tr__data_ops;

struct tr_data {
  const tr__data_ops *ops;
  void *self;                 /* the source's own state */
  char *name;                 /* "teacher", a path, a callback's name */
  size_t x_bytes, y_bytes;    /* of one sample */
  int64_t rows;               /* a finite source's rows (tr_data_rows); 0: endless */
  const uint8_t *corpus;      /* the generated corpus: for tr_data_corpus */
  size_t corpus_size;
  _Atomic int failed;         /* 0; 1 while the first failure's text is written; 2 after */
  char error[512];            /* tr_data_error */
};

/* A pseudo-random permutation of [0, n), one for each epoch, keyed by (seed, tag, epoch): a
 * four-round Feistel network on the smallest even number of bits that holds n, walking each
 * value's cycle until it falls inside [0, n) (fewer than four steps on average). Pure: any
 * thread, any order. */
typedef struct tr__perm {
  uint64_t n, seed, tag;
  unsigned half; /* bits of each Feistel half: 4^half >= n */
} tr__perm;

static inline tr__perm tr__perm_make(uint64_t n, uint64_t seed, uint64_t tag) {
  tr__perm p = {.n = n, .seed = seed, .tag = tag};
  while (p.half < 32 && (n - 1) >> (2 * p.half)) p.half++;
  return p;
}

/* The permutation of epoch `epoch` at i < n. */
static inline uint64_t tr__perm_at(const tr__perm *p, uint64_t epoch, uint64_t i) {
  const uint64_t key = tr__rng_for(p->seed, p->tag, epoch).s;
  const uint64_t mask = (1ull << p->half) - 1;
  uint64_t v = i;
  do {
    uint64_t l = v >> p->half, r = v & mask;
    for (uint64_t round = 0; round < 4; round++) {
      const uint64_t t = l ^ (tr__mix(key ^ tr__mix(r + (round << 56))) & mask);
      l = r;
      r = t;
    }
    v = l << p->half | r;
  } while (v >= p->n);
  return v;
}

/* The core's opening (data.c): a tr_data named `name` that `open` fills in (setting its ops
 * first), in *out, or nothing and open's status. */
int tr__data_open_with(tr_data **out, const char *name,
                       int (*open)(tr_data *, const void *, char *, size_t), const void *arg,
                       char *err, size_t err_size);

/* The built-in sources' openers (tr_data_open dispatches on the kind). */
int tr__data_open_synthetic(tr_data *d, const tr_data_config *c, char *err, size_t err_size);
int tr__data_open_text(tr_data *d, const tr_data_config *c, char *err, size_t err_size);
int tr__data_open_npy(tr_data *d, const tr_data_config *c, char *err, size_t err_size);

/* From fill, on any thread: keeps the text of the source's first failure (tr_data_error)
 * and returns `status` (data_error.c). */
int tr__data_fail(const tr_data *d, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where value `element` of sample i comes from (tr__data_ops.where), in buf. */
void tr__data_where(const tr_data *d, uint64_t i, int target, size_t element, char *buf,
                    size_t size);

#endif
