/* test_gemm_libs.c — every GEMM library of the host's table computes what it serves
 * (gpu/host/host_blas.h): each pinned, and auto, in every transpose, with padded leading
 * dimensions, alpha and beta, a strided batch, fp32 and bf16, against float64; oneDNN on B
 * transposed and troupe's own blocked GEMM called directly in every form they serve; and the
 * blocked GEMM's rows the same bits wherever they lie among other rows. Which library serves
 * a shape is test_gemm_choice.c's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host/host_blas.h"
#include "host/host_choose.h"
#include "op_harness.h"
#include "troupe.h"

/* ---- every library computes ---------------------------------------------------------------- */

/* g's C against float64 sums of its A and B (floats), from C0 as it was before. */
static void check_products(const char *lib, const tr__gemm_args *g, const float *C0) {
  const float *A = g->A, *B = g->B;
  double *ref = malloc(sizeof(double) * (size_t)g->M * (size_t)g->N);
  float *got = malloc(sizeof(float) * (size_t)g->M * (size_t)g->N);
  assert_true(ref && got);
  for (int b = 0; b < g->batch; b++) {
    for (int i = 0; i < g->M; i++)
      for (int j = 0; j < g->N; j++) {
        double sum = 0;
        for (int k = 0; k < g->K; k++) {
          const float a = g->opa ? A[b * g->sa + (int64_t)k * g->lda + i] : A[b * g->sa + (int64_t)i * g->lda + k];
          const float bb = g->opb ? B[b * g->sb + (int64_t)j * g->ldb + k] : B[b * g->sb + (int64_t)k * g->ldb + j];
          sum += (double)a * bb;
        }
        const int64_t at = b * g->sc + (int64_t)i * g->ldc + j;
        ref[i * g->N + j] = g->alpha * sum + g->beta * (double)C0[at];
        got[i * g->N + j] = g->C[at];
      }
    char what[96];
    snprintf(what, sizeof what, "%s %c%c batch %d", lib, g->opa ? 'T' : 'N', g->opb ? 'T' : 'N', b);
    assert_true(th_check(what, got, ref, (size_t)g->M * g->N, TH_TOL_GEMM));
  }
  free(ref), free(got);
}

/* host:1, opened and bound to the calling thread (closed by the caller's list) */
static tr_device *bound_host(tr_device_list **l) {
  char err[256];
  if (tr_device_list_open(l, "host:1", err, sizeof err)) fail_msg("host:1: %s", err);
  tr_device *d = tr_device_list_at(*l, 0);
  tr_device_bind(d);
  return d;
}

/* Every library of the build, pinned, and auto: each transpose, leading dimensions padded,
 * alpha and beta, a strided batch, fp32 and bf16, against float64 (th_check). */
static void every_library_matches_float64_in_every_form(void **state) {
  (void)state;
  enum { BM = 70, BN = 90, BK = 80, PAD = 3, BATCH = 2 };
  const int lda = 96, ldb = 96, ldc = BN + PAD; /* >= every op's columns, + PAD */
  const int64_t sa = (int64_t)96 * lda, sb = (int64_t)96 * ldb, sc = (int64_t)BM * ldc;
  float *A = malloc(sizeof(float) * (size_t)sa * BATCH), *B = malloc(sizeof(float) * (size_t)sb * BATCH);
  float *C = malloc(sizeof(float) * (size_t)sc * BATCH), *C0 = malloc(sizeof(float) * (size_t)sc * BATCH);
  tr_bf16 *A16 = malloc(2 * (size_t)sa * BATCH), *B16 = malloc(2 * (size_t)sb * BATCH);
  assert_true(A && B && C && C0 && A16 && B16);
  th_rng r = th_rng_for(7);
  th_fill_normal(&r, A, (size_t)sa * BATCH, 1);
  th_fill_normal(&r, B, (size_t)sb * BATCH, 1);
  th_fill_normal(&r, C0, (size_t)sc * BATCH, 1);
  for (int64_t i = 0; i < sa * BATCH; i++) { /* rounded to bf16 and back: the bf16 values */
    uint32_t u;
    memcpy(&u, &A[i], 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&A[i], &u, 4);
    A16[i] = (tr_bf16)(u >> 16);
  }
  for (int64_t i = 0; i < sb * BATCH; i++) {
    uint32_t u;
    memcpy(&u, &B[i], 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&B[i], &u, 4);
    B16[i] = (tr_bf16)(u >> 16);
  }
  const char *pins[] = {"openblas", "onednn", "auto"};
  for (size_t p = 0; p < sizeof pins / sizeof pins[0]; p++) {
    setenv("TROUPE_GEMM", pins[p], 1);
    tr_device_list *l = NULL;
    char err[256];
    if (tr_device_list_open(&l, "host:1", err, sizeof err)) {
      assert_string_equal(pins[p], "onednn"); /* a build without libdnnl */
      continue;
    }
    tr_device *d = tr_device_list_at(l, 0);
    tr_device_bind(d);
    tr_stream *s = tr_device_stream(d);
    for (int t = 0; t < 8; t++) {
      const tr_op opa = (tr_op)(t & 1), opb = (tr_op)((t >> 1) & 1);
      const int bf16 = t >> 2;
      const float alpha = -1.5f, beta = 0.5f;
      memcpy(C, C0, sizeof(float) * (size_t)sc * BATCH);
      const int rc = bf16 ? tr_gemm_batched_bf16(s, opa, opb, BM, BN, BK, alpha, A16, lda, sa, B16,
                                                 ldb, sb, beta, C, ldc, sc, BATCH)
                          : tr_gemm_batched(s, opa, opb, BM, BN, BK, alpha, A, lda, sa, B, ldb, sb,
                                            beta, C, ldc, sc, BATCH);
      assert_int_equal(rc, 0);
      char what[64];
      snprintf(what, sizeof what, "%s %s", pins[p], bf16 ? "bf16" : "fp32");
      const tr__gemm_args g = {.opa = opa, .opb = opb, .M = BM, .N = BN, .K = BK, .alpha = alpha,
                               .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb,
                               .ldc = ldc, .sa = sa, .sb = sb, .sc = sc, .batch = BATCH};
      check_products(what, &g, C0);
    }
    tr_device_list_close(l);
  }
  unsetenv("TROUPE_GEMM");
  free(A), free(B), free(C), free(C0), free(A16), free(B16);
}

/* The row of the build's table of that name, or -1. */
static int row_named(const char *name) {
  for (int i = 0; i < tr__host_nlibs; i++)
    if (!strcmp(tr__host_libs[i]->name, name)) return i;
  return -1;
}

/* oneDNN on B transposed (host_onednn_bt.c) serves the forms whose B is not transposed, as
 * exactly as the others. Called directly: it serves a shape only where it measures fastest. */
static void onednn_on_b_transposed_matches_float64(void **state) {
  (void)state;
  const int row = row_named("onednn-bt");
  if (row < 0) skip(); /* a build without libdnnl */
  const tr__host_lib *bt = tr__host_libs[row];
  enum { BM = 33, BN = 70, BK = 45, BATCH = 2 };
  const int ld = 80; /* >= every op's columns */
  const int64_t stride = (int64_t)80 * ld;
  float *A = malloc(sizeof(float) * (size_t)stride * BATCH), *B = malloc(sizeof(float) * (size_t)stride * BATCH);
  float *C = malloc(sizeof(float) * (size_t)stride * BATCH), *C0 = malloc(sizeof(float) * (size_t)stride * BATCH);
  assert_true(A && B && C && C0);
  th_rng r = th_rng_for(11);
  th_fill_normal(&r, A, (size_t)stride * BATCH, 1);
  th_fill_normal(&r, B, (size_t)stride * BATCH, 1);
  th_fill_normal(&r, C0, (size_t)stride * BATCH, 1);
  tr_device_list *l = NULL;
  tr_device *d = bound_host(&l);
  for (int t = 0; t < 4; t++) {
    const tr_op opa = (tr_op)(t & 1);
    const int batch = t < 2 ? 1 : BATCH;
    tr__gemm_args g = {.opa = opa, .opb = TR_OP_N, .M = BM, .N = BN, .K = BK, .alpha = 0.75f,
                       .beta = t & 1 ? 0.0f : -0.5f, .A = A, .B = B, .C = C, .lda = ld,
                       .ldb = ld, .ldc = ld, .sa = stride, .sb = stride, .sc = stride,
                       .batch = batch};
    assert_true(bt->fits(&g));
    memcpy(C, C0, sizeof(float) * (size_t)stride * BATCH);
    assert_int_equal(bt->gemm(tr_device_stream(d), tr__host_lib_state(d, row), &g), 0);
    check_products("onednn-bt fp32", &g, C0);
    g.opb = TR_OP_T; /* what it leaves to the others */
    assert_false(bt->fits(&g));
  }
  tr_device_list_close(l);
  free(A), free(B), free(C), free(C0);
}

/* troupe's own blocked GEMM, or the test skipped on a CPU without AVX2 and FMA (where it
 * serves nothing). */
static const tr__host_lib *blocked_here(void) {
  const int row = row_named("blocked");
  assert_true(row >= 0);
  const tr__gemm_args probe = {.M = 1, .N = 1, .K = 1, .alpha = 1, .batch = 1};
  if (!tr__host_libs[row]->fits(&probe)) skip();
  return tr__host_libs[row];
}

/* troupe's own blocked GEMM (host_blocked.c), called directly: every form, against float64,
 * in a shape past each of its blocks' edges (rows past MC = 144 and not a multiple of 6,
 * columns past NC = 1024 and not a multiple of 16, depth past KC = 256 and not a multiple of
 * 8), with alpha and beta, beta 0 reading nothing of C (NaN there), and a strided batch. */
static void blocked_matches_float64_in_every_form(void **state) {
  (void)state;
  const tr__host_lib *bl = blocked_here();
  enum { BM = 150, BN = 1050, BK = 300, LD = 1056, BATCH = 2 };
  const int64_t stride = (int64_t)LD * LD; /* every operand, either way round */
  const size_t all = (size_t)stride * BATCH;
  float *A = malloc(sizeof(float) * all), *B = malloc(sizeof(float) * all);
  float *C = malloc(sizeof(float) * all), *C0 = malloc(sizeof(float) * all);
  assert_true(A && B && C && C0);
  th_rng r = th_rng_for(12);
  th_fill_normal(&r, A, all, 1);
  th_fill_normal(&r, B, all, 1);
  th_fill_normal(&r, C0, all, 1);
  tr_device_list *l = NULL;
  tr_device *d = bound_host(&l);
  for (int t = 0; t < 5; t++) {
    const int batch = t == 4 ? BATCH : 1;
    const float beta = t & 1 ? 0.0f : -0.5f;
    tr__gemm_args g = {.opa = (tr_op)(t & 1), .opb = (tr_op)((t >> 1) & 1), .M = BM, .N = BN,
                       .K = BK, .alpha = 0.75f, .beta = beta, .A = A, .B = B, .C = C,
                       .lda = LD, .ldb = LD, .ldc = LD, .sa = stride, .sb = stride, .sc = stride,
                       .batch = batch};
    memcpy(C, C0, sizeof(float) * all);
    if (beta == 0.0f)
      for (int i = 0; i < BM; i++) C[(size_t)i * LD] = NAN; /* read, it would spread */
    assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &g), 0);
    check_products("blocked fp32", &g, C0);
  }
  tr_device_list_close(l);
  free(A), free(B), free(C), free(C0);
}

/* Its rows are the same bits at any place among any rows: the rows [o, o + m) of a product
 * of 64 rows, multiplied on their own, for pieces at offsets that no block divides. */
static void blocked_rows_do_not_depend_on_the_rows_around_them(void **state) {
  (void)state;
  const tr__host_lib *bl = blocked_here();
  enum { RM = 64, RN = 80, RK = 300 };
  float *A = malloc(sizeof(float) * RM * RK), *B = malloc(sizeof(float) * RK * RN);
  float *whole = malloc(sizeof(float) * RM * RN), *part = malloc(sizeof(float) * RM * RN);
  assert_true(A && B && whole && part);
  th_rng r = th_rng_for(13);
  th_fill_normal(&r, A, (size_t)RM * RK, 1);
  th_fill_normal(&r, B, (size_t)RK * RN, 1);
  tr_device_list *l = NULL;
  tr_device *d = bound_host(&l);
  const int pieces[][2] = {{0, 16}, {5, 7}, {13, 24}, {40, 24}, {63, 1}};
  for (int t = 0; t < 2; t++) { /* NN (an input gradient), NT (a forward) */
    tr__gemm_args g = {.opb = (tr_op)t, .M = RM, .N = RN, .K = RK, .alpha = 1, .A = A, .B = B,
                       .C = whole, .lda = RK, .ldb = t ? RK : RN, .ldc = RN, .batch = 1};
    assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &g), 0);
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
      tr__gemm_args q = g;
      q.M = pieces[p][1];
      q.A = A + (size_t)pieces[p][0] * RK;
      q.C = part;
      assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &q), 0);
      if (memcmp(part, whole + (size_t)pieces[p][0] * RN, sizeof(float) * q.M * RN))
        fail_msg("N%c: rows %d..%d alone differ from the same rows among %d", t ? 'T' : 'N',
                 pieces[p][0], pieces[p][0] + q.M - 1, RM);
    }
  }
  tr_device_list_close(l);
  free(A), free(B), free(whole), free(part);
}

/* auto's choices measured here are kept nowhere: no file of choices */
static int setup(void **state) {
  (void)state;
  unsetenv("TROUPE_GEMM");
  return setenv("TROUPE_GEMM_CHOICES", "", 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_library_matches_float64_in_every_form),
      cmocka_unit_test(onednn_on_b_transposed_matches_float64),
      cmocka_unit_test(blocked_matches_float64_in_every_form),
      cmocka_unit_test(blocked_rows_do_not_depend_on_the_rows_around_them),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
