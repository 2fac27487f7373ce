/* bench_ops.c — `troupe bench ops`: the device layer's ops on each device, against
 * references measured in the same run.
 *
 *   GEMM          GFLOP/s through tr_gemm on square 1024 and 2048 and on the workloads'
 *                 shapes (mlp: batch 256 through 1024x1024 layers, forward and both
 *                 backward products; gpt: B*T = 1024 rows through widths 256/768/1024, and
 *                 its attention as a strided batch; simplenet's five tiny products, which
 *                 the host backend runs without BLAS), against cblas_sgemm called directly
 *                 on the same buffers (host devices; target >= 0.95x).
 *   element-wise  GB/s of every kernel (bytes each must read and write once), against memcpy
 *                 moving the same number of bytes (host devices: libc memcpy; GPUs: a
 *                 device-to-device tr_memcpy).
 *   parallel      with two or more host devices: 1024^2 GEMMs on all of them at once, one
 *                 thread each, against one alone: OpenBLAS calls from several threads
 *                 must both be safe and run side by side.
 *
 * Each figure is the best of three timed runs of at least --seconds each (calls are
 * repeated to fill it), the op and its reference interleaved so both meet the same machine.
 * Speeds never gate CI; this command is where they are shown.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "troupe.h"

typedef struct ctx {
  tr_device *dev;
  tr_stream *s;
  bool host;
  float *a, *b, *c, *d, *e, *f, *g; /* device buffers, n floats each */
  int32_t *idx;
  size_t n;
  /* GEMM */
  tr_op opa, opb;
  int M, N, K, batch;
  float beta;
  int status;
} ctx;

typedef void (*op_fn)(ctx *c);

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

static int lda_of(const ctx *c) { return c->opa == TR_OP_N ? c->K : c->M; }
static int ldb_of(const ctx *c) { return c->opb == TR_OP_N ? c->N : c->K; }

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

static void gemm_raw(ctx *c) {
  const int nb = c->batch ? c->batch : 1;
  for (int i = 0; i < nb; i++)
    cblas_sgemm(CblasRowMajor, c->opa == TR_OP_T ? CblasTrans : CblasNoTrans,
                c->opb == TR_OP_T ? CblasTrans : CblasNoTrans, c->M, c->N, c->K, 1.0f,
                c->a + (size_t)i * c->M * c->K, lda_of(c), c->b + (size_t)i * c->K * c->N, ldb_of(c),
                c->beta, c->c + (size_t)i * c->M * c->N, c->N);
}

typedef struct gemm_shape {
  const char *name;
  tr_op opa, opb;
  int M, N, K, batch;
  float beta;
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {"square 1024", TR_OP_N, TR_OP_N, 1024, 1024, 1024, 0, 0},
    {"square 2048", TR_OP_N, TR_OP_N, 2048, 2048, 2048, 0, 0},
    {"mlp fwd  inp@W^T", TR_OP_N, TR_OP_T, 256, 1024, 1024, 0, 0},
    {"mlp bwd  dout@W", TR_OP_N, TR_OP_N, 256, 1024, 1024, 0, 0},
    {"mlp bwd  dout^T@inp +=", TR_OP_T, TR_OP_N, 1024, 1024, 256, 0, 1},
    {"gpt qkv  (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 768, 256, 0, 0},
    {"gpt proj (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 256, 256, 0, 0},
    {"gpt fc   (1024x256)@W^T", TR_OP_N, TR_OP_T, 1024, 1024, 256, 0, 0},
    {"gpt fc2  (1024x1024)@W^T", TR_OP_N, TR_OP_T, 1024, 256, 1024, 0, 0},
    {"gpt fc bwd dW +=", TR_OP_T, TR_OP_N, 1024, 256, 1024, 0, 1},
    {"gpt attn q@k^T, 32x", TR_OP_N, TR_OP_T, 128, 128, 64, 32, 0},
    {"simplenet fwd inp@W^T", TR_OP_N, TR_OP_T, 64, 100, 10, 0, 0},
    {"simplenet fwd2 h@w^T", TR_OP_N, TR_OP_T, 64, 1, 100, 0, 0},
    {"simplenet bwd dout@W", TR_OP_N, TR_OP_N, 64, 100, 1, 0, 0},
    {"simplenet bwd dW2 +=", TR_OP_T, TR_OP_N, 1, 100, 64, 0, 1},
    {"simplenet bwd dW1 +=", TR_OP_T, TR_OP_N, 100, 10, 64, 0, 1},
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
static void op_relu_fwd(ctx *c) { OK(tr_relu_fwd(c->s, c->c, c->a, c->n)); }
static void op_relu_bwd(ctx *c) { OK(tr_relu_bwd(c->s, c->c, c->a, c->b, c->n)); }
static void op_gelu_fwd(ctx *c) { OK(tr_gelu_fwd(c->s, c->c, c->a, c->n)); }
static void op_gelu_bwd(ctx *c) { OK(tr_gelu_bwd(c->s, c->c, c->a, c->b, c->n)); }
static void op_ln_fwd(ctx *c) {
  OK(tr_layernorm_fwd(c->s, c->c, c->e, c->f, c->a, c->b, c->d, c->n / ROW, ROW, 1e-5f));
}
static void op_ln_bwd(ctx *c) {
  OK(tr_layernorm_bwd(c->s, c->c, c->g, c->g + ROW, c->a, c->b, c->d, c->e, c->f, c->n / ROW, ROW));
}
static void op_softmax(ctx *c) { OK(tr_softmax_fwd(c->s, c->c, c->a, c->n / ROW, ROW)); }
static void op_attn_fwd(ctx *c) { OK(tr_attn_softmax_fwd(c->s, c->c, c->a, c->n / (T * T), T, 0.125f)); }
static void op_attn_bwd(ctx *c) { OK(tr_attn_softmax_bwd(c->s, c->c, c->a, c->b, c->n / (T * T), T, 0.125f)); }
static void op_ce_fwd(ctx *c) { OK(tr_crossentropy_fwd(c->s, c->g, c->c, c->a, c->idx, c->n / ROW, ROW, 1.0f)); }
static void op_ce_bwd(ctx *c) { OK(tr_crossentropy_bwd(c->s, c->c, c->a, c->idx, c->n / ROW, ROW, 1.0f)); }
static void op_mse_fwd(ctx *c) { OK(tr_mse_fwd(c->s, c->g, c->a, c->b, c->n, 1.0f)); }
static void op_mse_bwd(ctx *c) { OK(tr_mse_bwd(c->s, c->c, c->a, c->b, c->n, 1.0f)); }
static void op_emb_fwd(ctx *c) { OK(tr_embedding_fwd(c->s, c->c, c->idx, c->b, NULL, 1, c->n / ROW, ROW, ROW)); }
static void op_emb_bwd(ctx *c) { OK(tr_embedding_bwd(c->s, c->d, NULL, c->a, c->idx, 1, c->n / ROW, ROW, ROW)); }
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
    {"relu_fwd", "n", op_relu_fwd, 1, 1},
    {"relu_bwd", "n", op_relu_bwd, 2, 1},
    {"gelu_fwd", "n", op_gelu_fwd, 1, 1},
    {"gelu_bwd", "n", op_gelu_bwd, 2, 1},
    {"layernorm_fwd", "(n/256,256)", op_ln_fwd, 1, 1},
    {"layernorm_bwd", "(n/256,256)", op_ln_bwd, 2, 1},
    {"softmax_fwd", "(n/256,256)", op_softmax, 1, 1},
    {"attn_softmax_fwd", "(n/T²,T=128,T)", op_attn_fwd, 1, 1},
    {"attn_softmax_bwd", "(n/T²,T=128,T)", op_attn_bwd, 2, 1},
    {"crossentropy_fwd", "(n/256,V=256)", op_ce_fwd, 1, 1},
    {"crossentropy_bwd", "(n/256,V=256)", op_ce_bwd, 1, 1},
    {"mse_fwd", "n", op_mse_fwd, 2, 0},
    {"mse_bwd", "n", op_mse_bwd, 2, 1},
    {"embedding_fwd", "(n/256,C=256)", op_emb_fwd, 0, 1},
    {"embedding_bwd", "(n/256,C=256)", op_emb_bwd, 1, 0},
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
  const char *kind; /* "gemm", "op", "parallel" */
  const char *name;
  char shape[48];
  double value;     /* GFLOP/s or GB/s */
  double ref;       /* the reference's, 0 when none */
  const char *unit;
  const char *ref_name;
} result;

static void put_cell(const char *text, int width) {
  int chars = 0;
  for (const char *p = text; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
  fprintf(stderr, " %s%*s |", text, width > chars ? width - chars : 0, "");
}

static void print_row(const result *r) {
  char value[32], ref[48] = "", ratio[16] = "";
  snprintf(value, sizeof value, "%.1f %s", r->value, r->unit);
  if (r->ref > 0) {
    snprintf(ref, sizeof ref, "%s %.1f", r->ref_name, r->ref);
    snprintf(ratio, sizeof ratio, "%.2f×", r->value / r->ref);
  }
  fputc('|', stderr);
  put_cell(r->device, 7);
  put_cell(r->name, 24);
  put_cell(r->shape, 18);
  put_cell(value, 14);
  put_cell(ref, 20);
  put_cell(ratio, 6);
  fputc('\n', stderr);
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
  c->idx = NULL;
}

static void usage(FILE *f) {
  fprintf(f, "usage: troupe bench ops [--devices SPEC] [--seconds S] [--size N] [--json]\n\n"
             "GFLOP/s of GEMM (against cblas_sgemm on host devices) and GB/s of every\n"
             "element-wise kernel (against memcpy of the same bytes), on each device of SPEC\n"
             "(default host:1). --seconds: the least time of one timed run (default 0.1);\n"
             "--size: floats per element-wise buffer (default 4194304, at least 65536).\n");
}

int bench_ops(int argc, char **argv) {
  const char *spec = "host:1";
  double seconds = 0.1;
  uint64_t size = 1 << 22;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--devices")) {
      if (!cli_value_str(argc, argv, &i, &spec)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--seconds")) {
      if (!cli_value_double(argc, argv, &i, 0.001, 60, &seconds)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--size")) {
      if (!cli_value_u64(argc, argv, &i, (uint64_t)ROW * ROW, 1ull << 28, &size)) return CLI_USAGE;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return CLI_OK;
    } else {
      fprintf(stderr, "troupe: bench ops: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return CLI_USAGE;
    }
  }
  size -= size % (T * T); /* whole rows for every row-wise shape */
  tr_device_list *list;
  char err[256];
  if (tr_device_list_open(&list, spec, err, sizeof err)) {
    fprintf(stderr, "troupe: bench ops: --devices: %s\n", err);
    return CLI_USAGE;
  }
  const int ndev = tr_device_list_count(list);
  ctx *cs = calloc((size_t)ndev, sizeof *cs);
  result *rs = calloc((size_t)ndev * (NGEMM + NEW) + 1, sizeof *rs);
  int nr = 0, status = CLI_OK;
  if (!cs || !rs) {
    fprintf(stderr, "troupe: bench ops: out of memory\n");
    status = CLI_FAIL;
    goto done;
  }
  for (int d = 0; d < ndev; d++) {
    ctx *c = &cs[d];
    c->dev = tr_device_list_get(list, d);
    tr_device_bind(c->dev);
    c->s = tr_device_stream(c->dev);
    c->host = tr_device_get_info(c->dev)->kind == TR_DEVICE_HOST;
    const char *dn = tr_device_name(c->dev);
    /* GEMM: the largest shape sets the buffers' size */
    if (alloc_all(c, (size_t)2048 * 2048)) goto device_failed;
    for (int k = 0; k < NGEMM; k++) {
      const gemm_shape *g = &gemm_shapes[k];
      c->opa = g->opa, c->opb = g->opb, c->M = g->M, c->N = g->N, c->K = g->K;
      c->batch = g->batch, c->beta = g->beta;
      double flops = 2.0 * g->M * g->N * g->K * (g->batch ? g->batch : 1), t_raw = 0;
      double t_api = time_op(c, gemm_api, seconds);
      if (c->host) { /* again, interleaved, so that both meet the same machine */
        t_raw = time_op(c, gemm_raw, seconds);
        double t2 = time_op(c, gemm_api, seconds);
        t_api = t2 < t_api ? t2 : t_api;
      }
      result *r = &rs[nr++];
      *r = (result){dn, "gemm", g->name, "", flops / t_api * 1e-9, t_raw > 0 ? flops / t_raw * 1e-9 : 0,
                    "GFLOP/s", "cblas_sgemm"};
      snprintf(r->shape, sizeof r->shape, "%c%c %dx%dx%d", g->opa ? 'T' : 'N', g->opb ? 'T' : 'N',
               g->M, g->N, g->K);
    }
    free_all(c);
    if (alloc_all(c, size)) goto device_failed;
    for (int k = 0; k < NEW; k++) {
      const ew_op *o = &ew_ops[k];
      ref_bytes = (size_t)(o->reads + o->writes) * size * sizeof(float);
      double t_op = time_op(c, o->fn, seconds), t_ref = time_op(c, ref_memcpy, seconds);
      double t2 = time_op(c, o->fn, seconds);
      t_op = t2 < t_op ? t2 : t_op;
      result *r = &rs[nr++];
      *r = (result){dn, "op", o->name, "", (double)ref_bytes / t_op * 1e-9,
                    (double)ref_bytes / t_ref * 1e-9, "GB/s", c->host ? "memcpy" : "tr_memcpy"};
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
    *r = (result){"all", "parallel", "gemm on every device", "", all, one, "GFLOP/s", "one device"};
    snprintf(r->shape, sizeof r->shape, "%d x NN 1024³", ndev);
  }

  fprintf(stderr, "troupe bench ops: %s, element-wise n = %llu floats, best of 3 runs of ≥ %.2g s\n",
          spec, (unsigned long long)size, seconds);
  fputc('|', stderr);
  put_cell("device", 7), put_cell("op", 24), put_cell("shape", 18), put_cell("troupe", 14);
  put_cell("reference", 20), put_cell("ratio", 6);
  fputs("\n|---------|--------------------------|--------------------|----------------|"
        "----------------------|--------|\n", stderr);
  for (int i = 0; i < nr; i++) print_row(&rs[i]);
  if (json) {
    printf("{\"bench\":\"ops\",\"devices\":\"%s\",\"size\":%llu,\"seconds\":%g,\"rows\":[", spec,
           (unsigned long long)size, seconds);
    for (int i = 0; i < nr; i++) {
      const result *r = &rs[i];
      printf("%s{\"device\":\"%s\",\"kind\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\",\"value\":%.6g,"
             "\"unit\":\"%s\",",
             i ? "," : "", r->device, r->kind, r->name, r->shape, r->value, r->unit);
      if (r->ref > 0)
        printf("\"reference\":\"%s\",\"reference_value\":%.6g,\"ratio\":%.4f}", r->ref_name, r->ref,
               r->value / r->ref);
      else
        printf("\"reference\":null,\"reference_value\":null,\"ratio\":null}");
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
