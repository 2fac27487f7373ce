/* schedule.c — GPipe and 1F1B as per-stage action lists (tr_schedule.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tr_schedule.h"

struct tr_schedule {
  tr_schedule_config c;
  size_t *start;    /* stage s's actions: actions[start[s] .. start[s+1]) */
  int *slots;       /* per stage */
  tr_action *actions;
};

static const char *const schedule_names[] = {
#define TR__SCHEDULE_NAME(name, text) text,
    TR_SCHEDULE_MAP(TR__SCHEDULE_NAME)
#undef TR__SCHEDULE_NAME
};

static const char *const action_names[] = {
#define TR__ACTION_NAME(name, text) text,
    TR_ACTION_MAP(TR__ACTION_NAME)
#undef TR__ACTION_NAME
};

const char *tr_schedule_kind_name(tr_schedule_kind k) {
  return (unsigned)k < TR_SCHEDULE_COUNT ? schedule_names[k] : "?";
}

int tr_schedule_kind_parse(const char *name, tr_schedule_kind *out) {
  for (unsigned i = 0; name != NULL && i < TR_SCHEDULE_COUNT; i++) {
    if (!strcmp(name, schedule_names[i])) {
      *out = (tr_schedule_kind)i;
      return 0;
    }
  }
  return TR_EINVAL;
}

const char *tr_action_kind_name(tr_action_kind k) {
  return (unsigned)k < TR_ACTION_COUNT ? action_names[k] : "?";
}

/* Appends the actions of one stage; the caller sized the list exactly. */
typedef struct emitter {
  tr_action *a;
  size_t n;
  int s, p;
} emitter;

static void emit(emitter *e, tr_action_kind kind, int mb, int peer) {
  e->a[e->n++] = (tr_action){.kind = kind, .mb = mb, .peer = peer, .slot = -1, .chunk = 0};
}

static void forward(emitter *e, int mb) {
  if (e->s > 0) emit(e, TR_ACTION_RECV_ACT, mb, e->s - 1);
  emit(e, TR_ACTION_FORWARD, mb, -1);
  if (e->s < e->p - 1) emit(e, TR_ACTION_SEND_ACT, mb, e->s + 1);
}

static void backward(emitter *e, int mb) {
  if (e->s < e->p - 1) emit(e, TR_ACTION_RECV_GRAD, mb, e->s + 1);
  emit(e, TR_ACTION_BACKWARD, mb, -1);
  if (e->s > 0) emit(e, TR_ACTION_SEND_GRAD, mb, e->s - 1);
}

static void gen_gpipe(emitter *e, int m) {
  for (int i = 0; i < m; i++) forward(e, i);
  for (int i = 0; i < m; i++) backward(e, i);
}

/* Warm-up forwards fill the pipeline below this stage: the gradient of micro-batch 0 comes
 * back after p-s-1 more forwards downstream, so that many are started first. */
static void gen_1f1b(emitter *e, int m) {
  int warm = e->p - e->s - 1 < m ? e->p - e->s - 1 : m;
  int f = 0, b = 0;
  while (f < warm) forward(e, f++);
  while (f < m) {
    forward(e, f++);
    backward(e, b++);
  }
  while (b < m) backward(e, b++);
}

/* Gives each micro-batch the lowest free slot from its first action on the stage to its
 * last, and returns how many slots were ever in use at once. Works from the list alone, so
 * any future schedule gets its slots for free. */
static int assign_slots(tr_action *a, size_t n, int m, int *slot_of, int *last, char *busy) {
  int most = 0, live = 0;
  for (int i = 0; i < m; i++) slot_of[i] = -1, busy[i] = 0;
  for (size_t k = 0; k < n; k++)
    if (a[k].mb >= 0) last[a[k].mb] = (int)k;
  for (size_t k = 0; k < n; k++) {
    int mb = a[k].mb;
    if (mb < 0) continue;
    if (slot_of[mb] < 0) {
      int s = 0;
      while (busy[s]) s++;
      busy[s] = 1, slot_of[mb] = s;
      if (++live > most) most = live;
    }
    a[k].slot = slot_of[mb];
    if (last[mb] == (int)k) busy[slot_of[mb]] = 0, live--;
  }
  return most;
}

/* F and B of every micro-batch, each with the communication that applies, and the step. */
static size_t stage_length(int s, int p, int m) {
  size_t per_mb = 2 + 2 * (size_t)(s > 0) + 2 * (size_t)(s < p - 1);
  return per_mb * (size_t)m + 1;
}

int tr_schedule_new(tr_schedule **out, const tr_schedule_config *c) {
  *out = NULL;
  if (c == NULL || (unsigned)c->kind >= TR_SCHEDULE_COUNT || c->stages < 1 ||
      c->microbatches < 1 || c->microbatches > (INT_MAX - 1) / 6)
    return TR_EINVAL;
  int p = c->stages, m = c->microbatches;
  if ((size_t)p > SIZE_MAX / sizeof(tr_action) / stage_length(0, 3, m)) return TR_EINVAL;

  tr_schedule *sc = calloc(1, sizeof *sc);
  int *slot_of = malloc((size_t)m * sizeof *slot_of), *last = malloc((size_t)m * sizeof *last);
  char *busy = malloc((size_t)m);
  if (sc == NULL || slot_of == NULL || last == NULL || busy == NULL) goto nomem;
  sc->c = *c;
  sc->start = malloc(((size_t)p + 1) * sizeof *sc->start);
  sc->slots = malloc((size_t)p * sizeof *sc->slots);
  if (sc->start == NULL || sc->slots == NULL) goto nomem;
  sc->start[0] = 0;
  for (int s = 0; s < p; s++) sc->start[s + 1] = sc->start[s] + stage_length(s, p, m);
  sc->actions = malloc(sc->start[p] * sizeof *sc->actions);
  if (sc->actions == NULL) goto nomem;

  for (int s = 0; s < p; s++) {
    emitter e = {.a = sc->actions + sc->start[s], .n = 0, .s = s, .p = p};
    switch (c->kind) {
    case TR_SCHEDULE_GPIPE: gen_gpipe(&e, m); break;
    case TR_SCHEDULE_1F1B: gen_1f1b(&e, m); break;
    default: TR_ASSERT(!"a schedule in TR_SCHEDULE_MAP without a generator");
    }
    e.a[e.n++] = (tr_action){.kind = TR_ACTION_STEP, .mb = -1, .peer = -1, .slot = -1};
    TR_ASSERT(e.n == sc->start[s + 1] - sc->start[s]);
    sc->slots[s] = assign_slots(e.a, e.n, m, slot_of, last, busy);
  }
  free(slot_of);
  free(last);
  free(busy);
  *out = sc;
  return 0;

nomem:
  free(slot_of);
  free(last);
  free(busy);
  tr_schedule_free(sc);
  return TR_ENOMEM;
}

void tr_schedule_free(tr_schedule *sc) {
  if (sc == NULL) return;
  free(sc->start);
  free(sc->slots);
  free(sc->actions);
  free(sc);
}

const tr_schedule_config *tr_schedule_config_of(const tr_schedule *sc) { return &sc->c; }

const tr_action *tr_schedule_actions(const tr_schedule *sc, int stage, size_t *n) {
  TR_ASSERT(stage >= 0 && stage < sc->c.stages);
  *n = sc->start[stage + 1] - sc->start[stage];
  return sc->actions + sc->start[stage];
}

int tr_schedule_slots(const tr_schedule *sc, int stage) {
  TR_ASSERT(stage >= 0 && stage < sc->c.stages);
  return sc->slots[stage];
}

/* Both schedules keep every stage busy for m(F+B) of a makespan of (m+p-1)(F+B): the last
 * micro-batch's forward reaches the last stage p-1 forwards late, and its backward reaches
 * the first stage p-1 backwards late. */
double tr_schedule_bubble(const tr_schedule *sc) {
  int p = sc->c.stages, m = sc->c.microbatches;
  switch (sc->c.kind) {
  case TR_SCHEDULE_GPIPE:
  case TR_SCHEDULE_1F1B: return (double)(p - 1) / (double)(m + p - 1);
  default: TR_ASSERT(!"a schedule in TR_SCHEDULE_MAP without a bubble"); return 0;
  }
}
