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

/* The links between the ranks, timed now by every rank together (each calls it at the same
 * point of its collectives): for each of the n sizes bytes[i] (multiples of 4), the seconds a
 * message of them takes from rank 0 to rank 1 (half a round trip) and an MPI sum of as many
 * bytes of floats over every rank, each the median of several after a warm-up, rank 0's
 * figures on every rank. 0; TR_EINVAL for a world of one; TR_ENOMEM (every rank, when one
 * is short) or TR_ESYS. */
int tr__world_time_links(tr_world *w, const size_t *bytes, int n, double *message, double *sum);

#endif
