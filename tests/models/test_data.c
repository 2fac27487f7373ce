/* test_data.c — the data sets of docs/WORKLOADS.md: samples are a function of (seed, index),
 * shards are disjoint and make up the batch, the generators draw what they claim, the
 * arithmetic corpus is correct arithmetic, files are sampled as whole sequences with
 * next-byte targets, and a bad file is a clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_data.h"
#include "tr_model.h"

static tr_data *open_ok(tr_data_config c) {
  tr_data *d;
  char err[256];
  int rc = tr_data_open(&d, &c, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return d;
}

static void samples_are_a_function_of_seed_and_index(void **state) {
  (void)state;
  const tr_data_kind kinds[3] = {TR_DATA_TEACHER, TR_DATA_GAUSSIAN, TR_DATA_ARITHMETIC};
  for (int k = 0; k < 3; k++) {
    tr_data_config c = {.kind = kinds[k], .seed = 5, .in = 10, .out = 3, .ctx = 16};
    tr_data *a = open_ok(c), *b = open_ok(c);
    c.seed = 6;
    tr_data *other = open_ok(c);
    const size_t xb = tr_data_x_bytes(a), yb = tr_data_y_bytes(a);
    char *x1 = malloc(10 * xb), *y1 = malloc(10 * yb), *x2 = malloc(10 * xb), *y2 = malloc(10 * yb);
    tr_data_fill(a, 100, 10, x1, y1);
    tr_data_fill(b, 105, 10, x2, y2); /* another instance, an overlapping range */
    assert_memory_equal(x1 + 5 * xb, x2, 5 * xb);
    assert_memory_equal(y1 + 5 * yb, y2, 5 * yb);
    assert_memory_not_equal(x1, x1 + xb, xb); /* neighbours differ */
    tr_data_fill(other, 100, 10, x2, y2);
    assert_memory_not_equal(x1, x2, 10 * xb);
    tr_data_fill(a, 100, 10, x2, NULL); /* no targets wanted: the same inputs */
    assert_memory_equal(x1, x2, 10 * xb);
    for (int i = 0; i < 10; i++) /* one at a time (the teacher runs samples in groups) */
      tr_data_fill(a, 100 + (uint64_t)i, 1, x2 + i * xb, y2 + i * yb);
    assert_memory_equal(x1, x2, 10 * xb);
    assert_memory_equal(y1, y2, 10 * yb);
    free(x1), free(y1), free(x2), free(y2);
    tr_data_close(a), tr_data_close(b), tr_data_close(other);
  }
}

static void shards_are_disjoint_and_make_up_the_batch(void **state) {
  (void)state;
  for (size_t G = 1; G <= 13; G++)
    for (int W = 1; W <= 5; W++)
      for (uint64_t step = 0; step < 3; step++) {
        uint64_t next = step * G;
        size_t lo = G, hi = 0;
        for (int w = 0; w < W; w++) {
          uint64_t first;
          size_t n;
          tr_data_shard(step, G, w, W, &first, &n);
          assert_int_equal(first, next); /* contiguous, in worker order, no overlap */
          next += n;
          lo = n < lo ? n : lo, hi = n > hi ? n : hi;
        }
        assert_int_equal(next, (step + 1) * G);
        assert_true(hi - lo <= 1);
      }
  /* two workers' halves are the single worker's batch */
  tr_data *d = open_ok((tr_data_config){.kind = TR_DATA_GAUSSIAN, .seed = 1, .in = 4, .out = 2});
  float whole[8 * 4], parts[8 * 4];
  uint64_t f;
  size_t n;
  tr_data_shard(3, 8, 0, 1, &f, &n);
  tr_data_fill(d, f, n, whole, NULL);
  for (int w = 0; w < 2; w++) {
    tr_data_shard(3, 8, w, 2, &f, &n);
    tr_data_fill(d, f, n, parts + w * 16, NULL);
  }
  assert_memory_equal(whole, parts, sizeof whole);
  tr_data_close(d);
}

static void generators_draw_standard_normals_and_a_teacher(void **state) {
  (void)state;
  enum { S = 4000 };
  tr_data *g = open_ok((tr_data_config){.kind = TR_DATA_GAUSSIAN, .seed = 2, .in = 8, .out = 5});
  tr_data *t = open_ok((tr_data_config){.kind = TR_DATA_TEACHER, .seed = 2, .in = 10, .out = 1});
  tr_data *t2 = open_ok((tr_data_config){.kind = TR_DATA_TEACHER, .seed = 3, .in = 10, .out = 1});
  float *x = malloc(S * 10 * 4), *y = malloc(S * 5 * 4), *y2 = malloc(S * 4);
  tr_data_fill(g, 0, S, x, y);
  double s = 0, s2 = 0;
  for (int i = 0; i < S * 5; i++) s += y[i], s2 += (double)y[i] * y[i];
  assert_true(fabs(s / (S * 5)) < 0.05 && fabs(s2 / (S * 5) - 1) < 0.05);
  tr_data_fill(t, 0, S, x, y);
  s = s2 = 0;
  for (int i = 0; i < S * 10; i++) s += x[i], s2 += (double)x[i] * x[i];
  assert_true(fabs(s / (S * 10)) < 0.05 && fabs(s2 / (S * 10) - 1) < 0.05);
  /* y: a bounded, non-constant function of x: |y| <= sum |W2| + |b2| <= 33/sqrt(32) */
  double ys = 0, ys2 = 0, ymax = 0;
  for (int i = 0; i < S; i++) ys += y[i], ys2 += (double)y[i] * y[i], ymax = fmax(ymax, fabs(y[i]));
  const double var = ys2 / S - (ys / S) * (ys / S);
  fprintf(stderr, "teacher: var(y) %.4f, max |y| %.3f\n", var, ymax);
  assert_true(var > 1e-3 && ymax <= 33 / sqrt(32.0));
  /* another seed, another teacher: the same x maps elsewhere */
  tr_data_fill(t2, 0, S, x, y2);
  assert_memory_not_equal(y, y2, S * 4);
  free(x), free(y), free(y2);
  tr_data_close(g), tr_data_close(t), tr_data_close(t2);
  /* the tails of N(0,1): P(|z| > 1, 2, 3) = 0.3173, 0.0455, 0.0027, the ziggurat's tail path too */
  enum { M = 400, W = 1000 };
  tr_data *big = open_ok((tr_data_config){.kind = TR_DATA_GAUSSIAN, .seed = 9, .in = W, .out = 1});
  float *z = malloc((size_t)M * W * 4);
  tr_data_fill(big, 0, M, z, NULL);
  double beyond[3] = {0}, zmax = 0;
  for (size_t i = 0; i < (size_t)M * W; i++) {
    const double a = fabs(z[i]);
    for (int k = 0; k < 3; k++) beyond[k] += a > k + 1;
    zmax = fmax(zmax, a);
  }
  const double want[3] = {0.31731, 0.04550, 0.00270};
  for (int k = 0; k < 3; k++) {
    const double f = beyond[k] / (M * W), sd = sqrt(want[k] * (1 - want[k]) / (M * W));
    assert_true(fabs(f - want[k]) < 5 * sd);
  }
  assert_true(zmax > 3.5 && zmax < 7);
  free(z);
  tr_data_close(big);
}

static void arithmetic_corpus_is_correct_sums(void **state) {
  (void)state;
  tr_data *d = open_ok((tr_data_config){.kind = TR_DATA_ARITHMETIC, .seed = 4, .ctx = 32,
                                        .corpus_bytes = 4096});
  size_t size;
  const uint8_t *text = tr_data_corpus(d, &size);
  assert_int_equal(size, 4096);
  size_t at = 0;
  int lines = 0;
  while (at < size) {
    const uint8_t *nl = memchr(text + at, '\n', size - at);
    if (!nl) break; /* the last line may be cut short */
    int a, b, c, used = 0;
    char line[32];
    snprintf(line, sizeof line, "%.*s", (int)(nl - text - (ptrdiff_t)at), (const char *)text + at);
    assert_int_equal(sscanf(line, "%d+%d=%d%n", &a, &b, &c, &used), 3);
    assert_int_equal(used, (int)strlen(line));
    assert_true(a >= 0 && a < 100 && b >= 0 && b < 100 && c == a + b);
    at = (size_t)(nl - text) + 1;
    lines++;
  }
  assert_true(lines > 400);
  /* a sample: ctx bytes of the corpus, targets the next byte of each */
  int32_t x[8][32], y[8][32];
  tr_data_fill(d, 0, 8, x, y);
  for (int k = 0; k < 8; k++) {
    for (int t = 0; t + 1 < 32; t++) assert_int_equal(y[k][t], x[k][t + 1]);
    int found = 0;
    for (size_t o = 0; o + 33 <= size && !found; o++) {
      found = 1;
      for (int t = 0; t < 32 && found; t++) found = text[o + t] == x[k][t] && text[o + t + 1] == y[k][t];
    }
    assert_true(found);
  }
  tr_data_close(d);
}

static void files_are_sampled_as_sequences_and_bad_files_reported(void **state) {
  (void)state;
  char path[] = "/tmp/troupe-data-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  uint8_t bytes[300];
  for (int i = 0; i < 300; i++) bytes[i] = (uint8_t)(i * 7 + 3);
  assert_int_equal(write(fd, bytes, sizeof bytes), (ssize_t)sizeof bytes);
  close(fd);
  tr_data *d = open_ok((tr_data_config){.kind = TR_DATA_FILE, .seed = 1, .ctx = 16, .path = path});
  int32_t x[20][16], y[20][16];
  tr_data_fill(d, 7, 20, x, y);
  for (int k = 0; k < 20; k++) {
    /* bytes i*7+3 are distinct mod 256 over 256 positions: find the offset from x[0] */
    int o = -1;
    for (int i = 0; i < 300 - 16; i++)
      if (bytes[i] == x[k][0] && bytes[i + 1] == x[k][1]) o = i;
    assert_true(o >= 0);
    for (int t = 0; t < 16; t++) {
      assert_int_equal(x[k][t], bytes[o + t]);
      assert_int_equal(y[k][t], bytes[o + t + 1]);
    }
  }
  tr_data_close(d);
  tr_data *bad = (tr_data *)1;
  char err[256];
  tr_data_config c = {.kind = TR_DATA_FILE, .ctx = 300, .path = path}; /* needs 301 bytes */
  assert_int_equal(tr_data_open(&bad, &c, err, sizeof err), TR_EIO);
  assert_null(bad);
  assert_non_null(strstr(err, path));
  assert_non_null(strstr(err, "301"));
  unlink(path);
  c.ctx = 16;
  assert_int_equal(tr_data_open(&bad, &c, err, sizeof err), TR_EIO);
  assert_non_null(strstr(err, "No such file"));
  c = (tr_data_config){.kind = TR_DATA_GAUSSIAN, .in = 0, .out = 3};
  assert_int_equal(tr_data_open(&bad, &c, err, sizeof err), TR_EINVAL);
}

static void each_workload_gets_its_data(void **state) {
  (void)state;
  const char *names[3] = {"simplenet", "mlp", "gpt"};
  const tr_data_kind want[3] = {TR_DATA_TEACHER, TR_DATA_GAUSSIAN, TR_DATA_ARITHMETIC};
  for (int i = 0; i < 3; i++) {
    tr_model *m;
    char err[64];
    assert_int_equal(tr_model_named(&m, names[i], err, sizeof err), 0);
    tr_data_config c;
    tr_data_config_for(&c, m, 1, NULL);
    assert_int_equal(c.kind, want[i]);
    tr_data *d = open_ok(c);
    assert_int_equal(tr_data_x_bytes(d), tr_model_input_bytes(m));
    assert_int_equal(tr_data_y_bytes(d), tr_model_target_bytes(m));
    tr_data_close(d);
    tr_data_config_for(&c, m, 1, "/some/file");
    if (i == 2) assert_int_equal(c.kind, TR_DATA_FILE);
    tr_model_free(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(samples_are_a_function_of_seed_and_index),
      cmocka_unit_test(shards_are_disjoint_and_make_up_the_batch),
      cmocka_unit_test(generators_draw_standard_normals_and_a_teacher),
      cmocka_unit_test(arithmetic_corpus_is_correct_sums),
      cmocka_unit_test(files_are_sampled_as_sequences_and_bad_files_reported),
      cmocka_unit_test(each_workload_gets_its_data),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
