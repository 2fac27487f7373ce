/* test_host_ops.c — the host backend's element-wise ops and reductions against a float64
 * reference computed here: add, mul, axpy and scale, sum and sum of squares, the clipping
 * factor, bias add and bias gradient (the same bits as summing each column in order whatever
 * the kernel's tiling), ReLU and GELU, and the optimizers' updates (SGD, momentum and
 * Nesterov, AdamW, DC-ASGD's compensation). host_fixture.h says what every op is held to;
 * test_host_init.c, test_host_layers.c and test_host_gemm.c have the host's other ops. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host_fixture.h"

/* ---- element-wise arithmetic ----------------------------------------------------------------- */

static int run_add(tr_stream *s, void **a, void *ctx) {
  return tr_add(s, a[2], a[0], a[1], ((P *)ctx)->n);
}
static int run_mul(tr_stream *s, void **a, void *ctx) {
  return tr_mul(s, a[2], a[0], a[1], ((P *)ctx)->n);
}
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

    th_arg a_add[] = {
        {"a", n, 4, TH_IN, x, 0}, {"b", n, 4, TH_IN, y, 0}, {"out", n, 4, TH_OUT, NULL, 0}};
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

/* ---- reductions ------------------------------------------------------------------------------ */

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

/* ---- bias ------------------------------------------------------------------------------------ */

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

/* ---- activations ----------------------------------------------------------------------------- */

static int run_relu_forward(tr_stream *s, void **a, void *ctx) {
  return tr_relu_forward(s, a[1], a[0], ((P *)ctx)->n);
}
static int run_relu_backward(tr_stream *s, void **a, void *ctx) {
  return tr_relu_backward(s, a[2], a[0], a[1], ((P *)ctx)->n);
}
static int run_gelu_forward(tr_stream *s, void **a, void *ctx) {
  return tr_gelu_forward(s, a[1], a[0], ((P *)ctx)->n);
}
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
    th_arg b[] = {
        {"inp", n, 4, TH_IN, x, 0}, {"dout", n, 4, TH_IN, g, 0}, {"dinp", n, 4, TH_OUT, NULL, 0}};
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

/* ---- optimizers ------------------------------------------------------------------------------ */

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
      th_arg ma[] = {
          {"grad", n, 4, TH_IN, g, 0}, {"param", n, 4, TH_OUT, w, 0}, {"mom", n, 4, TH_OUT, m, 0}};
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
      const double b1 = q.c, b2 = q.d, bc1 = 1 - pow(b1, (double)q.t),
                   bc2 = 1 - pow(b2, (double)q.t);
      for (size_t i = 0; i < n; i++) {
        rm[i] = b1 * m[i] + (1 - b1) * g[i];
        rv[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        rw[i] = w[i] * (1 - (double)q.a * q.b) -
                (double)q.a * (rm[i] / bc1) / (sqrt(rv[i] / bc2) + (double)q.e);
      }
      CHECK("adamw param", out[1], rw, n, TH_TOL_ELEMENTWISE);
      CHECK("adamw m", out[2], rm, n, TH_TOL_ELEMENTWISE);
      CHECK("adamw v", out[3], rv, n, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 4);
    }
    free(w), free(g), free(m), free(v), free(rw), free(rm), free(rv);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(add_mul_axpy_scale_match_float64),
      cmocka_unit_test(sum_and_sumsq_match_float64_and_accumulate),
      cmocka_unit_test(clip_factor_is_min_of_one_and_max_norm_over_norm),
      cmocka_unit_test(bias_add_and_bias_grad_match_float64),
      cmocka_unit_test(bias_grad_sums_each_column_in_order_across_its_tiles),
      cmocka_unit_test(relu_and_gelu_match_float64),
      cmocka_unit_test(optimizer_updates_match_pytorch_in_float64),
      cmocka_unit_test(dc_asgd_compensates_the_gradient_as_defined),
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
