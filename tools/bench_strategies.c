/* bench_strategies.c — `troupe bench [--model M] [--devices SPEC] ...`: every strategy of
 * one model on the same devices, each for the same time, in one process, against the
 * single-device run measured in the same table; and on host devices, the BLAS's own
 * scaling (the same layer GEMMs on one thread at the full batch, and on n threads at once
 * at each device's rows), so a ratio can be read against what the hardware allows. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

typedef struct row {
  char label[24];
  tr_train_options o;
  tr_result *r;         /* the run's figures (tr_result.h) */
  int rc;
  char err[sizeof ((tr_error *)0)->message];
  bool predicted;       /* p holds troupe plan's prediction of the row (tr_plan_predict) */
  tr_plan_prediction p;
} row;

/* The prediction's error against the run: samples/s, and the activations' peak of the
 * device where it is furthest off (NaN where there is none). */
static double rate_error(const row *x) {
  return x->predicted && !x->rc ? x->p.samples_per_s / cli_figure(x->r, "samples_per_s") - 1 : NAN;
}

/* The devices of a run: the values of a per-device figure. */
static int devices_of(const tr_result *r) {
  tr_figure f = {0};
  if (r) tr_result_figure(r, "utilization", &f);
  return f.count;
}

static double memory_error(const row *x) {
  if (!x->predicted || x->rc) return NAN;
  double worst = 0;
  for (int i = 0; i < x->p.devices && i < devices_of(x->r); i++) {
    const double m = cli_figure_at(x->r, "memory.peak_activation_bytes", i);
    const double e = m > 0 ? fabs((double)x->p.peak_activation_bytes[i] / m - 1) : 0;
    if (e > worst) worst = e;
  }
  return worst;
}

/* ---- the BLAS reference: a Linear layer's three GEMMs, per thread its own weights ----- */

typedef struct gemm_job {
  int rows, width, layers;
  double seconds;
  double gflops;
} gemm_job;

static void *gemm_thread(void *arg) {
  gemm_job *g = arg;
  const size_t w = (size_t)g->width, r = (size_t)g->rows;
  float *W = aligned_alloc(64, w * w * (size_t)g->layers * sizeof *W);
  float *G = aligned_alloc(64, w * w * (size_t)g->layers * sizeof *G);
  float *x = aligned_alloc(64, r * w * sizeof *x), *y = aligned_alloc(64, r * w * sizeof *y);
  if (W && G && x && y) {
    for (size_t i = 0; i < w * w * (size_t)g->layers; i++) W[i] = G[i] = 1e-3f * (float)(i % 7);
    for (size_t i = 0; i < r * w; i++) x[i] = y[i] = 1e-3f * (float)(i % 5);
    uint64_t t0 = tr_now_ns(), t;
    long n = 0;
    do {
      for (int l = 0; l < g->layers; l++, n++) { /* forward, weight gradient, input gradient */
        float *Wl = W + (size_t)l * w * w, *Gl = G + (size_t)l * w * w;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->rows, g->width, g->width, 1,
                    x, g->width, Wl, g->width, 0, y, g->width);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g->width, g->width, g->rows, 1,
                    y, g->width, x, g->width, 1, Gl, g->width);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->rows, g->width, g->width, 1,
                    y, g->width, Wl, g->width, 0, x, g->width);
      }
    } while ((t = tr_now_ns() - t0) < (uint64_t)(g->seconds * 1e9));
    g->gflops = 6.0 * (double)r * (double)w * (double)w * (double)n / (double)t;
  }
  free(W), free(G), free(x), free(y);
  return NULL;
}

/* GFLOP/s of `threads` threads at once, each running `layers` layers at `rows`. */
static double gemm_gflops(int threads, int rows, int width, int layers, double seconds) {
  gemm_job jobs[TR_TRAIN_MAX_DEVICES];
  pthread_t t[TR_TRAIN_MAX_DEVICES];
  openblas_set_num_threads(1);
  for (int i = 0; i < threads; i++) {
    jobs[i] = (gemm_job){.rows = rows, .width = width, .layers = layers, .seconds = seconds};
    pthread_create(&t[i], NULL, gemm_thread, &jobs[i]);
  }
  double sum = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    sum += jobs[i].gflops;
  }
  return sum;
}

/* ---- the table ------------------------------------------------------------------------ */

static double mean_utilization(const tr_result *r) {
  double sum = 0;
  const int n = devices_of(r);
  for (int i = 0; i < n; i++) sum += cli_figure_at(r, "utilization", i);
  return n ? sum / n : NAN;
}

static bool is_async(const row *x) { return x->o.strategy == TR_STRATEGY_ASYNC; }

/* The devices' idle kinds, each the mean over the devices (fractions of the window). */
enum { IDLE_KINDS = 7 };
static const char *const idle_names[IDLE_KINDS] = {"edge",     "credit",   "loader", "step",
                                                   "handover", "handling", "os"};
static void mean_idle(const tr_result *r, double out[IDLE_KINDS]) {
  const int n = devices_of(r);
  for (int k = 0; k < IDLE_KINDS; k++) {
    char key[64];
    snprintf(key, sizeof key, "idle_breakdown.%s", idle_names[k]);
    out[k] = 0;
    for (int i = 0; i < n; i++) out[k] += cli_figure_at(r, key, i) / n;
  }
}

/* Where the pipelines' devices were idle: a row per pipelined strategy. */
static void print_idle(const row *rows, int n) {
  bool any = false;
  for (int i = 0; i < n; i++) {
    const tr_result *r = rows[i].r;
    const double bubble = cli_figure(r, "bubble_fraction"), own = cli_figure(r, "bubble_schedule");
    if (rows[i].rc || !isfinite(bubble)) continue;
    if (!any)
      printf("\nWhere the pipelines' devices were idle (fractions of the window, the devices' "
             "mean; README \"Where the bubble goes\"):\n\n"
             "| strategy             | bubble | theory | at own costs | edge  | credit | loader | "
             "step  | handover | handling | os    |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|\n");
    any = true;
    double v[IDLE_KINDS];
    mean_idle(r, v);
    char at_own[16] = "-";
    if (isfinite(own)) snprintf(at_own, sizeof at_own, "%.3f", own);
    printf("| %-20s | %6.3f | %6.3f | %12s | %5.3f | %6.3f | %6.3f | %5.3f | %8.3f | %8.3f | "
           "%5.3f |\n", rows[i].label, bubble, cli_figure(r, "bubble_theory"), at_own, v[0], v[1],
           v[2], v[3], v[4], v[5], v[6]);
  }
}

/* The optimizer state a replica (async: a worker) holds: the largest, where ZeRO's last
 * shard is shorter. */
static double state_per_replica(const tr_result *r) {
  const int n = devices_of(r), replicas = (int)cli_figure(r, "replicas");
  double most = 0;
  for (int g = 0; g < replicas; g++) { /* a replica's devices are side by side */
    double sum = 0;
    for (int i = g * (n / replicas); i < (g + 1) * (n / replicas); i++)
      sum += cli_figure_at(r, "memory.optimizer_state", i);
    most = sum > most ? sum : most;
  }
  return most;
}

/* The medians of the predictions' absolute errors over the rows predicted; how many. And of
 * the rows' ×single, predicted against measured (rows[0] is single): what is left when the
 * level of the layer costs the plan timed (the machine a minute before) is taken out. */
static int predictor_errors(const row *rows, int n, double *rate, double *memory,
                            double *vs_single) {
  double r[TR_PLAN_MAX_LAYOUTS + 1], m[TR_PLAN_MAX_LAYOUTS + 1], v[TR_PLAN_MAX_LAYOUTS + 1];
  int k = 0, kv = 0;
  const double level = 1 + rate_error(&rows[0]);
  for (int i = 0; i < n; i++)
    if (isfinite(rate_error(&rows[i]))) {
      r[k] = fabs(rate_error(&rows[i]));
      m[k++] = memory_error(&rows[i]);
      if (i > 0 && isfinite(level)) v[kv++] = fabs((1 + rate_error(&rows[i])) / level - 1);
    }
  *rate = cli_median(r, k);
  *memory = cli_median(m, k);
  *vs_single = kv ? cli_median(v, kv) : NAN;
  return k;
}

/* `base`: single's samples/s; `async1`: the one-worker async row's updates/s, the reference
 * of the async rows (what a second worker adds, apart from what the server costs). */
static void print_row(bool md, const row *x, double base, double async1) {
  const tr_result *r = x->r;
  if (x->rc) {
    if (md) printf("| %s | failed: %s |\n", x->label, x->err);
    else printf("%s,failed\n", x->label);
    return;
  }
  const double rate = cli_figure(r, "samples_per_s"), steps = cli_figure(r, "steps_per_s");
  const double fraction = cli_figure(r, "bubble_fraction"), theory = cli_figure(r, "bubble_theory");
  const double stale_mean = cli_figure(r, "staleness.mean"), stale_max = cli_figure(r, "staleness.max");
  const char *devices = "";
  tr_result_text(r, "devices", &devices);
  char bubble[32] = "-", vs1[16] = "-", stale[32] = "-";
  if (isfinite(fraction)) snprintf(bubble, sizeof bubble, "%.3f (%.3f)", fraction, theory);
  const bool async = is_async(x);
  if (async) {
    snprintf(vs1, sizeof vs1, "%.2f×", steps / async1);
    snprintf(stale, sizeof stale, "%.2f / %.0f", stale_mean, stale_max);
  }
  char predicted[32] = "-";
  if (x->predicted)
    snprintf(predicted, sizeof predicted, "%.0f (%+.0f%%)", x->p.samples_per_s, 100 * rate_error(x));
  if (md)
    printf("| %-20s | %-16s | %3d | %5.2f | %10.0f | %5.2f× | %-14s | %9.1f | %7s | %3.0f%% | "
           "%-13s | %-10s | %11.2g | %.4g | %9.1f | %8.3g |\n",
           x->label, devices, (int)cli_figure(r, "microbatches"), cli_figure(r, "seconds"), rate,
           rate / base, predicted, steps, vs1, 100 * mean_utilization(r), bubble, stale,
           cli_figure(r, "consistency"), cli_figure(r, "final_loss"),
           state_per_replica(r) / (1 << 20), cli_figure(r, "comm_bytes_per_step") / (1 << 20));
  else
    printf("%s,%s,%d,%.4f,%.1f,%.4f,%.1f,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.0f,%.3g,%.6g,%.0f,%.0f\n",
           x->label, devices, (int)cli_figure(r, "microbatches"), cli_figure(r, "seconds"), rate,
           rate / base, x->predicted ? x->p.samples_per_s : NAN, steps,
           async ? steps / async1 : NAN, mean_utilization(r), fraction, theory,
           async ? stale_mean : NAN, async ? stale_max : NAN, cli_figure(r, "consistency"),
           cli_figure(r, "final_loss"), state_per_replica(r), cli_figure(r, "comm_bytes_per_step"));
}

/* What the elastic rows need of the model: the name of its loss backward op ("mse_backward"),
 * which an async worker runs once a step, the op the row's worker dies on; and its samples
 * per step. "" and 0 when the model has no such name. */
static int elastic_facts(const char *model, char *op, size_t size) {
  tr_model *m;
  char err[256];
  op[0] = 0;
  if (tr_model_named(&m, model, err, sizeof err)) return 0;
  const tr_loss_type *loss = tr_model_loss(m); /* NULL: MSE */
  snprintf(op, size, "%s_backward", loss ? loss->name : "mse");
  const int batch = tr_model_batch(m);
  tr_model_free(m);
  return batch;
}

/* `spec` less its last device ("host:3" → "host:2", "cuda:0,1" → "cuda:0"); false when it
 * has no such spec ("auto", one device). */
static bool spec_less_last(const char *spec, char *out, size_t size) {
  const char *comma = strrchr(spec, ',');
  const char *last = comma ? comma + 1 : spec;
  int count = 0, end = 0;
  if (sscanf(last, "host:%d%n", &count, &end) == 1 && last[end] == 0 && count > 1)
    return snprintf(out, size, "%.*shost:%d", (int)(last - spec), spec, count - 1) < (int)size;
  return comma && snprintf(out, size, "%.*s", (int)(comma - spec), spec) < (int)size;
}

/* An elastic row's prediction: what runs from the dying device's 10th step to the end, nearly
 * all of the row's window, none of it faulty. The async workers are a number of their own:
 * one fewer. Local SGD's replicas are the devices', and those left keep their share of the
 * batch: the devices less the last, with the shares of the replicas left. */
static void predict_elastic(row *x, const char *devices, int n, int model_batch) {
  tr_train_options o = x->o;
  const int batch = o.job.global_batch ? o.job.global_batch : model_batch;
  char fewer[256];
  o.devices = devices;
  o.job.async.elastic = 0;
  if (o.strategy == TR_STRATEGY_ASYNC) o.job.layout.replicas = n - 1;
  else if (batch > 0 && batch % n == 0 && spec_less_last(devices, fewer, sizeof fewer))
    o.devices = fewer, o.job.global_batch = batch / n * (n - 1);
  else return;
  char why[256];
  x->predicted = tr_plan_predict(&o, NULL, &x->p, why, sizeof why) == 0;
}

static const char *format_name(int i) {
  static const char *const names[] = {"md", "csv", "json"};
  return i >= 0 && i < 3 ? names[i] : "?";
}

typedef struct args {
  const char *model, *devices;
  double seconds;
  int format;
} args;

static const cli_option options[] = {
    CLI_MODEL(args, model, "the workload (default mlp)"),
    CLI_DEVICES(args, devices, "SPEC", "the devices (default host:2)"),
    CLI_SECONDS(args, seconds, 0.1, 1e6, "each strategy's run (default 5)"),
    {"--format", NULL, CLI_ENUM, offsetof(args, format), .name = format_name,
     .help = "the table as Markdown (the default), CSV or JSON"},
};
static const cli_table table = {
    "bench", options, CLI_COUNT(options),
    .about =
        "Trains the model with every strategy on the devices, each for S seconds, in this\n"
        "process, and prints one row per strategy: samples/s, the ratio to the single-device\n"
        "run of the same table, steps (updates) per second, mean utilization, the pipeline\n"
        "bubble (measured / the schedule's own), replica consistency, final loss, and the\n"
        "optimizer state each replica holds (MiB; the dp and hybrid rows with --zero 1 shard\n"
        "it across the replicas). The pipeline rows run 8 micro-batches under GPipe, 1F1B,\n"
        "interleaved 1F1B (2 chunks per device), zero-bubble ZB-H1, and 1F1B recomputing\n"
        "activations. The tp row is one tensor group of every device (--tensor), dp --tensor\n"
        "2 replicas of groups of 2 (4 devices or more). The async rows (a parameter server\n"
        "and 1, then every device as workers; with more than one device also SSP with\n"
        "staleness 2, DC-ASGD with lambda 0.04, and --elastic with the last worker's device\n"
        "dying at its 10th step) give updates/s against the one-worker async row and the\n"
        "staleness of the updates (mean / max). The local row is local SGD averaging every\n"
        "8 steps, local elastic the same with the last replica's device dying at its 10th\n"
        "step (--elastic). The last column is the bytes every device (and the async server)\n"
        "sent per step together, all collectives and edges (comm_bytes_per_step). On host\n"
        "devices it also measures the BLAS's own scaling on the model's layers. Beside each\n"
        "row is what troupe plan predicted of it (samples/s, and its error against the\n"
        "measured; an elastic row's is its layout with one worker fewer, which runs from the\n"
        "10th step on), and after the table the predictor's median error over them. A signal\n"
        "(Ctrl-C) ends the bench with the row it stopped: the table has the rows run, and the\n"
        "exit status is 128 + the signal's number, as troupe train's.\n"
        "troupe bench <what>\n"
        "--help describes the other benchmarks.\n"};

int bench_strategies(int argc, char **argv) {
  args a = {.model = "mlp", .devices = "host:2", .seconds = 5};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const char *model = a.model, *devices = a.devices, *format = format_name(a.format);
  const double seconds = a.seconds;
  tr_device_list *list;
  char err[256];
  if (tr_device_list_open(&list, devices, err, sizeof err)) {
    fprintf(stderr, "troupe: %s: %s\n", cli_flag(&table, "devices"), err);
    return CLI_USAGE;
  }
  const int n = tr_device_list_count(list);
  const tr_device_info *info = tr_device_info_of(tr_device_list_at(list, 0));
  const bool host = info->kind == TR_DEVICE_HOST;
  char machine[384], isa[64]; /* what the figures were measured on, for the header */
  cli_cpu_isa(isa, sizeof isa);
  snprintf(machine, sizeof machine, "%s, GEMM on %s", info->model, info->isa);
  tr_device_list_close(list);

  /* the strategy table (tr_plan_layouts: what troupe plan predicts), and the elastic row */
  row rows[TR_PLAN_MAX_LAYOUTS + 2];
  tr_plan_layout *layouts = calloc(TR_PLAN_MAX_LAYOUTS, sizeof *layouts);
  int nlayouts = 0;
  if (layouts == NULL ||
      tr_plan_layouts(model, devices, layouts, TR_PLAN_MAX_LAYOUTS, &nlayouts, err, sizeof err)) {
    fprintf(stderr, "troupe: %s: %s\n", cli_flag(&table, "model"), layouts ? err : "out of memory");
    free(layouts);
    return layouts ? CLI_USAGE : CLI_FAIL;
  }
  int nrows = 0, async1 = 0, local = -1;
  for (int i = 0; i < nlayouts; i++) {
    rows[nrows] = (row){.o = layouts[i].o};
    snprintf(rows[nrows].label, sizeof rows[nrows].label, "%s", layouts[i].label);
    rows[nrows].o.steps = 0;
    rows[nrows].o.seconds = seconds;
    char why[256]; /* what troupe plan predicts, beside what the row measures */
    rows[nrows].predicted = layouts[i].predicted &&
                            tr_plan_predict(&rows[nrows].o, NULL, &rows[nrows].p, why, sizeof why) == 0;
    if (!strcmp(layouts[i].label, "async 1")) async1 = nrows;
    if (!strcmp(layouts[i].label, "local")) local = nrows;
    nrows++;
  }
  char elastic[256], op[64] = "";
  int model_batch = 0;
  if (n > 1) { /* elastic: the last worker's device dies at its 10th step, the others go on */
    model_batch = elastic_facts(model, op, sizeof op);
    row *x = &rows[nrows];
    const int wrote = snprintf(x->label, sizeof x->label, "async %d elastic", n);
    if (wrote < (int)sizeof x->label &&
        snprintf(elastic, sizeof elastic, "fault(%s;dev=%d,op=%s,from=10)", devices, n - 1, op) <
            (int)sizeof elastic) { /* a device list too long for it goes without the row */
      x->o = rows[async1].o;
      x->o.job.layout.replicas = n;
      x->o.job.async.elastic = 1;
      x->o.devices = elastic;
      predict_elastic(x, devices, n, model_batch);
      nrows++;
    }
  }
  if (n > 1 && local >= 0 && op[0]) { /* local elastic: the last replica's device dies alike */
    row *x = &rows[nrows];
    snprintf(x->label, sizeof x->label, "local elastic");
    x->o = rows[local].o;
    x->o.job.async.elastic = 1;
    x->o.devices = elastic; /* the same devices, the last one dying at its 10th step */
    if (rows[nrows - 1].o.devices == elastic) predict_elastic(x, devices, n, model_batch), nrows++;
  }
  free(layouts);
  /* A signal that ends a row's run (Ctrl-C) ends the bench: the rows after it are not run,
   * the table has those before, and the exit status is the signal's, as troupe train's. */
  int stopped_by = 0;
  tr_signals_hold(); /* between the runs too: each run takes the signals over while it runs */
  for (int i = 0; i < nrows; i++) {
    if (!stopped_by) stopped_by = tr_signals_held();
    if (stopped_by) {
      rows[i].rc = TR_EINTR;
      snprintf(rows[i].err, sizeof rows[i].err, "not run: a signal ended the bench");
      continue;
    }
    fprintf(stderr, "troupe: bench: %s ...\n", rows[i].label);
    tr_error e;
    rows[i].rc = tr_train_run_result(&rows[i].o, &rows[i].r, &e);
    snprintf(rows[i].err, sizeof rows[i].err, "%s", e.message);
    const char *signal = NULL;
    if (rows[i].rc == TR_EINTR && rows[i].r) tr_result_text(rows[i].r, "signal", &signal);
    if (signal) tr_signal_parse(signal, &stopped_by);
  }
  if (!stopped_by) stopped_by = tr_signals_held(); /* after the last run */
  tr_signals_release();
  const int status = stopped_by ? 128 + stopped_by : CLI_OK;
  const double base_rate = rows[0].rc ? NAN : cli_figure(rows[0].r, "samples_per_s");
  const double async1_rate = rows[async1].rc ? NAN : cli_figure(rows[async1].r, "steps_per_s");

  /* The BLAS's scaling on the model's layer GEMMs, for Linear-chain models on the host. */
  tr_model *m = NULL;
  double ref1 = NAN, refdp = NAN, refpp = NAN;
  int width = 0, layers = 0, batch = 0;
  if (host && n > 1 && !stopped_by && tr_model_named(&m, model, err, sizeof err) == 0 &&
      !tr_model_token_input(m)) {
    for (int l = 0; l < tr_model_layer_count(m); l++)
      if (tr_model_layer(m, l)->type == &tr_layer_linear_type) layers++, width = tr_model_layer(m, l)->in;
    batch = tr_model_batch(m);
    if (width >= 64 && batch % (8 * n) == 0) {
      ref1 = gemm_gflops(1, batch, width, layers, 1.0);
      refdp = gemm_gflops(n, batch / n, width, layers, 1.0);
      refpp = gemm_gflops(n, batch / 8, width, layers / n ? layers / n : 1, 1.0);
    }
  }
  tr_model_free(m);

  if (!strcmp(format, "json")) {
    printf("{\"model\":\"%s\",\"devices\":\"%s\",\"seconds\":%g,\"cpu_isa\":\"%s\",\"machine\":",
           model, devices, seconds, isa);
    cli_json_string(stdout, machine);
    printf(",\"rows\":[");
    for (int i = 0; i < nrows; i++) {
      const tr_result *r = rows[i].r;
      printf("%s{\"strategy\":\"%s\",", i ? "," : "", rows[i].label);
      if (rows[i].rc) {
        printf("\"error\":");
        cli_json_string(stdout, rows[i].err);
        printf("}");
        continue;
      }
      const double rate = cli_figure(r, "samples_per_s"), steps = cli_figure(r, "steps_per_s");
      const double fraction = cli_figure(r, "bubble_fraction"), own = cli_figure(r, "bubble_schedule");
      printf("\"samples_per_s\":%.6g,\"vs_single\":%.4f,\"steps_per_s\":%.6g,\"utilization\":%.4f,",
             rate, rate / base_rate, steps, mean_utilization(r));
      if (is_async(&rows[i]))
        printf("\"workers\":%.0f,\"vs_async1\":%.4f,\"staleness\":{\"mean\":%.4g,\"max\":%.0f},"
               "\"clock_gap_max\":%.0f,", cli_figure(r, "workers"), steps / async1_rate,
               cli_figure(r, "staleness.mean"), cli_figure(r, "staleness.max"),
               cli_figure(r, "clock_gap_max"));
      if (isfinite(fraction)) {
        printf("\"bubble_fraction\":%.4f,\"bubble_theory\":%.4f,", fraction,
               cli_figure(r, "bubble_theory"));
        if (isfinite(own)) printf("\"bubble_schedule\":%.4f,", own);
        printf("\"idle\":{");
        double v[IDLE_KINDS];
        mean_idle(r, v);
        for (int k = 0; k < IDLE_KINDS; k++) printf("%s\"%s\":%.4f", k ? "," : "", idle_names[k], v[k]);
        printf("},");
      }
      printf("\"zero\":%.0f,\"tensor\":%.0f,\"optimizer_state_per_replica\":%.0f,",
             cli_figure(r, "zero"), cli_figure(r, "tensor"), state_per_replica(r));
      if (isfinite(cli_figure(r, "comm_bytes_per_step")))
        printf("\"comm_bytes_per_step\":%.0f,", cli_figure(r, "comm_bytes_per_step"));
      if (rows[i].predicted)
        printf("\"predicted\":{\"samples_per_s\":%.6g,\"error\":%.4f,"
               "\"peak_activation_error\":%.4f},", rows[i].p.samples_per_s, rate_error(&rows[i]),
               memory_error(&rows[i]));
      printf("\"consistency\":%.3g,\"final_loss\":%.6g}", cli_figure(r, "consistency"),
             cli_figure(r, "final_loss"));
    }
    printf("]");
    double rate_med, mem_med, vs_med;
    if (predictor_errors(rows, nrows, &rate_med, &mem_med, &vs_med)) {
      printf(",\"predictor\":{\"median_abs_error_samples_per_s\":%.4f,"
             "\"median_abs_error_peak_activation\":%.4f", rate_med, mem_med);
      if (isfinite(vs_med)) printf(",\"median_abs_error_vs_single\":%.4f", vs_med);
      printf("}");
    }
    if (isfinite(ref1))
      printf(",\"blas\":{\"one_thread_full_batch\":%.2f,\"dp_threads\":%.2f,\"pipeline_threads\":%.2f}",
             ref1, refdp, refpp);
    printf("}\n");
    for (int i = 0; i < nrows; i++) tr_result_free(rows[i].r);
    return status;
  }
  const bool md = !strcmp(format, "md");
  if (md)
    printf("troupe bench: %s on %s, %g s each · CPU %s · %s\n\n", model, devices, seconds, isa,
           machine);
  if (md)
    printf("| strategy             | devices          |   m |     s |  samples/s | ×single | "
           "predicted (error) | updates/s | ×async 1 | util | bubble (theory) | staleness  | "
           "consistency | final loss | opt. state / replica (MiB) | comm / step (MiB) |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  else
    printf("strategy,devices,microbatches,seconds,samples_per_s,vs_single,predicted_samples_per_s,"
           "steps_per_s,vs_async1,utilization,bubble,bubble_theory,staleness_mean,staleness_max,"
           "consistency,final_loss,optimizer_state_per_replica,comm_bytes_per_step\n");
  for (int i = 0; i < nrows; i++) print_row(md, &rows[i], base_rate, async1_rate);
  if (md) print_idle(rows, nrows);
  double rate_med, mem_med, vs_med;
  const int npred = predictor_errors(rows, nrows, &rate_med, &mem_med, &vs_med);
  if (npred) {
    printf("\ntroupe plan's prediction over the %d rows it predicts: median |error| of samples/s "
           "%.1f%%, of the activations' peak per device %.1f%%", npred, 100 * rate_med,
           100 * mem_med);
    if (isfinite(vs_med)) printf(", of ×single %.1f%% (single's own error taken out)", 100 * vs_med);
    printf("\n");
  }
  if (isfinite(ref1)) {
    fprintf(stdout,
            "\nBLAS on %d thread(s) at once, %d Linear(%d,%d) layers' GEMMs: 1 thread at %d rows "
            "%.1f GFLOP/s; %d threads at %d rows (dp) %.1f (%.2f×); %d threads at %d rows, %d "
            "layers each (pipeline, m = 8) %.1f (%.2f×)\n",
            n, layers, width, width, batch, ref1, n, batch / n, refdp, refdp / ref1, n,
            batch / 8, layers / n, refpp, refpp / ref1);
  }
  for (int i = 0; i < nrows; i++) tr_result_free(rows[i].r);
  return status;
}
