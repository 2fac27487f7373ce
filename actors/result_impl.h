/* result_impl.h — a run's tr_result from the inside: the library fills it row by row, by the
 * table's ids (run_metrics.h), and reads what it kept; the public getters (tr_result.h) read
 * it by key. It holds a value of every row: one, one per device (of any number of devices),
 * or a list, as the row's shape says; texts of any length.
 *
 *   tr_result *r = tr__result_new("simplenet", "dp");
 *   if (r == NULL || tr__result_set_devices(r, 2)) ...;          // out of memory
 *   tr__result_set_int(r, TR__M_STEPS, 100);
 *   tr__result_set_real_at(r, TR__M_UTILIZATION, 1, 0.75);
 *   double u = tr__result_real_at(r, TR__M_UTILIZATION, 1);
 *
 * What it keeps is the row's value as measured or set (a schedule "" where there is none, an
 * evaluation's step -1); what the getters and the JSON read goes through the row's scope and
 * functions (tr__result_read): "schedule" is then null. The view, tr_train_result, is filled
 * from and read back into it by the table's offsets (tr__result_view, tr__result_of_view).
 */
#ifndef TR_RESULT_IMPL_H
#define TR_RESULT_IMPL_H

#include "run_metrics.h"

/* A result of no devices: the model and the strategy, every other figure as before a run
 * measured it (reals not a number, but for "seconds", the caller's yardstick and the
 * prediction's, which are 0; "ranks" 1, "eval.step" -1; other integers 0, texts ""). NULL:
 * out of memory. */
tr_result *tr__result_new(const char *model, const char *strategy);
/* Gives the result `n` devices: every per-device row gets n values, reals not a number and
 * integers 0 (what was there before is dropped). 0, or TR_ENOMEM. */
int tr__result_set_devices(tr_result *r, int n);
int tr__result_devices(const tr_result *r);

/* Sets row `id` (one value, of the row's type). Text is copied: 0, or TR_ENOMEM (the row
 * then keeps its text). */
void tr__result_set_int(tr_result *r, tr__metric_id id, int64_t v);
void tr__result_set_real(tr_result *r, tr__metric_id id, double v);
int tr__result_set_text(tr_result *r, tr__metric_id id, const char *text);
/* Device i's value of a per-device row (0 <= i < the devices). */
void tr__result_set_int_at(tr_result *r, tr__metric_id id, int i, int64_t v);
void tr__result_set_real_at(tr_result *r, tr__metric_id id, int i, double v);
/* A list row's values (integers: the cuts, the histogram's bins). 0, or TR_ENOMEM. */
int tr__result_set_list(tr_result *r, tr__metric_id id, const int64_t *v, int n);

/* What row `id` keeps (the row's type; an integer row read as a real converts). */
int64_t tr__result_int(const tr_result *r, tr__metric_id id);
double tr__result_real(const tr_result *r, tr__metric_id id);
const char *tr__result_text(const tr_result *r, tr__metric_id id); /* never NULL */
int64_t tr__result_int_at(const tr_result *r, tr__metric_id id, int i);
double tr__result_real_at(const tr_result *r, tr__metric_id id, int i);
int tr__result_length(const tr_result *r, tr__metric_id id); /* a list's (values kept) */

/* ---- reading, as the getters, the JSON and the summary do ------------------------------- */

/* One value of a row as the result reads it: none (null), or its text or number (`i` and
 * `f` both set for numbers; a row with a `real` function reads as that function's value). */
typedef struct tr__cell {
  bool null;
  int64_t i;
  double f;
  const char *text;
} tr__cell;

/* Whether row `id` applies to the run (its scope), and if so whether it reads null as a
 * whole; its values (1, the devices, the list's length read: a histogram's up to its last
 * bin that is not 0, the cuts of a run of more than one piece); value i of it (-1: a
 * one-value row's). The type it reads as: NAME rows are text. */
bool tr__result_applies(const tr_result *r, tr__metric_id id);
bool tr__result_null(const tr_result *r, tr__metric_id id);
int tr__result_count(const tr_result *r, tr__metric_id id);
tr__cell tr__result_read(const tr_result *r, tr__metric_id id, int i);
tr_figure_type tr__metric_type(const tr__metric *m);
/* Replica g's sum over its devices of a REPLICA row ("memory.params"): a replica's devices
 * are stages × tensor members side by side. The replicas: the devices / a replica's. */
int64_t tr__result_replica_sum(const tr_result *r, tr__metric_id id, int g);
int tr__result_replicas(const tr_result *r);

/* ---- the view ---------------------------------------------------------------------------- */

/* The deprecated struct from the result (rows where the struct holds them, devices up to 64,
 * texts cut to their fields, memory.replicas the sums), and a result from such a struct
 * (NULL: out of memory). */
void tr__result_view(const tr_result *r, tr_train_result *out);
tr_result *tr__result_of_view(const tr_train_result *v);

#endif
