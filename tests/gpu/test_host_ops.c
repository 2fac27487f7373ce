/* test_host_ops.c — every op of the host backend against a float64 reference computed
 * here: normalised error <= 1e-7 (GEMM 1e-5), no NaN, guard bytes untouched, inputs
 * unchanged, fresh random inputs, shapes with 1, odd sizes and sizes no vector width
 * divides. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend_impl.h"    /* tr__philox4x32_10, the generator the spec names */
#include "host/host_impl.h" /* tr__host_expf_nonpos */
#include "op_harness.h"

static tr_device_list *list;
static tr_device *dev;

static int setup(void **state) {
  (void)state;
  char err[256];
  if (tr_device_list_open(&list, "host:1", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  dev = tr_device_list_at(list, 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(list);
  return 0;
}

/* Sizes: 1, odd, around and not divisible by vector widths (4, 8, 16), and larger. */
static const size_t sizes[] = {1, 3, 7, 16, 17, 31, 255, 1000, 4099};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };
static const size_t shapes[][2] = {{1, 1}, {1, 7}, {3, 17}, {5, 64}, {7, 33}, {2, 768}, {33, 129}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* Every run function reads its sizes and scalars from one of these. */
typedef struct P {
  size_t n, N, C, B, T, V;
  float a, b, c, d, e;
  int flag;
  int64_t t;
  tr_op opa, opb;
  int M, K, lda, ldb, ldc, batch;
  int64_t sa, sb, sc;
} P;

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define RUN(args, fn, p, out) assert_int_equal(th_run(dev, args, NARGS(args), fn, p, out), 0)
#define CHECK(what, got, ref, n, tol) assert_true(th_check(what, got, ref, n, tol))

/* ---- fill and random initialisation -------------------------------------------------------- */

static int run_fill(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_fill(s, a[0], p->n, p->a);
}

static void fill_sets_every_element(void **state) {
  (void)state;
  for (int k = 0; k < NSIZES; k++) {
    P p = {.n = sizes[k], .a = -3.25f};
    th_arg args[] = {{"x", p.n, 4, TH_OUT, NULL, 0}};
    void *out[1];
    RUN(args, run_fill, &p, out);
    double *ref = th_alloc_d(p.n);
    for (size_t i = 0; i < p.n; i++) ref[i] = -3.25;
    CHECK("fill", out[0], ref, p.n, 0);
    free(ref);
    th_free_outputs(out, 1);
  }
}

/* Known answers of Random123's kat_vectors for philox4x32_10. */
static void philox_matches_random123_known_answers(void **state) {
  (void)state;
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    tr__philox4x32_10(kat[i], kat[i][4], kat[i][5], out);
    for (int k = 0; k < 4; k++) assert_int_equal(out[k], kat[i][6 + k]);
  }
}

/* The definitions in tr_device.h, in double. */
static double ref_uniform(uint64_t seed, uint64_t j, double lo, double hi) {
  uint32_t c[4] = {(uint32_t)(j >> 2), (uint32_t)(j >> 34), 0, 0}, w[4];
  tr__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32), w);
  return lo + (hi - lo) * ((double)(w[j & 3] >> 8) * 0x1p-24);
}

static double ref_normal(uint64_t seed, uint64_t j, double mean, double std) {
  uint32_t c[4] = {(uint32_t)(j >> 1), (uint32_t)(j >> 33), 1, 0}, w[4];
  tr__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32), w);
  const uint32_t *p = w + 2 * (j & 1);
  double u1 = (double)((p[0] >> 8) + 1) * 0x1p-24, u2 = (double)(p[1] >> 8) * 0x1p-24;
  return mean + std * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static int run_uniform(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_init_uniform(s, a[0], p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->flag);
}

static int run_normal(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_init_normal(s, a[0], p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->flag);
}

static void init_values_follow_the_philox_definition(void **state) {
  (void)state;
  th_rng r = th_rng_for(1);
  for (int k = 0; k < NSIZES; k++) {
    uint64_t seed = th_next(&r);
    P p = {.n = sizes[k], .a = -0.5f, .b = 2.0f, .t = (int64_t)seed, .flag = (int)(th_next(&r) % 11)};
    th_arg args[] = {{"x", p.n, 4, TH_OUT, NULL, 0}};
    void *out[1];
    double *ref = th_alloc_d(p.n);
    RUN(args, run_uniform, &p, out);
    for (size_t i = 0; i < p.n; i++) ref[i] = ref_uniform(seed, (uint64_t)p.flag + i, -0.5, 2.0);
    CHECK("init_uniform", out[0], ref, p.n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 1);
    p.a = 1.0f, p.b = 0.02f;
    RUN(args, run_normal, &p, out);
    for (size_t i = 0; i < p.n; i++) ref[i] = ref_normal(seed, (uint64_t)p.flag + i, 1.0, 0.02);
    CHECK("init_normal", out[0], ref, p.n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 1);
    free(ref);
  }
}

static void init_has_the_distributions_asked_for(void **state) {
  (void)state;
  enum { N = 200000 };
  P p = {.n = N, .a = -1.0f, .b = 1.0f, .t = 12345};
  th_arg args[] = {{"x", N, 4, TH_OUT, NULL, 0}};
  void *out[1];
  RUN(args, run_uniform, &p, out);
  const float *x = out[0];
  double m = 0, v = 0;
  for (int i = 0; i < N; i++) {
    assert_true(x[i] >= -1.0f && x[i] < 1.0f);
    m += x[i];
  }
  m /= N;
  for (int i = 0; i < N; i++) v += (x[i] - m) * (x[i] - m);
  v /= N;
  assert_true(fabs(m) < 0.01 && fabs(v - 1.0 / 3) < 0.01);
  th_free_outputs(out, 1);
  p.a = 0.0f, p.b = 1.0f;
  RUN(args, run_normal, &p, out);
  x = out[0];
  m = v = 0;
  double m4 = 0;
  for (int i = 0; i < N; i++) m += x[i];
  m /= N;
  for (int i = 0; i < N; i++) v += (x[i] - m) * (x[i] - m), m4 += pow(x[i] - m, 4);
  v /= N, m4 /= N;
  assert_true(fabs(m) < 0.01 && fabs(v - 1) < 0.02 && fabs(m4 / (v * v) - 3) < 0.1);
  th_free_outputs(out, 1);
}

static void init_in_shards_equals_init_whole(void **state) {
  (void)state;
  enum { N = 1001 };
  const size_t cut[] = {0, 1, 334, 777, N};
  for (int normal = 0; normal < 2; normal++) {
    P p = {.n = N, .a = 0.0f, .b = 1.0f, .t = 99};
    th_arg args[] = {{"x", N, 4, TH_OUT, NULL, 0}};
    void *whole[1], *part[1];
    RUN(args, normal ? run_normal : run_uniform, &p, whole);
    float *joined = th_alloc_f(N);
    for (int k = 0; k < 4; k++) {
      P q = p;
      q.n = cut[k + 1] - cut[k];
      q.flag = (int)cut[k];
      th_arg a1[] = {{"x", q.n, 4, TH_OUT, NULL, 0}};
      RUN(a1, normal ? run_normal : run_uniform, &q, part);
      memcpy(joined + cut[k], part[0], q.n * sizeof(float));
      th_free_outputs(part, 1);
    }
    assert_memory_equal(joined, whole[0], N * sizeof(float));
    free(joined);
    th_free_outputs(whole, 1);
  }
}

/* ---- dropout masks ---------------------------------------------------------------------------- */

/* tr_device.h's definition, in double: scale where u >= p, else 0. */
static double ref_dropout(uint64_t seed, uint64_t j, double p, double scale) {
  uint32_t c[4] = {(uint32_t)(j >> 2), (uint32_t)(j >> 34), 2, 0}, w[4];
  tr__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32), w);
  return (double)(w[j & 3] >> 8) * 0x1p-24 >= p ? scale : 0.0;
}

static int run_dropout(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_dropout_mask(s, a[0], p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->V);
}

static void dropout_mask_follows_the_philox_definition(void **state) {
  (void)state;
  th_rng r = th_rng_for(30);
  const float ps[] = {0.0f, 0.1f, 0.5f, 0.875f, 1.0f};
  for (int k = 0; k < NSIZES; k++)
    for (int q = 0; q < 5; q++) {
      const uint64_t seed = th_next(&r), offset = th_next(&r) % 1000 + (q == 4 ? (1ull << 34) : 0);
      P p = {.n = sizes[k], .a = ps[q], .b = 1.0f / (1.0f - ps[q] / 2), .t = (int64_t)seed,
             .V = offset};
      th_arg args[] = {{"mask", p.n, 4, TH_OUT, NULL, 0}};
      void *out[1];
      RUN(args, run_dropout, &p, out);
      double *ref = th_alloc_d(p.n);
      for (size_t i = 0; i < p.n; i++) ref[i] = ref_dropout(seed, offset + i, p.a, p.b);
      CHECK("dropout_mask", out[0], ref, p.n, 0); /* every element exactly */
      free(ref);
      th_free_outputs(out, 1);
    }
}

static void dropout_mask_in_shards_equals_mask_whole(void **state) {
  (void)state;
  enum { N = 1001 };
  const size_t cut[] = {0, 1, 334, 777, N};
  P p = {.n = N, .a = 0.3f, .b = 2.0f, .t = 7, .V = 5};
  th_arg args[] = {{"mask", N, 4, TH_OUT, NULL, 0}};
  void *whole[1], *part[1];
  RUN(args, run_dropout, &p, whole);
  float *joined = th_alloc_f(N);
  for (int k = 0; k < 4; k++) {
    P q = p;
    q.n = cut[k + 1] - cut[k];
    q.V = p.V + cut[k];
    th_arg a1[] = {{"mask", q.n, 4, TH_OUT, NULL, 0}};
    RUN(a1, run_dropout, &q, part);
    memcpy(joined + cut[k], part[0], q.n * sizeof(float));
    th_free_outputs(part, 1);
  }
  assert_memory_equal(joined, whole[0], N * sizeof(float));
  free(joined);
  th_free_outputs(whole, 1);
}

/* Kept with probability 1 - p: within 5 standard deviations over 200000 draws; p 0 keeps
 * everything, p 1 nothing; p outside [0,1] is refused. */
static void dropout_mask_keeps_a_fraction_one_minus_p(void **state) {
  (void)state;
  enum { N = 200000 };
  const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 1.0f};
  for (int q = 0; q < 5; q++) {
    P p = {.n = N, .a = ps[q], .b = 3.0f, .t = 4242 + q};
    th_arg args[] = {{"mask", N, 4, TH_OUT, NULL, 0}};
    void *out[1];
    RUN(args, run_dropout, &p, out);
    const float *m = out[0];
    size_t kept = 0;
    for (int i = 0; i < N; i++) {
      assert_true(m[i] == 0.0f || m[i] == 3.0f);
      kept += m[i] != 0.0f;
    }
    const double want = (1.0 - ps[q]) * N, sd = sqrt(N * (double)ps[q] * (1.0 - ps[q]));
    fprintf(stderr, "dropout p %.1f: kept %zu of %d (expected %.0f)\n", (double)ps[q], kept, N, want);
    assert_true(fabs((double)kept - want) <= 5 * sd);
    th_free_outputs(out, 1);
  }
  float x[4];
  tr_stream *s = tr_device_stream(dev);
  assert_int_equal(tr_dropout_mask(s, x, 4, 1.5f, 1.0f, 0, 0), TR_EINVAL);
  assert_int_equal(tr_dropout_mask(s, x, 4, NAN, 1.0f, 0, 0), TR_EINVAL);
  assert_int_equal(tr_dropout_mask(s, x, 4, -0.1f, 1.0f, 0, 0), TR_EINVAL);
}

/* The host's exponential, under every softmax and GELU: within 1.3 ulp over its domain. */
static void host_exp_is_within_1_3_ulp_on_its_domain(void **state) {
  (void)state;
  double worst = 0;
  float at = 0;
  uint32_t lo, hi; /* bit patterns of -87 and -0: stride through every 61st float between */
  float f87 = -87.0f, fz = -0.0f;
  memcpy(&lo, &fz, 4), memcpy(&hi, &f87, 4);
  for (uint32_t b = lo; b <= hi; b += 61) {
    float x;
    memcpy(&x, &b, 4);
    const double want = exp((double)x);
    const float wf = (float)want;
    const double ulp = (double)nextafterf(wf, INFINITY) - wf;
    const double err = fabs((double)tr__host_expf_nonpos(x) - want) / ulp;
    if (err > worst) worst = err, at = x;
  }
  if (worst > 1.3) fprintf(stderr, "exp: %.3g ulp at %.9g\n", worst, (double)at);
  assert_true(worst <= 1.3);
  assert_true(tr__host_expf_nonpos(0.0f) == 1.0f);
  assert_true(tr__host_expf_nonpos(-INFINITY) == 0.0f);
  assert_true(tr__host_expf_nonpos(-100.0f) == 0.0f);
  assert_true(isnan(tr__host_expf_nonpos(NAN)));
}

/* ---- element-wise arithmetic ----------------------------------------------------------------- */

static int run_add(tr_stream *s, void **a, void *ctx) { return tr_add(s, a[2], a[0], a[1], ((P *)ctx)->n); }
static int run_mul(tr_stream *s, void **a, void *ctx) { return tr_mul(s, a[2], a[0], a[1], ((P *)ctx)->n); }
static int run_mul_inplace(tr_stream *s, void **a, void *ctx) {
  return tr_mul(s, a[1], a[0], a[1], ((P *)ctx)->n);
}
static int run_axpy(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_axpy(s, a[1], p->a, a[0], p->n);
}
static int run_scale(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_scale(s, a[0], p->a, p->n);
}
static int run_scale_dev(tr_stream *s, void **a, void *ctx) {
  return tr_scale_dev(s, a[1], a[0], ((P *)ctx)->n);
}

static void add_mul_axpy_scale_match_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(2);
  for (int k = 0; k < NSIZES; k++) {
    P p = {.n = sizes[k], .a = (float)(th_uniform(&r) * 4 - 2)};
    size_t n = p.n;
    float *x = th_alloc_f(n), *y = th_alloc_f(n), sc[1] = {(float)th_uniform(&r)};
    double *ref = th_alloc_d(n);
    th_fill_normal(&r, x, n, 1);
    th_fill_normal(&r, y, n, 1);
    void *out[3];

    th_arg a_add[] = {{"a", n, 4, TH_IN, x, 0}, {"b", n, 4, TH_IN, y, 0}, {"out", n, 4, TH_OUT, NULL, 0}};
    RUN(a_add, run_add, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + y[i];
    CHECK("add", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);

    RUN(a_add, run_mul, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] * y[i];
    CHECK("mul", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);

    th_arg a_mul[] = {{"a", n, 4, TH_IN, x, 0}, {"b", n, 4, TH_OUT, y, 0}}; /* out = b */
    RUN(a_mul, run_mul_inplace, &p, out);
    CHECK("mul in place", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);

    th_arg a_axpy[] = {{"x", n, 4, TH_IN, x, 0}, {"y", n, 4, TH_OUT, y, 0}};
    RUN(a_axpy, run_axpy, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] + (double)p.a * x[i];
    CHECK("axpy", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);

    th_arg a_scale[] = {{"x", n, 4, TH_OUT, x, 0}};
    RUN(a_scale, run_scale, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] * p.a;
    CHECK("scale", out[0], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 1);

    th_arg a_sd[] = {{"scalar", 1, 4, TH_IN, sc, 0}, {"x", n, 4, TH_OUT, x, 0}};
    RUN(a_sd, run_scale_dev, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] * sc[0];
    CHECK("scale_dev", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    free(x), free(y), free(ref);
  }
}

/* ---- reductions -------------------------------------------------------------------------------- */

static int run_sumsq(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sumsq(s, a[1], a[0], p->n, p->flag);
}
static int run_sum(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sum(s, a[1], a[0], p->n, p->flag);
}

static void sum_and_sumsq_match_float64_and_accumulate(void **state) {
  (void)state;
  th_rng r = th_rng_for(3);
  for (int k = 0; k < NSIZES; k++)
    for (int acc = 0; acc < 2; acc++) {
      P p = {.n = sizes[k], .flag = acc};
      float *x = th_alloc_f(p.n), prev[1] = {1.5f};
      th_fill_uniform(&r, x, p.n, -1, 3);
      double s = 0, s2 = 0;
      for (size_t i = 0; i < p.n; i++) s += x[i], s2 += (double)x[i] * x[i];
      double want[1];
      void *out[2];
      th_arg args[] = {{"x", p.n, 4, TH_IN, x, 0}, {"out", 1, 4, TH_OUT, acc ? prev : NULL, 0}};
      RUN(args, run_sumsq, &p, out);
      want[0] = s2 + (acc ? 1.5 : 0);
      CHECK("sumsq", out[1], want, 1, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 2);
      RUN(args, run_sum, &p, out);
      want[0] = s + (acc ? 1.5 : 0);
      CHECK("sum", out[1], want, 1, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 2);
      free(x);
    }
}

static int run_clip(tr_stream *s, void **a, void *ctx) {
  return tr_clip_factor(s, a[1], a[0], ((P *)ctx)->a);
}

static void clip_factor_is_min_of_one_and_max_norm_over_norm(void **state) {
  (void)state;
  const float sumsq[] = {0.0f, 0.25f, 4.0f, 1e6f};
  for (int k = 0; k < 4; k++) {
    P p = {.a = 1.0f};
    float in[1] = {sumsq[k]};
    th_arg args[] = {{"sumsq", 1, 4, TH_IN, in, 0}, {"factor", 1, 4, TH_OUT, NULL, 0}};
    void *out[2];
    RUN(args, run_clip, &p, out);
    double f = 1.0 / (sqrt((double)sumsq[k]) + 1e-6);
    double want[1] = {f < 1 ? f : 1};
    CHECK("clip_factor", out[1], want, 1, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
  }
}

/* ---- bias ----------------------------------------------------------------------------------------- */

static int run_bias_add(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_bias_add(s, a[1], a[0], p->N, p->C);
}
static int run_bias_grad(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_bias_grad(s, a[1], a[0], p->N, p->C);
}

static void bias_add_and_bias_grad_match_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(4);
  for (int k = 0; k < NSHAPES; k++) {
    P p = {.N = shapes[k][0], .C = shapes[k][1]};
    size_t n = p.N * p.C;
    float *x = th_alloc_f(n), *b = th_alloc_f(p.C);
    double *ref = th_alloc_d(n);
    th_fill_normal(&r, x, n, 1);
    th_fill_normal(&r, b, p.C, 1);
    void *out[2];
    th_arg a1[] = {{"bias", p.C, 4, TH_IN, b, 0}, {"out", n, 4, TH_OUT, x, 0}};
    RUN(a1, run_bias_add, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + b[i % p.C];
    CHECK("bias_add", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    th_arg a2[] = {{"dout", n, 4, TH_IN, x, 0}, {"dbias", p.C, 4, TH_OUT, b, 0}};
    RUN(a2, run_bias_grad, &p, out);
    for (size_t c = 0; c < p.C; c++) ref[c] = b[c];
    for (size_t i = 0; i < n; i++) ref[i % p.C] += x[i];
    CHECK("bias_grad", out[1], ref, p.C, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    free(x), free(b), free(ref);
  }
}

/* Each column of the bias gradient is summed in double, row by row, in order: its bits are
 * the plain loop's whatever the kernel's tiling. This shape has more columns than one block
 * of the tiling, more rows than one pass, and columns left over from the strips. */
static void bias_grad_sums_each_column_in_order_across_its_tiles(void **state) {
  (void)state;
  P p = {.N = 37, .C = 2085};
  th_rng r = th_rng_for(5);
  float *x = th_alloc_f(p.N * p.C), *b = th_alloc_f(p.C), *want = th_alloc_f(p.C);
  th_fill_normal(&r, x, p.N * p.C, 1);
  th_fill_normal(&r, b, p.C, 1);
  for (size_t c = 0; c < p.C; c++) {
    double sum = 0;
    for (size_t i = 0; i < p.N; i++) sum += (double)x[i * p.C + c];
    want[c] = (float)((double)b[c] + sum);
  }
  void *out[2];
  th_arg a[] = {{"dout", p.N * p.C, 4, TH_IN, x, 0}, {"dbias", p.C, 4, TH_OUT, b, 0}};
  RUN(a, run_bias_grad, &p, out);
  for (size_t c = 0; c < p.C; c++)
    if (memcmp((float *)out[1] + c, want + c, sizeof(float)))
      fail_msg("column %zu of %zu: %.9g, the in-order sum %.9g", c, p.C,
               (double)((float *)out[1])[c], (double)want[c]);
  th_free_outputs(out, 2);
  free(x), free(b), free(want);
}

/* ---- activations ------------------------------------------------------------------------------------ */

static int run_relu_forward(tr_stream *s, void **a, void *ctx) { return tr_relu_forward(s, a[1], a[0], ((P *)ctx)->n); }
static int run_relu_backward(tr_stream *s, void **a, void *ctx) {
  return tr_relu_backward(s, a[2], a[0], a[1], ((P *)ctx)->n);
}
static int run_gelu_forward(tr_stream *s, void **a, void *ctx) { return tr_gelu_forward(s, a[1], a[0], ((P *)ctx)->n); }
static int run_gelu_backward(tr_stream *s, void **a, void *ctx) {
  return tr_gelu_backward(s, a[2], a[0], a[1], ((P *)ctx)->n);
}
/* in place: dinp == dout */
static int run_gelu_backward_inplace(tr_stream *s, void **a, void *ctx) {
  return tr_gelu_backward(s, a[1], a[0], a[1], ((P *)ctx)->n);
}

/* 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)): the same function, without the cancellation that
 * costs even double most of its digits where tanh u is near -1. */
static double gelu(double x) {
  const double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1 + exp(-2 * u));
}
static double gelu_grad(double x) {
  const double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x);
  const double sig = 1 / (1 + exp(-2 * u)), rest = 1 / (1 + exp(2 * u)); /* sig, 1 - sig */
  return sig + 2 * x * sig * rest * k * (1 + 3 * 0.044715 * x * x);
}

static void relu_and_gelu_match_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(5);
  for (int k = 0; k < NSIZES; k++) {
    P p = {.n = sizes[k]};
    size_t n = p.n;
    float *x = th_alloc_f(n), *g = th_alloc_f(n);
    double *ref = th_alloc_d(n);
    th_fill_uniform(&r, x, n, -6, 6);
    th_fill_normal(&r, g, n, 1);
    x[0] = 0.0f; /* relu's gradient at 0 is 0, as in PyTorch */
    void *out[3];
    th_arg f[] = {{"inp", n, 4, TH_IN, x, 0}, {"out", n, 4, TH_OUT, NULL, 0}};
    th_arg b[] = {{"inp", n, 4, TH_IN, x, 0}, {"dout", n, 4, TH_IN, g, 0}, {"dinp", n, 4, TH_OUT, NULL, 0}};
    th_arg bi[] = {{"inp", n, 4, TH_IN, x, 0}, {"dout/dinp", n, 4, TH_OUT, g, 0}};

    RUN(f, run_relu_forward, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] > 0 ? x[i] : 0;
    CHECK("relu_forward", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    RUN(b, run_relu_backward, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] > 0 ? g[i] : 0;
    CHECK("relu_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);

    RUN(f, run_gelu_forward, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = gelu(x[i]);
    CHECK("gelu_forward", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    RUN(b, run_gelu_backward, &p, out);
    for (size_t i = 0; i < n; i++) ref[i] = gelu_grad(x[i]) * g[i];
    CHECK("gelu_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    RUN(bi, run_gelu_backward_inplace, &p, out);
    CHECK("gelu_backward in place", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    free(x), free(g), free(ref);
  }
}

/* ---- layernorm ------------------------------------------------------------------------------------------ */

static int run_ln_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_layernorm_forward(s, a[3], a[4], a[5], a[0], a[1], a[2], p->N, p->C, p->a);
}
static int run_ln_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_layernorm_backward(s, a[5], a[6], a[7], a[0], a[1], a[2], a[3], a[4], p->N, p->C);
}

static void layernorm_forward_matches_float64_even_far_from_zero(void **state) {
  (void)state;
  th_rng r = th_rng_for(6);
  for (int k = 0; k < NSHAPES; k++)
    for (int far = 0; far < 2; far++) {
      P p = {.N = shapes[k][0], .C = shapes[k][1], .a = 1e-5f};
      size_t N = p.N, C = p.C, n = N * C;
      float *x = th_alloc_f(n), *w = th_alloc_f(C), *b = th_alloc_f(C);
      th_fill_normal(&r, x, n, 1);
      if (far) /* a large mean and a small spread: the case E[x^2] - mean^2 gets wrong */
        for (size_t i = 0; i < n; i++) x[i] = 300.0f + 0.01f * x[i];
      th_fill_normal(&r, w, C, 1);
      th_fill_normal(&r, b, C, 1);
      double *ro = th_alloc_d(n), *rm = th_alloc_d(N), *rs = th_alloc_d(N);
      for (size_t i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (size_t c = 0; c < C; c++) m += x[i * C + c];
        m /= (double)C;
        for (size_t c = 0; c < C; c++) v += (x[i * C + c] - m) * (x[i * C + c] - m);
        v /= (double)C;
        rm[i] = m, rs[i] = 1 / sqrt(v + 1e-5);
        for (size_t c = 0; c < C; c++) ro[i * C + c] = (x[i * C + c] - m) * rs[i] * w[c] + b[c];
      }
      th_arg args[] = {{"inp", n, 4, TH_IN, x, 0},      {"weight", C, 4, TH_IN, w, 0},
                       {"bias", C, 4, TH_IN, b, 0},     {"out", n, 4, TH_OUT, NULL, 0},
                       {"mean", N, 4, TH_OUT, NULL, 0}, {"rstd", N, 4, TH_OUT, NULL, 0}};
      void *out[6];
      RUN(args, run_ln_forward, &p, out);
      CHECK("layernorm_forward out", out[3], ro, n, TH_TOL_ELEMENTWISE);
      CHECK("layernorm_forward mean", out[4], rm, N, TH_TOL_ELEMENTWISE);
      CHECK("layernorm_forward rstd", out[5], rs, N, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 6);
      free(x), free(w), free(b), free(ro), free(rm), free(rs);
    }
}

static void layernorm_backward_matches_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(7);
  for (int k = 0; k < NSHAPES; k++) {
    P p = {.N = shapes[k][0], .C = shapes[k][1]};
    size_t N = p.N, C = p.C, n = N * C;
    float *g = th_alloc_f(n), *x = th_alloc_f(n), *w = th_alloc_f(C), *m = th_alloc_f(N),
          *rs = th_alloc_f(N), *dw = th_alloc_f(C), *db = th_alloc_f(C);
    th_fill_normal(&r, g, n, 1);
    th_fill_normal(&r, x, n, 2);
    th_fill_normal(&r, w, C, 1);
    th_fill_normal(&r, dw, C, 1);
    th_fill_normal(&r, db, C, 1);
    for (size_t i = 0; i < N; i++) { /* the forward's statistics, as it saves them */
      double mu = 0, v = 0;
      for (size_t c = 0; c < C; c++) mu += x[i * C + c];
      mu /= (double)C;
      for (size_t c = 0; c < C; c++) v += (x[i * C + c] - mu) * (x[i * C + c] - mu);
      m[i] = (float)mu, rs[i] = (float)(1 / sqrt(v / (double)C + 1e-5));
    }
    double *rdi = th_alloc_d(n), *rdw = th_alloc_d(C), *rdb = th_alloc_d(C);
    for (size_t c = 0; c < C; c++) rdw[c] = dw[c], rdb[c] = db[c];
    for (size_t i = 0; i < N; i++) {
      double mean_dn = 0, mean_dnn = 0;
      for (size_t c = 0; c < C; c++) {
        double nrm = ((double)x[i * C + c] - m[i]) * rs[i], dn = (double)w[c] * g[i * C + c];
        mean_dn += dn, mean_dnn += dn * nrm;
        rdb[c] += g[i * C + c];
        rdw[c] += nrm * g[i * C + c];
      }
      mean_dn /= (double)C, mean_dnn /= (double)C;
      for (size_t c = 0; c < C; c++) {
        double nrm = ((double)x[i * C + c] - m[i]) * rs[i], dn = (double)w[c] * g[i * C + c];
        rdi[i * C + c] = (dn - mean_dn - nrm * mean_dnn) * rs[i];
      }
    }
    th_arg args[] = {{"dout", n, 4, TH_IN, g, 0},    {"inp", n, 4, TH_IN, x, 0},
                     {"weight", C, 4, TH_IN, w, 0},  {"mean", N, 4, TH_IN, m, 0},
                     {"rstd", N, 4, TH_IN, rs, 0},   {"dinp", n, 4, TH_OUT, NULL, 0},
                     {"dweight", C, 4, TH_OUT, dw, 0}, {"dbias", C, 4, TH_OUT, db, 0}};
    void *out[8];
    RUN(args, run_ln_backward, &p, out);
    CHECK("layernorm_backward dinp", out[5], rdi, n, TH_TOL_ELEMENTWISE);
    CHECK("layernorm_backward dweight", out[6], rdw, C, TH_TOL_ELEMENTWISE);
    CHECK("layernorm_backward dbias", out[7], rdb, C, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 8);
    free(g), free(x), free(w), free(m), free(rs), free(dw), free(db);
    free(rdi), free(rdw), free(rdb);
  }
}

/* ---- softmax ---------------------------------------------------------------------------------------------- */

/* out[0..n) = softmax(scale * x[0..n)) in double */
static void ref_softmax(double *out, const float *x, size_t n, double scale) {
  double mx = -INFINITY, s = 0;
  for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  for (size_t i = 0; i < n; i++) s += out[i] = exp(scale * ((double)x[i] - mx));
  for (size_t i = 0; i < n; i++) out[i] /= s;
}

static int run_softmax_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_softmax_forward(s, a[1], a[0], p->N, p->C);
}
static int run_softmax_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_softmax_backward(s, a[2], a[0], a[1], p->N, p->C);
}

static void softmax_forward_and_backward_match_float64_for_large_logits(void **state) {
  (void)state;
  th_rng r = th_rng_for(8);
  for (int k = 0; k < NSHAPES; k++) {
    P p = {.N = shapes[k][0], .C = shapes[k][1]};
    size_t N = p.N, C = p.C, n = N * C;
    float *x = th_alloc_f(n), *y = th_alloc_f(n), *g = th_alloc_f(n);
    double *ref = th_alloc_d(n);
    th_fill_normal(&r, x, n, 4);
    for (size_t i = 0; i < C; i++) x[i] += 120.0f; /* exp overflows without the max */
    th_fill_normal(&r, g, n, 1);
    for (size_t i = 0; i < N; i++) ref_softmax(ref + i * C, x + i * C, C, 1);
    void *out[3];
    th_arg f[] = {{"inp", n, 4, TH_IN, x, 0}, {"out", n, 4, TH_OUT, NULL, 0}};
    RUN(f, run_softmax_forward, &p, out);
    CHECK("softmax_forward", out[1], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    for (size_t i = 0; i < n; i++) y[i] = (float)ref[i];
    for (size_t i = 0; i < N; i++) {
      double d = 0;
      for (size_t c = 0; c < C; c++) d += (double)y[i * C + c] * g[i * C + c];
      for (size_t c = 0; c < C; c++) ref[i * C + c] = y[i * C + c] * (g[i * C + c] - d);
    }
    th_arg b[] = {{"out", n, 4, TH_IN, y, 0}, {"dout", n, 4, TH_IN, g, 0}, {"dinp", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_softmax_backward, &p, out);
    /* dinp = y (g - y.g): y.g is a float dot product over C, which cancels against g where
     * they are close, so its rounding bounds the error as a GEMM's does (TR_TEST_SEED
     * 1796171011028859326 measured 7.6e-6 against the elementwise bound on C = 7) */
    CHECK("softmax_backward", out[2], ref, n, TH_TOL_GEMM);
    th_free_outputs(out, 3);
    free(x), free(y), free(g), free(ref);
  }
}

static int run_attn_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_attn_softmax_forward(s, a[1], a[0], p->N, p->T, p->a);
}
static int run_attn_forward_inplace(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_attn_softmax_forward(s, a[0], a[0], p->N, p->T, p->a);
}
static int run_attn_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_attn_softmax_backward(s, a[2], a[0], a[1], p->N, p->T, p->a);
}

static void causal_softmax_masks_the_future_and_matches_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(9);
  const size_t cases[][2] = {{1, 1}, {1, 5}, {3, 17}, {4, 32}, {2, 128}}; /* (BH, T) */
  for (int k = 0; k < 5; k++) {
    P p = {.N = cases[k][0], .T = cases[k][1], .a = 0.125f};
    size_t BH = p.N, T = p.T, n = BH * T * T;
    float *x = th_alloc_f(n), *att = th_alloc_f(n), *g = th_alloc_f(n);
    double *ref = th_alloc_d(n);
    th_fill_normal(&r, x, n, 8);
    th_fill_normal(&r, g, n, 1);
    memset(ref, 0, n * sizeof *ref);
    for (size_t m = 0; m < BH; m++)
      for (size_t t = 0; t < T; t++) ref_softmax(ref + (m * T + t) * T, x + (m * T + t) * T, t + 1, 0.125);
    void *out[3];
    th_arg f[] = {{"preatt", n, 4, TH_IN, x, 0}, {"att", n, 4, TH_OUT, NULL, 0}};
    RUN(f, run_attn_forward, &p, out);
    CHECK("attn_softmax_forward", out[1], ref, n, TH_TOL_ELEMENTWISE);
    for (size_t m = 0; m < BH; m++) /* exactly zero above the diagonal */
      for (size_t t = 0; t < T; t++)
        for (size_t t2 = t + 1; t2 < T; t2++) assert_true(((float *)out[1])[(m * T + t) * T + t2] == 0.0f);
    th_free_outputs(out, 2);
    th_arg fi[] = {{"preatt/att", n, 4, TH_OUT, x, 0}};
    RUN(fi, run_attn_forward_inplace, &p, out);
    CHECK("attn_softmax_forward in place", out[0], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 1);

    for (size_t i = 0; i < n; i++) att[i] = (float)ref[i];
    for (size_t m = 0; m < BH; m++)
      for (size_t t = 0; t < T; t++) {
        const size_t row = (m * T + t) * T;
        double d = 0;
        for (size_t t2 = 0; t2 <= t; t2++) d += (double)att[row + t2] * g[row + t2];
        for (size_t t2 = 0; t2 < T; t2++)
          ref[row + t2] = t2 <= t ? 0.125 * att[row + t2] * (g[row + t2] - d) : 0.0;
      }
    th_arg b[] = {{"att", n, 4, TH_IN, att, 0}, {"datt", n, 4, TH_IN, g, 0}, {"dpreatt", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_attn_backward, &p, out);
    CHECK("attn_softmax_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    free(x), free(att), free(g), free(ref);
  }
}

/* ---- losses ------------------------------------------------------------------------------------------------ */

static int run_ce_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_forward(s, a[2], a[3], a[0], a[1], p->N, p->V, p->a);
}
static int run_ce_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_backward(s, a[2], a[0], a[1], p->N, p->V, p->a);
}
static int run_ce_backward_inplace(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_backward(s, a[1], a[1], a[0], p->N, p->V, p->a);
}

static void crossentropy_matches_float64_and_survives_large_logits(void **state) {
  (void)state;
  th_rng r = th_rng_for(10);
  const size_t cases[][2] = {{1, 1}, {1, 2}, {5, 7}, {33, 256}, {64, 1000}}; /* (N, V) */
  for (int k = 0; k < 5; k++) {
    P p = {.N = cases[k][0], .V = cases[k][1]};
    p.a = 1.0f / (float)p.N;
    size_t N = p.N, V = p.V, n = N * V;
    float *z = th_alloc_f(n), *probs = th_alloc_f(n);
    int32_t *t = th_alloc_i(N);
    th_fill_normal(&r, z, n, 3);
    for (size_t i = 0; i < V; i++) z[i] = 90.0f + z[i]; /* float exp overflows at 88.7 */
    th_fill_index(&r, t, N, (int32_t)V);
    double *rp = th_alloc_d(n), loss = 0;
    for (size_t i = 0; i < N; i++) {
      const float *zi = z + i * V;
      ref_softmax(rp + i * V, zi, V, 1);
      double mx = -INFINITY, s = 0;
      for (size_t v = 0; v < V; v++) mx = zi[v] > mx ? zi[v] : mx;
      for (size_t v = 0; v < V; v++) s += exp((double)zi[v] - mx);
      loss += log(s) - ((double)zi[t[i]] - mx);
    }
    double rl[1] = {loss * p.a};
    void *out[4];
    th_arg f[] = {{"logits", n, 4, TH_IN, z, 0}, {"targets", N, 4, TH_IN, t, 0},
                  {"loss", 1, 4, TH_OUT, NULL, 0}, {"probs", n, 4, TH_OUT, NULL, 0}};
    RUN(f, run_ce_forward, &p, out);
    CHECK("crossentropy_forward loss", out[2], rl, 1, TH_TOL_ELEMENTWISE);
    CHECK("crossentropy_forward probs", out[3], rp, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 4);

    for (size_t i = 0; i < n; i++) probs[i] = (float)rp[i];
    for (size_t i = 0; i < N; i++)
      for (size_t v = 0; v < V; v++)
        rp[i * V + v] = p.a * ((double)probs[i * V + v] - (v == (size_t)t[i]));
    th_arg b[] = {{"probs", n, 4, TH_IN, probs, 0}, {"targets", N, 4, TH_IN, t, 0},
                  {"dlogits", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_ce_backward, &p, out);
    CHECK("crossentropy_backward", out[2], rp, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    th_arg bi[] = {{"targets", N, 4, TH_IN, t, 0}, {"probs/dlogits", n, 4, TH_OUT, probs, 0}};
    RUN(bi, run_ce_backward_inplace, &p, out);
    CHECK("crossentropy_backward in place", out[1], rp, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);
    free(z), free(probs), free(t), free(rp);
  }
}

static void crossentropy_rejects_a_target_outside_the_vocabulary(void **state) {
  (void)state;
  tr_stream *s = tr_device_stream(dev);
  float *z, *probs, *loss;
  int32_t *t;
  assert_int_equal(tr_device_alloc(dev, 2 * 4 * sizeof(float), (void **)&z), 0);
  assert_int_equal(tr_device_alloc(dev, 2 * 4 * sizeof(float), (void **)&probs), 0);
  assert_int_equal(tr_device_alloc(dev, sizeof(float), (void **)&loss), 0);
  assert_int_equal(tr_device_alloc(dev, 2 * sizeof(int32_t), (void **)&t), 0);
  tr_fill(s, z, 8, 0.5f);
  t[0] = 1, t[1] = 4;
  assert_int_equal(tr_crossentropy_forward(s, loss, probs, z, t, 2, 4, 0.5f), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(dev), "target 1 is 4"));
  assert_non_null(strstr(tr_device_error(dev), "host:0"));
  t[1] = -1;
  assert_int_equal(tr_embedding_forward(s, z, t, probs, NULL, 1, 2, 4, 2), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(dev), "embedding_forward"));
  tr_device_free(dev, z), tr_device_free(dev, probs), tr_device_free(dev, loss), tr_device_free(dev, t);
}

static int run_mse_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_mse_forward(s, a[2], a[0], a[1], p->n, p->a);
}
static int run_mse_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_mse_backward(s, a[2], a[0], a[1], p->n, p->a);
}

static void mse_matches_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(11);
  for (int k = 0; k < NSIZES; k++) {
    P p = {.n = sizes[k]};
    p.a = 1.0f / (float)p.n;
    size_t n = p.n;
    float *x = th_alloc_f(n), *y = th_alloc_f(n);
    double *ref = th_alloc_d(n), loss = 0;
    th_fill_normal(&r, x, n, 1);
    th_fill_normal(&r, y, n, 1);
    for (size_t i = 0; i < n; i++) {
      double e = (double)x[i] - y[i];
      loss += e * e;
      ref[i] = 2.0 * p.a * e;
    }
    double rl[1] = {loss * p.a};
    void *out[3];
    th_arg f[] = {{"pred", n, 4, TH_IN, x, 0}, {"target", n, 4, TH_IN, y, 0}, {"loss", 1, 4, TH_OUT, NULL, 0}};
    RUN(f, run_mse_forward, &p, out);
    CHECK("mse_forward", out[2], rl, 1, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    th_arg b[] = {{"pred", n, 4, TH_IN, x, 0}, {"target", n, 4, TH_IN, y, 0}, {"dpred", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_mse_backward, &p, out);
    CHECK("mse_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    free(x), free(y), free(ref);
  }
}

/* ---- embedding ------------------------------------------------------------------------------------------------ */

static int run_emb_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_forward(s, a[3], a[0], a[1], p->flag ? a[2] : NULL, p->B, p->T, p->C, p->V);
}
static int run_emb_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_backward(s, a[2], p->flag ? a[3] : NULL, a[0], a[1], p->B, p->T, p->C, p->V);
}

static void embedding_forward_and_scatter_add_backward_match_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(12);
  const size_t cases[][4] = {{1, 1, 1, 1}, {2, 3, 5, 4}, {3, 8, 17, 5}, {4, 16, 64, 256}}; /* B T C V */
  for (int k = 0; k < 4; k++)
    for (int pos = 0; pos < 2; pos++) {
      P p = {.B = cases[k][0], .T = cases[k][1], .C = cases[k][2], .V = cases[k][3], .flag = pos};
      size_t B = p.B, T = p.T, C = p.C, V = p.V, n = B * T * C;
      int32_t *idx = th_alloc_i(B * T);
      float *wte = th_alloc_f(V * C), *wpe = th_alloc_f(T * C), *g = th_alloc_f(n);
      th_fill_index(&r, idx, B * T, (int32_t)V); /* small V: tokens repeat */
      th_fill_normal(&r, wte, V * C, 1);
      th_fill_normal(&r, wpe, T * C, 1);
      th_fill_normal(&r, g, n, 1);
      double *ref = th_alloc_d(n), *rwte = th_alloc_d(V * C), *rwpe = th_alloc_d(T * C);
      for (size_t bt = 0; bt < B * T; bt++)
        for (size_t c = 0; c < C; c++)
          ref[bt * C + c] = (double)wte[(size_t)idx[bt] * C + c] + (pos ? wpe[(bt % T) * C + c] : 0.0);
      void *out[4];
      th_arg f[] = {{"idx", B * T, 4, TH_IN, idx, 0}, {"wte", V * C, 4, TH_IN, wte, 0},
                    {"wpe", T * C, 4, TH_IN, wpe, 0}, {"out", n, 4, TH_OUT, NULL, 0}};
      RUN(f, run_emb_forward, &p, out);
      CHECK("embedding_forward", out[3], ref, n, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 4);

      for (size_t i = 0; i < V * C; i++) rwte[i] = wte[i];
      for (size_t i = 0; i < T * C; i++) rwpe[i] = wpe[i];
      for (size_t bt = 0; bt < B * T; bt++)
        for (size_t c = 0; c < C; c++) {
          rwte[(size_t)idx[bt] * C + c] += g[bt * C + c];
          rwpe[(bt % T) * C + c] += g[bt * C + c];
        }
      th_arg b[] = {{"dout", n, 4, TH_IN, g, 0}, {"idx", B * T, 4, TH_IN, idx, 0},
                    {"dwte", V * C, 4, TH_OUT, wte, 0}, {"dwpe", T * C, 4, TH_OUT, wpe, 0}};
      RUN(b, run_emb_backward, &p, out);
      CHECK("embedding_backward dwte", out[2], rwte, V * C, TH_TOL_ELEMENTWISE);
      if (pos) CHECK("embedding_backward dwpe", out[3], rwpe, T * C, TH_TOL_ELEMENTWISE);
      else assert_memory_equal(out[3], wpe, T * C * sizeof(float)); /* NULL dwpe: untouched */
      th_free_outputs(out, 4);
      free(idx), free(wte), free(wpe), free(g), free(ref), free(rwte), free(rwpe);
    }
}

/* ---- optimizers ------------------------------------------------------------------------------------------------ */

static int run_sgd(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sgd_update(s, a[1], a[0], p->n, p->a, p->b);
}
static int run_momentum(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_momentum_update(s, a[1], a[0], a[2], p->n, p->a, p->c, p->b, p->flag);
}
static int run_adamw(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_adamw_update(s, a[1], a[0], a[2], a[3], p->n, p->a, p->c, p->d, p->e, p->b, p->t);
}

static int run_dc_asgd(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_dc_asgd(s, a[2], a[0], a[1], p->n, p->a);
}

/* g + lambda g^2 (now - pulled), against float64; and lambda 0 leaves g exactly alone. */
static void dc_asgd_compensates_the_gradient_as_defined(void **state) {
  (void)state;
  th_rng r = th_rng_for(14);
  for (int k = 0; k < NSIZES; k++) {
    size_t n = sizes[k];
    float *now = th_alloc_f(n), *pulled = th_alloc_f(n), *g = th_alloc_f(n);
    double *ref = th_alloc_d(n);
    th_fill_normal(&r, now, n, 1);
    th_fill_normal(&r, pulled, n, 1);
    th_fill_normal(&r, g, n, 1);
    void *out[3];
    for (int zero = 0; zero < 2; zero++) {
      P p = {.n = n, .a = zero ? 0.0f : 0.7f};
      th_arg args[] = {{"now", n, 4, TH_IN, now, 0}, {"pulled", n, 4, TH_IN, pulled, 0},
                       {"grad", n, 4, TH_OUT, g, 0}};
      RUN(args, run_dc_asgd, &p, out);
      for (size_t i = 0; i < n; i++)
        ref[i] = (double)g[i] + (double)p.a * g[i] * g[i] * ((double)now[i] - pulled[i]);
      CHECK("dc_asgd", out[2], ref, n, TH_TOL_ELEMENTWISE);
      if (zero) assert_memory_equal(out[2], g, n * sizeof(float));
      th_free_outputs(out, 3);
    }
    free(now), free(pulled), free(g), free(ref);
  }
}

static void optimizer_updates_match_pytorch_in_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(13);
  for (int k = 0; k < NSIZES; k++) {
    size_t n = sizes[k];
    float *w = th_alloc_f(n), *g = th_alloc_f(n), *m = th_alloc_f(n), *v = th_alloc_f(n);
    double *rw = th_alloc_d(n), *rm = th_alloc_d(n), *rv = th_alloc_d(n);
    th_fill_normal(&r, w, n, 1);
    th_fill_normal(&r, g, n, 1);
    th_fill_normal(&r, m, n, 0.1f);
    th_fill_uniform(&r, v, n, 0, 0.01f);
    void *out[4];

    P p = {.n = n, .a = 0.01f, .b = 0.1f};
    th_arg sa[] = {{"grad", n, 4, TH_IN, g, 0}, {"param", n, 4, TH_OUT, w, 0}};
    RUN(sa, run_sgd, &p, out);
    for (size_t i = 0; i < n; i++) rw[i] = w[i] - 0.01 * ((double)g[i] + (double)p.b * w[i]);
    CHECK("sgd_update", out[1], rw, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 2);

    for (int nest = 0; nest < 2; nest++) {
      P q = {.n = n, .a = 0.01f, .b = 0.01f, .c = 0.9f, .flag = nest};
      th_arg ma[] = {{"grad", n, 4, TH_IN, g, 0}, {"param", n, 4, TH_OUT, w, 0}, {"mom", n, 4, TH_OUT, m, 0}};
      RUN(ma, run_momentum, &q, out);
      for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] + (double)q.b * w[i], b = (double)q.c * m[i] + gi;
        rm[i] = b;
        rw[i] = w[i] - (double)q.a * (nest ? gi + (double)q.c * b : b);
      }
      CHECK(nest ? "nesterov param" : "momentum param", out[1], rw, n, TH_TOL_ELEMENTWISE);
      CHECK(nest ? "nesterov buffer" : "momentum buffer", out[2], rm, n, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 3);
    }

    const int64_t steps[] = {1, 2, 10, 1000};
    for (int st = 0; st < 4; st++) {
      P q = {.n = n, .a = 3e-4f, .b = 0.1f, .c = 0.9f, .d = 0.999f, .e = 1e-8f, .t = steps[st]};
      th_arg aa[] = {{"grad", n, 4, TH_IN, g, 0}, {"param", n, 4, TH_OUT, w, 0},
                     {"m", n, 4, TH_OUT, m, 0}, {"v", n, 4, TH_OUT, v, 0}};
      RUN(aa, run_adamw, &q, out);
      const double b1 = q.c, b2 = q.d, bc1 = 1 - pow(b1, (double)q.t), bc2 = 1 - pow(b2, (double)q.t);
      for (size_t i = 0; i < n; i++) {
        rm[i] = b1 * m[i] + (1 - b1) * g[i];
        rv[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        rw[i] = w[i] * (1 - (double)q.a * q.b) - (double)q.a * (rm[i] / bc1) / (sqrt(rv[i] / bc2) + (double)q.e);
      }
      CHECK("adamw param", out[1], rw, n, TH_TOL_ELEMENTWISE);
      CHECK("adamw m", out[2], rm, n, TH_TOL_ELEMENTWISE);
      CHECK("adamw v", out[3], rv, n, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 4);
    }
    free(w), free(g), free(m), free(v), free(rw), free(rm), free(rv);
  }
}

/* bf16 against the exact product: each input is rounded by at most 2^-8 of itself, so one
 * product is off by at most 2^-7 of itself (6e-5 normalised); sums of many measure 5e-6. */
#define TOL_BF16 1e-4

/* ---- GEMM -------------------------------------------------------------------------------------------------------- */

static int run_gemm(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  if (p->flag) /* bf16 */
    return p->batch ? tr_gemm_batched_bf16(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0],
                                           p->lda, p->sa, a[1], p->ldb, p->sb, p->b, a[2],
                                           p->ldc, p->sc, p->batch)
                    : tr_gemm_bf16(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda,
                                   a[1], p->ldb, p->b, a[2], p->ldc);
  if (p->batch)
    return tr_gemm_batched(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda, p->sa,
                           a[1], p->ldb, p->sb, p->b, a[2], p->ldc, p->sc, p->batch);
  return tr_gemm(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda, a[1], p->ldb, p->b,
                 a[2], p->ldc);
}

/* Elements from the first to one past the last of `batch` (rows, cols) matrices, row stride
 * ld, matrix stride `stride` (matrices may interleave: attention's heads). */
static size_t extent(int batch, int64_t stride, int rows, int cols, int ld) {
  if (!rows || !cols) return 1;
  return (size_t)((int64_t)(batch - 1) * stride + (int64_t)(rows - 1) * ld + cols);
}

/* C = alpha op(A) op(B) + beta C for the case p describes (strides and leading dimensions
 * set), checked in double */
/* ref (the extent nc of C's batch) = alpha op(A) op(B) + beta ref, in double */
static void gemm_ref(const P *p, const float *A, const float *B, double *ref) {
  const int nb = p->batch ? p->batch : 1;
  for (int bi = 0; bi < nb; bi++) {
    const float *Ab = A + bi * p->sa, *Bb = B + bi * p->sb;
    for (int i = 0; i < p->M; i++)
      for (int j = 0; j < (int)p->N; j++) {
        double acc = 0;
        for (int kk = 0; kk < p->K; kk++) {
          double av = p->opa == TR_OP_N ? Ab[i * p->lda + kk] : Ab[kk * p->lda + i];
          double bv = p->opb == TR_OP_N ? Bb[kk * p->ldb + j] : Bb[j * p->ldb + kk];
          acc += av * bv;
        }
        double *c = ref + bi * p->sc + i * p->ldc + j;
        *c = p->a * acc + (p->b == 0 ? 0 : p->b * *c);
      }
  }
}

/* The bfloat16 nearest to x, ties to even, found by comparing distances in double (the
 * reference for tr_to_bf16); NaN: any NaN. Past the largest bfloat16 the next one up is
 * 2^128, so what rounds there overflows to infinity. */
static uint16_t ref_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return 0x7fc0;
  const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* toward zero, away */
  if (isinf(x)) return lo;
  uint32_t l = (uint32_t)lo << 16, h = (uint32_t)hi << 16;
  float fl, fh;
  memcpy(&fl, &l, 4), memcpy(&fh, &h, 4);
  const double dh = isinf(fh) ? copysign(ldexp(1.0, 128), x) : fh;
  const double el = fabs((double)x - fl), eh = fabs(dh - (double)x);
  return el < eh ? lo : eh < el ? hi : (lo & 1) ? hi : lo;
}

static float bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* C = alpha op(A) op(B) + beta C for the case p describes (strides and leading dimensions
 * set), checked in double. bf16: A and B enter as bfloat16 (tr_gemm_batched_bf16), and C is
 * checked against the product of the rounded inputs with GEMM's float32 tolerance and against
 * that of the exact ones with bf16's. */
static void gemm_case_p(th_rng *r, P p, int pad, int bf16) {
  const tr_op opa = p.opa, opb = p.opb;
  const int M = p.M, N = (int)p.N, K = p.K, batch = p.batch;
  const int nb = batch ? batch : 1;
  const size_t na = extent(nb, p.sa, opa == TR_OP_N ? M : K, opa == TR_OP_N ? K : M, p.lda) + pad,
               nbb = extent(nb, p.sb, opb == TR_OP_N ? K : N, opb == TR_OP_N ? N : K, p.ldb) +
                     2 * pad,
               nc = extent(nb, p.sc, M, N, p.ldc) + pad;
  float *A = th_alloc_f(na), *B = th_alloc_f(nbb), *C = th_alloc_f(nc);
  th_fill_normal(r, A, na, 1);
  th_fill_normal(r, B, nbb, 1);
  th_fill_normal(r, C, nc, 1);
  double *ref = th_alloc_d(nc), *exact = th_alloc_d(nc);
  for (size_t i = 0; i < nc; i++) ref[i] = exact[i] = C[i]; /* padding must stay as it was */
  gemm_ref(&p, A, B, exact);
  uint16_t *A16 = malloc(na * 2), *B16 = malloc(nbb * 2);
  assert_true(A16 && B16);
  if (bf16) { /* the inputs as the device sees them */
    for (size_t i = 0; i < na; i++) A[i] = bf16_value(A16[i] = ref_bf16(A[i]));
    for (size_t i = 0; i < nbb; i++) B[i] = bf16_value(B16[i] = ref_bf16(B[i]));
    gemm_ref(&p, A, B, ref);
  } else {
    memcpy(ref, exact, nc * sizeof *ref);
  }
  if (p.b == 0) /* beta 0 ignores C, NaN included */
    for (int bi = 0; bi < nb; bi++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[bi * p.sc + i * p.ldc + j] = NAN;
  th_arg args[] = {{"A", na, bf16 ? 2 : 4, TH_IN, bf16 ? (void *)A16 : A, 0},
                   {"B", nbb, bf16 ? 2 : 4, TH_IN, bf16 ? (void *)B16 : B, 0},
                   {"C", nc, 4, TH_OUT, C, 0}};
  void *out[3];
  p.flag = bf16;
  RUN(args, run_gemm, &p, out);
  char what[160];
  snprintf(what, sizeof what, "gemm%s%s %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d beta=%g",
           batch ? "_batched" : "", bf16 ? "_bf16" : "", opa ? 'T' : 'N', opb ? 'T' : 'N', M, N,
           K, p.lda, p.ldb, p.ldc, (double)p.b);
  CHECK(what, out[2], ref, nc, TH_TOL_GEMM);
  if (bf16) CHECK(what, out[2], exact, nc, TOL_BF16);
  th_free_outputs(out, 3);
  free(A), free(B), free(C), free(ref), free(exact), free(A16), free(B16);
}

/* The same with dense matrices `pad` elements apart and rows `pad` longer than they need */
static void gemm_case(th_rng *r, tr_op opa, tr_op opb, int M, int N, int K, int pad, int batch,
                      float alpha, float beta) {
  const int arows = opa == TR_OP_N ? M : K, acols = opa == TR_OP_N ? K : M;
  const int brows = opb == TR_OP_N ? K : N, bcols = opb == TR_OP_N ? N : K;
  P p = {.opa = opa, .opb = opb, .M = M, .N = (size_t)N, .K = K, .a = alpha, .b = beta,
         .lda = (acols ? acols : 1) + pad, .ldb = (bcols ? bcols : 1) + pad, .ldc = N + pad,
         .batch = batch};
  p.sa = (int64_t)arows * p.lda + pad, p.sb = (int64_t)brows * p.ldb + 2 * pad, p.sc = (int64_t)M * p.ldc + pad;
  gemm_case_p(r, p, pad, 0);
}

static void gemm_matches_float64_for_every_transposition(void **state) {
  (void)state;
  th_rng r = th_rng_for(14);
  const int mnk[][3] = {{1, 1, 1}, {1, 7, 3}, {7, 1, 5}, {5, 3, 1}, {17, 33, 9}, {64, 48, 100}, {31, 65, 129}};
  for (int k = 0; k < 7; k++)
    for (int t = 0; t < 4; t++) {
      tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 0, 0, 1.0f, 0.0f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 3, 0, -1.5f, 0.5f);
    }
  gemm_case(&r, TR_OP_N, TR_OP_N, 4, 5, 0, 0, 0, 1.0f, 2.0f); /* K = 0: C = beta C */
}

/* Products of at most 128x128x16 multiply-adds (a quarter of that NT) take the host's direct
 * path (host_gemm.c) in every form it has: tiles of C or of C transposed, op(B) copied or
 * not, ragged edges, lone rows and narrow 8-row tiles, dot products; and just past it, the
 * library again. */
static void gemm_small_products_match_float64_in_every_form(void **state) {
  (void)state;
  th_rng r = th_rng_for(16);
  /* simplenet's products as its layers issue them, beta 1 where gradients accumulate */
  gemm_case(&r, TR_OP_N, TR_OP_T, 64, 100, 10, 0, 0, 1.0f, 0.0f);
  gemm_case(&r, TR_OP_N, TR_OP_T, 64, 1, 100, 0, 0, 1.0f, 0.0f);
  gemm_case(&r, TR_OP_T, TR_OP_N, 1, 100, 64, 0, 0, 1.0f, 1.0f);
  gemm_case(&r, TR_OP_N, TR_OP_N, 64, 100, 1, 0, 0, 1.0f, 0.0f);
  gemm_case(&r, TR_OP_T, TR_OP_N, 100, 10, 64, 0, 0, 1.0f, 1.0f);
  const int mnk[][3] = {{64, 100, 10}, {64, 1, 100}, {1, 100, 64}, {64, 100, 1}, {100, 10, 64},
                        {13, 5, 40},   {5, 13, 40},  {3, 40, 7},   {9, 17, 33},  {16, 16, 1024},
                        {2, 2, 2},     {40, 24, 3},  {128, 128, 16}, {128, 128, 17}};
  for (size_t k = 0; k < sizeof mnk / sizeof mnk[0]; k++)
    for (int t = 0; t < 4; t++) {
      tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 0, 0, 1.0f, 0.0f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 3, 0, -1.5f, 0.5f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 1, 0, 0.25f, 1.0f);
    }
}

static int run_gemm_at(tr_stream *s, void **a, void *ctx) {
  P *p = ctx; /* A and B start p->lda and p->ldb floats into their buffers */
  return tr_gemm(s, p->opa, p->opb, p->M, (int)p->N, p->K, 1.0f, (float *)a[0] + p->lda,
                 p->opa == TR_OP_N ? p->K : p->M, (float *)a[1] + p->ldb,
                 p->opb == TR_OP_N ? (int)p->N : p->K, 0.0f, a[2], (int)p->N);
}

/* The same small product with its operands at other alignments gives the same bits (the
 * direct path's sums depend on the shape alone, so runs repeat exactly). */
static void gemm_small_products_do_not_depend_on_alignment(void **state) {
  (void)state;
  th_rng r = th_rng_for(17);
  enum { M = 37, N = 29, K = 23, SHIFT = 8 };
  float *a = th_alloc_f(M * K), *b = th_alloc_f(K * N);
  float *A = th_alloc_f(M * K + SHIFT), *B = th_alloc_f(K * N + SHIFT);
  for (int t = 0; t < 4; t++) {
    th_fill_normal(&r, a, M * K, 1);
    th_fill_normal(&r, b, K * N, 1);
    void *out[2][3];
    for (int at = 0; at < 2; at++) {
      P p = {.opa = (tr_op)(t & 1), .opb = (tr_op)(t >> 1), .M = M, .N = N, .K = K,
             .lda = at ? 1 + t : 0, .ldb = at ? 7 - t : 0};
      memset(A, 0, (M * K + SHIFT) * sizeof *A);
      memset(B, 0, (K * N + SHIFT) * sizeof *B);
      memcpy(A + p.lda, a, M * K * sizeof *A);
      memcpy(B + p.ldb, b, K * N * sizeof *B);
      th_arg args[] = {{"A", M * K + SHIFT, 4, TH_IN, A, 0}, {"B", K * N + SHIFT, 4, TH_IN, B, 0},
                       {"C", M * N, 4, TH_OUT, NULL, 0}};
      RUN(args, run_gemm_at, &p, out[at]);
    }
    assert_memory_equal(out[0][2], out[1][2], M * N * sizeof(float));
    th_free_outputs(out[0], 3);
    th_free_outputs(out[1], 3);
  }
  free(a), free(b), free(A), free(B);
}

static void gemm_batched_matches_float64_with_strides(void **state) {
  (void)state;
  th_rng r = th_rng_for(15);
  for (int t = 0; t < 4; t++) {
    tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
    gemm_case(&r, opa, opb, 16, 16, 8, 0, 6, 0.25f, 0.0f);  /* attention: (T,hs) @ (hs,T) */
    gemm_case(&r, opa, opb, 7, 9, 13, 2, 3, 1.0f, 1.0f);
    gemm_case(&r, opa, opb, 1, 1, 1, 1, 1, 2.0f, 0.0f);
  }
}

/* Past the direct path: the library's products (oneDNN's or OpenBLAS's), with every
 * transposition, leading dimensions longer than the rows, alpha and beta. */
static void gemm_library_products_match_float64(void **state) {
  (void)state;
  th_rng r = th_rng_for(18);
  const int mnk[][3] = {{70, 90, 80}, {130, 65, 40}, {256, 33, 129}, {9, 300, 200}, {128, 128, 17}};
  for (size_t k = 0; k < sizeof mnk / sizeof mnk[0]; k++)
    for (int t = 0; t < 4; t++) {
      tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 0, 0, 1.0f, 0.0f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 3, 0, -1.5f, 0.5f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 1, 0, 1.0f, 1.0f);
    }
}

/* Attention's products as attention.c issues them: the heads of q, k, v and dqkv are (T,hs)
 * matrices side by side in rows of 3C (leading dimension 3C, hs apart), read and written in
 * place; the scores (T,T) are dense. Large enough for the library. */
static void gemm_batched_reads_and_writes_interleaved_heads(void **state) {
  (void)state;
  th_rng r = th_rng_for(19);
  enum { T = 128, HS = 32, NH = 3, C3 = 3 * HS * NH };
  /* scores = q k^T; dv = att^T dy (into dqkv); dq = dpreatt k (into dqkv) */
  const P cases[] = {
      {.opa = TR_OP_N, .opb = TR_OP_T, .M = T, .N = T, .K = HS, .lda = C3, .sa = HS, .ldb = C3,
       .sb = HS, .ldc = T, .sc = T * T},
      {.opa = TR_OP_T, .opb = TR_OP_N, .M = T, .N = HS, .K = T, .lda = T, .sa = T * T,
       .ldb = HS * NH, .sb = HS, .ldc = C3, .sc = HS},
      {.opa = TR_OP_N, .opb = TR_OP_N, .M = T, .N = HS, .K = T, .lda = T, .sa = T * T, .ldb = C3,
       .sb = HS, .ldc = C3, .sc = HS},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    P p = cases[k];
    p.a = 1.0f, p.batch = NH;
    gemm_case_p(&r, p, 0, 0);
    gemm_case_p(&r, p, 0, 1);
  }
}

static int run_rows(tr_stream *s, void **a, void *ctx) {
  P *p = ctx; /* C (M,N) from the first M rows of A (p->ldc rows), then of B, dense */
  const int lda = p->K, ldb = p->opb == TR_OP_N ? (int)p->N : p->K;
  return p->flag ? tr_gemm_bf16(s, TR_OP_N, p->opb, p->M, (int)p->N, p->K, 1, a[0], lda, a[1],
                                ldb, 0, a[2], (int)p->N)
                 : tr_gemm(s, TR_OP_N, p->opb, p->M, (int)p->N, p->K, 1, a[0], lda, a[1], ldb, 0,
                           a[2], (int)p->N);
}

/* A row of op(A) op(B) is the same bits however many rows are multiplied with it: forward
 * and input-gradient products of a micro-batch give the rows the whole batch would, so a
 * batch split across micro-batches and replicas sees single's activations. */
static void gemm_rows_do_not_depend_on_the_rows_around_them(void **state) {
  (void)state;
  th_rng r = th_rng_for(20);
  const int nk[][2] = {{512, 784}, {1024, 1024}, {768, 256}, {256, 1024}};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (size_t k = 0; k < sizeof nk / sizeof nk[0]; k++)
      for (int t = 0; t < 2; t++) {
        enum { ROWS = 64 };
        const int N = nk[k][0], K = nk[k][1];
        const size_t na = (size_t)ROWS * K, nb = (size_t)K * N, elem = bf16 ? 2 : 4;
        float *A = th_alloc_f(na), *B = th_alloc_f(nb);
        th_fill_normal(&r, A, na, 1);
        th_fill_normal(&r, B, nb, 1);
        uint16_t *A16 = malloc(na * 2), *B16 = malloc(nb * 2);
        assert_true(A16 && B16);
        for (size_t i = 0; i < na; i++) A16[i] = ref_bf16(A[i]);
        for (size_t i = 0; i < nb; i++) B16[i] = ref_bf16(B[i]);
        void *out[3][3];
        const int rows[] = {ROWS, 16, 24};
        for (int m = 0; m < 3; m++) {
          P p = {.opb = (tr_op)t, .M = rows[m], .N = (size_t)N, .K = K, .flag = bf16};
          th_arg args[] = {{"A", na, elem, TH_IN, bf16 ? (void *)A16 : A, 0},
                           {"B", nb, elem, TH_IN, bf16 ? (void *)B16 : B, 0},
                           {"C", (size_t)rows[m] * N, 4, TH_OUT, NULL, 0}};
          RUN(args, run_rows, &p, out[m]);
        }
        for (int m = 1; m < 3; m++)
          if (memcmp(out[0][2], out[m][2], (size_t)rows[m] * N * sizeof(float)))
            fail_msg("%s N%c N=%d K=%d: the first %d rows differ from those of %d",
                     bf16 ? "bf16" : "fp32", t ? 'T' : 'N', N, K, rows[m], ROWS);
        for (int m = 0; m < 3; m++) th_free_outputs(out[m], 3);
        free(A), free(B), free(A16), free(B16);
      }
}

/* ---- mixed precision ------------------------------------------------------------------------ */

static int run_to_bf16(tr_stream *s, void **a, void *ctx) {
  return tr_to_bf16(s, a[1], a[0], ((P *)ctx)->n);
}

/* Every float rounds to its nearest bfloat16, ties to even: random values of every
 * magnitude, exact ties either way, subnormals, zeros, the largest floats (which overflow to
 * infinity), infinities and NaN. */
static void to_bf16_rounds_to_nearest_even(void **state) {
  (void)state;
  th_rng r = th_rng_for(30);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                            FLT_MIN, 1e-45f, -1e-40f, 1.0f, -3.0f, 3.3895314e38f};
  const uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x7f7f8000u,
                           0x00008000u, 0x00018000u, 0x3f80ffffu, 0x3f807fffu};
  for (size_t k = 0; k < NSIZES; k++) {
    const size_t n = sizes[k] + 32;
    float *x = th_alloc_f(n);
    th_fill_normal(&r, x, n, 1);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(th_next(&r) % 280) - 150);
    for (size_t i = 0; i < 14; i++) x[(i * 7919) % n] = specials[i];
    for (size_t i = 0; i < 9; i++) memcpy(&x[(i * 104729 + 3) % n], &ties[i], 4);
    P p = {.n = n};
    th_arg args[] = {{"inp", n, 4, TH_IN, x, 0}, {"out", n, 2, TH_OUT, NULL, 0}};
    void *out[2];
    RUN(args, run_to_bf16, &p, out);
    const uint16_t *got = out[1];
    for (size_t i = 0; i < n; i++) {
      const uint16_t want = ref_bf16(x[i]);
      const bool ok = isnan(x[i]) ? (got[i] & 0x7fff) > 0x7f80 : got[i] == want;
      if (!ok) fail_msg("to_bf16(%a) = 0x%04x, expected 0x%04x", (double)x[i], got[i], want);
    }
    th_free_outputs(out, 2);
    free(x);
  }
}

/* The device says what its GEMM runs on and how it multiplies bf16; where the test runs
 * with oneDNN held to an instruction set the CPU has (tests/gpu/meson.build), what it must
 * say there. */
static void device_reports_its_isa_and_bf16(void **state) {
  (void)state;
  const tr_device_info *in = tr_device_info_of(dev);
  assert_true(in->isa[0] != 0);
  const char *isa = getenv("TR_TEST_ISA"), *want = getenv("TR_TEST_BF16");
  if (isa && want && !strcmp(in->isa, isa))
    assert_string_equal(tr_bf16_support_name(in->bf16), want);
}

/* tr_gemm_bf16 in every form the host has: the direct path (operands widened), the library
 * (oneDNN's bf16 matmul, or widened when the CPU has no bf16 there), strided batches. */
static void gemm_bf16_matches_float64_in_every_form(void **state) {
  (void)state;
  th_rng r = th_rng_for(31);
  const int mnk[][3] = {{1, 1, 1}, {64, 100, 10}, {17, 33, 9}, {70, 90, 80}, {256, 33, 129},
                        {128, 128, 17}, {4, 5, 0}};
  for (size_t k = 0; k < sizeof mnk / sizeof mnk[0]; k++)
    for (int t = 0; t < 4; t++) {
      const tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      const int M = mnk[k][0], N = mnk[k][1], K = mnk[k][2];
      for (int v = 0; v < 3; v++) {
        const int pad = v == 1 ? 3 : 0, batch = v == 2 ? 3 : 0;
        const int acols = opa == TR_OP_N ? K : M, bcols = opb == TR_OP_N ? N : K;
        P p = {.opa = opa, .opb = opb, .M = M, .N = (size_t)N, .K = K, .a = v == 1 ? -1.5f : 1.0f,
               .b = (float)v * 0.5f, .lda = (acols ? acols : 1) + pad,
               .ldb = (bcols ? bcols : 1) + pad, .ldc = N + pad, .batch = batch};
        p.sa = (int64_t)(opa == TR_OP_N ? M : K) * p.lda + 5;
        p.sb = (int64_t)(opb == TR_OP_N ? K : N) * p.ldb + 1;
        p.sc = (int64_t)M * p.ldc + 2;
        gemm_case_p(&r, p, pad, 1);
      }
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fill_sets_every_element),
      cmocka_unit_test(philox_matches_random123_known_answers),
      cmocka_unit_test(init_values_follow_the_philox_definition),
      cmocka_unit_test(init_has_the_distributions_asked_for),
      cmocka_unit_test(init_in_shards_equals_init_whole),
      cmocka_unit_test(host_exp_is_within_1_3_ulp_on_its_domain),
      cmocka_unit_test(dropout_mask_follows_the_philox_definition),
      cmocka_unit_test(dropout_mask_in_shards_equals_mask_whole),
      cmocka_unit_test(dropout_mask_keeps_a_fraction_one_minus_p),
      cmocka_unit_test(add_mul_axpy_scale_match_float64),
      cmocka_unit_test(sum_and_sumsq_match_float64_and_accumulate),
      cmocka_unit_test(clip_factor_is_min_of_one_and_max_norm_over_norm),
      cmocka_unit_test(bias_add_and_bias_grad_match_float64),
      cmocka_unit_test(bias_grad_sums_each_column_in_order_across_its_tiles),
      cmocka_unit_test(relu_and_gelu_match_float64),
      cmocka_unit_test(layernorm_forward_matches_float64_even_far_from_zero),
      cmocka_unit_test(layernorm_backward_matches_float64),
      cmocka_unit_test(softmax_forward_and_backward_match_float64_for_large_logits),
      cmocka_unit_test(causal_softmax_masks_the_future_and_matches_float64),
      cmocka_unit_test(crossentropy_matches_float64_and_survives_large_logits),
      cmocka_unit_test(crossentropy_rejects_a_target_outside_the_vocabulary),
      cmocka_unit_test(mse_matches_float64),
      cmocka_unit_test(embedding_forward_and_scatter_add_backward_match_float64),
      cmocka_unit_test(optimizer_updates_match_pytorch_in_float64),
      cmocka_unit_test(dc_asgd_compensates_the_gradient_as_defined),
      cmocka_unit_test(gemm_matches_float64_for_every_transposition),
      cmocka_unit_test(gemm_small_products_match_float64_in_every_form),
      cmocka_unit_test(gemm_small_products_do_not_depend_on_alignment),
      cmocka_unit_test(gemm_batched_matches_float64_with_strides),
      cmocka_unit_test(gemm_library_products_match_float64),
      cmocka_unit_test(gemm_batched_reads_and_writes_interleaved_heads),
      cmocka_unit_test(gemm_rows_do_not_depend_on_the_rows_around_them),
      cmocka_unit_test(to_bf16_rounds_to_nearest_even),
      cmocka_unit_test(device_reports_its_isa_and_bf16),
      cmocka_unit_test(gemm_bf16_matches_float64_in_every_form),
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
