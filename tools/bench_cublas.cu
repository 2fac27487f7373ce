/* bench_cublas.cu — the reference of `troupe bench gpu`: cuBLAS's own GEMM, timed with CUDA
 * events on a stream of its own (bench_cublas.h). */
#include "bench_cublas.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

namespace {

struct gemm_run {
  cudaStream_t st = nullptr;
  cublasHandle_t h = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  void *a = nullptr, *b = nullptr, *c = nullptr;
};

void release(gemm_run &r) {
  if (r.h) cublasDestroy(r.h);
  if (r.t0) cudaEventDestroy(r.t0);
  if (r.t1) cudaEventDestroy(r.t1);
  cudaFree(r.a), cudaFree(r.b), cudaFree(r.c);
  if (r.st) cudaStreamDestroy(r.st);
  (void)cudaGetLastError();
}

/* Row-major C (M,N) = A (M,K) B^T is, read column-major, C^T (N,M) = B A^T: cuBLAS's
 * (T, N) with B first and the sizes swapped, as tr_gemm(N, T) calls it for a linear layer. */
cublasStatus_t gemm(gemm_run &r, bench_gemm_kind kind, int M, int N, int K) {
  const float one = 1.0f, zero = 0.0f;
  if (kind == BENCH_GEMM_BF16)
    return cublasGemmEx(r.h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, r.b, CUDA_R_16BF, K, r.a,
                        CUDA_R_16BF, K, &zero, r.c, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
  return cublasSgemm(r.h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, (const float *)r.b, K,
                     (const float *)r.a, K, &zero, (float *)r.c, N);
}

}  // namespace

#define CHECK(call, what)                                                                     \
  do {                                                                                        \
    if ((call) != 0) {                                                                        \
      snprintf(err, err_size, "%s failed (%s)", what, cudaGetErrorString(cudaGetLastError())); \
      release(r);                                                                             \
      return -1;                                                                              \
    }                                                                                         \
  } while (0)

extern "C" int bench_cublas_gemm(int ordinal, bench_gemm_kind kind, int M, int N, int K,
                                 double seconds, double *gflops, char *err, size_t err_size) {
  gemm_run r;
  *gflops = 0;
  const size_t el = kind == BENCH_GEMM_BF16 ? 2 : 4;
  CHECK(cudaSetDevice(ordinal), "cudaSetDevice");
  CHECK(cudaStreamCreateWithFlags(&r.st, cudaStreamNonBlocking), "cudaStreamCreate");
  CHECK(cudaMalloc(&r.a, (size_t)M * K * el), "cudaMalloc");
  CHECK(cudaMalloc(&r.b, (size_t)N * K * el), "cudaMalloc");
  CHECK(cudaMalloc(&r.c, (size_t)M * N * 4), "cudaMalloc");
  /* small values, so no product overflows: 0x3c00 as bf16 is 2^-7, as a float's half */
  CHECK(cudaMemsetAsync(r.a, 0x3c, (size_t)M * K * el, r.st), "cudaMemset");
  CHECK(cudaMemsetAsync(r.b, 0x3c, (size_t)N * K * el, r.st), "cudaMemset");
  CHECK(cudaEventCreate(&r.t0), "cudaEventCreate");
  CHECK(cudaEventCreate(&r.t1), "cudaEventCreate");
  CHECK(cublasCreate(&r.h), "cublasCreate");
  CHECK(cublasSetStream(r.h, r.st), "cublasSetStream");
  CHECK(cublasSetMathMode(r.h, kind == BENCH_GEMM_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                       : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  CHECK(gemm(r, kind, M, N, K), "cuBLAS GEMM"); /* warm: heuristics, kernels loaded */
  CHECK(cudaStreamSynchronize(r.st), "cudaStreamSynchronize");
  double best = INFINITY;
  long iters = 8;
  for (int rep = 0; rep < 3; rep++) {
    for (;;) {
      CHECK(cudaEventRecord(r.t0, r.st), "cudaEventRecord");
      for (long i = 0; i < iters; i++) CHECK(gemm(r, kind, M, N, K), "cuBLAS GEMM");
      CHECK(cudaEventRecord(r.t1, r.st), "cudaEventRecord");
      CHECK(cudaEventSynchronize(r.t1), "cudaEventSynchronize");
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, r.t0, r.t1), "cudaEventElapsedTime");
      const double dt = ms * 1e-3;
      if (dt >= seconds || iters > (1l << 24)) {
        if (dt / (double)iters < best) best = dt / (double)iters;
        break;
      }
      iters = dt <= 0 ? iters * 2 : (long)(iters * 1.2 * seconds / dt) + 1;
    }
  }
  release(r);
  *gflops = 2.0 * M * N * K / best * 1e-9;
  return 0;
}
