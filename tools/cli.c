/* cli.c — argument helpers shared by the sub-commands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

bool cli_value_str(int argc, char **argv, int *i, const char **out) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "troupe: %s needs a value\n", argv[*i]);
    return false;
  }
  *out = argv[++*i];
  return true;
}

bool cli_value_u64(int argc, char **argv, int *i, uint64_t min, uint64_t max, uint64_t *out) {
  const char *s;
  if (!cli_value_str(argc, argv, i, &s)) return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
    fprintf(stderr, "troupe: %s: '%s' is not a whole number from %llu to %llu\n", argv[*i - 1],
            s, (unsigned long long)min, (unsigned long long)max);
    return false;
  }
  *out = v;
  return true;
}

bool cli_value_double(int argc, char **argv, int *i, double min, double max, double *out) {
  const char *s;
  if (!cli_value_str(argc, argv, i, &s)) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= min && v <= max)) {
    fprintf(stderr, "troupe: %s: '%s' is not a number from %g to %g\n", argv[*i - 1], s, min,
            max);
    return false;
  }
  *out = v;
  return true;
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

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
