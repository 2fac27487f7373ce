/* host_libs.c — the table of the libraries this build's host GEMM can call (host_blas.h),
 * and what a host device makes of them when it opens: each one's state, and the device's
 * description (its model names them all; its instruction set is the first's, its bf16 the
 * best of those the policy lets serve). */
#include <pthread.h>
#include <stdio.h>

#include "host_blas.h"
#include "host_choose.h"
#include "host_dev.h"

const tr__host_lib *const tr__host_libs[] = {
#ifdef TR_BLAS_ONEDNN
    &tr__host_onednn,
    &tr__host_onednn_bt,
#endif
    &tr__host_openblas,
    &tr__host_blocked,
    &tr__host_tiny,
};
const int tr__host_nlibs = (int)(sizeof tr__host_libs / sizeof tr__host_libs[0]);
_Static_assert(sizeof tr__host_libs / sizeof tr__host_libs[0] <= TR__HOST_LIBS_MAX,
               "TR__HOST_LIBS_MAX holds every row");

/* Each row's description, found once: oneDNN's asks the library to make a primitive. */
static pthread_once_t infos_once = PTHREAD_ONCE_INIT;
static tr__host_lib_info infos[TR__HOST_LIBS_MAX];

static void describe_all(void) {
  for (int i = 0; i < tr__host_nlibs; i++) tr__host_libs[i]->describe(&infos[i]);
}

const tr__host_lib_info *tr__host_lib_info_of(int i) {
  pthread_once(&infos_once, describe_all);
  return &infos[i];
}

void *tr__host_lib_state(const tr_device *d, int i) { return ((tr__host_dev *)d->impl)->lib[i]; }

int tr__host_libs_open(tr_device *d) {
  tr__host_dev *h = d->impl;
  int rc = tr__host_gemm_policy_open(d);
  for (int i = 0; i < tr__host_nlibs && !rc; i++)
    if (tr__host_libs[i]->open) rc = tr__host_libs[i]->open(d, &h->lib[i]);
  if (rc) return rc;
  /* "AMD EPYC 7763 64-Core Processor (oneDNN 2.7.3, OpenBLAS 0.3.21)" */
  const int pinned = tr__host_gemm_pinned();
  int at = (int)strlen(d->info.model);
  d->info.bf16 = TR_BF16_CONVERTED;
  for (int i = 0, n = 0; i < tr__host_nlibs; i++) {
    const tr__host_lib_info *in = tr__host_lib_info_of(i);
    if (tr__host_libs[i]->fits) continue; /* the direct path is no library */
    if (at < (int)sizeof d->info.model)
      at += snprintf(d->info.model + at, sizeof d->info.model - (size_t)at, "%s%s",
                     n++ ? ", " : " (", in->label);
    if (!d->info.isa[0]) snprintf(d->info.isa, sizeof d->info.isa, "%s", in->isa);
    if ((pinned < 0 || pinned == i) && in->bf16 < d->info.bf16) d->info.bf16 = in->bf16;
  }
  if (at < (int)sizeof d->info.model) snprintf(d->info.model + at, sizeof d->info.model - (size_t)at, ")");
  return 0;
}

void tr__host_libs_close(tr_device *d) {
  tr__host_dev *h = d->impl;
  for (int i = 0; i < tr__host_nlibs; i++)
    if (h->lib[i] && tr__host_libs[i]->close) tr__host_libs[i]->close(h->lib[i]);
}
