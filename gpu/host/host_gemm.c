/* host_gemm.c — the host backend's GEMM slots: empty sums and tiny products here
 * (host_tiny.c), the rest in the library (host_blas.h), a strided batch in one call. */
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

static int gemm(tr_stream *s, const tr__gemm_args *g) {
  if (g->K == 0 || g->alpha == 0.0f) {
    scale_c(s, g);
    return 0;
  }
  if ((int64_t)g->M * g->N * g->K <= TR__HOST_TINY_MNK) {
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

int tr__host_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  const tr__gemm_args g = {.opa = opa, .opb = opb, .M = M, .N = N, .K = K, .alpha = alpha,
                           .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb,
                           .ldc = ldc, .batch = 1};
  return gemm(s, &g);
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
