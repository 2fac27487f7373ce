/* test_failed_run.c — a run that ends on an error says what became of its state: the last
 * checkpoint on disk and the steps done since, which are lost, or that no checkpoint was
 * written. The error here is a data source of the user's that fails at a given step. */
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

/* The note's "(at least steps A..B)" or "(at least step A)", when it has one (the steps the
 * coordinator had heard of): A is lo, B within [A, hi]. */
static void steps_within(const char *note, long long lo, long long hi) {
  long long a, b;
  const char *p;
  if ((p = strstr(note, " (at least steps "))) {
    assert_int_equal(sscanf(p, " (at least steps %lld..%lld)", &a, &b), 2);
  } else if ((p = strstr(note, " (at least step "))) {
    assert_int_equal(sscanf(p, " (at least step %lld)", &a), 1);
    b = a;
  } else {
    return;
  }
  assert_int_equal(a, lo);
  assert_true(b >= a && b <= hi);
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
      snprintf(want, sizeof want, "; no checkpoint was written to %s: the steps this run did "
               "are lost", ck);
      const char *note = strstr(err, want);
      if (note == NULL) fail_msg("'%s' is not in: %s", want, err);
      steps_within(note, 1, 25);
      continue;
    }
    const long long at = step_of(ck);
    if (at != 10 && at != 20) fail_msg("the checkpoint holds step %lld: %s", at, err);
    snprintf(want, sizeof want, "; the last checkpoint, %s, holds the state after step %lld: "
             "the steps done since are lost", ck, at);
    const char *note = strstr(err, want);
    if (note == NULL) fail_msg("'%s' is not in: %s", want, err);
    steps_within(note, at + 1, 25); /* none of 25, whose data failed */
  }
  source_close(&s);
}

/* Fails before the first checkpoint: none was written, and the steps done are lost. */
static void a_failed_run_before_its_first_checkpoint_says_none_was_written(void **state) {
  (void)state;
  source s;
  source_open(&s, 8);
  const char *ck = path("never.safetensors");
  char err[1024], want[512];
  run_failing(&s, ck, 10, err, sizeof err);
  assert_false(exists(ck));
  snprintf(want, sizeof want, "; no checkpoint was written to %s: the steps this run did are "
           "lost", ck);
  const char *note = strstr(err, want);
  if (note == NULL) fail_msg("'%s' is not in: %s", want, err);
  steps_within(note, 1, 7);
  source_close(&s);
}

/* Without a checkpoint: the steps known done are said lost. */
static void a_failed_run_without_a_checkpoint_says_its_steps_are_lost(void **state) {
  (void)state;
  source s;
  source_open(&s, 40);
  char err[1024];
  run_failing(&s, NULL, 0, err, sizeof err);
  const char *note = strstr(err, "; the steps this run did are lost (no checkpoint.path was "
                                 "given)");
  /* said when the coordinator had heard of a step done; 40 steps give it the time */
  if (note == NULL) fail_msg("the note does not say the steps are lost: %s", err);
  steps_within(note, 1, 39);
  source_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_failed_run_names_its_last_checkpoint_and_the_steps_lost),
      cmocka_unit_test(a_failed_run_before_its_first_checkpoint_says_none_was_written),
      cmocka_unit_test(a_failed_run_without_a_checkpoint_says_its_steps_are_lost),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
