/* cmd_devices.c — `troupe devices`: the devices this machine offers (one host
 * device standing for the CPU, every GPU), with memory, compute capability, what their GEMM
 * runs on (the instruction set oneDNN dispatches to, or the GPU's architecture) and whether
 * bf16 is native there, for GPUs which pairs can reach each other's memory directly, and
 * whether this build has NCCL (the collectives of GPU replica groups) and which; and the
 * host GEMM's libraries and policy (gpu/host/host_choose.h). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "host/host_choose.h"
#include "troupe.h"

static double gib(uint64_t bytes) { return (double)bytes / (double)(1ull << 30); }

typedef struct args {
  int json;
} args;

static const cli_option options[] = {
    CLI_JSON(args, json, "one JSON object on stdout"),
};
static const cli_table table = {
    "devices", options, CLI_COUNT(options),
    .about = "Lists the host device and every GPU: kind, name, memory, compute capability,\n"
             "the instruction set GEMM runs on and how bf16 is multiplied there (native,\n"
             "emulated, or converted to fp32), the GPUs' peer-access matrix, and whether\n"
             "this build has NCCL (and its version); the libraries the host's GEMM has\n"
             "and how it picks one for each shape (TROUPE_GEMM).\n"};

/* The host GEMM's libraries, and the policy the host device opened with. */
static void host_gemm(bool json) {
  char policy[4200];
  tr__host_gemm_policy_describe(policy, sizeof policy);
  if (json) {
    printf(",\"host_gemm\":{\"policy\":\"%s\",\"description\":", tr__host_gemm_policy_name());
    cli_json_string(stdout, policy);
    printf(",\"libraries\":[");
  } else
    fprintf(stderr, "\nhost GEMM: %s\n", policy);
  for (int i = 0; i < tr__host_nlibs; i++) {
    const tr__host_lib_info *in = tr__host_lib_info_of(i);
    if (json) {
      printf("%s{\"name\":\"%s\",\"label\":", i ? "," : "", tr__host_libs[i]->name);
      cli_json_string(stdout, in->label);
      printf(",\"isa\":");
      cli_json_string(stdout, in->isa);
      printf(",\"bf16\":\"%s\"}", tr_bf16_support_name(in->bf16));
    } else
      fprintf(stderr, "  %-9s %-18s %-17s bf16 %s%s%s%s%s\n", tr__host_libs[i]->name, in->label,
              in->isa, tr_bf16_support_name(in->bf16), tr__host_libs[i]->fits ? " (" : "",
              tr__host_libs[i]->fits ? tr__host_libs[i]->fits_what : "",
              tr__host_libs[i]->fits ? ")" : "",
              tr__host_libs[i]->rows_vary ? " (rows vary with the rows around them)" : "");
  }
  if (json) printf("]}");
}

int cmd_devices(int argc, char **argv) {
  args a = {0};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const bool json = a.json;

  /* host:1 stands for the CPU; the GPUs are listed one by one */
  const int ngpu = tr_device_count(TR_DEVICE_CUDA), nthreads = tr_device_count(TR_DEVICE_HOST);
  tr_device_list *lists[2] = {NULL, NULL};
  char err[256], spec[1024] = "cuda:";
  if (tr_device_list_open(&lists[0], "host:1", err, sizeof err)) {
    fprintf(stderr, "troupe devices: %s\n", err);
    return CLI_FAIL;
  }
  for (int i = 0; i < ngpu; i++) {
    size_t len = strlen(spec);
    snprintf(spec + len, sizeof spec - len, "%s%d", i ? "," : "", i);
  }
  if (ngpu > 0 && tr_device_list_open(&lists[1], spec, err, sizeof err)) {
    fprintf(stderr, "troupe devices: %s\n", err);
    tr_device_list_close(lists[0]);
    return CLI_FAIL;
  }

  if (json) printf("{\"host_threads\":%d,\"cuda_devices\":%d,\"devices\":[", nthreads, ngpu);
  else
    fprintf(stderr, "%-8s %-5s %-36s %18s %4s %4s  %-17s %s\n", "device", "kind", "model",
            "memory GiB (free)", "cc", "SMs", "GEMM on", "bf16");
  int first = 1;
  for (int l = 0; l < 2; l++) {
    if (!lists[l]) continue;
    for (int i = 0; i < tr_device_list_count(lists[l]); i++) {
      const tr_device_info *in = tr_device_info_of(tr_device_list_at(lists[l], i));
      if (json) {
        printf("%s{\"name\":", first ? "" : ",");
        cli_json_string(stdout, in->name);
        printf(",\"kind\":\"%s\",\"model\":", tr_device_kind_name(in->kind));
        cli_json_string(stdout, in->model);
        printf(",\"memory_total\":%llu,\"memory_free\":%llu,", (unsigned long long)in->memory_total,
               (unsigned long long)in->memory_free);
        if (in->kind == TR_DEVICE_CUDA)
          printf("\"compute_capability\":\"%d.%d\",", in->cc_major, in->cc_minor);
        else
          printf("\"compute_capability\":null,");
        printf("\"multiprocessors\":%d,\"isa\":", in->multiprocessors);
        cli_json_string(stdout, in->isa);
        printf(",\"bf16\":\"%s\"}", tr_bf16_support_name(in->bf16));
      } else {
        char mem[32], cc[8] = "-";
        snprintf(mem, sizeof mem, "%.1f (%.1f)", gib(in->memory_total), gib(in->memory_free));
        if (in->kind == TR_DEVICE_CUDA) snprintf(cc, sizeof cc, "%d.%d", in->cc_major, in->cc_minor);
        fprintf(stderr, "%-8s %-5s %-36.36s %18s %4s %4d  %-17s %s\n", in->name,
                tr_device_kind_name(in->kind), in->model, mem, cc, in->multiprocessors, in->isa,
                tr_bf16_support_name(in->bf16));
      }
      first = 0;
    }
  }
  if (json) printf("],\"peer_access\":[");
  else if (ngpu == 0)
    fprintf(stderr, "\nno GPU: host:N gives N host devices (this machine has %d CPU threads)\n", nthreads);
  else
    fprintf(stderr, "\npeer access (row reads and writes column's memory directly):\n%-8s", "");
  for (int i = 0; i < ngpu && !json; i++) fprintf(stderr, " %-7s", tr_device_name(tr_device_list_at(lists[1], i)));
  for (int i = 0; i < ngpu; i++) {
    tr_device *a = tr_device_list_at(lists[1], i);
    if (json) printf("%s[", i ? "," : "");
    else fprintf(stderr, "\n%-8s", tr_device_name(a));
    for (int j = 0; j < ngpu; j++) {
      int p = tr_device_can_access_peer(a, tr_device_list_at(lists[1], j));
      if (json) printf("%s%s", j ? "," : "", p ? "true" : "false");
      else fprintf(stderr, " %-7s", i == j ? "-" : p ? "yes" : "no");
    }
    if (json) printf("]");
  }
  /* "NCCL 2.28.9": the version alone in JSON */
  const char *nccl = tr_comm_library();
  if (json) {
    printf("],\"nccl\":");
    if (nccl) cli_json_string(stdout, nccl + 5);
    else printf("null");
    host_gemm(json);
    printf("}\n");
  } else {
    if (ngpu) fprintf(stderr, "\n");
    fprintf(stderr, "\nNCCL: %s\n", nccl ? nccl + 5 : "not built (GPU replica groups sum "
                                                        "through peer memory)");
    host_gemm(json);
  }
  tr_device_list_close(lists[0]);
  tr_device_list_close(lists[1]);
  return CLI_OK;
}
