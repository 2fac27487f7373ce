/* cuda_impl.h — private to gpu/cuda: the CUDA backend's per-device and per-stream state, the
 * macros that check every CUDA and cuBLAS call, and the launch helpers the kernels share.
 *
 * Every slot of tr__cuda_backend starts with TR__CU_ENTER(dev), which makes the device's GPU
 * current for the calling thread: one thread may drive several logical devices (tests, the
 * bench), and a kernel launched while another GPU is current would fail or land there.
 *
 * A failing call records "<device>: <call>: <CUDA's text> (<error name>) at file:line" with
 * tr__device_fail and returns TR_EDEVICE (TR_ENOMEM for allocations), so a slot reads:
 *
 *   TR__CU(d, cudaMemsetAsync(dst, value, bytes, cs->st));
 *   tr__relu_kernel<<<grid, block, 0, cs->st>>>(...);
 *   TR__LAUNCHED(d, "relu_forward");     (cudaGetLastError after every launch)
 */
#ifndef TR_CUDA_IMPL_H
#define TR_CUDA_IMPL_H

#define TR__HD __host__ __device__
#include "backend_impl.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* Per tr_stream (s->impl). cuBLAS handles are per stream rather than per device: a handle
 * shared by two streams would share one workspace between GEMMs that may run at once. */
typedef struct tr__cuda_stream {
  cudaStream_t st;
  cublasHandle_t blas;     /* created with the compute stream, else at the stream's first GEMM */
  void *blas_workspace;    /* the handle's own (cublasSetWorkspace): cuBLAS then allocates
                              nothing while the stream captures, and every GEMM, captured or
                              not, picks its algorithm with the same room */
  void *scratch;           /* reductions' per-block partials; grows, stream-ordered */
  size_t scratch_bytes;
  void **retired;          /* scratch blocks outgrown, freed with the stream: a CUDA graph
                              captured before the growth still reads and writes them */
  int nretired;
} tr__cuda_stream;

/* Per logical device (d->impl). Several may share one GPU ("cuda:0,cuda:0"): each has its
 * own pool, streams and handles, so each behaves as a device of its own. */
typedef struct tr__cuda_device {
  int ordinal;
  int sms;                 /* multiprocessors: sizes the grids of grid-stride kernels */
  cudaMemPool_t pool;      /* this logical device's stream-ordered allocations */
  const char *memory_track; /* its trace counter's name, found at the first traced allocation */
  unsigned long long peer_mask; /* GPUs whose memory this one's kernels can access */
  int nstreams;            /* streams opened so far: the first is the compute stream */
  /* live allocations (open addressing, linear probing), freed at close */
  void **live;
  size_t live_cap, live_count;
} tr__cuda_device;

static inline tr__cuda_device *tr__cu_dev(const tr_device *d) { return (tr__cuda_device *)d->impl; }
static inline tr__cuda_stream *tr__cu_stream(const tr_stream *s) { return (tr__cuda_stream *)s->impl; }

/* ---- cuda_common.cu: what every slot calls ------------------------------------------------ */

/* Records a failed CUDA call on d and returns the status to report (see the top). */
int tr__cuda_fail(tr_device *d, cudaError_t err, const char *call, const char *file, int line);
int tr__cublas_fail(tr_device *d, cublasStatus_t st, const char *call, const char *file,
                    int line);
/* Makes d's GPU current for the calling thread (cheap when it already is). */
int tr__cuda_enter(tr_device *d);
/* Scratch of at least `bytes` on stream s, valid for work queued on s from now on. */
int tr__cuda_scratch(tr_stream *s, size_t bytes, void **out);

#define TR__CU(d, call)                                                       \
  do {                                                                        \
    cudaError_t tr__e_ = (call);                                              \
    if (tr__e_ != cudaSuccess) return tr__cuda_fail((d), tr__e_, #call, __FILE__, __LINE__); \
  } while (0)

#define TR__CUBLAS(d, call)                                                   \
  do {                                                                        \
    cublasStatus_t tr__b_ = (call);                                           \
    if (tr__b_ != CUBLAS_STATUS_SUCCESS)                                      \
      return tr__cublas_fail((d), tr__b_, #call, __FILE__, __LINE__);         \
  } while (0)

/* After every kernel launch: a bad configuration or an earlier asynchronous fault shows up
 * here, reported as "kernel <name>: ...". */
int tr__cuda_launched(tr_device *d, const char *name, const char *file, int line);
#define TR__LAUNCHED(d, name)                                                 \
  do {                                                                        \
    int tr__rc_ = tr__cuda_launched((d), (name), __FILE__, __LINE__);         \
    if (tr__rc_) return tr__rc_;                                              \
  } while (0)

#define TR__CU_ENTER(d)                                                       \
  do {                                                                        \
    int tr__rc_ = tr__cuda_enter(d);                                          \
    if (tr__rc_) return tr__rc_;                                              \
  } while (0)

/* ---- cuda_timing.cu: the profiling of cuda_backend.cu ------------------------------------ */

/* A thread takes device d: its traced ranges are timed on d's compute stream from now on. */
void tr__cuda_timing_bind(tr_device *d);
/* The slices of d's ranges that have completed go to the trace (after a synchronize). */
void tr__cuda_timing_harvest(const tr_device *d);
/* d's memory in use, to its counter track when tracing (after an allocation or a free). */
void tr__cuda_memory_counter(tr_device *d);

/* ---- launch geometry ---------------------------------------------------------------------- */

enum { TR__CU_BLOCK = 256, TR__CU_WARPS = TR__CU_BLOCK / 32, TR__CU_MAX_PARTIALS = 1024 };

/* Blocks for a grid-stride loop over `work` items: enough to fill the GPU (8 blocks of 256
 * per multiprocessor), never more than the items need. */
static inline unsigned tr__cu_grid(const tr__cuda_device *cd, size_t work, unsigned per_block) {
  size_t want = (work + per_block - 1) / per_block;
  size_t cap = (size_t)(cd->sms > 0 ? cd->sms : 1) * 8;
  if (want > cap) want = cap;
  return want ? (unsigned)want : 1u;
}

/* Blocks for a warp-per-row kernel over N rows (grid-stride beyond the cap), and its loop:
 * warp w of the grid takes rows w, w + warps, ... */
static inline unsigned tr__rows_grid(tr_device *d, size_t N) {
  return tr__cu_grid(tr__cu_dev(d), N, TR__CU_WARPS);
}
#define TR__ROW_LOOP(r, N)                                                                  \
  for (size_t r = (size_t)blockIdx.x * TR__CU_WARPS + (threadIdx.x >> 5); r < (N);          \
       r += (size_t)gridDim.x * TR__CU_WARPS)

static inline bool tr__cu_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Sum of a warp's values, every lane receiving it. */
template <typename T>
__device__ __forceinline__ T tr__warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float tr__warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Sum over a block of TR__CU_BLOCK threads, valid in thread 0 (fixed order: deterministic). */
template <typename T>
__device__ __forceinline__ T tr__block_sum(T v) {
  __shared__ T part[TR__CU_WARPS];
  v = tr__warp_sum(v);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = 0;
  if (threadIdx.x < 32) {
    r = threadIdx.x < TR__CU_WARPS ? part[threadIdx.x] : (T)0;
    r = tr__warp_sum(r);
  }
  __syncthreads(); /* part may be reused by the caller's next call */
  return r;
}

/* ---- the two-pass deterministic reduction ------------------------------------------------ */

/* Queues out[0] = (accumulate ? out[0] : 0) + scale * sum(partials[0..n)) on s: one block
 * sums in double in a fixed order, so a result never depends on timing (replicas that
 * reduce the same gradients agree bit for bit). */
int tr__cuda_finish_sum(tr_stream *s, float *out, const double *partials, unsigned n,
                        double scale, int accumulate);

/* ---- the slots of tr__cuda_backend defined outside cuda_backend.cu ---------------------- */

/* The stream's cuBLAS handle, created on first use and bound to the stream for good. */
int tr__cuda_blas_handle(tr_stream *s, cublasHandle_t *out);

/* cuda_blas.cu */
int tr__cuda_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc);
int tr__cuda_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                       const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                       int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                       int batch);
int tr__cuda_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K,
                          float alpha, const float *A, int lda, int64_t stride_a,
                          const float *B, int ldb, int64_t stride_b, float beta, float *C,
                          int ldc, int64_t stride_c, int batch);

/* cuda_nccl.cu: the collectives' slots (backend_impl.h), where the build has NCCL */
#ifdef TR_HAVE_NCCL
const char *tr__nccl_library(void);
int tr__nccl_open_all(tr_device *const *devs, int n, void **impls, char *err, size_t size);
int tr__nccl_id(void *id, size_t bytes, char *err, size_t size);
int tr__nccl_open_rank(tr_device *d, const void *id, int count, int rank, void **impl,
                       char *err, size_t size);
void tr__nccl_close(tr_device *d, void *impl, bool abort);
int tr__nccl_run(tr_stream *s, void *impl, tr__comm_op op, const void *send, void *recv,
                 size_t count, int peer);
#endif

/* The kernels (cuda_kernels.cu, cuda_nn.cu, cuda_vocab.cu, cuda_embedding.cu): tr__cuda_<name>
 * for each entry of TR__OP_MAP. */
#define TR__CUDA_OP(name, params, args, checks) \
  int tr__cuda_##name(tr_stream *s, TR__UNPAREN params);
TR__OP_MAP(TR__CUDA_OP)
#undef TR__CUDA_OP

#endif
