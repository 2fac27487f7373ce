/* losses.c — losses in chunks from the stages, added up step by step at the coordinator
 * (losses.h); the chunk's message, tr__loss_type, with its wire codec. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "losses.h"

enum { CHUNK_NS = 100 * 1000 * 1000 };

/* ---- the stage's log --------------------------------------------------------------------- */

int tr__loss_log_add(tr__loss_log *l, int64_t step, float loss, uint64_t t) {
  if (l->e == NULL && (l->e = malloc(TR__LOSS_CHUNK * sizeof *l->e)) == NULL) return TR_ENOMEM;
  if (l->n == TR__LOSS_CHUNK) return 0;
  l->e[l->n++] = (tr__loss_entry){.step = step, .loss = loss, .t = t};
  if (!isfinite(loss) && !l->nonfinite) {
    l->nonfinite = true;
    l->nonfinite_step = step;
    l->nonfinite_loss = loss;
  }
  return 1;
}

int tr__loss_log_flush(tr__loss_log *l, bool force) {
  if (l->n == 0) return 1;
  const uint64_t now = tr_now_ns();
  /* Unforced, a chunk leaves only while the edge is empty: the credits stay for the
   * checkpoint parts and the end, which must not wait behind losses. */
  if (!force && l->n < TR__LOSS_CHUNK &&
      (now - l->last_sent < CHUNK_NS || tr_edge_available(l->edge) < tr_edge_credits(l->edge)))
    return 0;
  if (!tr_edge_acquire(l->edge)) return 0;
  /* every chunk of one size, however full */
  tr__loss_msg *m = tr_msg_new_size(&tr__loss_type, sizeof *m + TR__LOSS_CHUNK * sizeof *l->e);
  m->source = l->source;
  m->n = l->n;
  memcpy(m->e, l->e, (size_t)l->n * sizeof *l->e);
  tr_edge_send(l->edge, m);
  l->n = 0;
  l->last_sent = now;
  return 1;
}

void tr__loss_log_free(tr__loss_log *l) {
  free(l->e);
  l->e = NULL;
  l->n = 0;
}

/* ---- the stage's ring ---------------------------------------------------------------------- */

int tr__loss_ring_open(tr__loss_ring *r, tr_device *dev, int m, int64_t first) {
  *r = (tr__loss_ring){.dev = dev, .m = m, .read = first};
  if (tr_host_alloc(dev, (size_t)TR__LOSS_RING * (size_t)m * sizeof(float), (void **)&r->host))
    return TR_EDEVICE;
  for (int i = 0; i < TR__LOSS_RING; i++)
    if (tr_event_open(dev, TR_EVENT_DEFAULT, &r->ev[i])) return TR_EDEVICE;
  return 0;
}

int tr__loss_ring_copy(tr__loss_ring *r, tr_stream *s, int64_t pos, int mb, const float *loss,
                       int64_t step) {
  const int k = (int)(pos % TR__LOSS_RING);
  r->step[k] = step;
  if (tr_memcpy(s, &r->host[k * r->m + mb], loss, sizeof(float), TR_COPY_D2H)) return TR_EDEVICE;
  return mb == r->m - 1 && tr_event_record(r->ev[k], s) ? TR_EDEVICE : 0;
}

void tr__loss_ring_ended(tr__loss_ring *r, int64_t pos) {
  r->t[pos % TR__LOSS_RING] = tr_now_ns();
}

/* Each step's loss is the sum over its micro-batches (each already scaled by 1/global
 * batch), in micro-batch order. */
int tr__loss_ring_read(tr__loss_ring *r, tr__loss_log *log, int64_t upto, bool room) {
  if (room && upto - r->read >= TR__LOSS_RING &&
      tr_event_synchronize(r->ev[r->read % TR__LOSS_RING]))
    return TR_EDEVICE;
  while (r->read < upto) {
    const int k = (int)(r->read % TR__LOSS_RING);
    const int q = tr_event_query(r->ev[k]);
    if (q < 0) return TR_EDEVICE;
    if (q == 0) break;
    double sum = 0;
    for (int mb = 0; mb < r->m; mb++) sum += r->host[k * r->m + mb];
    const int added = tr__loss_log_add(log, r->step[k], (float)sum, r->t[k]);
    if (added < 0) return added;
    if (added == 0) break; /* the log is full: read again once it has been sent */
    r->read++;
  }
  return 0;
}

void tr__loss_ring_close(tr__loss_ring *r) {
  if (r->dev == NULL) return;
  for (int i = 0; i < TR__LOSS_RING; i++)
    if (r->ev[i]) tr_event_close(r->ev[i]);
  if (r->host) tr_host_free(r->dev, r->host);
  *r = (tr__loss_ring){0};
}

/* ---- the coordinator's book ---------------------------------------------------------------- */

int tr__loss_book_init(tr__loss_book *b, int64_t first, int needed, bool arrival,
                       int64_t expected) {
  TR_ASSERT(!arrival || needed == 1);
  *b = (tr__loss_book){.first = first, .needed = needed, .arrival = arrival,
                       .expected = expected, .initial = NAN};
  if (expected <= 0) return 0;
  /* Written now, so that its pages are the process's from the start, not taken one by one
   * through the run. */
  b->tcap = expected / 100 + 1;
  b->tail = calloc((size_t)b->tcap, sizeof *b->tail);
  return b->tail ? 0 : TR_ENOMEM;
}

/* Room in the window for step index k (relative to first). */
static int window_fit(tr__loss_book *b, int64_t k) {
  if (k - b->complete < b->wcap) return 0;
  int64_t cap = b->wcap ? 2 * b->wcap : 1024;
  while (k - b->complete >= cap) cap *= 2;
  tr__step_share *w = calloc((size_t)cap, sizeof *w);
  if (w == NULL) return TR_ENOMEM;
  for (int64_t i = b->complete; i < b->complete + b->wcap; i++) w[i % cap] = b->window[i % b->wcap];
  free(b->window);
  b->window = w;
  b->wcap = cap;
  return 0;
}

/* Keeps the last max(1, n/100) losses of n complete steps, before anything the final loss
 * will need is overwritten: sized once for a run of known length (more steps than expected
 * come only from a longer run than configured, and grow it like a timed one's), else grown
 * by an eighth when full. */
static int tail_keep(tr__loss_book *b, int64_t k, double loss) {
  const int64_t need = (k + 1) / 100 + 1;
  if (need > b->tcap) {
    const int64_t cap = b->tcap ? b->tcap + b->tcap / 8 + 1 : 64;
    double *t = malloc((size_t)cap * sizeof *t);
    if (t == NULL) return TR_ENOMEM;
    for (int64_t i = k - b->tcap > 0 ? k - b->tcap : 0; i < k; i++) t[i % cap] = b->tail[i % b->tcap];
    free(b->tail);
    b->tail = t;
    b->tcap = cap;
  }
  b->tail[k % b->tcap] = loss;
  return 0;
}

/* Step k is complete with this loss. */
static int completed(tr__loss_book *b, double loss, uint64_t t, tr__on_step_fn on_step,
                     void *arg) {
  const int64_t k = b->complete++;
  if (isnan(b->initial) && isfinite(loss)) b->initial = loss;
  if (tail_keep(b, k, loss)) return TR_ENOMEM;
  if (on_step) on_step(arg, b->first + k, loss, t);
  return 0;
}

/* The shares step index k needs: the replicas less those gone by then (local SGD's). */
static int needed(const tr__loss_book *b, int64_t k) {
  int n = b->needed;
  for (int i = 0; i < b->ngone; i++) n -= b->gone[i] <= b->first + k;
  return n;
}

/* The steps whose every share has come, completed in order: the sum of the shares, or
 * where replicas left, the sum scaled to the mean of those that stayed. */
static int drain(tr__loss_book *b, tr__on_step_fn on_step, void *arg) {
  int n;
  while (b->wcap && (n = needed(b, b->complete)) > 0 &&
         b->window[b->complete % b->wcap].parts == n) {
    tr__step_share *s = &b->window[b->complete % b->wcap];
    const double loss = n == b->needed ? s->sum : s->sum * b->needed / n;
    const uint64_t t = s->t;
    *s = (tr__step_share){0};
    if (completed(b, loss, t, on_step, arg)) return TR_ENOMEM;
  }
  return 0;
}

int tr__loss_book_add(tr__loss_book *b, const tr__loss_msg *m, int64_t offset,
                      tr__on_step_fn on_step, void *arg) {
  for (int i = 0; i < m->n; i++) {
    const int64_t k = m->e[i].step - b->first;
    if (k < (b->arrival ? 0 : b->complete)) continue; /* not of this run */
    if (b->arrival) {
      if (completed(b, m->e[i].loss, m->e[i].t + (uint64_t)offset, on_step, arg)) return TR_ENOMEM;
      continue;
    }
    if (window_fit(b, k)) return TR_ENOMEM;
    tr__step_share *s = &b->window[k % b->wcap];
    s->sum += m->e[i].loss; /* in double: the shares' bits add up alike in any order */
    const uint64_t t = m->e[i].t + (uint64_t)offset;
    if (t > s->t) s->t = t;
    s->parts++;
  }
  return drain(b, on_step, arg);
}

int tr__loss_book_depart(tr__loss_book *b, int64_t from, tr__on_step_fn on_step, void *arg) {
  if (b->arrival || b->ngone == TR__LOSS_GONE) return 0;
  b->gone[b->ngone++] = from;
  return drain(b, on_step, arg);
}

double tr__loss_book_last(const tr__loss_book *b) {
  return b->complete ? b->tail[(b->complete - 1) % b->tcap] : NAN;
}

double tr__loss_book_final(const tr__loss_book *b) {
  const int64_t n = b->complete, tail = n / 100 ? n / 100 : 1;
  double sum = 0;
  int64_t finite = 0; /* a skipped step's loss (on_nonfinite) is not one of them */
  for (int64_t k = n - tail; k < n && n > 0; k++) {
    const double loss = b->tail[k % b->tcap];
    if (isfinite(loss)) sum += loss, finite++;
  }
  return finite ? sum / (double)finite : NAN;
}

void tr__loss_book_free(tr__loss_book *b) {
  free(b->window);
  free(b->tail);
  *b = (tr__loss_book){0};
}

/* ---- a chunk of losses as bytes (tr_msg_codec): the entries it holds, in a message of the
 * one chunk size ---------------------------------------------------------------------------- */

static size_t loss_size(const tr_msg *m) {
  const tr__loss_msg *l = (const tr__loss_msg *)m;
  return offsetof(tr__loss_msg, e) - sizeof(tr_msg) + (size_t)l->n * sizeof *l->e;
}

static void loss_put(const tr_msg *m, uint8_t *out) {
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), loss_size(m));
}

static tr_msg *loss_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  const size_t head = offsetof(tr__loss_msg, e) - sizeof(tr_msg);
  tr__loss_msg *l = tr_msg_new_size(type, sizeof *l + TR__LOSS_CHUNK * sizeof *l->e);
  if (n >= head) memcpy((uint8_t *)l + sizeof(tr_msg), in, head);
  if (n < head || l->n < 0 || l->n > TR__LOSS_CHUNK || n != head + (size_t)l->n * sizeof *l->e) {
    tr_msg_free(l);
    return NULL;
  }
  memcpy(l->e, in + head, (size_t)l->n * sizeof *l->e);
  return &l->hdr;
}

static const tr_msg_codec loss_codec = {.size = loss_size, .put = loss_put, .get = loss_get};
TR_MSGTYPE_DEFINE_CODEC(tr__loss_type, tr__loss_msg, &loss_codec);
