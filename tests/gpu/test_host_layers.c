/* test_host_layers.c — the host backend's ops that work a row at a time, against a float64
 * reference computed here: layernorm forward (even far from zero) and backward, softmax and
 * the causal attention softmax (the future masked, large logits), cross-entropy (large
 * logits, a target outside the vocabulary refused) and MSE, and the embedding's lookup and
 * scatter-add backward. host_fixture.h says what every op is held to. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host_fixture.h"

/* ---- layernorm ------------------------------------------------------------------------------- */

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

/* ---- softmax --------------------------------------------------------------------------------- */

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
    th_arg b[] = {
        {"out", n, 4, TH_IN, y, 0}, {"dout", n, 4, TH_IN, g, 0}, {"dinp", n, 4, TH_OUT, NULL, 0}};
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
      for (size_t t = 0; t < T; t++)
        ref_softmax(ref + (m * T + t) * T, x + (m * T + t) * T, t + 1, 0.125);
    void *out[3];
    th_arg f[] = {{"preatt", n, 4, TH_IN, x, 0}, {"att", n, 4, TH_OUT, NULL, 0}};
    RUN(f, run_attn_forward, &p, out);
    CHECK("attn_softmax_forward", out[1], ref, n, TH_TOL_ELEMENTWISE);
    for (size_t m = 0; m < BH; m++) /* exactly zero above the diagonal */
      for (size_t t = 0; t < T; t++)
        for (size_t t2 = t + 1; t2 < T; t2++)
          assert_true(((float *)out[1])[(m * T + t) * T + t2] == 0.0f);
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
    th_arg b[] = {{"att", n, 4, TH_IN, att, 0},
                  {"datt", n, 4, TH_IN, g, 0},
                  {"dpreatt", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_attn_backward, &p, out);
    CHECK("attn_softmax_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    free(x), free(att), free(g), free(ref);
  }
}

/* ---- losses ---------------------------------------------------------------------------------- */

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
  tr_device_free(dev, z), tr_device_free(dev, probs), tr_device_free(dev, loss),
      tr_device_free(dev, t);
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
    th_arg f[] = {{"pred", n, 4, TH_IN, x, 0},
                  {"target", n, 4, TH_IN, y, 0},
                  {"loss", 1, 4, TH_OUT, NULL, 0}};
    RUN(f, run_mse_forward, &p, out);
    CHECK("mse_forward", out[2], rl, 1, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    th_arg b[] = {{"pred", n, 4, TH_IN, x, 0},
                  {"target", n, 4, TH_IN, y, 0},
                  {"dpred", n, 4, TH_OUT, NULL, 0}};
    RUN(b, run_mse_backward, &p, out);
    CHECK("mse_backward", out[2], ref, n, TH_TOL_ELEMENTWISE);
    th_free_outputs(out, 3);
    free(x), free(y), free(ref);
  }
}

/* ---- embedding ------------------------------------------------------------------------------- */

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
  const size_t cases[][4] = {
      {1, 1, 1, 1}, {2, 3, 5, 4}, {3, 8, 17, 5}, {4, 16, 64, 256}}; /* B T C V */
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
          ref[bt * C + c] =
              (double)wte[(size_t)idx[bt] * C + c] + (pos ? wpe[(bt % T) * C + c] : 0.0);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layernorm_forward_matches_float64_even_far_from_zero),
      cmocka_unit_test(layernorm_backward_matches_float64),
      cmocka_unit_test(softmax_forward_and_backward_match_float64_for_large_logits),
      cmocka_unit_test(causal_softmax_masks_the_future_and_matches_float64),
      cmocka_unit_test(crossentropy_matches_float64_and_survives_large_logits),
      cmocka_unit_test(crossentropy_rejects_a_target_outside_the_vocabulary),
      cmocka_unit_test(mse_matches_float64),
      cmocka_unit_test(embedding_forward_and_scatter_add_backward_match_float64),
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
