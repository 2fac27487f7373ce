/* test_checkpoint_meta.c — a checkpoint whose optimizer state or metadata is impossible is
 * refused on resume, before training, with a message naming the tensor or key and the rule:
 * Adam's second moments negative, a learning rate not a finite number >= 0, a step count
 * that is not a whole number >= 0, betas outside [0, 1). Checkpoints are crafted from a good
 * one with tr_checkpoint_writer; the good one resumes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "ckmeta"
#include "../actors/scratch.h"

static tr_train_options adamw_run(int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = steps;
  o.deterministic = 1;
  o.job.optim = tr_optim_defaults(TR_OPTIM_ADAMW, 1e-3f);
  return o;
}

static void train_ok(const tr_train_options *o) {
  tr_train_result r;
  char err[1024];
  if (tr_train_run(o, &r, err, sizeof err)) fail_msg("tr_train_run: %s", err);
}

/* The run refuses with `status` and a message holding `needle`, before any step. */
static void refused(const tr_train_options *o, int status, const char *needle) {
  tr_train_result r;
  char err[1024];
  const int rc = tr_train_run(o, &r, err, sizeof err);
  if (rc != status) fail_msg("status %d (%s), expected %d: %s", rc, tr_strerror(rc), status, err);
  if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

/* `from` copied to `to` with metadata `key` set to `value` (NULL: as it was) and, when
 * `tensor` names one, its element 5 set to `x`. */
static void craft(const char *from, const char *to, const char *key, const char *value,
                  const char *tensor, float x) {
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, from, err, sizeof err)) fail_msg("%s", err);
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const size_t n = tr_checkpoint_count(ck);
  float **copies = calloc(n, sizeof *copies);
  bool found = tensor == NULL;
  for (size_t i = 0; i < n; i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    copies[i] = malloc(t->nbytes);
    memcpy(copies[i], t->data, t->nbytes);
    if (tensor && !strcmp(t->name, tensor)) {
      assert_true(t->nbytes > 5 * sizeof(float));
      copies[i][5] = x;
      found = true;
    }
    assert_int_equal(tr_checkpoint_writer_add(w, t->name, t->dtype, t->ndim, t->shape, copies[i]), 0);
  }
  assert_true(found);
  for (size_t i = 0; i < tr_checkpoint_meta_count(ck); i++) {
    const char *k, *v;
    tr_checkpoint_meta_at(ck, i, &k, &v);
    tr_checkpoint_writer_put(w, k, key && !strcmp(k, key) ? value : v);
  }
  assert_int_equal(tr_checkpoint_writer_save(w, to), 0);
  tr_checkpoint_writer_free(w);
  for (size_t i = 0; i < n; i++) free(copies[i]);
  free(copies);
  tr_checkpoint_close(ck);
}

static void impossible_optimizer_state_is_refused_naming_the_rule(void **state) {
  (void)state;
  tr_train_options o = adamw_run(3);
  const char *good = path("good.safetensors"), *bad = path("bad.safetensors");
  o.job.checkpoint.path = good;
  train_ok(&o);

  /* the run keeps the kind's hyperparameters beside lr */
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, good, err, sizeof err)) fail_msg("%s", err);
  assert_string_equal(tr_checkpoint_meta(ck, "lr"), "0.00100000005");
  assert_string_equal(tr_checkpoint_meta(ck, "beta1"), "0.899999976");
  assert_string_equal(tr_checkpoint_meta(ck, "beta2"), "0.999000013");
  assert_non_null(tr_checkpoint_meta(ck, "eps"));
  tr_checkpoint_close(ck);

  o = adamw_run(6);
  o.job.checkpoint.resume = bad;
  craft(good, bad, NULL, NULL, "adam_v.0.weight", -0.25f);
  refused(&o, TR_EFORMAT, "tensor 'adam_v.0.weight' holds -0.25 (element 5 of 1000): Adam's "
                          "second moments are averages of squared gradients, never negative");
  craft(good, bad, NULL, NULL, "adam_v.0.bias", -1e-30f);
  refused(&o, TR_EFORMAT, "tensor 'adam_v.0.bias' holds -1e-30");
  /* first moments may be negative: that checkpoint resumes */
  craft(good, bad, NULL, NULL, "adam_m.0.weight", -0.25f);
  o.job.checkpoint.path = path("from-bad.safetensors");
  train_ok(&o);
  o.job.checkpoint.path = NULL;

  craft(good, bad, "lr", "nan", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'lr' is \"nan\": a learning rate is finite and > 0 (0: the model's)");
  craft(good, bad, "lr", "-0.001", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'lr' is \"-0.001\": a learning rate is finite and > 0 (0: the model's)");
  craft(good, bad, "lr", "fast", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'lr' is \"fast\"");
  craft(good, bad, "beta2", "1", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'beta2' is \"1\": Adam's betas are in [0, 1)");
  craft(good, bad, "beta1", "-0.5", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'beta1' is \"-0.5\": Adam's betas are in [0, 1)");
  craft(good, bad, "eps", "inf", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'eps' is \"inf\": Adam's eps is finite and >= 0");
  craft(good, bad, "step", "-3", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'step' is \"-3\": the steps a run has taken are a whole "
                          "number >= 0");
  craft(good, bad, "step", "nan", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'step' is \"nan\"");
  /* every refusal names the option it came through and the file */
  refused(&o, TR_EFORMAT, bad);

  /* the good one resumes */
  o.job.checkpoint.resume = good;
  train_ok(&o);
}

/* The rules are the optimizer's: SGD's checkpoint has no betas, and momentum may be any sign. */
static void rules_follow_the_optimizer(void **state) {
  (void)state;
  tr_train_options o = adamw_run(2);
  o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0.01f);
  const char *good = path("momentum.safetensors"), *bad = path("momentum-bad.safetensors");
  o.job.checkpoint.path = good;
  train_ok(&o);
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, good, err, sizeof err)) fail_msg("%s", err);
  assert_null(tr_checkpoint_meta(ck, "beta1"));
  tr_checkpoint_close(ck);
  craft(good, bad, NULL, NULL, "momentum.0.weight", -3.0f);
  o.steps = 4;
  o.job.checkpoint.path = NULL;
  o.job.checkpoint.resume = bad;
  train_ok(&o);
  craft(good, bad, "lr", "-1", NULL, 0);
  refused(&o, TR_EFORMAT, "metadata 'lr' is \"-1\": a learning rate is finite and > 0 (0: the model's)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(impossible_optimizer_state_is_refused_naming_the_rule),
      cmocka_unit_test(rules_follow_the_optimizer),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
