/* troupe.c — the `troupe` command line: one executable, one sub-command per job.
 *
 * Exit status: 0 success, 1 runtime failure, 2 usage error (docs/WORKLOADS.md's contract).
 * Sub-commands register in `commands` below; each parses its own arguments.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

static const cli_command commands[] = {
    {"bench", "measure the runtime: bench mailbox", cmd_bench},
    {"devices", "list the host device and the GPUs", cmd_devices},
    {"plan", "predict every layout and rank them: troupe plan --model gpt --devices host:2", cmd_plan},
    {"timeline", "draw a trace as a schedule: troupe timeline t.json -o t.svg", cmd_timeline},
    {"train", "train a model: troupe train --model simplenet --steps 2000", cmd_train},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
  fprintf(f,
          "usage: troupe <command> [options]\n"
          "       troupe --version | --help\n\n"
          "commands:\n");
  for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n'troupe <command> --help' describes a command.\n");
}

int main(int argc, char **argv) {
  tr_stdio_reserve(); /* before MPI or libuv open descriptors: a closed stream is /dev/null */
  /* a file beyond ulimit -f fails its write (EFBIG), which names it, rather than ending the
   * process with nothing said (the library's writer blocks it while it writes, whatever
   * the program does; this covers every other write) */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("troupe %s (message memory: %s)\n", TR_VERSION_STRING, tr_msg_allocator());
    return 0;
  }
  if (cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (int i = 0; i < NCOMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "troupe: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
