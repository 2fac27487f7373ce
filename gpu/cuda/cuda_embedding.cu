/* cuda_embedding.cu — the embedding of the CUDA backend: its forward, and a backward that is
 * deterministic (no atomics) and spreads evenly over the GPU whatever the tokens' frequencies.
 *
 * Backward, dwte[idx[r]] += dout[r] for every row r:
 *
 *  1. Every row's token, paired with the row's number, sorted by token with cub's radix sort,
 *     which is stable: the rows of one token end up side by side, in row order. A token
 *     outside [0, V) is sorted as V, after every valid one, and skipped.
 *  2. The sorted rows in tiles of TILE. A thread per (tile, column) walks its tile's rows in
 *     order. A run of one token that lies wholly in the tile is added onto dwte there, row
 *     after row: the host backend's order, so the same bits. A run cut by a tile's edge
 *     leaves its piece in the tile's partials instead: `cont` for the piece of a run that
 *     began in an earlier tile, `head` for the piece of one that begins here and goes on.
 *  3. A thread per (tile with a head, column) adds dwte, the head and the next tiles'
 *     pieces of the run, in tile order.
 *
 * Every thread of step 2 reads TILE rows of dout, coalesced along the columns, so the work is
 * the gradient's size however many tokens repeat (the previous kernel scanned every row for
 * every vocabulary entry: V × rows index reads). A token with a very long run (padding) costs
 * step 3 one addition per tile it spans.
 */
#include "cuda_impl.h"

#include <limits.h>
#include <math.h>

#include <cub/device/device_radix_sort.cuh>

enum { TILE = 256, COLS = 128 /* threads of a block of steps 2 and 3: its columns */ };

/* out (B*T, C) = wte[idx] (+ wpe[t]); a token outside [0,V) gives a NaN row, not a read
 * out of bounds. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__embedding_forward_kernel(float *out, const int32_t *idx, const float *wte, const float *wpe,
                             size_t rows, size_t T, size_t C, size_t V) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, rows) {
    int32_t tok = idx[r];
    float *o = out + r * C;
    if (tok < 0 || (size_t)tok >= V) {
      for (size_t c = lane; c < C; c += 32) o[c] = NAN;
      continue;
    }
    const float *e = wte + (size_t)tok * C, *p = wpe ? wpe + (r % T) * C : NULL;
    for (size_t c = lane; c < C; c += 32) o[c] = p ? e[c] + p[c] : e[c];
  }
}

int tr__cuda_embedding_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                           const float *wpe, size_t B, size_t T, size_t C, size_t V) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  size_t rows = B * T;
  tr__embedding_forward_kernel<<<tr__rows_grid(d, rows), TR__CU_BLOCK, 0, tr__cu_stream(s)->st>>>(
      out, idx, wte, wpe, rows, T, C, V);
  TR__LAUNCHED(d, "embedding_forward");
  return 0;
}

/* A member's rows [lo, lo + V) of a whole vocabulary (tr_embedding_part_forward): out (N, C)
 * = wte[idx - lo], zeros for a token outside them. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__embedding_part_forward_kernel(float *out, const int32_t *idx, const float *wte,
                                      size_t rows, size_t C, size_t V, int64_t lo) {
  unsigned lane = threadIdx.x & 31;
  TR__ROW_LOOP(r, rows) {
    const int64_t tok = (int64_t)idx[r] - lo;
    float *o = out + r * C;
    if (tok < 0 || tok >= (int64_t)V) {
      for (size_t c = lane; c < C; c += 32) o[c] = 0.0f;
      continue;
    }
    const float *e = wte + (size_t)tok * C;
    for (size_t c = lane; c < C; c += 32) o[c] = e[c];
  }
}

int tr__cuda_embedding_part_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                                    size_t N, size_t C, size_t V, int64_t lo) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  tr__embedding_part_forward_kernel<<<tr__rows_grid(d, N), TR__CU_BLOCK, 0,
                                      tr__cu_stream(s)->st>>>(out, idx, wte, N, C, V, lo);
  TR__LAUNCHED(d, "embedding_part_forward");
  return 0;
}

/* Step 1's input: row r's token less lo (V when that lies outside [0, V): skipped) and r. */
__global__ void tr__embedding_keys_kernel(unsigned *keys, unsigned *rows, const int32_t *idx,
                                          unsigned n, unsigned V, int64_t lo) {
  for (unsigned r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
    const int64_t t = (int64_t)idx[r] - lo;
    keys[r] = t >= 0 && t < (int64_t)V ? (unsigned)t : V;
    rows[r] = r;
  }
}

/* Step 2: block (tile, column block); keys and rows sorted; n sorted rows. */
__global__ void __launch_bounds__(COLS)
    tr__embedding_tiles_kernel(float *dwte, float *cont, float *head, const float *dout,
                               const unsigned *keys, const unsigned *rows, unsigned n,
                               size_t C, unsigned V) {
  const size_t c = (size_t)blockIdx.y * COLS + threadIdx.x;
  if (c >= C) return;
  const unsigned t = blockIdx.x, lo = t * TILE, hi = min(n, lo + TILE);
  unsigned i = lo;
  if (lo > 0 && keys[lo - 1] == keys[lo]) { /* the piece of a run from an earlier tile */
    const unsigned v = keys[lo];
    float p = 0.0f;
    for (; i < hi && keys[i] == v; i++) p += dout[(size_t)rows[i] * C + c];
    cont[(size_t)t * C + c] = p;
  }
  while (i < hi) {
    const unsigned v = keys[i];
    /* sorted: the run reaches the tile's end iff its last row has v */
    const bool goes_on = hi < n && keys[hi - 1] == v && keys[hi] == v;
    float w = goes_on || v == V ? 0.0f : dwte[(size_t)v * C + c];
    for (; i < hi && keys[i] == v; i++) w += dout[(size_t)rows[i] * C + c];
    if (goes_on) head[(size_t)t * C + c] = w;
    else if (v != V) dwte[(size_t)v * C + c] = w;
  }
}

/* Step 3: block (tile, column block); the tile's head, if it has one, and the pieces after. */
__global__ void __launch_bounds__(COLS)
    tr__embedding_runs_kernel(float *dwte, const float *cont, const float *head,
                              const unsigned *keys, unsigned n, size_t C, unsigned V) {
  const size_t c = (size_t)blockIdx.y * COLS + threadIdx.x;
  const unsigned t = blockIdx.x, lo = t * TILE, hi = min(n, lo + TILE);
  if (c >= C || hi == n) return;
  const unsigned v = keys[hi - 1];
  /* a head: the tile's last run goes on, and did not come from an earlier tile */
  if (v == V || keys[hi] != v || (lo > 0 && keys[lo - 1] == v)) return;
  float w = dwte[(size_t)v * C + c] + head[(size_t)t * C + c];
  for (unsigned u = t + 1;; u++) {
    w += cont[(size_t)u * C + c];
    const unsigned end = min(n, (u + 1) * TILE);
    if (end == n || keys[end] != v) break;
  }
  dwte[(size_t)v * C + c] = w;
}

/* dwpe (T,C) += sum over b of dout (B,T,C): one thread per (t, c), summing in order. */
__global__ void __launch_bounds__(TR__CU_BLOCK)
    tr__embedding_backward_wpe_kernel(float *dwpe, const float *dout, size_t B, size_t T, size_t C) {
  size_t TC = T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < TC;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (size_t b = 0; b < B; b++) acc += dout[b * TC + i];
    dwpe[i] += acc;
  }
}

static size_t round_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* Both backwards: the rows of tokens in [lo, lo + V) into dwte (V, C); the whole op's lo is 0. */
static int backward_rows(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                         const int32_t *idx, size_t B, size_t T, size_t C, size_t V, int64_t lo) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  cudaStream_t st = tr__cu_stream(s)->st;
  const size_t rows = B * T;
  if (rows > (size_t)INT_MAX - TILE || V >= UINT_MAX || C > (size_t)65535 * COLS)
    return tr__device_fail(d, TR_EINVAL, "embedding_backward: %zu rows, V %zu, C %zu: the CUDA "
                           "backend takes fewer than 2^31 rows, 2^32 tokens and %d columns",
                           rows, V, C, 65535 * COLS);
  const unsigned n = (unsigned)rows, tiles = (n + TILE - 1) / TILE;
  const dim3 grid(tiles, (unsigned)((C + COLS - 1) / COLS));
  int end_bit = 1; /* the keys' bits: V is the largest */
  while (end_bit < 32 && (V >> end_bit) != 0) end_bit++;

  /* scratch: keys and rows, before and after the sort; the pieces; cub's own */
  size_t sort_bytes = 0;
  TR__CU(d, cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (unsigned *)NULL, (unsigned *)NULL,
                                            (unsigned *)NULL, (unsigned *)NULL, (int)n, 0,
                                            end_bit, st));
  const size_t ints = round_up(rows * sizeof(unsigned)),
               pieces = round_up((size_t)tiles * C * sizeof(float));
  char *base;
  int rc = tr__cuda_scratch(s, 4 * ints + 2 * pieces + sort_bytes, (void **)&base);
  if (rc) return rc;
  unsigned *keys_in = (unsigned *)base, *keys = (unsigned *)(base + ints),
           *rows_in = (unsigned *)(base + 2 * ints), *sorted = (unsigned *)(base + 3 * ints);
  float *cont = (float *)(base + 4 * ints), *head = (float *)(base + 4 * ints + pieces);
  void *sort_tmp = base + 4 * ints + 2 * pieces;

  tr__embedding_keys_kernel<<<tr__cu_grid(tr__cu_dev(d), rows, TR__CU_BLOCK), TR__CU_BLOCK, 0,
                              st>>>(keys_in, rows_in, idx, n, (unsigned)V, lo);
  TR__LAUNCHED(d, "embedding_backward");
  TR__CU(d, cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys_in, keys, rows_in, sorted,
                                            (int)n, 0, end_bit, st));
  tr__embedding_tiles_kernel<<<grid, COLS, 0, st>>>(dwte, cont, head, dout, keys, sorted, n, C,
                                                    (unsigned)V);
  TR__LAUNCHED(d, "embedding_backward");
  if (tiles > 1) {
    tr__embedding_runs_kernel<<<grid, COLS, 0, st>>>(dwte, cont, head, keys, n, C, (unsigned)V);
    TR__LAUNCHED(d, "embedding_backward");
  }
  if (dwpe) {
    tr__embedding_backward_wpe_kernel<<<tr__cu_grid(tr__cu_dev(d), T * C, TR__CU_BLOCK),
                                   TR__CU_BLOCK, 0, st>>>(dwpe, dout, B, T, C);
    TR__LAUNCHED(d, "embedding_backward");
  }
  return 0;
}

int tr__cuda_embedding_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                           const int32_t *idx, size_t B, size_t T, size_t C, size_t V) {
  return backward_rows(s, dwte, dwpe, dout, idx, B, T, C, V, 0);
}

int tr__cuda_embedding_part_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *idx, size_t B, size_t T, size_t C, size_t V,
                                     int64_t lo) {
  return backward_rows(s, dwte, dwpe, dout, idx, B, T, C, V, lo);
}
