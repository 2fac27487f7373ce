/* host_dev.c — what the host backend's op files ask of the device they run on: scratch
 * memory (host_impl.h); each GEMM library's state is host_libs.c's. Kept apart from the
 * backend's table (host_backend.c), which names the op files' functions: the ops call down
 * into this file, never back up into the table's. */
#include <stdlib.h>

#include "host_dev.h"

void *tr__host_scratch(tr_stream *s, int which, size_t bytes) {
  tr__host_dev *h = s->dev->impl;
  if (bytes <= h->scratch_size[which]) return h->scratch[which];
  size_t size = (bytes + 4095) & ~(size_t)4095;
  void *mem = NULL;
  if (size < bytes || posix_memalign(&mem, 64, size)) return NULL;
  free(h->scratch[which]);
  h->scratch[which] = mem;
  h->scratch_size[which] = size;
  return mem;
}
