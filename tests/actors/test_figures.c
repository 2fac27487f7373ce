/* test_figures.c — the run's figures, once (actors/run_metrics.h): the coordinator's generic
 * reduction of the parts' (key, value) pairs by each row's rule into the run's result, on
 * synthetic pairs and on bytes no part sent; the library's JSON of a run parses and says what
 * the result holds, by key, and the deprecated struct view writes the same bytes; the summary
 * says what is there; an observer that hears of step k finds checkpoint k on disk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "result_impl.h"
#include "troupe.h"

#define SCRATCH_NAME "figures"
#include "scratch.h"

/* ---- the table ------------------------------------------------------------------------------ */

/* Every row's key is unique, its functions are there, its shape takes its type, and where it
 * says the deprecated struct holds it, a field of its type is. A row the struct has no field
 * of is held by the result alone (a figure added since is one row, no field). */
static void every_row_names_a_field_of_its_type(void **state) {
  (void)state;
  for (int k = 0; k < TR__METRIC_COUNT; k++) {
    const tr__metric *m = &tr__metrics[k];
    assert_non_null(m->key);
    for (int j = 0; j < k; j++)
      if (!strcmp(m->key, tr__metrics[j].key)) fail_msg("two rows of key %s", m->key);
    if (m->json == TR__JSON_NAME) assert_non_null(m->name);
    if (m->json == TR__JSON_FN) assert_non_null(m->real);
    if (tr__metric_shape(m) != TR_FIGURE_ONE && m->type == TR__TEXT)
      fail_msg("%s: a text per device or in a list", m->key);
    if (tr__metric_shape(m) == TR_FIGURE_LIST && m->type != TR__INT)
      fail_msg("%s: a list of other than integers", m->key);
    if (m->at < 0) continue;
    const size_t one = m->stride == 0 ? m->size : m->size > m->stride ? m->stride : sizeof(int64_t);
    const size_t n = m->stride == 0 ? 1 : m->size > m->stride ? m->size / m->stride : TR_TRAIN_MAX_DEVICES;
    if (m->type == TR__REAL && one != sizeof(double)) fail_msg("%s: a real of %zu bytes", m->key, one);
    if (m->type == TR__INT && one != sizeof(int) && one != sizeof(int64_t))
      fail_msg("%s: an integer of %zu bytes", m->key, one);
    if ((size_t)m->at + (n - 1) * m->stride + one > sizeof(tr_train_result) ||
        (size_t)m->replica_at + (n - 1) * m->stride + one > sizeof(tr_train_result))
      fail_msg("%s: beyond tr_train_result", m->key);
  }
}

/* ---- the reduction ---------------------------------------------------------------------- */

/* 2 replicas × 2 stages and a server: each device d sends values that tell them apart. */
static void reduce_four_devices_and_a_server(tr__figures f[5], tr__reduced *red) {
  memset(f, 0, 5 * sizeof *f);
  for (int d = 0; d < 4; d++) {
    tr__figures_int(&f[d], TR__M_STEPS, 10 + d);                 /* min */
    tr__figures_int(&f[d], TR__M_WINDOW_END, 1000 * (d + 1));    /* max */
    tr__figures_int(&f[d], TR__M_GRAPH_LAUNCHES, d + 1);         /* sum */
    tr__figures_int(&f[d], TR__M_BUSY_NS, 100 * (d + 1));        /* per device */
    tr__figures_int(&f[d], TR__M_MEMORY_PARAMS, 1 << d);         /* per device and replica */
    tr__figures_text(&f[d], TR__M_GRAPHS_NOTE, d == 2 ? "the third's" : d == 3 ? "the fourth's" : "");
  }
  tr__figures_real(&f[4], TR__M_CONSISTENCY, 0.25);              /* mean */
  tr__figures_real(&f[1], TR__M_CONSISTENCY, 0.75);
  tr__figures_real(&f[2], TR__M_CONSISTENCY, NAN);               /* not measured */
  tr__figures_real(&f[4], TR__M_STALENESS_MAX, 3);
  tr__figures_real(&f[0], TR__M_STALENESS_MAX, NAN);
  tr__figures_bin(&f[4], TR__M_STALENESS_HIST, 0, 5);            /* bins */
  tr__figures_bin(&f[4], TR__M_STALENESS_HIST, 2, 7);
  tr__figures_bin(&f[3], TR__M_STALENESS_HIST, 2, 1);
  tr__figures_int(&f[4], TR__M_MEMORY_GRADS, 99);                /* no device: left out */
  const tr__figures *src[5] = {&f[0], &f[1], &f[2], &f[3], &f[4]};
  assert_int_equal(tr__metrics_reduce(red, src, 5, 4), 0);
}

static void the_reduction_follows_each_rows_rule(void **state) {
  (void)state;
  tr__figures f[5];
  tr__reduced *red = calloc(1, sizeof *red);
  assert_non_null(red);
  reduce_four_devices_and_a_server(f, red);
  assert_int_equal(tr__reduced_int(red, TR__M_STEPS), 10);
  assert_int_equal(tr__reduced_int(red, TR__M_WINDOW_END), 4000);
  assert_int_equal(tr__reduced_int(red, TR__M_GRAPH_LAUNCHES), 1 + 2 + 3 + 4);
  assert_int_equal(tr__reduced_int(red, TR__M_BUSY_NS), 100 + 200 + 300 + 400);
  for (int d = 0; d < 4; d++)
    assert_int_equal(tr__reduced_device(red, d)[TR__M_BUSY_NS].i, 100 * (d + 1));
  assert_true(tr__reduced_real(red, TR__M_CONSISTENCY) == 0.5); /* NaN is no value */
  assert_true(tr__reduced_real(red, TR__M_STALENESS_MAX) == 3);
  assert_string_equal(red->text[TR__M_GRAPHS_NOTE], "the third's"); /* the first not empty */
  assert_true(isnan(tr__reduced_real(red, TR__M_SKIPPED_STEPS)));    /* nobody sent it */
  assert_int_equal(red->count[TR__M_MEMORY_GRADS], 0);

  /* into a result of 2 replicas × 2 stages, read by key, and through the struct's view */
  tr_result *r = tr__result_new("simplenet", "async");
  assert_non_null(r);
  assert_int_equal(tr__result_set_devices(r, 4), 0);
  tr__result_set_int(r, TR__M_STAGES, 2);
  tr__result_set_int(r, TR__M_TENSOR, 1);
  tr__result_set_int(r, TR__M_SKIPPED_STEPS, -1);
  assert_int_equal(tr__metrics_apply(red, r), 0);
  int64_t i;
  double x;
  const char *text;
  assert_int_equal(tr_result_int(r, "steps", &i), 0);
  assert_int_equal(i, 10);
  assert_int_equal(tr_result_int(r, "cuda_graphs.launches", &i), 0);
  assert_int_equal(i, 10);
  assert_true(tr_result_real(r, "consistency", &x) == 0 && x == 0.5);
  assert_true(tr_result_real(r, "staleness.max", &x) == 0 && x == 3);
  assert_true(tr_result_text(r, "cuda_graphs.note", &text) == 0 && !strcmp(text, "the third's"));
  for (int d = 0; d < 4; d++) {
    assert_int_equal(tr_result_int_at(r, "memory.params", d, &i), 0);
    assert_int_equal(i, 1 << d);
    assert_int_equal(tr_result_int_at(r, "busy_ns", d, &i), 0); /* a measure: a figure too */
    assert_int_equal(i, 100 * (d + 1));
  }
  assert_int_equal(tr__result_replica_sum(r, TR__M_MEMORY_PARAMS, 0), 1 + 2); /* devices 0, 1 */
  assert_int_equal(tr__result_replica_sum(r, TR__M_MEMORY_PARAMS, 1), 4 + 8);
  tr_figure fig;
  assert_int_equal(tr_result_figure(r, "staleness.histogram", &fig), 0);
  assert_int_equal(fig.count, 3); /* up to the last bin that is not 0 */
  const int64_t bins[3] = {5, 0, 7 + 1};
  for (int b = 0; b < 3; b++) {
    assert_int_equal(tr_result_int_at(r, "staleness.histogram", b, &i), 0);
    assert_int_equal(i, bins[b]);
  }
  assert_true(tr_result_int(r, "skipped_steps", &i) == 0 && i == -1); /* not sent: as it was */

  tr_train_result v;
  tr__result_view(r, &v);
  assert_int_equal(v.steps, 10);
  assert_true(v.consistency == 0.5 && v.staleness_max == 3);
  assert_string_equal(v.graphs_note, "the third's");
  for (int d = 0; d < 4; d++) assert_int_equal(v.memory.devices[d].params, 1 << d);
  assert_int_equal(v.memory.replicas[0].params, 1 + 2);
  assert_int_equal(v.memory.replicas[1].params, 4 + 8);
  assert_int_equal(v.memory.devices[0].grads, 0);
  assert_int_equal(v.staleness_hist[0], 5);
  assert_int_equal(v.staleness_hist[1], 0);
  assert_int_equal(v.staleness_hist[2], 7 + 1);
  assert_int_equal(v.skipped_steps, -1);
  tr_result_free(r);
  tr__reduced_free(red);
  free(red);
}

static void times_are_read_on_the_coordinators_clock(void **state) {
  (void)state;
  tr__figures f = {0};
  tr__figures_int(&f, TR__M_WINDOW_START, 1000);
  tr__figures_int(&f, TR__M_BUSY_NS, 1000);
  tr__figures_shift_clock(&f, -300);
  assert_int_equal(f.pairs[0].v.i, 700); /* a point in time moves */
  assert_int_equal(f.pairs[1].v.i, 1000); /* a duration does not */
}

/* Bytes from another process may be anything: what is not the table's is left out. */
static void pairs_that_are_not_the_tables_are_left_out(void **state) {
  (void)state;
  tr__figures f = {0};
  tr__figures_int(&f, TR__M_GRAPH_CAPTURES, 4);
  tr__figures_text(&f, TR__M_GRAPHS_NOTE, "fine");
  f.pairs[f.n++] = (tr__pair){.key = TR__METRIC_COUNT + 7, .v.i = 1};
  f.pairs[f.n++] = (tr__pair){.key = TR__M_GRAPHS_NOTE, .v.i = TR__FIGURES_TEXT + 5};
  f.pairs[f.n++] = (tr__pair){.key = TR__M_STALENESS_HIST, .index = 999, .v.i = 1};
  f.pairs[f.n++] = (tr__pair){.key = TR__M_SAMPLES_PER_S, .v.f = 1}; /* derived: never sent */
  tr__figures g = f;
  g.n = 1 << 30; /* more pairs than it holds */
  memset(g.text, 'x', sizeof g.text); /* no text ends */
  const tr__figures *src[2] = {&f, &g};
  tr__reduced *red = calloc(1, sizeof *red);
  assert_non_null(red);
  assert_int_equal(tr__metrics_reduce(red, src, 2, 2), 0);
  assert_int_equal(tr__reduced_int(red, TR__M_GRAPH_CAPTURES), 8);
  assert_string_equal(red->text[TR__M_GRAPHS_NOTE], "fine");
  assert_int_equal(red->count[TR__M_SAMPLES_PER_S], 0);
  for (int b = 0; b < TR_TRAIN_STALENESS_BINS; b++) assert_int_equal(red->bins[TR__M_STALENESS_HIST][b], 0);
  tr__reduced_free(red);
  free(red);
}

/* ---- the JSON ------------------------------------------------------------------------------ */

/* A strict reader of one JSON value into (path, text) leaves: "memory.devices[1].params". */
enum { LEAVES = 512 };
typedef struct leaves {
  char path[LEAVES][96], text[LEAVES][96];
  int n;
} leaves;

static const char *ws(const char *s) {
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
  return s;
}

static const char *value(const char *s, const char *path, leaves *out);

static const char *string(const char *s, char *buf, size_t n) {
  if (*s++ != '"') return NULL;
  size_t k = 0;
  for (; *s && *s != '"'; s++) {
    if ((unsigned char)*s < 0x20) return NULL;
    if (*s == '\\' && !*++s) return NULL;
    if (k + 1 < n) buf[k++] = *s;
  }
  buf[k] = 0;
  return *s == '"' ? s + 1 : NULL;
}

static const char *value(const char *s, const char *path, leaves *out) {
  s = ws(s);
  char sub[96];
  if (*s == '{' || *s == '[') {
    const char close = *s == '{' ? '}' : ']';
    s = ws(s + 1);
    for (int i = 0; *s != close; i++) {
      if (i && (*s != ',' || !(s = ws(s + 1)))) return NULL;
      if (close == '}') {
        char key[64];
        if (!(s = string(s, key, sizeof key)) || *(s = ws(s)) != ':') return NULL;
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
        s++;
      } else {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
      }
      if (!(s = value(s, sub, out))) return NULL;
      s = ws(s);
    }
    return s + 1;
  }
  assert_true(out->n < LEAVES);
  snprintf(out->path[out->n], sizeof out->path[0], "%s", path);
  char *t = out->text[out->n++];
  if (*s == '"') return string(s, t, sizeof out->text[0]);
  size_t k = strspn(s, "-+.0123456789eE");
  if (k == 0) k = !strncmp(s, "null", 4) || !strncmp(s, "true", 4) ? 4 : !strncmp(s, "false", 5) ? 5 : 0;
  if (k == 0 || k >= sizeof out->text[0]) return NULL;
  memcpy(t, s, k);
  t[k] = 0;
  return s + k;
}

static const char *leaf(const leaves *l, const char *path) {
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->path[i], path)) return l->text[i];
  fail_msg("the JSON has no %s", path);
  return NULL;
}

static double number(const leaves *l, const char *path) {
  const char *t = leaf(l, path);
  return strcmp(t, "null") ? strtod(t, NULL) : NAN;
}

/* %.9g of a double reads back within a part in 1e8 of it. */
static void assert_close(const leaves *l, const char *path, double want) {
  const double got = number(l, path);
  if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= 1e-8 * fabs(want)))
    fail_msg("%s: the JSON says %s, the result %.17g", path, leaf(l, path), want);
}

/* What a writer of the figures writes, in memory. */
static char *written(int (*write)(const void *, FILE *), const void *r) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(write(r, f), 0);
  fclose(f);
  return buf;
}

static int write_json(const void *r, FILE *f) { return tr_result_json(r, f); }
static int write_view_json(const void *v, FILE *f) { return tr_train_result_json(v, f); }

static void parse_json(const char *buf, leaves *l) {
  l->n = 0;
  const char *end = value(buf, "", l);
  if (end == NULL || *ws(end)) fail_msg("not one JSON object: %s", buf);
}

static tr_result *run_ok(const tr_train_options *o) {
  tr_result *r;
  tr_error e;
  if (tr_train_run_result(o, &r, &e)) fail_msg("tr_train_run_result: %s", e.message);
  return r;
}

static double real(const tr_result *r, const char *key) {
  double v;
  if (tr_result_real(r, key, &v)) fail_msg("no figure %s", key);
  return v;
}

static double real_at(const tr_result *r, const char *key, int i) {
  double v;
  if (tr_result_real_at(r, key, i, &v)) fail_msg("no value %d of %s", i, key);
  return v;
}

static const char *text(const tr_result *r, const char *key) {
  const char *v;
  if (tr_result_text(r, key, &v)) fail_msg("no figure %s", key);
  return v ? v : "null";
}

/* The JSON says what the result holds by key; the deprecated struct, a view of the result,
 * writes the same bytes. */
static void the_librarys_json_parses_and_says_what_the_result_holds(void **state) {
  (void)state;
  static const struct {
    tr_strategy strategy;
    const char *devices;
  } runs[] = {{TR_STRATEGY_HYBRID, "host:4"}, {TR_STRATEGY_ASYNC, "host:2"}};
  for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
    tr_train_options o = tr_train_defaults();
    o.model = "simplenet";
    o.strategy = runs[k].strategy;
    o.devices = runs[k].devices;
    o.steps = 20;
    o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0);
    tr_result *r = run_ok(&o);
    assert_int_equal(tr_result_set_real(r, "sgemm_gflops", 2.5), 0);
    leaves *l = malloc(sizeof *l);
    assert_non_null(l);
    char *json = written(write_json, r);
    parse_json(json, l);
    tr_train_result v;
    tr__result_view(r, &v);
    char *viewed = written(write_view_json, &v);
    assert_string_equal(viewed, json);
    free(viewed);
    free(json);
    assert_string_equal(leaf(l, "model"), "simplenet");
    assert_string_equal(leaf(l, "strategy"), text(r, "strategy"));
    assert_string_equal(leaf(l, "devices"), text(r, "devices"));
    const char *same[] = {"steps", "samples", "samples_per_s", "final_loss", "gflops",
                          "sgemm_gflops", "bubble_fraction", "consistency"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
      assert_close(l, same[i], real(r, same[i]));
    assert_close(l, "sgemm_gflops", 2.5);
    tr_figure devices;
    assert_int_equal(tr_result_figure(r, "utilization", &devices), 0);
    assert_close(l, "hardware_fraction", real(r, "gflops") / (2.5 * devices.count));
    char p[96];
    for (int i = 0; i < devices.count; i++) {
      snprintf(p, sizeof p, "utilization[%d]", i);
      if (fabs(number(l, p) - real_at(r, "utilization", i)) > 5e-5) fail_msg("%s: %s", p, leaf(l, p));
      snprintf(p, sizeof p, "memory.devices[%d].optimizer_state", i);
      assert_close(l, p, real_at(r, "memory.optimizer_state", i));
      snprintf(p, sizeof p, "memory.devices[%d].peak_activation_bytes", i);
      assert_close(l, p, real_at(r, "memory.peak_activation_bytes", i));
    }
    const int stages = (int)real(r, "stages");
    for (int i = 0; i < devices.count / stages; i++) { /* a replica's: its stages' sum */
      double sum = 0;
      for (int s = 0; s < stages; s++) sum += real_at(r, "memory.params", i * stages + s);
      snprintf(p, sizeof p, "memory.replicas[%d].params", i);
      assert_close(l, p, sum);
    }
    snprintf(p, sizeof p, "memory.devices[%d].params", devices.count);
    for (int i = 0; i < l->n; i++) assert_string_not_equal(l->path[i], p);
    if (runs[k].strategy == TR_STRATEGY_ASYNC) {
      assert_close(l, "staleness.mean", real(r, "staleness.mean"));
      assert_close(l, "workers", real(r, "workers"));
      tr_figure bins;
      assert_int_equal(tr_result_figure(r, "staleness.histogram", &bins), 0);
      double sum = 0;
      for (int b = 0; b < TR_TRAIN_STALENESS_BINS; b++) {
        snprintf(p, sizeof p, "staleness.histogram[%d]", b);
        for (int i = 0; i < l->n; i++)
          if (!strcmp(l->path[i], p)) sum += number(l, p);
        if (b < bins.count) assert_close(l, p, real_at(r, "staleness.histogram", b));
      }
      assert_true(sum == real(r, "steps") - real(r, "first_step")); /* every update in a bin */
      assert_string_equal(leaf(l, "cuts"), "null");
    } else {
      assert_string_equal(leaf(l, "staleness"), "null");
      assert_string_equal(leaf(l, "workers"), "null");
      assert_string_equal(leaf(l, "schedule"), text(r, "schedule"));
      for (int c = 0; c <= stages; c++) {
        snprintf(p, sizeof p, "cuts[%d]", c);
        assert_close(l, p, real_at(r, "cuts", c));
      }
    }
    assert_string_equal(leaf(l, "edges_across_ranks"), "null");
    assert_string_equal(leaf(l, "signal"), "null");
    assert_string_equal(leaf(l, "cuda_graphs.mode"), "on");
    free(l);
    tr_result_free(r);
  }
}

static char *summary_of(const tr_result *r) {
  char *line = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&line, &len);
  assert_non_null(f);
  assert_int_equal(tr_result_summary(r, f), 0);
  fclose(f);
  return line;
}

/* The summary says what applies and is not zero, in the table's words. */
static void the_summary_says_the_figures_that_are_there(void **state) {
  (void)state;
  tr_result *r = tr__result_new("simplenet", "dp");
  assert_non_null(r);
  assert_int_equal(tr__result_set_text(r, TR__M_DEVICES, "host:0,host:1"), 0);
  assert_int_equal(tr__result_set_devices(r, 2), 0);
  tr__result_set_int(r, TR__M_STAGES, 1);
  tr__result_set_int(r, TR__M_STEPS, 40);
  tr__result_set_real(r, TR__M_SAMPLES_PER_S, 1234);
  tr__result_set_real_at(r, TR__M_UTILIZATION, 0, 0.5);
  tr__result_set_real_at(r, TR__M_UTILIZATION, 1, 0.25);
  tr__result_set_int(r, TR__M_SKIPPED_STEPS, 3);
  tr__result_set_int(r, TR__M_WORKERS, 7); /* async only */
  char *line = summary_of(r);
  for (const char *const *want = (const char *const[]){"simplenet · dp · host:0,host:1",
       "to step 40", "1234 samples/s", "utilization 0.50 0.25", "3 updates skipped", NULL};
       *want; want++)
    if (!strstr(line, *want)) fail_msg("the summary does not say '%s': %s", *want, line);
  for (const char *const *not = (const char *const[]){"from step", "bubble", "workers",
       "ZeRO", NULL};
       *not; not++)
    if (strstr(line, *not)) fail_msg("the summary says '%s': %s", *not, line);
  free(line);
  /* a device with nothing to say (an elastic worker that left: NaN) takes no room */
  assert_int_equal(tr__result_set_devices(r, 3), 0);
  tr__result_set_real_at(r, TR__M_UTILIZATION, 0, 0.5);
  tr__result_set_real_at(r, TR__M_UTILIZATION, 2, 0.75);
  line = summary_of(r);
  if (!strstr(line, "utilization 0.50 0.75 ·"))
    fail_msg("the summary does not say 'utilization 0.50 0.75 ·': %s", line);
  free(line);
  tr_result_free(r);
}

/* ---- checkpoints and reports ----------------------------------------------------------------- */

typedef struct watcher {
  const char *path;
  int64_t every, reports, last_step, end;
  char failure[256];
} watcher;

static int64_t step_on_disk(const char *path) {
  tr_checkpoint *ck;
  char err[256];
  uint64_t step = 0;
  if (tr_checkpoint_open(&ck, path, err, sizeof err)) return -1;
  if (tr_checkpoint_meta_u64(ck, "step", &step)) step = 0;
  tr_checkpoint_close(ck);
  return (int64_t)step;
}

/* A report of step k finds checkpoint k (or a later one) on disk; the last, the end's. */
static void watch(void *arg, const tr_report_msg *r) {
  watcher *w = arg;
  w->reports++;
  w->last_step = r->step;
  const int64_t due = r->last ? r->step : r->step / w->every * w->every;
  if (due < w->every || w->failure[0]) return;
  const int64_t on_disk = step_on_disk(w->path);
  if (on_disk < due)
    snprintf(w->failure, sizeof w->failure, "the report of step %lld%s came with the "
             "checkpoint of step %lld on disk", (long long)r->step, r->last ? " (the last)" : "",
             (long long)on_disk);
}

static void a_report_of_step_k_follows_checkpoint_k_on_disk(void **state) {
  (void)state;
  static const struct {
    tr_strategy strategy;
    const char *devices;
    int every, zero; /* every step: parts come faster than the writer takes them */
  } runs[] = {{TR_STRATEGY_SINGLE, "host:1", 3, 0}, {TR_STRATEGY_PIPELINE, "host:2", 1, 0},
              {TR_STRATEGY_DP, "host:2", 3, 1}, {TR_STRATEGY_ASYNC, "host:1", 1, 0}};
  for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
    char name[64];
    snprintf(name, sizeof name, "order%zu.safetensors", k);
    watcher w = {.path = path(name), .every = runs[k].every, .end = 60};
    tr_train_options o = tr_train_defaults();
    o.model = "simplenet";
    o.strategy = runs[k].strategy;
    o.devices = runs[k].devices;
    o.steps = w.end;
    o.job.checkpoint.path = w.path;
    o.job.checkpoint.every = runs[k].every;
    o.job.zero = runs[k].zero;
    if (runs[k].zero) o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0); /* a state */
    o.observe = watch;
    o.observe_arg = &w;
    tr_result_free(run_ok(&o));
    if (w.failure[0]) fail_msg("%s: %s", tr_strategy_name(runs[k].strategy), w.failure);
    assert_int_equal(w.last_step, w.end); /* the last report came, of the last step */
    assert_true(w.reports >= 2);
    assert_int_equal(step_on_disk(w.path), w.end);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_row_names_a_field_of_its_type),
      cmocka_unit_test(the_reduction_follows_each_rows_rule),
      cmocka_unit_test(times_are_read_on_the_coordinators_clock),
      cmocka_unit_test(pairs_that_are_not_the_tables_are_left_out),
      cmocka_unit_test(the_librarys_json_parses_and_says_what_the_result_holds),
      cmocka_unit_test(the_summary_says_the_figures_that_are_there),
      cmocka_unit_test(a_report_of_step_k_follows_checkpoint_k_on_disk),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
