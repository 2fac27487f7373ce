/* schedule.c — GPipe, 1F1B, interleaved 1F1B and ZB-H1 as per-stage action lists
 * (tr_schedule.h). */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tr_schedule.h"

struct tr_schedule {
  tr_schedule_config c;
  size_t *start;    /* stage s's actions: actions[start[s] .. start[s+1]) */
  int *slots;       /* per stage and chunk: [s × chunks + c] */
  int *peak;        /* per stage, over its chunks */
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
  return tr__name_of(schedule_names, TR__COUNTOF(schedule_names), (int)k);
}

int tr_schedule_kind_parse(const char *name, tr_schedule_kind *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(schedule_names, TR__COUNTOF(schedule_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_schedule_kind)i, 0);
}

const char *tr_schedule_kind_list(void) {
  static char list[128];
  if (list[0]) return list;
  size_t n = 0;
  for (unsigned i = 0; i < TR_SCHEDULE_COUNT; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s",
                          i == 0 ? "" : i + 1 == TR_SCHEDULE_COUNT ? " or " : ", ",
                          schedule_names[i]);
  return list;
}

const char *tr_action_kind_name(tr_action_kind k) {
  return (unsigned)k < TR_ACTION_COUNT ? action_names[k] : "?";
}

/* ---- the generators ---------------------------------------------------------------------- */

/* Appends the actions of one device; the caller sized the list exactly. A chunk's virtual
 * stage is chunk × p + s: the first of them receives no activations, the last sends none. */
typedef struct emitter {
  tr_action *a;
  size_t n;
  int s, p, v;
} emitter;

static void emit(emitter *e, tr_action_kind kind, int chunk, int mb, int peer) {
  e->a[e->n++] = (tr_action){.kind = kind, .mb = mb, .peer = peer, .slot = -1, .chunk = chunk};
}

static bool first_vs(const emitter *e, int chunk) { return chunk == 0 && e->s == 0; }
static bool last_vs(const emitter *e, int chunk) { return chunk == e->v - 1 && e->s == e->p - 1; }
static int prev_device(const emitter *e) { return (e->s + e->p - 1) % e->p; }
static int next_device(const emitter *e) { return (e->s + 1) % e->p; }

static void forward(emitter *e, int chunk, int mb) {
  if (!first_vs(e, chunk)) emit(e, TR_ACTION_RECV_ACT, chunk, mb, prev_device(e));
  emit(e, TR_ACTION_FORWARD, chunk, mb, -1);
  if (!last_vs(e, chunk)) emit(e, TR_ACTION_SEND_ACT, chunk, mb, next_device(e));
}

/* The backward (or, zero-bubble, its input half) with its gradient's receive and send. */
static void backward(emitter *e, tr_action_kind kind, int chunk, int mb) {
  if (!last_vs(e, chunk)) emit(e, TR_ACTION_RECV_GRAD, chunk, mb, next_device(e));
  emit(e, kind, chunk, mb, -1);
  if (!first_vs(e, chunk)) emit(e, TR_ACTION_SEND_GRAD, chunk, mb, prev_device(e));
}

static void gen_gpipe(emitter *e, int m) {
  for (int i = 0; i < m; i++) forward(e, 0, i);
  for (int i = 0; i < m; i++) backward(e, TR_ACTION_BACKWARD, 0, i);
}

/* Warm-up forwards fill the pipeline below this stage: the gradient of micro-batch 0 comes
 * back after p-s-1 more forwards downstream, so that many are started first. */
static void gen_1f1b(emitter *e, int m) {
  int warm = e->p - e->s - 1 < m ? e->p - e->s - 1 : m;
  int f = 0, b = 0;
  while (f < warm) forward(e, 0, f++);
  while (f < m) {
    forward(e, 0, f++);
    backward(e, TR_ACTION_BACKWARD, 0, b++);
  }
  while (b < m) backward(e, TR_ACTION_BACKWARD, 0, b++);
}

/* The k-th forward (or backward) of a device under interleaving: micro-batches go in groups
 * of p, each group through every chunk in turn, chunk 0 first for forwards and last for
 * backwards. */
static void interleaved_order(const emitter *e, int k, bool fwd, int *chunk, int *mb) {
  const int group = k / (e->p * e->v), within = k % (e->p * e->v), c = within / e->p;
  *chunk = fwd ? c : e->v - 1 - c;
  *mb = group * e->p + within % e->p;
}

/* Megatron-LM's warm-up: enough forwards that the first backward's gradient, which comes
 * from the last virtual stage, finds the pipeline full; then F and B alternate. Where p
 * does not divide m, the lists are those of m rounded up to a multiple of p with the
 * micro-batches that do not exist left out: what remains keeps every device's order, so
 * it cannot deadlock where the whole could not, and the missing ones leave holes. */
static void gen_interleaved(emitter *e, int m) {
  const int padded = (m + e->p - 1) / e->p * e->p, total = e->v * padded;
  const int need = (e->p - e->s - 1) * 2 + (e->v - 1) * e->p, warm = need < total ? need : total;
  int f = 0, b = 0, c, mb;
  for (; f < warm; f++)
    if (interleaved_order(e, f, true, &c, &mb), mb < m) forward(e, c, mb);
  while (f < total) {
    if (interleaved_order(e, f++, true, &c, &mb), mb < m) forward(e, c, mb);
    if (interleaved_order(e, b++, false, &c, &mb), mb < m) backward(e, TR_ACTION_BACKWARD, c, mb);
  }
  for (; b < total; b++)
    if (interleaved_order(e, b, false, &c, &mb), mb < m) backward(e, TR_ACTION_BACKWARD, c, mb);
}

/* ZB-H1: round x does F(x), B(x - (p-1-s)) and W(x - (p-1)), each where it exists. B
 * trails F as in 1F1B; W trails F by p-1 on every stage, so each stage holds at most p
 * micro-batches, and the W's put off fill the tail, where 1F1B waits for gradients. */
static void gen_zb1(emitter *e, int m) {
  for (int x = 0; x < m + e->p - 1; x++) {
    const int b = x - (e->p - 1 - e->s), w = x - (e->p - 1);
    if (x < m) forward(e, 0, x);
    if (b >= 0 && b < m) backward(e, TR_ACTION_BACKWARD_INPUT, 0, b);
    if (w >= 0 && w < m) emit(e, TR_ACTION_BACKWARD_WEIGHT, 0, w, -1);
  }
}

/* ---- slots ---------------------------------------------------------------------------- */

/* Gives each micro-batch of `chunk` the lowest free slot from its first action on the stage
 * to its last, and returns how many slots were ever in use at once. Works from the list
 * alone, so any future schedule gets its slots for free. */
static int assign_slots(tr_action *a, size_t n, int chunk, int m, int *slot_of, int *last,
                        char *busy) {
  int most = 0, live = 0;
  for (int i = 0; i < m; i++) slot_of[i] = -1, busy[i] = 0;
  for (size_t k = 0; k < n; k++)
    if (a[k].mb >= 0 && a[k].chunk == chunk) last[a[k].mb] = (int)k;
  for (size_t k = 0; k < n; k++) {
    int mb = a[k].mb;
    if (mb < 0 || a[k].chunk != chunk) continue;
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

/* The most (chunk, micro-batch) pairs live at once on the stage: each from its first action
 * to its last. last[] and seen[] hold v × m entries. */
static int device_peak(const tr_action *a, size_t n, int m, int *last, char *seen) {
  int live = 0, most = 0;
  for (size_t k = 0; k < n; k++)
    if (a[k].mb >= 0) last[a[k].chunk * m + a[k].mb] = (int)k, seen[a[k].chunk * m + a[k].mb] = 0;
  for (size_t k = 0; k < n; k++) {
    if (a[k].mb < 0) continue;
    const int i = a[k].chunk * m + a[k].mb;
    if (!seen[i]++ && ++live > most) most = live;
    if (last[i] == (int)k) live--;
  }
  return most;
}

/* Every chunk's F and B (zb1: also W) of every micro-batch, with the communication that
 * applies, and the step. */
static size_t stage_length(const tr_schedule_config *c, int s) {
  const int p = c->stages, v = c->chunks;
  size_t per_mb = 0;
  for (int chunk = 0; chunk < v; chunk++) {
    const int vs = chunk * p + s;
    per_mb += 2 + 2 * (size_t)(vs > 0) + 2 * (size_t)(vs < p * v - 1);
    if (c->kind == TR_SCHEDULE_ZB1) per_mb++;
  }
  return per_mb * (size_t)c->microbatches + 1;
}

/* ---- the schedule ----------------------------------------------------------------------- */

/* The configuration as generated, chunks filled in; or the rule one that makes none breaks. */
static const char *complete(const tr_schedule_config *in, tr_schedule_config *c) {
  if ((unsigned)in->kind >= TR_SCHEDULE_COUNT) return "kind: not a schedule";
  *c = *in;
  const bool interleaved = c->kind == TR_SCHEDULE_INTERLEAVED;
  c->chunks = tr_schedule_chunks(c->kind, c->chunks);
  if (c->stages < 1 || (interleaved && c->stages < 2))
    return interleaved ? "stages: give 2 or more (interleaved)" : "stages: give 1 or more";
  if (c->microbatches < 1) return "microbatches: give 1 or more";
  if (c->chunks < 1 || c->chunks > 64 || (interleaved ? c->chunks < 2 : c->chunks != 1))
    return interleaved ? "chunks: give 2 to 64 (interleaved)" : "chunks: give 1 (or 0)";
  if (c->microbatches > (INT_MAX - 1) / 7 / c->chunks ||
      (size_t)c->stages > SIZE_MAX / sizeof(tr_action) / stage_length(c, 0))
    return "stages, microbatches, chunks: the lists are too long to count";
  return NULL;
}

int tr_schedule_new(tr_schedule **out, const tr_schedule_config *config) {
  TR__NOT_NULL(out);
  *out = NULL;
  TR__NOT_NULL(config);
  tr_schedule_config c;
  const char *bad = complete(config, &c);
  if (bad)
    return tr__misuse(TR_EINVAL, "tr_schedule_new: %s (kind %d, stages %d, microbatches %d, "
                      "chunks %d)", bad, (int)config->kind, config->stages, config->microbatches,
                      config->chunks);
  const int p = c.stages, m = c.microbatches, v = c.chunks;
  tr_schedule *sc = calloc(1, sizeof *sc);
  const size_t vm = (size_t)v * (size_t)m;
  int *slot_of = malloc(vm * sizeof *slot_of), *last = malloc(vm * sizeof *last);
  char *busy = malloc(vm);
  if (sc == NULL || slot_of == NULL || last == NULL || busy == NULL) goto nomem;
  sc->c = c;
  sc->start = malloc(((size_t)p + 1) * sizeof *sc->start);
  sc->slots = malloc((size_t)p * (size_t)v * sizeof *sc->slots);
  sc->peak = malloc((size_t)p * sizeof *sc->peak);
  if (sc->start == NULL || sc->slots == NULL || sc->peak == NULL) goto nomem;
  sc->start[0] = 0;
  for (int s = 0; s < p; s++) sc->start[s + 1] = sc->start[s] + stage_length(&c, s);
  sc->actions = malloc(sc->start[p] * sizeof *sc->actions);
  if (sc->actions == NULL) goto nomem;

  for (int s = 0; s < p; s++) {
    emitter e = {.a = sc->actions + sc->start[s], .n = 0, .s = s, .p = p, .v = v};
    switch (c.kind) {
    case TR_SCHEDULE_GPIPE: gen_gpipe(&e, m); break;
    case TR_SCHEDULE_1F1B: gen_1f1b(&e, m); break;
    case TR_SCHEDULE_INTERLEAVED: gen_interleaved(&e, m); break;
    case TR_SCHEDULE_ZB1: gen_zb1(&e, m); break;
    default: TR_ASSERT(!"a schedule in TR_SCHEDULE_MAP without a generator");
    }
    e.a[e.n++] = (tr_action){.kind = TR_ACTION_STEP, .mb = -1, .peer = -1, .slot = -1};
    TR_ASSERT(e.n == sc->start[s + 1] - sc->start[s]);
    for (int chunk = 0; chunk < v; chunk++)
      sc->slots[s * v + chunk] = assign_slots(e.a, e.n, chunk, m, slot_of, last, busy);
    sc->peak[s] = device_peak(e.a, e.n, m, last, busy);
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
  free(sc->peak);
  free(sc->actions);
  free(sc);
}

const tr_schedule_config *tr_schedule_config_of(const tr_schedule *sc) {
  return sc ? &sc->c : NULL;
}

/* A stage of the schedule (1), or 0, said: the lookups of another answer nothing. */
static int has_stage(const tr_schedule *sc, int stage, const char *call) {
  if (sc == NULL) return tr__misuse(0, "%s: sc is NULL", call);
  if (stage < 0 || stage >= sc->c.stages)
    return tr__misuse(0, "%s: stage %d: the schedule has stages 0 to %d", call, stage,
                      sc->c.stages - 1);
  return 1;
}

const tr_action *tr_schedule_actions(const tr_schedule *sc, int stage, size_t *n) {
  size_t none;
  if (n == NULL) n = &none;
  *n = 0;
  if (!has_stage(sc, stage, __func__)) return NULL;
  *n = sc->start[stage + 1] - sc->start[stage];
  return sc->actions + sc->start[stage];
}

size_t tr_schedule_eval_actions(const tr_schedule *sc, int stage, int m, tr_action *out,
                                size_t cap) {
  if (!has_stage(sc, stage, __func__)) return 0;
  if (m < 0) return tr__misuse(0, "tr_schedule_eval_actions: m %d: give 0 or more", m);
  if (out == NULL) cap = 0; /* sized, nothing written */
  const int p = sc->c.stages, v = sc->c.chunks;
  size_t n = 0;
  tr_action a[3];
  emitter e = {.a = a, .s = stage, .p = p, .v = v};
  for (int mb = 0; mb < m; mb++)
    for (int chunk = 0; chunk < v; chunk++) {
      e.n = 0;
      forward(&e, chunk, mb);
      for (size_t k = 0; k < e.n; k++, n++)
        if (n < cap) out[n] = (tr_action){.kind = a[k].kind, .mb = mb, .peer = a[k].peer,
                                          .slot = 0, .chunk = chunk};
    }
  return n;
}

int tr_schedule_slots(const tr_schedule *sc, int stage) {
  return has_stage(sc, stage, __func__) ? sc->peak[stage] : 0;
}

int tr_schedule_chunk_slots(const tr_schedule *sc, int stage, int chunk) {
  if (!has_stage(sc, stage, __func__)) return 0;
  if (chunk < 0 || chunk >= sc->c.chunks)
    return tr__misuse(0, "tr_schedule_chunk_slots: chunk %d: the schedule has chunks 0 to %d",
                      chunk, sc->c.chunks - 1);
  return sc->slots[stage * sc->c.chunks + chunk];
}

/* gpipe and 1f1b keep every stage busy for m(F+B) of a makespan of (m+p-1)(F+B): the last
 * micro-batch's forward reaches the last stage p-1 forwards late, and its backward reaches
 * the first stage p-1 backwards late. Interleaving makes each of those p-1 steps a chunk's,
 * 1/v of a stage's. ZB-H1 leaves (p-1)(F+B-W) of idle time per stage (Qi et al.) once
 * m >= p; with fewer, one micro-batch's way down and back, 2m + 2p - 1 units, is the step. */
double tr_schedule_bubble(const tr_schedule *sc) {
  if (sc == NULL) return NAN;
  const double p = sc->c.stages, m = sc->c.microbatches, v = sc->c.chunks;
  switch (sc->c.kind) {
  case TR_SCHEDULE_GPIPE:
  case TR_SCHEDULE_1F1B: return (p - 1) / (m + p - 1);
  case TR_SCHEDULE_INTERLEAVED: return (p - 1) / (v * m + p - 1);
  case TR_SCHEDULE_ZB1: /* fewer micro-batches than stages: the path of one, 2p F and B, rules */
    return m >= p ? (p - 1) / (3 * m + p - 1) : 1 - 3 * m / (2 * m + 2 * p - 1);
  default: TR_ASSERT(!"a schedule in TR_SCHEDULE_MAP without a bubble"); return 0;
  }
}
