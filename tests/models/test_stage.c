/* test_stage.c — a stage's optimizers and the rest of its contract: the optimizers against
 * PyTorch's definitions, clipping by the global norm, ZeRO-sharded stages updating their
 * shard alone, gradients reported ready last layer first, bad configurations and inputs
 * reported, parameter-only stages (a server's copy) borrowing gradients and lending
 * parameters, and host copies. All on host devices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "model_fixture.h"

/* ---- optimizers --------------------------------------------------------------------------------------- */

/* The built-in kinds in the order they were an enum's: 0, 1, 2 (the seeds below). */
static uint64_t kind_index(tr_optim_kind k) {
  return k == TR_OPTIM_SGD ? 0 : k == TR_OPTIM_MOMENTUM ? 1 : 2;
}

/* Two updates from uploaded gradients against PyTorch's formulas, in double. */
static void check_optimizer(tr_optim_config o) {
  tr_model *m = tiny_mlp();
  const int whole[2] = {0, tr_model_layer_count(m)};
  pipe p = pipe_open(m, whole, 1, 2, 1, 2, o, 4);
  tr_stage *st = p.st[0];
  const size_t N = tr_model_numel(m);
  mt_rng r = mt_rng_for(300 + kind_index(o.kind) * 2 + (uint64_t)o.nesterov);
  float *w = pipe_download(&p, TR_STAGE_PARAMS);
  double *ref = mt_to_double(w, N), *m1 = calloc(N, 8), *v1 = calloc(N, 8);
  for (int t = 1; t <= 2; t++) {
    float *g = mt_normals(&r, N, 1, 0);
    for (int i = 0; i < tr_model_tensor_count(m); i++) { /* padding keeps zero gradients */
      const tr_tensor_info *ti = tr_model_tensor(m, i);
      size_t end = i + 1 < tr_model_tensor_count(m) ? tr_model_tensor(m, i + 1)->offset : N;
      for (size_t j = ti->offset + ti->numel; j < end; j++) g[j] = 0;
    }
    assert_int_equal(tr_stage_upload(st, TR_STAGE_GRADS, g), 0);
    assert_int_equal(tr_stage_step(st, NULL), 0);
    for (size_t i = 0; i < N; i++) {
      double gi = g[i];
      if (o.kind == TR_OPTIM_SGD) {
        ref[i] -= o.lr * (gi + o.weight_decay * ref[i]);
      } else if (o.kind == TR_OPTIM_MOMENTUM) {
        gi += o.weight_decay * ref[i];
        m1[i] = o.momentum * m1[i] + gi;
        ref[i] -= o.lr * (o.nesterov ? gi + o.momentum * m1[i] : m1[i]);
      } else if (o.kind == TR_OPTIM_ADAMW) {
        ref[i] *= 1 - o.lr * o.weight_decay;
        m1[i] = o.beta1 * m1[i] + (1 - o.beta1) * gi;
        v1[i] = o.beta2 * v1[i] + (1 - o.beta2) * gi * gi;
        ref[i] -= o.lr * (m1[i] / (1 - pow(o.beta1, t))) / (sqrt(v1[i] / (1 - pow(o.beta2, t))) + o.eps);
      }
    }
    free(g);
  }
  assert_int_equal(tr_stage_step_count(st), 2);
  free(w);
  w = pipe_download(&p, TR_STAGE_PARAMS);
  const double e = mt_nerr(w, ref, N);
  fprintf(stderr, "%s%s: error %.1e\n", tr_optim_kind_name(o.kind), o.nesterov ? " (nesterov)" : "", e);
  assert_true(e < 1e-12);
  for (size_t i = 0; i < N; i++) /* padding stays zero */
    if (ref[i] == 0) assert_true(w[i] == 0);
  free(w), free(ref), free(m1), free(v1);
  pipe_close(&p);
  tr_model_free(m);
}

static void optimizers_follow_pytorch_definitions(void **state) {
  (void)state;
  tr_optim_config o = tr_optim_defaults(TR_OPTIM_SGD, 0.1f);
  o.weight_decay = 0.01f;
  check_optimizer(o);
  o.kind = TR_OPTIM_MOMENTUM;
  check_optimizer(o);
  o.nesterov = 1;
  check_optimizer(o);
  o = tr_optim_defaults(TR_OPTIM_ADAMW, 0.01f);
  o.weight_decay = 0.1f;
  check_optimizer(o);
}

static void clipping_bounds_the_global_norm(void **state) {
  (void)state;
  tr_model *m = tiny_mlp();
  const int whole[2] = {0, tr_model_layer_count(m)};
  tr_optim_config o = tr_optim_defaults(TR_OPTIM_SGD, 1.0f);
  o.clip = 0.25f;
  pipe p = pipe_open(m, whole, 1, 2, 1, 2, o, 4);
  const size_t N = tr_model_numel(m);
  float *w0 = pipe_download(&p, TR_STAGE_PARAMS);
  for (int big = 0; big < 2; big++) {
    mt_rng r = mt_rng_for(400 + (uint64_t)big);
    float *g = mt_normals(&r, N, big ? 1.0 : 1e-3, 0); /* norm about 20, or 0.02 */
    double gn = 0;
    for (size_t i = 0; i < N; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    assert_int_equal(tr_stage_upload(p.st[0], TR_STAGE_GRADS, g), 0);
    assert_int_equal(tr_stage_step(p.st[0], NULL), 0);
    float *w1 = pipe_download(&p, TR_STAGE_PARAMS);
    double dn = 0;
    for (size_t i = 0; i < N; i++) dn += ((double)w1[i] - w0[i]) * ((double)w1[i] - w0[i]);
    /* lr 1: the step is the clipped gradient, norm min(norm, clip) */
    assert_true(fabs(sqrt(dn) - fmin(gn, 0.25)) < 1e-4 * fmin(gn, 0.25));
    memcpy(w0, w1, N * sizeof *w0);
    free(w1), free(g);
  }
  free(w0);
  pipe_close(&p);
  tr_model_free(m);
}

/* ZeRO stage 1: four stages each holding a quarter of AdamW's state (the last a shorter
 * one) update their quarter of the parameters exactly as the unsharded stage updates it,
 * and leave the rest alone; with clipping, the shares of the shards' squared norms add up
 * to the whole gradient's. */
static void sharded_stages_update_their_shard_alone(void **state) {
  (void)state;
  tr_model *m = tiny_mlp(); /* three Linear(12,12), each tensor 16-aligned: 480 floats */
  const size_t N = tr_model_numel(m);
  assert_int_equal(N, 480);
  const size_t want_off[4] = {0, 128, 256, 384}, want_n[4] = {128, 128, 128, 96};
  for (int clipped = 0; clipped < 2; clipped++) {
    tr_optim_config o = tr_optim_defaults(clipped ? TR_OPTIM_MOMENTUM : TR_OPTIM_ADAMW, 0.05f);
    o.clip = clipped ? 0.25f : 0;
    tr_stage_config c = tr_stage_defaults(m);
    c.batch = c.global_batch = 2, c.seed = 3, c.optim = o;
    tr_stage *whole, *shard[4];
    char err[256];
    assert_int_equal(tr_stage_open(&whole, m, tr_device_list_at(devs, 0), &c, err, sizeof err), 0);
    for (int k = 0; k < 4; k++) {
      c.shard = (tr_stage_shard){.count = 4, .index = k};
      assert_int_equal(tr_stage_open(&shard[k], m, tr_device_list_at(devs, k % 3), &c, err, sizeof err), 0);
      const tr_stage_info *in = tr_stage_info_of(shard[k]);
      assert_int_equal(in->numel, N);
      assert_int_equal(in->shard_offset, want_off[k]);
      assert_int_equal(in->shard_numel, want_n[k]);
      assert_int_equal(in->state_numel, (clipped ? 1 : 2) * want_n[k]);
    }
    assert_int_equal(tr_stage_info_of(whole)->state_numel, (clipped ? 1 : 2) * N);
    float *w0 = malloc(N * 4), *ref = malloc(N * 4), *got = malloc(N * 4);
    assert_int_equal(tr_stage_download(whole, TR_STAGE_PARAMS, w0), 0);
    mt_rng r = mt_rng_for(450 + (uint64_t)clipped);
    for (int t = 0; t < 2; t++) {
      float *g = mt_normals(&r, N, 1, 0); /* a norm of about 20: a clip of 0.25 binds */
      assert_int_equal(tr_stage_upload(whole, TR_STAGE_GRADS, g), 0);
      assert_int_equal(tr_stage_step(whole, NULL), 0);
      float total = 0, *sumsq[4];
      for (int k = 0; k < 4; k++) {
        tr_device *d = tr_stage_device(shard[k]);
        assert_int_equal(tr_stage_upload(shard[k], TR_STAGE_GRADS, g), 0);
        sumsq[k] = mt_up(d, NULL, 1);
        assert_int_equal(tr_stage_grad_sumsq(shard[k], sumsq[k], 0), 0);
        float *h = mt_down(d, sumsq[k], 1);
        total += *h;
        free(h);
      }
      for (int k = 0; k < 4; k++) {
        tr_stream *s = tr_stage_stream(shard[k]);
        assert_int_equal(tr_memcpy(s, sumsq[k], &total, 4, TR_COPY_H2D), 0);
        assert_int_equal(tr_stage_step(shard[k], clipped ? sumsq[k] : NULL), 0);
        assert_int_equal(tr_stream_synchronize(s), 0);
        tr_device_free(tr_stage_device(shard[k]), sumsq[k]);
      }
      free(g);
    }
    assert_int_equal(tr_stage_download(whole, TR_STAGE_PARAMS, ref), 0);
    for (int k = 0; k < 4; k++) {
      assert_int_equal(tr_stage_download(shard[k], TR_STAGE_PARAMS, got), 0);
      assert_int_equal(tr_stream_synchronize(tr_stage_stream(shard[k])), 0);
      const size_t lo = want_off[k], hi = lo + want_n[k];
      if (clipped) /* the clip factor from a sum in another order: rounding apart */
        assert_true(norm_rel(got + lo, ref + lo, hi - lo) < 1e-6);
      else
        assert_memory_equal(got + lo, ref + lo, (hi - lo) * 4);
      assert_memory_equal(got, w0, lo * 4); /* the other shards' parameters: untouched */
      assert_memory_equal(got + hi, w0 + hi, (N - hi) * 4);
      assert_true(norm_rel(got + lo, w0 + lo, hi - lo) > 1e-4); /* and this one moved */
    }
    free(w0), free(ref), free(got);
    tr_stage_close(whole);
    for (int k = 0; k < 4; k++) tr_stage_close(shard[k]);
  }
  /* a shard that is not one of the count */
  tr_stage_config c = tr_stage_defaults(m);
  c.shard = (tr_stage_shard){.count = 3, .index = 3};
  tr_stage *st;
  char err[256];
  assert_int_equal(tr_stage_open(&st, m, tr_device_list_at(devs, 0), &c, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "shard 3 of 3"));
  tr_model_free(m);
}

/* ---- the rest of the stage's contract ------------------------------------------------------------------- */

typedef struct ready_log {
  int n, layers[16];
} ready_log;

static void on_ready(void *arg, tr_stage *st, int layer) {
  (void)st;
  ready_log *log = arg;
  log->layers[log->n++] = layer;
}

static void grad_ready_reports_layers_last_first(void **state) {
  (void)state;
  tr_model *m = tiny_gpt(40);
  const int cuts[3] = {0, 2, 5};
  pipe p = pipe_open(m, cuts, 2, 2, 1, 2, tr_model_optim(m), 1);
  ready_log log[2] = {{0}, {0}};
  tr_stage_on_grad_ready(p.st[0], on_ready, &log[0]);
  tr_stage_on_grad_ready(p.st[1], on_ready, &log[1]);
  mt_rng r = mt_rng_for(500);
  void *x, *y;
  mt_random_batch(m, &r, 2, &x, &y);
  pipe_forward(&p, 0, x, y);
  pipe_backward(&p, 0);
  assert_int_equal(log[1].n, 3);
  assert_int_equal(log[0].n, 2);
  const int want1[3] = {4, 3, 2}, want0[2] = {1, 0};
  assert_memory_equal(log[1].layers, want1, sizeof want1);
  assert_memory_equal(log[0].layers, want0, sizeof want0);
  /* spans tile the stage's allocation in layer order */
  size_t off, n, at = 0;
  for (int l = 2; l < 5; l++) {
    tr_stage_layer_span(p.st[1], l, &off, &n);
    assert_int_equal(off, at);
    at += n;
  }
  assert_int_equal(at, tr_stage_info_of(p.st[1])->numel);
  free(x), free(y);
  pipe_close(&p);
  tr_model_free(m);
}

static void bad_configurations_and_inputs_are_reported(void **state) {
  (void)state;
  tr_model *m = tiny_gpt(40);
  tr_device *d = tr_device_list_at(devs, 0);
  tr_stage *st = (tr_stage *)1;
  char err[256];
  tr_stage_config c = tr_stage_defaults(m);
  c.first = 3, c.end = 3;
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), TR_EINVAL);
  assert_null(st);
  assert_non_null(strstr(err, "[3,3)"));
  c = tr_stage_defaults(m);
  c.slots = -1;
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), TR_EINVAL);
  /* a token outside the vocabulary: the embedding fails, the message says where (host
   * devices check indices; a GPU kernel cannot fail its call) */
  c = tr_stage_defaults(m);
  c.batch = c.global_batch = 1;
  assert_int_equal(tr_stage_open(&st, m, d, &c, err, sizeof err), 0);
  if (tr_device_info_of(d)->kind == TR_DEVICE_HOST) {
    const int32_t bad[6] = {1, 2, 40, 3, 4, 5};
    assert_int_equal(tr_memcpy(tr_stage_stream(st), tr_stage_input(st, 0), bad, sizeof bad, TR_COPY_H2D), 0);
    assert_int_equal(tr_stage_forward(st, 0), TR_EINVAL);
    fprintf(stderr, "%s\n", tr_stage_error(st));
    assert_non_null(strstr(tr_stage_error(st), "layer 0 (embedding)"));
    assert_non_null(strstr(tr_stage_error(st), tr_device_name(d)));
  }
  tr_stage_close(st);
  /* layers that do not fit together */
  const tr_layer_spec layers[2] = {tr_layer_linear(4, 5, 1), tr_layer_linear(6, 1, 1)};
  tr_model_spec sp = {.name = "bad", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 2, .layers = layers, .batch = 1};
  tr_model *b;
  assert_int_equal(tr_model_new(&b, &sp, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "layer 1"));
  tr_model_free(m);
}

/* A parameter server's copy: parameters, gradients and optimizer, no activations. */
static void parameter_only_stage_holds_and_updates_the_model(void **state) {
  (void)state;
  tr_model *m = tiny_gpt(40);
  const int whole[2] = {0, 5};
  pipe p = pipe_open(m, whole, 1, 2, 1, 2, tr_model_optim(m), 21);
  tr_stage_config c = tr_stage_defaults(m);
  c.slots = 0;
  c.seed = 21;
  tr_stage *ps;
  char err[256];
  assert_int_equal(tr_stage_open(&ps, m, tr_device_list_at(devs, 1), &c, err, sizeof err), 0);
  assert_true(tr_stage_info_of(ps)->scratch_bytes < 1024);
  const size_t N = tr_model_numel(m);
  float *a = pipe_download(&p, TR_STAGE_PARAMS), *b = malloc(N * 4);
  assert_int_equal(tr_stage_download(ps, TR_STAGE_PARAMS, b), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(ps)), 0);
  assert_memory_equal(a, b, N * 4);
  /* a worker's gradient, pushed: the server's update is the worker's own */
  mt_rng r = mt_rng_for(700);
  void *x, *y;
  mt_random_batch(m, &r, 2, &x, &y);
  pipe_forward(&p, 0, x, y);
  pipe_backward(&p, 0);
  float *g = pipe_download(&p, TR_STAGE_GRADS);
  assert_int_equal(tr_stage_upload(ps, TR_STAGE_GRADS, g), 0);
  tr_optim_config o = *tr_stage_optim(ps);
  o.lr = 1e-2f;
  assert_int_equal(tr_stage_set_optim(ps, &o), 0);
  assert_int_equal(tr_stage_set_optim(p.st[0], &o), 0);
  assert_int_equal(tr_stage_step(ps, NULL), 0);
  assert_int_equal(tr_stage_step(p.st[0], NULL), 0);
  free(a);
  a = pipe_download(&p, TR_STAGE_PARAMS);
  assert_int_equal(tr_stage_download(ps, TR_STAGE_PARAMS, b), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(ps)), 0);
  assert_memory_equal(a, b, N * 4);
  o.kind = TR_OPTIM_SGD; /* AdamW's state does not become SGD's */
  assert_int_equal(tr_stage_set_optim(ps, &o), TR_EINVAL);
  assert_non_null(strstr(tr_stage_error(ps), "adamw"));
  free(a), free(b), free(g), free(x), free(y);
  tr_stage_close(ps);
  pipe_close(&p);
  tr_model_free(m);
}

/* A server steps straight from a worker's gradient (tr_stage_use_grads), and a Hogwild!
 * worker trains on the server's parameters (tr_stage_share_params). */
static void a_server_borrows_gradients_and_lends_parameters(void **state) {
  (void)state;
  tr_model *m = tiny_mlp();
  const int whole[2] = {0, tr_model_layer_count(m)};
  tr_optim_config o = tr_model_optim(m); /* momentum: state shared too */
  pipe w = pipe_open(m, whole, 1, 4, 1, 4, o, 5), twin = pipe_open(m, whole, 1, 4, 1, 4, o, 5);
  tr_stage_config c = tr_stage_defaults(m);
  c.slots = 0, c.batch = 4, c.global_batch = 4, c.seed = 5, c.optim = o;
  tr_stage *ps;
  char err[256];
  assert_int_equal(tr_stage_open(&ps, m, tr_device_list_at(devs, 1), &c, err, sizeof err), 0);
  const size_t N = tr_model_numel(m);
  mt_rng r = mt_rng_for(800);
  void *x, *y;
  mt_random_batch(m, &r, 4, &x, &y);

  /* the worker's gradient, read in place: the server's update is the twin's own */
  pipe_forward(&w, 0, x, y);
  pipe_backward(&w, 0);
  pipe_forward(&twin, 0, x, y);
  pipe_backward(&twin, 0);
  float *own = tr_stage_grads(ps);
  tr_stage_use_grads(ps, tr_stage_grads(w.st[0]));
  assert_ptr_equal(tr_stage_grads(ps), tr_stage_grads(w.st[0]));
  assert_int_equal(tr_stage_step(ps, NULL), 0);
  tr_stage_use_grads(ps, NULL);
  assert_ptr_equal(tr_stage_grads(ps), own);
  assert_int_equal(tr_stage_step(twin.st[0], NULL), 0);
  float *a = pipe_download(&twin, TR_STAGE_PARAMS), *b = malloc(N * 4);
  assert_int_equal(tr_stage_download(ps, TR_STAGE_PARAMS, b), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(ps)), 0);
  assert_memory_equal(a, b, N * 4);

  /* shared: the worker's forward sees the server's parameters, and its step moves them */
  assert_int_equal(tr_stage_share_params(w.st[0], ps), 0);
  assert_ptr_equal(tr_stage_params(w.st[0]), tr_stage_params(ps));
  pipe_zero(&w);
  pipe_zero(&twin);
  const float lw = pipe_forward(&w, 0, x, y), lt = pipe_forward(&twin, 0, x, y);
  assert_memory_equal(&lw, &lt, sizeof lw);
  pipe_backward(&w, 0);
  pipe_backward(&twin, 0);
  assert_int_equal(tr_stage_step(w.st[0], NULL), 0);
  assert_int_equal(tr_stage_step(twin.st[0], NULL), 0);
  free(a);
  a = pipe_download(&twin, TR_STAGE_PARAMS);
  assert_int_equal(tr_stage_download(ps, TR_STAGE_PARAMS, b), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(ps)), 0);
  assert_memory_equal(a, b, N * 4);

  /* another model's stage cannot share */
  tr_model *g = tiny_gpt(40);
  const int gw[2] = {0, 5};
  pipe other = pipe_open(g, gw, 1, 2, 1, 2, tr_model_optim(g), 1);
  assert_int_equal(tr_stage_share_params(other.st[0], ps), TR_EINVAL);
  assert_non_null(strstr(tr_stage_error(other.st[0]), "cannot share"));
  pipe_close(&other);
  tr_model_free(g);
  free(a), free(b), free(x), free(y);
  pipe_close(&w);
  pipe_close(&twin);
  tr_stage_close(ps);
  tr_model_free(m);
}

static void host_copies_round_trip(void **state) {
  (void)state;
  tr_model *m = tiny_gpt(40);
  const int whole[2] = {0, 5};
  pipe p = pipe_open(m, whole, 1, 2, 1, 2, tr_model_optim(m), 1);
  const tr_stage_info *in = tr_stage_info_of(p.st[0]);
  assert_int_equal(in->state_numel, 2 * in->numel); /* AdamW: m and v */
  mt_rng r = mt_rng_for(600);
  float *s = mt_normals(&r, in->state_numel, 1, 0), *back = malloc(in->state_numel * 4);
  assert_int_equal(tr_stage_upload(p.st[0], TR_STAGE_OPT_STATE, s), 0);
  assert_int_equal(tr_stage_download(p.st[0], TR_STAGE_OPT_STATE, back), 0);
  assert_int_equal(tr_stream_synchronize(sof(&p, 0)), 0);
  assert_memory_equal(s, back, in->state_numel * 4);
  free(s), free(back);
  pipe_close(&p);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(optimizers_follow_pytorch_definitions),
      cmocka_unit_test(clipping_bounds_the_global_norm),
      cmocka_unit_test(sharded_stages_update_their_shard_alone),
      cmocka_unit_test(grad_ready_reports_layers_last_first),
      cmocka_unit_test(bad_configurations_and_inputs_are_reported),
      cmocka_unit_test(parameter_only_stage_holds_and_updates_the_model),
      cmocka_unit_test(a_server_borrows_gradients_and_lends_parameters),
      cmocka_unit_test(host_copies_round_trip),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
