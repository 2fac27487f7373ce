/* test_train_job.c — tr_train_run and the fields of its `job` that it sets itself: a data
 * source of the caller's (job.data) is the run's data, not replaced by the built-in one, and
 * every field it cannot honour (job.model, job.data beside data files, job.strategy and
 * job.async.enabled saying otherwise than strategy) is refused by name, never ignored; so
 * is a number of the job's out of its range (a NaN or negative learning rate is not the
 * model's). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#include "refused.h"
#include "specs.h"

/* mlp4's samples: 64 floats in, 64 out, a pure function of the index, counted. */
static atomic_long filled;

static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg;
  float *fx = x, *fy = y;
  for (size_t k = 0; k < count; k++)
    for (int i = 0; i < 64; i++) {
      const float v = (float)(((first + k) * 31 + (uint64_t)i * 7) % 97) / 97.0f - 0.5f;
      fx[k * 64 + (size_t)i] = v;
      if (fy) fy[k * 64 + (size_t)i] = 0.5f * v;
    }
  atomic_fetch_add(&filled, (long)count);
  return 0;
}

static tr_train_options options(void) {
  tr_train_options o = tr_train_defaults();
  o.spec = &mlp4;
  o.devices = "host:2";
  o.steps = 6;
  return o;
}

static void a_source_in_job_data_is_the_runs_data(void **state) {
  (void)state;
  char err[512] = "";
  tr_data *d;
  const tr_data_callback cb = {.name = "mine", .x_bytes = 64 * 4, .y_bytes = 64 * 4,
                               .fill = fill};
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), 0);
  const tr_strategy strategies[] = {TR_STRATEGY_SINGLE, TR_STRATEGY_DP};
  for (size_t s = 0; s < 2; s++) {
    tr_train_options o = options();
    o.strategy = strategies[s];
    o.job.data = d;
    atomic_store(&filled, 0);
    tr_train_result r;
    if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(r.steps, 6);
    /* every step's samples came from the callback: at least 6 batches of 48 */
    if (atomic_load(&filled) < 6 * 48)
      fail_msg("%s: the source filled %ld samples of 288", tr_strategy_name(o.strategy),
               atomic_load(&filled));
  }
  tr_data_close(d); /* the caller's, still open after the runs */
}

static void fields_it_sets_itself_are_refused_by_name(void **state) {
  (void)state;
  char err[512];
  tr_model *m;
  tr_data *d;
  assert_int_equal(tr_model_new(&m, &mlp4, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&d, m, 1, NULL, NULL, err, sizeof err), 0);
  tr_train_options o = options();
  o.job.model = m;
  refused(&o, "job.model", "leave job.model NULL");
  o = options();
  o.job.data = d;
  o.data = "x.npy";
  o.labels = "y.npy";
  refused(&o, "job.data", "not both");
  o = options();
  o.job.strategy = "dp";
  refused(&o, "job.strategy", "strategy (single)");
  o = options();
  o.job.async.enabled = 1;
  refused(&o, "job.async.enabled", "strategy async");
  o = options(); /* the strategy's own name is no contradiction */
  o.job.strategy = "single";
  o.steps = 2;
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  tr_data_close(d);
  tr_model_free(m);
}

/* A number of the optimizer's that is NaN, infinite or out of its range is refused naming
 * its field, never replaced by the model's (lr 0 and clip 0 still mean the model's). */
static void optimizer_numbers_out_of_their_range_are_refused_by_name(void **state) {
  (void)state;
  static const struct {
    size_t at;
    const char *field;
    float value;
    const char *rule;
  } bad[] = {
      {offsetof(tr_optim_config, lr), "optim.lr", NAN, "a learning rate is finite and > 0"},
      {offsetof(tr_optim_config, lr), "optim.lr", -0.1f, "a learning rate"},
      {offsetof(tr_optim_config, lr), "optim.lr", INFINITY, "a learning rate"},
      {offsetof(tr_optim_config, clip), "optim.clip", NAN, "a clipping norm is finite"},
      {offsetof(tr_optim_config, clip), "optim.clip", -1, "a clipping norm"},
      {offsetof(tr_optim_config, weight_decay), "optim.weight_decay", -0.01f, ">= 0"},
      {offsetof(tr_optim_config, momentum), "optim.momentum", 1.5f, "in [0, 1)"},
      {offsetof(tr_optim_config, beta1), "optim.beta1", NAN, "in [0, 1)"},
      {offsetof(tr_optim_config, beta2), "optim.beta2", 1, "in [0, 1)"},
      {offsetof(tr_optim_config, eps), "optim.eps", -INFINITY, "finite and >= 0"},
  };
  const tr_optim_kind kinds[] = {TR_OPTIM_MODEL, TR_OPTIM_ADAMW};
  for (size_t k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      tr_train_options o = options();
      o.job.optim = kinds[k] == TR_OPTIM_MODEL ? (tr_optim_config){.kind = TR_OPTIM_MODEL}
                                               : tr_optim_defaults(kinds[k], 0);
      memcpy((char *)&o.job.optim + bad[i].at, &bad[i].value, sizeof(float));
      refused(&o, bad[i].field, bad[i].rule);
    }
  tr_train_options o = options(); /* dc_lambda too, and the time of a timed run */
  o.strategy = TR_STRATEGY_ASYNC;
  o.job.async.dc_lambda = INFINITY;
  refused(&o, "async.dc_lambda", "finite");
  o = options();
  o.steps = 0;
  o.seconds = INFINITY;
  refused(&o, "steps", "seconds (finite)");
  o = options(); /* 0: the model's */
  o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0);
  o.steps = 2;
  char err[512];
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_source_in_job_data_is_the_runs_data),
      cmocka_unit_test(fields_it_sets_itself_are_refused_by_name),
      cmocka_unit_test(optimizer_numbers_out_of_their_range_are_refused_by_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
