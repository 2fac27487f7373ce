/* cuda_blas.cu — GEMM of the CUDA backend through cuBLAS.
 *
 * cuBLAS is column-major and the API row-major. A row-major (R,C) matrix with row stride ld
 * is, read column-major, its (C,R) transpose with the same ld. So C = op(A) op(B) in
 * row-major is C^T = op(B)^T op(A)^T in column-major: the same call with A and B swapped
 * and M and N swapped, each keeping its own transpose flag.
 *
 * Precision: exact FP32 (CUBLAS_DEFAULT_MATH) unless tr_device_set_tf32 asked for TF32
 * tensor cores, which round the inputs to 10-bit mantissas. bf16 operands (tr_gemm_bf16) go
 * through cublasGemmStridedBatchedEx with float32 C and CUBLAS_COMPUTE_32F: the tensor cores
 * multiply the bf16 values exactly and add in float32.
 */
#include "cuda_impl.h"

/* The workspace cuBLAS recommends per handle: 32 MiB on Hopper and later, 4 MiB before. */
static size_t blas_workspace_bytes(const tr_device *d) {
  return (size_t)(d->info.cc_major >= 9 ? 32 : 4) << 20;
}

int tr__cuda_blas_handle(tr_stream *s, cublasHandle_t *out) {
  tr__cuda_stream *cs = tr__cu_stream(s);
  if (!cs->blas) {
    tr_device *d = s->dev;
    if (s->capturing) /* a first GEMM while recording: the handle's set-up cannot be recorded */
      return tr__device_fail(d, TR_ESTATE, "cuBLAS handle of stream '%s': not while it captures",
                             s->name);
    const size_t ws = blas_workspace_bytes(d);
    if (!cs->blas_workspace)
      TR__CU(d, cudaMallocFromPoolAsync(&cs->blas_workspace, ws, tr__cu_dev(d)->pool, cs->st));
    cublasHandle_t h;
    TR__CUBLAS(d, cublasCreate(&h));
    /* the workspace after the stream: cublasSetStream resets it to cuBLAS's own */
    cublasStatus_t st = cublasSetStream(h, cs->st);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetWorkspace(h, cs->blas_workspace, ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasSetMathMode(h, d->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(h);
      return tr__cublas_fail(d, st, "cublasSetStream/cublasSetWorkspace/cublasSetMathMode",
                             __FILE__, __LINE__);
    }
    cs->blas = h;
  }
  *out = cs->blas;
  return 0;
}

static cublasOperation_t tr__cublas_op(tr_op op) { return op == TR_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* The stream's GPU made current, and its handle. */
static int blas_enter(tr_stream *s, cublasHandle_t *h) {
  TR__CU_ENTER(s->dev);
  return tr__cuda_blas_handle(s, h);
}

int tr__cuda_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc) {
  tr_device *d = s->dev;
  cublasHandle_t h;
  int rc = blas_enter(s, &h);
  if (rc) return rc;
  TR__CUBLAS(d, cublasSgemm(h, tr__cublas_op(opb), tr__cublas_op(opa), N, M, K, &alpha, B, ldb,
                            A, lda, &beta, C, ldc));
  return 0;
}

int tr__cuda_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                       int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                       int batch) {
  tr_device *d = s->dev;
  cublasHandle_t h;
  int rc = blas_enter(s, &h);
  if (rc) return rc;
  TR__CUBLAS(d, cublasGemmStridedBatchedEx(h, tr__cublas_op(opb), tr__cublas_op(opa), N, M, K,
                                           &alpha, B, CUDA_R_16BF, ldb, (long long)stride_b, A,
                                           CUDA_R_16BF, lda, (long long)stride_a, &beta, C,
                                           CUDA_R_32F, ldc, (long long)stride_c, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

int tr__cuda_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K,
                          float alpha, const float *A, int lda, int64_t stride_a,
                          const float *B, int ldb, int64_t stride_b, float beta, float *C,
                          int ldc, int64_t stride_c, int batch) {
  tr_device *d = s->dev;
  cublasHandle_t h;
  int rc = blas_enter(s, &h);
  if (rc) return rc;
  TR__CUBLAS(d, cublasSgemmStridedBatched(h, tr__cublas_op(opb), tr__cublas_op(opa), N, M, K,
                                          &alpha, B, ldb, (long long)stride_b, A, lda,
                                          (long long)stride_a, &beta, C, ldc,
                                          (long long)stride_c, batch));
  return 0;
}
