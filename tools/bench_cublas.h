/* bench_cublas.h — cuBLAS called directly, the reference of `troupe bench gpu`: its own
 * handle, stream and buffers on a GPU, nothing of troupe's in between. */
#ifndef TR_BENCH_CUBLAS_H
#define TR_BENCH_CUBLAS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bench_gemm_kind {
  BENCH_GEMM_FP32, /* cublasSgemm, CUBLAS_DEFAULT_MATH */
  BENCH_GEMM_TF32, /* cublasSgemm, CUBLAS_TF32_TENSOR_OP_MATH */
  BENCH_GEMM_BF16  /* cublasGemmEx, bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F */
} bench_gemm_kind;

/* GFLOP/s of C (M,N) = A (M,K) @ B (N,K)^T (a linear layer's forward, row-major) on GPU
 * `ordinal`: the best of three timed runs of at least `seconds` each (CUDA events). 0, or
 * -1 with `err` saying why (no CUDA in this build: "this build of troupe has no CUDA
 * backend"). */
int bench_cublas_gemm(int ordinal, bench_gemm_kind kind, int M, int N, int K, double seconds,
                      double *gflops, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
