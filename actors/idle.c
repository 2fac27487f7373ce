/* idle.c — a device's idle spans, split by what they waited for (idle.h). */
#include "idle.h"

#include <fcntl.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "result_impl.h"
#include "tr_msg.h"
#include "tr_plan.h"

/* Idle ranges in the trace: light, so that the work stands out; one per reason. */
static tr_trace_kind kinds[TR__WAIT_COUNT] = {
#define TR__WAIT_KIND(id, text) [TR__WAIT_##id] = {.name = text, .category = "idle", .color = 0xFFDDDDDD, .args = {"step"}},
    TR__WAITS(TR__WAIT_KIND)
#undef TR__WAIT_KIND
};

/* The calling thread's run-queue delay so far (ns): time it was runnable and not running. */
static uint64_t run_delay(const tr__idle *d) {
  char buf[96];
  if (d->schedstat < 0) return 0;
  const ssize_t n = pread(d->schedstat, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  uint64_t cpu = 0, delay = 0;
  return sscanf(buf, "%" SCNu64 " %" SCNu64, &cpu, &delay) == 2 ? delay : 0;
}

/* Opens a gap at `now`. */
static void open_gap(tr__idle *d, uint64_t now) {
  d->gap = now;
  d->stopped = d->sent = 0;
}

void tr__idle_begin(tr__idle *d, tr_actor *self, uint64_t start) {
  *d = (tr__idle){.self = self, .window_start = start,
                  .schedstat = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)};
  open_gap(d, start);
}

void tr__idle_end(tr__idle *d) {
  if (d->schedstat >= 0) close(d->schedstat);
  d->schedstat = -1;
}

void tr__idle_open(tr__idle *d, uint64_t now) {
  for (int k = 0; k < TR__IDLE_KINDS; k++) d->ns[k] = 0;
  d->window_start = now;
}

tr__wait tr__idle_wait_of(tr_action_kind kind) {
  switch (kind) {
  case TR_ACTION_RECV_ACT:
  case TR_ACTION_RECV_GRAD: return TR__WAIT_EDGE;
  case TR_ACTION_FORWARD: return TR__WAIT_LOADER; /* a forward waits for nothing but its batch */
  case TR_ACTION_SEND_ACT:
  case TR_ACTION_SEND_GRAD:
  case TR_ACTION_BACKWARD:
  case TR_ACTION_BACKWARD_INPUT:
  case TR_ACTION_BACKWARD_WEIGHT: return TR__WAIT_CREDIT;
  default: return TR__WAIT_STEP;
  }
}

void tr__idle_block(tr__idle *d, tr__wait why, int64_t step, uint64_t now) {
  if (!d->gap || d->stopped) return;
  d->stopped = now;
  d->why = why;
  d->step = step;
  d->delay_stop = run_delay(d); /* a read is a system call: only where the thread may sleep */
}

void tr__idle_heard(tr__idle *d, const tr_msg *m) {
  if (d->stopped && m->sent_ns > d->sent) d->sent = m->sent_ns;
}

void tr__idle_forget(tr__idle *d) {
  if (d->gap) open_gap(d, tr_now_ns());
}

void tr__idle_rest(tr__idle *d, uint64_t now) {
  if (d->depth > 0) d->depth--;
  if (d->depth == 0) open_gap(d, now);
}

/* Takes up to `*left` out of `*part`. */
static void take(uint64_t *part, uint64_t *left) {
  const uint64_t t = *part < *left ? *part : *left;
  *part -= t, *left -= t;
}

void tr__idle_work(tr__idle *d, uint64_t now) {
  const uint64_t gap = d->gap, stopped = d->stopped;
  d->depth++;
  d->gap = 0;
  if (!gap) return;
  if (stopped && d->self && tr_trace_enabled(d->self) && tr_trace_wants(d->self, d->step))
    tr_trace_range(d->self, &kinds[d->why], (int64_t[3]){d->step, 0, 0}, stopped, now);
  if (!d->window_start || now <= d->window_start) return;
  const uint64_t from = gap > d->window_start ? gap : d->window_start;
  const uint64_t stop = !stopped ? now : stopped > from ? stopped : from;
  /* in time order: handling until it stopped, waiting until the newest send, handover */
  d->ns[TR__IDLE_HANDLING] += stop - from;
  if (!stopped) return;
  const uint64_t sent = !d->sent ? now : d->sent < stop ? stop : d->sent > now ? now : d->sent;
  uint64_t waiting = sent - stop, handover = now - sent;
  uint64_t os = run_delay(d) - d->delay_stop, left;
  if (os > now - stop) os = now - stop;
  left = os;
  take(&handover, &left);
  take(&waiting, &left);
  d->ns[d->why] += waiting;
  d->ns[TR__IDLE_HANDOVER] += handover;
  d->ns[TR__IDLE_OS] += os;
}

void tr__idle_totals(const tr__idle *d, uint64_t out[TR__IDLE_KINDS]) {
  for (int k = 0; k < TR__IDLE_KINDS; k++) out[k] = d->ns[k];
}

void tr__idle_result(const tr__value *device, double window, double utilization, tr_result *r,
                     int i) {
  double f[TR__IDLE_KINDS], sum = 0;
  for (int k = 0; k < TR__IDLE_KINDS; k++)
    sum += f[k] = window > 0 ? (double)device[TR__M_IDLE_EDGE_NS + k].i / window : NAN;
  for (int k = 0; k < TR__IDLE_KINDS; k++) tr__result_set_real_at(r, TR__M_IDLE_EDGE + k, i, f[k]);
  tr__result_set_real_at(r, TR__M_IDLE_OTHER, i, 1 - utilization - sum);
}

double tr__idle_schedule_bubble(const tr_schedule *sc, const tr__reduced *red, int stages,
                                int members, int microbatches, int64_t steps) {
  const tr_schedule_config *sc_c = tr_schedule_config_of(sc);
  const int v = tr_schedule_chunks(sc_c->kind, sc_c->chunks), K = stages * v;
  if (steps <= 0 || microbatches <= 0 || stages > TR_PLAN_MAX_DEVICES) return NAN;
  double *c = calloc((size_t)(3 * K + stages), sizeof *c);
  if (!c) return NAN;
  double *f = c, *b = c + K, *w = c + 2 * K, *step = c + 3 * K;
  const double per = 1e9 * (double)steps * microbatches * v; /* ns per chunk's micro-batch */
  for (int s = 0; s < stages; s++) {
    const tr__value *d = tr__reduced_device(red, s * members); /* replica 0, member 0 */
    for (int k = s; k < K; k += stages) {
      f[k] = (double)d[TR__M_WORK_F_NS].i / per;
      b[k] = (double)d[TR__M_WORK_B_NS].i / per;
      w[k] = (double)d[TR__M_WORK_W_NS].i / per;
    }
    step[s] = (double)d[TR__M_WORK_STEP_NS].i / 1e9 / (double)steps;
    if (!(f[s] > 0 && b[s] > 0)) { /* the window never opened: a run too short to say */
      free(c);
      return NAN;
    }
  }
  tr_plan_step st;
  char err[256];
  const int rc = tr_plan_simulate(sc, &(tr_plan_costs){.forward = f, .backward = b,
                                                      .backward_weight = w, .step = step},
                                  &st, err, sizeof err);
  free(c);
  return rc == 0 ? st.bubble : NAN;
}
