/* bench_gpu.c — `troupe bench gpu`: training on one GPU against the GPU's own GEMM peak,
 * both measured in the same run.
 *
 *   peak       cuBLAS called directly (bench_cublas.cu: its own handle, stream and buffers)
 *              on mlp's shape, batch 256 through a 1024x1024 layer (C (256,1024) = A
 *              (256,1024) B^T), in fp32, TF32 and bf16 (cublasGemmEx, fp32 sums);
 *   training   mlp and gpt, single on the GPU, in fp32, TF32 (--tf32) and bf16 (--precision
 *              bf16), each as GFLOP/s (docs/WORKLOADS.md's count) over the peak of the same
 *              precision; mlp's fp32 also with CUDA graphs off;
 *   pipeline   gpt's 1F1B pipeline on two logical devices of the GPU (8 micro-batches), CUDA
 *              graphs off and on, over gpt single fp32: where small passes are bound by
 *              their launches, graphs show.
 *
 * On a machine without a GPU (or a build without CUDA) it says so and exits 0, measuring
 * nothing. Speeds never gate CI; tools/gpu-check.sh runs this and keeps the table.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cublas.h"
#include "cli.h"
#include "troupe.h"

enum { PEAK_M = 256, PEAK_N = 1024, PEAK_K = 1024 };

typedef enum { FP32, TF32, BF16, NPREC } prec;
static const char *const prec_names[NPREC] = {"fp32", "tf32", "bf16"};
static const bench_gemm_kind prec_gemm[NPREC] = {BENCH_GEMM_FP32, BENCH_GEMM_TF32, BENCH_GEMM_BF16};

typedef struct row {
  const char *model, *strategy;
  prec p;
  tr_graphs graphs;
  tr_result *r; /* the run's figures */
  int rc;
  char err[sizeof ((tr_error *)0)->message];
} row;

typedef struct args {
  int gpu, json;
  double seconds;
} args;

static const cli_option options[] = {
    {"--gpu", "N", CLI_INT, offsetof(args, gpu), .lo = 0, .hi = 255, .help = "the GPU (default 0)"},
    CLI_SECONDS(args, seconds, 0.1, 600, "each training run's, after its warm-up (default 5)"),
    CLI_JSON(args, json, "one JSON object on stdout"),
};
static const cli_table table = {
    "bench gpu", options, CLI_COUNT(options),
    .about = "mlp and gpt training on GPU N in fp32, TF32 and bf16, each against cuBLAS's own\n"
             "GEMM peak of the same precision on mlp's 256x1024x1024, measured in the same run;\n"
             "gpt's 1F1B pipeline on two logical devices of the GPU with CUDA graphs off and\n"
             "on. Without a GPU it says so and measures nothing.\n"};

static void train(row *w, int gpu, double seconds) {
  char devices[64];
  tr_train_options o = tr_train_defaults();
  o.model = w->model;
  if (!strcmp(w->strategy, "pipeline")) {
    snprintf(devices, sizeof devices, "cuda:%d,cuda:%d", gpu, gpu);
    o.strategy = TR_STRATEGY_PIPELINE;
    o.job.layout.schedule = TR_SCHEDULE_1F1B;
    o.job.layout.microbatches = 8;
  } else {
    snprintf(devices, sizeof devices, "cuda:%d", gpu);
  }
  o.devices = devices;
  o.steps = 0;
  o.seconds = seconds;
  o.job.precision.gemm = w->p == BF16 ? TR_PRECISION_BF16 : TR_PRECISION_FP32;
  o.job.precision.tf32 = w->p == TF32;
  o.job.graphs = w->graphs;
  tr_error e;
  w->rc = tr_train_run_result(&o, &w->r, &e);
  snprintf(w->err, sizeof w->err, "%s", e.message);
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : NAN; }

static void print_md(const double *peak, const row *rows, int n, const row *gpt_single) {
  printf("| GEMM peak (cuBLAS, 256x1024x1024) | GFLOP/s |\n|---|---:|\n");
  for (int p = 0; p < NPREC; p++) printf("| %s | %.0f |\n", prec_names[p], peak[p]);
  printf("\n| run | precision | CUDA graphs | samples/s | tokens/s | GFLOP/s | × peak | "
         "× gpt single |\n|---|---|---|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++) {
    const row *w = &rows[i];
    if (w->rc) {
      printf("| %s %s | %s | %s | failed: %s |||||\n", w->model, w->strategy, prec_names[w->p],
             tr_graphs_name(w->graphs), w->err);
      continue;
    }
    const bool gpt = !strcmp(w->model, "gpt");
    char tokens[32] = "", vs_single[32] = "";
    const double rate = cli_figure(w->r, "samples_per_s"), gflops = cli_figure(w->r, "gflops");
    if (gpt) snprintf(tokens, sizeof tokens, "%.0f", cli_figure(w->r, "tokens_per_s"));
    if (gpt && gpt_single && !gpt_single->rc)
      snprintf(vs_single, sizeof vs_single, "%.2f",
               ratio(rate, cli_figure(gpt_single->r, "samples_per_s")));
    printf("| %s %s | %s | %s | %.0f | %s | %.0f | %.2f | %s |\n", w->model, w->strategy,
           prec_names[w->p], tr_graphs_name(w->graphs), rate, tokens, gflops,
           ratio(gflops, peak[w->p]), vs_single);
  }
}

static void print_json(const char *gpu, const double *peak, const row *rows, int n) {
  printf("{\"gpu\":");
  cli_json_string(stdout, gpu);
  printf(",\"peak_shape\":[%d,%d,%d],\"peak_gflops\":{", PEAK_M, PEAK_N, PEAK_K);
  for (int p = 0; p < NPREC; p++) printf("%s\"%s\":%.1f", p ? "," : "", prec_names[p], peak[p]);
  printf("},\"runs\":[");
  for (int i = 0; i < n; i++) {
    const row *w = &rows[i];
    printf("%s{\"model\":\"%s\",\"strategy\":\"%s\",\"precision\":\"%s\",\"cuda_graphs\":\"%s\",",
           i ? "," : "", w->model, w->strategy, prec_names[w->p], tr_graphs_name(w->graphs));
    if (w->rc) {
      printf("\"error\":");
      cli_json_string(stdout, w->err);
      printf("}");
      continue;
    }
    const double gflops = cli_figure(w->r, "gflops"), tokens = cli_figure(w->r, "tokens_per_s");
    const char *note = "";
    tr_result_text(w->r, "cuda_graphs.note", &note);
    printf("\"samples_per_s\":%.2f,\"gflops\":%.2f,\"of_peak\":%.4f,\"graph_launches\":%.0f",
           cli_figure(w->r, "samples_per_s"), gflops, ratio(gflops, peak[w->p]),
           cli_figure(w->r, "cuda_graphs.launches"));
    if (isfinite(tokens)) printf(",\"tokens_per_s\":%.1f", tokens);
    printf(",\"graphs_note\":");
    cli_json_string(stdout, note);
    printf("}");
  }
  printf("]}\n");
}

int bench_gpu(int argc, char **argv) {
  args a = {.seconds = 5};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const int gpu = a.gpu;
  const double seconds = a.seconds;
  const bool json = a.json;
  const int ngpu = tr_device_count(TR_DEVICE_CUDA);
  if ((int)gpu >= ngpu) {
    const char *why = ngpu ? "no such GPU" : "no GPU on this machine, or no CUDA backend in this build";
    fprintf(stderr, "troupe: bench gpu: skipped: %s (GPUs: %d)\n", why, ngpu);
    if (json) printf("{\"skipped\":\"%s\"}\n", why);
    return CLI_OK;
  }
  double peak[NPREC];
  char err[256];
  for (int p = 0; p < NPREC; p++) {
    if (bench_cublas_gemm((int)gpu, prec_gemm[p], PEAK_M, PEAK_N, PEAK_K, seconds / 5, &peak[p],
                          err, sizeof err)) {
      fprintf(stderr, "troupe: bench gpu: cuBLAS %s GEMM: %s\n", prec_names[p], err);
      return CLI_FAIL;
    }
  }
#define RUN(model_, strategy_, p_, graphs_) \
  {.model = model_, .strategy = strategy_, .p = p_, .graphs = graphs_}
  row rows[] = {
      RUN("mlp", "single", FP32, TR_GRAPHS_ON),      RUN("mlp", "single", TF32, TR_GRAPHS_ON),
      RUN("mlp", "single", BF16, TR_GRAPHS_ON),      RUN("mlp", "single", FP32, TR_GRAPHS_OFF),
      RUN("gpt", "single", FP32, TR_GRAPHS_ON),      RUN("gpt", "single", TF32, TR_GRAPHS_ON),
      RUN("gpt", "single", BF16, TR_GRAPHS_ON),      RUN("gpt", "single", FP32, TR_GRAPHS_OFF),
      RUN("gpt", "pipeline", FP32, TR_GRAPHS_OFF),   RUN("gpt", "pipeline", FP32, TR_GRAPHS_ON),
  };
#undef RUN
  const int n = (int)(sizeof rows / sizeof rows[0]);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    train(&rows[i], (int)gpu, seconds);
    failed += rows[i].rc != 0;
    fprintf(stderr, "  %s %s %s graphs %s: %s\n", rows[i].model, rows[i].strategy,
            prec_names[rows[i].p], tr_graphs_name(rows[i].graphs), rows[i].rc ? rows[i].err : "done");
  }
  tr_device_list *l;
  char name[160] = "?";
  snprintf(err, sizeof err, "cuda:%d", (int)gpu);
  if (tr_device_list_open(&l, err, NULL, 0) == 0) {
    snprintf(name, sizeof name, "%s", tr_device_info_of(tr_device_list_at(l, 0))->model);
    tr_device_list_close(l);
  }
  if (json) print_json(name, peak, rows, n);
  else {
    printf("%s\n\n", name);
    print_md(peak, rows, n, &rows[4]);
  }
  for (int i = 0; i < n; i++) tr_result_free(rows[i].r);
  return failed ? CLI_FAIL : CLI_OK;
}
