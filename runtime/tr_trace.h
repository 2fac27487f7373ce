/* tr_trace.h — what every actor did, and when.
 *
 * With tracing on (tr_system_config.trace), the runtime records one event per handled
 * message (actor, message type, thread, start, end) into a buffer owned by the handling
 * thread, so recording never contends. Actors may add ranges of their own (a forward pass of
 * micro-batch 3) with tr_trace_record. With tracing off, each costs one predictable branch.
 *
 * After tr_system_run returns, tr_system_trace_visit walks every event and
 * tr_system_trace_write saves them as Chrome/Perfetto trace JSON (one lane per thread).
 */
#ifndef TR_TRACE_H
#define TR_TRACE_H

#include <stdint.h>

#include "tr_system.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_trace_event {
  const char *actor; /* the actor's name */
  const char *name;  /* the message type's name, or the range's */
  uint64_t start_ns; /* tr_now_ns() clock */
  uint64_t end_ns;
  int64_t arg;       /* free for the recorder (a micro-batch index); -1 when unused */
} tr_trace_event;

/* True when `self`'s system records a trace. */
int tr_trace_enabled(const tr_actor *self);

/* Records a range on the thread that runs `self`; call from `self`'s callbacks only. The
 * strings must outlive the system (literals, type names, actor names). */
void tr_trace_record(tr_actor *self, const char *name, uint64_t start_ns, uint64_t end_ns,
                     int64_t arg);

/* Says what the lane of `self`'s thread stands for (its device: "host:0"); the trace names
 * the thread "stage0 (host:0)" and keeps the label as a field of its own ("label"), for
 * tools. Pinned actors only (loop actors share the loop's lane); the string is copied. */
void tr_trace_label(tr_actor *self, const char *label);

/* Visits every event, thread by thread in recording order. Call once the run is over. */
typedef void (*tr_trace_visit_fn)(void *ctx, const char *thread, int tid,
                                  const tr_trace_event *ev);
void tr_system_trace_visit(tr_system *sys, tr_trace_visit_fn fn, void *ctx);

/* Number of events recorded. */
uint64_t tr_system_trace_count(tr_system *sys);

/* Writes the trace as Chrome trace JSON (chrome://tracing, ui.perfetto.dev) to `path`,
 * atomically: a temporary file, fsync, rename. */
int tr_system_trace_write(tr_system *sys, const char *path);

#ifdef __cplusplus
}
#endif
#endif
