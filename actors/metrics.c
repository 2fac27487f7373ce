/* metrics.c — busy time after a warm-up, and losses in chunks (metrics.h). */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "tr_trace.h"

enum { CHUNK_NS = 100 * 1000 * 1000 };

tr__busy tr__busy_begin(int64_t first_step, int64_t steps) {
  const int64_t warm = steps == INT64_MAX ? 3 : steps < 10 ? 0 : steps / 10 < 100 ? steps / 10 : 100;
  return (tr__busy){.warm_step = first_step + warm, .window_start = tr_now_ns()};
}

void tr__busy_open_window(tr__busy *b, int64_t step) {
  if (step != b->warm_step) return;
  b->window_start = tr_now_ns();
  b->busy_ns = 0;
}

void tr__busy_add(tr__busy *b, tr_actor *self, int64_t step, const char *what, uint64_t t0,
                  int mb) {
  const uint64_t t1 = tr_now_ns();
  if (step >= b->warm_step) b->busy_ns += t1 - t0;
  if (tr_trace_enabled(self)) tr_trace_record(self, what, t0, t1, mb);
}

int tr__losses_add(tr__losses *l, int64_t step, float loss) {
  if (l->n == l->cap) {
    const int cap = l->cap ? 2 * l->cap : 256;
    tr__loss_entry *grown = realloc(l->e, (size_t)cap * sizeof *grown);
    if (grown == NULL) return TR_ENOMEM;
    l->e = grown;
    l->cap = cap;
  }
  l->e[l->n++] = (tr__loss_entry){.step = step, .loss = loss};
  return 0;
}

int tr__losses_flush(tr__losses *l, bool force) {
  if (l->n == 0) return 1;
  const uint64_t now = tr_now_ns();
  /* Unforced, a chunk leaves only while the edge is empty: the credits stay for the
   * checkpoint parts and the end, which must not wait behind losses. */
  if (!force && (now - l->last_sent < CHUNK_NS ||
                 tr_edge_available(l->edge) < tr_edge_credits(l->edge)))
    return 0;
  if (!tr_edge_acquire(l->edge)) return 0;
  tr__loss_msg *m = tr_msg_new_size(&tr__loss_type, sizeof *m + (size_t)l->n * sizeof *l->e);
  m->source = l->source;
  m->n = l->n;
  memcpy(m->e, l->e, (size_t)l->n * sizeof *l->e);
  tr_edge_send(l->edge, m);
  l->n = 0;
  l->last_sent = now;
  return 1;
}

void tr__losses_free(tr__losses *l) {
  free(l->e);
  l->e = NULL;
  l->n = l->cap = 0;
}
