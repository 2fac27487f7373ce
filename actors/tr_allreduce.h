/* tr_allreduce.h — how devices' tensors cross between them where there is a choice: how a
 * replica group sums its gradients (tr_allreduce: troupe's own peer reduction or NCCL), and
 * what carries a pipeline edge between two processes (tr_edge_carrier: MPI or NCCL). Pure
 * functions of the devices and the build: tr_job_group, tr_job_chain and tr_train_run decide
 * with them, and a run's result records the choice (tr_result.h). */
#ifndef TR_ALLREDUCE_H
#define TR_ALLREDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif


/* How a replica group sums its gradients (tr_job_config.allreduce; --allreduce).
 *   auto  NCCL where it can (the default), else peer;
 *   peer  troupe's own reduction: each member sums its chunk of every bucket over the
 *         members, in member order, reading their memory directly (peer access) or through
 *         a copy; the same bits on every member and in every run;
 *   nccl  one NCCL communicator over the group's GPUs (tr_device.h, "collectives"): each
 *         member issues ncclAllReduce (ZeRO: ncclReduce to each shard's owner, then
 *         ncclBroadcast of the updated shards) on its own stream, bucket by bucket as
 *         backward runs. NCCL adds up in an order of its own (ring, tree): deterministic for
 *         a given communicator, but dp then matches single within rounding (the tests: 1e-5),
 *         not bit for bit.
 * NCCL is used where the build has it and every member of the group in a process is a CUDA
 * device on a GPU of its own: logical devices of one GPU ("cuda:0,cuda:0") cannot share a
 * communicator, and host devices have none. Across processes, the leaders' sum of each
 * bucket over the ranks is an ncclAllReduce among them where they are CUDA devices (else
 * MPI_Allreduce through host memory); the members inside each process then sum with peer. */
#define TR_ALLREDUCE_MAP(X)      \
  X(TR_ALLREDUCE_AUTO, "auto")   \
  X(TR_ALLREDUCE_PEER, "peer")   \
  X(TR_ALLREDUCE_NCCL, "nccl")

typedef enum tr_allreduce {
#define TR__ALLREDUCE_ENUM(name, text) name,
  TR_ALLREDUCE_MAP(TR__ALLREDUCE_ENUM)
#undef TR__ALLREDUCE_ENUM
  TR_ALLREDUCE_COUNT
} tr_allreduce;

/* "auto", "peer", "nccl" ("?" otherwise); parse: 0, or TR_EINVAL (out NULL too). The two
 * choices refuse a NULL out, devices or info and a negative n: TR_EINVAL in err. */
TR_API const char *tr_allreduce_name(tr_allreduce a);
TR_API int tr_allreduce_parse(const char *name, tr_allreduce *out);
/* What a group whose members (those that would share one communicator) are the devices
 * devs[0, n) sums with, when `asked` and the build has NCCL or not: *out is PEER or NCCL.
 * ranks[i]: the process devs[i] lives in (tr_world_device_rank), to name it; NULL: all in
 * one. TR_EINVAL, err naming the field, the devices and why, when nccl is asked of members
 * NCCL cannot join (host devices, two on one GPU) or of a build without it. A pure
 * function: tr_job_group and tr_train_run decide with it. */
TR_API int tr_allreduce_choose(tr_allreduce asked, const tr_device_info *devs, const int *ranks, int n,
                        bool have_nccl, tr_allreduce *out, char *err, size_t err_size);

/* How a pipeline edge between stages in two processes carries its tensors (tr_job_chain):
 *   MPI   the transport's MPI point to point, the tensor in host memory (a GPU's staged
 *         through pinned host memory on each side);
 *   NCCL  the message itself over MPI as ever, the tensor's bytes by ncclSend from the
 *         producer's GPU and ncclRecv straight into the consumer's, on a communicator of the
 *         two opened while the graph is wired (one per edge, so each carries one direction
 *         in the edge's order).
 * NCCL carries an edge where the build has it, both ends are CUDA devices on two GPUs (two
 * processes on one GPU cannot share a communicator) and allreduce is not peer (peer: no NCCL
 * anywhere). allreduce nccl insists: TR_EINVAL naming the ends where NCCL cannot. A pure
 * function, as tr_allreduce_choose. */
typedef enum tr_edge_carrier { TR_EDGE_CARRIER_MPI, TR_EDGE_CARRIER_NCCL } tr_edge_carrier;
TR_API int tr_edge_carrier_choose(tr_allreduce asked, const tr_device_info *from, int from_rank,
                           const tr_device_info *to, int to_rank, bool have_nccl,
                           tr_edge_carrier *out, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
