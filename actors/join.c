/* join.c — the workers that join a running job (join.h), in a world of one process: each is
 * added to the graph while it runs, when the server says it is its turn, with everything it
 * takes to train: its stage actor, its loader and the batch edge between them, push and reply
 * with the server, the report edge to the coordinator, and its ports.
 *
 * The server's hook adds the worker's stage actor (on the server's thread); the stage's start
 * (on its own thread, before anything can reach it) wires the rest and then starts as any
 * stage does. Actors added during the run start at once, so the new loader's start, and the
 * stage's, wait on the join's lock, which is held while a worker is added and wired. An
 * actor's start finds the join of its job through its system (one graph, one system).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "evaluate.h"
#include "job_config.h"
#include "job_wire.h"
#include "join.h"
#include "stage.h"
#include "step_policy.h"
#include "worker.h"

struct tr__join {
  tr_job *j;
  tr_system *sys;
  tr_device **dev;         /* [W]: worker w joins on dev[w]; NULL: it is not one that joins */
  pthread_mutex_t lock;    /* held while a worker is added and wired */
  tr_behaviour stage_b, loader_b; /* the stage's and the loader's, their starts held */
  struct tr__join *next;   /* the joins of every job with workers that join */
};

/* Every join, for an actor's start to find its own by its system. */
static pthread_mutex_t joins_lock = PTHREAD_MUTEX_INITIALIZER;
static tr__join *joins;

static tr__join *join_of(const tr_actor *a) {
  const tr_system *sys = tr_actor_system(a);
  pthread_mutex_lock(&joins_lock);
  tr__join *jn = joins;
  while (jn && jn->sys != sys) jn = jn->next;
  pthread_mutex_unlock(&joins_lock);
  TR_ASSERT(jn != NULL);
  return jn;
}

/* The loader's start waits until its worker is wired. */
static int loader_start(tr_actor *self) {
  tr__join *jn = join_of(self);
  pthread_mutex_lock(&jn->lock);
  pthread_mutex_unlock(&jn->lock);
  return tr__loader_behaviour.start(self);
}

/* Worker w's edges, loader and ports; under jn->lock, on the worker's thread. */
static int wire(tr__join *jn, tr_actor *self, int w) {
  tr_job *j = jn->j;
  tr__run *run = &j->run;
  tr_graph *g = run->g;
  tr__stage_plan *sp = &j->plan.st[w];
  tr_device *dev = jn->dev[w];
  /* the report edge, announced on itself to the coordinator */
  static const tr_msgtype *const reports[] = {&tr__loss_type, &tr__part_type, &tr__done_type,
                                              &tr__server_done_type, &tr__eval_type,
                                              &tr__source_type, NULL};
  tr_edge *report, *push, *reply, *batches;
  int rc = tr_graph_connect(g, &(tr_edge_config){.from = self, .to = j->coordinator,
                                                 .name = "report",
                                                 .credits = TR__REPORT_CREDITS,
                                                 .carries = reports},
                            &report);
  if (rc == 0) rc = tr_graph_connect(g, &(tr_edge_config){.from = self, .to = j->server,
                                                          .name = "push", .credits = 1,
                                                          .carries = tr__push_carries},
                                     &push);
  if (rc == 0) rc = tr__job_connect(j, j->server, self, &tr__reply_type, "reply",
                                    TR__REPLY_CREDITS, &reply);
  /* its loader, fed as tr_job_feed feeds a worker's: one edge for inputs and targets */
  char name[32];
  snprintf(name, sizeof name, "loader%d", w);
  void *ls = tr__loader_new(run, w);
  tr_actor *loader = NULL;
  if (rc == 0) rc = tr__job_add(j, tr_graph_rank(g), name, TR_ACTOR_LOOP, &jn->loader_b, ls,
                                &loader);
  const unsigned what = TR_BATCH_INPUTS | TR_BATCH_TARGETS;
  const int depth = j->prefetch;
  if (rc == 0) {
    j->loaders[w] = loader;
    tr__loader_set_device(ls, dev);
    rc = tr_graph_connect(g, &(tr_edge_config){.from = loader, .to = self, .type = &tr_batch_type,
                                               .name = "inputs", .credits = depth,
                                               .wake_at = depth < 2 ? 1 : depth / 2},
                          &batches);
  }
  if (rc == 0) rc = tr__loader_add_edge(ls, batches, what, tr__job_generates_on(&run->c, dev));
  if (rc) return tr_actor_fail(self, rc, "worker %d joining the run: wiring its edges and "
                               "loader: %s", w, tr_strerror(rc));
  /* its ports, as tr__plan_wire hands them to a stage wired before the run */
  sp->ports.report = report;
  sp->ports.in[0] = (tr__stage_input){.edge = batches, .what = what};
  sp->ports.nin = 1;
  if (!(sp->parts.worker = tr__worker_new(run, w, push, reply)) ||
      (rc = tr__policy_find(run->c.step_policy, &run->c)->make(&sp->ports.policy, &sp->parts)))
    return tr_actor_fail(self, TR_ENOMEM, "worker %d joining the run: out of memory", w);
  tr__stage_wire(tr_actor_state(self), &sp->ports);
  sp->wired = true;
  /* the coordinator and the server learn of it on its edges, each on its own thread */
  tr__source_msg *s = tr_msg_new(&tr__source_type);
  s->source = w;
  s->edge = report;
  tr__joined_msg *m = tr_msg_new(&tr__joined_type);
  *m = (tr__joined_msg){.hdr = m->hdr, .worker = w, .push = push, .reply = reply, .dev = dev};
  if ((rc = tr_edge_send_control(report, s)) || (rc = tr_edge_send_control(push, m))) return rc;
  return 0;
}

/* The stage's start: wired first (the loader's start waits), then the stage's own. */
static int stage_start(tr_actor *self) {
  tr__join *jn = join_of(self);
  pthread_mutex_lock(&jn->lock); /* its adder holds it until the actor is recorded */
  const int w = tr__job_stage_index(jn->j, self);
  int rc = w < 0 ? tr_actor_fail(self, TR_ESTATE, "a worker that joins is not the job's")
                 : wire(jn, self, w);
  pthread_mutex_unlock(&jn->lock);
  const bool elastic = jn->j->run.c.async.elastic;
  return rc ? rc : (elastic ? tr__elastic_behaviour : tr__stage_behaviour).start(self);
}

/* The server's hook, on its thread: worker w's turn has come. */
static int join_now(void *arg, int w) {
  tr__join *jn = arg;
  tr_job *j = jn->j;
  char name[32];
  snprintf(name, sizeof name, "worker%d", w);
  pthread_mutex_lock(&jn->lock);
  tr_actor *a = NULL;
  int rc = tr__job_add(j, tr_graph_rank(j->run.g), name, TR_ACTOR_PINNED, &jn->stage_b,
                       tr__stage_new(&j->run, w, 0, jn->dev[w]), &a);
  if (rc == 0) j->stages[w] = j->plan.st[w].actor = a;
  pthread_mutex_unlock(&jn->lock);
  if (rc)
    return tr_actor_fail(j->server, rc, "adding worker %d, which joins the run: %s", w,
                         tr_graph_error(j->run.g)[0] ? tr_graph_error(j->run.g) : tr_strerror(rc));
  return 0;
}

int tr_job_join_worker(tr_job *j, int worker, tr_device *dev) {
  JOB_GIVEN(j);
  const tr_job_config *c = &j->run.c;
  if (!c->async.enabled || c->async.join_at <= 0 || worker < 0 ||
      worker >= c->layout.replicas || !tr__worker_joins(c, worker))
    return tr__job_refuse(j, TR_EINVAL, "tr_job_join_worker: worker %d does not join the run: "
                          "the last async.join_workers (%d) of layout.replicas (%d) join, with "
                          "async.join_at > 0 (%lld)", worker, c->async.join_workers,
                          c->layout.replicas, (long long)c->async.join_at);
  if (tr_world_size(tr__graph_world(j->run.g)) > 1)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_join_worker: across processes every rank "
                          "builds the same graph before it runs: add worker %d with "
                          "tr_job_add_worker, tr_job_serve and its loader (it waits for its "
                          "turn)", worker);
  if (dev == NULL) return tr__job_refuse(j, TR_EINVAL, "tr_job_join_worker: dev is NULL");
  if (j->server == NULL || j->coordinator)
    return tr__job_refuse(j, TR_ESTATE, "tr_job_join_worker: add the server first "
                          "(tr_job_add_server) and the coordinator after");
  if (j->plan.planned) return CLOSED("tr_job_join_worker");
  tr__join *jn = j->join;
  if (jn == NULL) {
    if (!(jn = calloc(1, sizeof *jn)) ||
        !(jn->dev = calloc((size_t)c->layout.replicas, sizeof *jn->dev))) {
      free(jn);
      return TR_ENOMEM;
    }
    jn->j = j;
    jn->sys = tr_graph_system(j->run.g);
    pthread_mutex_init(&jn->lock, NULL);
    jn->stage_b = c->async.elastic ? tr__elastic_behaviour : tr__stage_behaviour;
    jn->stage_b.start = stage_start;
    jn->loader_b = tr__loader_behaviour;
    jn->loader_b.start = loader_start;
    pthread_mutex_lock(&joins_lock);
    jn->next = joins;
    joins = jn;
    pthread_mutex_unlock(&joins_lock);
    j->join = jn;
  }
  if (jn->dev[worker])
    return tr__job_refuse(j, TR_EINVAL, "tr_job_join_worker: worker %d joins already", worker);
  int rc = tr__server_defer(tr_actor_state(j->server), worker, join_now, jn);
  if (rc) return tr__job_refuse(j, rc, "tr_job_join_worker: worker %d: the server has it "
                                "already (tr_job_serve)", worker);
  jn->dev[worker] = dev;
  /* the figures count its batch edge now: the run's description is read-only once it runs */
  ++*(tr__job_generates_on(c, dev) ? &j->run.batches_made : &j->run.batches_loaded);
  return 0;
}

void tr__join_free(tr__join *jn) {
  if (jn == NULL) return;
  pthread_mutex_lock(&joins_lock);
  tr__join **p = &joins;
  while (*p != jn) p = &(*p)->next;
  *p = jn->next;
  pthread_mutex_unlock(&joins_lock);
  pthread_mutex_destroy(&jn->lock);
  free(jn->dev);
  free(jn);
}
