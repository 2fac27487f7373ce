/* stage_error.c — the text of a stage's failure (tr_stage_error): what failed, on which stage
 * and device, and why. Below stage.c and the parts beside it (stage_loss.c, stage_passes.c,
 * optim.c), which all report through it. */
#include <stdarg.h>
#include <stdio.h>

#include "stage_impl.h"

/* "...: <what>: <why>", why being a layer's own account, the device's, or the status's. */
static int stage_fail_v(tr_stage *st, int rc, const char *why, const char *fmt, va_list ap) {
  char what[256];
  vsnprintf(what, sizeof what, fmt, ap);
  const char *dev = tr_device_error(st->dev);
  if (!why || !*why) why = dev && *dev ? dev : tr_strerror(rc);
  snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s on %s: %s: %s", st->info.first,
           st->info.end, st->m->name, tr_device_name(st->dev), what, why);
  return rc;
}

int tr__stage_fail(tr_stage *st, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  stage_fail_v(st, rc, NULL, fmt, ap);
  va_end(ap);
  return rc;
}

int tr__stage_fail_why(tr_stage *st, int rc, const char *why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  stage_fail_v(st, rc, why, fmt, ap);
  va_end(ap);
  return rc;
}

int tr__stage_misuse(tr_stage *st, int rc, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (st == NULL) return tr__misuse(rc, "%s", what);
  snprintf(st->err, sizeof st->err, "stage [%d,%d) of %s: %s", st->info.first, st->info.end,
           st->m->name, what);
  return rc;
}

int tr__stage_slot(tr_stage *st, int slot, const char *call) {
  if (st == NULL) return tr__misuse(TR_EINVAL, "%s: st is NULL", call);
  if (slot >= 0 && slot < st->info.slots) return 0;
  if (st->info.slots == 0)
    return tr__stage_misuse(st, TR_EINVAL, "%s: slot %d: the stage has no slots (it holds "
                            "parameters only)", call, slot);
  return tr__stage_misuse(st, TR_EINVAL, "%s: slot %d: the stage has slots 0 to %d", call, slot,
                          st->info.slots - 1);
}

const char *tr_stage_error(const tr_stage *st) { return st ? st->err : ""; }
