/* timeline.c — a Chrome trace read into lanes, kinds and steps (timeline.h). */
#include "timeline.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tr_base.h"
#include "tr_file.h"

static int fail(const tl_trace *t, const char *what) {
  fprintf(stderr, "troupe: timeline: %s: %s\n", t->path, what);
  return CLI_USAGE;
}

/* The first two words of a name, lower case: "bwd W" -> "bwd", "w". */
static void words(const char *name, char w[2][16]) {
  memset(w, 0, 2 * sizeof w[0]);
  for (int i = 0; i < 2 && *name; i++) {
    while (*name && !isalnum((unsigned char)*name)) name++;
    for (size_t k = 0; isalnum((unsigned char)*name); name++)
      if (k < sizeof w[i] - 1) w[i][k++] = (char)tolower((unsigned char)*name);
  }
}

static bool is(const char *w, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(w, *list)) return true;
  return false;
}

static int kind_of(const char *name) {
  static const char *const fwd[] = {"forward", "fwd", "f", NULL};
  static const char *const bwd[] = {"backward", "bwd", NULL};
  static const char *const input[] = {"b", "input", "inputs", "dgrad", "data", NULL};
  static const char *const weight[] = {"w", "weight", "weights", "wgrad", NULL};
  size_t len = strlen(name);
  if (len > 4 && !strcmp(name + len - 4, "_msg")) return TL_MSG; /* a message type's name */
  char w[2][16];
  words(name, w);
  if (is(w[0], fwd)) return TL_FWD;
  if (!w[1][0] && !strcmp(w[0], "b")) return TL_BWD_B; /* zero-bubble's F, B, W */
  if (!w[1][0] && !strcmp(w[0], "w")) return TL_BWD_W;
  if (is(w[0], bwd)) return is(w[1], input) ? TL_BWD_B : is(w[1], weight) ? TL_BWD_W : TL_BWD;
  if (!strcmp(w[0], "allreduce") || (!strcmp(w[0], "all") && !strcmp(w[1], "reduce")))
    return TL_ALLREDUCE;
  if (!strcmp(w[0], "update")) return TL_UPDATE;
  if (!strcmp(w[0], "recv") || !strcmp(w[0], "receive")) return TL_RECV;
  return TL_OTHER;
}

static tl_lane *lane_of(tl_trace *t, double pid, double tid) {
  for (int i = 0; i < t->nlanes; i++)
    if (t->lane[i].pid == pid && t->lane[i].tid == tid) return &t->lane[i];
  t->lane = realloc(t->lane, (size_t)(t->nlanes + 1) * sizeof *t->lane);
  TR_ASSERT(t->lane != NULL);
  tl_lane *l = &t->lane[t->nlanes++];
  *l = (tl_lane){.pid = pid, .tid = tid};
  return l;
}

static double number(const cJSON *o, const char *key, double otherwise) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : otherwise;
}
static const char *string(const cJSON *o, const char *key) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* False for a slice without a name, a finite start or a finite duration >= 0. */
static bool add_event(tl_trace *t, const cJSON *ev) {
  const char *ph = string(ev, "ph"), *name = string(ev, "name");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
  const bool meta = ph && !strcmp(ph, "M") && name && !strcmp(name, "thread_name");
  if (!meta && !(ph && !strcmp(ph, "X"))) return true;
  tl_lane *l = lane_of(t, number(ev, "pid", 0), number(ev, "tid", 0));
  if (meta) {
    l->thread = string(args, "name");
    l->label = string(args, "label");
    return true;
  }
  const double ts = number(ev, "ts", NAN), dur = number(ev, "dur", NAN);
  if (name == NULL || !isfinite(ts) || !(dur >= 0) || !isfinite(ts + dur)) return false;
  const char *cat = string(ev, "cat");
  if (cat && !strcmp(cat, "idle")) return true; /* a device's wait: drawn as the idle it is */
  double arg = number(args, "arg", -1);
  if (!(arg >= 0 && arg < 0x1p62)) arg = -1; /* none, or none a long long holds */
  if (l->n == l->cap) {
    l->s = realloc(l->s, (size_t)(l->cap = l->cap ? 2 * l->cap : 256) * sizeof *l->s);
    TR_ASSERT(l->s != NULL);
  }
  l->s[l->n++] = (tl_slice){ts, ts + dur, name, (long long)arg, kind_of(name), 0};
  const char *actor = string(args, "actor");
  bool seen = actor == NULL;
  for (int i = 0; i < l->nactors && !seen; i++) seen = !strcmp(l->actor[i], actor);
  if (!seen && l->nactors < TL_MAX_ACTORS) l->actor[l->nactors++] = actor;
  return true;
}

static int by_start(const void *pa, const void *pb) {
  const tl_slice *a = pa, *b = pb; /* enclosing slices first */
  if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
  return a->t1 > b->t1 ? -1 : a->t1 < b->t1;
}
static int lane_order(const void *pa, const void *pb) {
  const tl_lane *a = pa, *b = pb; /* devices first, then by thread id */
  if (a->device != b->device) return a->device ? -1 : 1;
  return a->pid != b->pid ? (a->pid < b->pid ? -1 : 1) : a->tid < b->tid ? -1 : a->tid > b->tid;
}

/* Drops the message slices that enclose work, numbers the steps, orders the lanes. */
static void settle(tl_trace *t) {
  bool labelled = false;
  for (int i = 0; i < t->nlanes; i++) labelled |= t->lane[i].label != NULL;
  int kept = 0;
  for (int i = 0; i < t->nlanes; i++) {
    tl_lane *l = &t->lane[i];
    if (l->n == 0) continue;
    qsort(l->s, (size_t)l->n, sizeof *l->s, by_start);
    int n = 0;
    for (int k = 0; k < l->n; k++) {
      const bool encloses = k + 1 < l->n && l->s[k + 1].t0 < l->s[k].t1;
      if (!(l->s[k].kind == TL_MSG && encloses)) l->s[n++] = l->s[k];
    }
    l->n = n;
    /* step = updates ended before the slice starts; an update's own step is its index */
    double *ends = malloc((size_t)n * sizeof *ends);
    TR_ASSERT(ends != NULL);
    for (int k = 0; k < n; k++)
      if (l->s[k].kind == TL_UPDATE) ends[l->updates++] = l->s[k].t1;
    for (int k = 0, done = 0; k < n; k++) {
      while (done < l->updates && ends[done] <= l->s[k].t0) done++;
      l->s[k].step = done;
    }
    free(ends);
    if (l->updates > t->steps) t->steps = l->updates;
    /* older traces name no devices: then every lane but the loop's is a device's */
    l->device = labelled ? l->label != NULL : !(l->thread && !strcmp(l->thread, "loop"));
    t->lane[kept++] = *l;
  }
  t->nlanes = kept;
  qsort(t->lane, (size_t)t->nlanes, sizeof *t->lane, lane_order);
}

int tl_trace_read(tl_trace *t) {
  /* a regular file, or refused without waiting on a FIFO for a writer */
  char why[4200];
  int fd;
  uint64_t size;
  if (tr_file_open_regular(t->path, NULL, &fd, &size, why, sizeof why)) {
    fprintf(stderr, "troupe: timeline: %s\n", why);
    return CLI_USAGE;
  }
  FILE *f = fdopen(fd, "rb");
  if (f == NULL) {
    close(fd);
    return fail(t, strerror(errno));
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (size_t got = 1; got > 0; len += got) {
    if (cap - len < 65536) {
      text = realloc(text, cap = 2 * cap + 65536);
      TR_ASSERT(text != NULL);
    }
    got = fread(text + len, 1, cap - len, f);
  }
  const int bad_read = ferror(f) ? errno : 0;
  fclose(f);
  if (bad_read) {
    free(text);
    return fail(t, strerror(bad_read));
  }
  const char *end = NULL;
  t->json = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (t->json == NULL) {
    char what[96];
    snprintf(what, sizeof what, "not JSON (at byte %zu)", end ? (size_t)(end - text) : len);
    free(text);
    return fail(t, what);
  }
  free(text);
  /* Chrome's two forms: {"traceEvents": [...]} or the bare array */
  const cJSON *evs = cJSON_IsArray(t->json)
                         ? t->json
                         : cJSON_GetObjectItemCaseSensitive(t->json, "traceEvents");
  if (!cJSON_IsArray(evs)) return fail(t, "no \"traceEvents\" array: not a Chrome trace");
  /* a long run's trace holds its last steps: counted from 0 here, but said */
  t->note = string(cJSON_GetObjectItemCaseSensitive(t->json, "otherData"), "note");
  int i = 0;
  for (const cJSON *ev = evs->child; ev; ev = ev->next, i++) {
    if (!add_event(t, ev)) {
      char what[96];
      snprintf(what, sizeof what, "event %d: a slice needs a name, a ts and a dur >= 0, finite", i);
      return fail(t, what);
    }
  }
  settle(t);
  if (t->nlanes == 0) return fail(t, "no slices (\"ph\":\"X\" events) in the trace");
  return 0;
}

void tl_trace_free(tl_trace *t) {
  for (int i = 0; i < t->nlanes; i++) free(t->lane[i].s);
  free(t->lane);
  cJSON_Delete(t->json);
}

/* ---- what to show ------------------------------------------------------------------- */

static bool counts(const tl_lane *l, const tl_slice *s, const tl_view *v) {
  if (v->b == 0) return true; /* no steps: the whole trace */
  return l->updates > 0 && s->kind != TL_MSG && s->step >= v->a && s->step < v->b;
}

void tl_view_default(const tl_trace *t, tl_view *v) {
  int fb = 0;
  for (int i = 0; i < t->nlanes; i++) {
    int n = 0;
    for (int k = 0; k < t->lane[i].n; k++) n += tl_by_microbatch(t->lane[i].s[k].kind);
    if (n > fb) fb = n;
  }
  int n = fb ? (int)lround(36.0 * t->steps / fb) : 4;
  n = n < 1 ? 1 : n > 4 ? 4 : n;
  if (n > t->steps) n = t->steps;
  v->a = (t->steps - n) / 2;
  v->b = v->a + n;
}

/* The window, and the bubble: 1 - busy / (device lanes x window), busy the union of what
 * each device lane shows. */
bool tl_view_settle(const tl_trace *t, tl_view *v) {
  v->t0 = INFINITY, v->t1 = -INFINITY;
  for (int i = 0; i < t->nlanes; i++)
    for (int k = 0; k < t->lane[i].n; k++) {
      const tl_slice *s = &t->lane[i].s[k];
      if (!counts(&t->lane[i], s, v)) continue;
      if (s->t0 < v->t0) v->t0 = s->t0;
      if (s->t1 > v->t1) v->t1 = s->t1;
    }
  if (!(v->t1 > v->t0)) return false;
  double busy = 0;
  v->ndevices = 0;
  for (int i = 0; i < t->nlanes; i++) {
    const tl_lane *l = &t->lane[i];
    if (!l->device) continue;
    v->ndevices++;
    double reached = v->t0; /* slices come by start: merge as they come */
    for (int k = 0; k < l->n; k++) {
      const double a = fmax(l->s[k].t0, reached), b = fmin(l->s[k].t1, v->t1);
      if (b > a) busy += b - a, reached = b;
    }
  }
  v->bubble = v->ndevices ? 1 - busy / (v->ndevices * (v->t1 - v->t0)) : NAN;
  return true;
}

double tl_step_start(const tl_trace *t, int s) {
  double at = INFINITY;
  for (int i = 0; i < t->nlanes; i++)
    for (int k = 0; k < t->lane[i].n && t->lane[i].updates; k++) {
      const tl_slice *x = &t->lane[i].s[k];
      if (x->step == s && x->kind != TL_MSG && x->t0 < at) at = x->t0;
    }
  return at;
}
