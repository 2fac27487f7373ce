/* test_profile.c — what a profiler sees of a training run.
 *
 * NVTX, through the recorder NVTX_INJECTION64_PATH names (nvtx_recorder.c): Nsight Systems
 * is not needed to see every range troupe pushes. A pipeline of gpt on two devices pushes one
 * forward and one backward per micro-batch and stage, on that stage's thread, named after
 * it, each inside the range of the message its actor was handling, with the payload, name,
 * category and colour the README gives; every push is popped; every strategy pushes its
 * ranges; a profiling window keeps only its steps. The Chrome trace: each send on an edge
 * pairs with its handling, counters run forward in time, a window keeps only its steps.
 *
 * TR_PROFILE_DEVICES (default host) runs the same on other devices: tools/gpu-check.sh runs
 * it with cuda:0,... Without NVTX in the build (meson -Dnvtx=disabled), or without the
 * recorder, the NVTX tests are skipped. */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nvtx_recorder.h"
#include "troupe.h"

#define SCRATCH_NAME "profile"
#include "../actors/scratch.h"

/* ---- runs ------------------------------------------------------------------------------------ */

/* "host" or "cuda": the kind of device every run uses, with as many as it asks for. */
static const char *devices(int n) {
  static char buf[8][96];
  static int next;
  const char *kind = getenv("TR_PROFILE_DEVICES") ? getenv("TR_PROFILE_DEVICES") : "host";
  char *p = buf[next++ % 8];
  if (!strcmp(kind, "host")) {
    snprintf(p, 96, "host:%d", n);
  } else { /* logical devices of one GPU */
    snprintf(p, 96, "%s:0", kind);
    for (int i = 1; i < n; i++) snprintf(p + strlen(p), 96 - strlen(p), ",%s:0", kind);
  }
  return p;
}

static tr_train_options options(const char *model, tr_strategy s, int ndev, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = model;
  o.strategy = s;
  o.devices = devices(ndev);
  o.steps = steps;
  o.deterministic = 1; /* FLOP cuts: nothing timed before the run */
  o.watchdog_ms = 30000;
  return o;
}

static void run(const tr_train_options *o) {
  tr_train_result r;
  char err[1024];
  if (tr_train_run(o, &r, err, sizeof err)) fail_msg("tr_train_run: %s", err);
}

/* ---- the recorder ----------------------------------------------------------------------------- */

static struct {
  nvtx_recorder_count_fn count;
  nvtx_recorder_get_fn get;
  nvtx_recorder_reset_fn reset;
} rec;

/* The recorder NVTX loaded, or a skipped test. */
static void recorder(void) {
#ifndef TR_HAVE_NVTX
  skip(); /* no NVTX in this build */
#endif
  const char *lib = getenv("NVTX_INJECTION64_PATH");
  void *h = lib ? dlopen(lib, RTLD_NOW) : NULL;
  if (h == NULL) {
    print_message("no NVTX recorder (NVTX_INJECTION64_PATH): skipped\n");
    skip();
  }
  rec.count = (nvtx_recorder_count_fn)dlsym(h, "nvtx_recorder_count");
  rec.get = (nvtx_recorder_get_fn)dlsym(h, "nvtx_recorder_get");
  rec.reset = (nvtx_recorder_reset_fn)dlsym(h, "nvtx_recorder_reset");
  assert_true(rec.count && rec.get && rec.reset);
}

/* Thread names are given once per thread and process: kept across resets. */
enum { MAX_THREADS = 256 };
static struct {
  uint32_t tid;
  char name[64];
} threads[MAX_THREADS];
static int nthreads;

static void learn_thread_names(void) {
  for (int i = 0; i < rec.count(); i++) {
    const nvtx_rec *r = rec.get(i);
    if (r->type != REC_THREAD_NAME) continue;
    int k = 0;
    while (k < nthreads && threads[k].tid != r->tid) k++;
    if (k == nthreads && nthreads < MAX_THREADS) threads[nthreads++].tid = r->tid;
    if (k < MAX_THREADS) snprintf(threads[k].name, sizeof threads[k].name, "%s", r->message);
  }
}

static const char *thread_name(uint32_t tid) {
  for (int k = 0; k < nthreads; k++)
    if (threads[k].tid == tid) return threads[k].name;
  return "?";
}

/* "stage0", or "stage0 cuda:0" where the device layer adds the device to the name */
static bool thread_is(const char *name, const char *want) {
  const size_t n = strlen(want);
  return !strncmp(name, want, n) && (name[n] == 0 || name[n] == ' ');
}

static const char *category_name(uint32_t id) {
  const char *name = NULL;
  for (int i = 0; i < rec.count(); i++) {
    const nvtx_rec *r = rec.get(i);
    if (r->type == REC_CATEGORY && r->category == id && r->domain && !strcmp(r->domain, "troupe"))
      name = r->message;
  }
  return name ? name : "?";
}

static bool in_troupe(const nvtx_rec *r) { return r->domain && !strcmp(r->domain, "troupe"); }

/* One range as the tests look at it: pushed, on which thread, inside what. */
typedef struct range {
  const nvtx_rec *push;
  const char *thread;
  const nvtx_rec *parent; /* the range it was pushed inside, or NULL */
} range;

enum { MAX_RANGES = 1 << 16, MAX_DEPTH = 16 };
static range ranges[MAX_RANGES];
static int nranges;

/* Walks the recording thread by thread: every pop matches a push, every push is popped. */
static void collect_ranges(void) {
  learn_thread_names();
  nranges = 0;
  uint32_t tids[MAX_THREADS];
  int ntids = 0;
  for (int i = 0; i < rec.count(); i++) {
    const nvtx_rec *r = rec.get(i);
    if (!in_troupe(r) || (r->type != REC_PUSH && r->type != REC_POP)) continue;
    int k = 0;
    while (k < ntids && tids[k] != r->tid) k++;
    if (k == ntids) tids[ntids++] = r->tid;
  }
  for (int t = 0; t < ntids; t++) {
    const nvtx_rec *stack[MAX_DEPTH];
    int depth = 0;
    for (int i = 0; i < rec.count(); i++) {
      const nvtx_rec *r = rec.get(i);
      if (!in_troupe(r) || r->tid != tids[t]) continue;
      if (r->type == REC_PUSH) {
        assert_true(depth < MAX_DEPTH);
        assert_true(nranges < MAX_RANGES);
        ranges[nranges++] = (range){r, thread_name(r->tid), depth ? stack[depth - 1] : NULL};
        stack[depth++] = r;
      } else if (r->type == REC_POP) {
        if (depth == 0) fail_msg("a pop with no push on thread '%s'", thread_name(r->tid));
        depth--;
      }
    }
    if (depth) fail_msg("%d ranges never popped on thread '%s' (innermost '%s')", depth,
                        thread_name(tids[t]), stack[depth - 1]->message);
  }
}

/* The payload's fields (tr_trace.h): step · 10⁶ + stage · 10³ + micro-batch, 999 for none. */
static int64_t step_of(const nvtx_rec *r) { return r->payload / 1000000; }
static int stage_of(const nvtx_rec *r) { return (int)(r->payload / 1000 % 1000); }
static int mb_of(const nvtx_rec *r) { return (int)(r->payload % 1000); }

static int count(const char *name, const char *thread_prefix) {
  int n = 0;
  for (int i = 0; i < nranges; i++)
    if (!strcmp(ranges[i].push->message, name) &&
        (!thread_prefix || !strncmp(ranges[i].thread, thread_prefix, strlen(thread_prefix))))
      n++;
  return n;
}

/* ---- the tests -------------------------------------------------------------------------------- */

/* What the README's palette says of each kind. */
static const struct {
  const char *name, *category;
  uint32_t color;
} palette[] = {
    {"forward", "compute", 0xFF0072B2},         {"backward", "compute", 0xFFD55E00},
    {"recv act", "communication", 0xFF56B4E9},  {"recv grad", "communication", 0xFFE69F00},
    {"allreduce", "communication", 0xFFCC79A7}, {"update", "optimizer", 0xFF009E73},
    {"fill", "data", 0xFFF0E442},               {"start", "control", 0xFF999999},
};

static void pipeline_pushes_one_forward_and_one_backward_per_microbatch_and_stage(void **state) {
  (void)state;
  recorder();
  enum { STEPS = 3, M = 4 };
  tr_train_options o = options("gpt", TR_STRATEGY_PIPELINE, 2, STEPS);
  o.job.layout.microbatches = M;
  o.job.global_batch = 8;
  rec.reset();
  run(&o);
  collect_ranges();

  int seen[2][2][STEPS][M] = {{{{0}}}}; /* [forward, backward][stage][step][mb] */
  for (int i = 0; i < nranges; i++) {
    const nvtx_rec *p = ranges[i].push;
    const int fwd = !strcmp(p->message, "forward"), bwd = !strcmp(p->message, "backward");
    if (!fwd && !bwd) continue;
    assert_true(p->registered && p->has_payload);
    const int64_t step = step_of(p);
    const int stage = stage_of(p), mb = mb_of(p);
    assert_true(step >= 0 && step < STEPS && stage >= 0 && stage < 2 && mb >= 0 && mb < M);
    char want[16];
    snprintf(want, sizeof want, "stage%d", stage);
    if (!thread_is(ranges[i].thread, want)) /* on the thread of the stage that did it */
      fail_msg("%s of stage %d on thread '%s'", p->message, stage, ranges[i].thread);
    /* inside the handling of a message (or the start), a control range of that thread */
    assert_non_null(ranges[i].parent);
    assert_string_equal(category_name(ranges[i].parent->category), "control");
    seen[bwd][stage][step][mb]++;
  }
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < 2; s++)
      for (int t = 0; t < STEPS; t++)
        for (int mb = 0; mb < M; mb++)
          if (seen[k][s][t][mb] != 1)
            fail_msg("%s of stage %d, step %d, micro-batch %d: %d ranges, not one",
                     k ? "backward" : "forward", s, t, mb, seen[k][s][t][mb]);
  assert_int_equal(count("recv act", "stage1"), STEPS * M);
  assert_int_equal(count("recv act", "stage0"), 0);
  assert_int_equal(count("recv grad", "stage0"), STEPS * M);
  assert_int_equal(count("update", "stage0"), STEPS);
  assert_int_equal(count("update", "stage1"), STEPS);
  assert_true(count("fill", "loop") > 0); /* the loader fills on the loop thread */

  /* names, categories and colours as the README gives them */
  for (size_t k = 0; k < sizeof palette / sizeof *palette; k++)
    for (int i = 0; i < nranges; i++)
      if (!strcmp(ranges[i].push->message, palette[k].name)) {
        assert_string_equal(category_name(ranges[i].push->category), palette[k].category);
        assert_int_equal(ranges[i].push->color, palette[k].color);
      }
  /* every thread troupe started is named, and the loop */
  const char *named[] = {"stage0", "stage1", "loop"};
  for (size_t k = 0; k < 3; k++) {
    int found = 0;
    for (int t = 0; t < nthreads; t++) found |= thread_is(threads[t].name, named[k]);
    if (!found) fail_msg("no thread named '%s'", named[k]);
  }
}

static void every_strategy_pushes_its_ranges(void **state) {
  (void)state;
  recorder();
  enum { STEPS = 4 };
  const struct {
    tr_strategy s;
    int ndev;
    const char *thread, *also; /* a thread's forwards; a range the strategy must push */
    int forwards;              /* on that thread */
  } cases[] = {
      {TR_STRATEGY_SINGLE, 1, "stage0", "update", STEPS},
      {TR_STRATEGY_DP, 2, "replica1", "allreduce", STEPS},
      {TR_STRATEGY_PIPELINE, 2, "stage1", "recv act", STEPS * 4},
      {TR_STRATEGY_HYBRID, 4, "r1.stage0", "allreduce", STEPS * 4},
      {TR_STRATEGY_ASYNC, 2, "worker", "update", STEPS},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tr_train_options o = options("simplenet", cases[k].s, cases[k].ndev, STEPS);
    rec.reset();
    run(&o);
    collect_ranges(); /* balanced on every thread */
    const int fwd = count("forward", cases[k].thread);
    if (fwd != cases[k].forwards || count(cases[k].also, NULL) == 0)
      fail_msg("%s: %d forwards on %s (want %d), %d '%s' ranges", tr_strategy_name(cases[k].s),
               fwd, cases[k].thread, cases[k].forwards, count(cases[k].also, NULL), cases[k].also);
  }
  /* async: every push is one update, applied by the server on its own thread */
  assert_int_equal(count("update", "server"), STEPS);
}

/* ---- the Chrome trace ------------------------------------------------------------------------- */

static cJSON *load_trace(const char *file) {
  FILE *f = fopen(file, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)size + 1);
  assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
  buf[size] = 0;
  fclose(f);
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  assert_non_null(root);
  return root;
}

static const char *str(const cJSON *e, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}
static double num(const cJSON *e, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
static double arg(const cJSON *e, const char *key) {
  return num(cJSON_GetObjectItemCaseSensitive(e, "args"), key);
}

/* Every "s" has one "f" of its id and name, no earlier, inside a range of its thread; every
 * counter track runs forward in time. Returns how many flows each name has in `names`. */
static void check_trace(const cJSON *root, const char *const *names, int *flows, int nnames) {
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents"), *e, *g, *x;
  assert_true(cJSON_IsArray(ev));
  memset(flows, 0, (size_t)nnames * sizeof *flows);
  cJSON_ArrayForEach(e, ev) {
    if (strcmp(str(e, "ph"), "s")) continue;
    int ends = 0;
    cJSON_ArrayForEach(g, ev) {
      if (strcmp(str(g, "ph"), "f") || num(g, "id") != num(e, "id")) continue;
      ends++;
      assert_string_equal(str(g, "name"), str(e, "name"));
      assert_true(num(g, "ts") >= num(e, "ts"));
      int inside = 0; /* the arrow ends on the handler's range */
      cJSON_ArrayForEach(x, ev)
        inside |= !strcmp(str(x, "ph"), "X") && num(x, "tid") == num(g, "tid") &&
                  num(x, "pid") == num(g, "pid") && num(x, "ts") <= num(g, "ts") &&
                  num(g, "ts") <= num(x, "ts") + num(x, "dur");
      assert_true(inside);
    }
    if (ends != 1) fail_msg("flow %.0f '%s': %d ends", num(e, "id"), str(e, "name"), ends);
    for (int k = 0; k < nnames; k++) flows[k] += !strcmp(str(e, "name"), names[k]);
  }
  cJSON_ArrayForEach(e, ev) {
    if (!strcmp(str(e, "ph"), "f")) { /* and every end has its start */
      int starts = 0;
      cJSON_ArrayForEach(g, ev) starts += !strcmp(str(g, "ph"), "s") && num(g, "id") == num(e, "id");
      assert_int_equal(starts, 1);
    }
    if (!strcmp(str(e, "ph"), "X")) assert_true(str(e, "cat")[0] != 0);
  }
  int counters = 0;
  cJSON_ArrayForEach(e, ev) {
    if (strcmp(str(e, "ph"), "C")) continue;
    counters++;
    assert_true(arg(e, "value") >= 0);
    double last = -1; /* the samples of its track before it, in file order */
    cJSON_ArrayForEach(g, ev) {
      if (g == e) break;
      if (!strcmp(str(g, "ph"), "C") && !strcmp(str(g, "name"), str(e, "name"))) last = num(g, "ts");
    }
    if (num(e, "ts") < last) fail_msg("counter '%s' goes back in time", str(e, "name"));
  }
  assert_true(counters > 0);
}

static void trace_flows_pair_up_and_counters_are_monotonic_in_time(void **state) {
  (void)state;
  /* hybrid: activations, gradients, buckets; async: pushes and replies */
  const char *sync_names[] = {"inputs", "targets", "act", "grad", "bucket", "report"};
  const char *async_names[] = {"push", "reply"};
  int flows[6];
  tr_train_options o = options("simplenet", TR_STRATEGY_HYBRID, 4, 3);
  o.trace = path("hybrid.json");
  run(&o);
  cJSON *root = load_trace(o.trace);
  check_trace(root, sync_names, flows, 6);
  for (int k = 0; k < 6; k++)
    if (flows[k] == 0) fail_msg("hybrid: no flow of '%s'", sync_names[k]);
  cJSON_Delete(root);

  o = options("simplenet", TR_STRATEGY_ASYNC, 2, 6);
  o.trace = path("async.json");
  run(&o);
  root = load_trace(o.trace);
  check_trace(root, async_names, flows, 2);
  assert_true(flows[0] >= 6 && flows[1] >= 6); /* a push and a reply per update */
  cJSON_Delete(root);
}

static void profile_window_keeps_only_its_steps(void **state) {
  (void)state;
  enum { M = 2, FROM = 3, TO = 6 };
  tr_train_options o = options("simplenet", TR_STRATEGY_PIPELINE, 2, 8);
  o.job.layout.microbatches = M;
  o.job.profile = (tr_profile_config){.from = FROM, .to = TO};
  o.trace = path("window.json");
#ifdef TR_HAVE_NVTX
  const bool nvtx = getenv("NVTX_INJECTION64_PATH") != NULL;
#else
  const bool nvtx = false;
#endif
  if (nvtx) {
    recorder();
    rec.reset();
  }
  run(&o);

  /* the trace: forwards of steps FROM..TO-1 only, M per stage and step */
  cJSON *root = load_trace(o.trace), *e;
  int forwards = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "traceEvents")) {
    if (strcmp(str(e, "ph"), "X") || strcmp(str(e, "name"), "forward")) continue;
    forwards++;
    assert_true(arg(e, "step") >= FROM && arg(e, "step") < TO);
  }
  assert_int_equal(forwards, 2 * M * (TO - FROM));
  cJSON_Delete(root);
  if (!nvtx) return;

  /* NVTX: the same ranges, and one "profile" range around them */
  collect_ranges();
  assert_int_equal(count("forward", "stage"), 2 * M * (TO - FROM));
  for (int i = 0; i < nranges; i++)
    if (!strcmp(ranges[i].push->message, "forward"))
      assert_true(step_of(ranges[i].push) >= FROM && step_of(ranges[i].push) < TO);
  int starts = 0, ends = 0;
  uint64_t id = 0;
  for (int i = 0; i < rec.count(); i++) {
    const nvtx_rec *r = rec.get(i);
    if (!in_troupe(r)) continue;
    if (r->type == REC_START && !strcmp(r->message, "profile")) starts++, id = r->id;
    if (r->type == REC_END && r->id == id) ends++;
  }
  assert_int_equal(starts, 1);
  assert_int_equal(ends, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pipeline_pushes_one_forward_and_one_backward_per_microbatch_and_stage),
      cmocka_unit_test(every_strategy_pushes_its_ranges),
      cmocka_unit_test(trace_flows_pair_up_and_counters_are_monotonic_in_time),
      cmocka_unit_test(profile_window_keeps_only_its_steps),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
