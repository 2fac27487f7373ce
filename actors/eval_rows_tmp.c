/* eval_rows_tmp.c — TEMPORARY: tr_data_rows (tr_data.h) as an endless source's answer, 0,
 * until models/data.c defines it for every source (the `split` branch). Held-out
 * evaluation reads it where eval.samples is 0. Deleted when that branch is merged. */
#include "tr_data.h"

int64_t tr_data_rows(const tr_data *d) {
  (void)d;
  return 0;
}
