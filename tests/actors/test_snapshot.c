/* test_snapshot.c — the parameters of a running job in an observer's hands (tr_job_snapshot,
 * tr_train_options.snapshot_every): the snapshot of step k is the checkpoint of step k, bit
 * for bit and name for name (single, a pipeline of 2, dp of 2, dp under ZeRO); exactly the
 * reports of its steps and the last carry one; a report of step k follows checkpoint k on
 * disk; and what cannot be had is refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "snapshot"
#include "scratch.h"

#include "simplenet_job.h"

/* "" when a and b hold the same tensors (names, dtypes, shapes, bytes) and metadata; else
 * what differs, in `why`. */
static bool same_checkpoint(const tr_checkpoint *a, const tr_checkpoint *b, char *why, size_t n) {
  if (tr_checkpoint_count(a) != tr_checkpoint_count(b)) {
    snprintf(why, n, "%zu tensors against %zu", tr_checkpoint_count(a), tr_checkpoint_count(b));
    return false;
  }
  for (size_t i = 0; i < tr_checkpoint_count(b); i++) {
    const tr_checkpoint_tensor *tb = tr_checkpoint_tensor_at(b, i);
    const tr_checkpoint_tensor *ta = tr_checkpoint_find(a, tb->name);
    if (ta == NULL || ta->dtype != tb->dtype || ta->ndim != tb->ndim ||
        memcmp(ta->shape, tb->shape, sizeof ta->shape) || ta->nbytes != tb->nbytes ||
        memcmp(ta->data, tb->data, tb->nbytes)) {
      snprintf(why, n, "tensor '%s' %s", tb->name, ta ? "differs" : "is missing");
      return false;
    }
  }
  if (tr_checkpoint_meta_count(a) != tr_checkpoint_meta_count(b)) {
    snprintf(why, n, "%zu metadata keys against %zu", tr_checkpoint_meta_count(a),
             tr_checkpoint_meta_count(b));
    return false;
  }
  for (size_t i = 0; i < tr_checkpoint_meta_count(b); i++) {
    const char *key, *value, *mine;
    tr_checkpoint_meta_at(b, i, &key, &value);
    if ((mine = tr_checkpoint_meta(a, key)) == NULL || strcmp(mine, value)) {
      snprintf(why, n, "metadata '%s': '%s' against '%s'", key, mine ? mine : "(none)", value);
      return false;
    }
  }
  return true;
}

/* A copy of `ck` in a file of its own (its tensors and metadata), to compare after the run. */
static void keep(const tr_checkpoint *ck, const char *file) {
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  for (size_t i = 0; i < tr_checkpoint_count(ck); i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    tr_checkpoint_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
  }
  for (size_t i = 0; i < tr_checkpoint_meta_count(ck); i++) {
    const char *key, *value;
    tr_checkpoint_meta_at(ck, i, &key, &value);
    tr_checkpoint_writer_put(w, key, value);
  }
  if (tr_checkpoint_writer_save(w, file)) fail_msg("%s", tr_checkpoint_writer_error(w));
  tr_checkpoint_writer_free(w);
}

static int64_t step_of(tr_checkpoint *ck) {
  uint64_t step;
  return tr_checkpoint_meta_u64(ck, "step", &step) ? -1 : (int64_t)step;
}

static int64_t step_on_disk(const char *file) {
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) return -1;
  const int64_t step = step_of(ck);
  tr_checkpoint_close(ck);
  return step;
}

/* What an observer of the parameters saw, and the first thing that was wrong. */
typedef struct watcher {
  const char *name;     /* the run's, for its files */
  const char *ckpt;     /* the run's checkpoint (NULL: none) */
  int64_t ck_every;     /* its checkpoint.every */
  int64_t every;        /* snapshot_every */
  int64_t reports, with_params, last_step;
  int64_t kept[64];     /* the steps whose snapshots were kept in files */
  int nkept;
  char failure[512];
} watcher;

static const char *kept_file(const watcher *w, int64_t step) {
  char name[96];
  snprintf(name, sizeof name, "%s-snap%lld.safetensors", w->name, (long long)step);
  return path(name);
}

static void watch(void *arg, const tr_report_msg *r) {
  watcher *w = arg;
  w->reports++;
  w->last_step = r->step;
  if (w->failure[0]) return;
  const bool wanted = r->last || r->step % w->every == 0;
  if (wanted != (r->params != NULL)) {
    snprintf(w->failure, sizeof w->failure, "the report of step %lld%s came %s parameters",
             (long long)r->step, r->last ? " (the last)" : "", r->params ? "with" : "without");
    return;
  }
  if (w->ckpt) { /* checkpoints come first: k (or a later one) is on disk */
    const int64_t due = r->last ? r->step : r->step / w->ck_every * w->ck_every;
    const int64_t on_disk = step_on_disk(w->ckpt);
    if (on_disk < due || (r->last && on_disk != r->step))
      snprintf(w->failure, sizeof w->failure, "the report of step %lld%s came with the "
               "checkpoint of step %lld on disk", (long long)r->step, r->last ? " (last)" : "",
               (long long)on_disk);
  }
  if (r->params == NULL) return;
  w->with_params++;
  if (step_of(r->params) != r->step) {
    snprintf(w->failure, sizeof w->failure, "the parameters of the report of step %lld are of "
             "step %lld", (long long)r->step, (long long)step_of(r->params));
    return;
  }
  if (w->nkept < 64) {
    keep(r->params, kept_file(w, r->step));
    w->kept[w->nkept++] = r->step;
  }
}

static tr_train_options options(tr_strategy s, const char *devices, int zero, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.strategy = s;
  o.devices = devices;
  o.steps = steps;
  o.job.zero = zero;
  if (zero) o.job.optim = tr_optim_defaults(TR_OPTIM_MOMENTUM, 0); /* a state to shard */
  return o;
}

static void run_ok(const tr_train_options *o, tr_train_result *r) {
  char err[512];
  if (tr_train_run(o, r, err, sizeof err)) fail_msg("%s", err);
}

static void assert_same_files(const char *a, const char *b, const char *what) {
  tr_checkpoint *x = NULL, *y = NULL;
  char err[512], why[256];
  if (tr_checkpoint_open(&x, a, err, sizeof err) || tr_checkpoint_open(&y, b, err, sizeof err))
    fail_msg("%s", err);
  const bool same = same_checkpoint(x, y, why, sizeof why);
  tr_checkpoint_close(x);
  tr_checkpoint_close(y);
  if (!same) fail_msg("%s: %s", what, why);
}

/* The parameters an observer holds at step k are the checkpoint a run writes at step k:
 * every name, every bit, the metadata. Mid-run, against a run that stopped at k (host
 * devices repeat bitwise); at the end, against this run's own checkpoint. */
static void a_snapshot_is_the_checkpoint_of_its_step(void **state) {
  (void)state;
  static const struct {
    const char *name;
    tr_strategy strategy;
    const char *devices;
    int zero;
  } runs[] = {{"single", TR_STRATEGY_SINGLE, "host:1", 0},
              {"pipeline", TR_STRATEGY_PIPELINE, "host:2", 0},
              {"dp", TR_STRATEGY_DP, "host:2", 0},
              {"zero", TR_STRATEGY_DP, "host:2", 1}};
  enum { EVERY = 4, END = 18, MID = 8 };
  for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
    char file[96];
    snprintf(file, sizeof file, "%s.safetensors", runs[k].name);
    watcher w = {.name = runs[k].name, .ckpt = path(file), .ck_every = 6, .every = EVERY};
    tr_train_options o = options(runs[k].strategy, runs[k].devices, runs[k].zero, END);
    o.job.checkpoint.path = w.ckpt;
    o.job.checkpoint.every = w.ck_every; /* one gathering for both at 12, one or other else */
    o.observe = watch;
    o.observe_arg = &w;
    o.observe_every = 3;
    o.snapshot_every = EVERY;
    tr_train_result r;
    run_ok(&o, &r);
    if (w.failure[0]) fail_msg("%s: %s", runs[k].name, w.failure);
    /* 4, 8, 12, 16 and the end's, each heard although observe_every is 3 */
    assert_int_equal(w.with_params, 5);
    assert_int_equal(w.kept[0], 4);
    assert_int_equal(w.kept[w.nkept - 1], END);
    assert_int_equal(w.last_step, END);
    assert_same_files(kept_file(&w, END), w.ckpt, runs[k].name);

    char mid[96];
    snprintf(mid, sizeof mid, "%s-to%d.safetensors", runs[k].name, MID);
    tr_train_options to_mid = options(runs[k].strategy, runs[k].devices, runs[k].zero, MID);
    to_mid.job.checkpoint.path = path(mid);
    run_ok(&to_mid, &r);
    assert_same_files(kept_file(&w, MID), path(mid), runs[k].name);
  }
}

/* Without a checkpoint, every snapshot comes all the same, and only where it is due: with
 * observe_every 1, the reports of steps 5, 10, 15 and the last carry parameters. Again and
 * again: the last report, of step 17 like the one before it, finds the end's snapshot
 * however the two race with it. */
static void only_the_reports_of_its_steps_carry_parameters(void **state) {
  (void)state;
  for (int i = 0; i < 8; i++) {
    watcher w = {.name = "nockpt", .every = 5};
    tr_train_options o = options(TR_STRATEGY_PIPELINE, "host:2", 0, 17);
    o.observe = watch;
    o.observe_arg = &w;
    o.snapshot_every = 5;
    o.watchdog_ms = 5000; /* a report that never comes fails the run, not the test's time */
    tr_train_result r;
    run_ok(&o, &r);
    if (w.failure[0]) fail_msg("%s", w.failure);
    assert_int_equal(w.reports, 18); /* 17 steps and the last */
    assert_int_equal(w.with_params, 4);
    assert_int_equal(w.kept[3], 17);
    tr_checkpoint *ck;
    char err[512];
    if (tr_checkpoint_open(&ck, kept_file(&w, 10), err, sizeof err)) fail_msg("%s", err);
    const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, "0.weight");
    assert_non_null(t); /* the model's names */
    assert_int_equal(t->dtype, TR_DTYPE_F32);
    tr_checkpoint_close(ck);
  }
}

/* The order of checkpoints and reports, again and again: a checkpoint every step (parts
 * come faster than the writer takes them), each report of step k finds k or later on disk,
 * the last the last. */
static void a_report_of_step_k_follows_checkpoint_k_on_disk(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) {
    char file[64];
    snprintf(file, sizeof file, "order%d.safetensors", i);
    watcher w = {.name = "order", .ckpt = path(file), .ck_every = 1, .every = 7};
    tr_train_options o = options(i == 1 ? TR_STRATEGY_PIPELINE : TR_STRATEGY_SINGLE,
                                 i == 1 ? "host:2" : "host:1", 0, 40);
    o.job.checkpoint.path = w.ckpt;
    o.job.checkpoint.every = 1;
    o.observe = watch;
    o.observe_arg = &w;
    o.snapshot_every = 7;
    tr_train_result r;
    run_ok(&o, &r);
    if (w.failure[0]) fail_msg("run %d: %s", i, w.failure);
    assert_int_equal(w.reports, 41);
    assert_int_equal(w.last_step, 40);
  }
}

/* ---- refusals ------------------------------------------------------------------------------- */

static int ignore(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}

#define REFUSED(x, call, status, text)                                                   \
  do {                                                                                     \
    assert_int_equal((call), (status));                                                    \
    if (!strstr(tr_job_error((x)->j), (text)))                                             \
      fail_msg("tr_job_error says '%s', not '%s'", tr_job_error((x)->j), (text));          \
  } while (0)

static void what_cannot_be_snapshot_is_refused_by_name(void **state) {
  (void)state;
  simplenet_job x;
  simplenet_job_open(&x, "host:1", 1, NULL, tr_job_defaults());
  static const tr_behaviour b = {.name = "observer", .receive = ignore};
  tr_actor *obs, *stage, *coord;
  assert_int_equal(tr_graph_add(x.g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                         .behaviour = &b},
                                &obs),
                   0);
  assert_int_equal(tr_job_add_stage(x.j, 0, 0, tr_device_list_at(x.devs, 0), &stage), 0);
  REFUSED(&x, tr_job_snapshot(x.j, NULL, 1), TR_EINVAL, "tr_job_snapshot: report is NULL");
  assert_int_equal(tr_job_add_coordinator(x.j, &coord), 0);
  tr_edge *in, *other;
  assert_int_equal(tr_job_observe(x.j, obs, 2, &in), 0);
  assert_int_equal(tr_graph_connect(x.g, &(tr_edge_config){.from = obs, .to = coord, .type =
                                                           &tr_report_type, .credits = 1},
                                    &other),
                   0);
  REFUSED(&x, tr_job_snapshot(x.j, other, 1), TR_EINVAL, "not an observer's report edge");
  REFUSED(&x, tr_job_snapshot(x.j, in, 0), TR_EINVAL, "tr_job_snapshot: every 0");
  assert_int_equal(tr_job_snapshot(x.j, in, 4), 0);
  simplenet_job_close(&x);

  tr_job_config c = tr_job_defaults();
  c.async.enabled = 1;
  simplenet_job_open(&x, "host:1", 1, NULL, c);
  assert_int_equal(tr_graph_add(x.g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                         .behaviour = &b},
                                &obs),
                   0);
  assert_int_equal(tr_job_add_coordinator(x.j, &coord), 0);
  assert_int_equal(tr_job_observe(x.j, obs, 2, &in), 0);
  REFUSED(&x, tr_job_snapshot(x.j, in, 3), TR_EINVAL, "the job is asynchronous (async.enabled)");
  simplenet_job_close(&x);
}

static void run_refused(const tr_train_options *o, const char *text) {
  tr_train_result r;
  char err[512];
  assert_int_equal(tr_train_run(o, &r, err, sizeof err), TR_EINVAL);
  if (!strstr(err, text)) fail_msg("the refusal says '%s', not '%s'", err, text);
}

static void snapshot_every_without_its_observer_is_refused(void **state) {
  (void)state;
  watcher w = {.name = "refused", .every = 2};
  tr_train_options o = options(TR_STRATEGY_SINGLE, "host:1", 0, 4);
  o.snapshot_every = 2;
  run_refused(&o, "snapshot_every 2: the parameters come in the reports to observe, which is "
              "NULL");
  o.observe = watch;
  o.observe_arg = &w;
  o.snapshot_every = -1;
  run_refused(&o, "snapshot_every -1: give 0 (none) or more steps");
  o = options(TR_STRATEGY_ASYNC, "host:2", 0, 4);
  o.observe = watch;
  o.observe_arg = &w;
  o.snapshot_every = 2;
  run_refused(&o, "snapshot_every 2: async's parameters are the server's");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_snapshot_is_the_checkpoint_of_its_step),
      cmocka_unit_test(only_the_reports_of_its_steps_carry_parameters),
      cmocka_unit_test(a_report_of_step_k_follows_checkpoint_k_on_disk),
      cmocka_unit_test(what_cannot_be_snapshot_is_refused_by_name),
      cmocka_unit_test(snapshot_every_without_its_observer_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
