/* transport.c — the actor that carries a graph's edges between processes over MPI, one per
 * rank (transport.h).
 *
 * Out: an edge whose consumer lives elsewhere hands each message here; it goes out as its
 * type's bytes (tr_msg_codec) in one MPI_Isend to the consumer's rank. In: a progress thread
 * probes for messages from every rank and hands them here; the graph (the host) rebuilds a
 * message pointing into its receive buffer and delivers it to its consumer, and the buffer is
 * kept until the consumer gives the edge's credit back — which goes to the producer's rank, whose transport gives it
 * to the edge there. So credits bound what crosses exactly as they bound what is in flight
 * inside a process.
 *
 * The same thread completes sends (MPI progresses a request only while it is called), sends
 * heartbeats and notices a rank that has gone silent. Sums run on a thread of their own per
 * replica group, one blocking MPI_Allreduce after another in the order the leader hands
 * them over: Open MPI's nonblocking MPI_Iallreduce (libnbc) reached a third of the blocking
 * one's bandwidth here, and a blocked thread still leaves the progress thread free to
 * notice a rank that is gone. It spins while requests
 * are outstanding and backs off to sub-millisecond sleeps when nothing is, so an idle job
 * costs little and the watchdog still sees an idle graph as idle: nothing here counts as
 * progress but messages that come.
 *
 * Protocols between transports: releases; the end of a timed run (rank 0 gathers every
 * rank's claims and sends the end); steps handed out by rank 0; the replica
 * groups' sums across ranks (MPI_Allreduce on a communicator per group); a goodbye from
 * every rank to every rank before any leaves (MPI orders each pair's messages, so a goodbye
 * comes after everything sent before it); and an abort, which ends every rank with the text
 * of the failure.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective.h"
#include "transport.h"
#include "world_impl.h"


enum {
  TAG_MSG = 1, TAG_RELEASE, TAG_FINISH, TAG_FREEZE, TAG_FROZEN, TAG_END, TAG_TAKE, TAG_GRANT,
  TAG_BYE, TAG_ABORT, TAG_HEARTBEAT
};
enum { HEAD = 64, NAME = 48, MAX_GROUPS = 64 };

/* ---- the messages it takes locally ------------------------------------------------------ */

typedef struct out_msg { /* an edge's message for another rank */
  tr_msg hdr;
  int rank, edge;
  tr_msg *m;
  const tr_msg_codec *codec;
} out_msg;

typedef struct release_msg { /* a consumer here gave credits back */
  tr_msg hdr;
  int rank, edge, n;
} release_msg;

enum { CMD_FINISH, CMD_TAKE, CMD_LOCALS_DONE };
typedef struct cmd_msg {
  tr_msg hdr;
  int what, member;
} cmd_msg;

typedef struct in_msg { /* from the progress thread: what another rank sent */
  tr_msg hdr;
  int source, tag;
  uint8_t *buf;
  size_t n;
} in_msg;

typedef struct silent_msg { /* from the progress thread */
  tr_msg hdr;
  int rank;
  double seconds;
} silent_msg;

typedef struct broken_msg { /* from the progress thread: MPI failed a request */
  tr_msg hdr;
  int rank; /* the send's destination; -1: a sum across ranks */
  char why[MPI_MAX_ERROR_STRING];
} broken_msg;

static TR_MSGTYPE_DEFINE(out_type, out_msg);
static TR_MSGTYPE_DEFINE(release_type, release_msg);
static TR_MSGTYPE_DEFINE(cmd_type, cmd_msg);
static TR_MSGTYPE_DEFINE(in_type, in_msg);
static TR_MSGTYPE_DEFINE(silent_type, silent_msg);
static TR_MSGTYPE_DEFINE(broken_type, broken_msg);

/* ---- its state ------------------------------------------------------------------------------ */

typedef struct held { /* a receive buffer a message points into, until its credit comes back */
  uint8_t *buf;
  struct held *next;
} held;

typedef struct queue {
  held *head, *tail;
} queue;

typedef struct request { /* a send the progress thread completes */
  MPI_Request r;
  int dest;
  uint8_t *buf;   /* freed once complete */
  struct request *next;
} request;

typedef struct summer { /* a group's sums, one after another on a thread of its own */
  pthread_t thread;
  bool started, stop, busy; /* busy: inside MPI_Allreduce */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  tr__sum_msg *queue[256]; /* a ring: a step's buckets, two steps at most */
  int head, n;
} summer;

typedef struct deferred { /* a step asked of rank 0 while the ranks agree on the end */
  int rank, member;
  struct deferred *next;
} deferred;

typedef struct transport {
  tr__transport_host host; /* the graph whose edges it carries */
  tr_actor *self;
  MPI_Comm world; /* the world's */
  MPI_Comm comm;  /* this run's own duplicate: nothing of an earlier graph's reaches it */
  int rank, size;
  uint64_t limit_ns;     /* a rank silent this long has stopped */
  queue *held;           /* [edge id] */
  int nheld;
  /* groups: a communicator each among the ranks that hold members */
  int ngroups;
  int group_ranks[MAX_GROUPS][64], group_n[MAX_GROUPS];
  MPI_Comm group_comm[MAX_GROUPS];
  summer *summers[MAX_GROUPS]; /* where this rank holds members */
  int sum_in[MAX_GROUPS], summed[MAX_GROUPS]; /* the group's edges with its leader here */
  /* the end of a timed run (rank 0 gathers); steps handed out */
  bool finishing, asked_finish;
  int frozen;
  int64_t frozen_max;
  deferred *deferred;
  /* goodbyes */
  bool said_bye, done;
  int byes;
  bool *bye_from; /* [rank] */
  /* the progress thread, and what it shares with the actor under the lock */
  pthread_t thread;
  bool thread_started;
  _Atomic bool running;
  pthread_mutex_t lock;
  request *requests;
  uint64_t *heard;       /* [rank]: last message from it (progress thread only) */
  bool *reported;        /* [rank] */
  bool remote_failure;   /* the run ends for another rank's failure: no abort sent back */
} transport;

static uint64_t now_ns(void) { return tr_now_ns(); }

/* ---- sending ------------------------------------------------------------------------------ */

/* MPI_Isend of q's message, q then on the list the progress thread completes (under the
 * lock: the progress thread walks it). */
static int isend(transport *t, request *q, int dest, int tag, const void *buf, int n) {
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
static void report_broken(transport *t, int rank, int rc) {
  broken_msg *b = tr_msg_new(&broken_type);
  int len = 0;
  b->rank = rank;
  MPI_Error_string(rc, b->why, &len);
  tr_actor_send(t->self, b);
}

/* An MPI_Isend of `buf` (malloc'd, freed once sent; NULL with n 0) to `dest`. */
static int post(transport *t, int dest, int tag, uint8_t *buf, size_t n) {
  request *q = calloc(1, sizeof *q);
  if (q == NULL) {
    free(buf);
    return TR_ENOMEM;
  }
  q->buf = buf;
  q->dest = dest;
  if (n > INT_MAX) { /* MPI counts in int */
    free(buf);
    free(q);
    return tr_actor_fail(t->self, TR_EINVAL, "sending %zu bytes to rank %d: more than one MPI "
                         "message holds (%d)", n, dest, INT_MAX);
  }
  const int rc = isend(t, q, dest, tag, buf, (int)n);
  if (rc != MPI_SUCCESS) {
    free(buf);
    free(q);
    return tr_actor_fail(t->self, TR_ESYS, "sending to rank %d: MPI_Isend failed (%d)", dest, rc);
  }
  return 0;
}

static int post_copy(transport *t, int dest, int tag, const void *p, size_t n) {
  uint8_t *buf = malloc(n ? n : 1);
  if (buf == NULL) return TR_ENOMEM;
  memcpy(buf, p, n);
  return post(t, dest, tag, buf, n);
}

static int post_all(transport *t, int tag, const void *p, size_t n) {
  for (int r = 0; r < t->size; r++) {
    if (r == t->rank) continue;
    int rc = post_copy(t, r, tag, p, n);
    if (rc) return rc;
  }
  return 0;
}

static int send_out(transport *t, const out_msg *o) {
  tr_msg *m = o->m;
  const tr_msg_codec *c = o->codec;
  if (c == NULL) {
    char edge[256];
    t->host.describe_edge(t->host.arg, o->edge, edge, sizeof edge);
    tr_msg_free(m);
    return tr_actor_fail(t->self, TR_EINVAL, "%s on rank %d: a '%s' cannot cross processes "
                         "(no codec: its type has none, or the edge does not carry it)", edge,
                         o->rank, m->type->name);
  }
  const size_t n = c->size(m);
  uint8_t *buf = malloc(HEAD + n);
  if (buf == NULL) {
    tr_msg_free(m);
    return TR_ENOMEM;
  }
  memset(buf, 0, HEAD);
  memcpy(buf, &o->edge, sizeof o->edge);
  snprintf((char *)buf + 8, NAME, "%s", m->type->name);
  c->put(m, buf + HEAD);
  if (c->sent) c->sent(m);
  tr_msg_free(m); /* sent: the runtime never saw it */
  return post(t, o->rank, TAG_MSG, buf, HEAD + n);
}

/* ---- receiving ---------------------------------------------------------------------------- */

static void hold(queue *q, uint8_t *buf) {
  held *h = malloc(sizeof *h);
  TR_ASSERT(h != NULL);
  *h = (held){.buf = buf};
  if (q->tail) q->tail->next = h;
  else q->head = h;
  q->tail = h;
}

static void unhold(queue *q, int n) {
  while (n-- > 0 && q->head) {
    held *h = q->head;
    q->head = h->next;
    if (q->head == NULL) q->tail = NULL;
    free(h->buf);
    free(h);
  }
}

static int deliver(transport *t, const in_msg *in) {
  if (in->n < HEAD) {
    free(in->buf);
    return tr_actor_fail(t->self, TR_EINVAL, "rank %d sent a message of %zu bytes, shorter "
                         "than its head (%d)", in->source, in->n, HEAD);
  }
  int id;
  memcpy(&id, in->buf, sizeof id);
  char name[NAME + 1] = "", why[512] = "";
  memcpy(name, in->buf + 8, NAME);
  const int rc = t->host.deliver(t->host.arg, in->source, id, name, in->buf + HEAD,
                                 in->n - HEAD, why, sizeof why);
  if (rc == 0 && id >= 0 && id < t->nheld) {
    hold(&t->held[id], in->buf);
    return 0;
  }
  free(in->buf);
  if (rc < 0) return tr_actor_fail(t->self, rc, "%s", why);
  TR_ASSERT(rc == 1); /* its part is over: the run is ending */
  return 0;
}

/* ---- the end of a timed run, and shared steps ---------------------------------------------- */

static int grant(transport *t, int rank, int member) {
  const int64_t step = t->host.take(t->host.arg);
  if (step == -2) { /* asked again once the end is known */
    deferred *d = malloc(sizeof *d);
    if (d == NULL) return TR_ENOMEM;
    *d = (deferred){.rank = rank, .member = member, .next = t->deferred};
    t->deferred = d;
    return 0;
  }
  const struct {
    int32_t member, pad;
    int64_t step;
  } g = {member, 0, step};
  return post_copy(t, rank, TAG_GRANT, &g, sizeof g);
}

static int end_at(transport *t, int64_t end) {
  t->host.set_end(t->host.arg, end);
  int rc = 0;
  while (t->deferred && rc == 0) {
    deferred *d = t->deferred;
    t->deferred = d->next;
    rc = grant(t, d->rank, d->member);
    free(d);
  }
  return rc;
}

/* Rank 0: every rank stops claiming and says how far it got. */
static int start_finish(transport *t) {
  if (t->finishing) return 0;
  t->finishing = true;
  t->frozen = 1;
  t->frozen_max = t->host.freeze(t->host.arg);
  return post_all(t, TAG_FREEZE, NULL, 0);
}

static int frozen(transport *t, int64_t claimed) {
  if (claimed > t->frozen_max) t->frozen_max = claimed;
  if (++t->frozen < t->size) return 0;
  const int64_t end = t->frozen_max;
  int rc = post_all(t, TAG_END, &end, sizeof end);
  return rc ? rc : end_at(t, end);
}

/* ---- goodbyes ------------------------------------------------------------------------------- */

static void maybe_done(transport *t) {
  if (t->done || !t->said_bye || t->byes < t->size - 1) return;
  t->done = true;
  t->host.done(t->host.arg, t->self);
}

/* ---- sums across ranks ---------------------------------------------------------------------- */

static void *summer_main(void *arg);

/* A bucket to sum: to its group's thread. */
static int start_sum(transport *t, const tr__sum_msg *s) {
  TR_ASSERT(s->group >= 0 && s->group < t->ngroups && t->summers[s->group] != NULL);
  summer *u = t->summers[s->group];
  /* the thread outlives the message handled: its fields, never its header (the mailbox's,
   * which the next push writes) */
  tr__sum_msg *c = tr_msg_new(&tr__sum_type);
  c->group = s->group;
  c->bucket = s->bucket;
  c->step = s->step;
  c->p = s->p;
  c->n = s->n;
  c->complete = false;
  pthread_mutex_lock(&u->lock);
  const bool room = u->n < (int)(sizeof u->queue / sizeof *u->queue);
  if (room) u->queue[(u->head + u->n++) % (int)(sizeof u->queue / sizeof *u->queue)] = c;
  pthread_cond_signal(&u->wake);
  pthread_mutex_unlock(&u->lock);
  if (room) return 0;
  tr_msg_free(c);
  return tr_actor_fail(t->self, TR_ESTATE, "summing bucket %d of step %lld across ranks: "
                       "more than 256 buckets waiting", s->bucket, (long long)s->step);
}

typedef struct summer_arg {
  transport *t;
  int group;
} summer_arg;

static void *summer_main(void *arg) {
  summer_arg a = *(summer_arg *)arg;
  free(arg);
  transport *t = a.t;
  summer *u = t->summers[a.group];
  char name[16];
  snprintf(name, sizeof name, "troupe-sum%d", a.group);
  pthread_setname_np(pthread_self(), name);
  for (;;) {
    pthread_mutex_lock(&u->lock);
    while (u->n == 0 && !u->stop) pthread_cond_wait(&u->wake, &u->lock);
    if (u->n == 0) { /* stopped */
      pthread_mutex_unlock(&u->lock);
      return NULL;
    }
    tr__sum_msg *s = u->queue[u->head];
    u->head = (u->head + 1) % (int)(sizeof u->queue / sizeof *u->queue);
    u->n--;
    u->busy = true;
    pthread_mutex_unlock(&u->lock);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, s->p, (int)s->n, MPI_FLOAT, MPI_SUM,
                                 t->group_comm[a.group]);
    /* Under the lock to the end: stop_summer takes it to stop the thread, so the transport
     * (and the message pool behind s) outlive every use here. */
    pthread_mutex_lock(&u->lock);
    u->busy = false;
    if (u->stop) { /* left behind inside the sum: the transport may be gone, s with it */
      pthread_mutex_unlock(&u->lock);
      return NULL;
    }
    if (rc != MPI_SUCCESS) { /* a rank that is gone, typically: the actor fails the run */
      tr_msg_free(s);
      report_broken(t, -1, rc);
      pthread_mutex_unlock(&u->lock);
      return NULL;
    }
    s->complete = true;
    tr_actor_send(t->self, s); /* back to the actor, which owns the edges */
    pthread_mutex_unlock(&u->lock);
  }
}

static int start_summer(transport *t, int group) {
  summer *u = calloc(1, sizeof *u);
  summer_arg *a = malloc(sizeof *a);
  if (u == NULL || a == NULL) {
    free(u);
    free(a);
    return TR_ENOMEM;
  }
  pthread_mutex_init(&u->lock, NULL);
  pthread_cond_init(&u->wake, NULL);
  t->summers[group] = u;
  *a = (summer_arg){t, group};
  if (pthread_create(&u->thread, NULL, summer_main, a)) {
    free(a);
    return TR_ESYS;
  }
  u->started = true;
  return 0;
}

/* Stops a group's thread; one still inside a sum whose other ranks are gone is left
 * behind (the process is on its way out: the world ends the job). */
static void stop_summer(summer *u) {
  if (u == NULL || !u->started) return;
  pthread_mutex_lock(&u->lock);
  u->stop = true;
  const bool stuck = u->busy;
  pthread_cond_signal(&u->wake);
  pthread_mutex_unlock(&u->lock);
  if (stuck) pthread_detach(u->thread);
  else pthread_join(u->thread, NULL);
  u->started = stuck;
}

/* The sum is in place: its credit back, and the leader told on its "summed" edge. */
static int sum_complete(transport *t, const tr__sum_msg *s) {
  t->host.release(t->host.arg, t->sum_in[s->group], 1);
  tr__summed_msg *d = tr_msg_new(&tr__summed_type);
  d->bucket = s->bucket;
  d->step = s->step;
  return t->host.send(t->host.arg, t->summed[s->group], &d->hdr);
}

/* ---- the actor ------------------------------------------------------------------------------ */

static int on_incoming(transport *t, in_msg *in) {
  int rc = 0;
  int32_t i32[2] = {0, 0};
  int64_t i64 = 0;
  memcpy(i32, in->buf, in->n < sizeof i32 ? in->n : sizeof i32);
  if (in->n >= sizeof i64) memcpy(&i64, in->buf, sizeof i64);
  switch (in->tag) {
    case TAG_MSG: return deliver(t, in); /* keeps the buffer */
    case TAG_RELEASE: t->host.release(t->host.arg, i32[0], i32[1]); break;
    case TAG_FINISH: rc = start_finish(t); break;
    case TAG_FREEZE: {
      const int64_t claimed = t->host.freeze(t->host.arg);
      rc = post_copy(t, 0, TAG_FROZEN, &claimed, sizeof claimed);
      break;
    }
    case TAG_FROZEN: rc = frozen(t, i64); break;
    case TAG_END: rc = end_at(t, i64); break;
    case TAG_TAKE: rc = grant(t, in->source, i32[0]); break;
    case TAG_GRANT: {
      int64_t step = -1;
      if (in->n >= 8 + sizeof step) memcpy(&step, in->buf + 8, sizeof step);
      t->host.grant(t->host.arg, i32[0], step);
      break;
    }
    case TAG_BYE:
      if (!t->bye_from[in->source]) t->bye_from[in->source] = true, t->byes++;
      maybe_done(t);
      break;
    case TAG_ABORT: {
      char text[1024];
      snprintf(text, sizeof text, "%.*s", (int)in->n, (const char *)in->buf);
      t->remote_failure = true;
      rc = tr_actor_fail(t->self, TR_ESTATE, "rank %d failed: %s", in->source, text);
      break;
    }
    default: break;
  }
  free(in->buf);
  return rc;
}

static int transport_receive(tr_actor *self, tr_msg *msg) {
  transport *t = tr_actor_state(self);
  if (t->done) {
    if (msg->type == &in_type) free(((in_msg *)msg)->buf);
    if (msg->type == &out_type) tr_msg_free(((out_msg *)msg)->m);
    return 0;
  }
  if (msg->type == &out_type) {
    return send_out(t, (const out_msg *)msg);
  }
  if (msg->type == &release_type) {
    const release_msg *r = (const release_msg *)msg;
    TR_ASSERT(r->edge >= 0 && r->edge < t->nheld);
    unhold(&t->held[r->edge], r->n);
    const int32_t wire[2] = {r->edge, r->n};
    return post_copy(t, r->rank, TAG_RELEASE, wire, sizeof wire);
  }
  if (msg->type == &in_type) return on_incoming(t, (in_msg *)msg);
  if (msg->type == &tr__sum_type) {
    const tr__sum_msg *s = (const tr__sum_msg *)msg;
    return s->complete ? sum_complete(t, s) : start_sum(t, s);
  }
  if (msg->type == &broken_type) {
    const broken_msg *b = (const broken_msg *)msg;
    char who[512];
    t->remote_failure = true;
    if (b->rank < 0)
      return tr_actor_fail(self, TR_ESYS, "a sum across ranks failed: %s", b->why);
    t->host.describe_rank(t->host.arg, b->rank, who, sizeof who);
    return tr_actor_fail(self, TR_ESYS, "rank %d cannot be reached (it runs %s): %s", b->rank,
                         who, b->why);
  }
  if (msg->type == &silent_type) {
    const silent_msg *s = (const silent_msg *)msg;
    char who[512];
    t->host.describe_rank(t->host.arg, s->rank, who, sizeof who);
    t->remote_failure = true;
    return tr_actor_fail(self, TR_ETIMEDOUT, "rank %d has not been heard from for %.1f s (it "
                         "runs %s): it stopped, or its host did", s->rank, s->seconds, who);
  }
  if (msg->type == &cmd_type) {
    const cmd_msg *c = (const cmd_msg *)msg;
    switch (c->what) {
      case CMD_FINISH:
        if (t->rank == 0) return start_finish(t);
        if (t->asked_finish) return 0;
        t->asked_finish = true;
        return post(t, 0, TAG_FINISH, NULL, 0);
      case CMD_TAKE: {
        const int32_t m = c->member;
        return post_copy(t, 0, TAG_TAKE, &m, sizeof m);
      }
      case CMD_LOCALS_DONE:
        t->said_bye = true;
        {
          int rc = post_all(t, TAG_BYE, NULL, 0);
          if (rc) return rc;
        }
        maybe_done(t);
        return 0;
    }
  }
  return 0; /* the graph's end of the run: nothing to do */
}

/* ---- the progress thread -------------------------------------------------------------------- */

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
    if (rc != MPI_SUCCESS) report_broken(t, q->dest, rc); /* a rank gone, typically */
    free(q->buf);
    free(q);
    did = 1;
  }
  *pending = t->requests != NULL;
  pthread_mutex_unlock(&t->lock);
  return did;
}

static int progress_incoming(transport *t) {
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
  MPI_Mrecv(buf, count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  t->heard[st.MPI_SOURCE] = now_ns();
  if (st.MPI_TAG == TAG_HEARTBEAT) {
    free(buf);
    return 1;
  }
  in_msg *in = tr_msg_new(&in_type);
  in->source = st.MPI_SOURCE;
  in->tag = st.MPI_TAG;
  in->buf = buf;
  in->n = (size_t)count;
  tr_actor_send(t->self, in);
  return 1;
}

static void heartbeat(transport *t, uint64_t *last) {
  const uint64_t now = now_ns();
  if (now - *last < t->limit_ns / 8) return;
  *last = now;
  for (int r = 0; r < t->size; r++) {
    if (r == t->rank) continue;
    request *q = calloc(1, sizeof *q);
    if (q == NULL) continue;
    if (isend(t, q, r, TAG_HEARTBEAT, NULL, 0) != MPI_SUCCESS) free(q);
    if (!t->reported[r] && !t->bye_from[r] && now - t->heard[r] > t->limit_ns) {
      t->reported[r] = true;
      silent_msg *s = tr_msg_new(&silent_type);
      s->rank = r;
      s->seconds = (double)(now - t->heard[r]) / 1e9;
      tr_actor_send(t->self, s);
    }
  }
}

static void *progress(void *arg) {
  transport *t = arg;
  pthread_setname_np(pthread_self(), "troupe-mpi");
  uint64_t last_beat = 0;
  unsigned idle = 0;
  while (atomic_load(&t->running)) {
    bool pending = false;
    const int did = progress_requests(t, &pending) | progress_incoming(t);
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

/* ---- life ------------------------------------------------------------------------------------ */

static int transport_start(tr_actor *self) {
  transport *t = tr_actor_state(self);
  t->self = self;
  t->nheld = t->host.edge_count(t->host.arg);
  t->held = calloc((size_t)t->nheld + 1, sizeof *t->held);
  t->heard = calloc((size_t)t->size, sizeof *t->heard);
  t->reported = calloc((size_t)t->size, sizeof *t->reported);
  t->bye_from = calloc((size_t)t->size, sizeof *t->bye_from);
  if (!t->held || !t->heard || !t->reported || !t->bye_from) return TR_ENOMEM;
  for (int r = 0; r < t->size; r++) t->heard[r] = now_ns();
  if (MPI_Comm_dup(t->world, &t->comm) != MPI_SUCCESS)
    return tr_actor_fail(self, TR_ESYS, "duplicating the world's communicator failed");
  /* every rank splits the same communicators in the same order */
  for (int k = 0; k < t->ngroups; k++) {
    bool in = false;
    for (int i = 0; i < t->group_n[k]; i++) in |= t->group_ranks[k][i] == t->rank;
    if (MPI_Comm_split(t->comm, in ? k : MPI_UNDEFINED, t->rank, &t->group_comm[k]) != MPI_SUCCESS)
      return tr_actor_fail(self, TR_ESYS, "making the communicator of group %d failed", k);
    if (in && start_summer(t, k))
      return tr_actor_fail(self, TR_ESYS, "starting the thread of group %d's sums failed", k);
  }
  atomic_store(&t->running, true);
  if (pthread_create(&t->thread, NULL, progress, t))
    return tr_actor_fail(self, TR_ESYS, "starting the MPI progress thread failed");
  t->thread_started = true;
  return 0;
}

/* Stops the progress thread once what was sent has gone (a rank that is gone may never take
 * it: then after a second). An unfinished run tells every rank why first. */
static void transport_stop(tr_actor *self) {
  transport *t = tr_actor_state(self);
  if (!t->done && !t->remote_failure) {
    const char *why = tr_system_error(tr_actor_system(self));
    post_all(t, TAG_ABORT, why && *why ? why : "stopped", why && *why ? strlen(why) : 7);
  }
  const uint64_t until = now_ns() + 1000000000ull;
  bool pending = true;
  while (t->thread_started && pending && now_ns() < until) {
    pthread_mutex_lock(&t->lock);
    pending = t->requests != NULL;
    pthread_mutex_unlock(&t->lock);
    if (pending) nanosleep(&(struct timespec){0, 100000}, NULL);
  }
  atomic_store(&t->running, false);
  if (t->thread_started) pthread_join(t->thread, NULL);
  t->thread_started = false;
  for (int k = 0; k < t->ngroups; k++) stop_summer(t->summers[k]);
}

static void transport_destroy(void *state) {
  transport *t = state;
  if (t == NULL) return;
  for (request *q = t->requests, *next; q; q = next) {
    next = q->next;
    if (q->r != MPI_REQUEST_NULL) MPI_Request_free(&q->r);
    free(q->buf);
    free(q);
  }
  for (int i = 0; t->held && i < t->nheld; i++) unhold(&t->held[i], 1 << 30);
  for (int k = 0; k < t->ngroups; k++) {
    summer *u = t->summers[k];
    if (u && u->started) continue; /* left behind inside a sum: its memory and communicator too */
    if (u) {
      for (int i = 0; i < u->n; i++)
        tr_msg_free(u->queue[(u->head + i) % (int)(sizeof u->queue / sizeof *u->queue)]);
      pthread_mutex_destroy(&u->lock);
      pthread_cond_destroy(&u->wake);
      free(u);
    }
    if (t->group_comm[k] != MPI_COMM_NULL) MPI_Comm_free(&t->group_comm[k]);
  }
  if (t->comm != MPI_COMM_NULL) MPI_Comm_free(&t->comm);
  while (t->deferred) {
    deferred *d = t->deferred;
    t->deferred = d->next;
    free(d);
  }
  free(t->held);
  free(t->heard);
  free(t->reported);
  free(t->bye_from);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

const tr_behaviour tr__transport_behaviour = {.name = "transport",
                                                 .start = transport_start,
                                                 .receive = transport_receive,
                                                 .stop = transport_stop,
                                                 .destroy = transport_destroy};

int tr__transport_new(tr_world *w, const tr__transport_host *host, int watchdog_ms,
                      void **state) {
  *state = NULL;
  transport *t = calloc(1, sizeof *t);
  if (t == NULL) return TR_ENOMEM;
  t->host = *host;
  t->world = w->comm;
  t->comm = MPI_COMM_NULL;
  t->rank = w->rank;
  t->size = w->size;
  t->limit_ns = (uint64_t)(watchdog_ms > 0 ? watchdog_ms : 60000) * 1000000ull;
  for (int k = 0; k < MAX_GROUPS; k++) t->group_comm[k] = MPI_COMM_NULL;
  pthread_mutex_init(&t->lock, NULL);
  *state = t;
  return 0;
}

void tr__transport_free(void *state) { transport_destroy(state); }

/* ---- what the graph and its actors hand it ------------------------------------------------------ */

void tr__transport_send(tr_actor *a, int rank, int edge, tr_msg *m, const tr_msg_codec *codec) {
  out_msg *o = tr_msg_new(&out_type);
  o->rank = rank;
  o->edge = edge;
  o->m = m;
  o->codec = codec;
  tr_actor_send(a, o);
}

void tr__transport_release(tr_actor *a, int rank, int edge, int n) {
  release_msg *r = tr_msg_new(&release_type);
  r->rank = rank;
  r->edge = edge;
  r->n = n;
  tr_actor_send(a, r);
}

static void command(tr_actor *a, int what, int member) {
  cmd_msg *c = tr_msg_new(&cmd_type);
  c->what = what;
  c->member = member;
  tr_actor_send(a, c);
}

void tr__transport_finish(tr_actor *a) { command(a, CMD_FINISH, -1); }
void tr__transport_take(tr_actor *a, int member) { command(a, CMD_TAKE, member); }
void tr__transport_locals_done(tr_actor *a) { command(a, CMD_LOCALS_DONE, -1); }

int tr__transport_group(tr_actor *a, int group, const int *ranks, int n) {
  transport *t = tr_actor_state(a);
  if (group != t->ngroups || group >= MAX_GROUPS || n > 64) return TR_EINVAL;
  memcpy(t->group_ranks[group], ranks, (size_t)n * sizeof *ranks);
  t->group_n[group] = n;
  t->ngroups++;
  return 0;
}

int tr__transport_group_edges(tr_actor *a, int group, int sum, int summed) {
  transport *t = tr_actor_state(a);
  if (group < 0 || group >= t->ngroups) return TR_EINVAL;
  t->sum_in[group] = sum;
  t->summed[group] = summed;
  return 0;
}
