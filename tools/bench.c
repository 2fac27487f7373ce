/* bench.c — `troupe bench <what>`: measurements that compare against a reference taken in
 * the same run. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int bench_allreduce(int argc, char **argv);
int bench_gpu(int argc, char **argv);
int bench_mailbox(int argc, char **argv);
int bench_nccl(int argc, char **argv);
int bench_ops(int argc, char **argv);
int bench_scaleout(int argc, char **argv);
int bench_strategies(int argc, char **argv);

static const cli_command benches[] = {
    {"mailbox", "mailbox and actor messaging against a mutex queue, futex and uv_async",
     bench_mailbox},
    {"ops", "device ops: GEMM against cblas_sgemm, kernels against memcpy", bench_ops},
    {"gpu", "mlp and gpt on a GPU in fp32, TF32, bf16 against cuBLAS's own GEMM peak",
     bench_gpu},
    {"scaleout", "dp over processes (mpirun) against one process; the all-reduce across ranks",
     bench_scaleout},
    {"allreduce", "under mpirun: the sum across ranks against raw MPI_Allreduce", bench_allreduce},
    {"nccl", "dp on the same GPUs summing through NCCL against the peer reduction", bench_nccl},
};
enum { NBENCHES = sizeof benches / sizeof benches[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: troupe bench [--model M] [--devices SPEC] [--seconds S] [--format md|csv|json]\n"
             "       troupe bench <what> [--json]\n\n"
             "The first form trains the model with every strategy (see troupe bench --help-table).\n"
             "what:\n");
  for (int i = 0; i < NBENCHES; i++) fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].help);
}

int cmd_bench(int argc, char **argv) {
  /* --help-table before the options of the first form, which it would be taken for */
  if (argc >= 2 && !strcmp(argv[1], "--help-table"))
    return bench_strategies(2, (char *[]){argv[0], (char *)cli_help_flags[0]});
  if (argc < 2 || (argv[1][0] == '-' && !cli_is_help(argv[1])))
    return bench_strategies(argc, argv);
  if (cli_is_help(argv[1])) {
    usage(stdout);
    return CLI_OK;
  }
  for (int i = 0; i < NBENCHES; i++)
    if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
  fprintf(stderr, "troupe: bench: unknown benchmark '%s'\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
