/* test_layers.c — every layer against a float64 reference written here (tr_layers.h's, and
 * the ops of tr_device.h that are layers by themselves: activations, layernorm, embedding,
 * the losses): the float32 forward against the float64 forward, and the float32 backward
 * against central differences of the float64 forward, by normalised squared error
 * (sum (x - ref)^2 / sum ref^2). The objective is sum(out * R) for a random R, which is
 * what backward receives as dout; parameter gradients start from random values, so the
 * checks also prove that they accumulate (+=). Bounds: the measured errors (printed) with
 * about 100x margin (gradcheck.h). The layers with matrix products run in mixed precision
 * too (bf16 operands, fp32 sums), against the same float64 reference with bf16's bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "mtest.h"
#include "tr_layers.h"

static tr_device_list *devs;
static tr_device *dev;
static tr_stream *st;

static int setup(void **state) {
  (void)state;
  devs = mt_open(1);
  dev = tr_device_list_at(devs, 0);
  st = tr_device_stream(dev);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(devs);
  return 0;
}

/* A parameter gradient that starts at g0: returns the device buffer; the host copy of what
 * backward added is taken by grad_added. */
static float *grad_buf(mt_rng *r, size_t n, float **g0) {
  *g0 = mt_normals(r, n, 1.0, 0);
  return mt_up(dev, *g0, n);
}

static float *grad_added(const float *dbuf, const float *g0, size_t n) {
  float *g = mt_down(dev, dbuf, n);
  for (size_t i = 0; i < n; i++) g[i] -= g0[i];
  return g;
}

static void free_tens(tens *ts, int nt) {
  for (int k = 0; k < nt; k++) free(ts[k].h), free(ts[k].grad);
}

/* Device room for n bf16 (NaN-free garbage until written). */
static tr_bf16 *bf16_buf(size_t n) { return (tr_bf16 *)mt_up(dev, NULL, n / 2 + 1); }

/* A device bf16 copy of n device floats. */
static tr_bf16 *bf16_copy(const float *x, size_t n) {
  tr_bf16 *h = bf16_buf(n);
  assert_int_equal(tr_to_bf16(st, h, x, n), 0);
  return h;
}

static void check(const char *what, int bf16, const void *ctx, ref_fn ref, tens *ts, int nt,
                  const float *out32, size_t nout, const float *R) {
  char name[48];
  snprintf(name, sizeof name, "%s%s", what, bf16 ? "/bf16" : "");
  gradcheck_within(name, ctx, ref, ts, nt, out32, nout, R, bf16 ? BF16_FWD_TOL : FWD_TOL,
                   bf16 ? BF16_GRAD_TOL : GRAD_TOL);
}

/* ---- float64 references ----------------------------------------------------------------------- */

static void ln64(double *out, const double *x, const double *w, const double *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *r = x + n * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += r[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
    const double rs = 1 / sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++) out[n * C + c] = (r[c] - m) * rs * w[c] + b[c];
  }
}

static void attn64(double *out, const double *qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  double *p = malloc((size_t)T * sizeof *p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + ((size_t)(b * T + t) * 3 * C) + h * hs;
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) {
          const double *k = qkv + ((size_t)(b * T + u) * 3 * C) + C + h * hs;
          double s = 0;
          for (int d = 0; d < hs; d++) s += q[d] * k[d];
          p[u] = s / sqrt((double)hs);
          mx = p[u] > mx ? p[u] : mx;
        }
        for (int u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - mx));
        for (int d = 0; d < hs; d++) {
          double a = 0;
          for (int u = 0; u <= t; u++) a += p[u] / sum * qkv[(size_t)(b * T + u) * 3 * C + 2 * C + h * hs + d];
          out[(size_t)(b * T + t) * C + h * hs + d] = a;
        }
      }
  free(p);
}

/* ---- linear -------------------------------------------------------------------------------------- */

typedef struct lin_ctx {
  int N, C, OC, bias;
} lin_ctx;

static void lin_ref(const void *ctx, double *const *t, double *out) {
  const lin_ctx *c = ctx;
  lin64(out, t[0], t[1], c->bias ? t[2] : NULL, c->N, c->C, c->OC);
}

static void check_linear(int bias, int bf16) {
  const lin_ctx c = {5, 7, 3, bias};
  mt_rng r = mt_rng_for(1 + (uint64_t)bias + 10 * (uint64_t)bf16);
  const size_t nx = (size_t)c.N * c.C, nw = (size_t)c.C * c.OC, no = (size_t)c.N * c.OC;
  tens ts[3] = {{"inp", mt_normals(&r, nx, 1, 0), nx, NULL},
                {"weight", mt_normals(&r, nw, 0.5, 0), nw, NULL},
                {"bias", mt_normals(&r, (size_t)c.OC, 0.5, 0), (size_t)c.OC, NULL}};
  float *R = mt_normals(&r, no, 1, 0), *gw0, *gb0;
  float *x = mt_up(dev, ts[0].h, nx), *w = mt_up(dev, ts[1].h, nw), *b = mt_up(dev, ts[2].h, c.OC);
  float *out = mt_up(dev, NULL, no), *dout = mt_up(dev, R, no), *dx = mt_up(dev, NULL, nx);
  float *dw = grad_buf(&r, nw, &gw0), *db = grad_buf(&r, c.OC, &gb0);
  tr_linear_bf16 h = {bf16_copy(w, nw), bf16_buf(nx), bf16_buf(no)}, *mp = bf16 ? &h : NULL;
  assert_int_equal(tr_linear_forward(st, out, x, w, bias ? b : NULL, c.N, c.C, c.OC, mp), 0);
  assert_int_equal(tr_linear_backward(st, dx, dw, bias ? db : NULL, dout, x, w, c.N, c.C, c.OC, mp),
                   0);
  float *out32 = mt_down(dev, out, no);
  ts[0].grad = mt_down(dev, dx, nx);
  ts[1].grad = grad_added(dw, gw0, nw);
  ts[2].grad = bias ? grad_added(db, gb0, c.OC) : NULL;
  if (!bias) { /* no bias: its gradient is left alone */
    float *g = mt_down(dev, db, c.OC);
    assert_memory_equal(g, gb0, c.OC * sizeof *g);
    free(g);
  }
  check(bias ? "linear" : "linear/nobias", bf16, &c, lin_ref, ts, bias ? 3 : 2, out32, no, R);
  /* dinp NULL: the parameter gradients alone, the same values */
  float *gw_before = mt_down(dev, dw, nw);
  assert_int_equal(tr_linear_backward(st, NULL, dw, NULL, dout, x, w, c.N, c.C, c.OC, mp), 0);
  float *gw_after = mt_down(dev, dw, nw);
  for (size_t i = 0; i < nw; i++) assert_true(fabsf(gw_after[i] - gw_before[i] - ts[1].grad[i]) <= 1e-5f);
  free(gw_before), free(gw_after), free(out32), free(R), free(gw0), free(gb0);
  free_tens(ts, 3);
  void *bufs[] = {x, w, b, out, dout, dx, dw, db, (void *)h.weight, h.inp, h.dout};
  for (size_t i = 0; i < 11; i++) tr_device_free(dev, bufs[i]);
}

static void linear_gradients_match_finite_differences(void **state) {
  (void)state;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    check_linear(1, bf16);
    check_linear(0, bf16);
  }
}

/* ---- activations ------------------------------------------------------------------------------- */

typedef struct act_ctx {
  size_t n;
  int gelu;
} act_ctx;

static void act_ref(const void *ctx, double *const *t, double *out) {
  const act_ctx *c = ctx;
  for (size_t i = 0; i < c->n; i++) out[i] = c->gelu ? gelu64(t[0][i]) : (t[0][i] > 0 ? t[0][i] : 0);
}

static void check_activation(int gelu) {
  const act_ctx c = {67, gelu};
  mt_rng r = mt_rng_for(10 + (uint64_t)gelu);
  tens ts[1] = {{"inp", mt_normals(&r, c.n, 2.0, 1e-3), c.n, NULL}};
  float *R = mt_normals(&r, c.n, 1, 0);
  float *x = mt_up(dev, ts[0].h, c.n), *out = mt_up(dev, NULL, c.n), *g = mt_up(dev, R, c.n);
  assert_int_equal((gelu ? tr_gelu_forward : tr_relu_forward)(st, out, x, c.n), 0);
  float *out32 = mt_down(dev, out, c.n);
  /* in place: dinp = dout */
  assert_int_equal((gelu ? tr_gelu_backward : tr_relu_backward)(st, g, x, g, c.n), 0);
  ts[0].grad = mt_down(dev, g, c.n);
  gradcheck(gelu ? "gelu" : "relu", &c, act_ref, ts, 1, out32, c.n, R);
  free(out32), free(R);
  free_tens(ts, 1);
  tr_device_free(dev, x), tr_device_free(dev, out), tr_device_free(dev, g);
}

static void relu_gradient_matches_finite_differences(void **state) {
  (void)state;
  check_activation(0);
}

static void gelu_gradient_matches_finite_differences(void **state) {
  (void)state;
  check_activation(1);
}

/* ---- layernorm ------------------------------------------------------------------------------------- */

typedef struct ln_ctx {
  int N, C;
} ln_ctx;

static void ln_ref(const void *ctx, double *const *t, double *out) {
  const ln_ctx *c = ctx;
  ln64(out, t[0], t[1], t[2], c->N, c->C);
}

static void layernorm_gradients_match_finite_differences(void **state) {
  (void)state;
  const ln_ctx c = {6, 19};
  mt_rng r = mt_rng_for(20);
  const size_t nx = (size_t)c.N * c.C;
  tens ts[3] = {{"inp", mt_normals(&r, nx, 2, 0), nx, NULL},
                {"weight", mt_normals(&r, c.C, 1, 0), (size_t)c.C, NULL},
                {"bias", mt_normals(&r, c.C, 1, 0), (size_t)c.C, NULL}};
  for (size_t i = 0; i < nx; i++) ts[0].h[i] += 3.0f; /* off-centre rows */
  float *R = mt_normals(&r, nx, 1, 0), *gw0, *gb0;
  float *x = mt_up(dev, ts[0].h, nx), *w = mt_up(dev, ts[1].h, c.C), *b = mt_up(dev, ts[2].h, c.C);
  float *out = mt_up(dev, NULL, nx), *mean = mt_up(dev, NULL, c.N), *rstd = mt_up(dev, NULL, c.N);
  float *dout = mt_up(dev, R, nx), *dx = mt_up(dev, NULL, nx);
  float *dw = grad_buf(&r, c.C, &gw0), *db = grad_buf(&r, c.C, &gb0);
  assert_int_equal(tr_layernorm_forward(st, out, mean, rstd, x, w, b, c.N, c.C, TR_LAYERNORM_EPS),
                   0);
  assert_int_equal(tr_layernorm_backward(st, dx, dw, db, dout, x, w, mean, rstd, c.N, c.C), 0);
  float *out32 = mt_down(dev, out, nx);
  ts[0].grad = mt_down(dev, dx, nx);
  ts[1].grad = grad_added(dw, gw0, c.C);
  ts[2].grad = grad_added(db, gb0, c.C);
  gradcheck("layernorm", &c, ln_ref, ts, 3, out32, nx, R);
  free(out32), free(R), free(gw0), free(gb0);
  free_tens(ts, 3);
  float *bufs[] = {x, w, b, out, mean, rstd, dout, dx, dw, db};
  for (size_t i = 0; i < 10; i++) tr_device_free(dev, bufs[i]);
}

/* ---- embedding ------------------------------------------------------------------------------------- */

typedef struct emb_ctx {
  int B, T, C, V;
  const int32_t *idx;
} emb_ctx;

static void emb_ref(const void *ctx, double *const *t, double *out) {
  const emb_ctx *c = ctx;
  for (int b = 0; b < c->B; b++)
    for (int p = 0; p < c->T; p++)
      for (int k = 0; k < c->C; k++)
        out[(size_t)(b * c->T + p) * c->C + k] =
            t[0][(size_t)c->idx[b * c->T + p] * c->C + k] + t[1][(size_t)p * c->C + k];
}

static void embedding_gradients_match_finite_differences(void **state) {
  (void)state;
  int32_t idx[3 * 5];
  mt_rng r = mt_rng_for(30);
  for (int i = 0; i < 15; i++) idx[i] = (int32_t)(mt_next(&r) % 4); /* repeats: scatter-add */
  const emb_ctx c = {3, 5, 6, 7, idx};
  const size_t nte = (size_t)c.V * c.C, npe = (size_t)c.T * c.C, no = (size_t)c.B * c.T * c.C;
  tens ts[2] = {{"wte", mt_normals(&r, nte, 1, 0), nte, NULL},
                {"wpe", mt_normals(&r, npe, 1, 0), npe, NULL}};
  float *R = mt_normals(&r, no, 1, 0), *ge0, *gp0;
  float *wte = mt_up(dev, ts[0].h, nte), *wpe = mt_up(dev, ts[1].h, npe);
  int32_t *didx = (int32_t *)mt_up(dev, idx, 15);
  float *out = mt_up(dev, NULL, no), *dout = mt_up(dev, R, no);
  float *dte = grad_buf(&r, nte, &ge0), *dpe = grad_buf(&r, npe, &gp0);
  assert_int_equal(tr_embedding_forward(st, out, didx, wte, wpe, c.B, c.T, c.C, c.V), 0);
  assert_int_equal(tr_embedding_backward(st, dte, dpe, dout, didx, c.B, c.T, c.C, c.V), 0);
  float *out32 = mt_down(dev, out, no);
  ts[0].grad = grad_added(dte, ge0, nte);
  ts[1].grad = grad_added(dpe, gp0, npe);
  gradcheck("embedding", &c, emb_ref, ts, 2, out32, no, R);
  free(out32), free(R), free(ge0), free(gp0);
  free_tens(ts, 2);
  void *bufs[] = {wte, wpe, didx, out, dout, dte, dpe};
  for (size_t i = 0; i < 7; i++) tr_device_free(dev, bufs[i]);
}

/* ---- attention ------------------------------------------------------------------------------------- */

typedef struct attn_ctx {
  int B, T, C, NH;
} attn_ctx;

static void attn_ref(const void *ctx, double *const *t, double *out) {
  const attn_ctx *c = ctx;
  attn64(out, t[0], c->B, c->T, c->C, c->NH);
}

static void check_attention(attn_ctx c, uint64_t stream, int bf16) {
  mt_rng r = mt_rng_for(stream);
  const size_t nq = (size_t)c.B * c.T * 3 * c.C, no = (size_t)c.B * c.T * c.C;
  const size_t na = (size_t)c.B * c.NH * c.T * c.T;
  tens ts[1] = {{"qkv", mt_normals(&r, nq, 1, 0), nq, NULL}};
  float *R = mt_normals(&r, no, 1, 0);
  float *qkv = mt_up(dev, ts[0].h, nq), *out = mt_up(dev, NULL, no), *att = mt_up(dev, NULL, na);
  float *dout = mt_up(dev, R, no), *dqkv = mt_up(dev, NULL, nq);
  float *s1 = mt_up(dev, NULL, na), *s2 = mt_up(dev, NULL, na);
  tr_attention_bf16 h = {bf16_buf(nq), bf16_buf(na), bf16_buf(na > no ? na : no)};
  const tr_attention_bf16 *mp = bf16 ? &h : NULL;
  assert_int_equal(tr_attention_forward(st, out, att, qkv, c.B, c.T, c.C, c.NH, mp), 0);
  assert_int_equal(tr_attention_backward(st, dqkv, s1, s2, dout, qkv, att, c.B, c.T, c.C, c.NH, mp),
                   0);
  float *out32 = mt_down(dev, out, no);
  ts[0].grad = mt_down(dev, dqkv, nq);
  char name[32];
  snprintf(name, sizeof name, "attn B%d/NH%d", c.B, c.NH);
  check(name, bf16, &c, attn_ref, ts, 1, out32, no, R);
  free(out32), free(R);
  free_tens(ts, 1);
  void *bufs[] = {qkv, out, att, dout, dqkv, s1, s2, h.qkv, h.att, h.grad};
  for (size_t i = 0; i < 10; i++) tr_device_free(dev, bufs[i]);
}

static void attention_gradients_match_finite_differences(void **state) {
  (void)state;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    check_attention((attn_ctx){2, 5, 8, 2}, 40, bf16); /* loops over sequences */
    check_attention((attn_ctx){3, 4, 6, 2}, 41, bf16); /* loops over heads */
  }
}

/* ---- the transformer block ------------------------------------------------------------------------- */

static void block_ref(const void *ctx, double *const *t, double *out) {
  const tr_block_dims *d = ctx;
  const int N = d->B * d->T, C = d->C, H = d->H;
  const size_t nc = (size_t)N * C;
  double *ln = malloc(nc * 8), *qkv = malloc(3 * nc * 8), *y = malloc(nc * 8), *r1 = malloc(nc * 8);
  double *fc = malloc((size_t)N * H * 8);
  /* t: x, then the 12 tensors in tr_block_params order */
  ln64(ln, t[0], t[1], t[2], N, C);
  lin64(qkv, ln, t[3], t[4], N, C, 3 * C);
  attn64(y, qkv, d->B, d->T, C, d->NH);
  lin64(r1, y, t[5], t[6], N, C, C);
  for (size_t i = 0; i < nc; i++) r1[i] += t[0][i];
  ln64(ln, r1, t[7], t[8], N, C);
  lin64(fc, ln, t[9], t[10], N, C, H);
  for (size_t i = 0; i < (size_t)N * H; i++) fc[i] = gelu64(fc[i]);
  lin64(out, fc, t[11], t[12], N, H, C);
  for (size_t i = 0; i < nc; i++) out[i] += r1[i];
  free(ln), free(qkv), free(y), free(r1), free(fc);
}

static void check_block(int bf16) {
  const tr_block_dims d = {2, 4, 8, 2, 12};
  const size_t C = 8, H = 12, N = 8;
  const size_t sizes[13] = {N * C, C, C, 3 * C * C, 3 * C, C * C, C, C, C, H * C, H, C * H, C};
  static const char *names[13] = {"inp", "ln1w", "ln1b", "qkvw", "qkvb", "projw", "projb",
                                  "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"};
  mt_rng r = mt_rng_for(50 + (uint64_t)bf16);
  tens ts[13];
  float *dp[13], *dg[13], *g0[13];
  for (int k = 0; k < 13; k++) {
    ts[k] = (tens){names[k], mt_normals(&r, sizes[k], k == 0 ? 1.0 : 0.4, 0), sizes[k], NULL};
    if (k == 1 || k == 7)
      for (size_t i = 0; i < C; i++) ts[k].h[i] += 1.0f; /* layernorm weights near one */
    dp[k] = mt_up(dev, ts[k].h, sizes[k]);
    dg[k] = k ? grad_buf(&r, sizes[k], &g0[k]) : NULL;
  }
  tr_block_params p, g;
  memcpy(&p, dp + 1, sizeof p);
  memcpy(&g, dg + 1, sizeof g);
  tr_block_acts a;
  tr_block_scratch sc;
  float *abuf = mt_up(dev, NULL, tr_block_acts_carve(NULL, NULL, d));
  float *sbuf = mt_up(dev, NULL, tr_block_scratch_carve(NULL, NULL, d));
  tr_block_acts_carve(&a, abuf, d);
  tr_block_scratch_carve(&sc, sbuf, d);
  float *R = mt_normals(&r, N * C, 1, 0);
  float *dout = mt_up(dev, R, N * C), *dx = mt_up(dev, NULL, N * C);
  tr_block_bf16 h;
  size_t act16, scratch16;
  tr_block_bf16_carve(&h, NULL, NULL, d, &act16, &scratch16);
  tr_bf16 *a16 = bf16_buf(act16), *s16 = bf16_buf(scratch16);
  tr_block_bf16_carve(&h, a16, s16, d, &act16, &scratch16);
  h.qkvw = bf16_copy(p.qkvw, 3 * C * C), h.projw = bf16_copy(p.projw, C * C);
  h.fcw = bf16_copy(p.fcw, H * C), h.fcprojw = bf16_copy(p.fcprojw, C * H);
  const tr_block_bf16 *mp = bf16 ? &h : NULL;
  assert_int_equal(tr_block_forward(st, &a, &p, dp[0], d, mp), 0);
  assert_int_equal(tr_block_backward(st, dx, &g, &sc, dout, dp[0], &p, &a, d, mp), 0);
  float *out32 = mt_down(dev, a.out, N * C);
  ts[0].grad = mt_down(dev, dx, N * C);
  for (int k = 1; k < 13; k++) ts[k].grad = grad_added(dg[k], g0[k], sizes[k]);
  check("block", bf16, &d, block_ref, ts, 13, out32, N * C, R);
  /* dinp may be dout, or NULL: the parameter gradients come out the same either way */
  for (int k = 1; k < 13; k++) tr_memset(st, dg[k], 0, sizes[k] * 4);
  assert_int_equal(tr_block_backward(st, NULL, &g, &sc, dout, dp[0], &p, &a, d, mp), 0);
  assert_int_equal(tr_block_backward(st, dout, &g, &sc, dout, dp[0], &p, &a, d, mp), 0);
  float *dx2 = mt_down(dev, dout, N * C);
  assert_memory_equal(dx2, ts[0].grad, N * C * sizeof *dx2);
  for (int k = 1; k < 13; k++) {
    float *twice = mt_down(dev, dg[k], sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++)
      assert_true(fabsf(twice[i] - 2 * ts[k].grad[i]) <= 1e-5f * (1 + fabsf(ts[k].grad[i])));
    free(twice);
  }
  free(dx2), free(out32), free(R);
  for (int k = 0; k < 13; k++) {
    tr_device_free(dev, dp[k]);
    if (k) tr_device_free(dev, dg[k]), free(g0[k]);
  }
  free_tens(ts, 13);
  void *bufs[] = {abuf, sbuf, dout, dx, a16, s16, (void *)h.qkvw, (void *)h.projw, (void *)h.fcw,
                  (void *)h.fcprojw};
  for (size_t i = 0; i < 10; i++) tr_device_free(dev, bufs[i]);
}

static void block_gradients_match_finite_differences(void **state) {
  (void)state;
  check_block(0);
  check_block(1);
}

/* ---- losses ------------------------------------------------------------------------------------------ */

typedef struct loss_ctx {
  int N, V;
  double scale;
  const float *target;   /* MSE */
  const int32_t *labels; /* cross-entropy */
} loss_ctx;

static void mse_ref(const void *ctx, double *const *t, double *out) {
  const loss_ctx *c = ctx;
  double s = 0;
  for (int i = 0; i < c->N * c->V; i++) s += (t[0][i] - c->target[i]) * (t[0][i] - c->target[i]);
  out[0] = c->scale * s;
}

static void ce_ref(const void *ctx, double *const *t, double *out) {
  const loss_ctx *c = ctx;
  double s = 0;
  for (int n = 0; n < c->N; n++) {
    const double *z = t[0] + (size_t)n * c->V;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < c->V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < c->V; v++) sum += exp(z[v] - mx);
    s += log(sum) + mx - z[c->labels[n]];
  }
  out[0] = c->scale * s;
}

static void mse_gradient_matches_finite_differences(void **state) {
  (void)state;
  mt_rng r = mt_rng_for(60);
  const int N = 6, V = 5;
  const size_t n = (size_t)N * V;
  float *target = mt_normals(&r, n, 1, 0);
  const loss_ctx c = {N, V, 1.0 / (double)(2 * n), target, NULL};
  tens ts[1] = {{"pred", mt_normals(&r, n, 1, 0), n, NULL}};
  float *p = mt_up(dev, ts[0].h, n), *t = mt_up(dev, target, n), *loss = mt_up(dev, NULL, 1);
  float *dp = mt_up(dev, NULL, n);
  assert_int_equal(tr_mse_forward(st, loss, p, t, n, (float)c.scale), 0);
  assert_int_equal(tr_mse_backward(st, dp, p, t, n, (float)c.scale), 0);
  float *l32 = mt_down(dev, loss, 1);
  ts[0].grad = mt_down(dev, dp, n);
  gradcheck("mse", &c, mse_ref, ts, 1, l32, 1, NULL);
  free(l32), free(target);
  free_tens(ts, 1);
  float *bufs[] = {p, t, loss, dp};
  for (size_t i = 0; i < 4; i++) tr_device_free(dev, bufs[i]);
}

static void crossentropy_gradient_matches_finite_differences(void **state) {
  (void)state;
  mt_rng r = mt_rng_for(70);
  const int N = 7, V = 11;
  const size_t n = (size_t)N * V;
  int32_t labels[7];
  for (int i = 0; i < N; i++) labels[i] = (int32_t)(mt_next(&r) % (uint64_t)V);
  const loss_ctx c = {N, V, 1.0 / (2.0 * N), NULL, labels};
  tens ts[1] = {{"logits", mt_normals(&r, n, 3, 0), n, NULL}};
  float *z = mt_up(dev, ts[0].h, n), *probs = mt_up(dev, NULL, n), *loss = mt_up(dev, NULL, 1);
  int32_t *lab = (int32_t *)mt_up(dev, labels, (size_t)N);
  assert_int_equal(tr_crossentropy_forward(st, loss, probs, z, lab, N, V, (float)c.scale), 0);
  assert_int_equal(tr_crossentropy_backward(st, probs, probs, lab, N, V, (float)c.scale), 0);
  float *l32 = mt_down(dev, loss, 1);
  ts[0].grad = mt_down(dev, probs, n);
  gradcheck("crossentropy", &c, ce_ref, ts, 1, l32, 1, NULL);
  free(l32);
  free_tens(ts, 1);
  void *bufs[] = {z, probs, loss, lab};
  for (size_t i = 0; i < 4; i++) tr_device_free(dev, bufs[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(linear_gradients_match_finite_differences),
      cmocka_unit_test(relu_gradient_matches_finite_differences),
      cmocka_unit_test(gelu_gradient_matches_finite_differences),
      cmocka_unit_test(layernorm_gradients_match_finite_differences),
      cmocka_unit_test(embedding_gradients_match_finite_differences),
      cmocka_unit_test(attention_gradients_match_finite_differences),
      cmocka_unit_test(block_gradients_match_finite_differences),
      cmocka_unit_test(mse_gradient_matches_finite_differences),
      cmocka_unit_test(crossentropy_gradient_matches_finite_differences),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
