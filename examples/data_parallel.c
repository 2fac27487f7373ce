/* data_parallel.c — SimpleNet trained data-parallel, its graph wired by hand.
 *
 * One replica of the whole model per device. Each step's 64 samples are shared out among
 * the replicas; every replica has its own loader actor filling its share and a stage actor
 * training it, and the replicas' stages form a group that all-reduces the gradients before
 * each update, so every replica takes the same step a single device would. This is what
 * `troupe train --strategy dp` runs, spelled out with the calls of tr_graph.h and tr_job.h.
 *
 * Run it as `data_parallel [DEVICES]` (default host:2; `cuda:0,1` on two GPUs, or
 * `cuda:0,cuda:0` for two logical devices on one). It exits 0 once the loss has dropped
 * tenfold and the replicas still hold the same parameters.
 *
 * The same program runs across processes: `mpirun -np 2 data_parallel host:1` is one job of
 * two replicas, one per process. The world (tr_world.h) lists every rank's devices, the
 * graph places each actor on the rank of its device, and rank 0 — where the coordinator
 * lives — reports.
 */
#include <stdio.h>

#include <troupe.h>

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "host:2";
  const int64_t steps = 2000;
  char err[1024] = "";
  tr_world *world = NULL;
  tr_model *model = NULL;
  tr_device_list *devs = NULL;
  tr_data *data = NULL;
  tr_graph *g = NULL;
  tr_job *job = NULL;
  int ok = 0, rc;

  /* The model, one device per replica, and the data. Sample i of the data is a function of
   * (seed, i) alone, so each loader fills its replica's share without talking to the
   * others. */
  if ((rc = tr_model_simplenet(&model))) {
    snprintf(err, sizeof err, "simplenet: %s", tr_strerror(rc));
    goto out;
  }
  /* Under mpirun, every rank's devices in rank order; else this process's. */
  if ((rc = tr_world_open(&world, err, sizeof err)) ||
      (rc = tr_world_devices(world, spec, &devs, err, sizeof err)))
    goto out;
  const int R = tr_device_list_count(devs);
  tr_data_config dc;
  tr_data_config_for(&dc, model, 1, NULL); /* simplenet's: a fixed random teacher */
  if ((rc = tr_data_open(&data, &dc, err, sizeof err))) goto out;

  /* The job: what every actor of the graph shares. R replicas of one stage each, one
   * micro-batch per step; tr_job_new checks the layout (64 samples must split evenly). */
  tr_job_config jc = tr_job_defaults(); /* the model's batch (64 samples per step, over all
                                           replicas) and optimizer (SGD, lr 0.01); seed 1:
                                           every replica starts from the same parameters */
  jc.model = model;
  jc.data = data;
  jc.layout.replicas = R;
  if ((rc = tr_graph_new(&g, NULL)) || (rc = tr_graph_set_world(g, world))) {
    snprintf(err, sizeof err, "creating the graph: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&job, g, &jc, err, sizeof err))) goto out;

  /* The actors: per replica a stage on its device and a loader feeding it (one stage is
   * both first and last: it takes the inputs and the targets), then the replicas' stages
   * as one all-reduce group, and a coordinator that collects the figures. */
  tr_actor *stage[TR_TRAIN_MAX_DEVICES], *loader, *coordinator;
  for (int i = 0; i < R && rc == 0; i++) {
    rc = tr_job_add_stage(job, i, 0, tr_device_list_at(devs, i), &stage[i]);
    if (rc == 0) rc = tr_job_add_loader(job, i, &loader);
    if (rc == 0) rc = tr_job_feed(job, loader, stage[i], stage[i]);
  }
  if (rc == 0) rc = tr_job_group(job, stage, R);
  if (rc == 0) rc = tr_job_add_coordinator(job, &coordinator);
  if (rc) {
    snprintf(err, sizeof err, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }

  /* Steps [0, steps), no time limit. On failure the graph names the actor that failed. */
  if ((rc = tr_graph_run(g, 0, steps, 0))) {
    snprintf(err, sizeof err, "%s", tr_graph_error(g));
    goto out;
  }
  if (tr_world_rank(world) != 0) { /* rank 0 holds the figures */
    ok = 1;
    goto out;
  }
  /* The run's figures, each by its key (tr_result.h): the job's, while it lives. */
  const tr_result *r = tr_job_result_of(job);
  int64_t trained, replicas;
  const char *on;
  double first, last, rate, apart;
  tr_result_int(r, "steps", &trained);
  tr_result_text(r, "devices", &on);
  tr_result_int(r, "replicas", &replicas);
  tr_result_real(r, "initial_loss", &first);
  tr_result_real(r, "final_loss", &last);
  tr_result_real(r, "samples_per_s", &rate);
  /* consistency: the largest relative distance of a replica's parameters from replica 0's */
  tr_result_real(r, "consistency", &apart);
  printf("trained %lld steps data-parallel on %s (%lld replicas): loss %.4f -> %.4f, "
         "%.0f samples/s, replicas differ by %.1e\n",
         (long long)trained, on, (long long)replicas, first, last, rate, apart);
  ok = last < 0.1 * first && apart < 1e-6;

out:
  if (err[0]) fprintf(stderr, "data_parallel: %s\n", err);
  tr_graph_free(g); /* the graph's actors use the job: free it first */
  tr_job_free(job);
  tr_data_close(data);
  tr_device_list_close(devs);
  tr_model_free(model);
  tr_world_close(world); /* last: after a failed run across processes it ends them all */
  return ok ? 0 : 1;
}
