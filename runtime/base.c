/* base.c — status names and messages, the assertion failure path, clocks. */
#include "tr_base.h"

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

const char *tr__name_of(const char *const *names, int n, int i) {
  return i >= 0 && i < n ? names[i] : "?";
}

int tr__name_index(const char *const *names, int n, const char *name) {
  for (int i = 0; name && i < n; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

void tr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "troupe: assertion failed: %s at %s:%d\n", expr, file, line);
  fflush(stderr);
  abort();
}

uint64_t tr_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
