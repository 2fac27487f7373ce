/* host_kernels.c — the host backend's element-wise kernels, reductions, random
 * initialisation and optimizer updates. */
#include <math.h>
#include <string.h>

#include "host_impl.h" /* and host_cpu.h, whose HOST_AVX2_TOO builds the kernels */

/* ---- reductions -------------------------------------------------------------------------- */

HOST_LOOPS tr__host_sumsq_loops(tr_stream *s, float *out, const float *x, size_t n,
                                int accumulate) {
  (void)s;
  double v = tr__host_sumsq_d(x, n);
  out[0] = (float)(accumulate ? (double)out[0] + v : v);
  return 0;
}
HOST_AVX2_TOO(tr__host_sumsq, (tr_stream *s, float *out, const float *x, size_t n, int accumulate),
              (s, out, x, n, accumulate))

HOST_LOOPS tr__host_sum_loops(tr_stream *s, float *out, const float *x, size_t n, int accumulate) {
  (void)s;
  double v = tr__host_sum_d(x, n);
  out[0] = (float)(accumulate ? (double)out[0] + v : v);
  return 0;
}
HOST_AVX2_TOO(tr__host_sum, (tr_stream *s, float *out, const float *x, size_t n, int accumulate),
              (s, out, x, n, accumulate))

int tr__host_clip_factor(tr_stream *s, float *factor, const float *sumsq, float max_norm) {
  (void)s;
  double f = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
  factor[0] = (float)(f < 1.0 ? f : 1.0);
  return 0;
}

/* ---- fills and random initialisation ------------------------------------------------------ */

int tr__host_fill(tr_stream *s, float *x, size_t n, float value) {
  (void)s;
  for (size_t i = 0; i < n; i++) x[i] = value;
  return 0;
}

int tr__host_init_uniform(tr_stream *s, float *x, size_t n, float lo, float hi, uint64_t seed,
                          uint64_t offset) {
  (void)s;
  uint32_t w[4];
  const double span = (double)hi - (double)lo;
  for (size_t i = 0; i < n; i++) {
    uint64_t j = offset + i;
    if (i == 0 || (j & 3) == 0) tr__philox_at(j >> 2, 0, seed, w);
    double u = (double)(w[j & 3] >> 8) * 0x1p-24;
    x[i] = (float)((double)lo + span * u);
  }
  return 0;
}

int tr__host_init_normal(tr_stream *s, float *x, size_t n, float mean, float std, uint64_t seed,
                         uint64_t offset) {
  (void)s;
  uint32_t w[4];
  const double two_pi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < n; i++) {
    uint64_t j = offset + i;
    if (i == 0 || (j & 1) == 0) tr__philox_at(j >> 1, 1, seed, w);
    const uint32_t *p = w + 2 * (j & 1);
    double u1 = (double)((p[0] >> 8) + 1) * 0x1p-24, u2 = (double)(p[1] >> 8) * 0x1p-24;
    double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
    x[i] = (float)((double)mean + (double)std * z);
  }
  return 0;
}

int tr__host_dropout_mask(tr_stream *s, float *mask, size_t n, float p, float scale,
                          uint64_t seed, uint64_t offset) {
  (void)s;
  uint32_t w[4];
  for (size_t i = 0; i < n; i++) {
    uint64_t j = offset + i;
    if (i == 0 || (j & 3) == 0) tr__philox_at(j >> 2, 2, seed, w);
    mask[i] = tr__dropout_value(w[j & 3], p, scale);
  }
  return 0;
}

/* ---- element-wise arithmetic ----------------------------------------------------------------- */

HOST_LOOPS tr__host_add_loops(tr_stream *s, float *out, const float *a, const float *b, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  return 0;
}
HOST_AVX2_TOO(tr__host_add, (tr_stream *s, float *out, const float *a, const float *b, size_t n),
              (s, out, a, b, n))

int tr__host_mul(tr_stream *s, float *out, const float *a, const float *b, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
  return 0;
}

int tr__host_axpy(tr_stream *s, float *y, float alpha, const float *x, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
  return 0;
}

int tr__host_scale(tr_stream *s, float *x, float alpha, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
  return 0;
}

int tr__host_scale_dev(tr_stream *s, float *x, const float *scalar, size_t n) {
  /* read once: the scalar may live inside x */
  return tr__host_scale(s, x, scalar[0], n);
}

/* ---- linear layers ---------------------------------------------------------------------------- */

HOST_LOOPS tr__host_bias_add_loops(tr_stream *s, float *out, const float *bias, size_t N, size_t C) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    float *o = out + r * C;
    for (size_t c = 0; c < C; c++) o[c] += bias[c];
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_bias_add, (tr_stream *s, float *out, const float *bias, size_t N, size_t C),
              (s, out, bias, N, C))

/* Each column is summed in double, row by row, in order, so any tiling gives the same bits.
 * The tiling: blocks of BIAS_COLS columns, whose sums wait in L1 while BIAS_ROWS rows at a
 * time pass through strips of BIAS_STRIP columns summed in registers (8 AVX2 vectors).
 * Measured on 4,096 rows of 1,024 (`troupe bench ops`'s size), where a strip's rows are a
 * page apart: 32 rows at a time ran at half the speed of 16, and every row in one pass at a
 * quarter. Sums kept in L1 through every row ran at a third of this speed on mlp's 256 rows. */
enum { BIAS_STRIP = 32, BIAS_ROWS = 16, BIAS_COLS = 1024 };

HOST_INLINE void bias_grad_strip(double *sum, const float *g, size_t rows, size_t C) {
  double acc[BIAS_STRIP];
  for (int c = 0; c < BIAS_STRIP; c++) acc[c] = sum[c];
  for (size_t r = 0; r < rows; r++, g += C)
#pragma GCC unroll 32 /* whole: then the sums are registers, not an array in memory */
    for (int c = 0; c < BIAS_STRIP; c++) acc[c] += (double)g[c];
  for (int c = 0; c < BIAS_STRIP; c++) sum[c] = acc[c];
}

HOST_LOOPS tr__host_bias_grad_loops(tr_stream *s, float *dbias, const float *dout, size_t N, size_t C) {
  (void)s;
  double sum[BIAS_COLS];
  for (size_t c0 = 0; c0 < C; c0 += BIAS_COLS) {
    const size_t w = C - c0 < BIAS_COLS ? C - c0 : BIAS_COLS;
    memset(sum, 0, w * sizeof *sum);
    for (size_t r0 = 0; r0 < N; r0 += BIAS_ROWS) {
      const size_t rows = N - r0 < BIAS_ROWS ? N - r0 : BIAS_ROWS;
      const float *g = dout + r0 * C + c0;
      size_t c = 0;
      for (; w - c >= BIAS_STRIP; c += BIAS_STRIP) bias_grad_strip(sum + c, g + c, rows, C);
      if (c < w) /* the columns left over from the strips */
        for (size_t r = 0; r < rows; r++)
          for (size_t k = c; k < w; k++) sum[k] += (double)g[r * C + k];
    }
    for (size_t c = 0; c < w; c++) dbias[c0 + c] = (float)((double)dbias[c0 + c] + sum[c]);
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_bias_grad, (tr_stream *s, float *dbias, const float *dout, size_t N, size_t C),
              (s, dbias, dout, N, C))

/* ---- conversion ----------------------------------------------------------------------------- */

HOST_LOOPS tr__host_to_bf16_loops(tr_stream *s, tr_bf16 *out, const float *inp, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) out[i] = tr__bf16_round(inp[i]);
  return 0;
}
HOST_AVX2_TOO(tr__host_to_bf16, (tr_stream *s, tr_bf16 *out, const float *inp, size_t n),
              (s, out, inp, n))

/* ---- activations ------------------------------------------------------------------------------- */

HOST_LOOPS tr__host_relu_forward_loops(tr_stream *s, float *out, const float *inp, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  return 0;
}
HOST_AVX2_TOO(tr__host_relu_forward, (tr_stream *s, float *out, const float *inp, size_t n), (s, out, inp, n))

HOST_LOOPS tr__host_relu_backward_loops(tr_stream *s, float *dinp, const float *inp, const float *dout,
                                   size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) {
    const float g = dout[i]; /* loaded unconditionally: a select, so the loop vectorises */
    dinp[i] = inp[i] > 0.0f ? g : 0.0f;
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_relu_backward, (tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n),
              (s, dinp, inp, dout, n))

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* 0.5 (1 + tanh u) is the logistic function of 2u: written so, with e = exp(-2|u|) <= 1,
 * neither the forward nor the gradient cancels where tanh u is near -1 (x below about -3),
 * and nothing overflows. */
HOST_INLINE void gelu_parts(float x, float *sig, float *one_minus_sig) {
  const float u = GELU_K * (x + GELU_C * x * x * x);
  const float e = tr__host_expf_nonpos(-2.0f * fabsf(u)), inv = 1.0f / (1.0f + e);
  *sig = u >= 0.0f ? inv : e * inv;
  *one_minus_sig = u >= 0.0f ? e * inv : inv;
}

HOST_LOOPS tr__host_gelu_forward_loops(tr_stream *s, float *out, const float *inp, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) {
    float sig, rest;
    gelu_parts(inp[i], &sig, &rest);
    out[i] = inp[i] * sig;
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_gelu_forward, (tr_stream *s, float *out, const float *inp, size_t n),
              (s, out, inp, n))

/* d/dx [x sig(2u)] = sig + x * 2 sig (1 - sig) * du/dx, du/dx = K (1 + 3 C x^2) */
HOST_LOOPS tr__host_gelu_backward_loops(tr_stream *s, float *dinp, const float *inp,
                                        const float *dout, size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) {
    const float x = inp[i];
    float sig, rest;
    gelu_parts(x, &sig, &rest);
    const float g = sig + 2.0f * x * sig * rest * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    dinp[i] = g * dout[i];
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_gelu_backward,
              (tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n),
              (s, dinp, inp, dout, n))

/* ---- asynchronous updates ---------------------------------------------------------------------- */

int tr__host_dc_asgd(tr_stream *s, float *grad, const float *now, const float *pulled, size_t n,
                     float lambda) {
  (void)s;
  for (size_t i = 0; i < n; i++) grad[i] += lambda * grad[i] * grad[i] * (now[i] - pulled[i]);
  return 0;
}

/* ---- optimizer updates ------------------------------------------------------------------------- */

HOST_LOOPS tr__host_sgd_update_loops(tr_stream *s, float *param, const float *grad, size_t n,
                                     float lr, float weight_decay) {
  (void)s;
  for (size_t i = 0; i < n; i++) param[i] -= lr * (grad[i] + weight_decay * param[i]);
  return 0;
}
HOST_AVX2_TOO(tr__host_sgd_update, (tr_stream *s, float *param, const float *grad, size_t n, float lr,
                                    float weight_decay),
              (s, param, grad, n, lr, weight_decay))

HOST_LOOPS tr__host_momentum_update_loops(tr_stream *s, float *param, const float *grad, float *mom,
                                          size_t n, float lr, float momentum, float weight_decay,
                                          int nesterov) {
  (void)s;
  if (nesterov) {
    for (size_t i = 0; i < n; i++) {
      float g = grad[i] + weight_decay * param[i];
      float b = momentum * mom[i] + g;
      mom[i] = b;
      param[i] -= lr * (g + momentum * b);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float b = momentum * mom[i] + grad[i] + weight_decay * param[i];
      mom[i] = b;
      param[i] -= lr * b;
    }
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_momentum_update,
              (tr_stream *s, float *param, const float *grad, float *mom, size_t n, float lr,
               float momentum, float weight_decay, int nesterov),
              (s, param, grad, mom, n, lr, momentum, weight_decay, nesterov))

HOST_LOOPS tr__host_adamw_update_loops(tr_stream *s, float *param, const float *grad, float *m,
                                       float *v, size_t n, float lr, float beta1, float beta2,
                                       float eps, float weight_decay, int64_t t) {
  (void)s;
  /* bias corrections in double: 1 - beta^t loses digits in float for small t */
  const float inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
  const float inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
  const float decay = 1.0f - lr * weight_decay, a1 = 1.0f - beta1, a2 = 1.0f - beta2;
  for (size_t i = 0; i < n; i++) {
    float g = grad[i];
    float mi = beta1 * m[i] + a1 * g;
    float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - lr * (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_adamw_update,
              (tr_stream *s, float *param, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t),
              (s, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t))
