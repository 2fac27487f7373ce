/* test_failed_run.c — a run that ends on an error says what became of its state: the last
 * checkpoint on disk, the step it holds and that the steps done since are lost, or that no
 * checkpoint was written (by this run: a file of an earlier one is named as such). The error
 * here is a data source of the user's that fails at a given step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "failedrun"
#include "../actors/scratch.h"

/* simplenet's own data, until the samples of step `fail_at`. */
typedef struct failing {
  tr_data *inner;
  uint64_t batch;
  int64_t fail_at;
} failing;

static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  const failing *f = arg;
  if (first + count > (uint64_t)f->fail_at * f->batch) return TR_EIO;
  return tr_data_fill(f->inner, first, count, x, y);
}

typedef struct source {
  failing f;
  tr_model *model;
  tr_data *data;
} source;

static void source_open(source *s, int64_t fail_at) {
  char err[512];
  assert_int_equal(tr_model_simplenet(&s->model), 0);
  assert_int_equal(tr_data_open_for(&s->f.inner, s->model, 1, NULL, NULL, err, sizeof err), 0);
  s->f.batch = (uint64_t)tr_model_batch(s->model);
  s->f.fail_at = fail_at;
  const tr_data_callback cb = {.name = "failing", .x_bytes = tr_data_x_bytes(s->f.inner),
                               .y_bytes = tr_data_y_bytes(s->f.inner), .fill = fill,
                               .arg = &s->f};
  assert_int_equal(tr_data_open_callback(&s->data, &cb, err, sizeof err), 0);
}

static void source_close(source *s) {
  tr_data_close(s->data);
  tr_data_close(s->f.inner);
  tr_model_free(s->model);
}

/* The run's error, after it failed as it must. */
static void run_failing(source *s, const char *ck, int64_t every, char *err, size_t n) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = 60;
  o.job.data = s->data;
  o.job.checkpoint.path = ck;
  o.job.checkpoint.every = every;
  o.job.layout.prefetch = 2; /* the loader fails at most two steps ahead of the stages */
  tr_train_result r;
  const int rc = tr_train_run(&o, &r, err, n);
  if (rc != TR_EIO) fail_msg("status %d (%s), expected TR_EIO: %s", rc, tr_strerror(rc), err);
  if (!strstr(err, "data 'failing'")) fail_msg("the error does not name the source: %s", err);
}

static long long step_of(const char *file) {
  tr_checkpoint *ck;
  char err[512];
  uint64_t step;
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  tr_checkpoint_close(ck);
  return (long long)step;
}

static bool exists(const char *file) { return access(file, F_OK) == 0; }

static void has(const char *err, const char *want) {
  if (!strstr(err, want)) fail_msg("'%s' is not in: %s", want, err);
}

/* Fails at step 25, a checkpoint every 10: the message names the checkpoint on disk and the
 * step it holds, or says that none was written, as the file shows. (Which one is on disk
 * depends on how far the coordinator had come: the stages run ahead of it, and a checkpoint
 * whose parts it had not yet taken when the run stopped is not written.) */
static void a_failed_run_names_its_last_checkpoint_and_the_steps_lost(void **state) {
  (void)state;
  source s;
  source_open(&s, 25);
  for (int attempt = 0; attempt < 3; attempt++) {
    const char *ck = path("every10.safetensors");
    unlink(ck);
    char err[1024], want[512];
    run_failing(&s, ck, 10, err, sizeof err);
    if (!exists(ck)) {
      snprintf(want, sizeof want, "; no checkpoint was written to %s: any steps this run did "
               "are lost", ck);
    } else {
      const long long at = step_of(ck);
      if (at != 10 && at != 20) fail_msg("the checkpoint holds step %lld: %s", at, err);
      snprintf(want, sizeof want, "; the last checkpoint, %s, holds the state after step %lld: "
               "the steps done since are lost", ck, at);
    }
    has(err, want);
  }
  source_close(&s);
}

/* Fails before the first checkpoint: none was written, and the steps done are lost; a file
 * of an earlier run at the path is not taken for this run's. */
static void a_failed_run_before_its_first_checkpoint_says_none_was_written(void **state) {
  (void)state;
  source s;
  source_open(&s, 8);
  const char *ck = path("never.safetensors");
  char err[1024], want[512];
  run_failing(&s, ck, 10, err, sizeof err);
  assert_false(exists(ck));
  snprintf(want, sizeof want, "; no checkpoint was written to %s: any steps this run did are "
           "lost", ck);
  has(err, want);

  tr_train_options o = tr_train_defaults(); /* an earlier run leaves step 3 there */
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = 3;
  o.job.checkpoint.path = ck;
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s", err);
  run_failing(&s, ck, 10, err, sizeof err);
  assert_int_equal(step_of(ck), 3);
  snprintf(want, sizeof want, "; no checkpoint was written to %s by this run: any steps it did "
           "are lost (the file holds step 3, of an earlier run)", ck);
  has(err, want);
  source_close(&s);
}

/* Without a checkpoint there is nothing to name: the error is the error. */
static void a_failed_run_without_a_checkpoint_says_only_its_error(void **state) {
  (void)state;
  source s;
  source_open(&s, 8);
  char err[1024];
  run_failing(&s, NULL, 0, err, sizeof err);
  assert_null(strstr(err, "checkpoint"));
  source_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_failed_run_names_its_last_checkpoint_and_the_steps_lost),
      cmocka_unit_test(a_failed_run_before_its_first_checkpoint_says_none_was_written),
      cmocka_unit_test(a_failed_run_without_a_checkpoint_says_only_its_error),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
