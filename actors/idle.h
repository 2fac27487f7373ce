/* idle.h — where a device's time goes when it is not busy. Every gap between its work (from
 * the end of one range of work to the start of the next) is split by what the actor waited
 * for and by who held it up:
 *
 *   work begins:    tr__idle_work(&idle, now);     // tr__busy_start: the gap closes
 *   work ends:      tr__idle_rest(&idle, now);     // tr__busy_add: a gap opens
 *   it must wait:   tr__idle_block(&idle, TR__WAIT_EDGE, step, now); // run_actions stopped
 *   each message:   tr__idle_heard(&idle, msg);    // its edge's send stamp (tr_msg.sent_ns)
 *
 * A gap is, in time order: `handling` (the actor's own work before it stopped: sending,
 * bookkeeping), then, if it stopped, `waiting` until the newest message it handled since was
 * sent (the producer had not produced it yet: charged to what it waited for), then
 * `handover` from that send to the work (the message in the mailbox, the thread's wake-up,
 * its handling). The kernel's run-queue delay of the thread from the stop to the work (the
 * time it was runnable and not running: /proc/thread-self/schedstat, read at each stop and
 * at its end — a system call of about a microsecond, so not at every gap: a tiny model's
 * gaps without a stop would pay it twice a range) is the `os` kind, taken out of the
 * handover first (a woken thread that waits for a core), then out of the waiting. A message
 * sent before the actor stopped leaves no waiting; a stop whose messages carry no stamp is
 * all waiting.
 *
 * Only gaps after the measured window opened count (tr__idle_open, with the busy window); the
 * last closes at the window's end. A device's kinds, its busy time and the rest (`other`: the
 * ends of the run's window that are not the device's own) make the run's window; the
 * coordinator turns them into fractions (the result's "idle_breakdown"). When the thread records a
 * trace, each stop is a range of category "idle" named by what it waited for. */
#ifndef TR_IDLE_H
#define TR_IDLE_H

#include <stdint.h>

#include "run_metrics.h"
#include "tr_graph.h"
#include "tr_schedule.h"
#include "tr_trace.h"

/* What an idle span waited for; X(id, the trace's range name). */
#define TR__WAITS(X)                                                                           \
  X(EDGE, "wait edge")       /* a neighbour's activation or gradient not yet sent */          \
  X(CREDIT, "wait credit")   /* a credit to send: the receiver still held its buffers */      \
  X(LOADER, "wait loader")   /* a batch the loader (on the loop thread) had not yet sent */   \
  X(STEP, "wait step")       /* the step's begin, the group's sums, the coordinator */

typedef enum tr__wait {
#define TR__WAIT_ENUM(id, name) TR__WAIT_##id,
  TR__WAITS(TR__WAIT_ENUM)
#undef TR__WAIT_ENUM
  TR__WAIT_COUNT
} tr__wait;

/* The kinds of idle time counted: each reason's waiting, then the handover, the handling and
 * the OS's — the order of the run metrics' IDLE_*_NS measures and of their fractions, IDLE_*. */
enum { TR__IDLE_HANDOVER = TR__WAIT_COUNT, TR__IDLE_HANDLING, TR__IDLE_OS, TR__IDLE_KINDS };
_Static_assert(TR__M_IDLE_OS_NS - TR__M_IDLE_EDGE_NS == TR__IDLE_OS &&
                   TR__M_IDLE_HANDLING_NS - TR__M_IDLE_EDGE_NS == TR__IDLE_HANDLING &&
                   TR__M_IDLE_STEP_NS - TR__M_IDLE_EDGE_NS == TR__WAIT_STEP,
               "the IDLE_*_NS measures in run_metrics.h follow idle.h's kinds");
_Static_assert(TR__M_IDLE_OS - TR__M_IDLE_EDGE == TR__IDLE_OS &&
                   TR__M_IDLE_HANDLING - TR__M_IDLE_EDGE == TR__IDLE_HANDLING &&
                   TR__M_IDLE_STEP - TR__M_IDLE_EDGE == TR__WAIT_STEP &&
                   TR__M_IDLE_OTHER - TR__M_IDLE_EDGE == TR__IDLE_KINDS,
               "the IDLE_* fractions in run_metrics.h follow idle.h's kinds, then other");

typedef struct tr__idle {
  tr_actor *self;        /* for the trace's ranges */
  int depth;             /* ranges of work open (one may hold another: a bucket's sum) */
  uint64_t gap;          /* when the open gap began; 0: none is open */
  uint64_t stopped;      /* when the actor stopped in it; 0: it has not */
  uint64_t delay_stop;   /* the thread's run-queue delay then */
  tr__wait why;
  int64_t step;          /* the stop's step (the trace's window) */
  uint64_t sent;         /* the newest send stamp heard since it stopped */
  uint64_t window_start; /* gaps count from here (0: the window is not open yet) */
  uint64_t ns[TR__IDLE_KINDS];
  int schedstat;         /* /proc/thread-self/schedstat, -1: not on this system */
} tr__idle;

/* On the actor's own thread (its start callback): the thread's counters are its own. Gaps
 * count from `start` until the window opens (a run too short to warm up counts them all). */
void tr__idle_begin(tr__idle *d, tr_actor *self, uint64_t start);
void tr__idle_end(tr__idle *d);
/* The measured window opens now: what was counted before is forgotten. */
void tr__idle_open(tr__idle *d, uint64_t now);
/* Work begins at `now` (the gap open, if any, is counted) or ends (a gap opens once no work
 * is left open). */
void tr__idle_work(tr__idle *d, uint64_t now);
void tr__idle_rest(tr__idle *d, uint64_t now);
/* What an action that cannot run yet waits for: its input from a neighbour (EDGE) or the
 * loader (a forward's batch), a credit (a send, a backward whose gradient buffer is still
 * lent), the step's sums or go (the step action). */
tr__wait tr__idle_wait_of(tr_action_kind kind);
/* The actor stopped at `now`, at step `step`, for want of `why` (once stopped, the first
 * reason holds). */
void tr__idle_block(tr__idle *d, tr__wait why, int64_t step, uint64_t now);
/* A message was handled: its send stamp, when it is the newest since the actor stopped. */
void tr__idle_heard(tr__idle *d, const tr_msg *m);
/* The time since the gap opened went to work that is no training's (a held-out evaluation):
 * not counted; the gap begins again now. */
void tr__idle_forget(tr__idle *d);
/* The kinds counted (the last gap closed first: tr__idle_work at the window's end). */
void tr__idle_totals(const tr__idle *d, uint64_t out[TR__IDLE_KINDS]);
/* The bubble of one step of `sc` simulated (tr_plan_simulate) with the stages' own work: each
 * stage's (replica 0's, tensor member 0's) forwards, backwards and W halves over the window's
 * `steps` × `microbatches`, split evenly over its chunks, and its step's own work; messages
 * cost nothing. NaN where it cannot say (no steps, a schedule the simulation refuses). */
double tr__idle_schedule_bubble(const tr_schedule *sc, const tr__reduced *red, int stages,
                                int members, int microbatches, int64_t steps);
/* Device i's kinds reduced (its row of tr__reduced: tr__reduced_device) into the result's
 * fractions of the run's window ("idle_breakdown.*" of device i), `other` what busy time
 * (utilization) and the kinds leave of it. */
void tr__idle_result(const tr__value *device, double window, double utilization, tr_result *r,
                     int i);

#endif
