/* cmd_timeline.c — `troupe timeline TRACE.json -o FILE.svg`: a trace written by `troupe train
 * --trace` drawn as the schedule people sketch to explain pipelines. One lane per device
 * actor, and one for the loop thread's actors; a rectangle per slice, coloured by micro-batch
 * (forward light, backward dark in the same hue, the weight half of a split backward
 * hatched); all-reduce, updates and receives in fixed colours, names it does not know in a
 * neutral grey; idle time is the bare lane. The title carries the bubble fraction of what is
 * shown: 1 - busy / (device lanes x window).
 *
 * Steps are counted by each lane's "update" slices: a lane's step s is what it did after the
 * end of its update s-1, up to the end of update s. The window runs from the first work of
 * step A to the end of the last update of step B-1 on any lane; every lane shows what
 * overlaps it. A trace with no updates is drawn whole. Message handling slices that enclose
 * work (the runtime records one per handled message, around the actor's own ranges) are
 * left out; those that do not are drawn, in light grey. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tr_base.h"

enum kind { K_FWD, K_BWD, K_BWD_B, K_BWD_W, K_ALLREDUCE, K_UPDATE, K_RECV, K_MSG, K_OTHER, NKINDS };
static bool by_microbatch(int k) { return k <= K_BWD_W; }

/* How each kind is drawn: fill 0 takes the micro-batch's colour. */
static const struct {
  const char *cls, *legend;
  unsigned fill;
  const char *tag;
} kinds[NKINDS] = {
    [K_FWD] = {"fwd", "forward", 0, "F"},
    [K_BWD] = {"bwd", "backward", 0, "B"},
    [K_BWD_B] = {"bwdB", "backward (input)", 0, "B"},
    [K_BWD_W] = {"bwdW", "backward (weights)", 0, "W"},
    [K_ALLREDUCE] = {"allreduce", "all-reduce", 0x2e2e2e, "AR"},
    [K_UPDATE] = {"update", "optimizer update", 0x6b6b6b, "U"},
    [K_RECV] = {"recv", "receive", 0xbdbdbd, ""},
    [K_MSG] = {"msg", "message handling", 0xdadada, ""},
    [K_OTHER] = {"other", "other", 0xa0a0a0, ""},
};
/* Tableau 10 without its grey, pink last: its light tint is red's, and eight micro-batches
 * are common. */
static const unsigned palette[] = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                   0xedc948, 0xb07aa1, 0x9c755f, 0xff9da7};
enum { NPALETTE = sizeof palette / sizeof palette[0], MAX_ACTORS = 6, MAX_OTHERS = 4 };
static const unsigned idle_fill = 0xf1f1f1;

typedef struct slice {
  double t0, t1;    /* µs, the trace's clock */
  const char *name; /* in the parsed JSON */
  long long arg;    /* micro-batch (or bucket); -1: none */
  int kind, step;
} slice;

typedef struct lane {
  double pid, tid;
  const char *thread, *label; /* label: the device, when the trace names it */
  const char *actor[MAX_ACTORS];
  int nactors, n, cap, updates;
  bool device;
  slice *s;
} lane;

typedef struct trace {
  const char *path;
  cJSON *json;
  lane *lane;
  int nlanes, steps;
} trace;

typedef struct view {
  int a, b;       /* steps [a, b); b == 0: the whole trace */
  double t0, t1;  /* the window, µs */
  double bubble;  /* NAN without device lanes */
  int ndevices;
} view;

/* ---- reading ------------------------------------------------------------------------ */

static int fail(const trace *t, const char *what) {
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
  if (len > 4 && !strcmp(name + len - 4, "_msg")) return K_MSG; /* a message type's name */
  char w[2][16];
  words(name, w);
  if (is(w[0], fwd)) return K_FWD;
  if (!w[1][0] && !strcmp(w[0], "b")) return K_BWD_B; /* zero-bubble's F, B, W */
  if (!w[1][0] && !strcmp(w[0], "w")) return K_BWD_W;
  if (is(w[0], bwd)) return is(w[1], input) ? K_BWD_B : is(w[1], weight) ? K_BWD_W : K_BWD;
  if (!strcmp(w[0], "allreduce") || (!strcmp(w[0], "all") && !strcmp(w[1], "reduce")))
    return K_ALLREDUCE;
  if (!strcmp(w[0], "update")) return K_UPDATE;
  if (!strcmp(w[0], "recv") || !strcmp(w[0], "receive")) return K_RECV;
  return K_OTHER;
}

static lane *lane_of(trace *t, double pid, double tid) {
  for (int i = 0; i < t->nlanes; i++)
    if (t->lane[i].pid == pid && t->lane[i].tid == tid) return &t->lane[i];
  t->lane = realloc(t->lane, (size_t)(t->nlanes + 1) * sizeof *t->lane);
  TR_ASSERT(t->lane != NULL);
  lane *l = &t->lane[t->nlanes++];
  *l = (lane){.pid = pid, .tid = tid};
  return l;
}

static double number(const cJSON *o, const char *key, double otherwise) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : otherwise;
}
static const char *string(const cJSON *o, const char *key) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* False for a slice without a name, a start or a duration. */
static bool add_event(trace *t, const cJSON *ev) {
  const char *ph = string(ev, "ph"), *name = string(ev, "name");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
  const bool meta = ph && !strcmp(ph, "M") && name && !strcmp(name, "thread_name");
  if (!meta && !(ph && !strcmp(ph, "X"))) return true;
  lane *l = lane_of(t, number(ev, "pid", 0), number(ev, "tid", 0));
  if (meta) {
    l->thread = string(args, "name");
    l->label = string(args, "label");
    return true;
  }
  const double ts = number(ev, "ts", NAN), dur = number(ev, "dur", NAN);
  if (name == NULL || !isfinite(ts) || !(dur >= 0 && isfinite(dur))) return false;
  if (l->n == l->cap) {
    l->s = realloc(l->s, (size_t)(l->cap = l->cap ? 2 * l->cap : 256) * sizeof *l->s);
    TR_ASSERT(l->s != NULL);
  }
  l->s[l->n++] = (slice){ts, ts + dur, name, (long long)number(args, "arg", -1), kind_of(name), 0};
  const char *actor = string(args, "actor");
  bool seen = actor == NULL;
  for (int i = 0; i < l->nactors && !seen; i++) seen = !strcmp(l->actor[i], actor);
  if (!seen && l->nactors < MAX_ACTORS) l->actor[l->nactors++] = actor;
  return true;
}

static int by_start(const void *pa, const void *pb) {
  const slice *a = pa, *b = pb; /* enclosing slices first */
  return a->t0 != b->t0 ? (a->t0 < b->t0 ? -1 : 1) : a->t1 != b->t1 ? (a->t1 > b->t1 ? -1 : 1) : 0;
}
static int lane_order(const void *pa, const void *pb) {
  const lane *a = pa, *b = pb; /* devices first, then by thread id */
  if (a->device != b->device) return a->device ? -1 : 1;
  return a->pid != b->pid ? (a->pid < b->pid ? -1 : 1) : a->tid < b->tid ? -1 : a->tid > b->tid;
}

/* Drops the message slices that enclose work, numbers the steps, orders the lanes. */
static void settle(trace *t) {
  bool labelled = false;
  for (int i = 0; i < t->nlanes; i++) labelled |= t->lane[i].label != NULL;
  int kept = 0;
  for (int i = 0; i < t->nlanes; i++) {
    lane *l = &t->lane[i];
    if (l->n == 0) continue;
    qsort(l->s, (size_t)l->n, sizeof *l->s, by_start);
    int n = 0;
    for (int k = 0; k < l->n; k++)
      if (!(l->s[k].kind == K_MSG && k + 1 < l->n && l->s[k + 1].t0 < l->s[k].t1)) l->s[n++] = l->s[k];
    l->n = n;
    /* step = updates ended before the slice starts; an update's own step is its index */
    double *ends = malloc((size_t)n * sizeof *ends);
    TR_ASSERT(ends != NULL);
    for (int k = 0; k < n; k++)
      if (l->s[k].kind == K_UPDATE) ends[l->updates++] = l->s[k].t1;
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

static int trace_read(trace *t) {
  FILE *f = fopen(t->path, "rb");
  if (f == NULL) return fail(t, strerror(errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (size_t got = 1; got > 0; len += got) {
    if (cap - len < 65536) {
      text = realloc(text, cap = 2 * cap + 65536);
      TR_ASSERT(text != NULL);
    }
    got = fread(text + len, 1, cap - len, f);
  }
  const bool bad_read = ferror(f);
  fclose(f);
  if (bad_read) {
    free(text);
    return fail(t, "cannot read it");
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
  const cJSON *evs = cJSON_IsArray(t->json) ? t->json
                                            : cJSON_GetObjectItemCaseSensitive(t->json, "traceEvents");
  if (!cJSON_IsArray(evs)) return fail(t, "no \"traceEvents\" array: not a Chrome trace");
  int i = 0;
  for (const cJSON *ev = evs->child; ev; ev = ev->next, i++) {
    if (!add_event(t, ev)) {
      char what[96];
      snprintf(what, sizeof what, "event %d is a slice without a name, ts or dur", i);
      return fail(t, what);
    }
  }
  settle(t);
  if (t->nlanes == 0) return fail(t, "no slices (\"ph\":\"X\" events) in the trace");
  return 0;
}

static void trace_free(trace *t) {
  for (int i = 0; i < t->nlanes; i++) free(t->lane[i].s);
  free(t->lane);
  cJSON_Delete(t->json);
}

/* ---- what to show ------------------------------------------------------------------- */

static bool counts(const lane *l, const slice *s, const view *v) {
  if (v->b == 0) return true; /* no steps: the whole trace */
  return l->updates > 0 && s->kind != K_MSG && s->step >= v->a && s->step < v->b;
}

/* About 36 forward and backward rectangles per lane, 1 to 4 steps, from the middle. */
static void default_steps(const trace *t, view *v) {
  int fb = 0;
  for (int i = 0; i < t->nlanes; i++) {
    int n = 0;
    for (int k = 0; k < t->lane[i].n; k++) n += by_microbatch(t->lane[i].s[k].kind);
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
static bool view_settle(const trace *t, view *v) {
  v->t0 = INFINITY, v->t1 = -INFINITY;
  for (int i = 0; i < t->nlanes; i++)
    for (int k = 0; k < t->lane[i].n; k++) {
      const slice *s = &t->lane[i].s[k];
      if (!counts(&t->lane[i], s, v)) continue;
      if (s->t0 < v->t0) v->t0 = s->t0;
      if (s->t1 > v->t1) v->t1 = s->t1;
    }
  if (!(v->t1 > v->t0)) return false;
  double busy = 0;
  v->ndevices = 0;
  for (int i = 0; i < t->nlanes; i++) {
    const lane *l = &t->lane[i];
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

/* Where step s begins: its first work on any lane that counts steps. */
static double step_start(const trace *t, int s) {
  double at = INFINITY;
  for (int i = 0; i < t->nlanes; i++)
    for (int k = 0; k < t->lane[i].n; k++) {
      const slice *x = &t->lane[i].s[k];
      if (x->step == s && x->kind != K_MSG && x->t0 < at) at = x->t0;
    }
  return at;
}

/* ---- drawing ------------------------------------------------------------------------ */

/* Text for XML: markup escaped, control characters and broken UTF-8 become '?'. */
static void xml(FILE *f, const char *s) {
  while (*s) {
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80 ? 1 : u[0] >= 0xc2 && u[0] <= 0xdf ? 2 : u[0] >= 0xe0 && u[0] <= 0xef ? 3
          : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : 0;
    for (int k = 1; k < n; k++)
      if ((u[k] & 0xc0) != 0x80) n = 0;
    if (n > 2 && ((u[0] == 0xe0 && u[1] < 0xa0) || (u[0] == 0xed && u[1] > 0x9f) ||
                  (u[0] == 0xf0 && u[1] < 0x90) || (u[0] == 0xf4 && u[1] > 0x8f)))
      n = 0; /* overlong, a surrogate, or past U+10FFFF */
    if (n == 0 || (n == 1 && u[0] < 0x20)) {
      fputc('?', f);
      s++;
      continue;
    }
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fwrite(s, 1, (size_t)n, f);
    s += n;
  }
}

static double text_width(const char *s, double px) { return 0.6 * px * (double)strlen(s); }

static void duration(char *buf, size_t size, double us) {
  if (us < 1) snprintf(buf, size, "%.0f ns", us * 1e3);
  else if (us < 1e3) snprintf(buf, size, "%.1f µs", us);
  else if (us < 1e6) snprintf(buf, size, "%.2f ms", us / 1e3);
  else snprintf(buf, size, "%.3f s", us / 1e6);
}

static unsigned mix(unsigned c, unsigned with, double w) {
  unsigned out = 0;
  for (int sh = 0; sh < 24; sh += 8) {
    const double a = (c >> sh) & 0xff, b = (with >> sh) & 0xff;
    out |= (unsigned)lround(a + (b - a) * w) << sh;
  }
  return out;
}
static bool is_dark(unsigned c) {
  return 0.299 * (c >> 16) + 0.587 * ((c >> 8) & 0xff) + 0.114 * (c & 0xff) < 150;
}
static unsigned mb_colour(int kind, long long mb) {
  const unsigned base = palette[(mb < 0 ? 0 : mb) % NPALETTE];
  return kind == K_FWD ? mix(base, 0xffffff, 0.5) : mix(base, 0, 0.12);
}
static unsigned fill_of(const slice *s) {
  return kinds[s->kind].fill ? kinds[s->kind].fill : mb_colour(s->kind, s->arg);
}

/* A rectangle, its hatching for the weight half of a backward, a label when it fits. */
static void box(FILE *f, const char *cls, double x, double y, double w, double h, unsigned fill,
                const char *label, const char *tip) {
  fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"#%06x\">",
          cls, x, y, w, h, fill);
  if (tip) {
    fputs("<title>", f);
    xml(f, tip);
    fputs("</title>", f);
  }
  fputs("</rect>\n", f);
  if (!strcmp(cls, kinds[K_BWD_W].cls))
    fprintf(f, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"url(#hatch)\"/>\n",
            x, y, w, h);
  if (label && *label && text_width(label, 10) + 4 <= w) {
    fprintf(f, "<text class=\"in%s\" x=\"%.1f\" y=\"%.0f\">", is_dark(fill) ? " w" : "",
            x + w / 2, y + h / 2 + 3.5);
    xml(f, label);
    fputs("</text>\n", f);
  }
}

typedef struct layout {
  double width, x0, x1, scale; /* px per µs */
  double lanes_top, lanes_bottom, height;
  int legend_rows;
} layout;

enum { TITLE_H = 54, STEPS_H = 18, LANE_H = 32, LOOP_H = 22, LANE_GAP = 8, AXIS_H = 36, ROW_H = 18 };

static double lane_height(const lane *l) { return l->device ? LANE_H : LOOP_H; }

static void lane_names(const lane *l, char *dev, size_t dsize, char *who, size_t wsize) {
  snprintf(dev, dsize, "%s", l->label ? l->label : l->thread ? l->thread : "?");
  size_t len = 0;
  who[0] = 0;
  for (int i = 0; i < l->nactors && len < wsize; i++)
    len += (size_t)snprintf(who + len, wsize - len, "%s%s", i ? ", " : "", l->actor[i]);
  if (l->label == NULL && !strcmp(who, dev)) who[0] = 0; /* "stage0" twice says nothing */
}

/* What the picture holds, for the legend. */
typedef struct legend {
  bool kind[NKINDS];
  bool mb[64];
  const char *other[MAX_OTHERS];
  int nothers;
  bool more_others;
} legend;

static void legend_add(legend *g, const slice *s) {
  g->kind[s->kind] = true;
  if (by_microbatch(s->kind) && s->arg >= 0 && s->arg < 64) g->mb[s->arg] = true;
  if (s->kind != K_OTHER) return;
  for (int i = 0; i < g->nothers; i++)
    if (!strcmp(g->other[i], s->name)) return;
  if (g->nothers < MAX_OTHERS) g->other[g->nothers++] = s->name;
  else g->more_others = true;
}

/* The micro-batch rows (one per kind present, a numbered swatch per micro-batch), then one
 * row of the fixed colours; returns the rows drawn (f NULL: only counts them). */
static int legend_draw(FILE *f, const legend *g, const layout *L, double y) {
  int rows = 0;
  for (int k = 0; k < NKINDS; k++) {
    if (!by_microbatch(k) || !g->kind[k]) continue;
    const double ry = y + rows++ * ROW_H;
    if (f == NULL) continue;
    fprintf(f, "<text class=\"dev\" x=\"%.1f\" y=\"%.0f\">%s</text>\n", L->x0 - 10, ry + 11,
            kinds[k].legend);
    double x = L->x0;
    for (int mb = 0; mb < 64 && x + 26 <= L->x1; mb++) {
      if (!g->mb[mb]) continue;
      char num[8];
      snprintf(num, sizeof num, "%d", mb);
      box(f, kinds[k].cls, x, ry, 24, 14, mb_colour(k, mb), num, NULL);
      x += 26;
    }
  }
  double x = L->x0, ry = y + rows * ROW_H;
  bool any = false;
  for (int k = K_ALLREDUCE; k <= NKINDS; k++) { /* NKINDS: idle */
    if (k < NKINDS && !g->kind[k]) continue;
    char text[160];
    if (k == K_OTHER) {
      size_t len = (size_t)snprintf(text, sizeof text, "other:");
      for (int i = 0; i < g->nothers; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s %s", i ? "," : "", g->other[i]);
      if (g->more_others) snprintf(text + len, sizeof text - len, ", …");
    } else {
      snprintf(text, sizeof text, "%s", k == NKINDS ? "idle" : kinds[k].legend);
    }
    const double w = 22 + text_width(text, 11) + 14;
    if (any && x + w > L->x1) x = L->x0, ry += ROW_H;
    any = true;
    if (f) {
      fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"16\" height=\"14\" fill=\"#%06x\""
                 " stroke=\"#c8c8c8\" stroke-width=\".5\"/>\n<text x=\"%.1f\" y=\"%.0f\">",
              k == NKINDS ? "idle" : kinds[k].cls, x, ry, k == NKINDS ? idle_fill : kinds[k].fill,
              x + 21, ry + 11);
      xml(f, text);
      fputs("</text>\n", f);
    }
    x += w;
  }
  return (int)lround((ry - y) / ROW_H) + 1;
}

/* Ticks about every 110 px at 1, 2 or 5 times a power of ten, labelled in s, ms, µs or ns. */
typedef struct ticks {
  double step, per;
  const char *unit;
  int decimals;
} ticks;

static ticks ticks_for(const layout *L, const view *v) {
  static const double nice[] = {1, 2, 5, 10};
  const double raw = (v->t1 - v->t0) * 110 / (L->x1 - L->x0), mag = pow(10, floor(log10(raw)));
  ticks k = {10 * mag, 1, "µs", 0};
  for (int i = 0; i < 4; i++)
    if (nice[i] * mag >= raw * (1 - 1e-9)) {
      k.step = nice[i] * mag;
      break;
    }
  if (k.step >= 1e6) k.per = 1e6, k.unit = "s";
  else if (k.step >= 1e3) k.per = 1e3, k.unit = "ms";
  else if (k.step < 1) k.per = 1e-3, k.unit = "ns";
  if (k.step / k.per < 1) k.decimals = (int)ceil(-log10(k.step / k.per) - 1e-9);
  return k;
}

static void axis(FILE *f, const layout *L, const view *v, bool grid) {
  const ticks k = ticks_for(L, v);
  const double y = L->lanes_bottom + 4;
  if (!grid) fprintf(f, "<path d=\"M%.1f %.0fH%.1f\" stroke=\"#888\"/>\n", L->x0, y, L->x1);
  for (int i = 0; i * k.step <= (v->t1 - v->t0) * (1 + 1e-9); i++) {
    const double x = L->x0 + i * k.step * L->scale;
    if (grid) {
      fprintf(f, "<path d=\"M%.1f %.0fV%.0f\" stroke=\"#e2e2e2\"/>\n", x, L->lanes_top, y);
      continue;
    }
    fprintf(f, "<path d=\"M%.1f %.0fV%.0f\" stroke=\"#888\"/>", x, y, y + 4);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\">%.*f%s%s</text>\n", x, y + 16,
            k.decimals, i * k.step / k.per, i ? " " : "", i ? k.unit : "");
  }
}

static void render(FILE *f, const trace *t, const view *v, const char *title, double width) {
  layout L = {.width = width};
  char dev[64], who[160], text[320];
  double lw = text_width(kinds[K_BWD_W].legend, 12);
  for (int i = 0; i < t->nlanes; i++) {
    lane_names(&t->lane[i], dev, sizeof dev, who, sizeof who);
    lw = fmax(lw, fmax(1.1 * text_width(dev, 12), text_width(who, 10)));
  }
  L.x0 = 22 + fmin(lw, width / 4);
  L.x1 = width - 20;
  L.scale = (L.x1 - L.x0) / (v->t1 - v->t0);
  L.lanes_top = TITLE_H + STEPS_H;
  L.lanes_bottom = L.lanes_top - LANE_GAP;
  for (int i = 0; i < t->nlanes; i++) L.lanes_bottom += lane_height(&t->lane[i]) + LANE_GAP;
  legend g = {0};
  for (int i = 0; i < t->nlanes; i++)
    for (int k = 0; k < t->lane[i].n; k++)
      if (t->lane[i].s[k].t1 > v->t0 && t->lane[i].s[k].t0 < v->t1) legend_add(&g, &t->lane[i].s[k]);
  const double legend_top = L.lanes_bottom + AXIS_H;
  L.height = legend_top + legend_draw(NULL, &g, &L, 0) * ROW_H + 8;

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\">\n", width, L.height, width, L.height);
  fputs("<style>text{font:11px sans-serif;fill:#222}.title{font-size:16px;font-weight:bold}"
        ".sub{fill:#555}.dev{font-size:12px;font-weight:bold;text-anchor:end}"
        ".act{font-size:10px;fill:#666;text-anchor:end}.in{font-size:10px;text-anchor:middle}"
        ".w{fill:#fff}.tick{font-size:10px;fill:#555;text-anchor:middle}.step{font-size:10px;fill:#777}"
        "</style>\n<defs><pattern id=\"hatch\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\""
        " patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"5\" fill=\"#fff\""
        " fill-opacity=\".55\"/></pattern></defs>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n",
        f);

  /* title: the bubble; under it, what was drawn */
  fputs("<text class=\"title\" x=\"12\" y=\"22\">", f);
  xml(f, title);
  if (v->ndevices) fprintf(f, " \xe2\x80\x94 bubble %.1f%%", 100 * v->bubble);
  fputs("</text>\n<text class=\"sub\" x=\"12\" y=\"41\">", f);
  char span[32];
  duration(span, sizeof span, v->t1 - v->t0);
  if (v->b) snprintf(text, sizeof text, "steps %d:%d of %d", v->a, v->b, t->steps);
  else snprintf(text, sizeof text, "the whole trace (no update slices to count steps by)");
  fprintf(f, "%s \xc2\xb7 window %s \xc2\xb7 %d device lane%s \xc2\xb7 ", text, span, v->ndevices,
          v->ndevices == 1 ? "" : "s");
  xml(f, t->path);
  fputs("</text>\n", f);

  /* idle lanes, the grid, where each step begins */
  double y = L.lanes_top;
  for (int i = 0; i < t->nlanes; i++) {
    fprintf(f, "<rect class=\"idle\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"#%06x\"/>\n",
            L.x0, y, L.x1 - L.x0, lane_height(&t->lane[i]), idle_fill);
    y += lane_height(&t->lane[i]) + LANE_GAP;
  }
  axis(f, &L, v, true);
  double labelled = -INFINITY;
  for (int s = v->a; s < v->b; s++) {
    const double at = step_start(t, s), x = L.x0 + (at - v->t0) * L.scale;
    if (!(at >= v->t0 && at < v->t1)) continue;
    fprintf(f, "<path d=\"M%.1f %.0fV%.0f\" stroke=\"#777\" stroke-dasharray=\"3 3\"/>\n", x,
            L.lanes_top - 14, L.lanes_bottom);
    if (x - labelled < 46) continue;
    fprintf(f, "<text class=\"step\" x=\"%.1f\" y=\"%.0f\">step %d</text>\n", x + 3, L.lanes_top - 6, s);
    labelled = x;
  }

  /* the lanes */
  y = L.lanes_top;
  for (int i = 0; i < t->nlanes; i++) {
    const lane *l = &t->lane[i];
    const double h = lane_height(l);
    lane_names(l, dev, sizeof dev, who, sizeof who);
    fprintf(f, "<g class=\"lane%s\">\n<text class=\"dev\" x=\"%.1f\" y=\"%.0f\">",
            l->device ? " device" : "", L.x0 - 10, y + h / 2 - (who[0] ? 1 : -4));
    xml(f, dev);
    fprintf(f, "</text>\n<text class=\"act\" x=\"%.1f\" y=\"%.0f\">", L.x0 - 10, y + h / 2 + 10);
    xml(f, who);
    fputs("</text>\n", f);
    for (int k = 0; k < l->n; k++) {
      const slice *s = &l->s[k];
      const double a = fmax(s->t0, v->t0), b = fmin(s->t1, v->t1);
      if (b <= a) continue; /* outside the window */
      double x = L.x0 + (a - v->t0) * L.scale, w = (b - a) * L.scale;
      if (w < 0.25 && s->kind == K_MSG) continue; /* specks; still busy in the bubble */
      if (w > 3) w -= 0.5;    /* a hairline between neighbours */
      w = fmax(w, 0.8);
      char label[48] = "", tip[256];
      duration(span, sizeof span, s->t1 - s->t0);
      const char *of = by_microbatch(s->kind) ? "micro-batch" : s->kind == K_ALLREDUCE ? "bucket" : "arg";
      int len = snprintf(tip, sizeof tip, "%s", s->name);
      if (s->arg >= 0) len += snprintf(tip + len, sizeof tip - (size_t)len, " \xc2\xb7 %s %lld", of, s->arg);
      len += snprintf(tip + len, sizeof tip - (size_t)len, " \xc2\xb7 %s", span);
      if (l->updates) snprintf(tip + len, sizeof tip - (size_t)len, " \xc2\xb7 step %d", s->step);
      if (by_microbatch(s->kind) && s->arg >= 0) {
        snprintf(label, sizeof label, "%s%lld", kinds[s->kind].tag, s->arg);
        if (text_width(label, 10) + 4 > w) snprintf(label, sizeof label, "%lld", s->arg);
      } else {
        snprintf(label, sizeof label, "%s", s->kind == K_OTHER ? s->name : kinds[s->kind].tag);
      }
      box(f, kinds[s->kind].cls, x, y, w, h, fill_of(s), label, tip);
    }
    fputs("</g>\n", f);
    y += h + LANE_GAP;
  }
  axis(f, &L, v, false);
  legend_draw(f, &g, &L, legend_top);
  fputs("</svg>\n", f);
}

/* ---- the command -------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: troupe timeline TRACE.json [-o FILE.svg] [--steps A:B] [--width PX] [--title TEXT]\n\n"
          "Draws a trace of `troupe train --trace` as a schedule: a lane per device actor and\n"
          "one for the loop thread's actors, a rectangle per forward, backward, all-reduce,\n"
          "update (and any other slice), coloured by micro-batch; the title gives the bubble\n"
          "fraction, 1 - busy / (device lanes x window), of what is shown.\n\n"
          "  -o FILE.svg     where to write (default: TRACE with .svg for .json; - for stdout)\n"
          "  --steps A:B     steps A to B-1, counted from 0 by each lane's updates (default: a\n"
          "                  few from the middle of the run, so that rectangles are readable)\n"
          "  --width PX      the picture's width (default 1200)\n"
          "  --title TEXT    the title (default: the trace's file name)\n");
}

static bool parse_steps(const char *s, int *a, int *b) {
  char *end;
  errno = 0;
  const long x = strtol(s, &end, 10);
  if (errno || end == s || *end != ':' || x < 0 || x > 1 << 30) return false;
  const char *rest = end + 1;
  const long y = strtol(rest, &end, 10);
  if (errno || end == rest || *end || y <= x || y > 1 << 30) return false;
  *a = (int)x, *b = (int)y;
  return true;
}

int cmd_timeline(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *title = NULL, *steps = NULL;
  uint64_t width = 1200;
  view v = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (!cli_value_str(argc, argv, &i, &out)) return CLI_USAGE;
    } else if (!strcmp(a, "--steps")) {
      if (!cli_value_str(argc, argv, &i, &steps)) return CLI_USAGE;
      if (!parse_steps(steps, &v.a, &v.b)) {
        fprintf(stderr, "troupe: --steps: '%s' is not A:B with A < B (steps A to B-1)\n", steps);
        return CLI_USAGE;
      }
    } else if (!strcmp(a, "--width")) {
      if (!cli_value_u64(argc, argv, &i, 400, 20000, &width)) return CLI_USAGE;
    } else if (!strcmp(a, "--title")) {
      if (!cli_value_str(argc, argv, &i, &title)) return CLI_USAGE;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "troupe: timeline: unknown option '%s' (see troupe timeline --help)\n", a);
      return CLI_USAGE;
    } else if (in) {
      fprintf(stderr, "troupe: timeline: one trace at a time ('%s', then '%s')\n", in, a);
      return CLI_USAGE;
    } else {
      in = a;
    }
  }
  if (in == NULL) {
    fprintf(stderr, "troupe: timeline: which trace? (troupe timeline TRACE.json -o FILE.svg)\n");
    return CLI_USAGE;
  }
  char path[4096];
  if (out == NULL) {
    const size_t len = strlen(in);
    const int stem = len > 5 && !strcmp(in + len - 5, ".json") ? (int)len - 5 : (int)len;
    snprintf(path, sizeof path, "%.*s.svg", stem, in);
    out = path;
  }
  const char *base = strrchr(in, '/');
  base = base ? base + 1 : in;

  trace t = {.path = in};
  int rc = trace_read(&t);
  if (rc == 0 && steps && (t.steps == 0 || v.b > t.steps)) {
    if (t.steps == 0)
      fprintf(stderr, "troupe: --steps: %s has no \"update\" slices to count steps by\n", in);
    else fprintf(stderr, "troupe: --steps %s: %s has %d steps (0:%d)\n", steps, in, t.steps, t.steps);
    rc = CLI_USAGE;
  }
  if (rc == 0 && !steps && t.steps) default_steps(&t, &v);
  if (rc == 0 && !view_settle(&t, &v)) {
    char what[80] = "nothing to draw: no slice lasts any time";
    if (v.b) snprintf(what, sizeof what, "nothing to draw: no slice in steps %d:%d lasts any time", v.a, v.b);
    rc = fail(&t, what);
  }
  if (rc == 0) {
    FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;
    if (f) render(f, &t, &v, title ? title : base, (double)width);
    if (f == NULL || fflush(f) || ferror(f) || (f != stdout && fclose(f))) {
      fprintf(stderr, "troupe: timeline: %s: %s\n", out, strerror(errno));
      rc = CLI_FAIL;
    }
  }
  if (rc == 0) {
    char span[32];
    duration(span, sizeof span, v.t1 - v.t0);
    fprintf(stderr, "troupe: timeline: wrote %s: ", out);
    if (v.b) fprintf(stderr, "steps %d:%d of %d, ", v.a, v.b, t.steps);
    fprintf(stderr, "%d device lane%s, window %s", v.ndevices, v.ndevices == 1 ? "" : "s", span);
    if (v.ndevices) fprintf(stderr, ", bubble %.1f%%", 100 * v.bubble);
    fputc('\n', stderr);
  }
  trace_free(&t);
  return rc;
}
