/* snapshots.h — the parameters of a running job handed to observers in memory
 * (tr_job_snapshot), for the coordinator: each snapshot is the bytes a checkpoint of its step
 * would hold (tr__checkpoint_image), and each observer of them (a reader) gets its own open
 * view (tr_report_msg.params), which it holds until it gives that report's credit back.
 *
 *   tr__snapshots_reader(&ss, edge, every);             // wiring
 *   tr__snap_reader *rd = tr__snapshots_of(&ss, edge);  // NULL: no parameters
 *   tr__snapshots_add(&ss, step, bytes, size, err, n);  // the image of `step`, taken over
 *   if (tr__snap_ready(&ss, rd, r.step, r.last))        // a report waits for its params
 *     tr__snap_open(&ss, rd, &r);                       // r.params: a view the reader holds
 *   rc = tr__snapshots_given(&ss, self);                // credits back: views closed, and the
 *                                                       // bytes no reader wants any more freed
 * A NULL reader (an observer of no parameters) wants none.
 */
#ifndef TR_SNAPSHOTS_H
#define TR_SNAPSHOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_checkpoint.h"
#include "tr_graph.h"
#include "tr_protocol.h"

enum { TR__SNAP_HELD = 8 }; /* reports in flight to one observer at most (its edge's credits) */

/* An observer's side: its edge and cadence, and the views of the reports it has not given
 * back, oldest first (NULL where a report carried none). */
typedef struct tr__snap_reader {
  tr_edge *edge;
  int every;
  int64_t passed; /* the step of the last report sent to it (-1: none): it wants none before
                     (its last report may be of that step again) */
  bool done;      /* it has had its last report */
  struct {
    tr_checkpoint *view;
    int64_t step;
  } held[TR__SNAP_HELD];
  int head, n;
} tr__snap_reader;

typedef struct tr__snapshot {
  int64_t step;
  void *bytes; /* a checkpoint's file image, malloc'd */
  size_t size;
  int views;   /* open over bytes (readers hold them) */
} tr__snapshot;

typedef struct tr__snapshots {
  tr__snapshot *s;
  int n, cap;
  tr__snap_reader **readers;
  int nreaders;
  int failed;     /* a view that could not be opened (TR_ENOMEM), and why */
  char err[256];
} tr__snapshots;

/* Whether a report of `step` (`last`: the run's last) to `r` carries the parameters. */
static inline bool tr__snap_wants(const tr__snap_reader *r, int64_t step, bool last) {
  return r && (last || step % r->every == 0);
}

/* The reader of the observer on `edge` (made, or found), its reports at multiples of
 * `every` (>= 1) carrying the parameters; NULL: out of memory. */
tr__snap_reader *tr__snapshots_reader(tr__snapshots *ss, tr_edge *edge, int every);
/* The reader on `edge`, or NULL (its reports carry no parameters). */
tr__snap_reader *tr__snapshots_of(const tr__snapshots *ss, const tr_edge *edge);
/* Takes `bytes` over (freed with the store, or now on a failure). 0, or TR_ENOMEM with
 * err saying so. */
int tr__snapshots_add(tr__snapshots *ss, int64_t step, void *bytes, size_t size, char *err,
                      size_t err_size);
/* Whether the report of `step` to `r` may go: it wants no parameters, or they are here. */
bool tr__snap_ready(const tr__snapshots *ss, const tr__snap_reader *r, int64_t step, bool last);
/* The report `rep` goes to `r`: its params (a view of its step's snapshot where it wants
 * one, else NULL), held until its credit comes back. 0, or a status (kept for
 * tr__snapshots_given to fail the run with). */
int tr__snap_open(tr__snapshots *ss, tr__snap_reader *r, tr_report_msg *rep);
/* The views of the reports given back (their edges' credits) closed; then the snapshots
 * of steps before every reader's `passed` (or of readers done) that no view holds, freed.
 * 0, or the failure of a view, `self` failed with it. */
int tr__snapshots_given(tr__snapshots *ss, tr_actor *self);
/* Every view closed, every snapshot and reader freed. */
void tr__snapshots_free(tr__snapshots *ss);

#endif
