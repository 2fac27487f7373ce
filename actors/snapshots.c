/* snapshots.c — the parameters handed to observers in memory (snapshots.h): the images of
 * their steps, the views over them the observers hold, and when each is freed. */
#include <stdio.h>
#include <stdlib.h>

#include "snapshots.h"

static tr__snapshot *find(const tr__snapshots *ss, int64_t step) {
  for (int i = 0; i < ss->n; i++)
    if (ss->s[i].step == step) return &ss->s[i];
  return NULL;
}

tr__snap_reader *tr__snapshots_of(const tr__snapshots *ss, const tr_edge *edge) {
  for (int i = 0; i < ss->nreaders; i++)
    if (ss->readers[i]->edge == edge) return ss->readers[i];
  return NULL;
}

tr__snap_reader *tr__snapshots_reader(tr__snapshots *ss, tr_edge *edge, int every) {
  tr__snap_reader *had = tr__snapshots_of(ss, edge);
  if (had) { /* its cadence changed */
    had->every = every;
    return had;
  }
  tr__snap_reader **grown = realloc(ss->readers, (size_t)(ss->nreaders + 1) * sizeof *grown);
  if (grown == NULL) return NULL;
  ss->readers = grown;
  tr__snap_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  *r = (tr__snap_reader){.edge = edge, .every = every, .passed = -1};
  ss->readers[ss->nreaders++] = r;
  return r;
}

int tr__snapshots_add(tr__snapshots *ss, int64_t step, void *bytes, size_t size, char *err,
                      size_t err_size) {
  TR_ASSERT(find(ss, step) == NULL);
  if (ss->n == ss->cap) {
    const int cap = ss->cap ? 2 * ss->cap : 4;
    tr__snapshot *s = realloc(ss->s, (size_t)cap * sizeof *s);
    if (s == NULL) {
      free(bytes);
      snprintf(err, err_size, "keeping the parameters of step %lld: out of memory",
               (long long)step);
      return TR_ENOMEM;
    }
    ss->s = s;
    ss->cap = cap;
  }
  ss->s[ss->n++] = (tr__snapshot){.step = step, .bytes = bytes, .size = size};
  return 0;
}

bool tr__snap_ready(const tr__snapshots *ss, const tr__snap_reader *r, int64_t step, bool last) {
  return !tr__snap_wants(r, step, last) || find(ss, step) != NULL;
}

int tr__snap_open(tr__snapshots *ss, tr__snap_reader *r, tr_report_msg *rep) {
  rep->params = NULL;
  if (r == NULL) return 0;
  TR_ASSERT(r->n < TR__SNAP_HELD);
  if (tr__snap_wants(r, rep->step, rep->last)) {
    tr__snapshot *s = find(ss, rep->step);
    TR_ASSERT(s != NULL);
    char name[64];
    snprintf(name, sizeof name, "the parameters of step %lld", (long long)rep->step);
    const int rc = tr_checkpoint_open_memory(&rep->params, s->bytes, s->size, name, ss->err,
                                             sizeof ss->err);
    if (rc) return ss->failed = rc;
    s->views++;
  }
  const int at = (r->head + r->n++) % TR__SNAP_HELD;
  r->held[at].view = rep->params;
  r->held[at].step = rep->step;
  if (rep->step > r->passed) r->passed = rep->step;
  r->done |= rep->last != 0;
  return 0;
}

static void close_oldest(tr__snapshots *ss, tr__snap_reader *r) {
  const int at = r->head;
  r->head = (r->head + 1) % TR__SNAP_HELD;
  r->n--;
  if (r->held[at].view == NULL) return;
  tr_checkpoint_close(r->held[at].view);
  r->held[at].view = NULL;
  tr__snapshot *s = find(ss, r->held[at].step);
  TR_ASSERT(s != NULL && s->views > 0);
  s->views--;
}

int tr__snapshots_given(tr__snapshots *ss, tr_actor *self) {
  if (ss->failed) return tr_actor_fail(self, ss->failed, "handing observers %s", ss->err);
  int64_t passed = INT64_MAX;
  for (int i = 0; i < ss->nreaders; i++) {
    tr__snap_reader *r = ss->readers[i];
    /* credits come back in the order the reports went */
    const int in_flight = tr_edge_credits(r->edge) - tr_edge_available(r->edge);
    while (r->n > in_flight) close_oldest(ss, r);
    if (!r->done && r->passed < passed) passed = r->passed;
  }
  int kept = 0;
  for (int i = 0; i < ss->n; i++) {
    /* before: a reader told of step k may yet have its last report, of step k */
    if (ss->s[i].views == 0 && ss->s[i].step < passed) free(ss->s[i].bytes);
    else ss->s[kept++] = ss->s[i];
  }
  ss->n = kept;
  return 0;
}

void tr__snapshots_free(tr__snapshots *ss) {
  for (int i = 0; i < ss->nreaders; i++) {
    while (ss->readers[i]->n > 0) close_oldest(ss, ss->readers[i]);
    free(ss->readers[i]);
  }
  for (int i = 0; i < ss->n; i++) free(ss->s[i].bytes);
  free(ss->readers);
  free(ss->s);
  *ss = (tr__snapshots){0};
}
