/* metrics.c — busy time after a warm-up, and the training actors' ranges (metrics.h).
 *
 * The palette (Okabe and Ito's, told apart by colour-blind readers too), one colour per
 * kind, grouped by category; README "Profiling" lists it and `troupe timeline` is to draw
 * with the same:
 *   compute        forward #0072B2 blue, backward (and its halves, backward input and
 *                  backward weight) #D55E00 vermillion
 *   communication  recv act #56B4E9 sky blue, recv grad #E69F00 orange,
 *                  allreduce #CC79A7 reddish purple
 *   optimizer      update, and the gradients' norm before it, #009E73 bluish green
 *   data           fill #F0E442 yellow
 *   control        handled messages, start #999999 grey
 */
#include <string.h>

#include "metrics.h"

#define STEP_STAGE_MB {"step", "stage", "mb"}

static tr_trace_kind kinds[] = {
    {.name = "forward", .category = "compute", .color = 0xFF0072B2, .device = 1, .args = STEP_STAGE_MB},
    {.name = "backward", .category = "compute", .color = 0xFFD55E00, .device = 1, .args = STEP_STAGE_MB},
    /* zero-bubble schedules: backward's halves, in backward's colour */
    {.name = "backward input", .category = "compute", .color = 0xFFD55E00, .device = 1, .args = STEP_STAGE_MB},
    {.name = "backward weight", .category = "compute", .color = 0xFFD55E00, .device = 1, .args = STEP_STAGE_MB},
    {.name = "recv act", .category = "communication", .color = 0xFF56B4E9, .device = 1, .args = STEP_STAGE_MB},
    {.name = "recv grad", .category = "communication", .color = 0xFFE69F00, .device = 1, .args = STEP_STAGE_MB},
    /* on the group's own stream, not the device's: not timed there */
    {.name = "allreduce", .category = "communication", .color = 0xFFCC79A7, .args = {"step", "stage", "bucket"}},
    {.name = "update", .category = "optimizer", .color = 0xFF009E73, .device = 1, .args = STEP_STAGE_MB},
    /* the gradients' norm before it (non-finite ones stop or skip the step; clipping) */
    {.name = "norm", .category = "optimizer", .color = 0xFF009E73, .device = 1, .args = STEP_STAGE_MB},
};
static tr_trace_kind other = {.name = "work", .category = "compute", .color = 0xFF0072B2, .args = STEP_STAGE_MB};
static tr_trace_kind fill = {.name = "fill", .category = "data", .color = 0xFFF0E442};
static tr_trace_kind control = {.category = "control", .color = 0xFF999999};
static tr_trace_kind start = {.name = "start", .category = "control", .color = 0xFF999999};

static tr_trace_kind *kind_of(const char *what) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (kinds[i].name == what || !strcmp(kinds[i].name, what)) return &kinds[i];
  return &other;
}

tr__busy tr__busy_begin(int64_t first_step, int64_t steps) {
  const int64_t warm = steps == INT64_MAX ? 3 : steps < 10 ? 0 : steps / 10 < 100 ? steps / 10 : 100;
  const uint64_t now = tr_now_ns();
  return (tr__busy){.warm_step = first_step + warm, .window_start = now, .run_start = now,
                    .stage = -1, .idle = {.schedstat = -1}};
}

void tr__busy_window(const tr__busy *b, int64_t step, int64_t first, uint64_t *start,
                     uint64_t *busy_ns, uint64_t *aside_ns, int64_t *steps) {
  const bool windowed = step > b->warm_step;
  *start = windowed ? b->window_start : b->run_start;
  *busy_ns = windowed ? b->busy_ns : b->run_busy_ns;
  *aside_ns = windowed ? b->aside_ns : b->run_aside_ns;
  *steps = windowed ? step - b->warm_step : step - first;
}

void tr__busy_open_window(tr__busy *b, int64_t step) {
  if (step != b->warm_step) return;
  b->window_start = tr_now_ns();
  b->busy_ns = b->aside_ns = 0;
  memset(b->work_ns, 0, sizeof b->work_ns);
  tr__idle_open(&b->idle, b->window_start);
}

void tr__busy_aside(tr__busy *b, int64_t step, uint64_t t0) {
  const uint64_t took = tr_now_ns() - t0;
  tr__idle_forget(&b->idle);
  if (step >= b->warm_step) b->aside_ns += took;
  b->run_aside_ns += took;
}

uint64_t tr__busy_start(tr__busy *b, tr_actor *self, int64_t step, const char *what, int mb) {
  const uint64_t now = tr_now_ns();
  tr__idle_work(&b->idle, now); /* the gap, and its range, end where the work begins */
  if (!tr_trace_wants(self, step)) return now;
  const uint64_t t0 = tr_trace_begin(self, kind_of(what), (int64_t[3]){step, b->stage, mb});
  if (b->open == TR__BUSY_NESTED) { /* a start whose end never came: forget the oldest */
    memmove(b->opened, b->opened + 1, (TR__BUSY_NESTED - 1) * sizeof *b->opened);
    b->open--;
  }
  b->opened[b->open++] = t0;
  return t0;
}

/* What `what` is to a schedule's simulation (TR__WORK_*), -1: none of it. */
static int work_of(const char *what) {
  static const struct {
    const char *what;
    int kind;
  } work[] = {{"forward", TR__WORK_F},         {"recv act", TR__WORK_F},
              {"backward", TR__WORK_B},        {"backward input", TR__WORK_B},
              {"recv grad", TR__WORK_B},       {"backward weight", TR__WORK_W},
              {"norm", TR__WORK_STEP},         {"allreduce", TR__WORK_STEP},
              {"update", TR__WORK_STEP}};
  for (size_t i = 0; i < sizeof work / sizeof *work; i++)
    if (!strcmp(work[i].what, what)) return work[i].kind;
  return -1;
}

void tr__busy_add(tr__busy *b, tr_actor *self, int64_t step, const char *what, uint64_t t0,
                  int mb) {
  const uint64_t t1 = tr_now_ns();
  tr__idle_rest(&b->idle, t1);
  const int k = step >= b->warm_step && b->idle.depth == 0 ? work_of(what) : -1;
  if (k == TR__WORK_W) b->work_ns[TR__WORK_B] += t1 - t0; /* a half of the backward */
  if (k >= 0) b->work_ns[k] += t1 - t0;
  if (step >= b->warm_step) b->busy_ns += t1 - t0;
  b->run_busy_ns += t1 - t0;
  int i = b->open;
  while (i > 0 && b->opened[i - 1] != t0) i--;
  const int64_t args[3] = {step, b->stage, mb};
  if (i > 0) { /* its range, and any begun inside it and left open */
    b->open = i - 1;
    tr_trace_end(self, kind_of(what), args, t0, t1);
  } else if (tr_trace_enabled(self) && tr_trace_wants(self, step)) {
    tr_trace_range(self, kind_of(what), args, t0, t1); /* begun without tr__busy_start */
  }
}

/* The built-in actors' handling of messages, and their start callbacks, told by their
 * behaviours' names (this file knows the parts by name, not by their definitions). */
static tr_trace_kind *classify(const tr_behaviour *b, const tr_msgtype *type) {
  static const char *const trained[] = {"stage", "server", "coordinator"};
  if (b->name && !strcmp(b->name, "loader")) return &fill;
  for (size_t i = 0; b->name && i < sizeof trained / sizeof *trained; i++)
    if (!strcmp(b->name, trained[i])) return type ? &control : &start;
  return NULL; /* an actor of the user's: the runtime's default */
}

void tr__profile_attach(tr_graph *g, const tr_profile_config *profile) {
  tr_system *sys = tr_graph_system(g);
  tr_system_trace_classify(sys, classify);
  if (profile->from > 0 || profile->to > 0) tr_system_trace_window(sys, profile->from, profile->to);
}
