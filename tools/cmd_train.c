/* cmd_train.c — `troupe train`: parse the options of docs/WORKLOADS.md, run tr_train_run, print
 * a summary on stderr and, with --json, one JSON object on stdout. */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tr_model.h"
#include "tr_schedule.h"
#include "tr_train.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: troupe train [options]\n\n"
          "  --model simplenet|mlp|gpt      the workload (default simplenet)\n"
          "  --strategy single|dp|mp|pipeline|hybrid|async\n"
          "                                 how to use the devices (default single): dp a replica\n"
          "                                 per device; mp the layers cut across them; pipeline\n"
          "                                 that cut with micro-batches; hybrid replicas of pipelines;\n"
          "                                 async workers pushing to a parameter server\n"
          "  --devices host:N|cuda:I,..|auto the devices (default auto: every GPU, else host:1);\n"
          "                                 under mpirun this rank's (none: rank 0 only\n"
          "                                 coordinates and serves), every rank's in rank order\n"
          "  --microbatches M               per step and replica (pipeline, hybrid: 2 x stages)\n"
          "  --schedule gpipe|1f1b|interleaved|zb1\n"
          "                                 pipeline schedule (default 1f1b): interleaved puts\n"
          "                                 --chunks model chunks on each device, zb1 splits\n"
          "                                 backward and puts the weights' half off (ZB-H1)\n"
          "  --chunks V                     interleaved: model chunks per device (default 2)\n"
          "  --recompute                    keep only each micro-batch's input, and compute\n"
          "                                 its activations again in backward\n"
          "  --stages N                     hybrid: devices per pipeline (default 2)\n"
          "  --cuts L1,L2,..                stage boundaries as layer indices (default: balanced)\n"
          "  --zero 0|1                     dp, hybrid: 1 shards the optimizer state across the\n"
          "                                 replicas (ZeRO stage 1: gradients reduce-scattered,\n"
          "                                 each replica updates its shard, parameters gathered)\n"
          "  --allreduce auto|peer|nccl     dp, hybrid: how replica groups sum gradients\n"
          "                                 (default auto: NCCL when every replica of a process\n"
          "                                 is a GPU of its own and NCCL is built, else peer)\n"
          "  --workers N                    async: workers, one per device (default: every device)\n"
          "  --staleness S                  async: a worker waits while it is more than S pushes\n"
          "                                 ahead of the slowest (SSP; default unbounded)\n"
          "  --dc-lambda L                  async: delay compensation g + L g*g*(now - pulled)\n"
          "  --momentum-correction          async: take the 1 - 1/workers that asynchrony adds off\n"
          "                                 the explicit momentum\n"
          "  --staleness-lr                 async: divide the step size by the update's staleness\n"
          "  --pull-every K                 async: pull fresh parameters every K pushes (default 1)\n"
          "  --server SPEC                  async: the parameter server's device (default host:1,\n"
          "                                 or the first worker's GPU)\n"
          "  --hogwild                      async, host devices: workers update the server's\n"
          "                                 parameters in place with no lock (Hogwild!)\n"
          "  --steps N                      train to step N (default 100; a resumed run continues;\n"
          "                                 async: N updates at the server)\n"
          "  --seconds S                    train for S seconds instead\n"
          "  --batch N                      samples per step (default: the workload's)\n"
          "  --lr X                         learning rate (default: the workload's)\n"
          "  --optimizer sgd|momentum|adamw (default: the workload's)\n"
          "  --clip NORM                    global-norm gradient clipping\n"
          "  --data FILE                    token models (gpt): a byte or text file; float models:\n"
          "                                 a NumPy .npy array of inputs, with --labels\n"
          "  --labels FILE                  a NumPy .npy array of targets (with --data)\n"
          "  --data-on auto|host|device     where samples are made: auto (the default) generates\n"
          "                                 them on each GPU where the data can be (synthetic\n"
          "                                 data, gpt's arithmetic), host by the loader thread,\n"
          "                                 device on every device, host devices too; the same\n"
          "                                 samples wherever they are made\n"
          "  --seed N                       initialisation and data (default 1)\n"
          "  --deterministic                bitwise-repeatable runs\n"
          "  --precision fp32|bf16          GEMM inputs (default fp32); bf16: weights and\n"
          "                                 activations in bfloat16 into float32 sums, float32\n"
          "                                 parameters, gradients and optimizer state\n"
          "  --tf32                         CUDA: TF32 tensor cores in fp32 GEMMs\n"
          "  --cuda-graphs on|off           CUDA: capture each stage's passes once per micro-\n"
          "                                 batch slot and replay them (default on; results\n"
          "                                 are bitwise the same either way)\n"
          "  --trace FILE.json              Chrome/Perfetto trace of every actor (under mpirun,\n"
          "                                 rank r writes FILE.rankR.json)\n"
          "  --profile-steps A:B            trace and NVTX ranges for steps [A, B) only (A: to the\n"
          "                                 end); on CUDA cudaProfilerStart/Stop around them\n"
          "  --checkpoint FILE              safetensors checkpoint at the end, a signal's end too\n"
          "                                 (its directory must exist and be writable) ...\n"
          "  --checkpoint-every N           ... and every N steps\n"
          "  --resume FILE                  continue from a checkpoint (checked first: its model,\n"
          "                                 format, step, tensors, values all finite)\n"
          "  --on-nonfinite stop|skip       a step whose gradient norm or loss is NaN or infinite:\n"
          "                                 stop the run naming the step and stage (default), or\n"
          "                                 skip its update and count it (skipped_steps)\n"
          "  --json                         one JSON object of the run's figures on stdout\n"
          "  --watchdog MS                  fail the run, naming each actor's state, when it makes\n"
          "                                 no progress for MS milliseconds (default: 10 x the\n"
          "                                 slowest step seen, at least 60000)\n"
          "  --quiet                        no progress line or summary\n"
          "\n"
          "Exit status: 0 done, 1 a runtime failure (named), 2 a bad option (named by its flag),\n"
          "130 / 143 a run SIGINT / SIGTERM ended after its step in flight, its checkpoint and\n"
          "figures written; a second signal ends the process at once.\n");
}

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
  fprintf(stderr, "  loss %.4g  %.0f samples/s  ETA %.0fs", r->last_loss,
          r->seconds > 0 ? (double)r->samples / r->seconds : 0, eta > 0 ? eta : 0);
  p->drawn = true;
}

/* "3,6": increasing layer indices, at most 63 of them. */
static bool parse_cuts(const char *v, int *cuts, const int **out, int *count) {
  int n = 0;
  const char *p = v;
  for (;;) {
    char *end;
    long c = strtol(p, &end, 10);
    if (end == p || c < 1 || c > 1 << 20 || n == 63 || (n && c <= cuts[n - 1])) {
      fprintf(stderr, "troupe: --cuts: '%s' is not a list of increasing layer indices\n", v);
      return false;
    }
    cuts[n++] = (int)c;
    if (*end == 0) break;
    if (*end != ',') {
      fprintf(stderr, "troupe: --cuts: '%s' is not a list of increasing layer indices\n", v);
      return false;
    }
    p = end + 1;
  }
  *out = cuts;
  *count = n;
  return true;
}

/* "A:B" (B > A) or "A:" (to the end): the steps to profile. */
static bool parse_steps(const char *v, tr_profile_config *out) {
  char *end;
  const long long a = strtoll(v, &end, 10);
  long long b = 0;
  bool ok = end != v && *end == ':' && a >= 0;
  if (ok && end[1]) {
    const char *p = end + 1;
    b = strtoll(p, &end, 10);
    ok = end != p && *end == 0 && b > a;
  }
  if (!ok) {
    fprintf(stderr, "troupe: --profile-steps: '%s' is not A:B with B > A >= 0, or A:\n", v);
    return false;
  }
  *out = (tr_profile_config){.from = a, .to = b};
  return true;
}

/* Library messages name the fields of tr_train_options and tr_job_config; a user of the
 * command knows its flags. A field with a '.' or '_' is replaced wherever it stands as a
 * word; a plain one ("devices") only where it begins the message, since elsewhere it may be
 * prose. Longest names first, so "layout.cuts" is not read as "layout". */
static const struct {
  const char *field, *flag;
} field_flags[] = {
    {"async.momentum_correction", "--momentum-correction"},
    {"profile.from", "--profile-steps"},
    {"profile.to", "--profile-steps"},
    {"checkpoint.resume_from", "--resume"},
    {"on_nonfinite", "--on-nonfinite"},
    {"data_on", "--data-on"},
    {"layout.microbatches", "--microbatches"},
    {"memory.recompute", "--recompute"},
    {"precision.gemm", "--precision"},
    {"checkpoint.resume", "--resume"},
    {"checkpoint.every", "--checkpoint-every"},
    {"checkpoint.path", "--checkpoint"},
    {"async.staleness_lr", "--staleness-lr"},
    {"async.pull_every", "--pull-every"},
    {"async.dc_lambda", "--dc-lambda"},
    {"async.staleness", "--staleness"},
    {"async.hogwild", "--hogwild"},
    {"layout.schedule", "--schedule"},
    {"layout.chunks", "--chunks"},
    {"layout.replicas", "--workers"},
    {"layout.stages", "--stages"},
    {"layout.cuts", "--cuts"},
    {"global_batch", "--batch"},
    {"zero", "--zero"},
    {"allreduce", "--allreduce"},
    {"optim.kind", "--optimizer"},
    {"optim.clip", "--clip"},
    {"optim.lr", "--lr"},
    {"steps or seconds", "--steps or --seconds"},
    {"devices", "--devices"},
    {"seconds", "--seconds"},
    {"labels", "--labels"},
    {"layout", "--devices"},
    {"server", "--server"},
    {"graphs", "--cuda-graphs"},
    {"async", "--strategy async"},
    {"steps", "--steps"},
    {"model", "--model"},
    {"trace", "--trace"},
    {"data", "--data"},
};

static bool word_char(char c) { return (c >= 'a' && c <= 'z') || c == '_' || c == '.' || c == '-'; }

/* Writes `msg` to f with every field name that stands as a word replaced by its flag. */
static void print_with_flags(FILE *f, const char *msg) {
  for (const char *p = msg; *p;) {
    bool done = false;
    for (size_t k = 0; k < sizeof field_flags / sizeof *field_flags && !done; k++) {
      const char *field = field_flags[k].field;
      const size_t n = strlen(field);
      const bool anywhere = strpbrk(field, "._") != NULL;
      if (strncmp(p, field, n) == 0 && (p == msg || (anywhere && !word_char(p[-1]))) &&
          !word_char(p[n])) {
        fputs(field_flags[k].flag, f);
        p += n;
        done = true;
      }
    }
    if (!done) fputc(*p++, f);
  }
}

int cmd_train(int argc, char **argv) {
  tr_train_options o = tr_train_defaults();
  tr_layout_config *layout = &o.job.layout;
  tr_async_config *async = &o.job.async;
  int cuts[64];
  int optimizer = -1;
  double lr = 0, clip = 0;
  bool json = false, quiet = false, steps_given = false;
  const char *async_given = NULL; /* the last option that only async reads */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    uint64_t u;
    double d;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--model")) {
      if (!cli_value_str(argc, argv, &i, &o.model)) return CLI_USAGE;
    } else if (!strcmp(a, "--strategy")) {
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_strategy_parse(v, &o.strategy)) {
        fprintf(stderr, "troupe: --strategy: '%s' is not single, dp, mp, pipeline, hybrid or async\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--devices")) {
      if (!cli_value_str(argc, argv, &i, &o.devices)) return CLI_USAGE;
    } else if (!strcmp(a, "--microbatches")) {
      if (!cli_value_u64(argc, argv, &i, 1, 1 << 16, &u)) return CLI_USAGE;
      layout->microbatches = (int)u;
    } else if (!strcmp(a, "--schedule")) {
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_schedule_kind_parse(v, &layout->schedule)) {
        fprintf(stderr, "troupe: --schedule: '%s' is not %s\n", v, tr_schedule_kind_list());
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--chunks")) {
      if (!cli_value_u64(argc, argv, &i, 1, 64, &u)) return CLI_USAGE;
      layout->chunks = (int)u;
    } else if (!strcmp(a, "--recompute")) {
      o.job.memory.recompute = 1;
    } else if (!strcmp(a, "--stages")) {
      if (!cli_value_u64(argc, argv, &i, 1, 64, &u)) return CLI_USAGE;
      layout->stages = (int)u;
    } else if (!strcmp(a, "--cuts")) {
      if (!cli_value_str(argc, argv, &i, &v) || !parse_cuts(v, cuts, &layout->cuts, &layout->ncuts))
        return CLI_USAGE;
    } else if (!strcmp(a, "--zero")) {
      if (!cli_value_u64(argc, argv, &i, 0, 1, &u)) return CLI_USAGE;
      o.job.zero = (int)u;
    } else if (!strcmp(a, "--allreduce")) {
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_allreduce_parse(v, &o.job.allreduce)) {
        fprintf(stderr, "troupe: --allreduce: '%s' is not auto, peer or nccl\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--workers")) {
      if (!cli_value_u64(argc, argv, &i, 1, TR_TRAIN_MAX_DEVICES, &u)) return CLI_USAGE;
      layout->replicas = (int)u;
      async_given = a;
    } else if (!strcmp(a, "--staleness")) {
      if (!cli_value_u64(argc, argv, &i, 0, INT_MAX, &u)) return CLI_USAGE;
      async->staleness = (int)u;
      async_given = a;
    } else if (!strcmp(a, "--dc-lambda")) {
      if (!cli_value_double(argc, argv, &i, 0, 1e6, &d)) return CLI_USAGE;
      async->dc_lambda = (float)d;
      async_given = a;
    } else if (!strcmp(a, "--momentum-correction")) {
      async->momentum_correction = 1;
      async_given = a;
    } else if (!strcmp(a, "--staleness-lr")) {
      async->staleness_lr = 1;
      async_given = a;
    } else if (!strcmp(a, "--pull-every")) {
      if (!cli_value_u64(argc, argv, &i, 1, 1 << 20, &u)) return CLI_USAGE;
      async->pull_every = (int)u;
      async_given = a;
    } else if (!strcmp(a, "--hogwild")) {
      async->hogwild = 1;
      async_given = a;
    } else if (!strcmp(a, "--server")) {
      if (!cli_value_str(argc, argv, &i, &o.server)) return CLI_USAGE;
      async_given = a;
    } else if (!strcmp(a, "--steps")) {
      if (!cli_value_u64(argc, argv, &i, 1, INT64_MAX, &u)) return CLI_USAGE;
      o.steps = (int64_t)u;
      steps_given = true;
    } else if (!strcmp(a, "--seconds")) {
      if (!cli_value_double(argc, argv, &i, 1e-3, 1e7, &o.seconds)) return CLI_USAGE;
    } else if (!strcmp(a, "--batch")) {
      if (!cli_value_u64(argc, argv, &i, 1, 1 << 20, &u)) return CLI_USAGE;
      o.job.global_batch = (int)u;
    } else if (!strcmp(a, "--lr")) {
      if (!cli_value_double(argc, argv, &i, 1e-12, 1e6, &lr)) return CLI_USAGE;
    } else if (!strcmp(a, "--optimizer")) {
      tr_optim_kind k;
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_optim_kind_parse(v, &k)) {
        fprintf(stderr, "troupe: --optimizer: '%s' is not sgd, momentum or adamw\n", v);
        return CLI_USAGE;
      }
      optimizer = (int)k;
    } else if (!strcmp(a, "--clip")) {
      if (!cli_value_double(argc, argv, &i, 1e-12, 1e12, &clip)) return CLI_USAGE;
    } else if (!strcmp(a, "--data")) {
      if (!cli_value_str(argc, argv, &i, &o.data)) return CLI_USAGE;
    } else if (!strcmp(a, "--labels")) {
      if (!cli_value_str(argc, argv, &i, &o.labels)) return CLI_USAGE;
    } else if (!strcmp(a, "--seed")) {
      if (!cli_value_u64(argc, argv, &i, 0, UINT64_MAX, &o.job.seed)) return CLI_USAGE;
    } else if (!strcmp(a, "--deterministic")) {
      o.deterministic = 1;
    } else if (!strcmp(a, "--precision")) {
      const char *v;
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_precision_parse(v, &o.job.precision.gemm)) {
        fprintf(stderr, "troupe: --precision: '%s' is not fp32 or bf16\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--tf32")) {
      o.job.precision.tf32 = 1;
    } else if (!strcmp(a, "--cuda-graphs")) {
      const char *v;
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_graphs_parse(v, &o.job.graphs)) {
        fprintf(stderr, "troupe: --cuda-graphs: '%s' is not on or off\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--trace")) {
      if (!cli_value_str(argc, argv, &i, &o.trace)) return CLI_USAGE;
    } else if (!strcmp(a, "--profile-steps")) {
      if (!cli_value_str(argc, argv, &i, &v) || !parse_steps(v, &o.job.profile)) return CLI_USAGE;
    } else if (!strcmp(a, "--checkpoint")) {
      if (!cli_value_str(argc, argv, &i, &o.job.checkpoint.path)) return CLI_USAGE;
    } else if (!strcmp(a, "--checkpoint-every")) {
      if (!cli_value_u64(argc, argv, &i, 1, INT64_MAX, &u)) return CLI_USAGE;
      o.job.checkpoint.every = (int64_t)u;
    } else if (!strcmp(a, "--resume")) {
      if (!cli_value_str(argc, argv, &i, &o.job.checkpoint.resume)) return CLI_USAGE;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--watchdog")) {
      if (!cli_value_u64(argc, argv, &i, 1, 24 * 3600 * 1000, &u)) return CLI_USAGE;
      o.watchdog_ms = (int)u;
    } else if (!strcmp(a, "--data-on")) {
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_data_on_parse(v, &o.job.data_on)) {
        fprintf(stderr, "troupe: --data-on: '%s' is not auto, host or device\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--on-nonfinite")) {
      if (!cli_value_str(argc, argv, &i, &v)) return CLI_USAGE;
      if (tr_nonfinite_policy_parse(v, &o.job.on_nonfinite)) {
        fprintf(stderr, "troupe: --on-nonfinite: '%s' is not stop or skip\n", v);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--quiet")) {
      quiet = true;
    } else {
      fprintf(stderr, "troupe: train: unknown option '%s' (see troupe train --help)\n", a);
      return CLI_USAGE;
    }
  }
  if (o.seconds > 0 && !steps_given) o.steps = 0;
  if (o.seconds > 0 && steps_given) {
    fprintf(stderr, "troupe: --steps and --seconds: give one of them\n");
    return CLI_USAGE;
  }
  if (async_given && o.strategy != TR_STRATEGY_ASYNC) {
    fprintf(stderr, "troupe: %s: applies to --strategy async only\n", async_given);
    return CLI_USAGE;
  }
  if (o.job.checkpoint.every && !o.job.checkpoint.path) {
    fprintf(stderr, "troupe: --checkpoint-every needs --checkpoint FILE\n");
    return CLI_USAGE;
  }
  if (o.labels && !o.data) {
    fprintf(stderr, "troupe: --labels needs --data FILE.npy\n");
    return CLI_USAGE;
  }
  /* --optimizer alone: that kind's defaults at the model's learning rate (lr 0) */
  if (optimizer >= 0) o.job.optim = tr_optim_defaults((tr_optim_kind)optimizer, 0);
  o.job.optim.lr = (float)lr;
  o.job.optim.clip = (float)clip;
  progress bar = {.end = o.steps, .first = -1};
  if (!quiet && isatty(STDERR_FILENO)) o.observe = draw_progress, o.observe_arg = &bar;
  o.notes = stderr;

  tr_train_result r;
  char err[1024];
  int rc = tr_world_open(&o.world, err, sizeof err);
  const int rank = tr_world_rank(o.world), ranks = tr_world_size(o.world);
  if (rc == 0) rc = tr_train_run(&o, &r, err, sizeof err);
  progress_end(&bar);
  if (rc) { /* one write: the ranks of a job share the terminal */
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (f) {
      if (ranks > 1) fprintf(f, "troupe: rank %d: ", rank);
      else fputs("troupe: ", f);
      print_with_flags(f, err);
      fputc('\n', f);
      fclose(f);
      fputs(line, stderr);
      free(line);
    }
  }
  tr_world_close(o.world); /* after a failed run across ranks, ends them all */
  /* A run a signal ended in order has its figures, and exits as the signal would have
   * (128 + its number: 130 for SIGINT, 143 for SIGTERM). */
  const int status = rc == TR_EINTR && r.signal           ? 128 + r.signal
                     : rc == TR_EINVAL || rc == TR_ENODEV ? CLI_USAGE
                     : rc                                 ? CLI_FAIL
                                                          : CLI_OK;
  if (rc && !(rc == TR_EINTR && r.signal)) return status;
  if (rank != 0) return status; /* rank 0 speaks for the job */
  /* On host devices, the hardware's yardstick, measured now, after the run (docs/WORKLOADS.md):
   * for the models whose FLOPs are GEMMs; simplenet's are too small to compare. Not after a
   * signal: whoever sent it wants the process gone. */
  double sgemm = NAN;
  if (!strncmp(r.devices, "host", 4) && strcmp(r.model, "simplenet") != 0 && !r.signal)
    sgemm = cli_sgemm_gflops(2048);
  r.sgemm_gflops = sgemm > 0 ? sgemm : 0;
  if (!quiet) tr_train_result_summary(&r, stderr);
  if (json) tr_train_result_json(&r, stdout);
  return status;
}
