/* observers.h — the coordinator's observers (tr_job_observe): each one's interval of steps
 * being gathered into a report, and the reports queued for its edge's credits.
 *
 * Each observer gets a report per `every` complete steps (and at the steps its parameters
 * are due, tr_job_snapshot), timed by when the steps ended on their stages. A report waits
 * in the observer's queue until the coordinator says it may go (the checkpoints it
 * follows on disk, its parameters at hand, its step's held-out evaluation whole) and a
 * credit has come back; one that falls far behind merges its last two reports into one,
 * so a slow observer hears of several intervals at once and the queue stays bounded.
 *
 *   tr__observer_start(&o, t_start, first_step, global_batch);
 *   if (tr__observer_add(&o, loss) || its parameters are due)       // a complete step
 *     rc = tr__observer_report(&o, step + 1, loss, t, false);
 *   tr__observer_flush(&o, ready, fill, arg);  // on every message, credits' included
 */
#ifndef TR_OBSERVERS_H
#define TR_OBSERVERS_H

#include "job_impl.h"

typedef struct tr__observer {
  tr_edge *edge;
  int every;
  double sum;           /* of the interval's finite losses */
  int64_t n, finite;    /* its steps so far, those with a finite loss */
  uint64_t from_t;      /* when the step before it ended */
  uint64_t t_start;     /* when the run started, on this process's clock */
  int64_t first, batch; /* the run's first step, its global batch */
  tr_report_msg *queue; /* waiting for a credit (the headers unused) */
  int nq, capq;
  bool told_last;
} tr__observer;

enum { TR__OBSERVER_QUEUE_MAX = 64 }; /* reports an observer may fall behind before they merge */

/* The run starts at t_start (its first step `first`, `batch` samples a step). */
void tr__observer_start(tr__observer *o, uint64_t t_start, int64_t first, int64_t batch);
/* A complete step's loss into the interval (a skipped step's, not finite, counts as a
 * step only); whether the interval has its `every` steps. */
bool tr__observer_add(tr__observer *o, double loss);
/* The interval gathered so far, as the report of `step` (the steps before it; last_loss:
 * step - 1's, ended at t), queued; a new interval begins. 0, or TR_ENOMEM. */
int tr__observer_report(tr__observer *o, int64_t step, double last_loss, uint64_t t, bool last);
/* The last report told or queued. */
bool tr__observer_last_queued(const tr__observer *o);
/* Sends what waits, in order, while `ready` says the next may go and credits last; `fill`
 * completes each message before it is sent (nonzero: the run failed, it is not sent and
 * the rest wait). */
typedef bool tr__report_ready(void *arg, const tr__observer *o, const tr_report_msg *r);
typedef int tr__report_fill(void *arg, const tr__observer *o, tr_report_msg *r);
void tr__observer_flush(tr__observer *o, tr__report_ready *ready, tr__report_fill *fill,
                        void *arg);
void tr__observer_free(tr__observer *o);

#endif
