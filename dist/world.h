/* world.h — what the parts above dist/ ask of the world beyond tr_world.h (internal to the
 * library): that a run across its ranks failed, and how the ranks' clocks compare.
 *
 * Built with MPI, world.c answers; without it (-Dmpi=disabled: nothing of dist/ is compiled)
 * actors/world_solo.c does, for a world of one process.
 */
#ifndef TR_DIST_WORLD_H
#define TR_DIST_WORLD_H

#include <stdint.h>

#include "tr_world.h"

/* A run across the ranks failed here: the others may never reach MPI_Finalize, so closing
 * the world ends them all (MPI_Abort). */
void tr__world_broken(tr_world *w);
/* What to add to a time (tr_now_ns) taken on `rank` to read it on this rank's clock. */
int64_t tr__world_clock_offset(const tr_world *w, int rank);

#endif
