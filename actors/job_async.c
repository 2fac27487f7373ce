/* job_async.c — an asynchronous job's wiring (tr_job.h): its parameter server, its workers
 * and the push and reply edges between them, and what an elastic job does when a rank of
 * workers is lost. */
#include "graph_impl.h"
#include "job_wire.h"
#include "worker.h"

int tr_job_add_server(tr_job *j, tr_device *dev, tr_actor **out) {
  JOB_GIVEN(j);
  OUT_GIVEN(out);
  if (!j->run.c.async.enabled)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_add_server: the job is not asynchronous "
                          "(async.enabled)");
  if (j->server)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_add_server: the job has its server already");
  if (dev == NULL)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_add_server: dev is NULL: give a device");
  int rc = tr__job_add(j, tr__job_rank_of(j, dev), "server", TR_ACTOR_PINNED,
                       &tr__server_behaviour, tr__server_new(&j->run, dev), &j->server);
  *out = j->server;
  if (rc == 0) rc = tr__job_connect_report(j, j->server, tr__stage_count(&j->run));
  return rc;
}

int tr_job_add_worker(tr_job *j, int worker, tr_device *dev, tr_actor **out) {
  JOB_GIVEN(j);
  OUT_GIVEN(out);
  if (!j->run.c.async.enabled)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_add_worker: the job is not asynchronous "
                          "(async.enabled): add stages");
  if (tr_world_size(tr__graph_world(j->run.g)) == 1 && tr__worker_joins(&j->run.c, worker))
    return tr__job_refuse(j, TR_EINVAL, "tr_job_add_worker: worker %d joins the running job "
                          "(async.join_at): in one process it is added when it joins "
                          "(tr_job_join_worker)", worker);
  return tr_job_add_stage(j, worker, 0, dev, out);
}

int tr_job_serve(tr_job *j, tr_actor *server, tr_actor *worker) {
  JOB_GIVEN(j);
  if (j->plan.planned) return CLOSED("tr_job_serve");
  const int w = tr__job_stage_index(j, worker);
  if (!j->run.c.async.enabled)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_serve: the job is not asynchronous "
                          "(async.enabled)");
  if (server == NULL || server != j->server)
    return tr__job_refuse(j, TR_EINVAL, "tr_job_serve: server is not the job's "
                          "(tr_job_add_server)");
  if (w < 0) return tr__job_refuse(j, TR_EINVAL, "tr_job_serve: worker is not a worker of the job");
  tr_edge *push, *reply;
  int rc = tr_graph_connect(j->run.g, &(tr_edge_config){.from = worker, .to = server,
                                                        .name = "push", .credits = 1,
                                                        .carries = tr__push_carries},
                            &push);
  if (rc == 0)
    rc = tr__job_connect(j, server, worker, &tr__reply_type, "reply", TR__REPLY_CREDITS, &reply);
  if (rc == 0) {
    tr__worker **wk = &j->plan.st[w].parts.worker;
    tr__worker_free(*wk);
    if (!(*wk = tr__worker_new(&j->run, w, push, reply))) rc = TR_ENOMEM;
  }
  if (rc == 0)
    rc = tr__server_set_worker(tr_actor_state(server), w, push, reply,
                               tr__stage_device(tr_actor_state(worker)));
  return rc;
}

/* An elastic job goes on without a rank of workers (or local SGD's replicas) only (elastic.c;
 * the transport's thread). */
int tr__job_lost_rank(void *arg, int rank, const char *why) {
  tr_job *j = arg;
  return tr__elastic_lost_rank(j->run.g, j->server, j->coordinator, j->stages, j->loaders,
                               j->run.c.layout.replicas, rank, why);
}
