/* test_user_kinds.c — an optimizer and a loss of the user's own, defined here with the public
 * headers and the device API alone, as tr_optim.h and tr_loss.h say: sign-SGD and a
 * label-smoothed cross-entropy. They act as defined (sign-SGD moves each parameter by -+lr,
 * or not at all where its gradient is zero; the smoothed loss, its per-sample values and its
 * gradient match a hand computation), they train single, a 2-stage pipeline and dp on host
 * devices, a resumed run is bitwise the uninterrupted one, and a resume into a kind that
 * differs or is not registered is refused, naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "kinds"
#include "scratch.h"
#include "compare.h"
#include "specs.h"

/* ---- sign-SGD: param -= lr * sign(grad), from relu_backward's masks ------------------------------ */

static int sign_update(const tr_optim_ctx *c) {
  float *pos = c->scratch, *neg = c->scratch + c->n;
  int rc = tr_fill(c->s, pos, c->n, 1.0f);
  if (!rc) rc = tr_relu_backward(c->s, pos, c->grad, pos, c->n); /* 1 where grad > 0 */
  if (!rc) rc = tr_memcpy(c->s, neg, c->grad, c->n * sizeof(float), TR_COPY_D2D);
  if (!rc) rc = tr_scale(c->s, neg, -1.0f, c->n);
  if (!rc) rc = tr_axpy(c->s, c->param, -c->o->lr, pos, c->n);
  if (!rc) rc = tr_fill(c->s, pos, c->n, 1.0f);
  if (!rc) rc = tr_relu_backward(c->s, pos, neg, pos, c->n); /* 1 where grad < 0 */
  return rc ? rc : tr_axpy(c->s, c->param, c->o->lr, pos, c->n);
}

static const tr_optim_type signsgd = {.name = "signsgd", .scratch_copies = 2,
                                      .update = sign_update};
/* The same update under a name never registered. */
static const tr_optim_type stray = {.name = "stray-signsgd", .scratch_copies = 2,
                                    .update = sign_update};

/* ---- cross-entropy with label smoothing (PyTorch's label_smoothing) ----------------------------
 *
 * A row's loss against the target distribution (1 - e) onehot + e / V is
 *   CE + e z_y - (e / V) sum_c z_c     (z the logits, CE = -log softmax(z)_y),
 * so the batch's is cross-entropy's plus scale * sum q z with q = e onehot - e / V, and its
 * gradient cross-entropy's plus scale * q. The one-hot rows come from crossentropy_backward on zero
 * probabilities with scale -1. */

#define EPS 0.1f

static size_t rows_by_width(int N, int V) { return (size_t)N * V; }

/* scratch = onehot(targets) */
static int onehot(const tr_loss_ctx *c) {
  const size_t n = (size_t)c->N * c->V;
  int rc = tr_memset(c->s, c->scratch, 0, n * sizeof(float));
  return rc ? rc : tr_crossentropy_backward(c->s, c->scratch, c->scratch, c->target, c->N, c->V, -1.0f);
}

static int smooth_forward(const tr_loss_ctx *c, float *loss) {
  const size_t n = (size_t)c->N * c->V;
  int rc = tr_crossentropy_forward(c->s, loss, c->keep, c->pred, c->target, c->N, c->V, c->scale);
  if (!rc) rc = onehot(c);
  if (!rc) rc = tr_mul(c->s, c->scratch, c->scratch, c->pred, n);  /* z_y at the targets */
  if (!rc) rc = tr_scale(c->s, c->scratch, c->scale * EPS, n);
  if (!rc) rc = tr_sum(c->s, loss, c->scratch, n, 1);
  if (!rc) rc = tr_memcpy(c->s, c->scratch, c->pred, n * sizeof(float), TR_COPY_D2D);
  if (!rc) rc = tr_scale(c->s, c->scratch, -c->scale * EPS / (float)c->V, n);
  return rc ? rc : tr_sum(c->s, loss, c->scratch, n, 1);
}

static int smooth_backward(const tr_loss_ctx *c, float *dpred) {
  const size_t n = (size_t)c->N * c->V;
  int rc = tr_crossentropy_backward(c->s, dpred, c->keep, c->target, c->N, c->V, c->scale);
  if (!rc) rc = onehot(c);
  if (!rc) rc = tr_scale(c->s, c->scratch, c->scale * EPS, n);
  if (!rc) rc = tr_add(c->s, dpred, dpred, c->scratch, n);
  if (!rc) rc = tr_fill(c->s, c->scratch, n, -c->scale * EPS / (float)c->V);
  return rc ? rc : tr_add(c->s, dpred, dpred, c->scratch, n);
}

static const tr_loss_type smoothed = {
    .name = "smoothed-crossentropy", .target = TR_LOSS_TARGET_CLASSES, .mean = TR_LOSS_MEAN_ROWS,
    .accuracy = 1, .keep_floats = rows_by_width, .scratch_floats = rows_by_width,
    .forward = smooth_forward, .backward = smooth_backward};

/* A classifier of 16 floats into 8 classes. */
static const tr_layer_spec net_layers[] = {
    LINEAR(16, 32, 1), RELU(32), LINEAR(32, 32, 1), RELU(32), LINEAR(32, 8, 1),
};
static const tr_model_spec net = {.name = "smoothnet", .ctx = 1, .loss = &smoothed,
                                  .nlayers = 5, .layers = net_layers, .batch = 32,
                                  .optim = {.kind = &signsgd, .lr = 1e-3f}};

static tr_device_list *devs;

static int group_setup(void **state) {
  char err[256];
  if (setup(state)) return -1;
  if (tr_optim_register(&signsgd, err, sizeof err) || tr_loss_register(&smoothed, err, sizeof err) ||
      tr_device_list_open(&devs, "host:1", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  tr_device_list_close(devs);
  return teardown(state);
}

/* A stage of the whole model on the host device, its parameters uploaded when given. */
static tr_stage *open_stage(const tr_model *m, int batch, const float *params) {
  tr_device *d = tr_device_list_at(devs, 0);
  assert_int_equal(tr_device_bind(d), 0);
  tr_stage_config c = tr_stage_defaults(m);
  c.batch = c.global_batch = batch;
  tr_stage *st;
  char err[512];
  if (tr_stage_open(&st, m, d, &c, err, sizeof err)) fail_msg("%s", err);
  if (params) assert_int_equal(tr_stage_upload(st, TR_STAGE_PARAMS, params), 0);
  return st;
}

static float *download(tr_stage *st, tr_stage_buffer which, size_t n) {
  float *h = malloc(n * sizeof *h);
  assert_int_equal(tr_stage_download(st, which, h), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(st)), 0);
  return h;
}

/* ---- they act as defined -------------------------------------------------------------------- */

static void kinds_are_found_by_name_and_bad_tables_are_refused(void **state) {
  (void)state;
  tr_optim_kind o;
  tr_loss_kind l;
  char err[256];
  assert_int_equal(tr_optim_kind_parse("signsgd", &o), 0);
  assert_ptr_equal(o, &signsgd);
  assert_int_equal(tr_optim_kind_parse("adamw", &o), 0);
  assert_ptr_equal(o, TR_OPTIM_ADAMW);
  assert_int_equal(tr_loss_kind_parse("smoothed-crossentropy", &l), 0);
  assert_ptr_equal(l, &smoothed);
  assert_int_equal(tr_optim_kind_parse("stray-signsgd", &o), TR_EINVAL);
  assert_false(tr_optim_registered(&stray));
  assert_int_equal(tr_optim_register(&signsgd, err, sizeof err), 0); /* again: a no-op */
  char names[256];
  tr_optim_kind_names(names, sizeof names);
  assert_string_equal(names, "sgd, momentum, adamw, signsgd");
  /* another table of a taken name, a state without names, a loss without backward */
  const tr_optim_type twin = {.name = "adamw", .update = sign_update};
  assert_int_equal(tr_optim_register(&twin, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "'adamw'"));
  const tr_optim_type unnamed = {.name = "lion", .state_copies = 1, .update = sign_update};
  assert_int_equal(tr_optim_register(&unnamed, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "'lion'"));
  assert_non_null(strstr(err, "state_names"));
  const tr_loss_type half = {.name = "half", .forward = smooth_forward};
  assert_int_equal(tr_loss_register(&half, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "'half'"));
  /* a model of such a loss is refused too, naming it */
  tr_model_spec bad = net;
  bad.loss = &half;
  tr_model *m;
  assert_int_equal(tr_model_new(&m, &bad, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "'half'"));
}

/* A tiny case: gradients of both signs and zeros (padding among them) move each parameter by
 * exactly -lr, +lr or nothing; two steps to see scratch reused. */
static void sign_sgd_moves_each_parameter_by_lr(void **state) {
  (void)state;
  const tr_layer_spec layers[] = {LINEAR(3, 2, 1)};
  const tr_model_spec spec = {.name = "tiny", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 1,
                              .layers = layers, .batch = 1,
                              .optim = tr_optim_defaults(&signsgd, 0.25f)};
  tr_model *m;
  char err[256];
  assert_int_equal(tr_model_new(&m, &spec, err, sizeof err), 0);
  tr_stage *st = open_stage(m, 1, NULL);
  assert_int_equal(tr_stage_info_of(st)->state_numel, 0);
  const size_t N = tr_model_numel(m); /* weight (2,3) at 0, bias (2) at 16: 32 */
  float *g = calloc(N, sizeof *g);
  const float w[6] = {0.5f, -2.0f, 0.0f, 1e-30f, -1e-30f, 3.0f}, b[2] = {-0.125f, 0.0f};
  memcpy(g, w, sizeof w);
  memcpy(g + 16, b, sizeof b);
  for (int step = 1; step <= 2; step++) {
    float *before = download(st, TR_STAGE_PARAMS, N);
    assert_int_equal(tr_stage_upload(st, TR_STAGE_GRADS, g), 0);
    assert_int_equal(tr_stage_step(st, NULL), 0);
    float *after = download(st, TR_STAGE_PARAMS, N);
    for (size_t i = 0; i < N; i++) {
      const float want = g[i] > 0 ? before[i] - 0.25f : g[i] < 0 ? before[i] + 0.25f : before[i];
      if (memcmp(&after[i], &want, sizeof want))
        fail_msg("step %d, element %zu: %g, want %g (grad %g)", step, i, after[i], want, g[i]);
    }
    free(before), free(after);
  }
  assert_int_equal(tr_stage_step_count(st), 2);
  free(g);
  tr_stage_close(st);
  tr_model_free(m);
}

/* ZeRO cuts a kind's state where it cuts the parameters only when the table says its update
 * is element-wise: a stage given a shard of a kind that says otherwise is refused, by name. */
static void zero_refuses_a_kind_that_is_not_elementwise(void **state) {
  (void)state;
  static const char *const norms[] = {"norm"};
  const tr_optim_type lars = {.name = "lars", .state_copies = 1, .state_names = norms,
                              .zero = TR_OPTIM_ZERO_REFUSED, .update = sign_update};
  const tr_layer_spec layers[] = {LINEAR(3, 2, 1)};
  const tr_model_spec spec = {.name = "tiny", .ctx = 1, .nlayers = 1, .layers = layers,
                              .batch = 1, .optim = tr_optim_defaults(&lars, 0.1f)};
  tr_model *m;
  char err[512];
  assert_int_equal(tr_model_new(&m, &spec, err, sizeof err), 0);
  tr_device *d = tr_device_list_at(devs, 0);
  assert_int_equal(tr_device_bind(d), 0);
  tr_stage_config c = tr_stage_defaults(m);
  tr_stage *st;
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), 0); /* whole: fine */
  assert_int_equal(tr_stage_info_of(st)->state_numel, tr_model_numel(m));
  tr_stage_close(st);
  c.shard = (tr_stage_shard){.count = 2, .index = 1};
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), TR_EINVAL);
  assert_null(st);
  assert_non_null(strstr(err, "'lars'"));
  assert_non_null(strstr(err, "ZeRO"));
  c.optim = tr_optim_defaults(&signsgd, 0.1f); /* element-wise: sharded */
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), 0);
  tr_stage_close(st);
  tr_model_free(m);
}

/* One linear layer without bias, logits z = x W^T: the loss, each sample's, and the weights'
 * gradient in double against the definition, -sum_c q_c log softmax(z)_c. */
static void smoothed_loss_matches_a_hand_computation(void **state) {
  (void)state;
  enum { B = 3, C = 4, V = 5 };
  const tr_layer_spec layers[] = {LINEAR(C, V, 0)};
  const tr_model_spec spec = {.name = "lin", .ctx = 1, .loss = &smoothed, .nlayers = 1,
                              .layers = layers, .batch = B};
  tr_model *m;
  char err[256];
  assert_int_equal(tr_model_new(&m, &spec, err, sizeof err), 0);
  assert_int_equal(tr_model_target_bytes(m), sizeof(int32_t));
  float W[32] = {0}; /* (V, C) = 20 elements, padded to 32 */
  for (int i = 0; i < V * C; i++) W[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
  const float x[B * C] = {1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f, 0, 1.5f, -3, 1};
  const int32_t y[B] = {2, 0, 4};
  tr_stage *st = open_stage(m, B, W);
  assert_int_equal(tr_stage_zero_grads(st), 0);
  assert_int_equal(tr_memcpy(tr_stage_stream(st), tr_stage_input(st, 0), x, sizeof x, TR_COPY_H2D), 0);
  assert_int_equal(tr_memcpy(tr_stage_stream(st), tr_stage_target(st, 0), y, sizeof y, TR_COPY_H2D), 0);
  assert_int_equal(tr_stage_forward(st, 0), 0);
  float loss, *per;
  assert_int_equal(tr_device_alloc(tr_stage_device(st), B * sizeof(float), (void **)&per), 0);
  assert_int_equal(tr_stage_sample_losses(st, 0, per), 0);
  assert_int_equal(tr_stage_backward(st, 0, NULL), 0);
  float sample[B];
  assert_int_equal(tr_memcpy(tr_stage_stream(st), &loss, tr_stage_loss(st, 0), 4, TR_COPY_D2H), 0);
  assert_int_equal(tr_memcpy(tr_stage_stream(st), sample, per, sizeof sample, TR_COPY_D2H), 0);
  float *dW = download(st, TR_STAGE_GRADS, 32);
  double want = 0, plain = 0, wantW[V * C] = {0}, mean = 0;
  for (int b = 0; b < B; b++) {
    double z[V], zmax = -INFINITY, sum = 0, l = 0;
    for (int v = 0; v < V; v++) {
      z[v] = 0;
      for (int c = 0; c < C; c++) z[v] += (double)x[b * C + c] * W[v * C + c];
      zmax = fmax(zmax, z[v]);
    }
    for (int v = 0; v < V; v++) sum += exp(z[v] - zmax);
    for (int v = 0; v < V; v++) {
      const double logp = z[v] - zmax - log(sum), q = (v == y[b] ? 1 - EPS : 0) + EPS / V;
      l -= q * logp;
      if (v == y[b]) plain -= logp / B;
      for (int c = 0; c < C; c++) wantW[v * C + c] += (exp(logp) - q) * x[b * C + c] / B;
    }
    assert_true(fabs(sample[b] - l) < 1e-5 * fabs(l));
    want += l / B;
    mean += sample[b] / B;
  }
  fprintf(stderr, "smoothed loss %.7f, by hand %.7f\n", loss, want);
  assert_true(fabs(loss - want) < 1e-5 * want);
  for (int i = 0; i < V * C; i++)
    if (!(fabs(dW[i] - wantW[i]) < 1e-5)) fail_msg("dW[%d] %g, by hand %g", i, dW[i], wantW[i]);
  /* the samples' mean is the batch's loss, and smoothing moved it off plain cross-entropy */
  assert_true(fabs(mean - want) < 1e-5 * want);
  assert_true(fabs(plain - want) > 1e-2);
  free(dW);
  tr_device_free(tr_stage_device(st), per);
  tr_stage_close(st);
  tr_model_free(m);
}

/* The per-sample losses of the built-in losses, ctx 2 (MSE's mean over elements, cross-
 * entropy's over rows): their mean is the batch's loss; only the last stage has them. */
static void sample_losses_average_to_the_batch_loss(void **state) {
  (void)state;
  enum { B = 4, T = 2, V = 3 };
  const tr_layer_spec layers[] = {LINEAR(5, 6, 1), RELU(6), LINEAR(6, V, 1)};
  const float x[B * T * 5] = {1, 2, -1, 0.5f, 3, -2, 1, 1, 0, 0.25f, 0.5f, -1, 2, 2, -3,
                              1, 1, 1, -1, -1, 0, 2, 0.5f, -0.5f, 1, 3, -2, 1, 0, 1,
                              -1, 0, 0, 2, 1, 0.5f, 0.5f, -2, 1, 1};
  const float yv[B * T * V] = {0.5f, -1, 2, 1, 0, 0, -0.5f, 1, 1, 2, 2, -1,
                               0, 1, 0, 3, -1, 0.5f, 1, 1, 1, -2, 0, 0.25f};
  const int32_t yc[B * T] = {0, 2, 1, 1, 2, 0, 0, 1};
  const tr_loss_kind losses[2] = {TR_LOSS_MSE, TR_LOSS_CROSSENTROPY};
  for (int k = 0; k < 2; k++) {
    const tr_model_spec spec = {.name = "two", .ctx = T, .loss = losses[k], .nlayers = 3,
                                .layers = layers, .batch = B};
    tr_model *m;
    char err[256];
    assert_int_equal(tr_model_new(&m, &spec, err, sizeof err), 0);
    tr_stage *st = open_stage(m, B, NULL);
    tr_stream *s = tr_stage_stream(st);
    assert_int_equal(tr_memcpy(s, tr_stage_input(st, 0), x, sizeof x, TR_COPY_H2D), 0);
    assert_int_equal(tr_memcpy(s, tr_stage_target(st, 0), k ? (const void *)yc : yv,
                               k ? sizeof yc : sizeof yv, TR_COPY_H2D), 0);
    assert_int_equal(tr_stage_forward(st, 0), 0);
    float *per, sample[B], loss;
    assert_int_equal(tr_device_alloc(tr_stage_device(st), sizeof sample, (void **)&per), 0);
    assert_int_equal(tr_stage_sample_losses(st, 0, per), 0);
    assert_int_equal(tr_memcpy(s, sample, per, sizeof sample, TR_COPY_D2H), 0);
    assert_int_equal(tr_memcpy(s, &loss, tr_stage_loss(st, 0), 4, TR_COPY_D2H), 0);
    assert_int_equal(tr_stream_synchronize(s), 0);
    double mean = 0;
    for (int b = 0; b < B; b++) mean += sample[b] / B;
    fprintf(stderr, "%s: batch %.7f, samples' mean %.7f\n", tr_loss_kind_name(losses[k]), loss,
            mean);
    assert_true(loss > 0 && fabs(mean - loss) < 1e-6 * loss);
    assert_true(sample[0] != sample[1] || sample[1] != sample[2]); /* not one value copied */
    tr_device_free(tr_stage_device(st), per);
    tr_stage_close(st);
    /* a stage without the loss has none */
    tr_stage_config c = tr_stage_defaults(m);
    c.end = 2;
    assert_int_equal(tr_stage_open(&st, m, tr_device_list_at(devs, 0), &c, err, sizeof err), 0);
    assert_int_equal(tr_stage_sample_losses(st, 0, per), TR_EINVAL);
    assert_non_null(strstr(tr_stage_error(st), "last stage"));
    tr_stage_close(st);
    tr_model_free(m);
  }
}

/* ---- they train, under three layouts, and resume bitwise ------------------------------------ */

static const layout_case layouts[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                                      PIPELINE("host:2", TR_SCHEDULE_1F1B, 4), DP("host:2")};

static tr_train_options run_of(const layout_case *c, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.spec = &net;
  o.steps = steps;
  o.job.seed = 3;
  o.deterministic = 1;
  return with_layout(o, c);
}

static int train(const tr_train_options *o, tr_train_result *r, char *err, size_t n) {
  return tr_train_run(o, r, err, n);
}

static void run_ok(const tr_train_options *o, tr_train_result *r) {
  char err[1024];
  if (train(o, r, err, sizeof err)) fail_msg("tr_train_run: %s", err);
}

static void user_kinds_train_single_pipeline_and_dp(void **state) {
  (void)state;
  for (int k = 0; k < 3; k++) {
    tr_train_options o = run_of(&layouts[k], 200);
    tr_train_result r;
    run_ok(&o, &r);
    fprintf(stderr, "%s: loss %.4f -> %.4f\n", tr_strategy_name(o.strategy), r.initial_loss,
            r.final_loss);
    assert_true(r.final_loss < 0.8 * r.initial_loss);
  }
}

/* Recomputing the activations computes the loss again for what it keeps (the probabilities
 * the smoothed gradient reads): the same bits as keeping them. GPipe runs every forward
 * before the backwards, so a backward that did not compute them again would read the last
 * micro-batch's. */
static void recomputing_trains_the_user_loss_bitwise_alike(void **state) {
  (void)state;
  const layout_case cases[2] = {PIPELINE("host:2", TR_SCHEDULE_GPIPE, 4),
                                RECOMPUTING("host:2", TR_SCHEDULE_GPIPE, 4)};
  const char *files[2] = {"kept.safetensors", "recomputed.safetensors"};
  for (int k = 0; k < 2; k++) {
    tr_train_options o = run_of(&cases[k], 20);
    o.job.checkpoint.path = path(files[k]);
    tr_train_result r;
    run_ok(&o, &r);
  }
  assert_true(same_file(path(files[0]), path(files[1])));
}

/* 6 steps whole, then 3 and resumed to 6: the final checkpoints are one file. */
static void resumed_runs_are_bitwise_the_uninterrupted_ones(void **state) {
  (void)state;
  for (int k = 0; k < 3; k++) {
    tr_train_options o = run_of(&layouts[k], 6);
    tr_train_result r;
    o.job.checkpoint.path = path("whole.safetensors");
    run_ok(&o, &r);
    o.steps = 3;
    o.job.checkpoint.path = path("half.safetensors");
    run_ok(&o, &r);
    o.steps = 6;
    o.job.checkpoint.resume = path("half.safetensors");
    o.job.checkpoint.path = path("resumed.safetensors");
    run_ok(&o, &r);
    assert_int_equal(r.first_step, 3);
    assert_true(same_file(path("whole.safetensors"), path("resumed.safetensors")));
    /* and the run did move: the half-way parameters differ from the end's */
    char worst[64];
    assert_true(params_difference(path("half.safetensors"), path("whole.safetensors"), worst,
                                  sizeof worst) > 0);
  }
}

static void a_resume_into_another_or_unregistered_kind_is_refused(void **state) {
  (void)state;
  tr_train_options o = run_of(&layouts[0], 2);
  tr_train_result r;
  o.job.checkpoint.path = path("sign.safetensors");
  run_ok(&o, &r);
  tr_checkpoint *ck;
  char err[1024];
  assert_int_equal(tr_checkpoint_open(&ck, path("sign.safetensors"), err, sizeof err), 0);
  assert_string_equal(tr_checkpoint_meta(ck, "optimizer"), "signsgd");
  tr_checkpoint_close(ck);
  o.steps = 4;
  o.job.checkpoint.resume = path("sign.safetensors");
  o.job.checkpoint.path = path("other.safetensors");
  o.job.optim = tr_optim_defaults(TR_OPTIM_ADAMW, 1e-3f);
  assert_int_not_equal(train(&o, &r, err, sizeof err), 0);
  assert_non_null(strstr(err, "'signsgd'"));
  assert_non_null(strstr(err, "'adamw'"));
  o.job.optim = tr_optim_defaults(&stray, 1e-3f); /* the same update, never registered */
  assert_int_not_equal(train(&o, &r, err, sizeof err), 0);
  assert_non_null(strstr(err, "'stray-signsgd'"));
  assert_non_null(strstr(err, "not registered"));
  /* a checkpoint of a kind this process does not know, resumed into one it does */
  o = run_of(&layouts[0], 2);
  o.job.optim = tr_optim_defaults(&stray, 1e-3f);
  o.job.checkpoint.path = path("stray.safetensors");
  run_ok(&o, &r); /* writing needs no name to find */
  o = run_of(&layouts[0], 4);
  o.job.checkpoint.resume = path("stray.safetensors");
  assert_int_not_equal(train(&o, &r, err, sizeof err), 0);
  assert_non_null(strstr(err, "'stray-signsgd' (not a registered optimizer)"));
  assert_non_null(strstr(err, "'signsgd'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(kinds_are_found_by_name_and_bad_tables_are_refused),
      cmocka_unit_test(sign_sgd_moves_each_parameter_by_lr),
      cmocka_unit_test(zero_refuses_a_kind_that_is_not_elementwise),
      cmocka_unit_test(smoothed_loss_matches_a_hand_computation),
      cmocka_unit_test(sample_losses_average_to_the_batch_loss),
      cmocka_unit_test(user_kinds_train_single_pipeline_and_dp),
      cmocka_unit_test(recomputing_trains_the_user_loss_bitwise_alike),
      cmocka_unit_test(resumed_runs_are_bitwise_the_uninterrupted_ones),
      cmocka_unit_test(a_resume_into_another_or_unregistered_kind_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
