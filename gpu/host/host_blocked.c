/* host_blocked.c — troupe's own GEMM for CPUs with AVX2 and FMA: a row of host_blas.h's
 * table, measured beside the libraries for each shape (host_choose.h) and serving where it is
 * the fastest.
 *
 * Why one of our own: limited to AVX2, OpenBLAS's Haswell kernels are the fastest for a
 * linear layer's forward and input gradient, but a row of their C takes other bits at another
 * place in their blocks of rows (host_openblas.c), so under TROUPE_GEMM=auto they serve only
 * weight gradients, and oneDNN's AVX2 kernels are slower on those shapes. This one computes
 * every element of C as one sum over k in order, in blocks of KC that depend on K alone,
 * whatever M is and wherever the row lies: a micro-batch's rows are the whole batch's.
 *
 * The loops are the classic blocked GEMM (Goto; BLIS's order): for each NC columns of op(B)
 * and KC of its rows, op(B) is packed into panels NR columns wide; for each MC rows of op(A),
 * op(A) is packed into panels MR rows high; a micro-kernel multiplies a panel of each into
 * MR x NR sums held in twelve AVX2 registers. Panels past an edge are padded with zeros, and
 * only C's own elements are written. C = alpha sum + beta C after the first KC, C += alpha
 * sum after each later one. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "host_blas.h"
#include "host_cpu.h"

enum {
  MR = 6,    /* rows of a micro-tile: 6 x 2 sums + 2 of op(B) + 1 of op(A) = 15 registers */
  NR = 16,   /* its columns: two vectors of 8 */
  KC = 256,  /* op(B)'s rows packed at once: a panel of KC x NR floats stays in L1 */
  MC = 144,  /* op(A)'s rows packed at once: MC x KC floats stay in L2 */
  NC = 1024, /* op(B)'s columns packed at once: KC x NC floats in L3 */
};
/* op(A)'s block, SLACK (pack_a's last column of 8 ends 2 floats past it; 8 keep op(B)'s
 * 32-byte aligned), op(B)'s block */
enum { SLACK = 8 };
/* Bumped with every change to the kernel's speed: the file of choices keys its decisions by
 * it (host_choose.c), so that a faster kernel is measured again. 2: B packed row by row, C
 * fetched under the sums. */
enum { REVISION = 2 };
#define PACK_FLOATS ((size_t)MC * KC + SLACK + (size_t)KC * NC)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* op(X)(r, k): X row-major, transposed or not */
#define AT(X, ld, trans, r, k) \
  ((trans) ? (X)[(size_t)(k) * (ld) + (r)] : (X)[(size_t)(r) * (ld) + (k)])

TR__TARGET_V3 static inline void transpose8(__m256 *r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* op(A)'s rows [i0, i0 + m), columns [k0, k0 + kc), as panels of MR rows: p[panel][k][r].
 * A as it is (a linear layer's forward and input gradient): whole panels read 8 x 8 at a time
 * (the 6 rows and 2 of zeros) and turned in registers; each column of 8 stored whole, its 2
 * zeros under the next column's first 2 (PACK_FLOATS holds SLACK for the last one's). A
 * transposed: a panel's k-th column is 6 floats in a row of A, copied 4 + 2. */
TR__TARGET_V3 static void pack_a(float *p, const float *A, int lda, int trans, int i0, int m,
                                 int k0, int kc) {
  for (int ip = 0; ip < m; ip += MR, p += (size_t)kc * MR) {
    const int rows = m - ip < MR ? m - ip : MR;
    int k = 0;
    if (rows == MR && !trans)
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int q = 0; q < MR; q++)
          r[q] = _mm256_loadu_ps(A + (size_t)(i0 + ip + q) * lda + k0 + k);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int q = 0; q < 8; q++) _mm256_storeu_ps(p + (k + q) * MR, r[q]);
      }
    else if (rows == MR)
      for (; k < kc; k++) {
        const float *a = A + (size_t)(k0 + k) * lda + i0 + ip;
        _mm_storeu_ps(p + k * MR, _mm_loadu_ps(a));
        _mm_storel_pi((__m64 *)(p + k * MR + 4),
                      _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(a + 4)));
      }
    for (; k < kc; k++) {
      for (int r = 0; r < rows; r++) p[k * MR + r] = AT(A, lda, trans, i0 + ip + r, k0 + k);
      for (int r = rows; r < MR; r++) p[k * MR + r] = 0;
    }
  }
}

/* op(B)'s rows [k0, k0 + kc), columns [j0, j0 + n), as panels of NR columns: p[panel][k][c].
 * B as it is (a linear layer's input gradient) is read a whole row at a time, its NR-wide
 * pieces dealt to the panels: read panel by panel, each of B's rows 4 KB apart, the loads
 * outran the prefetchers (mlp's input gradient 0.88x OpenBLAS's speed; row by row, 0.96x).
 * B transposed (a linear layer's forward) is read 8 x 8 at a time and turned in registers. */
TR__TARGET_V3 static void pack_b(float *p, const float *B, int ldb, int trans, int j0, int n,
                                 int k0, int kc) {
  if (!trans)
    for (int k = 0; k < kc; k++)
      for (int jp = 0; jp + NR <= n; jp += NR)
        memcpy(p + (size_t)jp * kc + k * NR, B + (size_t)(k0 + k) * ldb + j0 + jp,
               NR * sizeof(float));
  for (int jp = 0; jp < n; jp += NR, p += (size_t)kc * NR) {
    const int cols = n - jp < NR ? n - jp : NR, j = j0 + jp;
    int k = 0;
    if (cols == NR && !trans) continue; /* packed above */
    if (cols == NR)
      for (; k + 8 <= kc; k += 8)
        for (int h = 0; h < NR; h += 8) {
          __m256 r[8];
          for (int q = 0; q < 8; q++)
            r[q] = _mm256_loadu_ps(B + (size_t)(j + h + q) * ldb + k0 + k);
          transpose8(r);
          for (int q = 0; q < 8; q++) _mm256_store_ps(p + (k + q) * NR + h, r[q]);
        }
    for (; k < kc; k++) {
      for (int c = 0; c < cols; c++) p[k * NR + c] = AT(B, ldb, !trans, j + c, k0 + k);
      for (int c = cols; c < NR; c++) p[k * NR + c] = 0;
    }
  }
}

/* t (MR x NR) = the panels' product over kc, each sum in order of k. Not inlined: alpha and
 * beta, live across the loop in the caller, would take the registers the sums need. */
TR__TARGET_V3 __attribute__((noinline)) static void micro_sums(int kc, const float *pa,
                                                               const float *pb, float *t) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#define ROW(i, lo, hi)                                 \
  a = _mm256_broadcast_ss(pa + (i));                   \
  lo = _mm256_fmadd_ps(a, b0, lo);                     \
  hi = _mm256_fmadd_ps(a, b1, hi)
#ifdef __clang__
#pragma unroll 4
#else
#pragma GCC unroll 4
#endif
  for (int k = 0; k < kc; k++, pa += MR, pb += NR) {
    const __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
    __m256 a;
    ROW(0, c00, c01);
    ROW(1, c10, c11);
    ROW(2, c20, c21);
    ROW(3, c30, c31);
    ROW(4, c40, c41);
    ROW(5, c50, c51);
  }
#undef ROW
  const __m256 sums[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                              {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < MR; r++)
    _mm256_store_ps(t + r * NR, sums[r][0]), _mm256_store_ps(t + r * NR + 8, sums[r][1]);
}

/* One micro-tile of C (rows x cols of it C's own): the sums, then into C. The tile's lines
 * of C are fetched while the sums are made (mlp's forward 0.97x OpenBLAS's speed without,
 * 1.02x with): a tile comes back to C after a whole block of others, its lines gone from L1. */
TR__TARGET_V3 static void micro(int kc, const float *pa, const float *pb, float *C, int ldc,
                                int rows, int cols, float alpha, float beta, int first) {
  for (int r = 0; r < rows; r++) {
    _mm_prefetch((const char *)(C + (size_t)r * ldc), _MM_HINT_T0);
    _mm_prefetch((const char *)(C + (size_t)r * ldc + cols - 1), _MM_HINT_T0);
  }
  float t[MR * NR] __attribute__((aligned(32)));
  micro_sums(kc, pa, pb, t);
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  for (int r = 0; r < rows; r++) {
    float *c = C + (size_t)r * ldc;
    const float *s = t + r * NR;
    if (cols == NR)
      for (int h = 0; h < NR; h += 8) {
        __m256 v = _mm256_mul_ps(va, _mm256_load_ps(s + h));
        if (!first) v = _mm256_add_ps(_mm256_loadu_ps(c + h), v);
        else if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + h), v); /* 0: C unread */
        _mm256_storeu_ps(c + h, v);
      }
    else /* the same arithmetic, element by element */
      for (int j = 0; j < cols; j++) {
        const float v = alpha * s[j];
        c[j] = !first ? c[j] + v : beta != 0.0f ? __builtin_fmaf(beta, c[j], v) : v;
      }
  }
}

/* One product of the batch. pack: PACK_FLOATS floats, 32-byte aligned. */
TR__TARGET_V3 static void product(const tr__gemm_args *g, const float *A, const float *B, float *C,
                                  float *pack) {
  float *pa = pack, *pb = pack + (size_t)MC * KC + SLACK;
  for (int j0 = 0; j0 < g->N; j0 += NC) {
    const int n = g->N - j0 < NC ? g->N - j0 : NC;
    for (int k0 = 0; k0 < g->K; k0 += KC) {
      const int kc = g->K - k0 < KC ? g->K - k0 : KC;
      pack_b(pb, B, g->ldb, g->opb == TR_OP_T, j0, n, k0, kc);
      for (int i0 = 0; i0 < g->M; i0 += MC) {
        const int m = g->M - i0 < MC ? g->M - i0 : MC;
        pack_a(pa, A, g->lda, g->opa == TR_OP_T, i0, m, k0, kc);
        for (int jp = 0; jp < n; jp += NR)
          for (int ip = 0; ip < m; ip += MR)
            micro(kc, pa + (size_t)ip * kc, pb + (size_t)jp * kc,
                  C + (size_t)(i0 + ip) * g->ldc + j0 + jp, g->ldc, m - ip < MR ? m - ip : MR,
                  n - jp < NR ? n - jp : NR, g->alpha, g->beta, k0 == 0);
      }
    }
  }
}

static int fits(const tr__gemm_args *g) { return !g->bf16 && tr__cpu_v3(); }

static int gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  (void)state;
  float *pack = tr__host_scratch(s, TR__SCRATCH_PACK, PACK_FLOATS * sizeof(float));
  if (pack == NULL)
    return tr__device_fail(s->dev, TR_ENOMEM, "gemm: packed panels (%zu bytes): out of memory",
                           PACK_FLOATS * sizeof(float));
  const float *A = g->A, *B = g->B;
  for (int i = 0; i < g->batch; i++)
    product(g, A + i * g->sa, B + i * g->sb, g->C + i * g->sc, pack);
  return 0;
}
#else
static int fits(const tr__gemm_args *g) { return (void)g, 0; }
static int gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  (void)state, (void)g;
  return tr__device_fail(s->dev, TR_EDEVICE, "gemm: blocked: built without AVX2");
}
#endif

static void describe(tr__host_lib_info *out) {
  snprintf(out->label, sizeof out->label, "troupe %dx%d r%d", MR, NR, REVISION);
  snprintf(out->isa, sizeof out->isa, "%s", tr__cpu_v3() ? "avx2+fma" : "none");
  out->bf16 = TR_BF16_CONVERTED;
}

const tr__host_lib tr__host_blocked = {.name = "blocked", .describe = describe, .gemm = gemm,
                                       .fits = fits, .fits_what = "CPUs with AVX2 and FMA only"};
