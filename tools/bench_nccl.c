/* bench_nccl.c — `troupe bench nccl`: dp on the same GPUs with the replica group summing
 * through NCCL and through troupe's peer reduction (--allreduce nccl / peer), alternated in
 * one sitting, samples/s and their ratio. NCCL takes one member per GPU, so the NCCL side
 * needs two GPUs or more; without them (or without NCCL in the build) the row says why it
 * was skipped and the command succeeds. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

typedef struct args {
  const char *model, *devices;
  double seconds;
  int repeats, json;
} args;

static const cli_option options[] = {
    CLI_MODEL(args, model, "the workload (default mlp)"),
    CLI_DEVICES(args, devices, "cuda:0,1,..", "the GPUs (default: every GPU)"),
    CLI_SECONDS(args, seconds, 0.1, 3600, "each run's (default 4)"),
    CLI_REPEATS(args, repeats, 99, "runs of each, whose median counts (default 3)"),
    CLI_JSON(args, json, "one JSON object on stdout"),
};
static const cli_table table = {
    "bench nccl", options, CLI_COUNT(options),
    .about = "dp on the given GPUs summing through NCCL against troupe's peer reduction,\n"
             "alternated; medians of N runs of S seconds each.\n"};

static int median_of(double *v, int n) { /* sorts v; the index of the median */
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
      double t = v[k];
      v[k] = v[k - 1], v[k - 1] = t;
    }
  return n / 2;
}

static int skip(bool json, const char *why) {
  if (json) {
    printf("{\"skipped\":");
    cli_json_string(stdout, why);
    printf("}\n");
  } else {
    printf("| nccl vs peer | skipped: %s |\n", why);
  }
  return CLI_OK;
}

int bench_nccl(int argc, char **argv) {
  args a = {.model = "mlp", .seconds = 4, .repeats = 3};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const char *model = a.model, *devices = a.devices;
  const double seconds = a.seconds;
  const int repeats = a.repeats;
  const bool json = a.json;
  const int ngpu = tr_device_count(TR_DEVICE_CUDA);
  char spec[512] = "cuda:", why[160];
  if (tr_comm_library() == NULL) return skip(json, "this troupe was built without NCCL");
  if (ngpu < 2 && devices == NULL) {
    snprintf(why, sizeof why, "NCCL takes one member per GPU and this machine has %d", ngpu);
    return skip(json, why);
  }
  for (int g = 0; g < ngpu && devices == NULL; g++)
    snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%d", g ? "," : "", g);
  tr_train_options o = tr_train_defaults();
  o.model = model;
  o.devices = devices ? devices : spec;
  o.strategy = TR_STRATEGY_DP;
  o.seconds = seconds;
  double rate[2][99] = {{0}};
  for (int k = 0; k < (int)repeats; k++)
    for (int side = 0; side < 2; side++) { /* alternated: the machine drifts alike for both */
      tr_result *r;
      tr_error e;
      o.job.allreduce = side ? TR_ALLREDUCE_PEER : TR_ALLREDUCE_NCCL;
      const int rc = tr_train_run_result(&o, &r, &e);
      rate[side][k] = cli_figure(r, "samples_per_s");
      tr_result_free(r);
      if (rc) {
        fprintf(stderr, "troupe: bench nccl: %s\n", e.message);
        return CLI_FAIL;
      }
    }
  const double nccl = rate[0][median_of(rate[0], (int)repeats)];
  const double peer = rate[1][median_of(rate[1], (int)repeats)];
  if (json) {
    printf("{\"model\":");
    cli_json_string(stdout, model);
    printf(",\"devices\":");
    cli_json_string(stdout, o.devices);
    printf(",\"library\":");
    cli_json_string(stdout, tr_comm_library());
    printf(",\"nccl_samples_per_s\":%.6g,\"peer_samples_per_s\":%.6g,\"ratio\":%.4f}\n", nccl,
           peer, nccl / peer);
  } else {
    printf("| %s dp on %s | %s %.0f samples/s | peer %.0f samples/s | %.2fx |\n", model,
           o.devices, tr_comm_library(), nccl, peer, nccl / peer);
  }
  return CLI_OK;
}
