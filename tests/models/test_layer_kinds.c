/* test_layer_kinds.c — layer kinds through their tables and the stage API: dropout and
 * residual against float64 references (gradients by central differences, gradcheck.h),
 * dropout's masks the same however a batch is split (micro-batches, stages), its keep rate,
 * evaluation mode, residual's checks, names and deep copy, and a kind written here with the
 * public headers alone (tr_layer_type.h's example) that passes the same checks and trains. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "mtest.h"
#include "tr_device.h"
#include "tr_layer_type.h"
#include "tr_model.h"
#include "tr_stage.h"

static tr_device_list *devs;

static int setup(void **state) {
  (void)state;
  devs = mt_open(2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(devs);
  return 0;
}

enum { SEED = 11 };

/* ---- a kind of one's own: y = g x, one learned gain (gain_layer.h) ----------------------- */

#include "gain_layer.h"

/* ---- stages -------------------------------------------------------------------------------- */

static tr_model *model_of(int n, const tr_layer_spec *layers, int ctx, int batch) {
  const tr_model_spec sp = {.name = "kinds", .ctx = ctx, .loss = TR_LOSS_MSE, .nlayers = n,
                            .layers = layers, .batch = batch,
                            .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.05f)};
  tr_model *m;
  char err[256];
  int rc = tr_model_new(&m, &sp, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return m;
}

static tr_stage *stage_of(const tr_model *m, int dev, int first, int end, int batch, int slots,
                          int global_batch) {
  tr_stage_config c = tr_stage_defaults(m);
  c.first = first, c.end = end, c.batch = batch, c.slots = slots, c.global_batch = global_batch;
  c.seed = SEED;
  tr_stage *st;
  char err[256];
  int rc = tr_stage_open(&st, m, tr_device_list_at(devs, dev), &c, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return st;
}

static void sync(tr_stage *st) { assert_int_equal(tr_stream_synchronize(tr_stage_stream(st)), 0); }

static void put(tr_stage *st, void *dev, const void *host, size_t bytes) {
  assert_int_equal(tr_memcpy(tr_stage_stream(st), dev, host, bytes, TR_COPY_H2D), 0);
}

static float *get(tr_stage *st, const void *dev, size_t n) {
  float *h = malloc(n * sizeof *h);
  assert_int_equal(tr_memcpy(tr_stage_stream(st), h, dev, n * sizeof *h, TR_COPY_D2H), 0);
  sync(st);
  return h;
}

static void forward_ok(tr_stage *st, int slot) {
  int rc = tr_stage_forward(st, slot);
  if (rc) fprintf(stderr, "%s\n", tr_stage_error(st));
  assert_int_equal(rc, 0);
}

/* ---- one layer against float64, through the stage ------------------------------------------ */

/* The layer's float64 forward: t[0] the input (N,in), t[1..] its tensors -> out (N,out). */
typedef struct layer_ref {
  ref_fn out;
  const void *ctx;
  const float *y; /* MSE targets (N,out) */
  size_t n;
  double scale;
  double *buf;
} layer_ref;

static void mse_ref(const void *ctx, double *const *t, double *loss) {
  const layer_ref *r = ctx;
  r->out(r->ctx, t, r->buf);
  double s = 0;
  for (size_t i = 0; i < r->n; i++) s += (r->buf[i] - r->y[i]) * (r->buf[i] - r->y[i]);
  loss[0] = r->scale * s;
}

/* Model [Linear(3, in), spec] with MSE, ctx T; the stage of layer 1 alone (so backward
 * returns its input's gradient) on random parameters, input and targets, samples from
 * `first`; its loss, input gradient and parameter gradients against float64. */
static void check_layer(const char *what, tr_layer_spec spec, int B, int T, uint64_t first,
                        ref_fn out, const void *octx) {
  const tr_layer_spec layers[2] = {tr_layer_linear(3, spec.in, 1), spec};
  tr_model *m = model_of(2, layers, T, B);
  tr_stage *st = stage_of(m, 0, 1, 2, B, 1, B);
  const tr_stage_info *in = tr_stage_info_of(st);
  const size_t nx = (size_t)B * T * spec.in, ny = (size_t)B * T * spec.out;
  mt_rng r = mt_rng_for(first);
  float *x = mt_normals(&r, nx, 1, 1e-3), *y = mt_normals(&r, ny, 1, 0);
  float *params = mt_normals(&r, in->numel, 0.5, 0);
  assert_int_equal(tr_stage_upload(st, TR_STAGE_PARAMS, params), 0);
  put(st, tr_stage_input(st, 0), x, nx * 4);
  put(st, tr_stage_target(st, 0), y, ny * 4);
  tr_stage_set_samples(st, 0, first);
  assert_int_equal(tr_stage_zero_grads(st), 0);
  forward_ok(st, 0);
  const float *din;
  assert_int_equal(tr_stage_backward(st, 0, &din), 0);
  float *loss = get(st, tr_stage_loss(st, 0), 1), *dx = get(st, din, nx);
  float *grads = malloc(in->numel * sizeof *grads);
  assert_int_equal(tr_stage_download(st, TR_STAGE_GRADS, grads), 0);
  sync(st);

  int t0, nt;
  tr_model_layer_tensors(m, 1, &t0, &nt);
  tens ts[16] = {{"x", x, nx, dx}};
  assert_true(nt < 16);
  for (int k = 0; k < nt; k++) {
    const tr_tensor_info *ti = tr_model_tensor(m, t0 + k);
    const size_t off = ti->offset - in->offset;
    ts[1 + k] = (tens){ti->name, malloc(ti->numel * 4), ti->numel, malloc(ti->numel * 4)};
    memcpy(ts[1 + k].h, params + off, ti->numel * 4);
    memcpy(ts[1 + k].grad, grads + off, ti->numel * 4);
  }
  layer_ref lr = {out, octx, y, ny, 1.0 / (double)ny, malloc(ny * sizeof(double))};
  gradcheck(what, &lr, mse_ref, ts, 1 + nt, loss, 1, NULL);
  for (int k = 1; k <= nt; k++) free(ts[k].h), free(ts[k].grad);
  free(lr.buf), free(x), free(y), free(params), free(loss), free(dx), free(grads);
  tr_stage_close(st);
  tr_model_free(m);
}

/* ---- dropout --------------------------------------------------------------------------------- */

/* What tr_layer_dropout promises: element e of sample s of layer L is number s*T*C + e of
 * tr_dropout_mask's stream under tr_layer_seed(seed, L). */
static float *dropout_mask(int layer, float p, uint64_t first, size_t samples, size_t per_sample) {
  tr_device *d = tr_device_list_at(devs, 0);
  const size_t n = samples * per_sample;
  float *dm = mt_up(d, NULL, n);
  assert_int_equal(tr_dropout_mask(tr_device_stream(d), dm, n, p, 1.0f / (1.0f - p),
                                   tr_layer_seed(SEED, (uint64_t)layer), first * per_sample), 0);
  float *h = mt_down(d, dm, n);
  tr_device_free(d, dm);
  return h;
}

typedef struct mul_ctx {
  const float *mask;
  size_t n;
} mul_ctx;

static void dropout_ref(const void *ctx, double *const *t, double *out) {
  const mul_ctx *c = ctx;
  for (size_t i = 0; i < c->n; i++) out[i] = t[0][i] * (double)c->mask[i];
}

static void dropout_gradient_matches_finite_differences_for_a_fixed_mask(void **state) {
  (void)state;
  const int B = 3, T = 2, C = 5;
  const uint64_t first = 1000;
  float *mask = dropout_mask(1, 0.5f, first, B, (size_t)T * C);
  size_t kept = 0;
  for (int i = 0; i < B * T * C; i++) kept += mask[i] != 0;
  assert_true(kept > 0 && kept < (size_t)(B * T * C)); /* a mask that does something */
  const mul_ctx c = {mask, (size_t)B * T * C};
  check_layer("dropout", tr_layer_dropout(C, 0.5f), B, T, first, dropout_ref, &c);
  free(mask);
}

/* Model: Linear -> Residual(Dropout, Linear) -> Dropout -> Linear, ctx 2. The whole batch of
 * 6 in one slot, then in two micro-batches of 3, then cut into two stages on two devices
 * with two micro-batches each: the same outputs bit for bit, the same gradients to rounding,
 * and outputs unlike evaluation mode's (the masks drop something). */
static void dropout_masks_do_not_depend_on_how_the_batch_is_split(void **state) {
  (void)state;
  const tr_layer_spec inner[2] = {tr_layer_dropout(6, 0.5f), tr_layer_linear(6, 6, 1)};
  const tr_layer_spec layers[4] = {tr_layer_linear(4, 6, 1), tr_layer_residual(2, inner),
                                   tr_layer_dropout(6, 0.3f), tr_layer_linear(6, 2, 1)};
  enum { B = 6, T = 2, HALF = 3 };
  const uint64_t first = 100;
  tr_model *m = model_of(4, layers, T, B);
  mt_rng r = mt_rng_for(7);
  float *x = mt_normals(&r, B * T * 4, 1, 0), *y = mt_normals(&r, B * T * 2, 1, 0);
  const size_t N = tr_model_numel(m), nout = B * T * 2, xh = HALF * T * 4, yh = HALF * T * 2;

  /* one slot */
  tr_stage *whole = stage_of(m, 0, 0, 4, B, 1, B);
  put(whole, tr_stage_input(whole, 0), x, sizeof(float) * B * T * 4);
  put(whole, tr_stage_target(whole, 0), y, sizeof(float) * nout);
  tr_stage_set_samples(whole, 0, first);
  forward_ok(whole, 0);
  assert_int_equal(tr_stage_backward(whole, 0, NULL), 0);
  float *out = get(whole, tr_stage_output(whole, 0), nout), *grads = malloc(N * 4);
  assert_int_equal(tr_stage_download(whole, TR_STAGE_GRADS, grads), 0);
  tr_stage_set_training(whole, 0);
  forward_ok(whole, 0);
  float *eval = get(whole, tr_stage_output(whole, 0), nout);
  assert_true(memcmp(eval, out, nout * 4) != 0);
  tr_stage_close(whole);

  /* two micro-batches on one stage */
  tr_stage *mb = stage_of(m, 0, 0, 4, HALF, 2, B);
  for (int k = 0; k < 2; k++) {
    put(mb, tr_stage_input(mb, k), x + k * xh, xh * 4);
    put(mb, tr_stage_target(mb, k), y + k * yh, yh * 4);
    tr_stage_set_samples(mb, k, first + (uint64_t)k * HALF);
    forward_ok(mb, k);
  }
  for (int k = 0; k < 2; k++) {
    float *o = get(mb, tr_stage_output(mb, k), yh);
    assert_memory_equal(o, out + k * yh, yh * 4);
    free(o);
    assert_int_equal(tr_stage_backward(mb, k, NULL), 0);
  }
  float *g = malloc(N * 4);
  assert_int_equal(tr_stage_download(mb, TR_STAGE_GRADS, g), 0);
  sync(mb);
  fprintf(stderr, "micro-batches: gradients differ by %.1e (normalised)\n", mt_nerr_f(g, grads, N));
  assert_true(mt_nerr_f(g, grads, N) <= 1e-10);
  tr_stage_close(mb);

  /* two stages on two devices, two micro-batches each; activations pass through the host */
  tr_stage *st[2] = {stage_of(m, 0, 0, 2, HALF, 2, B), stage_of(m, 1, 2, 4, HALF, 2, B)};
  const size_t act = HALF * T * 6;
  for (int k = 0; k < 2; k++) {
    put(st[0], tr_stage_input(st[0], k), x + k * xh, xh * 4);
    put(st[1], tr_stage_target(st[1], k), y + k * yh, yh * 4);
    for (int s = 0; s < 2; s++) tr_stage_set_samples(st[s], k, first + (uint64_t)k * HALF);
    forward_ok(st[0], k);
    float *a = get(st[0], tr_stage_output(st[0], k), act);
    put(st[1], tr_stage_input(st[1], k), a, act * 4);
    free(a);
    forward_ok(st[1], k);
    float *o = get(st[1], tr_stage_output(st[1], k), yh);
    assert_memory_equal(o, out + k * yh, yh * 4);
    free(o);
    const float *din;
    assert_int_equal(tr_stage_backward(st[1], k, &din), 0);
    float *d = get(st[1], din, act);
    put(st[0], tr_stage_dout(st[0], k), d, act * 4);
    free(d);
    assert_int_equal(tr_stage_backward(st[0], k, NULL), 0);
  }
  for (int s = 0; s < 2; s++) {
    assert_int_equal(tr_stage_download(st[s], TR_STAGE_GRADS, g + tr_stage_info_of(st[s])->offset), 0);
    sync(st[s]);
  }
  fprintf(stderr, "stages: gradients differ by %.1e (normalised)\n", mt_nerr_f(g, grads, N));
  assert_true(mt_nerr_f(g, grads, N) <= 1e-10);
  tr_stage_close(st[0]);
  tr_stage_close(st[1]);
  free(x), free(y), free(out), free(eval), free(grads), free(g);
  tr_model_free(m);
}

enum { ONES_B = 8, ONES_W = 4096, ONES_N = ONES_B * ONES_W };

/* Layer 1 of [Linear(3, ONES_W), spec] on a micro-batch of ones, samples from `first`: its
 * output (ONES_N floats). */
static float *ones_through(tr_layer_spec spec, uint64_t first) {
  const tr_layer_spec layers[2] = {tr_layer_linear(3, ONES_W, 1), spec};
  tr_model *m = model_of(2, layers, 1, ONES_B);
  tr_stage *st = stage_of(m, 0, 1, 2, ONES_B, 1, ONES_B);
  float *ones = malloc(ONES_N * 4);
  for (size_t i = 0; i < ONES_N; i++) ones[i] = 1.0f;
  put(st, tr_stage_input(st, 0), ones, ONES_N * 4);
  tr_stage_set_samples(st, 0, first);
  forward_ok(st, 0);
  float *out = get(st, tr_stage_output(st, 0), ONES_N);
  free(ones);
  tr_stage_close(st);
  tr_model_free(m);
  return out;
}

/* How many of out are `hit`, asserting every other one is `miss`: within 5 standard
 * deviations of a binomial count of probability q. */
static void expect_fraction(const char *what, const float *out, float hit, float miss, double q) {
  size_t count = 0;
  for (size_t i = 0; i < ONES_N; i++) {
    assert_true(out[i] == hit || out[i] == miss);
    count += out[i] == hit;
  }
  const double want = q * ONES_N, sd = sqrt(ONES_N * q * (1 - q));
  fprintf(stderr, "%s: %zu of %d (expected %.0f)\n", what, count, ONES_N, want);
  assert_true(fabs((double)count - want) <= 5 * sd);
}

/* Ones through Dropout(p 0.25): every output 0 or 4/3 exactly, about 3/4 of them kept;
 * other samples, other masks. */
static void dropout_keeps_about_one_minus_p_and_scales_the_rest(void **state) {
  (void)state;
  float *out = ones_through(tr_layer_dropout(ONES_W, 0.25f), 0);
  float *other = ones_through(tr_layer_dropout(ONES_W, 0.25f), ONES_B);
  expect_fraction("dropout kept", out, (float)(1.0 / 0.75), 0.0f, 0.75);
  assert_true(memcmp(out, other, ONES_N * 4) != 0);
  free(out), free(other);
}

/* Two dropouts in a row inside a residual, each p 1/2, on ones: 1 + f(1) is 5 where both
 * kept (a quarter of the elements, were the masks independent; half, were they one mask)
 * and 1 elsewhere. */
static void dropout_layers_draw_independent_masks(void **state) {
  (void)state;
  const tr_layer_spec two[2] = {tr_layer_dropout(ONES_W, 0.5f), tr_layer_dropout(ONES_W, 0.5f)};
  float *out = ones_through(tr_layer_residual(2, two), 0);
  expect_fraction("two dropouts both kept", out, 5.0f, 1.0f, 0.25);
  free(out);
}

/* In evaluation dropout passes its input and its gradient through unchanged, and needs no
 * sample positions; in training without them, forward fails and says why. */
static void dropout_is_the_identity_in_evaluation(void **state) {
  (void)state;
  enum { B = 4, W = 9 };
  const size_t n = (size_t)B * W;
  const tr_layer_spec layers[3] = {tr_layer_linear(3, W, 1), tr_layer_dropout(W, 0.5f),
                                   tr_layer_linear(W, 1, 1)};
  tr_model *m = model_of(3, layers, 1, B);
  tr_stage *st = stage_of(m, 0, 1, 2, B, 1, B);
  mt_rng r = mt_rng_for(9);
  float *x = mt_normals(&r, n, 1, 0), *dout = mt_normals(&r, n, 1, 0);
  put(st, tr_stage_input(st, 0), x, n * 4);
  put(st, tr_stage_dout(st, 0), dout, n * 4);
  assert_int_equal(tr_stage_forward(st, 0), TR_EINVAL);
  fprintf(stderr, "%s\n", tr_stage_error(st));
  assert_non_null(strstr(tr_stage_error(st), "layer 1 (dropout)"));
  assert_non_null(strstr(tr_stage_error(st), "tr_stage_set_samples"));
  tr_stage_set_training(st, 0);
  forward_ok(st, 0);
  const float *din;
  assert_int_equal(tr_stage_backward(st, 0, &din), 0);
  float *o = get(st, tr_stage_output(st, 0), n), *d = get(st, din, n);
  assert_memory_equal(o, x, n * 4);
  assert_memory_equal(d, dout, n * 4);
  free(x), free(dout), free(o), free(d);
  tr_stage_close(st);
  tr_model_free(m);
}

/* ---- residual ----------------------------------------------------------------------------------- */

typedef struct mlp_ctx {
  int N, C, H;
} mlp_ctx;

/* x + Linear(H,C)(gelu(Linear(C,H)(x))): t[1..4] the two weights and biases */
static void residual_mlp_ref(const void *ctx, double *const *t, double *out) {
  const mlp_ctx *c = ctx;
  double *h = malloc((size_t)c->N * c->H * sizeof *h);
  lin64(h, t[0], t[1], t[2], c->N, c->C, c->H);
  for (int i = 0; i < c->N * c->H; i++) h[i] = gelu64(h[i]);
  lin64(out, h, t[3], t[4], c->N, c->H, c->C);
  for (int i = 0; i < c->N * c->C; i++) out[i] += t[0][i];
  free(h);
}

/* x + gelu(x + Linear(C,C)(x)): a residual inside a residual */
static void residual_nested_ref(const void *ctx, double *const *t, double *out) {
  const mlp_ctx *c = ctx;
  lin64(out, t[0], t[1], t[2], c->N, c->C, c->C);
  for (int i = 0; i < c->N * c->C; i++) out[i] = t[0][i] + gelu64(t[0][i] + out[i]);
}

static void residual_gradients_match_finite_differences(void **state) {
  (void)state;
  const int B = 3, T = 2, C = 5, H = 7;
  const mlp_ctx c = {B * T, C, H};
  const tr_layer_spec mlp[3] = {tr_layer_linear(C, H, 1), tr_layer_gelu(H), tr_layer_linear(H, C, 1)};
  check_layer("residual", tr_layer_residual(3, mlp), B, T, 0, residual_mlp_ref, &c);
  const tr_layer_spec lin[1] = {tr_layer_linear(C, C, 1)};
  const tr_layer_spec nested[2] = {tr_layer_residual(1, lin), tr_layer_gelu(C)};
  check_layer("residual/nested", tr_layer_residual(2, nested), B, T, 0, residual_nested_ref, &c);
}

/* PyTorch-Sequential names, one layer for cutting, the FLOPs of its inner layers, and specs
 * copied: the caller's arrays may go once the model exists. */
static void residual_is_one_layer_named_and_copied_as_pytorch_would(void **state) {
  (void)state;
  tr_layer_spec lin[1] = {tr_layer_linear(4, 4, 1)};
  tr_layer_spec mlp[3] = {tr_layer_linear(4, 8, 1), tr_layer_relu(8), tr_layer_linear(8, 4, 0)};
  tr_layer_spec nested[2] = {tr_layer_residual(1, lin), tr_layer_dropout(4, 0.1f)};
  const tr_layer_spec layers[4] = {tr_layer_linear(3, 4, 1), tr_layer_residual(3, mlp),
                                   tr_layer_residual(2, nested), tr_layer_linear(4, 1, 1)};
  tr_model *m = model_of(4, layers, 2, 4);
  memset(lin, 0xff, sizeof lin), memset(mlp, 0xff, sizeof mlp), memset(nested, 0xff, sizeof nested);
  static const char *names[] = {"0.weight", "0.bias", "1.0.weight", "1.0.bias", "1.2.weight",
                                "2.0.0.weight", "2.0.0.bias", "3.weight", "3.bias"};
  static const int64_t shapes[][2] = {{4, 3}, {4, 0}, {8, 4}, {8, 0}, {4, 8}, {4, 4}, {4, 0}, {1, 4}, {1, 0}};
  static const int layer_of[] = {0, 0, 1, 1, 1, 2, 2, 3, 3};
  assert_int_equal(tr_model_tensor_count(m), 9);
  for (int i = 0; i < 9; i++) {
    const tr_tensor_info *t = tr_model_tensor(m, i);
    assert_string_equal(t->name, names[i]);
    assert_true(t->shape[0] == shapes[i][0] && t->shape[1] == shapes[i][1]);
    assert_int_equal(t->layer, layer_of[i]);
  }
  assert_int_equal(tr_model_layer_count(m), 4);
  assert_true(tr_model_layer(m, 1)->inner[2].type == &tr_layer_linear_type &&
              tr_model_layer(m, 1)->inner[2].in == 8);
  assert_true(tr_model_layer(m, 2)->inner[0].inner[0].out == 4);
  assert_true(tr_model_layer_flops(m, 1) == 2.0 * 2 * (4 * 8 + 8 * 4));
  assert_true(tr_model_layer_flops(m, 2) == 2.0 * 2 * 4 * 4);
  assert_true(tr_model_train_flops(m) == 3 * 2.0 * 2 * (3 * 4 + 4 * 8 + 8 * 4 + 4 * 4 + 4));
  int cuts[5];
  assert_int_equal(tr_model_balance(m, 4, cuts), 0);
  for (int k = 0; k <= 4; k++) assert_int_equal(cuts[k], k);
  /* the copy runs */
  tr_stage *st = stage_of(m, 0, 0, 4, 4, 1, 4);
  tr_stage_set_samples(st, 0, 0);
  forward_ok(st, 0);
  assert_int_equal(tr_stage_backward(st, 0, NULL), 0);
  tr_stage_close(st);
  tr_model_free(m);
}

/* Checks name the layer at fault, inside a residual too. */
static void residual_and_dropout_specs_are_checked(void **state) {
  (void)state;
  const tr_layer_spec away[2] = {tr_layer_linear(4, 8, 1), tr_layer_relu(8)};
  const tr_layer_spec broken[2] = {tr_layer_linear(4, 8, 1), tr_layer_linear(5, 4, 1)};
  const tr_layer_spec tokens[1] = {tr_layer_embedding(10, 4)};
  const tr_layer_spec cases[][2] = {
      {tr_layer_linear(3, 4, 1), tr_layer_residual(2, away)},
      {tr_layer_linear(3, 4, 1), tr_layer_residual(2, broken)},
      {tr_layer_linear(3, 4, 1),
       {.type = &tr_layer_residual_type, .in = 4, .out = 4, .n = 1, .inner = tokens}},
      {tr_layer_linear(3, 4, 1), tr_layer_residual(0, NULL)},
      {tr_layer_linear(3, 4, 1), tr_layer_dropout(4, 1.0f)},
      {tr_layer_linear(3, 4, 1), {.type = &gain_type, .in = 4, .out = 5}},
  };
  const char *says[][2] = {{"layer 1 (residual)", "lead from width 4 to 8"},
                           {"layer 1 (residual)", "layer 1 (linear): takes width 5, is given 8"},
                           {"layer 1 (residual)", "layer 0 (embedding): takes tokens"},
                           {"layer 1 (residual)", "widths 0 -> 0 must be positive"},
                           {"layer 1 (dropout)", "p 1 must lie in [0,1)"},
                           {"layer 1 (gain)", "out must equal in"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const tr_model_spec sp = {.name = "bad", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 2,
                              .layers = cases[i], .batch = 1};
    tr_model *m = (tr_model *)1;
    char err[256] = "";
    assert_int_equal(tr_model_new(&m, &sp, err, sizeof err), TR_EINVAL);
    fprintf(stderr, "%s\n", err);
    assert_null(m);
    assert_non_null(strstr(err, says[i][0]));
    assert_non_null(strstr(err, says[i][1]));
  }
}

/* ---- the kind of one's own -------------------------------------------------------------------- */

static void gain_ref(const void *ctx, double *const *t, double *out) {
  const size_t *n = ctx;
  for (size_t i = 0; i < *n; i++) out[i] = t[1][0] * t[0][i];
}

static void a_user_kind_passes_the_gradient_check(void **state) {
  (void)state;
  const int B = 3, T = 2, C = 5;
  const size_t n = (size_t)B * T * C;
  check_layer("gain", (tr_layer_spec){.type = &gain_type, .in = C, .out = C}, B, T, 0, gain_ref, &n);
}

/* Linear(4,16) -> gain -> ReLU -> Linear(16,1) learns a fixed batch: the loss falls to a
 * quarter, and the gain moves. */
static void a_model_with_a_user_kind_trains(void **state) {
  (void)state;
  enum { B = 32, STEPS = 150 };
  const tr_layer_spec layers[4] = {tr_layer_linear(4, 16, 1), {.type = &gain_type, .in = 16, .out = 16},
                                   tr_layer_relu(16), tr_layer_linear(16, 1, 1)};
  tr_model *m = model_of(4, layers, 1, B);
  tr_stage *st = stage_of(m, 0, 0, 4, B, 1, B);
  mt_rng r = mt_rng_for(12);
  float *x = mt_normals(&r, B * 4, 1, 0), y[B];
  for (int i = 0; i < B; i++)
    y[i] = 0.5f * x[4 * i] - x[4 * i + 1] + 0.25f * fabsf(x[4 * i + 2]) * x[4 * i + 3];
  put(st, tr_stage_input(st, 0), x, sizeof(float) * B * 4);
  put(st, tr_stage_target(st, 0), y, sizeof y);
  float first = 0, last = 0;
  for (int step = 0; step < STEPS; step++) {
    tr_stage_set_samples(st, 0, (uint64_t)step * B);
    assert_int_equal(tr_stage_zero_grads(st), 0);
    forward_ok(st, 0);
    assert_int_equal(tr_stage_backward(st, 0, NULL), 0);
    assert_int_equal(tr_stage_step(st, NULL), 0);
    float *loss = get(st, tr_stage_loss(st, 0), 1);
    if (step == 0) first = *loss;
    last = *loss;
    free(loss);
  }
  int t0, nt;
  tr_model_layer_tensors(m, 1, &t0, &nt);
  assert_int_equal(nt, 1);
  assert_string_equal(tr_model_tensor(m, t0)->name, "1.gain");
  float *p = malloc(tr_model_numel(m) * 4);
  assert_int_equal(tr_stage_download(st, TR_STAGE_PARAMS, p), 0);
  sync(st);
  const float gain = p[tr_model_tensor(m, t0)->offset];
  fprintf(stderr, "gain kind: loss %.4f -> %.4f, gain 1 -> %.4f\n", (double)first, (double)last,
          (double)gain);
  assert_true(isfinite(last) && last < 0.25f * first);
  assert_true(gain != 1.0f && isfinite(gain));
  free(p), free(x);
  tr_stage_close(st);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dropout_gradient_matches_finite_differences_for_a_fixed_mask),
      cmocka_unit_test(dropout_masks_do_not_depend_on_how_the_batch_is_split),
      cmocka_unit_test(dropout_keeps_about_one_minus_p_and_scales_the_rest),
      cmocka_unit_test(dropout_layers_draw_independent_masks),
      cmocka_unit_test(dropout_is_the_identity_in_evaluation),
      cmocka_unit_test(residual_gradients_match_finite_differences),
      cmocka_unit_test(residual_is_one_layer_named_and_copied_as_pytorch_would),
      cmocka_unit_test(residual_and_dropout_specs_are_checked),
      cmocka_unit_test(a_user_kind_passes_the_gradient_check),
      cmocka_unit_test(a_model_with_a_user_kind_trains),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
