/* trace_json.c — the trace as one Chrome trace JSON file (tr_system_trace_write).
 *
 * Threads are process 1 (named after the system), device lanes process 2 ("devices").
 * Ranges are complete events ("X") with their kind's category and arguments; flows are
 * pairs of "s" and "f" events (the "f" bound to the handler's range that encloses it), only
 * those whose both ends were recorded (a message still queued when the run stopped has no
 * end); counters are "C" events, written track by track in time order.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_impl.h"
#include "file_write.h"

typedef struct item {
  const tr_trace_event *ev;
  int tid;
} item;

typedef struct writer {
  FILE *f;
  uint64_t t0;
  bool first;
  item *flows, *counters;
  size_t nflows, ncounters, capf, capc;
  const char *lanes[64]; /* device lanes: tid i + 1 of process 2 */
  int nlanes;
  bool oom;
} writer;

/* Names come from actors and message types; escape what JSON needs escaped. */
static void put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void begin_event(writer *w, const char *ph, int pid, int tid, uint64_t ts) {
  fprintf(w->f, "%s\n{\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", w->first ? "" : ",", ph,
          pid, tid, (double)(ts - w->t0) / 1e3);
  w->first = false;
}

static void put_name(writer *w, int pid, int tid, const char *what, const char *name) {
  fprintf(w->f, "%s\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":",
          w->first ? "" : ",", pid, tid, what);
  put_string(w->f, name);
  fputs("}}", w->f);
  w->first = false;
}

/* A thread's name; with tr_trace_label's label, "stage0 (host:0)" and the label apart. */
static void put_thread(writer *w, const tr__trace_buf *b) {
  if (b->label[0] == 0) {
    put_name(w, 1, b->tid, "thread_name", b->thread);
    return;
  }
  char both[sizeof b->thread + sizeof b->label + 3];
  snprintf(both, sizeof both, "%s (%s)", b->thread, b->label);
  fprintf(w->f, "%s\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
          w->first ? "" : ",", b->tid);
  put_string(w->f, both);
  fputs(",\"label\":", w->f);
  put_string(w->f, b->label);
  fputs("}}", w->f);
  w->first = false;
}

static bool push(item **a, size_t *n, size_t *cap, item it) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 1024;
    item *g = realloc(*a, c * sizeof *g);
    if (g == NULL) return false;
    *a = g;
    *cap = c;
  }
  (*a)[(*n)++] = it;
  return true;
}

static int lane_of(writer *w, const char *lane) {
  for (int i = 0; i < w->nlanes; i++)
    if (w->lanes[i] == lane || !strcmp(w->lanes[i], lane)) return i + 1;
  if (w->nlanes == (int)(sizeof w->lanes / sizeof *w->lanes)) return w->nlanes;
  w->lanes[w->nlanes++] = lane;
  return w->nlanes;
}

/* First pass: the time origin, the lanes, and the flows and counters to sort. */
static void gather(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread;
  writer *w = ctx;
  if (ev->start_ns < w->t0) w->t0 = ev->start_ns;
  const item it = {ev, tid};
  switch (ev->phase) {
    case TR_TRACE_FLOW_OUT:
    case TR_TRACE_FLOW_IN: w->oom |= !push(&w->flows, &w->nflows, &w->capf, it); break;
    case TR_TRACE_COUNTER: w->oom |= !push(&w->counters, &w->ncounters, &w->capc, it); break;
    case TR_TRACE_DEVICE: lane_of(w, ev->actor); break;
    default: break;
  }
}

static void put_args(writer *w, const tr_trace_event *ev) {
  fputs(",\"args\":{", w->f);
  bool comma = false;
  if (ev->actor && ev->phase == TR_TRACE_RANGE) {
    fputs("\"actor\":", w->f);
    put_string(w->f, ev->actor);
    comma = true;
  }
  for (int i = 0; ev->kind && i < 3; i++) {
    if (ev->kind->args[i] == NULL) continue;
    fprintf(w->f, "%s", comma ? "," : "");
    put_string(w->f, ev->kind->args[i]);
    fprintf(w->f, ":%lld", (long long)ev->args[i]);
    comma = true;
  }
  if (ev->arg >= 0) fprintf(w->f, "%s\"arg\":%lld", comma ? "," : "", (long long)ev->arg);
  fputs("}}", w->f);
}

/* Second pass: ranges and device slices, as they come. */
static void put_slice(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread;
  writer *w = ctx;
  if (ev->phase != TR_TRACE_RANGE && ev->phase != TR_TRACE_DEVICE) return;
  const bool dev = ev->phase == TR_TRACE_DEVICE;
  begin_event(w, "X", dev ? 2 : 1, dev ? lane_of(w, ev->actor) : tid, ev->start_ns);
  fprintf(w->f, ",\"dur\":%.3f,\"name\":", (double)(ev->end_ns - ev->start_ns) / 1e3);
  put_string(w->f, ev->name);
  fputs(",\"cat\":", w->f);
  put_string(w->f, ev->kind && ev->kind->category ? ev->kind->category : "actor");
  put_args(w, ev);
}

static int by_id_time(const void *a, const void *b) {
  const tr_trace_event *x = ((const item *)a)->ev, *y = ((const item *)b)->ev;
  if (x->arg != y->arg) return x->arg < y->arg ? -1 : 1;
  if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
  return (int)x->phase - (int)y->phase; /* out before in */
}

static int by_track_time(const void *a, const void *b) {
  const tr_trace_event *x = ((const item *)a)->ev, *y = ((const item *)b)->ev;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

/* Each send followed by its handling, same id: an arrow named after the edge. */
static void put_flows(writer *w) {
  if (w->nflows) qsort(w->flows, w->nflows, sizeof *w->flows, by_id_time); /* NULL when none */
  for (size_t i = 0; i + 1 < w->nflows; i++) {
    const item *s = &w->flows[i], *f = &w->flows[i + 1];
    if (s->ev->phase != TR_TRACE_FLOW_OUT || f->ev->phase != TR_TRACE_FLOW_IN ||
        s->ev->arg != f->ev->arg)
      continue;
    const char *ph[2] = {"s", "f"};
    const item *end[2] = {s, f};
    for (int k = 0; k < 2; k++) {
      begin_event(w, ph[k], 1, end[k]->tid, end[k]->ev->start_ns);
      fprintf(w->f, ",\"id\":%lld,\"cat\":\"flow\",\"name\":", (long long)s->ev->arg);
      put_string(w->f, s->ev->name);
      fputs(k ? ",\"bp\":\"e\"}" : "}", w->f);
    }
    i++;
  }
}

static void put_counters(writer *w) {
  if (w->ncounters) qsort(w->counters, w->ncounters, sizeof *w->counters, by_track_time);
  for (size_t i = 0; i < w->ncounters; i++) {
    const tr_trace_event *ev = w->counters[i].ev;
    begin_event(w, "C", 1, 0, ev->start_ns);
    fputs(",\"name\":", w->f);
    put_string(w->f, ev->name);
    fprintf(w->f, ",\"args\":{\"value\":%lld}}", (long long)ev->arg);
  }
}

/* What the budget dropped, as Chrome's free-form "otherData": tools show it, and a reader
 * of the file learns that its first steps are not the run's. */
static void put_budget(tr_system *sys, FILE *f) {
  tr_trace_stats st;
  tr_system_trace_stats(sys, &st);
  fprintf(f, "\"otherData\":{\"budget_bytes\":%zu,\"peak_bytes\":%zu,\"events\":%llu,"
          "\"first_step\":%lld,\"dropped_events\":%llu,\"lost_events\":%llu",
          st.budget, st.peak_bytes, (unsigned long long)st.events, (long long)st.first_step,
          (unsigned long long)st.dropped, (unsigned long long)st.lost);
  char note[512] = "";
  size_t n = 0;
  if (st.dropped)
    n += (size_t)snprintf(note, sizeof note, "events before step %lld were dropped: %llu "
                          "events, to keep the trace within its budget of %zu bytes (the last "
                          "steps are kept)",
                          (long long)st.first_step, (unsigned long long)st.dropped, st.budget);
  if (st.lost && n < sizeof note)
    snprintf(note + n, sizeof note - n, "%s%llu events from step %lld on were not recorded: "
             "that step's events alone filled the budget of %zu bytes",
             n ? "; " : "", (unsigned long long)st.lost, (long long)st.lost_step, st.budget);
  if (note[0]) {
    fputs(",\"note\":", f);
    put_string(f, note);
  }
  fputc('}', f);
}

static int print_trace(void *arg, FILE *f) {
  tr_system *sys = arg;
  writer w = {.f = f, .t0 = UINT64_MAX, .first = true};
  tr_system_trace_visit(sys, gather, &w);
  int rc = w.oom ? TR_ENOMEM : 0;
  if (rc == 0) {
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    put_name(&w, 1, 0, "process_name", sys->name);
    pthread_mutex_lock(&sys->lock);
    for (tr__trace_buf *b = sys->traces; b; b = b->next) put_thread(&w, b);
    pthread_mutex_unlock(&sys->lock);
    if (w.nlanes) put_name(&w, 2, 0, "process_name", "devices");
    for (int i = 0; i < w.nlanes; i++) put_name(&w, 2, i + 1, "thread_name", w.lanes[i]);
    tr_system_trace_visit(sys, put_slice, &w);
    put_flows(&w);
    put_counters(&w);
    fputs("\n],", f);
    put_budget(sys, f);
    fputs("}\n", f);
  }
  free(w.flows);
  free(w.counters);
  return rc;
}

int tr__system_trace_fill(void *sys, int fd) { return tr__file_fill_stream(fd, print_trace, sys); }

int tr_system_trace_write(tr_system *sys, const char *path) {
  TR__NOT_NULL(sys);
  TR__NOT_NULL(path);
  char err[8];
  const int rc = tr__file_write(path, "trace", tr__system_trace_fill, sys, err, sizeof err);
  return rc == TR_EINVAL || rc == TR_ENOMEM ? rc : rc ? TR_EIO : 0;
}
