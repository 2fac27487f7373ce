/* progress.c — the transport's progress thread (transport_state.h): MPI progresses a request
 * only while it is called, so this thread completes sends, probes for what other ranks sent
 * (handing it to the actor), watches the lifelines (lifelines.h) for a rank whose process
 * died, and sends heartbeats and notices a rank that has gone silent (one that hangs: its
 * process lives). It spins while requests are outstanding and backs off to sub-millisecond
 * sleeps when nothing is, so an idle job costs little and the watchdog still sees an idle
 * graph as idle. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport_state.h"

/* What the thread hands the actor (transport_state.h). */
TR_MSGTYPE_DEFINE(tr__mpi_in_type, in_msg);
TR_MSGTYPE_DEFINE(tr__mpi_silent_type, silent_msg);
TR_MSGTYPE_DEFINE(tr__mpi_died_type, died_msg);
TR_MSGTYPE_DEFINE(tr__mpi_broken_type, broken_msg);

/* ---- sending: the actor posts, the thread completes ----------------------------------------- */

/* MPI_Isend of q's message, q then on the list the progress thread completes (under the
 * lock: the progress thread walks it). */
int tr__mpi_isend(transport *t, request *q, int dest, int tag, const void *buf, int n) {
  pthread_mutex_lock(&t->lock);
  const int rc = MPI_Isend(buf, n, MPI_BYTE, dest, tag, t->comm, &q->r);
  if (rc == MPI_SUCCESS) {
    q->next = t->requests;
    t->requests = q;
  }
  pthread_mutex_unlock(&t->lock);
  return rc;
}

/* The actor's sends, on its thread: an MPI_Isend of `buf` (t->buffers', given back once sent;
 * NULL with n 0) to `dest`. */
int tr__transport_post(transport *t, int dest, int tag, uint8_t *buf, size_t n) {
  request *q = calloc(1, sizeof *q);
  if (q == NULL) {
    tr__buffer_give(&t->buffers, buf);
    return TR_ENOMEM;
  }
  q->buf = buf;
  q->dest = dest;
  if (n > INT_MAX) { /* MPI counts in int */
    tr__buffer_give(&t->buffers, buf);
    free(q);
    return tr_actor_fail(t->self, TR_EINVAL, "sending %zu bytes to rank %d: more than one MPI "
                         "message holds (%d)", n, dest, INT_MAX);
  }
  if (t->lost[dest]) { /* gone: nothing reaches it any more */
    tr__buffer_give(&t->buffers, buf);
    free(q);
    return 0;
  }
  const int rc = tr__mpi_isend(t, q, dest, tag, buf, (int)n);
  if (rc != MPI_SUCCESS) {
    tr__buffer_give(&t->buffers, buf);
    free(q);
    return tr_actor_fail(t->self, TR_ESYS, "sending to rank %d: MPI_Isend failed (%d)", dest, rc);
  }
  return 0;
}

/* An MPI failure the actor is to report (rank -1: not one rank's), from another thread. */
void tr__mpi_broken(transport *t, int rank, int rc) {
  broken_msg *b = tr_msg_new(&tr__mpi_broken_type);
  int len = 0;
  b->rank = rank;
  MPI_Error_string(rc, b->why, &len);
  tr_actor_send(t->self, b);
}

/* ---- the thread ---------------------------------------------------------------------------- */

/* Completes what can be; 1 when anything did, or anything is still out. A send to a rank
 * that is reported gone never completes: it is abandoned to MPI (its request and buffer). */
static int progress_requests(transport *t, bool *pending) {
  int did = 0;
  pthread_mutex_lock(&t->lock);
  for (request **pq = &t->requests; *pq;) {
    request *q = *pq;
    if (t->reported[q->dest]) {
      *pq = q->next;
      free(q);
      continue;
    }
    int flag = 0;
    const int rc = MPI_Test(&q->r, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) {
      pq = &q->next;
      continue;
    }
    *pq = q->next;
    if (rc != MPI_SUCCESS) tr__mpi_broken(t, q->dest, rc); /* a rank gone, typically */
    tr__buffer_give(&t->buffers, q->buf);
    free(q);
    did = 1;
  }
  *pending = t->requests != NULL;
  pthread_mutex_unlock(&t->lock);
  return did;
}

static void heartbeat(transport *t, uint64_t *last) {
  const uint64_t now = tr_now_ns();
  if (now - *last < t->limit_ns / 8) return;
  *last = now;
  for (int r = 0; r < t->size; r++) {
    if (r == t->rank || t->reported[r]) continue;
    request *q = calloc(1, sizeof *q);
    if (q == NULL) continue;
    if (tr__mpi_isend(t, q, r, TAG_HEARTBEAT, NULL, 0) != MPI_SUCCESS) free(q);
    if (!t->reported[r] && !t->bye_from[r] && now - t->heard[r] > t->limit_ns) {
      t->reported[r] = true;
      silent_msg *s = tr_msg_new(&tr__mpi_silent_type);
      s->rank = r;
      s->seconds = (double)(now - t->heard[r]) / 1e9;
      tr_actor_send(t->self, s);
    }
  }
}

/* A rank whose lifeline closed without its goodbye died: the actor is told at once, once. */
static void lifelines(transport *t, uint64_t *last) {
  const uint64_t now = tr_now_ns();
  if (t->lines == NULL || now - *last < 1000000) return; /* a millisecond: a poll(2) */
  *last = now;
  if (!tr__lifelines_watch(t->lines)) return;
  for (int r = 0; r < t->size; r++) {
    if (t->reported[r] || !tr__lifelines_died(t->lines, r)) continue;
    t->reported[r] = true;
    died_msg *d = tr_msg_new(&tr__mpi_died_type);
    d->rank = r;
    tr_actor_send(t->self, d);
  }
}

/* A message's bytes are received without blocking the thread (MPI_Imrecv): a rank that dies
 * in the middle of sending one never completes it, and meanwhile the others' messages come,
 * the heartbeats go on and the silence of the dead rank is noticed (heartbeat). Messages are
 * handed to the actor in the order they were matched, each rank's in its order; those of a
 * rank reported silent are abandoned (their requests and buffers left to MPI). */
static int progress_incoming(transport *t) {
  int flag = 0, did = 0;
  MPI_Message message;
  MPI_Status st;
  if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, t->comm, &flag, &message, &st) == MPI_SUCCESS &&
      flag) {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    incoming *in = calloc(1, sizeof *in), **end = &t->incoming;
    TR_ASSERT(in != NULL &&
              (in->buf = tr__buffer_take(&t->buffers, count > 0 ? (size_t)count : 1)) != NULL);
    *in = (incoming){.buf = in->buf, .count = count, .source = st.MPI_SOURCE,
                     .tag = st.MPI_TAG};
    t->heard[st.MPI_SOURCE] = tr_now_ns(); /* its message has begun to come */
    if (MPI_Imrecv(in->buf, count, MPI_BYTE, &message, &in->r) != MPI_SUCCESS)
      in->r = MPI_REQUEST_NULL, in->complete = true; /* nothing to wait for */
    while (*end) end = &(*end)->next;
    *end = in;
    did = 1;
  }
  bool *waits = t->waits; /* [rank]: an earlier message of it is still coming */
  memset(waits, 0, (size_t)t->size * sizeof *waits);
  for (incoming **p = &t->incoming; *p;) {
    incoming *in = *p;
    const int s = in->source;
    if (t->reported[in->source]) { /* silent or dead: what it began to send never ends */
      *p = in->next;
      free(in);
      continue;
    }
    if (!in->complete && MPI_Test(&in->r, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag)
      in->complete = true;
    if (!in->complete || waits[s]) {
      waits[s] = true;
      p = &in->next;
      continue;
    }
    *p = in->next;
    t->heard[in->source] = tr_now_ns();
    if (in->tag == TAG_HEARTBEAT) {
      tr__buffer_give(&t->buffers, in->buf);
    } else {
      in_msg *m = tr_msg_new(&tr__mpi_in_type);
      m->source = in->source;
      m->tag = in->tag;
      m->buf = in->buf;
      m->n = (size_t)in->count;
      tr_actor_send(t->self, m);
    }
    free(in);
    did = 1;
  }
  return did;
}

void *tr__mpi_progress(void *arg) {
  transport *t = arg;
  pthread_setname_np(pthread_self(), "troupe-mpi");
  uint64_t last_beat = 0, last_watch = 0;
  unsigned idle = 0;
  while (atomic_load(&t->running)) {
    bool pending = false;
    lifelines(t, &last_watch);
    const int did = progress_requests(t, &pending) | progress_incoming(t);
    pending |= t->incoming != NULL;
    heartbeat(t, &last_beat);
    if (did || pending) { /* requests progress only while MPI is called: stay close */
      idle = did ? 0 : idle;
      if (!did && pending) sched_yield();
      continue;
    }
    /* nothing out, nothing in: spin a little, then sleep up to half a millisecond */
    if (++idle < 64) continue;
    const long us = idle < 256 ? 20 : idle < 1024 ? 100 : 500;
    nanosleep(&(struct timespec){0, us * 1000}, NULL);
  }
  return NULL;
}
