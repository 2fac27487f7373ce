/* cuda_nn.cu — the row- and column-structured kernels of the CUDA backend: bias add and
 * gradient, layernorm, softmax, causal attention softmax, softmax cross-entropy (the embedding
 * is in cuda_embedding.cu, a tensor member's part of the cross-entropy in cuda_vocab.cu).
 *
 * Row ops give each row to one warp (8 per block): the lanes stride along the row, so every
 * access is coalesced, and the row's reductions (max, sums) are warp shuffles with no shared
 * memory or block barrier. Shapes in the comments follow tr_device.h.
 *
 * Column sums (bias gradient, layernorm's weight and bias gradients) are deterministic: a
 * block of 32 x 8 threads owns 32 columns of a slice of rows, slices are summed in order by
 * a second kernel.
 */
#include "cuda_impl.h"

#include <math.h>

#include <type_traits>

/* ---- bias ------------------------------------------------------------------------------------ */

/* out (N,C) += bias (C). Flat grid-stride loop; the column is carried along rather than
 * recomputed with a 64-bit modulo per element. W = 4 moves float4s (C % 4 == 0, aligned). */
template <int W>
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__bias_add_kernel(float *out, const float *bias, size_t n, size_t C) {
  typedef typename std::conditional<W == 4, float4, float>::type V;
  size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t c = tid % C, step = stride % C;
  V *o = reinterpret_cast<V *>(out);
  const V *b = reinterpret_cast<const V *>(bias);
  for (size_t i = tid; i < n; i += stride) {
    V v = o[i], w = b[c];
    if constexpr (W == 4) {
      v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    } else {
      v += w;
    }
    o[i] = v;
    c += step;
    if (c >= C) c -= C;
  }
}

int tr__cuda_bias_add(tr_stream *s, float *out, const float *bias, size_t N, size_t C) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  cudaStream_t st = tr__cu_stream(s)->st;
  if (C % 4 == 0 && tr__cu_aligned16(out) && tr__cu_aligned16(bias)) {
    size_t n = N * C / 4;
    tr__bias_add_kernel<4><<<tr__cu_grid(tr__cu_dev(d), n, TR__CU_BLOCK), TR__CU_BLOCK, 0, st>>>(
        out, bias, n, C / 4);
  } else {
    size_t n = N * C;
    tr__bias_add_kernel<1><<<tr__cu_grid(tr__cu_dev(d), n, TR__CU_BLOCK), TR__CU_BLOCK, 0, st>>>(
        out, bias, n, C);
  }
  TR__LAUNCHED(d, "bias_add");
  return 0;
}

/* Column sums of NO quantities f(r, c) over rows [0,N): out_k[c] += sum_r f_k(r, c), summed in
 * double like the host backend's. Grid (ceil(C/32), splits); with one split the block adds
 * into out directly, else it writes partial[(k*splits + split)*C + c] and tr__colsum_finish
 * adds the splits in order. */
template <int NO, typename F>
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__colsum_kernel(F f, size_t N, size_t C, size_t rows_per_split, float *out0, float *out1,
                      double *partial) {
  __shared__ double sh[NO][8][33];
  size_t c = (size_t)blockIdx.x * 32 + threadIdx.x;
  size_t r0 = (size_t)blockIdx.y * rows_per_split;
  size_t r1 = r0 + rows_per_split < N ? r0 + rows_per_split : N;
  double acc[NO];
  float v[NO];
#pragma unroll
  for (int k = 0; k < NO; k++) acc[k] = 0.0;
  if (c < C) {
    for (size_t r = r0 + threadIdx.y; r < r1; r += 8) {
      f(r, c, v);
#pragma unroll
      for (int k = 0; k < NO; k++) acc[k] += (double)v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < NO; k++) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int k = 0; k < NO; k++) {
      double t = 0.0;
#pragma unroll
      for (int y = 0; y < 8; y++) t += sh[k][y][threadIdx.x];
      if (gridDim.y == 1) {
        float *o = k == 0 ? out0 : out1;
        o[c] = (float)((double)o[c] + t);
      } else {
        partial[((size_t)k * gridDim.y + blockIdx.y) * C + c] = t;
      }
    }
  }
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__colsum_finish(const double *partial, unsigned splits, size_t C, int nout, float *out0,
                      float *out1) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)nout * C;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t k = i / C, c = i - k * C;
    double t = 0.0;
    for (unsigned sp = 0; sp < splits; sp++) t += partial[(k * splits + sp) * C + c];
    float *o = k == 0 ? out0 : out1;
    o[c] = (float)((double)o[c] + t);
  }
}

template <int NO, typename F>
static int tr__colsum(tr_stream *s, const char *name, F f, size_t N, size_t C, float *out0,
                      float *out1) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__cuda_device *cd = tr__cu_dev(d);
  cudaStream_t st = tr__cu_stream(s)->st;
  size_t colblocks = (C + 31) / 32;
  /* Enough slices to fill the GPU, each at least 64 rows; at most 64 slices. */
  size_t want = (size_t)(cd->sms > 0 ? cd->sms : 1) * 4 / colblocks;
  size_t splits = (N + 63) / 64;
  if (splits > want) splits = want;
  if (splits > 64) splits = 64;
  if (splits < 1) splits = 1;
  size_t rows_per_split = (N + splits - 1) / splits;
  splits = (N + rows_per_split - 1) / rows_per_split;
  double *partial = NULL;
  if (splits > 1) {
    void *p;
    int rc = tr__cuda_scratch(s, splits * NO * C * sizeof(double), &p);
    if (rc) return rc;
    partial = (double *)p;
  }
  dim3 grid((unsigned)colblocks, (unsigned)splits), block(32, 8);
  tr__colsum_kernel<NO, F><<<grid, block, 0, st>>>(f, N, C, rows_per_split, out0, out1, partial);
  TR__LAUNCHED(d, name);
  if (splits > 1) {
    tr__colsum_finish<<<tr__cu_grid(cd, NO * C, TR__CU_BLOCK), TR__CU_BLOCK, 0, st>>>(
        partial, (unsigned)splits, C, NO, out0, out1);
    TR__LAUNCHED(d, name);
  }
  return 0;
}

struct tr__bias_grad_f {
  const float *dout;
  size_t C;
  __device__ void operator()(size_t r, size_t c, float *v) const { v[0] = dout[r * C + c]; }
};

int tr__cuda_bias_grad(tr_stream *s, float *dbias, const float *dout, size_t N, size_t C) {
  return tr__colsum<1>(s, "bias_grad", tr__bias_grad_f{dout, C}, N, C, dbias, dbias);
}

/* ---- layernorm ------------------------------------------------------------------------------ */

/* A warp per row, row sums in double. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, size_t N, size_t C,
                             float eps) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *x = inp + r * C;
    /* As the host does: centred in double on the exact mean, for the variance and for the
     * output alike, so a row far from zero (a large mean, a small spread) loses nothing to
     * the mean's rounding to float. */
    double sum = 0.0;
    for (size_t c = lane; c < C; c += 32) sum += (double)x[c];
    const double mu = tr__warp_sum(sum) / (double)C;
    double s2 = 0.0;
    for (size_t c = lane; c < C; c += 32) s2 += ((double)x[c] - mu) * ((double)x[c] - mu);
    const double rs = 1.0 / sqrt(tr__warp_sum(s2) / (double)C + (double)eps);
    float *o = out + r * C;
    for (size_t c = lane; c < C; c += 32)
      o[c] = (float)(((double)x[c] - mu) * rs) * weight[c] + bias[c];
    if (lane == 0) {
      mean[r] = (float)mu;
      rstd[r] = (float)rs;
    }
  }
}

int tr__cuda_layernorm_forward(tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, size_t N, size_t C,
                           float eps) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__layernorm_forward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      out, mean, rstd, inp, weight, bias, N, C, eps);
  TR__LAUNCHED(d, "layernorm_forward");
  return 0;
}

/* dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight;
 * the two means in double, as on the host. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__layernorm_backward_kernel(float *dinp, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd,
                             size_t N, size_t C) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *x = inp + r * C, *g = dout + r * C;
    float m = mean[r], rs = rstd[r];
    double a = 0.0, b = 0.0;
    for (size_t c = lane; c < C; c += 32) {
      double dn = (double)weight[c] * (double)g[c];
      a += dn;
      b += dn * (double)((x[c] - m) * rs);
    }
    float m1 = (float)(tr__warp_sum(a) / (double)C), m2 = (float)(tr__warp_sum(b) / (double)C);
    float *o = dinp + r * C;
    for (size_t c = lane; c < C; c += 32) {
      float norm = (x[c] - m) * rs;
      o[c] = (weight[c] * g[c] - m1 - norm * m2) * rs;
    }
  }
}

struct tr__layernorm_wgrad_f {
  const float *dout, *inp, *mean, *rstd;
  size_t C;
  __device__ void operator()(size_t r, size_t c, float *v) const {
    float g = dout[r * C + c];
    v[0] = g * (inp[r * C + c] - mean[r]) * rstd[r];
    v[1] = g;
  }
};

int tr__cuda_layernorm_backward(tr_stream *s, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, size_t N, size_t C) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__layernorm_backward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  TR__LAUNCHED(d, "layernorm_backward");
  return tr__colsum<2>(s, "layernorm_backward", tr__layernorm_wgrad_f{dout, inp, mean, rstd, C}, N,
                       C, dweight, dbias);
}

/* ---- softmax ---------------------------------------------------------------------------------- */

/* One row's softmax exp(scale (x - max)) / sum over x[0..len) into y[0..len) (y may equal
 * x), by one warp, as the host backend defines it. Returns log(sum) and the max (every lane),
 * from which cross-entropy takes -log p_t without the underflow of log(p_t). */
__device__ __forceinline__ double tr__warp_softmax(float *y, const float *x, size_t len,
                                                   float scale, unsigned lane, float *max_out) {
  float mx = -INFINITY;
  for (size_t c = lane; c < len; c += 32) mx = fmaxf(mx, x[c]);
  mx = tr__warp_max(mx);
  float sum = 0.0f;
  for (size_t c = lane; c < len; c += 32) sum += expf(scale * (x[c] - mx));
  sum = tr__warp_sum(sum);
  float inv = 1.0f / sum;
  for (size_t c = lane; c < len; c += 32) y[c] = expf(scale * (x[c] - mx)) * inv;
  if (max_out) *max_out = mx;
  return log((double)sum);
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__softmax_forward_kernel(float *out, const float *inp, size_t N, size_t C) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) tr__warp_softmax(out + r * C, inp + r * C, C, 1.0f, lane, NULL);
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__softmax_backward_kernel(float *dinp, const float *out, const float *dout, size_t N,
                           size_t C) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *y = out + r * C, *g = dout + r * C;
    float dot = 0.0f;
    for (size_t c = lane; c < C; c += 32) dot += y[c] * g[c];
    dot = tr__warp_sum(dot);
    float *o = dinp + r * C;
    for (size_t c = lane; c < C; c += 32) o[c] = y[c] * (g[c] - dot);
  }
}

int tr__cuda_softmax_forward(tr_stream *s, float *out, const float *inp, size_t N, size_t C) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__softmax_forward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      out, inp, N, C);
  TR__LAUNCHED(d, "softmax_forward");
  return 0;
}

int tr__cuda_softmax_backward(tr_stream *s, float *dinp, const float *out, const float *dout,
                         size_t N, size_t C) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__softmax_backward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      dinp, out, dout, N, C);
  TR__LAUNCHED(d, "softmax_backward");
  return 0;
}

/* Row r of the (BH*T, T) stack is query t = r % T: it sees keys 0..t. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__attn_softmax_forward_kernel(float *att, const float *preatt, size_t rows, size_t T,
                                float scale) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, rows) {
    size_t t = r % T;
    float *y = att + r * T;
    tr__warp_softmax(y, preatt + r * T, t + 1, scale, lane, NULL);
    for (size_t c = t + 1 + lane; c < T; c += 32) y[c] = 0.0f;
  }
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__attn_softmax_backward_kernel(float *dpreatt, const float *att, const float *datt,
                                size_t rows, size_t T, float scale) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, rows) {
    size_t t = r % T;
    const float *y = att + r * T, *g = datt + r * T;
    float dot = 0.0f;
    for (size_t c = lane; c <= t; c += 32) dot += y[c] * g[c];
    dot = tr__warp_sum(dot); /* every lane has read its g before any lane writes o */
    float *o = dpreatt + r * T;
    for (size_t c = lane; c < T; c += 32) o[c] = c <= t ? scale * y[c] * (g[c] - dot) : 0.0f;
  }
}

int tr__cuda_attn_softmax_forward(tr_stream *s, float *att, const float *preatt, size_t BH,
                              size_t T, float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  size_t rows = BH * T;
  tr__attn_softmax_forward_kernel<<<tr__rows_grid(d, rows), TR__CU_BLOCK, 0,
                                tr__cu_stream(s)->st>>>(att, preatt, rows, T, scale);
  TR__LAUNCHED(d, "attn_softmax_forward");
  return 0;
}

int tr__cuda_attn_softmax_backward(tr_stream *s, float *dpreatt, const float *att, const float *datt,
                              size_t BH, size_t T, float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  size_t rows = BH * T;
  tr__attn_softmax_backward_kernel<<<tr__rows_grid(d, rows), TR__CU_BLOCK, 0,
                                tr__cu_stream(s)->st>>>(dpreatt, att, datt, rows, T, scale);
  TR__LAUNCHED(d, "attn_softmax_backward");
  return 0;
}

/* ---- softmax cross-entropy --------------------------------------------------------------- */

/* probs (N,V) = softmax(logits); block b writes partials[b] = sum over its rows of
 * -log p_t = log(sum exp(z - max)) - (z_t - max), exact even where p_t underflows. A target
 * outside [0,V) contributes NaN: the GPU cannot fail the call as the host backend does, and
 * a wrong index must not pass as a plausible loss. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_forward_kernel(float *probs, const float *logits, const int32_t *targets,
                                size_t N, size_t V, double *partials) {
  unsigned lane = threadIdx.x & 31;
  double acc = 0.0;
  TR__ROW_LOOP(r, N) {
    const float *z = logits + r * V;
    float mx;
    double lse = tr__warp_softmax(probs + r * V, z, V, 1.0f, lane, &mx);
    if (lane == 0) {
      int32_t t = targets[r];
      acc += (t >= 0 && (size_t)t < V) ? lse - ((double)z[t] - (double)mx) : (double)NAN;
    }
  }
  acc = tr__block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

int tr__cuda_crossentropy_forward(tr_stream *s, float *loss, float *probs, const float *logits,
                              const int32_t *targets, size_t N, size_t V, float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  unsigned grid = tr__rows_grid(d, N);
  if (grid > TR__CU_MAX_PARTIALS) grid = TR__CU_MAX_PARTIALS;
  void *scratch;
  int rc = tr__cuda_scratch(s, grid * sizeof(double), &scratch);
  if (rc) return rc;
  tr__crossentropy_forward_kernel<<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      probs, logits, targets, N, V, (double *)scratch);
  TR__LAUNCHED(d, "crossentropy_forward");
  return tr__cuda_finish_sum(s, loss, (const double *)scratch, grid, (double)scale, 0);
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_backward_kernel(float *dlogits, const float *probs, const int32_t *targets,
                                size_t N, size_t V, float scale) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    int64_t t = targets[r];
    const float *p = probs + r * V;
    float *o = dlogits + r * V;
    bool ok = t >= 0 && (uint64_t)t < V;
    for (size_t c = lane; c < V; c += 32)
      o[c] = ok ? scale * (p[c] - ((int64_t)c == t ? 1.0f : 0.0f)) : NAN;
  }
}

int tr__cuda_crossentropy_backward(tr_stream *s, float *dlogits, const float *probs,
                              const int32_t *targets, size_t N, size_t V, float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_backward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      dlogits, probs, targets, N, V, scale);
  TR__LAUNCHED(d, "crossentropy_backward");
  return 0;
}
