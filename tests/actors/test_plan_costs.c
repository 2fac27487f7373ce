/* test_plan_costs.c — layer costs measured once and kept (tr_plan.h: tr_plan_layer_times).
 *
 * The first call measures and writes the file; the next reads the same numbers back without
 * measuring; another batch, a model changed under the same name, an entry of another
 * version or a stale one are measured again; remeasure measures anyway. A path that holds
 * anything but a file of costs is refused and left as it was. The devices-at-once slowdown is
 * the median of alternating alone and together phases: one phase slowed by a neighbour's
 * burst does not move it; measured, it is kept and read back. A device's optimizer step is
 * kept for its own layers and optimizer. A measurement during which other threads took the
 * CPUs is taken again once they are gone, and twice at most while they stay. The file's
 * guarantees as a file (links, devices, modes, its lock, concurrent writers, impossible
 * costs) are test_costs_file.c's.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"
#include "planner.h" /* tr__costs_together, its ratio; tr__costs_step */
#include "costs_fixture.h"

static void costs_are_measured_once_and_reused(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path, .reps = 1};
  tr_layer_times a[L], b[L];
  assert_true(times_of(f, f->m, 4, &c, a));
  assert_int_equal(access(f->path, F_OK), 0);
  assert_false(times_of(f, f->m, 4, &c, b));
  assert_memory_equal(a, b, sizeof a); /* the numbers kept, bit for bit */
  for (int l = 0; l < L; l++) assert_true(a[l].forward > 0 && a[l].backward > 0);
  /* another batch is another entry, and the first stays */
  assert_true(times_of(f, f->m, 8, &c, b));
  assert_false(times_of(f, f->m, 8, &c, b));
  assert_false(times_of(f, f->m, 4, &c, b));
  assert_memory_equal(a, b, sizeof a);
  /* asked to, it measures again and keeps the new times */
  const tr_plan_costs_config again = {.path = f->path, .reps = 1, .remeasure = 1};
  assert_true(times_of(f, f->m, 4, &again, a));
  assert_false(times_of(f, f->m, 4, &c, b));
  assert_memory_equal(a, b, sizeof a);
}

/* The same name, other sizes: not the costs of the model measured before. */
static void a_model_changed_under_its_name_is_measured_again(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path, .reps = 1};
  tr_layer_times t[L];
  assert_true(times_of(f, f->m, 4, &c, t));
  tr_model *wider;
  assert_int_equal(tr_model_mlp(&wider, 32, 2), 0);
  assert_string_equal(tr_model_name(wider), tr_model_name(f->m));
  assert_true(times_of(f, wider, 4, &c, t));
  assert_false(times_of(f, wider, 4, &c, t));
  assert_false(times_of(f, f->m, 4, &c, t));
  tr_model_free(wider);
}

/* The file's one entry rewritten with another version or an old time: measured again. */
static void rewrite(const char *path, const char *version, long long at) {
  tr_checkpoint *ck;
  char err[256];
  assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), 0);
  assert_int_equal(tr_checkpoint_count(ck), 1);
  const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, 0);
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  char when[32];
  snprintf(when, sizeof when, "%lld", at);
  assert_int_equal(tr_checkpoint_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, t->name, when), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "format", tr_checkpoint_meta(ck, "format")), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "troupe", version), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  tr_checkpoint_close(ck);
}

static void stale_entries_and_other_versions_are_measured_again(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path, .reps = 1};
  tr_layer_times t[L];
  assert_true(times_of(f, f->m, 4, &c, t));
  rewrite(f->path, TR_VERSION_STRING, (long long)time(NULL) - TR_PLAN_COSTS_MAX_AGE - 60);
  assert_true(times_of(f, f->m, 4, &c, t));
  assert_false(times_of(f, f->m, 4, &c, t));
  rewrite(f->path, "0.0.1", (long long)time(NULL));
  assert_true(times_of(f, f->m, 4, &c, t));
  assert_false(times_of(f, f->m, 4, &c, t));
}


static void what_is_not_a_costs_file_is_refused_and_kept(void **state) {
  fixture *f = *state;
  FILE *text = fopen(f->path, "w");
  assert_non_null(text);
  fputs("my notes\n", text);
  fclose(text);
  expect_refused(f, f->path, "(not a file of layer costs)");
  char buf[32] = "";
  text = fopen(f->path, "r");
  assert_non_null(fgets(buf, sizeof buf, text));
  fclose(text);
  assert_string_equal(buf, "my notes\n");
  /* a safetensors file of something else (a checkpoint) */
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const int64_t shape[1] = {2};
  const float x[2] = {1, 2};
  assert_int_equal(tr_checkpoint_writer_add(w, "w", TR_DTYPE_F32, 1, shape, x), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, f->path), 0);
  tr_checkpoint_writer_free(w);
  expect_refused(f, f->path, "not a file of layer costs");
  tr_checkpoint *ck;
  char err[256];
  assert_int_equal(tr_checkpoint_open(&ck, f->path, err, sizeof err), 0);
  assert_non_null(tr_checkpoint_find(ck, "w"));
  tr_checkpoint_close(ck);
  /* a FIFO, refused without waiting on it; a directory */
  char fifo[160];
  snprintf(fifo, sizeof fifo, "%s/fifo", f->dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  expect_refused(f, fifo, "FIFO");
  expect_refused(f, f->dir, "directory");
}

/* "": no file, measured every time; NULL: the default path ($TROUPE_COSTS here), which must
 * work as a path given must. */
static void no_file_measures_and_the_default_path_keeps(void **state) {
  fixture *f = *state;
  tr_layer_times t[L];
  assert_true(times_of(f, f->m, 4, &(tr_plan_costs_config){.path = "", .reps = 1}, t));
  assert_true(times_of(f, f->m, 4, &(tr_plan_costs_config){.path = "", .reps = 1}, t));
  char path[160];
  snprintf(path, sizeof path, "%s/default.safetensors", f->dir);
  assert_int_equal(setenv("TROUPE_COSTS", path, 1), 0);
  assert_string_equal(tr_plan_costs_default_path(), path);
  assert_true(times_of(f, f->m, 4, NULL, t));
  assert_false(times_of(f, f->m, 4, NULL, t));
  /* a file $TROUPE_COSTS names is the user's: refused by that name when it is not a costs
   * file, as a path given is, and kept as it was (no silent run without a cache) */
  FILE *text = fopen(path, "w");
  assert_non_null(text);
  fputs("my notes\n", text);
  fclose(text);
  bool measured = true;
  char err[512] = "";
  assert_int_equal(tr_plan_layer_times(f->m, f->dev, 4, NULL, t, &measured, err, sizeof err),
                   TR_EINVAL);
  if (!strstr(err, "TROUPE_COSTS")) fail_msg("the error \"%s\" does not name TROUPE_COSTS", err);
  assert_false(measured);
  char buf[32] = "";
  text = fopen(path, "r");
  assert_non_null(fgets(buf, sizeof buf, text));
  fclose(text);
  assert_string_equal(buf, "my notes\n");
  unsetenv("TROUPE_COSTS");
}

/* Five pairs of phases, each 1.25 times slower together, but for one whose together phase met
 * a neighbour's burst (3×) and one whose alone phase did (0.5×): the median is 1.25, exactly;
 * a mean, or the first pair alone, would not be. */
static void the_together_factor_is_the_median_pair(void **state) {
  (void)state;
  const double alone[5] = {2e-3, 1e-3, 4e-3, 2e-3, 1e-3};
  const double with[5 * 2] = {2.5e-3, 2.5e-3, /* 1.25 */
                              3e-3, 3e-3,     /* 3: the together phase slowed */
                              5e-3, 5e-3,     /* 1.25 */
                              1e-3, 1e-3,     /* 0.5: the alone phase slowed */
                              1.2e-3, 1.3e-3}; /* 1.25 (the mean of the two devices) */
  assert_true(fabs(tr__costs_together_ratio(alone, with, 5, 2) - 1.25) < 1e-12);
  /* faster together than alone is noise: 1 */
  const double quick[2] = {0.5e-3, 0.5e-3};
  assert_true(tr__costs_together_ratio(alone, quick, 1, 2) == 1.0);
}

/* Measured on two devices and kept: the second call reads the same factor. */
static void the_together_factor_is_measured_once(void **state) {
  fixture *f = *state;
  tr_device_list *two;
  char err[512] = "";
  assert_int_equal(tr_device_list_open(&two, "host:2", err, sizeof err), 0);
  const tr_plan_costs_config c = {.path = f->path};
  double a = 0, b = 0;
  if (tr__costs_together(f->m, two, 2, 4, &c, &a, err, sizeof err)) fail_msg("%s", err);
  assert_true(a >= 1 && a < 100);
  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(tr__costs_together(f->m, two, 2, 4, &c, &b, err, sizeof err), 0);
  assert_true(a == b);
  tr_device_list_close(two);
}

/* A device's optimizer step is timed over exactly its layers, once: read back bit for bit,
 * each range and each optimizer's passes an entry of its own. */
static void the_step_is_timed_once_per_layers_and_optimizer(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path};
  tr_optim_config o = tr_model_optim(f->m);
  char err[512] = "", whole[512], first[512], decayed[512];
  double a = 0, b = 0;
  if (tr__costs_step(f->m, f->dev, &o, false, 0, L, &c, &a, err, sizeof err)) fail_msg("%s", err);
  assert_true(a > 0 && a < 1);
  assert_int_equal(tr__costs_step(f->m, f->dev, &o, false, 0, L, &c, &b, err, sizeof err), 0);
  assert_true(a == b);
  assert_int_equal(tr__costs_step(f->m, f->dev, &o, false, 0, 0, &c, &b, err, sizeof err), 0);
  assert_true(b == 0); /* no layers, no step */
  tr__costs_step_name(f->m, f->dev, &o, false, 0, L, whole, sizeof whole);
  tr__costs_step_name(f->m, f->dev, &o, false, 0, 1, first, sizeof first);
  o.weight_decay = 0.1f;
  tr__costs_step_name(f->m, f->dev, &o, false, 0, L, decayed, sizeof decayed);
  assert_string_not_equal(whole, first);
  assert_string_not_equal(whole, decayed);
  o.lr *= 2; /* the learning rate changes no pass */
  tr__costs_step_name(f->m, f->dev, &o, false, 0, L, first, sizeof first);
  assert_string_equal(first, decayed);
}

/* Threads that keep every CPU busy until `until_ns` (0: until stopped). */
typedef struct busy {
  pthread_t t[16];
  int count;
  atomic_bool stop;
  uint64_t until_ns;
} busy;

static void *spin(void *arg) {
  busy *b = arg;
  volatile double x = 1;
  while (!atomic_load(&b->stop) && (b->until_ns == 0 || tr_now_ns() < b->until_ns)) x = x * 1.0001;
  return NULL;
}

static void busy_start(busy *b, double seconds) {
  b->count = 2 * tr__plan_cpus() < 16 ? 2 * tr__plan_cpus() : 16;
  b->until_ns = seconds > 0 ? tr_now_ns() + (uint64_t)(seconds * 1e9) : 0;
  atomic_store(&b->stop, false);
  for (int i = 0; i < b->count; i++) assert_int_equal(pthread_create(&b->t[i], NULL, spin, b), 0);
}

static void busy_stop(busy *b) {
  atomic_store(&b->stop, true);
  for (int i = 0; i < b->count; i++) pthread_join(b->t[i], NULL);
  b->count = 0;
}

/* A measurement that returns its attempt's number, and on the first starts the machine's
 * neighbours for `seconds` (<= 0: until the test stops them). */
typedef struct attempts {
  int calls;
  double seconds;
  busy b;
} attempts;

static int attempt(void *arg, double *v, char *err, size_t n) {
  (void)err, (void)n;
  attempts *a = arg;
  if (++a->calls == 1) busy_start(&a->b, a->seconds);
  v[0] = a->calls;
  return 0;
}

/* Entry "busy" of f's file, timed by `attempt` (the neighbours stopped after it): how many
 * attempts it has made. */
static int timed_busy(fixture *f, attempts *a, double *v) {
  const tr_plan_costs_config c = {.path = f->path};
  char err[512] = "";
  assert_int_equal(tr__costs_entry(&c, "busy", 1, 1, &seconds, attempt, a, v, err, sizeof err),
                   0);
  busy_stop(&a->b);
  return a->calls;
}

/* Other threads took the CPUs as the cost was timed (the probe after it was slow): it is
 * timed again once the machine is back at its pace, and that attempt is kept. */
static void a_cost_timed_on_a_busy_machine_is_timed_again(void **state) {
  attempts a = {.seconds = 0.15};
  double v = 0;
  assert_int_equal(timed_busy(*state, &a, &v), 2);
  assert_true(v == 2);
  assert_int_equal(timed_busy(*state, &a, &v), 2); /* kept */
  assert_true(v == 2);
}

/* A machine that stays busy is the machine there is: timed twice at most, not forever. */
static void a_machine_busy_for_long_is_timed_twice_at_most(void **state) {
  attempts a = {.seconds = 0};
  double v = 0;
  assert_int_equal(timed_busy(*state, &a, &v), 2);
}

/* Twice as many devices as CPUs: each has half a CPU at most, whatever the file says (a
 * factor measured on a machine loaded already: alone as slow as together). */
static void more_devices_than_cpus_are_that_much_slower(void **state) {
  fixture *f = *state;
  const int cpus = tr__plan_cpus(), k = 2 * cpus;
  assert_true(cpus >= 1);
  if (k >= TR_PLAN_MAX_DEVICES) skip();
  char spec[32], err[512] = "", name[600];
  snprintf(spec, sizeof spec, "host:%d", k);
  tr_device_list *devs;
  assert_int_equal(tr_device_list_open(&devs, spec, err, sizeof err), 0);
  tr__costs_entry_name(f->m, tr_device_list_at(devs, 0), 4, name, sizeof name);
  snprintf(name + strlen(name), sizeof name - strlen(name), "|together %d", k);
  const tr_plan_costs_config c = {.path = f->path};
  const double alike = 1; /* the file says: no slower together */
  const tr__costs_unit factor = TR__COSTS_FACTOR;
  double v;
  assert_int_equal(tr__costs_keep(&c, name, 1, 1, &factor, &alike, err, sizeof err), 0);
  assert_int_equal(tr__costs_together(f->m, devs, k, 4, &c, &v, err, sizeof err), 0);
  assert_true(v == 2.0);
  tr_device_list_close(devs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(costs_are_measured_once_and_reused, setup, teardown),
      cmocka_unit_test_setup_teardown(a_model_changed_under_its_name_is_measured_again, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(stale_entries_and_other_versions_are_measured_again,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(what_is_not_a_costs_file_is_refused_and_kept, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(no_file_measures_and_the_default_path_keeps, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_step_is_timed_once_per_layers_and_optimizer, setup,
                                      teardown),
      cmocka_unit_test(the_together_factor_is_the_median_pair),
      cmocka_unit_test_setup_teardown(the_together_factor_is_measured_once, setup, teardown),
      cmocka_unit_test_setup_teardown(a_cost_timed_on_a_busy_machine_is_timed_again, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_machine_busy_for_long_is_timed_twice_at_most, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(more_devices_than_cpus_are_that_much_slower, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
