/* tr_device.h — the device layer: one API over every backend (CPU host devices, CUDA GPUs).
 *
 * A device list is opened from a spec string; each device has memory, in-order streams and
 * events, asynchronous copies, GEMM and the kernels the layers of a network need. Every op
 * is a request on a stream: it is queued (CUDA) or run at once by the calling thread (host)
 * and is complete, for other streams and for the host, only once an event recorded after it
 * has completed. Pointers are device pointers from tr_device_alloc (host devices: ordinary
 * memory, 64-byte aligned).
 *
 *   tr_device_list *devs;
 *   char err[256];
 *   if (tr_device_list_open(&devs, "auto", err, sizeof err)) { fprintf(stderr, "%s\n", err); ... }
 *   tr_device *d = tr_device_list_at(devs, 0);  // from here on: the device's actor thread
 *   tr_stream *s = tr_device_stream(d);          // the device's compute stream
 *   float *w, *x, *y;                            // w (1024,1024), x (B,1024), y (B,1024)
 *   tr_event *done;
 *   int rc = tr_device_alloc(d, 1024 * 1024 * sizeof(float), (void **)&w);  // x, y likewise
 *   if (!rc) rc = tr_event_open(d, TR_EVENT_DEFAULT, &done);
 *   if (!rc) rc = tr_init_uniform(s, w, 1024 * 1024, -0.03125f, 0.03125f, seed, 0);
 *   if (!rc) rc = tr_memcpy(s, x, host_x, B * 1024 * sizeof(float), TR_COPY_H2D);
 *   if (!rc) rc = tr_gemm(s, TR_OP_N, TR_OP_T, B, 1024, 1024, 1.0f, x, 1024, w, 1024,
 *                         0.0f, y, 1024);                  // y = x @ w^T
 *   if (!rc) rc = tr_gelu_forward(s, y, y, (size_t)B * 1024);
 *   if (!rc) rc = tr_event_record(done, s);
 *   if (rc) fprintf(stderr, "%s\n", tr_device_error(d));  // "host:0: tr_gemm: ..."
 *   // A message carries y and `done` to another actor, which queues
 *   // tr_stream_wait_event(its_stream, done) before anything that reads y.
 *   ...
 *   tr_device_list_close(devs);                  // once every owner has finished
 *
 * Specs: "host:N" (N CPU host devices, 1..256), "cuda:0,1" or "cuda:0,cuda:1" (GPUs by
 * index), "cuda:0,cuda:0" (two logical devices on one GPU, each with its own streams and
 * memory, so multi-device graphs run on one card), "auto" (every GPU, else host:1). Items
 * may be mixed ("host:1,cuda:0"); a bare number continues a cuda list.
 *
 * Ownership: a device belongs to one thread, its pinned actor's. Every call on a device, its
 * streams, its events and its memory comes from that thread; the only exceptions are reads
 * of its memory by another device's peer copy (ordered by an event), tr_host_alloc and
 * tr_host_free, and tr_device_list_close.
 * The first call binds the device to the calling thread; tr_device_bind hands it to another
 * thread (the previous owner must be done with it, e.g. it opened and initialised the device
 * and then started the actor). Debug builds assert the owner on every call. A host device
 * computes on its owner thread alone and starts no threads (the parallelism comes from the
 * devices); with oneDNN, which runs on OpenMP, its GEMMs set the thread's OpenMP thread
 * count to 1 (omp_set_num_threads).
 *
 * Errors: calls that can fail return 0 or a negative TR_E... status (tr_base.h); the text of
 * the last failure is tr_device_error(device), naming the device, the operation and, for
 * CUDA, the failing call with file:line. Misuse (tr_base.h) is refused: a NULL device, stream
 * or event, or a placeholder (another process's device), is TR_EINVAL, said on stderr or in
 * tr_device_error; so are an event recorded, or a capture launched, on another device's
 * stream and a NULL buffer given to an op. Getters of NULL answer NULL, "", 0 or false;
 * closing NULL does nothing, and tr_stream_close of a device's compute stream does nothing
 * either (said: it goes with its device). Only a device used off its owner thread, in debug
 * builds, aborts through TR_ASSERT: a race has no status to return.
 *
 * The ops themselves (GEMM, the kernels, the optimizers' updates) are in tr_ops.h, which
 * comes with this header.
 */
#ifndef TR_DEVICE_H
#define TR_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_device_list tr_device_list;
typedef struct tr_device tr_device;
typedef struct tr_stream tr_stream;
typedef struct tr_event tr_event;

typedef enum tr_device_kind { TR_DEVICE_HOST = 0, TR_DEVICE_CUDA = 1 } tr_device_kind;

/* bfloat16: the upper half of a float32's bits (8 exponent bits, 7 of mantissa), as GEMM
 * inputs in mixed precision (tr_to_bf16, tr_gemm_bf16). */
typedef uint16_t tr_bf16;

/* X(name, text): the one list of precisions GEMM inputs come in; `text` is what
 * --precision takes. */
#define TR_PRECISION_MAP(X)        \
  X(TR_PRECISION_FP32, "fp32")    \
  X(TR_PRECISION_BF16, "bf16")

typedef enum tr_precision {
#define TR__PRECISION_ENUM(name, text) name,
  TR_PRECISION_MAP(TR__PRECISION_ENUM)
#undef TR__PRECISION_ENUM
  TR_PRECISION_COUNT
} tr_precision;

/* "fp32", "bf16" ("?" otherwise); parse: 0, or TR_EINVAL (NULL or an unknown name). */
TR_API const char *tr_precision_name(tr_precision p);
TR_API int tr_precision_parse(const char *name, tr_precision *out);

/* How a device multiplies bfloat16 matrices (tr_gemm_bf16). */
typedef enum tr_bf16_support {
  TR_BF16_NATIVE,    /* with bf16 instructions: AVX512-BF16 or AMX (host), tensor cores (CUDA) */
  TR_BF16_EMULATED,  /* by the library, with other instructions (oneDNN on AVX-512 alone) */
  TR_BF16_CONVERTED  /* converted to fp32 and multiplied as such: bf16's results, fp32's speed
                        (oneDNN on AVX2, OpenBLAS) */
} tr_bf16_support;

/* "native", "emulated", "converted to fp32". */
TR_API const char *tr_bf16_support_name(tr_bf16_support b);

typedef struct tr_device_info {
  tr_device_kind kind;
  int index;             /* position in its list */
  int ordinal;           /* physical: the GPU's index, or the host device's number */
  char name[32];         /* "host:0", "cuda:1"; "cuda:0/1": the 2nd logical device on GPU 0 */
  char model[128];       /* "AMD EPYC 7763 (oneDNN 2.6.3)", "NVIDIA H100 80GB HBM3" */
  uint64_t memory_total; /* bytes (host: physical memory of the machine) */
  uint64_t memory_free;  /* bytes when the list was opened */
  int cc_major, cc_minor;/* CUDA compute capability; 0 for host devices */
  int multiprocessors;   /* CUDA SMs; host: threads the device computes with (1) */
  char isa[32];          /* what GEMM runs on: the instruction set the host's library
                            dispatches to ("avx512_core_bf16" for oneDNN, OpenBLAS's core
                            "Zen"), or the GPU's "sm_90" */
  tr_bf16_support bf16;
  char gpu_id[96];       /* a GPU's place in the world: its host's name and PCI bus id
                            ("node3/0000:3B:00.0"), the same in every process that opens
                            it ("node3/ordinal 1" where the driver has no bus id: then one
                            process's view); "" for host devices (tr_device_same_gpu) */
} tr_device_info;

/* Whether a and b are one physical GPU (NCCL takes one member per GPU): the same gpu_id, so
 * logical devices of one GPU and the same GPU opened by two processes alike. Infos without
 * a gpu_id (made by hand) compare by ordinal. */
TR_API bool tr_device_same_gpu(const tr_device_info *a, const tr_device_info *b);

/* ---- discovery ------------------------------------------------------------------------ */

/* Opens the devices a spec names. On failure *out is NULL, the status says why and `err`
 * (when not NULL) receives a message naming the bad part of the spec ("device spec
 * 'cuda:7': no CUDA device 7 (this machine has 1)"). Call from any thread. Tests may wrap a
 * spec as fault(SPEC;RULE;RULE...): the same devices, slow or failing on the calls each RULE
 * names. RULE is key=value pairs: dev=I (the list's device I; default every one), op=NAME
 * (the calls whose name begins with NAME: a kernel such as mse_backward, gemm, capture;
 * default every one), us=U (each sleeps U microseconds), grow=G and every=E (G more every E
 * calls), fail=N (the N-th fails), from=N (the N-th and every one after it fail: a device
 * that dies). fault(host:3;dev=1,op=mse_b,from=7) kills host:1 at its 7th loss backward. */
TR_API int tr_device_list_open(tr_device_list **out, const char *spec, char *err, size_t err_size);

/* Closes every device of the list, with their streams and the memory still allocated on
 * them. Close events first. Call once no owner thread uses the devices any more. */
TR_API void tr_device_list_close(tr_device_list *list);

TR_API int tr_device_list_count(const tr_device_list *list);
/* index out of [0, count): NULL, said on stderr. */
TR_API tr_device *tr_device_list_at(const tr_device_list *list, int index);

/* An empty list, to hold devices opened elsewhere (tr_device_list_add_placeholder). */
TR_API int tr_device_list_open_empty(tr_device_list **out);
/* Inserts, at position `at` (0 .. count), a placeholder: a device described by `info` but
 * opened elsewhere (by another process of a job: which one is the world's business,
 * tr_world.h). The list names it in its place, and nothing may run on it here
 * (tr_world_devices builds a job's global list this way). TR_EINVAL for `at` out of range. */
TR_API int tr_device_list_add_placeholder(tr_device_list *list, int at, const tr_device_info *info);
/* Whether d is such a placeholder (nothing runs on it, its memory is not this process's). */
TR_API bool tr_device_is_placeholder(const tr_device *d);

/* Physical devices of a kind on this machine: GPUs (0 without a driver or without the CUDA
 * backend in this build), or host CPU threads. Never fails. */
TR_API int tr_device_count(tr_device_kind kind);

/* "host", "cuda". */
TR_API const char *tr_device_kind_name(tr_device_kind kind);

/* ---- devices ---------------------------------------------------------------------------- */

TR_API const tr_device_info *tr_device_info_of(const tr_device *d);
TR_API const char *tr_device_name(const tr_device *d); /* info->name */

/* Refreshes memory_free (and memory_total) of the device's info. */
TR_API int tr_device_update_memory(tr_device *d);

/* 1 when `d` can copy to and from `peer` directly (host: always; CUDA: same GPU or peer
 * access enabled), else 0. tr_memcpy_peer works either way. */
TR_API int tr_device_can_access_peer(const tr_device *d, const tr_device *peer);

/* Makes the calling thread the device's owner (see Ownership above). */
TR_API int tr_device_bind(tr_device *d);

/* The text of the device's last failure, or "". */
TR_API const char *tr_device_error(const tr_device *d);

/* CUDA: allow TF32 tensor cores in GEMM (off unless asked). Host: accepted, no effect. */
TR_API int tr_device_set_tf32(tr_device *d, int enable);

/* ---- memory -------------------------------------------------------------------------------- */

/* Device memory, at least 64-byte aligned, uninitialised. Ordered on the device's compute
 * stream: usable there at once, on other streams after an event. `bytes` may be 0 (NULL). */
TR_API int tr_device_alloc(tr_device *d, size_t bytes, void **out);
/* Returns memory to the device. Ordered on the compute stream: work already queued there
 * may still use it; other streams must be done with it (an event) before this call. */
TR_API int tr_device_free(tr_device *d, void *ptr);

/* The same, ordered on stream `s` of the device (stream-ordered reuse: a block freed on s
 * may be handed out again to later work on s without any synchronisation). */
TR_API int tr_stream_alloc(tr_stream *s, size_t bytes, void **out);
TR_API int tr_stream_free(tr_stream *s, void *ptr);

/* Host memory for fast asynchronous copies to and from `d` (CUDA: pinned, usable with every
 * GPU). Host devices: ordinary aligned memory. Any thread may call these two: host memory
 * belongs to no device's owner (a loader on the event loop fills buffers a device reads). */
TR_API int tr_host_alloc(tr_device *d, size_t bytes, void **out);
TR_API int tr_host_free(tr_device *d, void *ptr);

/* ---- streams and events ------------------------------------------------------------------ */

/* The device's compute stream (owned by the device: never close it). */
TR_API tr_stream *tr_device_stream(tr_device *d);
TR_API tr_device *tr_stream_device(const tr_stream *s);

/* Another in-order stream of the device (e.g. copies, per direction or peer); `name` names
 * it in traces and profilers, copied. */
TR_API int tr_stream_open(tr_device *d, const char *name, tr_stream **out);
TR_API void tr_stream_close(tr_stream *s);
/* Blocks the calling thread until everything queued on `s` has run. Not for the hot path:
 * actors poll events instead. */
TR_API int tr_stream_synchronize(tr_stream *s);

enum { TR_EVENT_DEFAULT = 0, TR_EVENT_TIMING = 1 /* tr_event_elapsed_ms works */ };

TR_API int tr_event_open(tr_device *d, unsigned flags, tr_event **out);
TR_API void tr_event_close(tr_event *e);
/* Marks the point of `s`'s queue reached so far; the event completes when everything
 * queued on `s` before it has run. Re-recording moves the point. */
TR_API int tr_event_record(tr_event *e, tr_stream *s);
/* Work queued on `s` after this call runs only after `e` (recorded on any stream of any
 * device of the same list) has completed. Does not block the caller. */
TR_API int tr_stream_wait_event(tr_stream *s, tr_event *e);
/* 1 when the event has completed (or was never recorded), 0 while it is pending, or a
 * negative status. Never blocks: this is how an actor learns its work is done. */
TR_API int tr_event_query(tr_event *e);
/* Blocks the calling thread until the event has completed. */
TR_API int tr_event_synchronize(tr_event *e);
/* Milliseconds between two completed TR_EVENT_TIMING events of one device. */
TR_API int tr_event_elapsed_ms(tr_event *start, tr_event *end, float *ms);

/* ---- captures: a stream's work recorded once, replayed (CUDA graphs) ------------------------
 *
 * Ops queued on one stream between tr_capture_begin and tr_capture_end are recorded instead
 * of run; tr_capture_launch then runs all of them again as one launch, the same kernels with
 * the same arguments and pointers, so the host pays for launching them once. While a stream
 * captures, queue only ops on that stream: no events, no allocations (tr_stream_alloc
 * fails), no waits, no other streams. Whatever fails in between (an op, or the capture
 * itself) leaves nothing run and nothing kept: end the capture anyway, then queue the same
 * ops eagerly.
 *
 *   tr_capture *g = NULL;
 *   if (tr_device_can_capture(d) && tr_capture_begin(s) == 0) {
 *     int rc = queue_the_step(s);                   // recorded, not run
 *     if (tr_capture_end(s, rc ? NULL : &g)) g = NULL;   // always ends it
 *   }
 *   int rc = g ? tr_capture_launch(g, s) : queue_the_step(s);
 *   ...                                             // later steps: tr_capture_launch(g, s)
 *   tr_capture_close(g);                            // on the device's owner thread
 *
 * A capture is a device's (its owner thread's), launched on any stream of it. Host devices
 * do not capture (tr_device_can_capture 0; the calls fail with TR_EDEVICE): their ops run
 * as they are queued. */
typedef struct tr_capture tr_capture;

/* 1 when the device's backend captures, else 0. Never fails. */
TR_API int tr_device_can_capture(const tr_device *d);
/* `s` records from now on (CUDA: cudaStreamBeginCapture, thread-local mode). */
TR_API int tr_capture_begin(tr_stream *s);
/* Ends the recording of `s`. out NULL: drops what was recorded (after a failure); else *out
 * is the capture, ready to launch, or NULL with a failure (the recording went wrong: an op
 * that may not be captured, another thread's unsafe call). `s` records no more either way. */
TR_API int tr_capture_end(tr_stream *s, tr_capture **out);
/* Queues the recorded work on `s`, a stream of the capture's device. */
TR_API int tr_capture_launch(tr_capture *g, tr_stream *s);
/* NULL is accepted. */
TR_API void tr_capture_close(tr_capture *g);

/* ---- copies (asynchronous on a stream of the device that issues them) ---------------------- */

typedef enum tr_copy_kind {
  TR_COPY_H2D, /* host memory -> device memory */
  TR_COPY_D2H, /* device memory -> host memory */
  TR_COPY_D2D  /* within the stream's device */
} tr_copy_kind;

TR_API int tr_memcpy(tr_stream *s, void *dst, const void *src, size_t bytes, tr_copy_kind kind);
/* dst of dst_dev <- src of src_dev, on `s`, a stream of either device. */
TR_API int tr_memcpy_peer(tr_stream *s, void *dst, tr_device *dst_dev, const void *src,
                   tr_device *src_dev, size_t bytes);
/* Sets `bytes` bytes of device memory to the byte `value` (0 zeroes floats and ints). */
TR_API int tr_memset(tr_stream *s, void *dst, int value, size_t bytes);

/* ---- collectives (NCCL) ------------------------------------------------------------------ */

/* A communicator joins devices that sum, reduce, broadcast and exchange buffers together,
 * each member issuing its part on a stream of its own device from its owner thread, every
 * member the same operations in the same order (a member waits, on its stream, for the
 * others to issue theirs). Where the build has NCCL (meson option `nccl`) CUDA devices
 * have them; host devices never do (their replica groups sum through shared memory), and
 * a build without NCCL opens none (TR_EDEVICE, saying so).
 *
 *   tr_comm *comms[2];                  // on the thread that opened the devices
 *   if (tr_comm_open_all(devs, 2, comms, err, sizeof err)) ...;  // cuda:0, cuda:1
 *   ... member i, on its owner thread, its stream s_i:
 *   rc = tr_comm_allreduce(comms[i], s_i, grads_i, grads_i, n);  // in place, summed
 *   tr_comm_close(comms[i]);            // once its streams are done with it
 *
 * Across processes every rank opens its member with the same id (tr_comm_id_init on one
 * rank, sent to the others: over MPI, tr_world.h) and its rank in the communicator.
 *
 * NCCL's sums are deterministic for a given communicator and size, but add the members up
 * in an order of its own (a ring, a tree): not the member order troupe's own reductions
 * keep, so results agree with them within rounding, not bit for bit. NCCL takes one member
 * per GPU: two logical devices of one GPU ("cuda:0,cuda:0") cannot share a communicator
 * (TR_EINVAL, naming them). Failures name the NCCL call and its text (ncclGetErrorString)
 * in tr_device_error of the member's device. */
typedef struct tr_comm tr_comm;
typedef struct tr_comm_id {
  unsigned char bytes[128]; /* NCCL's ncclUniqueId */
} tr_comm_id;

/* "NCCL 2.28.9" (the library loaded) when this build has NCCL, else NULL. */
TR_API const char *tr_comm_library(void);

/* One communicator over devs[0, n), member i on devs[i] (comms[i]); every device of one
 * backend with collectives, each on a GPU of its own. Call from one thread before the
 * members' owners use it (it opens them together). err names the device or call at fault. */
TR_API int tr_comm_open_all(tr_device *const *devs, int n, tr_comm **comms, char *err, size_t err_size);
/* An id for a communicator across processes, made on one of them (for the backend of
 * devices of `kind`). */
TR_API int tr_comm_id_init(tr_device_kind kind, tr_comm_id *id, char *err, size_t err_size);
/* This process's member, rank `rank` of `count`, on d: blocks until every rank has called
 * it with the same id. */
TR_API int tr_comm_open_rank(tr_device *d, const tr_comm_id *id, int count, int rank, tr_comm **out,
                      char *err, size_t err_size);
TR_API int tr_comm_rank(const tr_comm *c);
TR_API int tr_comm_count(const tr_comm *c);
TR_API tr_device *tr_comm_device(const tr_comm *c);
/* On the member's owner thread, once no stream still runs its operations. NULL is fine.
 * Members opened together close together: NCCL's destroy waits for the other members of
 * this process, each closing on its own thread. */
TR_API void tr_comm_close(tr_comm *c);
/* Without waiting for anyone (ncclCommAbort): a member whose others may never come (the run
 * failed, or never started), from any thread. NULL is fine. */
TR_API void tr_comm_abort(tr_comm *c);

/* On s, a stream of the member's device. n: floats; bytes: bytes. */
/* recv (n) = the sum over the members of their send (n); recv may equal send */
TR_API int tr_comm_allreduce(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n);
/* root's recv (n) = the sum of every send (n); others' recv untouched */
TR_API int tr_comm_reduce(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n, int root);
/* every recv (n) = root's send (n) */
TR_API int tr_comm_broadcast(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n,
                      int root);
/* Point to point: `bytes` to member `peer`, which receives them with tr_comm_recv. */
TR_API int tr_comm_send(tr_comm *c, tr_stream *s, const void *buf, size_t bytes, int peer);
TR_API int tr_comm_recv(tr_comm *c, tr_stream *s, void *buf, size_t bytes, int peer);

/* ---- synthetic data ------------------------------------------------------------------------ */

/* The samples of tr_data.h's synthetic sources and arithmetic corpus, made on the device where
 * they are trained on (the host backend runs the host's generator): the same tokens bit for
 * bit, and the same floats within an ulp, as tr_data_fill. A source is opened on the host
 * (tr_data_open) and its tables copied to the device once: tr_data_gen (tr_data.h) does both
 * and is the way to use this op. */
typedef enum tr_synth_kind {
  TR_SYNTH_GAUSSIAN,   /* x and y standard normal */
  TR_SYNTH_TEACHER,    /* x normal, y = teacher(x) per row */
  TR_SYNTH_CLASSIFIER, /* x normal, y = the teacher's argmax per row (int32) */
  TR_SYNTH_TOKENS      /* ctx bytes of a corpus at an offset drawn from (seed, sample) as int32
                          tokens, y the byte after each */
} tr_synth_kind;

/* The ziggurat's 128 layers (Marsaglia and Tsang): made once on the host, in double. */
typedef struct tr_synth_zig {
  uint32_t k[128];
  float w[128], f[128];
} tr_synth_zig;

typedef struct tr_synth {
  tr_synth_kind kind;
  uint64_t seed;
  int in, out, rows;       /* float kinds: per row in floats of x and out floats of y
                              (CLASSIFIER: out classes, one int32 label); rows per sample */
  const tr_synth_zig *zig; /* float kinds: in the device's memory */
  const float *teacher;    /* TEACHER, CLASSIFIER: W1^T (in,32), b1 (32), W2 (out,32), b2 (out),
                              in the device's memory */
  const uint8_t *corpus;   /* TOKENS: corpus_size bytes in the device's memory */
  size_t corpus_size;
  int ctx;                 /* TOKENS: tokens per sample, < corpus_size */
} tr_synth;

/* Samples [first, first + count) of `src` into x (count × x bytes) and y (count × y bytes;
 * NULL: inputs only), device memory. TR_EINVAL naming the field for a description that
 * cannot be filled from ("tr_synth_fill: teacher is NULL"). */
TR_API int tr_synth_fill(tr_stream *s, const tr_synth *src, uint64_t first, size_t count, void *x,
                  void *y);

#ifdef __cplusplus
}
#endif

/* The ops on a stream come with the devices they run on. */
#include "tr_ops.h"

#endif
