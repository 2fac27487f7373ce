/* test_eval.c — held-out evaluation (tr_job_config.eval): the same loss and accuracy in
 * every layout (recomputing and under ZeRO-1 too), equal to a forward of the final
 * parameters computed by hand; training unchanged to the bit by it; evaluations after every
 * `every` steps and at the end (a timed run's too), a part-filled last micro-batch counting
 * only its samples; a token model's figures over its tokens; --json and the summary;
 * held-out batches through a relay of the user's (one that drops their flag told so); and
 * the configurations it cannot serve refused by name. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "eval"
#include "scratch.h"

#include "compare.h"
#include "refused.h"
#include "specs.h"

enum { IN = 16, CLASSES = 8, HELD = 50, STEPS = 6, EVERY = 3 };

/* A classifier with dropout (its masks must be off in evaluation), cross-entropy. */
static const tr_layer_spec net_layers[] = {
    LINEAR(IN, 32, 1), RELU(32), DROPOUT(32, 0.25f), LINEAR(32, 32, 1),
    RELU(32),          LINEAR(32, 32, 1), RELU(32),  LINEAR(32, CLASSES, 1),
};
static const tr_model_spec net = {
    .name = "evalnet",
    .ctx = 1,
    .loss = TR_LOSS_CROSSENTROPY,
    .nlayers = 8,
    .layers = net_layers,
    .batch = 24,
    .optim = {.kind = TR_OPTIM_SGD, .lr = 0.2f},
};

/* Samples: inputs in [-1, 1) from the index (and `arg`, the set's own offset); the class
 * is the largest of the first CLASSES inputs, so that there is something to learn. */
static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  const uint64_t base = (uint64_t)(uintptr_t)arg;
  float *fx = x;
  int32_t *iy = y;
  for (size_t k = 0; k < count; k++) {
    const uint64_t s = base + first + k;
    float *row = fx + k * IN;
    for (int i = 0; i < IN; i++) {
      uint64_t h = (s * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xC2B2AE3D27D4EB4Full);
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 32;
      row[i] = (float)(h % 2048) / 1024.0f - 1.0f;
    }
    if (iy) {
      int best = 0;
      for (int c = 1; c < CLASSES; c++)
        if (row[c] > row[best]) best = c;
      iy[k] = best;
    }
  }
  return 0;
}

static tr_data *train_data, *held_data;

static tr_data *open_source(const char *name, uint64_t base, size_t x_bytes) {
  char err[512];
  tr_data *d;
  const tr_data_callback cb = {.name = name, .x_bytes = x_bytes, .y_bytes = sizeof(int32_t),
                               .fill = fill, .arg = (void *)(uintptr_t)base};
  if (tr_data_open_callback(&d, &cb, err, sizeof err)) fail_msg("%s", err);
  return d;
}

static int group_setup(void **state) {
  if (setup(state)) return -1;
  train_data = open_source("train", 0, IN * sizeof(float));
  held_data = open_source("held", 1u << 20, IN * sizeof(float));
  return 0;
}

static int group_teardown(void **state) {
  tr_data_close(train_data);
  tr_data_close(held_data);
  return teardown(state);
}

/* Every report's figures, as an observer hears them. */
enum { MAX_REPORTS = 64 };
typedef struct heard {
  tr_report_msg r[MAX_REPORTS];
  int n;
} heard;

static void observe(void *arg, const tr_report_msg *report) {
  heard *h = arg;
  if (h->n < MAX_REPORTS) h->r[h->n++] = *report;
}

static tr_train_options options(const layout_case *c, bool eval, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.spec = &net;
  o.steps = steps;
  o.job.data = train_data;
  if (eval) o.job.eval = (tr_eval_config){.data = held_data, .samples = HELD, .every = EVERY};
  return c ? with_layout(o, c) : o;
}

static void run_ok(const tr_train_options *o, tr_train_result *r) {
  char err[1024];
  if (tr_train_run(o, r, err, sizeof err)) fail_msg("%s: %s", tr_strategy_name(o->strategy), err);
}

/* ---- by hand: the final parameters from the checkpoint, forward over the held-out samples -- */

static void by_hand(const char *checkpoint, double *loss, double *accuracy) {
  char err[512];
  tr_model *m;
  tr_device_list *devs;
  tr_checkpoint *ck;
  assert_int_equal(tr_model_new(&m, &net, err, sizeof err), 0);
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  if (tr_checkpoint_open(&ck, checkpoint, err, sizeof err)) fail_msg("%s", err);
  tr_device *d = tr_device_list_at(devs, 0);
  assert_int_equal(tr_device_bind(d), 0);
  tr_stage_config c = tr_stage_defaults(m);
  c.batch = c.global_batch = HELD;
  tr_stage *st;
  if (tr_stage_open(&st, m, d, &c, err, sizeof err)) fail_msg("%s", err);
  const size_t numel = tr_stage_info_of(st)->numel;
  float *params = calloc(numel, sizeof *params);
  for (int i = 0; i < tr_model_tensor_count(m); i++) {
    const tr_tensor_info *t = tr_model_tensor(m, i);
    assert_int_equal(tr_checkpoint_read(ck, t->name, TR_DTYPE_F32, t->ndim, t->shape,
                                        params + t->offset), 0);
  }
  assert_int_equal(tr_stage_upload(st, TR_STAGE_PARAMS, params), 0);
  float x[HELD * IN], out[HELD * CLASSES], losses[HELD];
  int32_t y[HELD];
  fill((void *)(uintptr_t)(1u << 20), 0, HELD, x, y);
  tr_stream *s = tr_stage_stream(st);
  float *dl;
  assert_int_equal(tr_device_alloc(d, sizeof losses, (void **)&dl), 0);
  tr_stage_set_training(st, 0);
  assert_int_equal(tr_memcpy(s, tr_stage_input(st, 0), x, sizeof x, TR_COPY_H2D), 0);
  assert_int_equal(tr_memcpy(s, tr_stage_target(st, 0), y, sizeof y, TR_COPY_H2D), 0);
  assert_int_equal(tr_stage_forward(st, 0), 0);
  assert_int_equal(tr_stage_sample_losses(st, 0, dl), 0);
  assert_int_equal(tr_memcpy(s, losses, dl, sizeof losses, TR_COPY_D2H), 0);
  assert_int_equal(tr_memcpy(s, out, tr_stage_output(st, 0), sizeof out, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(s), 0);
  double sum = 0;
  int right = 0;
  for (int b = 0; b < HELD; b++) {
    sum += losses[b];
    int best = 0;
    for (int k = 1; k < CLASSES; k++)
      if (out[b * CLASSES + k] > out[b * CLASSES + best]) best = k;
    right += best == y[b];
  }
  *loss = sum / HELD;
  *accuracy = (double)right / HELD;
  tr_device_free(d, dl);
  free(params);
  tr_stage_close(st);
  tr_checkpoint_close(ck);
  tr_device_list_close(devs);
  tr_model_free(m);
}

/* ---- the tests ------------------------------------------------------------------------------- */

static void every_layout_evaluates_alike_and_as_by_hand(void **state) {
  (void)state;
  const layout_case cases[] = {
      {TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
      DP("host:2"),
      PIPELINE("host:2", TR_SCHEDULE_1F1B, 4),
      PIPELINE("host:2", TR_SCHEDULE_GPIPE, 4),
      INTERLEAVED("host:2", 2, 4),
      PIPELINE("host:2", TR_SCHEDULE_ZB1, 4),
      HYBRID("host:4"),
      RECOMPUTING("host:2", TR_SCHEDULE_1F1B, 4),
      DP("host:2"), /* under ZeRO-1 (below) */
  };
  const size_t zero = sizeof cases / sizeof cases[0] - 1;
  tr_train_result ref;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tr_train_options o = options(&cases[k], true, STEPS);
    if (k == 0) o.job.checkpoint.path = path("single.safetensors");
    o.job.zero = k == zero;
    tr_train_result r;
    run_ok(&o, &r);
    char sched[64];
    const char *name = tr_strategy_name(o.strategy);
    layout_schedule(&cases[k], sched, sizeof sched);
    if (k == zero) snprintf(sched, sizeof sched, "ZeRO-1");
    if (r.eval_step != STEPS || r.eval_samples != HELD || r.eval_count != 2)
      fail_msg("%s %s: evaluation after step %lld of %lld samples, %d of them (want %d, %d, 2)",
               name, sched, (long long)r.eval_step, (long long)r.eval_samples, r.eval_count,
               STEPS, HELD);
    if (!isfinite(r.eval_loss) || !(r.eval_accuracy >= 0 && r.eval_accuracy <= 1))
      fail_msg("%s %s: held-out loss %g, accuracy %g", name, sched, r.eval_loss,
               r.eval_accuracy);
    if (k == 0) {
      ref = r;
      double loss, accuracy;
      by_hand(path("single.safetensors"), &loss, &accuracy);
      if (fabs(r.eval_loss - loss) > 1e-6 * fabs(loss) || r.eval_accuracy != accuracy)
        fail_msg("single: held-out loss %.9g, accuracy %.4f; by hand %.9g, %.4f", r.eval_loss,
                 r.eval_accuracy, loss, accuracy);
      continue;
    }
    if (fabs(r.eval_loss - ref.eval_loss) > 1e-5 * fabs(ref.eval_loss) ||
        fabs(r.eval_accuracy - ref.eval_accuracy) > 1e-5)
      fail_msg("%s %s: held-out loss %.9g, accuracy %.4f; single: %.9g, %.4f", name, sched,
               r.eval_loss, r.eval_accuracy, ref.eval_loss, ref.eval_accuracy);
  }
}

/* Training's losses and parameters are the same bits with evaluations between its steps. */
static void evaluation_changes_no_training_bit(void **state) {
  (void)state;
  const layout_case cases[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                               PIPELINE("host:2", TR_SCHEDULE_1F1B, 4), DP("host:2")};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    heard h[2] = {{.n = 0}, {.n = 0}}; /* (not {0}: its first member is atomic) */
    tr_train_result r[2];
    const char *files[2] = {"plain.safetensors", "evaluated.safetensors"};
    for (int e = 0; e < 2; e++) {
      tr_train_options o = options(&cases[k], e == 1, STEPS);
      if (e) o.job.eval.every = 1;
      o.job.checkpoint.path = path(files[e]);
      o.observe = observe;
      o.observe_arg = &h[e];
      run_ok(&o, &r[e]);
    }
    const char *name = tr_strategy_name(cases[k].strategy);
    assert_int_equal(r[1].eval_count, STEPS);
    assert_int_equal(r[0].eval_count, 0);
    assert_int_equal(h[0].n, h[1].n);
    for (int i = 0; i < h[0].n; i++)
      if (memcmp(&h[0].r[i].last_loss, &h[1].r[i].last_loss, sizeof(double)))
        fail_msg("%s: step %lld's loss %.9g, with evaluations %.9g", name,
                 (long long)h[0].r[i].step, h[0].r[i].last_loss, h[1].r[i].last_loss);
    assert_memory_equal(&r[0].final_loss, &r[1].final_loss, sizeof(double));
    char worst[128];
    const double d = params_difference(path(files[0]), path(files[1]), worst, sizeof worst);
    if (d != 0) fail_msg("%s: the parameters differ by %.3g (%s)", name, d, worst);
  }
}

/* After steps 3 and 6 (every 3), and at the end, 7; reports carry the latest, none before,
 * and report k the evaluation after step k itself when one was due. */
static void evaluations_come_every_n_steps_and_at_the_end(void **state) {
  (void)state;
  const layout_case cases[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                               PIPELINE("host:2", TR_SCHEDULE_1F1B, 4)};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    heard h = {.n = 0};
    tr_train_options o = options(&cases[k], true, 7);
    o.observe = observe;
    o.observe_arg = &h;
    o.observe_every = 1;
    tr_train_result r;
    run_ok(&o, &r);
    assert_int_equal(r.eval_count, 3);
    assert_int_equal(r.eval_step, 7);
    assert_int_equal(r.eval_samples, HELD); /* 24 + 24 + 2 (or 6 × 8 + 2): only the samples */
    int64_t seen[8];
    int n = 0;
    for (int i = 0; i < h.n; i++) {
      const tr_report_msg *p = &h.r[i];
      if (p->eval_step < 0) {
        assert_true(isnan(p->eval_loss) && isnan(p->eval_accuracy));
        assert_true(n == 0);
        continue;
      }
      assert_true(p->eval_step <= p->step);
      if (p->step % 3 == 0) assert_int_equal(p->eval_step, p->step); /* never the one before */
      assert_int_equal(p->eval_samples, HELD);
      if (n == 0 || seen[n - 1] != p->eval_step) seen[n++] = p->eval_step;
      if (n > 3) break;
    }
    if (n != 3 || seen[0] != 3 || seen[1] != 6 || seen[2] != 7)
      fail_msg("%s: the reports told of %d evaluations (after steps %lld, %lld, %lld): want "
               "3, 6, 7", tr_strategy_name(o.strategy), n, n > 0 ? (long long)seen[0] : -1LL,
               n > 1 ? (long long)seen[1] : -1LL, n > 2 ? (long long)seen[2] : -1LL);
    assert_true(h.r[h.n - 1].last && h.r[h.n - 1].eval_step == 7);
    assert_memory_equal(&h.r[h.n - 1].eval_loss, &r.eval_loss, sizeof(double));
  }
  /* one sample on two replicas: the second's share is empty, it sends no batch */
  const layout_case dp = DP("host:2");
  tr_train_options o = options(&dp, true, 4);
  o.job.eval.samples = 1;
  tr_train_result r;
  run_ok(&o, &r);
  assert_int_equal(r.eval_count, 2);
  assert_int_equal(r.eval_samples, 1);
  assert_true(isfinite(r.eval_loss));
}

/* A timed run's end is known late, the loaders ahead of it: the evaluation at its end is
 * still after its last step, and none goes missing. */
static void a_timed_run_evaluates_after_its_last_step(void **state) {
  (void)state;
  const layout_case cases[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                               PIPELINE("host:2", TR_SCHEDULE_1F1B, 4), DP("host:2")};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tr_train_options o = options(&cases[k], true, 0);
    o.seconds = 0.3;
    o.job.eval.every = 2;
    tr_train_result r;
    run_ok(&o, &r);
    const int64_t want = r.steps / 2 + (r.steps % 2 != 0);
    if (r.eval_step != r.steps || r.eval_count != want || r.eval_samples != HELD)
      fail_msg("%s, timed: %lld steps, the last evaluation after step %lld of %lld samples, "
               "%d of them (want %lld)", tr_strategy_name(o.strategy), (long long)r.steps,
               (long long)r.eval_step, (long long)r.eval_samples, r.eval_count,
               (long long)want);
  }
}

/* gpt's held-out figures are over its B × T rows: accuracy a fraction of tokens, the loss
 * each sample's mean over its tokens, alike in a pipeline. */
static void a_token_model_evaluates_its_rows(void **state) {
  (void)state;
  char err[512];
  tr_model *m;
  tr_data *held;
  assert_int_equal(tr_model_new(&m, &gpt1, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&held, m, 7, NULL, NULL, err, sizeof err), 0);
  const layout_case cases[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                               PIPELINE("host:2", TR_SCHEDULE_1F1B, 4)};
  tr_train_result r[2];
  for (int k = 0; k < 2; k++) {
    tr_train_options o = with_layout(tr_train_defaults(), &cases[k]);
    o.spec = &gpt1;
    o.steps = 4;
    o.job.eval = (tr_eval_config){.data = held, .samples = 30, .every = 2};
    run_ok(&o, &r[k]);
    assert_int_equal(r[k].eval_count, 2);
    assert_int_equal(r[k].eval_samples, 30);
    assert_true(isfinite(r[k].eval_loss) && r[k].eval_loss > 0);
    /* a fraction of 30 × 16 tokens */
    const double tokens = r[k].eval_accuracy * 30 * 16;
    if (!(r[k].eval_accuracy >= 0 && r[k].eval_accuracy <= 1) ||
        fabs(tokens - round(tokens)) > 1e-6)
      fail_msg("%s: accuracy %.9g is no fraction of 480 tokens",
               tr_strategy_name(o.strategy), r[k].eval_accuracy);
  }
  if (fabs(r[1].eval_loss - r[0].eval_loss) > 1e-5 * r[0].eval_loss ||
      r[1].eval_accuracy != r[0].eval_accuracy)
    fail_msg("gpt: held-out loss %.9g, accuracy %.6f in a pipeline; single %.9g, %.6f",
             r[1].eval_loss, r[1].eval_accuracy, r[0].eval_loss, r[0].eval_accuracy);
  tr_data_close(held);
  tr_model_free(m);
}

/* The plan says the evaluation; --json's "eval" object (null without one) and the summary's
 * words. */
static char *written(const tr_train_result *r, int (*write)(const tr_train_result *, FILE *)) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  assert_non_null(f);
  assert_int_equal(write(r, f), 0);
  fclose(f);
  return text;
}

static void the_result_writes_its_evaluation(void **state) {
  (void)state;
  tr_train_options o = options(NULL, true, STEPS);
  char *plan = NULL;
  size_t plan_n = 0;
  o.plan = open_memstream(&plan, &plan_n);
  tr_train_result r;
  run_ok(&o, &r);
  fclose(o.plan);
  if (!strstr(plan, "held-out evaluation: 50 samples of 'held' after every 3 steps and at the "
                    "end, forward on the batch edges (replica 0: 3 micro-batch(es))"))
    fail_msg("the plan does not say the evaluation: %s", plan);
  free(plan);
  char *json = written(&r, tr_train_result_json), *words = written(&r, tr_train_result_summary);
  char want[256];
  snprintf(want, sizeof want, "\"eval\":{\"step\":%d,\"samples\":%d,\"loss\":%.9g,"
           "\"accuracy\":%.9g,\"count\":2}", STEPS, HELD, r.eval_loss, r.eval_accuracy);
  if (!strstr(json, want)) fail_msg("--json lacks %s: %s", want, json);
  snprintf(want, sizeof want, "held-out loss %.4g", r.eval_loss);
  if (!strstr(words, want) || !strstr(words, "accuracy "))
    fail_msg("the summary lacks \"%s\" and the accuracy: %s", want, words);
  free(json);
  free(words);
  o = options(NULL, false, STEPS);
  run_ok(&o, &r);
  assert_int_equal(r.eval_step, -1);
  assert_int_equal(r.eval_count, 0);
  json = written(&r, tr_train_result_json), words = written(&r, tr_train_result_summary);
  if (!strstr(json, "\"eval\":null")) fail_msg("--json without an evaluation: %s", json);
  if (strstr(words, "held-out")) fail_msg("the summary without an evaluation: %s", words);
  free(json);
  free(words);
}

/* ---- a relay of the user's between the loader and the stage ---------------------------------- */

typedef struct relay {
  tr_edge *in, *out;
  float scale;
  bool drop_flag; /* a relay written wrong: its batches are all training ones */
  int64_t held;   /* held-out batches seen */
} relay;

static int relay_receive(tr_actor *self, tr_msg *msg) {
  relay *r = tr_actor_state(self);
  if (msg->type == &tr_batch_type) {
    tr_batch_msg *b = (tr_batch_msg *)msg;
    float *x = b->x;
    for (size_t i = 0; i < b->x_bytes / sizeof(float); i++) x[i] *= r->scale;
    r->held += b->eval != 0;
    if (!tr_edge_acquire(r->out))
      return tr_actor_fail(self, TR_ESTATE, "no credit: the relay's edges differ");
    tr_batch_msg *f = tr_batch_forward(b);
    if (r->drop_flag) f->eval = 0;
    tr_edge_send(r->out, f);
  } else if (msg->type == &tr_edge_credit_type) {
    tr_edge_release(r->in, ((tr_edge_credit_msg *)msg)->count);
  }
  return 0;
}
static const tr_behaviour relay_behaviour = {.name = "relay", .receive = relay_receive};

/* One stage on host:1 fed through a relay that multiplies the inputs by `scale` (NULL: no
 * relay); the result's evaluation. `fails`: the run is to fail saying so (the relay drops
 * the eval flag). */
static void relayed(const float *scale, int64_t *held, tr_train_result *r, const char *fails) {
  char err[512];
  tr_model *m;
  tr_device_list *devs;
  tr_graph *g;
  tr_job *j;
  assert_int_equal(tr_model_new(&m, &net, err, sizeof err), 0);
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  assert_int_equal(tr_graph_new(&g, &(tr_system_config){.watchdog_ms = 20000}), 0);
  tr_job_config c = tr_job_defaults();
  c.model = m;
  c.data = train_data;
  c.eval = (tr_eval_config){.data = held_data, .samples = HELD, .every = EVERY};
  if (tr_job_new(&j, g, &c, err, sizeof err)) fail_msg("%s", err);
  tr_actor *stage, *loader, *coordinator, *ra;
  assert_int_equal(tr_job_add_stage(j, 0, 0, tr_device_list_at(devs, 0), &stage), 0);
  assert_int_equal(tr_job_add_coordinator(j, &coordinator), 0);
  assert_int_equal(tr_job_add_loader(j, 0, &loader), 0);
  relay rl = {.scale = scale ? *scale : 1, .drop_flag = fails != NULL};
  if (scale == NULL) {
    assert_int_equal(tr_job_feed(j, loader, stage, stage), 0);
  } else {
    assert_int_equal(tr_graph_add_service(g, &(tr_actor_config){.name = "relay",
                                                                .kind = TR_ACTOR_LOOP,
                                                                .behaviour = &relay_behaviour,
                                                                .state = &rl},
                                          &ra),
                     0);
    assert_int_equal(tr_job_connect_batches(j, loader, ra, TR_BATCH_INPUTS, &rl.in), 0);
    assert_int_equal(tr_job_connect_batches(j, ra, stage, TR_BATCH_INPUTS | TR_BATCH_NOTIFY,
                                            &rl.out), 0);
    assert_int_equal(tr_job_connect_batches(j, loader, stage, TR_BATCH_TARGETS, NULL), 0);
  }
  const int rc = tr_graph_run(g, 0, STEPS, 0);
  if (fails ? rc == 0 || !strstr(tr_graph_error(g), fails) : rc != 0)
    fail_msg("want %s: rc %d: %s", fails ? fails : "success", rc, tr_graph_error(g));
  tr_job_result(j, r);
  *held = rl.held;
  tr_graph_free(g);
  tr_job_free(j);
  tr_device_list_close(devs);
  tr_model_free(m);
}

/* Held-out batches pass through the relay like training ones: an identity relay changes
 * nothing, one that negates the inputs changes the held-out loss. */
static void held_out_batches_pass_through_a_relay(void **state) {
  (void)state;
  tr_train_result plain, same, negated;
  int64_t held;
  relayed(NULL, &held, &plain, NULL);
  const float one = 1, minus = -1;
  relayed(&one, &held, &same, NULL);
  assert_int_equal(held, 2 * 3); /* two evaluations of 24 + 24 + 2 samples */
  relayed(&minus, &held, &negated, NULL);
  assert_int_equal(plain.eval_count, 2);
  assert_memory_equal(&same.eval_loss, &plain.eval_loss, sizeof(double));
  assert_memory_equal(&same.final_loss, &plain.final_loss, sizeof(double));
  if (!(fabs(negated.eval_loss - plain.eval_loss) > 1e-3))
    fail_msg("negated inputs: held-out loss %.9g, as the plain run's %.9g", negated.eval_loss,
             plain.eval_loss);
  tr_train_result failed; /* a relay that drops the flag is told what it did */
  relayed(&one, &held, &failed, "a relay passes a batch's eval flag on (tr_batch_forward)");
}

/* ---- refusals (refused.h) --------------------------------------------------------------------- */

static void what_cannot_be_evaluated_is_refused_by_name(void **state) {
  (void)state;
  tr_train_options o = options(NULL, true, STEPS);
  o.strategy = TR_STRATEGY_ASYNC;
  o.devices = "host:2";
  refused(&o, "eval.data", "asynchronous");

  o = options(NULL, true, STEPS);
  o.job.data = NULL; /* the model's synthetic data, which a device can make */
  o.job.data_on = TR_DATA_ON_DEVICE;
  refused(&o, "data_on", "eval.data");

  o = options(NULL, true, STEPS);
  o.job.eval.samples = 0; /* an endless callback: no rows */
  refused(&o, "eval.samples", "endless");

  tr_data *narrow = open_source("narrow", 0, 8 * sizeof(float));
  o = options(NULL, true, STEPS);
  o.job.eval.data = narrow;
  refused(&o, "eval.data", "narrow");
  tr_data_close(narrow);

  o = options(NULL, true, STEPS);
  o.job.eval.every = -1;
  refused(&o, "eval.every", ">= 0");

  o = options(NULL, true, STEPS);
  o.job.eval.data = NULL; /* every 3 of nothing */
  refused(&o, "eval.every", "no held-out samples");
  o.job.eval.every = 0;
  refused(&o, "eval.samples", "no held-out samples");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_evaluates_alike_and_as_by_hand),
      cmocka_unit_test(evaluation_changes_no_training_bit),
      cmocka_unit_test(evaluations_come_every_n_steps_and_at_the_end),
      cmocka_unit_test(a_timed_run_evaluates_after_its_last_step),
      cmocka_unit_test(a_token_model_evaluates_its_rows),
      cmocka_unit_test(the_result_writes_its_evaluation),
      cmocka_unit_test(held_out_batches_pass_through_a_relay),
      cmocka_unit_test(what_cannot_be_evaluated_is_refused_by_name),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
