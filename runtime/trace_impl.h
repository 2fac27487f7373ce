/* trace_impl.h — what the tracer's files share (trace.c: buffers, window, hooks;
 * trace_nvtx.c: NVTX; trace_json.c: the Chrome trace writer). */
#ifndef TR_TRACE_IMPL_H
#define TR_TRACE_IMPL_H

#include "system_impl.h"

/* trace_nvtx.c. Each is a no-op without a tool attached (or without NVTX in the build). */
void tr__nvtx_name_thread(const char *name);
/* Pushes a range of `kind` named `name` (NULL: the kind's), payload from args (NULL: none).
 * 1 when it pushed one. */
int tr__nvtx_push(tr_trace_kind *kind, const char *name, const int64_t args[3]);
/* Pops the innermost range, unless it belongs to a callback that has ended. */
void tr__nvtx_pop(void);
/* A callback's ranges: tr__nvtx_enter before it (after its own push), tr__nvtx_leave after,
 * with what enter returned: ranges it left open end there, then its own if `pushed`. */
int tr__nvtx_enter(void);
void tr__nvtx_leave(int floor, int pushed);
/* The window's range (start/end: it may close on another thread). */
uint64_t tr__nvtx_window_open(void);
void tr__nvtx_window_close(uint64_t id);

#endif
