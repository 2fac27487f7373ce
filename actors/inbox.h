/* inbox.h — what a stage holds of what others lend it: the batches, activations and
 * gradients that have come and wait for their action (a queue per edge, in arrival order,
 * which is schedule order), and the credits it owes back once the copies out of them have
 * run on its stream.
 *
 *   tr__queue_push(&q, (tr__lent){.step = ..., .data = ...});     // on arrival
 *   const tr__lent *e = tr__queue_peek(&q);                      // when its action comes
 *   tr_memcpy_peer(stream, dst, dev, e->data, e->dev, e->bytes);
 *   tr__returns_after(&ret, stream, edge);                       // the credit, once copied
 *   tr__queue_pop(&q);
 *   tr__returns_drain(&ret);                                     // now and then: due ones
 *
 * On host devices a copy has run by the time it returns, so the credit goes back at once;
 * on CUDA it goes back when the copy's event has completed, which drain finds out.
 */
#ifndef TR_INBOX_H
#define TR_INBOX_H

#include <stdbool.h>

#include "job_impl.h"

/* What a part's operation says: done, or blocked until a message comes (the actor runs again
 * then); a negative status after it failed the actor. */
enum { TR__BLOCKED = 0, TR__DONE = 1 };

/* A batch (x, y) or a tensor (data, valid after `ready`, on `dev`) of a step's micro-batch. */
typedef struct tr__lent {
  int64_t step;
  int mb, count, chunk;
  uint64_t first;
  const void *x, *y;
  bool generate; /* a batch to make on the device (tr_batch_msg.generate) */
  bool eval;     /* held-out samples (tr_batch_msg.eval) */
  const void *data;
  size_t bytes;
  tr_event *ready;
  tr_device *dev;
} tr__lent;

typedef struct tr__queue {
  tr__lent *e;
  int cap, head, n;
} tr__queue;

/* Room for `cap` (its edge's credits: a full queue is a broken protocol). */
int tr__queue_open(tr__queue *q, int cap);
void tr__queue_push(tr__queue *q, tr__lent e);
const tr__lent *tr__queue_peek(const tr__queue *q); /* NULL: empty */
void tr__queue_pop(tr__queue *q);
void tr__queue_free(tr__queue *q);
/* `e` came where the schedule has (step, mb, chunk): the actor fails, naming both. */
int tr__out_of_order(tr_actor *self, const char *what, const tr__lent *e, int64_t step, int mb,
                     int chunk);

/* Credits owed until the copies before them on the stream have run: a ring of (edge, event). */
typedef struct tr__returns {
  tr_edge **edge;
  tr_event **ev;
  int cap, head, n;
} tr__returns;

int tr__returns_open(tr__returns *r, tr_device *dev, int cap);
/* One credit of `e`, once what is queued on `s` so far has run. */
int tr__returns_after(tr__returns *r, tr_stream *s, tr_edge *e);
/* Gives back every credit whose copy has run, in order. */
int tr__returns_drain(tr__returns *r);
/* Gives back every credit owed, run or not: its device failed, and its events may never say
 * (a CUDA error is sticky); what the copies read is no longer looked at. */
void tr__returns_abandon(tr__returns *r);
static inline bool tr__returns_owed(const tr__returns *r) { return r->n > 0; }
void tr__returns_close(tr__returns *r); /* events, on the device's thread */
void tr__returns_free(tr__returns *r);

#endif
