/* msg.c — message memory and the runtime's own message types. */
#include "tr_msg.h"

#include <stdlib.h>

#ifdef TR_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

TR_MSGTYPE_DEFINE(tr_msg_stop_type, tr_msg);
TR_MSGTYPE_DEFINE(tr_timer_msg_type, tr_timer_msg);

void *tr_msg_new_size(const tr_msgtype *type, size_t size) {
  TR_ASSERT(size >= sizeof(tr_msg) && size <= UINT32_MAX - TR_CACHE_LINE);
  /* Whole cache lines: a consumer reading one message must not share a line with the next
   * message a producer is writing (a 48-byte class halves queue throughput). */
  size = (size + TR_CACHE_LINE - 1) & ~(size_t)(TR_CACHE_LINE - 1);
#ifdef TR_USE_JEMALLOC
  tr_msg *m = mallocx(size, 0);
#else
  tr_msg *m = malloc(size);
#endif
  TR_ASSERT(m != NULL);
  m->type = type;
  m->from = NULL;
  m->size = (uint32_t)size;
  m->flags = 0;
  return m;
}

void *tr_msg_new(const tr_msgtype *type) { return tr_msg_new_size(type, type->size); }

void tr_msg_free(void *msg) {
  if (msg == NULL) return;
#ifdef TR_USE_JEMALLOC
  /* Sized deallocation skips jemalloc's size lookup on the consumer's hot path. */
  sdallocx(msg, ((tr_msg *)msg)->size, 0);
#else
  free(msg);
#endif
}

const char *tr_msg_allocator(void) {
#ifdef TR_USE_JEMALLOC
  return "jemalloc";
#else
  return "libc";
#endif
}
