/* test_trace.c — the trace's budget: a run of any length keeps its events within the budget,
 * dropping whole steps from the oldest, says so in the written file, and a profiling window
 * still selects the steps it holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"

typedef struct step_msg {
  tr_msg hdr;
  int64_t step;
} step_msg;
static TR_MSGTYPE_DEFINE(step_type, step_msg);

/* Two pinned actors pass a step back and forth: the driver begins each step (as a graph's
 * coordinator does), and each records `per_step` ranges of its own in it. */
typedef struct ping {
  tr_actor *driver, *worker;
  int64_t steps, per_step;
  _Atomic uint64_t recorded; /* ranges of ours, and handled messages (each one range) */
} ping;

static void send_step(tr_actor *to, tr_actor *from, int64_t step) {
  step_msg *m = tr_msg_new(&step_type);
  m->step = step;
  m->hdr.from = from;
  tr_actor_send(to, m);
}

static int ping_receive(tr_actor *self, tr_msg *msg) {
  ping *p = tr_actor_state(self);
  const int64_t step = ((step_msg *)msg)->step;
  tr_system *sys = tr_actor_system(self);
  const bool driver = self == p->driver;
  if (driver && step == p->steps) {
    tr_system_stop(sys, 0);
    atomic_fetch_add(&p->recorded, 1);
    return 0;
  }
  if (driver) tr_system_trace_step(sys, step);
  for (int64_t i = 0; i < p->per_step; i++) {
    const uint64_t t = tr_now_ns();
    tr_trace_record(self, driver ? "drive" : "work", t, t + 1, step);
  }
  atomic_fetch_add(&p->recorded, (uint64_t)p->per_step + 1);
  send_step(driver ? p->worker : p->driver, self, driver ? step : step + 1);
  return 0;
}
static const tr_behaviour ping_behaviour = {.name = "ping", .receive = ping_receive};

static tr_system *ping_system(ping *p, size_t budget, int64_t from, int64_t to) {
  tr_system *sys;
  assert_int_equal(tr_system_new(&sys, &(tr_system_config){.name = "ping", .trace = 1}), 0);
  tr_system_trace_budget(sys, budget);
  if (from || to) tr_system_trace_window(sys, from, to);
  assert_int_equal(tr_actor_spawn(sys, &(tr_actor_config){.name = "driver", .kind = TR_ACTOR_PINNED,
                                                          .behaviour = &ping_behaviour, .state = p},
                                  &p->driver), 0);
  assert_int_equal(tr_actor_spawn(sys, &(tr_actor_config){.name = "worker", .kind = TR_ACTOR_PINNED,
                                                          .behaviour = &ping_behaviour, .state = p},
                                  &p->worker), 0);
  send_step(p->driver, NULL, 0);
  assert_int_equal(tr_system_run(sys), 0);
  return sys;
}

/* What the kept events hold: their steps, and each step's count of the driver's ranges. */
typedef struct seen {
  int64_t lo, hi, steps;
  uint64_t n;
  int64_t *drive; /* [steps] */
} seen;

static void see(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread, (void)tid;
  seen *s = ctx;
  s->n++;
  if (ev->step < s->lo) s->lo = ev->step;
  if (ev->step > s->hi) s->hi = ev->step;
  if (ev->name && !strcmp(ev->name, "drive")) {
    assert_int_equal(ev->arg, ev->step); /* the event is tagged with the step it was in */
    s->drive[ev->step]++;
  }
}

static seen see_all(tr_system *sys, int64_t steps) {
  seen s = {.lo = INT64_MAX, .hi = INT64_MIN, .steps = steps};
  s.drive = calloc((size_t)steps + 1, sizeof *s.drive);
  tr_system_trace_visit(sys, see, &s);
  return s;
}

static char *written(tr_system *sys) {
  char path[] = "/tmp/troupe-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(tr_system_trace_write(sys, path), 0);
  FILE *f = fopen(path, "r");
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  char *text = calloc((size_t)len + 1, 1);
  assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  unlink(path);
  return text;
}

/* 4,000 tiny steps of 40 events each (~14 MiB of events) under a 1 MiB budget. */
static void a_long_run_keeps_its_last_steps_within_the_budget(void **state) {
  (void)state;
  enum { STEPS = 4000, PER = 20 };
  const size_t budget = 1 << 20;
  ping p = {.steps = STEPS, .per_step = PER};
  tr_system *sys = ping_system(&p, budget, 0, 0);
  tr_trace_stats st;
  tr_system_trace_stats(sys, &st);
  assert_true(st.peak_bytes <= budget); /* the most ever held: never above the budget */
  assert_true(st.bytes <= budget);
  assert_int_equal(st.budget, budget);
  assert_true(st.events * sizeof(tr_trace_event) <= budget);
  /* all that was recorded is either kept or dropped, none lost: steps are small */
  assert_int_equal(st.lost, 0);
  assert_int_equal(st.lost_step, -1);
  assert_int_equal(st.events + st.dropped, p.recorded);
  assert_true(st.dropped > st.events); /* most of the run was dropped ... */
  assert_true(st.first_step > STEPS / 2);
  assert_true(st.events > (uint64_t)PER * 100); /* ... and the budget still holds many steps */
  assert_int_equal(tr_system_trace_count(sys), st.events);

  /* the kept events are whole steps, the last ones: first_step to the end, each complete */
  seen s = see_all(sys, STEPS);
  assert_int_equal(s.n, st.events);
  assert_int_equal(s.lo, st.first_step);
  assert_int_equal(s.hi, STEPS - 1);
  for (int64_t k = 0; k < STEPS; k++) assert_int_equal(s.drive[k], k < st.first_step ? 0 : PER);
  free(s.drive);

  char *text = written(sys);
  char note[128];
  snprintf(note, sizeof note, "\"first_step\":%lld,\"dropped_events\":%llu",
           (long long)st.first_step, (unsigned long long)st.dropped);
  assert_non_null(strstr(text, note));
  snprintf(note, sizeof note, "events before step %lld were dropped: %llu events",
           (long long)st.first_step, (unsigned long long)st.dropped);
  assert_non_null(strstr(text, note));
  assert_null(strstr(text, "\"arg\":0}")); /* step 0's ranges are not in the file */
  free(text);
  tr_system_free(sys);
}

/* A run within its budget keeps everything and says that nothing was dropped. */
static void a_short_run_keeps_every_event(void **state) {
  (void)state;
  ping p = {.steps = 50, .per_step = 10};
  tr_system *sys = ping_system(&p, 0, 0, 0);
  tr_trace_stats st;
  tr_system_trace_stats(sys, &st);
  assert_int_equal(st.budget, TR_TRACE_BUDGET_DEFAULT);
  assert_int_equal(st.events, p.recorded);
  assert_int_equal(st.dropped, 0);
  assert_int_equal(st.first_step, 0);
  char *text = written(sys);
  assert_non_null(strstr(text, "\"otherData\":{\"budget_bytes\":67108864,"));
  assert_null(strstr(text, "\"note\""));
  free(text);
  tr_system_free(sys);
}

/* The trace is never written over what is not a regular file: a FIFO there is refused and
 * left (the write neither replaces it nor waits for a reader). */
static void a_trace_onto_a_fifo_is_refused_and_left(void **state) {
  (void)state;
  ping p = {.steps = 5, .per_step = 1};
  tr_system *sys = ping_system(&p, 0, 0, 0);
  char dir[] = "/tmp/troupe-trace-XXXXXX", fifo[64];
  assert_non_null(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/t.json", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(tr_system_trace_write(sys, fifo), TR_EINVAL);
  struct stat sb;
  assert_int_equal(lstat(fifo, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  unlink(fifo);
  assert_int_equal(rmdir(dir), 0); /* nothing else was left there */
  tr_system_free(sys);
}

/* One step with more events than the budget holds: the step being recorded is never dropped,
 * its further events are not recorded, and the file says how many. */
static void a_step_larger_than_the_budget_loses_its_tail_and_says_so(void **state) {
  (void)state;
  ping p = {.steps = 2, .per_step = 20000};
  tr_system *sys = ping_system(&p, TR_TRACE_BUDGET_MIN, 0, 0);
  tr_trace_stats st;
  tr_system_trace_stats(sys, &st);
  assert_true(st.peak_bytes <= TR_TRACE_BUDGET_MIN);
  assert_true(st.lost > 0);
  assert_int_equal(st.lost_step, 0);
  assert_int_equal(st.events + st.dropped + st.lost, p.recorded);
  char *text = written(sys);
  assert_non_null(strstr(text, "events from step 0 on were not recorded"));
  free(text);
  tr_system_free(sys);
}

/* A profiling window still selects its steps: nothing outside it, and within a budget that
 * holds the window, all of it. */
static void a_window_selects_its_steps_under_a_budget(void **state) {
  (void)state;
  ping p = {.steps = 400, .per_step = 20};
  tr_system *sys = ping_system(&p, 1 << 20, 100, 150);
  tr_trace_stats st;
  tr_system_trace_stats(sys, &st);
  assert_int_equal(st.dropped, 0);
  seen s = see_all(sys, p.steps);
  assert_int_equal(s.lo, 100);
  for (int64_t k = 0; k < p.steps; k++) assert_int_equal(s.drive[k], k >= 100 && k < 150 ? 20 : 0);
  free(s.drive);
  tr_system_free(sys);

  /* and a window longer than the budget keeps its last steps */
  ping q = {.steps = 4000, .per_step = 20};
  sys = ping_system(&q, 1 << 20, 1000, 0);
  tr_system_trace_stats(sys, &st);
  assert_true(st.peak_bytes <= 1 << 20);
  assert_true(st.first_step > 1000);
  s = see_all(sys, q.steps);
  assert_int_equal(s.lo, st.first_step);
  assert_int_equal(s.hi, q.steps - 1);
  free(s.drive);
  tr_system_free(sys);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_long_run_keeps_its_last_steps_within_the_budget),
      cmocka_unit_test(a_short_run_keeps_every_event),
      cmocka_unit_test(a_trace_onto_a_fifo_is_refused_and_left),
      cmocka_unit_test(a_step_larger_than_the_budget_loses_its_tail_and_says_so),
      cmocka_unit_test(a_window_selects_its_steps_under_a_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
