/* trace.c — per-thread event buffers, the profiling window, and the hooks the runtime calls
 * when something traces (tr_trace.h). NVTX is trace_nvtx.c's, the JSON writer
 * trace_json.c's.
 *
 * Each thread records into its own buffer, found through a thread-local pointer that the
 * actor's thread sets when it starts (pinned) or around each turn (loop): recording never
 * takes a lock, and a counter or a flow from code that has no actor at hand (an edge's
 * release) lands on the right lane.
 *
 * The buffers are lists of chunks, and all the chunks of a system are within its budget: a
 * thread that needs a chunk beyond it raises the system's floor (the first step kept) just
 * enough to free the oldest full chunk of some buffer, and frees every full chunk of every
 * buffer that holds only steps below the floor. Only the thread that makes a chunk is ever
 * waiting on the locks this takes (one chunk per CHUNK_EVENTS events); the owner of a buffer
 * keeps appending to its last chunk, which nobody else frees. Events of steps below the
 * floor left in chunks that also hold newer ones are skipped by the readers, so that every
 * lane begins at the same step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_impl.h"

enum { CHUNK_EVENTS = 512 }; /* 44 KiB: the budget's grain */

struct tr__trace_chunk {
  tr__trace_chunk *next;
  uint32_t n;
  tr_trace_event ev[CHUNK_EVENTS];
};

static __thread tr__trace_buf *here __attribute__((tls_model("initial-exec")));
static __thread int named;
static const tr_trace_device_hooks *_Atomic device_hooks;

tr__trace_buf *tr__trace_buf_new(tr_system *sys, const char *thread, int tid) {
  tr__trace_buf *b = calloc(1, sizeof *b);
  TR_ASSERT(b != NULL);
  snprintf(b->thread, sizeof b->thread, "%s", thread);
  b->sys = sys;
  b->tid = tid;
  pthread_mutex_init(&b->lock, NULL);
  pthread_mutex_lock(&sys->lock);
  b->next = sys->traces;
  sys->traces = b;
  pthread_mutex_unlock(&sys->lock);
  return b;
}

void tr__trace_free_all(tr_system *sys) {
  for (tr__trace_buf *b = sys->traces, *nb; b; b = nb) {
    nb = b->next;
    for (tr__trace_chunk *c = b->first, *nc; c; c = nc) {
      nc = c->next;
      free(c);
    }
    pthread_mutex_destroy(&b->lock);
    free(b);
  }
  sys->traces = NULL;
}

void tr__trace_thread(tr__trace_buf *b, const char *name) {
  here = b;
  if (name && !named) {
    named = 1;
    tr__nvtx_name_thread(name);
  }
}

static bool closed(const tr_system *sys) {
  return atomic_load_explicit(&sys->trace_closed, memory_order_relaxed);
}

/* The calling thread's buffer, when it records now. */
static tr__trace_buf *recording(void) {
  tr__trace_buf *b = here;
  return b && !closed(b->sys) ? b : NULL;
}

/* ---- the budget ------------------------------------------------------------------------ */

static size_t budget_of(const tr_system *sys) {
  const size_t b = sys->trace_budget ? sys->trace_budget : TR_TRACE_BUDGET_DEFAULT;
  return b < TR_TRACE_BUDGET_MIN ? TR_TRACE_BUDGET_MIN : b;
}

/* The step of a full chunk's newest event. */
static int64_t newest(const tr__trace_chunk *c) { return c->ev[CHUNK_EVENTS - 1].step; }

/* Frees the full chunks of every buffer that hold only steps below the floor, raised first
 * to free at least one, but never above the step being recorded. False: none could be. */
static bool make_room(tr_system *sys) {
  pthread_mutex_lock(&sys->lock);
  const int64_t now = atomic_load_explicit(&sys->trace_now, memory_order_relaxed);
  int64_t floor = INT64_MAX;
  for (tr__trace_buf *b = sys->traces; b; b = b->next) {
    pthread_mutex_lock(&b->lock);
    if (b->first && b->first != b->last && newest(b->first) < floor - 1)
      floor = newest(b->first) + 1;
    pthread_mutex_unlock(&b->lock);
  }
  bool freed = false;
  if (floor <= now) {
    if (floor > sys->trace_floor) sys->trace_floor = floor;
    for (tr__trace_buf *b = sys->traces; b; b = b->next) {
      pthread_mutex_lock(&b->lock);
      while (b->first != b->last && newest(b->first) < sys->trace_floor) {
        tr__trace_chunk *c = b->first;
        b->first = c->next;
        atomic_fetch_add(&sys->trace_freed, c->n);
        atomic_fetch_sub(&sys->trace_bytes, sizeof *c);
        free(c);
        freed = true;
      }
      pthread_mutex_unlock(&b->lock);
    }
  }
  pthread_mutex_unlock(&sys->lock);
  return freed;
}

/* Room for one more chunk within the budget, counted; false when there is none. */
static bool reserve(tr_system *sys) {
  const size_t budget = budget_of(sys), size = sizeof(tr__trace_chunk);
  size_t cur = atomic_load(&sys->trace_bytes);
  for (;;) {
    if (cur + size <= budget) {
      if (!atomic_compare_exchange_weak(&sys->trace_bytes, &cur, cur + size)) continue;
      size_t peak = atomic_load(&sys->trace_peak);
      while (peak < cur + size && !atomic_compare_exchange_weak(&sys->trace_peak, &peak, cur + size)) {
      }
      return true;
    }
    if (!make_room(sys)) return false;
    cur = atomic_load(&sys->trace_bytes);
  }
}

static void append(tr__trace_buf *b, const tr_trace_event *ev) {
  tr_system *sys = b->sys;
  const int64_t step = atomic_load_explicit(&sys->trace_now, memory_order_relaxed);
  tr__trace_chunk *c = b->last;
  if (c == NULL || c->n == CHUNK_EVENTS) {
    /* once a step found no room, the rest of it finds none either: no look each event */
    if (b->no_room == step + 1 || !reserve(sys)) {
      b->no_room = step + 1;
      if (atomic_fetch_add(&sys->trace_lost, 1) == 0) atomic_store(&sys->trace_lost_step, step);
      return;
    }
    tr__trace_chunk *fresh = malloc(sizeof *fresh);
    TR_ASSERT(fresh != NULL);
    fresh->next = NULL;
    fresh->n = 0;
    pthread_mutex_lock(&b->lock);
    if (c) c->next = fresh;
    else b->first = fresh;
    b->last = c = fresh;
    pthread_mutex_unlock(&b->lock);
  }
  c->ev[c->n] = *ev;
  c->ev[c->n++].step = step;
}

/* The settings of a system's trace come before its run (tr_trace.h): 1 when `sys` may take
 * them, else 0 with the refusal said (tr_base.h, Misuse). */
static int settable(const tr_system *sys, const char *call) {
  if (sys == NULL) return tr__misuse(0, "%s: sys is NULL", call);
  if (sys->ran) return tr__misuse(0, "%s: system '%s' ran already: set it before tr_system_run",
                                  call, sys->name);
  return 1;
}

void tr_system_trace_budget(tr_system *sys, size_t bytes) {
  if (!settable(sys, __func__)) return;
  sys->trace_budget = bytes;
}

/* ---- recording -------------------------------------------------------------------------- */

void tr_trace_label(tr_actor *self, const char *label) {
  if (self == NULL || label == NULL) {
    tr__misuse(TR_EINVAL, "tr_trace_label: %s is NULL", self ? "label" : "self");
    return;
  }
  if (self->kind == TR_ACTOR_PINNED && self->trace)
    snprintf(self->trace->label, sizeof self->trace->label, "%s", label);
}

int tr_trace_enabled(const tr_actor *self) { return self && self->sys->trace_on; }

void tr_trace_record(tr_actor *self, const char *name, uint64_t start_ns, uint64_t end_ns,
                     int64_t arg) {
  if (self == NULL) {
    tr__misuse(TR_EINVAL, "tr_trace_record: self is NULL");
    return;
  }
  tr__trace_buf *b = self->trace;
  if (!self->sys->trace_on || b == NULL || closed(self->sys)) return;
  append(b, &(tr_trace_event){.actor = self->name, .name = name, .start_ns = start_ns,
                              .end_ns = end_ns, .arg = arg, .phase = TR_TRACE_RANGE});
}

static bool in_window(const tr_system *sys, int64_t step) {
  return !sys->trace_window ||
         (step >= sys->trace_from && (sys->trace_to == 0 || step < sys->trace_to));
}

int tr_trace_wants(const tr_actor *self, int64_t step) {
  if (self == NULL) return 0;
  const tr_system *sys = self->sys;
  return (sys->trace_on || tr__nvtx_live) && in_window(sys, step);
}

/* A range needs its actor, kind and arguments: 1, or 0 with the refusal said (tr_base.h). */
static int range_given(const char *call, const tr_actor *self, const tr_trace_kind *kind,
                       const int64_t *args) {
  if (self && kind && args) return 1;
  return tr__misuse(0, "%s: %s is NULL: no range", call, !self ? "self" : !kind ? "kind" : "args");
}

uint64_t tr_trace_begin(tr_actor *self, tr_trace_kind *kind, const int64_t args[3]) {
  if (range_given(__func__, self, kind, args)) tr__nvtx_push(kind, NULL, args);
  return tr_now_ns();
}

void tr_trace_end(tr_actor *self, tr_trace_kind *kind, const int64_t args[3], uint64_t start_ns,
                  uint64_t end_ns) {
  if (!range_given(__func__, self, kind, args)) return; /* its begin pushed none either */
  tr__nvtx_pop();
  tr_trace_range(self, kind, args, start_ns, end_ns);
}

void tr_trace_range(tr_actor *self, tr_trace_kind *kind, const int64_t args[3],
                    uint64_t start_ns, uint64_t end_ns) {
  if (!range_given(__func__, self, kind, args)) return;
  tr__trace_buf *b = self->trace;
  if (!self->sys->trace_on || b == NULL) return;
  /* arg: the last argument, as tr_trace_record's ranges had it (a micro-batch), for tools
   * that read those */
  append(b, &(tr_trace_event){.actor = self->name, .name = kind->name, .start_ns = start_ns,
                              .end_ns = end_ns, .arg = kind->args[2] ? args[2] : -1,
                              .kind = kind, .args = {args[0], args[1], args[2]},
                              .phase = TR_TRACE_RANGE});
  const tr_trace_device_hooks *h = atomic_load_explicit(&device_hooks, memory_order_acquire);
  if (kind->device && h && h->range_end) h->range_end(kind, args, start_ns);
}

/* A handled message (m) or the start callback (m NULL), as a range of the classifier's kind. */
static int traced_call(tr_actor *a, tr_msg *m, tr_trace_kind *kind) {
  static tr_trace_kind message = {.category = "message", .color = 0xFF999999};
  if (kind == NULL) kind = &message;
  const char *name = kind->name ? kind->name : m ? m->type->name : "start";
  const int pushed = tr__nvtx_push(kind, name, NULL);
  const int floor = tr__nvtx_enter();
  const uint64_t t0 = tr_now_ns();
  const int rc = m ? a->b->receive(a, m) : a->b->start(a);
  const uint64_t t1 = tr_now_ns();
  tr__nvtx_leave(floor, pushed); /* ranges the callback left open end with it */
  tr__trace_buf *b = a->trace;
  if (a->sys->trace_on && b) {
    append(b, &(tr_trace_event){.actor = a->name, .name = name, .start_ns = t0, .end_ns = t1,
                                .arg = -1, .kind = kind, .phase = TR_TRACE_RANGE});
    /* inside the range, so that viewers bind the arrow to it */
    if (m && m->flow)
      append(b, &(tr_trace_event){.actor = a->name, .start_ns = t0 + 1, .end_ns = t0 + 1,
                                  .arg = m->flow, .phase = TR_TRACE_FLOW_IN});
  }
  return rc;
}

int tr__trace_deliver(tr_actor *a, tr_msg *m) {
  tr_system *sys = a->sys;
  if (closed(sys)) return a->b->receive(a, m);
  return traced_call(a, m, sys->trace_classify ? sys->trace_classify(a->b, m->type) : NULL);
}

int tr__trace_start(tr_actor *a) {
  tr_system *sys = a->sys;
  tr_trace_kind *kind = sys->trace_classify && !closed(sys) ? sys->trace_classify(a->b, NULL) : NULL;
  return kind ? traced_call(a, NULL, kind) : a->b->start(a);
}

void tr_trace_flow(tr_msg *m, const char *name) {
  if (m == NULL) {
    tr__misuse(TR_EINVAL, "tr_trace_flow: msg is NULL");
    return;
  }
  tr__trace_buf *b = recording();
  if (b == NULL || !b->sys->trace_on) {
    m->flow = 0;
    return;
  }
  /* 12 bits of the thread and 20 of its sends: an id comes back only after a million sends
   * of one thread, long after its message was handled. */
  if ((++b->flow_seq & 0xFFFFF) == 0) b->flow_seq++;
  m->flow = ((uint32_t)b->tid & 0xFFF) << 20 | (b->flow_seq & 0xFFFFF);
  const uint64_t t = tr_now_ns();
  append(b, &(tr_trace_event){.name = name, .start_ns = t, .end_ns = t, .arg = m->flow,
                              .phase = TR_TRACE_FLOW_OUT});
}

void tr_trace_counter(const char *track, int64_t value) {
  if (track == NULL) {
    tr__misuse(TR_EINVAL, "tr_trace_counter: track is NULL");
    return;
  }
  tr__trace_buf *b = recording();
  if (b == NULL || !b->sys->trace_on) return;
  const uint64_t t = tr_now_ns();
  append(b, &(tr_trace_event){.name = track, .start_ns = t, .end_ns = t, .arg = value,
                              .phase = TR_TRACE_COUNTER});
}

int tr_trace_here(void) {
  const tr__trace_buf *b = recording();
  return b && b->sys->trace_on;
}

void tr_trace_device_slice(const char *lane, const tr_trace_kind *kind, const int64_t args[3],
                           uint64_t start_ns, uint64_t end_ns) {
  if (lane == NULL || kind == NULL || args == NULL) {
    tr__misuse(TR_EINVAL, "tr_trace_device_slice: %s is NULL",
               !lane ? "lane" : !kind ? "kind" : "args");
    return;
  }
  tr__trace_buf *b = here; /* the window may have closed since the work was issued */
  if (b == NULL || !b->sys->trace_on) return;
  append(b, &(tr_trace_event){.actor = lane, .name = kind->name, .start_ns = start_ns,
                              .end_ns = end_ns, .arg = -1, .kind = kind,
                              .args = {args[0], args[1], args[2]}, .phase = TR_TRACE_DEVICE});
}

void tr_trace_set_device_hooks(const tr_trace_device_hooks *hooks) {
  atomic_store_explicit(&device_hooks, hooks, memory_order_release);
}

/* ---- the window ------------------------------------------------------------------------- */

void tr_system_trace_classify(tr_system *sys, tr_trace_classify_fn fn) {
  if (settable(sys, __func__)) sys->trace_classify = fn;
}

void tr_system_trace_window(tr_system *sys, int64_t from, int64_t to) {
  if (!settable(sys, __func__)) return;
  if (from < 0 || to < 0 || (to != 0 && to <= from)) {
    tr__misuse(TR_EINVAL, "tr_system_trace_window: steps [%lld, %lld): give 0 <= from < to, or "
               "to 0 (no end); the window is not changed", (long long)from, (long long)to);
    return;
  }
  sys->trace_window = from > 0 || to > 0;
  sys->trace_from = from;
  sys->trace_to = to;
  sys->trace_step = -1;
  atomic_store(&sys->trace_closed, sys->trace_window);
}

/* Opens or closes: the NVTX range of the window, the device layer's profiler. */
static void window_turns(tr_system *sys, bool open) {
  atomic_store(&sys->trace_closed, !open);
  if (open) sys->trace_nvtx_window = tr__nvtx_window_open();
  else tr__nvtx_window_close(sys->trace_nvtx_window);
  const tr_trace_device_hooks *h = atomic_load_explicit(&device_hooks, memory_order_acquire);
  if (h && h->window) h->window(open);
}

void tr_system_trace_step(tr_system *sys, int64_t step) {
  if (sys == NULL) {
    tr__misuse(TR_EINVAL, "tr_system_trace_step: sys is NULL");
    return;
  }
  if (!sys->trace_window && !sys->trace_on) return;
  pthread_mutex_lock(&sys->lock);
  if (step > sys->trace_step) {
    sys->trace_step = step;
    if (step < INT64_MAX) /* the run's end: no step whose events the budget could drop */
      atomic_store_explicit(&sys->trace_now, step, memory_order_relaxed);
    const bool open = in_window(sys, step);
    if (sys->trace_window && open == closed(sys)) window_turns(sys, open);
  }
  pthread_mutex_unlock(&sys->lock);
}

/* ---- reading ---------------------------------------------------------------------------- */

void tr_system_trace_visit(tr_system *sys, tr_trace_visit_fn fn, void *ctx) {
  if (sys == NULL || fn == NULL) {
    if (sys || fn) tr__misuse(TR_EINVAL, "tr_system_trace_visit: %s is NULL", sys ? "fn" : "sys");
    return;
  }
  pthread_mutex_lock(&sys->lock);
  tr__trace_buf *first = sys->traces;
  const int64_t floor = sys->trace_floor;
  pthread_mutex_unlock(&sys->lock);
  for (tr__trace_buf *b = first; b; b = b->next)
    for (tr__trace_chunk *c = b->first; c; c = c->next)
      for (uint32_t i = 0; i < c->n; i++)
        if (c->ev[i].step >= floor) fn(ctx, b->thread, b->tid, &c->ev[i]);
}

void tr_system_trace_stats(tr_system *sys, tr_trace_stats *st) {
  if (st == NULL) {
    tr__misuse(TR_EINVAL, "tr_system_trace_stats: stats is NULL");
    return;
  }
  *st = (tr_trace_stats){.lost_step = -1};
  if (sys == NULL) return;
  pthread_mutex_lock(&sys->lock);
  st->first_step = sys->trace_floor;
  for (tr__trace_buf *b = sys->traces; b; b = b->next)
    for (tr__trace_chunk *c = b->first; c; c = c->next)
      for (uint32_t i = 0; i < c->n; i++) {
        if (c->ev[i].step >= st->first_step) st->events++;
        else st->dropped++;
      }
  pthread_mutex_unlock(&sys->lock);
  st->dropped += atomic_load(&sys->trace_freed);
  st->lost = atomic_load(&sys->trace_lost);
  if (st->lost) st->lost_step = atomic_load(&sys->trace_lost_step);
  st->bytes = atomic_load(&sys->trace_bytes);
  st->peak_bytes = atomic_load(&sys->trace_peak);
  st->budget = budget_of(sys);
}

static void count_one(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread, (void)tid, (void)ev;
  ++*(uint64_t *)ctx;
}

uint64_t tr_system_trace_count(tr_system *sys) {
  uint64_t n = 0;
  tr_system_trace_visit(sys, count_one, &n);
  return n;
}
