/* backend_impl.h — what a device backend implements (private to gpu/).
 *
 * A backend is one constant tr__backend: a struct of function pointers in the ggml manner.
 * gpu/device.c and gpu/device_ops.c are the core wrapper behind tr_device.h: they parse
 * specs, own the handle structs below, check arguments and the owner thread, return early on
 * empty sizes, and only then call the backend's slot. So a slot may assume: the stream
 * belongs to a device of this backend, pointers are non-NULL where the public header does
 * not allow NULL, sizes are > 0 (reductions with n == 0 never reach the backend: the wrapper
 * writes the 0 itself through `fill`), and the caller is the owner thread.
 *
 * Slots marked OPTIONAL may be NULL; the wrapper then falls back as noted, or reports
 * "<device>: <op>: not implemented by the <backend> backend" (TR_EDEVICE). So may the
 * kernels' (TR__OP_MAP), except `fill`, which empty reductions use. Everything else is
 * required.
 *
 * Failures: a slot returns 0 or a negative TR_E... status and, on failure, records the text
 * with tr__device_fail(dev, status, "cudaMemcpyAsync: %s (%s:%d)", ...), which also
 * returns the status, so `return tr__device_fail(...)` reads naturally.
 *
 * Slot names avoid memcpy/memset/free, which libc may define as macros.
 *
 * Registration: device.c lists the backends it was built with (host always; cuda when the
 * build defines TR_HAVE_CUDA, see gpu/meson.build) and refers to each by its tr__backend
 * object: `extern const tr__backend tr__host_backend, tr__cuda_backend;`.
 */
#ifndef TR_BACKEND_IMPL_H
#define TR_BACKEND_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr__backend tr__backend;

/* What a communicator's comm_run slot is asked (tr_comm_*). */
typedef enum tr__comm_op {
  TR__COMM_ALLREDUCE, TR__COMM_REDUCE, TR__COMM_BROADCAST, TR__COMM_SEND, TR__COMM_RECV
} tr__comm_op;

struct tr_device {
  const tr__backend *be;
  void *impl;            /* the backend's per-device state, set by `open` */
  tr_device_info info;   /* filled by `open` (device.c sets kind, index, ordinal, name) */
  tr_device_list *list;
  tr_stream *stream;     /* the compute stream, opened by device.c after `open` */
  tr_stream *streams;    /* every open stream, for close */
  int bound;             /* an owner thread is set (__atomic builtins: C++ includes this) */
  pthread_t owner;
  int tf32;              /* tr_device_set_tf32 */
  char error[512];       /* last failure */
};

struct tr_stream {
  tr_device *dev;
  void *impl;            /* set by `stream_open` */
  tr_stream *next;       /* the device's list */
  int capturing;         /* between tr_capture_begin and tr_capture_end: allocations and
                            event records on it fail (they cannot be recorded) */
  char name[32];
};

struct tr_event {
  tr_device *dev;
  void *impl;            /* set by `event_open` */
  unsigned flags;        /* TR_EVENT_* */
};

struct tr_capture {
  tr_device *dev;
  void *impl;            /* set by `capture_end` */
};

/* X(name, params, args, checks): the one list of the device layer's kernels. An entry gives
 * the public function tr_<name>(tr_stream *s, <params>) (declared and documented in
 * tr_device.h: a declaration that disagrees with the list does not compile), the backend
 * slot `name` with the same parameters, its wrapper in device_ops.c, and each backend's
 * prototype and table entry (tr__host_<name>, tr__cuda_<name>). `checks` is what the wrapper
 * does before it calls the slot, in order, in device_ops.c's words:
 *
 *   ELEMS(a, b, c)           the op's element count a * b * c (fails on overflow);
 *   EMPTY(stmt)              what the op does instead when that count is 0;
 *   NN(p)                    p must not be NULL;
 *   REQUIRE(cond, fmt, ...)  fails with TR_EINVAL and the message unless cond holds;
 *   LET(stmt)                normalises an argument (a flag to 0 or 1).
 *
 * A new kernel is an entry here, its declaration in tr_device.h and its implementations
 * (a backend without one leaves the slot NULL: the wrapper reports "not implemented"). */
#define TR__UNPAREN(...) __VA_ARGS__
#define TR__OP_MAP(X)                                                                             \
  X(fill, (float *x, size_t n, float value), (x, n, value),                                       \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(x))                                                         \
  X(init_uniform, (float *x, size_t n, float lo, float hi, uint64_t seed, uint64_t offset),       \
    (x, n, lo, hi, seed, offset), ELEMS(n, 1, 1) EMPTY(return 0) NN(x))                           \
  X(init_normal, (float *x, size_t n, float mean, float std, uint64_t seed, uint64_t offset),     \
    (x, n, mean, std, seed, offset), ELEMS(n, 1, 1) EMPTY(return 0) NN(x))                        \
  X(dropout_mask, (float *mask, size_t n, float p, float scale, uint64_t seed, uint64_t offset),  \
    (mask, n, p, scale, seed, offset),                                                            \
    REQUIRE(p >= 0.0f && p <= 1.0f && isfinite(scale),                                            \
            "p %g must lie in [0,1] and scale %g be finite", (double)p, (double)scale)            \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(mask))                                                      \
  X(add, (float *out, const float *a, const float *b, size_t n), (out, a, b, n),                  \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(out) NN(a) NN(b))                                           \
  X(mul, (float *out, const float *a, const float *b, size_t n), (out, a, b, n),                  \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(out) NN(a) NN(b))                                           \
  X(axpy, (float *y, float alpha, const float *x, size_t n), (y, alpha, x, n),                    \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(y) NN(x))                                                   \
  X(scale, (float *x, float alpha, size_t n), (x, alpha, n), ELEMS(n, 1, 1) EMPTY(return 0) NN(x)) \
  X(scale_dev, (float *x, const float *scalar, size_t n), (x, scalar, n),                         \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(x) NN(scalar))                                              \
  X(to_bf16, (tr_bf16 *out, const float *inp, size_t n), (out, inp, n),                          \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(out) NN(inp))                                               \
  X(sumsq, (float *out, const float *x, size_t n, int accumulate), (out, x, n, accumulate),       \
    NN(out) ELEMS(n, 1, 1) EMPTY(return empty_reduction(s, out, accumulate)) NN(x)                \
    LET(accumulate = accumulate != 0))                                                            \
  X(sum, (float *out, const float *x, size_t n, int accumulate), (out, x, n, accumulate),         \
    NN(out) ELEMS(n, 1, 1) EMPTY(return empty_reduction(s, out, accumulate)) NN(x)                \
    LET(accumulate = accumulate != 0))                                                            \
  X(clip_factor, (float *factor, const float *sumsq, float max_norm), (factor, sumsq, max_norm),  \
    NN(factor) NN(sumsq) REQUIRE(max_norm > 0, "max_norm %g must be > 0", (double)max_norm))      \
  X(bias_add, (float *out, const float *bias, size_t N, size_t C), (out, bias, N, C),             \
    ELEMS(N, C, 1) EMPTY(return 0) NN(out) NN(bias))                                              \
  X(bias_grad, (float *dbias, const float *dout, size_t N, size_t C), (dbias, dout, N, C),        \
    ELEMS(N, C, 1) EMPTY(return 0) NN(dbias) NN(dout))                                            \
  X(relu_forward, (float *out, const float *inp, size_t n), (out, inp, n),                            \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(out) NN(inp))                                               \
  X(relu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n), \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(dinp) NN(inp) NN(dout))                                     \
  X(gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n),                            \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(out) NN(inp))                                               \
  X(gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n), \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(dinp) NN(inp) NN(dout))                                     \
  X(layernorm_forward,                                                                                \
    (float *out, float *mean, float *rstd, const float *inp, const float *weight,                 \
     const float *bias, size_t N, size_t C, float eps),                                           \
    (out, mean, rstd, inp, weight, bias, N, C, eps),                                              \
    ELEMS(N, C, 1) if (!N) return 0; REQUIRE(C > 0, "C must be > 0")                              \
    NN(out) NN(mean) NN(rstd) NN(inp) NN(weight) NN(bias))                                        \
  X(layernorm_backward,                                                                                \
    (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,              \
     const float *weight, const float *mean, const float *rstd, size_t N, size_t C),              \
    (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C),                                  \
    ELEMS(N, C, 1) EMPTY(return 0) NN(dinp) NN(dweight) NN(dbias) NN(dout) NN(inp) NN(weight)     \
    NN(mean) NN(rstd))                                                                            \
  X(softmax_forward, (float *out, const float *inp, size_t N, size_t C), (out, inp, N, C),            \
    ELEMS(N, C, 1) EMPTY(return 0) NN(out) NN(inp))                                               \
  X(softmax_backward, (float *dinp, const float *out, const float *dout, size_t N, size_t C),          \
    (dinp, out, dout, N, C), ELEMS(N, C, 1) EMPTY(return 0) NN(dinp) NN(out) NN(dout))            \
  X(attn_softmax_forward, (float *att, const float *preatt, size_t BH, size_t T, float scale),        \
    (att, preatt, BH, T, scale),                                                                  \
    ELEMS(T, T, BH) EMPTY(return 0) NN(att) NN(preatt)                                            \
    REQUIRE(scale > 0, "scale %g must be > 0", (double)scale))                                    \
  X(attn_softmax_backward,                                                                             \
    (float *dpreatt, const float *att, const float *datt, size_t BH, size_t T, float scale),      \
    (dpreatt, att, datt, BH, T, scale),                                                           \
    ELEMS(T, T, BH) EMPTY(return 0) NN(dpreatt) NN(att) NN(datt))                                 \
  X(crossentropy_forward,                                                                             \
    (float *loss, float *probs, const float *logits, const int32_t *targets, size_t N, size_t V,  \
     float scale),                                                                                \
    (loss, probs, logits, targets, N, V, scale),                                                  \
    ELEMS(N, V, 1) NN(loss) if (!N) return empty_reduction(s, loss, 0);                           \
    REQUIRE(V > 0, "V must be > 0") NN(probs) NN(logits) NN(targets))                             \
  X(crossentropy_backward,                                                                             \
    (float *dlogits, const float *probs, const int32_t *targets, size_t N, size_t V, float scale), \
    (dlogits, probs, targets, N, V, scale),                                                       \
    ELEMS(N, V, 1) EMPTY(return 0) NN(dlogits) NN(probs) NN(targets))                             \
  X(mse_forward, (float *loss, const float *pred, const float *target, size_t n, float scale),        \
    (loss, pred, target, n, scale),                                                               \
    NN(loss) ELEMS(n, 1, 1) EMPTY(return empty_reduction(s, loss, 0)) NN(pred) NN(target))        \
  X(mse_backward, (float *dpred, const float *pred, const float *target, size_t n, float scale),       \
    (dpred, pred, target, n, scale), ELEMS(n, 1, 1) EMPTY(return 0) NN(dpred) NN(pred) NN(target)) \
  X(embedding_forward,                                                                                \
    (float *out, const int32_t *idx, const float *wte, const float *wpe, size_t B, size_t T,      \
     size_t C, size_t V),                                                                         \
    (out, idx, wte, wpe, B, T, C, V),                                                             \
    ELEMS(B, T, C) EMPTY(return 0) REQUIRE(V > 0, "V must be > 0") NN(out) NN(idx) NN(wte))       \
  X(embedding_backward,                                                                                \
    (float *dwte, float *dwpe, const float *dout, const int32_t *idx, size_t B, size_t T,         \
     size_t C, size_t V),                                                                         \
    (dwte, dwpe, dout, idx, B, T, C, V),                                                          \
    ELEMS(B, T, C) EMPTY(return 0) REQUIRE(V > 0, "V must be > 0") NN(dwte) NN(dout) NN(idx))     \
  X(dc_asgd, (float *grad, const float *now, const float *pulled, size_t n, float lambda),        \
    (grad, now, pulled, n, lambda), ELEMS(n, 1, 1) EMPTY(return 0) NN(grad) NN(now) NN(pulled))   \
  X(sgd_update, (float *param, const float *grad, size_t n, float lr, float weight_decay),        \
    (param, grad, n, lr, weight_decay), ELEMS(n, 1, 1) EMPTY(return 0) NN(param) NN(grad))        \
  X(momentum_update,                                                                              \
    (float *param, const float *grad, float *mom, size_t n, float lr, float momentum,             \
     float weight_decay, int nesterov),                                                           \
    (param, grad, mom, n, lr, momentum, weight_decay, nesterov),                                  \
    ELEMS(n, 1, 1) EMPTY(return 0) NN(param) NN(grad) NN(mom) LET(nesterov = nesterov != 0))      \
  X(adamw_update,                                                                                 \
    (float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,        \
     float beta2, float eps, float weight_decay, int64_t t),                                      \
    (param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t),                               \
    REQUIRE(t >= 1, "step %lld must be >= 1", (long long)t) ELEMS(n, 1, 1) EMPTY(return 0)        \
    NN(param) NN(grad) NN(m) NN(v))                                                               \
  X(synth_fill, (const tr_synth *src, uint64_t first, size_t count, void *x, void *y),            \
    (src, first, count, x, y),                                                                    \
    NN(src) LET(const char *why_ = tr__synth_invalid(src)) REQUIRE(!why_, "%s", why_)             \
    ELEMS(count, 1, 1) EMPTY(return 0) NN(x))                                                  \
  X(embedding_part_forward,                                                                       \
    (float *out, const int32_t *idx, const float *wte, size_t N, size_t C, size_t V, int64_t lo), \
    (out, idx, wte, N, C, V, lo),                                                                 \
    ELEMS(N, C, 1) EMPTY(return 0) REQUIRE(V > 0 && lo >= 0, "V %zu must be > 0, lo %lld >= 0",   \
                                           V, (long long)lo) NN(out) NN(idx) NN(wte))             \
  X(embedding_part_backward,                                                                      \
    (float *dwte, float *dwpe, const float *dout, const int32_t *idx, size_t B, size_t T,         \
     size_t C, size_t V, int64_t lo),                                                             \
    (dwte, dwpe, dout, idx, B, T, C, V, lo),                                                      \
    ELEMS(B, T, C) EMPTY(return 0) REQUIRE(V > 0 && lo >= 0, "V %zu must be > 0, lo %lld >= 0",   \
                                           V, (long long)lo) NN(dwte) NN(dout) NN(idx))           \
  X(crossentropy_part_max, (float *mx, const float *logits, size_t N, size_t V),                 \
    (mx, logits, N, V),                                                                           \
    ELEMS(N, V, 1) if (!N) return 0; REQUIRE(V > 0, "V must be > 0") NN(mx) NN(logits))           \
  X(crossentropy_part_sum,                                                                        \
    (float *pair, float *exps, const float *logits, const float *mx, const int32_t *targets,      \
     size_t N, size_t V, int64_t lo, int64_t whole),                                              \
    (pair, exps, logits, mx, targets, N, V, lo, whole),                                           \
    ELEMS(N, V, 1) if (!N) return 0;                                                              \
    REQUIRE(V > 0 && lo >= 0 && lo + (int64_t)V <= whole,                                         \
            "columns [%lld, %lld) must lie in the vocabulary [0, %lld)", (long long)lo,           \
            (long long)(lo + (int64_t)V), (long long)whole)                                       \
    NN(pair) NN(exps) NN(logits) NN(mx) NN(targets))                                              \
  X(crossentropy_part_finish,                                                                     \
    (float *loss, float *probs, const float *pair, const float *mx, size_t N, size_t V,           \
     float scale),                                                                                \
    (loss, probs, pair, mx, N, V, scale),                                                         \
    ELEMS(N, V, 1) NN(loss) if (!N) return empty_reduction(s, loss, 0);                           \
    REQUIRE(V > 0, "V must be > 0") NN(probs) NN(pair) NN(mx))                                    \
  X(crossentropy_part_backward,                                                                   \
    (float *dlogits, const float *probs, const int32_t *targets, size_t N, size_t V, int64_t lo,  \
     float scale),                                                                                \
    (dlogits, probs, targets, N, V, lo, scale),                                                   \
    ELEMS(N, V, 1) EMPTY(return 0) REQUIRE(lo >= 0, "lo %lld must be >= 0", (long long)lo)        \
    NN(dlogits) NN(probs) NN(targets))                                                            \
  X(crossentropy_part_argmax,                                                                     \
    (float *top, float *at, const float *logits, size_t N, size_t V, int64_t lo),                 \
    (top, at, logits, N, V, lo),                                                                  \
    ELEMS(N, V, 1) if (!N) return 0; REQUIRE(V > 0 && lo >= 0, "V %zu must be > 0, lo %lld >= 0", \
                                             V, (long long)lo) NN(top) NN(at) NN(logits))         \
  X(crossentropy_part_vote,                                                                       \
    (float *at, const float *logits, const float *top, size_t N, size_t V, int64_t lo),           \
    (at, logits, top, N, V, lo),                                                                  \
    ELEMS(N, V, 1) if (!N) return 0; REQUIRE(V > 0 && lo >= 0, "V %zu must be > 0, lo %lld >= 0", \
                                             V, (long long)lo) NN(at) NN(logits) NN(top))         \
  X(crossentropy_part_hits, (float *hits, const float *at, const int32_t *targets, size_t N),     \
    (hits, at, targets, N), ELEMS(N, 1, 1) EMPTY(return 0) NN(hits) NN(at) NN(targets))

struct tr__backend {
  const char *name; /* "host", "cuda": also the spec prefix */
  tr_device_kind kind;

  /* ---- discovery and lifetime (called from the thread that opens or closes the list) ---- */
  int (*count)(void);                           /* physical devices; 0 when none */
  /* Sets d->impl and d->info (model, memory, cc, multiprocessors) for physical device
   * d->info.ordinal; several logical devices may open the same ordinal. */
  int (*open)(tr_device *d);
  void (*close)(tr_device *d);                  /* after every stream and event is closed */
  /* OPTIONAL: once every device of a list is open (CUDA: enable peer access between the
   * list's GPUs). devs are this backend's devices of the list, in order. */
  int (*link)(tr_device **devs, int n);
  /* OPTIONAL (default: 1 for devices of one backend, 0 otherwise) */
  int (*can_access_peer)(const tr_device *d, const tr_device *peer);
  /* OPTIONAL: the calling thread becomes the owner (CUDA: cudaSetDevice, NVTX thread name). */
  int (*bind)(tr_device *d);
  /* OPTIONAL: refresh d->info.memory_free / memory_total. */
  int (*update_memory)(tr_device *d);
  /* OPTIONAL: d->tf32 changed (CUDA: cublasSetMathMode). */
  int (*set_tf32)(tr_device *d);

  /* ---- memory (ordered on stream s of device d) ---- */
  int (*alloc)(tr_stream *s, size_t bytes, void **out);
  int (*dealloc)(tr_stream *s, void *ptr);
  /* OPTIONAL pair (default: 64-byte aligned malloc): pinned host memory */
  int (*host_alloc)(tr_device *d, size_t bytes, void **out);
  int (*host_free)(tr_device *d, void *ptr);

  /* ---- streams and events ---- */
  int (*stream_open)(tr_stream *s);             /* s->dev, s->name are set */
  void (*stream_close)(tr_stream *s);
  int (*stream_synchronize)(tr_stream *s);
  int (*event_open)(tr_event *e);               /* e->dev, e->flags are set */
  void (*event_close)(tr_event *e);
  int (*event_record)(tr_event *e, tr_stream *s);
  int (*stream_wait_event)(tr_stream *s, tr_event *e); /* e may belong to another device */
  int (*event_query)(tr_event *e);              /* 1 done, 0 pending, < 0 error */
  int (*event_synchronize)(tr_event *e);
  /* OPTIONAL: reports "not implemented" when NULL */
  int (*event_elapsed_ms)(tr_event *start, tr_event *end, float *ms);

  /* ---- captures (OPTIONAL, all four or none: tr_device_can_capture 0 without them) ---- */
  int (*capture_begin)(tr_stream *s);
  /* Always ends the recording; keep 0: drop it. *exec: the backend's launchable form. */
  int (*capture_end)(tr_stream *s, int keep, void **exec);
  int (*capture_launch)(tr_capture *g, tr_stream *s);
  void (*capture_free)(tr_capture *g);

  /* ---- copies ---- */
  int (*copy)(tr_stream *s, void *dst, const void *src, size_t bytes, tr_copy_kind kind);
  /* OPTIONAL: default copy(s, dst, src, bytes, TR_COPY_D2D), right for backends with one
   * address space (host; CUDA with unified addressing). */
  int (*copy_peer)(tr_stream *s, void *dst, tr_device *dst_dev, const void *src,
                     tr_device *src_dev, size_t bytes);
  int (*fill_bytes)(tr_stream *s, void *dst, int value, size_t bytes); /* tr_memset */

  /* ---- GEMM ---- */
  int (*gemm)(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
  /* OPTIONAL: default, `batch` calls of gemm */
  int (*gemm_batched)(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                      const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                      int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                      int batch);
  /* OPTIONAL (not implemented): tr_gemm_batched_bf16, and tr_gemm_bf16 as a batch of 1 */
  int (*gemm_bf16)(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                   const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                   int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                   int batch);

  /* ---- collectives (tr_comm_*): OPTIONAL all together; NULL: the backend has none ---- */
  const char *(*comm_library)(void);            /* "NCCL 2.28.9" */
  /* devs: n devices of this backend, distinct GPUs (checked by the wrapper); impls[i] */
  int (*comm_open_all)(tr_device *const *devs, int n, void **impls, char *err, size_t size);
  int (*comm_id)(void *id, size_t bytes, char *err, size_t size);
  int (*comm_open_rank)(tr_device *d, const void *id, int count, int rank, void **impl,
                        char *err, size_t size);
  void (*comm_close)(tr_device *d, void *impl, bool abort);
  /* one operation on s; count in elements of its type (floats; bytes for send and recv) */
  int (*comm_run)(tr_stream *s, void *impl, tr__comm_op op, const void *send, void *recv,
                  size_t count, int peer);

  /* ---- kernels: a slot per entry of TR__OP_MAP, with the public op's parameters ---- */
#define TR__OP_SLOT(name, params, args, checks) int (*name)(tr_stream * s, TR__UNPAREN params);
  TR__OP_MAP(TR__OP_SLOT)
#undef TR__OP_SLOT
};

/* The backend of a kind of device in this build, or NULL. */
const tr__backend *tr__backend_of(tr_device_kind kind);
/* The owner-thread rule of every call on d (device.c), for the wrappers outside it
 * (device_impl.h's ENTER, comm.c). */
int tr__device_enter(tr_device *d);

/* Records "<device name>: <text>" as d's last failure and returns status (device_fail.c,
 * below the backends, which all call it). */
int tr__device_fail(tr_device *d, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Philox4x32-10 (Salmon et al., SC'11), the generator behind tr_init_* and
 * tr_dropout_mask: shared so that
 * every backend computes the same words for the same (counter, key). Plain C, usable from
 * CUDA device code when compiled with __host__ __device__ (TR__HD). */
#ifndef TR__HD
#define TR__HD
#endif
static inline TR__HD void tr__philox4x32_10(const uint32_t ctr_in[4], uint32_t key0,
                                              uint32_t key1, uint32_t out[4]) {
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The four words at counter (ctr low, ctr high, tag, 0) under key (seed low, seed high): tag
 * 0 is tr_init_uniform's stream, 1 tr_init_normal's, 2 tr_dropout_mask's. */
static inline TR__HD void tr__philox_at(uint64_t ctr, uint32_t tag, uint64_t seed,
                                        uint32_t out[4]) {
  const uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), tag, 0u};
  tr__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32), out);
}

/* float32 to bfloat16, to the nearest with ties to even (a NaN stays a NaN, made quiet, as
 * rounding could carry it into infinity), and back (exact): tr_to_bf16 on every backend,
 * bit for bit. Bit arithmetic and a select, so host loops of them vectorise. */
static inline TR__HD tr_bf16 tr__bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
  return (tr_bf16)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}
static inline TR__HD float tr__bf16_widen(tr_bf16 h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Dropout's keep/drop of a Philox word: u = (w >> 8) 2^-24 is exact in float. */
static inline TR__HD float tr__dropout_value(uint32_t w, float p, float scale) {
  return (float)(w >> 8) * 0x1p-24f >= p ? scale : 0.0f;
}

#ifdef __cplusplus
}
#endif
#endif
