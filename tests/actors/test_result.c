/* test_result.c — a run's figures by key (actors/tr_result.h): each read by its key in its
 * type, a key the table has none of refused naming it, every row of the table a figure once,
 * per-device figures of more devices than the struct had room for, nulls, the caller's one
 * figure; and --json and the summary the document they were (figures_golden.txt: what the
 * library wrote before its figures were keyed, of figures_golden.h's runs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "result_impl.h"
#include "troupe.h"
#include "figures_golden.h"

/* What `f` writes, in memory. */
static char *written(int (*f)(const tr_result *, FILE *), const tr_result *r) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  assert_int_equal(f(r, m), 0);
  fclose(m);
  return buf;
}

/* Standard error while `rc = call` runs, into `said`. */
#define SAYS(said, rc, call)                                                   \
  do {                                                                         \
    fflush(stderr);                                                            \
    FILE *t_ = tmpfile();                                                      \
    assert_non_null(t_);                                                       \
    const int saved_ = dup(2);                                                 \
    dup2(fileno(t_), 2);                                                       \
    rc = (call);                                                               \
    fflush(stderr);                                                            \
    dup2(saved_, 2);                                                           \
    close(saved_);                                                             \
    rewind(t_);                                                                \
    const size_t n_ = fread(said, 1, sizeof said - 1, t_);                     \
    said[n_] = 0;                                                              \
    fclose(t_);                                                                \
  } while (0)

static tr_result *run(tr_strategy strategy, const char *devices) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.strategy = strategy;
  o.devices = devices;
  o.steps = 10;
  tr_result *r;
  tr_error e;
  if (tr_train_run_result(&o, &r, &e)) fail_msg("tr_train_run_result: %s", e.message);
  return r;
}

/* ---- by key -------------------------------------------------------------------------------- */

static void a_runs_figures_are_read_by_their_keys(void **state) {
  (void)state;
  tr_result *r = run(TR_STRATEGY_DP, "host:2");
  int64_t steps, samples, zero;
  double rate, steps_read;
  const char *model, *schedule = "x";
  assert_int_equal(tr_result_int(r, "steps", &steps), 0);
  assert_int_equal(steps, 10);
  assert_int_equal(tr_result_int(r, "samples", &samples), 0);
  assert_int_equal(samples, 10 * 64); /* simplenet's batch */
  assert_int_equal(tr_result_real(r, "steps", &steps_read), 0); /* an integer read as a real */
  assert_true(steps_read == 10);
  assert_int_equal(tr_result_real(r, "samples_per_s", &rate), 0);
  assert_true(isfinite(rate) && rate > 0);
  assert_int_equal(tr_result_text(r, "model", &model), 0);
  assert_string_equal(model, "simplenet");
  assert_int_equal(tr_result_int(r, "zero", &zero), 0);
  assert_int_equal(zero, 0);
  tr_figure f;
  assert_int_equal(tr_result_figure(r, "utilization", &f), 0);
  assert_string_equal(f.key, "utilization");
  assert_string_equal(f.unit, "fraction");
  assert_true(f.type == TR_FIGURE_REAL && f.shape == TR_FIGURE_DEVICES && f.count == 2 && !f.null);
  for (int i = 0; i < 2; i++) {
    double u;
    assert_int_equal(tr_result_real_at(r, "utilization", i, &u), 0);
    assert_true(u > 0 && u <= 1);
  }
  assert_int_equal(tr_result_figure(r, "allreduce", &f), 0); /* a name, whatever it is kept as */
  assert_true(f.type == TR_FIGURE_TEXT && f.count == 1);
  /* what does not apply to the run: null, read as NaN, 0, NULL */
  double stale;
  int64_t workers = 7;
  assert_int_equal(tr_result_real(r, "staleness.mean", &stale), 0);
  assert_true(isnan(stale));
  assert_int_equal(tr_result_int(r, "workers", &workers), 0);
  assert_int_equal(workers, 0);
  assert_int_equal(tr_result_text(r, "schedule", &schedule), 0);
  assert_null(schedule);
  assert_int_equal(tr_result_figure(r, "staleness.histogram", &f), 0);
  assert_true(f.null && f.count == 0 && f.shape == TR_FIGURE_LIST);
  assert_int_equal(tr_result_figure(r, "cuts", &f), 0); /* one piece: no cuts */
  assert_true(f.null && f.count == 0);
  tr_result_free(r);
}

/* The getters' refusals of a key the table has none of: TR_EINVAL, saying the key and the
 * one it may have meant on stderr, and nothing read. */
static void an_unknown_key_is_refused_naming_it(void **state) {
  (void)state;
  tr_result *r = tr__result_new("simplenet", "single");
  assert_non_null(r);
  char said[512];
  int rc;
  double v = 1;
  SAYS(said, rc, tr_result_real(r, "samples_per_sec", &v));
  assert_int_equal(rc, TR_EINVAL);
  assert_true(isnan(v));
  if (!strstr(said, "tr_result_real") || !strstr(said, "\"samples_per_sec\"") ||
      !strstr(said, "no such figure") || !strstr(said, "did you mean \"samples_per_s\""))
    fail_msg("said: %s", said);
  int64_t i;
  const char *t;
  tr_figure f;
  SAYS(said, rc, tr_result_int(r, "no_such_figure", &i));
  assert_true(rc == TR_EINVAL && strstr(said, "\"no_such_figure\"") && !strstr(said, "did you"));
  SAYS(said, rc, tr_result_text(r, "modle", &t));
  assert_true(rc == TR_EINVAL && strstr(said, "\"modle\""));
  SAYS(said, rc, tr_result_figure(r, "", &f));
  assert_true(rc == TR_EINVAL && strstr(said, "\"\""));
  SAYS(said, rc, tr_result_real_at(r, "utilisation", 0, &v));
  assert_true(rc == TR_EINVAL && strstr(said, "did you mean \"utilization\""));
  SAYS(said, rc, tr_result_set_real(r, "sgemm", 1));
  assert_true(rc == TR_EINVAL && strstr(said, "\"sgemm\"") && strstr(said, "\"sgemm_gflops\""));
  tr_result_free(r);
}

/* Reading a figure as another type, one value of a per-device one or value i of a scalar,
 * an index out of range: refused, saying how to read it. */
static void a_reading_of_another_kind_is_refused_saying_how(void **state) {
  (void)state;
  tr_result *r = tr__result_new("simplenet", "dp");
  assert_non_null(r);
  assert_int_equal(tr__result_set_devices(r, 3), 0);
  char said[512];
  int rc;
  int64_t i;
  double v;
  const char *t;
  SAYS(said, rc, tr_result_int(r, "samples_per_s", &i));
  assert_true(rc == TR_EINVAL && strstr(said, "is a real") && strstr(said, "tr_result_real"));
  SAYS(said, rc, tr_result_text(r, "steps", &t));
  assert_true(rc == TR_EINVAL && strstr(said, "is an integer"));
  SAYS(said, rc, tr_result_real(r, "model", &v));
  assert_true(rc == TR_EINVAL && strstr(said, "is a text"));
  SAYS(said, rc, tr_result_real(r, "utilization", &v));
  assert_true(rc == TR_EINVAL && strstr(said, "a value per device") &&
              strstr(said, "tr_result_real_at"));
  SAYS(said, rc, tr_result_real_at(r, "steps", 0, &v));
  assert_true(rc == TR_EINVAL && strstr(said, "one value"));
  SAYS(said, rc, tr_result_real_at(r, "utilization", 3, &v));
  assert_true(rc == TR_EINVAL && strstr(said, "value 3") && strstr(said, "has 3"));
  SAYS(said, rc, tr_result_int_at(r, "rank", -1, &i));
  assert_true(rc == TR_EINVAL && strstr(said, "0 or more"));
  assert_int_equal(tr_result_int_at(r, "rank", 2, &i), 0);
  tr_result_free(r);
}

/* The iteration: every row of the table once, in the table's order, each as tr_result_figure
 * describes it; and every key --json writes is a figure's (an object's members: "a.b"). */
static void every_row_of_the_table_is_a_figure_once(void **state) {
  (void)state;
  tr_result *r = run(TR_STRATEGY_PIPELINE, "host:2");
  assert_int_equal(tr_result_figure_count(r), TR__METRIC_COUNT);
  int seen[TR__METRIC_COUNT] = {0};
  for (int k = 0; k < tr_result_figure_count(r); k++) {
    tr_figure f, g;
    assert_int_equal(tr_result_figure_at(r, k, &f), 0);
    int row = -1;
    for (int j = 0; j < TR__METRIC_COUNT; j++)
      if (!strcmp(tr__metrics[j].key, f.key)) row = j;
    if (row < 0) fail_msg("figure %d, %s, is no row of the table", k, f.key);
    seen[row]++;
    assert_int_equal(row, k);
    assert_int_equal(tr_result_figure(r, f.key, &g), 0);
    assert_true(!strcmp(g.key, f.key) && !strcmp(g.unit, f.unit) && g.type == f.type &&
                g.shape == f.shape && g.count == f.count && g.null == f.null);
    assert_true(f.null == (f.count == 0) || f.shape == TR_FIGURE_LIST);
  }
  for (int j = 0; j < TR__METRIC_COUNT; j++)
    if (seen[j] != 1) fail_msg("row %s: %d figures", tr__metrics[j].key, seen[j]);
  tr_figure f;
  assert_int_equal(tr_result_figure_at(r, TR__METRIC_COUNT, &f), TR_EINVAL);
  assert_int_equal(tr_result_figure_at(r, -1, &f), TR_EINVAL);
  /* the JSON's keys: "key": at the object's top, members inside one */
  char *json = written(tr_result_json, r);
  for (const char *p = json; (p = strchr(p, '"'));) {
    const char *end = strchr(p + 1, '"');
    assert_non_null(end);
    if (end[1] != ':') { /* a string value */
      p = end + 1;
      continue;
    }
    char key[96];
    snprintf(key, sizeof key, "%.*s", (int)(end - p - 1), p + 1);
    bool found = !strcmp(key, "devices") || !strcmp(key, "replicas"); /* an object's rows */
    for (int j = 0; j < TR__METRIC_COUNT && !found; j++) {
      const char *k = tr__metrics[j].key, *dot = strchr(k, '.');
      found = !strcmp(k, key) || (dot && (!strncmp(k, key, (size_t)(dot - k)) ? !key[dot - k]
                                                                                : !strcmp(dot + 1, key)));
    }
    if (!found) fail_msg("--json writes \"%s\", no figure's key", key);
    p = end + 1;
  }
  free(json);
  tr_result_free(r);
}

/* ---- devices ------------------------------------------------------------------------------- */

/* 100 devices, more than the struct had room for (64): 50 replicas of 2 stages, each device's
 * figures sent as a stage sends them, reduced, read back, and in the JSON and the summary
 * every one of them; the struct's view has its 64. */
static void per_device_figures_have_no_device_cap(void **state) {
  (void)state;
  enum { N = 100, STAGES = 2 };
  tr__figures *f = calloc(N, sizeof *f);
  const tr__figures **src = calloc(N, sizeof *src);
  tr__reduced *red = calloc(1, sizeof *red);
  assert_true(f && src && red);
  for (int d = 0; d < N; d++) {
    tr__figures_int(&f[d], TR__M_BUSY_NS, 1000 + d);
    tr__figures_int(&f[d], TR__M_MEMORY_PARAMS, 10 * d);
    tr__figures_int(&f[d], TR__M_PEAK_ACTIVATION_BYTES, 7 * d);
    tr__figures_int(&f[d], TR__M_COMM_BYTES, 100);
    src[d] = &f[d];
  }
  assert_int_equal(tr__metrics_reduce(red, src, N, N), 0);
  tr_result *r = tr__result_new("simplenet", "hybrid");
  assert_non_null(r);
  assert_int_equal(tr__result_set_devices(r, N), 0);
  tr__result_set_int(r, TR__M_STAGES, STAGES);
  tr__result_set_int(r, TR__M_TENSOR, 1);
  tr__result_set_int(r, TR__M_STEPS, 10);
  assert_int_equal(tr__metrics_apply(red, r), 0);
  for (int d = 0; d < N; d++) {
    tr__result_set_real_at(r, TR__M_UTILIZATION, d, d / 1000.0);
    tr__result_set_int_at(r, TR__M_RANK, d, d % 3);
  }
  tr_figure fig;
  assert_int_equal(tr_result_figure(r, "memory.params", &fig), 0);
  assert_int_equal(fig.count, N);
  for (int d = 0; d < N; d++) {
    int64_t params, busy;
    double comm;
    assert_int_equal(tr_result_int_at(r, "memory.params", d, &params), 0);
    assert_int_equal(params, 10 * d);
    assert_int_equal(tr_result_int_at(r, "busy_ns", d, &busy), 0);
    assert_int_equal(busy, 1000 + d);
    assert_int_equal(tr_result_real_at(r, "comm_bytes_per_step_device", d, &comm), 0);
    assert_true(comm == 10); /* 100 bytes over 10 steps */
  }
  assert_int_equal(tr__result_replicas(r), N / STAGES);
  assert_int_equal(tr__result_replica_sum(r, TR__M_MEMORY_PARAMS, 49), 10 * 98 + 10 * 99);
  char *json = written(tr_result_json, r);
  char last[64];
  snprintf(last, sizeof last, ",0.0990]"); /* utilization's value 99, the array's end */
  const char *u = strstr(json, "\"utilization\":[");
  assert_non_null(u);
  int values = 1;
  for (const char *p = u; *p != ']'; p++) values += *p == ',';
  assert_int_equal(values, N);
  assert_non_null(strstr(u, last));
  int devices = 0, replicas = 0;
  for (const char *p = json; (p = strstr(p, "{\"params\":")); p++) devices++;
  const char *rep = strstr(json, "\"replicas\":[{\"params\":");
  assert_non_null(rep);
  for (const char *p = rep; (p = strstr(p, "{\"params\":")); p++) replicas++;
  assert_int_equal(devices, N + N / STAGES);
  assert_int_equal(replicas, N / STAGES);
  assert_non_null(strstr(json, "{\"params\":990,\"grads\":0,\"optimizer_state\":0,"
                               "\"peak_activation_bytes\":693}]"));
  assert_non_null(strstr(json, "{\"params\":1970,\"grads\":0,\"optimizer_state\":0}]"));
  free(json);
  char *line = written(tr_result_summary, r);
  assert_non_null(strstr(line, "utilization 0.00")); /* device 0 */
  assert_non_null(strstr(line, " 0.10 ·"));           /* device 99's */
  free(line);
  tr_train_result v;
  tr__result_view(r, &v);
  assert_int_equal(v.ndevices, TR_TRAIN_MAX_DEVICES);
  assert_int_equal(v.memory.devices[63].params, 630);
  assert_int_equal(v.memory.replicas[31].params, 620 + 630);
  assert_int_equal(v.rank[63], 0);
  tr_result_free(r);
  tr__reduced_free(red);
  free(red);
  free(src);
  free(f);
}

/* ---- what the caller gives ----------------------------------------------------------------- */

static void only_the_callers_own_figure_may_be_given(void **state) {
  (void)state;
  tr_result *r = tr__result_new("mlp", "dp");
  assert_non_null(r);
  assert_int_equal(tr__result_set_devices(r, 2), 0);
  tr__result_set_real(r, TR__M_GFLOPS, 30);
  tr__result_set_real(r, TR__M_SAMPLES_PER_S, 100);
  double v;
  assert_int_equal(tr_result_real(r, "hardware_fraction", &v), 0);
  assert_true(isnan(v)); /* no yardstick yet */
  char said[512];
  int rc;
  SAYS(said, rc, tr_result_set_real(r, "samples_per_s", 5));
  assert_true(rc == TR_EINVAL && strstr(said, "\"samples_per_s\"") && strstr(said, "sgemm_gflops"));
  assert_true(tr_result_real(r, "samples_per_s", &v) == 0 && v == 100); /* as it was */
  assert_int_equal(tr_result_set_real(r, "sgemm_gflops", 10), 0);
  assert_true(tr_result_real(r, "sgemm_gflops", &v) == 0 && v == 10);
  assert_true(tr_result_real(r, "hardware_fraction", &v) == 0 && v == 30.0 / (10 * 2));
  assert_int_equal(tr_result_set_real(r, "sgemm_gflops", 0), 0); /* none */
  tr_figure f;
  assert_true(tr_result_figure(r, "sgemm_gflops", &f) == 0 && f.null);
  tr_result_free(r);
}

/* ---- the same document ----------------------------------------------------------------------- */

/* figures_golden.h's runs, as the struct and through the result it is read into, written
 * byte for byte as the library wrote them before its figures were keyed. */
static void json_and_summary_are_the_documents_of_before(void **state) {
  (void)state;
  FILE *g = fopen(GOLDEN, "r");
  if (g == NULL) fail_msg("%s: cannot be read", GOLDEN);
  for (int k = 0; k < GOLDEN_RUNS; k++) {
    char *want[2] = {NULL, NULL};
    size_t cap[2] = {0, 0};
    for (int l = 0; l < 2; l++)
      if (getline(&want[l], &cap[l], g) < 0) fail_msg("%s: run %d has no line %d", GOLDEN, k, l);
    tr_train_result v;
    golden_fill(&v, k);
    tr_result *r = tr__result_of_view(&v);
    assert_non_null(r);
    char *json = written(tr_result_json, r), *line = written(tr_result_summary, r);
    assert_string_equal(json, want[0]);
    assert_string_equal(line, want[1]);
    tr_train_result back; /* the view of the result read from the view: the same struct */
    tr__result_view(r, &back);
    assert_memory_equal(&back, &v, sizeof v);
    free(json);
    free(line);
    free(want[0]);
    free(want[1]);
    tr_result_free(r);
  }
  fclose(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_runs_figures_are_read_by_their_keys),
      cmocka_unit_test(an_unknown_key_is_refused_naming_it),
      cmocka_unit_test(a_reading_of_another_kind_is_refused_saying_how),
      cmocka_unit_test(every_row_of_the_table_is_a_figure_once),
      cmocka_unit_test(per_device_figures_have_no_device_cap),
      cmocka_unit_test(only_the_callers_own_figure_may_be_given),
      cmocka_unit_test(json_and_summary_are_the_documents_of_before),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
