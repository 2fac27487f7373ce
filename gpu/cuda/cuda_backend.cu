/* cuda_backend.cu — the CUDA backend's lifetime, memory, streams, events and copies, and the
 * tr__cuda_backend object that gathers every slot (kernels in cuda_kernels.cu, cuda_nn.cu and
 * their neighbours, GEMM in cuda_blas.cu). The helpers every slot calls (error reports, entering the device,
 * scratch) are in cuda_common.cu, below this table.
 *
 * Each logical device has its own stream-ordered memory pool (cudaMemPoolCreate), so
 * "cuda:0,cuda:0" gives two devices with separate memory on one card, and its streams are
 * non-blocking (no implicit order with the legacy default stream). Ordering between streams
 * is only ever an event: cudaEventRecord + cudaStreamWaitEvent, never a host wait, except in
 * the calls whose purpose is to wait (stream/event synchronize) and in close.
 */
#include "cuda_impl.h"

#include "cuda_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef TR_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>
#endif

/* ---- live allocations: what close frees ----------------------------------------------- */

static size_t tr__ptr_hash(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 8; /* pool blocks are at least 256-byte aligned */
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 17) & (cap - 1);
}

static int tr__live_grow(tr__cuda_device *cd) {
  size_t ncap = cd->live_cap ? cd->live_cap * 2 : 256;
  void **n = (void **)calloc(ncap, sizeof *n);
  if (!n) return TR_ENOMEM;
  for (size_t i = 0; i < cd->live_cap; i++) {
    void *p = cd->live[i];
    if (!p) continue;
    size_t h = tr__ptr_hash(p, ncap);
    while (n[h]) h = (h + 1) & (ncap - 1);
    n[h] = p;
  }
  free(cd->live);
  cd->live = n;
  cd->live_cap = ncap;
  return 0;
}

static int tr__live_add(tr__cuda_device *cd, void *p) {
  if ((cd->live_count + 1) * 2 > cd->live_cap && tr__live_grow(cd)) return TR_ENOMEM;
  size_t h = tr__ptr_hash(p, cd->live_cap);
  while (cd->live[h]) h = (h + 1) & (cd->live_cap - 1);
  cd->live[h] = p;
  cd->live_count++;
  return 0;
}

/* Removes p (backward-shift deletion keeps probe chains whole); 0 when p was not live. */
static int tr__live_remove(tr__cuda_device *cd, void *p) {
  if (!cd->live_cap) return 0;
  size_t mask = cd->live_cap - 1, h = tr__ptr_hash(p, cd->live_cap);
  while (cd->live[h] != p) {
    if (!cd->live[h]) return 0;
    h = (h + 1) & mask;
  }
  size_t hole = h;
  for (size_t j = (hole + 1) & mask; cd->live[j]; j = (j + 1) & mask) {
    size_t home = tr__ptr_hash(cd->live[j], cd->live_cap);
    /* move j into the hole unless its home lies cyclically in (hole, j] */
    int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      cd->live[hole] = cd->live[j];
      hole = j;
    }
  }
  cd->live[hole] = NULL;
  cd->live_count--;
  return 1;
}

/* ---- discovery and lifetime ------------------------------------------------------------ */

static int tr__cuda_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver or no device: not an error here */
    return 0;
  }
  return n;
}

static int tr__cuda_open(tr_device *d) {
  if (tr__cuda_abi_c != TR__CUDA_ABI_FINGERPRINT) { /* then even d->error may be misplaced */
    fprintf(stderr, "troupe: the CUDA backend's objects were compiled against another "
                    "backend_impl.h than device.c (Meson 1.0 does not track the headers of .cu "
                    "files): touch gpu/cuda/*.cu and rebuild\n");
    return TR_EDEVICE;
  }
  int ord = d->info.ordinal;
  tr__cuda_device *cd = (tr__cuda_device *)calloc(1, sizeof *cd);
  if (!cd) return tr__device_fail(d, TR_ENOMEM, "open: out of host memory");
  cd->ordinal = ord;
  d->impl = cd;

  int rc = tr__cuda_enter(d);
  if (rc) goto fail;
  {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, ord);
    if (e != cudaSuccess) {
      rc = tr__cuda_fail(d, e, "cudaGetDeviceProperties", __FILE__, __LINE__);
      goto fail;
    }
    snprintf(d->info.model, sizeof d->info.model, "%.127s", prop.name);
    d->info.cc_major = prop.major;
    d->info.cc_minor = prop.minor;
    d->info.multiprocessors = prop.multiProcessorCount;
    d->info.memory_total = prop.totalGlobalMem;
    snprintf(d->info.isa, sizeof d->info.isa, "sm_%d%d", prop.major, prop.minor);
    /* bf16 tensor cores from Ampere on; cuBLAS emulates them before */
    d->info.bf16 = prop.major >= 8 ? TR_BF16_NATIVE : TR_BF16_EMULATED;
    cd->sms = prop.multiProcessorCount;
    { /* where it is, for tr_device_same_gpu across processes */
      char host[64] = "?", bus[32] = "";
      gethostname(host, sizeof host - 1);
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, ord) != cudaSuccess) bus[0] = 0;
      if (bus[0]) snprintf(d->info.gpu_id, sizeof d->info.gpu_id, "%.63s/%.31s", host, bus);
      else snprintf(d->info.gpu_id, sizeof d->info.gpu_id, "%.63s/ordinal %d", host, ord);
    }
    if (!prop.memoryPoolsSupported) {
      rc = tr__device_fail(d, TR_EDEVICE, "open: %s has no stream-ordered memory pools",
                           prop.name);
      goto fail;
    }

    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
      rc = tr__cuda_fail(d, e, "cudaMemGetInfo", __FILE__, __LINE__);
      goto fail;
    }
    d->info.memory_free = free_b;
    d->info.memory_total = total_b;

    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ord;
    e = cudaMemPoolCreate(&cd->pool, &props);
    if (e != cudaSuccess) {
      rc = tr__cuda_fail(d, e, "cudaMemPoolCreate", __FILE__, __LINE__);
      goto fail;
    }
    /* Keep freed blocks in the pool across synchronisations: the point of a pool is that a
     * training step reuses the last step's memory without asking the driver again. */
    uint64_t keep = UINT64_MAX;
    e = cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) {
      rc = tr__cuda_fail(d, e, "cudaMemPoolSetAttribute", __FILE__, __LINE__);
      goto fail;
    }
  }
  return 0;

fail:
  if (cd->pool) (void)cudaMemPoolDestroy(cd->pool);
  free(cd);
  d->impl = NULL;
  return rc;
}

static void tr__cuda_close(tr_device *d) {
  tr__cuda_device *cd = tr__cu_dev(d);
  if (!cd) return;
  if (tr__cuda_enter(d) == 0) {
    /* This device's streams are closed (each synchronised), but a twin logical device on
     * the same GPU, or a peer GPU's kernels, may still read this memory: wait for those
     * GPUs before it goes back. Closing is not the hot path. */
    (void)cudaDeviceSynchronize();
    for (int o = 0; o < 64; o++)
      if ((cd->peer_mask >> o) & 1) {
        if (cudaSetDevice(o) == cudaSuccess) (void)cudaDeviceSynchronize();
      }
    (void)cudaSetDevice(cd->ordinal);
    for (size_t i = 0; i < cd->live_cap; i++)
      if (cd->live[i]) (void)cudaFree(cd->live[i]);
    if (cd->pool) {
      (void)cudaMemPoolTrimTo(cd->pool, 0);
      (void)cudaMemPoolDestroy(cd->pool);
    }
    (void)cudaGetLastError();
  }
  free(cd->live);
  free(cd);
  d->impl = NULL;
}

/* Peer access between the list's distinct GPUs, where the topology allows it. Access to a
 * pool's memory is granted per pool (cudaMemPoolSetAccess), apart from the context-wide
 * cudaDeviceEnablePeerAccess that plain allocations follow; both are set. */
static int tr__cuda_link(tr_device **devs, int n) {
  for (int i = 0; i < n; i++) {
    tr__cuda_device *a = tr__cu_dev(devs[i]);
    for (int j = 0; j < n; j++) {
      tr__cuda_device *b = tr__cu_dev(devs[j]);
      if (a->ordinal == b->ordinal || b->ordinal >= 64) continue;
      int can = 0;
      TR__CU(devs[i], cudaDeviceCanAccessPeer(&can, a->ordinal, b->ordinal));
      if (!can) continue;
      /* a's kernels read b's memory: enable from a's context... */
      TR__CU(devs[i], cudaSetDevice(a->ordinal));
      cudaError_t e = cudaDeviceEnablePeerAccess(b->ordinal, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError(); /* another list, or another logical device, did it */
      else if (e != cudaSuccess)
        return tr__cuda_fail(devs[i], e, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
      /* ...and let a's GPU map b's pool */
      cudaMemAccessDesc desc;
      memset(&desc, 0, sizeof desc);
      desc.location.type = cudaMemLocationTypeDevice;
      desc.location.id = a->ordinal;
      desc.flags = cudaMemAccessFlagsProtReadWrite;
      TR__CU(devs[j], cudaMemPoolSetAccess(b->pool, &desc, 1));
      a->peer_mask |= 1ull << b->ordinal;
    }
  }
  return 0;
}

static int tr__cuda_can_access_peer(const tr_device *d, const tr_device *peer) {
  if (peer->be->kind != d->be->kind) return 0; /* kinds: fault.c decorates tables */
  const tr__cuda_device *a = tr__cu_dev(d), *b = tr__cu_dev(peer);
  if (a->ordinal == b->ordinal) return 1;
  return b->ordinal < 64 && ((a->peer_mask >> b->ordinal) & 1) != 0;
}


static int tr__cuda_bind(tr_device *d) {
  TR__CU_ENTER(d);
#ifdef TR_HAVE_NVTX
  /* Nsight Systems then labels the owner thread's row with its name (the actor's, which the
   * runtime gave it) and the device: "stage0 cuda:0". */
  char who[16] = "", name[64];
  pthread_getname_np(pthread_self(), who, sizeof who);
  snprintf(name, sizeof name, "%s%s%s", who, who[0] ? " " : "", d->info.name);
  nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
#endif
  tr__cuda_timing_bind(d);
  return 0;
}

static int tr__cuda_update_memory(tr_device *d) {
  TR__CU_ENTER(d);
  size_t free_b = 0, total_b = 0;
  TR__CU(d, cudaMemGetInfo(&free_b, &total_b));
  d->info.memory_free = free_b;
  d->info.memory_total = total_b;
  return 0;
}

static int tr__cuda_set_tf32(tr_device *d) {
  TR__CU_ENTER(d);
  cublasMath_t mode = d->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  for (tr_stream *s = d->streams; s; s = s->next) {
    tr__cuda_stream *cs = tr__cu_stream(s);
    if (cs && cs->blas) TR__CUBLAS(d, cublasSetMathMode(cs->blas, mode));
  }
  return 0;
}

/* ---- memory --------------------------------------------------------------------------- */

static int tr__cuda_alloc(tr_stream *s, size_t bytes, void **out) {
  tr_device *d = s->dev;
  tr__cuda_device *cd = tr__cu_dev(d);
  TR__CU_ENTER(d);
  void *p = NULL;
  /* Whole 256-byte units keep every block the pool carves out as aligned as cudaMalloc's
   * (the API promises 64; float4 kernels want 16). */
  size_t rounded = (bytes + 255) & ~(size_t)255;
  if (rounded < bytes) return tr__device_fail(d, TR_ENOMEM, "alloc: %zu bytes is too large", bytes);
  TR__CU(d, cudaMallocFromPoolAsync(&p, rounded, cd->pool, tr__cu_stream(s)->st));
  if (tr__live_add(cd, p)) {
    (void)cudaFreeAsync(p, tr__cu_stream(s)->st);
    return tr__device_fail(d, TR_ENOMEM, "alloc: out of host memory for the allocation table");
  }
  *out = p;
  tr__cuda_memory_counter(d);
  return 0;
}

static int tr__cuda_dealloc(tr_stream *s, void *ptr) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  if (!tr__live_remove(tr__cu_dev(d), ptr))
    return tr__device_fail(d, TR_EINVAL, "free: %p is not live memory of this device", ptr);
  TR__CU(d, cudaFreeAsync(ptr, tr__cu_stream(s)->st));
  tr__cuda_memory_counter(d);
  return 0;
}

static int tr__cuda_host_alloc(tr_device *d, size_t bytes, void **out) {
  TR__CU_ENTER(d);
  /* Portable: pinned for every GPU, so a buffer can feed any device of the list. */
  TR__CU(d, cudaHostAlloc(out, bytes, cudaHostAllocPortable));
  return 0;
}

static int tr__cuda_host_free(tr_device *d, void *ptr) {
  TR__CU_ENTER(d);
  TR__CU(d, cudaFreeHost(ptr));
  return 0;
}

/* ---- streams and events ---------------------------------------------------------------- */

static int tr__cuda_stream_open(tr_stream *s) {
  tr_device *d = s->dev;
  tr__cuda_device *cd = tr__cu_dev(d);
  TR__CU_ENTER(d);
  tr__cuda_stream *cs = (tr__cuda_stream *)calloc(1, sizeof *cs);
  if (!cs) return tr__device_fail(d, TR_ENOMEM, "stream open: out of host memory");
  cudaError_t e = cudaStreamCreateWithFlags(&cs->st, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(cs);
    return tr__cuda_fail(d, e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
  }
  s->impl = cs;
#ifdef TR_HAVE_NVTX
  char name[80];
  snprintf(name, sizeof name, "%s %s", d->info.name, s->name);
  nvtxNameCudaStreamA(cs->st, name);
#endif
  /* The first stream is the compute stream (device.c opens it right after `open`): its
   * cuBLAS handle is made now, so the library's one-time start-up cost lands in device
   * opening rather than in the first measured GEMM. */
  if (cd->nstreams++ == 0) {
    cublasHandle_t h;
    int rc = tr__cuda_blas_handle(s, &h);
    if (rc) {
      (void)cudaStreamDestroy(cs->st);
      free(cs);
      s->impl = NULL;
      cd->nstreams--;
      return rc;
    }
  }
  return 0;
}

static void tr__cuda_stream_close(tr_stream *s) {
  tr__cuda_stream *cs = tr__cu_stream(s);
  if (!cs) return;
  tr_device *d = s->dev;
  if (tr__cuda_enter(d) == 0) {
    cudaError_t e = cudaSuccess;
    if (cs->scratch) e = cudaFreeAsync(cs->scratch, cs->st);
    for (int i = 0; i < cs->nretired && e == cudaSuccess; i++)
      e = cudaFreeAsync(cs->retired[i], cs->st);
    /* Closing is not the hot path: waiting here means nothing queued on the stream can
     * outlive the memory and handles that close frees next. */
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs->st);
    if (e != cudaSuccess) (void)tr__cuda_fail(d, e, "stream close", __FILE__, __LINE__);
    if (cs->blas) (void)cublasDestroy(cs->blas);
    /* after the handle, which no GEMM uses any more: the stream frees it in order */
    if (cs->blas_workspace) (void)cudaFreeAsync(cs->blas_workspace, cs->st);
    (void)cudaStreamDestroy(cs->st);
    (void)cudaGetLastError();
  }
  tr__cu_dev(d)->nstreams--;
  free(cs->retired);
  free(cs);
  s->impl = NULL;
}

static int tr__cuda_stream_synchronize(tr_stream *s) {
  TR__CU_ENTER(s->dev);
  TR__CU(s->dev, cudaStreamSynchronize(tr__cu_stream(s)->st));
  tr__cuda_timing_harvest(s->dev); /* what the device timed is known now */
  return 0;
}

static int tr__cuda_event_open(tr_event *e) {
  TR__CU_ENTER(e->dev);
  cudaEvent_t ev;
  unsigned flags = (e->flags & TR_EVENT_TIMING) ? cudaEventDefault : cudaEventDisableTiming;
  TR__CU(e->dev, cudaEventCreateWithFlags(&ev, flags));
  e->impl = (void *)ev;
  return 0;
}

static void tr__cuda_event_close(tr_event *e) {
  if (!e->impl) return;
  if (tr__cuda_enter(e->dev) == 0) (void)cudaEventDestroy((cudaEvent_t)e->impl);
  (void)cudaGetLastError();
  e->impl = NULL;
}

static int tr__cuda_event_record(tr_event *e, tr_stream *s) {
  TR__CU_ENTER(s->dev);
  TR__CU(s->dev, cudaEventRecord((cudaEvent_t)e->impl, tr__cu_stream(s)->st));
  return 0;
}

static int tr__cuda_stream_wait_event(tr_stream *s, tr_event *e) {
  TR__CU_ENTER(s->dev);
  /* e may come from another GPU: CUDA orders across devices with the same call. */
  TR__CU(s->dev, cudaStreamWaitEvent(tr__cu_stream(s)->st, (cudaEvent_t)e->impl, 0));
  return 0;
}

static int tr__cuda_event_query(tr_event *e) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)e->impl);
  if (r == cudaSuccess) return 1;
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  return tr__cuda_fail(e->dev, r, "cudaEventQuery", __FILE__, __LINE__);
}

static int tr__cuda_event_synchronize(tr_event *e) {
  TR__CU(e->dev, cudaEventSynchronize((cudaEvent_t)e->impl));
  return 0;
}

static int tr__cuda_event_elapsed_ms(tr_event *start, tr_event *end, float *ms) {
  TR__CU(start->dev, cudaEventElapsedTime(ms, (cudaEvent_t)start->impl, (cudaEvent_t)end->impl));
  return 0;
}

/* ---- captures: CUDA graphs ------------------------------------------------------------
 *
 * Thread-local capture mode: a call of this thread that may not be recorded (a synchronous
 * allocation, a host wait) fails the recording rather than running, and other threads --
 * other devices' actors -- are not disturbed. The graph is instantiated at once and only its
 * executable form kept. */

static int tr__cuda_capture_begin(tr_stream *s) {
  TR__CU_ENTER(s->dev);
  TR__CU(s->dev, cudaStreamBeginCapture(tr__cu_stream(s)->st, cudaStreamCaptureModeThreadLocal));
  return 0;
}

static int tr__cuda_capture_end(tr_stream *s, int keep, void **exec) {
  tr_device *d = s->dev;
  TR__CU_ENTER(d);
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture(tr__cu_stream(s)->st, &graph);
  if (e != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    return tr__cuda_fail(d, e, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  cudaGraphExec_t ge = NULL;
  if (keep) e = cudaGraphInstantiate(&ge, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) return tr__cuda_fail(d, e, "cudaGraphInstantiate", __FILE__, __LINE__);
  *exec = (void *)ge;
  return 0;
}

static int tr__cuda_capture_launch(tr_capture *g, tr_stream *s) {
  TR__CU_ENTER(s->dev);
  TR__CU(s->dev, cudaGraphLaunch((cudaGraphExec_t)g->impl, tr__cu_stream(s)->st));
  return 0;
}

static void tr__cuda_capture_free(tr_capture *g) {
  if (g->impl && tr__cuda_enter(g->dev) == 0) (void)cudaGraphExecDestroy((cudaGraphExec_t)g->impl);
  (void)cudaGetLastError();
  g->impl = NULL;
}

/* ---- copies ---------------------------------------------------------------------------- */

static int tr__cuda_copy(tr_stream *s, void *dst, const void *src, size_t bytes,
                         tr_copy_kind kind) {
  TR__CU_ENTER(s->dev);
  cudaMemcpyKind k = kind == TR_COPY_H2D   ? cudaMemcpyHostToDevice
                     : kind == TR_COPY_D2H ? cudaMemcpyDeviceToHost
                                           : cudaMemcpyDeviceToDevice;
  TR__CU(s->dev, cudaMemcpyAsync(dst, src, bytes, k, tr__cu_stream(s)->st));
  return 0;
}

static int tr__cuda_copy_peer(tr_stream *s, void *dst, tr_device *dst_dev, const void *src,
                              tr_device *src_dev, size_t bytes) {
  TR__CU_ENTER(s->dev);
  int dord = tr__cu_dev(dst_dev)->ordinal, sord = tr__cu_dev(src_dev)->ordinal;
  cudaStream_t st = tr__cu_stream(s)->st;
  if (dord == sord) {
    /* Two logical devices of one GPU: an ordinary copy within it. */
    TR__CU(s->dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
  } else {
    /* Direct over NVLink/PCIe when peer access is on, staged by the driver otherwise. */
    TR__CU(s->dev, cudaMemcpyPeerAsync(dst, dord, src, sord, bytes, st));
  }
  return 0;
}

static int tr__cuda_fill_bytes(tr_stream *s, void *dst, int value, size_t bytes) {
  TR__CU_ENTER(s->dev);
  TR__CU(s->dev, cudaMemsetAsync(dst, value, bytes, tr__cu_stream(s)->st));
  return 0;
}

/* ---- the backend ------------------------------------------------------------------------ */

/* Filled by a constexpr function, so the object is constant-initialised (complete before any
 * code runs) without C++20 designated initialisers; device.c refers to it by name. */
static constexpr tr__backend tr__cuda_make_backend() {
  tr__backend b{};
  b.name = "cuda";
  b.kind = TR_DEVICE_CUDA;
  b.count = tr__cuda_count;
  b.open = tr__cuda_open;
  b.close = tr__cuda_close;
  b.link = tr__cuda_link;
  b.can_access_peer = tr__cuda_can_access_peer;
  b.bind = tr__cuda_bind;
  b.update_memory = tr__cuda_update_memory;
  b.set_tf32 = tr__cuda_set_tf32;
  b.alloc = tr__cuda_alloc;
  b.dealloc = tr__cuda_dealloc;
  b.host_alloc = tr__cuda_host_alloc;
  b.host_free = tr__cuda_host_free;
  b.stream_open = tr__cuda_stream_open;
  b.stream_close = tr__cuda_stream_close;
  b.stream_synchronize = tr__cuda_stream_synchronize;
  b.event_open = tr__cuda_event_open;
  b.event_close = tr__cuda_event_close;
  b.event_record = tr__cuda_event_record;
  b.stream_wait_event = tr__cuda_stream_wait_event;
  b.event_query = tr__cuda_event_query;
  b.event_synchronize = tr__cuda_event_synchronize;
  b.event_elapsed_ms = tr__cuda_event_elapsed_ms;
  b.capture_begin = tr__cuda_capture_begin;
  b.capture_end = tr__cuda_capture_end;
  b.capture_launch = tr__cuda_capture_launch;
  b.capture_free = tr__cuda_capture_free;
  b.copy = tr__cuda_copy;
  b.copy_peer = tr__cuda_copy_peer;
  b.fill_bytes = tr__cuda_fill_bytes;
  b.gemm = tr__cuda_gemm;
  b.gemm_batched = tr__cuda_gemm_batched;
  b.gemm_bf16 = tr__cuda_gemm_bf16;
#ifdef TR_HAVE_NCCL
  b.comm_library = tr__nccl_library;
  b.comm_open_all = tr__nccl_open_all;
  b.comm_id = tr__nccl_id;
  b.comm_open_rank = tr__nccl_open_rank;
  b.comm_close = tr__nccl_close;
  b.comm_run = tr__nccl_run;
#endif
#define TR__CUDA_SLOT(name, params, args, checks) b.name = tr__cuda_##name;
  TR__OP_MAP(TR__CUDA_SLOT)
#undef TR__CUDA_SLOT
  return b;
}

extern "C" const tr__backend tr__cuda_backend = tr__cuda_make_backend();
