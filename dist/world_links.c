/* world_links.c — the links between the ranks of a world, timed (world.h:
 * tr__world_time_links): what the planner fits a message's and a sum's latency and bandwidth
 * from (actors/costs_ranks.c). Raw MPI on the world's own communicator, before any graph
 * runs on it: a ping-pong between ranks 0 and 1 (the others wait at the barriers), and
 * MPI_Allreduce over every rank, as the transport sends edges' messages and the replica
 * groups' summers sum their buckets. */
#include <stdlib.h>

#include "world_impl.h"

enum { REPS = 7, TAG = 0x7e11 };

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return v[n / 2];
}

/* Half of a round trip of `bytes` between ranks 0 and 1, the median of REPS after one. */
static int time_message(tr_world *w, char *buf, size_t bytes, double *seconds) {
  double t[REPS];
  int rc = MPI_SUCCESS;
  for (int rep = -1; rep < REPS; rep++) {
    if (MPI_Barrier(w->comm) != MPI_SUCCESS) return TR_ESYS;
    const double t0 = MPI_Wtime();
    const int c = (int)bytes;
    if (w->rank == 0) {
      if (rc == MPI_SUCCESS) rc = MPI_Send(buf, c, MPI_BYTE, 1, TAG, w->comm);
      if (rc == MPI_SUCCESS) rc = MPI_Recv(buf, c, MPI_BYTE, 1, TAG, w->comm, MPI_STATUS_IGNORE);
    } else if (w->rank == 1) {
      if (rc == MPI_SUCCESS) rc = MPI_Recv(buf, c, MPI_BYTE, 0, TAG, w->comm, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) rc = MPI_Send(buf, c, MPI_BYTE, 0, TAG, w->comm);
    }
    if (rep >= 0) t[rep] = (MPI_Wtime() - t0) / 2;
  }
  *seconds = median(t, REPS);
  return rc == MPI_SUCCESS ? 0 : TR_ESYS;
}

/* One MPI sum of `bytes` of floats over every rank, the median of REPS after one. */
static int time_sum(tr_world *w, float *buf, size_t bytes, double *seconds) {
  double t[REPS];
  int rc = MPI_SUCCESS;
  for (int rep = -1; rep < REPS; rep++) {
    if (MPI_Barrier(w->comm) != MPI_SUCCESS) return TR_ESYS;
    const double t0 = MPI_Wtime();
    if (rc == MPI_SUCCESS)
      rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                         w->comm);
    if (rep >= 0) t[rep] = MPI_Wtime() - t0;
  }
  *seconds = median(t, REPS);
  return rc == MPI_SUCCESS ? 0 : TR_ESYS;
}

int tr__world_time_links(tr_world *w, const size_t *bytes, int n, double *message, double *sum) {
  if (w == NULL || w->size < 2) return TR_EINVAL;
  size_t most = 0;
  for (int i = 0; i < n; i++) most = bytes[i] > most ? bytes[i] : most;
  void *buf = calloc(most / sizeof(float) + 1, sizeof(float)); /* zeros: sums stay finite */
  int ok = buf != NULL, all_ok = 0; /* every rank goes on, or none */
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, w->comm) != MPI_SUCCESS) all_ok = -1;
  int rc = all_ok == 1 ? 0 : all_ok == 0 ? TR_ENOMEM : TR_ESYS;
  for (int i = 0; i < n && rc == 0; i++) {
    rc = time_message(w, buf, bytes[i], &message[i]);
    if (rc == 0) rc = time_sum(w, buf, bytes[i], &sum[i]);
  }
  if (rc == 0 && (MPI_Bcast(message, n, MPI_DOUBLE, 0, w->comm) != MPI_SUCCESS ||
                  MPI_Bcast(sum, n, MPI_DOUBLE, 0, w->comm) != MPI_SUCCESS))
    rc = TR_ESYS;
  free(buf);
  return rc;
}
