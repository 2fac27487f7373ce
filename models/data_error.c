/* data_error.c — the text of a data source's first failure (tr_data_error): written once by
 * fill on any thread, read after. Below data.c and the sources, which all report through it. */
#include <stdarg.h>
#include <stdio.h>

#include "data_impl.h"

int tr__data_fail(const tr_data *d, int status, const char *fmt, ...) {
  tr_data *w = (tr_data *)d; /* the one thing fill may write, once */
  int none = 0;
  if (atomic_compare_exchange_strong(&w->failed, &none, 1)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->error, sizeof w->error, fmt, ap);
    va_end(ap);
    atomic_store(&w->failed, 2);
  }
  return status;
}

const char *tr_data_error(const tr_data *d) {
  if (d == NULL) return "";
  return atomic_load(&((tr_data *)d)->failed) == 2 ? d->error : "";
}
