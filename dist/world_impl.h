/* world_impl.h — the inside of a tr_world, for dist/ alone (the transport takes its
 * communicator). */
#ifndef TR_WORLD_IMPL_H
#define TR_WORLD_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include <mpi.h>

#include "lifelines.h"
#include "world.h"

struct tr_world {
  int rank, size;
  bool mpi;         /* MPI was initialised here (and is finalised at close) */
  char kind[64];
  int64_t *clock_offset; /* [rank]: add to that rank's tr_now_ns() for this rank's clock */
  bool broken;      /* a run across its ranks failed: it ends with MPI_Abort */
  MPI_Comm comm;    /* a duplicate of MPI_COMM_WORLD for troupe's own traffic, errors returned */
  tr__lifelines *lifelines; /* a connection to every other rank, whose close says it ended */
  /* which rank owns each device of the lists tr_world_devices made (the device layer knows
   * nothing of ranks): newest last */
  struct tr__world_owner {
    const tr_device *dev;
    int rank;
  } *owners;
  int nowners;
};

#endif
