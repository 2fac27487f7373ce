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

#define HOST_LANES 16

/* exp(x) for x <= 0, the only arguments softmaxes (after subtracting the row's maximum) and
 * GELU's logistic need: within 1.3 ulp of the exact value on [-87, 0], 0 below -87 (where
 * the result would be subnormal), NaN for NaN; wrong for x > 0. Plain float arithmetic
 * (Cody-Waite reduction by ln 2, a degree-7 polynomial, the exponent set through the bits),
 * so loops that call it vectorise, where libm's expf is a call per element. */
static inline float tr__host_expf_nonpos(float x) {
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

/* Scratch memory of the device (grows, reused by later ops; NULL when out of memory). */
void *tr__host_scratch(tr_stream *s, size_t bytes);

/* sum of x[i] and sum of x[i]^2 over n floats, in double */
double tr__host_sum(const float *x, size_t n);
double tr__host_sumsq(const float *x, size_t n);

/* host_gemm.c */
int tr__host_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
int tr__host_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                          const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                          int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                          int batch);

/* host_kernels.c */
int tr__host_fill(tr_stream *s, float *x, size_t n, float value);
int tr__host_init_uniform(tr_stream *s, float *x, size_t n, float lo, float hi, uint64_t seed,
                          uint64_t offset);
int tr__host_init_normal(tr_stream *s, float *x, size_t n, float mean, float std, uint64_t seed,
                         uint64_t offset);
int tr__host_dropout_mask(tr_stream *s, float *mask, size_t n, float p, float scale,
                          uint64_t seed, uint64_t offset);
int tr__host_add(tr_stream *s, float *out, const float *a, const float *b, size_t n);
int tr__host_mul(tr_stream *s, float *out, const float *a, const float *b, size_t n);
int tr__host_axpy(tr_stream *s, float *y, float alpha, const float *x, size_t n);
int tr__host_scale(tr_stream *s, float *x, float alpha, size_t n);
int tr__host_scale_dev(tr_stream *s, float *x, const float *scalar, size_t n);
int tr__host_sumsq_op(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
int tr__host_sum_op(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
int tr__host_clip_factor(tr_stream *s, float *factor, const float *sumsq, float max_norm);
int tr__host_bias_add(tr_stream *s, float *out, const float *bias, size_t N, size_t C);
int tr__host_bias_grad(tr_stream *s, float *dbias, const float *dout, size_t N, size_t C);
int tr__host_relu_fwd(tr_stream *s, float *out, const float *inp, size_t n);
int tr__host_relu_bwd(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);
int tr__host_gelu_fwd(tr_stream *s, float *out, const float *inp, size_t n);
int tr__host_gelu_bwd(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);
int tr__host_dc_asgd(tr_stream *s, float *grad, const float *now, const float *pulled, size_t n,
                     float lambda);
int tr__host_sgd_update(tr_stream *s, float *param, const float *grad, size_t n, float lr,
                        float weight_decay);
int tr__host_momentum_update(tr_stream *s, float *param, const float *grad, float *mom, size_t n,
                             float lr, float momentum, float weight_decay, int nesterov);
int tr__host_adamw_update(tr_stream *s, float *param, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int64_t t);

/* host_nn.c */
int tr__host_layernorm_fwd(tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, size_t N, size_t C, float eps);
int tr__host_layernorm_bwd(tr_stream *s, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, size_t N, size_t C);
int tr__host_softmax_fwd(tr_stream *s, float *out, const float *inp, size_t N, size_t C);
int tr__host_softmax_bwd(tr_stream *s, float *dinp, const float *out, const float *dout, size_t N,
                         size_t C);
int tr__host_attn_softmax_fwd(tr_stream *s, float *att, const float *preatt, size_t BH, size_t T,
                              float scale);
int tr__host_attn_softmax_bwd(tr_stream *s, float *dpreatt, const float *att, const float *datt,
                              size_t BH, size_t T, float scale);
int tr__host_crossentropy_fwd(tr_stream *s, float *loss, float *probs, const float *logits,
                              const int32_t *targets, size_t N, size_t V, float scale);
int tr__host_crossentropy_bwd(tr_stream *s, float *dlogits, const float *probs,
                              const int32_t *targets, size_t N, size_t V, float scale);
int tr__host_mse_fwd(tr_stream *s, float *loss, const float *pred, const float *target, size_t n,
                     float scale);
int tr__host_mse_bwd(tr_stream *s, float *dpred, const float *pred, const float *target, size_t n,
                     float scale);
int tr__host_embedding_fwd(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                           const float *wpe, size_t B, size_t T, size_t C, size_t V);
int tr__host_embedding_bwd(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                           const int32_t *idx, size_t B, size_t T, size_t C, size_t V);

#endif
