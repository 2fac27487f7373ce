/* replay.c — the decisions of replay.h: a small table of keys, searched linearly (a stage
 * has a few passes per slot). */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>

uint64_t tr__replay_key(int pass, int slot, int parity, int training) {
  return (uint64_t)(uint32_t)slot << 8 | (uint64_t)(pass & 15) << 4 | (uint64_t)(parity & 1) << 1 |
         (uint64_t)(training != 0);
}

static tr__replay_entry *find(tr__replay *r, uint64_t key) {
  for (int i = 0; i < r->n; i++)
    if (r->e[i].key == key) return &r->e[i];
  return NULL;
}

tr__replay_verdict tr__replay_next(tr__replay *r, uint64_t key, tr_capture **g) {
  *g = NULL;
  if (!r->on || r->failed) return TR__REPLAY_EAGER;
  tr__replay_entry *e = find(r, key);
  if (e) {
    if (!e->g) return TR__REPLAY_CAPTURE;
    *g = e->g;
    r->launches++;
    return TR__REPLAY_LAUNCH;
  }
  if (r->n == TR__REPLAY_MAX) return TR__REPLAY_EAGER;
  if (r->n == r->cap) { /* no room to remember it: eager, and asked again next time */
    const int cap = r->cap ? 2 * r->cap : 16;
    tr__replay_entry *grown = realloc(r->e, (size_t)cap * sizeof *grown);
    if (!grown) return TR__REPLAY_EAGER;
    r->e = grown;
    r->cap = cap;
  }
  r->e[r->n++] = (tr__replay_entry){.key = key};
  return TR__REPLAY_EAGER; /* the first run: warm-up */
}

void tr__replay_keep(tr__replay *r, uint64_t key, tr_capture *g) {
  tr__replay_entry *e = find(r, key);
  TR_ASSERT(e && !e->g && g); /* kept after TR__REPLAY_CAPTURE, once */
  e->g = g;
  r->captures++;
}

int tr__replay_fail(tr__replay *r, const char *why) {
  if (r->failed) return 0;
  r->failed = 1;
  snprintf(r->why, sizeof r->why, "%s", why && *why ? why : "unknown");
  return 1;
}

void tr__replay_forget(tr__replay *r, void (*close)(tr_capture *)) {
  for (int i = 0; i < r->n; i++)
    if (r->e[i].g) close(r->e[i].g);
  r->n = 0;
}

void tr__replay_free(tr__replay *r, void (*close)(tr_capture *)) {
  tr__replay_forget(r, close);
  free(r->e);
  r->e = NULL;
  r->cap = 0;
}
