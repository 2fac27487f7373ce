/* cuda_vocab.cu — a tensor member's columns of the softmax cross-entropy on CUDA (Megatron's
 * vocabulary-parallel loss, tr_device.h's tr_crossentropy_part_*): each member holds V/T of the
 * logits' columns; the row's max and its sum of exponentials are reduced across the group by
 * the caller (models/losses.c), never gathering the logits. The accuracy of split logits is
 * each member's row argmax, the group's vote, then the hits.
 *
 * Row kernels as cuda_nn.cu's: one warp per row, its lanes striding along the row; sums over
 * rows are deterministic (block partials summed in order by tr__cuda_finish_sum).
 */
#include "cuda_impl.h"

#include <math.h>

/* ---- a member's columns of the cross-entropy (Megatron's vocabulary-parallel loss) ---------- */

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_part_max_kernel(float *mx, const float *logits, size_t N, size_t V) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *z = logits + r * V;
    float m = -INFINITY;
    for (size_t c = lane; c < V; c += 32) m = fmaxf(m, z[c]);
    m = tr__warp_max(m);
    if (lane == 0) mx[r] = m;
  }
}

int tr__cuda_crossentropy_part_max(tr_stream *s, float *mx, const float *logits, size_t N,
                                   size_t V) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_max_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0,
                                     tr__cu_stream(s)->st>>>(mx, logits, N, V);
  TR__LAUNCHED(d, "crossentropy_part_max");
  return 0;
}

/* The row's exps summed in double (fixed lane order: deterministic); a target outside
 * [0, whole) makes the pair's logit NaN, which the loss carries. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_part_sum_kernel(float *pair, float *exps, const float *logits,
                                     const float *mx, const int32_t *targets, size_t N, size_t V,
                                     int64_t lo, int64_t whole) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *z = logits + r * V;
    float *p = exps + r * V;
    const float m = mx[r];
    double sum = 0.0;
    for (size_t c = lane; c < V; c += 32) {
      const float e = expf(z[c] - m);
      p[c] = e;
      sum += (double)e;
    }
    sum = tr__warp_sum(sum);
    if (lane == 0) {
      const int64_t t = targets[r], col = t - lo;
      pair[2 * r] = (float)sum;
      pair[2 * r + 1] = t < 0 || t >= whole ? NAN : col >= 0 && col < (int64_t)V ? z[col] : 0.0f;
    }
  }
}

int tr__cuda_crossentropy_part_sum(tr_stream *s, float *pair, float *exps, const float *logits,
                                   const float *mx, const int32_t *targets, size_t N, size_t V,
                                   int64_t lo, int64_t whole) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_sum_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0,
                                     tr__cu_stream(s)->st>>>(pair, exps, logits, mx, targets, N,
                                                             V, lo, whole);
  TR__LAUNCHED(d, "crossentropy_part_sum");
  return 0;
}

/* probs *= 1 / the row's sum; block b writes partials[b], its rows' losses in double. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_part_finish_kernel(float *probs, const float *pair, const float *mx,
                                        size_t N, size_t V, double *partials) {
  unsigned lane = threadIdx.x & 31;
  double acc = 0.0;
  TR__ROW_LOOP(r, N) {
    const float inv = 1.0f / pair[2 * r];
    float *p = probs + r * V;
    for (size_t c = lane; c < V; c += 32) p[c] *= inv;
    if (lane == 0)
      acc += log((double)pair[2 * r]) - ((double)pair[2 * r + 1] - (double)mx[r]);
  }
  acc = tr__block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

int tr__cuda_crossentropy_part_finish(tr_stream *s, float *loss, float *probs, const float *pair,
                                      const float *mx, size_t N, size_t V, float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  unsigned grid = tr__rows_grid(d, N);
  if (grid > TR__CU_MAX_PARTIALS) grid = TR__CU_MAX_PARTIALS;
  void *scratch;
  int rc = tr__cuda_scratch(s, grid * sizeof(double), &scratch);
  if (rc) return rc;
  tr__crossentropy_part_finish_kernel<<<grid, TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      probs, pair, mx, N, V, (double *)scratch);
  TR__LAUNCHED(d, "crossentropy_part_finish");
  return tr__cuda_finish_sum(s, loss, (const double *)scratch, grid, (double)scale, 0);
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_part_backward_kernel(float *dlogits, const float *probs,
                                          const int32_t *targets, size_t N, size_t V, int64_t lo,
                                          float scale) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const int64_t t = (int64_t)targets[r] - lo; /* outside [0, V): no column here */
    const float *p = probs + r * V;
    float *o = dlogits + r * V;
    for (size_t c = lane; c < V; c += 32)
      o[c] = scale * (p[c] - ((int64_t)c == t ? 1.0f : 0.0f));
  }
}

int tr__cuda_crossentropy_part_backward(tr_stream *s, float *dlogits, const float *probs,
                                        const int32_t *targets, size_t N, size_t V, int64_t lo,
                                        float scale) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_backward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0,
                                          tr__cu_stream(s)->st>>>(dlogits, probs, targets, N, V,
                                                                  lo, scale);
  TR__LAUNCHED(d, "crossentropy_part_backward");
  return 0;
}

/* ---- the accuracy of split logits ----------------------------------------------------------- */

/* A warp per row: each lane's first largest of its columns, then the warp's largest, the
 * smaller column among equals: the host's first of equals. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__crossentropy_part_argmax_kernel(float *top, float *at, const float *logits, size_t N,
                                        size_t V, int64_t lo) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, N) {
    const float *z = logits + r * V;
    float m = -INFINITY;
    long long best = -1;
    for (size_t c = lane; c < V; c += 32)
      if (best < 0 || z[c] > m) m = z[c], best = (long long)c;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const long long b2 = __shfl_xor_sync(0xffffffffu, best, o);
      if (b2 >= 0 && (best < 0 || m2 > m || (m2 == m && b2 < best))) m = m2, best = b2;
    }
    if (lane == 0) top[r] = m, at[r] = -(float)(lo + best);
  }
}

int tr__cuda_crossentropy_part_argmax(tr_stream *s, float *top, float *at, const float *logits,
                                      size_t N, size_t V, int64_t lo) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_argmax_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0,
                                        tr__cu_stream(s)->st>>>(top, at, logits, N, V, lo);
  TR__LAUNCHED(d, "crossentropy_part_argmax");
  return 0;
}

__global__ void tr__crossentropy_part_vote_kernel(float *at, const float *logits,
                                                  const float *top, size_t N, size_t V,
                                                  int64_t lo) {
  for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < N;
       r += (size_t)gridDim.x * blockDim.x) {
    if (!isfinite(at[r])) continue; /* already without a say */
    const int64_t col = -(int64_t)at[r] - lo;
    if (col < 0 || col >= (int64_t)V || logits[r * V + (size_t)col] < top[r]) at[r] = -INFINITY;
  }
}

int tr__cuda_crossentropy_part_vote(tr_stream *s, float *at, const float *logits, const float *top,
                                    size_t N, size_t V, int64_t lo) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_vote_kernel<<<tr__cu_grid(tr__cu_dev(d), N, TR__CU_BLOCK), TR__CU_BLOCK,
                                      0, tr__cu_stream(s)->st>>>(at, logits, top, N, V, lo);
  TR__LAUNCHED(d, "crossentropy_part_vote");
  return 0;
}

__global__ void tr__crossentropy_part_hits_kernel(float *hits, const float *at,
                                                  const int32_t *targets, size_t N) {
  for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < N;
       r += (size_t)gridDim.x * blockDim.x)
    hits[r] = isfinite(at[r]) && (int64_t)(-at[r]) == targets[r] ? 1.0f : 0.0f;
}

int tr__cuda_crossentropy_part_hits(tr_stream *s, float *hits, const float *at,
                                    const int32_t *targets, size_t N) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__crossentropy_part_hits_kernel<<<tr__cu_grid(tr__cu_dev(d), N, TR__CU_BLOCK), TR__CU_BLOCK,
                                      0, tr__cu_stream(s)->st>>>(hits, at, targets, N);
  TR__LAUNCHED(d, "crossentropy_part_hits");
  return 0;
}
