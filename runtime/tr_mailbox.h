/* tr_mailbox.h — the intrusive multi-producer single-consumer message queue.
 *
 * Dmitry Vyukov's non-blocking MPSC queue, as Pony's runtime uses it. The message header is
 * the link. A push is one atomic exchange of `head` and one store to the previous message's
 * link; a pop reads the consumer's own `tail` and its link, and never writes shared memory.
 *
 *   head ──► newest ─► ... ◄─ next ── tail (the last message popped, or the stub)
 *
 * The popped message stays in the queue as its stub until the next pop, which hands it back
 * to the caller as `released`: that is the price of a pop without a read-modify-write.
 *
 * Parking: bit 0 of `head` says "the consumer found the queue empty and may be asleep". Only
 * the consumer sets it (tr_mailbox_mark_empty, a compare-and-swap done when it goes idle,
 * not on every pop), and the push whose exchange removes it is told so: exactly that one
 * sender wakes the consumer. While the consumer is busy, producers never touch its state.
 *
 * Threads: any number of threads may push concurrently; exactly one thread (the owner) may
 * pop, peek or mark.
 */
#ifndef TR_MAILBOX_H
#define TR_MAILBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tr_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_mailbox {
  _Alignas(TR_CACHE_LINE) _Atomic(uintptr_t) head; /* producers: newest message | empty mark */
  /* consumer: last popped message, or stub. Atomic only so that a watchdog on another
   * thread may read it (tr_mailbox_pending); the owner's relaxed accesses are plain moves. */
  _Alignas(TR_CACHE_LINE) _Atomic(tr_msg *) tail;
  tr_msg stub;
} tr_mailbox;

/* An empty queue, marked empty: the first push reports that its consumer needs a wake-up.
 * (q NULL: nothing, said on stderr; tr_mailbox_drain(NULL) does nothing.) */
TR_API void tr_mailbox_init(tr_mailbox *q);

/* Frees every message still queued (and the last popped one) with tr_msg_free; those never
 * popped first give back what they own through their type's codec (`sent`: the arrays
 * their receiver would have freed). The queue must be quiescent: no producer may be
 * pushing. */
TR_API void tr_mailbox_drain(tr_mailbox *q);

/* Producer: appends `m`. Returns true when the consumer had marked the queue empty; the
 * caller must then wake it (and is the only sender that will). */
static inline bool tr_mailbox_push(tr_mailbox *q, tr_msg *m) {
  atomic_store_explicit(&m->next, NULL, memory_order_relaxed);
  uintptr_t prev = atomic_exchange_explicit(&q->head, (uintptr_t)m, memory_order_acq_rel);
  tr_msg *p = (tr_msg *)(prev & ~(uintptr_t)1);
  atomic_store_explicit(&p->next, m, memory_order_release);
  return (prev & 1) != 0;
}

/* Consumer: the oldest message, or NULL. `*released` receives the message the queue no
 * longer references (the previous pop's), which the caller now owns, or NULL. */
static inline tr_msg *tr_mailbox_pop(tr_mailbox *q, tr_msg **released) {
  tr_msg *tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  tr_msg *next = atomic_load_explicit(&tail->next, memory_order_acquire);
  *released = NULL;
  if (next == NULL) return NULL;
  atomic_store_explicit(&q->tail, next, memory_order_relaxed);
  *released = tail == &q->stub ? NULL : tail;
  return next;
}

/* Consumer: true when nothing is ready to pop. Reads only the line of the last popped
 * message, so a consumer may spin on it without disturbing producers. */
static inline bool tr_mailbox_empty(const tr_mailbox *q) {
  tr_msg *tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  return atomic_load_explicit(&tail->next, memory_order_relaxed) == NULL;
}

/* Consumer: the newest message pushed so far (bounds a turn: "up to the head seen"). */
static inline const tr_msg *tr_mailbox_newest(tr_mailbox *q) {
  return (const tr_msg *)(atomic_load_explicit(&q->head, memory_order_acquire) &
                          ~(uintptr_t)1);
}

/* Consumer: marks the queue empty before sleeping. True when the queue is empty and now
 * (or already) marked, so that the next push reports it; false when a message is pending
 * or being pushed: the consumer must not sleep. */
static inline bool tr_mailbox_mark_empty(tr_mailbox *q) {
  tr_msg *last = atomic_load_explicit(&q->tail, memory_order_relaxed);
  uintptr_t tail = (uintptr_t)last;
  if (atomic_load_explicit(&last->next, memory_order_acquire) != NULL) return false;
  uintptr_t expect = tail;
  if (atomic_compare_exchange_strong_explicit(&q->head, &expect, tail | 1,
                                              memory_order_acq_rel, memory_order_acquire))
    return true;
  return expect == (tail | 1);
}

/* Any thread: true when messages wait (or are being pushed). A snapshot for diagnostics
 * (the watchdog); it never dereferences a message, so it is safe while the owner pops. */
static inline bool tr_mailbox_pending(const tr_mailbox *q) {
  uintptr_t head = atomic_load_explicit(&((tr_mailbox *)q)->head, memory_order_relaxed);
  return (head & ~(uintptr_t)1) !=
         (uintptr_t)atomic_load_explicit(&((tr_mailbox *)q)->tail, memory_order_relaxed);
}

#ifdef __cplusplus
}
#endif
#endif
