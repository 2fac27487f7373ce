/* cmd_timeline.c — `troupe timeline TRACE.json -o FILE.svg`: a trace written by `troupe train
 * --trace` drawn as the schedule people sketch to explain pipelines. One lane per device
 * actor, and one for the loop thread's actors; a rectangle per slice, coloured by micro-batch
 * (forward light, backward dark in the same hue, the weight half of a split backward
 * hatched); all-reduce, updates and receives in fixed colours, names it does not know in a
 * neutral grey; idle time is the bare lane. The title carries the bubble fraction of what is
 * shown. Which slices, which steps and which window: timeline.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "file_write.h"
#include "timeline.h"
#include "tr_file.h"

/* How each kind is drawn: fill 0 takes the micro-batch's colour. */
static const struct {
  const char *cls, *legend;
  unsigned fill;
  const char *tag;
} kinds[TL_NKINDS] = {
    [TL_FWD] = {"fwd", "forward", 0, "F"},
    [TL_BWD] = {"bwd", "backward", 0, "B"},
    [TL_BWD_B] = {"bwdB", "backward (input)", 0, "B"},
    [TL_BWD_W] = {"bwdW", "backward (weights)", 0, "W"},
    [TL_ALLREDUCE] = {"allreduce", "all-reduce", 0x2e2e2e, "AR"},
    [TL_UPDATE] = {"update", "optimizer update", 0x6b6b6b, "U"},
    [TL_RECV] = {"recv", "receive", 0xbdbdbd, ""},
    [TL_MSG] = {"msg", "message handling", 0xdadada, ""},
    [TL_OTHER] = {"other", "other", 0xa0a0a0, ""},
};
/* Tableau 10 without its grey, pink last: its light tint is red's, and eight micro-batches
 * are common. */
static const unsigned palette[] = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                   0xedc948, 0xb07aa1, 0x9c755f, 0xff9da7};
enum { NPALETTE = sizeof palette / sizeof palette[0], MAX_OTHERS = 4 };
static const unsigned idle_fill = 0xf1f1f1;

/* ---- drawing ------------------------------------------------------------------------ */

/* Text for XML: markup escaped, control characters and broken UTF-8 become '?'. */
static void xml(FILE *f, const char *s) {
  while (*s) {
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80                    ? 1
            : u[0] >= 0xc2 && u[0] <= 0xdf ? 2
            : u[0] >= 0xe0 && u[0] <= 0xef ? 3
            : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4
                                           : 0;
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
  return kind == TL_FWD ? mix(base, 0xffffff, 0.5) : mix(base, 0, 0.12);
}
static unsigned fill_of(const tl_slice *s) {
  return kinds[s->kind].fill ? kinds[s->kind].fill : mb_colour(s->kind, s->arg);
}

/* A rectangle, its hatching for the weight half of a backward, a label when it fits. */
static void box(FILE *f, const char *cls, double x, double y, double w, double h, unsigned fill,
                const char *label, const char *tip) {
  fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" "
             "fill=\"#%06x\">", cls, x, y, w, h, fill);
  if (tip) {
    fputs("<title>", f);
    xml(f, tip);
    fputs("</title>", f);
  }
  fputs("</rect>\n", f);
  if (!strcmp(cls, kinds[TL_BWD_W].cls))
    fprintf(f, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" "
               "fill=\"url(#hatch)\"/>\n", x, y, w, h);
  if (label && *label && text_width(label, 10) + 4 <= w) {
    fprintf(f, "<text class=\"in%s\" x=\"%.1f\" y=\"%.0f\">", is_dark(fill) ? " w" : "",
            x + w / 2, y + h / 2 + 3.5);
    xml(f, label);
    fputs("</text>\n", f);
  }
}

typedef struct layout {
  double x0, x1, scale; /* the plot's left and right, px per µs */
  double lanes_top, lanes_bottom, legend_top, width, height;
} layout;

enum { TITLE_H = 54, STEPS_H = 18, LANE_H = 32, LOOP_H = 22, LANE_GAP = 8, AXIS_H = 36 };
enum { ROW_H = 18 }; /* a legend row */

static double lane_height(const tl_lane *l) { return l->device ? LANE_H : LOOP_H; }

/* A lane's two names: its device (or thread) in bold, its actors under it. */
static void lane_names(const tl_lane *l, char *dev, size_t dsize, char *who, size_t wsize) {
  snprintf(dev, dsize, "%s", l->label ? l->label : l->thread ? l->thread : "?");
  size_t len = 0;
  who[0] = 0;
  for (int i = 0; i < l->nactors && len < wsize; i++)
    len += (size_t)snprintf(who + len, wsize - len, "%s%s", i ? ", " : "", l->actor[i]);
  if (l->label == NULL && !strcmp(who, dev)) who[0] = 0; /* "stage0" twice says nothing */
}

/* What the picture holds, for the legend. */
typedef struct legend {
  bool kind[TL_NKINDS];
  bool mb[64];
  const char *other[MAX_OTHERS];
  int nothers;
  bool more_others;
} legend;

static void legend_add(legend *g, const tl_slice *s) {
  g->kind[s->kind] = true;
  if (tl_by_microbatch(s->kind) && s->arg >= 0 && s->arg < 64) g->mb[s->arg] = true;
  if (s->kind != TL_OTHER) return;
  for (int i = 0; i < g->nothers; i++)
    if (!strcmp(g->other[i], s->name)) return;
  if (g->nothers < MAX_OTHERS) g->other[g->nothers++] = s->name;
  else g->more_others = true;
}

static void legend_text(const legend *g, int k, char *text, size_t size) {
  if (k == TL_NKINDS) {
    snprintf(text, size, "idle");
  } else if (k == TL_OTHER) {
    size_t len = (size_t)snprintf(text, size, "other:");
    for (int i = 0; i < g->nothers && len < size; i++)
      len += (size_t)snprintf(text + len, size - len, "%s %s", i ? "," : "", g->other[i]);
    if (g->more_others && len < size) snprintf(text + len, size - len, ", …");
  } else {
    snprintf(text, size, "%s", kinds[k].legend);
  }
}

/* A row per micro-batch kind present (a numbered swatch per micro-batch), then the fixed
 * colours present and idle, wrapped to the width; returns the rows (f NULL: only counts). */
static int legend_draw(FILE *f, const legend *g, const layout *L, double y) {
  int rows = 0;
  for (int k = 0; k < TL_NKINDS; k++) {
    if (!tl_by_microbatch(k) || !g->kind[k]) continue;
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
  for (int k = TL_ALLREDUCE; k <= TL_NKINDS; k++) { /* TL_NKINDS: idle */
    if (k < TL_NKINDS && !g->kind[k]) continue;
    char text[160];
    legend_text(g, k, text, sizeof text);
    const double w = 36 + text_width(text, 11);
    if (x > L->x0 && x + w > L->x1) x = L->x0, ry += ROW_H;
    if (f) {
      fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"16\" height=\"14\" "
                 "fill=\"#%06x\" stroke=\"#c8c8c8\" stroke-width=\".5\"/>\n",
              k == TL_NKINDS ? "idle" : kinds[k].cls, x, ry,
              k == TL_NKINDS ? idle_fill : kinds[k].fill);
      fprintf(f, "<text x=\"%.1f\" y=\"%.0f\">", x + 21, ry + 11);
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

static ticks ticks_for(const layout *L, const tl_view *v) {
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

/* The time axis under the lanes or, with grid, its lines across them. */
static void axis(FILE *f, const layout *L, const tl_view *v, bool grid) {
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

static layout layout_for(const tl_trace *t, const tl_view *v, const legend *g, double width) {
  layout L = {.width = width, .lanes_top = TITLE_H + STEPS_H};
  char dev[64], who[160];
  double names = text_width(kinds[TL_BWD_W].legend, 12); /* the legend's row names too */
  for (int i = 0; i < t->nlanes; i++) {
    lane_names(&t->lane[i], dev, sizeof dev, who, sizeof who);
    names = fmax(names, fmax(1.1 * text_width(dev, 12), text_width(who, 10)));
  }
  L.x0 = 22 + fmin(names, width / 4);
  L.x1 = width - 20;
  L.scale = (L.x1 - L.x0) / (v->t1 - v->t0);
  L.lanes_bottom = L.lanes_top - LANE_GAP;
  for (int i = 0; i < t->nlanes; i++) L.lanes_bottom += lane_height(&t->lane[i]) + LANE_GAP;
  L.legend_top = L.lanes_bottom + AXIS_H;
  L.height = L.legend_top + legend_draw(NULL, g, &L, 0) * ROW_H + 8;
  return L;
}

/* The SVG's opening, the title with the bubble, and under it what was drawn. */
static void head(FILE *f, const layout *L, const tl_trace *t, const tl_view *v, const char *title) {
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""
             " width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
          L->width, L->height, L->width, L->height);
  fputs("<style>text{font:11px sans-serif;fill:#222}.title{font-size:16px;font-weight:bold}"
        ".sub{fill:#555}.dev{font-size:12px;font-weight:bold;text-anchor:end}"
        ".act{font-size:10px;fill:#666;text-anchor:end}.in{font-size:10px;text-anchor:middle}"
        ".w{fill:#fff}.tick{font-size:10px;fill:#555;text-anchor:middle}"
        ".step{font-size:10px;fill:#777}</style>\n"
        "<defs><pattern id=\"hatch\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\""
        " patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"5\" fill=\"#fff\""
        " fill-opacity=\".55\"/></pattern></defs>\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
        "<text class=\"title\" x=\"12\" y=\"22\">", f);
  xml(f, title);
  if (v->ndevices) fprintf(f, " — bubble %.1f%%", 100 * v->bubble);
  fputs("</text>\n<text class=\"sub\" x=\"12\" y=\"41\">", f);
  char span[32];
  duration(span, sizeof span, v->t1 - v->t0);
  if (v->b) fprintf(f, "steps %d:%d of %d", v->a, v->b, t->steps);
  else fputs("the whole trace (no update slices to count steps by)", f);
  fprintf(f, " · window %s · %d device lane%s · ", span, v->ndevices,
          v->ndevices == 1 ? "" : "s");
  xml(f, t->path);
  if (t->note) {
    fputs(" · ", f);
    xml(f, t->note);
  }
  fputs("</text>\n", f);
}

/* Behind the slices: the lanes, bare (idle), the grid, a dashed line where each step begins. */
static void backdrop(FILE *f, const layout *L, const tl_trace *t, const tl_view *v) {
  double y = L->lanes_top;
  for (int i = 0; i < t->nlanes; i++) {
    fprintf(f, "<rect class=\"idle\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" "
               "fill=\"#%06x\"/>\n", L->x0, y, L->x1 - L->x0, lane_height(&t->lane[i]), idle_fill);
    y += lane_height(&t->lane[i]) + LANE_GAP;
  }
  axis(f, L, v, true);
  double labelled = -INFINITY;
  for (int s = v->a; s < v->b; s++) {
    const double at = tl_step_start(t, s), x = L->x0 + (at - v->t0) * L->scale;
    if (!(at >= v->t0 && at < v->t1)) continue;
    fprintf(f, "<path d=\"M%.1f %.0fV%.0f\" stroke=\"#777\" stroke-dasharray=\"3 3\"/>\n", x,
            L->lanes_top - 14, L->lanes_bottom);
    if (x - labelled < 46) continue; /* labels would overlap */
    fprintf(f, "<text class=\"step\" x=\"%.1f\" y=\"%.0f\">step %d</text>\n", x + 3,
            L->lanes_top - 6, s);
    labelled = x;
  }
}

/* One slice, cut to the window: "F3" inside when it fits, the details as its tooltip. */
static void slice_draw(FILE *f, const layout *L, const tl_lane *l, const tl_slice *s,
                       const tl_view *v, double y) {
  const double a = fmax(s->t0, v->t0), b = fmin(s->t1, v->t1);
  if (b <= a) return; /* outside the window */
  double w = (b - a) * L->scale;
  if (w < 0.25 && s->kind == TL_MSG) return; /* specks; still busy in the bubble */
  if (w > 3) w -= 0.5;                       /* a hairline between neighbours */
  char label[48], tip[256], span[32];
  duration(span, sizeof span, s->t1 - s->t0);
  const char *of = tl_by_microbatch(s->kind) ? "micro-batch"
                   : s->kind == TL_ALLREDUCE ? "bucket" : "arg";
  int n = snprintf(tip, sizeof tip, "%s", s->name);
  if (s->arg >= 0) n += snprintf(tip + n, sizeof tip - (size_t)n, " · %s %lld", of, s->arg);
  n += snprintf(tip + n, sizeof tip - (size_t)n, " · %s", span);
  if (l->updates) snprintf(tip + n, sizeof tip - (size_t)n, " · step %d", s->step);
  if (tl_by_microbatch(s->kind) && s->arg >= 0) {
    snprintf(label, sizeof label, "%s%lld", kinds[s->kind].tag, s->arg);
    if (text_width(label, 10) + 4 > w) snprintf(label, sizeof label, "%lld", s->arg);
  } else {
    snprintf(label, sizeof label, "%s", s->kind == TL_OTHER ? s->name : kinds[s->kind].tag);
  }
  box(f, kinds[s->kind].cls, L->x0 + (a - v->t0) * L->scale, y, fmax(w, 0.8), lane_height(l),
      fill_of(s), label, tip);
}

static void render(FILE *f, const tl_trace *t, const tl_view *v, const char *title, double width) {
  legend g = {0};
  for (int i = 0; i < t->nlanes; i++)
    for (const tl_slice *s = t->lane[i].s; s < t->lane[i].s + t->lane[i].n; s++)
      if (s->t1 > v->t0 && s->t0 < v->t1) legend_add(&g, s);
  const layout L = layout_for(t, v, &g, width);
  head(f, &L, t, v, title);
  backdrop(f, &L, t, v);
  double y = L.lanes_top;
  for (int i = 0; i < t->nlanes; i++) {
    const tl_lane *l = &t->lane[i];
    const double h = lane_height(l);
    char dev[64], who[160];
    lane_names(l, dev, sizeof dev, who, sizeof who);
    fprintf(f, "<g class=\"lane%s\">\n<text class=\"dev\" x=\"%.1f\" y=\"%.0f\">",
            l->device ? " device" : "", L.x0 - 10, y + h / 2 - (who[0] ? 1 : -4));
    xml(f, dev);
    fprintf(f, "</text>\n<text class=\"act\" x=\"%.1f\" y=\"%.0f\">", L.x0 - 10, y + h / 2 + 10);
    xml(f, who);
    fputs("</text>\n", f);
    for (int k = 0; k < l->n; k++) slice_draw(f, &L, l, &l->s[k], v, y);
    fputs("</g>\n", f);
    y += h + LANE_GAP;
  }
  axis(f, &L, v, false);
  legend_draw(f, &g, &L, L.legend_top);
  fputs("</svg>\n", f);
}

/* ---- the command -------------------------------------------------------------------- */

/* What is drawn, for the writer (file_write.h) */
typedef struct picture {
  const tl_trace *t;
  const tl_view *v;
  const char *title;
  double width;
} picture;

static int draw(void *arg, FILE *f) {
  const picture *p = arg;
  render(f, p->t, p->v, p->title, p->width);
  return ferror(f);
}

static int draw_into(void *arg, int fd) { return tr__file_fill_stream(fd, draw, arg); }

typedef struct args {
  const char *in, *out, *title;
  tl_view steps; /* given: a < b */
  uint64_t width;
} args;

/* "A:B", A < B: steps A to B-1. */
static int parse_steps(const char *s, void *field) {
  tl_view *v = field;
  char *end;
  errno = 0;
  const long x = strtol(s, &end, 10);
  if (errno || end == s || *end != ':' || x < 0 || x > 1 << 30) return -1;
  const char *rest = end + 1;
  const long y = strtol(rest, &end, 10);
  if (errno || end == rest || *end || y <= x || y > 1 << 30) return -1;
  v->a = (int)x, v->b = (int)y;
  return 0;
}

enum { OPT_OUTPUT, OPT_STEPS, OPT_WIDTH, OPT_TITLE, NOPT };
static const cli_option options[NOPT] = {
    [OPT_OUTPUT] = {"--output", "FILE.svg", CLI_STR, offsetof(args, out), .alias = "-o",
                    .help = "where to write (default: TRACE with .svg for .json; - for stdout)"},
    [OPT_STEPS] = {"--steps", "A:B", CLI_PARSE, offsetof(args, steps), .parse = parse_steps,
                   .expect = "A:B with A < B (steps A to B-1)",
                   .help = "steps A to B-1, counted from 0 by each lane's updates (default: a "
                           "few from the middle of the run, so that rectangles are readable)"},
    [OPT_WIDTH] = {"--width", "PX", CLI_U64, offsetof(args, width), .lo = 400, .hi = 20000,
                   .help = "the picture's width (default 1200)"},
    [OPT_TITLE] = {"--title", "TEXT", CLI_STR, offsetof(args, title),
                   .help = "the title (default: the trace's file name)"},
};
static const cli_table table = {
    "timeline", options, NOPT, .usage = "TRACE.json [options]",
    .about = "Draws a trace of `troupe train --trace` as a schedule: a lane per device actor and\n"
             "one for the loop thread's actors, a rectangle per forward, backward, all-reduce,\n"
             "update (and any other slice), coloured by micro-batch; the title gives the bubble\n"
             "fraction, 1 - busy / (device lanes x window), of what is shown.\n",
    .positional = "trace", .positional_at = offsetof(args, in)};

int cmd_timeline(int argc, char **argv) {
  args a = {.width = 1200};
  bool given[NOPT] = {false};
  const int parsed = cli_parse(&table, argc, argv, &a, given);
  if (parsed != CLI_GO) return parsed;
  const char *in = a.in, *out = a.out, *title = a.title;
  const bool steps = given[OPT_STEPS];
  const char *steps_flag = options[OPT_STEPS].flag;
  const uint64_t width = a.width;
  tl_view v = a.steps;
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

  tl_trace t = {.path = in};
  int rc = tl_trace_read(&t);
  if (rc == 0 && steps && (t.steps == 0 || v.b > t.steps)) {
    if (t.steps == 0)
      fprintf(stderr, "troupe: %s: %s has no \"update\" slices to count steps by\n", steps_flag,
              in);
    else
      fprintf(stderr, "troupe: %s %d:%d: %s has %d steps (0:%d)\n", steps_flag, v.a, v.b, in,
              t.steps, t.steps);
    rc = CLI_USAGE;
  }
  if (rc == 0 && !steps && t.steps) tl_view_default(&t, &v);
  if (rc == 0 && !tl_view_settle(&t, &v)) {
    fprintf(stderr, "troupe: timeline: %s: nothing to draw: no slice ", in);
    if (v.b) fprintf(stderr, "in steps %d:%d ", v.a, v.b);
    fprintf(stderr, "lasts any time\n");
    rc = CLI_USAGE;
  }
  picture p = {&t, &v, title ? title : base, (double)width};
  char why[4200];
  if (rc == 0 && !strcmp(out, "-")) {
    if (draw(&p, stdout) || fflush(stdout) || ferror(stdout)) {
      fprintf(stderr, "troupe: timeline: standard output: %s\n", strerror(errno));
      rc = CLI_FAIL;
    }
  } else if (rc == 0) { /* a file: never the trace, nor what is not a regular file */
    const char *flag = options[OPT_OUTPUT].flag;
    const int refused = tr_file_check_output(out, flag, why, sizeof why) ||
                        tr_file_check_distinct(out, flag, in, "the trace", why, sizeof why);
    const int wrote = refused ? 0 : tr__file_write(out, flag, draw_into, &p, why, sizeof why);
    if (refused || wrote) fprintf(stderr, "troupe: timeline: %s\n", why);
    rc = refused || wrote == TR_EINVAL ? CLI_USAGE : wrote ? CLI_FAIL : 0;
  }
  if (rc == 0) {
    char span[32];
    duration(span, sizeof span, v.t1 - v.t0);
    fprintf(stderr, "troupe: timeline: wrote %s: ", out);
    if (v.b) fprintf(stderr, "steps %d:%d of %d, ", v.a, v.b, t.steps);
    fprintf(stderr, "%d device lane%s, window %s", v.ndevices, v.ndevices == 1 ? "" : "s", span);
    if (v.ndevices) fprintf(stderr, ", bubble %.1f%%", 100 * v.bubble);
    fputc('\n', stderr);
    if (t.note) fprintf(stderr, "troupe: timeline: %s: %s\n", in, t.note);
  }
  tl_trace_free(&t);
  return rc;
}
