/* cmd_train.c — `troupe train`: its options, one table (parsing, --help and the flags its
 * messages name, cli.h), tr_train_run on them, a summary on stderr and, with --json, one
 * JSON object on stdout. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tr_model.h"
#include "tr_schedule.h"
#include "tr_train.h"

enum { MAX_CUTS = 63 };

typedef struct cuts_arg {
  int v[MAX_CUTS];
  int n;
} cuts_arg;

/* What the command line sets: the run's options, and what the command itself reads. */
typedef struct train_args {
  tr_train_options o;
  cuts_arg cuts;
  tr_optim_kind optimizer; /* NULL: the model's */
  float lr, clip; /* 0: the optimizer's */
  int json, quiet, print_plan;
  int join; /* --join: refused (cmd_train says why) */
} train_args;

/* "3,6": increasing layer indices, at most MAX_CUTS of them. */
static int parse_cuts(const char *v, void *field) {
  cuts_arg *c = field;
  int n = 0;
  for (const char *p = v;;) {
    char *end;
    const long x = strtol(p, &end, 10);
    if (end == p || x < 1 || x > 1 << 20 || n == MAX_CUTS || (n && x <= c->v[n - 1]))
      return -1;
    c->v[n++] = (int)x;
    if (*end == 0) break;
    if (*end != ',') return -1;
    p = end + 1;
  }
  c->n = n;
  return 0;
}

/* --layout auto: the plan's choice (the only value: a layout given is the other flags). */
static int parse_layout(const char *v, void *field) {
  if (strcmp(v, "auto") != 0) return -1;
  *(int *)field = 1;
  return 0;
}

/* A registered optimizer kind, by name (tr_optim.h). */
static int parse_optimizer(const char *v, void *field) {
  return tr_optim_kind_parse(v, field);
}

/* A fraction strictly between 0 and 1: --eval-split 0 would hold nothing out, which the
 * library reads as no split at all, so a split asked for is never silently none. */
static int parse_fraction(const char *v, void *field) {
  char *end;
  const double f = strtod(v, &end);
  if (end == v || *end || !(f > 0 && f < 1)) return -1;
  *(double *)field = f;
  return 0;
}

/* "A:B" (B > A) or "A:" (to the end): the steps to profile. */
static int parse_profile(const char *v, void *field) {
  char *end;
  const long long a = strtoll(v, &end, 10);
  long long b = 0;
  bool ok = end != v && *end == ':' && a >= 0;
  if (ok && end[1]) {
    const char *p = end + 1;
    b = strtoll(p, &end, 10);
    ok = end != p && *end == 0 && b > a;
  }
  if (!ok) return -1;
  *(tr_profile_config *)field = (tr_profile_config){.from = a, .to = b};
  return 0;
}

/* The library's names of each enumeration, by index. */
#define NAMES(fn, type) \
  static const char *fn##_at(int i) { return fn((type)i); }
NAMES(tr_strategy_name, tr_strategy)
NAMES(tr_schedule_kind_name, tr_schedule_kind)
NAMES(tr_allreduce_name, tr_allreduce)
NAMES(tr_data_on_name, tr_data_on)
NAMES(tr_precision_name, tr_precision)
NAMES(tr_graphs_name, tr_graphs)
NAMES(tr_nonfinite_policy_name, tr_nonfinite_policy)
NAMES(tr_outer_name, tr_outer)
#undef NAMES

/* The strategies a flag applies to. */
#define ONLY(s) (1u << TR_STRATEGY_##s)
enum {
  ASYNC = ONLY(ASYNC),
  SYNC = ONLY(SINGLE) | ONLY(DP) | ONLY(MP) | ONLY(PIPELINE) | ONLY(HYBRID) | ONLY(LOCAL) |
         ONLY(TP),
  TENSOR = ONLY(TP) | ONLY(DP) | ONLY(MP) | ONLY(PIPELINE) | ONLY(HYBRID),
  STAGED = ONLY(MP) | ONLY(PIPELINE) | ONLY(HYBRID) | ONLY(LOCAL),
  GROUPS = ONLY(DP) | ONLY(HYBRID),
  HYBRID = ONLY(HYBRID),
  LOCAL = ONLY(LOCAL)
};
#undef ONLY

#define AT(member) offsetof(train_args, member)
static const cli_option rows[] = {
    CLI_MODEL(train_args, o.model, "the workload: simplenet, mlp or gpt (default simplenet)"),
    {"--strategy", NULL, CLI_ENUM, AT(o.strategy), .name = tr_strategy_name_at,
     .fields = "strategy async.enabled",
     .help = "how to use the devices (default single): dp a replica per device; mp the layers "
             "cut across them; pipeline that cut with micro-batches; hybrid replicas of "
             "pipelines; async workers pushing to a parameter server; local replicas (of --stages) "
             "averaged every --sync-every steps (local SGD, DiLoCo); tp one tensor group of "
             "every device (--tensor)"},
    {"--layout", "auto", CLI_PARSE, AT(o.job.layout.automatic), .parse = parse_layout,
     .expect = "auto", .fields = "layout.automatic",
     .help = "auto: run the layout troupe plan predicts fastest for the model on the devices "
             "(it chooses the strategy and the layout; the summary says which and why)"},
    CLI_DEVICES(train_args, o.devices, "host:N|cuda:I,..|auto",
                "the devices (default auto: every GPU, else host:1); under mpirun this rank's "
                "(none: rank 0 only coordinates and serves), every rank's in rank order"),
    {"--microbatches", "M", CLI_INT, AT(o.job.layout.microbatches), .lo = 1, .hi = 1 << 16,
     .fields = "layout.microbatches", .applies = SYNC,
     .help = "per step and replica (default 1; pipeline, hybrid: 2 x stages)"},
    {"--schedule", NULL, CLI_ENUM, AT(o.job.layout.schedule), .name = tr_schedule_kind_name_at,
     .fields = "layout.schedule", .applies = SYNC,
     .help = "pipeline schedule (default 1f1b): interleaved puts --chunks model chunks on each "
             "device, zb1 splits backward and puts the weights' half off (ZB-H1)"},
    {"--chunks", "V", CLI_INT, AT(o.job.layout.chunks), .lo = 1, .hi = 64,
     .fields = "layout.chunks", .applies = STAGED,
     .help = "model chunks per device under the interleaved schedule (default 2)"},
    {"--recompute", NULL, CLI_SWITCH, AT(o.job.memory.recompute), .fields = "memory.recompute",
     .help = "keep only each micro-batch's input, and compute its activations again in "
             "backward"},
    {"--stages", "N", CLI_INT, AT(o.job.layout.stages), .lo = 1, .hi = 64,
     .fields = "layout.stages", .applies = HYBRID | LOCAL,
     .help = "devices per pipeline (default 2; local: 1)"},
    {"--tensor", "T", CLI_INT, AT(o.job.layout.tensor), .lo = 1, .hi = TR_TRAIN_MAX_DEVICES,
     .fields = "layout.tensor", .applies = TENSOR,
     .help = "tensor parallelism: T devices side by side make a tensor group, each holding "
             "a part of the split layers (Megatron's); the strategy lays out the groups "
             "(tp: one group of every device)"},
    {"--cuts", "L1,L2,..", CLI_PARSE, AT(cuts), .parse = parse_cuts,
     .expect = "a list of increasing layer indices", .fields = "layout.cuts", .applies = STAGED,
     .help = "stage boundaries as layer indices (default: balanced)"},
    {"--zero", "0|1", CLI_INT, AT(o.job.zero), .lo = 0, .hi = 1, .fields = "zero",
     .applies = GROUPS,
     .help = "1 shards the optimizer state across the replicas (ZeRO stage 1: gradients "
             "reduce-scattered, each replica updates its shard, parameters gathered)"},
    {"--allreduce", NULL, CLI_ENUM, AT(o.job.allreduce), .name = tr_allreduce_name_at,
     .fields = "allreduce", .applies = GROUPS | LOCAL,
     .help = "how replica groups sum gradients (default auto: NCCL when every replica of a "
             "process is a GPU of its own and NCCL is built, else peer)"},
    {"--workers", "N", CLI_INT, AT(o.job.layout.replicas), .lo = 1, .hi = TR_TRAIN_MAX_DEVICES,
     .fields = "layout.replicas", .applies = ASYNC,
     .help = "workers, one per device (default: every device)"},
    {"--staleness", "S", CLI_INT, AT(o.job.async.staleness), .lo = 0, .hi = INT_MAX,
     .fields = "async.staleness", .applies = ASYNC,
     .help = "a worker waits while it is more than S pushes ahead of the slowest (SSP; default "
             "unbounded)"},
    {"--dc-lambda", "L", CLI_FLOAT, AT(o.job.async.dc_lambda), .min = 0, .max = 1e6,
     .fields = "async.dc_lambda", .applies = ASYNC,
     .help = "delay compensation g + L g*g*(now - pulled)"},
    {"--momentum-correction", NULL, CLI_SWITCH, AT(o.job.async.momentum_correction),
     .fields = "async.momentum_correction", .applies = ASYNC,
     .help = "take the 1 - 1/workers that asynchrony adds off the explicit momentum"},
    {"--staleness-lr", NULL, CLI_SWITCH, AT(o.job.async.staleness_lr),
     .fields = "async.staleness_lr", .applies = ASYNC,
     .help = "divide the step size by the update's staleness"},
    {"--pull-every", "K", CLI_INT, AT(o.job.async.pull_every), .lo = 1, .hi = 1 << 20,
     .fields = "async.pull_every", .applies = ASYNC,
     .help = "pull fresh parameters every K pushes (default 1)"},
    {"--server", "SPEC", CLI_STR, AT(o.server), .fields = "server", .applies = ASYNC,
     .help = "the parameter server's device (default host:1, or the first worker's GPU)"},
    {"--hogwild", NULL, CLI_SWITCH, AT(o.job.async.hogwild), .fields = "async.hogwild",
     .applies = ASYNC,
     .help = "host devices: workers update the server's parameters in place with no lock "
             "(Hogwild!)"},
    {"--steps", "N", CLI_I64, AT(o.steps), .lo = 1, .hi = INT64_MAX, .fields = "steps",
     .excludes = "seconds",
     .help = "train to step N (default 100; a resumed run continues; async: N updates at the "
             "server)"},
    CLI_SECONDS(train_args, o.seconds, 1e-3, 1e7, "train for S seconds instead"),
    {"--batch", "N", CLI_INT, AT(o.job.global_batch), .lo = 1, .hi = 1 << 20,
     .fields = "global_batch", .help = "samples per step (default: the workload's)"},
    {"--lr", "X", CLI_FLOAT, AT(lr), .min = 1e-12, .max = 1e6, .fields = "optim.lr",
     .help = "learning rate (default: the workload's)"},
    {"--optimizer", "NAME", CLI_PARSE, AT(optimizer), .parse = parse_optimizer,
     .expect = "sgd, momentum, adamw or a kind the program registered", .fields = "optim.kind",
     .help = "sgd, momentum or adamw (default: the workload's)"},
    {"--clip", "NORM", CLI_FLOAT, AT(clip), .min = 1e-12, .max = 1e12, .fields = "optim.clip",
     .help = "global-norm gradient clipping"},
    {"--data", "FILE", CLI_STR, AT(o.data), .fields = "data",
     .help = "token models (gpt): a byte or text file; float models: a NumPy .npy array of "
             "inputs, with --labels"},
    {"--labels", "FILE", CLI_STR, AT(o.labels), .fields = "labels", .needs = "data",
     .help = "a NumPy .npy array of targets (with --data)"},
    {"--eval-data", "FILE", CLI_STR, AT(o.eval_data), .fields = "eval_data eval.data",
     .applies = SYNC,
     .help = "held-out samples, run forward on the trained parameters every --eval-every steps "
             "and at the end (loss, and accuracy for classifiers; on the progress line and in "
             "--json): token models a byte or text file, float models a .npy array of inputs "
             "with --eval-labels"},
    {"--eval-labels", "FILE", CLI_STR, AT(o.eval_labels), .fields = "eval_labels",
     .needs = "eval_data", .applies = SYNC,
     .help = "a NumPy .npy array of held-out targets (with --eval-data)"},
    {"--eval-split", "F", CLI_PARSE, AT(o.eval_split), .parse = parse_fraction,
     .expect = "a fraction between 0 and 1, both excluded",
     .fields = "eval_split", .excludes = "eval_data", .applies = SYNC,
     .help = "hold out this fraction of the rows of --data (chosen by --seed) and evaluate on "
             "them, training on the others (.npy data only)"},
    {"--eval-every", "N", CLI_I64, AT(o.job.eval.every), .lo = 1, .hi = INT64_MAX,
     .fields = "eval.every", .applies = SYNC,
     .help = "evaluate every N steps too (default: at the end only)"},
    {"--eval-samples", "N", CLI_I64, AT(o.job.eval.samples), .lo = 1, .hi = INT64_MAX,
     .fields = "eval.samples", .applies = SYNC,
     .help = "held-out samples evaluated (default: each row once; a byte file's first 1024)"},
    {"--data-on", NULL, CLI_ENUM, AT(o.job.data_on), .name = tr_data_on_name_at,
     .fields = "data_on",
     .help = "where samples are made: auto (the default) generates them on each GPU where the "
             "data can be (synthetic data, gpt's arithmetic), host by the loader thread, device "
             "on every device, host devices too; the same samples wherever they are made"},
    {"--seed", "N", CLI_U64, AT(o.job.seed), .lo = 0, .hi = UINT64_MAX, .fields = "seed",
     .help = "initialisation and data (default 1)"},
    {"--deterministic", NULL, CLI_SWITCH, AT(o.deterministic), .fields = "deterministic",
     .help = "bitwise-repeatable runs"},
    {"--precision", NULL, CLI_ENUM, AT(o.job.precision.gemm), .name = tr_precision_name_at,
     .fields = "precision.gemm",
     .help = "GEMM inputs (default fp32); bf16: weights and activations in bfloat16 into "
             "float32 sums, float32 parameters, gradients and optimizer state"},
    {"--tf32", NULL, CLI_SWITCH, AT(o.job.precision.tf32), .fields = "precision.tf32",
     .help = "CUDA: TF32 tensor cores in fp32 GEMMs"},
    {"--cuda-graphs", NULL, CLI_ENUM, AT(o.job.graphs), .name = tr_graphs_name_at,
     .fields = "graphs",
     .help = "CUDA: capture each stage's passes once per micro-batch slot and replay them "
             "(default on; results are bitwise the same either way)"},
    {"--print-plan", NULL, CLI_SWITCH, AT(print_plan),
     .help = "print the job's plan on stderr before it runs: each stage's device, step policy, "
             "edges, their credits and what carries them"},
    {"--trace", "FILE.json", CLI_STR, AT(o.trace), .fields = "trace",
     .help = "Chrome/Perfetto trace of every actor (under mpirun, rank r writes "
             "FILE.rankR.json)"},
    {"--trace-budget", "MiB", CLI_I64, AT(o.trace_budget_mib), .lo = 1, .hi = 1 << 20,
     .fields = "trace_budget_mib", .needs = "trace",
     .help = "the trace's events take at most this much memory (default 64): a longer run "
             "keeps its last steps, and the file says which were dropped"},
    {"--profile-steps", "A:B", CLI_PARSE, AT(o.job.profile), .parse = parse_profile,
     .expect = "A:B with B > A >= 0, or A:", .fields = "profile.from profile.to",
     .help = "trace and NVTX ranges for steps [A, B) only (A: to the end); on CUDA "
             "cudaProfilerStart/Stop around them"},
    {"--checkpoint", "FILE", CLI_STR, AT(o.job.checkpoint.path), .fields = "checkpoint.path",
     .help = "safetensors checkpoint at the end, a signal's end too (its directory must exist "
             "and be writable) ..."},
    {"--checkpoint-every", "N", CLI_I64, AT(o.job.checkpoint.every), .lo = 1, .hi = INT64_MAX,
     .fields = "checkpoint.every", .needs = "checkpoint.path", .help = "... and every N steps"},
    {"--resume", "FILE", CLI_STR, AT(o.job.checkpoint.resume),
     .fields = "checkpoint.resume checkpoint.resume_from",
     .help = "continue from a checkpoint (checked first: its model, format, step, tensors, "
             "values all finite)"},
    {"--on-nonfinite", NULL, CLI_ENUM, AT(o.job.on_nonfinite), .name = tr_nonfinite_policy_name_at,
     .fields = "on_nonfinite",
     .help = "a step whose gradient norm or loss is NaN or infinite: stop the run naming the "
             "step and stage (default), or skip its update and count it (skipped_steps)"},
    CLI_JSON(train_args, json, "one JSON object of the run's figures on stdout"),
    {"--watchdog", "MS", CLI_INT, AT(o.watchdog_ms), .lo = 1, .hi = 24 * 3600 * 1000,
     .fields = "watchdog_ms",
     .help = "fail the run, naming each actor's state, when it makes no progress for MS "
             "milliseconds (default: 10 x the slowest step seen, at least 60000)"},
    CLI_QUIET(train_args, quiet, "no progress line or summary"),
    {"--sync-every", "H", CLI_INT, AT(o.job.local.sync_every), .lo = 1, .hi = INT_MAX,
     .fields = "local.sync_every", .applies = LOCAL,
     .help = "local SGD: each replica trains alone H steps, then the replicas' parameters are "
             "averaged (default 8)"},
    {"--warmup-sync", "K", CLI_INT, AT(o.job.local.warmup_sync), .lo = 0, .hi = INT_MAX,
     .fields = "local.warmup_sync", .applies = LOCAL,
     .help = "post-local SGD: K steps of plain dp (gradients summed every step) first"},
    {"--outer", NULL, CLI_ENUM, AT(o.job.local.outer), .name = tr_outer_name_at,
     .fields = "local.outer", .applies = LOCAL,
     .help = "what a sync does: average (the default) takes the replicas' mean; nesterov is "
             "DiLoCo's outer step, SGD with Nesterov momentum on the mean's change since the "
             "last sync"},
    {"--outer-lr", "X", CLI_FLOAT, AT(o.job.local.outer_lr), .min = 1e-12, .max = 1e6,
     .fields = "local.outer_lr", .applies = LOCAL,
     .help = "DiLoCo's outer learning rate (with --outer nesterov; default 0.7)"},
    {"--outer-momentum", "MU", CLI_FLOAT, AT(o.job.local.outer_momentum), .min = 0,
     .max = 0.999999, .fields = "local.outer_momentum", .applies = LOCAL,
     .help = "DiLoCo's outer Nesterov momentum (default 0.9)"},
    {"--elastic", NULL, CLI_SWITCH, AT(o.job.async.elastic), .fields = "async.elastic",
     .applies = ASYNC | LOCAL,
     .help = "a worker (local: a replica) that fails leaves the run instead of ending it: the "
             "others go on (local: each later sync averages those left), and stderr and the "
             "figures (workers_left, replicas_left) say who left at which step"},
    {"--join", NULL, CLI_SWITCH, AT(join), .fields = "join", .applies = ASYNC,
     .help = "this rank joins a job already running (refused: not built; see --join-at)"},
    {"--join-at", "STEP", CLI_I64, AT(o.job.async.join_at), .lo = 1, .hi = INT64_MAX,
     .fields = "async.join_at", .applies = ASYNC,
     .help = "the last worker (--join-workers: the last N) joins the running job once the "
             "server has applied step STEP's update: it pulls the parameters of that moment "
             "and starts pushing, SSP counting it from then"},
    {"--join-workers", "N", CLI_INT, AT(o.job.async.join_workers), .lo = 1, .hi = 1 << 16,
     .fields = "async.join_workers", .applies = ASYNC, .needs = "async.join_at",
     .help = "how many of the last workers join at --join-at (default 1)"},
};
#undef AT

const cli_table cli_train_table = {
    "train", rows, CLI_COUNT(rows),
    .after = "Exit status: 0 done, 1 a runtime failure (named), 2 a bad option (named by its "
             "flag),\n128 + its number for a run a signal ended after its step in flight (or "
             "during start-up),\nits checkpoint and figures written: 130 SIGINT, 143 SIGTERM, "
             "129 SIGHUP, 131 SIGQUIT,\n138 SIGUSR1, 140 SIGUSR2 (a batch scheduler's warning "
             "before a time limit); a second\nsignal ends the process at once.\n",
    .context_at = offsetof(train_args, o.strategy),
    .context_name = tr_strategy_name_at};

/* The progress line on a terminal: an observer of the run (tr_train_options.observe), on
 * the run's loop thread, drawn at most every PROGRESS_NS. */
enum { PROGRESS_NS = 100 * 1000 * 1000 };
typedef struct progress {
  int64_t end;       /* the run's last step; 0: a timed run */
  int64_t first;     /* the run's first step (-1: no report yet) */
  uint64_t last_ns;
  bool drawn, ended; /* a line is on the terminal; it has ended with a newline */
} progress;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void progress_end(progress *p) {
  if (p->drawn && !p->ended) fputc('\n', stderr);
  p->ended = true;
}

static void draw_progress(void *arg, const tr_report_msg *r) {
  progress *p = arg;
  if (p->first < 0) p->first = r->step - r->steps; /* reports cover the run from its start */
  if (r->last) {
    progress_end(p);
    return;
  }
  const uint64_t now = now_ns();
  const int64_t done = r->step - p->first;
  if (done <= 0 || now - p->last_ns < PROGRESS_NS) return;
  p->last_ns = now;
  const double rate = r->seconds > 0 ? (double)done / r->seconds : 0; /* steps/s */
  const double eta = p->end <= 0 || rate <= 0 ? 0 : (double)(p->end - r->step) / rate;
  fprintf(stderr, "\r\033[Kstep %lld", (long long)r->step);
  if (p->end > 0) fprintf(stderr, "/%lld", (long long)p->end);
  fprintf(stderr, "  loss %.4g", r->last_loss);
  if (r->eval_step >= 0 && r->eval_samples > 0) { /* the latest evaluation, if one ran */
    fprintf(stderr, "  held-out loss %.4g", r->eval_loss);
    if (!isnan(r->eval_accuracy)) fprintf(stderr, " acc %.1f%%", 100 * r->eval_accuracy);
  }
  fprintf(stderr, "  %.0f samples/s  ETA %.0fs",
          r->seconds > 0 ? (double)r->samples / r->seconds : 0, eta > 0 ? eta : 0);
  p->drawn = true;
}

/* The run's failure on stderr in one write (the ranks of a job share the terminal), the
 * fields its message names written as their flags. */
static void print_failure(const tr_error *e, int rank, int ranks) {
  char *line = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&line, &len);
  if (f == NULL) return;
  if (ranks > 1) fprintf(f, "troupe: rank %d: ", rank);
  else fputs("troupe: ", f);
  cli_print_error(f, &cli_train_table, e);
  fputc('\n', f);
  fclose(f);
  fputs(line, stderr);
  free(line);
}

int cmd_train(int argc, char **argv) {
  train_args a = {.o = tr_train_defaults()};
  tr_train_options *o = &a.o;
  int rc = cli_parse(&cli_train_table, argc, argv, &a, NULL);
  if (rc != CLI_GO) return rc;
  if (a.join) {
    fputs("troupe: --join: a rank started after the job cannot join it yet: the ranks, every "
          "edge between them and their transports are made once, when the job starts (Open "
          "MPI's MPI_Comm_connect/accept could bring a rank in, but the world and the plan "
          "would have to grow while the run goes on, which they do not). Start every rank "
          "with mpirun, and give --join-at STEP for workers that join the running job "
          "later\n", stderr);
    return CLI_USAGE;
  }
  if (o->seconds > 0) o->steps = 0; /* --steps excludes --seconds */
  if (a.cuts.n) {
    o->job.layout.cuts = a.cuts.v;
    o->job.layout.ncuts = a.cuts.n;
  }
  /* --optimizer alone: that kind's defaults at the model's learning rate (lr 0) */
  if (a.optimizer) o->job.optim = tr_optim_defaults(a.optimizer, 0);
  o->job.optim.lr = a.lr;
  o->job.optim.clip = a.clip;
  if (o->strategy == TR_STRATEGY_LOCAL && o->job.local.sync_every == 0) o->job.local.sync_every = 8;
  if (o->job.local.outer == TR_OUTER_NESTEROV && o->job.local.outer_lr == 0)
    o->job.local.outer_lr = 0.7f; /* DiLoCo's (Douillard et al. 2023) */
  progress bar = {.end = o->steps, .first = -1};
  if (!a.quiet && isatty(STDERR_FILENO)) o->observe = draw_progress, o->observe_arg = &bar;
  o->notes = stderr;
  if (a.print_plan) o->plan = stderr;

  tr_result *r = NULL;
  tr_error e = {0};
  tr_signals_hold(); /* from here: a signal while MPI and the run start up is not lost */
  rc = tr_world_open(&o->world, e.message, sizeof e.message);
  const int rank = tr_world_rank(o->world), ranks = tr_world_size(o->world);
  if (rc == 0) rc = tr_train_run_result(o, &r, &e);
  const char *stopped_by = NULL; /* the signal that ended the run in order */
  if (rc == TR_EINTR && r) tr_result_text(r, "signal", &stopped_by);
  /* One that came after the run ended is acted on as if nothing held it. */
  const int late = stopped_by ? 0 : tr_signals_held();
  tr_signals_release();
  if (late) raise(late);
  progress_end(&bar);
  if (rc) print_failure(&e, rank, ranks);
  tr_world_close(o->world); /* after a failed run across ranks, ends them all */
  /* A run a signal ended in order has its figures, and exits as the signal would have
   * (128 + its number: 130 for SIGINT, 143 for SIGTERM). */
  int signal = 0;
  if (stopped_by) tr_signal_parse(stopped_by, &signal);
  const int status = signal                               ? 128 + signal
                     : rc == TR_EINVAL || rc == TR_ENODEV ? CLI_USAGE
                     : rc                                 ? CLI_FAIL
                                                          : CLI_OK;
  if ((rc && !signal) || rank != 0) { /* rank 0 speaks for the job */
    tr_result_free(r);
    return status;
  }
  /* On host devices, the hardware's yardstick, measured now, after the run (docs/WORKLOADS.md):
   * for the models whose FLOPs are GEMMs; simplenet's are too small to compare. Not after a
   * signal: whoever sent it wants the process gone; nor when neither the summary nor --json
   * will show it (it takes about a second of a core: tools/run-digests.sh runs many). */
  const char *devices = NULL, *model = NULL;
  tr_result_text(r, "devices", &devices);
  tr_result_text(r, "model", &model);
  if (!strncmp(devices, "host", 4) && strcmp(model, "simplenet") != 0 && !signal &&
      (!a.quiet || a.json))
    tr_result_set_real(r, "sgemm_gflops", cli_sgemm_gflops(2048));
  if (!a.quiet) tr_result_summary(r, stderr);
  /* stdout may be full or gone (`>/dev/full`): figures asked for and not written fail */
  int wrote = 0;
  if (a.json && ((wrote = tr_result_json(r, stdout)) || fflush(stdout) || ferror(stdout))) {
    fprintf(stderr, "troupe: --json: writing the figures to standard output failed: %s\n",
            wrote == TR_ENOMEM ? "out of memory" : strerror(errno));
    tr_result_free(r);
    return status ? status : CLI_FAIL;
  }
  tr_result_free(r);
  return status;
}
