/* device_fail.c — how the device layer records a failure on a device (tr__device_fail,
 * backend_impl.h). Every backend's slots and their helpers report through it, so it sits
 * below the backend tables and the core wrapper (device.c, device_ops.c) and uses nothing
 * of theirs: device.c lists the backends, and a helper that called back into device.c would
 * close a circle through every backend. */
#include <stdarg.h>
#include <stdio.h>

#include "backend_impl.h"

int tr__device_fail(tr_device *d, int status, const char *fmt, ...) {
  int k = snprintf(d->error, sizeof d->error, "%s: ", d->info.name);
  if (k < 0 || (size_t)k >= sizeof d->error) k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->error + k, sizeof d->error - (size_t)k, fmt, ap);
  va_end(ap);
  return status;
}
