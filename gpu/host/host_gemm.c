/* host_gemm.c — the host backend's GEMM slots: empty sums and tiny products here
 * (host_tiny.c), the rest in the library (host_blas.h), a strided batch in one call.
 *
 * bf16 operands go to the library as they are when it multiplies bf16 (tr_device_info.bf16
 * native or emulated). Otherwise, and for products the direct path takes, they are widened
 * to float32 first: exactly, so the products are those of the bf16 values either way, summed
 * in float32. */
#include "host_blas.h"

/* C = beta C for each matrix of the batch: what an empty sum (K 0, or alpha 0) leaves. */
static void scale_c(tr_stream *s, const tr__gemm_args *g) {
  for (int b = 0; b < g->batch; b++)
    for (int i = 0; i < g->M; i++) {
      float *c = g->C + b * g->sc + (ptrdiff_t)i * g->ldc;
      if (g->beta == 0.0f) memset(c, 0, (size_t)g->N * sizeof *c); /* NaN included, as BLAS */
      else tr__host_scale(s, c, g->beta, (size_t)g->N);
    }
}

/* Where the direct path beats the library (measured against oneDNN on one Zen 5 thread):
 * products of at most TR__HOST_TINY_MNK multiply-adds, a quarter of that for NT ones, which it
 * begins by copying B transposed (simplenet's 64x100x10 stays: 2.0 µs, oneDNN's 2.2). */
static int tiny(const tr__gemm_args *g) {
  const int64_t mnk = (int64_t)g->M * g->N * g->K;
  const int nt = g->opa == TR_OP_N && g->opb == TR_OP_T;
  return mnk <= (nt ? TR__HOST_TINY_MNK / 4 : TR__HOST_TINY_MNK);
}

static int gemm(tr_stream *s, const tr__gemm_args *g) {
  if (g->K == 0 || g->alpha == 0.0f) {
    scale_c(s, g);
    return 0;
  }
  if (tiny(g)) {
    int ran = 1;
    for (int b = 0; b < g->batch && ran; b++)
      ran = tr__host_gemm_tiny(s, g->opa, g->opb, g->M, g->N, g->K, g->alpha,
                               (const float *)g->A + b * g->sa, g->lda,
                               (const float *)g->B + b * g->sb, g->ldb, g->beta, g->C + b * g->sc,
                               g->ldc);
    if (ran) return 0;
  }
  return tr__host_blas_gemm(s, tr__host_blas_of(s->dev), g);
}

/* The elements a batch of (rows, cols) matrices spans, rows ld and matrices `stride` apart. */
static size_t span(int batch, int64_t stride, int rows, int cols, int ld) {
  return (size_t)((int64_t)(batch - 1) * stride + (int64_t)(rows - 1) * ld + cols);
}

/* `n` bf16 from `from` widened into `to`. */
static void widen(float *to, const tr_bf16 *from, size_t n) {
  for (size_t i = 0; i < n; i++) to[i] = tr__bf16_widen(from[i]);
}

int tr__host_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                       int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                       int batch) {
  tr__gemm_args g = {.opa = opa, .opb = opb, .M = M, .N = N, .K = K, .alpha = alpha,
                     .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc,
                     .sa = stride_a, .sb = stride_b, .sc = stride_c, .batch = batch, .bf16 = 1};
  if (K == 0 || alpha == 0.0f) {
    scale_c(s, &g);
    return 0;
  }
  if (s->dev->info.bf16 != TR_BF16_CONVERTED && !tiny(&g))
    return tr__host_blas_gemm(s, tr__host_blas_of(s->dev), &g);
  const size_t na = span(batch, stride_a, opa == TR_OP_N ? M : K, opa == TR_OP_N ? K : M, lda),
               nb = span(batch, stride_b, opb == TR_OP_N ? K : N, opb == TR_OP_N ? N : K, ldb);
  float *wide = tr__host_scratch(s, TR__SCRATCH_WIDE, (na + nb) * sizeof(float));
  if (!wide)
    return tr__device_fail(s->dev, TR_ENOMEM, "gemm_bf16: %zu floats of scratch: out of memory",
                           na + nb);
  widen(wide, A, na);
  widen(wide + na, B, nb);
  g.A = wide, g.B = wide + na, g.bf16 = 0;
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
