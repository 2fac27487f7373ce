/* cuda_timing.cu — the CUDA backend's profiling: device slices, memory in use, the profiler's
 * window (cuda_backend.cu binds, harvests and counts through cuda_impl.h's three calls).
 *
 * A traced range whose work runs on the device's compute stream (tr_trace_kind.device) ends
 * with an event recorded there; once it has completed, the slice [start, end] goes to the
 * trace on the device's lane, end timed by the event, start the later of the host's start
 * (no work of the range was issued before) and the end of the previous slice (the stream
 * runs in order). Event times become host times through an anchor: an event recorded on an
 * idle stream of its own and waited for, its host time the middle of that wait (re-taken
 * every second, so that the GPU's clock does not drift from the host's). The state is the
 * owner thread's: a device has one, and slices are recorded on it. */

#include "cuda_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "tr_trace.h"

enum { TR__TIMED = 256 };

typedef struct tr__cuda_timed {
  cudaEvent_t ev;
  const tr_trace_kind *kind;
  int64_t args[3];
  uint64_t start_ns;
} tr__cuda_timed;

typedef struct tr__cuda_timing {
  tr_device *dev;            /* bound on this thread */
  cudaEvent_t anchor;
  uint64_t anchor_ns;        /* the host time of the anchor; 0: none yet */
  tr__cuda_timed ring[TR__TIMED];
  int head, n;
  uint64_t last_end;
  cudaEvent_t spare[TR__TIMED];
  int nspare;
} tr__cuda_timing;

static pthread_key_t tr__timing_key;
static pthread_once_t tr__timing_once = PTHREAD_ONCE_INIT;

static void tr__timing_free(void *p) {
  tr__cuda_timing *t = (tr__cuda_timing *)p;
  for (int i = 0; i < t->n; i++) (void)cudaEventDestroy(t->ring[(t->head + i) % TR__TIMED].ev);
  for (int i = 0; i < t->nspare; i++) (void)cudaEventDestroy(t->spare[i]);
  if (t->anchor) (void)cudaEventDestroy(t->anchor);
  (void)cudaGetLastError();
  free(t);
}
static void tr__timing_key_make(void) { pthread_key_create(&tr__timing_key, tr__timing_free); }

static tr__cuda_timing *tr__timing(int make) {
  pthread_once(&tr__timing_once, tr__timing_key_make);
  tr__cuda_timing *t = (tr__cuda_timing *)pthread_getspecific(tr__timing_key);
  if (!t && make && (t = (tr__cuda_timing *)calloc(1, sizeof *t)))
    pthread_setspecific(tr__timing_key, t);
  return t;
}

static void tr__cuda_range_end(const tr_trace_kind *kind, const int64_t args[3], uint64_t start_ns);
static void tr__cuda_window(int open);
static const tr_trace_device_hooks tr__cuda_hooks = {tr__cuda_range_end, tr__cuda_window};

/* A thread takes a device: from now on its ranges may be timed there. */
void tr__cuda_timing_bind(tr_device *d) {
  tr_trace_set_device_hooks(&tr__cuda_hooks);
  tr__cuda_timing *t = tr__timing(1);
  if (t && t->dev != d) {
    if (t->dev) tr__cuda_timing_harvest(t->dev);
    t->dev = d;
    t->n = t->head = 0; /* what was pending for another device is dropped */
    t->anchor_ns = 0;
    t->last_end = 0;
  }
}

/* The anchor, taken again after a second. 0 when it cannot be taken. */
static int tr__cuda_anchor(tr__cuda_timing *t) {
  if (t->anchor_ns && tr_now_ns() - t->anchor_ns < 1000000000ull) return 1;
  cudaStream_t idle;
  if (!t->anchor && cudaEventCreate(&t->anchor) != cudaSuccess) return 0;
  if (cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking) != cudaSuccess) return 0;
  const uint64_t before = tr_now_ns();
  cudaError_t e = cudaEventRecord(t->anchor, idle);
  if (e == cudaSuccess) e = cudaEventSynchronize(t->anchor);
  const uint64_t after = tr_now_ns();
  (void)cudaStreamDestroy(idle);
  if (e != cudaSuccess) return 0;
  t->anchor_ns = before + (after - before) / 2;
  return 1;
}

/* Every completed slice to the trace, in order; `wait`: the oldest even if it has not. */
static void tr__cuda_resolve(tr__cuda_timing *t, int wait) {
  while (t->n) {
    tr__cuda_timed *p = &t->ring[t->head];
    cudaError_t e = wait ? cudaEventSynchronize(p->ev) : cudaEventQuery(p->ev);
    if (e == cudaErrorNotReady) break;
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t->anchor, p->ev);
    if (e == cudaSuccess) {
      const int64_t d = (int64_t)((double)ms * 1e6);
      const uint64_t end = (uint64_t)((int64_t)t->anchor_ns + d);
      uint64_t start = p->start_ns > t->last_end ? p->start_ns : t->last_end;
      if (start > end) start = end;
      tr_trace_device_slice(t->dev->info.name, p->kind, p->args, start, end);
      t->last_end = end;
    }
    (void)cudaGetLastError();
    if (t->nspare < TR__TIMED) t->spare[t->nspare++] = p->ev;
    else (void)cudaEventDestroy(p->ev);
    t->head = (t->head + 1) % TR__TIMED;
    t->n--;
    wait = 0;
  }
}

void tr__cuda_timing_harvest(const tr_device *d) {
  tr__cuda_timing *t = tr__timing(0);
  if (t && t->dev == d && t->anchor_ns) tr__cuda_resolve(t, 0);
}

static void tr__cuda_range_end(const tr_trace_kind *kind, const int64_t args[3], uint64_t start_ns) {
  tr__cuda_timing *t = tr__timing(0);
  if (!t || !t->dev || !t->dev->stream || !tr__cuda_anchor(t)) return; /* not a GPU's thread */
  if (t->dev->stream->capturing) return; /* an event or a wait would spoil the recording */
  tr__cuda_resolve(t, 0);
  if (t->n == TR__TIMED) tr__cuda_resolve(t, 1);
  cudaEvent_t ev;
  if (t->nspare) ev = t->spare[--t->nspare];
  else if (cudaEventCreate(&ev) != cudaSuccess) return;
  if (cudaEventRecord(ev, tr__cu_stream(t->dev->stream)->st) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaEventDestroy(ev);
    return;
  }
  tr__cuda_timed *p = &t->ring[(t->head + t->n++) % TR__TIMED];
  p->ev = ev;
  p->kind = kind;
  memcpy(p->args, args, sizeof p->args);
  p->start_ns = start_ns;
}

/* cudaProfilerStart/Stop around a profiling window (nsys --capture-range=cudaProfilerApi). */
static void tr__cuda_window(int open) {
  (void)(open ? cudaProfilerStart() : cudaProfilerStop());
  (void)cudaGetLastError();
}

/* "memory cuda:0/1": a counter track per logical device, named once for the process (the
 * trace refers to it after the device has gone). */
static const char *tr__memory_track(const tr_device *d) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static char names[64][48];
  const char *found = NULL;
  char want[48];
  snprintf(want, sizeof want, "memory %s", d->info.name);
  pthread_mutex_lock(&lock);
  for (int i = 0; i < 64 && !found; i++) {
    if (names[i][0] == 0) snprintf(names[i], sizeof names[i], "%s", want);
    if (!strcmp(names[i], want)) found = names[i];
  }
  pthread_mutex_unlock(&lock);
  return found;
}

void tr__cuda_memory_counter(tr_device *d) {
  if (!tr_trace_here()) return;
  uint64_t used = 0;
  if (cudaMemPoolGetAttribute(tr__cu_dev(d)->pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  tr__cuda_device *cd = tr__cu_dev(d);
  if (cd->memory_track == NULL) cd->memory_track = tr__memory_track(d);
  if (cd->memory_track) tr_trace_counter(cd->memory_track, (int64_t)used);
}
