/* device.c — the core of the device layer: the backends of this build, spec parsing, device
 * lists and devices, the owner-thread rule, and the calls on streams, events and captures,
 * each with its argument checks and dispatch to the backend's slots (with the fallbacks that
 * backend_impl.h promises). The calls that queue work on a stream (memory, copies, GEMM,
 * the kernels) are device_ops.c's; the checks both files begin with, device_impl.h's. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_impl.h"
#include "fault.h"

extern const tr__backend tr__host_backend;
#ifdef TR_HAVE_CUDA
extern const tr__backend tr__cuda_backend;
#endif

static const tr__backend *const backends[] = {
    &tr__host_backend,
#ifdef TR_HAVE_CUDA
    &tr__cuda_backend,
#endif
};
enum { NBACKENDS = sizeof backends / sizeof backends[0], MAX_DEVICES = 256 };

struct tr_device_list {
  int n;
  tr_device **devs;
};

const tr__backend *tr__backend_of(tr_device_kind kind) {
  for (int i = 0; i < NBACKENDS; i++)
    if (backends[i]->kind == kind) return backends[i];
  return NULL;
}

const char *tr_device_kind_name(tr_device_kind kind) {
  return kind == TR_DEVICE_HOST ? "host" : kind == TR_DEVICE_CUDA ? "cuda" : "unknown";
}

static const char *const precision_names[] = {
#define TR__PRECISION_NAME(name, text) text,
    TR_PRECISION_MAP(TR__PRECISION_NAME)
#undef TR__PRECISION_NAME
};

const char *tr_precision_name(tr_precision p) {
  return tr__name_of(precision_names, TR__COUNTOF(precision_names), (int)p);
}

int tr_precision_parse(const char *name, tr_precision *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(precision_names, TR__COUNTOF(precision_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_precision)i, 0);
}

const char *tr_bf16_support_name(tr_bf16_support b) {
  return b == TR_BF16_NATIVE     ? "native"
         : b == TR_BF16_EMULATED ? "emulated"
                                 : "converted to fp32";
}

int tr_device_count(tr_device_kind kind) {
  const tr__backend *be = tr__backend_of(kind);
  int n = be ? be->count() : 0;
  return n > 0 ? n : 0;
}

/* ---- specs ------------------------------------------------------------------------------ */

typedef struct {
  const tr__backend *be;
  int ordinal;
} slot;

static int spec_fail(char *err, size_t n, const char *spec, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int spec_fail(char *err, size_t n, const char *spec, const char *fmt, ...) {
  if (!err || !n) return TR_EINVAL;
  int k = snprintf(err, n, "device spec '%s': ", spec);
  if (k < 0 || (size_t)k >= n) return TR_EINVAL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, n - (size_t)k, fmt, ap);
  va_end(ap);
  return TR_EINVAL;
}

/* A whole decimal number of at most 9 digits, or -1. */
static int parse_index(const char *s, size_t len) {
  if (len == 0 || len > 9) return -1;
  int v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/* Fills slots[] from the spec; returns the count or a negative status with `err` set. */
static int parse_spec(const char *spec, slot *slots, char *err, size_t errn) {
  if (!spec || !*spec)
    return spec_fail(err, errn, spec ? spec : "", "empty (expected host:N, cuda:I[,J...] or auto)");
  if (!strcmp(spec, "auto")) {
    const tr__backend *cuda = tr__backend_of(TR_DEVICE_CUDA);
    int ngpu = cuda ? cuda->count() : 0;
    if (ngpu > MAX_DEVICES) ngpu = MAX_DEVICES;
    for (int i = 0; i < ngpu; i++) slots[i] = (slot){cuda, i};
    if (ngpu > 0) return ngpu;
    slots[0] = (slot){&tr__host_backend, 0};
    return 1;
  }
  int n = 0, host_next = 0;
  const tr__backend *prev = NULL;
  const char *p = spec;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[64];
    snprintf(item, sizeof item, "%.*s", (int)(len < 63 ? len : 63), p);
    if (len == 0) return spec_fail(err, errn, spec, "an empty item (two commas, or a comma at an end)");
    if (len == 4 && !strncmp(p, "auto", 4))
      return spec_fail(err, errn, spec, "'auto' must stand alone");
    const char *colon = memchr(p, ':', len);
    const tr__backend *be = prev;
    const char *num = p;
    size_t numlen = len;
    if (colon) {
      size_t klen = (size_t)(colon - p);
      be = NULL;
      if (klen == 4 && !strncmp(p, "host", 4)) be = &tr__host_backend;
      else if (klen == 4 && !strncmp(p, "cuda", 4)) {
        be = tr__backend_of(TR_DEVICE_CUDA);
        if (!be) return spec_fail(err, errn, spec, "'%s': this build of troupe has no CUDA backend", item);
      } else
        return spec_fail(err, errn, spec, "'%s': unknown device kind '%.*s' (expected host, cuda or auto)",
                         item, (int)klen, p);
      num = colon + 1;
      numlen = len - klen - 1;
    } else if (!prev || prev->kind != TR_DEVICE_CUDA) {
      return spec_fail(err, errn, spec, "'%s' names no kind (expected host:N, cuda:I or auto)", item);
    }
    int v = parse_index(num, numlen);
    if (v < 0)
      return spec_fail(err, errn, spec, "'%s': '%.*s' is not a whole number", item, (int)numlen, num);
    if (be->kind == TR_DEVICE_HOST) {
      if (v < 1 || v > MAX_DEVICES)
        return spec_fail(err, errn, spec, "'%s': the number of host devices must be from 1 to %d", item,
                         MAX_DEVICES);
      if (n + v > MAX_DEVICES) return spec_fail(err, errn, spec, "more than %d devices", MAX_DEVICES);
      for (int i = 0; i < v; i++) slots[n++] = (slot){be, host_next++};
    } else {
      int have = be->count();
      if (v >= have)
        return spec_fail(err, errn, spec, "'%s': no %s device %d (this machine has %d)", item,
                         be->name, v, have > 0 ? have : 0);
      if (n + 1 > MAX_DEVICES) return spec_fail(err, errn, spec, "more than %d devices", MAX_DEVICES);
      slots[n++] = (slot){be, v};
    }
    prev = be;
    if (!end) break;
    p = end + 1;
  }
  return n;
}

/* ---- lists and devices ------------------------------------------------------------------ */

static void stream_free(tr_stream *s) {
  s->dev->be->stream_close(s);
  free(s);
}

static int stream_new(tr_device *d, const char *name, tr_stream **out) {
  tr_stream *s = calloc(1, sizeof *s);
  if (!s) return tr__device_fail(d, TR_ENOMEM, "stream: out of memory");
  s->dev = d;
  snprintf(s->name, sizeof s->name, "%s", name ? name : "stream");
  int rc = d->be->stream_open(s);
  if (rc) {
    free(s);
    return rc;
  }
  s->next = d->streams;
  d->streams = s;
  *out = s;
  return 0;
}

static void device_close(tr_device *d) {
  if (d->be && (d->impl || d->streams)) {
    while (d->streams) {
      tr_stream *s = d->streams;
      d->streams = s->next;
      stream_free(s);
    }
    d->be->close(d);
  }
  free(d);
}

void tr_device_list_close(tr_device_list *list) {
  if (!list) return;
  for (int i = list->n - 1; i >= 0; i--)
    if (list->devs[i]) device_close(list->devs[i]);
  free(list->devs);
  free(list);
}

int tr_device_list_open(tr_device_list **out, const char *spec, char *err, size_t err_size) {
  if (out == NULL) return tr_errorf(err, err_size, TR_EINVAL, "tr_device_list_open: out is NULL");
  *out = NULL;
  if (err && err_size) err[0] = 0;
  if (tr__fault_spec(spec)) return tr__fault_list_open(out, spec, err, err_size); /* tests' */
  slot *slots = calloc(MAX_DEVICES, sizeof *slots);
  tr_device_list *list = calloc(1, sizeof *list);
  int rc = TR_ENOMEM;
  if (!slots || !list) goto fail_nomem;
  rc = parse_spec(spec, slots, err, err_size);
  if (rc < 0) goto fail;
  int n = rc;
  list->devs = calloc((size_t)n, sizeof *list->devs);
  if (!list->devs) goto fail_nomem;
  for (int i = 0; i < n; i++) {
    tr_device *d = calloc(1, sizeof *d);
    if (!d) goto fail_nomem;
    list->devs[i] = d;
    list->n = i + 1;
    d->be = slots[i].be;
    d->list = list;
    d->info.kind = d->be->kind;
    d->info.index = i;
    d->info.ordinal = slots[i].ordinal;
    int twins = 0; /* earlier logical devices on the same physical one */
    for (int j = 0; j < i; j++) twins += slots[j].be == d->be && slots[j].ordinal == d->info.ordinal;
    if (twins)
      snprintf(d->info.name, sizeof d->info.name, "%s:%d/%d", d->be->name, d->info.ordinal, twins);
    else
      snprintf(d->info.name, sizeof d->info.name, "%s:%d", d->be->name, d->info.ordinal);
    rc = d->be->open(d);
    if (!rc) rc = stream_new(d, "compute", &d->stream);
    if (rc) {
      if (err && err_size) snprintf(err, err_size, "%s", d->error);
      goto fail;
    }
  }
  for (int b = 0; b < NBACKENDS; b++) {
    if (!backends[b]->link) continue;
    tr_device *mine[MAX_DEVICES];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (list->devs[i]->be == backends[b]) mine[k++] = list->devs[i];
    if (k && (rc = backends[b]->link(mine, k))) {
      if (err && err_size) snprintf(err, err_size, "%s", mine[0]->error);
      goto fail;
    }
  }
  free(slots);
  *out = list;
  return 0;
fail_nomem:
  rc = TR_ENOMEM;
  if (err && err_size) snprintf(err, err_size, "device spec '%s': out of memory", spec ? spec : "");
fail:
  free(slots);
  tr_device_list_close(list);
  return rc;
}

int tr_device_list_count(const tr_device_list *list) { return list ? list->n : 0; }

int tr_device_list_open_empty(tr_device_list **out) {
  TR__NOT_NULL(out);
  *out = calloc(1, sizeof **out);
  return *out ? 0 : TR_ENOMEM;
}

int tr_device_list_add_placeholder(tr_device_list *list, int at, const tr_device_info *info) {
  TR__NOT_NULL(list);
  TR__NOT_NULL(info);
  if (at < 0 || at > list->n)
    return tr__misuse(TR_EINVAL, "tr_device_list_add_placeholder: at %d: give 0 to %d", at,
                      list->n);
  if (list->n >= MAX_DEVICES)
    return tr__misuse(TR_EINVAL, "tr_device_list_add_placeholder: the list holds %d devices, "
                      "the most a list holds", list->n);
  tr_device **devs = realloc(list->devs, (size_t)(list->n + 1) * sizeof *devs);
  tr_device *d = calloc(1, sizeof *d);
  if (devs) list->devs = devs;
  if (!devs || !d) {
    free(d);
    return TR_ENOMEM;
  }
  d->list = list; /* no backend: every call on it is refused */
  d->info = *info;
  memmove(devs + at + 1, devs + at, (size_t)(list->n - at) * sizeof *devs);
  devs[at] = d;
  list->n++;
  for (int i = 0; i < list->n; i++) devs[i]->info.index = i;
  return 0;
}

tr_device *tr_device_list_at(const tr_device_list *list, int index) {
  if (list == NULL) return NULL;
  if (index < 0 || index >= list->n) {
    tr__misuse(0, "tr_device_list_at: index %d: the list has devices 0 to %d", index, list->n - 1);
    return NULL;
  }
  return list->devs[index];
}

/* Of NULL: NULL, "", false or 0 (tr_base.h, Misuse). */
const tr_device_info *tr_device_info_of(const tr_device *d) { return d ? &d->info : NULL; }

bool tr_device_is_placeholder(const tr_device *d) { return d && d->be == NULL; }

bool tr_device_same_gpu(const tr_device_info *a, const tr_device_info *b) {
  if (a == NULL || b == NULL) return false;
  if (a->kind != TR_DEVICE_CUDA || b->kind != TR_DEVICE_CUDA) return false;
  if (!a->gpu_id[0] || !b->gpu_id[0]) return a->ordinal == b->ordinal;
  return !strcmp(a->gpu_id, b->gpu_id);
}
const char *tr_device_name(const tr_device *d) { return d ? d->info.name : ""; }
const char *tr_device_error(const tr_device *d) { return d ? d->error : ""; }

int tr_device_can_access_peer(const tr_device *d, const tr_device *peer) {
  if (!d || !peer || !d->be || !peer->be) return 0; /* none, or another process's memory */
  if (d->be->can_access_peer) return d->be->can_access_peer(d, peer);
  return d->be->kind == peer->be->kind; /* kinds, not tables: a decorator's (fault.c) copies one */
}

/* A placeholder stands for another process's device: nothing runs on it here. */
int tr__device_placeholder(tr_device *d, const char *call) {
  return tr__device_fail(d, TR_EINVAL, "%s: %s is a placeholder of another process's device: "
                         "nothing runs on it here", call, d->info.name);
}

int tr_device_bind(tr_device *d) {
  TR__NOT_NULL(d);
  if (d->be == NULL) return tr__device_placeholder(d, __func__);
  d->owner = pthread_self();
  __atomic_store_n(&d->bound, 1, __ATOMIC_RELEASE);
  return d->be->bind ? d->be->bind(d) : 0;
}

/* Every call on a device passes here: the first binds the caller as owner, debug builds
 * check that later ones come from it. Another process's device runs nothing here. */
static inline int enter(tr_device *d) {
  TR_ASSERT(d->be != NULL);
  if (__builtin_expect(!__atomic_load_n(&d->bound, __ATOMIC_ACQUIRE), 0)) return tr_device_bind(d);
#ifndef NDEBUG
  if (!pthread_equal(d->owner, pthread_self())) {
    tr__run_error_print(); /* the cause, when a failed run is why we got here */
    fprintf(stderr, "troupe: device %s used from a thread that does not own it "
                    "(tr_device_bind hands a device to another thread)\n", d->info.name);
    TR_ASSERT(!"device used off its owner thread");
  }
#endif
  return 0;
}

int tr__device_enter(tr_device *d) { return enter(d); }

int tr_device_update_memory(tr_device *d) {
  ENTER_DEV(d);
  return d->be->update_memory ? d->be->update_memory(d) : 0;
}

int tr_device_set_tf32(tr_device *d, int enable) {
  ENTER_DEV(d);
  d->tf32 = enable != 0;
  return d->be->set_tf32 ? d->be->set_tf32(d) : 0;
}

/* ---- streams and events ------------------------------------------------------------------- */

tr_stream *tr_device_stream(tr_device *d) { return d ? d->stream : NULL; }
tr_device *tr_stream_device(const tr_stream *s) { return s ? s->dev : NULL; }

int tr_stream_open(tr_device *d, const char *name, tr_stream **out) {
  ENTER_DEV(d);
  NOT_NULL(out);
  *out = NULL;
  return stream_new(d, name, out);
}

void tr_stream_close(tr_stream *s) {
  if (!s) return;
  tr_device *d = s->dev;
  if (s == d->stream) /* the compute stream is the device's: it goes with the device */
    return (void)tr__misuse(0, "tr_stream_close: %s's compute stream is the device's: it is "
                            "closed with the device, not by tr_stream_close", d->info.name);
  enter(d);
  for (tr_stream **p = &d->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      stream_free(s);
      return;
    }
  TR_ASSERT(!"stream not open on its device");
}

int tr_stream_synchronize(tr_stream *s) {
  ENTER(s);
  NOT_CAPTURING(s);
  return d->be->stream_synchronize(s);
}

int tr_event_open(tr_device *d, unsigned flags, tr_event **out) {
  ENTER_DEV(d);
  NOT_NULL(out);
  *out = NULL;
  tr_event *e = calloc(1, sizeof *e);
  if (!e) return tr__device_fail(d, TR_ENOMEM, "event_open: out of memory");
  e->dev = d;
  e->flags = flags;
  int rc = d->be->event_open(e);
  if (rc) {
    free(e);
    return rc;
  }
  *out = e;
  return 0;
}

void tr_event_close(tr_event *e) {
  if (!e) return;
  enter(e->dev);
  e->dev->be->event_close(e);
  free(e);
}

int tr_event_record(tr_event *e, tr_stream *s) {
  ENTER(s);
  if (e == NULL) return tr__device_fail(d, TR_EINVAL, "tr_event_record: e is NULL");
  if (e->dev != d) /* events record on their own device's streams */
    return tr__device_fail(d, TR_EINVAL, "tr_event_record: an event of %s on a stream of %s: "
                           "an event records on its own device's streams", e->dev->info.name,
                           d->info.name);
  NOT_CAPTURING(s);
  return d->be->event_record(e, s);
}

int tr_stream_wait_event(tr_stream *s, tr_event *e) {
  ENTER(s);
  if (e == NULL) return tr__device_fail(d, TR_EINVAL, "tr_stream_wait_event: e is NULL");
  NOT_CAPTURING(s);
  return d->be->stream_wait_event(s, e);
}

int tr_event_query(tr_event *e) {
  TR__NOT_NULL(e);
  return e->dev->be->event_query(e);
}

int tr_event_synchronize(tr_event *e) {
  TR__NOT_NULL(e);
  return e->dev->be->event_synchronize(e);
}

int tr_event_elapsed_ms(tr_event *start, tr_event *end, float *ms) {
  TR__NOT_NULL(start);
  TR__NOT_NULL(end);
  tr_device *d = start->dev;
  if (ms == NULL) return tr__device_fail(d, TR_EINVAL, "tr_event_elapsed_ms: ms is NULL");
  if (end->dev != d)
    return tr__device_fail(d, TR_EINVAL, "event_elapsed_ms: the events belong to different devices");
  if (!(start->flags & TR_EVENT_TIMING) || !(end->flags & TR_EVENT_TIMING))
    return tr__device_fail(d, TR_EINVAL, "event_elapsed_ms: events opened without TR_EVENT_TIMING");
  SLOT(event_elapsed_ms);
  return d->be->event_elapsed_ms(start, end, ms);
}

/* ---- captures ------------------------------------------------------------------------------- */

int tr_device_can_capture(const tr_device *d) {
  return d && d->be && d->be->capture_begin && d->be->capture_end && d->be->capture_launch &&
         d->be->capture_free;
}

#define CAN_CAPTURE()                                                                        \
  if (!tr_device_can_capture(d))                                                             \
  return tr__device_fail(d, TR_EDEVICE, "%s: the %s backend does not capture", __func__,     \
                         d->be->name)

int tr_capture_begin(tr_stream *s) {
  ENTER(s);
  CAN_CAPTURE();
  if (s->capturing)
    return tr__device_fail(d, TR_ESTATE, "tr_capture_begin: stream '%s' already captures", s->name);
  int rc = d->be->capture_begin(s);
  if (!rc) s->capturing = 1;
  return rc;
}

int tr_capture_end(tr_stream *s, tr_capture **out) {
  ENTER(s);
  if (out) *out = NULL;
  CAN_CAPTURE();
  if (!s->capturing)
    return tr__device_fail(d, TR_ESTATE, "tr_capture_end: stream '%s' does not capture", s->name);
  s->capturing = 0;
  tr_capture *g = out ? calloc(1, sizeof *g) : NULL;
  void *exec = NULL;
  int rc = d->be->capture_end(s, g != NULL, &exec); /* ends it even when g is missing */
  if (out && !g) return tr__device_fail(d, TR_ENOMEM, "tr_capture_end: out of memory");
  if (rc || !g) {
    free(g);
    return rc;
  }
  g->dev = d;
  g->impl = exec;
  *out = g;
  return 0;
}

int tr_capture_launch(tr_capture *g, tr_stream *s) {
  ENTER(s);
  if (g == NULL) return tr__device_fail(d, TR_EINVAL, "tr_capture_launch: g is NULL");
  if (g->dev != d) /* a capture runs on its own device */
    return tr__device_fail(d, TR_EINVAL, "tr_capture_launch: a capture of %s on a stream of %s",
                           g->dev->info.name, d->info.name);
  NOT_CAPTURING(s);
  return d->be->capture_launch(g, s);
}

void tr_capture_close(tr_capture *g) {
  if (!g) return;
  enter(g->dev);
  g->dev->be->capture_free(g);
  free(g);
}
