/* trace_nvtx.c — the tracer's ranges as NVTX ranges in the "troupe" domain (tr_trace.h).
 *
 * NVTX 3 is header-only: every call goes through a function pointer that is null until a
 * tool (Nsight Systems, or an injection library named by NVTX_INJECTION64_PATH) attaches at
 * the first call. The domain is created once, under pthread_once, by the first thread that
 * names itself (every actor thread does before it handles anything), so `tr__nvtx_live` is
 * set before any thread reads it; without a tool it stays 0 and the runtime never comes
 * here on its hot paths.
 *
 * Names and categories are registered once (nvtxDomainRegisterStringA,
 * nvtxDomainNameCategoryA): a kind keeps its registration in its own private fields, a
 * message type's name in a small table keyed by the name's address.
 */
#include "trace_impl.h"

#ifdef TR_HAVE_NVTX

#include <nvtx3/nvToolsExt.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int tr__nvtx_live;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static nvtxDomainHandle_t domain;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int depth, floor_; /* this thread's troupe ranges; those of enclosing callbacks */

static void init(void) {
  domain = nvtxDomainCreateA("troupe");
  tr__nvtx_live = domain != NULL;
}

static int live(void) {
  pthread_once(&once, init);
  return tr__nvtx_live;
}

void tr__nvtx_name_thread(const char *name) {
  if (live()) nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
}

/* ---- registration ------------------------------------------------------------------------ */

enum { CATEGORIES = 32, NAMES = 1024 };
static const char *categories[CATEGORIES]; /* id i + 1; under lock */

static uint32_t category_id(const char *name) {
  pthread_mutex_lock(&lock);
  uint32_t id = 0;
  for (uint32_t i = 0; i < CATEGORIES && id == 0; i++) {
    if (categories[i] == NULL) {
      categories[i] = name;
      nvtxDomainNameCategoryA(domain, i + 1, name);
    }
    if (!strcmp(categories[i], name)) id = i + 1;
  }
  pthread_mutex_unlock(&lock);
  return id; /* 0 (none) once the table is full */
}

typedef struct name_slot {
  const char *_Atomic key;
  nvtxStringHandle_t handle;
} name_slot;
static name_slot names[NAMES];

/* The registered string of `name` (a type's name: the same address every time). */
static nvtxStringHandle_t name_handle(const char *name) {
  size_t i = ((uintptr_t)name >> 4) * 0x9E3779B97F4A7C15ull >> 54; /* 10 bits */
  for (size_t probe = 0; probe < NAMES; probe++, i = (i + 1) % NAMES) {
    const char *k = atomic_load_explicit(&names[i].key, memory_order_acquire);
    if (k == name) return names[i].handle;
    if (k != NULL) continue;
    pthread_mutex_lock(&lock); /* an empty slot: claim it, unless someone just did */
    k = atomic_load_explicit(&names[i].key, memory_order_relaxed);
    if (k == NULL) {
      names[i].handle = nvtxDomainRegisterStringA(domain, name);
      atomic_store_explicit(&names[i].key, name, memory_order_release);
      k = name;
    }
    pthread_mutex_unlock(&lock);
    if (k == name) return names[i].handle;
  }
  return NULL; /* full: the message goes as plain text */
}

static void register_kind(tr_trace_kind *k) {
  if (__atomic_load_n(&k->nvtx_name_, __ATOMIC_ACQUIRE)) return;
  const uint32_t cat = k->category ? category_id(k->category) : 0;
  __atomic_store_n(&k->nvtx_category_, cat, __ATOMIC_RELAXED);
  uintptr_t h = k->name ? (uintptr_t)nvtxDomainRegisterStringA(domain, k->name) : 0;
  __atomic_store_n(&k->nvtx_name_, h ? h : 1, __ATOMIC_RELEASE); /* 1: registered, no name */
}

/* ---- ranges ------------------------------------------------------------------------------ */

static int64_t field(int64_t v) { return v < 0 || v > 999 ? 999 : v; }

/* The attributes of a range of `kind`, named `name` (NULL: the kind's name). */
static void attributes(tr_trace_kind *kind, const char *name, nvtxEventAttributes_t *ev) {
  register_kind(kind);
  memset(ev, 0, sizeof *ev);
  ev->version = NVTX_VERSION;
  ev->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ev->category = __atomic_load_n(&kind->nvtx_category_, __ATOMIC_RELAXED);
  ev->colorType = NVTX_COLOR_ARGB;
  ev->color = kind->color;
  nvtxStringHandle_t h = name ? name_handle(name)
                              : (nvtxStringHandle_t)__atomic_load_n(&kind->nvtx_name_, __ATOMIC_RELAXED);
  if (h && (uintptr_t)h != 1) {
    ev->messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    ev->message.registered = h;
  } else {
    ev->messageType = NVTX_MESSAGE_TYPE_ASCII;
    ev->message.ascii = name ? name : kind->name ? kind->name : "?";
  }
}

int tr__nvtx_push(tr_trace_kind *kind, const char *name, const int64_t args[3]) {
  if (!tr__nvtx_live) return 0;
  nvtxEventAttributes_t ev;
  attributes(kind, name, &ev);
  if (args) {
    ev.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    ev.payload.llValue = args[0] * 1000000 + field(args[1]) * 1000 + field(args[2]);
  }
  nvtxDomainRangePushEx(domain, &ev);
  depth++;
  return 1;
}

void tr__nvtx_pop(void) {
  if (depth > floor_) {
    nvtxDomainRangePop(domain);
    depth--;
  }
}

int tr__nvtx_enter(void) {
  const int was = floor_;
  floor_ = depth;
  return was;
}

void tr__nvtx_leave(int floor, int pushed) {
  while (depth > floor_) tr__nvtx_pop();
  floor_ = floor;
  if (pushed) tr__nvtx_pop();
}

uint64_t tr__nvtx_window_open(void) {
  static tr_trace_kind window = {.name = "profile", .category = "profile", .color = 0xFF000000};
  if (!live()) return 0;
  nvtxEventAttributes_t ev;
  attributes(&window, NULL, &ev);
  return nvtxDomainRangeStartEx(domain, &ev);
}

void tr__nvtx_window_close(uint64_t id) {
  if (id && live()) nvtxDomainRangeEnd(domain, id);
}

#else /* no NVTX in this build */

void tr__nvtx_name_thread(const char *name) { (void)name; }
int tr__nvtx_push(tr_trace_kind *kind, const char *name, const int64_t args[3]) {
  (void)kind, (void)name, (void)args;
  return 0;
}
void tr__nvtx_pop(void) {}
int tr__nvtx_enter(void) { return 0; }
void tr__nvtx_leave(int floor, int pushed) { (void)floor, (void)pushed; }
uint64_t tr__nvtx_window_open(void) { return 0; }
void tr__nvtx_window_close(uint64_t id) { (void)id; }

#endif
