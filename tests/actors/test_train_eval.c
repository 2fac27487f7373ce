/* test_train_eval.c — tr_train_run's held-out samples (tr_train_options.eval_*): eval_split
 * trains on a part of the run's data (a source of the caller's with rows, read through the
 * split: never a sample past its rows), and every way of giving held-out samples twice or
 * wrongly is refused naming the option's field, before anything trains, held-out values
 * that are not finite included. */
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

enum { ROWS = 100 };

/* mlp4's samples: 64 floats in, 64 out, a pure function of the row; the highest sample
 * index asked for, and how many were filled. */
static atomic_long filled, highest;

static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg;
  float *fx = x, *fy = y;
  for (size_t k = 0; k < count; k++) {
    const uint64_t r = (first + k) % ROWS;
    for (int i = 0; i < 64; i++) {
      const float v = (float)((r * 31 + (uint64_t)i * 7) % 97) / 97.0f - 0.5f;
      fx[k * 64 + (size_t)i] = v;
      if (fy) fy[k * 64 + (size_t)i] = 0.5f * v;
    }
  }
  long top = (long)(first + count - 1), seen = atomic_load(&highest);
  while (top > seen && !atomic_compare_exchange_weak(&highest, &seen, top)) {
  }
  atomic_fetch_add(&filled, (long)count);
  return 0;
}

static tr_data *open_source(int64_t rows) {
  char err[256];
  tr_data *d;
  const tr_data_callback cb = {.name = "mine", .x_bytes = 64 * 4, .y_bytes = 64 * 4,
                               .fill = fill, .rows = rows};
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), 0);
  return d;
}

static tr_train_options options(void) {
  tr_train_options o = tr_train_defaults();
  o.spec = &mlp4;
  o.devices = "host:1";
  o.steps = 6;
  return o;
}

static void a_split_trains_on_the_sources_rows(void **state) {
  (void)state;
  char err[512] = "";
  tr_data *d = open_source(ROWS);
  tr_train_options o = options();
  o.job.data = d;
  o.eval_split = 0.25;
  atomic_store(&filled, 0);
  atomic_store(&highest, -1);
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(r.steps, 6);
  /* 6 steps of 48 samples: 288 of them, each a row of the 75 trained on */
  if (atomic_load(&filled) < 6 * 48) fail_msg("filled %ld samples of 288", atomic_load(&filled));
  if (atomic_load(&highest) >= ROWS)
    fail_msg("sample %ld asked for: the source was not read through its split",
             atomic_load(&highest));
  tr_data_close(d); /* the caller's, still open after the run */
}

static void held_out_samples_given_wrongly_are_refused_by_field(void **state) {
  (void)state;
  tr_data *d = open_source(ROWS), *endless = open_source(0);
  tr_train_options o = options();
  o.job.data = d;
  o.eval_split = 0.2;
  o.eval_data = "x.npy";
  o.eval_labels = "y.npy";
  refused(&o, "eval_split", "not both");
  o = options();
  o.job.data = d;
  o.job.eval.data = d;
  o.eval_split = 0.2;
  refused(&o, "job.eval.data", "not both");
  o.eval_split = 0;
  o.eval_data = "x.npy";
  refused(&o, "job.eval.data", "not both");
  const double fractions[] = {1, 1.5, -0.2};
  for (int k = 0; k < 3; k++) {
    o = options();
    o.job.data = d;
    o.eval_split = fractions[k];
    refused(&o, "eval_split", "in (0, 1)");
  }
  o = options();
  o.job.data = endless;
  o.eval_split = 0.2;
  refused(&o, "eval_split", "an endless source cannot be split");
  o = options(); /* the built-in data: generated, endless */
  o.eval_split = 0.2;
  refused(&o, "eval_split", "data 'teacher': an endless source");
  o.job.data = d;
  o.eval_split = 0.001; /* round(0.1) of 100 rows: none held out */
  refused(&o, "eval_split", "leaves the held-out part no rows");
  o = options();
  o.eval_labels = "y.npy";
  refused(&o, "eval_data", "two .npy files");
  o.eval_labels = NULL;
  o.eval_data = "/nonexistent/x.npy";
  o.eval_labels = "/nonexistent/y.npy";
  refused_with(&o, TR_EIO, "eval_data", "/nonexistent/x.npy"); /* unreadable, as data's */
  tr_data_close(d);
  tr_data_close(endless);
}

/* A source whose sample 13 (every sample, with arg 2) holds a NaN input (arg 1, 2) or a
 * +Inf target (arg 3): mine's values otherwise. */
static int poisoned(void *arg, uint64_t first, size_t count, void *x, void *y) {
  const int how = (int)(intptr_t)arg;
  fill(NULL, first, count, x, y);
  for (size_t k = 0; k < count; k++)
    if (first + k == 13 || how == 2) {
      if (how == 3 && y) ((float *)y)[k * 64 + 2] = INFINITY;
      if (how != 3) ((float *)x)[k * 64 + 5] = NAN;
    }
  return 0;
}

static tr_data *open_poisoned(int how, int64_t rows) {
  char err[256];
  tr_data *d;
  const tr_data_callback cb = {.name = "bad", .x_bytes = 64 * 4, .y_bytes = 64 * 4,
                               .fill = poisoned, .arg = (void *)(intptr_t)how, .rows = rows};
  assert_int_equal(tr_data_open_callback(&d, &cb, err, sizeof err), 0);
  return d;
}

/* No gradient follows a held-out forward to catch a NaN (a ReLU would make it 0, and a
 * NaN loss drop out of the mean): a finite source's held-out values are read and refused
 * before anything trains, naming the sample; an endless one's as the loader reads them. */
static void held_out_values_that_are_not_finite_are_refused(void **state) {
  (void)state;
  tr_data *d = open_source(ROWS), *bad = open_poisoned(1, ROWS), *all = open_poisoned(2, ROWS);
  tr_train_options o = options();
  o.job.data = d;
  o.job.eval.data = bad;
  refused(&o, "job.eval.data", "data 'bad': sample 13, input 5 holds NaN");
  o.job.eval.samples = 10; /* those evaluated: sample 13 is not */
  char err[1024] = "";
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  o = options();
  o.job.data = all;
  o.eval_split = 0.2;
  refused(&o, "eval_split", "input 5 holds NaN");
  tr_data *endless = open_poisoned(3, 0); /* read when evaluated: the run fails then */
  o = options();
  o.job.data = d;
  o.job.eval = (tr_eval_config){.data = endless, .samples = 20};
  assert_int_equal(tr_train_run(&o, &r, err, sizeof err), TR_ENONFINITE);
  if (!strstr(err, "data 'bad': sample 13, target 2 holds +Inf")) fail_msg("%s", err);
  tr_data_close(endless);
  tr_data_close(all);
  tr_data_close(bad);
  tr_data_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_split_trains_on_the_sources_rows),
      cmocka_unit_test(held_out_samples_given_wrongly_are_refused_by_field),
      cmocka_unit_test(held_out_values_that_are_not_finite_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
