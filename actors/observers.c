/* observers.c — an observer's intervals and its queue of reports (observers.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "observers.h"

void tr__observer_start(tr__observer *o, uint64_t t_start, int64_t first, int64_t batch) {
  o->t_start = o->from_t = t_start;
  o->first = first;
  o->batch = batch;
}

bool tr__observer_add(tr__observer *o, double loss) {
  if (isfinite(loss)) o->sum += loss, o->finite++; /* a skipped step's (on_nonfinite) */
  return ++o->n == o->every;
}

/* The stages' clocks and the coordinator's are one monotonic clock, but a step may end on
 * a stage a moment before the coordinator started. */
static double seconds_between(uint64_t t0, uint64_t t1) {
  return t1 > t0 ? (double)(t1 - t0) / 1e9 : 0;
}

/* The mean of two means of n and m values (NaN stands for none: n or m is 0). */
static double mean_of(double x, int64_t n, double y, int64_t m) {
  return n + m == 0 ? NAN : ((n ? x * (double)n : 0) + (m ? y * (double)m : 0)) / (double)(n + m);
}

int tr__observer_report(tr__observer *o, int64_t step, double last_loss, uint64_t t, bool last) {
  if (o->nq == o->capq) {
    const int cap = o->capq ? 2 * o->capq : 4;
    tr_report_msg *q = realloc(o->queue, (size_t)cap * sizeof *q);
    if (q == NULL) return TR_ENOMEM;
    o->queue = q;
    o->capq = cap;
  }
  o->queue[o->nq++] = (tr_report_msg){
      .step = step,
      .steps = o->n,
      .loss = o->finite ? o->sum / (double)o->finite : NAN,
      .last_loss = last_loss,
      .samples = (step - o->first) * o->batch,
      .seconds = seconds_between(o->t_start, t),
      .step_seconds = o->n ? seconds_between(o->from_t, t) / (double)o->n : NAN,
      .last = last};
  if (o->nq > TR__OBSERVER_QUEUE_MAX) { /* the older of the last two takes the newer in */
    tr_report_msg *a = &o->queue[o->nq - 2], *b = &o->queue[o->nq - 1];
    a->loss = mean_of(a->loss, a->steps, b->loss, b->steps);
    a->step_seconds = mean_of(a->step_seconds, a->steps, b->step_seconds, b->steps);
    a->steps += b->steps;
    a->step = b->step;
    a->last_loss = b->last_loss;
    a->samples = b->samples;
    a->seconds = b->seconds;
    a->last = b->last;
    o->nq--;
  }
  o->sum = 0;
  o->n = o->finite = 0;
  o->from_t = t;
  return 0;
}

bool tr__observer_last_queued(const tr__observer *o) {
  return o->told_last || (o->nq && o->queue[o->nq - 1].last);
}

void tr__observer_flush(tr__observer *o, tr__report_ready *ready, tr__report_fill *fill,
                        void *arg) {
  int sent = 0;
  while (sent < o->nq && ready(arg, o, &o->queue[sent]) && tr_edge_acquire(o->edge)) {
    tr_report_msg *r = tr_msg_new(&tr_report_type);
    const tr_msg hdr = r->hdr;
    *r = o->queue[sent++];
    r->hdr = hdr;
    if (fill(arg, o, r)) { /* the run fails */
      tr_msg_free(r);
      break;
    }
    tr_edge_send(o->edge, r);
    o->told_last |= r->last;
  }
  if (sent == 0) return;
  memmove(o->queue, o->queue + sent, (size_t)(o->nq - sent) * sizeof *o->queue);
  o->nq -= sent;
}

void tr__observer_free(tr__observer *o) {
  free(o->queue);
  o->queue = NULL;
  o->nq = o->capq = 0;
}
