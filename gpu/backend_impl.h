/* backend_impl.h — what a device backend implements (private to gpu/).
 *
 * A backend is one constant tr__backend: a struct of function pointers in the ggml manner.
 * gpu/device.c is the core wrapper behind tr_device.h: it parses specs, owns the handle
 * structs below, checks arguments and the owner thread, returns early on empty sizes, and
 * only then calls the backend's slot. So a slot may assume: the stream belongs to a device of
 * this backend, pointers are non-NULL where the public header does not allow NULL, sizes
 * are > 0 (reductions with n == 0 never reach the backend: the wrapper writes the 0 itself
 * through `fill`), and the caller is the owner thread.
 *
 * Slots marked OPTIONAL may be NULL; the wrapper then falls back as noted, or reports
 * "<device>: <op>: not implemented by the <backend> backend" (TR_EDEVICE). Everything else
 * is required.
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

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr__backend tr__backend;

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
  char name[32];
};

struct tr_event {
  tr_device *dev;
  void *impl;            /* set by `event_open` */
  unsigned flags;        /* TR_EVENT_* */
};

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

  /* ---- kernels: the arguments and shapes of the public functions of the same name ---- */
  int (*fill)(tr_stream *s, float *x, size_t n, float value);
  int (*init_uniform)(tr_stream *s, float *x, size_t n, float lo, float hi, uint64_t seed,
                      uint64_t offset);
  int (*init_normal)(tr_stream *s, float *x, size_t n, float mean, float std, uint64_t seed,
                     uint64_t offset);
  int (*dropout_mask)(tr_stream *s, float *mask, size_t n, float p, float scale, uint64_t seed,
                      uint64_t offset);
  int (*add)(tr_stream *s, float *out, const float *a, const float *b, size_t n);
  int (*mul)(tr_stream *s, float *out, const float *a, const float *b, size_t n);
  int (*axpy)(tr_stream *s, float *y, float alpha, const float *x, size_t n);
  int (*scale)(tr_stream *s, float *x, float alpha, size_t n);
  int (*scale_dev)(tr_stream *s, float *x, const float *scalar, size_t n);
  int (*sumsq)(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
  int (*sum)(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
  int (*clip_factor)(tr_stream *s, float *factor, const float *sumsq, float max_norm);
  int (*bias_add)(tr_stream *s, float *out, const float *bias, size_t N, size_t C);
  int (*bias_grad)(tr_stream *s, float *dbias, const float *dout, size_t N, size_t C);
  int (*relu_fwd)(tr_stream *s, float *out, const float *inp, size_t n);
  int (*relu_bwd)(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);
  int (*gelu_fwd)(tr_stream *s, float *out, const float *inp, size_t n);
  int (*gelu_bwd)(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);
  int (*layernorm_fwd)(tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, size_t N, size_t C, float eps);
  int (*layernorm_bwd)(tr_stream *s, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       const float *mean, const float *rstd, size_t N, size_t C);
  int (*softmax_fwd)(tr_stream *s, float *out, const float *inp, size_t N, size_t C);
  int (*softmax_bwd)(tr_stream *s, float *dinp, const float *out, const float *dout, size_t N,
                     size_t C);
  int (*attn_softmax_fwd)(tr_stream *s, float *att, const float *preatt, size_t BH, size_t T,
                          float scale);
  int (*attn_softmax_bwd)(tr_stream *s, float *dpreatt, const float *att, const float *datt,
                          size_t BH, size_t T, float scale);
  int (*crossentropy_fwd)(tr_stream *s, float *loss, float *probs, const float *logits,
                          const int32_t *targets, size_t N, size_t V, float scale);
  int (*crossentropy_bwd)(tr_stream *s, float *dlogits, const float *probs,
                          const int32_t *targets, size_t N, size_t V, float scale);
  int (*mse_fwd)(tr_stream *s, float *loss, const float *pred, const float *target, size_t n,
                 float scale);
  int (*mse_bwd)(tr_stream *s, float *dpred, const float *pred, const float *target, size_t n,
                 float scale);
  int (*embedding_fwd)(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                       const float *wpe, size_t B, size_t T, size_t C, size_t V);
  int (*embedding_bwd)(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                       const int32_t *idx, size_t B, size_t T, size_t C, size_t V);
  int (*dc_asgd)(tr_stream *s, float *grad, const float *now, const float *pulled, size_t n,
                 float lambda);
  int (*sgd_update)(tr_stream *s, float *param, const float *grad, size_t n, float lr,
                    float weight_decay);
  int (*momentum_update)(tr_stream *s, float *param, const float *grad, float *mom, size_t n,
                         float lr, float momentum, float weight_decay, int nesterov);
  int (*adamw_update)(tr_stream *s, float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int64_t t);
};

/* Records "<device name>: <text>" as d's last failure and returns status. */
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

/* Dropout's keep/drop of a Philox word: u = (w >> 8) 2^-24 is exact in float. */
static inline TR__HD float tr__dropout_value(uint32_t w, float p, float scale) {
  return (float)(w >> 8) * 0x1p-24f >= p ? scale : 0.0f;
}

#ifdef __cplusplus
}
#endif
#endif
