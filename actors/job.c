/* job.c — a training job: its configuration checked, its actors added, their edges wired. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

TR_MSGTYPE_DEFINE(tr__ring_type, tr__ring_msg);
TR_MSGTYPE_DEFINE(tr__batch_type, tr__batch_msg);
TR_MSGTYPE_DEFINE(tr__tensor_type, tr__tensor_msg);
TR_MSGTYPE_DEFINE(tr__bucket_type, tr__bucket_msg);
TR_MSGTYPE_DEFINE(tr__norm_type, tr__norm_msg);
TR_MSGTYPE_DEFINE(tr__poll_type, tr__poll_msg);
TR_MSGTYPE_DEFINE(tr__progress_type, tr__progress_msg);
TR_MSGTYPE_DEFINE(tr__part_type, tr__part_msg);
TR_MSGTYPE_DEFINE(tr__done_type, tr__done_msg);
TR_MSGTYPE_DEFINE(tr__push_type, tr__push_msg);
TR_MSGTYPE_DEFINE(tr__reply_type, tr__reply_msg);
TR_MSGTYPE_DEFINE(tr__leave_type, tr__leave_msg);
TR_MSGTYPE_DEFINE(tr__server_done_type, tr__server_done_msg);

/* As many micro-batches as fit in 4 MiB, from 2 × m (a step and the next) to 256: a deep
 * ring means few wake-ups of the loader's loop where a step takes microseconds, a shallow
 * one a short overrun of a timed run where a step takes long. */
static int default_prefetch(const tr_job_config *c, int mb_batch) {
  const tr_model *m = c->model;
  const size_t bytes = (tr_model_input_bytes(m) + tr_model_target_bytes(m)) * (size_t)mb_batch;
  const size_t fit = bytes ? ((size_t)4 << 20) / bytes : 256;
  const size_t lo = 2 * (size_t)c->microbatches, hi = lo > 256 ? lo : 256;
  return (int)(fit < lo ? lo : fit > hi ? hi : fit);
}

int tr_job_new(tr_job **out, tr_graph *g, const tr_job_config *c, char *err, size_t n) {
  *out = NULL;
  const int R = c->replicas, P = c->stages, M = c->microbatches;
  const int layers = tr_model_layer_count(c->model);
  if (R < 1 || P < 1 || M < 1 || R * P > TR_TRAIN_MAX_DEVICES || P > TR__MAX_STAGES) {
    snprintf(err, n, "--devices: %d replicas × %d stages × %d micro-batches is not a layout "
             "(at most %d devices)", R, P, M, TR_TRAIN_MAX_DEVICES);
    return TR_EINVAL;
  }
  if (P > layers) {
    snprintf(err, n, "--devices: %d stages, but model '%s' has %d layers to cut", P,
             tr_model_name(c->model), layers);
    return TR_EINVAL;
  }
  if (c->async && (P != 1 || M != 1)) {
    snprintf(err, n, "--strategy async: a worker trains the whole model on whole batches (%d "
             "stages and %d micro-batches given)", P, M);
    return TR_EINVAL;
  }
  if (c->async && c->staleness < -1) {
    snprintf(err, n, "--staleness %d: give a number of pushes >= 0", c->staleness);
    return TR_EINVAL;
  }
  if (c->async && c->pull_every < 0) {
    snprintf(err, n, "--pull-every %d: give a number of pushes >= 1", c->pull_every);
    return TR_EINVAL;
  }
  if (c->async && !(c->dc_lambda >= 0)) {
    snprintf(err, n, "--dc-lambda %g: give a number >= 0", (double)c->dc_lambda);
    return TR_EINVAL;
  }
  if (c->async && c->hogwild &&
      (c->staleness >= 0 || c->dc_lambda > 0 || c->pull_every > 1 || c->staleness_lr)) {
    snprintf(err, n, "--hogwild: the workers update the shared parameters themselves, so "
             "--staleness, --dc-lambda, --pull-every and --staleness-lr do not apply");
    return TR_EINVAL;
  }
  const int parts = c->async ? 1 : R * M; /* an asynchronous worker takes whole batches */
  if (c->global_batch < parts || c->global_batch % parts) {
    snprintf(err, n, "--batch %d: not divisible by replicas × micro-batches (%d × %d)",
             c->global_batch, R, M);
    return TR_EINVAL;
  }
  tr_job *j = calloc(1, sizeof *j);
  if (j == NULL) return TR_ENOMEM;
  j->c = *c;
  j->g = g;
  j->mb_batch = c->global_batch / parts;
  /* Asynchrony with W workers acts like extra momentum of about 1 − 1/W (Mitliagkas et al.,
   * "Asynchrony begets momentum", 2016): take it off the explicit momentum. */
  if (c->async && c->momentum_correction && c->optim.kind == TR_OPTIM_MOMENTUM) {
    float mu = c->optim.momentum - (1.0f - 1.0f / (float)R);
    j->c.optim.momentum = mu > 0 ? mu : 0;
  }
  /* An asynchronous worker's loader keeps one batch ready: a step a loader has taken is its
   * worker's, so a deep ring would hand a fast loader steps a slow worker could have had. */
  j->prefetch = c->prefetch > 0 ? c->prefetch : c->async ? 2 : default_prefetch(c, j->mb_batch);
  snprintf(j->strategy, sizeof j->strategy, "%s",
           c->strategy ? c->strategy
           : c->async       ? "async"
           : R > 1 && P > 1 ? "hybrid"
           : R > 1          ? "dp"
           : P > 1          ? (M > 1 ? "pipeline" : "mp")
                            : "single");
  int rc = 0;
  if (c->cuts) {
    for (int s = 0; s <= P; s++) j->cuts[s] = c->cuts[s];
    for (int s = 0; s < P && rc == 0; s++)
      if (j->cuts[s] >= j->cuts[s + 1]) rc = TR_EINVAL;
    if (rc || j->cuts[0] != 0 || j->cuts[P] != layers) {
      snprintf(err, n, "--cuts: %d stages need %d increasing layer boundaries inside 1..%d",
               P, P - 1, layers - 1);
      rc = TR_EINVAL;
    }
  } else if ((rc = tr_model_balance(c->model, P, j->cuts))) {
    snprintf(err, n, "cutting model '%s' into %d stages: %s", tr_model_name(c->model), P,
             tr_strerror(rc));
  }
  if (rc == 0 &&
      (rc = tr_schedule_new(&j->own_sc, &(tr_schedule_config){.kind = c->schedule,
                                                               .stages = P,
                                                               .microbatches = M})))
    snprintf(err, n, "--schedule: %s", tr_strerror(rc));
  j->sc = j->own_sc;
  j->stages = calloc((size_t)(R * P), sizeof *j->stages);
  j->loaders = calloc((size_t)R, sizeof *j->loaders);
  j->devs = calloc((size_t)(R * P), sizeof *j->devs);
  if (rc == 0 && (!j->stages || !j->loaders || !j->devs)) rc = TR_ENOMEM;
  if (rc) {
    tr_job_free(j);
    return rc;
  }
  tr__result_init(&j->result, tr_model_name(c->model), j->strategy);
  j->result.replicas = R;
  j->result.stages = P;
  memcpy(j->result.cuts, j->cuts, (size_t)(P + 1) * sizeof *j->cuts);
  j->result.microbatches = M;
  j->result.ndevices = R * P;
  if (c->async) {
    j->result.workers = R;
    j->result.momentum = j->c.optim.kind == TR_OPTIM_MOMENTUM ? j->c.optim.momentum : NAN;
  }
  if (P > 1) snprintf(j->result.schedule, sizeof j->result.schedule, "%s", tr_schedule_kind_name(c->schedule));
  *out = j;
  return 0;
}

void tr_job_free(tr_job *j) {
  if (j == NULL) return;
  tr_schedule_free(j->own_sc);
  free(j->stages);
  free(j->loaders);
  free(j->devs);
  free(j);
}

static int add(tr_job *j, const char *name, tr_actor_kind kind, const tr_behaviour *b,
               void *state, tr_actor **out) {
  if (state == NULL) return TR_ENOMEM;
  int rc = tr_graph_add(
      j->g, &(tr_actor_config){.name = name, .kind = kind, .behaviour = b, .state = state}, out);
  if (rc) b->destroy(state);
  return rc;
}

int tr_job_add_loader(tr_job *j, int replica, tr_actor **out) {
  TR_ASSERT(replica >= 0 && replica < j->c.replicas && j->loaders[replica] == NULL);
  char name[32];
  snprintf(name, sizeof name, j->c.replicas > 1 ? "loader%d" : "loader", replica);
  int rc = add(j, name, TR_ACTOR_LOOP, &tr__loader_behaviour, tr__loader_new(j, replica), out);
  if (rc == 0) j->loaders[replica] = *out;
  return rc;
}

int tr_job_add_stage(tr_job *j, int replica, int stage, tr_device *dev, tr_actor **out) {
  TR_ASSERT(replica >= 0 && replica < j->c.replicas && stage >= 0 && stage < j->c.stages);
  const int i = tr__device_index(j, replica, stage);
  TR_ASSERT(j->stages[i] == NULL);
  char name[32];
  if (j->c.async) snprintf(name, sizeof name, "worker%d", replica);
  else if (j->c.replicas > 1 && j->c.stages > 1) snprintf(name, sizeof name, "r%d.stage%d", replica, stage);
  else if (j->c.replicas > 1) snprintf(name, sizeof name, "replica%d", replica);
  else snprintf(name, sizeof name, "stage%d", stage);
  int rc = add(j, name, TR_ACTOR_PINNED, &tr__stage_behaviour,
               tr__stage_new(j, replica, stage, dev), out);
  if (rc) return rc;
  j->stages[i] = *out;
  j->devs[i] = dev;
  return 0;
}

int tr_job_add_coordinator(tr_job *j, tr_actor **out) {
  TR_ASSERT(j->coordinator == NULL);
  int rc = add(j, "coordinator", TR_ACTOR_LOOP, &tr__coordinator_behaviour,
               tr__coordinator_new(j), &j->coordinator);
  *out = j->coordinator;
  return rc;
}

static int stage_index_of(const tr_job *j, const tr_actor *a) {
  for (int i = 0; i < j->c.replicas * j->c.stages; i++)
    if (j->stages[i] == a) return i;
  return -1;
}

int tr_job_add_server(tr_job *j, tr_device *dev, tr_actor **out) {
  TR_ASSERT(j->c.async && j->server == NULL);
  int rc = add(j, "server", TR_ACTOR_PINNED, &tr__server_behaviour, tr__server_new(j, dev),
               &j->server);
  j->server_dev = dev;
  *out = j->server;
  return rc;
}

int tr_job_add_worker(tr_job *j, int worker, tr_device *dev, tr_actor **out) {
  TR_ASSERT(j->c.async);
  return tr_job_add_stage(j, worker, 0, dev, out);
}

int tr_job_serve(tr_job *j, tr_actor *server, tr_actor *worker) {
  const int w = stage_index_of(j, worker);
  TR_ASSERT(j->c.async && server == j->server && w >= 0);
  tr_edge *push;
  int rc = tr_graph_connect(j->g, &(tr_edge_config){.from = worker, .to = server,
                                                    .type = &tr__push_type, .name = "push",
                                                    .credits = 1},
                            &push);
  if (rc) return rc;
  tr__stage_set_push(tr_actor_state(worker), push);
  return tr__server_set_worker(tr_actor_state(server), w, push);
}

int tr_job_feed(tr_job *j, tr_actor *loader, tr_actor *first, tr_actor *last) {
  const int depth = j->prefetch, wake = depth / 2 > 1 ? depth / 2 : 1;
  tr_edge *x, *y = NULL;
  int rc = tr_graph_connect(j->g, &(tr_edge_config){.from = loader, .to = first,
                                                    .type = &tr__batch_type, .name = "inputs",
                                                    .credits = depth, .wake_at = wake}, &x);
  if (rc == 0 && last != first)
    rc = tr_graph_connect(j->g, &(tr_edge_config){.from = loader, .to = last,
                                                  .type = &tr__batch_type, .name = "targets",
                                                  .credits = depth, .wake_at = wake}, &y);
  if (rc) return rc;
  tr__loader_set_edges(tr_actor_state(loader), x, y);
  tr__stage_set_input(tr_actor_state(first), x, NULL);
  if (y) tr__stage_set_input(tr_actor_state(last), NULL, y);
  return 0;
}

int tr_job_chain(tr_job *j, tr_actor *from, tr_actor *to) {
  const int i = stage_index_of(j, from);
  TR_ASSERT(i >= 0 && stage_index_of(j, to) == i + 1);
  const int s = i % j->c.stages;
  tr_edge *act, *grad;
  /* Stage s holds at most its slot count of micro-batches, and each one's activation is
   * read by s+1 before s can release the slot; the input gradient alternates two buffers. */
  int rc = tr_graph_connect(j->g, &(tr_edge_config){.from = from, .to = to,
                                                    .type = &tr__tensor_type, .name = "act",
                                                    .credits = tr_schedule_slots(j->sc, s)},
                            &act);
  if (rc == 0)
    rc = tr_graph_connect(j->g, &(tr_edge_config){.from = to, .to = from,
                                                  .type = &tr__tensor_type, .name = "grad",
                                                  .credits = 2},
                          &grad);
  if (rc) return rc;
  tr__stage_set_chain(tr_actor_state(from), act, grad, true);
  tr__stage_set_chain(tr_actor_state(to), grad, act, false);
  return 0;
}

int tr_job_group(tr_job *j, tr_actor *const *members, int n) {
  TR_ASSERT(n >= 1);
  if (n == 1) return 0;
  for (int i = 0; i < n; i++) {
    TR_ASSERT(stage_index_of(j, members[i]) >= 0);
    int rc = tr__stage_set_group(tr_actor_state(members[i]), members, n);
    if (rc) return rc;
  }
  return 0;
}

void tr__result_init(tr_train_result *r, const char *model, const char *strategy) {
  memset(r, 0, sizeof *r);
  snprintf(r->model, sizeof r->model, "%s", model);
  snprintf(r->strategy, sizeof r->strategy, "%s", strategy);
  r->initial_loss = r->final_loss = r->samples_per_s = r->steps_per_s = NAN;
  r->bubble_fraction = r->bubble_theory = r->staleness_mean = r->staleness_max = NAN;
  r->consistency = r->gflops = r->tokens_per_s = NAN;
  for (int i = 0; i < TR_TRAIN_MAX_DEVICES; i++) r->utilization[i] = NAN;
}

void tr_job_result(const tr_job *j, tr_train_result *r) { *r = j->result; }
