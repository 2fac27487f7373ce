/* test_host_gemm.c — the host backend's GEMM and its mixed precision against a float64
 * reference computed here: tr_gemm and tr_gemm_batched in every transposition with leading
 * dimensions and strides, on the direct path of small products and on the library (oneDNN or
 * OpenBLAS), attention's interleaved heads, a row's bits whatever rows surround it; tr_to_bf16
 * rounding to nearest even, and tr_gemm_bf16 in every form with bf16's tolerances. Under
 * tests/gpu/meson.build's ISA variants the device must name the ISA and bf16 support it was
 * held to. host_fixture.h says what every op is held to. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host_fixture.h"

/* bf16 against the exact product: each input is rounded by at most 2^-8 of itself, so one
 * product is off by at most 2^-7 of itself (6e-5 normalised); sums of many measure 5e-6. */
#define TOL_BF16 1e-4

/* ---- GEMM ------------------------------------------------------------------------------------ */

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
  p.sa = (int64_t)arows * p.lda + pad, p.sb = (int64_t)brows * p.ldb + 2 * pad,
  p.sc = (int64_t)M * p.ldc + pad;
  gemm_case_p(r, p, pad, 0);
}

static void gemm_matches_float64_for_every_transposition(void **state) {
  (void)state;
  th_rng r = th_rng_for(14);
  const int mnk[][3] = {{1, 1, 1},   {1, 7, 3},     {7, 1, 5},    {5, 3, 1},
                        {17, 33, 9}, {64, 48, 100}, {31, 65, 129}};
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
