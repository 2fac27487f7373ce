/* collective.h — collectives among the ranks, as dist/'s service to the parts above it:
 *
 * - the round that agrees an NCCL communicator's id across ranks (tr__dist_comm_round): one
 *   rank makes the id, every rank says whether it takes part, all in one MPI_Allgather;
 * - a replica group's sums across ranks, bucket by bucket (the sum protocol): a group whose
 *   members live in several processes reduces inside each process first; then its member
 *   of lowest index there (the leader) hands each bucket's sum to its process's transport,
 *   in bucket order, on its "sum" edge, and gets a tr__summed_msg on its "summed" edge once
 *   the sum over every rank is in place (MPI_Allreduce on a communicator of the group's
 *   ranks, transport.c). Where the leaders are CUDA devices and the build has NCCL, they sum
 *   with ncclAllReduce among themselves instead (group.c, its communicator agreed with
 *   tr__dist_comm_round) and this is unused.
 * - a group whose sums outlive a rank (local SGD's elastic replicas: tr__graph_sum_group's
 *   `outlive`): each step's buckets are gathered to the group's first rank, summed there in
 *   rank order over the ranks that sent all of them, and the sums sent back (collective.c), so
 *   that a rank that dies mid-step is left out of that step whole, on every rank alike, and
 *   no sum waits for it. The summed message says how many members took part.
 *
 *   tr__graph_sum_group(g, group, ranks, n);                // wiring, the same on every rank
 *   tr__sum_msg *s = tr_msg_new(&tr__sum_type);  ... tr_edge_send_control(sum_edge, s);
 *
 * Built with MPI, collective.c and transport.c answer; without it (nothing of dist/ is
 * compiled) actors/world_solo.c defines the protocol's types, which the group names but
 * never sends in a world of one, and a round of one process.
 */
#ifndef TR_DIST_COLLECTIVE_H
#define TR_DIST_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"
#include "tr_msg.h"
#include "tr_world.h"

/* leader → transport: sum p[0, n) over the group's ranks, in place; bucket `bucket` of the
 * step's `buckets`, `members` of the group's taking part here */
typedef struct tr__sum_msg {
  tr_msg hdr;
  int group, bucket, buckets, members;
  int64_t step;
  float *p;
  size_t n;
  bool complete; /* the transport's own mark */
} tr__sum_msg;

/* transport → leader: bucket `bucket` of step `step` is summed, over `members` of the
 * group's (0: every member: a group whose sums do not outlive a rank) */
typedef struct tr__summed_msg {
  tr_msg hdr;
  int bucket, members;
  int64_t step;
} tr__summed_msg;

extern const tr_msgtype tr__sum_type, tr__summed_type;

/* One rank's word in a round for an NCCL communicator. */
typedef struct tr__comm_word {
  int yes;        /* it takes part (the owner's: and it made the id) */
  tr_comm_id id;  /* the owner's: the communicator's id */
} tr__comm_word;

/* One round of every rank (collective: every rank calls it, in the same order) for an NCCL
 * communicator across ranks: rank `owner` makes its id (tr_comm_id_init, `why` saying why it
 * could not), and each rank says whether it takes part (`yes`). (*all)[r]: rank r's word,
 * tr_world_size entries, to free. TR_ENOMEM, or TR_ESYS when MPI failed. */
int tr__dist_comm_round(tr_world *w, int owner, bool yes, tr__comm_word **all, char *why,
                        size_t size);

#endif
