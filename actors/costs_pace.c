/* costs_pace.c — whether the machine ran at its own pace while a cost was timed.
 *
 * What the file of costs keeps, every plan and run predicts with for a week (costs.c): a
 * measurement taken while something else had the machine (another process on the cores, a
 * neighbour on the host, which a guest cannot see) would mislead them all. So the same short
 * piece of work, the probe, is timed before and after each measurement; the slower of the two
 * is the pace the measurement ran at, and the fastest probe this process has timed is the
 * machine's. The probe streams a buffer larger than the caches and multiplies and adds over a
 * block the core holds: it slows where the layers' products and copies slow, and where other
 * threads take turns on its CPU.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "planner.h"
#include "tr_base.h"

enum {
  FLOATS = 1 << 20, /* 4 MiB streamed */
  BLOCK = 2048,     /* 8 KiB in the core's cache */
  BLOCK_PASSES = 512,
  PASSES = 16, /* a piece: about 3 ms, longer than a time slice another thread takes */
  PIECES = 5,  /* the median piece: a moment's stall of the guest lands in one */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double best; /* the fastest probe of this process; 0: none yet */

/* Not instrumented by the sanitizers: the buffer is the probe's own, and under them a probe
 * timed their checks (a second where it takes 15 ms) and made every measurement wait. */
__attribute__((no_sanitize("address", "thread", "undefined"))) static float pass(float *x) {
  for (size_t i = 0; i < FLOATS; i++) x[i] = x[i] * 0.999f + 1e-3f;
  for (int r = 0; r < BLOCK_PASSES; r++)
    for (int i = 0; i < BLOCK; i++) x[i] = x[i] * 0.999f + 1e-3f;
  return x[FLOATS / 2];
}

/* The median piece's wall time, over the share of the wall clock the thread had its CPU:
 * a host that slows the CPU (which a guest cannot see) slows the pieces; other threads taking
 * turns on it may leave whole pieces alone between their turns, but not the share. */
double tr__pace_probe(void) {
  float *x = calloc(FLOATS, sizeof *x);
  if (x == NULL) return 0;
  volatile float sink = pass(x); /* the pages mapped, untimed */
  double piece[PIECES];
  const uint64_t start = tr_now_ns();
  const uint64_t cpu0 = tr__thread_cpu_ns();
  for (int k = 0; k < PIECES; k++) {
    const uint64_t t0 = tr_now_ns();
    for (int p = 0; p < PASSES; p++) sink = pass(x);
    piece[k] = (double)(tr_now_ns() - t0) / 1e9;
  }
  const double cpu = (double)(tr__thread_cpu_ns() - cpu0) / 1e9,
               wall = (double)(tr_now_ns() - start) / 1e9;
  (void)sink;
  free(x);
  tr__sort_doubles(piece, PIECES);
  const double seconds = piece[PIECES / 2] * (cpu > 0 && wall > cpu ? wall / cpu : 1);
  pthread_mutex_lock(&lock);
  if (best == 0 || seconds < best) best = seconds;
  pthread_mutex_unlock(&lock);
  return seconds;
}

double tr__pace_best(void) {
  pthread_mutex_lock(&lock);
  const double b = best;
  pthread_mutex_unlock(&lock);
  return b ? b : tr__pace_probe();
}
