/* test_data_split.c — finite sources and their splits (tr_data_rows, tr_data_split): every
 * kind of source says its rows, a split's parts are disjoint and hold every row between them
 * in the sizes asked for, the training part visits each of its rows once an epoch in orders
 * of their own, the held-out part gives its rows in order, what cannot be split is refused
 * with a message naming the rule, and parts filled from two threads give the same bytes. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_data.h"

/* A callback source of `rows` rows whose row r is x = (r, -r), y = r; samples past its rows
 * wrap (r = i mod rows). fail_at: a sample whose fill fails with TR_EIO (-1: none). */
typedef struct rows_source {
  int64_t rows, fail_at;
} rows_source;

static int fill_rows(void *arg, uint64_t first, size_t count, void *x, void *y) {
  const rows_source *s = arg;
  for (size_t k = 0; k < count; k++) {
    const uint64_t i = first + k, r = s->rows ? i % (uint64_t)s->rows : i;
    if ((int64_t)i == s->fail_at) return TR_EIO;
    ((float *)x)[2 * k] = (float)r;
    ((float *)x)[2 * k + 1] = -(float)r;
    if (y) ((int32_t *)y)[k] = (int32_t)r;
  }
  return 0;
}

static tr_data *open_rows(rows_source *s) {
  char err[256];
  tr_data_callback cb = {.name = "rows", .x_bytes = 8, .y_bytes = 4, .fill = fill_rows,
                         .arg = s, .rows = s->rows};
  tr_data *d;
  const int rc = tr_data_open_callback(&d, &cb, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return d;
}

static void split_ok(const tr_data *d, double f, uint64_t seed, tr_data **train, tr_data **held) {
  char err[256];
  const int rc = tr_data_split(d, f, seed, train, held, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
}

/* Samples [first, first + n) of d: their rows (x's first float), x and y checked to be one
 * row's. */
static int64_t *rows_of(const tr_data *d, uint64_t first, size_t n) {
  float *x = malloc(n * 8 + 8);
  int32_t *y = malloc(n * 4 + 4);
  int64_t *r = malloc(n * sizeof *r + 8);
  assert_int_equal(tr_data_fill(d, first, n, x, y), 0);
  for (size_t k = 0; k < n; k++) {
    r[k] = (int64_t)x[2 * k];
    assert_true(x[2 * k + 1] == -x[2 * k]);
    assert_int_equal(y[k], r[k]);
  }
  free(x), free(y);
  return r;
}

/* ---- rows ------------------------------------------------------------------------------------ */

static void every_kind_of_source_says_its_rows(void **state) {
  (void)state;
  char err[256];
  /* the generated sources are endless */
  const tr_data_kind endless[4] = {TR_DATA_TEACHER, TR_DATA_GAUSSIAN, TR_DATA_CLASSIFIER,
                                   TR_DATA_ARITHMETIC};
  for (int k = 0; k < 4; k++) {
    tr_data_config c = {.kind = endless[k], .seed = 1, .in = 4, .out = 3, .classes = 3, .ctx = 8};
    tr_data *d;
    assert_int_equal(tr_data_open(&d, &c, err, sizeof err), 0);
    assert_int_equal(tr_data_rows(d), 0);
    tr_data_close(d);
  }
  /* a byte file is endless too; .npy arrays have their N */
  char dir[] = "/tmp/troupe-split-XXXXXX", bytes[64], xp[64], yp[64];
  assert_non_null(mkdtemp(dir));
  snprintf(bytes, sizeof bytes, "%s/text", dir);
  snprintf(xp, sizeof xp, "%s/x.npy", dir);
  snprintf(yp, sizeof yp, "%s/y.npy", dir);
  FILE *f = fopen(bytes, "w");
  assert_non_null(f);
  fputs("some bytes to sample from, more than ctx + 1 of them\n", f);
  fclose(f);
  tr_data *d;
  tr_data_config c = {.kind = TR_DATA_FILE, .seed = 1, .ctx = 8, .path = bytes};
  assert_int_equal(tr_data_open(&d, &c, err, sizeof err), 0);
  assert_int_equal(tr_data_rows(d), 0);
  tr_data_close(d);
  float xs[37 * 2] = {0};
  int32_t ys[37] = {0};
  const int64_t xshape[2] = {37, 2}, yshape[1] = {37};
  assert_int_equal(tr_data_write_npy(xp, TR_DTYPE_F32, 2, xshape, xs, err, sizeof err), 0);
  assert_int_equal(tr_data_write_npy(yp, TR_DTYPE_I32, 1, yshape, ys, err, sizeof err), 0);
  c = (tr_data_config){.kind = TR_DATA_NPY, .seed = 1, .path = xp, .labels = yp, .classes = 2};
  assert_int_equal(tr_data_open(&d, &c, err, sizeof err), 0);
  assert_int_equal(tr_data_rows(d), 37);
  /* a split's parts: their own rows, named after the source */
  tr_data *train, *held;
  split_ok(d, 0.2, 3, &train, &held);
  assert_int_equal(tr_data_rows(train), 30); /* round(0.2 x 37) = 7 held out */
  assert_int_equal(tr_data_rows(held), 7);
  char want[128];
  snprintf(want, sizeof want, "%s[train 81.1%%]", xp);
  assert_string_equal(tr_data_name(train), want);
  snprintf(want, sizeof want, "%s[held out 18.9%%]", xp);
  assert_string_equal(tr_data_name(held), want);
  assert_int_equal(tr_data_x_bytes(held), 8);
  assert_int_equal(tr_data_y_bytes(held), 4);
  /* files are read by the loader: a part is never generated on a device */
  assert_int_equal(tr_data_can_generate(train), 0);
  assert_int_equal(tr_data_can_generate(held), 0);
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
  unlink(bytes), unlink(xp), unlink(yp), rmdir(dir);
  /* a callback's rows are what it says, 0 endless; fewer than none refused */
  rows_source s = {.rows = 12, .fail_at = -1};
  d = open_rows(&s);
  assert_int_equal(tr_data_rows(d), 12);
  tr_data_close(d);
  s.rows = 0;
  d = open_rows(&s);
  assert_int_equal(tr_data_rows(d), 0);
  tr_data_close(d);
  tr_data_callback cb = {.name = "neg", .x_bytes = 8, .fill = fill_rows, .arg = &s, .rows = -1};
  d = (tr_data *)1;
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), TR_EINVAL);
  assert_null(d);
  assert_string_equal(err, "data 'neg': rows -1 < 0 (0: an endless source)");
}

/* ---- parts ----------------------------------------------------------------------------------- */

static void parts_are_disjoint_and_hold_every_row_in_the_sizes_asked_for(void **state) {
  (void)state;
  const int64_t sizes[] = {2, 3, 7, 10, 100, 1797};
  const double fracs[] = {0.2, 0.5, 0.01, 0.9, 0.75};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t fi = 0; fi < sizeof fracs / sizeof *fracs; fi++) {
      const int64_t N = sizes[si], h = llround(fracs[fi] * (double)N);
      if (h == 0 || h == N) continue; /* refused: below */
      rows_source s = {.rows = N, .fail_at = -1};
      tr_data *d = open_rows(&s), *train, *held;
      split_ok(d, fracs[fi], 7, &train, &held);
      assert_int_equal(tr_data_rows(held), h);
      assert_int_equal(tr_data_rows(train), N - h);
      int64_t *rt = rows_of(train, 0, (size_t)(N - h)), *rh = rows_of(held, 0, (size_t)h);
      char *seen = calloc((size_t)N, 1);
      for (int64_t k = 0; k < N - h; k++) {
        assert_true(rt[k] >= 0 && rt[k] < N && !seen[rt[k]]);
        seen[rt[k]] = 1;
      }
      for (int64_t k = 0; k < h; k++) {
        assert_true(rh[k] >= 0 && rh[k] < N && !seen[rh[k]]); /* in neither part twice */
        seen[rh[k]] = 1;
      }
      for (int64_t r = 0; r < N; r++) assert_true(seen[r]); /* every row in one of them */
      if (h >= 10 && N - h >= 10) { /* a random choice of rows, not the first or the last */
        int low = 0, high = 0;
        for (int64_t k = 0; k < h; k++) low += rh[k] < h, high += rh[k] >= N - h;
        assert_true(low < h);
        assert_true(high < h);
      }
      free(seen), free(rt), free(rh);
      tr_data_close(train), tr_data_close(held), tr_data_close(d);
    }
}

static void the_seed_draws_the_split(void **state) {
  (void)state;
  rows_source s = {.rows = 200, .fail_at = -1};
  tr_data *d = open_rows(&s), *t1, *h1, *t2, *h2, *t3, *h3;
  split_ok(d, 0.25, 1, &t1, &h1);
  split_ok(d, 0.25, 1, &t2, &h2);
  split_ok(d, 0.25, 2, &t3, &h3);
  int64_t *a = rows_of(h1, 0, 50), *b = rows_of(h2, 0, 50), *c = rows_of(h3, 0, 50);
  assert_memory_equal(a, b, 50 * sizeof *a);
  assert_memory_not_equal(a, c, 50 * sizeof *a);
  free(a), free(b), free(c);
  a = rows_of(t1, 0, 450), b = rows_of(t2, 0, 450);
  assert_memory_equal(a, b, 450 * sizeof *a);
  free(a), free(b);
  tr_data_close(t1), tr_data_close(h1), tr_data_close(t2), tr_data_close(h2);
  tr_data_close(t3), tr_data_close(h3), tr_data_close(d);
}

static void training_part_visits_each_of_its_rows_once_an_epoch(void **state) {
  (void)state;
  enum { N = 101, E = 4 };
  rows_source s = {.rows = N, .fail_at = -1};
  tr_data *d = open_rows(&s), *train, *held;
  split_ok(d, 0.3, 11, &train, &held);
  const int64_t n = tr_data_rows(train);
  assert_int_equal(n, 71);
  int64_t *r = rows_of(train, 0, (size_t)(n * E));
  for (int e = 0; e < E; e++) {
    int64_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    memcpy(a, r, (size_t)n * sizeof *a);
    memcpy(b, r + e * n, (size_t)n * sizeof *b);
    /* the same rows as epoch 0, each once: a[k] in b, no row twice */
    for (int64_t k = 0; k < n; k++) {
      int hits = 0;
      for (int64_t q = 0; q < n; q++) hits += b[q] == a[k];
      assert_int_equal(hits, 1);
    }
    if (e) assert_memory_not_equal(r, r + e * n, (size_t)n * sizeof *r); /* an order of its own */
    free(a), free(b);
  }
  /* a range across an epoch's end, one sample at a time: the same samples */
  for (int64_t i = n - 5; i < n + 5; i++) {
    int64_t *one = rows_of(train, (uint64_t)i, 1);
    assert_int_equal(one[0], r[i]);
    free(one);
  }
  free(r);
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
}

static void held_out_part_gives_its_rows_in_order(void **state) {
  (void)state;
  rows_source s = {.rows = 50, .fail_at = -1};
  tr_data *d = open_rows(&s), *train, *held;
  split_ok(d, 0.2, 5, &train, &held);
  enum { H = 10 };
  assert_int_equal(tr_data_rows(held), H);
  int64_t *r = rows_of(held, 0, 3 * H + 4);
  for (int i = H; i < 3 * H + 4; i++) assert_int_equal(r[i], r[i % H]); /* past n: i mod n */
  for (int i = 0; i < H; i++) { /* sample i is row i, wherever a range starts */
    int64_t *one = rows_of(held, (uint64_t)i, 1);
    assert_int_equal(one[0], r[i]);
    free(one);
  }
  free(r);
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
}

static void a_part_of_a_part_is_a_split_too(void **state) {
  (void)state;
  rows_source s = {.rows = 40, .fail_at = -1};
  tr_data *d = open_rows(&s), *train, *held, *t2, *h2;
  split_ok(d, 0.25, 5, &train, &held);
  split_ok(train, 0.5, 6, &t2, &h2);
  assert_int_equal(tr_data_rows(t2), 15);
  assert_int_equal(tr_data_rows(h2), 15);
  int64_t *a = rows_of(t2, 0, 15), *b = rows_of(h2, 0, 15), *h = rows_of(held, 0, 10);
  char seen[40] = {0};
  for (int k = 0; k < 15; k++) seen[a[k]]++, seen[b[k]]++;
  for (int k = 0; k < 10; k++) seen[h[k]]++;
  for (int r = 0; r < 40; r++) assert_int_equal(seen[r], 1);
  free(a), free(b), free(h);
  tr_data_close(t2), tr_data_close(h2);
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void refused(const tr_data *d, double f, const char *want) {
  char err[256] = "";
  tr_data *train = (tr_data *)1, *held = (tr_data *)1;
  assert_int_equal(tr_data_split(d, f, 1, &train, &held, err, sizeof err), TR_EINVAL);
  assert_null(train);
  assert_null(held);
  assert_string_equal(err, want);
}

static void what_cannot_be_split_is_refused_naming_the_rule(void **state) {
  (void)state;
  char err[256];
  tr_data_config c = {.kind = TR_DATA_TEACHER, .seed = 1, .in = 4, .out = 3};
  tr_data *teacher;
  assert_int_equal(tr_data_open(&teacher, &c, err, sizeof err), 0);
  refused(teacher, 0.2,
          "data 'teacher': an endless source cannot be split (it has no rows: .npy files "
          "have, and a callback with its rows)");
  tr_data_close(teacher);
  rows_source s = {.rows = 3, .fail_at = -1};
  tr_data *d = open_rows(&s);
  const double bad[] = {0, 1, -0.5, 1.5, NAN};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    char want[160];
    snprintf(want, sizeof want,
             "data 'rows': held_out %g is not in (0, 1), the fraction of its rows held out",
             bad[k]);
    refused(d, bad[k], want);
  }
  refused(d, 0.1,
          "data 'rows': held_out 0.1 of 3 rows leaves the held-out part no rows (each part "
          "needs one at least)");
  refused(d, 0.9,
          "data 'rows': held_out 0.9 of 3 rows leaves training no rows (each part needs one "
          "at least)");
  tr_data_close(d);
}

static void a_failing_source_fails_its_parts_naming_the_row(void **state) {
  (void)state;
  rows_source s = {.rows = 20, .fail_at = -1};
  tr_data *d = open_rows(&s), *train, *held;
  split_ok(d, 0.5, 1, &train, &held);
  int64_t *r = rows_of(held, 0, 10);
  s.fail_at = r[3];
  float x[20];
  int32_t y[10];
  assert_int_equal(tr_data_fill(held, 0, 10, x, y), TR_EIO);
  char want[160];
  snprintf(want, sizeof want, "data 'rows[held out 50%%]': row %lld of 'rows': %s",
           (long long)r[3], tr_strerror(TR_EIO));
  assert_string_equal(tr_data_error(held), want);
  assert_string_equal(tr_data_error(train), "");
  free(r);
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
}

/* ---- threads --------------------------------------------------------------------------------- */

typedef struct filler {
  const tr_data *d;
  uint64_t first;
  size_t n;
  int rounds, rc;
  float *x;
  int32_t *y;
} filler;

static void *fill_often(void *arg) {
  filler *f = arg;
  for (int k = 0; k < f->rounds && !f->rc; k++)
    f->rc = tr_data_fill(f->d, f->first, f->n, f->x, f->y);
  return NULL;
}

static void parts_filled_from_two_threads_give_the_same_bytes(void **state) {
  (void)state;
  enum { N = 1000, n = 3000 };
  rows_source s = {.rows = N, .fail_at = -1};
  tr_data *d = open_rows(&s), *train, *held;
  split_ok(d, 0.1, 9, &train, &held);
  const tr_data *parts[2] = {train, held};
  for (int p = 0; p < 2; p++) {
    float *x0 = malloc(n * 8);
    int32_t *y0 = malloc(n * 4);
    assert_int_equal(tr_data_fill(parts[p], 0, n, x0, y0), 0);
    filler f[2];
    pthread_t t[2];
    for (int k = 0; k < 2; k++) {
      /* overlapping halves: [0, 2n/3) and [n/3, n) */
      f[k] = (filler){.d = parts[p], .first = k ? n / 3 : 0, .n = 2 * n / 3, .rounds = 20,
                      .x = malloc(n * 8), .y = malloc(n * 4)};
      assert_int_equal(pthread_create(&t[k], NULL, fill_often, &f[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
      pthread_join(t[k], NULL);
      assert_int_equal(f[k].rc, 0);
      assert_memory_equal(f[k].x, x0 + 2 * f[k].first, f[k].n * 8);
      assert_memory_equal(f[k].y, y0 + f[k].first, f[k].n * 4);
      free(f[k].x), free(f[k].y);
    }
    free(x0), free(y0);
  }
  tr_data_close(train), tr_data_close(held), tr_data_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_kind_of_source_says_its_rows),
      cmocka_unit_test(parts_are_disjoint_and_hold_every_row_in_the_sizes_asked_for),
      cmocka_unit_test(the_seed_draws_the_split),
      cmocka_unit_test(training_part_visits_each_of_its_rows_once_an_epoch),
      cmocka_unit_test(held_out_part_gives_its_rows_in_order),
      cmocka_unit_test(a_part_of_a_part_is_a_split_too),
      cmocka_unit_test(what_cannot_be_split_is_refused_naming_the_rule),
      cmocka_unit_test(a_failing_source_fails_its_parts_naming_the_row),
      cmocka_unit_test(parts_filled_from_two_threads_give_the_same_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
