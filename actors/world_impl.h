/* world_impl.h — the inside of a tr_world, for the graph and its transport (private to
 * actors/). */
#ifndef TR_WORLD_IMPL_H
#define TR_WORLD_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "tr_world.h"

#ifdef TR_HAVE_MPI
#include <mpi.h>
#endif

struct tr_world {
  int rank, size;
  bool mpi;         /* MPI was initialised here (and is finalised at close) */
  char kind[64];
  int64_t *clock_offset; /* [rank]: add to that rank's tr_now_ns() for this rank's clock */
  bool broken;      /* a run across its ranks failed: it ends with MPI_Abort */
#ifdef TR_HAVE_MPI
  MPI_Comm comm;    /* a duplicate of MPI_COMM_WORLD for troupe's own traffic, errors returned */
#endif
};

/* A run across the ranks failed here: the others may never reach MPI_Finalize, so closing
 * the world ends them all (MPI_Abort). */
void tr__world_broken(tr_world *w);
/* What to add to a time (tr_now_ns) taken on `rank` to read it on this rank's clock. */
int64_t tr__world_clock_offset(const tr_world *w, int rank);

#endif
