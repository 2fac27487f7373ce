/* test_cuda_ops.c — every op of the CUDA backend against the host backend (the oracle), run
 * through op_harness on the same inputs: normalised error <= 1e-7 (GEMM 1e-5), no NaN,
 * guard bytes untouched, inputs unchanged. Random initialisation must match bit for bit.
 *
 * Shapes include 1, odd sizes, sizes no vector width divides and sizes large enough that the
 * grid-stride loops and the multi-block reductions take more than one pass. Each op also
 * runs on pointers one float past an aligned address (shift 1), which sends the element-wise
 * kernels down their scalar path instead of the float4 one.
 *
 * Exits 77 (skipped) when the machine has no GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "op_harness.h"

static tr_device_list *list;
static tr_device *host, *gpu;

static int setup(void **state) {
  (void)state;
  char err[256];
  if (tr_device_list_open(&list, "host:1,cuda:0", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  host = tr_device_list_at(list, 0);
  gpu = tr_device_list_at(list, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(list);
  return 0;
}

static const size_t sizes[] = {1, 3, 7, 16, 17, 31, 255, 1000, 4099, (1u << 20) + 3};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };
static const size_t shapes[][2] = {{1, 1},   {1, 7},     {3, 17},   {5, 64},     {7, 33},
                                   {2, 768}, {33, 129},  {4099, 1}, {3000, 33}, {1024, 768}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* Every run function reads its sizes and scalars from one of these; o shifts every float
 * pointer by o elements (the buffers are o longer). */
typedef struct P {
  size_t n, N, C, B, T, V, o;
  float a, b, c, d, e;
  int flag;
  int64_t t;
  tr_op opa, opb;
  int M, K, lda, ldb, ldc, batch;
  int64_t sa, sb, sc;
} P;

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define CMP(args, fn, p) assert_true(th_compare_devices(host, gpu, args, NARGS(args), fn, p))
#define F(k) ((float *)a[k] + p->o)

static float *rnd(th_rng *r, size_t n, float std) {
  float *x = th_alloc_f(n);
  th_fill_normal(r, x, n, std);
  return x;
}

/* ---- fill and random initialisation ----------------------------------------------------- */

static int run_fill(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_fill(s, F(0), p->n, p->a);
}
static int run_uniform(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_init_uniform(s, F(0), p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->V);
}
static int run_normal(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_init_normal(s, F(0), p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->V);
}

static void fill_matches_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(101);
  for (int k = 0; k < NSIZES; k++)
    for (size_t o = 0; o < 2; o++) {
      P p = {.n = sizes[k], .o = o, .a = -3.25f};
      float *x = rnd(&r, p.n + o, 1);
      th_arg args[] = {{"x", p.n + o, 4, TH_OUT, x, 0}};
      CMP(args, run_fill, &p);
      free(x);
    }
}

/* Distance in units of the last place between two finite floats of the same sign. */
static uint32_t ulps(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : UINT32_MAX;
  return ia > ib ? (uint32_t)(ia - ib) : (uint32_t)(ib - ia);
}

static int run_dropout(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_dropout_mask(s, F(0), p->n, p->a, p->b, (uint64_t)p->t, (uint64_t)p->V);
}

/* Same (seed, index) -> same float, whatever the device. Uniform values and dropout masks
 * use exact arithmetic only: byte for byte. Normal values go through double log and cos, whose last
 * bits CUDA's and glibc's libm may round differently; rounding to float hides that almost
 * always, so they must agree to one unit in the last place, and nearly all exactly. */
static void init_and_dropout_masks_match_host_bit_for_bit(void **state) {
  (void)state;
  th_rng r = th_rng_for(102);
  const uint64_t offsets[] = {0, 1, 2, 3, 5, (1ull << 33) + 1};
  static const char *names[] = {"init_uniform", "init_normal", "dropout_mask"};
  static const th_run_fn fns[] = {run_uniform, run_normal, run_dropout};
  const float a[] = {-0.25f, 0.5f, 0.0f}, b[] = {1.75f, 0.02f, 1.25f}; /* dropout: p, scale */
  const float ps[] = {0.0f, 0.1f, 0.5f, 1.0f};
  size_t total = 0, inexact = 0;
  for (int k = 0; k < NSIZES; k++)
    for (int j = 0; j < 6; j++)
      for (int kind = 0; kind < 3; kind++) {
        const int normal = kind == 1;
        P p = {.n = sizes[k], .V = offsets[j], .t = (int64_t)th_next(&r), .o = (size_t)(j & 1)};
        p.a = kind == 2 ? ps[(k + j) % 4] : a[kind], p.b = b[kind];
        const size_t m = p.n + p.o;
        float *x = th_alloc_f(m);
        memset(x, 0, m * sizeof *x);
        th_arg args[] = {{"x", m, 4, TH_OUT, x, 0}};
        void *want[1], *got[1];
        th_run_fn fn = fns[kind];
        assert_int_equal(th_run(host, args, 1, fn, &p, want), 0);
        assert_int_equal(th_run(gpu, args, 1, fn, &p, got), 0);
        const float *w = want[0], *g = got[0];
        for (size_t i = 0; i < m; i++) {
          uint32_t d = ulps(w[i], g[i]);
          if (d > (uint32_t)normal || !isfinite(g[i])) {
            fprintf(stderr, "%s n=%zu offset=%llu: [%zu] host %.9g cuda %.9g (%u ulp)\n",
                    names[kind], p.n, (unsigned long long)p.V, i,
                    (double)w[i], (double)g[i], d);
            fail();
          }
          inexact += d != 0;
        }
        total += normal ? m : 0;
        th_free_outputs(want, 1);
        th_free_outputs(got, 1);
        free(x);
      }
  fprintf(stderr, "init_normal: %zu of %zu values differ from the host's by one ulp\n", inexact,
          total);
  assert_true(inexact * 10000 <= total);
}

/* ---- element-wise ops ------------------------------------------------------------------ */

static int run_add(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_add(s, F(2), F(0), F(1), p->n);
}
static int run_mul(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_mul(s, F(2), F(0), F(1), p->n);
}
static int run_axpy(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_axpy(s, F(1), p->a, F(0), p->n);
}
static int run_scale(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_scale(s, F(0), p->a, p->n);
}
static int run_scale_dev(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_scale_dev(s, F(1), F(0), p->n);
}
static int run_scale_dev_inside(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_scale_dev(s, F(0), F(0) + p->n / 2, p->n);
}
static int run_relu_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_relu_forward(s, F(1), F(0), p->n);
}
static int run_relu_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_relu_backward(s, F(2), F(0), F(1), p->n);
}
static int run_gelu_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_gelu_forward(s, F(1), F(0), p->n);
}
static int run_gelu_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_gelu_backward(s, F(2), F(0), F(1), p->n);
}
/* in place: out = inp (fwd), dinp = dout (bwd) */
static int run_gelu_forward_inplace(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_gelu_forward(s, F(0), F(0), p->n);
}
static int run_relu_backward_inplace(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_relu_backward(s, F(1), F(0), F(1), p->n);
}
static int run_mse_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_mse_backward(s, F(2), F(0), F(1), p->n, p->a);
}
static int run_sgd(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sgd_update(s, F(1), F(0), p->n, p->a, p->b);
}
static int run_momentum(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_momentum_update(s, F(1), F(0), F(2), p->n, p->a, p->b, p->c, p->flag);
}
static int run_dc_asgd(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_dc_asgd(s, F(2), F(0), F(1), p->n, p->a);
}
static int run_adamw(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_adamw_update(s, F(1), F(0), F(2), F(3), p->n, p->a, p->b, p->c, p->d, p->e, p->t);
}

static void elementwise_ops_match_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(103);
  for (int k = 0; k < NSIZES; k++)
    for (size_t o = 0; o < 2; o++) {
      const size_t n = sizes[k], m = n + o;
      float *x = rnd(&r, m, 2), *y = rnd(&r, m, 1), *z = rnd(&r, m, 1), *v = rnd(&r, m, 1);
      float *w = rnd(&r, m, 1), sc[2] = {0.75f, -1.5f};
      for (size_t i = 0; i < m; i++) v[i] = fabsf(v[i]); /* Adam's second moment */
      P p = {.n = n, .o = o, .a = 0.37f};
      {
        th_arg args[] = {{"a", m, 4, TH_IN, x, 0}, {"b", m, 4, TH_IN, y, 0},
                         {"out", m, 4, TH_OUT, z, 0}};
        CMP(args, run_add, &p);
        CMP(args, run_mul, &p);
        CMP(args, run_relu_backward, &p);
        CMP(args, run_gelu_backward, &p);
        CMP(args, run_mse_backward, &p);
      }
      {
        th_arg args[] = {{"x", m, 4, TH_IN, x, 0}, {"y", m, 4, TH_OUT, y, 0}};
        CMP(args, run_axpy, &p);
        CMP(args, run_relu_forward, &p);
        CMP(args, run_gelu_forward, &p);
        CMP(args, run_relu_backward_inplace, &p);
      }
      {
        th_arg args[] = {{"x", m, 4, TH_OUT, x, 0}};
        CMP(args, run_scale, &p);
        CMP(args, run_gelu_forward_inplace, &p);
      }
      {
        P q = p;
        q.o = 0; /* one scalar, read on the device */
        th_arg args[] = {{"scalar", 1, 4, TH_IN, &sc[o], 0}, {"x", n, 4, TH_OUT, x, 0}};
        CMP(args, run_scale_dev, &q);
      }
      {
        /* the scalar inside x, as a norm kept next to its gradients may be */
        th_arg args[] = {{"x", m, 4, TH_OUT, x, 0}};
        CMP(args, run_scale_dev_inside, &p);
      }
      {
        P q = p;
        q.a = 0.01f, q.b = 0.1f; /* lr, weight decay */
        th_arg args[] = {{"grad", m, 4, TH_IN, y, 0}, {"param", m, 4, TH_OUT, x, 0}};
        CMP(args, run_sgd, &q);
      }
      {
        P q = p;
        q.a = 0.7f; /* lambda */
        th_arg args[] = {{"now", m, 4, TH_IN, x, 0}, {"pulled", m, 4, TH_IN, z, 0},
                         {"grad", m, 4, TH_OUT, y, 0}};
        CMP(args, run_dc_asgd, &q);
      }
      for (int nesterov = 0; nesterov < 2; nesterov++) {
        P q = p;
        q.a = 0.01f, q.b = 0.9f, q.c = 0.01f, q.flag = nesterov;
        th_arg args[] = {{"grad", m, 4, TH_IN, y, 0}, {"param", m, 4, TH_OUT, x, 0},
                         {"mom", m, 4, TH_OUT, z, 0}};
        CMP(args, run_momentum, &q);
      }
      for (int64_t t = 1; t <= 1000; t *= 10) {
        P q = p;
        q.a = 3e-4f, q.b = 0.9f, q.c = 0.999f, q.d = 1e-8f, q.e = 0.1f, q.t = t;
        th_arg args[] = {{"grad", m, 4, TH_IN, y, 0}, {"param", m, 4, TH_OUT, x, 0},
                         {"m", m, 4, TH_OUT, w, 0}, {"v", m, 4, TH_OUT, v, 0}};
        CMP(args, run_adamw, &q);
      }
      free(x), free(y), free(z), free(v), free(w);
    }
}

/* ---- reductions ---------------------------------------------------------------------------- */

static int run_sum(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sum(s, a[1], F(0), p->n, p->flag);
}
static int run_sumsq(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_sumsq(s, a[1], F(0), p->n, p->flag);
}
static int run_mse_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_mse_forward(s, a[2], F(0), F(1), p->n, p->a);
}
static int run_clip(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_clip_factor(s, a[1], a[0], p->a);
}

static void reductions_match_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(104);
  const size_t big[] = {(1u << 22) + 1, 12345678};
  for (int k = 0; k < NSIZES + 2; k++)
    for (size_t o = 0; o < 2; o++) {
      const size_t n = k < NSIZES ? sizes[k] : big[k - NSIZES], m = n + o;
      float *x = rnd(&r, m, 1), *y = rnd(&r, m, 1), acc = 2.5f;
      for (int accumulate = 0; accumulate < 2; accumulate++) {
        P p = {.n = n, .o = o, .flag = accumulate};
        th_arg args[] = {{"x", m, 4, TH_IN, x, 0}, {"out", 1, 4, TH_OUT, &acc, 0}};
        CMP(args, run_sum, &p);
        CMP(args, run_sumsq, &p);
      }
      P p = {.n = n, .o = o, .a = 1.0f / (float)n};
      float loss = 7;
      th_arg args[] = {{"pred", m, 4, TH_IN, x, 0}, {"target", m, 4, TH_IN, y, 0},
                       {"loss", 1, 4, TH_OUT, &loss, 0}};
      CMP(args, run_mse_forward, &p);
      free(x), free(y);
    }
  const float sumsq[] = {0.0f, 1e-12f, 0.25f, 4.0f, 1e6f};
  for (int i = 0; i < 5; i++) {
    P p = {.a = 1.0f};
    float f = 3;
    th_arg args[] = {{"sumsq", 1, 4, TH_IN, &sumsq[i], 0}, {"factor", 1, 4, TH_OUT, &f, 0}};
    CMP(args, run_clip, &p);
  }
}

/* ---- linear layers, layernorm ------------------------------------------------------------ */

static int run_bias_add(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_bias_add(s, F(1), F(0), p->N, p->C);
}
static int run_bias_grad(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_bias_grad(s, F(1), F(0), p->N, p->C);
}
static int run_ln_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_layernorm_forward(s, F(3), F(4), F(5), F(0), F(1), F(2), p->N, p->C, p->a);
}
static int run_ln_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_layernorm_backward(s, F(5), F(6), F(7), F(0), F(1), F(2), F(3), F(4), p->N, p->C);
}

static void bias_and_layernorm_match_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(105);
  for (int k = 0; k < NSHAPES; k++)
    for (size_t o = 0; o < 2; o++) {
      P p = {.N = shapes[k][0], .C = shapes[k][1], .o = o, .a = 1e-5f};
      const size_t N = p.N, C = p.C, n = N * C + o, c = C + o, nr = N + o;
      float *x = rnd(&r, n, 1), *g = rnd(&r, n, 1), *w = rnd(&r, c, 1), *b = rnd(&r, c, 1);
      float *out = rnd(&r, n, 1), *m = rnd(&r, nr, 1), *rs = rnd(&r, nr, 1);
      {
        th_arg args[] = {{"bias", c, 4, TH_IN, b, 0}, {"out", n, 4, TH_OUT, out, 0}};
        CMP(args, run_bias_add, &p);
      }
      {
        th_arg args[] = {{"dout", n, 4, TH_IN, g, 0}, {"dbias", c, 4, TH_OUT, b, 0}};
        CMP(args, run_bias_grad, &p);
      }
      for (int far = 0; far < 2; far++) {
        if (far) /* a large mean and a small spread */
          for (size_t i = 0; i < n; i++) x[i] = 300.0f + 0.01f * x[i];
        th_arg args[] = {{"inp", n, 4, TH_IN, x, 0},     {"weight", c, 4, TH_IN, w, 0},
                         {"bias", c, 4, TH_IN, b, 0},    {"out", n, 4, TH_OUT, out, 0},
                         {"mean", nr, 4, TH_OUT, m, 0}, {"rstd", nr, 4, TH_OUT, rs, 0}};
        CMP(args, run_ln_forward, &p);
      }
      /* backward from the statistics of the forward (computed here on the host) */
      for (size_t i = 0; i < N; i++) {
        double mu = 0, var = 0;
        for (size_t j = 0; j < C; j++) mu += x[o + i * C + j];
        mu /= (double)C;
        for (size_t j = 0; j < C; j++) var += (x[o + i * C + j] - mu) * (x[o + i * C + j] - mu);
        m[o + i] = (float)mu, rs[o + i] = (float)(1 / sqrt(var / (double)C + 1e-5));
      }
      float *dw = rnd(&r, c, 1), *db = rnd(&r, c, 1);
      th_arg args[] = {{"dout", n, 4, TH_IN, g, 0},       {"inp", n, 4, TH_IN, x, 0},
                       {"weight", c, 4, TH_IN, w, 0},     {"mean", nr, 4, TH_IN, m, 0},
                       {"rstd", nr, 4, TH_IN, rs, 0},     {"dinp", n, 4, TH_OUT, out, 0},
                       {"dweight", c, 4, TH_OUT, dw, 0},  {"dbias", c, 4, TH_OUT, db, 0}};
      CMP(args, run_ln_backward, &p);
      free(x), free(g), free(w), free(b), free(out), free(m), free(rs), free(dw), free(db);
    }
}

/* ---- softmax, attention, losses --------------------------------------------------------- */

static int run_softmax_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_softmax_forward(s, F(1), F(0), p->N, p->C);
}
static int run_softmax_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_softmax_backward(s, F(2), F(0), F(1), p->N, p->C);
}
static int run_attn_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return p->flag ? tr_attn_softmax_forward(s, F(1), F(1), p->B, p->T, p->a)
                 : tr_attn_softmax_forward(s, F(1), F(0), p->B, p->T, p->a);
}
static int run_attn_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_attn_softmax_backward(s, F(2), F(0), F(1), p->B, p->T, p->a);
}
static int run_ce_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_forward(s, a[3], F(2), F(0), a[1], p->N, p->V, p->a);
}
static int run_ce_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return p->flag ? tr_crossentropy_backward(s, F(2), F(2), a[1], p->N, p->V, p->a)
                 : tr_crossentropy_backward(s, F(2), F(0), a[1], p->N, p->V, p->a);
}

static void softmax_ops_match_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(106);
  const size_t rows[][2] = {{1, 1}, {1, 7}, {7, 33}, {64, 256}, {7, 1000}, {3, 5000}, {2000, 3}};
  for (int k = 0; k < 7; k++)
    for (size_t o = 0; o < 2; o++) {
      P p = {.N = rows[k][0], .C = rows[k][1], .o = o};
      const size_t n = p.N * p.C + o;
      float *x = rnd(&r, n, 20), *g = rnd(&r, n, 1), *out = rnd(&r, n, 1);
      {
        th_arg args[] = {{"inp", n, 4, TH_IN, x, 0}, {"out", n, 4, TH_OUT, out, 0}};
        CMP(args, run_softmax_forward, &p);
      }
      for (size_t i = 0; i < n; i++) x[i] = fabsf(x[i]) / 40; /* an output-like row */
      th_arg args[] = {{"out", n, 4, TH_IN, x, 0}, {"dout", n, 4, TH_IN, g, 0},
                       {"dinp", n, 4, TH_OUT, out, 0}};
      CMP(args, run_softmax_backward, &p);
      free(x), free(g), free(out);
    }
  const size_t bt[][2] = {{1, 1}, {2, 7}, {3, 33}, {32, 128}};
  for (int k = 0; k < 4; k++)
    for (int inplace = 0; inplace < 2; inplace++) {
      P p = {.B = bt[k][0], .T = bt[k][1], .a = 0.125f, .flag = inplace, .o = (size_t)inplace};
      const size_t n = p.B * p.T * p.T + p.o;
      float *x = rnd(&r, n, 10), *g = rnd(&r, n, 1), *out = rnd(&r, n, 1);
      {
        th_arg args[] = {{"preatt", n, 4, TH_IN, x, 0}, {"att", n, 4, TH_OUT, inplace ? x : out, 0}};
        CMP(args, run_attn_forward, &p);
      }
      for (size_t i = 0; i < n; i++) x[i] = fabsf(x[i]) / 20;
      th_arg args[] = {{"att", n, 4, TH_IN, x, 0}, {"datt", n, 4, TH_IN, g, 0},
                       {"dpreatt", n, 4, TH_OUT, out, 0}};
      CMP(args, run_attn_backward, &p);
      free(x), free(g), free(out);
    }
  const size_t nv[][2] = {{1, 1}, {1, 7}, {7, 256}, {64, 256}, {33, 1000}, {1024, 256}};
  for (int k = 0; k < 6; k++)
    for (size_t o = 0; o < 2; o++) {
      P p = {.N = nv[k][0], .V = nv[k][1], .o = o, .a = 1.0f / (float)nv[k][0], .flag = (int)o};
      const size_t n = p.N * p.V + o;
      float *z = rnd(&r, n, 30), *probs = rnd(&r, n, 1), loss = 5;
      int32_t *t = th_alloc_i(p.N);
      th_fill_index(&r, t, p.N, (int32_t)p.V);
      {
        th_arg args[] = {{"logits", n, 4, TH_IN, z, 0}, {"targets", p.N, 4, TH_IN, t, 0},
                         {"probs", n, 4, TH_OUT, probs, 0}, {"loss", 1, 4, TH_OUT, &loss, 0}};
        CMP(args, run_ce_forward, &p);
      }
      for (size_t i = 0; i < n; i++) z[i] = fabsf(z[i]) / 60;
      th_arg args[] = {{"probs", n, 4, TH_IN, z, 0}, {"targets", p.N, 4, TH_IN, t, 0},
                       {"dlogits", n, 4, TH_OUT, o ? z : probs, 0}};
      CMP(args, run_ce_backward, &p); /* o = 1: in place, dlogits = probs */
      free(z), free(probs), free(t);
    }
}

/* ---- embedding ---------------------------------------------------------------------------- */

static int run_emb_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_forward(s, F(3), a[0], F(1), p->flag ? F(2) : NULL, p->B, p->T, p->C, p->V);
}
static int run_emb_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_backward(s, F(2), p->flag ? F(3) : NULL, F(1), a[0], p->B, p->T, p->C, p->V);
}

static void embedding_matches_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(107);
  /* the last two: runs of one token crossing the CUDA backend's tiles of 256 sorted rows, a
   * few of them (V = 256) and a long one (V = 2: about 2000 rows each) */
  const size_t btcv[][4] = {{1, 1, 1, 1}, {2, 3, 5, 4}, {3, 7, 33, 2}, {8, 128, 256, 256},
                            {4, 1000, 3, 2}};
  for (int k = 0; k < 5; k++)
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
      P p = {.B = btcv[k][0], .T = btcv[k][1], .C = btcv[k][2], .V = btcv[k][3],
             .flag = with_wpe, .o = (size_t)with_wpe};
      const size_t bt = p.B * p.T, o = p.o, nwte = p.V * p.C + o, nwpe = p.T * p.C + o,
                   nout = bt * p.C + o;
      int32_t *idx = th_alloc_i(bt);
      th_fill_index(&r, idx, bt, (int32_t)p.V); /* small V: many rows share a token */
      float *wte = rnd(&r, nwte, 1), *wpe = rnd(&r, nwpe, 1), *out = rnd(&r, nout, 1);
      {
        th_arg args[] = {{"idx", bt, 4, TH_IN, idx, 0}, {"wte", nwte, 4, TH_IN, wte, 0},
                         {"wpe", nwpe, 4, TH_IN, wpe, 0}, {"out", nout, 4, TH_OUT, out, 0}};
        CMP(args, run_emb_forward, &p);
      }
      th_arg args[] = {{"idx", bt, 4, TH_IN, idx, 0}, {"dout", nout, 4, TH_IN, out, 0},
                       {"dwte", nwte, 4, TH_OUT, wte, 0}, {"dwpe", nwpe, 4, TH_OUT, wpe, 0}};
      CMP(args, run_emb_backward, &p);
      /* no atomics: two runs give the same bits (--deterministic holds on GPUs), and where
       * no token's rows cross a tile (256 rows or fewer) they are the host's bits */
      void *want[4], *got[4], *again[4];
      assert_int_equal(th_run(host, args, 4, run_emb_backward, &p, want), 0);
      assert_int_equal(th_run(gpu, args, 4, run_emb_backward, &p, got), 0);
      assert_int_equal(th_run(gpu, args, 4, run_emb_backward, &p, again), 0);
      assert_memory_equal(got[2], again[2], nwte * sizeof(float));
      if (bt <= 256) assert_memory_equal(want[2], got[2], nwte * sizeof(float));
      th_free_outputs(want, 4);
      th_free_outputs(got, 4);
      th_free_outputs(again, 4);
      free(idx), free(wte), free(wpe), free(out);
    }
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

static int run_gemm(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  if (p->flag) /* bf16: always as a batch, one matrix for batch 0 */
    return tr_gemm_batched_bf16(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda,
                                p->sa, a[1], p->ldb, p->sb, p->b, a[2], p->ldc, p->sc,
                                p->batch ? p->batch : 1);
  if (p->batch)
    return tr_gemm_batched(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda, p->sa,
                           a[1], p->ldb, p->sb, p->b, a[2], p->ldc, p->sc, p->batch);
  return tr_gemm(s, p->opa, p->opb, p->M, (int)p->N, p->K, p->a, a[0], p->lda, a[1], p->ldb,
                 p->b, a[2], p->ldc);
}

/* bf16: A and B are bfloat16 (the upper halves of random floats) */
static void gemm_case_as(th_rng *r, tr_op opa, tr_op opb, int M, int N, int K, int pad, int batch,
                         float alpha, float beta, int bf16) {
  const int arows = opa == TR_OP_N ? M : K, acols = opa == TR_OP_N ? K : M;
  const int brows = opb == TR_OP_N ? K : N, bcols = opb == TR_OP_N ? N : K;
  P p = {.opa = opa, .opb = opb, .M = M, .N = (size_t)N, .K = K, .a = alpha, .b = beta,
         .lda = (acols ? acols : 1) + pad, .ldb = (bcols ? bcols : 1) + pad, .ldc = N + pad,
         .batch = batch};
  const int nb = batch ? batch : 1;
  p.sa = (int64_t)arows * p.lda + pad, p.sb = (int64_t)brows * p.ldb + 2 * pad;
  p.sc = (int64_t)M * p.ldc + pad;
  size_t na = (size_t)(p.sa * nb) + 1, nbb = (size_t)(p.sb * nb) + 1, nc = (size_t)(p.sc * nb);
  float *A = rnd(r, na, 1), *B = rnd(r, nbb, 1), *C = rnd(r, nc, 1);
  p.flag = bf16;
  if (bf16) { /* the upper halves, packed */
    uint16_t *a16 = (uint16_t *)A, *b16 = (uint16_t *)B;
    for (size_t i = 0; i < na; i++) {
      uint32_t u;
      memcpy(&u, &A[i], 4);
      a16[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < nbb; i++) {
      uint32_t u;
      memcpy(&u, &B[i], 4);
      b16[i] = (uint16_t)(u >> 16);
    }
  }
  if (beta == 0) /* beta 0 ignores C, NaN included: poison what the product overwrites */
    for (int bi = 0; bi < nb; bi++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[bi * p.sc + i * p.ldc + j] = NAN;
  th_arg args[] = {{"A", na, bf16 ? 2 : 4, TH_IN, A, 0}, {"B", nbb, bf16 ? 2 : 4, TH_IN, B, 0},
                   {"C", nc, 4, TH_OUT, C, TH_TOL_GEMM}};
  if (!th_compare_devices(host, gpu, args, 3, run_gemm, &p)) {
    fprintf(stderr, "gemm%s%s %c%c M=%d N=%d K=%d pad=%d beta=%g\n", batch ? "_batched" : "",
            bf16 ? "_bf16" : "", opa ? 'T' : 'N', opb ? 'T' : 'N', M, N, K, pad, (double)beta);
    fail();
  }
  free(A), free(B), free(C);
}

static void gemm_case(th_rng *r, tr_op opa, tr_op opb, int M, int N, int K, int pad, int batch,
                      float alpha, float beta) {
  gemm_case_as(r, opa, opb, M, N, K, pad, batch, alpha, beta, 0);
}

static void gemm_matches_host_for_every_transposition(void **state) {
  (void)state;
  th_rng r = th_rng_for(108);
  const int mnk[][3] = {{1, 1, 1},     {1, 7, 3},      {7, 1, 5},        {5, 3, 1},
                        {17, 33, 9},   {64, 48, 100},  {31, 65, 129},    {256, 1024, 1024}};
  for (int k = 0; k < 8; k++)
    for (int t = 0; t < 4; t++) {
      tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 0, 0, 1.0f, 0.0f);
      gemm_case(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 3, 0, -1.5f, 0.5f);
    }
  gemm_case(&r, TR_OP_N, TR_OP_N, 4, 5, 0, 0, 0, 1.0f, 2.0f); /* K = 0: C = beta C */
}

static void gemm_batched_matches_host_with_strides(void **state) {
  (void)state;
  th_rng r = th_rng_for(109);
  for (int t = 0; t < 4; t++) {
    tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
    gemm_case(&r, opa, opb, 128, 128, 64, 0, 32, 0.125f, 0.0f); /* gpt attention scores */
    gemm_case(&r, opa, opb, 7, 9, 13, 2, 3, 1.0f, 1.0f);
    gemm_case(&r, opa, opb, 1, 1, 1, 1, 1, 2.0f, 0.0f);
  }
}

/* bf16 operands through cublasGemmStridedBatchedEx against the host's (oneDNN's, or widened
 * to fp32): the same products of bf16 values, summed in float32. */
static void gemm_bf16_matches_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(110);
  const int mnk[][3] = {{1, 1, 1}, {17, 33, 9}, {64, 100, 10}, {256, 1024, 1024}, {128, 128, 64}};
  for (int k = 0; k < 5; k++)
    for (int t = 0; t < 4; t++) {
      tr_op opa = (tr_op)(t & 1), opb = (tr_op)(t >> 1);
      gemm_case_as(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 0, 0, 1.0f, 0.0f, 1);
      gemm_case_as(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 3, 0, -1.5f, 0.5f, 1);
      gemm_case_as(&r, opa, opb, mnk[k][0], mnk[k][1], mnk[k][2], 1, 4, 0.5f, 1.0f, 1);
    }
}

static int run_to_bf16(tr_stream *s, void **a, void *ctx) {
  return tr_to_bf16(s, a[1], a[0], ((P *)ctx)->n);
}

/* tr_to_bf16 rounds alike on both, bit for bit: values of every magnitude, ties, NaN. */
static void to_bf16_matches_host_bit_for_bit(void **state) {
  (void)state;
  th_rng r = th_rng_for(111);
  for (size_t k = 0; k < NSIZES; k++) {
    const size_t n = sizes[k];
    float *x = rnd(&r, n, 1);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(th_next(&r) % 280) - 150);
    const uint32_t odd[] = {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7fc00001u, 0xff800000u};
    for (size_t i = 0; i < 5 && i < n; i++) memcpy(&x[(i * 7919) % n], &odd[i], 4);
    P p = {.n = n};
    th_arg args[] = {{"inp", n, 4, TH_IN, x, 0}, {"out", n, 2, TH_OUT, NULL, 0}};
    void *want[2], *got[2];
    assert_int_equal(th_run(host, args, 2, run_to_bf16, &p, want), 0);
    assert_int_equal(th_run(gpu, args, 2, run_to_bf16, &p, got), 0);
    assert_memory_equal(want[1], got[1], n * 2);
    th_free_outputs(want, 2), th_free_outputs(got, 2);
    free(x);
  }
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_ops: no GPU on this machine: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fill_matches_host),
      cmocka_unit_test(init_and_dropout_masks_match_host_bit_for_bit),
      cmocka_unit_test(elementwise_ops_match_host),
      cmocka_unit_test(reductions_match_host),
      cmocka_unit_test(bias_and_layernorm_match_host),
      cmocka_unit_test(softmax_ops_match_host),
      cmocka_unit_test(embedding_matches_host),
      cmocka_unit_test(gemm_matches_host_for_every_transposition),
      cmocka_unit_test(gemm_batched_matches_host_with_strides),
      cmocka_unit_test(gemm_bf16_matches_host),
      cmocka_unit_test(to_bf16_matches_host_bit_for_bit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
