/* device_ops.c — the calls of the device layer that queue work on a stream: memory (ordered
 * on a stream, and pinned host memory), copies and fills (tr_device.h), GEMM and the kernels
 * of TR__OP_MAP (tr_ops.h). Each checks its arguments and the owner-thread rule
 * (device_impl.h), returns early on empty sizes, and only then calls the backend's slot, with
 * the fallbacks that backend_impl.h promises. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "device_impl.h"
#include "synth_impl.h"

/* ---- memory ---------------------------------------------------------------------------------- */

int tr_stream_alloc(tr_stream *s, size_t bytes, void **out) {
  ENTER(s);
  NOT_NULL(out);
  *out = NULL;
  if (!bytes) return 0;
  NOT_CAPTURING(s);
  return d->be->alloc(s, bytes, out);
}

int tr_stream_free(tr_stream *s, void *ptr) {
  ENTER(s);
  if (!ptr) return 0;
  NOT_CAPTURING(s);
  return d->be->dealloc(s, ptr);
}

int tr_device_alloc(tr_device *d, size_t bytes, void **out) {
  ENTER_DEV(d);
  NOT_NULL(out);
  return tr_stream_alloc(d->stream, bytes, out);
}
int tr_device_free(tr_device *d, void *ptr) {
  ENTER_DEV(d);
  return tr_stream_free(d->stream, ptr);
}

/* Host memory belongs to no device thread: no owner is bound or checked. */
int tr_host_alloc(tr_device *d, size_t bytes, void **out) {
  TR__NOT_NULL(d);
  if (d->be == NULL) return tr__device_placeholder(d, __func__);
  NOT_NULL(out);
  *out = NULL;
  if (!bytes) return 0;
  if (d->be->host_alloc) return d->be->host_alloc(d, bytes, out);
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes || !(*out = aligned_alloc(64, rounded)))
    return tr__device_fail(d, TR_ENOMEM, "host_alloc: %zu bytes asked for: out of memory", bytes);
  return 0;
}

int tr_host_free(tr_device *d, void *ptr) {
  if (!ptr) return 0; /* NULL, as free(NULL): nothing */
  TR__NOT_NULL(d);
  if (d->be == NULL) return tr__device_placeholder(d, __func__);
  if (d->be->host_free) return d->be->host_free(d, ptr);
  free(ptr);
  return 0;
}

/* ---- copies ---------------------------------------------------------------------------------- */

int tr_memcpy(tr_stream *s, void *dst, const void *src, size_t bytes, tr_copy_kind kind) {
  ENTER(s);
  if (!bytes) return 0;
  NOT_NULL(dst);
  NOT_NULL(src);
  if (kind != TR_COPY_H2D && kind != TR_COPY_D2H && kind != TR_COPY_D2D)
    return tr__device_fail(d, TR_EINVAL, "tr_memcpy: unknown copy kind %d", (int)kind);
  return d->be->copy(s, dst, src, bytes, kind);
}

int tr_memcpy_peer(tr_stream *s, void *dst, tr_device *dst_dev, const void *src,
                   tr_device *src_dev, size_t bytes) {
  ENTER(s);
  if (!dst_dev || !src_dev)
    return tr__device_fail(d, TR_EINVAL, "tr_memcpy_peer: %s is NULL", dst_dev ? "src_dev" : "dst_dev");
  if (d != dst_dev && d != src_dev)
    return tr__device_fail(d, TR_EINVAL, "tr_memcpy_peer: s is a stream of %s, neither %s nor %s",
                           d->info.name, dst_dev->info.name, src_dev->info.name);
  if (!bytes) return 0;
  NOT_NULL(dst);
  NOT_NULL(src);
  if (dst_dev->be->kind != src_dev->be->kind)
    return tr__device_fail(d, TR_EINVAL, "tr_memcpy_peer: %s and %s have different backends "
                           "(stage through host memory)", dst_dev->info.name, src_dev->info.name);
  if (d->be->copy_peer) return d->be->copy_peer(s, dst, dst_dev, src, src_dev, bytes);
  return d->be->copy(s, dst, src, bytes, TR_COPY_D2D);
}

int tr_memset(tr_stream *s, void *dst, int value, size_t bytes) {
  ENTER(s);
  if (!bytes) return 0;
  NOT_NULL(dst);
  return d->be->fill_bytes(s, dst, value, bytes);
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

/* 1 when the product has work for the backend, 0 when it has none (M, N or batch 0), or
 * a failure naming the op `fn`. */
static int gemm_begin(tr_device *d, const char *fn, tr_op opa, tr_op opb, int M, int N, int K,
                      int lda, int ldb, int ldc, int batch, const void *A, const void *B,
                      const void *C) {
  if ((opa != TR_OP_N && opa != TR_OP_T) || (opb != TR_OP_N && opb != TR_OP_T))
    return tr__device_fail(d, TR_EINVAL, "%s: transposition must be TR_OP_N or TR_OP_T", fn);
  if (M < 0 || N < 0 || K < 0)
    return tr__device_fail(d, TR_EINVAL, "%s: negative size M=%d N=%d K=%d", fn, M, N, K);
  int acols = opa == TR_OP_N ? K : M, bcols = opb == TR_OP_N ? N : K;
  if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) || ldc < (N > 1 ? N : 1))
    return tr__device_fail(d, TR_EINVAL, "%s: leading dimension too small (lda=%d needs %d, "
                           "ldb=%d needs %d, ldc=%d needs %d)", fn, lda, acols, ldb, bcols, ldc, N);
  if (batch < 0) return tr__device_fail(d, TR_EINVAL, "%s: negative batch %d", fn, batch);
  if (!M || !N || !batch) return 0;
  const char *null = !C ? "C" : K && !A ? "A" : K && !B ? "B" : NULL;
  if (null) return tr__device_fail(d, TR_EINVAL, "%s: %s is NULL", fn, null);
  return 1;
}

int tr_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
            const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  ENTER(s);
  int rc = gemm_begin(d, __func__, opa, opb, M, N, K, lda, ldb, ldc, 1, A, B, C);
  if (rc <= 0) return rc;
  return d->be->gemm(s, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int tr_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                    const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                    int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                    int batch) {
  ENTER(s);
  int rc = gemm_begin(d, __func__, opa, opb, M, N, K, lda, ldb, ldc, batch, A, B, C);
  if (rc <= 0) return rc;
  if (d->be->gemm_batched)
    return d->be->gemm_batched(s, opa, opb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                               beta, C, ldc, stride_c, batch);
  rc = 0;
  for (int i = 0; i < batch && !rc; i++)
    rc = d->be->gemm(s, opa, opb, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
                     beta, C + i * stride_c, ldc);
  return rc;
}

static int gemm_bf16(const char *fn, tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K,
                     float alpha, const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B,
                     int ldb, int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                     int batch) {
  ENTER(s);
  int rc = gemm_begin(d, fn, opa, opb, M, N, K, lda, ldb, ldc, batch, A, B, C);
  if (rc <= 0) return rc;
  if (!d->be->gemm_bf16)
    return tr__device_fail(d, TR_EDEVICE, "%s: not implemented by the %s backend", fn, d->be->name);
  return d->be->gemm_bf16(s, opa, opb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta,
                          C, ldc, stride_c, batch);
}

int tr_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                 const tr_bf16 *A, int lda, const tr_bf16 *B, int ldb, float beta, float *C,
                 int ldc) {
  return gemm_bf16(__func__, s, opa, opb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

int tr_gemm_batched_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                         const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                         int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                         int batch) {
  return gemm_bf16(__func__, s, opa, opb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta,
                   C, ldc, stride_c, batch);
}

/* ---- kernels: the wrappers of TR__OP_MAP -------------------------------------------------- */

/* A reduction over nothing: 0, or the accumulator unchanged. */
static int empty_reduction(tr_stream *s, float *out, int accumulate) {
  return accumulate ? 0 : s->dev->be->fill(s, out, 1, 0.0f);
}

/* n = a * b * c, or fails the call naming the op. */
static int elems(tr_device *d, const char *fn, size_t a, size_t b, size_t c, size_t *n) {
  if (!__builtin_mul_overflow(a, b, n) && !__builtin_mul_overflow(*n, c, n)) return 0;
  return tr__device_fail(d, TR_EINVAL, "%s: size %zu x %zu x %zu overflows", fn, a, b, c);
}

/* The words of the list's checks (backend_impl.h). */
#define ELEMS(a, b, c)                                                              \
  int elems_rc_ = elems(d, __func__, (size_t)(a), (size_t)(b), (size_t)(c), &n_); \
  if (elems_rc_) return elems_rc_;
#define EMPTY(stmt) \
  if (!n_) stmt;
#define NN(p) NOT_NULL(p);
#define REQUIRE(cond, fmt, ...) \
  if (!(cond)) return tr__device_fail(d, TR_EINVAL, "%s: " fmt, __func__, ##__VA_ARGS__);
#define LET(stmt) stmt;

#define TR__OP_WRAPPER(name, params, args, checks)   \
  int tr_##name(tr_stream *s, TR__UNPAREN params) { \
    ENTER(s);                                       \
    size_t n_ = 1; /* the element count, by ELEMS */ \
    (void)n_;                                       \
    checks SLOT(name);                              \
    return d->be->name(s, TR__UNPAREN args);        \
  }
TR__OP_MAP(TR__OP_WRAPPER)
