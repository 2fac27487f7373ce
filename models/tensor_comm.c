/* tensor_comm.c — a tensor group's collectives (tr_tensor_comm, tr_layer_type.h) among the
 * devices of one process: all-reduce (sum or max), all-gather and reduce-scatter, each
 * member calling from its device's owner thread.
 *
 * The members meet twice per collective at a barrier (a mutex, a condition variable and a
 * generation counter): at the first each has published its buffer, so every member reads
 * the others' directly and computes the whole result into a buffer of its own; at the
 * second everyone has finished reading, so each may write its result over its buffer. Sums
 * run in member order, element by element, so every member gets bitwise the same result,
 * whichever the layout of threads. Everything one member reads of another's was written
 * before the first barrier and is overwritten only after the second: no data races.
 *
 * Host devices compute on their owner thread, so a buffer is ready on return from the op
 * that wrote it and the result is in place on return. CUDA devices take the same meetings,
 * with each member's stream synchronised before the first (its buffer written) and before
 * the second (its peer copies of the others' buffers done); the copies are tr_memcpy_peer
 * into a staging area on the member's device, reduced there. Simple and correct, not fast:
 * NCCL, which troupe has for replica groups, is not used here yet, and max on CUDA is
 * acc + relu(x - acc), within a rounding of the true maximum (a softmax's shift needs no
 * more). No GPU runs it on the machine these lines were written on.
 *
 * Counts: the collectives a member ran and the bytes it would send in the ring algorithm of
 * each (NCCL's): all-reduce 2 (T-1)/T of the buffer, all-gather and reduce-scatter (T-1)
 * parts; 0 for a group of one. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tr_model.h"

typedef enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER } coll;

typedef struct group group;

/* What a member publishes for one collective, read by the others between the barriers. */
typedef struct round {
  const float *src;
  size_t n;
  int what;  /* coll * 2 + tr_reduce: every member must call the same */
  int ok;    /* 0: this member could not take part (its staging), so no one writes */
} round;

typedef struct member {
  tr_tensor_comm c;         /* comms[i] points here */
  group *g;
  tr_device *dev;
  float *tmp;               /* host: the result before it is written back */
  size_t tmp_cap;
  round r;
  _Atomic uint64_t collectives, bytes;
} member;

struct group {
  int n, cuda;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  uint64_t generation;
  int aborted;              /* tr_tensor_comm_abort: every meeting fails from then on */
  member m[];
};

/* 0 once every member has arrived; TR_ESTATE when the group was aborted before (a member
 * failed: the others would wait for it for ever). */
static int barrier(group *g) {
  pthread_mutex_lock(&g->mu);
  const uint64_t gen = g->generation;
  if (!g->aborted && ++g->arrived == g->n) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (gen == g->generation && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
  }
  const int rc = gen == g->generation ? TR_ESTATE : 0;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* Floats of a collective's result, and the bytes a member sends in the ring's algorithm. */
static size_t out_floats(coll k, size_t n, int T) { return k == ALL_GATHER ? n * (size_t)T : n; }

static uint64_t ring_bytes(coll k, size_t n, int T) {
  const uint64_t b = (uint64_t)n * sizeof(float), t = (uint64_t)T;
  return k == ALL_REDUCE ? 2 * (t - 1) * b / t : (t - 1) * b;
}

/* Whether every member published the same collective, and could take part. */
static int agreed(const group *g) {
  for (int i = 0; i < g->n; i++)
    if (!g->m[i].r.ok || g->m[i].r.n != g->m[0].r.n || g->m[i].r.what != g->m[0].r.what)
      return 0;
  return 1;
}

/* ---- host devices: read the others' memory, reduce in member order ------------------------- */

static void host_compute(const member *me, coll k, tr_reduce op, size_t n) {
  const group *g = me->g;
  float *out = me->tmp;
  const size_t at = k == REDUCE_SCATTER ? (size_t)me->c.rank * n : 0;
  if (k == ALL_GATHER) {
    for (int m = 0; m < g->n; m++) memcpy(out + (size_t)m * n, g->m[m].r.src, n * sizeof *out);
    return;
  }
  memcpy(out, g->m[0].r.src + at, n * sizeof *out);
  for (int m = 1; m < g->n; m++) {
    const float *x = g->m[m].r.src + at;
    if (op == TR_REDUCE_MAX)
      for (size_t i = 0; i < n; i++) out[i] = x[i] > out[i] ? x[i] : out[i];
    else
      for (size_t i = 0; i < n; i++) out[i] += x[i];
  }
}

static int host_run(member *me, coll k, tr_reduce op, const float *src, float *dst, size_t n) {
  group *g = me->g;
  const size_t out = out_floats(k, n, g->n);
  if (out > me->tmp_cap) {
    float *t = realloc(me->tmp, out * sizeof *t);
    if (t) me->tmp = t, me->tmp_cap = out;
  }
  me->r = (round){.src = src, .n = n, .what = (int)k * 2 + (int)op, .ok = out <= me->tmp_cap};
  TR__TRY(barrier(g));
  const int ok = agreed(g);
  if (ok) host_compute(me, k, op, n);
  TR__TRY(barrier(g));
  if (!ok) return me->r.ok ? TR_EINVAL : TR_ENOMEM;
  memcpy(dst, me->tmp, out * sizeof *dst);
  return 0;
}

/* ---- CUDA devices: peer copies into a staging area, reduced there --------------------------- */

/* acc (n) = max(acc, x) as acc + relu(x - acc); x is overwritten */
static int dev_max(tr_stream *s, float *acc, float *x, size_t n) {
  TR__TRY(tr_axpy(s, x, -1.0f, acc, n));
  TR__TRY(tr_relu_forward(s, x, x, n));
  return tr_axpy(s, acc, 1.0f, x, n);
}

static int dev_compute(member *me, tr_stream *s, coll k, tr_reduce op, size_t n, float *stage) {
  const group *g = me->g;
  const size_t at = k == REDUCE_SCATTER ? (size_t)me->c.rank * n : 0;
  for (int m = 0; m < g->n; m++)
    TR__TRY(tr_memcpy_peer(s, stage + (size_t)m * n, me->dev, g->m[m].r.src + at, g->m[m].dev,
                           n * sizeof(float)));
  if (k == ALL_GATHER) return 0;
  for (int m = 1; m < g->n; m++) {
    float *x = stage + (size_t)m * n;
    TR__TRY(op == TR_REDUCE_MAX ? dev_max(s, stage, x, n) : tr_axpy(s, stage, 1.0f, x, n));
  }
  return 0;
}

static int dev_run(member *me, tr_stream *s, coll k, tr_reduce op, const float *src, float *dst,
                   size_t n) {
  group *g = me->g;
  float *stage = NULL;
  int rc = n ? tr_stream_alloc(s, (size_t)g->n * n * sizeof(float), (void **)&stage) : 0;
  if (rc == 0) rc = tr_stream_synchronize(s); /* src is written */
  me->r = (round){.src = src, .n = n, .what = (int)k * 2 + (int)op, .ok = rc == 0};
  int brc = barrier(g);
  const int ok = !brc && agreed(g);
  if (ok && n) {
    rc = dev_compute(me, s, k, op, n, stage);
    const int src_rc = tr_stream_synchronize(s); /* the others' buffers are read */
    if (rc == 0) rc = src_rc;
  }
  if (!brc) brc = barrier(g);
  if (brc && !rc) rc = brc;
  if (ok && n && rc == 0) rc = tr_memcpy(s, dst, stage, out_floats(k, n, g->n) * sizeof(float),
                                    TR_COPY_D2D);
  if (stage) {
    const int frc = tr_stream_free(s, stage);
    if (rc == 0) rc = frc;
  }
  return rc ? rc : ok ? 0 : TR_EINVAL;
}

/* ---- the table's ops ------------------------------------------------------------------------ */

static int run(const tr_tensor_comm *c, tr_stream *s, coll k, tr_reduce op, const float *src,
               float *dst, size_t n) {
  member *me = c->impl;
  const int T = me->g->n;
  atomic_fetch_add_explicit(&me->collectives, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&me->bytes, ring_bytes(k, n, T), memory_order_relaxed);
  if (T == 1) /* nothing to meet for */
    return dst == src || n == 0 ? 0 : tr_memcpy(s, dst, src, n * sizeof *dst, TR_COPY_D2D);
  return me->g->cuda ? dev_run(me, s, k, op, src, dst, n) : host_run(me, k, op, src, dst, n);
}

static int all_reduce(const tr_tensor_comm *c, tr_stream *s, float *buf, size_t n, tr_reduce op) {
  return run(c, s, ALL_REDUCE, op, buf, buf, n);
}

static int all_gather(const tr_tensor_comm *c, tr_stream *s, const float *part, float *whole,
                      size_t n) {
  return run(c, s, ALL_GATHER, TR_REDUCE_SUM, part, whole, n);
}

static int reduce_scatter(const tr_tensor_comm *c, tr_stream *s, const float *whole, float *part,
                          size_t n) {
  return run(c, s, REDUCE_SCATTER, TR_REDUCE_SUM, whole, part, n);
}

/* ---- opening and closing -------------------------------------------------------------------- */

static int check_devices(tr_device *const *devs, int n, char *err, size_t size) {
  if (!devs) return tr_errorf(err, size, TR_EINVAL, "tr_tensor_comms_open: devs is NULL");
  if (n < 1) return tr_errorf(err, size, TR_EINVAL, "tr_tensor_comms_open: n %d: give 1 or more "
                              "devices", n);
  for (int i = 0; i < n; i++) {
    if (!devs[i] || tr_device_is_placeholder(devs[i]))
      return tr_errorf(err, size, TR_EINVAL, "tensor group: member %d is not a device of this "
                       "process", i);
    const tr_device_info *a = tr_device_info_of(devs[0]), *b = tr_device_info_of(devs[i]);
    if (a->kind != b->kind)
      return tr_errorf(err, size, TR_EINVAL, "tensor group: %s and %s are devices of two "
                       "kinds (host and CUDA members do not mix)", a->name, b->name);
    for (int k = 0; k < i; k++) {
      if (devs[k] == devs[i])
        return tr_errorf(err, size, TR_EINVAL, "tensor group: %s is members %d and %d",
                         b->name, k, i);
      if (tr_device_can_access_peer(devs[i], devs[k]) != 1 ||
          tr_device_can_access_peer(devs[k], devs[i]) != 1)
        return tr_errorf(err, size, TR_EINVAL, "tensor group: %s and %s cannot copy to each "
                         "other (no peer access)", tr_device_name(devs[k]), b->name);
    }
  }
  return 0;
}

int tr_tensor_comms_open(tr_device *const *devs, int n, tr_tensor_comm **comms, char *err,
                         size_t err_size) {
  for (int i = 0; comms && i < n; i++) comms[i] = NULL;
  if (!comms) return tr_errorf(err, err_size, TR_EINVAL, "tr_tensor_comms_open: comms is NULL");
  TR__TRY(check_devices(devs, n, err, err_size));
  group *g = calloc(1, sizeof *g + (size_t)n * sizeof(member));
  if (!g) return tr_errorf(err, err_size, TR_ENOMEM, "tensor group of %d: out of memory", n);
  if (pthread_mutex_init(&g->mu, NULL)) {
    free(g);
    return tr_errorf(err, err_size, TR_ESYS, "tensor group of %d: pthread_mutex_init", n);
  }
  if (pthread_cond_init(&g->cv, NULL)) {
    pthread_mutex_destroy(&g->mu);
    free(g);
    return tr_errorf(err, err_size, TR_ESYS, "tensor group of %d: pthread_cond_init", n);
  }
  g->n = n;
  g->cuda = tr_device_info_of(devs[0])->kind == TR_DEVICE_CUDA;
  for (int i = 0; i < n; i++) {
    member *me = &g->m[i];
    me->c = (tr_tensor_comm){.rank = i, .size = n, .all_reduce = all_reduce,
                             .all_gather = all_gather, .reduce_scatter = reduce_scatter,
                             .impl = me};
    me->g = g;
    me->dev = devs[i];
    atomic_init(&me->collectives, 0);
    atomic_init(&me->bytes, 0);
    comms[i] = &me->c;
  }
  return 0;
}

void tr_tensor_comms_close(tr_tensor_comm **comms, int n) {
  if (!comms || n < 1 || !comms[0]) return;
  group *g = ((member *)comms[0]->impl)->g;
  for (int i = 0; i < g->n; i++) free(g->m[i].tmp);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
  for (int i = 0; i < n; i++) comms[i] = NULL;
}

void tr_tensor_comm_abort(const tr_tensor_comm *c) {
  if (c == NULL) return;
  group *g = ((member *)c->impl)->g;
  pthread_mutex_lock(&g->mu);
  g->aborted = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

void tr_tensor_comm_counts(const tr_tensor_comm *c, uint64_t *collectives, uint64_t *bytes_sent) {
  if (c == NULL) { /* none */
    if (collectives) *collectives = 0;
    if (bytes_sent) *bytes_sent = 0;
    return;
  }
  member *me = c->impl;
  if (collectives) *collectives = atomic_load_explicit(&me->collectives, memory_order_relaxed);
  if (bytes_sent) *bytes_sent = atomic_load_explicit(&me->bytes, memory_order_relaxed);
}
