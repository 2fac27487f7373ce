/* cuda_kernels.cu — the element-wise kernels and whole-tensor reductions of the CUDA backend:
 * fill, Philox initialisation and dropout masks, add/mul/axpy/scale, ReLU, GELU, MSE, the optimizer updates, sum,
 * sum of squares and the clipping factor.
 *
 * Element-wise ops share one grid-stride kernel template (tr__ew_kernel): an op is a functor
 * from NI input values to NO output values at one index. When every pointer is 16-byte
 * aligned the loop moves float4s (four times the bytes in flight per thread, which is what
 * keeps HBM busy), with the last n % 4 elements done one by one. Each element's inputs are
 * loaded before its outputs are stored, so in-place use (out == inp) is safe.
 *
 * Reductions are deterministic: each block writes a double partial, one block sums the
 * partials in order (tr__cuda_finish_sum). No atomics, so a result never depends on timing.
 */
#include "cuda_impl.h"

#include <math.h>

/* ---- the element-wise template ------------------------------------------------------------ */

template <int NI, int NO>
struct tr__ew_ptrs {
  const float *in[NI > 0 ? NI : 1];
  float *out[NO];
};

template <int NI, int NO, typename F>
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__ew_kernel(tr__ew_ptrs<NI, NO> p, size_t n, int vec, F f) {
  size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t head = 0;
  float x[NI > 0 ? NI : 1], y[NO];
  if (vec) {
    size_t n4 = n / 4;
    for (size_t i = tid; i < n4; i += stride) {
      float4 vx[NI > 0 ? NI : 1], vy[NO];
#pragma unroll
      for (int k = 0; k < NI; k++) vx[k] = reinterpret_cast<const float4 *>(p.in[k])[i];
#pragma unroll
      for (int c = 0; c < 4; c++) {
#pragma unroll
        for (int k = 0; k < NI; k++) x[k] = (&vx[k].x)[c];
        f(x, y, 4 * i + c);
#pragma unroll
        for (int k = 0; k < NO; k++) (&vy[k].x)[c] = y[k];
      }
#pragma unroll
      for (int k = 0; k < NO; k++) reinterpret_cast<float4 *>(p.out[k])[i] = vy[k];
    }
    head = n4 * 4;
  }
  for (size_t i = head + tid; i < n; i += stride) {
#pragma unroll
    for (int k = 0; k < NI; k++) x[k] = p.in[k][i];
    f(x, y, i);
#pragma unroll
    for (int k = 0; k < NO; k++) p.out[k][i] = y[k];
  }
}

template <int NI, int NO, typename F>
static int tr__ew(tr_stream *s, const char *name, size_t n, tr__ew_ptrs<NI, NO> p, F f) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  bool vec = true;
  for (int k = 0; k < NI; k++) vec = vec && tr__cu_aligned16(p.in[k]);
  for (int k = 0; k < NO; k++) vec = vec && tr__cu_aligned16(p.out[k]);
  unsigned grid = tr__cu_grid(tr__cu_dev(d), vec ? (n + 3) / 4 : n, TR__CU_BLOCK);
  tr__ew_kernel<NI, NO, F><<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(p, n, vec, f);
  TR__LAUNCHED(d, name);
  return 0;
}

/* ---- fills and Philox initialisation ------------------------------------------------------ */

struct tr__fill_f {
  float v;
  __device__ void operator()(const float *, float *y, size_t) const { y[0] = v; }
};

int tr__cuda_fill(tr_stream *s, float *x, size_t n, float value) {
  tr__ew_ptrs<0, 1> p = {{NULL}, {x}};
  return tr__ew(s, "fill", n, p, tr__fill_f{value});
}

/* The formulas of tr_device.h as the host backend evaluates them, in double, with explicit
 * rounding (__dmul_rn, __dadd_rn): nvcc would otherwise fuse a*b+c into one FMA, and the
 * values must equal the host backend's for the same (seed, index). The double results of
 * log and cos may differ from glibc's in the last bit, which rounding to float hides (so
 * rarely shows that a test will not see it); cospi(2 u2) is cos(2 pi u2) without the
 * large-argument reduction that would put a stack frame in local memory. */
__device__ __forceinline__ double tr__u24(uint32_t w) { return (double)(w >> 8) * 0x1p-24; }

/* One value per Philox word, stream `tag`: thread per Philox call, group g covering global
 * indices 4g .. 4g+3; f turns index j's word into x[j - offset]. */
template <typename F>
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__philox4_kernel(float *x, size_t n, uint64_t seed, uint64_t offset, uint32_t tag, F f) {
  uint64_t g0 = offset / 4, g1 = (offset + n - 1) / 4;
  for (uint64_t g = g0 + blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; g <= g1;
       g += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t w[4];
    tr__philox_at(g, tag, seed, w);
#pragma unroll
    for (int c = 0; c < 4; c++) {
      uint64_t j = 4 * g + c;
      if (j >= offset && j - offset < n) x[j - offset] = f(w[c]);
    }
  }
}

template <typename F>
static int tr__philox4(tr_stream *s, const char *name, float *x, size_t n, uint64_t seed,
                       uint64_t offset, uint32_t tag, F f) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  size_t groups = (offset + n - 1) / 4 - offset / 4 + 1;
  unsigned grid = tr__cu_grid(tr__cu_dev(d), groups, TR__CU_BLOCK);
  tr__philox4_kernel<F><<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(x, n, seed, offset,
                                                                           tag, f);
  TR__LAUNCHED(d, name);
  return 0;
}

struct tr__uniform_f {
  double lo, span;
  __device__ float operator()(uint32_t w) const {
    return (float)__dadd_rn(lo, __dmul_rn(span, tr__u24(w)));
  }
};

/* the float comparison is exact, as on the host */
struct tr__dropout_f {
  float p, scale;
  __device__ float operator()(uint32_t w) const { return tr__dropout_value(w, p, scale); }
};

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__init_normal_kernel(float *x, size_t n, double mean, double std, uint64_t seed,
                           uint64_t offset) {
  /* Thread per Philox call: pair q covers global indices 2q (words 0,1) and 2q+1 (2,3). */
  uint64_t q0 = offset / 2, q1 = (offset + n - 1) / 2;
  for (uint64_t q = q0 + blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; q <= q1;
       q += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t w[4];
    tr__philox_at(q, 1, seed, w);
#pragma unroll
    for (int c = 0; c < 2; c++) {
      uint64_t j = 2 * q + c;
      if (j < offset || j - offset >= n) continue;
      double u1 = (double)((w[2 * c] >> 8) + 1) * 0x1p-24; /* (0,1]: log stays finite */
      double u2 = tr__u24(w[2 * c + 1]);
      double z = __dmul_rn(sqrt(-2.0 * log(u1)), cospi(2.0 * u2));
      x[j - offset] = (float)__dadd_rn(mean, __dmul_rn(std, z));
    }
  }
}

int tr__cuda_init_uniform(tr_stream *s, float *x, size_t n, float lo, float hi, uint64_t seed,
                          uint64_t offset) {
  return tr__philox4(s, "init_uniform", x, n, seed, offset, 0,
                     tr__uniform_f{(double)lo, (double)hi - (double)lo});
}

int tr__cuda_init_normal(tr_stream *s, float *x, size_t n, float mean, float std, uint64_t seed,
                         uint64_t offset) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  size_t pairs = (offset + n - 1) / 2 - offset / 2 + 1;
  unsigned grid = tr__cu_grid(tr__cu_dev(d), pairs, TR__CU_BLOCK);
  tr__init_normal_kernel<<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      x, n, (double)mean, (double)std, seed, offset);
  TR__LAUNCHED(d, "init_normal");
  return 0;
}

int tr__cuda_dropout_mask(tr_stream *s, float *mask, size_t n, float p, float scale,
                          uint64_t seed, uint64_t offset) {
  return tr__philox4(s, "dropout_mask", mask, n, seed, offset, 2, tr__dropout_f{p, scale});
}

/* ---- arithmetic --------------------------------------------------------------------------- */

struct tr__add_f {
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = x[0] + x[1]; }
};
struct tr__mul_f {
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = x[0] * x[1]; }
};
struct tr__axpy_f {
  float a;
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = x[0] + a * x[1]; }
};
struct tr__scale_f {
  float a;
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = x[0] * a; }
};
struct tr__scale_dev_f {
  const float *a;
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = x[0] * __ldg(a); }
};

int tr__cuda_add(tr_stream *s, float *out, const float *a, const float *b, size_t n) {
  tr__ew_ptrs<2, 1> p = {{a, b}, {out}};
  return tr__ew(s, "add", n, p, tr__add_f{});
}

int tr__cuda_mul(tr_stream *s, float *out, const float *a, const float *b, size_t n) {
  tr__ew_ptrs<2, 1> p = {{a, b}, {out}};
  return tr__ew(s, "mul", n, p, tr__mul_f{});
}

int tr__cuda_axpy(tr_stream *s, float *y, float alpha, const float *x, size_t n) {
  tr__ew_ptrs<2, 1> p = {{y, x}, {y}};
  return tr__ew(s, "axpy", n, p, tr__axpy_f{alpha});
}

int tr__cuda_scale(tr_stream *s, float *x, float alpha, size_t n) {
  tr__ew_ptrs<1, 1> p = {{x}, {x}};
  return tr__ew(s, "scale", n, p, tr__scale_f{alpha});
}

int tr__cuda_scale_dev(tr_stream *s, float *x, const float *scalar, size_t n) {
  /* The scalar may lie inside x (a norm kept next to the gradients): threads that scale its
   * element would change it under the others. Scale by a copy, taken in stream order. */
  TR__CU_ENTER(s->dev);
  void *copy;
  int rc = tr__cuda_scratch(s, sizeof(float), &copy);
  if (rc) return rc;
  TR__CU(s->dev, cudaMemcpyAsync(copy, scalar, sizeof(float), cudaMemcpyDeviceToDevice,
                                 tr__cu_stream(s)->st));
  tr__ew_ptrs<1, 1> p = {{x}, {x}};
  return tr__ew(s, "scale_dev", n, p, tr__scale_dev_f{(const float *)copy});
}

/* ---- activations -------------------------------------------------------------------------- */

#define TR__GELU_K 0.7978845608028654f /* sqrt(2/pi) */

struct tr__relu_forward_f {
  __device__ void operator()(const float *x, float *y, size_t) const {
    y[0] = x[0] > 0.0f ? x[0] : 0.0f;
  }
};
struct tr__relu_backward_f { /* x: inp, dout */
  __device__ void operator()(const float *x, float *y, size_t) const {
    y[0] = x[0] > 0.0f ? x[1] : 0.0f;
  }
};
struct tr__gelu_forward_f {
  __device__ void operator()(const float *x, float *y, size_t) const {
    float v = x[0], u = TR__GELU_K * (v + 0.044715f * v * v * v);
    y[0] = 0.5f * v * (1.0f + tanhf(u));
  }
};
struct tr__gelu_backward_f { /* x: inp, dout */
  __device__ void operator()(const float *x, float *y, size_t) const {
    float v = x[0], u = TR__GELU_K * (v + 0.044715f * v * v * v);
    float t = tanhf(u);
    /* sech^2 = 1 - tanh^2: no cosh, which overflows for large |u| */
    float du = TR__GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    y[0] = (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du) * x[1];
  }
};

/* the host's rounding (backend_impl.h), bit for bit */
__global__ void tr__to_bf16_kernel(tr_bf16 *out, const float *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = tr__bf16_round(inp[i]);
}

int tr__cuda_to_bf16(tr_stream *s, tr_bf16 *out, const float *inp, size_t n) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__to_bf16_kernel<<<tr__cu_grid(tr__cu_dev(d), n, TR__CU_BLOCK), TR__CU_BLOCK, 0,
                       tr__cu_stream(s)->st>>>(out, inp, n);
  TR__LAUNCHED(d, "to_bf16");
  return 0;
}

int tr__cuda_relu_forward(tr_stream *s, float *out, const float *inp, size_t n) {
  tr__ew_ptrs<1, 1> p = {{inp}, {out}};
  return tr__ew(s, "relu_forward", n, p, tr__relu_forward_f{});
}

int tr__cuda_relu_backward(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n) {
  tr__ew_ptrs<2, 1> p = {{inp, dout}, {dinp}};
  return tr__ew(s, "relu_backward", n, p, tr__relu_backward_f{});
}

int tr__cuda_gelu_forward(tr_stream *s, float *out, const float *inp, size_t n) {
  tr__ew_ptrs<1, 1> p = {{inp}, {out}};
  return tr__ew(s, "gelu_forward", n, p, tr__gelu_forward_f{});
}

int tr__cuda_gelu_backward(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n) {
  tr__ew_ptrs<2, 1> p = {{inp, dout}, {dinp}};
  return tr__ew(s, "gelu_backward", n, p, tr__gelu_backward_f{});
}

/* ---- optimizer updates (PyTorch's definitions, see tr_device.h) ---------------------------- */

/* The expressions are the host backend's, term for term, so that the two agree to rounding
 * (nvcc may still fuse a multiply and an add, which only makes the result more exact). */
struct tr__sgd_f { /* x: param, grad */
  float lr, wd;
  __device__ void operator()(const float *x, float *y, size_t) const {
    y[0] = x[0] - lr * (x[1] + wd * x[0]);
  }
};
struct tr__momentum_f { /* x: param, grad, mom -> y: param, mom */
  float lr, mu, wd;
  __device__ void operator()(const float *x, float *y, size_t) const {
    float b = mu * x[2] + x[1] + wd * x[0];
    y[0] = x[0] - lr * b;
    y[1] = b;
  }
};
struct tr__nesterov_f { /* x: param, grad, mom -> y: param, mom */
  float lr, mu, wd;
  __device__ void operator()(const float *x, float *y, size_t) const {
    float g = x[1] + wd * x[0];
    float b = mu * x[2] + g;
    y[0] = x[0] - lr * (g + mu * b);
    y[1] = b;
  }
};
struct tr__adamw_f { /* x: param, grad, m, v -> y: param, m, v */
  float lr, b1, b2, eps, decay, a1, a2, inv_bc1, inv_bc2;
  __device__ void operator()(const float *x, float *y, size_t) const {
    float g = x[1];
    float m = b1 * x[2] + a1 * g;
    float v = b2 * x[3] + a2 * g * g;
    y[0] = x[0] * decay - lr * (m * inv_bc1) / (sqrtf(v * inv_bc2) + eps);
    y[1] = m;
    y[2] = v;
  }
};

struct tr__dc_asgd_f { /* x: grad, now, pulled -> y: grad */
  float lambda;
  __device__ void operator()(const float *x, float *y, size_t) const {
    y[0] = x[0] + lambda * x[0] * x[0] * (x[1] - x[2]);
  }
};

int tr__cuda_dc_asgd(tr_stream *s, float *grad, const float *now, const float *pulled, size_t n,
                     float lambda) {
  tr__ew_ptrs<3, 1> p = {{grad, now, pulled}, {grad}};
  return tr__ew(s, "dc_asgd", n, p, tr__dc_asgd_f{lambda});
}

int tr__cuda_sgd_update(tr_stream *s, float *param, const float *grad, size_t n, float lr,
                        float weight_decay) {
  tr__ew_ptrs<2, 1> p = {{param, grad}, {param}};
  return tr__ew(s, "sgd_update", n, p, tr__sgd_f{lr, weight_decay});
}

int tr__cuda_momentum_update(tr_stream *s, float *param, const float *grad, float *mom,
                             size_t n, float lr, float momentum, float weight_decay,
                             int nesterov) {
  tr__ew_ptrs<3, 2> p = {{param, grad, mom}, {param, mom}};
  if (nesterov)
    return tr__ew(s, "momentum_update", n, p, tr__nesterov_f{lr, momentum, weight_decay});
  return tr__ew(s, "momentum_update", n, p, tr__momentum_f{lr, momentum, weight_decay});
}

int tr__cuda_adamw_update(tr_stream *s, float *param, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int64_t t) {
  /* bias corrections once, on the host, in double: 1 - beta^t loses digits in float */
  float inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
  float inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
  tr__ew_ptrs<4, 3> p = {{param, grad, m, v}, {param, m, v}};
  return tr__ew(s, "adamw_update", n, p,
                tr__adamw_f{lr, beta1, beta2, eps, 1.0f - lr * weight_decay, 1.0f - beta1,
                            1.0f - beta2, inv_bc1, inv_bc2});
}

/* ---- MSE ------------------------------------------------------------------------------------- */

struct tr__mse_backward_f { /* x: pred, target */
  float k;
  __device__ void operator()(const float *x, float *y, size_t) const { y[0] = k * (x[0] - x[1]); }
};

int tr__cuda_mse_backward(tr_stream *s, float *dpred, const float *pred, const float *target,
                     size_t n, float scale) {
  tr__ew_ptrs<2, 1> p = {{pred, target}, {dpred}};
  return tr__ew(s, "mse_backward", n, p, tr__mse_backward_f{2.0f * scale});
}

/* ---- reductions ------------------------------------------------------------------------------ */

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__finish_sum_kernel(float *out, const double *partials, unsigned n, double scale,
                          int accumulate) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = tr__block_sum(acc);
  if (threadIdx.x == 0) out[0] = (float)((accumulate ? (double)out[0] : 0.0) + scale * acc);
}

int tr__cuda_finish_sum(tr_stream *s, float *out, const double *partials, unsigned n,
                        double scale, int accumulate) {
  tr__finish_sum_kernel<<<1, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(out, partials, n, scale,
                                                                     accumulate);
  TR__LAUNCHED(s->dev, "finish_sum");
  return 0;
}

/* Pass 1: block b writes partials[b] = sum over its share of f(inputs at i), in double. */
template <int NI, typename F>
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__reduce_kernel(tr__ew_ptrs<NI, 1> p, size_t n, int vec, F f, double *partials) {
  size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t head = 0;
  double acc = 0;
  float x[NI];
  if (vec) {
    size_t n4 = n / 4;
    for (size_t i = tid; i < n4; i += stride) {
      float4 vx[NI];
#pragma unroll
      for (int k = 0; k < NI; k++) vx[k] = reinterpret_cast<const float4 *>(p.in[k])[i];
#pragma unroll
      for (int c = 0; c < 4; c++) {
#pragma unroll
        for (int k = 0; k < NI; k++) x[k] = (&vx[k].x)[c];
        acc += f(x);
      }
    }
    head = n4 * 4;
  }
  for (size_t i = head + tid; i < n; i += stride) {
#pragma unroll
    for (int k = 0; k < NI; k++) x[k] = p.in[k][i];
    acc += f(x);
  }
  acc = tr__block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <int NI, typename F>
static int tr__reduce(tr_stream *s, const char *name, float *out, size_t n,
                      tr__ew_ptrs<NI, 1> p, F f, double scale, int accumulate) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  bool vec = true;
  for (int k = 0; k < NI; k++) vec = vec && tr__cu_aligned16(p.in[k]);
  unsigned grid = tr__cu_grid(tr__cu_dev(d), vec ? (n + 3) / 4 : n, TR__CU_BLOCK);
  if (grid > TR__CU_MAX_PARTIALS) grid = TR__CU_MAX_PARTIALS;
  void *scratch;
  int rc = tr__cuda_scratch(s, grid * sizeof(double), &scratch);
  if (rc) return rc;
  tr__reduce_kernel<NI, F><<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      p, n, vec, f, (double *)scratch);
  TR__LAUNCHED(d, name);
  return tr__cuda_finish_sum(s, out, (const double *)scratch, grid, scale, accumulate);
}

struct tr__sum_f {
  __device__ double operator()(const float *x) const { return x[0]; }
};
struct tr__sumsq_f {
  __device__ double operator()(const float *x) const { return (double)x[0] * x[0]; }
};
struct tr__sqdiff_f {
  __device__ double operator()(const float *x) const {
    double e = (double)x[0] - x[1];
    return e * e;
  }
};

int tr__cuda_sum(tr_stream *s, float *out, const float *x, size_t n, int accumulate) {
  tr__ew_ptrs<1, 1> p = {{x}, {out}};
  return tr__reduce(s, "sum", out, n, p, tr__sum_f{}, 1.0, accumulate);
}

int tr__cuda_sumsq(tr_stream *s, float *out, const float *x, size_t n, int accumulate) {
  tr__ew_ptrs<1, 1> p = {{x}, {out}};
  return tr__reduce(s, "sumsq", out, n, p, tr__sumsq_f{}, 1.0, accumulate);
}

int tr__cuda_mse_forward(tr_stream *s, float *loss, const float *pred, const float *target,
                     size_t n, float scale) {
  tr__ew_ptrs<2, 1> p = {{pred, target}, {loss}};
  return tr__reduce(s, "mse_forward", loss, n, p, tr__sqdiff_f{}, (double)scale, 0);
}

/* In double, as the host backend computes it. A NaN norm gives 1 (no scaling), as there. */
__global__ void tr__clip_factor_kernel(float *factor, const float *sumsq, float max_norm) {
  double f = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
  factor[0] = (float)(f < 1.0 ? f : 1.0);
}

int tr__cuda_clip_factor(tr_stream *s, float *factor, const float *sumsq, float max_norm) {
  TR__CU_ENTER(s->dev);
  tr__clip_factor_kernel<<<1, 1, 0, tr__cu_stream(s)->st>>>(factor, sumsq, max_norm);
  TR__LAUNCHED(s->dev, "clip_factor");
  return 0;
}
