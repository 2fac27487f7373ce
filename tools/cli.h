/* cli.h — what the `troupe` sub-commands share: the command table entry, exit codes, and the
 * option tables that drive parsing, --help and the messages of every sub-command.
 *
 * A command's options are one table: a row per flag, saying the field it sets (an offset in
 * the command's own struct), its type and bounds, the names of an enumeration's values, its
 * help, the library fields it stands for (so that a library message naming "optim.lr" is
 * shown naming --lr) and the contexts (train: strategies) it applies to. cli_parse reads
 * argv by the table, cli_help prints it, cli_print_error writes a library error with flags:
 *
 *   typedef struct args { int json; uint64_t depth; } args;
 *   static const cli_option rows[] = {
 *       CLI_JSON(args, json, "one JSON object on stdout"),
 *       {"--depth", "N", CLI_U64, offsetof(args, depth), .lo = 1, .hi = 64,
 *        .help = "how deep (default 8)"},
 *   };
 *   static const cli_table table = {"example", rows, CLI_COUNT(rows), .usage = "..."};
 *   args a = {.depth = 8};
 *   int rc = cli_parse(&table, argc, argv, &a, NULL);
 *   if (rc != CLI_GO) return rc;   // --help (0), or a bad argument named (2)
 */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tr_job.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_GO = -1 };

typedef struct cli_command {
  const char *name;
  const char *help;
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} cli_command;

typedef enum cli_type {
  CLI_SWITCH, /* no value: the int field becomes 1 */
  CLI_INT,    /* a whole number in [lo, hi] into an int */
  CLI_I64,    /* ... into an int64_t */
  CLI_U64,    /* ... into a uint64_t */
  CLI_FLOAT,  /* a number in [min, max] into a float */
  CLI_DOUBLE, /* ... into a double */
  CLI_STR,    /* the argument itself, into a const char * */
  CLI_ENUM,   /* one of the names name(0), name(1), ... ("?" ends them): its index into an int
                 (an enum's value) */
  CLI_PARSE   /* parse(value, field): 0, or nonzero (the value is refused, `expect` saying what
                 it should have been) */
} cli_type;

typedef struct cli_option {
  const char *flag;  /* --microbatches */
  const char *value; /* what the help calls its value ("M"); enumerations: their names */
  cli_type type;
  size_t at;         /* the field's offset in the command's struct */
  uint64_t lo, hi;   /* whole numbers' bounds */
  double min, max;   /* other numbers' bounds */
  const char *(*name)(int i);                  /* CLI_ENUM */
  int (*parse)(const char *value, void *field); /* CLI_PARSE */
  const char *expect; /* CLI_PARSE: what a value must be ("A:B with B > A >= 0, or A:") */
  const char *alias;  /* another spelling (timeline: -o for --output) */
  const char *fields; /* the library's fields it sets, space-separated ("profile.from
                         profile.to"): its messages about them name this flag */
  unsigned applies;   /* the contexts it applies to (bit i: context i); 0: every one */
  const char *needs;  /* a field whose flag must be given with it */
  const char *excludes; /* a field whose flag must not be given with it */
  const char *help;   /* a sentence or more, wrapped by cli_help */
} cli_option;

typedef struct cli_table {
  const char *command; /* "train", "bench gpu": in messages and usage */
  const cli_option *options;
  int count;
  const char *usage;   /* what follows "usage: troupe <command> " (default "[options]") */
  const char *about;   /* a paragraph before the options */
  const char *after;   /* a paragraph after them */
  /* One positional argument, when the command takes one ("TRACE.json"): at its offset. */
  const char *positional;
  size_t positional_at;
  /* Contexts (rows' `applies`): the int field at context_at, named by context_name (train:
   * the strategy, set by the row whose `at` it is). */
  size_t context_at;
  const char *(*context_name)(int i);
} cli_table;

#define CLI_COUNT(rows) ((int)(sizeof(rows) / sizeof *(rows)))

/* Rows several commands share, written once. */
#define CLI_JSON(type, member, text) \
  {"--json", NULL, CLI_SWITCH, offsetof(type, member), .fields = "json", .help = (text)}
#define CLI_QUIET(type, member, text) \
  {"--quiet", NULL, CLI_SWITCH, offsetof(type, member), .fields = "quiet", .help = (text)}
#define CLI_MODEL(type, member, text) \
  {"--model", "M", CLI_STR, offsetof(type, member), .fields = "model", .help = (text)}
#define CLI_DEVICES(type, member, value, text)                                      \
  {"--devices", (value), CLI_STR, offsetof(type, member), .fields = "devices layout", \
   .help = (text)}
#define CLI_SECONDS(type, member, from, to, text)                                   \
  {"--seconds", "S", CLI_DOUBLE, offsetof(type, member), .min = (from), .max = (to), \
   .fields = "seconds", .help = (text)}
#define CLI_REPEATS(type, member, most, text)                                             \
  {"--repeats", "N", CLI_INT, offsetof(type, member), .lo = 1, .hi = (most), .help = (text)}

/* Parses argv[1, argc) by the table into `into` (given[i], when not NULL, set for each row
 * given). CLI_GO to go on; CLI_OK after --help (printed on stdout); CLI_USAGE after a
 * message on stderr naming the argument at fault: an unknown option, a missing or bad value,
 * a flag that does not apply to the context, one without the flag it needs or with one it
 * excludes. */
int cli_parse(const cli_table *t, int argc, char **argv, void *into, bool *given);
/* --help or -h: what every command (and troupe itself) answers with its help. */
extern const char *const cli_help_flags[2];
bool cli_is_help(const char *arg);
/* The usage, every row and the closing paragraph. */
void cli_help(FILE *f, const cli_table *t);
/* The row of a flag the library calls `field` (its first `len` bytes); NULL: none. */
const cli_option *cli_option_of_field(const cli_table *t, const char *field, size_t len);
/* The flag of a row by its field (devices: --devices; the shared rows' json, quiet):
 * how a command names another's flags, or its own in a message. Aborts where there is none
 * (a table and its callers out of step). */
const char *cli_flag(const cli_table *t, const char *field);
/* e's message with every field it names written as its flag (as is where none stands for it). */
void cli_print_error(FILE *f, const cli_table *t, const tr_error *e);

/* A run's figure by its key (tr_result.h), an integer's too, and value i of a per-device one:
 * NaN where the run has none (r NULL: a run that failed). */
double cli_figure(const tr_result *r, const char *key);
double cli_figure_at(const tr_result *r, const char *key, int i);

/* Writes `s` as a JSON string, quoted and escaped. */
void cli_json_string(FILE *f, const char *s);

/* `b` bytes in the unit that keeps its figures: "1.5 GiB", "12.0 MiB", "27.4 KiB", "640 bytes". */
const char *cli_bytes(char *buf, size_t n, uint64_t b);

/* The median of v[0, n) (sorts v in place); NaN for none. */
double cli_median(double *v, int n);

/* GFLOP/s of single-thread cblas_sgemm on n×n matrices, measured now (reference.c). */
double cli_sgemm_gflops(int n);

/* `troupe train`'s table (cmd_train.c), for the commands that run it. */
extern const cli_table cli_train_table;

/* Sub-commands. */
int cmd_bench(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* The instruction sets of the CPU that runs, as the GEMM libraries care about them (detected
 * at run time): "AVX2, AVX-512, AVX512-BF16", "AVX2", "baseline x86-64". */
void cli_cpu_isa(char *out, size_t n);

#endif
