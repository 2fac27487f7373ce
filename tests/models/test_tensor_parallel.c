/* test_tensor_parallel.c — models split across a tensor group (tr_model_shard, Megatron's
 * column and row linear layers) against the whole model: T members on T host devices, each
 * on its own thread with one stage holding the whole member model, fed the same batches,
 * give the whole model's losses, and their gradients and parameters gathered into the
 * whole tensors (tr_tensor_part_copy) the whole's, within 1e-5, over several steps of
 * training, in every pass (plain and split backward, recomputation, bf16, evaluation,
 * per-sample losses); T = 1 bitwise the unsplit stage; the collectives per step counted
 * (one all-reduce forward and one backward per column -> row pair, none backward for a pair
 * whose column layer is the model's first); widths that do not divide refused by name. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_stage.h"

enum { B = 8, STEPS = 4, MAXT = 4 };

typedef struct run_cfg {
  int split, recompute, bf16;
} run_cfg;

/* What one stage (the whole model's or a member's) did. */
typedef struct record {
  size_t numel;
  float loss[STEPS], eval_loss, sample_losses[B];
  float *grads;                 /* per step, numel each */
  float *params;                /* after the last step */
  uint64_t colls[STEPS];        /* collectives in each step */
  int rc;
  char err[512];
} record;

typedef struct job {
  const tr_model *m;
  tr_device *d;
  const tr_tensor_comm *comm;
  run_cfg cfg;
  void *x[STEPS + 1], *y[STEPS + 1]; /* the steps' batches, then the evaluation's */
  record *out;
} job;

static int fail_rec(record *r, tr_stage *st, int rc, const char *what) {
  snprintf(r->err, sizeof r->err, "%s: %s", what, st ? tr_stage_error(st) : "");
  return r->rc = rc;
}

#define TRY(call, what)                                  \
  do {                                                   \
    int rc_ = (call);                                    \
    if (rc_) return fail_rec(r, st, rc_, what);          \
  } while (0)

static uint64_t colls_of(const tr_tensor_comm *c) {
  uint64_t n = 0;
  if (c) tr_tensor_comm_counts(c, &n, NULL);
  return n;
}

static int feed(tr_stage *st, const job *j, int k) {
  tr_stream *s = tr_stage_stream(st);
  const tr_stage_info *in = tr_stage_info_of(st);
  tr_stage_set_samples(st, 0, (uint64_t)k * B);
  int rc = tr_memcpy(s, tr_stage_input(st, 0), j->x[k], in->input_bytes, TR_COPY_H2D);
  return rc ? rc : tr_memcpy(s, tr_stage_target(st, 0), j->y[k], in->target_bytes, TR_COPY_H2D);
}

static int train(tr_stage *st, const job *j, record *r) {
  tr_stream *s = tr_stage_stream(st);
  for (int k = 0; k < STEPS; k++) {
    const uint64_t before = colls_of(j->comm);
    TRY(feed(st, j, k), "feeding");
    TRY(tr_stage_zero_grads(st), "zeroing");
    TRY(tr_stage_forward(st, 0), "forward");
    if (j->cfg.split) {
      TRY(tr_stage_backward_input(st, 0, NULL), "backward (input)");
      TRY(tr_stage_backward_weight(st, 0), "backward (weights)");
    } else {
      TRY(tr_stage_backward(st, 0, NULL), "backward");
    }
    TRY(tr_memcpy(s, &r->loss[k], tr_stage_loss(st, 0), 4, TR_COPY_D2H), "loss");
    TRY(tr_stage_download(st, TR_STAGE_GRADS, r->grads + (size_t)k * r->numel), "grads");
    TRY(tr_stage_step(st, NULL), "step");
    TRY(tr_stream_synchronize(s), "sync");
    r->colls[k] = colls_of(j->comm) - before;
  }
  return 0;
}

static int evaluate(tr_stage *st, const job *j, record *r) {
  tr_stream *s = tr_stage_stream(st);
  TRY(tr_stage_download(st, TR_STAGE_PARAMS, r->params), "params");
  tr_stage_set_training(st, 0);
  TRY(feed(st, j, STEPS), "feeding");
  TRY(tr_stage_forward(st, 0), "evaluation");
  TRY(tr_memcpy(s, &r->eval_loss, tr_stage_loss(st, 0), 4, TR_COPY_D2H), "loss");
  float *dev;
  TRY(tr_stream_alloc(s, B * sizeof(float), (void **)&dev), "alloc");
  TRY(tr_stage_sample_losses(st, 0, dev), "per-sample losses");
  TRY(tr_memcpy(s, r->sample_losses, dev, sizeof r->sample_losses, TR_COPY_D2H), "losses");
  TRY(tr_stream_free(s, dev), "free");
  TRY(tr_stream_synchronize(s), "sync");
  return 0;
}

static void *run_stage(void *arg) {
  job *j = arg;
  record *r = j->out;
  tr_stage *st = NULL;
  if (tr_device_bind(j->d)) abort();
  tr_stage_config c = tr_stage_defaults(j->m);
  c.batch = c.global_batch = B;
  c.seed = 11;
  c.split = j->cfg.split;
  c.recompute = j->cfg.recompute;
  c.precision.gemm = j->cfg.bf16 ? TR_PRECISION_BF16 : TR_PRECISION_FP32;
  c.tensor = j->comm;
  if ((r->rc = tr_stage_open(&st, j->m, j->d, &c, r->err, sizeof r->err))) return NULL;
  r->numel = tr_stage_info_of(st)->numel;
  r->grads = calloc((size_t)STEPS * r->numel, sizeof(float));
  r->params = calloc(r->numel, sizeof(float));
  if (!train(st, j, r)) evaluate(st, j, r);
  tr_stage_close(st);
  return NULL;
}

static void free_record(record *r) { free(r->grads), free(r->params); }

/* ---- comparing ------------------------------------------------------------------------------ */

static void near(double got, double want, double tol, const char *what, int T, int k) {
  if (!(fabs(got - want) <= tol * (1 + fabs(want))))
    fail_msg("T %d: %s [%d]: %.9g, the whole model's %.9g", T, what, k, got, want);
}

/* The members' buffers (each in its model's layout) gathered into the whole model's; a
 * tensor held whole is bitwise the same on every member (the collectives give every member
 * the same bits, so the copies never drift apart). */
static void gather(const tr_model *whole, tr_model *const *mm, int T, float *const *bufs,
                   float *to) {
  for (int t = 0; t < tr_model_tensor_count(whole); t++) {
    const tr_tensor_info *wi = tr_model_tensor(whole, t);
    for (int k = 0; k < T; k++) {
      const tr_tensor_info *mi = tr_model_tensor(mm[k], t);
      const tr_tensor_part p = tr_model_tensor_part(mm[k], t);
      if (p.parts || k == 0) tr_tensor_part_copy(&p, to + wi->offset, bufs[k] + mi->offset, 1);
      else if (memcmp(bufs[k] + mi->offset, bufs[0] + tr_model_tensor(mm[0], t)->offset,
                      mi->numel * sizeof(float)))
        fail_msg("T %d: %s, held whole, differs between members 0 and %d", T, wi->name, k);
    }
  }
}

static void compare(const tr_model *whole, tr_model *const *mm, int T, const record *w,
                    const record *r, double tol) {
  float *got = calloc(tr_model_numel(whole), sizeof *got);
  float *bufs[MAXT];
  for (int s = 0; s <= STEPS; s++) {
    for (int k = 0; k < T; k++) {
      if (s < STEPS) near(r[k].loss[s], w->loss[s], tol, "loss", T, s);
      bufs[k] = s < STEPS ? r[k].grads + (size_t)s * r[k].numel : r[k].params;
    }
    gather(whole, mm, T, bufs, got);
    const float *want = s < STEPS ? w->grads + (size_t)s * w->numel : w->params;
    for (int t = 0; t < tr_model_tensor_count(whole); t++) {
      const tr_tensor_info *wi = tr_model_tensor(whole, t);
      for (size_t i = 0; i < wi->numel; i++)
        near(got[wi->offset + i], want[wi->offset + i], tol,
             s < STEPS ? "a gradient" : "a parameter", T, s);
    }
  }
  for (int k = 0; k < T; k++) {
    near(r[k].eval_loss, w->eval_loss, tol, "evaluation loss", T, k);
    for (int b = 0; b < B; b++) near(r[k].sample_losses[b], w->sample_losses[b], tol, "sample loss", T, b);
  }
  free(got);
}

/* ---- one case: the whole model, then its T members ------------------------------------------ */

static void run_case(const tr_model *whole, int T, run_cfg cfg, int colls_per_step, double tol) {
  tr_device_list *l = mt_open(T + 1);
  tr_device *devs[MAXT + 1];
  for (int i = 0; i <= T; i++) devs[i] = tr_device_list_at(l, i);
  mt_rng rng = mt_rng_for((uint64_t)T * 131 + (uint64_t)cfg.split * 7 + (uint64_t)cfg.bf16);
  job base = {.cfg = cfg};
  const int V = tr_model_layer(whole, tr_model_layer_count(whole) - 1)->out;
  for (int k = 0; k <= STEPS; k++) {
    mt_random_batch(whole, &rng, B, &base.x[k], &base.y[k]);
    if (tr_model_loss(whole)->target == TR_LOSS_TARGET_CLASSES) /* a loss of the test's own */
      for (int i = 0; i < B * tr_model_ctx(whole); i++)
        ((int32_t *)base.y[k])[i] = (int32_t)(mt_next(&rng) % (uint64_t)V);
  }
  /* the whole model, on its own device */
  record w = {0}, r[MAXT];
  memset(r, 0, sizeof r);
  job jw = base;
  jw.m = whole, jw.d = devs[T], jw.out = &w;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run_stage, &jw), 0);
  pthread_join(th, NULL);
  if (w.rc) fail_msg("whole: %s", w.err);
  /* the members, each on its thread */
  tr_model *mm[MAXT];
  tr_tensor_comm *comms[MAXT];
  char err[256];
  for (int k = 0; k < T; k++)
    if (tr_model_shard(whole, k, T, &mm[k], err, sizeof err)) fail_msg("%s", err);
  if (tr_tensor_comms_open(devs, T, comms, err, sizeof err)) fail_msg("%s", err);
  job jm[MAXT];
  pthread_t tm[MAXT];
  for (int k = 0; k < T; k++) {
    jm[k] = base;
    jm[k].m = mm[k], jm[k].d = devs[k], jm[k].comm = comms[k], jm[k].out = &r[k];
    assert_int_equal(pthread_create(&tm[k], NULL, run_stage, &jm[k]), 0);
  }
  for (int k = 0; k < T; k++) pthread_join(tm[k], NULL);
  for (int k = 0; k < T; k++)
    if (r[k].rc) fail_msg("member %d of %d: %s", k, T, r[k].err);
  compare(whole, mm, T, &w, r, tol);
  for (int k = 0; k < T; k++)
    for (int s = 0; s < STEPS; s++)
      if (r[k].colls[s] != (uint64_t)colls_per_step)
        fail_msg("T %d member %d step %d: %llu collectives, not %d", T, k, s,
                 (unsigned long long)r[k].colls[s], colls_per_step);
  /* a member holds its share: parts 1/T of their whole tensors, the others whole */
  for (int t = 0; t < tr_model_tensor_count(whole); t++) {
    const tr_tensor_part p = tr_model_tensor_part(mm[0], t);
    assert_int_equal(tr_model_tensor(mm[0], t)->numel * (size_t)(p.parts ? p.parts : 1),
                     tr_model_tensor(whole, t)->numel);
  }
  if (T == 1) { /* a copy of the whole: the same bits */
    assert_memory_equal(r[0].loss, w.loss, sizeof w.loss);
    assert_memory_equal(r[0].grads, w.grads, (size_t)STEPS * w.numel * sizeof(float));
    assert_memory_equal(r[0].params, w.params, w.numel * sizeof(float));
    assert_memory_equal(r[0].sample_losses, w.sample_losses, sizeof w.sample_losses);
  }
  tr_tensor_comms_close(comms, T);
  for (int k = 0; k < T; k++) tr_model_free(mm[k]), free_record(&r[k]);
  free_record(&w);
  for (int k = 0; k <= STEPS; k++) free(base.x[k]), free(base.y[k]);
  tr_device_list_close(l);
}

/* ---- the models ---------------------------------------------------------------------------- */

static tr_model *mlp(void) {
  tr_model *m;
  assert_int_equal(tr_model_mlp(&m, 16, 4), 0); /* pairs (0, 2) and (4, 6) */
  return m;
}

static tr_model *model_of(const char *name, int n, const tr_layer_spec *layers) {
  tr_optim_config o = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0.05f);
  o.momentum = 0.9f;
  const tr_model_spec sp = {.name = name, .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = n,
                            .layers = layers, .batch = B, .optim = o};
  tr_model *m;
  char err[256];
  if (tr_model_new(&m, &sp, err, sizeof err)) fail_msg("%s", err);
  return m;
}

/* widths 6, 10, 12: a pair through relu and dropout (10 wide: T = 2 only), a residual with a
 * pair inside through gelu, a last linear held whole */
static tr_model *odd(void) {
  const tr_layer_spec inner[3] = {tr_layer_linear(12, 6, 1), tr_layer_gelu(6),
                                  tr_layer_linear(6, 12, 0)};
  const tr_layer_spec layers[7] = {tr_layer_linear(6, 10, 1), tr_layer_relu(10),
                                   tr_layer_dropout(10, 0.3f), tr_layer_linear(10, 12, 1),
                                   tr_layer_layernorm(12), tr_layer_residual(3, inner),
                                   tr_layer_linear(12, 6, 1)};
  return model_of("odd", 7, layers);
}

/* widths 10, 6, 12: a pair after a layernorm (6 wide: T = 2 and 3), a whole dropout after it */
static tr_model *odd3(void) {
  const tr_layer_spec layers[6] = {tr_layer_layernorm(10), tr_layer_linear(10, 6, 1),
                                   tr_layer_gelu(6), tr_layer_linear(6, 12, 1),
                                   tr_layer_dropout(12, 0.3f), tr_layer_linear(12, 10, 1)};
  return model_of("odd3", 6, layers);
}

/* A vocab_parallel loss of the test's own (host devices: it reads their memory directly):
 * per row 0.5 |pred|^2 - pred[target]; a member sums its columns' share, the shares
 * all-reduced; the gradient pred - onehot needs no collective. */
static int score_forward(const tr_loss_ctx *c, float *loss) {
  const int off = c->tensor ? c->tensor->rank * c->V : 0;
  const int32_t *t = c->target;
  double sum = 0;
  for (int r = 0; r < c->N; r++)
    for (int v = 0; v < c->V; v++) {
      const double p = c->pred[(size_t)r * c->V + v];
      sum += 0.5 * p * p - (t[r] == off + v ? p : 0);
    }
  *loss = (float)(sum * c->scale);
  return c->tensor ? c->tensor->all_reduce(c->tensor, c->s, loss, 1, TR_REDUCE_SUM) : 0;
}

static int score_backward(const tr_loss_ctx *c, float *dpred) {
  const int off = c->tensor ? c->tensor->rank * c->V : 0;
  const int32_t *t = c->target;
  for (int r = 0; r < c->N; r++)
    for (int v = 0; v < c->V; v++) {
      const size_t i = (size_t)r * c->V + v;
      dpred[i] = c->scale * (c->pred[i] - (t[r] == off + v ? 1.0f : 0.0f));
    }
  return 0;
}

static const tr_loss_type score_loss = {.name = "score", .target = TR_LOSS_TARGET_CLASSES,
                                        .mean = TR_LOSS_MEAN_ROWS, .vocab_parallel = 1,
                                        .forward = score_forward, .backward = score_backward};

/* a pair, then the last linear COLUMN under the vocab_parallel loss (10 classes) */
static tr_model *vocab(void) {
  const tr_layer_spec layers[4] = {tr_layer_linear(6, 12, 1), tr_layer_relu(12),
                                   tr_layer_linear(12, 6, 1), tr_layer_linear(6, 10, 1)};
  tr_model_spec sp = {.name = "vocab", .ctx = 2, .loss = &score_loss, .nlayers = 4,
                      .layers = layers, .batch = B,
                      .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.1f)};
  tr_model *m;
  char err[256];
  if (tr_model_new(&m, &sp, err, sizeof err)) fail_msg("%s", err);
  return m;
}

static const double TOL = 1e-5;

static void mlp_members_train_as_the_whole_with_one_two_and_four(void **state) {
  (void)state;
  tr_model *m = mlp();
  run_case(m, 1, (run_cfg){0}, 0, 0);
  run_case(m, 2, (run_cfg){0}, 3, TOL); /* forward 2; backward 1: pair (0, 2) starts the model */
  run_case(m, 4, (run_cfg){0}, 3, TOL);
  tr_model_free(m);
}

static void odd_sizes_train_as_the_whole_with_two_and_three(void **state) {
  (void)state;
  tr_model *m = odd();
  run_case(m, 1, (run_cfg){0}, 0, 0);
  run_case(m, 2, (run_cfg){0}, 3, TOL); /* forward 2; backward 1 (the residual's pair) */
  tr_model_free(m);
  m = odd3();
  run_case(m, 2, (run_cfg){0}, 2, TOL);
  run_case(m, 3, (run_cfg){0}, 2, TOL);
  tr_model_free(m);
}

static void the_last_linear_splits_by_columns_under_a_vocab_parallel_loss(void **state) {
  (void)state;
  if (getenv("TR_TEST_DEVICE") && *getenv("TR_TEST_DEVICE")) skip(); /* reads host memory */
  tr_model *m = vocab(), *member;
  char err[256];
  assert_int_equal(tr_model_shard(m, 1, 2, &member, err, sizeof err), 0);
  assert_int_equal(tr_model_layer(member, 3)->out, 5);
  assert_int_equal(tr_model_layer(member, 3)->parts, 2);
  tr_model_free(member);
  /* forward: the pair's and the loss's; backward: the last layer's input gradient */
  run_case(m, 2, (run_cfg){0}, 1 + 1 + 1, TOL);
  tr_model_free(m);
}

static void split_backward_and_recomputation_split_alike(void **state) {
  (void)state;
  tr_model *m = odd();
  run_case(m, 2, (run_cfg){.split = 1}, 3, TOL);
  run_case(m, 2, (run_cfg){.recompute = 1}, 3 + 2, TOL); /* the forward again in backward */
  tr_model_free(m);
  m = mlp();
  run_case(m, 4, (run_cfg){.split = 1, .recompute = 1}, 2 + 2 + 1 + 2, TOL); /* and in W */
  tr_model_free(m);
}

static void bf16_members_multiply_as_the_whole_does(void **state) {
  (void)state;
  tr_model *m = mlp();
  run_case(m, 2, (run_cfg){.bf16 = 1}, 3, 1e-4); /* the same bf16 products, summed apart */
  tr_model_free(m);
}

/* Each member's initial parameters, from a stage on `d` (its comm never called). */
static float *initial_params(tr_device *d, const tr_model *m, int part, int parts) {
  tr_tensor_comm c = {.rank = part, .size = parts};
  tr_stage_config cfg = tr_stage_defaults(m);
  cfg.seed = 5;
  cfg.tensor = &c;
  tr_stage *st;
  char err[512];
  if (tr_stage_open(&st, m, d, &cfg, err, sizeof err)) fail_msg("%s", err);
  float *h = calloc(tr_stage_info_of(st)->numel, sizeof *h);
  assert_int_equal(tr_stage_download(st, TR_STAGE_PARAMS, h), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(st)), 0);
  tr_stage_close(st);
  return h;
}

/* Checkpoints: members' parts join into the whole tensors, which split into any other
 * layout; the initial parts are bitwise the whole's elements. */
static void parts_join_into_the_whole_and_split_into_any_layout(void **state) {
  (void)state;
  tr_device_list *l = mt_open(1);
  tr_device *d = tr_device_list_at(l, 0);
  tr_model *whole = odd();
  float *w = initial_params(d, whole, 0, 1);
  float *joined = calloc(tr_model_numel(whole), sizeof *joined);
  for (int k = 0; k < 2; k++) { /* T = 2 members write their parts into the whole */
    tr_model *mm;
    char err[256];
    if (tr_model_shard(whole, k, 2, &mm, err, sizeof err)) fail_msg("%s", err);
    float *p = initial_params(d, mm, k, 2);
    for (int t = 0; t < tr_model_tensor_count(mm); t++) {
      const tr_tensor_part part = tr_model_tensor_part(mm, t);
      const tr_tensor_info *wi = tr_model_tensor(whole, t);
      assert_string_equal(tr_model_tensor(mm, t)->name, wi->name); /* the whole's name */
      assert_int_equal(part.whole[0], wi->shape[0]);                 /* and shape */
      assert_int_equal(part.whole[1], wi->shape[1]);
      tr_tensor_part_copy(&part, joined + wi->offset, p + tr_model_tensor(mm, t)->offset, 1);
    }
    free(p);
    tr_model_free(mm);
  }
  for (int t = 0; t < tr_model_tensor_count(whole); t++) {
    const tr_tensor_info *wi = tr_model_tensor(whole, t);
    assert_memory_equal(joined + wi->offset, w + wi->offset, wi->numel * sizeof(float));
  }
  tr_model_free(whole);
  whole = odd3(); /* and the whole read into T = 3 members: each as it starts */
  free(w);
  w = initial_params(d, whole, 0, 1);
  for (int k = 0; k < 3; k++) {
    tr_model *mm;
    char err[256];
    if (tr_model_shard(whole, k, 3, &mm, err, sizeof err)) fail_msg("%s", err);
    float *p = initial_params(d, mm, k, 3);
    for (int t = 0; t < tr_model_tensor_count(mm); t++) {
      const tr_tensor_part part = tr_model_tensor_part(mm, t);
      const tr_tensor_info *mi = tr_model_tensor(mm, t);
      float *read = calloc(mi->numel, sizeof *read);
      tr_tensor_part_copy(&part, w + tr_model_tensor(whole, t)->offset, read, 0);
      assert_memory_equal(read, p + mi->offset, mi->numel * sizeof(float));
      free(read);
    }
    free(p);
    tr_model_free(mm);
  }
  free(w), free(joined);
  tr_model_free(whole);
  tr_device_list_close(l);
}

static void widths_that_do_not_divide_are_refused_naming_the_layer(void **state) {
  (void)state;
  struct {
    tr_model *(*make)(void);
    int T;
    const char *says;
  } cases[] = {
      {odd, 3, "layer 0 (linear): 10 output features across 3 members"},
      {odd, 5, "layer 5.0 (linear): 6 output features across 5 members"},
      {odd3, 4, "layer 1 (linear): 6 output features across 4 members"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_model *m = cases[i].make(), *member = (tr_model *)1;
    char err[256] = "";
    assert_int_equal(tr_model_shard(m, 0, cases[i].T, &member, err, sizeof err), TR_EINVAL);
    assert_null(member);
    if (!strstr(err, cases[i].says)) fail_msg("'%s' does not say '%s'", err, cases[i].says);
    tr_model_free(m);
  }
  tr_model *m = mlp(), *member = NULL;
  char err[256] = "";
  assert_int_equal(tr_model_shard(m, 2, 2, &member, err, sizeof err), TR_EINVAL);
  assert_int_equal(tr_model_shard(m, 0, 2, &member, err, sizeof err), 0);
  tr_model *twice = NULL;
  assert_int_equal(tr_model_shard(member, 0, 2, &twice, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "already part 0 of 2"));
  tr_model_free(member);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_members_train_as_the_whole_with_one_two_and_four),
      cmocka_unit_test(odd_sizes_train_as_the_whole_with_two_and_three),
      cmocka_unit_test(the_last_linear_splits_by_columns_under_a_vocab_parallel_loss),
      cmocka_unit_test(split_backward_and_recomputation_split_alike),
      cmocka_unit_test(bf16_members_multiply_as_the_whole_does),
      cmocka_unit_test(parts_join_into_the_whole_and_split_into_any_layout),
      cmocka_unit_test(widths_that_do_not_divide_are_refused_naming_the_layer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
