/* host_backend.c — the host backend: CPU "devices" with 64-byte-aligned memory, in-order
 * streams run synchronously by the owner thread, events that complete when recorded,
 * memcpy for every copy (peer ones included) and oneDNN, OpenBLAS or a direct path for GEMM,
 * chosen per shape (host_gemm.c, host_blas.h, host_choose.h), on the device's thread alone: the parallelism comes from running several
 * devices on several threads. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host_blas.h"
#include "host_dev.h"

enum { BLOCK_HEADER = 64 };
#define BLOCK_MAGIC 0x7472686f7374626bull /* "trhostbk": handed out */
#define BLOCK_FREED 0x7472686f73746672ull /* "trhostfr": in the cache */
#define CACHE_MAX ((size_t)512 << 20)     /* freed bytes kept for reuse, per device */

/* Every block starts with this header, 64 bytes before the pointer handed out, so frees
 * are checked and a closing device can release what its users still hold. */
typedef struct tr__host_block {
  uint64_t magic;
  size_t size;
  tr_device *dev;
  struct tr__host_block *prev, *next; /* live list, or the cache (next only) */
} block;
_Static_assert(sizeof(block) <= BLOCK_HEADER, "block header fits its 64 bytes");

typedef tr__host_dev host_dev;

typedef struct host_event {
  uint64_t t_ns; /* when it was recorded */
} host_event;

/* ---- discovery ---------------------------------------------------------------------------- */

static int host_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    size_t len = strcspn(v, "\n");
    snprintf(out, n, "%.*s", (int)len, v);
    break;
  }
  fclose(f);
}

static int host_update_memory(tr_device *d) {
  long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  d->info.memory_total = page > 0 && total > 0 ? (uint64_t)page * (uint64_t)total : 0;
  d->info.memory_free = page > 0 && avail > 0 ? (uint64_t)page * (uint64_t)avail : 0;
  return 0;
}

static int host_open(tr_device *d) {
  host_dev *h = calloc(1, sizeof *h);
  if (!h) return tr__device_fail(d, TR_ENOMEM, "open: out of memory");
  d->impl = h;
  cpu_model(d->info.model, 80);
  d->info.isa[0] = 0;
  int rc = tr__host_libs_open(d); /* the libraries named after the model */
  if (rc) return rc;
  d->info.multiprocessors = 1;
  return host_update_memory(d);
}

static void host_close(tr_device *d) {
  host_dev *h = d->impl;
  if (!h) return;
  while (h->live) {
    block *b = h->live;
    h->live = b->next;
    free(b);
  }
  while (h->cache) {
    block *b = h->cache;
    h->cache = b->next;
    free(b);
  }
  for (int i = 0; i < TR__SCRATCH_COUNT; i++) free(h->scratch[i]);
  tr__host_libs_close(d);
  free(h);
  d->impl = NULL;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* MemAvailable of /proc/meminfo in bytes (what can be had without swapping), or SIZE_MAX
 * when it cannot be read. */
static size_t memory_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  unsigned long long kb = 0;
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
  if (f) fclose(f);
  return found && kb < SIZE_MAX / 1024 ? (size_t)kb * 1024 : SIZE_MAX;
}

enum { CHECKED_ALLOC = 16 << 20 }; /* allocations this large are checked against the machine */

static int host_alloc(tr_stream *s, size_t bytes, void **out) {
  tr_device *d = s->dev;
  host_dev *h = d->impl;
  size_t size = (bytes + 63) & ~(size_t)63;
  if (size < bytes || size > SIZE_MAX - BLOCK_HEADER)
    return tr__device_fail(d, TR_ENOMEM, "alloc: %zu bytes is too large", bytes);
  block *b = NULL;
  for (block **p = &h->cache; *p; p = &(*p)->next)
    if ((*p)->size == size) {
      b = *p;
      *p = b->next;
      h->cached -= size;
      b->magic = BLOCK_MAGIC;
      break;
    }
  if (!b) {
    /* With overcommit, an allocation larger than the machine succeeds and the process is
     * killed when it touches the pages, with no word of why: refuse it here instead. */
    const size_t avail = size >= CHECKED_ALLOC ? memory_available() : SIZE_MAX;
    if (size > avail)
      return tr__device_fail(d, TR_ENOMEM, "alloc: %zu bytes asked for: out of memory (%zu "
                             "bytes available on this machine)", bytes, avail);
    void *mem = NULL;
    if (posix_memalign(&mem, 64, BLOCK_HEADER + size))
      return tr__device_fail(d, TR_ENOMEM, "alloc: %zu bytes asked for: out of memory", bytes);
    b = mem;
    b->magic = BLOCK_MAGIC;
    b->size = size;
    b->dev = d;
  }
  b->prev = NULL;
  b->next = h->live;
  if (h->live) h->live->prev = b;
  h->live = b;
  *out = (char *)b + BLOCK_HEADER;
  return 0;
}

static int host_dealloc(tr_stream *s, void *ptr) {
  tr_device *d = s->dev;
  host_dev *h = d->impl;
  block *b = (block *)((char *)ptr - BLOCK_HEADER);
  if (((uintptr_t)ptr & 63) || b->magic != BLOCK_MAGIC || b->dev != d)
    return tr__device_fail(d, TR_EINVAL, "free: %p was not allocated on this device (or was freed)", ptr);
  if (b->prev) b->prev->next = b->next;
  else h->live = b->next;
  if (b->next) b->next->prev = b->prev;
  if (h->cached + b->size <= CACHE_MAX) {
    b->magic = BLOCK_FREED;
    b->next = h->cache;
    h->cache = b;
    h->cached += b->size;
  } else {
    b->magic = 0;
    free(b);
  }
  return 0;
}

/* ---- streams and events: a host stream runs each op as it is issued ------------------------ */

static int host_stream_open(tr_stream *s) {
  (void)s;
  return 0;
}
static void host_stream_close(tr_stream *s) { (void)s; }
static int host_stream_synchronize(tr_stream *s) {
  (void)s;
  return 0;
}

static int host_event_open(tr_event *e) {
  host_event *he = calloc(1, sizeof *he);
  if (!he) return tr__device_fail(e->dev, TR_ENOMEM, "event_open: out of memory");
  e->impl = he;
  return 0;
}
static void host_event_close(tr_event *e) { free(e->impl); }
static int host_event_record(tr_event *e, tr_stream *s) {
  (void)s;
  if (e->flags & TR_EVENT_TIMING) ((host_event *)e->impl)->t_ns = tr_now_ns();
  return 0;
}
/* Everything issued before the record has already run, and the message that brought the
 * event to this thread ordered that work before us. */
static int host_stream_wait_event(tr_stream *s, tr_event *e) {
  (void)s, (void)e;
  return 0;
}
static int host_event_query(tr_event *e) {
  (void)e;
  return 1;
}
static int host_event_synchronize(tr_event *e) {
  (void)e;
  return 0;
}
static int host_event_elapsed_ms(tr_event *start, tr_event *end, float *ms) {
  const host_event *a = start->impl, *b = end->impl;
  *ms = (float)((double)(int64_t)(b->t_ns - a->t_ns) / 1e6);
  return 0;
}

/* ---- copies ---------------------------------------------------------------------------------- */

static int host_copy(tr_stream *s, void *dst, const void *src, size_t bytes, tr_copy_kind kind) {
  (void)s, (void)kind;
  memcpy(dst, src, bytes);
  return 0;
}

static int host_fill_bytes(tr_stream *s, void *dst, int value, size_t bytes) {
  (void)s;
  memset(dst, value, bytes);
  return 0;
}

const tr__backend tr__host_backend = {
    .name = "host",
    .kind = TR_DEVICE_HOST,
    .count = host_count,
    .open = host_open,
    .close = host_close,
    .update_memory = host_update_memory,
    .alloc = host_alloc,
    .dealloc = host_dealloc,
    .stream_open = host_stream_open,
    .stream_close = host_stream_close,
    .stream_synchronize = host_stream_synchronize,
    .event_open = host_event_open,
    .event_close = host_event_close,
    .event_record = host_event_record,
    .stream_wait_event = host_stream_wait_event,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
    .event_elapsed_ms = host_event_elapsed_ms,
    .copy = host_copy,
    .fill_bytes = host_fill_bytes,
    .gemm = tr__host_gemm,
    .gemm_batched = tr__host_gemm_batched,
    .gemm_bf16 = tr__host_gemm_bf16,
#define TR__HOST_SLOT(name, params, args, checks) .name = tr__host_##name,
    TR__OP_MAP(TR__HOST_SLOT)
#undef TR__HOST_SLOT
};
