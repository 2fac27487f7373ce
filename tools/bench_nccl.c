/* bench_nccl.c — `troupe bench nccl`: dp on the same GPUs with the replica group summing
 * through NCCL and through troupe's peer reduction (--allreduce nccl / peer), alternated in
 * one sitting, samples/s and their ratio. NCCL takes one member per GPU, so the NCCL side
 * needs two GPUs or more; without them (or without NCCL in the build) the row says why it
 * was skipped and the command succeeds. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

static void usage(FILE *f) {
  fprintf(f, "usage: troupe bench nccl [--model M] [--devices cuda:0,1,..] [--seconds S] "
             "[--repeats N] [--json]\n\n"
             "dp on the given GPUs (default: every GPU) summing through NCCL against troupe's\n"
             "peer reduction, alternated; medians of N runs of S seconds each (default 3 x 4).\n");
}

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
  const char *model = "mlp", *devices = NULL;
  double seconds = 4;
  uint64_t repeats = 3;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model")) {
      if (!cli_value_str(argc, argv, &i, &model)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--devices")) {
      if (!cli_value_str(argc, argv, &i, &devices)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--seconds")) {
      if (!cli_value_double(argc, argv, &i, 0.1, 3600, &seconds)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--repeats")) {
      if (!cli_value_u64(argc, argv, &i, 1, 99, &repeats)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--json")) {
      json = true;
    } else {
      usage(strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? stderr : stdout);
      return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? CLI_USAGE : CLI_OK;
    }
  }
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
  double rate[2][99];
  for (int k = 0; k < (int)repeats; k++)
    for (int side = 0; side < 2; side++) { /* alternated: the machine drifts alike for both */
      tr_train_result r;
      char err[512];
      o.job.allreduce = side ? TR_ALLREDUCE_PEER : TR_ALLREDUCE_NCCL;
      if (tr_train_run(&o, &r, err, sizeof err)) {
        fprintf(stderr, "troupe: bench nccl: %s\n", err);
        return CLI_FAIL;
      }
      rate[side][k] = r.samples_per_s;
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
