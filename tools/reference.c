/* reference.c — the yardstick of "fraction of the hardware" on host devices (WORKLOADS.md):
 * single-precision GEMM of the BLAS troupe links, square, one thread, in this process. */
#include <cblas.h>
#include <stdlib.h>

#include "cli.h"
#include "troupe.h"

double cli_sgemm_gflops(int n) {
  float *a = aligned_alloc(64, (size_t)n * n * sizeof *a);
  float *b = aligned_alloc(64, (size_t)n * n * sizeof *b);
  float *c = aligned_alloc(64, (size_t)n * n * sizeof *c);
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return 0;
  }
  for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 7);
  openblas_set_num_threads(1);
  double best = 0;
  for (int rep = 0; rep < 3; rep++) { /* the best of three: the machine's, not its noise */
    uint64_t t0 = tr_now_ns();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double gflops = 2.0 * n * n * (double)n / (double)(tr_now_ns() - t0);
    if (gflops > best) best = gflops;
  }
  free(a), free(b), free(c);
  return best;
}
