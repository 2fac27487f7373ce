/* host_dev.h — a host device's state (d->impl), private to gpu/host: the memory that
 * host_backend.c hands out and caches, and what the op files reach through host_dev.c
 * (tr__host_scratch, tr__host_lib_state). Both .c files see the one struct; the op files see
 * only those two calls, so they depend on host_dev.c, below the backend's table, never on
 * host_backend.c. */
#ifndef TR_HOST_DEV_H
#define TR_HOST_DEV_H

#include "host_blas.h"

typedef struct tr__host_dev {
  struct tr__host_block *live;  /* blocks handed out (host_backend.c) */
  struct tr__host_block *cache; /* freed blocks, reused for requests of exactly their size */
  size_t cached;                /* bytes in the cache */
  void *scratch[TR__SCRATCH_COUNT];
  size_t scratch_size[TR__SCRATCH_COUNT];
  void *lib[TR__HOST_LIBS_MAX];  /* each library's state (host_blas.h's table), NULL for none */
} tr__host_dev;

/* host_libs.c: each library's state opened, the device's model, isa and bf16 said, and the
 * policy of TROUPE_GEMM read (a bad one fails the open); then closed. */
int tr__host_libs_open(tr_device *d);
void tr__host_libs_close(tr_device *d);

#endif
