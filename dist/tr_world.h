/* tr_world.h — the processes of a job: this one alone, or every rank of an MPI launch.
 *
 * Launched by `mpirun -np N program ...`, each process opens the world (MPI is initialised
 * then, and only then) and brings its own devices; the job's devices are every rank's, in
 * rank order (tr_world_devices), and a training graph built on that list (tr_graph_set_world,
 * tr_job.h) places each actor on the rank that owns its device: the same program runs on
 * every rank and builds the same graph, and each rank runs its part. Edges between ranks are
 * carried by a transport actor per process over MPI. Launched without mpirun, the world is
 * this process and nothing changes.
 *
 *   tr_world *w;
 *   if (tr_world_open(&w, err, sizeof err)) ...;         // MPI_Init_thread under mpirun
 *   tr_device_list *devs;                                // host:1 here, every rank's in all
 *   if (tr_world_devices(w, "host:1", &devs, err, sizeof err)) ...;
 *   if (tr_world_agree(w, "the options", &opts, sizeof opts, err, sizeof err)) ...;
 *   ... tr_graph_set_world(g, w); build and run the graph on every rank ...
 *   tr_world_close(w);                                   // MPI_Finalize
 *
 * Calls here are collective: every rank makes them, in the same order, from the thread that
 * opened the world, before or after (never during) a graph's run. One world per process.
 *
 * Misuse (tr_base.h): the getters take a NULL world as this process alone (rank 0 of 1); the
 * collective calls refuse it, and NULL buffers and outs, with TR_EINVAL naming the argument
 * (in err, or on stderr for tr_world_allgather).
 */
#ifndef TR_WORLD_H
#define TR_WORLD_H

#include <stddef.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_world tr_world;

/* The world this process belongs to: every rank of an MPI launch (when troupe was built with
 * MPI and the environment says mpirun started it), else a world of one. TR_EINVAL when a
 * world is open already; TR_ESYS naming the MPI failure. */
TR_API int tr_world_open(tr_world **out, char *err, size_t err_size);
/* After every graph on it has been freed. NULL is fine. Where a graph's run across the ranks
 * failed, the other ranks may be waiting for this one: the job ends (MPI_Abort, exit status
 * 1 from mpirun) rather than hanging in MPI_Finalize — print what went wrong first. */
TR_API void tr_world_close(tr_world *w);

TR_API int tr_world_rank(const tr_world *w);
TR_API int tr_world_size(const tr_world *w);
/* "MPI (Open MPI 4.1.4)", or "one process". */
TR_API const char *tr_world_kind(const tr_world *w);

/* Every rank's `bytes` bytes at `mine`, in rank order, into `all` (size × bytes). */
TR_API int tr_world_allgather(tr_world *w, const void *mine, size_t bytes, void *all);

/* TR_EINVAL, naming `what` and the ranks that differ from rank 0, unless every rank gave
 * the same bytes: options, models, layouts that must be one job's. */
TR_API int tr_world_agree(tr_world *w, const char *what, const void *mine, size_t bytes, char *err,
                   size_t err_size);

/* The job's devices: `spec` opens this rank's (tr_device_list_open; NULL: none), and the
 * list holds every rank's in rank order, those of other ranks as placeholders that run
 * nothing here (tr_device_is_placeholder); tr_world_device_rank says whose each is. */
TR_API int tr_world_devices(tr_world *w, const char *spec, tr_device_list **out, char *err,
                     size_t err_size);
/* The rank that owns device `d` of a list tr_world_devices made (while that list is open):
 * the rank it came from; this rank for any other device. NULL world: 0. */
TR_API int tr_world_device_rank(const tr_world *w, const tr_device *d);

#ifdef __cplusplus
}
#endif
#endif
