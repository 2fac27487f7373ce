/* collective.c — the collectives as a service (collective.h): the rounds that agree NCCL
 * communicators' ids across ranks, and the replica groups' sums across ranks, which the
 * transport's actor hands to a thread per group (transport_impl.h). Each group's sums are one
 * blocking MPI_Allreduce after another, in the order the leader hands them over: Open MPI's
 * nonblocking MPI_Iallreduce (libnbc) reached a third of the blocking one's bandwidth here,
 * and a blocked thread still leaves the progress thread free to notice a rank that is gone. */
#include <stdio.h>
#include <stdlib.h>

#include "transport_impl.h"

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
