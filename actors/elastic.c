/* elastic.c — the stage of an elastic job's worker (tr_async_config.elastic): the stage
 * runner's behaviour, wrapped, so that a failure of the worker — an op of its device that
 * returns an error, or anything else that fails its actor while it trains — makes the
 * worker leave the run instead of ending it. Without elastic a worker is a plain stage and
 * its failure fails the run, as every actor's does.
 *
 * The stage that failed runs no more: its memory stays as it is (the server may still be
 * reading its last push) until the run's end, when the runtime stops it. The worker tells the
 * server why it left (worker.h: tr__worker_depart); the server drops it, and SSP counts only
 * the workers still running. Its loader has claimed a step or two it will never train:
 * those are lost, not applied — but the batches it lends stay held until the server says the
 * run is over, because a batch given back would let the loader claim, and lose, the next
 * step that a live worker could have trained. Once the run is over they go back, the loader
 * finds no more steps and ends (a batch of step -1), and the worker's part is done.
 *
 * A worker that fails while opening (before it trained) still fails the run: what failed is
 * the job's configuration more likely than a device.
 *
 * Across ranks, a rank that dies (under mpirun --enable-recovery the others keep running)
 * is noticed by the transport when it has been silent for the watchdog's period; if it held
 * only workers and their loaders, the run goes on without it (tr__elastic_lost_rank): the
 * server hears that each of its workers there has left, as they would have said.
 */
#include <stdio.h>

#include "graph_impl.h"
#include "stage.h"
#include "worker.h"

static tr__worker *worker_of(tr_actor *self) {
  return tr__policy_async_worker(tr__stage_policy(tr_actor_state(self)));
}

/* The stage failed with `rc`: the worker leaves, saying why. Non-zero: it cannot (it never
 * opened), and the failure stands. */
static int depart(tr_actor *self, int rc) {
  tr__worker *w = worker_of(self);
  if (w == NULL) return rc;
  const tr_device *dev = tr__stage_device(tr_actor_state(self));
  char why[256];
  if (rc == TR_EDEVICE) snprintf(why, sizeof why, "%s", tr_device_error(dev));
  else snprintf(why, sizeof why, "%s", tr_strerror(rc));
  return tr__worker_depart(w, self, why) ? rc : 0;
}

/* The run is over and every batch went back, the loader's end among them: done. */
static void give_back(tr_actor *self, tr__worker *w) {
  if (tr__stage_give_back_batches(tr_actor_state(self)) && tr__worker_finish_departed(w))
    tr_graph_done(tr__worker_run(w)->g, self);
}

static int elastic_start(tr_actor *self) {
  const int rc = tr__stage_behaviour.start(self);
  return rc ? depart(self, rc) : 0;
}

static int elastic_receive(tr_actor *self, tr_msg *msg) {
  tr__worker *w = worker_of(self);
  if (w && tr__worker_departed(w)) {
    if (msg->type == &tr_batch_type) {
      const int rc = tr__stage_hold_batch(tr_actor_state(self), (const tr_batch_msg *)msg);
      if (rc) return rc;
      if (tr__worker_over(w)) give_back(self, w);
    } else if (tr__worker_departed_receive(w, msg)) {
      give_back(self, w); /* the server's word that the run is over */
    }
    return 0;
  }
  const int rc = tr__stage_behaviour.receive(self, msg);
  return rc ? depart(self, rc) : 0;
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

int tr__elastic_lost_rank(tr_graph *g, tr_actor *server, tr_actor *const *workers,
                          tr_actor *const *loaders, int n, int rank, const char *why) {
  const int ranks = tr_world_size(tr__graph_world(g));
  for (int i = ranks; i < tr__graph_member_count(g); i++) { /* 0 .. ranks - 1: transports */
    const tr__member *m = tr__graph_member(g, i);
    if (m->rank == rank && !among(workers, n, m->actor) && !among(loaders, n, m->actor))
      return -1; /* the server, the coordinator, an observer: the run cannot go on */
  }
  if (!server || tr_graph_actor_rank(g, server) != tr_graph_rank(g)) return 0;
  for (int w = 0; w < n; w++) {
    if (!workers[w] || tr_graph_actor_rank(g, workers[w]) != rank) continue;
    tr__leave_msg *l = tr_msg_new(&tr__leave_type);
    l->hdr.from = workers[w];
    l->worker = w;
    l->left = true;
    snprintf(l->why, sizeof l->why, "its rank %d is gone (%s)", rank, why);
    tr_actor_send(server, l); /* the leave it can no longer send on its push edge */
  }
  return 0;
}
