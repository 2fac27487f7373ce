/* cuda_synth.cu — tr_synth_fill on the GPU: synth_impl.h's generator in two kernels.
 *
 * Floats: a warp per sample. A sample's values come from one splitmix64 stream, drawn in
 * order, and a normal takes one draw unless it falls outside its ziggurat layer (2%), when it
 * takes more. The stream's state only adds a constant, so the 32 lanes look at the next 32
 * draws at once (tr__rng_peek); the lanes before the first one outside its layer write their
 * normals (coalesced), and that one is done by lane 0 with tr__normal itself, which takes
 * exactly the draws the host takes; the warp then carries on from the state lane 0 reached.
 * Every value therefore comes from the draws the host's loop gives it. With a teacher, the
 * warp's lanes then take the sample's rows, one each, in tr__synth_teacher_row's order.
 * The ziggurat's tables are read from shared memory.
 *
 * Tokens: a thread per token; each finds its sample's offset (four hashes) and copies a byte
 * of the corpus and the one after it. */
#include "cuda_impl.h"
#include "synth_impl.h"

enum { TR__SYNTH_WARPS = TR__CU_BLOCK / 32 };

/* Value v of a sample: x's first, then (GAUSSIAN) y's. */
__device__ __forceinline__ void tr__synth_put(float *xs, float *ys, size_t xn, size_t v, float val) {
  if (v < xn) xs[v] = val;
  else ys[v - xn] = val;
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__synth_floats_kernel(tr_synth src, uint64_t first, size_t count, float *x, void *y) {
  __shared__ tr_synth_zig z;
  {
    const uint32_t *from = (const uint32_t *)src.zig;
    uint32_t *to = (uint32_t *)&z;
    for (unsigned i = threadIdx.x; i < sizeof z / sizeof(uint32_t); i += blockDim.x) to[i] = from[i];
  }
  __syncthreads();
  const unsigned lane = threadIdx.x & 31u;
  const size_t rows = (size_t)src.rows, xn = rows * (size_t)src.in;
  const bool gaussian = src.kind == TR_SYNTH_GAUSSIAN;
  const size_t yn = gaussian ? rows * (size_t)src.out : 0;
  const size_t V = xn + (y ? yn : 0); /* values drawn per sample */
  for (size_t k = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; k < count;
       k += (size_t)gridDim.x * blockDim.x / 32) {
    tr__rng r = tr__rng_for(src.seed, TR__TAG_SAMPLE, first + k);
    float *xs = x + k * xn, *ys = gaussian && y ? (float *)y + k * yn : NULL;
    for (size_t v = 0; v < V;) { /* warp-uniform: v, V and r are the same in every lane */
      int32_t hz;
      unsigned iz;
      tr__zig_split(tr__rng_peek(&r, lane), &hz, &iz);
      const bool inside = tr__zig_inside(&z, hz, iz);
      const unsigned outside = __ballot_sync(0xffffffffu, !inside);
      const size_t fast_run = outside ? (size_t)(__ffs(outside) - 1) : 32;
      const size_t fast = fast_run < V - v ? fast_run : V - v;
      if (lane < fast) tr__synth_put(xs, ys, xn, v + lane, tr__zig_value(&z, hz, iz));
      v += fast;
      r.s += (uint64_t)fast * TR__RNG_GAMMA;
      if (v == V || fast_run == 32) continue;
      /* the draw at lane `fast` fell outside its layer: the host's path, on lane 0 */
      float val = 0.0f;
      uint64_t state = 0;
      if (lane == 0) {
        tr__rng one = r;
        val = tr__normal(&z, &one);
        state = one.s;
        tr__synth_put(xs, ys, xn, v, val);
      }
      r.s = __shfl_sync(0xffffffffu, state, 0);
      v++;
    }
    if (!y || gaussian) continue;
    __syncwarp(); /* the sample's x, written by every lane, is read by every lane */
    for (size_t row = lane; row < rows; row += 32) {
      const float *xr = xs + row * (size_t)src.in;
      if (src.kind == TR_SYNTH_CLASSIFIER)
        tr__synth_teacher_row(src.teacher, src.in, src.out, xr, NULL,
                              (int32_t *)y + k * rows + row);
      else
        tr__synth_teacher_row(src.teacher, src.in, src.out, xr,
                              (float *)y + (k * rows + row) * (size_t)src.out, NULL);
    }
  }
}

__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__synth_tokens_kernel(tr_synth src, uint64_t first, size_t count, int32_t *x, int32_t *y) {
  const size_t T = (size_t)src.ctx, n = count * T;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t k = e / T, i = e % T;
    const uint8_t *bytes = src.corpus + tr__synth_offset(src.seed, first + k, src.corpus_size, src.ctx);
    x[e] = bytes[i];
    if (y) y[e] = bytes[i + 1];
  }
}

int tr__cuda_synth_fill(tr_stream *s, const tr_synth *src, uint64_t first, size_t count, void *x,
                        void *y) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  const tr__cuda_device *cd = tr__cu_dev(d);
  cudaStream_t st = tr__cu_stream(s)->st;
  if (src->kind == TR_SYNTH_TOKENS) {
    const size_t n = count * (size_t)src->ctx;
    tr__synth_tokens_kernel<<<tr__cu_grid(cd, n, TR__CU_BLOCK), TR__CU_BLOCK, 0, st>>>(
        *src, first, count, (int32_t *)x, (int32_t *)y);
    TR__LAUNCHED(d, "synth_fill (tokens)");
    return 0;
  }
  /* a warp per sample */
  const unsigned grid = tr__cu_grid(cd, count, TR__SYNTH_WARPS);
  tr__synth_floats_kernel<<<grid, TR__CU_BLOCK, 0, st>>>(*src, first, count, (float *)x, y);
  TR__LAUNCHED(d, "synth_fill");
  return 0;
}
