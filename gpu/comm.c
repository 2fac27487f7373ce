/* comm.c — the collectives of tr_device.h: argument checks, the owner-thread rule and
 * dispatch to the backend's comm_* slots (CUDA's: cuda_nccl.cu). */
#include <stdio.h>
#include <stdlib.h>

#include "backend_impl.h"

struct tr_comm {
  tr_device *dev;
  void *impl;
  int rank, count;
  tr_comm *block; /* opened together (tr_comm_open_all): the members' one allocation */
  int live;       /* block[0]'s: members not yet closed, each on its own thread (atomic) */
};

const char *tr_comm_library(void) {
  const tr__backend *be = tr__backend_of(TR_DEVICE_CUDA);
  return be && be->comm_library ? be->comm_library() : NULL;
}

static int unsupported(char *err, size_t n, const tr_device *d) {
  return tr_errorf(err, n, TR_EDEVICE, "%s: a %s device has no collectives in this build%s",
                   d->info.name, d->be->name,
                   d->info.kind == TR_DEVICE_CUDA ? " (built without NCCL: meson -Dnccl=enabled)"
                                                  : " (NCCL joins CUDA devices only)");
}

int tr_comm_open_all(tr_device *const *devs, int n, tr_comm **comms, char *err, size_t size) {
  if (devs == NULL || comms == NULL)
    return tr_errorf(err, size, TR_EINVAL, "tr_comm_open_all: %s is NULL", devs ? "comms" : "devs");
  if (n < 1) return tr_errorf(err, size, TR_EINVAL, "tr_comm_open_all: n %d: give 1 or more", n);
  for (int i = 0; i < n; i++) comms[i] = NULL;
  for (int i = 0; i < n; i++)
    if (devs[i] == NULL) return tr_errorf(err, size, TR_EINVAL, "tr_comm_open_all: devs[%d] is NULL", i);
  const tr__backend *be = devs[0]->be;
  for (int i = 0; i < n; i++) {
    if (devs[i]->be == NULL)
      return tr_errorf(err, size, TR_EINVAL, "%s: another process's device", devs[i]->info.name);
    if (devs[i]->be->kind != be->kind) /* a decorated table (fault.c) is its backend's */
      return tr_errorf(err, size, TR_EINVAL, "%s and %s: devices of two backends in one "
                       "communicator", devs[0]->info.name, devs[i]->info.name);
    if (!be->comm_open_all) return unsupported(err, size, devs[i]);
    for (int k = 0; k < i; k++)
      if (tr_device_same_gpu(&devs[k]->info, &devs[i]->info))
        return tr_errorf(err, size, TR_EINVAL, "%s and %s are on the same GPU %d: a "
                         "communicator takes one member per GPU", devs[k]->info.name,
                         devs[i]->info.name, devs[i]->info.ordinal);
  }
  tr_comm *c = calloc((size_t)n, sizeof *c);
  void **impls = calloc((size_t)n, sizeof *impls);
  int rc = c && impls ? be->comm_open_all(devs, n, impls, err, size)
                      : tr_errorf(err, size, TR_ENOMEM, "tr_comm_open_all: out of memory");
  for (int i = 0; i < n && rc == 0; i++) {
    c[i] = (tr_comm){.dev = devs[i], .impl = impls[i], .rank = i, .count = n, .block = c};
    comms[i] = &c[i];
  }
  if (rc == 0) c[0].live = n;
  free(impls);
  if (rc) free(c);
  return rc;
}

int tr_comm_id_init(tr_device_kind kind, tr_comm_id *id, char *err, size_t size) {
  if (id == NULL) return tr_errorf(err, size, TR_EINVAL, "tr_comm_id_init: id is NULL");
  const tr__backend *be = tr__backend_of(kind);
  if (be == NULL || be->comm_id == NULL)
    return tr_errorf(err, size, TR_EDEVICE, "tr_comm_id_init: %s devices have no collectives "
                     "in this build", tr_device_kind_name(kind));
  return be->comm_id(id->bytes, sizeof id->bytes, err, size);
}

int tr_comm_open_rank(tr_device *d, const tr_comm_id *id, int count, int rank, tr_comm **out,
                      char *err, size_t size) {
  if (!d || !id || !out)
    return tr_errorf(err, size, TR_EINVAL, "tr_comm_open_rank: %s is NULL",
                     !d ? "d" : !id ? "id" : "out");
  *out = NULL;
  if (d->be == NULL) return tr_errorf(err, size, TR_EINVAL, "%s: another process's device", d->info.name);
  if (!d->be->comm_open_rank) return unsupported(err, size, d);
  if (count < 1 || rank < 0 || rank >= count)
    return tr_errorf(err, size, TR_EINVAL, "%s: rank %d of %d", d->info.name, rank, count);
  tr_comm *c = calloc(1, sizeof *c);
  if (c == NULL) return tr_errorf(err, size, TR_ENOMEM, "tr_comm_open_rank: out of memory");
  *c = (tr_comm){.dev = d, .rank = rank, .count = count};
  int rc = d->be->comm_open_rank(d, id->bytes, count, rank, &c->impl, err, size);
  if (rc) free(c);
  else *out = c;
  return rc;
}

int tr_comm_rank(const tr_comm *c) { return c ? c->rank : -1; }
int tr_comm_count(const tr_comm *c) { return c ? c->count : 0; }
tr_device *tr_comm_device(const tr_comm *c) { return c ? c->dev : NULL; }

/* Members opened together share one allocation, freed with the last of them. */
static void comm_end(tr_comm *c, bool abort) {
  if (c == NULL || c->impl == NULL) return;
  c->dev->be->comm_close(c->dev, c->impl, abort);
  c->impl = NULL;
  if (c->block == NULL) {
    free(c);
    return;
  }
  if (__atomic_sub_fetch(&c->block[0].live, 1, __ATOMIC_ACQ_REL) == 0) free(c->block);
}

void tr_comm_close(tr_comm *c) { comm_end(c, false); }
void tr_comm_abort(tr_comm *c) { comm_end(c, true); }

static int run(tr_comm *c, tr_stream *s, tr__comm_op op, const char *fn, const void *send,
               void *recv, size_t count, int peer) {
  if (c == NULL || c->impl == NULL || s == NULL) /* a closed member's impl is NULL */
    return tr__misuse(TR_EINVAL, "%s: %s", fn, !c ? "c is NULL" : !s ? "s is NULL"
                                                : "the member was closed");
  tr_device *d = s->dev;
  int rc = tr__device_enter(d);
  if (rc) return rc;
  if (d != c->dev)
    return tr__device_fail(d, TR_EINVAL, "%s: the stream is %s's, the member's device is %s",
                           fn, d->info.name, c->dev->info.name);
  if (peer < 0 || peer >= c->count)
    return tr__device_fail(d, TR_EINVAL, "%s: member %d of %d", fn, peer, c->count);
  if (count == 0) return 0;
  if ((op != TR__COMM_RECV && send == NULL) || (op != TR__COMM_SEND && recv == NULL))
    return tr__device_fail(d, TR_EINVAL, "%s: a NULL buffer", fn);
  return d->be->comm_run(s, c->impl, op, send, recv, count, peer);
}

int tr_comm_allreduce(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n) {
  return run(c, s, TR__COMM_ALLREDUCE, __func__, send, recv, n, 0);
}
int tr_comm_reduce(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n, int root) {
  return run(c, s, TR__COMM_REDUCE, __func__, send, recv, n, root);
}
int tr_comm_broadcast(tr_comm *c, tr_stream *s, const float *send, float *recv, size_t n,
                      int root) {
  return run(c, s, TR__COMM_BROADCAST, __func__, send, recv, n, root);
}
int tr_comm_send(tr_comm *c, tr_stream *s, const void *buf, size_t bytes, int peer) {
  return run(c, s, TR__COMM_SEND, __func__, buf, NULL, bytes, peer);
}
int tr_comm_recv(tr_comm *c, tr_stream *s, void *buf, size_t bytes, int peer) {
  return run(c, s, TR__COMM_RECV, __func__, NULL, buf, bytes, peer);
}
