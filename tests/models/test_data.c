/* test_data.c — the data sources of tr_data.h: samples are a function of (seed, index),
 * shards are disjoint and make up the batch, the generators draw what they claim, the
 * arithmetic corpus is correct arithmetic, files are sampled as whole sequences with
 * next-byte targets, .npy files round-trip and every malformed header is refused with its
 * message, each epoch of a .npy data set visits every row once, callbacks see the ranges
 * asked for and their failures come back, every model's default data has its sizes, the
 * size check names both sizes, and the fixed workloads' data has not changed by one bit. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cmocka.h>

#include "mtest.h"
#include "npy.h"
#include "tr_data.h"
#include "tr_model.h"
#include "tr_train.h"

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
  /* float kinds with 16 rows a sample too: the teacher runs rows in groups across samples */
  const tr_data_kind kinds[5] = {TR_DATA_TEACHER, TR_DATA_GAUSSIAN, TR_DATA_ARITHMETIC,
                                 TR_DATA_CLASSIFIER, TR_DATA_TEACHER};
  for (int k = 0; k < 5; k++) {
    tr_data_config c = {.kind = kinds[k], .seed = 5, .in = 10, .out = 3, .classes = 4,
                        .ctx = k == 4 ? 1 : 16};
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

/* ---- models and their data ----------------------------------------------------------------- */

#define LINEAR(i, o) {.type = &tr_layer_linear_type, .in = (i), .out = (o), .bias = 1}
#define RELU(w) {.type = &tr_layer_relu_type, .in = (w), .out = (w)}

/* A user's MNIST-sized classifier: 784 -> 512 -> 256 -> 128 -> 10, cross-entropy. */
static const tr_layer_spec mnist_layers[] = {
    LINEAR(784, 512), RELU(512), LINEAR(512, 256), RELU(256), LINEAR(256, 128), RELU(128),
    LINEAR(128, 10),
};
static const tr_model_spec mnist = {.name = "mnist", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY,
                                    .nlayers = 7, .layers = mnist_layers, .batch = 64,
                                    .optim = {.kind = TR_OPTIM_ADAMW, .lr = 1e-3f, .beta1 = 0.9f,
                                              .beta2 = 0.999f, .eps = 1e-8f}};
/* A regressor over sequences: 4 rows of 8 floats a sample, 3 targets a row. */
static const tr_layer_spec seq_layers[] = {LINEAR(8, 16), RELU(16), LINEAR(16, 3)};
static const tr_model_spec seq = {.name = "seq", .ctx = 4, .loss = TR_LOSS_MSE, .nlayers = 3,
                                  .layers = seq_layers, .batch = 8,
                                  .optim = {.kind = TR_OPTIM_SGD, .lr = 0.01f}};

static tr_model *model(const tr_model_spec *spec, const char *name) {
  tr_model *m;
  char err[256];
  int rc = spec ? tr_model_new(&m, spec, err, sizeof err) : tr_model_named(&m, name, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return m;
}

static tr_data *open_for_ok(const tr_model *m, uint64_t seed, const char *path, const char *labels) {
  tr_data *d;
  char err[256];
  int rc = tr_data_open_for(&d, m, seed, path, labels, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return d;
}

static void defaults_match_every_models_sizes(void **state) {
  (void)state;
  const struct {
    const tr_model_spec *spec;
    const char *name;
    tr_data_kind kind;
  } cases[] = {
      {NULL, "simplenet", TR_DATA_TEACHER}, {NULL, "mlp", TR_DATA_GAUSSIAN},
      {NULL, "gpt", TR_DATA_ARITHMETIC},    {&mnist, NULL, TR_DATA_CLASSIFIER},
      {&seq, NULL, TR_DATA_TEACHER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tr_model *m = model(cases[i].spec, cases[i].name);
    tr_data_config c;
    tr_data_config_for(&c, m, 1, NULL);
    assert_int_equal(c.kind, cases[i].kind);
    tr_data *d = open_for_ok(m, 1, NULL, NULL);
    char err[256] = "";
    assert_int_equal(tr_data_check(d, m, err, sizeof err), 0);
    assert_int_equal(tr_data_x_bytes(d), tr_model_input_bytes(m));
    assert_int_equal(tr_data_y_bytes(d), tr_model_target_bytes(m));
    /* and fills that many bytes: a sentinel after one sample stays */
    const size_t xb = tr_data_x_bytes(d), yb = tr_data_y_bytes(d);
    uint8_t *x = malloc(2 * xb), *y = malloc(2 * yb);
    memset(x, 0xa5, 2 * xb), memset(y, 0xa5, 2 * yb);
    assert_int_equal(tr_data_fill(d, 3, 1, x, y), 0);
    for (size_t k = xb; k < 2 * xb; k++) assert_int_equal(x[k], 0xa5);
    for (size_t k = yb; k < 2 * yb; k++) assert_int_equal(y[k], 0xa5);
    free(x), free(y);
    tr_data_close(d);
    tr_model_free(m);
  }
  /* the classifier's sizes: one int32 label a sample, not 10 floats */
  tr_model *m = model(&mnist, NULL);
  tr_data *d = open_for_ok(m, 1, NULL, NULL);
  assert_int_equal(tr_data_y_bytes(d), 4);
  assert_string_equal(tr_data_name(d), "classifier");
  tr_data_close(d);
  tr_model_free(m);
}

/* The workloads' data, hashed (FNV-1a 64 over x then y) as the code before tr_data_open_for
 * drew it: checkpoints and the equivalence tests depend on these bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_samples(const tr_data *d, uint64_t first, size_t count) {
  const size_t xb = tr_data_x_bytes(d), yb = tr_data_y_bytes(d);
  void *x = malloc(xb * count), *y = malloc(yb * count);
  assert_int_equal(tr_data_fill(d, first, count, x, y), 0);
  const uint64_t h = fnv(fnv(0xcbf29ce484222325ull, x, xb * count), y, yb * count);
  free(x), free(y);
  return h;
}

static void fixed_workloads_data_is_bitwise_unchanged(void **state) {
  (void)state;
  const struct {
    const char *name;
    uint64_t seed;
    size_t count; /* from sample 0; then 13 from sample 1000003 */
    uint64_t head, tail;
  } cases[] = {
      {"simplenet", 1, 64, 0xcf2ae3b4d040da05ull, 0x30705f7e1d9cc2daull},
      {"simplenet", 2, 64, 0x38709ff3d2f2d3dfull, 0x10bc16905515bf31ull},
      {"mlp", 1, 8, 0x122f49f83aa22dfcull, 0x2cd808d107e7270bull},
      {"mlp", 2, 8, 0xec4f75535aae1d79ull, 0x871fca9197615443ull},
      {"gpt", 1, 64, 0xddd2cc351dc63d04ull, 0x33e154b5f2588a6full},
      {"gpt", 2, 64, 0x80e58d3c584d4235ull, 0xdb1021e7b03fd56cull},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tr_model *m = model(NULL, cases[i].name);
    tr_data *d = open_for_ok(m, cases[i].seed, NULL, NULL);
    assert_int_equal(hash_samples(d, 0, cases[i].count), cases[i].head);
    assert_int_equal(hash_samples(d, 1000003, 13), cases[i].tail);
    tr_data_close(d);
    tr_model_free(m);
  }
  /* a byte file: bytes (31 i + 7) mod 251 */
  char path[] = "/tmp/troupe-data-XXXXXX";
  int fd = mkstemp(path);
  uint8_t b[5000];
  for (int i = 0; i < 5000; i++) b[i] = (uint8_t)((i * 31 + 7) % 251);
  assert_int_equal(write(fd, b, sizeof b), (ssize_t)sizeof b);
  close(fd);
  tr_data *d = open_ok((tr_data_config){.kind = TR_DATA_FILE, .seed = 3, .ctx = 64, .path = path});
  assert_int_equal(hash_samples(d, 5, 16), 0xcfd07fd4bee50c00ull);
  tr_data_close(d);
  unlink(path);
}

/* Row 0 of a sample of `ctx` rows is drawn first from the sample's stream, so it is the
 * one-row sample's x, and the teacher maps it to the same y: the teacher works row by row. */
static void teacher_maps_each_row_of_a_sample(void **state) {
  (void)state;
  tr_model *m = model(&seq, NULL);
  tr_data *d = open_for_ok(m, 4, NULL, NULL);
  tr_data *one = open_ok((tr_data_config){.kind = TR_DATA_TEACHER, .seed = 4, .in = 8, .out = 3});
  float x[10][4][8], y[10][4][3], x1[10][8], y1[10][3];
  assert_int_equal(tr_data_fill(d, 20, 10, x, y), 0);
  assert_int_equal(tr_data_fill(one, 20, 10, x1, y1), 0);
  for (int k = 0; k < 10; k++) {
    assert_memory_equal(x[k][0], x1[k], sizeof x1[k]);
    assert_memory_equal(y[k][0], y1[k], sizeof y1[k]);
    assert_memory_not_equal(y[k][0], y[k][1], sizeof y1[k]);
  }
  tr_data_close(d), tr_data_close(one);
  tr_model_free(m);
}

/* The classifier draws the teacher's x and labels each row with the teacher's argmax; every
 * class turns up. */
static void classifier_labels_are_the_teachers_argmax(void **state) {
  (void)state;
  enum { S = 2000, IN = 20, K = 10 };
  tr_data *c = open_ok((tr_data_config){.kind = TR_DATA_CLASSIFIER, .seed = 8, .in = IN, .classes = K});
  tr_data *t = open_ok((tr_data_config){.kind = TR_DATA_TEACHER, .seed = 8, .in = IN, .out = K});
  float *x = malloc(S * IN * 4), *xt = malloc(S * IN * 4), *yt = malloc(S * K * 4);
  int32_t *label = malloc(S * 4);
  assert_int_equal(tr_data_fill(c, 100, S, x, label), 0);
  assert_int_equal(tr_data_fill(t, 100, S, xt, yt), 0);
  assert_memory_equal(x, xt, S * IN * 4);
  int seen[K] = {0};
  for (int s = 0; s < S; s++) {
    int best = 0;
    for (int k = 1; k < K; k++) best = yt[s * K + k] > yt[s * K + best] ? k : best;
    assert_int_equal(label[s], best);
    seen[best]++;
  }
  for (int k = 0; k < K; k++) assert_true(seen[k] > 0);
  free(x), free(xt), free(yt), free(label);
  tr_data_close(c), tr_data_close(t);
}

static void size_check_names_both_sizes(void **state) {
  (void)state;
  tr_model *mn = model(&mnist, NULL), *sq = model(&seq, NULL), *gpt = model(NULL, "gpt");
  const struct {
    const tr_model *m;
    tr_data_config c;
    const char *want;
  } cases[] = {
      {mn, {.kind = TR_DATA_TEACHER, .in = 784, .out = 10},
       "data 'teacher': 40 bytes of targets per sample, model 'mnist' wants 4 (one int32 label)"},
      {mn, {.kind = TR_DATA_CLASSIFIER, .in = 100, .classes = 10},
       "data 'classifier': 400 bytes of inputs per sample, model 'mnist' wants 3136 (784 floats)"},
      {sq, {.kind = TR_DATA_GAUSSIAN, .in = 8, .out = 3},
       "data 'gaussian': 32 bytes of inputs per sample, model 'seq' wants 128 (4 rows of 8 floats)"},
      {sq, {.kind = TR_DATA_GAUSSIAN, .in = 8, .out = 1, .ctx = 4},
       "data 'gaussian': 16 bytes of targets per sample, model 'seq' wants 48 (4 rows of 3 floats)"},
      {gpt, {.kind = TR_DATA_ARITHMETIC, .ctx = 64},
       "data 'arithmetic': 256 bytes of inputs per sample, model 'gpt' wants 512 (128 int32 tokens)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tr_data *d = open_ok(cases[i].c);
    char err[256] = "";
    assert_int_equal(tr_data_check(d, cases[i].m, err, sizeof err), TR_EINVAL);
    assert_string_equal(err, cases[i].want);
    tr_data_close(d);
  }
  tr_model_free(mn), tr_model_free(sq), tr_model_free(gpt);
}

/* ---- callbacks ------------------------------------------------------------------------------ */

typedef struct calls {
  int n, rc;
  uint64_t first[16];
  size_t count[16];
  int had_y[16];
} calls;

/* x: (i, -i) as floats; y: i mod 10 */
static int record(void *arg, uint64_t first, size_t count, void *x, void *y) {
  calls *c = arg;
  if (c->n < 16) c->first[c->n] = first, c->count[c->n] = count, c->had_y[c->n] = y != NULL;
  c->n++;
  for (size_t k = 0; k < count; k++) {
    ((float *)x)[2 * k] = (float)(first + k);
    ((float *)x)[2 * k + 1] = -(float)(first + k);
    if (y) ((int32_t *)y)[k] = (int32_t)((first + k) % 10);
  }
  return c->rc;
}

static void callbacks_get_the_ranges_asked_for_and_their_failures_come_back(void **state) {
  (void)state;
  calls c = {0};
  char name[16] = "mine", err[256];
  tr_data_callback cb = {.name = name, .x_bytes = 8, .y_bytes = 4, .fill = record, .arg = &c};
  tr_data *d;
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), 0);
  strcpy(name, "changed"); /* the name was copied */
  assert_string_equal(tr_data_name(d), "mine");
  assert_int_equal(tr_data_x_bytes(d), 8);
  assert_int_equal(tr_data_y_bytes(d), 4);
  /* step 3 of batch 10 over three workers: [30,33), [33,36), [36,40) */
  float x[10][2];
  int32_t y[10];
  for (int w = 0; w < 3; w++) {
    uint64_t f;
    size_t n;
    tr_data_shard(3, 10, w, 3, &f, &n);
    assert_int_equal(tr_data_fill(d, f, n, x[f - 30], y + (f - 30)), 0);
  }
  assert_int_equal(c.n, 3);
  const uint64_t want_first[3] = {30, 33, 36};
  const size_t want_count[3] = {3, 3, 4};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(c.first[k], want_first[k]);
    assert_int_equal(c.count[k], want_count[k]);
    assert_true(c.had_y[k]);
  }
  for (int k = 0; k < 10; k++) {
    assert_true(x[k][0] == (float)(30 + k) && x[k][1] == -(float)(30 + k));
    assert_int_equal(y[k], (30 + k) % 10);
  }
  assert_int_equal(tr_data_fill(d, 7, 2, x, NULL), 0); /* inputs only: y NULL reaches it */
  assert_int_equal(c.n, 4);
  assert_false(c.had_y[3]);
  assert_int_equal(tr_data_fill(d, 7, 0, x, y), 0); /* nothing asked, nothing called */
  assert_int_equal(c.n, 4);
  /* its failures come back, as they are; a positive status counts as TR_EIO */
  c.rc = TR_EINVAL;
  assert_int_equal(tr_data_fill(d, 0, 1, x, y), TR_EINVAL);
  c.rc = TR_EIO;
  assert_int_equal(tr_data_fill(d, 0, 1, x, y), TR_EIO);
  c.rc = 3;
  assert_int_equal(tr_data_fill(d, 0, 1, x, y), TR_EIO);
  /* checked against a model like any source: 2 floats in, one label out */
  static const tr_layer_spec tiny_layers[] = {LINEAR(2, 10)};
  const tr_model_spec tiny = {.name = "tiny", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY, .nlayers = 1,
                              .layers = tiny_layers, .batch = 4, .optim = {.kind = TR_OPTIM_SGD, .lr = 0.1f}};
  tr_model *m = model(&tiny, NULL), *mn = model(&mnist, NULL);
  assert_int_equal(tr_data_check(d, m, err, sizeof err), 0);
  assert_int_equal(tr_data_check(d, mn, err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "data 'mine': 8 bytes of inputs per sample, model 'mnist' wants 3136 (784 floats)");
  tr_model_free(m), tr_model_free(mn);
  tr_data_close(d);
  /* a callback with nothing to call, or no bytes, is refused */
  tr_data *bad = (tr_data *)1;
  cb = (tr_data_callback){.x_bytes = 8, .y_bytes = 4};
  assert_int_equal(tr_data_open_callback(&bad, &cb, err, sizeof err), TR_EINVAL);
  assert_null(bad);
  assert_string_equal(err, "data 'callback': no fill function");
  cb = (tr_data_callback){.name = "z", .fill = record, .arg = &c};
  assert_int_equal(tr_data_open_callback(&bad, &cb, err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "data 'z': x_bytes is 0");
}

/* ---- .npy files ------------------------------------------------------------------------------ */

static char dir[] = "/tmp/troupe-npy-XXXXXX";

static int make_dir(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  DIR *dh = opendir(dir);
  struct dirent *e;
  char p[512];
  while (dh && (e = readdir(dh)))
    if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", dir, e->d_name), unlink(p);
  if (dh) closedir(dh);
  return rmdir(dir);
}

/* dir/name, the same pointer for the same name until the end */
static const char *at(const char *name) {
  static char paths[64][512];
  for (int k = 0; k < 64; k++) {
    if (!paths[k][0]) snprintf(paths[k], sizeof paths[k], "%s/%s", dir, name);
    if (!strcmp(strrchr(paths[k], '/') + 1, name)) return paths[k];
  }
  abort();
}

/* A .npy file's bytes into buf: version major.0, the dict text, spaces up to a multiple of
 * `align` plus `extra`, '\n', then n bytes of data. Returns the size. */
static size_t npy_bytes(uint8_t *buf, int major, const char *dict, size_t align, size_t extra,
                        const void *data, size_t n) {
  const size_t lead = major == 1 ? 10 : 12;
  size_t hlen = strlen(dict) + 1;
  hlen += (align - (lead + hlen) % align) % align + extra;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (uint8_t)major, buf[7] = 0;
  for (size_t i = 0; i < lead - 8; i++) buf[8 + i] = (uint8_t)(hlen >> (8 * i));
  memset(buf + lead, ' ', hlen);
  memcpy(buf + lead, dict, strlen(dict));
  buf[lead + hlen - 1] = '\n';
  if (n) memcpy(buf + lead + hlen, data, n);
  return lead + hlen + n;
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

/* What NumPy's np.save writes (version `major`, header padded to 64). */
static const char *write_npy(const char *name, int major, const char *descr, const char *shape,
                             const void *data, size_t n) {
  char dict[256];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  uint8_t *buf = malloc(512 + n);
  const size_t size = npy_bytes(buf, major, dict, 64, 0, data, n);
  const char *path = at(name);
  write_file(path, buf, size);
  free(buf);
  return path;
}

static tr_data *open_npy(const char *x, const char *y, int classes, uint64_t seed) {
  return open_ok((tr_data_config){.kind = TR_DATA_NPY, .seed = seed, .path = x, .labels = y,
                                  .classes = classes});
}

static void npy_round_trips_every_dtype(void **state) {
  (void)state;
  enum { N = 5, R = 6 }; /* features (5, 2, 3), labels (5,) or (5, 2) */
  const char *descr[3] = {"<f4", "<i4", "|u1"};
  float fx[N * R];
  int32_t ix[N * R];
  uint8_t ux[N * R];
  for (int e = 0; e < N * R; e++) {
    fx[e] = (float)e - 0.5f;
    ix[e] = e - 10;
    ux[e] = (uint8_t)(255 - 8 * e); /* 255 down to 23 */
  }
  ux[N * R - 1] = 0;
  const void *xs[3] = {fx, ix, ux};
  for (int t = 0; t < 3; t++) {
    const size_t item = t == 2 ? 1 : 4;
    /* features of this dtype, in version 1.0, 2.0 or 3.0 */
    const char *xp = write_npy("x.npy", 1 + t, descr[t], "(5, 2, 3)", xs[t], N * R * item);
    for (int lt = 0; lt < 3; lt++) {
      for (int ce = 0; ce < 2; ce++) {
        if (ce && lt == 0) continue; /* class labels are integers */
        const int L = ce ? 1 : 2;
        const size_t litem = lt == 2 ? 1 : 4;
        uint8_t lbuf[N * 2 * 4];
        for (int e = 0; e < N * L; e++) {
          const int v = ce ? e % 3 : 7 * e + 1;
          if (lt == 0) ((float *)lbuf)[e] = (float)v + 0.25f;
          else if (lt == 1) ((int32_t *)lbuf)[e] = v;
          else lbuf[e] = (uint8_t)v;
        }
        const char *yp = write_npy("y.npy", 1, descr[lt], ce ? "(5,)" : "(5, 2)", lbuf, N * L * litem);
        tr_data *d = open_npy(xp, yp, ce ? 3 : 0, 9);
        assert_string_equal(tr_data_name(d), xp);
        assert_int_equal(tr_data_x_bytes(d), R * 4);
        assert_int_equal(tr_data_y_bytes(d), L * 4);
        float x[N][R], yf[N * 2];
        int32_t yi[N * 2];
        assert_int_equal(tr_data_fill(d, 0, N, x, ce ? (void *)yi : (void *)yf), 0);
        int seen = 0;
        for (int k = 0; k < N; k++) {
          int r = -1; /* the row, found by its first feature */
          for (int q = 0; q < N; q++)
            if ((t == 0 ? fx[q * R] : t == 1 ? (float)ix[q * R] : (float)ux[q * R]) == x[k][0]) r = q;
          assert_true(r >= 0);
          seen |= 1 << r;
          for (int e = 0; e < R; e++) {
            const float want = t == 0 ? fx[r * R + e] : t == 1 ? (float)ix[r * R + e] : (float)ux[r * R + e];
            assert_true(x[k][e] == want);
          }
          for (int e = 0; e < L; e++) {
            const int v = ce ? (r * L + e) % 3 : 7 * (r * L + e) + 1;
            if (ce) assert_int_equal(yi[k * L + e], v);
            else assert_true(yf[k * L + e] == (float)v + (lt == 0 ? 0.25f : 0.0f));
          }
        }
        assert_int_equal(seen, (1 << N) - 1);
        tr_data_close(d);
      }
    }
  }
}

static void npy_epochs_visit_every_row_once_in_orders_of_their_own(void **state) {
  (void)state;
  const int sizes[] = {1, 2, 3, 7, 64, 100, 1000};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    const int N = sizes[si], E = 3;
    float *rows = malloc((size_t)N * 4);
    for (int r = 0; r < N; r++) rows[r] = (float)r;
    char shape[32];
    snprintf(shape, sizeof shape, "(%d,)", N);
    const char *xp = write_npy("rows.npy", 1, "<f4", shape, rows, (size_t)N * 4);
    const char *yp = write_npy("targets.npy", 1, "<f4", shape, rows, (size_t)N * 4);
    tr_data *d = open_npy(xp, yp, 0, 1), *again = open_npy(xp, yp, 0, 1), *other = open_npy(xp, yp, 0, 2);
    float *x = malloc((size_t)N * E * 4), *y = malloc((size_t)N * E * 4), *o = malloc((size_t)N * 4);
    assert_int_equal(tr_data_fill(d, 0, (size_t)N * E, x, y), 0);
    assert_memory_equal(x, y, (size_t)N * E * 4); /* features and labels of one row */
    for (int e = 0; e < E; e++) {
      char *seen = calloc((size_t)N, 1);
      for (int k = 0; k < N; k++) {
        const int r = (int)x[e * N + k];
        assert_true(r >= 0 && r < N && !seen[r]);
        seen[r] = 1;
      }
      free(seen);
    }
    /* another instance, a range across an epoch's end: the same samples */
    const int from = N > 3 ? N - 3 : 0, cnt = N > 3 ? 6 : N;
    assert_int_equal(tr_data_fill(again, (uint64_t)from, (size_t)cnt, o, NULL), 0);
    assert_memory_equal(o, x + from, (size_t)cnt * 4);
    if (N >= 7) { /* 1 in 5040 or less that two orders agree by chance */
      assert_memory_not_equal(x, x + N, (size_t)N * 4);         /* epochs differ */
      assert_memory_not_equal(x + N, x + 2 * N, (size_t)N * 4);
      assert_memory_not_equal(x, rows, (size_t)N * 4);          /* not the file's order */
      assert_int_equal(tr_data_fill(other, 0, (size_t)N, o, NULL), 0);
      assert_memory_not_equal(o, x, (size_t)N * 4);             /* seeds differ */
    }
    free(x), free(y), free(o), free(rows);
    tr_data_close(d), tr_data_close(again), tr_data_close(other);
  }
}

/* Each case: the features file's bytes, refused with TR_EINVAL and "<path>: <want>". */
static void refused(const uint8_t *bytes, size_t n, const char *want) {
  const float labels[3] = {0, 1, 2};
  const char *xp = at("bad.npy"), *yp = write_npy("ok.npy", 1, "<f4", "(3,)", labels, sizeof labels);
  write_file(xp, bytes, n);
  tr_data *d = (tr_data *)1;
  char err[512] = "", prefix[512];
  const tr_data_config c = {.kind = TR_DATA_NPY, .path = xp, .labels = yp};
  const int rc = tr_data_open(&d, &c, err, sizeof err);
  if (rc != TR_EINVAL || !strstr(err, want)) fprintf(stderr, "want '%s', got %d '%s'\n", want, rc, err);
  assert_int_equal(rc, TR_EINVAL);
  assert_null(d);
  snprintf(prefix, sizeof prefix, "%s: ", xp);
  assert_memory_equal(err, prefix, strlen(prefix));
  assert_non_null(strstr(err, want));
}

static void npy_malformed_headers_are_refused_with_their_message(void **state) {
  (void)state;
  static const uint8_t zeros[4096];
  uint8_t b[4096];
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  /* the dict */
  const struct {
    const char *dict;
    size_t data;
    const char *want;
  } dicts[] = {
      {"[1, 2]", 12, "the header is not a Python dict"},
      {"{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }", 24,
       "dtype '>f8' is not float32, int32 or uint8"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", 6, "dtype '<f2' is not"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12,
       "'descr' is not a simple dtype string"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", 12, "fortran_order is True"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", 12,
       "'fortran_order' is not True or False"},
      {"{'descr': '<f4', 'fortran_order': False, }", 12, "the header has no 'shape'"},
      {"{'descr': '<f4', 'shape': (3,), }", 12, "the header has no 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1, }", 12,
       "unknown key 'extra' in the header"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12,
       "key 'descr' given twice"},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (3,), }", 12, "a key of the header is not a string"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (3,), }", 12, "no ':' after key 'descr'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (3,), }", 12,
       "no ',' or '}' after the value of 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12, "'shape' (3) is not a tuple: write (3,)"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4), }", 48,
       "'shape' is not a tuple of non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 12,
       "'shape' is not a tuple of non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", 12, "'shape' is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, "shape () is one value, not rows"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 1,
       "shape has more than 8 dimensions"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 12,
       "a dimension of 'shape' overflows 64 bits"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 40,
       "40 bytes of data, but shape (3, 4) of float32 needs 48"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", 12,
       "12 bytes of data, but shape (1099511627776, 1099511627776) of float32 needs"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x", 12, "text after the header's dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 0, "shape (0, 3) has no rows"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }", 0, "shape (3, 0) has no values in its rows"},
  };
  for (size_t i = 0; i < sizeof dicts / sizeof *dicts; i++)
    refused(b, npy_bytes(b, 1, dicts[i].dict, 64, 0, zeros, dicts[i].data), dicts[i].want);
  /* the bytes around it */
  refused((const uint8_t *)"hello, not numpy", 16, "not a .npy file (no \\x93NUMPY magic)");
  refused(b, 0, "not a .npy file");
  size_t n = npy_bytes(b, 1, ok, 64, 0, zeros, 12);
  b[6] = 4;
  refused(b, n, "version 4.0 is not 1.0, 2.0 or 3.0");
  b[6] = 1, b[7] = 1;
  refused(b, n, "version 1.1 is not 1.0, 2.0 or 3.0");
  b[7] = 0, b[8] = 0xf0, b[9] = 0xff;
  refused(b, n, "header of 65520 bytes runs past the end of the file (140 bytes)");
  n = npy_bytes(b, 2, ok, 64, 0, zeros, 12);
  b[11] = 0x80;
  refused(b, n, "runs past the end of the file");
  refused(b, 11, "shorter than a version 2.0 preamble");
  n = npy_bytes(b, 1, ok, 16, 8, zeros, 12);
  refused(b, n, "header ends at byte 88, not on a 16-byte boundary");
  n = npy_bytes(b, 1, ok, 64, 0, zeros, 12);
  b[127] = ' ';
  refused(b, n, "header does not end with '\\n'");
  n = npy_bytes(b, 1, ok, 64, 0, zeros, 12);
  b[100] = 0xe9;
  refused(b, n, "header byte 100 (0xe9) is not printable ASCII");
  /* and what is fine: NumPy's older 16-byte padding, keys in any order, no trailing comma */
  const float v[3] = {1, 2, 3};
  n = npy_bytes(b, 1, "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}", 16, 0, v, 12);
  write_file(at("fine.npy"), b, n);
  tr_data *d = open_npy(at("fine.npy"), at("fine.npy"), 0, 1);
  tr_data_close(d);
}

/* An open that returned `got` failed with `rc`, opened nothing and said exactly fmt, .... */
static void failed(int got, tr_data *const *d, const char *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void failed(int got, tr_data *const *d, const char *err, int rc, const char *fmt, ...) {
  char want[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  assert_int_equal(got, rc);
  assert_null(*d);
  assert_string_equal(err, want);
}

static void npy_features_and_labels_must_agree_with_each_other_and_the_model(void **state) {
  (void)state;
  char err[512];
  tr_data *d;
  const float f[12] = {0};
  const int32_t lab[6] = {0, 1, 2, 2, 1, 0}, out_of_range[6] = {0, 1, 3, 0, 0, 0}, neg[6] = {0, -1};
  const char *x6 = write_npy("x6.npy", 1, "<f4", "(6, 2)", f, 48);
  const char *y5 = write_npy("labels.npy", 1, "<i4", "(5,)", lab, 20);
  tr_data_config c = {.kind = TR_DATA_NPY, .path = x6, .labels = y5, .classes = 3};
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EINVAL,
         "%s: shape (5,) but features have 6 rows", y5);
  c.labels = write_npy("bad-labels.npy", 1, "<i4", "(6,)", out_of_range, 24);
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EINVAL,
         "%s: label 3 at row 2 is outside [0, 3), the model's classes", c.labels);
  c.labels = write_npy("neg.npy", 1, "<i4", "(6,)", neg, 24);
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EINVAL,
         "%s: label -1 at row 1 is outside [0, 3), the model's classes", c.labels);
  c.labels = write_npy("float-labels.npy", 1, "<f4", "(6,)", f, 24);
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EINVAL,
         "%s: dtype float32, but a classifier's labels are int32 or uint8 class indices", c.labels);
  c.labels = at("missing.npy");
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EIO,
         "labels '%s': cannot open: No such file or directory", c.labels);
  c.labels = NULL;
  failed(tr_data_open(&d, &c, err, sizeof err), &d, err, TR_EINVAL,
         "data '%s': .npy data is two files, features (path) and labels (labels)", x6);
  /* through tr_data_open_for: both files for a float model, one for a token model */
  static const tr_layer_spec two_layers[] = {LINEAR(2, 3)};
  const tr_model_spec two = {.name = "two", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY, .nlayers = 1,
                             .layers = two_layers, .batch = 4,
                             .optim = {.kind = TR_OPTIM_SGD, .lr = 0.1f}};
  tr_model *m = model(&two, NULL), *mn = model(&mnist, NULL), *gpt = model(NULL, "gpt");
  const char *y6 = write_npy("y6.npy", 1, "|u1", "(6,)", (const uint8_t[6]){2, 1, 0, 0, 1, 2}, 6);
  d = open_for_ok(m, 1, x6, y6);
  int32_t y[6];
  float x[6][2];
  assert_int_equal(tr_data_fill(d, 0, 6, x, y), 0);
  int sum = 0;
  for (int k = 0; k < 6; k++) sum += y[k];
  assert_int_equal(sum, 6); /* the labels, in another order */
  tr_data_close(d);
  const char *alone = "data: model 'two' reads floats: its data is two .npy files, features and labels";
  failed(tr_data_open_for(&d, m, 1, x6, NULL, err, sizeof err), &d, err, TR_EINVAL,
         "%s (features '%s' alone)", alone, x6);
  failed(tr_data_open_for(&d, m, 1, NULL, y6, err, sizeof err), &d, err, TR_EINVAL,
         "%s (labels '%s' alone)", alone, y6);
  failed(tr_data_open_for(&d, mn, 1, x6, y6, err, sizeof err), &d, err, TR_EINVAL,
         "data '%s': 8 bytes of inputs per sample, model 'mnist' wants 3136 (784 floats)", x6);
  const char *txt = at("notes.txt");
  char text[200];
  for (int k = 0; k < 200; k++) text[k] = "just some text\n"[k % 15];
  write_file(txt, text, sizeof text);
  failed(tr_data_open_for(&d, m, 1, txt, y6, err, sizeof err), &d, err, TR_EINVAL,
         "%s: not a .npy file (no \\x93NUMPY magic)", txt);
  failed(tr_data_open_for(&d, m, 1, at("none.npy"), y6, err, sizeof err), &d, err, TR_EIO,
         "features '%s': cannot open: No such file or directory", at("none.npy"));
  failed(tr_data_open_for(&d, gpt, 1, txt, y6, err, sizeof err), &d, err, TR_EINVAL,
         "data: labels '%s' given, but model 'gpt' reads tokens: its data is one byte or text file", y6);
  d = open_for_ok(gpt, 1, txt, NULL); /* gpt's file is any bytes, the text too */
  int32_t tokens[128];
  assert_int_equal(tr_data_fill(d, 0, 1, tokens, NULL), 0);
  for (int t = 0; t < 128; t++) assert_non_null(memchr(text, tokens[t], 15));
  size_t size;
  assert_null(tr_data_corpus(d, &size)); /* a file is read as it trains, never held whole */
  assert_int_equal(size, 0);
  tr_data_close(d);
  tr_model_free(m), tr_model_free(mn), tr_model_free(gpt);
}

/* The fuzzer's seed files (tests/fuzz/npy-corpus) are valid .npy files: it starts from
 * inputs that reach the end of the parser. */
/* tr_data_check_finite: the first value a model reads as a number that is not finite, named
 * by its file's row and column (a split's by its source's), or by its sample and element
 * (a callback's); integers (class labels, tokens) are never looked at. */
static int poisoned(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg;
  for (size_t k = 0; k < count; k++) {
    for (int i = 0; i < 8; i++)
      ((float *)x)[k * 8 + (size_t)i] = first + k == 5 && i == 2 ? INFINITY : 1;
    if (y) memset((int32_t *)y + k, 0, sizeof(int32_t));
  }
  return 0;
}

static void values_that_are_not_finite_are_named_where_they_are(void **state) {
  (void)state;
  enum { N = 6, W = 2 };
  float f[N][W] = {{0}}, t[N] = {0};
  f[4][1] = NAN;
  t[3] = -INFINITY;
  static const tr_layer_spec reg_layers[] = {LINEAR(2, 1)};
  const tr_model_spec reg = {.name = "reg", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 1,
                             .layers = reg_layers, .batch = 2,
                             .optim = {.kind = TR_OPTIM_SGD, .lr = 0.1f}};
  tr_model *m = model(&reg, NULL);
  const char *xp = write_npy("nan-x.npy", 1, "<f4", "(6, 2)", f, sizeof f);
  const char *yp = write_npy("inf-y.npy", 1, "<f4", "(6,)", t, sizeof t);
  const char *ok = write_npy("ok-x.npy", 1, "<f4", "(6, 2)", (float[N][W]){{0}}, sizeof f);
  tr_data *d = open_for_ok(m, 1, xp, write_npy("ok-y.npy", 1, "<f4", "(6,)", (float[N]){0}, 24));
  char err[512] = "", want[512];
  assert_int_equal(tr_data_check_finite(d, m, 0, N, NULL, NULL, err, sizeof err), TR_ENONFINITE);
  snprintf(want, sizeof want, "%s: row 4, column 1 holds NaN: ", xp);
  if (strncmp(err, want, strlen(want))) fail_msg("'%s' does not begin '%s'", err, want);
  tr_data *held, *train; /* a split names its source's row */
  assert_int_equal(tr_data_split(d, 0.5, 1, &train, &held, err, sizeof err), 0);
  int rc = tr_data_check_finite(held, m, 0, 3, NULL, NULL, err, sizeof err);
  int rc2 = tr_data_check_finite(train, m, 0, 3, NULL, NULL, err + 256, 256);
  if ((rc == 0) == (rc2 == 0)) fail_msg("row 4 is in one part: %d and %d", rc, rc2);
  const char *said = rc ? err : err + 256;
  if (!strstr(said, "row 4, column 1 holds NaN")) fail_msg("'%s'", said);
  tr_data_close(held);
  tr_data_close(train);
  tr_data_close(d);
  d = open_for_ok(m, 1, ok, yp);
  assert_int_equal(tr_data_check_finite(d, m, 0, N, NULL, NULL, err, sizeof err), TR_ENONFINITE);
  snprintf(want, sizeof want, "%s: row 3 holds -Inf: ", yp);
  if (strncmp(err, want, strlen(want))) fail_msg("'%s' does not begin '%s'", err, want);
  float x[N][W];
  float y[N];
  assert_int_equal(tr_data_fill(d, 0, N, x, y), 0); /* the buffers filled: the same check */
  assert_int_equal(tr_data_check_finite(d, m, 0, N, x, NULL, err, sizeof err), 0);
  assert_int_equal(tr_data_check_finite(d, m, 0, N, x, y, err, sizeof err), TR_ENONFINITE);
  tr_data_close(d);
  tr_model_free(m);
  /* a callback's sample and element; a classifier's int32 labels are not floats */
  static const tr_layer_spec cls_layers[] = {LINEAR(8, 3)};
  const tr_model_spec cls = {.name = "cls", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY, .nlayers = 1,
                             .layers = cls_layers, .batch = 2,
                             .optim = {.kind = TR_OPTIM_SGD, .lr = 0.1f}};
  m = model(&cls, NULL);
  const tr_data_callback cb = {.name = "mine", .x_bytes = 32, .y_bytes = 4, .fill = poisoned};
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), 0);
  assert_int_equal(tr_data_check_finite(d, m, 0, 5, NULL, NULL, err, sizeof err), 0);
  assert_int_equal(tr_data_check_finite(d, m, 3, 4, NULL, NULL, err, sizeof err), TR_ENONFINITE);
  if (strncmp(err, "data 'mine': sample 5, input 2 holds +Inf: ", 43)) fail_msg("'%s'", err);
  tr_data_close(d);
  tr_model_free(m);
}

static int not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

static void npy_fuzz_seeds_are_valid_files(void **state) {
  (void)state;
  const char *seeds = getenv("TR_NPY_CORPUS");
  if (!seeds) skip();
  struct dirent **names;
  const int n = scandir(seeds, &names, not_hidden, alphasort);
  assert_true(n >= 3);
  for (int k = 0; k < n; k++) {
    char p[1024], err[512];
    snprintf(p, sizeof p, "%s/%s", seeds, names[k]->d_name);
    free(names[k]);
    static uint8_t buf[1 << 16];
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    const size_t size = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tr__npy a;
    if (tr__npy_parse(&a, buf, size, p, err, sizeof err)) fail_msg("%s", err);
  }
  free(names);
}

/* tr_data_write_npy writes what NumPy writes, byte for byte (its seed files were written by
 * NumPy 1.24), atomically, and refuses what it cannot write. */
static void written_npy_files_are_numpys_bytes(void **state) {
  (void)state;
  const char *seeds = getenv("TR_NPY_CORPUS");
  if (!seeds) skip();
  const struct {
    const char *file;
    tr_dtype dtype;
    int ndim;
    int64_t shape[2];
  } cases[] = {{"float32-2d-v1.npy", TR_DTYPE_F32, 2, {3, 4}},
               {"uint8-empty-rows.npy", TR_DTYPE_U8, 2, {0, 3}}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char p[1024], err[512];
    snprintf(p, sizeof p, "%s/%s", seeds, cases[k].file);
    static uint8_t numpy[1 << 12], ours[1 << 12];
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    const size_t size = fread(numpy, 1, sizeof numpy, f);
    fclose(f);
    tr__npy a;
    if (tr__npy_parse(&a, numpy, size, p, err, sizeof err)) fail_msg("%s", err);
    const char *out = at("written.npy");
    if (tr_data_write_npy(out, cases[k].dtype, cases[k].ndim, cases[k].shape, numpy + a.offset,
                          err, sizeof err))
      fail_msg("%s", err);
    f = fopen(out, "rb");
    assert_non_null(f);
    const size_t n = fread(ours, 1, sizeof ours, f);
    fclose(f);
    assert_int_equal(n, size);
    assert_memory_equal(ours, numpy, size);
  }
  char err[256];
  const int64_t shape[1] = {4};
  const double d[4] = {0};
  assert_int_equal(tr_data_write_npy(at("f64.npy"), TR_DTYPE_F64, 1, shape, d, err, sizeof err),
                   TR_EINVAL);
  assert_non_null(strstr(err, "F64"));
  char missing[600];
  snprintf(missing, sizeof missing, "%s/nodir/x.npy", dir);
  assert_int_equal(tr_data_write_npy(missing, TR_DTYPE_U8, 1, shape, d, err, sizeof err), TR_EIO);
  assert_non_null(strstr(err, "nodir/x.npy"));
}

/* tr_data_write_npy onto a FIFO (or, as root, a character device of our own) refuses,
 * naming it, and leaves it: never a regular file in its place. */
static void npy_writes_refuse_a_special_file_and_leave_it(void **state) {
  (void)state;
  char err[512];
  const int64_t shape[1] = {4};
  const float x[4] = {1, 2, 3, 4};
  const char *fifo = at("fifo.npy"), *dev = at("null.npy");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(tr_data_write_npy(fifo, TR_DTYPE_F32, 1, shape, x, err, sizeof err),
                   TR_EINVAL);
  if (!strstr(err, fifo) || !strstr(err, "a FIFO, not a regular file")) fail_msg("%s", err);
  struct stat sb;
  assert_int_equal(lstat(fifo, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  unlink(fifo);
  if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) != 0) {
    printf("skip a character device: mknod is not permitted here\n");
    return;
  }
  assert_int_equal(tr_data_write_npy(dev, TR_DTYPE_F32, 1, shape, x, err, sizeof err),
                   TR_EINVAL);
  if (!strstr(err, "a character device, not a regular file")) fail_msg("%s", err);
  assert_int_equal(lstat(dev, &sb), 0);
  assert_true(S_ISCHR(sb.st_mode));
  unlink(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(samples_are_a_function_of_seed_and_index),
      cmocka_unit_test(shards_are_disjoint_and_make_up_the_batch),
      cmocka_unit_test(generators_draw_standard_normals_and_a_teacher),
      cmocka_unit_test(arithmetic_corpus_is_correct_sums),
      cmocka_unit_test(files_are_sampled_as_sequences_and_bad_files_reported),
      cmocka_unit_test(defaults_match_every_models_sizes),
      cmocka_unit_test(fixed_workloads_data_is_bitwise_unchanged),
      cmocka_unit_test(teacher_maps_each_row_of_a_sample),
      cmocka_unit_test(classifier_labels_are_the_teachers_argmax),
      cmocka_unit_test(size_check_names_both_sizes),
      cmocka_unit_test(callbacks_get_the_ranges_asked_for_and_their_failures_come_back),
      cmocka_unit_test(npy_round_trips_every_dtype),
      cmocka_unit_test(npy_epochs_visit_every_row_once_in_orders_of_their_own),
      cmocka_unit_test(npy_malformed_headers_are_refused_with_their_message),
      cmocka_unit_test(npy_features_and_labels_must_agree_with_each_other_and_the_model),
      cmocka_unit_test(values_that_are_not_finite_are_named_where_they_are),
      cmocka_unit_test(npy_fuzz_seeds_are_valid_files),
      cmocka_unit_test(written_npy_files_are_numpys_bytes),
      cmocka_unit_test(npy_writes_refuse_a_special_file_and_leave_it),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
