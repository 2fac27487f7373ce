/* model_parallel.c — SimpleNet's layers cut across two devices, its graph wired by hand.
 *
 * Stage 0 holds Linear(10,100) and ReLU on the first device, stage 1 holds Linear(100,1)
 * and the loss on the second. Every step the loader sends the inputs to stage 0 and the
 * targets to stage 1; stage 0's activations travel forward to stage 1 and their gradients
 * come back, one micro-batch at a time, so only one device works at any moment: model
 * parallelism buys memory, not speed (pipeline.c adds the speed). This is what
 * `troupe train --strategy mp` runs, spelled out with the calls of tr_graph.h and tr_job.h.
 *
 * Run it as `model_parallel [DEVICES]` with two devices (default host:2; `cuda:0,1` on two
 * GPUs, or `cuda:0,cuda:0` for two logical devices on one). It exits 0 once the loss has
 * dropped tenfold.
 */
#include <stdio.h>

#include <troupe.h>

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "host:2";
  const int64_t steps = 2000;
  const int cuts[] = {2}; /* stage 1 begins at layer 2: stage 0 has layers 0 and 1 */
  char err[1024] = "";
  tr_model *model = NULL;
  tr_device_list *devs = NULL;
  tr_data *data = NULL;
  tr_graph *g = NULL;
  tr_job *job = NULL;
  int ok = 0, rc;

  if ((rc = tr_model_simplenet(&model))) {
    snprintf(err, sizeof err, "simplenet: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_device_list_open(&devs, spec, err, sizeof err))) goto out;
  if (tr_device_list_count(devs) != 2) {
    snprintf(err, sizeof err, "'%s' names %d devices; the two stages need two", spec,
             tr_device_list_count(devs));
    goto out;
  }
  tr_data_config dc;
  tr_data_config_for(&dc, model, 1, NULL); /* simplenet's: a fixed random teacher */
  if ((rc = tr_data_open(&data, &dc, err, sizeof err))) goto out;

  /* One replica of two stages, one micro-batch per step. With one micro-batch the schedule
   * has nothing to reorder: gpipe (all forwards, then all backwards) is the plain order. */
  tr_job_config jc = tr_job_defaults(); /* the model's batch (64) and optimizer (SGD, 0.01) */
  jc.model = model;
  jc.data = data;
  jc.layout.stages = 2;
  jc.layout.schedule = TR_SCHEDULE_GPIPE;
  jc.layout.cuts = cuts; /* NULL would balance the stages by their cost (tr_model_balance) */
  jc.layout.ncuts = 1;
  if ((rc = tr_graph_new(&g, NULL))) {
    snprintf(err, sizeof err, "creating the graph: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&job, g, &jc, err, sizeof err))) goto out;

  /* The actors: a stage per device, the loader feeding inputs to the first and targets to
   * the last, the chain between them (activations forward, their gradients back), and the
   * coordinator. With one replica there is no group to all-reduce in. */
  tr_actor *stage[2], *loader, *coordinator;
  rc = tr_job_add_stage(job, 0, 0, tr_device_list_at(devs, 0), &stage[0]);
  if (rc == 0) rc = tr_job_add_stage(job, 0, 1, tr_device_list_at(devs, 1), &stage[1]);
  if (rc == 0) rc = tr_job_add_loader(job, 0, &loader);
  if (rc == 0) rc = tr_job_feed(job, loader, stage[0], stage[1]);
  if (rc == 0) rc = tr_job_chain(job, stage[0], stage[1]);
  if (rc == 0) rc = tr_job_add_coordinator(job, &coordinator);
  if (rc) {
    snprintf(err, sizeof err, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }

  if ((rc = tr_graph_run(g, 0, steps, 0))) {
    snprintf(err, sizeof err, "%s", tr_graph_error(g));
    goto out;
  }
  /* The run's figures, each by its key (tr_result.h): the job's, while it lives. */
  const tr_result *r = tr_job_result_of(job);
  int64_t trained, stages;
  const char *on;
  double first, last, rate, busy[2];
  tr_result_int(r, "steps", &trained);
  tr_result_text(r, "devices", &on);
  tr_result_int(r, "stages", &stages);
  tr_result_real(r, "initial_loss", &first);
  tr_result_real(r, "final_loss", &last);
  tr_result_real(r, "samples_per_s", &rate);
  for (int i = 0; i < 2; i++) tr_result_real_at(r, "utilization", i, &busy[i]); /* per device */
  printf("trained %lld steps model-parallel on %s (%lld stages): loss %.4f -> %.4f, "
         "%.0f samples/s, devices busy %.0f%% and %.0f%%\n",
         (long long)trained, on, (long long)stages, first, last, rate, 100 * busy[0],
         100 * busy[1]);
  ok = last < 0.1 * first;

out:
  if (err[0]) fprintf(stderr, "model_parallel: %s\n", err);
  tr_graph_free(g); /* the graph's actors use the job: free it first */
  tr_job_free(job);
  tr_data_close(data);
  tr_device_list_close(devs);
  tr_model_free(model);
  return ok ? 0 : 1;
}
