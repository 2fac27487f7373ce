/* stage_passes.c — a stage's passes run eagerly, or recorded once and replayed from CUDA
 * graphs (tr_stage_config.graphs): which passes may be replayed, the recording that falls
 * back to eager passes when anything in it fails, and the switch's names and figures. The
 * passes themselves are stage.c's. */
#include <stdbool.h>
#include <stdio.h>

#include "stage_impl.h"

/* ---- passes, eagerly or from CUDA graphs ------------------------------------------------------
 *
 * A pass queues a micro-batch's work on the stage's stream and changes nothing on the host:
 * run eagerly, recorded (and dropped when the recording fails) or replayed, it leaves the
 * device in the same state. What a pass needs from the host that may differ from step to
 * step (which input-gradient buffer, the hook, the bf16 weights' conversion) is decided
 * before it, outside. */

/* Whether a pass may be replayed: nothing in it depends on more than its key. */
static bool replayable(const tr_stage *st, int pass) {
  if (!st->replay.on || (st->training && st->draws)) return false; /* masks move with samples */
  if (st->tensor) return false; /* a tensor group's members meet on the host in each pass */
  return !st->ready || pass == TR__PASS_FORWARD || pass == TR__PASS_BACKWARD_INPUT;
}

/* The pass recorded, then run from the recording; when anything fails on the way, replays
 * stop and the pass runs eagerly, once: nothing of a failed recording has run. */
static int capture_pass(tr_stage *st, uint64_t key, tr__pass_fn fn, int slot, float *dfirst) {
  char why[256] = "";
  int rc = tr_capture_begin(st->s);
  if (rc == 0) {
    rc = fn(st, slot, dfirst); /* recorded, not run */
    if (rc) snprintf(why, sizeof why, "%.250s", st->err);
    if (!rc && st->replay_fail_next) {
      rc = TR_EDEVICE;
      snprintf(why, sizeof why, "a failure asked for (tr_stage_graphs_fail_next)");
    }
    st->replay_fail_next = 0;
    tr_capture *g = NULL;
    const int erc = tr_capture_end(st->s, rc ? NULL : &g); /* always ends the recording */
    if (!rc && erc) rc = erc;
    if (rc == 0) {
      tr__replay_keep(&st->replay, key, g);
      rc = tr_capture_launch(g, st->s);
      return rc ? tr__stage_fail(st, rc, "launching a captured pass") : 0;
    }
  }
  if (!why[0]) snprintf(why, sizeof why, "%.250s", tr_device_error(st->dev));
  char note[sizeof st->replay.why];
  snprintf(note, sizeof note, "stage [%d,%d) on %s: capturing a pass failed, its passes run "
           "eagerly: %.160s", st->info.first, st->info.end, tr_device_name(st->dev), why);
  tr__replay_fail(&st->replay, note);
  tr__replay_forget(&st->replay, tr_capture_close);
  st->err[0] = 0;
  return fn(st, slot, dfirst);
}

int tr__stage_run_pass(tr_stage *st, int pass, int slot, int parity, tr__pass_fn fn, float *dfirst) {
  if (!replayable(st, pass)) return fn(st, slot, dfirst);
  const uint64_t key = tr__replay_key(pass, slot, parity, st->training);
  tr_capture *g;
  switch (tr__replay_next(&st->replay, key, &g)) {
  case TR__REPLAY_LAUNCH: {
    const int rc = tr_capture_launch(g, st->s);
    return rc ? tr__stage_fail(st, rc, "launching a captured pass") : 0;
  }
  case TR__REPLAY_CAPTURE: return capture_pass(st, key, fn, slot, dfirst);
  case TR__REPLAY_EAGER: break;
  }
  return fn(st, slot, dfirst);
}

/* ---- CUDA graphs: the switch and the figures ------------------------------------------------ */

static const char *const graphs_names[] = {
#define TR__GRAPHS_NAME(name, text) text,
    TR_GRAPHS_MAP(TR__GRAPHS_NAME)
#undef TR__GRAPHS_NAME
};

const char *tr_graphs_name(tr_graphs g) {
  return tr__name_of(graphs_names, TR__COUNTOF(graphs_names), (int)g);
}

int tr_graphs_parse(const char *name, tr_graphs *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(graphs_names, TR__COUNTOF(graphs_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_graphs)i, 0);
}

tr_stage_graphs_figures tr_stage_graphs(const tr_stage *st) {
  if (st == NULL) return (tr_stage_graphs_figures){.note = ""};
  return (tr_stage_graphs_figures){.captures = st->replay.captures,
                                   .launches = st->replay.launches,
                                   .note = st->replay.failed ? st->replay.why : ""};
}

void tr_stage_graphs_fail_next(tr_stage *st) {
  if (st == NULL) return (void)tr__misuse(0, "tr_stage_graphs_fail_next: st is NULL");
  st->replay_fail_next = 1;
}
