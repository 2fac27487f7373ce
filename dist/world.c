/* world.c — the processes of a job (tr_world.h, world.h). Started without mpirun, a world is
 * this process; under mpirun, MPI is initialised with MPI_THREAD_MULTIPLE (the transport's
 * actor and its progress thread both call MPI). Built without MPI, actors/world_solo.c
 * stands in for this file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world_impl.h"

static tr_world *opened; /* MPI is a process's own: one world at a time */

/* Started by mpirun (Open MPI, or another launcher speaking PMI)? */
static bool launched_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int tr_world_open(tr_world **out, char *err, size_t n) {
  if (out == NULL) return tr_errorf(err, n, TR_EINVAL, "tr_world_open: out is NULL");
  *out = NULL;
  if (opened) return tr_errorf(err, n, TR_EINVAL, "world: one is open already in this process");
  tr_world *w = calloc(1, sizeof *w);
  if (w == NULL) return tr_errorf(err, n, TR_ENOMEM, "world: out of memory");
  w->size = 1;
  snprintf(w->kind, sizeof w->kind, "one process");
  if (launched_by_mpirun()) {
    int initialised = 0, provided = 0;
    MPI_Initialized(&initialised);
    /* Open MPI's waits poll: a rank waiting for a sum would take the core a device thread
     * computes on (dp over 2 processes on 2 cores ran at 0.71x of one process's dp; yielding,
     * at 0.99x). Unless the user's environment says otherwise, its idle loops yield. */
    if (!initialised) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    /* Open MPI 4.1 starts MPI_Finalize with a fence of every rank through its runtime; under
     * mpirun --enable-recovery, with a rank killed, that fence sometimes never completes (1 in
     * 8 under load, in a bare MPI program). troupe's own end needs no fence: a graph across
     * ranks ends when every rank has had every other's goodbye (a lost one's taken as given)
     * and its own requests are complete, so an elastic job that lost a rank can finish. */
    if (!initialised) setenv("OMPI_MCA_async_mpi_finalize", "1", 0);
    if (!initialised && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      free(w);
      return tr_errorf(err, n, TR_ESYS, "world: MPI_Init_thread failed");
    }
    if (initialised) MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      if (!initialised) MPI_Finalize();
      free(w);
      return tr_errorf(err, n, TR_ESYS, "world: this MPI gives thread level %d, troupe needs "
                       "MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
    }
    w->mpi = !initialised;
    /* A request's failure (a rank gone) is reported on MPI_COMM_WORLD: returned, so that the
     * transport names the rank rather than MPI aborting the process */
    if (w->mpi) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
    MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = 0;
    snprintf(w->kind, sizeof w->kind, "MPI (%.40s), %d processes", version, w->size);
    /* Clocks compared right after a barrier: each rank's offset from this one's, to within
     * the barrier's skew (microseconds), so that figures timed on several hosts add up. */
    int64_t now, *all = calloc((size_t)w->size, sizeof *all);
    w->clock_offset = calloc((size_t)w->size, sizeof *w->clock_offset);
    if (all == NULL || w->clock_offset == NULL) {
      free(all);
      tr_world_close(w);
      return tr_errorf(err, n, TR_ENOMEM, "world: out of memory");
    }
    MPI_Barrier(w->comm);
    now = (int64_t)tr_now_ns();
    MPI_Allgather(&now, 1, MPI_INT64_T, all, 1, MPI_INT64_T, w->comm);
    for (int r = 0; r < w->size; r++) w->clock_offset[r] = now - all[r];
    free(all);
    /* a dead rank is known by its lifeline's close (lifelines.h): MPI would not say */
    w->lifelines = tr__lifelines_open(w->comm, w->rank, w->size);
  }
  opened = w;
  *out = w;
  return 0;
}

void tr__world_broken(tr_world *w) { w->broken = true; }

void tr_world_close(tr_world *w) {
  if (w == NULL) return;
  /* the goodbye first: this rank ended in order, having said on MPI what it had to */
  tr__lifelines_close(w->lifelines);
  w->lifelines = NULL;
  if (w->broken && w->size > 1) MPI_Abort(w->comm, 1); /* does not return */
  if (w->size > 1 || w->mpi) MPI_Comm_free(&w->comm);
  if (w->mpi) MPI_Finalize();
  opened = NULL;
  free(w->owners);
  free(w->clock_offset);
  free(w);
}

int tr_world_rank(const tr_world *w) { return w ? w->rank : 0; }

int tr_world_device_rank(const tr_world *w, const tr_device *d) {
  if (w == NULL) return 0;
  for (int i = w->nowners - 1; i >= 0; i--) /* the newest list's, should an address recur */
    if (w->owners[i].dev == d) return w->owners[i].rank;
  return w->rank;
}

/* Every device of `list` (made by tr_world_devices) and the rank it came from. */
static int own(tr_world *w, const tr_device_list *list, const int *rank_of) {
  const int n = tr_device_list_count(list);
  struct tr__world_owner *grown = realloc(w->owners, (size_t)(w->nowners + n + 1) * sizeof *grown);
  if (grown == NULL) return TR_ENOMEM;
  w->owners = grown;
  for (int i = 0; i < n; i++)
    w->owners[w->nowners++] = (struct tr__world_owner){tr_device_list_at(list, i), rank_of[i]};
  return 0;
}
int64_t tr__world_clock_offset(const tr_world *w, int rank) {
  return w && w->clock_offset && rank >= 0 && rank < w->size ? w->clock_offset[rank] : 0;
}
int tr_world_size(const tr_world *w) { return w ? w->size : 1; }
const char *tr_world_kind(const tr_world *w) { return w ? w->kind : "one process"; }

int tr_world_allgather(tr_world *w, const void *mine, size_t bytes, void *all) {
  TR__NOT_NULL(w);
  if (bytes && (mine == NULL || all == NULL))
    return tr__misuse(TR_EINVAL, "tr_world_allgather: %s is NULL", mine ? "all" : "mine");
  if (w->size == 1) {
    memmove(all, mine, bytes);
    return 0;
  }
  if (MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, w->comm) != MPI_SUCCESS)
    return TR_ESYS;
  return 0;
}

int tr_world_agree(tr_world *w, const char *what, const void *mine, size_t bytes, char *err,
                   size_t n) {
  if (w == NULL || (mine == NULL && bytes))
    return tr_errorf(err, n, TR_EINVAL, "tr_world_agree: %s is NULL", w ? "mine" : "w");
  if (what == NULL) what = "tr_world_agree";
  unsigned char *all = malloc(bytes * (size_t)w->size + 1);
  if (all == NULL) return tr_errorf(err, n, TR_ENOMEM, "%s: out of memory", what);
  int rc = tr_world_allgather(w, mine, bytes, all);
  if (rc) {
    free(all);
    return tr_errorf(err, n, rc, "%s: the ranks could not compare them", what);
  }
  char ranks[256] = "";
  size_t len = 0;
  int differ = 0;
  for (int r = 1; r < w->size; r++)
    if (memcmp(all, all + (size_t)r * bytes, bytes)) {
      differ++;
      if (len < sizeof ranks)
        len += (size_t)snprintf(ranks + len, sizeof ranks - len, "%s%d", differ > 1 ? ", " : "", r);
    }
  free(all);
  if (differ == 0) return 0;
  return tr_errorf(err, n, TR_EINVAL, "%s: rank%s %s differ%s from rank 0's: every rank of a "
                   "job must give the same", what, differ > 1 ? "s" : "", ranks,
                   differ > 1 ? "" : "s");
}

/* What a rank says of one of its devices. */
typedef struct wire_device {
  tr_device_info info;
} wire_device;

int tr_world_devices(tr_world *w, const char *spec, tr_device_list **out, char *err, size_t n) {
  if (w == NULL || out == NULL)
    return tr_errorf(err, n, TR_EINVAL, "tr_world_devices: %s is NULL", w ? "out" : "w");
  *out = NULL;
  tr_device_list *list = NULL;
  int rc = 0;
  if (spec) rc = tr_device_list_open(&list, spec, err, n);
  /* every rank learns of the others' devices even when its own spec failed */
  int count = rc == 0 && list ? tr_device_list_count(list) : rc ? -1 : 0;
  int *counts = calloc((size_t)w->size, sizeof *counts);
  if (counts == NULL) rc = rc ? rc : TR_ENOMEM;
  if (counts && tr_world_allgather(w, &count, sizeof count, counts)) rc = rc ? rc : TR_ESYS;
  int bad = -1, most = 0;
  for (int r = 0; counts && r < w->size; r++) {
    if (counts[r] < 0 && bad < 0) bad = r;
    if (counts[r] > most) most = counts[r];
  }
  if (rc == 0 && bad >= 0) rc = tr_errorf(err, n, TR_EINVAL, "devices: rank %d could not open its "
                                          "devices (its own message says why)", bad);
  if (rc == 0 && spec == NULL && most == 0) rc = tr_errorf(err, n, TR_EINVAL, "devices: no rank has any");
  wire_device *mine = NULL, *all = NULL;
  if (rc == 0) {
    mine = calloc((size_t)most + 1, sizeof *mine);
    all = calloc((size_t)most * (size_t)w->size + 1, sizeof *all);
    if (!mine || !all) rc = tr_errorf(err, n, TR_ENOMEM, "devices: out of memory");
  }
  for (int i = 0; rc == 0 && i < count; i++)
    mine[i].info = *tr_device_info_of(tr_device_list_at(list, i));
  if (rc == 0 && tr_world_allgather(w, mine, (size_t)most * sizeof *mine, all)) rc = TR_ESYS;
  if (rc == 0 && list == NULL && tr_device_list_open_empty(&list))
    rc = tr_errorf(err, n, TR_ENOMEM, "devices: out of memory");
  /* the other ranks' devices in rank order around this rank's */
  int at = 0, *rank_of = NULL;
  if (rc == 0 && !(rank_of = malloc(((size_t)most * (size_t)w->size + 1) * sizeof *rank_of)))
    rc = tr_errorf(err, n, TR_ENOMEM, "devices: out of memory");
  for (int r = 0; rc == 0 && r < w->size; r++) {
    if (r == w->rank) { /* this rank's own, in place */
      for (int i = 0; i < count; i++) rank_of[at++] = r;
      continue;
    }
    for (int i = 0; rc == 0 && i < counts[r]; i++) {
      const tr_device_info *info = &all[(size_t)r * (size_t)most + (size_t)i].info;
      rc = tr_device_list_add_placeholder(list, at, info);
      rank_of[at++] = r;
    }
  }
  if (rc == 0 && own(w, list, rank_of)) rc = tr_errorf(err, n, TR_ENOMEM, "devices: out of memory");
  free(rank_of);
  free(counts);
  free(mine);
  free(all);
  if (rc) {
    tr_device_list_close(list);
    return rc;
  }
  *out = list;
  return 0;
}
