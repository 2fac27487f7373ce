/* tr_trace.h — what every actor did, and when: a Chrome/Perfetto trace and NVTX ranges.
 *
 * Two consumers, one set of calls. With tracing on (tr_system_config.trace) the runtime
 * records events into a buffer owned by the recording thread, so recording never contends;
 * after the run tr_system_trace_write saves them as one Chrome trace JSON file (one lane per
 * thread, ui.perfetto.dev and chrome://tracing both read it). With an NVTX tool attached
 * (Nsight Systems; builds where the NVTX 3 headers were found, TR_HAVE_NVTX) the same ranges
 * become NVTX ranges in the "troupe" domain, pushed and popped on the thread that does the
 * work, with registered names, a category and a colour each. With neither, each hook costs
 * one predictable branch.
 *
 * What is recorded:
 *   - every handled message: a range named after its type (or as the system's classifier
 *     says: tr_system_trace_classify), and the start callback where the classifier names one;
 *   - ranges of the layer above, of a kind it defines (tr_trace_begin / tr_trace_end):
 *
 *       static tr_trace_kind forward = {.name = "forward", .category = "compute",
 *                                       .color = 0xFF0072B2, .args = {"step", "stage", "mb"}};
 *       uint64_t t0 = tr_trace_begin(self, &forward, (int64_t[3]){step, stage, mb});
 *       ... the work ...
 *       tr_trace_end(self, &forward, (int64_t[3]){step, stage, mb}, t0, tr_now_ns());
 *
 *     NVTX carries the arguments as one int64 payload of decimal fields,
 *     args[0]·10⁶ + args[1]·10³ + args[2] (the last two clamped to 0..999, −1 as 999), so
 *     step 12, stage 1, micro-batch 3 reads 12001003;
 *   - flows: an arrow from a send to the handling of the message (tr_trace_flow);
 *   - counters: a value over time on a named track (tr_trace_counter);
 *   - device slices: ranges a device layer timed on the device, on a lane of their own
 *     (tr_trace_device_slice, tr_trace_set_device_hooks).
 *
 * A profiling window (tr_system_trace_window) limits all of it to steps [from, to) of the
 * layer above, which says when each step begins (tr_system_trace_step): outside the window
 * nothing is recorded and no NVTX range is pushed; while it is open an NVTX range "profile"
 * spans it (nsys --capture-range=nvtx) and device layers start their profiler
 * (cudaProfilerStart/Stop).
 *
 * Memory is bounded for any length of run: the events of a system take at most its budget
 * (tr_system_trace_budget, TR_TRACE_BUDGET_DEFAULT unless changed). When a thread needs room
 * beyond it, the events of the oldest steps are dropped, whole steps on every lane at once,
 * so that the trace holds the last steps, and tr_system_trace_write says in its metadata
 * which were dropped ("otherData": "first_step", "dropped_events", "note"). The steps are
 * those the layer above says begin (tr_system_trace_step, with or without a window); an event
 * belongs to the newest step begun when it was recorded. The step that is being recorded is
 * never dropped: when it alone fills the budget, its further events are not recorded (and
 * counted as such), so a system whose layer says no steps keeps its first events.
 *
 * Strings given to these calls (names, kinds, tracks, lanes) must outlive the system's trace
 * (literals, type names, actor names, strings of objects freed after tr_system_trace_write).
 *
 * Misuse (tr_base.h): a call given NULL for its actor, system, kind, message or track records
 * nothing and says so on stderr (tr_trace_enabled, tr_trace_wants and tr_system_trace_count
 * answer 0); a setting made after tr_system_run, or a window that ends before it begins, is
 * not taken, said likewise; tr_system_trace_write refuses NULL (TR_EINVAL).
 */
#ifndef TR_TRACE_H
#define TR_TRACE_H

#include <stdint.h>

#include "tr_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_system tr_system;
typedef struct tr_actor tr_actor;
struct tr_behaviour;
struct tr_msgtype;
struct tr_msg;

/* A kind of range: what Nsight and Perfetto show for it. Defined (not const: the runtime
 * caches its NVTX registration in it) by the layer that records it, once per process. */
typedef struct tr_trace_kind {
  const char *name;     /* "forward"; NULL (classifier kinds only): the message type's name */
  const char *category; /* "compute": NVTX category and the trace's "cat" */
  uint32_t color;       /* 0xAARRGGBB */
  int device;           /* its work runs on the calling thread's device stream: a device
                           layer may time it there (tr_trace_device_hooks) */
  const char *args[3];  /* names of its integer arguments; NULL: unused */
  uintptr_t nvtx_name_; /* the runtime's: NVTX registration, made on first use */
  uint32_t nvtx_category_;
} tr_trace_kind;

typedef enum tr_trace_phase {
  TR_TRACE_RANGE,    /* a handled message, or a range of a kind */
  TR_TRACE_FLOW_OUT, /* a traced send */
  TR_TRACE_FLOW_IN,  /* its handling */
  TR_TRACE_COUNTER,  /* a counter's value */
  TR_TRACE_DEVICE    /* a slice timed on a device */
} tr_trace_phase;

typedef struct tr_trace_event {
  const char *actor; /* the actor; TR_TRACE_DEVICE: the device lane; counters: NULL */
  const char *name;  /* the range's; a flow's edge; a counter's track */
  uint64_t start_ns; /* tr_now_ns() clock */
  uint64_t end_ns;   /* = start_ns for flows and counters */
  int64_t arg;       /* tr_trace_record's (-1 unused), a kind's last argument; a flow's
                        id; a counter's value */
  const tr_trace_kind *kind; /* ranges of a kind, device slices; NULL otherwise */
  int64_t args[3];   /* the kind's arguments */
  int64_t step;      /* the newest step begun when it was recorded (tr_system_trace_step) */
  tr_trace_phase phase;
} tr_trace_event;

/* True when `self`'s system records a trace. */
TR_API int tr_trace_enabled(const tr_actor *self);

/* Records a range on the thread that runs `self`; call from `self`'s callbacks only. */
TR_API void tr_trace_record(tr_actor *self, const char *name, uint64_t start_ns, uint64_t end_ns,
                     int64_t arg);

/* Says what the lane of `self`'s thread stands for (its device: "host:0"); the trace names
 * the thread "stage0 (host:0)" and keeps the label as a field of its own ("label"), for
 * tools. Pinned actors only (loop actors share the loop's lane); the string is copied. */
TR_API void tr_trace_label(tr_actor *self, const char *label);

/* True when a range of step `step` is wanted now: the system records a trace or an NVTX tool
 * is attached, and the window (if any) holds the step. A cheap test before building args. */
TR_API int tr_trace_wants(const tr_actor *self, int64_t step);

/* Opens a range of `kind` on the calling thread (self's callbacks): an NVTX push when a tool
 * is attached. Returns tr_now_ns(). Ranges nest; each is closed by tr_trace_end with the
 * same kind and args, on the same thread. */
TR_API uint64_t tr_trace_begin(tr_actor *self, tr_trace_kind *kind, const int64_t args[3]);
/* Closes the innermost range: the NVTX pop, then tr_trace_range. */
TR_API void tr_trace_end(tr_actor *self, tr_trace_kind *kind, const int64_t args[3], uint64_t start_ns,
                  uint64_t end_ns);
/* Records a range of `kind` that has ended, [start_ns, end_ns], in the trace only (NVTX
 * cannot place a range after the fact); the device layer's hook runs for kinds with
 * `device` set. */
TR_API void tr_trace_range(tr_actor *self, tr_trace_kind *kind, const int64_t args[3],
                    uint64_t start_ns, uint64_t end_ns);

/* Sender, on an actor's thread, just before sending `msg`: when that thread records, stamps
 * the message with a new flow id and records its start; the runtime records the end when
 * the message is handled. `name` labels the arrow (an edge's name). */
TR_API void tr_trace_flow(struct tr_msg *msg, const char *name);

/* The value of counter `track` now, recorded by the calling thread when it records. */
TR_API void tr_trace_counter(const char *track, int64_t value);

/* What the handled messages of an actor are, for the layer above to say: the kind of the
 * range of each message of `type` handled by an actor of behaviour `b` (type NULL: its start
 * callback). NULL: the runtime's default for messages (named after the type, category
 * "message"), and no range for a start. Before tr_system_run. */
typedef tr_trace_kind *(*tr_trace_classify_fn)(const struct tr_behaviour *b,
                                               const struct tr_msgtype *type);
TR_API void tr_system_trace_classify(tr_system *sys, tr_trace_classify_fn fn);

/* The profiling window: steps [from, to) (to 0: no end) of the layer above. Before
 * tr_system_run. from = to = 0: no window, everything is recorded. */
TR_API void tr_system_trace_window(tr_system *sys, int64_t from, int64_t to);
/* Step `step` begins (any thread; the newest step counts): the window opens or closes. */
TR_API void tr_system_trace_step(tr_system *sys, int64_t step);

/* The most memory the system's events take, in bytes (0: TR_TRACE_BUDGET_DEFAULT; at least
 * TR_TRACE_BUDGET_MIN is used). Before tr_system_run. */
#define TR_TRACE_BUDGET_DEFAULT ((size_t)64 << 20)
#define TR_TRACE_BUDGET_MIN ((size_t)256 << 10)
TR_API void tr_system_trace_budget(tr_system *sys, size_t bytes);

/* What the budget kept and dropped. After the run (it reads every buffer). */
typedef struct tr_trace_stats {
  uint64_t events;   /* kept: what tr_system_trace_visit visits and the file holds */
  uint64_t dropped;  /* of the steps before first_step, dropped to keep within the budget */
  uint64_t lost;     /* not recorded: their step alone filled the budget */
  int64_t first_step; /* events of steps before it were dropped; 0: none were */
  int64_t lost_step; /* the first step that lost events; -1: none did */
  size_t bytes, peak_bytes, budget; /* held at the end, held at most (ever), the budget */
} tr_trace_stats;
TR_API void tr_system_trace_stats(tr_system *sys, tr_trace_stats *stats);

/* Device layers (process-wide, set once). */
typedef struct tr_trace_device_hooks {
  /* A range of a kind with `device` set ends on the calling thread, while it records: time
   * its work on that thread's device (it was issued from start_ns on). */
  void (*range_end)(const tr_trace_kind *kind, const int64_t args[3], uint64_t start_ns);
  /* A system's profiling window opened (1) or closed (0). */
  void (*window)(int open);
} tr_trace_device_hooks;
TR_API void tr_trace_set_device_hooks(const tr_trace_device_hooks *hooks);
/* True when the calling thread records a trace now. */
TR_API int tr_trace_here(void);
/* A slice of `kind` timed on a device, [start_ns, end_ns] on the host clock, on lane `lane`
 * ("cuda:0"), recorded by the calling thread when it records. */
TR_API void tr_trace_device_slice(const char *lane, const tr_trace_kind *kind, const int64_t args[3],
                           uint64_t start_ns, uint64_t end_ns);

/* Visits every event kept (none of the steps the budget dropped), thread by thread in
 * recording order. Call once the run is over. */
typedef void (*tr_trace_visit_fn)(void *ctx, const char *thread, int tid,
                                  const tr_trace_event *ev);
TR_API void tr_system_trace_visit(tr_system *sys, tr_trace_visit_fn fn, void *ctx);

/* Number of events recorded. */
TR_API uint64_t tr_system_trace_count(tr_system *sys);

/* Writes the trace as Chrome trace JSON (chrome://tracing, ui.perfetto.dev) to `path`,
 * atomically: a temporary file, fsync, rename. Ranges as complete events with their
 * category and arguments, flows whose both ends were recorded as flow events, counters
 * sorted by time, device slices under a process of their own; "otherData" says what the
 * budget dropped (tr_trace_stats' fields, and a "note" when it dropped or lost some).
 * What the rename would replace must be a regular file or nothing: TR_EINVAL for a device,
 * a FIFO, a socket or a directory there (left as it is), TR_EIO for a failed write. */
TR_API int tr_system_trace_write(tr_system *sys, const char *path);
/* Internal: the trace's JSON written to `fd`, a tr__file_fill (runtime/file_write.h) for a
 * run's output: 0 or an errno. */
int tr__system_trace_fill(void *sys, int fd);

#ifdef __cplusplus
}
#endif
#endif
