/* buffers.h — the bytes of the messages a transport sends and receives, kept for the next
 * message instead of given back to the allocator (private to dist/).
 *
 * A message of many megabytes (an async worker's push of mlp's gradients: 33.5 MB, and the
 * server's reply) takes a buffer to encode into and one to receive into. The allocator hands
 * allocations that large back to the system when they are freed (jemalloc: past 8 MiB), so
 * each message's buffer was pages the kernel mapped and zeroed afresh: async mlp across two
 * ranks spent 440 ms a push in page faults, 10 times the push itself. Kept buffers are
 * mapped once. Buffers under a quarter MiB go to the allocator, which keeps those itself.
 *
 *   uint8_t *b = tr__buffer_take(&pool, n);   // NULL: out of memory
 *   ...
 *   tr__buffer_give(&pool, b);                // kept, or freed when the pool is full
 *
 * Thread-safe (the transport's actor and its progress thread both take and give). */
#ifndef TR_DIST_BUFFERS_H
#define TR_DIST_BUFFERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { TR__BUFFERS_KEPT = 16 };

typedef struct tr__buffers {
  pthread_mutex_t lock;
  uint8_t *kept[TR__BUFFERS_KEPT];
  int n;
  size_t bytes; /* the kept buffers' capacities */
} tr__buffers;

void tr__buffers_init(tr__buffers *b);
/* Frees the kept buffers; those taken and not given back are the caller's to give first. */
void tr__buffers_destroy(tr__buffers *b);
/* A buffer of at least n bytes (64-byte aligned): the smallest kept one that holds them, else
 * a new one. NULL: out of memory. */
uint8_t *tr__buffer_take(tr__buffers *b, size_t n);
/* Back to the pool (kept while it holds fewer than TR__BUFFERS_KEPT and 1 GiB), else freed.
 * NULL is fine. */
void tr__buffer_give(tr__buffers *b, uint8_t *p);

#endif
