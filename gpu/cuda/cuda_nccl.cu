/* cuda_nccl.cu — the CUDA backend's collectives through NCCL (tr_device.h, "collectives";
 * the slots of backend_impl.h). A member is an ncclComm_t bound to its device's GPU; every
 * operation is queued on the caller's stream. A failed operation leaves the communicator
 * in an unknown state (a peer may never come): closing it then aborts it (ncclCommAbort)
 * rather than waiting for what is still queued (ncclCommDestroy). */
#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

#include "cuda_impl.h"

typedef struct tr__nccl_comm {
  ncclComm_t comm;
  bool failed;
} tr__nccl_comm;

/* "<call>: <NCCL's text> (<its last error, when it says more>)" */
static int nccl_text(char *err, size_t size, const char *who, const char *call, ncclResult_t r,
                     ncclComm_t comm) {
  const char *last = ncclGetLastError(comm);
  return tr_errorf(err, size, r == ncclSystemError ? TR_ESYS : TR_EDEVICE, "%s%s%s: %s%s%s%s",
                   who ? who : "", who ? ": " : "", call, ncclGetErrorString(r),
                   last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
}

static int nccl_fail(tr_device *d, tr__nccl_comm *c, const char *call, ncclResult_t r) {
  char text[400];
  c->failed = true;
  const int status = nccl_text(text, sizeof text, NULL, call, r, c->comm);
  return tr__device_fail(d, status, "%s", text);
}

const char *tr__nccl_library(void) {
  static char name[32]; /* the library's, the same for every caller: written once */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = NCCL_VERSION_CODE;
    snprintf(name, sizeof name, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  });
  return name;
}

int tr__nccl_open_all(tr_device *const *devs, int n, void **impls, char *err,
                             size_t size) {
  ncclComm_t *comms = (ncclComm_t *)calloc((size_t)n, sizeof *comms);
  int *ordinals = (int *)calloc((size_t)n, sizeof *ordinals);
  tr__nccl_comm **out = (tr__nccl_comm **)calloc((size_t)n, sizeof *out);
  int rc = comms && ordinals && out ? 0 : tr_errorf(err, size, TR_ENOMEM, "ncclCommInitAll: out of memory");
  for (int i = 0; i < n && rc == 0; i++) {
    ordinals[i] = tr__cu_dev(devs[i])->ordinal;
    if (!(out[i] = (tr__nccl_comm *)calloc(1, sizeof **out)))
      rc = tr_errorf(err, size, TR_ENOMEM, "ncclCommInitAll: out of memory");
  }
  int current = -1;
  cudaGetDevice(&current); /* NCCL moves the calling thread between the GPUs */
  ncclResult_t r = ncclSuccess;
  if (rc == 0 && (r = ncclCommInitAll(comms, n, ordinals)) != ncclSuccess)
    rc = nccl_text(err, size, devs[0]->info.name, "ncclCommInitAll", r, NULL);
  if (current >= 0) cudaSetDevice(current);
  for (int i = 0; i < n; i++) {
    if (rc == 0) out[i]->comm = comms[i], impls[i] = out[i];
    else if (out) free(out[i]);
  }
  free(comms);
  free(ordinals);
  free(out);
  return rc;
}

int tr__nccl_id(void *id, size_t bytes, char *err, size_t size) {
  static_assert(sizeof(ncclUniqueId) <= sizeof(tr_comm_id), "tr_comm_id holds an ncclUniqueId");
  if (bytes < sizeof(ncclUniqueId)) return tr_errorf(err, size, TR_EINVAL, "ncclGetUniqueId: short id");
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) return nccl_text(err, size, NULL, "ncclGetUniqueId", r, NULL);
  memcpy(id, &u, sizeof u);
  return 0;
}

int tr__nccl_open_rank(tr_device *d, const void *id, int count, int rank, void **impl,
                              char *err, size_t size) {
  tr__nccl_comm *c = (tr__nccl_comm *)calloc(1, sizeof *c);
  if (c == NULL) return tr_errorf(err, size, TR_ENOMEM, "ncclCommInitRank: out of memory");
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  int current = -1;
  cudaGetDevice(&current);
  cudaError_t ce = cudaSetDevice(tr__cu_dev(d)->ordinal);
  ncclResult_t r = ce == cudaSuccess ? ncclCommInitRank(&c->comm, count, u, rank) : ncclSuccess;
  if (current >= 0) cudaSetDevice(current);
  if (ce != cudaSuccess || r != ncclSuccess) {
    free(c);
    if (ce != cudaSuccess)
      return tr_errorf(err, size, TR_EDEVICE, "%s: cudaSetDevice: %s", d->info.name, cudaGetErrorString(ce));
    return nccl_text(err, size, d->info.name, "ncclCommInitRank", r, NULL);
  }
  *impl = c;
  return 0;
}

void tr__nccl_close(tr_device *d, void *impl, bool abort) {
  tr__nccl_comm *c = (tr__nccl_comm *)impl;
  c->failed |= abort;
  if (tr__cuda_enter(d) == 0) {
    ncclResult_t r = c->failed ? ncclCommAbort(c->comm) : ncclCommDestroy(c->comm);
    if (r != ncclSuccess) nccl_fail(d, c, c->failed ? "ncclCommAbort" : "ncclCommDestroy", r);
  }
  free(c);
}

int tr__nccl_run(tr_stream *s, void *impl, tr__comm_op op, const void *send, void *recv,
                        size_t count, int peer) {
  tr_device *d = s->dev;
  tr__nccl_comm *c = (tr__nccl_comm *)impl;
  cudaStream_t st = tr__cu_stream(s)->st;
  TR__CU_ENTER(d);
  ncclResult_t r = ncclSuccess;
  const char *call = "?";
  switch (op) {
    case TR__COMM_ALLREDUCE:
      call = "ncclAllReduce";
      r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, c->comm, st);
      break;
    case TR__COMM_REDUCE:
      call = "ncclReduce";
      r = ncclReduce(send, recv, count, ncclFloat32, ncclSum, peer, c->comm, st);
      break;
    case TR__COMM_BROADCAST:
      call = "ncclBroadcast";
      r = ncclBroadcast(send, recv, count, ncclFloat32, peer, c->comm, st);
      break;
    case TR__COMM_SEND:
      call = "ncclSend";
      r = ncclSend(send, count, ncclUint8, peer, c->comm, st);
      break;
    case TR__COMM_RECV:
      call = "ncclRecv";
      r = ncclRecv(recv, count, ncclUint8, peer, c->comm, st);
      break;
  }
  return r == ncclSuccess ? 0 : nccl_fail(d, c, call, r);
}
