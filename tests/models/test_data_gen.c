/* test_data_gen.c — the generated sources on a device (tr_data_gen, tr_synth_fill), on host
 * devices: the op gives tr_data_fill's bytes for every generated kind (inputs and targets,
 * inputs alone, targets alone), including samples whose draws reach the ziggurat's tail and
 * wedge, and writes nothing past its buffers; the two parts the GPU's kernel does its own way
 * give the host's values on the host: the teacher row by row (tr__synth_teacher_row), and a
 * warp reading 32 draws of a stream at once with lane 0 taking the draws outside their
 * layer; bad descriptions and sources that cannot be generated are refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "data_impl.h"
#include "mtest.h"
#include "tr_data.h"

static tr_data *open_ok(tr_data_config c) {
  tr_data *d;
  char err[256];
  int rc = tr_data_open(&d, &c, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return d;
}

/* Every generated kind, floats with one row and with several (the teacher runs rows in
 * groups of eight across samples), and the arithmetic corpus. */
static const tr_data_config sources[] = {
    {.kind = TR_DATA_GAUSSIAN, .seed = 3, .in = 7, .out = 5, .ctx = 3},
    {.kind = TR_DATA_GAUSSIAN, .seed = 1, .in = 64, .out = 64},
    {.kind = TR_DATA_TEACHER, .seed = 1, .in = 10, .out = 1},
    {.kind = TR_DATA_TEACHER, .seed = 9, .in = 20, .out = 3, .ctx = 5},
    {.kind = TR_DATA_CLASSIFIER, .seed = 4, .in = 12, .classes = 4, .ctx = 3},
    {.kind = TR_DATA_ARITHMETIC, .seed = 2, .ctx = 32, .corpus_bytes = 4096},
};
enum { NSOURCES = sizeof sources / sizeof *sources };

/* ---- where a sample's draws go: the fast path, the wedge, the tail ------------------------- */

typedef struct edges {
  int wedges, tails;
} edges;

/* The first draw of each of a sample's `n` normals that falls outside its layer, by kind;
 * tr__normal runs as the generator runs it, so the stream stays in step. */
static edges edges_of(const tr_synth *src, uint64_t index, size_t n) {
  edges e = {0, 0};
  tr__rng r = tr__rng_for(src->seed, TR__TAG_SAMPLE, index);
  for (size_t i = 0; i < n; i++) {
    int32_t hz;
    unsigned iz;
    tr__zig_split(tr__rng_peek(&r, 0), &hz, &iz);
    if (!tr__zig_inside(src->zig, hz, iz)) *(iz == 0 ? &e.tails : &e.wedges) += 1;
    (void)tr__normal(src->zig, &r);
  }
  return e;
}

static size_t values_per_sample(const tr_synth *src) {
  const size_t rows = (size_t)src->rows;
  return rows * (size_t)src->in + (src->kind == TR_SYNTH_GAUSSIAN ? rows * (size_t)src->out : 0);
}

/* The first sample from `from` whose draws reach the tail. */
static uint64_t tail_sample(const tr_synth *src, uint64_t from) {
  for (uint64_t i = from;; i++)
    if (edges_of(src, i, values_per_sample(src)).tails) return i;
}

/* ---- the op against tr_data_fill ------------------------------------------------------------- */

enum { SENTINEL = 0xa5, PAD = 64 };

static void *padded(size_t bytes) {
  uint8_t *p = malloc(bytes + PAD);
  assert_non_null(p);
  memset(p, SENTINEL, bytes + PAD);
  return p;
}

static void assert_untouched_after(const void *p, size_t bytes) {
  const uint8_t *b = p;
  for (size_t i = 0; i < PAD; i++) assert_int_equal(b[bytes + i], SENTINEL);
}

/* Fills [first, first + count) with the op on `dev` (inputs and targets, inputs alone,
 * targets alone) and compares each with tr_data_fill's bytes. */
static void check_range(tr_data *d, tr_data_gen *g, tr_device *dev, uint64_t first, size_t count) {
  const size_t xb = count * tr_data_x_bytes(d), yb = count * tr_data_y_bytes(d);
  uint8_t *want_x = malloc(xb), *want_y = malloc(yb);
  assert_int_equal(tr_data_fill(d, first, count, want_x, want_y), 0);
  tr_stream *s = tr_device_stream(dev);
  for (int part = 0; part < 3; part++) { /* both, inputs alone, targets alone */
    void *x = part == 2 ? NULL : padded(xb), *y = part == 1 ? NULL : padded(yb);
    if (tr_data_gen_fill(g, s, first, count, x, y)) fail_msg("%s", tr_device_error(dev));
    assert_int_equal(tr_stream_synchronize(s), 0);
    if (x) {
      assert_memory_equal(x, want_x, xb);
      assert_untouched_after(x, xb);
    }
    if (y) {
      assert_memory_equal(y, want_y, yb);
      assert_untouched_after(y, yb);
    }
    free(x);
    free(y);
  }
  free(want_x);
  free(want_y);
}

static void host_op_gives_tr_data_fills_bytes(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr_device *dev = tr_device_list_at(devs, 0);
  for (int i = 0; i < NSOURCES; i++) {
    tr_data *d = open_ok(sources[i]);
    assert_true(tr_data_can_generate(d));
    tr_data_gen *g;
    if (tr_data_gen_open(&g, d, dev, err, sizeof err)) fail_msg("%s", err);
    check_range(d, g, dev, 0, 1);
    check_range(d, g, dev, 1000003, 13);
    const tr_synth *src = d->ops->synth(d);
    if (src->kind != TR_SYNTH_TOKENS) check_range(d, g, dev, tail_sample(src, 0), 3);
    tr_data_gen_close(g);
    tr_data_close(d);
  }
  tr_device_list_close(devs);
}

/* ---- the GPU's ways, on the host --------------------------------------------------------------- */

/* The kernel's teacher: one row at a time in tr__synth_teacher_row, against the host's eight
 * rows at once in vector lanes. */
static void teacher_row_by_row_is_the_host_teacher(void **state) {
  (void)state;
  for (int i = 0; i < NSOURCES; i++) {
    if (sources[i].kind != TR_DATA_TEACHER && sources[i].kind != TR_DATA_CLASSIFIER) continue;
    tr_data *d = open_ok(sources[i]);
    const tr_synth *src = d->ops->synth(d);
    const size_t count = 29, rows = count * (size_t)src->rows;
    float *x = malloc(count * tr_data_x_bytes(d));
    uint8_t *y = malloc(count * tr_data_y_bytes(d)), *ours = malloc(count * tr_data_y_bytes(d));
    assert_int_equal(tr_data_fill(d, 500, count, x, y), 0);
    for (size_t r = 0; r < rows; r++) {
      const float *xr = x + r * (size_t)src->in;
      if (src->kind == TR_SYNTH_CLASSIFIER)
        tr__synth_teacher_row(src->teacher, src->in, src->out, xr, NULL, (int32_t *)ours + r);
      else
        tr__synth_teacher_row(src->teacher, src->in, src->out, xr,
                              (float *)ours + r * (size_t)src->out, NULL);
    }
    assert_memory_equal(ours, y, count * tr_data_y_bytes(d));
    free(x);
    free(y);
    free(ours);
    tr_data_close(d);
  }
}

/* The kernel's reading of a sample's stream, a warp's 32 lanes played in turn: the lanes
 * before the first draw outside its layer write their normals, lane 0 takes that draw the
 * host's way, and the warp carries on from where lane 0 left the stream. */
static void warp_sample(const tr_synth *src, uint64_t index, float *xs, float *ys) {
  const size_t xn = (size_t)src->rows * (size_t)src->in, V = values_per_sample(src);
  tr__rng r = tr__rng_for(src->seed, TR__TAG_SAMPLE, index);
  for (size_t v = 0; v < V;) {
    int32_t hz[32];
    unsigned iz[32], outside = 0;
    for (unsigned lane = 0; lane < 32; lane++) {
      tr__zig_split(tr__rng_peek(&r, lane), &hz[lane], &iz[lane]);
      outside |= (unsigned)!tr__zig_inside(src->zig, hz[lane], iz[lane]) << lane;
    }
    const size_t fast_run = outside ? (size_t)__builtin_ctz(outside) : 32;
    const size_t fast = fast_run < V - v ? fast_run : V - v;
    for (size_t lane = 0; lane < fast; lane++) {
      const float val = tr__zig_value(src->zig, hz[lane], iz[lane]);
      if (v + lane < xn) xs[v + lane] = val;
      else ys[v + lane - xn] = val;
    }
    v += fast;
    r.s += (uint64_t)fast * TR__RNG_GAMMA;
    if (v == V || fast_run == 32) continue;
    const float val = tr__normal(src->zig, &r);
    if (v < xn) xs[v] = val;
    else ys[v - xn] = val;
    v++;
  }
}

static void warp_reading_of_a_stream_gives_the_host_draws(void **state) {
  (void)state;
  const tr_data_config c = sources[1]; /* 64 + 64 normals a sample */
  tr_data *d = open_ok(c);
  const tr_synth *src = d->ops->synth(d);
  const uint64_t tail = tail_sample(src, 0), first = tail >= 20 ? tail - 20 : 0;
  const size_t count = 200, xn = (size_t)c.in, yn = (size_t)c.out;
  edges seen = {0, 0};
  for (size_t k = 0; k < count; k++) {
    const edges e = edges_of(src, first + k, values_per_sample(src));
    seen.tails += e.tails;
    seen.wedges += e.wedges;
  }
  assert_true(seen.tails > 0 && seen.wedges > 0); /* the range takes every path */
  float *x = malloc(count * xn * sizeof *x), *y = malloc(count * yn * sizeof *y);
  float *wx = malloc(count * xn * sizeof *x), *wy = malloc(count * yn * sizeof *y);
  assert_int_equal(tr_data_fill(d, first, count, x, y), 0);
  for (size_t k = 0; k < count; k++) warp_sample(src, first + k, wx + k * xn, wy + k * yn);
  assert_memory_equal(wx, x, count * xn * sizeof *x);
  assert_memory_equal(wy, y, count * yn * sizeof *y);
  free(x);
  free(y);
  free(wx);
  free(wy);
  tr_data_close(d);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

static void bad_descriptions_are_refused_by_name(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr_device *dev = tr_device_list_at(devs, 0);
  tr_stream *s = tr_device_stream(dev);
  tr_data *d = open_ok(sources[3]);
  const tr_synth good = *d->ops->synth(d);
  float x[20 * 5], y[3 * 5];
  const struct {
    tr_synth src;
    const char *says;
  } bad[] = {
      {(tr_synth){.kind = (tr_synth_kind)42}, "unknown kind"},
      {(tr_synth){.kind = TR_SYNTH_TEACHER, .in = 20, .out = 3, .rows = 5, .zig = good.zig},
       "teacher is NULL"},
      {(tr_synth){.kind = TR_SYNTH_GAUSSIAN, .in = 20, .out = 3, .rows = 5}, "zig"},
      {(tr_synth){.kind = TR_SYNTH_GAUSSIAN, .in = 0, .out = 3, .rows = 5, .zig = good.zig},
       "must be > 0"},
      {(tr_synth){.kind = TR_SYNTH_TOKENS, .corpus = (const uint8_t *)"abc", .corpus_size = 3,
                  .ctx = 3},
       "longer than ctx"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(tr_synth_fill(s, &bad[i].src, 0, 1, x, y), TR_EINVAL);
    if (!strstr(tr_device_error(dev), bad[i].says))
      fail_msg("'%s' does not say '%s'", tr_device_error(dev), bad[i].says);
    assert_non_null(strstr(tr_device_error(dev), "tr_synth_fill"));
  }
  assert_int_equal(tr_synth_fill(s, &good, 0, 1, NULL, y), TR_EINVAL); /* x is required */
  assert_int_equal(tr_synth_fill(s, &good, 0, 0, NULL, NULL), 0);      /* nothing to do */
  tr_data_close(d);
  tr_device_list_close(devs);
}

static int fill_nothing(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg, (void)first, (void)count, (void)x, (void)y;
  return 0;
}

static void files_and_callbacks_cannot_be_generated(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[256];
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr_device *dev = tr_device_list_at(devs, 0);
  char path[] = "/tmp/troupe-gen-XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "0123456789abcdef", 16), 16);
  close(fd);
  tr_data *file = open_ok((tr_data_config){.kind = TR_DATA_FILE, .ctx = 4, .path = path}), *cb;
  tr_data_callback c = {.name = "mine", .x_bytes = 4, .fill = fill_nothing};
  assert_int_equal(tr_data_open_callback(&cb, &c, err, sizeof err), 0);
  tr_data *none[] = {file, cb};
  for (int i = 0; i < 2; i++) {
    assert_false(tr_data_can_generate(none[i]));
    tr_data_gen *g = (tr_data_gen *)&g;
    assert_int_equal(tr_data_gen_open(&g, none[i], dev, err, sizeof err), TR_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err, tr_data_name(none[i])));
    assert_non_null(strstr(err, "cannot be generated on a device"));
    tr_data_close(none[i]);
  }
  unlink(path);
  tr_device_list_close(devs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(host_op_gives_tr_data_fills_bytes),
      cmocka_unit_test(teacher_row_by_row_is_the_host_teacher),
      cmocka_unit_test(warp_reading_of_a_stream_gives_the_host_draws),
      cmocka_unit_test(bad_descriptions_are_refused_by_name),
      cmocka_unit_test(files_and_callbacks_cannot_be_generated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
