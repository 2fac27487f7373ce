/* transport.h — what the replica groups ask of their process's transport (transport.c): a
 * sum across ranks, bucket by bucket. (What the graph asks of it is graph_impl.h's. A
 * pipeline edge whose tensors NCCL carries still sends its messages here, data NULL: the
 * stages move the bytes themselves, stage_actor.c's wires.)
 *
 * A group whose members live in several processes reduces inside each process first; then
 * its member of lowest index there (the leader) hands each bucket's sum to the transport, in
 * bucket order, on its "sum" edge, and gets a tr__summed_msg on its "summed" edge once the
 * sum over every rank is in place (MPI_Allreduce on a communicator of the group's ranks).
 * Where the leaders are CUDA devices and the build has NCCL, they sum with ncclAllReduce
 * among themselves instead (group.c, its communicator made in job.c) and this is unused.
 *
 *   tr__transport_group(transport, group, ranks, n);    // wiring, the same on every rank
 *   tr__sum_msg *s = tr_msg_new(&tr__sum_type);  ... tr_edge_send_control(sum_edge, s);
 */
#ifndef TR_TRANSPORT_H
#define TR_TRANSPORT_H

#include "graph_impl.h"

/* leader → transport: sum p[0, n) over the group's ranks, in place */
typedef struct tr__sum_msg {
  tr_msg hdr;
  int group, bucket;
  int64_t step;
  float *p;
  size_t n;
  bool complete; /* the transport's own mark */
} tr__sum_msg;

/* transport → leader: bucket `bucket` of step `step` is summed */
typedef struct tr__summed_msg {
  tr_msg hdr;
  int bucket;
  int64_t step;
} tr__summed_msg;

extern const tr_msgtype tr__sum_type, tr__summed_type;

/* Group `group` (numbered from 0 in the order groups are made) spans `ranks`; its leader
 * here sends on `sum` and hears on `summed`. */
int tr__transport_group(tr_actor *transport, int group, const int *ranks, int n);
int tr__transport_group_edges(tr_actor *transport, int group, tr_edge *sum, tr_edge *summed);
/* This rank's transport, and rank `rank`'s (its placeholder here); NULL in a process of
 * its own. */
tr_actor *tr__graph_transport(const tr_graph *g);
tr_actor *tr__graph_transport_on(const tr_graph *g, int rank);

#endif
