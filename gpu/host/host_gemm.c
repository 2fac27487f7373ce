/* host_gemm.c — the host backend's GEMM slots: empty sums here, every other product on the
 * library host_choose.h picks for its shape (host_blas.h's table: oneDNN, OpenBLAS, the
 * direct path of host_tiny.c), a strided batch in one call.
 *
 * bf16 operands go to the library as they are when it multiplies bf16 (oneDNN, native or
 * emulated). Otherwise they are widened to float32 first: exactly, so the products are those
 * of the bf16 values either way, summed in float32. */
#include "host_choose.h"

/* C = beta C for each matrix of the batch: what an empty sum (K 0, or alpha 0) leaves. */
static void scale_c(tr_stream *s, const tr__gemm_args *g) {
  for (int b = 0; b < g->batch; b++)
    for (int i = 0; i < g->M; i++) {
      float *c = g->C + b * g->sc + (ptrdiff_t)i * g->ldc;
      if (g->beta == 0.0f) memset(c, 0, (size_t)g->N * sizeof *c); /* NaN included, as BLAS */
      else tr__host_scale(s, c, g->beta, (size_t)g->N);
    }
}

/* The elements a batch of (rows, cols) matrices spans, rows ld and matrices `stride` apart. */
static size_t span(int batch, int64_t stride, int rows, int cols, int ld) {
  return (size_t)((int64_t)(batch - 1) * stride + (int64_t)(rows - 1) * ld + cols);
}

/* `n` bf16 from `from` widened into `to`. */
static void widen(float *to, const tr_bf16 *from, size_t n) {
  for (size_t i = 0; i < n; i++) to[i] = tr__bf16_widen(from[i]);
}

/* How row i multiplies bf16 (a test's rows, which are not the build's: converted). */
static tr_bf16_support row_bf16(const tr__host_lib *row, int i) {
  return i < tr__host_nlibs && tr__host_libs[i] == row ? tr__host_lib_info_of(i)->bf16
                                                       : TR_BF16_CONVERTED;
}

/* g on row (index i of the table it was chosen from), its operands widened first when they
 * are bf16 and the row multiplies only float32. */
static int run(tr_stream *s, const tr__host_lib *row, int i, const tr__gemm_args *g) {
  void *state = i < tr__host_nlibs && tr__host_libs[i] == row ? tr__host_lib_state(s->dev, i) : NULL;
  if (!g->bf16 || row_bf16(row, i) != TR_BF16_CONVERTED) return row->gemm(s, state, g);
  const size_t na = span(g->batch, g->sa, g->opa == TR_OP_N ? g->M : g->K,
                         g->opa == TR_OP_N ? g->K : g->M, g->lda),
               nb = span(g->batch, g->sb, g->opb == TR_OP_N ? g->K : g->N,
                         g->opb == TR_OP_N ? g->N : g->K, g->ldb);
  float *wide = tr__host_scratch(s, TR__SCRATCH_WIDE, (na + nb) * sizeof(float));
  if (!wide)
    return tr__device_fail(s->dev, TR_ENOMEM, "gemm_bf16: %zu floats of scratch: out of memory",
                           na + nb);
  widen(wide, g->A, na);
  widen(wide + na, g->B, nb);
  tr__gemm_args w = *g;
  w.A = wide, w.B = wide + na, w.bf16 = 0;
  return row->gemm(s, state, &w);
}

static int gemm(tr_stream *s, const tr__gemm_args *g) {
  if (g->K == 0 || g->alpha == 0.0f) {
    scale_c(s, g);
    return 0;
  }
  const tr__host_lib *row;
  int i;
  const int rc = tr__host_gemm_choose(s, g, run, &row, &i);
  return rc ? rc : run(s, row, i, g);
}

int tr__host_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                       int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                       int batch) {
  const tr__gemm_args g = {.opa = opa, .opb = opb, .M = M, .N = N, .K = K, .alpha = alpha,
                     .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc,
                     .sa = stride_a, .sb = stride_b, .sc = stride_c, .batch = batch, .bf16 = 1};
  return gemm(s, &g);
}

int tr__host_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  return tr__host_gemm_batched(s, opa, opb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                               0, 1);
}

int tr__host_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                          const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                          int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                          int batch) {
  const tr__gemm_args g = {.opa = opa, .opb = opb, .M = M, .N = N, .K = K, .alpha = alpha,
                           .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb,
                           .ldc = ldc, .sa = stride_a, .sb = stride_b, .sc = stride_c,
                           .batch = batch};
  return gemm(s, &g);
}
