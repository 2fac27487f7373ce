/* host_tiny.c — the host backend's direct path for tiny GEMMs, where a library's call costs
 * more than the arithmetic.
 *
 * A BLAS packs both operands and clears or scales C before its kernel runs, microseconds
 * per call whatever the size: simplenet's 64x100x10 forward product took 4.5 µs in OpenBLAS's
 * sgemm, and about 2 in a cached oneDNN matmul, several times its arithmetic. Products of at
 * most TR__HOST_TINY_MNK multiply-adds run here instead (or, measured, whichever is faster:
 * host_choose.h), in one of two forms:
 *
 *   tiles  C'(p,q) = alpha * sum_k X(p,k) Y(k,q) + beta * C'(p,q), Y contiguous along q: a
 *          few rows by a few vectors of C' at a time, their sums in registers across k. C' is C
 *          (X = op(A), Y = op(B); op(B) first copied to scratch when it is B transposed), or
 *          C transposed (X = op(B), Y = op(A)^T, where op(A) is A transposed and so already
 *          contiguous along i): that one stores element by element, so it is taken only
 *          when C is too narrow for the first;
 *   dots   C(i,j) = alpha * op(A) row i . op(B) column j + beta * C(i,j), when both are
 *          contiguous along k (NT) and the product too narrow for tiles.
 *
 * Every element is one sum over k: in order for tiles, in 2 VL lanes then a fixed tree for
 * dots; which form runs depends only on the shape, so a result never depends on where the
 * operands lie. The loops are built twice (host_cpu.h): with AVX2 and FMA, which fuses each
 * multiply-add, and for the baseline. */
#include <stddef.h>
#include <stdio.h>

#include "host_blas.h"
#include "host_cpu.h"

enum { VL = 8 }; /* lanes of a vector: one AVX2 register, two SSE ones */

/* Loops over a tile's rows and vectors are unrolled, so that its sums stay in registers. */
#ifdef __clang__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

/* The compilers' vector extension rather than vectorised loops: GCC keeps the sums of a
 * loop-vectorised tile in memory across k, arrays of these stay in registers. */
typedef float vec __attribute__((vector_size(VL * sizeof(float))));

static inline void vload(vec *v, const float *p) { memcpy(v, p, sizeof *v); }

/* C'(p,q) = c[p * cp + q * cq], X(p,k) = x[p * xp + k * xk], Y(k,q) = y[k * yk + q] */
typedef struct tiny {
  int P, Q, K;
  const float *x;
  ptrdiff_t xp, xk;
  const float *y;
  ptrdiff_t yk;
  const float *edge; /* Y's last Q % VL columns, zero-padded to VL, rows ek apart */
  ptrdiff_t ek;
  float *c;
  ptrdiff_t cp, cq;
  float alpha, beta;
} tiny;

/* C' = alpha * sum + beta * C' for the w valid columns of one row of a tile (V vectors). */
static inline __attribute__((always_inline)) void tile_store(float *c, ptrdiff_t cq, const vec *sum,
                                                             const int V, int w, float alpha,
                                                             float beta) {
  if (cq == 1 && w == V * VL) {
    UNROLL for (int v = 0; v < V; v++) {
      vec r = alpha * sum[v], old;
      if (beta != 0.0f) { /* beta 0 reads nothing (C may hold NaN) */
        vload(&old, c + v * VL);
        r += beta * old;
      }
      memcpy(c + v * VL, &r, sizeof r);
    }
    return;
  }
  float s[4 * VL];
  memcpy(s, sum, (size_t)V * sizeof *sum);
  for (int j = 0; j < w; j++) c[j * cq] = beta == 0.0f ? alpha * s[j] : alpha * s[j] + beta * c[j * cq];
}

/* One tile: R rows from p0 (rows past P repeat the last one, computed and dropped) by V
 * vectors of Y from y (rows yk apart), of which w columns from q0 are C''s. R, V and `trans`
 * (C' is C transposed) are constants at every call. */
static inline __attribute__((always_inline)) void tile(const tiny *t, int p0, int q0, const float *y,
                                                       ptrdiff_t yk, const int R, const int V,
                                                       int w, const int trans) {
  vec acc[8][4] = {{{0}}};
  const float *xr[8];
  UNROLL for (int r = 0; r < R; r++) xr[r] = t->x + (ptrdiff_t)(p0 + r < t->P ? p0 + r : t->P - 1) * t->xp;
  const ptrdiff_t xk = t->xk;
  for (int k = 0; k < t->K; k++, y += yk) {
    vec yv[4];
    UNROLL for (int v = 0; v < V; v++) vload(&yv[v], y + v * VL);
    UNROLL for (int r = 0; r < R; r++) {
      const float xv = xr[r][k * xk];
      UNROLL for (int v = 0; v < V; v++) acc[r][v] += xv * yv[v];
    }
  }
  /* read once, before the stores (any of which could change *t, as far as GCC knows) */
  const ptrdiff_t cp = trans ? 1 : t->cp, cq = trans ? t->cp : 1;
  const float alpha = t->alpha, beta = t->beta;
  const int rows = t->P - p0 < R ? t->P - p0 : R;
  float *c = t->c + (ptrdiff_t)p0 * cp + (ptrdiff_t)q0 * cq;
  UNROLL for (int r = 0; r < R; r++) {
    vec row[4];
    UNROLL for (int v = 0; v < V; v++) row[v] = acc[r][v];
    if (r < rows) tile_store(c + (ptrdiff_t)r * cp, cq, row, V, w, alpha, beta);
  }
}

/* The tiles of R rows from p0: V vectors wide, then one vector, then the edge. */
static inline __attribute__((always_inline)) void tile_rows(const tiny *t, int p0, const int R,
                                                            const int V, const int trans) {
  int q0 = 0;
  for (; q0 + V * VL <= t->Q; q0 += V * VL) tile(t, p0, q0, t->y + q0, t->yk, R, V, V * VL, trans);
  for (; q0 + VL <= t->Q; q0 += VL) tile(t, p0, q0, t->y + q0, t->yk, R, 1, VL, trans);
  if (q0 < t->Q) tile(t, p0, q0, t->edge, t->ek, R, 1, t->Q - q0, trans);
}

/* A tile needs about 8 sums in flight, or its k loop waits on the latency of each
 * multiply-add: 5 rows by 2 vectors (10 sums, 13 of AVX2's 16 registers with the operands;
 * simplenet's 10-row gradient in two tiles), 8 rows by 1 where C' is narrower than 2
 * vectors, and a last lone row 4 vectors wide. Fewer rows than a tile's repeat the last
 * (wasted work, no waits). */
static inline __attribute__((always_inline)) void tiles(const tiny *t, const int trans) {
  int p0 = 0;
  if (t->Q < 2 * VL)
    for (; p0 + 4 < t->P; p0 += 8) tile_rows(t, p0, 8, 1, trans);
  for (; p0 + 1 < t->P; p0 += 5) tile_rows(t, p0, 5, 2, trans);
  if (p0 < t->P) tile_rows(t, p0, 1, 4, trans);
}

/* Tiles of C work on a copy of the problem: with -fno-strict-aliasing, a store to C could
 * otherwise change any field of *t, which would be reloaded after every one. (Tiles of C
 * transposed store element by element anyway, and with the copy GCC 12 spills sums.) */
TR__TARGET_V3 static void tiles_v3(const tiny *t, int trans) {
  const tiny u = *t;
  trans ? tiles(t, 1) : tiles(&u, 0);
}
static void tiles_base(const tiny *t, int trans) {
  const tiny u = *t;
  trans ? tiles(t, 1) : tiles(&u, 0);
}

/* C (i,j) = alpha * a row i . b row j + beta * C (i,j), rows contiguous along k: 4 rows of a
 * against one of b at a time, each sum in 2 VL lanes added up in a fixed tree, then the last
 * K % 2VL products in order. */
static inline __attribute__((always_inline)) void dots(int M, int N, int K, float alpha,
                                                       const float *a, ptrdiff_t lda,
                                                       const float *b, ptrdiff_t ldb, float beta,
                                                       float *C, ptrdiff_t ldc) {
  enum { R = 4 };
  const int K0 = K - K % (2 * VL);
  for (int i0 = 0; i0 < M; i0 += R) {
    const float *ar[R];
    UNROLL for (int r = 0; r < R; r++) ar[r] = a + (ptrdiff_t)(i0 + r < M ? i0 + r : M - 1) * lda;
    for (int j = 0; j < N; j++) {
      const float *bj = b + (ptrdiff_t)j * ldb;
      vec acc[R][2] = {{{0}}};
      for (int k = 0; k < K0; k += 2 * VL)
        UNROLL for (int v = 0; v < 2; v++) {
          vec bv, av;
          vload(&bv, bj + k + v * VL);
          UNROLL for (int r = 0; r < R; r++) {
            vload(&av, ar[r] + k + v * VL);
            acc[r][v] += av * bv;
          }
        }
      UNROLL for (int r = 0; r < R; r++) {
        float l[VL];
        const vec sum = acc[r][0] + acc[r][1];
        memcpy(l, &sum, sizeof l);
        float d = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        for (int k = K0; k < K; k++) d += ar[r][k] * bj[k];
        float *c = C + (ptrdiff_t)(i0 + r) * ldc + j;
        if (i0 + r < M) *c = beta == 0.0f ? alpha * d : alpha * d + beta * *c;
      }
    }
  }
}

TR__TARGET_V3 static void dots_v3(int M, int N, int K, float alpha, const float *a, ptrdiff_t lda,
                                 const float *b, ptrdiff_t ldb, float beta, float *C,
                                 ptrdiff_t ldc) {
  dots(M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}
static void dots_base(int M, int N, int K, float alpha, const float *a, ptrdiff_t lda,
                      const float *b, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc) {
  dots(M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

int tr__host_gemm_tiny(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc) {
  /* op(A) (i,k) = A[i * ais + k * aks], op(B) (k,j) = B[k * bks + j * bjs] */
  const ptrdiff_t ais = opa == TR_OP_N ? lda : 1, aks = opa == TR_OP_N ? 1 : lda;
  const ptrdiff_t bks = opb == TR_OP_N ? ldb : 1, bjs = opb == TR_OP_N ? 1 : ldb;
  /* NT (or NN with one column) that tiles would waste lanes on, or spend more copying
   * op(B) than multiplying with it */
  if (aks == 1 && bks == 1 && (M < VL || N < VL || K >= 4 * M)) {
    (tr__cpu_v3() ? dots_v3 : dots_base)(M, N, K, alpha, A, ais, B, bjs, beta, C, ldc);
    return 1;
  }
  /* C itself, unless op(A) is A transposed and either C is too narrow for tiles along j
   * (TN) or a copy of op(B) would cost more than storing C element by element (TT) */
  const int by_rows = opa == TR_OP_N || (opb == TR_OP_N ? N >= 2 * VL || N >= M : K < M);
  tiny t = {.K = K, .alpha = alpha, .beta = beta, .c = C, .cp = ldc};
  if (by_rows)
    t.P = M, t.Q = N, t.x = A, t.xp = ais, t.xk = aks, t.y = B, t.yk = bks;
  else
    t.P = N, t.Q = M, t.x = B, t.xp = bjs, t.xk = bks, t.y = A, t.yk = lda;
  /* into scratch: op(B) when it is B transposed (zero-padded to whole vectors), or else
   * Y's ragged edge */
  const int copy_y = by_rows && opb == TR_OP_T, Qv = (t.Q + VL - 1) / VL * VL, edge = t.Q % VL;
  float *y = tr__host_scratch(s, TR__SCRATCH_OPS, (size_t)K * (copy_y ? (size_t)Qv : VL) * sizeof(float));
  if (!y) return 0;
  if (copy_y) {
    for (int j = 0; j < t.Q; j++) /* reading B's rows in order */
      for (int k = 0; k < K; k++) y[(ptrdiff_t)k * Qv + j] = B[(ptrdiff_t)j * ldb + k];
    for (int k = 0; k < K; k++)
      for (int j = t.Q; j < Qv; j++) y[(ptrdiff_t)k * Qv + j] = 0.0f;
    t.y = y, t.yk = Qv;
  }
  t.edge = t.y + (t.Q - edge), t.ek = t.yk;
  if (edge && !copy_y) { /* a few floats a row: loops, not calls to memcpy */
    for (int i = 0; i < K * VL; i++) y[i] = 0.0f;
    for (int k = 0; k < K; k++)
      for (int j = 0; j < edge; j++) y[k * VL + j] = t.edge[(ptrdiff_t)k * t.yk + j];
    t.edge = y, t.ek = VL;
  }
  (tr__cpu_v3() ? tiles_v3 : tiles_base)(&t, !by_rows);
  return 1;
}

/* ---- as a row of host_blas.h's table ---------------------------------------------------- */

static void describe(tr__host_lib_info *out) {
  snprintf(out->label, sizeof out->label, "direct");
  snprintf(out->isa, sizeof out->isa, "%s", tr__cpu_v3() ? "avx2+fma" : "sse2");
  out->bf16 = TR_BF16_CONVERTED;
}

static int tiny_gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  (void)state;
  for (int b = 0; b < g->batch; b++)
    if (!tr__host_gemm_tiny(s, g->opa, g->opb, g->M, g->N, g->K, g->alpha,
                            (const float *)g->A + b * g->sa, g->lda, (const float *)g->B + b * g->sb,
                            g->ldb, g->beta, g->C + b * g->sc, g->ldc))
      return tr__device_fail(s->dev, TR_ENOMEM, "gemm: %dx%dx%d on the direct path: no scratch "
                             "for its copy of B: out of memory", g->M, g->N, g->K);
  return 0;
}

static int fits(const tr__gemm_args *g) {
  return (int64_t)g->M * g->N * g->K <= TR__HOST_TINY_REACH;
}

const tr__host_lib tr__host_tiny = {
    .name = "tiny", .describe = describe, .gemm = tiny_gemm, .fits = fits,
    .fits_what = "small products only"};
