/* world_links.c — the links between the ranks of a world, timed (world.h:
 * tr__world_time_links): what the planner fits a message's and a sum's latency and bandwidth
 * from (actors/costs_ranks.c). Raw MPI on the world's own communicator, before any graph
 * runs on it: a ping-pong between ranks 0 and 1 (the others wait at the barriers), and
 * MPI_Allreduce over every rank, as the transport sends edges' messages and the replica
 * groups' summers sum their buckets. */
#include <stdlib.h>

#include "world_impl.h"

enum { REPS = 7, TAG = 0x7e11 };

static double median(double *v, int n) {
  tr__sort_doubles(v, (size_t)n);
  return v[n / 2];
}

/* A round trip of `bytes` between ranks 0 and 1 (the others have nothing to do). */
static int round_trip(tr_world *w, void *buf, size_t bytes) {
  const int c = (int)bytes;
  int rc = MPI_SUCCESS;
  if (w->rank == 0) {
    rc = MPI_Send(buf, c, MPI_BYTE, 1, TAG, w->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Recv(buf, c, MPI_BYTE, 1, TAG, w->comm, MPI_STATUS_IGNORE);
  } else if (w->rank == 1) {
    rc = MPI_Recv(buf, c, MPI_BYTE, 0, TAG, w->comm, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS) rc = MPI_Send(buf, c, MPI_BYTE, 0, TAG, w->comm);
  }
  return rc;
}

/* An MPI sum of `bytes` of floats over every rank. */
static int sum(tr_world *w, void *buf, size_t bytes) {
  return MPI_Allreduce(MPI_IN_PLACE, buf, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                       w->comm);
}

/* The median seconds of REPS of `once` after one, every rank starting each together. */
static int time_median(tr_world *w, int (*once)(tr_world *, void *, size_t), void *buf,
                       size_t bytes, double *seconds) {
  double t[REPS];
  for (int rep = -1; rep < REPS; rep++) {
    if (MPI_Barrier(w->comm) != MPI_SUCCESS) return TR_ESYS;
    const double t0 = MPI_Wtime();
    if (once(w, buf, bytes) != MPI_SUCCESS) return TR_ESYS;
    if (rep >= 0) t[rep] = MPI_Wtime() - t0;
  }
  *seconds = median(t, REPS);
  return 0;
}

int tr__world_time_links(tr_world *w, const size_t *bytes, int n, double *message,
                         double *sums) {
  if (w == NULL || w->size < 2) return TR_EINVAL;
  size_t most = 0;
  for (int i = 0; i < n; i++) most = bytes[i] > most ? bytes[i] : most;
  void *buf = calloc(most / sizeof(float) + 1, sizeof(float)); /* zeros: sums stay finite */
  int ok = buf != NULL, all_ok = 0; /* every rank goes on, or none */
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, w->comm) != MPI_SUCCESS) all_ok = -1;
  int rc = all_ok == 1 ? 0 : all_ok == 0 ? TR_ENOMEM : TR_ESYS;
  for (int i = 0; i < n && rc == 0; i++) {
    rc = time_median(w, round_trip, buf, bytes[i], &message[i]);
    message[i] /= 2; /* one way */
    if (rc == 0) rc = time_median(w, sum, buf, bytes[i], &sums[i]);
  }
  if (rc == 0 && (MPI_Bcast(message, n, MPI_DOUBLE, 0, w->comm) != MPI_SUCCESS ||
                  MPI_Bcast(sums, n, MPI_DOUBLE, 0, w->comm) != MPI_SUCCESS))
    rc = TR_ESYS;
  free(buf);
  return rc;
}
