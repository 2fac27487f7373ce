/* bench_cublas_none.c — bench_cublas.h in a build without the CUDA backend. */
#include <stdio.h>

#include "bench_cublas.h"

int bench_cublas_gemm(int ordinal, bench_gemm_kind kind, int M, int N, int K, double seconds,
                      double *gflops, char *err, size_t err_size) {
  (void)ordinal, (void)kind, (void)M, (void)N, (void)K, (void)seconds;
  *gflops = 0;
  snprintf(err, err_size, "this build of troupe has no CUDA backend");
  return -1;
}
