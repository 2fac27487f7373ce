/* async_ps.c — SimpleNet trained asynchronously through a parameter server, its graph wired
 * by hand.
 *
 * A server actor on a device of its own holds the parameters and the optimizer. Each worker,
 * one per device, computes the gradient of a whole batch at the parameters it last pulled and
 * pushes it; the server applies every push as one update and answers with fresh parameters.
 * Workers do not wait for each other, so a gradient may be a few updates old when it is
 * applied (its staleness); with staleness bound 1 (SSP) a worker that is more than one push
 * ahead of the slowest waits for it. Steps are handed out from one counter, so step k's batch
 * is the one single-device training would take. This is what `troupe train --strategy async
 * --staleness 1` runs, spelled out with the calls of tr_graph.h and tr_job.h.
 *
 * Run it as `async_ps [DEVICES]` (default host:2: two workers, and the server on a host
 * device of its own). It exits 0 once the loss has dropped tenfold.
 */
#include <stdio.h>

#include <troupe.h>

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "host:2";
  const int64_t steps = 2000;
  char err[1024] = "";
  tr_model *model = NULL;
  tr_device_list *devs = NULL, *server_dev = NULL;
  tr_data *data = NULL;
  tr_graph *g = NULL;
  tr_job *job = NULL;
  int ok = 0, rc;

  /* The model, a device per worker and one for the server, and the data: sample i is a
   * function of (seed, i) alone, so any worker's loader can fill any step. */
  if ((rc = tr_model_simplenet(&model))) {
    snprintf(err, sizeof err, "simplenet: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_device_list_open(&devs, spec, err, sizeof err))) goto out;
  if ((rc = tr_device_list_open(&server_dev, "host:1", err, sizeof err))) goto out;
  const int W = tr_device_list_count(devs);
  tr_data_config dc;
  tr_data_config_for(&dc, model, 1, NULL); /* simplenet's: a fixed random teacher */
  if ((rc = tr_data_open(&data, &dc, err, sizeof err))) goto out;

  /* The job: W workers ("replicas" of one stage, each training whole 64-sample batches),
   * asynchronous, SSP with bound 1. */
  tr_job_config jc = tr_job_defaults(); /* the model's batch (64 samples per step: one push)
                                           and optimizer (SGD, lr 0.01: the server's) */
  jc.model = model;
  jc.data = data;
  jc.layout.replicas = W;
  jc.async.enabled = 1;
  jc.async.staleness = 1;
  if ((rc = tr_graph_new(&g, NULL))) {
    snprintf(err, sizeof err, "creating the graph: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&job, g, &jc, err, sizeof err))) goto out;

  /* The actors: the server; per worker a loader feeding it (inputs and targets: a worker is
   * its replica's only stage) and the push/reply edges to the server; a coordinator that
   * collects the figures. */
  tr_actor *server, *worker, *loader, *coordinator;
  rc = tr_job_add_server(job, tr_device_list_at(server_dev, 0), &server);
  for (int i = 0; i < W && rc == 0; i++) {
    rc = tr_job_add_loader(job, i, &loader);
    if (rc == 0) rc = tr_job_add_worker(job, i, tr_device_list_at(devs, i), &worker);
    if (rc == 0) rc = tr_job_feed(job, loader, worker, worker);
    if (rc == 0) rc = tr_job_serve(job, server, worker);
  }
  if (rc == 0) rc = tr_job_add_coordinator(job, &coordinator);
  if (rc) {
    snprintf(err, sizeof err, "creating the actors: %s", tr_strerror(rc));
    goto out;
  }

  /* Updates [0, steps) at the server. On failure the graph names the actor that failed. */
  if ((rc = tr_graph_run(g, 0, steps, 0))) {
    snprintf(err, sizeof err, "%s", tr_graph_error(g));
    goto out;
  }
  /* The run's figures, each by its key (tr_result.h): the job's, while it lives. */
  const tr_result *r = tr_job_result_of(job);
  int64_t updates, workers;
  const char *devices;
  double first, last, rate, stale_mean, stale_max, apart;
  tr_result_int(r, "steps", &updates);
  tr_result_text(r, "devices", &devices);
  tr_result_int(r, "workers", &workers);
  tr_result_real(r, "initial_loss", &first);
  tr_result_real(r, "final_loss", &last);
  tr_result_real(r, "steps_per_s", &rate);
  tr_result_real(r, "staleness.mean", &stale_mean);
  tr_result_real(r, "staleness.max", &stale_max);
  tr_result_real(r, "consistency", &apart);
  printf("trained %lld updates asynchronously on %s (%lld workers, staleness bound 1): loss "
         "%.4f -> %.4f, %.0f updates/s\n",
         (long long)updates, devices, (long long)workers, first, last, rate);
  /* staleness: updates applied between a worker's pull and its push's, a list of bins */
  printf("staleness mean %.2f, max %.0f; updates by staleness:", stale_mean, stale_max);
  tr_figure bins;
  tr_result_figure(r, "staleness.histogram", &bins);
  for (int s = 0; s < bins.count; s++) {
    int64_t n;
    tr_result_int_at(r, "staleness.histogram", s, &n);
    printf(" %lld", (long long)n);
  }
  printf("; workers' parameters %.1e from the server's at push\n", apart);
  ok = last < 0.1 * first;

out:
  if (err[0]) fprintf(stderr, "async_ps: %s\n", err);
  tr_graph_free(g); /* the graph's actors use the job: free it first */
  tr_job_free(job);
  tr_data_close(data);
  tr_device_list_close(server_dev);
  tr_device_list_close(devs);
  tr_model_free(model);
  return ok ? 0 : 1;
}
