/* host_openblas.c — the host backend's GEMM on OpenBLAS's cblas_sgemm (-Dblas=openblas), or
 * any CBLAS. OpenBLAS has one thread setting for the whole process: it is set to 1 once, so
 * each host device computes on its own thread alone. No bf16: host_gemm.c converts. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "host_blas.h"

struct tr__host_blas {
  int unused;
};

static void one_thread(void) {
#ifdef TR_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

void tr__host_blas_describe(tr_device_info *info, char *lib, size_t lib_size) {
#ifdef TR_HAVE_OPENBLAS
  snprintf(lib, lib_size, "OpenBLAS");
  snprintf(info->isa, sizeof info->isa, "%s", openblas_get_corename());
#else
  snprintf(lib, lib_size, "CBLAS");
  snprintf(info->isa, sizeof info->isa, "unknown");
#endif
  info->bf16 = TR_BF16_CONVERTED;
}

int tr__host_blas_open(tr_device *d, tr__host_blas **out) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, one_thread);
  *out = calloc(1, sizeof **out);
  return *out ? 0 : tr__device_fail(d, TR_ENOMEM, "open: out of memory");
}

void tr__host_blas_close(tr__host_blas *b) { free(b); }

int tr__host_blas_gemm(tr_stream *s, tr__host_blas *b, const tr__gemm_args *g) {
  (void)s, (void)b;
  const float *A = g->A, *B = g->B;
  for (int i = 0; i < g->batch; i++)
    cblas_sgemm(CblasRowMajor, g->opa == TR_OP_T ? CblasTrans : CblasNoTrans,
                g->opb == TR_OP_T ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, g->alpha,
                A + i * g->sa, g->lda, B + i * g->sb, g->ldb, g->beta, g->C + i * g->sc, g->ldc);
  return 0;
}
