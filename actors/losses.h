/* losses.h — the run's losses, from the stages that compute them to the figures.
 *
 * A stage whose layers end in the loss copies each micro-batch's loss to the host as its
 * forward is issued (tr__loss_ring) and, once a step's copies have landed, keeps the step's
 * share (its replica's part of the global batch's mean) with the time the step ended,
 * sending them to the coordinator in chunks a few times a second (tr__loss_log). The coordinator adds the shares of each step
 * up (tr__loss_book): once every share of a step has come, in any order, the step is
 * complete, and its loss goes to whoever listens (observers' reports, the progress line)
 * and into the little the figures need afterwards — the first step's loss, and the last 1%
 * of steps for the final loss. So the coordinator keeps a window of incomplete steps and
 * that tail, not every step of a long run.
 *
 * Memory stays flat however long the run: the stage's log holds one chunk of a fixed size
 * (a full log waits for a credit of the report edge, and the stage for its ring, before it
 * trains on), every chunk message has that one size (so the allocator reuses one size
 * class instead of caching a spread of them on every thread), and the tail, exact since
 * the final loss is defined on it, is sized once when the run's length is known.
 *
 *   // a stage: each forward of the last stage, each step's end, and now and then
 *   tr__loss_ring_copy(&ring, stream, step, mb, tr_stage_loss(st, slot), run_step);
 *   tr__loss_ring_ended(&ring, step);
 *   tr__loss_ring_read(&ring, &log, steps_done, false);  // what has landed, into the log
 *   tr__loss_log_flush(&log, false);           // 1: nothing left unsent; 0: waits for credit
 *
 *   // the coordinator
 *   tr__loss_book_add(&book, msg, on_step, arg); // on_step(arg, step, loss, t) per completion
 *   r->final_loss = tr__loss_book_final(&book);
 */
#ifndef TR_LOSSES_H
#define TR_LOSSES_H

#include <stdbool.h>

#include "job_impl.h"

enum { TR__LOSS_CHUNK = 1000 }; /* entries of a log and of a chunk message, at most */

typedef struct tr__loss_log {
  tr_edge *edge;   /* to the coordinator */
  int source;      /* the sender's tr__device_index */
  tr__loss_entry *e; /* TR__LOSS_CHUNK of them */
  int n;
  uint64_t last_sent;
  bool nonfinite;  /* a loss that was not finite came: the first one's step and value */
  int64_t nonfinite_step;
  float nonfinite_loss;
} tr__loss_log;

/* 1: added; 0: the log is full (flush it first); TR_ENOMEM. */
int tr__loss_log_add(tr__loss_log *l, int64_t step, float loss, uint64_t t);
/* Sends what has gathered: a few times a second while nothing else of the sender's is in
 * flight on the edge, at once when the log is full or (`force`) once a credit is free. 1
 * when nothing is left unsent, 0 when it must wait for a credit. */
int tr__loss_log_flush(tr__loss_log *l, bool force);
void tr__loss_log_free(tr__loss_log *l);

/* Micro-batch losses on their way from the device: step p's at host[(p % ring) × m + mb],
 * read once the event recorded after the step's last copy has completed. */
enum { TR__LOSS_RING = 256 };
typedef struct tr__loss_ring {
  tr_device *dev;
  int m;                        /* micro-batches per step */
  float *host;                  /* pinned */
  tr_event *ev[TR__LOSS_RING];
  int64_t step[TR__LOSS_RING];  /* the run's step of each (a worker's differ from its own) */
  uint64_t t[TR__LOSS_RING];    /* when it ended */
  int64_t read;                 /* steps read so far */
} tr__loss_ring;

/* On the device's thread. `first`: the position of the first step (the stage's count). */
int tr__loss_ring_open(tr__loss_ring *r, tr_device *dev, int m, int64_t first);
/* Micro-batch mb's loss (a device scalar) of position `pos`, which is the run's `step`. */
int tr__loss_ring_copy(tr__loss_ring *r, tr_stream *s, int64_t pos, int mb, const float *loss,
                       int64_t step);
void tr__loss_ring_ended(tr__loss_ring *r, int64_t pos);
/* Every position before `upto` whose copies have landed, into the log, in order, while it
 * has room; with `room`, first waits for the oldest unread one if `upto` would overwrite
 * it. */
int tr__loss_ring_read(tr__loss_ring *r, tr__loss_log *log, int64_t upto, bool room);
/* Position `pos` may be written: every one a ring before it has been read. */
static inline bool tr__loss_ring_free(const tr__loss_ring *r, int64_t pos) {
  return pos - r->read < TR__LOSS_RING;
}
void tr__loss_ring_close(tr__loss_ring *r);

typedef struct tr__step_share {
  double sum;      /* of the shares come so far */
  uint64_t t;      /* the latest end among them */
  int parts;
} tr__step_share;

enum { TR__LOSS_GONE = 64 };

typedef struct tr__loss_book {
  int needed;              /* shares that make a step: the replicas (async: 1) */
  bool arrival;            /* async: a step completes as its loss arrives, in the order the
                              losses come (its number aside): workers run apart, and holding
                              a fast worker's losses until a slow one's came would take memory
                              in proportion to how far apart they are, without bound */
  int64_t first;           /* the run's first step */
  int64_t complete;        /* steps [first, first + complete) are complete */
  tr__step_share *window;  /* steps first + complete + i at [(complete + i) % wcap] */
  int64_t wcap;
  double *tail;            /* the last tcap complete steps' losses, step k at [k % tcap] */
  int64_t tcap;
  int64_t expected;        /* the run's steps, when known (the tail's size from the start) */
  double initial;          /* the first finite step's */
  int64_t gone[TR__LOSS_GONE]; /* replicas that left (local SGD, elastic): from these steps
                                  on, each sends no share */
  int ngone;
} tr__loss_book;

typedef void (*tr__on_step_fn)(void *arg, int64_t step, double loss, uint64_t t);

/* `expected`: the steps the run will have, or 0 when it is timed (the tail grows with it,
 * by an eighth at a time). `arrival`: asynchronous workers (needed 1). */
int tr__loss_book_init(tr__loss_book *b, int64_t first, int needed, bool arrival,
                       int64_t expected);
/* The shares of a chunk, whose times read `offset` ns later on this clock (another
 * process's: tr_world.h); on_step once for every step this completes, in step order (with
 * `arrival`, the order of completion: the n-th step to complete is step first + n). */
int tr__loss_book_add(tr__loss_book *b, const tr__loss_msg *m, int64_t offset,
                      tr__on_step_fn on_step, void *arg);
/* A replica left (local SGD, elastic): it sends no share of the steps from `from` on, whose
 * loss is the mean of the others' (their sum scaled by needed / theirs); steps that waited
 * for it alone complete now (on_step as in add). */
int tr__loss_book_depart(tr__loss_book *b, int64_t from, tr__on_step_fn on_step, void *arg);
/* The loss of the last complete step; the mean of the last 1% (at least one); NaN while
 * there is none. */
double tr__loss_book_last(const tr__loss_book *b);
double tr__loss_book_final(const tr__loss_book *b);
void tr__loss_book_free(tr__loss_book *b);

#endif
