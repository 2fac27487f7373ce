/* test_host_init.c — the host backend's fill, random initialisation and dropout masks, and
 * its exponential: fill, the Philox generator against Random123's known answers,
 * tr_init_uniform and tr_init_normal against tr_device.h's definitions (value by value, in
 * distribution, and in shards against the whole), dropout masks the same three ways, and the
 * exp under every softmax and GELU within 1.3 ulp. host_fixture.h says what every op is held
 * to; test_host_ops.c, test_host_layers.c and test_host_gemm.c have the host's other ops. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend_impl.h"   /* tr__philox4x32_10, the generator the spec names */
#include "host/host_impl.h" /* tr__host_expf_nonpos */
#include "host_fixture.h"

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
    P p = {
        .n = sizes[k], .a = -0.5f, .b = 2.0f, .t = (int64_t)seed, .flag = (int)(th_next(&r) % 11)};
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

/* ---- dropout masks --------------------------------------------------------------------------- */

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
    fprintf(stderr, "dropout p %.1f: kept %zu of %d (expected %.0f)\n", (double)ps[q], kept, N,
            want);
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
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
