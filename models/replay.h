/* replay.h — when a stage replays its work from a CUDA graph (tr_capture, tr_device.h), and
 * which captures it keeps: the decisions alone, with no device call, so that they are tested
 * on any machine (tests/models/test_replay.c).
 *
 * A stage's pass (the forward of a micro-batch, its backward, one of the backward's halves)
 * queues the same kernels with the same pointers every step as long as its key is the same:
 * the pass, the slot, which of the two input-gradient buffers it writes and whether it
 * trains. Each key runs eagerly the first time (allocations grow, cuBLAS settles), is
 * captured the second time, and replayed from then on. A capture that fails turns the
 * stage's replays off for good: its passes run eagerly, the failure said once.
 *
 *   tr_capture *g;
 *   switch (tr__replay_next(&r, key, &g)) {
 *   case TR__REPLAY_EAGER: rc = pass(st); break;
 *   case TR__REPLAY_CAPTURE: ... tr__replay_keep(&r, key, g) or tr__replay_fail(&r, why) ...
 *   case TR__REPLAY_LAUNCH: rc = tr_capture_launch(g, s); break;
 *   }
 *   tr__replay_forget(&r, tr_capture_close);   // pointers changed: capture again
 */
#ifndef TR_REPLAY_H
#define TR_REPLAY_H

#include <stdint.h>

#include "tr_device.h"

typedef enum tr__replay_verdict {
  TR__REPLAY_EAGER,   /* run the pass as it is */
  TR__REPLAY_CAPTURE, /* record the pass (then keep or fail), and run it from the capture */
  TR__REPLAY_LAUNCH   /* launch the capture kept for the key */
} tr__replay_verdict;

/* The passes a key names. */
enum { TR__PASS_FORWARD, TR__PASS_BACKWARD, TR__PASS_BACKWARD_INPUT, TR__PASS_BACKWARD_WEIGHT };

/* The captures a stage keeps at most: past them, new keys run eagerly. */
enum { TR__REPLAY_MAX = 512 };

typedef struct tr__replay_entry {
  uint64_t key;
  tr_capture *g; /* NULL: run once, to be captured next */
} tr__replay_entry;

typedef struct tr__replay {
  int on;                  /* asked for, and the device captures */
  int failed;              /* a capture failed: eager from then on */
  tr__replay_entry *e;
  int n, cap;
  int64_t captures, launches; /* for figures and tests */
  char why[256];           /* the failure, as tr__replay_fail was told it */
} tr__replay;

/* pass, slot, parity (0 or 1), training (0 or 1) */
uint64_t tr__replay_key(int pass, int slot, int parity, int training);
tr__replay_verdict tr__replay_next(tr__replay *r, uint64_t key, tr_capture **g);
/* The capture of `key` (after TR__REPLAY_CAPTURE) is `g`, launched from now on. */
void tr__replay_keep(tr__replay *r, uint64_t key, tr_capture *g);
/* The capture went wrong (why: what failed): replays stop. 1 the first time (the caller
 * says so), 0 after. Closes nothing: tr__replay_forget does. */
int tr__replay_fail(tr__replay *r, const char *why);
/* Drops every capture (close: how, on the owner thread); keys run eagerly once again. */
void tr__replay_forget(tr__replay *r, void (*close)(tr_capture *));
/* forget, and the table freed. */
void tr__replay_free(tr__replay *r, void (*close)(tr_capture *));

#endif
