/* reference.c — the yardstick of "fraction of the hardware" on host devices (docs/WORKLOADS.md):
 * single-precision GEMM of the BLAS troupe links, square, one thread, in this process:
 * oneDNN's dnnl_sgemm (the default), or OpenBLAS's cblas_sgemm (-Dblas=openblas). */
#include <stdlib.h>

#include "cli.h"
#include "troupe.h"

#ifdef TR_BLAS_ONEDNN
#include <oneapi/dnnl/dnnl.h>

extern void omp_set_num_threads(int n); /* libgomp's, oneDNN's runtime */

/* row-major C = A B, as the column-major C^T = B^T A^T */
static void sgemm(int n, const float *a, const float *b, float *c) {
  omp_set_num_threads(1);
  dnnl_sgemm('N', 'N', n, n, n, 1.0f, b, n, a, n, 0.0f, c, n);
}
#else
#include <cblas.h>

static void sgemm(int n, const float *a, const float *b, float *c) {
  openblas_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}
#endif

double cli_sgemm_gflops(int n) {
  float *a = aligned_alloc(64, (size_t)n * n * sizeof *a);
  float *b = aligned_alloc(64, (size_t)n * n * sizeof *b);
  float *c = aligned_alloc(64, (size_t)n * n * sizeof *c);
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return 0;
  }
  for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 7);
  /* The median of five, as the training window is a typical stretch, not the best one. */
  enum { REPS = 5 };
  double gflops[REPS];
  for (int rep = 0; rep < REPS; rep++) {
    uint64_t t0 = tr_now_ns();
    sgemm(n, a, b, c);
    gflops[rep] = 2.0 * n * n * (double)n / (double)(tr_now_ns() - t0);
  }
  for (int i = 1; i < REPS; i++) /* insertion sort: five numbers */
    for (int j = i; j > 0 && gflops[j] < gflops[j - 1]; j--) {
      double t = gflops[j];
      gflops[j] = gflops[j - 1];
      gflops[j - 1] = t;
    }
  free(a), free(b), free(c);
  return gflops[REPS / 2];
}
