/* trace.c — per-thread event buffers and the Chrome trace writer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "system_impl.h"

enum { CHUNK_EVENTS = 4096 };

struct tr__trace_chunk {
  tr__trace_chunk *next;
  uint32_t n;
  tr_trace_event ev[CHUNK_EVENTS];
};

tr__trace_buf *tr__trace_buf_new(tr_system *sys, const char *thread, int tid) {
  tr__trace_buf *b = calloc(1, sizeof *b);
  TR_ASSERT(b != NULL);
  snprintf(b->thread, sizeof b->thread, "%s", thread);
  b->tid = tid;
  pthread_mutex_lock(&sys->lock);
  b->next = sys->traces;
  sys->traces = b;
  pthread_mutex_unlock(&sys->lock);
  return b;
}

void tr__trace_free_all(tr_system *sys) {
  for (tr__trace_buf *b = sys->traces, *nb; b; b = nb) {
    nb = b->next;
    for (tr__trace_chunk *c = b->first, *nc; c; c = nc) {
      nc = c->next;
      free(c);
    }
    free(b);
  }
  sys->traces = NULL;
}

int tr_trace_enabled(const tr_actor *self) { return self->sys->trace_on; }

void tr_trace_record(tr_actor *self, const char *name, uint64_t start_ns, uint64_t end_ns,
                     int64_t arg) {
  tr__trace_buf *b = self->trace;
  if (!self->sys->trace_on || b == NULL) return;
  tr__trace_chunk *c = b->last;
  if (c == NULL || c->n == CHUNK_EVENTS) {
    tr__trace_chunk *fresh = malloc(sizeof *fresh);
    TR_ASSERT(fresh != NULL);
    fresh->next = NULL;
    fresh->n = 0;
    if (c) c->next = fresh;
    else b->first = fresh;
    b->last = c = fresh;
  }
  c->ev[c->n++] = (tr_trace_event){self->name, name, start_ns, end_ns, arg};
}

void tr_trace_label(tr_actor *self, const char *label) {
  if (self->kind == TR_ACTOR_PINNED && self->trace)
    snprintf(self->trace->label, sizeof self->trace->label, "%s", label);
}

void tr_system_trace_visit(tr_system *sys, tr_trace_visit_fn fn, void *ctx) {
  pthread_mutex_lock(&sys->lock);
  tr__trace_buf *first = sys->traces;
  pthread_mutex_unlock(&sys->lock);
  for (tr__trace_buf *b = first; b; b = b->next)
    for (tr__trace_chunk *c = b->first; c; c = c->next)
      for (uint32_t i = 0; i < c->n; i++) fn(ctx, b->thread, b->tid, &c->ev[i]);
}

static void count_one(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread, (void)tid, (void)ev;
  ++*(uint64_t *)ctx;
}

uint64_t tr_system_trace_count(tr_system *sys) {
  uint64_t n = 0;
  tr_system_trace_visit(sys, count_one, &n);
  return n;
}

/* Names come from actors and message types; escape what JSON needs escaped. */
static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

typedef struct json_ctx {
  FILE *f;
  uint64_t t0;
  bool first;
} json_ctx;

static void min_start(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread, (void)tid;
  uint64_t *t0 = ctx;
  if (ev->start_ns < *t0) *t0 = ev->start_ns;
}

static void put_event(void *ctx, const char *thread, int tid, const tr_trace_event *ev) {
  (void)thread;
  json_ctx *j = ctx;
  fprintf(j->f, "%s\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":",
          j->first ? "" : ",", tid, (double)(ev->start_ns - j->t0) / 1e3,
          (double)(ev->end_ns - ev->start_ns) / 1e3);
  put_json_string(j->f, ev->name);
  fputs(",\"args\":{\"actor\":", j->f);
  put_json_string(j->f, ev->actor);
  if (ev->arg >= 0) fprintf(j->f, ",\"arg\":%lld", (long long)ev->arg);
  fputs("}}", j->f);
  j->first = false;
}

int tr_system_trace_write(tr_system *sys, const char *path) {
  char *tmp;
  if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) return TR_ENOMEM;
  FILE *f = fopen(tmp, "w");
  if (f == NULL) {
    free(tmp);
    return TR_EIO;
  }
  json_ctx j = {f, UINT64_MAX, true};
  tr_system_trace_visit(sys, min_start, &j.t0);
  fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
  pthread_mutex_lock(&sys->lock);
  for (tr__trace_buf *b = sys->traces; b; b = b->next) {
    fprintf(f, "%s\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
            j.first ? "" : ",", b->tid);
    if (b->label[0]) {
      char both[sizeof b->thread + sizeof b->label + 3];
      snprintf(both, sizeof both, "%s (%s)", b->thread, b->label);
      put_json_string(f, both);
      fputs(",\"label\":", f);
      put_json_string(f, b->label);
    } else {
      put_json_string(f, b->thread);
    }
    fputs("}}", f);
    j.first = false;
  }
  pthread_mutex_unlock(&sys->lock);
  tr_system_trace_visit(sys, put_event, &j);
  fputs("\n]}\n", f);
  int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  free(tmp);
  return ok ? 0 : TR_EIO;
}
