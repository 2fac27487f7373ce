/* tr_schedule.h — pipeline schedules as precomputed per-stage action lists.
 *
 * A pipeline of p stages trains one global batch as m micro-batches. A schedule fixes, for
 * every stage, the order of everything that stage does in one step: the forward (F) and
 * backward (B) of each micro-batch, the receive of its input activation before F and the
 * send of its output after F, the receive of its output gradient before B and the send of
 * its input gradient after B, then one optimizer step. The first stage receives no
 * activations and sends no gradients; the last stage sends no activations and receives no
 * gradients: its F ends in the loss, and its B starts from it. Every send on one stage is
 * paired with one receive of the same micro-batch and kind on the neighbouring stage, so a
 * stage actor runs its list top to bottom, blocking only on receives and on its edges'
 * credits (tr_job.h's: as many activations in flight as the sender holds slots, two
 * gradients), and the pipeline cannot deadlock (tests/actors/test_schedule.c simulates
 * every schedule with those credits).
 *
 *   tr_schedule *sc;
 *   if (tr_schedule_new(&sc, &(tr_schedule_config){.kind = TR_SCHEDULE_1F1B,
 *                                                  .stages = 4, .microbatches = 8}))
 *     ...;                                                // TR_EINVAL or TR_ENOMEM
 *   size_t n;
 *   const tr_action *a = tr_schedule_actions(sc, stage, &n);
 *   // open chunk c's tr_stage with tr_schedule_chunk_slots(sc, stage, c) activation slots
 *   // (st[c]), then each step:
 *   for (size_t k = 0; k < n; k++)
 *     switch (a[k].kind) {
 *     case TR_ACTION_RECV_ACT: ...  // wait for a[k].mb's activation from device a[k].peer,
 *                                   // copy it into tr_stage_input(st[a[k].chunk], a[k].slot)
 *     case TR_ACTION_FORWARD: ...   // tr_stage_forward(st[a[k].chunk], a[k].slot)
 *     ...
 *     case TR_ACTION_STEP: ...      // the gradients of all m micro-batches are accumulated
 *     }
 *   tr_schedule_free(sc);
 *
 * The schedules:
 *   gpipe  every forward, then every backward. Backwards run in micro-batch order 0..m-1,
 *          as in 1F1B, so both schedules accumulate a stage's gradient in the same order and
 *          give bitwise-identical updates; the reverse order would be no faster (with equal
 *          per-stage costs both finish in 2(m+p-1) units) and no smaller (all m micro-batches
 *          are alive either way). Each stage holds m micro-batches of activations.
 *   1f1b   PipeDream-flush. Stage s runs w = min(p-s-1, m) warm-up forwards, then alternates
 *          F(w+k), B(k) while forwards remain, then the remaining backwards. The same
 *          makespan and bubble as gpipe, but stage s holds at most min(p-s, m) micro-batches.
 *   interleaved  Megatron-LM's interleaved 1F1B (Narayanan et al. 2021). Each device holds
 *          v = `chunks` model chunks: the model is cut into p·v pieces and piece c·p + s (a
 *          virtual stage) is chunk c of device s, so a micro-batch goes device 0, 1, .., p-1,
 *          then 0 again for the next chunk, and back the same way. Device s takes micro-
 *          batches in groups of p: the forwards of a group through chunk 0, then chunk 1,
 *          ...; the backwards chunk v-1 first. It runs (p-s-1)·2 + (v-1)·p warm-up forwards,
 *          then alternates F and B, then the remaining backwards; it holds at most that many
 *          plus one (chunk, micro-batch) pairs. The bubble shrinks v times: (p-1)/(v·m + p-1)
 *          when p divides m. When it does not, the lists are those of m rounded up to a
 *          multiple of p without the micro-batches that do not exist: as safe, but the
 *          missing ones leave holes (a bubble between that and 1F1B's).
 *   zb1    Zero-bubble ZB-H1 (Qi et al. 2024). Backward splits into B, the gradient of the
 *          stage's input, which the previous stage waits for, and W, the weights' gradient,
 *          which nobody waits for. Stage s runs, for x = 0, 1, ..., m+p-2, the forward of
 *          micro-batch x, the B of x-(p-1-s) and the W of x-(p-1), each where it exists:
 *          1F1B's order of F and B, with each W put off to fill what would be idle time. A
 *          micro-batch holds its slot until its W, so every stage holds at most min(p, m):
 *          1F1B's peak (which 1F1B reaches on stage 0 only). With F, B and W of equal cost
 *          and m >= p the bubble is (p-1)/(3m + p-1), a third of 1F1B's idle time (with
 *          m < p, 1 - 3m/(2m + 2p-1): a micro-batch's way down and back is the step).
 * B and W (and gpipe's and 1f1b's backwards) run in micro-batch order on every stage and
 * chunk, so every schedule accumulates each gradient in the same order, and a cut changes no
 * layer's arithmetic: for the same m and micro-batch size, all four give bitwise-identical
 * updates.
 *
 * A micro-batch holds its activation slot on a stage (of a chunk) from its first action
 * there (the receive of its activation; on the first virtual stage its forward) to its last
 * (the send of its input gradient, its backward on the first virtual stage, or its W). The
 * generator assigns slots per chunk, so a stage actor needs no bookkeeping of its own:
 * a[k].slot is the micro-batch's slot in that chunk in every action about it. A send's
 * peer is a device; the receiver's chunk follows from the virtual stage (the same chunk,
 * but chunk c + 1 on device 0 for what device p-1 sends on, and chunk c - 1 on device p-1
 * for what device 0 sends back). Every send on a pair of devices is received in the order
 * it was sent. New schedules are a line in TR_SCHEDULE_MAP and a generator in schedule.c.
 */
#ifndef TR_SCHEDULE_H
#define TR_SCHEDULE_H

#include <stddef.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, text): the one list of schedules; `text` is what --schedule takes. */
#define TR_SCHEDULE_MAP(X)                  \
  X(TR_SCHEDULE_GPIPE, "gpipe")             \
  X(TR_SCHEDULE_1F1B, "1f1b")               \
  X(TR_SCHEDULE_INTERLEAVED, "interleaved") \
  X(TR_SCHEDULE_ZB1, "zb1")

typedef enum tr_schedule_kind {
#define TR__SCHEDULE_ENUM(name, text) name,
  TR_SCHEDULE_MAP(TR__SCHEDULE_ENUM)
#undef TR__SCHEDULE_ENUM
  TR_SCHEDULE_COUNT
} tr_schedule_kind;

/* "gpipe", "1f1b", ... ("?" for no schedule); parse: 0, or TR_EINVAL (NULL or an unknown
 * name). tr_schedule_kind_list: the names in order, "gpipe, 1f1b, interleaved or zb1". */
TR_API const char *tr_schedule_kind_name(tr_schedule_kind k);
TR_API int tr_schedule_kind_parse(const char *name, tr_schedule_kind *out);
TR_API const char *tr_schedule_kind_list(void);

/* Model chunks per device: `chunks`, or where it is 0 the kind's default (2 interleaved, else 1). */
static inline int tr_schedule_chunks(tr_schedule_kind k, int chunks) {
  return chunks ? chunks : k == TR_SCHEDULE_INTERLEAVED ? 2 : 1;
}

/* X(name, text): the one list of action kinds. BACKWARD is both halves at once; zero-bubble
 * schedules run BACKWARD_INPUT (which the gradient's send follows) and, later,
 * BACKWARD_WEIGHT instead (tr_stage_backward_input and _weight). EVAL_FORWARD and EVAL_END
 * are the runtime's own, in the stage's list of a held-out evaluation pass (its forward of
 * a held-out micro-batch, and the pass's close); no schedule emits them. */
#define TR_ACTION_MAP(X)                           \
  X(TR_ACTION_RECV_ACT, "recv_act")               \
  X(TR_ACTION_FORWARD, "forward")                 \
  X(TR_ACTION_SEND_ACT, "send_act")               \
  X(TR_ACTION_RECV_GRAD, "recv_grad")             \
  X(TR_ACTION_BACKWARD, "backward")               \
  X(TR_ACTION_SEND_GRAD, "send_grad")             \
  X(TR_ACTION_STEP, "step")                       \
  X(TR_ACTION_BACKWARD_INPUT, "backward_input")   \
  X(TR_ACTION_BACKWARD_WEIGHT, "backward_weight") \
  X(TR_ACTION_EVAL_FORWARD, "eval_forward")       \
  X(TR_ACTION_EVAL_END, "eval_end")

typedef enum tr_action_kind {
#define TR__ACTION_ENUM(name, text) name,
  TR_ACTION_MAP(TR__ACTION_ENUM)
#undef TR__ACTION_ENUM
  TR_ACTION_COUNT
} tr_action_kind;

/* "recv_act", "forward", ... ("?" for no kind). */
TR_API const char *tr_action_kind_name(tr_action_kind k);

typedef struct tr_action {
  tr_action_kind kind;
  int mb;    /* the micro-batch, 0..m-1; -1 for TR_ACTION_STEP */
  int peer;  /* sends and receives: the device at the other end (s-1 or s+1, and around the
                ring for interleaved chunks); else -1 */
  int slot;  /* the micro-batch's activation slot in this chunk; -1 for TR_ACTION_STEP */
  int chunk; /* the model chunk of this device it runs in: 0 but under interleaved */
} tr_action;

typedef struct tr_schedule_config {
  tr_schedule_kind kind;
  int stages;       /* p >= 1, one per device (interleaved: >= 2) */
  int microbatches; /* m >= 1 per optimizer step */
  int chunks;       /* v, model chunks per device: interleaved >= 2 (0: 2), the others 1
                       (0: 1) */
} tr_schedule_config;

typedef struct tr_schedule tr_schedule;

/* Generates every stage's actions. 0; TR_EINVAL for an unknown kind, p < 1, m < 1, chunks
 * the kind does not take, lists too long to count in an int, or out or c NULL (said on
 * stderr, naming the field); TR_ENOMEM. *out is NULL on failure. */
TR_API int tr_schedule_new(tr_schedule **out, const tr_schedule_config *c);
TR_API void tr_schedule_free(tr_schedule *sc); /* NULL is fine */

/* The configuration, chunks filled in. The lookups below of a NULL schedule, a stage or
 * chunk it does not have, answer NULL, 0 (*n 0) or NaN (the bubble), said on stderr. */
TR_API const tr_schedule_config *tr_schedule_config_of(const tr_schedule *sc);

/* Stage `stage`'s actions in order, *n of them (n may be NULL); the last is the optimizer
 * step. */
TR_API const tr_action *tr_schedule_actions(const tr_schedule *sc, int stage, size_t *n);

/* Stage `stage`'s actions of an evaluation pass (tr_job_config.eval): m micro-batches
 * forward only, each through every chunk in order — receive its activation, forward, send
 * its output — before the next begins, all in slot 0 (nothing is kept for a backward).
 * Micro-batch-major, so the ring of interleaved chunks carries one micro-batch at a time
 * and cannot deadlock; no step action ends it. Writes the first `cap` actions to `out` and
 * returns how many there are (cap 0, or out NULL, sizes the list). */
TR_API size_t tr_schedule_eval_actions(const tr_schedule *sc, int stage, int m, tr_action *out,
                                       size_t cap);

/* The most micro-batches whose activations `stage` holds at once, over all its chunks.
 * gpipe: m; 1f1b: min(p - stage, m); zb1: min(p, m); interleaved: at most
 * min((p-stage-1)·2 + (v-1)·p + 1, v·m). */
TR_API int tr_schedule_slots(const tr_schedule *sc, int stage);
/* The slot count to open chunk `chunk` of `stage` with (tr_stage_config): the most
 * micro-batches that chunk holds at once (with one chunk, tr_schedule_slots). */
TR_API int tr_schedule_chunk_slots(const tr_schedule *sc, int stage, int chunk);

/* The bubble fraction 1 - busy / (p × makespan) the schedule reaches when every stage's F
 * takes the same time and every B the same time (zb1: F, B and W the same time):
 * (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v·m+p-1) for interleaved (exact when p divides
 * m), (p-1)/(3m+p-1) for zb1 (m >= p; 1 - 3m/(2m+2p-1) below). */
TR_API double tr_schedule_bubble(const tr_schedule *sc);

#ifdef __cplusplus
}
#endif
#endif
