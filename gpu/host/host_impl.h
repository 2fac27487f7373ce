/* host_impl.h — the host backend's slots, shared by its files (see backend_impl.h for the
 * contract: arguments are already checked, sizes are > 0, the caller owns the device).
 *
 * A host stream runs each op to completion on the calling thread, so every op here is a
 * plain function of its arguments. Kernels are written as simple loops over contiguous
 * floats that gcc and clang vectorise (gpu/meson.build asks for the vectoriser's dynamic
 * cost model and no errno from math functions); reductions keep one partial sum per vector
 * lane (HOST_LANES of them) so that they vectorise without reassociation flags, and sum in
 * double: this backend is the numerical oracle of the others. */
#ifndef TR_HOST_IMPL_H
#define TR_HOST_IMPL_H

#include <string.h>

#include "backend_impl.h"
#include "host_cpu.h"

#define HOST_LANES 16
/* Before the loop over the lanes inside a reduction's loop: unrolled whole, the partial sums
 * are registers. Left a loop, they stayed an array on the stack, and each add waited for the
 * store of the one before (sumsq ran at 17 GB/s where memcpy runs at 60). */
#define HOST_EACH_LANE _Pragma("GCC unroll 16")
_Static_assert(HOST_LANES == 16, "HOST_EACH_LANE unrolls HOST_LANES times");

/* exp(x) for x <= 0, the only arguments softmaxes (after subtracting the row's maximum) and
 * GELU's logistic need: within 1.3 ulp of the exact value on [-87, 0], 0 below -87 (where
 * the result would be subnormal), NaN for NaN; wrong for x > 0. Plain float arithmetic
 * (Cody-Waite reduction by ln 2, a degree-7 polynomial, the exponent set through the bits),
 * so loops that call it vectorise, where libm's expf is a call per element. */
HOST_INLINE float tr__host_expf_nonpos(float x) {
  const float shifter = 0x1.8p23f; /* adding it rounds to an integer kept in the low bits */
  float kf = x * 1.44269504088896341f + shifter;
  uint32_t kb;
  memcpy(&kb, &kf, sizeof kb);
  kf -= shifter;
  float r = x - kf * 0.693145751953125f; /* ln 2, high part: k * it is exact */
  r -= kf * 1.428606765330187e-06f;      /* ln 2, low part */
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.6666667e-1f + r * (4.1666668e-2f +
             r * (8.3333338e-3f + r * (1.3888889e-3f + r * 1.9841270e-4f))))));
  /* 2^k for k >= -126 (below, the select discards it); unsigned, so no input overflows */
  const uint32_t sb = (kb - 0x4B400000u + 127u) << 23;
  float scale;
  memcpy(&scale, &sb, sizeof scale);
  return x < -87.0f ? 0.0f : p * scale;
}

/* Scratch memory of the device (host_dev.c), one buffer per use that may overlap another's (grows,
 * reused by later ops; NULL when out of memory): the kernels' and the direct GEMM path's,
 * bf16 GEMM operands widened to float32, the GEMM library's own (oneDNN's scratchpad), C
 * kept while the libraries are timed on it (host_choose.c), B transposed for a library
 * that multiplies by it so (host_onednn_bt.c), and the panels troupe's own GEMM packs
 * (host_blocked.c). */
enum {
  TR__SCRATCH_OPS,
  TR__SCRATCH_WIDE,
  TR__SCRATCH_BLAS,
  TR__SCRATCH_SAVE,
  TR__SCRATCH_TRANS,
  TR__SCRATCH_PACK,
  TR__SCRATCH_COUNT
};
void *tr__host_scratch(tr_stream *s, int which, size_t bytes);

/* Sum of x[i] over n floats, in double. One partial sum per lane: the inner
 * loop is element-wise across lanes, so it vectorises without licence to reassociate, and the
 * result does not depend on the vector width. */
HOST_INLINE double tr__host_sum_d(const float *x, size_t n) {
  double acc[HOST_LANES] = {0};
  size_t i = 0;
  for (; i + HOST_LANES <= n; i += HOST_LANES)
    HOST_EACH_LANE
    for (int k = 0; k < HOST_LANES; k++) acc[k] += (double)x[i + k];
  double s = 0;
  for (; i < n; i++) s += (double)x[i];
  for (int k = 0; k < HOST_LANES; k++) s += acc[k];
  return s;
}

/* Sum of a[i] * b[i], in double, lane by lane as above. */
HOST_INLINE double tr__host_dot_d(const float *a, const float *b, size_t n) {
  double acc[HOST_LANES] = {0};
  size_t i = 0;
  for (; i + HOST_LANES <= n; i += HOST_LANES)
    HOST_EACH_LANE
    for (int k = 0; k < HOST_LANES; k++) acc[k] += (double)a[i + k] * (double)b[i + k];
  double s = 0;
  for (; i < n; i++) s += (double)a[i] * (double)b[i];
  for (int k = 0; k < HOST_LANES; k++) s += acc[k];
  return s;
}

HOST_INLINE double tr__host_sumsq_d(const float *x, size_t n) { return tr__host_dot_d(x, x, n); }

/* host_gemm.c: the GEMM slots */
int tr__host_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                       int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                       int batch);
int tr__host_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
int tr__host_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                          const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                          int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                          int batch);

/* host_tiny.c: the direct path of small products, where it beats a library's call. A pinned
 * library leaves it those of at most TR__HOST_TINY_MNK multiply-adds (host_choose.c decides
 * by M N K and the transposes); measured against the libraries (TROUPE_GEMM=auto) it is a
 * candidate up to TR__HOST_TINY_REACH. 1 when it ran, 0 when it could not (no scratch for
 * its copies). */
enum { TR__HOST_TINY_MNK = 128 * 128 * 16, TR__HOST_TINY_REACH = 4 * TR__HOST_TINY_MNK };
int tr__host_gemm_tiny(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);

/* The kernels (host_kernels.c, host_nn.c): tr__host_<name> for each entry of TR__OP_MAP. */
#define TR__HOST_OP(name, params, args, checks) \
  int tr__host_##name(tr_stream *s, TR__UNPAREN params);
TR__OP_MAP(TR__HOST_OP)
#undef TR__HOST_OP

#endif
