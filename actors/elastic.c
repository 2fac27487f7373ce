/* elastic.c — the stage of an elastic job (tr_async_config.elastic): the stage runner's
 * behaviour, wrapped, so that a failure of the stage — an op of its device that returns an
 * error, or anything else that fails its actor while it trains — makes it leave the run
 * instead of ending it. Without elastic a stage is a plain stage and its failure fails the
 * run, as every actor's does.
 *
 * How to leave is the step policy's (step_policy.h: depart, departed, left), not this
 * file's: an asynchronous worker tells its server (worker.h: tr__worker_depart), a local SGD
 * replica its replica group and the coordinator (policy_local.c). A policy without depart
 * cannot leave, and one whose depart refuses (a worker that never opened, a replica that
 * had begun sending a sync's parameters) leaves the failure standing.
 *
 * The stage that failed runs no more: its memory stays as it is (a peer may still be
 * reading it) until the run's end, when the runtime stops it. What comes to it afterwards
 * is the policy's to read; the batches its loader lends are held or given back as the
 * policy says. An asynchronous worker's loader has claimed a step or two it will never
 * train: those are lost, not applied — but the batches it lends stay held until the server
 * says the run is over, because a batch given back would let the loader claim, and lose,
 * the next step that a live worker could have trained; then they go back, the loader finds
 * no more steps and ends (a batch of step -1), and the worker's part is done. A local SGD
 * replica's loader fills its replica's share of every step: its batches go back as they
 * come, and the loader runs to the run's end.
 *
 * A stage that fails while opening (before it trained) still fails the run: what failed is
 * the job's configuration more likely than a device.
 *
 * Across ranks, a rank that dies (under mpirun --enable-recovery the others keep running)
 * is noticed by the transport at once, its lifeline closing (dist/lifelines.h), or one that
 * hangs once it has been silent for the watchdog's period; if it held
 * only workers and their loaders, the run goes on without it (tr__elastic_lost_rank): the
 * server hears that each of its workers there has left, as they would have said; for local
 * SGD's replicas, the coordinator does, and their group's sums go on without them (each step
 * summed over the ranks whose every bucket of it came, dist/collective.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "graph_impl.h"
#include "elastic.h"
#include "evaluate.h"
#include "result_impl.h"
#include "stage.h"
#include "worker.h"

static const tr__policy *policy_of(tr_actor *self) {
  return tr__stage_policy(tr_actor_state(self));
}

/* What the policy said of what came (TR__LEFT_*): the batches back, and once the run is
 * over for it and they are (a policy whose steps are not the run's: its loader's end among
 * them), its part is done. */
static void after(tr_actor *self, const tr__policy *p, const tr__run *run, int flags) {
  if (!(flags & TR__LEFT_BACK)) return;
  const bool ended = tr__stage_give_back_batches(tr_actor_state(self));
  if (!(flags & TR__LEFT_OVER) || !(ended || p->ops->run_steps)) return;
  const tr__member *m = tr__graph_member_of(run->g, self);
  if (!atomic_load(&m->done)) tr_graph_done(run->g, self);
}

/* The stage failed with `rc`: its policy leaves, saying why, and what it holds may go back
 * at once. Non-zero: it cannot, and the failure stands. */
static int depart(tr_actor *self, int rc) {
  const tr__policy *p = policy_of(self);
  if (rc == 0 || p->ops == NULL || p->ops->depart == NULL) return rc;
  const tr_device *dev = tr__stage_device(tr_actor_state(self));
  char why[256];
  if (rc == TR_EDEVICE) snprintf(why, sizeof why, "%s", tr_device_error(dev));
  else snprintf(why, sizeof why, "%s", tr_strerror(rc));
  if (p->ops->depart(p->state, why)) return rc;
  after(self, p, p->ops->departed(p->state), p->ops->left(p->state, NULL));
  return 0;
}

static int elastic_start(tr_actor *self) { return depart(self, tr__stage_behaviour.start(self)); }

static int elastic_receive(tr_actor *self, tr_msg *msg) {
  const tr__policy *p = policy_of(self);
  const tr__run *run = p->ops && p->ops->departed ? p->ops->departed(p->state) : NULL;
  if (run) {
    const bool batch = msg->type == &tr_batch_type;
    if (batch) {
      const int rc = tr__stage_hold_batch(tr_actor_state(self), (const tr_batch_msg *)msg);
      if (rc) return rc;
    }
    after(self, p, run, p->ops->left(p->state, batch ? NULL : msg));
    return 0;
  }
  return depart(self, tr__stage_behaviour.receive(self, msg));
}

static void elastic_stop(tr_actor *self) { tr__stage_behaviour.stop(self); }
static void elastic_destroy(void *state) { tr__stage_behaviour.destroy(state); }

const tr_behaviour tr__elastic_behaviour = {.name = "stage",
                                            .start = elastic_start,
                                            .receive = elastic_receive,
                                            .stop = elastic_stop,
                                            .destroy = elastic_destroy};

/* ---- a rank that is gone ---------------------------------------------------------------- */

static bool among(tr_actor *const *list, int n, const tr_actor *a) {
  for (int i = 0; i < n; i++)
    if (list[i] == a) return true;
  return false;
}

/* Local SGD: the coordinator hears that each replica of the rank left, as its done message
 * would have said, but for the step: -1, the coordinator's to find from what came of it
 * (coordinator.c). Its group's sums leave it out on their own (dist/collective.c). */
static void replicas_lost(tr_graph *g, tr_actor *coordinator, tr_actor *const *replicas, int n,
                          int rank, const char *why) {
  for (int r = 0; r < n; r++) {
    if (!replicas[r] || tr_graph_actor_rank(g, replicas[r]) != rank) continue;
    tr__done_msg *d = tr_msg_new(&tr__done_type);
    d->hdr.from = replicas[r];
    d->source = r; /* one stage a replica (job_config): its stage's index */
    d->report = (tr__report){0};
    snprintf(d->report.device, sizeof d->report.device, "%s",
             tr_device_name(tr__stage_device(tr_actor_state(replicas[r]))));
    tr__figures_int(&d->report.fig, TR__M_REPLICA_LEFT_AT, -1);
    char text[200]; /* the figures' text holds it */
    snprintf(text, sizeof text, "its rank %d %s", rank, why);
    tr__figures_text(&d->report.fig, TR__M_REPLICA_LEFT_WHY, text);
    tr_actor_send(coordinator, d);
  }
}

int tr__elastic_lost_rank(tr_graph *g, tr_actor *server, tr_actor *coordinator,
                          tr_actor *const *workers, tr_actor *const *loaders, int n, int rank,
                          const char *why) {
  const int ranks = tr_world_size(tr__graph_world(g));
  for (int i = ranks; i < tr__graph_member_count(g); i++) { /* 0 .. ranks - 1: transports */
    const tr__member *m = tr__graph_member(g, i);
    if (m->rank == rank && !among(workers, n, m->actor) && !among(loaders, n, m->actor))
      return -1; /* the server, the coordinator, an observer: the run cannot go on */
  }
  if (!server && coordinator && tr_graph_actor_rank(g, coordinator) == tr_graph_rank(g))
    replicas_lost(g, coordinator, workers, n, rank, why);
  if (!server || tr_graph_actor_rank(g, server) != tr_graph_rank(g)) return 0;
  for (int w = 0; w < n; w++) {
    if (!workers[w] || tr_graph_actor_rank(g, workers[w]) != rank) continue;
    tr__leave_msg *l = tr_msg_new(&tr__leave_type);
    l->hdr.from = workers[w];
    l->worker = w;
    l->left = true;
    snprintf(l->why, sizeof l->why, "its rank %d %s", rank, why);
    tr_actor_send(server, l); /* the leave it can no longer send on its push edge */
  }
  return 0;
}

/* ---- the coordinator's book of replicas that left (elastic.h) ------------------------------ */

void tr__left_init(tr__left_book *b, const tr__run *run) {
  *b = (tr__left_book){.replicas = run->c.layout.replicas};
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) b->heard[i] = b->at[i] = -1;
}

void tr__left_heard(tr__left_book *b, const tr__loss_msg *m) {
  for (int i = 0; i < m->n && m->source >= 0 && m->source < TR_TRAIN_MAX_DEVICES; i++)
    if (m->e[i].step > b->heard[m->source]) b->heard[m->source] = m->e[i].step;
}

bool tr__left_said(const tr__report *r) {
  return r->fig.n == 2 && r->fig.pairs[0].key == TR__M_REPLICA_LEFT_AT &&
         r->fig.pairs[1].key == TR__M_REPLICA_LEFT_WHY;
}

/* Why replica r left, as its done message said ("" if it did not). */
static const char *why_of(const tr__report *r) {
  const int64_t at = tr__left_said(r) ? r->fig.pairs[1].v.i : -1;
  return at >= 0 && at < TR__FIGURES_TEXT ? r->fig.text + at : "";
}

int64_t tr__left_add(tr__left_book *b, const tr__run *run, int source, int64_t step) {
  const int replica = source / run->c.layout.stages; /* one stage a replica (job_config) */
  if (replica >= 0 && replica < TR_TRAIN_MAX_DEVICES && b->at[replica] < 0) {
    b->at[replica] = step;
    b->n++;
  }
  const int64_t first = tr_graph_first_step(run->g), heard = b->heard[source];
  return heard >= first ? heard + 1 : first;
}

/* Whether replica r's part of the checkpoint of `step` comes: it took part up to it. */
static bool holds(const tr__left_book *b, int r, int64_t step) {
  return r >= TR_TRAIN_MAX_DEVICES || b->at[r] < 0 || step <= b->at[r];
}

int tr__left_parts(const tr__left_book *b, const tr__run *run, int64_t step, int all) {
  if (b->n == 0 || run->c.local.sync_every <= 0) return all;
  int k = 0;
  for (int r = 0; r < b->replicas; r++) k += holds(b, r, step);
  return all / b->replicas * k;
}

int tr__left_compact(const tr__left_book *b, const tr__run *run, int64_t step, tr__part *parts,
                     int nparts) {
  if (!run->c.async.elastic || run->c.local.sync_every <= 0) return nparts;
  const int P = nparts / b->replicas;
  int to = 0;
  for (int r = 0; r < b->replicas; r++) {
    if (!holds(b, r, step)) continue;
    for (int s = 0; s < P && to != r; s++) {
      parts[to * P + s] = parts[r * P + s];
      parts[r * P + s] = (tr__part){0};
    }
    to++;
  }
  for (int i = P; i < nparts; i++) { /* DiLoCo's outer state, every replica's alike: one */
    free(parts[i].extra);
    parts[i].extra = NULL;
    parts[i].extra_copies = 0;
  }
  return to * P;
}

int tr__left_none(const tr__left_book *b, const tr__report *dones, tr_actor *self) {
  if (b->n < b->replicas) return 0;
  char who[1024];
  size_t len = 0;
  for (int r = 0; r < b->replicas && r < TR_TRAIN_MAX_DEVICES && len < sizeof who; r++)
    len += (size_t)snprintf(who + len, sizeof who - len, "%sreplica %d (%s) at step %lld: %s",
                            r ? "; " : "", r, dones[r].device, (long long)b->at[r],
                            why_of(&dones[r]));
  return tr_actor_fail(self, TR_EDEVICE, "async.elastic: every replica left, none is left to "
                       "train: %s", who);
}

int tr__left_result(const tr__left_book *b, const tr__run *run, tr_result *r) {
  if (!run->c.async.elastic || run->c.local.sync_every <= 0) return 0;
  tr__result_set_int(r, TR__M_REPLICAS_ALIVE, b->replicas - b->n);
  char *left = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&left, &len);
  if (f == NULL) return TR_ENOMEM;
  const int64_t whole = tr__result_int(r, TR__M_SAMPLES), first = tr__result_int(r, TR__M_FIRST_STEP);
  const int64_t steps = tr__result_int(r, TR__M_STEPS);
  int64_t samples = whole;
  for (int i = 0, n = 0; i < b->replicas && i < TR_TRAIN_MAX_DEVICES; i++) {
    if (b->at[i] < 0) continue;
    fprintf(f, "%s%d@%lld", n++ ? "," : "", i, (long long)b->at[i]);
    /* its share of the steps from the one it left at on was not trained */
    const int64_t from = b->at[i] > first ? b->at[i] : first;
    samples -= (steps > from ? steps - from : 0) * run->c.global_batch / b->replicas;
  }
  const bool written = fclose(f) == 0;
  const int rc = written ? tr__result_set_text(r, TR__M_REPLICAS_LEFT, left) : TR_ENOMEM;
  free(left);
  tr__result_set_int(r, TR__M_SAMPLES, samples);
  /* the rate of samples trained (the figures derived from it follow) */
  if (whole > 0)
    tr__result_set_real(r, TR__M_SAMPLES_PER_S,
                        tr__result_real(r, TR__M_SAMPLES_PER_S) * (double)samples / (double)whole);
  return rc;
}

/* An empty share of the evaluation after step `step` for each replica that left before it
 * (it evaluates none of its held-out share), once: where the evaluation is new to the book
 * (`replica` < 0: for every one that left), or for `replica` alone where it is pending. */
static int empty_shares(const tr__left_book *b, tr__eval_book *e, int64_t step, int replica) {
  bool pending = false;
  for (int i = 0; i < TR__EVAL_PENDING; i++) pending |= e->got[i] && e->pending[i].step == step;
  if (pending == (replica < 0)) return 0;
  for (int r = 0; r < b->replicas && r < TR_TRAIN_MAX_DEVICES; r++) {
    if ((replica >= 0 && r != replica) || b->at[r] < 0 || step <= b->at[r]) continue;
    const tr__eval_sums none = {.step = step};
    int rc = tr__eval_book_add(e, r, &none);
    if (rc) return rc;
  }
  return 0;
}

int tr__left_eval(const tr__left_book *b, tr__eval_book *e, int replica, const tr__eval_sums *s) {
  int rc = b->n ? empty_shares(b, e, s->step, -1) : 0;
  return rc ? rc : tr__eval_book_add(e, replica, s);
}

int tr__left_eval_gone(const tr__left_book *b, tr__eval_book *e, int replica) {
  int64_t steps[TR__EVAL_PENDING];
  int n = 0;
  for (int i = 0; i < TR__EVAL_PENDING; i++)
    if (e->got[i]) steps[n++] = e->pending[i].step;
  for (int i = 0; i < n; i++) {
    int rc = empty_shares(b, e, steps[i], replica);
    if (rc) return rc;
  }
  return 0;
}
