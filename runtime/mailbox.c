/* mailbox.c — the out-of-line parts of the MPSC queue (tr_mailbox.h). */
#include "tr_mailbox.h"

void tr_mailbox_init(tr_mailbox *q) {
  if (q == NULL) {
    tr__misuse(TR_EINVAL, "tr_mailbox_init: q is NULL");
    return;
  }
  atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
  q->stub.type = NULL;
  q->stub.from = NULL;
  q->stub.pool = NULL;
  q->stub.size = 0;
  atomic_store_explicit(&q->tail, &q->stub, memory_order_relaxed);
  atomic_store_explicit(&q->head, (uintptr_t)&q->stub | 1, memory_order_release);
}

void tr_mailbox_drain(tr_mailbox *q) {
  if (q == NULL) return;
  tr_msg *m, *released;
  while ((m = tr_mailbox_pop(q, &released)) != NULL) {
    tr_msg_free(released);
    /* never handled: what it owns goes with it, as after a send to another process */
    if (m->type && m->type->codec && m->type->codec->sent) m->type->codec->sent(m);
  }
  tr_msg *last = atomic_load_explicit(&q->tail, memory_order_relaxed);
  if (last != &q->stub) tr_msg_free(last);
  tr_mailbox_init(q);
}
