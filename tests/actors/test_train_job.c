/* test_train_job.c — tr_train_run and the fields of its `job` that it sets itself: a data
 * source of the caller's (job.data) is the run's data, not replaced by the built-in one, and
 * every field it cannot honour (job.model, job.data beside data files, job.strategy and
 * job.async.enabled saying otherwise than strategy) is refused by name, never ignored. */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_source_in_job_data_is_the_runs_data),
      cmocka_unit_test(fields_it_sets_itself_are_refused_by_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
