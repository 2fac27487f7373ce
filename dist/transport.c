/* transport.c — the actor that carries a graph's edges between processes over MPI, one per
 * rank (transport.h); its progress thread and sends are progress.c's, its groups' sums
 * collective.c's.
 *
 * Out: an edge whose consumer lives elsewhere hands each message here; it goes out as its
 * type's bytes (tr_msg_codec) in one MPI_Isend to the consumer's rank. In: the progress
 * thread probes for messages from every rank and hands them here; the graph (the host)
 * rebuilds a message pointing into its receive buffer and delivers it to its consumer, and
 * the buffer is kept until the consumer gives the edge's credit back — which goes to the
 * producer's rank, whose transport gives it to the edge there. So credits bound what
 * crosses exactly as they bound what is in flight inside a process. Nothing here counts as
 * progress for the watchdog but messages that come.
 *
 * Protocols between transports: releases; the end of a timed run (rank 0 gathers every
 * rank's claims and sends the end); steps handed out by rank 0; the replica groups' sums
 * across ranks (MPI_Allreduce on a communicator per group); a goodbye from every rank to
 * every rank before any leaves (MPI orders each pair's messages, so a goodbye comes after
 * everything sent before it); and an abort, which ends every rank with the text of the
 * failure. A rank that dies (its lifeline closed: lifelines.h), goes silent (it hangs), or
 * that MPI fails to reach, fails the run — unless the graph says it can go on without it
 * (host.lose: an elastic job's rank of workers only); then nothing more is sent to it, and
 * no goodbye or agreement waits for it. A rank that died after its goodbye had finished its
 * part: the run goes on without it, whatever the graph.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective.h"
#include "transport.h"
#include "transport_state.h"

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

static TR_MSGTYPE_DEFINE(out_type, out_msg);
static TR_MSGTYPE_DEFINE(release_type, release_msg);
static TR_MSGTYPE_DEFINE(cmd_type, cmd_msg);

static uint64_t now_ns(void) { return tr_now_ns(); }

/* ---- sending ------------------------------------------------------------------------------ */

static int post_copy(transport *t, int dest, int tag, const void *p, size_t n) {
  uint8_t *buf = tr__buffer_take(&t->buffers, n ? n : 1);
  if (buf == NULL) return TR_ENOMEM;
  memcpy(buf, p, n);
  return tr__transport_post(t, dest, tag, buf, n);
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
  uint8_t *buf = tr__buffer_take(&t->buffers, HEAD + n);
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
  return tr__transport_post(t, o->rank, TAG_MSG, buf, HEAD + n);
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

static void unhold(transport *t, queue *q, int n) {
  while (n-- > 0 && q->head) {
    held *h = q->head;
    q->head = h->next;
    if (q->head == NULL) q->tail = NULL;
    tr__buffer_give(&t->buffers, h->buf);
    free(h);
  }
}

static int deliver(transport *t, const in_msg *in) {
  if (in->n < HEAD) {
    tr__buffer_give(&t->buffers, in->buf);
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
  tr__buffer_give(&t->buffers, in->buf);
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
  if (++t->frozen + t->nlost < t->size) return 0; /* a rank lost meanwhile answers no more */
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

/* Rank r is gone (`why` follows "its rank r": "died (...)"): 0 when the graph goes on
 * without it (its goodbye and its part of the end's agreement taken as given), else the run
 * fails as before. One whose goodbye came had finished: the graph is not asked. */
static int lose(transport *t, int r, const char *why) {
  if (r < 0 || r == t->rank) return -1;
  if (t->lost[r]) return 0;
  const bool over = t->bye_from[r];
  if (!over && (tr__gather_needs(t, r) || !t->host.lose || t->host.lose(t->host.arg, r, why)))
    return -1;
  t->lost[r] = true;
  t->nlost++;
  if (!t->bye_from[r]) t->bye_from[r] = true, t->byes++;
  int rc = tr__gather_lose(t, r);
  if (rc == 0 && t->rank == 0 && t->finishing && t->frozen + t->nlost >= t->size) {
    /* it never answers */
    t->frozen--; /* frozen() counts one answer: this is none */
    rc = frozen(t, t->frozen_max);
  }
  maybe_done(t);
  return rc;
}

/* ---- the actor ------------------------------------------------------------------------------ */

static int on_incoming(transport *t, in_msg *in) {
  int rc = 0;
  int32_t i32[2] = {0, 0};
  int64_t i64 = 0;
  memcpy(i32, in->buf, in->n < sizeof i32 ? in->n : sizeof i32);
  if (in->n >= sizeof i64) memcpy(&i64, in->buf, sizeof i64);
  if (t->lost[in->source]) { /* the graph went on without it */
    tr__buffer_give(&t->buffers, in->buf);
    return 0;
  }
  switch (in->tag) {
    case TAG_MSG: return deliver(t, in); /* keeps the buffer */
    case TAG_PART:
    case TAG_TOTAL: return tr__gather_receive(t, in); /* keeps the buffer */
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
  tr__buffer_give(&t->buffers, in->buf);
  return rc;
}

static int transport_receive(tr_actor *self, tr_msg *msg) {
  transport *t = tr_actor_state(self);
  if (t->done) {
    if (msg->type == &tr__mpi_in_type) tr__buffer_give(&t->buffers, ((in_msg *)msg)->buf);
    if (msg->type == &out_type) tr_msg_free(((out_msg *)msg)->m);
    return 0;
  }
  if (msg->type == &out_type) {
    return send_out(t, (const out_msg *)msg);
  }
  if (msg->type == &release_type) {
    const release_msg *r = (const release_msg *)msg;
    TR_ASSERT(r->edge >= 0 && r->edge < t->nheld);
    unhold(t, &t->held[r->edge], r->n);
    const int32_t wire[2] = {r->edge, r->n};
    return post_copy(t, r->rank, TAG_RELEASE, wire, sizeof wire);
  }
  if (msg->type == &tr__mpi_in_type) return on_incoming(t, (in_msg *)msg);
  if (msg->type == &tr__sum_type) {
    const tr__sum_msg *s = (const tr__sum_msg *)msg;
    if (t->gathers[s->group]) return tr__gather_start(t, s);
    return s->complete ? tr__sums_complete(t, s, 0) : tr__sums_start(t, s);
  }
  if (msg->type == &tr__mpi_died_type) {
    const int r = ((const died_msg *)msg)->rank;
    char who[512];
    if (lose(t, r, "died (its process ended: its connection closed)") == 0) return 0;
    t->host.describe_rank(t->host.arg, r, who, sizeof who);
    t->remote_failure = true;
    return tr_actor_fail(self, TR_ESTATE, "rank %d died (it ran %s): its process ended, its "
                         "connection to rank %d closed", r, who, t->rank);
  }
  if (msg->type == &tr__mpi_broken_type) {
    const broken_msg *b = (const broken_msg *)msg;
    char who[512], why[MPI_MAX_ERROR_STRING + 32];
    snprintf(why, sizeof why, "cannot be reached (%s)", b->why);
    if (lose(t, b->rank, why) == 0) return 0;
    t->remote_failure = true;
    if (b->rank < 0)
      return tr_actor_fail(self, TR_ESYS, "a sum across ranks failed: %s", b->why);
    t->host.describe_rank(t->host.arg, b->rank, who, sizeof who);
    return tr_actor_fail(self, TR_ESYS, "rank %d cannot be reached (it runs %s): %s", b->rank,
                         who, b->why);
  }
  if (msg->type == &tr__mpi_silent_type) {
    const silent_msg *s = (const silent_msg *)msg;
    char who[512], why[128];
    snprintf(why, sizeof why, "is silent (not heard from for %.1f s)", s->seconds);
    if (lose(t, s->rank, why) == 0) return 0;
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
        return tr__transport_post(t, 0, TAG_FINISH, NULL, 0);
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

/* ---- life ------------------------------------------------------------------------------------ */

static int transport_start(tr_actor *self) {
  transport *t = tr_actor_state(self);
  t->self = self;
  t->nheld = t->host.edge_count(t->host.arg);
  t->held = calloc((size_t)t->nheld + 1, sizeof *t->held);
  t->heard = calloc((size_t)t->size, sizeof *t->heard);
  t->reported = calloc((size_t)t->size, sizeof *t->reported);
  t->bye_from = calloc((size_t)t->size, sizeof *t->bye_from);
  t->lost = calloc((size_t)t->size, sizeof *t->lost);
  t->waits = calloc((size_t)t->size, sizeof *t->waits);
  if (!t->held || !t->heard || !t->reported || !t->bye_from || !t->lost || !t->waits)
    return TR_ENOMEM;
  for (int r = 0; r < t->size; r++) t->heard[r] = now_ns();
  if (MPI_Comm_dup(t->world, &t->comm) != MPI_SUCCESS)
    return tr_actor_fail(self, TR_ESYS, "duplicating the world's communicator failed");
  /* every rank splits the same communicators in the same order */
  for (int k = 0; k < t->ngroups; k++) {
    bool in = false;
    for (int i = 0; i < t->group_n[k]; i++) in |= t->group_ranks[k][i] == t->rank;
    const bool mpi = in && !t->outlive[k]; /* else gathered to its root (collective.c) */
    if (MPI_Comm_split(t->comm, mpi ? k : MPI_UNDEFINED, t->rank, &t->group_comm[k]) != MPI_SUCCESS)
      return tr_actor_fail(self, TR_ESYS, "making the communicator of group %d failed", k);
    if (mpi && tr__sums_open(t, k))
      return tr_actor_fail(self, TR_ESYS, "starting the thread of group %d's sums failed", k);
    if (in && !mpi && tr__gather_open(t, k)) return TR_ENOMEM;
  }
  atomic_store(&t->running, true);
  if (pthread_create(&t->thread, NULL, tr__mpi_progress, t))
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
  for (int k = 0; k < t->ngroups; k++) tr__sums_stop(t->summers[k]);
}

static void transport_destroy(void *state) {
  transport *t = state;
  if (t == NULL) return;
  for (request *q = t->requests, *next; q; q = next) {
    next = q->next;
    if (q->r != MPI_REQUEST_NULL) MPI_Request_free(&q->r);
    tr__buffer_give(&t->buffers, q->buf);
    free(q);
  }
  for (int i = 0; t->held && i < t->nheld; i++) unhold(t, &t->held[i], 1 << 30);
  for (int k = 0; k < t->ngroups; k++) {
    tr__sums_free(t, k);
    tr__gather_free(t, k);
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
  free(t->lost);
  free(t->waits);
  for (incoming *in = t->incoming, *next; in; in = next) { /* a lost rank's: MPI keeps buf */
    next = in->next;
    free(in);
  }
  pthread_mutex_destroy(&t->lock);
  tr__buffers_destroy(&t->buffers);
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
  t->lines = w->lifelines;
  for (int k = 0; k < MAX_GROUPS; k++) t->group_comm[k] = MPI_COMM_NULL;
  pthread_mutex_init(&t->lock, NULL);
  tr__buffers_init(&t->buffers);
  *state = t;
  return 0;
}

void tr__transport_free(void *state) { transport_destroy(state); }

/* ---- what the graph and its actors hand it ---------------------------------------------- */

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

int tr__transport_group(tr_actor *a, int group, const int *ranks, int n, bool outlive) {
  transport *t = tr_actor_state(a);
  if (group != t->ngroups || group >= MAX_GROUPS || n > 64) return TR_EINVAL;
  memcpy(t->group_ranks[group], ranks, (size_t)n * sizeof *ranks);
  t->group_n[group] = n;
  t->outlive[group] = outlive;
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
