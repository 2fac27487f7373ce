/* cli.c — the option tables (cli.h) read three ways, parsing, help and messages, and the
 * small helpers the sub-commands share. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HELP_COLUMN = 33, HELP_WIDTH = 92, MAX_NAMES = 64 };

/* The i-th name of an enumeration row; NULL past the last. */
static const char *enum_name(const cli_option *o, int i) {
  const char *s = i < MAX_NAMES ? o->name(i) : NULL;
  return s && strcmp(s, "?") ? s : NULL;
}

/* "a, b or c" (sep ", ") or "a|b|c" (sep "|", last "|"). */
static void print_names(FILE *f, const cli_option *o, const char *sep, const char *last) {
  for (int i = 0; enum_name(o, i); i++)
    fprintf(f, "%s%s", i == 0 ? "" : enum_name(o, i + 1) ? sep : last, enum_name(o, i));
}

/* The contexts of a mask into buf, "dp or hybrid" (last " or "); how many. */
static int contexts(char *buf, size_t size, const cli_table *t, unsigned mask, const char *last) {
  const int all = __builtin_popcount(mask);
  int n = 0;
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < 32; i++)
    if (mask & 1u << i && len < size)
      len += (size_t)snprintf(buf + len, size - len, "%s%s",
                              n == 0 ? "" : n == all - 1 ? last : ", ", t->context_name(i)),
          n++;
  return n;
}

static const cli_option *row_of_flag(const cli_table *t, const char *a) {
  for (int k = 0; k < t->count; k++)
    if (!strcmp(a, t->options[k].flag) || (t->options[k].alias && !strcmp(a, t->options[k].alias)))
      return &t->options[k];
  return NULL;
}

const cli_option *cli_option_of_field(const cli_table *t, const char *field, size_t len) {
  for (int k = 0; k < t->count; k++)
    for (const char *p = t->options[k].fields; p && *p;) {
      const size_t n = strcspn(p, " ");
      if (n == len && !strncmp(p, field, len)) return &t->options[k];
      p += n + (p[n] == ' ');
    }
  return NULL;
}

const char *cli_flag(const cli_table *t, const char *field) {
  const cli_option *o = cli_option_of_field(t, field, strlen(field));
  if (o == NULL) {
    fprintf(stderr, "troupe: %s: no flag sets '%s'\n", t->command, field);
    abort();
  }
  return o->flag;
}

/* Writes text wrapped at HELP_WIDTH, every line but the first indented to HELP_COLUMN. */
static void print_wrapped(FILE *f, const char *text, int column) {
  for (const char *p = text; *p;) {
    const size_t n = strcspn(p, " ");
    if (column > HELP_COLUMN && column + (int)n > HELP_WIDTH) {
      fprintf(f, "\n%*s", HELP_COLUMN, "");
      column = HELP_COLUMN;
    } else if (column > HELP_COLUMN) {
      fputc(' ', f);
      column++;
    }
    fprintf(f, "%.*s", (int)n, p);
    column += (int)n;
    p += n;
    while (*p == ' ') p++;
  }
  fputc('\n', f);
}

void cli_help(FILE *f, const cli_table *t) {
  fprintf(f, "usage: troupe %s %s\n\n", t->command, t->usage ? t->usage : "[options]");
  if (t->about) fprintf(f, "%s\n", t->about);
  for (int k = 0; k < t->count; k++) {
    const cli_option *o = &t->options[k];
    int column = fprintf(f, "  %s", o->flag);
    if (o->alias) column += fprintf(f, ", %s", o->alias);
    if (o->type == CLI_ENUM) {
      column += fprintf(f, " ");
      for (int i = 0; enum_name(o, i); i++)
        column += fprintf(f, "%s%s", i ? "|" : "", enum_name(o, i));
    } else if (o->value) {
      column += fprintf(f, " %s", o->value);
    }
    if (column >= HELP_COLUMN - 1) fprintf(f, "\n%*s", HELP_COLUMN, "");
    else fprintf(f, "%*s", HELP_COLUMN - column, "");
    column = HELP_COLUMN;
    char names[256];
    if (o->applies && contexts(names, sizeof names, t, o->applies, ", ") <= 3)
      column += fprintf(f, "%s:", names);
    print_wrapped(f, o->help ? o->help : "", column);
  }
  if (t->after) fprintf(f, "\n%s", t->after);
}

static bool whole(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool number(const char *s, double min, double max, double *out) {
  char *end;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= min && v <= max)) return false;
  *out = v;
  return true;
}

/* Sets the field of row o from `s`: 0, or CLI_USAGE having said why. */
static int set(const cli_option *o, const char *s, char *field) {
  uint64_t u = 0;
  double d = 0;
  switch (o->type) {
    case CLI_SWITCH: *(int *)field = 1; return 0;
    case CLI_STR: *(const char **)field = s; return 0;
    case CLI_INT:
    case CLI_I64:
    case CLI_U64:
      if (!whole(s, o->lo, o->hi, &u)) {
        fprintf(stderr, "troupe: %s: '%s' is not a whole number from %llu to %llu\n", o->flag, s,
                (unsigned long long)o->lo, (unsigned long long)o->hi);
        return CLI_USAGE;
      }
      if (o->type == CLI_INT) *(int *)field = (int)u;
      else if (o->type == CLI_I64) *(int64_t *)field = (int64_t)u;
      else *(uint64_t *)field = u;
      return 0;
    case CLI_FLOAT:
    case CLI_DOUBLE:
      if (!number(s, o->min, o->max, &d)) {
        fprintf(stderr, "troupe: %s: '%s' is not a number from %g to %g\n", o->flag, s, o->min,
                o->max);
        return CLI_USAGE;
      }
      if (o->type == CLI_FLOAT) *(float *)field = (float)d;
      else *(double *)field = d;
      return 0;
    case CLI_ENUM:
      for (int i = 0; enum_name(o, i); i++)
        if (!strcmp(s, enum_name(o, i))) {
          *(int *)field = i;
          return 0;
        }
      fprintf(stderr, "troupe: %s: '%s' is not ", o->flag, s);
      print_names(stderr, o, ", ", " or ");
      fputc('\n', stderr);
      return CLI_USAGE;
    case CLI_PARSE:
      if (o->parse(s, field) == 0) return 0;
      fprintf(stderr, "troupe: %s: '%s' is not %s\n", o->flag, s, o->expect);
      return CLI_USAGE;
  }
  return CLI_USAGE;
}

/* What the rows given ask of each other and of the context. */
static int check_given(const cli_table *t, const char *into, const bool *given) {
  const cli_option *context = NULL;
  for (int k = 0; k < t->count && t->context_name; k++)
    if (t->options[k].at == t->context_at) context = &t->options[k];
  for (int k = 0; k < t->count; k++) {
    const cli_option *o = &t->options[k];
    if (!given[k]) continue;
    const cli_option *other =
        o->excludes ? cli_option_of_field(t, o->excludes, strlen(o->excludes)) : NULL;
    if (other && given[other - t->options]) {
      fprintf(stderr, "troupe: %s and %s: give one of them\n", o->flag, other->flag);
      return CLI_USAGE;
    }
    other = o->needs ? cli_option_of_field(t, o->needs, strlen(o->needs)) : NULL;
    if (other && !given[other - t->options]) {
      fprintf(stderr, "troupe: %s needs %s %s\n", o->flag, other->flag,
              other->value ? other->value : "");
      return CLI_USAGE;
    }
  }
  if (!context) return CLI_GO;
  const int now = *(const int *)(into + t->context_at);
  for (int k = 0; k < t->count; k++) {
    const cli_option *o = &t->options[k];
    if (!given[k] || !o->applies || (o->applies & 1u << now)) continue;
    char names[256];
    contexts(names, sizeof names, t, o->applies, " or ");
    fprintf(stderr, "troupe: %s: applies to %s %s only (not %s)\n", o->flag, context->flag, names,
            t->context_name(now));
    return CLI_USAGE;
  }
  return CLI_GO;
}

const char *const cli_help_flags[2] = {"--help", "-h"};

bool cli_is_help(const char *arg) {
  return !strcmp(arg, cli_help_flags[0]) || !strcmp(arg, cli_help_flags[1]);
}

int cli_parse(const cli_table *t, int argc, char **argv, void *into, bool *given) {
  bool mine[128] = {false}, *seen = given ? given : mine;
  char *base = into;
  const char *positional = NULL;
  if (t->count > 128) return CLI_FAIL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      cli_help(stdout, t);
      return CLI_OK;
    }
    const cli_option *o = row_of_flag(t, a);
    if (o == NULL && a[0] == '-' && a[1]) {
      fprintf(stderr, "troupe: %s: unknown option '%s' (see troupe %s --help)\n", t->command, a,
              t->command);
      return CLI_USAGE;
    }
    if (o == NULL) {
      if (!t->positional) {
        fprintf(stderr, "troupe: %s: '%s' is not an option (see troupe %s --help)\n", t->command,
                a, t->command);
        return CLI_USAGE;
      }
      if (positional) {
        fprintf(stderr, "troupe: %s: one %s at a time ('%s', then '%s')\n", t->command,
                t->positional, positional, a);
        return CLI_USAGE;
      }
      *(const char **)(base + t->positional_at) = positional = a;
      continue;
    }
    const char *value = NULL;
    if (o->type != CLI_SWITCH) {
      if (i + 1 >= argc) {
        fprintf(stderr, "troupe: %s needs a value\n", a);
        return CLI_USAGE;
      }
      value = argv[++i];
    }
    const int rc = set(o, value, base + o->at);
    if (rc) return rc;
    seen[o - t->options] = true;
  }
  return check_given(t, base, seen);
}

void cli_print_error(FILE *f, const cli_table *t, const tr_error *e) {
  size_t at = 0;
  for (int s = 0; s < e->nspans; s++) {
    const tr_error_span *sp = &e->spans[s];
    if (sp->at < at) continue;
    fprintf(f, "%.*s", (int)(sp->at - at), e->message + at);
    const cli_option *o = cli_option_of_field(t, e->message + sp->at, sp->len);
    if (o) fputs(o->flag, f);
    else fprintf(f, "%.*s", (int)sp->len, e->message + sp->at);
    at = sp->at + sp->len;
  }
  fputs(e->message + at, f);
}

double cli_figure(const tr_result *r, const char *key) {
  double v = NAN;
  if (r) tr_result_real(r, key, &v);
  return v;
}

double cli_figure_at(const tr_result *r, const char *key, int i) {
  double v = NAN;
  if (r) tr_result_real_at(r, key, i, &v);
  return v;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

const char *cli_bytes(char *buf, size_t n, uint64_t b) {
  static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
  int u = -1;
  while (u < 3 && b >= (1ull << (10 * (u + 2)))) u++;
  if (u < 0) snprintf(buf, n, "%" PRIu64 " bytes", b);
  else snprintf(buf, n, "%.1f %s", (double)b / (double)(1ull << (10 * (u + 1))), unit[u]);
  return buf;
}

double cli_median(double *v, int n) {
  if (n <= 0) return NAN;
  tr__sort_doubles(v, (size_t)n);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void cli_cpu_isa(char *out, size_t n) {
  snprintf(out, n, "baseline x86-64");
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl");
#if __GNUC__ >= 12 || defined(__clang__)
  const int bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
#else
  const int bf16 = 0;
#endif
  if (avx2) snprintf(out, n, "AVX2%s%s", avx512 ? ", AVX-512" : "", bf16 ? ", AVX512-BF16" : "");
#endif
}
