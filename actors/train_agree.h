/* train_agree.h — the ranks' comparison of their options (train_agree.c), for train.c. */
#ifndef TR_TRAIN_AGREE_H
#define TR_TRAIN_AGREE_H
#include <stdbool.h>
#include <stddef.h>

#include "tr_train.h"

/* Every rank compares what it was given with rank 0's before any opens a device; `rc` is
 * this rank's own verdict so far (`model` NULL where it failed). Sets *observed to rank 0's
 * (whether it was given an observer). 0, or a failure naming the options and the ranks
 * that differ, or the first rank that could not read its options; `rc` when it is one. */
int tr__train_agree(const tr_model *model, const tr_train_options *o, int rc, bool *observed,
                    char *err, size_t n);

#endif
