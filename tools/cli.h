/* cli.h — what the `troupe` sub-commands share: the command table entry, exit codes and
 * small argument helpers that report a bad value by name. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

typedef struct cli_command {
  const char *name;
  const char *help;
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} cli_command;

/* Parses argv[*i + 1] as the value of option argv[*i] and advances *i; on a missing or bad
 * value prints "troupe: <option>: ..." and returns false. */
bool cli_value_u64(int argc, char **argv, int *i, uint64_t min, uint64_t max, uint64_t *out);
bool cli_value_double(int argc, char **argv, int *i, double min, double max, double *out);
bool cli_value_str(int argc, char **argv, int *i, const char **out);

/* Writes `s` as a JSON string, quoted and escaped. */
void cli_json_string(FILE *f, const char *s);

/* The median of v[0, n) (sorts v in place); NaN for none. */
double cli_median(double *v, int n);

/* GFLOP/s of single-thread cblas_sgemm on n×n matrices, measured now (reference.c). */
double cli_sgemm_gflops(int n);

/* Sub-commands. */
int cmd_bench(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif
