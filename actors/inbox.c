/* inbox.c — a stage's queues of lent buffers, and the credits it returns (inbox.h). */
#include <stdlib.h>

#include "inbox.h"

/* An actor to itself: look at the device's events again. */
TR_MSGTYPE_DEFINE(tr__poll_type, tr__poll_msg);

int tr__queue_open(tr__queue *q, int cap) {
  *q = (tr__queue){.cap = cap, .e = calloc((size_t)cap, sizeof *q->e)};
  return q->e ? 0 : TR_ENOMEM;
}

void tr__queue_push(tr__queue *q, tr__lent e) {
  TR_ASSERT(q->n < q->cap);
  q->e[(q->head + q->n++) % q->cap] = e;
}

const tr__lent *tr__queue_peek(const tr__queue *q) { return q->n ? &q->e[q->head] : NULL; }

void tr__queue_pop(tr__queue *q) {
  q->head = (q->head + 1) % q->cap;
  q->n--;
}

void tr__queue_free(tr__queue *q) {
  free(q->e);
  *q = (tr__queue){0};
}

int tr__returns_open(tr__returns *r, tr_device *dev, int cap) {
  *r = (tr__returns){.cap = cap > 0 ? cap : 1};
  r->edge = calloc((size_t)r->cap, sizeof *r->edge);
  r->ev = calloc((size_t)r->cap, sizeof *r->ev);
  if (!r->edge || !r->ev) return TR_ENOMEM;
  for (int i = 0; i < r->cap; i++)
    if (tr_event_open(dev, TR_EVENT_DEFAULT, &r->ev[i])) return TR_EDEVICE;
  return 0;
}

int tr__returns_after(tr__returns *r, tr_stream *s, tr_edge *e) {
  tr_event *ev = r->ev[(r->head + r->n) % r->cap];
  if (tr_event_record(ev, s)) return TR_EDEVICE;
  if (r->n == 0 && tr_event_query(ev) == 1) { /* host devices: always */
    tr_edge_release(e, 1);
    return 0;
  }
  TR_ASSERT(r->n < r->cap);
  r->edge[(r->head + r->n++) % r->cap] = e;
  return 0;
}

int tr__returns_drain(tr__returns *r) {
  while (r->n) {
    const int q = tr_event_query(r->ev[r->head]);
    if (q < 0) return TR_EDEVICE;
    if (q == 0) break;
    tr_edge_release(r->edge[r->head], 1);
    r->head = (r->head + 1) % r->cap;
    r->n--;
  }
  return 0;
}

void tr__returns_abandon(tr__returns *r) {
  for (; r->n; r->n--, r->head = (r->head + 1) % r->cap) tr_edge_release(r->edge[r->head], 1);
}

void tr__returns_close(tr__returns *r) {
  for (int i = 0; r->ev && i < r->cap; i++)
    if (r->ev[i]) tr_event_close(r->ev[i]);
  free(r->ev);
  r->ev = NULL;
}

void tr__returns_free(tr__returns *r) {
  free(r->edge);
  free(r->ev);
  *r = (tr__returns){0};
}

int tr__out_of_order(tr_actor *self, const char *what, const tr__lent *e, int64_t step, int mb,
                     int chunk) {
  return tr_actor_fail(self, TR_EINVAL, "%s of step %lld, micro-batch %d, chunk %d came where "
                       "the schedule has step %lld, micro-batch %d, chunk %d: producers send "
                       "in schedule order", what, (long long)e->step, e->mb, e->chunk,
                       (long long)step, mb, chunk);
}
