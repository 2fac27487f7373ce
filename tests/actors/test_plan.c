/* test_plan.c — the job's plan: what the wiring calls record is checked as a whole before
 * anything runs (a stage that lacks an edge is named with what it lacks), it can be printed
 * with each stage's policy, edges and carriers, it is closed once planned, and the order of
 * the wiring calls does not change what trains (the norm exchange is planned from the whole
 * chain, not made at the chain call that happened to complete it). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "policy_frozen.h"
#include "simplenet_job.h"
#include "troupe.h"

enum { STEPS = 12 };

typedef struct job {
  union {
    simplenet_job base;
    struct {
      SIMPLENET_JOB_FIELDS;
    };
  };
  tr_actor *st[4], *loader[2], *coordinator;
} job;

/* replicas × stages of simplenet on host devices, clipping (the stages agree on the norm);
 * `policy`: the stages' step policy by name (NULL: the configuration's) */
static void open_policy_job(job *b, int replicas, int stages, const char *policy,
                            const char *checkpoint) {
  memset(b, 0, sizeof *b);
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", replicas * stages);
  tr_job_config c = tr_job_defaults();
  c.layout.replicas = replicas;
  c.layout.stages = stages;
  c.layout.microbatches = 2;
  c.optim = tr_optim_defaults(TR_OPTIM_SGD, 0.01f);
  c.optim.clip = policy ? 0 : 0.5f;
  c.step_policy = policy;
  c.checkpoint.path = checkpoint;
  simplenet_job_open(&b->base, spec, 1, &(tr_system_config){.watchdog_ms = 2000}, c);
  for (int i = 0; i < replicas * stages; i++)
    assert_int_equal(tr_job_add_stage(b->j, i / stages, i % stages,
                                      tr_device_list_at(b->devs, i), &b->st[i]), 0);
  for (int r = 0; r < replicas; r++) {
    assert_int_equal(tr_job_add_loader(b->j, r, &b->loader[r]), 0);
    assert_int_equal(tr_job_feed(b->j, b->loader[r], b->st[r * stages],
                                 b->st[r * stages + stages - 1]), 0);
  }
  assert_int_equal(tr_job_add_coordinator(b->j, &b->coordinator), 0);
}

static void open_job(job *b, int replicas, int stages) {
  open_policy_job(b, replicas, stages, NULL, NULL);
}

static void close_job(job *b) { simplenet_job_close(&b->base); }

static void chain(job *b, int replicas, int stages) {
  for (int r = 0; r < replicas; r++)
    for (int s = 0; s + 1 < stages; s++)
      assert_int_equal(tr_job_chain(b->j, b->st[r * stages + s], b->st[r * stages + s + 1]), 0);
}

static void group(job *b, int replicas, int stages) {
  for (int s = 0; s < stages; s++) {
    tr_actor *m[2] = {b->st[s], b->st[stages + s]};
    assert_int_equal(tr_job_group(b->j, m, replicas), 0);
  }
}

static void a_stage_without_its_chain_is_refused_before_the_run_naming_it(void **state) {
  (void)state;
  job b;
  open_job(&b, 1, 2); /* no tr_job_chain */
  char err[512] = "";
  assert_int_equal(tr_job_plan(b.j, err, sizeof err), TR_EINVAL);
  const char *want[] = {"stage 0 of replica 0", "'stage0'", "a chain to stage s+1"};
  for (size_t k = 0; k < sizeof want / sizeof *want; k++)
    if (!strstr(err, want[k])) fail_msg("the refusal lacks \"%s\": %s", want[k], err);
  /* the run refuses it the same way, before any actor starts */
  assert_int_equal(tr_graph_run(b.g, 0, STEPS, 0), TR_EINVAL);
  if (!strstr(tr_graph_error(b.g), "a chain to stage s+1"))
    fail_msg("the run's error does not say what the stage lacks: %s", tr_graph_error(b.g));
  close_job(&b);
}

static void the_plan_prints_each_stage_with_its_policy_edges_and_carriers(void **state) {
  (void)state;
  job b;
  open_job(&b, 2, 2);
  chain(&b, 2, 2);
  group(&b, 2, 2);
  char err[512];
  if (tr_job_plan(b.j, err, sizeof err)) fail_msg("%s", err);
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  tr_job_print_plan(b.j, f);
  fclose(f);
  const char *want[] = {"plan: hybrid of simplenet, 2 replica(s) x 2 stage(s)",
                        "stage 'r0.stage0' on host:0", "stage 'r1.stage1' on host:3",
                        "policy sync (a replica group, the norm exchange)",
                        "act     -> 'r0.stage1'", "grad    <- 'r0.stage1' (2 credits)",
                        "inputs  <- 'loader0'", "targets <- 'loader1'",
                        "report  -> 'coordinator'"};
  for (size_t k = 0; k < sizeof want / sizeof *want; k++)
    if (!strstr(text, want[k])) fail_msg("the plan lacks \"%s\":\n%s", want[k], text);
  free(text);
  close_job(&b);
}

static void wiring_after_the_plan_is_refused(void **state) {
  (void)state;
  job b;
  open_job(&b, 1, 2);
  chain(&b, 1, 2);
  char err[512];
  if (tr_job_plan(b.j, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_job_chain(b.j, b.st[0], b.st[1]), TR_ESTATE);
  assert_int_equal(tr_job_group(b.j, &b.st[0], 1), TR_ESTATE);
  assert_int_equal(tr_job_plan(b.j, err, sizeof err), 0); /* once is enough; again is a no-op */
  close_job(&b);
}

static double train(bool groups_first) {
  job b;
  open_job(&b, 2, 2);
  if (groups_first) group(&b, 2, 2);
  chain(&b, 2, 2);
  if (!groups_first) group(&b, 2, 2);
  if (tr_graph_run(b.g, 0, STEPS, 0)) fail_msg("%s", tr_graph_error(b.g));
  tr_train_result r;
  tr_job_result(b.j, &r);
  close_job(&b);
  return r.final_loss;
}

static void the_order_of_the_wiring_calls_does_not_change_what_trains(void **state) {
  (void)state;
  const double a = train(false), b = train(true);
  assert_true(isfinite(a));
  if (memcmp(&a, &b, sizeof a)) fail_msg("chain first: %.9g, groups first: %.9g", a, b);
}

/* The parameters of a checkpoint written by `steps` steps of a 2-stage pipeline under
 * `policy`, concatenated. */
static size_t parameters_after(const char *policy, int steps, float *out, size_t cap) {
  char file[] = "/tmp/troupe-plan-XXXXXX";
  const int fd = mkstemp(file);
  assert_true(fd >= 0);
  close(fd);
  unlink(file);
  job b;
  open_policy_job(&b, 1, 2, policy, file);
  chain(&b, 1, 2);
  if (tr_graph_run(b.g, 0, steps, 0)) fail_msg("%s", tr_graph_error(b.g));
  close_job(&b);
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) fail_msg("%s", err);
  size_t n = 0;
  for (size_t i = 0; i < tr_checkpoint_count(ck); i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    if (t->name[0] < '0' || t->name[0] > '9' || t->dtype != TR_DTYPE_F32) continue; /* parameters */
    assert_true(n + t->nbytes / 4 <= cap);
    memcpy(out + n, t->data, t->nbytes);
    n += t->nbytes / 4;
  }
  tr_checkpoint_close(ck);
  unlink(file);
  return n;
}

/* A strategy of a program's own is a policy file (policy_frozen.c) and a row of the table:
 * the stage runner runs it without knowing it (frozen: nothing updates, whatever the steps),
 * and a name no policy has is refused naming the field. */
static void a_step_policy_of_its_own_is_a_file_and_a_row(void **state) {
  (void)state;
  assert_int_equal(tr__policy_add(&policy_frozen), 0);
  static float a[1 << 14], b[1 << 14], c[1 << 14];
  const size_t n = parameters_after("frozen", 2, a, 1 << 14);
  assert_true(n > 1000);
  assert_int_equal(parameters_after("frozen", 9, b, 1 << 14), n);
  if (memcmp(a, b, n * sizeof *a)) fail_msg("a frozen pipeline changed its parameters");
  assert_int_equal(parameters_after(NULL, 9, c, 1 << 14), n); /* sync: they do change */
  if (!memcmp(a, c, n * sizeof *a)) fail_msg("the synchronous policy left the parameters alone");
  tr_job_config cf = tr_job_defaults();
  tr_model *m;
  tr_data *d;
  char err[512];
  assert_int_equal(tr_model_simplenet(&m), 0);
  assert_int_equal(tr_data_open_for(&d, m, 1, NULL, NULL, err, sizeof err), 0);
  cf.model = m;
  cf.data = d;
  cf.step_policy = "thawed";
  tr_error e;
  assert_int_equal(tr_job_check(&cf, &e), TR_EINVAL);
  if (strcmp(e.field, "step_policy") != 0 || !strstr(e.message, "'thawed'"))
    fail_msg("field '%s': %s", e.field, e.message);
  tr_data_close(d);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_stage_without_its_chain_is_refused_before_the_run_naming_it),
      cmocka_unit_test(the_plan_prints_each_stage_with_its_policy_edges_and_carriers),
      cmocka_unit_test(wiring_after_the_plan_is_refused),
      cmocka_unit_test(the_order_of_the_wiring_calls_does_not_change_what_trains),
      cmocka_unit_test(a_step_policy_of_its_own_is_a_file_and_a_row),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
