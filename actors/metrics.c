/* metrics.c — busy time after a warm-up (metrics.h). */
#include "metrics.h"
#include "tr_trace.h"

tr__busy tr__busy_begin(int64_t first_step, int64_t steps) {
  const int64_t warm = steps == INT64_MAX ? 3 : steps < 10 ? 0 : steps / 10 < 100 ? steps / 10 : 100;
  return (tr__busy){.warm_step = first_step + warm, .window_start = tr_now_ns()};
}

void tr__busy_open_window(tr__busy *b, int64_t step) {
  if (step != b->warm_step) return;
  b->window_start = tr_now_ns();
  b->busy_ns = 0;
}

void tr__busy_add(tr__busy *b, tr_actor *self, int64_t step, const char *what, uint64_t t0,
                  int mb) {
  const uint64_t t1 = tr_now_ns();
  if (step >= b->warm_step) b->busy_ns += t1 - t0;
  if (tr_trace_enabled(self)) tr_trace_record(self, what, t0, t1, mb);
}
