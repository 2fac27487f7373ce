/* buffers.c — message buffers kept for reuse (buffers.h). Each buffer carries its capacity in
 * the 64 bytes before the bytes it hands out. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"

enum { HEADER = 64 };
static const size_t SMALL = (size_t)256 << 10, MOST = (size_t)1 << 30;

static size_t capacity(const uint8_t *p) {
  size_t cap;
  memcpy(&cap, p - HEADER, sizeof cap);
  return cap;
}

void tr__buffers_init(tr__buffers *b) {
  memset(b, 0, sizeof *b);
  pthread_mutex_init(&b->lock, NULL);
}

void tr__buffers_destroy(tr__buffers *b) {
  for (int i = 0; i < b->n; i++) free(b->kept[i] - HEADER);
  b->n = 0;
  b->bytes = 0;
  pthread_mutex_destroy(&b->lock);
}

uint8_t *tr__buffer_take(tr__buffers *b, size_t n) {
  if (n >= SMALL) {
    pthread_mutex_lock(&b->lock);
    int best = -1;
    for (int i = 0; i < b->n; i++)
      if (capacity(b->kept[i]) >= n && (best < 0 || capacity(b->kept[i]) < capacity(b->kept[best])))
        best = i;
    uint8_t *p = NULL;
    if (best >= 0) {
      p = b->kept[best];
      b->kept[best] = b->kept[--b->n];
      b->bytes -= capacity(p);
    }
    pthread_mutex_unlock(&b->lock);
    if (p) return p;
  }
  uint8_t *raw = aligned_alloc(HEADER, HEADER + (n + HEADER - 1) / HEADER * HEADER);
  if (raw == NULL) return NULL;
  memcpy(raw, &n, sizeof n);
  return raw + HEADER;
}

void tr__buffer_give(tr__buffers *b, uint8_t *p) {
  if (p == NULL) return;
  const size_t cap = capacity(p);
  if (cap >= SMALL) {
    pthread_mutex_lock(&b->lock);
    const bool keep = b->n < TR__BUFFERS_KEPT && b->bytes + cap <= MOST;
    if (keep) b->kept[b->n++] = p, b->bytes += cap;
    pthread_mutex_unlock(&b->lock);
    if (keep) return;
  }
  free(p - HEADER);
}
