/* metrics.h — what every actor that works on a device measures for the run's figures: the
 * time it was busy after a warm-up (utilization, bubbles), traced as it goes, and the losses
 * it sends the coordinator in chunks.
 *
 *   tr__busy b = tr__busy_begin(first_step, steps_expected);
 *   uint64_t t0 = tr_now_ns();  ... issue the forward ...
 *   tr__busy_add(&b, self, step, "forward", t0, mb);
 *
 *   tr__losses l = {.edge = report, .source = index};
 *   tr__losses_add(&l, step, loss);        // after each step
 *   tr__losses_flush(&l, false);           // a chunk a few times a second
 *   if (!tr__losses_flush(&l, true)) ...;  // at the end: everything, once a credit is free
 */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include "job_impl.h"

typedef struct tr__busy {
  int64_t warm_step;     /* steps before this one warm up: not counted */
  uint64_t window_start; /* when the measured window opened */
  uint64_t busy_ns;      /* time inside device work since then */
} tr__busy;

/* A tenth of the `steps` expected (at most 100) warm up; 3 when their count is unknown
 * (INT64_MAX: a timed run). */
tr__busy tr__busy_begin(int64_t first_step, int64_t steps);
/* `step` is now the current one: the window opens as the warm-up ends (the caller has let
 * its device finish the warm-up's work). */
void tr__busy_open_window(tr__busy *b, int64_t step);
/* Work from t0 until now, of micro-batch `mb` (-1: none) during `step`. */
void tr__busy_add(tr__busy *b, tr_actor *self, int64_t step, const char *what, uint64_t t0,
                  int mb);

#endif
