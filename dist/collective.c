/* collective.c — the collectives as a service (collective.h): the rounds that agree NCCL
 * communicators' ids across ranks, and the replica groups' sums across ranks, which the
 * transport's actor hands to a thread per group (transport_state.h), or, for a group whose
 * sums outlive a rank, gathers to the group's first rank (below). Each group's sums are one
 * blocking MPI_Allreduce after another, in the order the leader hands them over: Open MPI's
 * nonblocking MPI_Iallreduce (libnbc) reached a third of the blocking one's bandwidth here,
 * and a blocked thread still leaves the progress thread free to notice a rank that is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "transport_state.h"

TR_MSGTYPE_DEFINE(tr__sum_type, tr__sum_msg);
TR_MSGTYPE_DEFINE(tr__summed_type, tr__summed_msg);

int tr__dist_comm_round(tr_world *w, int owner, bool yes, tr__comm_word **all, char *why,
                        size_t size) {
  tr__comm_word mine = {0};
  if (yes)
    mine.yes = tr_world_rank(w) != owner ||
               tr_comm_id_init(TR_DEVICE_CUDA, &mine.id, why, size) == 0;
  if (!(*all = calloc((size_t)tr_world_size(w), sizeof **all))) return TR_ENOMEM;
  if (tr_world_allgather(w, &mine, sizeof mine, *all) == 0) return 0;
  free(*all);
  *all = NULL;
  return TR_ESYS;
}

/* ---- the replica groups' sums across ranks -------------------------------------------------- */

struct summer { /* a group's sums, one after another on a thread of its own */
  pthread_t thread;
  bool started, stop, busy; /* busy: inside MPI_Allreduce */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  tr__sum_msg *queue[256]; /* a ring: a step's buckets, two steps at most */
  int head, n;
};

static void *summer_main(void *arg);

/* A bucket to sum: to its group's thread. */
int tr__sums_start(transport *t, const tr__sum_msg *s) {
  TR_ASSERT(s->group >= 0 && s->group < t->ngroups && t->summers[s->group] != NULL);
  summer *u = t->summers[s->group];
  /* the thread outlives the message handled: its fields, never its header (the mailbox's,
   * which the next push writes) */
  tr__sum_msg *c = tr_msg_new(&tr__sum_type);
  *c = (tr__sum_msg){.hdr = c->hdr, .group = s->group, .bucket = s->bucket,
                     .buckets = s->buckets, .members = s->members, .step = s->step, .p = s->p,
                     .n = s->n};
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
      tr__mpi_broken(t, -1, rc);
      pthread_mutex_unlock(&u->lock);
      return NULL;
    }
    s->complete = true;
    tr_actor_send(t->self, s); /* back to the actor, which owns the edges */
    pthread_mutex_unlock(&u->lock);
  }
}

int tr__sums_open(transport *t, int group) {
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
void tr__sums_stop(summer *u) {
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

/* The sum is in place, over `members` (0: every member): its credit back, and the leader
 * told on its "summed" edge. */
int tr__sums_complete(transport *t, const tr__sum_msg *s, int members) {
  t->host.release(t->host.arg, t->sum_in[s->group], 1);
  tr__summed_msg *d = tr_msg_new(&tr__summed_type);
  d->bucket = s->bucket;
  d->members = members;
  d->step = s->step;
  return t->host.send(t->host.arg, t->summed[s->group], &d->hdr);
}

/* Frees group k's thread state and communicator, unless its thread was left behind inside a
 * sum (then they go with the process). */
void tr__sums_free(transport *t, int k) {
  summer *u = t->summers[k];
  if (u && u->started) return; /* left behind inside a sum: its memory and communicator too */
  if (u) {
    for (int i = 0; i < u->n; i++)
      tr_msg_free(u->queue[(u->head + i) % (int)(sizeof u->queue / sizeof *u->queue)]);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->wake);
    free(u);
  }
  if (t->group_comm[k] != MPI_COMM_NULL) MPI_Comm_free(&t->group_comm[k]);
}

/* ---- a group's sums that outlive a rank (collective.h, transport_state.h) ------------------
 *
 * Local SGD's elastic replicas across ranks, where a rank that dies must leave the others
 * summing on without it, and no two ranks may take different sums for one step.
 *
 * MPI_Allreduce cannot: a sum whose other rank died never returns, and one that died midway
 * may have left some ranks the whole sum and others none (Open MPI 4.1 has no ULFM to say
 * which). So each step's buckets are gathered to the group's first rank (its root): every
 * other rank's leader sends each bucket there (TAG_PART), and once the root holds every
 * bucket of the step from every rank still alive, it sums each in rank order (the same bits
 * whatever came first), writes the sum into its own and sends it back to each (TAG_TOTAL),
 * saying how many members took part. A rank lost before the root had all of its buckets
 * takes no part in that step, whatever of it had come; one lost after, took part. Nothing of
 * a step goes back before the whole step is summed, so a step's buckets are summed over one
 * set of ranks, and a member's mean divides by one count. The root itself cannot be lost
 * (tr__gather_needs): the run fails then, naming it.
 *
 * One step at a time: a leader hands the next step's buckets once it has every sum of this
 * one (group.h), and the root sends those sums only once it has all of the step's. */

typedef struct head { /* a part's or a total's, before its floats */
  int32_t group, bucket, buckets, members;
  int64_t step;
} head;

struct gather {
  int n;                /* the group's ranks (t->group_ranks[k]) */
  int me;               /* this rank's index among them; the root's is 0 */
  bool *gone;           /* [index]: lost */
  int64_t step;         /* the step in hand; -1: none */
  int buckets;          /* its buckets (every rank's leader holds the same stage) */
  tr__sum_msg **mine;   /* [bucket]: this rank's, handed over and not yet summed */
  int own, members;     /* how many of them; the members taking part here */
  int *got, *theirs;    /* [index]: the root's count of each rank's buckets, its members */
  uint8_t **parts;      /* [index × bucket]: their buffers, at the root */
};

static int index_of(const transport *t, int k, int rank) {
  for (int i = 0; i < t->group_n[k]; i++)
    if (t->group_ranks[k][i] == rank) return i;
  return -1;
}

int tr__gather_open(transport *t, int k) {
  gather *g = calloc(1, sizeof *g);
  if (g == NULL) return TR_ENOMEM;
  t->gathers[k] = g;
  g->n = t->group_n[k];
  g->me = index_of(t, k, t->rank);
  g->step = -1;
  g->gone = calloc((size_t)g->n, sizeof *g->gone);
  g->got = calloc((size_t)g->n, sizeof *g->got);
  g->theirs = calloc((size_t)g->n, sizeof *g->theirs);
  return g->gone && g->got && g->theirs ? 0 : TR_ENOMEM;
}

/* Step `step` of `buckets` buckets is in hand (its arrays made on its first message). */
static int begin(transport *t, gather *g, int64_t step, int buckets) {
  if (g->step == step && buckets == g->buckets) return 0;
  if (g->step == step)
    return tr_actor_fail(t->self, TR_ESTATE, "summing step %lld across ranks: %d buckets, and "
                         "%d: the ranks hold different stages", (long long)step, buckets,
                         g->buckets);
  if (g->step >= 0 || buckets < 1)
    return tr_actor_fail(t->self, TR_ESTATE, "summing across ranks: step %lld came while step "
                         "%lld was being summed", (long long)step, (long long)g->step);
  free(g->mine);
  free(g->parts);
  g->mine = calloc((size_t)buckets, sizeof *g->mine);
  g->parts = calloc((size_t)buckets * (size_t)g->n, sizeof *g->parts);
  if (!g->mine || !g->parts) return TR_ENOMEM;
  g->step = step;
  g->buckets = buckets;
  g->own = g->members = 0;
  memset(g->got, 0, (size_t)g->n * sizeof *g->got);
  memset(g->theirs, 0, (size_t)g->n * sizeof *g->theirs);
  return 0;
}

/* A part or a total: its head, then n floats, to rank `dest`. */
static int post_floats(transport *t, int dest, int tag, const head *h, const float *p, size_t n) {
  const size_t bytes = sizeof *h + n * sizeof *p;
  uint8_t *buf = tr__buffer_take(&t->buffers, bytes);
  if (buf == NULL) return TR_ENOMEM;
  memcpy(buf, h, sizeof *h);
  memcpy(buf + sizeof *h, p, n * sizeof *p);
  return tr__transport_post(t, dest, tag, buf, bytes);
}

/* The root: every bucket of the step from every rank alive is here — summed in rank order
 * into this rank's, sent back, and this rank's leader told. */
static int complete(transport *t, int k) {
  gather *g = t->gathers[k];
  if (g->step < 0 || g->own < g->buckets) return 0;
  int members = g->members;
  for (int i = 1; i < g->n; i++) {
    if (!g->gone[i] && g->got[i] < g->buckets) return 0;
    if (!g->gone[i]) members += g->theirs[i];
  }
  int rc = 0;
  for (int b = 0; b < g->buckets && rc == 0; b++) {
    tr__sum_msg *s = g->mine[b];
    for (int i = 1; i < g->n; i++) {
      const uint8_t *part = g->parts[(size_t)i * g->buckets + b];
      if (g->gone[i] || part == NULL) continue;
      const float *q = (const float *)(part + sizeof(head));
      for (size_t e = 0; e < s->n; e++) s->p[e] += q[e];
    }
    const head h = {.group = k, .bucket = b, .buckets = g->buckets, .members = members,
                    .step = g->step};
    for (int i = 1; i < g->n && rc == 0; i++)
      if (!g->gone[i]) rc = post_floats(t, t->group_ranks[k][i], TAG_TOTAL, &h, s->p, s->n);
  }
  for (int b = 0; b < g->buckets && rc == 0; b++) rc = tr__sums_complete(t, g->mine[b], members);
  for (int b = 0; b < g->buckets; b++) tr_msg_free(g->mine[b]);
  for (size_t i = 0; i < (size_t)g->n * g->buckets; i++) tr__buffer_give(&t->buffers, g->parts[i]);
  memset(g->mine, 0, (size_t)g->buckets * sizeof *g->mine);
  memset(g->parts, 0, (size_t)g->n * g->buckets * sizeof *g->parts);
  g->step = -1;
  return rc;
}

int tr__gather_start(transport *t, const tr__sum_msg *s) {
  gather *g = t->gathers[s->group];
  int rc = begin(t, g, s->step, s->buckets);
  if (rc) return rc;
  if (s->bucket < 0 || s->bucket >= g->buckets || g->mine[s->bucket])
    return tr_actor_fail(t->self, TR_ESTATE, "summing bucket %d of step %lld across ranks twice",
                         s->bucket, (long long)s->step);
  tr__sum_msg *c = tr_msg_new(&tr__sum_type); /* the fields: s's header is the mailbox's */
  *c = (tr__sum_msg){.hdr = c->hdr, .group = s->group, .bucket = s->bucket,
                     .buckets = s->buckets, .members = s->members, .step = s->step, .p = s->p,
                     .n = s->n};
  g->mine[s->bucket] = c;
  g->own++;
  g->members = s->members;
  if (g->me == 0) return complete(t, s->group);
  const head h = {.group = s->group, .bucket = s->bucket, .buckets = s->buckets,
                  .members = s->members, .step = s->step};
  return post_floats(t, t->group_ranks[s->group][0], TAG_PART, &h, s->p, s->n);
}

/* What came from `source` with tag TAG_PART or TAG_TOTAL: its group, its head read. NULL
 * where it is not one (the actor fails, saying so). */
static gather *group_of(transport *t, const in_msg *in, head *h) {
  if (in->n < sizeof *h) return NULL;
  memcpy(h, in->buf, sizeof *h);
  if (h->group < 0 || h->group >= t->ngroups || !t->gathers[h->group]) return NULL;
  const size_t floats = (in->n - sizeof *h) / sizeof(float);
  const gather *g = t->gathers[h->group];
  if (h->bucket < 0 || h->bucket >= h->buckets) return NULL;
  if (in->tag == TAG_TOTAL) /* for a bucket this rank handed over, of its size */
    return g->step == h->step && h->buckets == g->buckets && g->mine[h->bucket] &&
           g->mine[h->bucket]->n == floats ? t->gathers[h->group] : NULL;
  return g->me == 0 && index_of(t, h->group, in->source) > 0 ? t->gathers[h->group] : NULL;
}

int tr__gather_receive(transport *t, in_msg *in) {
  head h;
  gather *g = group_of(t, in, &h);
  if (g == NULL) {
    tr__buffer_give(&t->buffers, in->buf);
    return tr_actor_fail(t->self, TR_ESTATE, "rank %d sent a sum's %s of %zu bytes that no "
                         "group here awaits", in->source, in->tag == TAG_TOTAL ? "total" : "part",
                         in->n);
  }
  if (in->tag == TAG_TOTAL) {
    tr__sum_msg *s = g->mine[h.bucket];
    memcpy(s->p, in->buf + sizeof h, s->n * sizeof *s->p);
    tr__buffer_give(&t->buffers, in->buf);
    g->mine[h.bucket] = NULL;
    const int rc = tr__sums_complete(t, s, h.members);
    tr_msg_free(s);
    if (--g->own == 0) g->step = -1; /* every sum of the step is here */
    return rc;
  }
  const int i = index_of(t, h.group, in->source);
  int rc = begin(t, g, h.step, h.buckets);
  if (rc == 0 && g->parts[(size_t)i * g->buckets + h.bucket])
    rc = tr_actor_fail(t->self, TR_ESTATE, "rank %d sent bucket %d of step %lld twice",
                       in->source, h.bucket, (long long)h.step);
  if (rc) {
    tr__buffer_give(&t->buffers, in->buf);
    return rc;
  }
  g->parts[(size_t)i * g->buckets + h.bucket] = in->buf; /* kept until the step is summed */
  g->got[i]++;
  g->theirs[i] = h.members;
  return complete(t, h.group);
}

bool tr__gather_needs(const transport *t, int r) {
  for (int k = 0; k < t->ngroups; k++) {
    if (index_of(t, k, t->rank) < 0 || index_of(t, k, r) < 0) continue; /* not ours, or theirs */
    if (!t->gathers[k] || t->group_ranks[k][0] == r) return true; /* an MPI sum; its root */
  }
  return false;
}

int tr__gather_lose(transport *t, int r) {
  int rc = 0;
  for (int k = 0; k < t->ngroups && rc == 0; k++) {
    gather *g = t->gathers[k];
    const int i = index_of(t, k, r);
    if (g == NULL || i < 0) continue;
    g->gone[i] = true;
    if (g->me != 0 || g->step < 0) continue;
    for (int b = 0; b < g->buckets; b++) { /* what came of the step is not summed */
      tr__buffer_give(&t->buffers, g->parts[(size_t)i * g->buckets + b]);
      g->parts[(size_t)i * g->buckets + b] = NULL;
    }
    g->got[i] = 0;
    rc = complete(t, k);
  }
  return rc;
}

void tr__gather_free(transport *t, int k) {
  gather *g = t->gathers[k];
  if (g == NULL) return;
  for (int b = 0; g->mine && b < g->buckets; b++)
    if (g->mine[b]) tr_msg_free(g->mine[b]);
  for (size_t i = 0; g->parts && i < (size_t)g->n * g->buckets; i++)
    tr__buffer_give(&t->buffers, g->parts[i]);
  free(g->mine);
  free(g->parts);
  free(g->gone);
  free(g->got);
  free(g->theirs);
  free(g);
  t->gathers[k] = NULL;
}
