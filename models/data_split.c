/* data_split.c — tr_data_split: a finite source's rows cut in two parts, each a source of its
 * own that reads the parent. Row r of the parent is its sample r (each of its rows once, as
 * tr_data_rows says); the split draws one permutation of the parent's N rows from the seed,
 * whose first round(held_out × N) values are the held-out part's rows and the others the
 * training part's. A part keeps nothing mutable (its failure text aside, tr__data_fail), so
 * any thread fills any range, and no part can be generated on a device (no synth). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "data_impl.h"

#define TAG_SPLIT 0x73706c6974726f77ull /* the choice of each part's rows */
#define TAG_PART_EPOCH 0x7061727465706f63ull /* the training part's order in each epoch */

typedef struct part {
  const tr_data *parent;
  tr__perm pick;      /* the parent's rows: the part's row j is pick(first + j) */
  uint64_t first, n;
  int train;          /* sample i: row order_e(i mod n), e = i / n; held out: row i mod n */
  tr__perm order;
} part;

typedef struct part_config {
  const tr_data *parent;
  tr__perm pick;
  uint64_t first, n;
  int train;
  uint64_t seed;
} part_config;

/* The parent's row of the part's sample i. */
static uint64_t row_of(const part *p, uint64_t i) {
  const uint64_t at = i % p->n, j = p->train ? tr__perm_at(&p->order, i / p->n, at) : at;
  return tr__perm_at(&p->pick, 0, p->first + j);
}

static int fill_part(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const part *p = d->self;
  for (size_t k = 0; k < count; k++) {
    const uint64_t r = row_of(p, first + k);
    const int rc = tr_data_fill(p->parent, r, 1, (char *)x + k * d->x_bytes,
                                y ? (char *)y + k * d->y_bytes : NULL);
    if (rc) {
      const char *why = tr_data_error(p->parent);
      return tr__data_fail(d, rc, "data '%s': row %llu of '%s': %s", d->name,
                           (unsigned long long)r, tr_data_name(p->parent),
                           *why ? why : tr_strerror(rc));
    }
  }
  return 0;
}

static void close_part(tr_data *d) { free(d->self); }

/* Where the parent keeps the row of sample i. */
static void where_part(const tr_data *d, uint64_t i, int target, size_t element, char *buf,
                       size_t size) {
  tr__data_where(((const part *)d->self)->parent, row_of(d->self, i), target, element, buf,
                 size);
}

static const tr__data_ops part_ops = {.fill = fill_part, .close = close_part,
                                      .where = where_part};

static int open_part(tr_data *d, const void *arg, char *err, size_t err_size) {
  const part_config *c = arg;
  d->ops = &part_ops;
  part *p = malloc(sizeof *p);
  if (!(d->self = p)) return TR_ENOMEM;
  *p = (part){.parent = c->parent, .pick = c->pick, .first = c->first, .n = c->n,
              .train = c->train, .order = tr__perm_make(c->n, c->seed, TAG_PART_EPOCH)};
  d->x_bytes = c->parent->x_bytes;
  d->y_bytes = c->parent->y_bytes;
  d->rows = (int64_t)c->n;
  (void)err, (void)err_size;
  return 0;
}

int tr_data_split(const tr_data *d, double held_out, uint64_t seed, tr_data **train,
                  tr_data **held, char *err, size_t err_size) {
  if (!d || !train || !held)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_split: %s is NULL",
                     !d ? "d" : !train ? "train" : "held");
  *train = *held = NULL;
  const int64_t N = d->rows;
  if (N <= 0)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': an endless source cannot be split (it has no rows: .npy "
                     "files have, and a callback with its rows)",
                     d->name);
  if (!(held_out > 0 && held_out < 1))
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': held_out %g is not in (0, 1), the fraction of its rows held "
                     "out",
                     d->name, held_out);
  const int64_t h = llround(held_out * (double)N);
  if (h == 0 || h == N)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': held_out %g of %lld rows leaves %s no rows (each part needs "
                     "one at least)",
                     d->name, held_out, (long long)N, h ? "training" : "the held-out part");
  const tr__perm pick = tr__perm_make((uint64_t)N, seed, TAG_SPLIT);
  char name[2][512];
  snprintf(name[0], sizeof name[0], "%s[train %.3g%%]", d->name, 100.0 * (N - h) / N);
  snprintf(name[1], sizeof name[1], "%s[held out %.3g%%]", d->name, 100.0 * h / N);
  const part_config c[2] = {
      {.parent = d, .pick = pick, .first = (uint64_t)h, .n = (uint64_t)(N - h), .train = 1,
       .seed = seed},
      {.parent = d, .pick = pick, .first = 0, .n = (uint64_t)h, .train = 0, .seed = seed}};
  int rc = tr__data_open_with(train, name[0], open_part, &c[0], err, err_size);
  if (!rc && (rc = tr__data_open_with(held, name[1], open_part, &c[1], err, err_size))) {
    tr_data_close(*train);
    *train = NULL;
  }
  return rc;
}
