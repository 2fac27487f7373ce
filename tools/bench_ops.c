/* bench_ops.c — `troupe bench ops`: the device layer's ops on each device, against
 * references measured in the same run.
 *
 *   GEMM          GFLOP/s through tr_gemm on square 1024 and 2048 and on the workloads'
 *                 shapes (mlp: batch 256 through 1024x1024 layers, forward and both
 *                 backward products; gpt: B*T = 1024 rows through widths 256/768/1024, and
 *                 its attention as a strided batch; simplenet's five tiny products, which
 *                 the host backend runs without a library), against the libraries called
 *                 directly on the same buffers, one thread each (bench_ops_raw.c): oneDNN's
 *                 matmul made once for the shape (builds with oneDNN), and cblas_sgemm; on
 *                 host devices, which library served tr_gemm (gpu/host/host_choose.h) and
 *                 the ratio to the faster raw one (target >= 1.0). Then the same shapes but
 *                 simplenet's with bf16 operands (tr_gemm_bf16), against oneDNN's bf16 matmul.
 *   train         with --train: mlp's and gpt's whole step on host:1 (tr_train_run_result), against
 *                 the raw libraries' best on their GEMM rows and against the roof: one
 *                 core's multiply-add peak (bench_ops_raw.c), at the widest vectors oneDNN
 *                 may use (ONEDNN_MAX_CPU_ISA). The header gives the peak of each width.
 *   element-wise  GB/s of every kernel (bytes each must read and write once), against memcpy
 *                 moving the same number of bytes (host devices: libc memcpy; GPUs: a
 *                 device-to-device tr_memcpy).
 *   parallel      with two or more host devices: 1024^2 GEMMs on all of them at once, one
 *                 thread each, against one alone: library calls from several threads must
 *                 both be safe and run side by side.
 *
 * Each figure is the best of three timed runs of at least --seconds each (calls are
 * repeated to fill it), the op and its reference interleaved so both meet the same machine.
 * Speeds never gate CI; this command is where they are shown.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_ops.h"
#include "cli.h"
#include "host/host_choose.h"
#include "troupe.h"

/* Seconds per call: best of three runs of at least `target` seconds each. */
static double time_op(ctx *c, op_fn fn, double target) {
  fn(c); /* warm: first touch, BLAS buffers */
  if (c->s) tr_stream_synchronize(c->s);
  double best = INFINITY;
  long iters = 1;
  for (int rep = 0; rep < 3; rep++) {
    for (;;) {
      uint64_t t0 = tr_now_ns();
      for (long i = 0; i < iters; i++) fn(c);
      if (c->s) tr_stream_synchronize(c->s);
      double dt = (double)(tr_now_ns() - t0) * 1e-9;
      if (dt >= target || iters > (1l << 30)) {
        if (dt / (double)iters < best) best = dt / (double)iters;
        break;
      }
      iters = dt <= 0 ? iters * 2 : (long)(iters * 1.2 * target / dt) + 1;
    }
  }
  return best;
}

/* ---- GEMM ------------------------------------------------------------------------------- */


static void gemm_api_bf16(ctx *c) {
  const int nb = c->batch ? c->batch : 1;
  int rc = tr_gemm_batched_bf16(c->s, c->opa, c->opb, c->M, c->N, c->K, 1.0f, c->a16, lda_of(c),
                                (int64_t)c->M * c->K, c->b16, ldb_of(c), (int64_t)c->K * c->N,
                                c->beta, c->c, c->N, (int64_t)c->M * c->N, nb);
  if (rc) c->status = rc;
}

static void gemm_api(ctx *c) {
  int rc;
  if (c->batch)
    rc = tr_gemm_batched(c->s, c->opa, c->opb, c->M, c->N, c->K, 1.0f, c->a, lda_of(c),
                         (int64_t)c->M * c->K, c->b, ldb_of(c), (int64_t)c->K * c->N, c->beta, c->c,
                         c->N, (int64_t)c->M * c->N, c->batch);
  else
    rc = tr_gemm(c->s, c->opa, c->opb, c->M, c->N, c->K, 1.0f, c->a, lda_of(c), c->b, ldb_of(c),
                 c->beta, c->c, c->N);
  if (rc) c->status = rc;
}

typedef struct gemm_shape {
  const char *name;
  tr_op opa, opb;
  int M, N, K, batch;
  float beta;
  int bf16; /* measured in bf16 too */
} gemm_shape;

/* The workloads' shapes first: the host GEMM decides a key (transposes, N, K) at the first M
 * it meets, and square 1024 has mlp's N and K, so it is served as mlp's layers are. */
static const gemm_shape gemm_shapes[] = {
    {"mlp fwd  inp@W^T", TR_OP_N, TR_OP_T, 256, 1024, 1024, 0, 0, 1},
    {"mlp bwd  dout@W", TR_OP_N, TR_OP_N, 256, 1024, 1024, 0, 0, 1},
    {"mlp bwd  dout^T@inp +=", TR_OP_T, TR_OP_N, 1024, 1024, 256, 0, 1, 1},
    {"gpt qkv  (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 768, 256, 0, 0, 1},
    {"gpt proj (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 256, 256, 0, 0, 1},
    {"gpt fc   (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 1024, 256, 0, 0, 1},
    {"gpt fc2  (1024x1024)@W^T", TR_OP_N, TR_OP_T, 1024, 256, 1024, 0, 0, 1},
    {"gpt fc bwd dW +=", TR_OP_T, TR_OP_N, 1024, 256, 1024, 0, 1, 1},
    {"gpt attn q@k^T, 32x", TR_OP_N, TR_OP_T, 128, 128, 64, 32, 0, 1},
    {"simplenet fwd inp@W^T", TR_OP_N, TR_OP_T, 64, 100, 10, 0, 0, 0},
    {"simplenet fwd2 h@w^T", TR_OP_N, TR_OP_T, 64, 1, 100, 0, 0, 0},
    {"simplenet bwd dout@W", TR_OP_N, TR_OP_N, 64, 100, 1, 0, 0, 0},
    {"simplenet bwd dW2 +=", TR_OP_T, TR_OP_N, 1, 100, 64, 0, 1, 0},
    {"simplenet bwd dW1 +=", TR_OP_T, TR_OP_N, 100, 10, 64, 0, 1, 0},
    {"square 1024", TR_OP_N, TR_OP_N, 1024, 1024, 1024, 0, 0, 1},
    {"square 2048", TR_OP_N, TR_OP_N, 2048, 2048, 2048, 0, 0, 1},
};

enum { NGEMM = sizeof gemm_shapes / sizeof gemm_shapes[0] };

/* ---- element-wise kernels ------------------------------------------------------------------ */

/* The shapes the kernels run at: n floats as (rows, 256) for the row-wise ones (gpt's
 * width and vocabulary), attention as (B*NH = 32, T = 128). */
enum { ROW = 256, BH = 32, T = 128 };
#define OK(call)                   \
  do {                             \
    int rc_ = (call);              \
    if (rc_) c->status = rc_;      \
  } while (0)

static void op_fill(ctx *c) { OK(tr_fill(c->s, c->a, c->n, 0.5f)); }
static void op_uniform(ctx *c) { OK(tr_init_uniform(c->s, c->a, c->n, -1, 1, 1, 0)); }
static void op_normal(ctx *c) { OK(tr_init_normal(c->s, c->a, c->n, 0, 1, 1, 0)); }
static void op_add(ctx *c) { OK(tr_add(c->s, c->c, c->a, c->b, c->n)); }
static void op_axpy(ctx *c) { OK(tr_axpy(c->s, c->c, 0.5f, c->a, c->n)); }
static void op_scale(ctx *c) { OK(tr_scale(c->s, c->c, 1.0f, c->n)); }
static void op_scale_dev(ctx *c) { OK(tr_scale_dev(c->s, c->c, c->g, c->n)); }
static void op_sumsq(ctx *c) { OK(tr_sumsq(c->s, c->g, c->a, c->n, 0)); }
static void op_bias_add(ctx *c) { OK(tr_bias_add(c->s, c->c, c->b, c->n / 1024, 1024)); }
static void op_bias_grad(ctx *c) { OK(tr_bias_grad(c->s, c->g, c->a, c->n / 1024, 1024)); }
static void op_relu_forward(ctx *c) { OK(tr_relu_forward(c->s, c->c, c->a, c->n)); }
static void op_relu_backward(ctx *c) { OK(tr_relu_backward(c->s, c->c, c->a, c->b, c->n)); }
static void op_gelu_forward(ctx *c) { OK(tr_gelu_forward(c->s, c->c, c->a, c->n)); }
static void op_gelu_backward(ctx *c) { OK(tr_gelu_backward(c->s, c->c, c->a, c->b, c->n)); }
static void op_ln_forward(ctx *c) {
  OK(tr_layernorm_forward(c->s, c->c, c->e, c->f, c->a, c->b, c->d, c->n / ROW, ROW, 1e-5f));
}
static void op_ln_backward(ctx *c) {
  OK(tr_layernorm_backward(c->s, c->c, c->g, c->g + ROW, c->a, c->b, c->d, c->e, c->f, c->n / ROW, ROW));
}
static void op_softmax(ctx *c) { OK(tr_softmax_forward(c->s, c->c, c->a, c->n / ROW, ROW)); }
static void op_attn_forward(ctx *c) { OK(tr_attn_softmax_forward(c->s, c->c, c->a, c->n / (T * T), T, 0.125f)); }
static void op_attn_backward(ctx *c) { OK(tr_attn_softmax_backward(c->s, c->c, c->a, c->b, c->n / (T * T), T, 0.125f)); }
static void op_ce_forward(ctx *c) { OK(tr_crossentropy_forward(c->s, c->g, c->c, c->a, c->idx, c->n / ROW, ROW, 1.0f)); }
static void op_ce_backward(ctx *c) { OK(tr_crossentropy_backward(c->s, c->c, c->a, c->idx, c->n / ROW, ROW, 1.0f)); }
static void op_mse_forward(ctx *c) { OK(tr_mse_forward(c->s, c->g, c->a, c->b, c->n, 1.0f)); }
static void op_mse_backward(ctx *c) { OK(tr_mse_backward(c->s, c->c, c->a, c->b, c->n, 1.0f)); }
static void op_emb_forward(ctx *c) { OK(tr_embedding_forward(c->s, c->c, c->idx, c->b, NULL, 1, c->n / ROW, ROW, ROW)); }
static void op_emb_backward(ctx *c) { OK(tr_embedding_backward(c->s, c->d, NULL, c->a, c->idx, 1, c->n / ROW, ROW, ROW)); }
static void op_sgd(ctx *c) { OK(tr_sgd_update(c->s, c->c, c->a, c->n, 0.0f, 0.0f)); }
static void op_momentum(ctx *c) { OK(tr_momentum_update(c->s, c->c, c->a, c->d, c->n, 0.0f, 0.9f, 0.0f, 0)); }
static void op_adamw(ctx *c) {
  OK(tr_adamw_update(c->s, c->c, c->a, c->d, c->e, c->n, 0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1));
}
static void op_copy(ctx *c) { OK(tr_memcpy(c->s, c->c, c->a, c->n * sizeof(float), TR_COPY_D2D)); }

typedef struct ew_op {
  const char *name;
  const char *shape;
  op_fn fn;
  int reads, writes; /* arrays of n floats each must read and write at least once */
} ew_op;

static const ew_op ew_ops[] = {
    {"tr_memcpy D2D", "n", op_copy, 1, 1},
    {"fill", "n", op_fill, 0, 1},
    {"init_uniform", "n", op_uniform, 0, 1},
    {"init_normal", "n", op_normal, 0, 1},
    {"add", "n", op_add, 2, 1},
    {"axpy", "n", op_axpy, 2, 1},
    {"scale", "n", op_scale, 1, 1},
    {"scale_dev", "n", op_scale_dev, 1, 1},
    {"sumsq", "n", op_sumsq, 1, 0},
    {"bias_add", "(n/1024,1024)", op_bias_add, 1, 1},
    {"bias_grad", "(n/1024,1024)", op_bias_grad, 1, 0},
    {"relu_forward", "n", op_relu_forward, 1, 1},
    {"relu_backward", "n", op_relu_backward, 2, 1},
    {"gelu_forward", "n", op_gelu_forward, 1, 1},
    {"gelu_backward", "n", op_gelu_backward, 2, 1},
    {"layernorm_forward", "(n/256,256)", op_ln_forward, 1, 1},
    {"layernorm_backward", "(n/256,256)", op_ln_backward, 2, 1},
    {"softmax_forward", "(n/256,256)", op_softmax, 1, 1},
    {"attn_softmax_forward", "(n/T²,T=128,T)", op_attn_forward, 1, 1},
    {"attn_softmax_backward", "(n/T²,T=128,T)", op_attn_backward, 2, 1},
    {"crossentropy_forward", "(n/256,V=256)", op_ce_forward, 1, 1},
    {"crossentropy_backward", "(n/256,V=256)", op_ce_backward, 1, 1},
    {"mse_forward", "n", op_mse_forward, 2, 0},
    {"mse_backward", "n", op_mse_backward, 2, 1},
    {"embedding_forward", "(n/256,C=256)", op_emb_forward, 0, 1},
    {"embedding_backward", "(n/256,C=256)", op_emb_backward, 1, 0},
    {"sgd_update", "n", op_sgd, 2, 1},
    {"momentum_update", "n", op_momentum, 3, 2},
    {"adamw_update", "n", op_adamw, 4, 3},
};
enum { NEW = sizeof ew_ops / sizeof ew_ops[0] };

/* The reference: the same number of bytes through memcpy (half read, half written), in
 * copies of at most one buffer. */
static size_t ref_bytes;
static void ref_memcpy(ctx *c) {
  for (size_t left = ref_bytes / 2; left > 0;) {
    size_t chunk = left < c->n * sizeof(float) ? left : c->n * sizeof(float);
    if (c->host) memcpy(c->c, c->a, chunk);
    else OK(tr_memcpy(c->s, c->c, c->a, chunk, TR_COPY_D2D));
    left -= chunk;
  }
}

/* ---- results ---------------------------------------------------------------------------------- */

typedef struct result {
  const char *device;
  const char *kind; /* "gemm", "gemm_bf16", "op", "parallel" */
  const char *name;
  char shape[48];
  double value;     /* GFLOP/s or GB/s */
  double ref;       /* the reference's, 0 when none */
  const char *unit;
  const char *ref_name;
  double ref2;      /* a second reference (GEMM: cblas_sgemm beside oneDNN), 0 when none */
  const char *ref2_name;
  const char *served; /* GEMM on a host device: the library that served it */
  double flops;       /* GEMM: of one call */
} result;

static void put_cell(const char *text, int width) {
  int chars = 0;
  for (const char *p = text; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
  fprintf(stderr, " %s%*s |", text, width > chars ? width - chars : 0, "");
}

static void ref_cells(const char *name, double ref, double value) {
  char cell[48] = "", ratio[16] = "";
  if (ref > 0) {
    snprintf(cell, sizeof cell, "%s %.1f", name, ref);
    snprintf(ratio, sizeof ratio, "%.2f×", value / ref);
  }
  put_cell(cell, 20);
  put_cell(ratio, 6);
}

/* A GEMM row measured against both libraries: troupe's against the faster */
static bool vs_best(const result *r) { return !strcmp(r->kind, "gemm") && r->ref2 > 0; }

static void print_row(const result *r) {
  char value[32];
  snprintf(value, sizeof value, "%.1f %s", r->value, r->unit);
  fputc('|', stderr);
  put_cell(r->device, 7);
  put_cell(r->name, 24);
  put_cell(r->shape, 22);
  put_cell(value, 14);
  ref_cells(r->ref_name, r->ref, r->value);
  ref_cells(r->ref2_name, r->ref2, r->value);
  const double best = r->ref > r->ref2 ? r->ref : r->ref2;
  char ratio[16] = "";
  if (vs_best(r)) snprintf(ratio, sizeof ratio, "%.2f×", r->value / best);
  put_cell(r->served ? r->served : "", 8);
  put_cell(ratio, 7);
  fputc('\n', stderr);
}

static void json_ref(const char *key, const char *ratio, const char *name, double ref,
                     double value) {
  if (ref > 0)
    printf(",\"%s\":\"%s\",\"%s_value\":%.6g,\"%s\":%.4f", key, name, key, ref, ratio,
           value / ref);
  else
    printf(",\"%s\":null,\"%s_value\":null,\"%s\":null", key, key, ratio);
}

/* One row: troupe's GEMM of shape g (bf16 operands or fp32) against the libraries called
 * directly, each timed twice around the others so that all meet the same machine. */
static void bench_gemm(ctx *c, const gemm_shape *g, int bf16, double seconds, result *r) {
  c->opa = g->opa, c->opb = g->opb, c->M = g->M, c->N = g->N, c->K = g->K;
  c->batch = g->batch, c->beta = g->beta;
  const double flops = 2.0 * g->M * g->N * g->K * (g->batch ? g->batch : 1);
  const op_fn api = bf16 ? gemm_api_bf16 : gemm_api;
  double t_api = time_op(c, api, seconds), t_dnnl = 0, t_blas = 0;
  if (c->host) {
    if ((c->raw = raw_dnnl_open(c, bf16))) t_dnnl = time_op(c, gemm_raw_dnnl, seconds);
    if (!bf16) t_blas = time_op(c, gemm_raw, seconds);
    const double t2 = time_op(c, api, seconds);
    t_api = t2 < t_api ? t2 : t_api;
    if (c->raw) {
      const double t3 = time_op(c, gemm_raw_dnnl, seconds);
      t_dnnl = t3 < t_dnnl ? t3 : t_dnnl;
    }
    raw_dnnl_close(c->raw);
    c->raw = NULL;
  }
  *r = (result){.device = tr_device_name(c->dev), .kind = bf16 ? "gemm_bf16" : "gemm", .name = g->name,
                .value = flops / t_api * 1e-9, .ref = t_dnnl > 0 ? flops / t_dnnl * 1e-9 : 0,
                .unit = "GFLOP/s", .ref_name = "oneDNN",
                .ref2 = t_blas > 0 ? flops / t_blas * 1e-9 : 0, .ref2_name = "cblas_sgemm",
                .flops = flops,
                .served = c->host ? tr__host_gemm_served(g->opa, g->opb, g->M, g->N, g->K,
                                                         g->batch ? g->batch : 1, bf16)
                                  : NULL};
  snprintf(r->shape, sizeof r->shape, "%s%c%c %dx%dx%d", bf16 ? "bf16 " : "", g->opa ? 'T' : 'N',
           g->opb ? 'T' : 'N', g->M, g->N, g->K);
}

/* ---- parallel GEMM on several host devices -------------------------------------------------- */

typedef struct par_job {
  ctx c;
  int iters;
  pthread_barrier_t *go;
  double seconds;
} par_job;

static void *par_main(void *arg) {
  par_job *j = arg;
  tr_device_bind(j->c.dev);
  pthread_barrier_wait(j->go);
  uint64_t t0 = tr_now_ns();
  for (int i = 0; i < j->iters; i++) gemm_api(&j->c);
  tr_stream_synchronize(j->c.s);
  j->seconds = (double)(tr_now_ns() - t0) * 1e-9;
  return NULL;
}

/* Aggregate GFLOP/s of `n` devices running 1024^2 GEMMs at once. */
static double parallel_gflops(ctx *cs, int n, int iters) {
  par_job *jobs = calloc((size_t)n, sizeof *jobs);
  pthread_t *t = calloc((size_t)n, sizeof *t);
  pthread_barrier_t go;
  if (!jobs || !t) {
    free(jobs), free(t);
    return 0;
  }
  pthread_barrier_init(&go, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    jobs[i] = (par_job){cs[i], iters, &go, 0};
    jobs[i].c.opa = jobs[i].c.opb = TR_OP_N;
    jobs[i].c.M = jobs[i].c.N = jobs[i].c.K = 1024;
    jobs[i].c.batch = 0, jobs[i].c.beta = 0;
    pthread_create(&t[i], NULL, par_main, &jobs[i]);
  }
  double wall = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    if (jobs[i].seconds > wall) wall = jobs[i].seconds;
  }
  pthread_barrier_destroy(&go);
  free(jobs), free(t);
  return 2.0 * 1024 * 1024 * 1024 * iters * n / wall * 1e-9;
}

/* ---- whole training steps (--train) ------------------------------------------------------- */

/* `troupe train --model <model> --devices host:1` for `seconds`: its GFLOP/s, against the
 * raw libraries' best on the model's GEMM rows (each row's faster of oneDNN and cblas_sgemm,
 * harmonic mean weighted by the rows' FLOPs: a step whose products all ran at that pace),
 * and against the roof, one core's multiply-add peak (`peak`, named `peak_name`). */
static void bench_train(const char *model, double seconds, const result *rs, int nr,
                        double peak, const char *peak_name, result *r) {
  tr_train_options o = tr_train_defaults();
  o.model = model, o.devices = "host:1", o.steps = 0, o.seconds = seconds;
  tr_result *res;
  tr_error e;
  double value = 0, flops = 0, time = 0;
  if (tr_train_run_result(&o, &res, &e))
    fprintf(stderr, "troupe: bench ops: train %s: %s\n", model, e.message);
  else
    value = cli_figure(res, "gflops");
  tr_result_free(res);
  for (int i = 0; i < nr; i++) {
    const double best = rs[i].ref > rs[i].ref2 ? rs[i].ref : rs[i].ref2;
    if (!strcmp(rs[i].kind, "gemm") && !strncmp(rs[i].name, model, strlen(model)) && best > 0)
      flops += rs[i].flops, time += rs[i].flops / best;
  }
  *r = (result){.device = "host:1", .kind = "train", .name = model, .value = value,
                .ref = time > 0 ? flops / time : 0, .unit = "GFLOP/s", .ref_name = "raw best",
                .ref2 = peak, .ref2_name = peak_name};
  snprintf(r->shape, sizeof r->shape, "whole step, %.3g s", seconds);
}

/* Whether oneDNN may run AVX-512 here: ONEDNN_MAX_CPU_ISA unset, or naming AVX-512 or more. */
static bool onednn_may_use_avx512(void) {
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == NULL || *cap == '\0') return true;
  static const char *const wide[] = {"AVX512", "AVX10", "AMX", "ALL", "DEFAULT"};
  for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
    if (!strncasecmp(cap, wide[i], strlen(wide[i]))) return true;
  return false;
}

/* ---- the command ------------------------------------------------------------------------------- */

static int alloc_all(ctx *c, size_t n) {
  float **bufs[] = {&c->a, &c->b, &c->c, &c->d, &c->e, &c->f, &c->g};
  c->n = n;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    if (tr_device_alloc(c->dev, n * sizeof(float), (void **)bufs[i])) return -1;
    if (tr_init_uniform(c->s, *bufs[i], n, 0.0f, 1.0f, i, 0)) return -1; /* positive: v, scalars */
  }
  if (tr_device_alloc(c->dev, n / ROW * sizeof(int32_t), (void **)&c->idx)) return -1;
  int32_t *h = malloc(n / ROW * sizeof *h);
  if (!h) return -1;
  for (size_t i = 0; i < n / ROW; i++) h[i] = (int32_t)((i * 2654435761u) % ROW);
  int rc = tr_memcpy(c->s, c->idx, h, n / ROW * sizeof *h, TR_COPY_H2D) || tr_stream_synchronize(c->s);
  free(h);
  return rc ? -1 : 0;
}

static void free_all(ctx *c) {
  float **bufs[] = {&c->a, &c->b, &c->c, &c->d, &c->e, &c->f, &c->g};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    tr_device_free(c->dev, *bufs[i]);
    *bufs[i] = NULL;
  }
  tr_device_free(c->dev, c->idx);
  tr_device_free(c->dev, c->a16);
  tr_device_free(c->dev, c->b16);
  c->idx = NULL, c->a16 = c->b16 = NULL;
}

typedef struct args {
  const char *devices;
  double seconds;
  uint64_t size;
  int json;
  int train;
} args;

static const cli_option options[] = {
    CLI_DEVICES(args, devices, "SPEC", "the devices, each measured (default host:1)"),
    CLI_SECONDS(args, seconds, 0.001, 60, "the least time of one timed run (default 0.1)"),
    {"--size", "N", CLI_U64, offsetof(args, size), .lo = (uint64_t)ROW * ROW, .hi = 1ull << 28,
     .help = "floats per element-wise buffer (default 4194304)"},
    CLI_JSON(args, json, "one JSON object on stdout"),
    {"--train", NULL, CLI_SWITCH, offsetof(args, train),
     .help = "also mlp's and gpt's whole training step on host:1 (troupe train, 20 x --seconds "
             "each, at least 2 s) against the raw libraries' best on their shapes and one "
             "core's multiply-add peak"},
};
static const cli_table table = {
    "bench ops", options, CLI_COUNT(options),
    .about = "GFLOP/s of GEMM, fp32 and bf16 (against oneDNN's matmul and cblas_sgemm called\n"
             "directly on host devices, with the library that served each shape and the ratio\n"
             "to the faster) and GB/s of every element-wise kernel (against memcpy of the same\n"
             "bytes), on each device; the CPU's instruction sets in the header.\n"};

int bench_ops(int argc, char **argv) {
  args a = {.devices = "host:1", .seconds = 0.1, .size = 1 << 22};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const char *spec = a.devices;
  const double seconds = a.seconds;
  uint64_t size = a.size;
  const bool json = a.json;
  size -= size % (T * T); /* whole rows for every row-wise shape */
  raw_one_thread(); /* the references are one thread, as each host device */
  /* The peak is a machine's best: probed here and again after the rows, the faster kept,
   * so that a minute of a slow CPU at one probe does not lower the roof. */
  double peak256 = raw_fma_peak(256), peak512 = raw_fma_peak(512);
  tr_device_list *list;
  char err[256];
  if (tr_device_list_open(&list, spec, err, sizeof err)) {
    fprintf(stderr, "troupe: bench ops: --devices: %s\n", err);
    return CLI_USAGE;
  }
  const int ndev = tr_device_list_count(list);
  ctx *cs = calloc((size_t)ndev, sizeof *cs);
  result *rs = calloc((size_t)ndev * (2 * NGEMM + NEW) + 3, sizeof *rs);
  int nr = 0, status = CLI_OK;
  if (!cs || !rs) {
    fprintf(stderr, "troupe: bench ops: out of memory\n");
    status = CLI_FAIL;
    goto done;
  }
  for (int d = 0; d < ndev; d++) {
    ctx *c = &cs[d];
    c->dev = tr_device_list_at(list, d);
    tr_device_bind(c->dev);
    c->s = tr_device_stream(c->dev);
    c->host = tr_device_info_of(c->dev)->kind == TR_DEVICE_HOST;
    const char *dn = tr_device_name(c->dev);
    /* GEMM: the largest shape sets the buffers' size */
    const size_t gemm_n = (size_t)2048 * 2048;
    if (alloc_all(c, gemm_n) || tr_device_alloc(c->dev, gemm_n * sizeof(tr_bf16), (void **)&c->a16) ||
        tr_device_alloc(c->dev, gemm_n * sizeof(tr_bf16), (void **)&c->b16) ||
        tr_to_bf16(c->s, c->a16, c->a, gemm_n) || tr_to_bf16(c->s, c->b16, c->b, gemm_n))
      goto device_failed;
    for (int k = 0; k < NGEMM; k++) bench_gemm(c, &gemm_shapes[k], 0, seconds, &rs[nr++]);
    for (int k = 0; k < NGEMM; k++)
      if (gemm_shapes[k].bf16) bench_gemm(c, &gemm_shapes[k], 1, seconds, &rs[nr++]);
    free_all(c);
    if (alloc_all(c, size)) goto device_failed;
    for (int k = 0; k < NEW; k++) {
      const ew_op *o = &ew_ops[k];
      ref_bytes = (size_t)(o->reads + o->writes) * size * sizeof(float);
      double t_op = time_op(c, o->fn, seconds), t_ref = time_op(c, ref_memcpy, seconds);
      double t2 = time_op(c, o->fn, seconds);
      t_op = t2 < t_op ? t2 : t_op;
      result *r = &rs[nr++];
      *r = (result){.device = dn, .kind = "op", .name = o->name,
                    .value = (double)ref_bytes / t_op * 1e-9, .ref = (double)ref_bytes / t_ref * 1e-9,
                    .unit = "GB/s", .ref_name = c->host ? "memcpy" : "tr_memcpy"};
      snprintf(r->shape, sizeof r->shape, "%s", o->shape);
    }
    if (c->status) goto device_failed;
    continue;
  device_failed:
    fprintf(stderr, "troupe: bench ops: %s\n", tr_device_error(c->dev));
    status = CLI_FAIL;
    goto done;
  }

  /* host devices side by side (the element-wise buffers are still allocated) */
  int nhost = 0;
  for (int d = 0; d < ndev; d++) nhost += cs[d].host;
  if (nhost >= 2 && nhost == ndev) {
    for (int d = 0; d < ndev; d++) {
      free_all(&cs[d]);
      if (alloc_all(&cs[d], (size_t)1024 * 1024)) {
        fprintf(stderr, "troupe: bench ops: %s\n", tr_device_error(cs[d].dev));
        status = CLI_FAIL;
        goto done;
      }
    }
    double one = parallel_gflops(cs, 1, 8), all = parallel_gflops(cs, ndev, 8);
    result *r = &rs[nr++];
    *r = (result){.device = "all", .kind = "parallel", .name = "gemm on every device", .value = all,
                  .ref = one, .unit = "GFLOP/s", .ref_name = "one device"};
    snprintf(r->shape, sizeof r->shape, "%d x NN 1024³", ndev);
  }

  char isa[64], policy[4200], peaks[96];
  cli_cpu_isa(isa, sizeof isa);
  tr__host_gemm_policy_describe(policy, sizeof policy);
  peak256 = fmax(peak256, raw_fma_peak(256)), peak512 = fmax(peak512, raw_fma_peak(512));
  snprintf(peaks, sizeof peaks, "one core's FMA peak: AVX2 %.1f GFLOP/s", peak256);
  if (peak512 > 0)
    snprintf(peaks + strlen(peaks), sizeof peaks - strlen(peaks), ", AVX-512 %.1f", peak512);
  if (a.train && cs[0].host) {
    const double t = 20 * seconds < 2 ? 2 : 20 * seconds;
    const int ngemm = nr, wide = peak512 > 0 && onednn_may_use_avx512();
    const double peak = wide ? peak512 : peak256;
    const char *peak_name = wide ? "AVX-512 peak" : "AVX2 peak";
    bench_train("mlp", t, rs, ngemm, peak, peak_name, &rs[nr++]);
    bench_train("gpt", t, rs, ngemm, peak, peak_name, &rs[nr++]);
  }

  fprintf(stderr, "troupe bench ops: %s, element-wise n = %llu floats, best of 3 runs of ≥ %.2g s\n"
          "CPU: %s (%s); host GEMM: %s\n", spec, (unsigned long long)size, seconds, isa,
          peak256 > 0 ? peaks : "no FMA", policy);
  fputc('|', stderr);
  put_cell("device", 7), put_cell("op", 24), put_cell("shape", 22), put_cell("troupe", 14);
  put_cell("reference", 20), put_cell("ratio", 6), put_cell("reference", 20), put_cell("ratio", 6);
  put_cell("served", 8), put_cell("vs best", 7);
  fputs("\n|---------|--------------------------|------------------------|----------------|"
        "----------------------|--------|----------------------|--------|----------|---------|\n",
        stderr);
  for (int i = 0; i < nr; i++) print_row(&rs[i]);
  if (json) {
    printf("{\"bench\":\"ops\",\"devices\":\"%s\",\"size\":%llu,\"seconds\":%g,\"isa\":\"%s\","
           "\"fma_peak_gflops\":{\"avx2\":", spec, (unsigned long long)size, seconds, isa);
    peak256 > 0 ? printf("%.4g", peak256) : printf("null");
    printf(",\"avx512\":");
    peak512 > 0 ? printf("%.4g", peak512) : printf("null");
    printf("},\"host_gemm\":");
    cli_json_string(stdout, policy);
    printf(",\"rows\":[");
    for (int i = 0; i < nr; i++) {
      const result *r = &rs[i];
      printf("%s{\"device\":\"%s\",\"kind\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\",\"value\":%.6g,"
             "\"unit\":\"%s\"",
             i ? "," : "", r->device, r->kind, r->name, r->shape, r->value, r->unit);
      json_ref("reference", "ratio", r->ref_name, r->ref, r->value);
      json_ref("reference2", "ratio2", r->ref2_name, r->ref2, r->value);
      if (r->served) printf(",\"served\":\"%s\"", r->served);
      if (vs_best(r)) printf(",\"ratio_best\":%.4f", r->value / (r->ref > r->ref2 ? r->ref : r->ref2));
      printf("}");
    }
    printf("]}\n");
  }

done:
  for (int d = 0; cs && d < ndev; d++)
    if (cs[d].dev) {
      tr_device_bind(cs[d].dev);
      free_all(&cs[d]);
    }
  free(cs), free(rs);
  tr_device_list_close(list);
  return status;
}
