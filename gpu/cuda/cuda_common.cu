/* cuda_common.cu — what every slot of the CUDA backend calls, whichever file defines it:
 * reporting a failed CUDA or cuBLAS call or launch (the TR__CU, TR__CUBLAS and TR__LAUNCHED
 * macros of cuda_impl.h), making the device's GPU current (TR__CU_ENTER), and a stream's
 * scratch memory. It sits below the backend's table (cuda_backend.cu), which names the
 * kernels of the other .cu files: they call down into this file, never back into the
 * table's. */
#include "cuda_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------- */

/* "cudaMemcpyAsync(dst, src, ...)" -> "cudaMemcpyAsync": the call's name without arguments. */
static int tr__call_name_len(const char *call) {
  const char *p = strchr(call, '(');
  return p ? (int)(p - call) : (int)strlen(call);
}

static const char *tr__file_base(const char *file) {
  /* Meson passes paths relative to the build directory ("../gpu/cuda/x.cu"). */
  const char *p = strstr(file, "gpu/cuda/");
  return p ? p : file;
}

/* Faults of kernels already running surface in whatever call comes next: say so, or the
 * message would blame an innocent copy or query. */
static const char *tr__async_hint(cudaError_t err) {
  switch (err) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorHardwareStackError:
  case cudaErrorAssert:
  case cudaErrorLaunchTimeout:
    return "; raised by earlier work on this GPU (CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer "
           "names the kernel)";
  default:
    return "";
  }
}

int tr__cuda_fail(tr_device *d, cudaError_t err, const char *call, const char *file, int line) {
  /* Non-sticky errors stay in the runtime's last-error slot; clear it so the next launch
   * check reports its own failure, not this one again. */
  (void)cudaGetLastError();
  int status = err == cudaErrorMemoryAllocation ? TR_ENOMEM : TR_EDEVICE;
  return tr__device_fail(d, status, "%.*s: %s (%s) at %s:%d%s", tr__call_name_len(call), call,
                         cudaGetErrorString(err), cudaGetErrorName(err), tr__file_base(file),
                         line, tr__async_hint(err));
}

int tr__cublas_fail(tr_device *d, cublasStatus_t st, const char *call, const char *file,
                    int line) {
  (void)cudaGetLastError();
  int status = st == CUBLAS_STATUS_ALLOC_FAILED ? TR_ENOMEM : TR_EDEVICE;
  return tr__device_fail(d, status, "%.*s: %s (%s) at %s:%d", tr__call_name_len(call), call,
                         cublasGetStatusString(st), cublasGetStatusName(st),
                         tr__file_base(file), line);
}

int tr__cuda_launched(tr_device *d, const char *name, const char *file, int line) {
  cudaError_t e = cudaGetLastError();
  /* cudaErrorNotReady is an event or stream query's answer, never a launch failure. */
  if (e == cudaSuccess || e == cudaErrorNotReady) return 0;
  return tr__device_fail(d, e == cudaErrorMemoryAllocation ? TR_ENOMEM : TR_EDEVICE,
                         "kernel %s: %s (%s) at %s:%d%s", name, cudaGetErrorString(e),
                         cudaGetErrorName(e), tr__file_base(file), line, tr__async_hint(e));
}

int tr__cuda_enter(tr_device *d) {
  int want = tr__cu_dev(d)->ordinal, cur = -1;
  TR__CU(d, cudaGetDevice(&cur));
  if (cur != want) TR__CU(d, cudaSetDevice(want));
  return 0;
}

/* ---- scratch ------------------------------------------------------------------------------ */

int tr__cuda_scratch(tr_stream *s, size_t bytes, void **out) {
  tr__cuda_stream *cs = tr__cu_stream(s);
  if (cs->scratch_bytes < bytes) {
    tr_device *d = s->dev;
    if (s->capturing) /* growing allocates, which a recording cannot hold */
      return tr__device_fail(d, TR_ESTATE, "scratch of %zu bytes on stream '%s': not while it "
                             "captures (the work ran eagerly once first?)", bytes, s->name);
    size_t want = 8192;
    while (want < bytes) want *= 2;
    /* The old block is kept until the stream closes, not freed: a capture recorded with it
     * (tr_capture) replays its addresses. Doubling keeps the blocks kept below the new. */
    if (cs->scratch) {
      void **more = (void **)realloc(cs->retired, (size_t)(cs->nretired + 1) * sizeof *more);
      if (!more) return tr__device_fail(d, TR_ENOMEM, "scratch: out of host memory");
      cs->retired = more;
      cs->retired[cs->nretired++] = cs->scratch;
    }
    cs->scratch = NULL;
    cs->scratch_bytes = 0;
    TR__CU(d, cudaMallocFromPoolAsync(&cs->scratch, want, tr__cu_dev(d)->pool, cs->st));
    cs->scratch_bytes = want;
  }
  *out = cs->scratch;
  return 0;
}
