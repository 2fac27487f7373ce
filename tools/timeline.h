/* timeline.h — a trace of `troupe train --trace` (Chrome trace JSON) read for `troupe
 * timeline`: one lane per thread (a device actor's, or the loop's), its slices in order, each
 * of a kind and a step; and, for a range of steps, the window to draw and its bubble.
 * cmd_timeline.c draws them.
 *
 *   tl_trace t = {.path = "t.json"};
 *   if (tl_trace_read(&t) == 0) {              // else it said what is wrong: CLI_USAGE
 *     tl_view v = {.a = 14, .b = 16};          // or tl_view_default(&t, &v)
 *     if (tl_view_settle(&t, &v)) ...          // v.t0, v.t1, v.bubble
 *   }
 *   tl_trace_free(&t);
 *
 * Steps are counted by each lane's "update" slices: a lane's step s is what it did after the
 * end of its update s-1, up to the end of update s. The window of steps A:B runs from the
 * first work of step A to the end of the last update of step B-1 on any lane; every lane
 * shows what overlaps it, and the bubble is 1 - busy / (device lanes x window). A trace with
 * no updates is one window. Message handling slices that enclose work (the runtime records
 * one per handled message, around the actor's own ranges) are dropped; the others stay. */
#ifndef TR_TIMELINE_H
#define TR_TIMELINE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

/* What a slice is, by its name: "forward"/"fwd"/"F", "backward"/"bwd", a split backward's
 * input half ("bwd B", "B") and weight half ("bwd W", "W"), "allreduce", "update",
 * "recv ...", a message type ("..._msg"), or something else. */
typedef enum tl_kind {
  TL_FWD, TL_BWD, TL_BWD_B, TL_BWD_W, TL_ALLREDUCE, TL_UPDATE, TL_RECV, TL_MSG, TL_OTHER,
  TL_NKINDS
} tl_kind;
static inline bool tl_by_microbatch(int kind) { return kind <= TL_BWD_W; }

enum { TL_MAX_ACTORS = 6 };

typedef struct tl_slice {
  double t0, t1;    /* µs, the trace's clock */
  const char *name; /* in the parsed JSON */
  long long arg;    /* micro-batch (or bucket); -1: none */
  int kind, step;   /* tl_kind; the lane's step, by its updates */
} tl_slice;

typedef struct tl_lane {
  double pid, tid;
  const char *thread, *label; /* label: the device, when the trace names it */
  const char *actor[TL_MAX_ACTORS];
  int nactors, n, cap, updates;
  bool device;
  tl_slice *s;
} tl_lane;

typedef struct tl_trace {
  const char *path;
  cJSON *json;
  const char *note; /* what the run's trace budget dropped ("otherData"), or NULL */
  tl_lane *lane;
  int nlanes, steps;
} tl_trace;

typedef struct tl_view {
  int a, b;      /* steps [a, b); b == 0: the whole trace */
  double t0, t1; /* the window, µs */
  double bubble; /* NAN without device lanes */
  int ndevices;
} tl_view;

int tl_trace_read(tl_trace *t); /* prints "troupe: timeline: PATH: problem"; CLI_USAGE */
void tl_trace_free(tl_trace *t);

/* Steps a:b from the middle of the run, about 36 forward and backward rectangles a lane. */
void tl_view_default(const tl_trace *t, tl_view *v);
/* The window and the bubble of steps v->a:v->b (b 0: the whole trace); false if empty. */
bool tl_view_settle(const tl_trace *t, tl_view *v);
/* Where step s begins: its first work on any lane that counts steps (INFINITY: nowhere). */
double tl_step_start(const tl_trace *t, int s);

#endif
