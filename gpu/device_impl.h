/* device_impl.h — what the two files of the device layer's core wrapper share: device.c
 * (specs, lists, devices, the owner-thread rule, streams, events, captures) and device_ops.c
 * (memory, copies, GEMM and the kernels). Every public call begins with these checks. */
#ifndef TR_DEVICE_IMPL_H
#define TR_DEVICE_IMPL_H

#include "backend_impl.h"

/* A placeholder stands for another process's device: nothing runs on it here. Records that
 * on d for the call named `call`, and returns TR_EINVAL (device.c). */
int tr__device_placeholder(tr_device *d, const char *call);

/* Every public call on a device or a stream begins here: NULL and placeholders refused
 * (tr_base.h, Misuse), then the owner rule. */
#define ENTER_DEV(d)                                                              \
  do {                                                                            \
    if ((d) == NULL) return tr__misuse(TR_EINVAL, "%s: %s is NULL", __func__, #d); \
    if ((d)->be == NULL) return tr__device_placeholder(d, __func__);              \
    int enter_rc_ = tr__device_enter(d);                                          \
    if (enter_rc_) return enter_rc_;                                              \
  } while (0)

#define ENTER(s)                                                                  \
  if ((s) == NULL) return tr__misuse(TR_EINVAL, "%s: %s is NULL", __func__, #s);  \
  tr_device *d = (s)->dev;                                                        \
  ENTER_DEV(d)

#define NOT_NULL(p) \
  if (!(p)) return tr__device_fail(d, TR_EINVAL, "%s: %s is NULL", __func__, #p)

#define SLOT(slot_) \
  if (!d->be->slot_)  \
  return tr__device_fail(d, TR_EDEVICE, "%s: not implemented by the %s backend", __func__, d->be->name)

/* What may not happen on a stream that records (tr_capture_begin). */
#define NOT_CAPTURING(s)                                                                     \
  if ((s)->capturing)                                                                        \
  return tr__device_fail(d, TR_ESTATE, "%s: not while stream '%s' captures", __func__, (s)->name)

#endif
