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
 * stage actor runs its list top to bottom, blocking only on receives, and the pipeline
 * cannot deadlock.
 *
 *   tr_schedule *sc;
 *   if (tr_schedule_new(&sc, &(tr_schedule_config){.kind = TR_SCHEDULE_1F1B,
 *                                                  .stages = 4, .microbatches = 8}))
 *     ...;                                                // TR_EINVAL or TR_ENOMEM
 *   size_t n;
 *   const tr_action *a = tr_schedule_actions(sc, stage, &n);
 *   // open the stage with tr_schedule_slots(sc, stage) activation slots, then each step:
 *   for (size_t k = 0; k < n; k++)
 *     switch (a[k].kind) {
 *     case TR_ACTION_RECV_ACT: ...  // wait for a[k].mb's activation from stage a[k].peer,
 *                                   // copy it into tr_stage_input(st, a[k].slot)
 *     case TR_ACTION_FORWARD: ...   // tr_stage_forward(st, a[k].slot)
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
 * With equal per-stage costs the bubble fraction of both is (p-1)/(m+p-1), whatever the
 * ratio of backward to forward time (tr_schedule_bubble).
 *
 * A micro-batch holds its activation slot on a stage from its first action there (the
 * receive of its activation; on stage 0 its forward) to its last (the send of its input
 * gradient; on stage 0 its backward). The generator assigns slots, so a stage actor needs
 * no bookkeeping of its own: a[k].slot is the micro-batch's slot in every action about it.
 *
 * Room for what comes later. Interleaved 1F1B puts v model chunks on each device (virtual
 * stage chunk*p + s): it adds `chunks` to tr_schedule_config (0 meaning 1, so today's
 * callers are unchanged), and its actions carry the chunk they run in tr_action.chunk (0 in
 * every schedule here); a send's peer is still a device, its receiver's chunk follows from
 * the virtual stage. Zero-bubble schedules split B into the input gradient (which the
 * gradient send follows) and a later weight gradient: they append TR_ACTION_BACKWARD_INPUT
 * and TR_ACTION_BACKWARD_WEIGHT to the action kinds, and a slot is then released after the
 * weight gradient. TR_ACTION_BACKWARD keeps meaning both halves at once. New schedules are
 * a line in TR_SCHEDULE_MAP and a generator in schedule.c.
 */
#ifndef TR_SCHEDULE_H
#define TR_SCHEDULE_H

#include <stddef.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, text): the one list of schedules; `text` is what --schedule takes. */
#define TR_SCHEDULE_MAP(X)        \
  X(TR_SCHEDULE_GPIPE, "gpipe")  \
  X(TR_SCHEDULE_1F1B, "1f1b")

typedef enum tr_schedule_kind {
#define TR__SCHEDULE_ENUM(name, text) name,
  TR_SCHEDULE_MAP(TR__SCHEDULE_ENUM)
#undef TR__SCHEDULE_ENUM
  TR_SCHEDULE_COUNT
} tr_schedule_kind;

/* "gpipe", "1f1b" ("?" for no schedule); parse: 0, or TR_EINVAL (NULL or an unknown name). */
const char *tr_schedule_kind_name(tr_schedule_kind k);
int tr_schedule_kind_parse(const char *name, tr_schedule_kind *out);

/* X(name, text): the one list of action kinds. */
#define TR_ACTION_MAP(X)               \
  X(TR_ACTION_RECV_ACT, "recv_act")   \
  X(TR_ACTION_FORWARD, "forward")     \
  X(TR_ACTION_SEND_ACT, "send_act")   \
  X(TR_ACTION_RECV_GRAD, "recv_grad") \
  X(TR_ACTION_BACKWARD, "backward")   \
  X(TR_ACTION_SEND_GRAD, "send_grad") \
  X(TR_ACTION_STEP, "step")

typedef enum tr_action_kind {
#define TR__ACTION_ENUM(name, text) name,
  TR_ACTION_MAP(TR__ACTION_ENUM)
#undef TR__ACTION_ENUM
  TR_ACTION_COUNT
} tr_action_kind;

/* "recv_act", "forward", ... ("?" for no kind). */
const char *tr_action_kind_name(tr_action_kind k);

typedef struct tr_action {
  tr_action_kind kind;
  int mb;    /* the micro-batch, 0..m-1; -1 for TR_ACTION_STEP */
  int peer;  /* sends and receives: the stage at the other end (s-1 or s+1); else -1 */
  int slot;  /* the micro-batch's activation slot on this stage; -1 for TR_ACTION_STEP */
  int chunk; /* the model chunk on this device this runs in: 0 until interleaved schedules */
} tr_action;

typedef struct tr_schedule_config {
  tr_schedule_kind kind;
  int stages;       /* p >= 1, one per device */
  int microbatches; /* m >= 1 per optimizer step */
} tr_schedule_config;

typedef struct tr_schedule tr_schedule;

/* Generates every stage's actions. 0; TR_EINVAL for an unknown kind, p < 1, m < 1 or lists
 * too long to count in an int; TR_ENOMEM. *out is NULL on failure. */
int tr_schedule_new(tr_schedule **out, const tr_schedule_config *c);
void tr_schedule_free(tr_schedule *sc); /* NULL is fine */

const tr_schedule_config *tr_schedule_config_of(const tr_schedule *sc);

/* Stage `stage`'s actions in order, *n of them; the last is the optimizer step. */
const tr_action *tr_schedule_actions(const tr_schedule *sc, int stage, size_t *n);

/* The most micro-batches whose activations `stage` holds at once: the slot count to open it
 * with (tr_stage_config). gpipe: m; 1f1b: min(p - stage, m). */
int tr_schedule_slots(const tr_schedule *sc, int stage);

/* The bubble fraction 1 - busy / (p × makespan) the schedule reaches when every stage's F
 * takes the same time and every B the same time: (p-1)/(m+p-1) for gpipe and 1f1b. */
double tr_schedule_bubble(const tr_schedule *sc);

#ifdef __cplusplus
}
#endif
#endif
