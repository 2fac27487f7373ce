/* base.c — status names and messages, the assertion failure path, clocks. */
#include "tr_base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *tr_strerror(int status) {
  switch (status) {
    case TR_OK:
      return "TR_OK: success";
#define TR__STATUS_CASE(name, value, text) \
  case name:                               \
    return #name ": " text;
      TR_STATUS_MAP(TR__STATUS_CASE)
#undef TR__STATUS_CASE
  }
  return "unknown status";
}

int tr_errorf(char *err, size_t err_size, int status, const char *fmt, ...) {
  if (err && err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
  }
  return status;
}

int tr__misuse(int status, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fprintf(stderr, "troupe: %s\n", text); /* one write: lines of threads do not interleave */
  return status;
}

const char *tr__name_of(const char *const *names, int n, int i) {
  return i >= 0 && i < n ? names[i] : "?";
}

int tr__name_index(const char *const *names, int n, const char *name) {
  for (int i = 0; name && i < n; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

/* The first failure of the latest run in this process (tr__run_error_set): an assertion that
 * ends the process after a run failed (a device used off its owner thread while the failed
 * run is torn down, say) prints it first, so that the cause is not lost behind the symptom. */
static pthread_mutex_t run_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char run_error[1024];

void tr__run_error_set(const char *text) {
  pthread_mutex_lock(&run_error_lock);
  snprintf(run_error, sizeof run_error, "%s", text ? text : "");
  pthread_mutex_unlock(&run_error_lock);
}

void tr__run_error_print(void) {
  /* never waits: the path to abort() must not hang on a lock its own thread may hold */
  if (pthread_mutex_trylock(&run_error_lock) != 0) return;
  if (run_error[0]) fprintf(stderr, "troupe: the run had failed before this: %s\n", run_error);
  run_error[0] = 0; /* once */
  pthread_mutex_unlock(&run_error_lock);
}

void tr_assert_fail(const char *expr, const char *file, int line) {
  tr__run_error_print();
  fprintf(stderr, "troupe: assertion failed: %s at %s:%d\n", expr, file, line);
  fflush(stderr);
  abort();
}

uint64_t tr_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void tr__sort_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, by_value); }

uint64_t tr__thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
