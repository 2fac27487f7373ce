/* host_onednn_bt.c — oneDNN on B transposed: a row of host_blas.h's table for the products
 * whose B is not transposed (op(B) = B), which copies B into scratch memory transposed and
 * has oneDNN multiply by that instead (op(B) = the copy, transposed back).
 *
 * oneDNN's kernels for a form differ by instruction set. Limited to AVX2, its matmul ran a
 * linear layer's input gradient (dout @ W, NN 256x1024x1024) at 62 GFLOP/s and the same
 * product with W transposed (NT, as the forward) at 98; the copy of W is 4 MiB, a small
 * fraction of the product's time. On AVX-512 both forms run alike and the copy is lost time.
 * So this is one more candidate, measured beside the others for each shape (host_choose.h),
 * and it serves only where it is faster. A row of C is oneDNN's NT sum, whatever M is, as
 * oneDNN's own row's are. */
#include <stdio.h>

#include "host_blas.h"

enum { TILE = 16 };

/* out (N x K, rows K apart) = B (K x N, rows ldb apart) transposed, in tiles that stay in
 * the caches on both sides. */
static void transpose(float *out, const float *B, int K, int N, int ldb) {
  for (int k0 = 0; k0 < K; k0 += TILE)
    for (int n0 = 0; n0 < N; n0 += TILE) {
      const int k1 = k0 + TILE < K ? k0 + TILE : K, n1 = n0 + TILE < N ? n0 + TILE : N;
      for (int n = n0; n < n1; n++)
        for (int k = k0; k < k1; k++) out[(size_t)n * K + k] = B[(size_t)k * ldb + n];
    }
}

static void describe(tr__host_lib_info *out) {
  tr__host_onednn.describe(out);
  snprintf(out->label + strlen(out->label), sizeof out->label - strlen(out->label), ", B^T");
}

static int open_(tr_device *d, void **state) { return tr__host_onednn.open(d, state); }
static void close_(void *state) { tr__host_onednn.close(state); }

static int fits(const tr__gemm_args *g) { return g->opb == TR_OP_N && !g->bf16; }

static int gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  const size_t one = (size_t)g->K * (size_t)g->N;
  float *bt = tr__host_scratch(s, TR__SCRATCH_TRANS, one * (size_t)g->batch * sizeof(float));
  if (bt == NULL)
    return tr__device_fail(s->dev, TR_ENOMEM, "gemm: B transposed (%dx%d x%d): out of memory",
                           g->K, g->N, g->batch);
  const float *B = g->B;
  for (int i = 0; i < g->batch; i++) transpose(bt + i * one, B + i * g->sb, g->K, g->N, g->ldb);
  tr__gemm_args t = *g;
  t.opb = TR_OP_T;
  t.B = bt;
  t.ldb = g->K;
  t.sb = (int64_t)one;
  return tr__host_onednn.gemm(s, state, &t);
}

const tr__host_lib tr__host_onednn_bt = {.name = "onednn-bt", .describe = describe, .open = open_,
                                         .close = close_, .gemm = gemm, .fits = fits,
                                         .fits_what = "products whose B is not transposed"};
