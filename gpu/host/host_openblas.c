/* host_openblas.c — the host backend's GEMM on OpenBLAS's cblas_sgemm, or any CBLAS: the
 * row tr__host_openblas of host_blas.h's table, in every build. OpenBLAS has one thread
 * setting for the whole process: it is set to 1 once, so each host device computes on its
 * own thread alone. No bf16: host_gemm.c widens for it. No state of its own.
 *
 * Its sgemm computes a row of C by a kernel that depends on the row's place in blocks of
 * rows (12 on Haswell: a row at another offset, or in the last partial block, differs in the
 * last bits), so its rows vary with the rows around them (rows_vary). Padding the rows to
 * whole blocks would not help: a micro-batch's row 0 is the batch's row 32, another place
 * in its block, and the same holds with the product transposed (the rows then OpenBLAS's
 * columns). Checked on 0.3.21: its Cooperlake kernels (AVX-512) give every row the same bits
 * at any offset, its Haswell kernels (AVX2) do not, so one flag for the library is kept. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_blas.h"

static void one_thread(void) {
#ifdef TR_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

static void describe(tr__host_lib_info *out) {
#ifdef TR_HAVE_OPENBLAS
#ifdef OPENBLAS_VERSION /* " OpenBLAS 0.3.21 " */
  const char *version = OPENBLAS_VERSION;
  snprintf(out->label, sizeof out->label, "%s", version + strspn(version, " "));
  for (size_t n = strlen(out->label); n && out->label[n - 1] == ' ';) out->label[--n] = 0;
#else
  snprintf(out->label, sizeof out->label, "OpenBLAS");
#endif
  snprintf(out->isa, sizeof out->isa, "%s", openblas_get_corename());
#else
  snprintf(out->label, sizeof out->label, "CBLAS");
  snprintf(out->isa, sizeof out->isa, "unknown");
#endif
  out->bf16 = TR_BF16_CONVERTED;
}

static int open_(tr_device *d, void **out) {
  (void)d;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, one_thread);
  *out = NULL;
  return 0;
}

static int gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  (void)s, (void)state;
  const float *A = g->A, *B = g->B;
  for (int i = 0; i < g->batch; i++)
    cblas_sgemm(CblasRowMajor, g->opa == TR_OP_T ? CblasTrans : CblasNoTrans,
                g->opb == TR_OP_T ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, g->alpha,
                A + i * g->sa, g->lda, B + i * g->sb, g->ldb, g->beta, g->C + i * g->sc, g->ldc);
  return 0;
}

const tr__host_lib tr__host_openblas = {
    .name = "openblas", .describe = describe, .open = open_, .gemm = gemm, .rows_vary = 1};
