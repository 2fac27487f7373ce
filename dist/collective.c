/* collective.c — the rounds that agree NCCL communicators' ids across ranks (collective.h),
 * and the types of the replica groups' sum protocol, whose sums transport.c runs. */
#include <stdlib.h>

#include "collective.h"

TR_MSGTYPE_DEFINE(tr__sum_type, tr__sum_msg);
TR_MSGTYPE_DEFINE(tr__summed_type, tr__summed_msg);

int tr__dist_comm_round(tr_world *w, int owner, bool yes, tr__comm_word **all, char *why,
                        size_t size) {
  tr__comm_word mine = {0};
  if (yes)
    mine.yes = tr_world_rank(w) != owner ||
               tr_comm_id_new(TR_DEVICE_CUDA, &mine.id, why, size) == 0;
  if (!(*all = calloc((size_t)tr_world_size(w), sizeof **all))) return TR_ENOMEM;
  if (tr_world_allgather(w, &mine, sizeof mine, *all) == 0) return 0;
  free(*all);
  *all = NULL;
  return TR_ESYS;
}
