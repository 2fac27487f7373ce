/* pipeline.c — an MLP as a two-stage 1F1B pipeline of eight micro-batches, wired by hand.
 *
 * The mlp workload's shape, made small: 8 × Linear(256,256) with ReLU between, cut into two
 * stages of equal cost on two devices. Each step's 256 samples go through as 8 micro-batches
 * of 32, so stage 1 works on micro-batch k while stage 0 works on k+1. The schedule is 1F1B
 * (PipeDream-flush): after its warm-up forwards a stage alternates one forward and one
 * backward, so it never holds more micro-batches than there are stages after it. What is
 * left idle is the bubble, (p-1)/(m+p-1) = 1/9 of the time with equal stages; the run
 * reports it measured beside that figure. This is `troupe train --strategy pipeline`,
 * spelled out with the calls of tr_graph.h and tr_job.h.
 *
 * Run it as `pipeline [DEVICES]` with two devices (default host:2; `cuda:0,1` on two GPUs,
 * or `cuda:0,cuda:0` for two logical devices on one). The mlp's data is Gaussian noise,
 * for throughput, not learning: it exits 0 once the run has finished with a finite loss.
 */
#include <math.h>
#include <stdio.h>

#include <troupe.h>

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "host:2";
  const int64_t steps = 50;
  char err[1024] = "";
  tr_model *model = NULL;
  tr_device_list *devs = NULL;
  tr_data *data = NULL;
  tr_graph *g = NULL;
  tr_job *job = NULL;
  int ok = 0, rc;

  if ((rc = tr_model_mlp(&model, 256, 8))) { /* width, depth (the workload: 1024, 8) */
    snprintf(err, sizeof err, "mlp: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_device_list_open(&devs, spec, err, sizeof err))) goto out;
  if (tr_device_list_count(devs) != 2) {
    snprintf(err, sizeof err, "'%s' names %d devices; the two stages need two", spec,
             tr_device_list_count(devs));
    goto out;
  }
  tr_data_config dc;
  tr_data_config_for(&dc, model, 1, NULL); /* the mlp's: x and y ~ N(0,1) */
  if ((rc = tr_data_open(&data, &dc, err, sizeof err))) goto out;

  /* One replica of two stages, 8 micro-batches per step under 1F1B. The cuts are left to
   * tr_model_balance, which puts four of the eight Linears on each stage. */
  tr_job_config jc = tr_job_defaults(); /* the model's batch (256 samples per step) and
                                           optimizer (momentum 0.9, lr 1e-3); 1F1B */
  jc.model = model;
  jc.data = data;
  jc.layout.stages = 2;
  jc.layout.microbatches = 8; /* of 32 samples; gradients add up over them before the update */
  if ((rc = tr_graph_new(&g, NULL))) {
    snprintf(err, sizeof err, "creating the graph: %s", tr_strerror(rc));
    goto out;
  }
  if ((rc = tr_job_new(&job, g, &jc, err, sizeof err))) goto out;

  /* The same graph as model_parallel.c: the micro-batches and the schedule are the job's,
   * the stages run them. The chain's activation edge has as many credits as stage 0 has
   * activation slots, so stage 0 can run ahead of stage 1 by at most that much. */
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
  int64_t trained, stages, microbatches, held[2];
  const char *schedule, *on;
  double rate, last, bubble, theory;
  tr_result_int(r, "steps", &trained);
  tr_result_int(r, "stages", &stages);
  tr_result_text(r, "schedule", &schedule);
  tr_result_int(r, "microbatches", &microbatches);
  tr_result_text(r, "devices", &on);
  tr_result_real(r, "samples_per_s", &rate);
  tr_result_real(r, "final_loss", &last);
  /* bubble_fraction: the share of the devices' time idle, measured after the warm-up steps;
   * bubble_theory: the schedule's own, with every forward and backward of equal cost. */
  tr_result_real(r, "bubble_fraction", &bubble);
  tr_result_real(r, "bubble_theory", &theory);
  for (int i = 0; i < 2; i++) tr_result_int_at(r, "peak_microbatches", i, &held[i]);
  printf("trained %lld steps as a %lld-stage %s pipeline of %lld micro-batches on %s: "
         "%.0f samples/s, loss %.4f, bubble %.3f (theory %.3f), micro-batches held %lld and "
         "%lld\n",
         (long long)trained, (long long)stages, schedule, (long long)microbatches, on, rate, last,
         bubble, theory, (long long)held[0], (long long)held[1]);
  ok = isfinite(last);

out:
  if (err[0]) fprintf(stderr, "pipeline: %s\n", err);
  tr_graph_free(g); /* the graph's actors use the job: free it first */
  tr_job_free(job);
  tr_data_close(data);
  tr_device_list_close(devs);
  tr_model_free(model);
  return ok ? 0 : 1;
}
