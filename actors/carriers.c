/* carriers.c — what carries a replica group's sums (tr_allreduce: peer copies or NCCL) and a
 * pipeline edge's tensors between two processes (tr_edge_carrier: MPI or NCCL), decided by
 * pure functions of the devices, their processes and the option (tr_job.h), which the
 * job's plan (plan_links.c) and tr_train_run's checks both call. */
#include <stdio.h>
#include <string.h>

#include "job_impl.h"

#define TR__ALLREDUCE_TEXT(name, text) text,
static const char *const allreduce_names[] = {TR_ALLREDUCE_MAP(TR__ALLREDUCE_TEXT)};
#undef TR__ALLREDUCE_TEXT

const char *tr_allreduce_name(tr_allreduce a) {
  return tr__name_of(allreduce_names, TR__COUNTOF(allreduce_names), (int)a);
}

int tr_allreduce_parse(const char *name, tr_allreduce *out) {
  TR__NOT_NULL(out);
  const int i = tr__name_index(allreduce_names, TR__COUNTOF(allreduce_names), name);
  return i < 0 ? TR_EINVAL : (*out = (tr_allreduce)i, 0);
}

int tr_allreduce_choose(tr_allreduce asked, const tr_device_info *devs, const int *ranks, int n,
                        bool have_nccl, tr_allreduce *out, char *err, size_t size) {
  if (out == NULL || (devs == NULL && n > 0))
    return tr_errorf(err, size, TR_EINVAL, "tr_allreduce_choose: %s is NULL", out ? "devs" : "out");
  *out = TR_ALLREDUCE_PEER;
  if (n < 0) return tr_errorf(err, size, TR_EINVAL, "tr_allreduce_choose: n %d: give 0 or more", n);
  if ((unsigned)asked >= TR_ALLREDUCE_COUNT)
    return tr_errorf(err, size, TR_EINVAL, "allreduce: %d is not auto, peer or nccl", (int)asked);
  if (asked == TR_ALLREDUCE_PEER) return 0;
  const bool must = asked == TR_ALLREDUCE_NCCL;
  for (int i = 0; i < n; i++) {
    if (devs[i].kind != TR_DEVICE_CUDA)
      return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but %s is a %s "
                              "device: NCCL sums CUDA devices only (allreduce peer sums any)",
                              devs[i].name, tr_device_kind_name(devs[i].kind))
                  : 0;
    for (int k = 0; k < i; k++)
      if (!tr_device_same_gpu(&devs[k], &devs[i])) continue;
      else if (!ranks || ranks[k] == ranks[i])
        return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but %s and %s "
                                "are logical devices of one GPU (%d): NCCL takes one member "
                                "per GPU (allreduce peer sums them)", devs[k].name,
                                devs[i].name, devs[i].ordinal)
                    : 0;
      else /* two processes on one GPU: NCCL refuses a communicator over them */
        return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but %s of rank "
                                "%d and %s of rank %d are one GPU (%s): NCCL takes one member "
                                "per GPU (allreduce peer sums them)", devs[k].name,
                                ranks[k], devs[i].name, ranks[i], devs[i].gpu_id)
                    : 0;
  }
  if (!have_nccl) /* after the devices: what they are says more than what the build lacks */
    return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but this troupe was "
                            "built without NCCL (meson -Dnccl=enabled, with the CUDA backend)")
                : 0;
  *out = n > 1 || must ? TR_ALLREDUCE_NCCL : TR_ALLREDUCE_PEER;
  return 0;
}

int tr_edge_carrier_choose(tr_allreduce asked, const tr_device_info *from, int from_rank,
                           const tr_device_info *to, int to_rank, bool have_nccl,
                           tr_edge_carrier *out, char *err, size_t size) {
  if (out == NULL || from == NULL || to == NULL)
    return tr_errorf(err, size, TR_EINVAL, "tr_edge_carrier_choose: %s is NULL",
                     !out ? "out" : !from ? "from" : "to");
  *out = TR_EDGE_CARRIER_MPI;
  if ((unsigned)asked >= TR_ALLREDUCE_COUNT)
    return tr_errorf(err, size, TR_EINVAL, "allreduce: %d is not auto, peer or nccl", (int)asked);
  if (from_rank == to_rank)
    return tr_errorf(err, size, TR_EINVAL, "the edge from %s to %s: both on rank %d, no "
                     "process to cross", from->name, to->name, from_rank);
  if (asked == TR_ALLREDUCE_PEER) return 0;
  const bool must = asked == TR_ALLREDUCE_NCCL;
  const tr_device_info *host = from->kind != TR_DEVICE_CUDA ? from : to->kind != TR_DEVICE_CUDA ? to : NULL;
  if (host)
    return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but the pipeline "
                            "edge from %s of rank %d to %s of rank %d has a %s device at an "
                            "end: NCCL joins CUDA devices only (its tensors go over MPI)",
                            from->name, from_rank, to->name, to_rank,
                            tr_device_kind_name(host->kind))
                : 0;
  if (tr_device_same_gpu(from, to))
    return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but the pipeline "
                            "edge from %s of rank %d to %s of rank %d joins one GPU (%s): NCCL "
                            "takes one member per GPU (its tensors go over MPI)", from->name,
                            from_rank, to->name, to_rank, from->gpu_id)
                : 0;
  if (!have_nccl)
    return must ? tr_errorf(err, size, TR_EINVAL, "allreduce: nccl asked, but this troupe was "
                            "built without NCCL (meson -Dnccl=enabled, with the CUDA backend)")
                : 0;
  *out = TR_EDGE_CARRIER_NCCL;
  return 0;
}

