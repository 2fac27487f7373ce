/* lifelines.h — a TCP connection between every two ranks of a world (lifelines.c), over
 * which nothing is ever sent but a goodbye: when a rank's process ends, the kernel closes
 * its end, and the other ranks read the close at once — with the goodbye before it, the
 * rank ended in order (tr_world_close); without, it died (killed, crashed, exited without
 * closing its world). Open MPI 4.1 (no ULFM) tells the survivors nothing of a rank that
 * died, and between the ranks of one host its traffic goes through shared memory, where no
 * socket closes: this is how a dead rank is known in milliseconds rather than by its
 * silence (the transport's heartbeats stay, for a rank that hangs).
 *
 * Internal to dist/. The world opens them (collective, right after MPI_Init), the
 * transport's progress thread watches them while a graph runs, the world closes them:
 *
 *   tr__lifelines *l = tr__lifelines_open(comm, rank, size);  // NULL: none (said on stderr)
 *   if (tr__lifelines_watch(l)) ... tr__lifelines_died(l, r) ...  // any thread, one at a time
 *   tr__lifelines_close(l);                                    // the goodbye, then the close
 */
#ifndef TR_DIST_LIFELINES_H
#define TR_DIST_LIFELINES_H

#include <stdbool.h>

#include <mpi.h>

typedef struct tr__lifelines tr__lifelines;

/* Collective over `comm` (rank `rank` of `size`): every rank listens (loopback when every
 * rank has this host's name, else every address), connects to the ranks below it and
 * accepts those above, each connection proved by the other's word from an MPI_Allgather;
 * then the listening socket closes. A pair that cannot connect has no lifeline (said on
 * stderr: that rank's death is then known by its silence alone); NULL where there are none
 * at all (a world of one, or no socket could be made). */
tr__lifelines *tr__lifelines_open(MPI_Comm comm, int rank, int size);
/* Reads what came on every lifeline, without blocking: true when a rank's end was read
 * since the last call (NULL: false). */
bool tr__lifelines_watch(tr__lifelines *l);
/* Whether rank r's process ended without its goodbye: it died (NULL: false). */
bool tr__lifelines_died(const tr__lifelines *l, int r);
/* This rank's goodbye on every lifeline, then closes them and frees l (NULL is fine). */
void tr__lifelines_close(tr__lifelines *l);

#endif
