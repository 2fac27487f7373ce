/* cmd_plan.c — `troupe plan`: the strategy table predicted instead of measured (tr_plan.h),
 * ranked best first, with the recommended layout as a `troupe train` command line; --verify
 * runs the top layouts for a few seconds each and prints what they measured beside what was
 * predicted. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

typedef struct plan_args {
  const char *model, *devices, *costs;
  int batch, top, verify, json, remeasure;
  uint64_t memory_limit;
  double seconds;
} plan_args;

/* "8G", "512M", "1048576": bytes. */
static int parse_bytes(const char *v, void *field) {
  char *end;
  const double x = strtod(v, &end);
  const char *units = "KMGT";
  double scale = 1;
  if (*end && strchr(units, *end) && end[1] == 0) scale = pow(1024, (double)(strchr(units, *end) - units + 1));
  else if (*end) return -1;
  if (!(x > 0) || x * scale > 1.8e19) return -1;
  *(uint64_t *)field = (uint64_t)(x * scale);
  return 0;
}

#define AT(member) offsetof(plan_args, member)
static const cli_option options[] = {
    CLI_MODEL(plan_args, model, "the workload (default mlp)"),
    CLI_DEVICES(plan_args, devices, "SPEC", "the devices (default host:2)"),
    {"--batch", "N", CLI_INT, AT(batch), .lo = 1, .hi = 1 << 20,
     .help = "the global batch of every layout (default: the model's)"},
    {"--memory-limit", "BYTES", CLI_PARSE, AT(memory_limit), .parse = parse_bytes,
     .expect = "a number of bytes, or with K, M, G or T (binary: 8G is 8 GiB)",
     .help = "what each device may hold (default: what the devices have free)"},
    {"--top", "K", CLI_INT, AT(top), .lo = 1, .hi = TR_PLAN_MAX_LAYOUTS,
     .help = "print the K best layouts only"},
    {"--verify", "K", CLI_INT, AT(verify), .lo = 1, .hi = TR_PLAN_MAX_LAYOUTS,
     .help = "run the K best for --seconds each and print measured beside predicted"},
    CLI_SECONDS(plan_args, seconds, 0.1, 1e6, "each --verify run (default 3)"),
    {"--costs", "PATH", CLI_STR, AT(costs),
     .help = "the file of layer costs (default $TROUPE_COSTS, else ~/.cache/troupe/...)"},
    {"--remeasure", NULL, CLI_SWITCH, AT(remeasure),
     .help = "measure the layers again, even where the file of costs has them"},
    CLI_JSON(plan_args, json, "one JSON object on stdout: the layouts, best first"),
};
static const cli_table table = {
    "plan", options, CLI_COUNT(options),
    .about =
        "Predicts, without running them, the layouts troupe bench would measure for the model\n"
        "on the devices: each layer's forward and backward timed once on the device (kept in\n"
        "a file of costs and reused), the schedule's own action lists simulated with those\n"
        "costs. Prints one row per layout, best first: the predicted time per step,\n"
        "samples/s, mean utilization, bubble, the most memory one device holds, and the\n"
        "parameters' consistency (async workers: stale, or bounded staleness under SSP;\n"
        "local SGD: averaged every H steps); layouts that do not fit in memory last. The\n"
        "last line is the best exact layout (what --layout auto runs) as a `troupe train`\n"
        "command.\n"};

/* "exact": every replica the same parameters at every step. */
static const char *consistency(const tr_train_options *o) {
  switch (o->strategy) {
  case TR_STRATEGY_ASYNC: return o->job.async.staleness >= 0 ? "bounded staleness" : "stale";
  case TR_STRATEGY_LOCAL: return "averaged every H steps";
  default: return "exact";
  }
}

static bool exact(const tr_train_options *o) {
  return o->strategy != TR_STRATEGY_ASYNC && o->strategy != TR_STRATEGY_LOCAL;
}

/* The `troupe train` arguments of a layout: model, devices, strategy, what it changes. */
static int args_of(const tr_train_options *o, int batch, char args[][64], int cap) {
  const cli_table *t = &cli_train_table;
  int n = 0;
#define ARG(...) (n < cap ? snprintf(args[n++], 64, __VA_ARGS__) : 0)
  ARG("%s", cli_flag(t, "model")), ARG("%s", o->model);
  ARG("%s", cli_flag(t, "devices")), ARG("%s", o->devices);
  ARG("%s", cli_flag(t, "strategy")), ARG("%s", tr_strategy_name(o->strategy));
  const tr_layout_config *l = &o->job.layout;
  if (o->strategy == TR_STRATEGY_PIPELINE || o->strategy == TR_STRATEGY_HYBRID)
    ARG("%s", cli_flag(t, "layout.schedule")), ARG("%s", tr_schedule_kind_name(l->schedule));
  if (l->microbatches) ARG("%s", cli_flag(t, "layout.microbatches")), ARG("%d", l->microbatches);
  if (l->chunks) ARG("%s", cli_flag(t, "layout.chunks")), ARG("%d", l->chunks);
  if (l->tensor > 1 && o->strategy != TR_STRATEGY_TP)
    ARG("%s", cli_flag(t, "layout.tensor")), ARG("%d", l->tensor);
  if (o->strategy == TR_STRATEGY_ASYNC)
    ARG("%s", cli_flag(t, "layout.replicas")), ARG("%d", l->replicas);
  if (o->strategy == TR_STRATEGY_ASYNC && o->job.async.staleness >= 0)
    ARG("%s", cli_flag(t, "async.staleness")), ARG("%d", o->job.async.staleness);
  if (o->job.async.dc_lambda > 0)
    ARG("%s", cli_flag(t, "async.dc_lambda")), ARG("%g", (double)o->job.async.dc_lambda);
  if (o->job.local.sync_every)
    ARG("%s", cli_flag(t, "local.sync_every")), ARG("%d", o->job.local.sync_every);
  if (o->job.memory.recompute) ARG("%s", cli_flag(t, "memory.recompute"));
  if (o->job.zero) ARG("%s", cli_flag(t, "zero")), ARG("%d", o->job.zero);
  if (batch) ARG("%s", cli_flag(t, "global_batch")), ARG("%d", batch);
#undef ARG
  return n;
}

static double mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return n ? s / n : NAN;
}

static void print_json(const plan_args *a, const tr_plan_layout *l, int count, const double *measured) {
  printf("{\"model\":");
  cli_json_string(stdout, a->model);
  printf(",\"devices\":");
  cli_json_string(stdout, a->devices);
  printf(",\"layouts\":[");
  for (int i = 0; i < count; i++) {
    char args[32][64];
    const int n = args_of(&l[i].o, a->batch, args, 32);
    printf("%s{\"label\":", i ? "," : "");
    cli_json_string(stdout, l[i].label);
    printf(",\"args\":[");
    for (int k = 0; k < n; k++) {
      if (k) printf(",");
      cli_json_string(stdout, args[k]);
    }
    printf("],\"consistency\":\"%s\",", consistency(&l[i].o));
    if (!l[i].predicted || l[i].rc) {
      printf("\"predicted\":null,\"why\":");
      cli_json_string(stdout, l[i].predicted ? l[i].err : "not predicted");
      printf("}");
      continue;
    }
    const tr_plan_prediction *p = &l[i].p;
    printf("\"fits\":%s,\"predicted\":{\"samples_per_s\":%.6g,\"step_seconds\":%.6g,"
           "\"bubble\":%.4f,\"utilization\":[", l[i].fits ? "true" : "false", p->samples_per_s,
           p->step_seconds, p->bubble);
    for (int d = 0; d < p->devices; d++) printf("%s%.4f", d ? "," : "", p->utilization[d]);
    printf("],\"peak_activation_bytes\":[");
    for (int d = 0; d < p->devices; d++) printf("%s%zu", d ? "," : "", p->peak_activation_bytes[d]);
    printf("],\"peak_bytes\":%llu", (unsigned long long)l[i].peak_bytes);
    if (l[i].o.strategy == TR_STRATEGY_ASYNC) printf(",\"staleness\":%.4g", p->staleness);
    printf("}");
    if (measured && isfinite(measured[i]))
      printf(",\"measured\":{\"samples_per_s\":%.6g,\"error\":%.4f}", measured[i],
             p->samples_per_s / measured[i] - 1);
    printf("}");
  }
  printf("]}\n");
}

static void print_table(const tr_plan_layout *l, int count, const double *measured) {
  printf("| # | layout          | step (ms) |  samples/s | util | bubble | peak / device (MiB) | "
         "consistency       |%s\n|---|---|---|---|---|---|---|---|%s\n",
         measured ? " measured samples/s | error |" : "", measured ? "---|---|" : "");
  for (int i = 0; i < count; i++) {
    const tr_plan_prediction *p = &l[i].p;
    if (!l[i].predicted || l[i].rc) {
      printf("| - | %-15s | %s |\n", l[i].label,
             l[i].predicted ? l[i].err : "not predicted");
      continue;
    }
    printf("| %d | %-15s | %9.2f | %10.0f | %3.0f%% | %6.3f | %9.1f%s | %-17s |", i + 1, l[i].label,
           p->step_seconds * 1e3, p->samples_per_s, 100 * mean(p->utilization, p->devices),
           p->bubble, (double)l[i].peak_bytes / (1 << 20), l[i].fits ? "" : " (does not fit)",
           consistency(&l[i].o));
    if (measured && isfinite(measured[i]))
      printf(" %10.0f | %+5.1f%% |", measured[i], 100 * (p->samples_per_s / measured[i] - 1));
    printf("\n");
  }
}

/* The top K run for a few seconds each: their measured samples/s (NaN where not run). A
 * signal that ends a run in order ends the verifying there: *signal says which, the table
 * shows what was measured. */
static int verify(const plan_args *a, const tr_plan_layout *l, int count, double *measured,
                  int *signal) {
  for (int i = 0; i < count; i++) measured[i] = NAN;
  tr_signals_hold(); /* between the runs too: each run takes the signals over while it runs */
  int rc = CLI_OK;
  for (int i = 0, ran = 0; i < count && ran < a->verify && !*signal && rc == CLI_OK; i++) {
    if ((*signal = tr_signals_held())) break;
    if (!l[i].predicted || l[i].rc || !l[i].fits) continue;
    tr_train_options o = l[i].o;
    o.seconds = a->seconds;
    tr_result *r;
    tr_error e;
    fprintf(stderr, "troupe: plan: verifying %s ...\n", l[i].label);
    const int run = tr_train_run_result(&o, &r, &e);
    const char *stopped_by = NULL;
    if (run == TR_EINTR && r) tr_result_text(r, "signal", &stopped_by);
    if (stopped_by && tr_signal_parse(stopped_by, signal) == 0) {
      fprintf(stderr, "troupe: plan: --verify %s: %s\n", l[i].label, e.message);
    } else if (run) {
      fprintf(stderr, "troupe: plan: %s: %s\n", l[i].label, e.message);
      rc = CLI_FAIL;
    } else {
      tr_result_real(r, "samples_per_s", &measured[i]);
      ran++;
    }
    tr_result_free(r);
  }
  if (!*signal && rc == CLI_OK) *signal = tr_signals_held(); /* after the last run */
  tr_signals_release();
  return rc;
}

int cmd_plan(int argc, char **argv) {
  plan_args a = {.model = "mlp", .devices = "host:2", .seconds = 3};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  tr_plan_layout *l = calloc(TR_PLAN_MAX_LAYOUTS, sizeof *l);
  double *measured = calloc(TR_PLAN_MAX_LAYOUTS, sizeof *measured);
  int count = 0, rc = CLI_FAIL, signal = 0;
  char err[512];
  if (!l || !measured) goto out;
  if (tr_plan_layouts(a.model, a.devices, l, TR_PLAN_MAX_LAYOUTS, &count, err, sizeof err)) {
    fprintf(stderr, "troupe: %s or %s: %s\n", cli_flag(&table, "model"),
            cli_flag(&table, "devices"), err);
    rc = CLI_USAGE;
    goto out;
  }
  for (int i = 0; i < count; i++) l[i].o.job.global_batch = a.batch;
  const tr_plan_costs_config cc = {.path = a.costs, .remeasure = a.remeasure};
  if (tr_plan_rank(l, count, a.memory_limit, &cc, err, sizeof err)) {
    fprintf(stderr, "troupe: plan: %s\n", err);
    goto out;
  }
  if (a.verify && (rc = verify(&a, l, count, measured, &signal))) goto out;
  const int shown = a.top && a.top < count ? a.top : count;
  if (a.json) print_json(&a, l, shown, a.verify ? measured : NULL);
  else print_table(l, shown, a.verify ? measured : NULL);
  rc = CLI_OK;
  /* the recommended: the best exact layout, as --layout auto chooses (async workers and
   * local SGD train other numbers: ranked in the table, not recommended) */
  int best = 0;
  while (best < count - 1 && !exact(&l[best].o) && l[best].predicted && !l[best].rc && l[best].fits)
    best++;
  if (!l[best].predicted || l[best].rc || !l[best].fits || !exact(&l[best].o)) best = 0;
  if (l[0].rc) { /* ranked last when they fail: every one failed (a costs file refused) */
    fprintf(stderr, "troupe: plan: no layout of %s on %s could be predicted: %s\n", a.model,
            a.devices, l[0].err);
    rc = l[0].rc == TR_EINVAL ? CLI_USAGE : CLI_FAIL;
  } else if (!l[0].predicted || !l[0].fits) {
    char need[32];
    fprintf(stderr, "troupe: plan: no layout of %s fits on %s: the smallest needs %s on a device\n",
            a.model, a.devices, cli_bytes(need, sizeof need, l[0].peak_bytes));
    rc = CLI_FAIL;
  } else {
    char args[32][64];
    const int n = args_of(&l[best].o, a.batch, args, 32);
    fprintf(a.json ? stderr : stdout, "\nrecommended (%s, %.0f samples/s predicted): troupe train",
            l[best].label, l[best].p.samples_per_s);
    for (int k = 0; k < n; k++) fprintf(a.json ? stderr : stdout, " %s", args[k]);
    fprintf(a.json ? stderr : stdout, "\n");
  }
  if (signal) rc = 128 + signal; /* as troupe train's run ended in order by it */
out:
  free(l);
  free(measured);
  return rc;
}
