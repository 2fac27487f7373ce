/* nvtx_recorder.c — an NVTX injection library that records every call (nvtx_recorder.h).
 *
 * NVTX loads it at the first NVTX call of a process whose NVTX_INJECTION64_PATH names it,
 * and calls InitializeInjectionNvtx2, which fills the core and domain callback tables with
 * the functions below. Each appends to one array under a lock: a test reads it afterwards
 * (dlopen of the same path gives the same instance). Strings are copied; domains and
 * registered strings are handles to copies of their names.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "nvtx_recorder.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static nvtx_rec *recs;
static int n, cap;
static uint64_t next_id;

static uint32_t tid(void) { return (uint32_t)syscall(SYS_gettid); }

static void add(nvtx_rec r) {
  pthread_mutex_lock(&lock);
  if (n == cap) {
    cap = cap ? 2 * cap : 4096;
    recs = realloc(recs, (size_t)cap * sizeof *recs);
    if (recs == NULL) abort();
  }
  recs[n++] = r;
  pthread_mutex_unlock(&lock);
}

/* Every copy stays reachable until the process ends: records are reset, names are not. */
static char **strings;
static size_t nstrings, capstrings;

static const char *copy(const char *s) {
  if (s == NULL) return NULL;
  char *c = strdup(s);
  pthread_mutex_lock(&lock);
  if (nstrings == capstrings) {
    capstrings = capstrings ? 2 * capstrings : 256;
    strings = realloc(strings, capstrings * sizeof *strings);
    if (strings == NULL) abort();
  }
  strings[nstrings++] = c;
  pthread_mutex_unlock(&lock);
  return c;
}
static const char *domain_name(nvtxDomainHandle_t d) { return (const char *)d; }

static nvtx_rec from_attributes(nvtx_rec_type type, nvtxDomainHandle_t d,
                                const nvtxEventAttributes_t *a) {
  nvtx_rec r = {.type = type, .tid = tid(), .domain = domain_name(d)};
  if (a == NULL) return r;
  r.category = a->category;
  r.color = a->colorType == NVTX_COLOR_ARGB ? a->color : 0;
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
    r.message = (const char *)a->message.registered; /* our handles are the strings */
    r.registered = 1;
  } else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) {
    r.message = copy(a->message.ascii);
  }
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64) {
    r.has_payload = 1;
    r.payload = a->payload.llValue;
  }
  return r;
}

/* ---- the callbacks ------------------------------------------------------------------------ */

static nvtxDomainHandle_t domain_create(const char *name) { return (nvtxDomainHandle_t)copy(name); }
static void domain_destroy(nvtxDomainHandle_t d) { (void)d; }
static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
  (void)d;
  return (nvtxStringHandle_t)copy(s);
}
static void name_category(nvtxDomainHandle_t d, uint32_t id, const char *name) {
  add((nvtx_rec){.type = REC_CATEGORY, .tid = tid(), .domain = domain_name(d), .category = id,
                 .message = copy(name)});
}
static void name_category_global(uint32_t id, const char *name) { name_category(NULL, id, name); }
static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  add(from_attributes(REC_PUSH, d, a));
  return 0;
}
static int pop(nvtxDomainHandle_t d) {
  add((nvtx_rec){.type = REC_POP, .tid = tid(), .domain = domain_name(d)});
  return 0;
}
static nvtxRangeId_t start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  nvtx_rec r = from_attributes(REC_START, d, a);
  pthread_mutex_lock(&lock);
  r.id = ++next_id;
  pthread_mutex_unlock(&lock);
  add(r);
  return r.id;
}
static void end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  add((nvtx_rec){.type = REC_END, .tid = tid(), .domain = domain_name(d), .id = id});
}
static void mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { add(from_attributes(REC_MARK, d, a)); }
static void name_thread(uint32_t thread, const char *name) {
  add((nvtx_rec){.type = REC_THREAD_NAME, .tid = thread, .message = copy(name)});
}
/* The global domain's calls, for completeness: troupe uses its own domain. */
static int push_global(const nvtxEventAttributes_t *a) { return push(NULL, a); }
static int pop_global(void) { return pop(NULL); }
static void mark_global(const nvtxEventAttributes_t *a) { mark(NULL, a); }

static void set(NvtxFunctionTable table, unsigned size, unsigned slot, NvtxFunctionPointer fn) {
  if (slot <= size && table[slot]) *table[slot] = fn; /* size: the last valid slot */
}

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable core, core2;
  unsigned ncore, ncore2;
  if (cb == NULL || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &ncore) ||
      !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &ncore2))
    return 0;
#define F(fn) ((NvtxFunctionPointer)(void (*)(void))(fn))
  set(core, ncore, NVTX_CBID_CORE_NameOsThreadA, F(name_thread));
  set(core, ncore, NVTX_CBID_CORE_NameCategoryA, F(name_category_global));
  set(core, ncore, NVTX_CBID_CORE_RangePushEx, F(push_global));
  set(core, ncore, NVTX_CBID_CORE_RangePop, F(pop_global));
  set(core, ncore, NVTX_CBID_CORE_MarkEx, F(mark_global));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainCreateA, F(domain_create));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainDestroy, F(domain_destroy));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainRegisterStringA, F(register_string));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainNameCategoryA, F(name_category));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainRangePushEx, F(push));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainRangePop, F(pop));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainRangeStartEx, F(start));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainRangeEnd, F(end));
  set(core2, ncore2, NVTX_CBID_CORE2_DomainMarkEx, F(mark));
#undef F
  return 1;
}

/* ---- for the tests ------------------------------------------------------------------------- */

EXPORT int nvtx_recorder_count(void) {
  pthread_mutex_lock(&lock);
  int k = n;
  pthread_mutex_unlock(&lock);
  return k;
}

EXPORT const nvtx_rec *nvtx_recorder_get(int i) {
  pthread_mutex_lock(&lock);
  const nvtx_rec *r = i >= 0 && i < n ? &recs[i] : NULL;
  pthread_mutex_unlock(&lock);
  return r; /* stable until the next record or reset; read once the run is over */
}

EXPORT void nvtx_recorder_reset(void) {
  pthread_mutex_lock(&lock);
  n = 0; /* the strings stay: handles and names may be used again */
  pthread_mutex_unlock(&lock);
}
