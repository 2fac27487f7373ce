/* metrics.h — what every actor that works on a device measures for the run's figures: the
 * time it was busy after a warm-up (utilization, bubbles), traced as it goes; and how the
 * training actors' work shows in a trace and in Nsight Systems (the kinds of range, their
 * categories and colours, and the profiling window of tr_job_config.profile).
 *
 *   tr__busy b = tr__busy_begin(first_step, steps_expected);
 *   b.stage = stage;                                   // for the ranges' arguments
 *   uint64_t t0 = tr__busy_start(&b, self, step, "forward", mb);   // the range opens
 *   ... issue the forward ...
 *   tr__busy_add(&b, self, step, "forward", t0, mb);   // it closes; busy time counted
 *
 * A range opens where the work begins and closes where it ends, on the thread that does it:
 * NVTX ranges cannot be placed after the fact. tr__busy_add without a tr__busy_start still
 * records the range in the Chrome trace (it knows t0), but pushes no NVTX range. A start
 * must not be followed by a return that skips its tr__busy_add (check what could block
 * first): a range left open ends with the message handler, shorter than the work.
 */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include "idle.h"
#include "job_impl.h"
#include "tr_trace.h"

enum { TR__BUSY_NESTED = 4 }; /* ranges open at once: a bucket's all-reduce inside a backward */

/* The work a schedule's simulation costs (tr__idle_schedule_bubble): forwards with their
 * activations' copies in, backwards (both halves) with their gradients' copies in, the
 * weights' halves alone (zero-bubble's W), and the step's own (the norm, sums, the update). */
enum { TR__WORK_F, TR__WORK_B, TR__WORK_W, TR__WORK_STEP, TR__WORK_KINDS };

typedef struct tr__busy {
  int64_t warm_step;     /* steps before this one warm up: not counted */
  uint64_t window_start; /* when the measured window opened */
  uint64_t busy_ns;      /* time inside device work since then */
  uint64_t run_start, run_busy_ns; /* the same from the start, warm-up included */
  uint64_t aside_ns, run_aside_ns; /* wall time that was no training's (held-out
                                      evaluations), since the window opened and in all */
  int stage;             /* the stage, for the ranges' arguments; -1 (tr__busy_begin): none */
  int open;              /* ranges opened by tr__busy_start, innermost last */
  uint64_t opened[TR__BUSY_NESTED];
  tr__idle idle;         /* the spans between the work (idle.h): its actor opens them, and
                            each work's start closes the one open */
  uint64_t work_ns[TR__WORK_KINDS]; /* since the window opened, outermost ranges only */
} tr__busy;

/* A tenth of the `steps` expected (at most 100) warm up; 3 when their count is unknown
 * (INT64_MAX: a timed run). */
tr__busy tr__busy_begin(int64_t first_step, int64_t steps);
/* `step` is now the current one: the window opens as the warm-up ends (the caller has let
 * its device finish the warm-up's work). */
void tr__busy_open_window(tr__busy *b, int64_t step);
/* The window to report at `step`, the run having begun at `first`: the one after the
 * warm-up once a step has run in it, else (a run that ended with its warm-up) the whole
 * run. */
void tr__busy_window(const tr__busy *b, int64_t step, int64_t first, uint64_t *start,
                     uint64_t *busy_ns, uint64_t *aside_ns, int64_t *steps);
/* The time since t0, at the boundary after step `step`, went to work that is no training's
 * (a held-out evaluation): it is set aside from the window, and none of it is busy or idle. */
void tr__busy_aside(tr__busy *b, int64_t step, uint64_t t0);
/* Work `what` ("forward", "backward", "backward input", "backward weight", "recv act",
 * "recv grad", "allreduce", "norm", "update") of micro-batch `mb` (-1: none; the bucket for
 * "allreduce") during `step` begins now: the idle span open ends, and the work's range opens
 * when the step is traced. Returns now. */
uint64_t tr__busy_start(tr__busy *b, tr_actor *self, int64_t step, const char *what, int mb);
/* The work begun at t0 ends now: busy time, and its range (tr__busy_start's, or recorded
 * now in the trace). */
void tr__busy_add(tr__busy *b, tr_actor *self, int64_t step, const char *what, uint64_t t0,
                  int mb);

/* The job's graph traces as troupe's ranges read: the loader's handling as "fill" (data),
 * the other built-in actors' as control, the window of `profile`. From tr_job_new. */
void tr__profile_attach(tr_graph *g, const tr_profile_config *profile);

#endif
