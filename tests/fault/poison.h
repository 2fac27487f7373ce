/* poison.h — a relay actor that poisons batches, and the training graphs that put it between
 * each loader and its replica's first stage: how test_fault makes a step's inputs NaN by
 * composition (the graph is the test's own, through tr_job.h; nothing in the library knows).
 *
 *   poison_case c = {.strategy = TR_STRATEGY_DP, .devices = "host:2", .steps = 3,
 *                    .nan_step = 2};                    // step 2's inputs are NaN
 *   rc = poisoned_run(&c, &result, err, sizeof err);    // tr_train_run's figures and errors
 *
 * The layouts are tr_train_run's for the strategy (pipelines: 2 × stages micro-batches; async:
 * one worker per device, the server on a host device of its own). */
#ifndef TEST_POISON_H
#define TEST_POISON_H

#include <math.h>
#include <stdio.h>

#include "troupe.h"

/* ---- the relay: NaN into every input of the batches of one step, then passed on -------- */

typedef struct poison {
  tr_edge *in, *out;
  int64_t step; /* the step whose batches it poisons; -1: none (a relay that only relays) */
} poison;

static int poison_receive(tr_actor *self, tr_msg *msg) {
  poison *p = tr_actor_state(self);
  if (msg->type == &tr_edge_credit_type) { /* the stage released batches: so does the relay */
    tr_edge_release(p->in, ((tr_edge_credit_msg *)msg)->count);
  } else if (msg->type == &tr_batch_type) {
    tr_batch_msg *b = (tr_batch_msg *)msg;
    if (p->step >= 0 && b->step == p->step) { /* step < 0: the loader's last word */
      if (!b->x) return tr_actor_fail(self, TR_EINVAL, "a batch of step %lld without inputs "
                                      "in host memory (generated on the device?)",
                                      (long long)b->step);
      float *x = b->x; /* float models only: simplenet's */
      for (size_t i = 0; i < b->x_bytes / sizeof(float); i++) x[i] = NAN;
    }
    if (!tr_edge_acquire(p->out)) return tr_actor_fail(self, TR_ESTATE, "no credit to pass on");
    tr_edge_send(p->out, tr_batch_forward(b));
  }
  return 0;
}
static const tr_behaviour poison_behaviour = {.name = "poison", .receive = poison_receive};

/* ---- a run through it ------------------------------------------------------------------- */

typedef struct poison_case {
  tr_strategy strategy;        /* single, dp, pipeline or async */
  const char *devices;
  int64_t steps;
  int64_t nan_step;            /* -1: none */
  tr_nonfinite_policy on_nonfinite;
  const char *checkpoint;      /* written at the end; NULL: none */
} poison_case;

enum { POISON_MAX_REPLICAS = 8 };

/* simplenet, trained as c says with a poison relay before each replica's first stage: 0 and
 * the run's figures, or the status and the graph's error (tr_graph_error) in err. */
static int poisoned_run(const poison_case *c, tr_train_result *r, char *err, size_t n) {
  tr_model *m = NULL;
  tr_data *d = NULL;
  tr_device_list *devs = NULL, *server_dev = NULL;
  tr_graph *g = NULL;
  tr_job *j = NULL;
  poison relay[POISON_MAX_REPLICAS];
  tr_actor *stage[POISON_MAX_REPLICAS * 2], *loader, *actor, *server;
  tr_job_config jc = tr_job_defaults();
  err[0] = 0;
  int rc = tr_model_simplenet(&m);
  if (!rc) rc = tr_data_open_for(&d, m, jc.seed, NULL, NULL, err, n);
  if (!rc) rc = tr_device_list_open(&devs, c->devices, err, n);
  if (rc) goto out;
  const int ndev = tr_device_list_count(devs);
  const int R = c->strategy == TR_STRATEGY_DP || c->strategy == TR_STRATEGY_ASYNC ? ndev : 1;
  const int P = c->strategy == TR_STRATEGY_PIPELINE ? ndev : 1;
  if (R > POISON_MAX_REPLICAS) {
    rc = TR_EINVAL;
    snprintf(err, n, "poisoned_run: at most %d replicas", POISON_MAX_REPLICAS);
    goto out;
  }
  jc.model = m;
  jc.data = d;
  jc.strategy = tr_strategy_name(c->strategy);
  jc.on_nonfinite = c->on_nonfinite;
  jc.checkpoint.path = c->checkpoint;
  jc.layout = (tr_layout_config){.replicas = R, .stages = P, .microbatches = P > 1 ? 2 * P : 1};
  jc.async.enabled = c->strategy == TR_STRATEGY_ASYNC;
  if ((rc = tr_graph_new(&g, NULL)) || (rc = tr_job_new(&j, g, &jc, err, n))) goto out;
  if (jc.async.enabled) {
    rc = tr_device_list_open(&server_dev, "host:1", err, n);
    if (!rc) rc = tr_job_add_server(j, tr_device_list_at(server_dev, 0), &server);
    for (int w = 0; w < R && !rc; w++) {
      rc = tr_job_add_worker(j, w, tr_device_list_at(devs, w), &stage[w]);
      if (!rc) rc = tr_job_serve(j, server, stage[w]);
    }
  } else {
    rc = tr_job_add_stages(j, devs, stage);
  }
  for (int k = 0; k < R && !rc; k++) {
    char name[32];
    snprintf(name, sizeof name, "poison%d", k);
    relay[k] = (poison){.step = c->nan_step};
    const tr_actor_config pc = {.name = name, .kind = TR_ACTOR_PINNED,
                                .behaviour = &poison_behaviour, .state = &relay[k]};
    tr_actor *first = stage[k * P], *last = stage[k * P + P - 1];
    rc = tr_job_add_loader(j, k, &loader);
    if (!rc) rc = tr_graph_add_service(g, &pc, &actor);
    if (!rc) rc = tr_job_connect_batches(j, loader, actor, TR_BATCH_INPUTS, &relay[k].in);
    if (!rc) rc = tr_job_connect_batches(j, actor, first, TR_BATCH_INPUTS | TR_BATCH_NOTIFY,
                                         &relay[k].out);
    if (!rc) rc = tr_job_connect_batches(j, loader, last, TR_BATCH_TARGETS, NULL);
  }
  if (!rc) rc = tr_job_add_coordinator(j, &actor);
  if (rc) {
    if (!err[0]) snprintf(err, n, "building the graph: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_graph_run(g, 0, c->steps, 0))) snprintf(err, n, "%s", tr_graph_error(g));
  else tr_job_result(j, r);
out:
  tr_graph_free(g); /* its actors use the job: first */
  tr_job_free(j);
  tr_device_list_close(server_dev);
  tr_device_list_close(devs);
  tr_data_close(d);
  tr_model_free(m);
  return rc;
}

#endif
