/* progress.c — the transport's progress thread (transport_impl.h): MPI progresses a request
 * only while it is called, so this thread completes sends, probes for what other ranks sent
 * (handing it to the actor), sends heartbeats and notices a rank that has gone silent. It
 * spins while requests are outstanding and backs off to sub-millisecond sleeps when nothing
 * is, so an idle job costs little and the watchdog still sees an idle graph as idle. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "transport_impl.h"

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

/* An MPI failure the actor is to report (rank -1: not one rank's), from another thread. */
void tr__mpi_broken(transport *t, int rank, int rc) {
  broken_msg *b = tr_msg_new(&tr__mpi_broken_type);
  int len = 0;
  b->rank = rank;
  MPI_Error_string(rc, b->why, &len);
  tr_actor_send(t->self, b);
}

/* Completes what can be; 1 when anything did, or anything is still out. */
static int progress_requests(transport *t, bool *pending) {
  int did = 0;
  pthread_mutex_lock(&t->lock);
  for (request **pq = &t->requests; *pq;) {
    request *q = *pq;
    int flag = 0;
    const int rc = MPI_Test(&q->r, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) {
      pq = &q->next;
      continue;
    }
    *pq = q->next;
    if (rc != MPI_SUCCESS) tr__mpi_broken(t, q->dest, rc); /* a rank gone, typically */
    free(q->buf);
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
    if (r == t->rank) continue;
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

/* The message MPI_Improbe matched, received without blocking the thread: a rank that dies
 * in the middle of sending never completes it, and meanwhile the heartbeats go on and the
 * sender's silence is noticed (heartbeat); then the receive is abandoned (its request and
 * buffer left to MPI), and the rank is the actor's to lose. 0: abandoned. */
static int receive(transport *t, MPI_Message *message, uint8_t *buf, int count, int source,
                   uint64_t *last_beat) {
  MPI_Request r;
  if (MPI_Imrecv(buf, count, MPI_BYTE, message, &r) != MPI_SUCCESS) return 0;
  for (int flag = 0;;) {
    if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    if (flag) return 1;
    if (t->reported[source] || !atomic_load(&t->running)) return 0;
    bool pending;
    progress_requests(t, &pending);
    heartbeat(t, last_beat);
    sched_yield();
  }
}

static int progress_incoming(transport *t, uint64_t *last_beat) {
  int flag = 0;
  MPI_Message message;
  MPI_Status st;
  if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, t->comm, &flag, &message, &st) != MPI_SUCCESS ||
      !flag)
    return 0;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  uint8_t *buf = malloc(count > 0 ? (size_t)count : 1);
  TR_ASSERT(buf != NULL);
  t->heard[st.MPI_SOURCE] = tr_now_ns(); /* its message has begun to come */
  if (!receive(t, &message, buf, count, st.MPI_SOURCE, last_beat)) return 1; /* buf is MPI's */
  t->heard[st.MPI_SOURCE] = tr_now_ns();
  if (st.MPI_TAG == TAG_HEARTBEAT) {
    free(buf);
    return 1;
  }
  in_msg *in = tr_msg_new(&tr__mpi_in_type);
  in->source = st.MPI_SOURCE;
  in->tag = st.MPI_TAG;
  in->buf = buf;
  in->n = (size_t)count;
  tr_actor_send(t->self, in);
  return 1;
}

void *tr__mpi_progress(void *arg) {
  transport *t = arg;
  pthread_setname_np(pthread_self(), "troupe-mpi");
  uint64_t last_beat = 0;
  unsigned idle = 0;
  while (atomic_load(&t->running)) {
    bool pending = false;
    const int did = progress_requests(t, &pending) | progress_incoming(t, &last_beat);
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
