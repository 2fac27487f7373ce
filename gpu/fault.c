/* fault.c — the fault decorator (fault.h): a backend table that is another's with its
 * kernels, GEMMs and capture's end wrapped, so that a test's devices are slow or fail on a
 * chosen call. The devices of a list share one decorated table per backend (the device layer
 * tells backends apart by kind, so a decorated device still copies to and from its peers);
 * the rule, and a count of calls per device, hang off it. Counts are touched by each
 * device's owner thread only. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_impl.h"
#include "fault.h"

enum { MAX_BACKENDS = 4, MAX_RULES = 8 };

typedef struct fault_rule {
  int dev;                  /* the device index the rule applies to; -1: every one */
  char op[32];              /* the prefix of the names counted; "": every name */
  long long us, grow, every, fail, from;
  long long *calls;         /* counted calls, per device of the spec's list (devs) */
} fault_rule;

typedef struct fault_be {
  tr__backend table;        /* first: a decorated device's `be` points here */
  const tr__backend *inner; /* what it decorates */
  int refs;                 /* devices that use it */
  int nrules;
  fault_rule rule[MAX_RULES]; /* each counts its own calls */
  /* The spec's devices in its order: what dev=I and the counts go by. Not d->info.index,
   * which a job across processes renumbers when it joins every rank's devices in one list
   * (tr_device_list_add_placeholder). */
  tr_device **devs;
  int ndevs;
} fault_be;

static fault_be *fault_of(const tr_device *d) { return (fault_be *)(uintptr_t)d->be; }

static void pause_us(long long us) {
  struct timespec t = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
  while (nanosleep(&t, &t) == -1 && errno == EINTR) {
  }
}

/* The call's number among those the rule counts on d (from 1), or 0 when it is not one. */
static long long counted(const fault_be *f, fault_rule *r, tr_device *d, const char *name) {
  int i = 0;
  while (i < f->ndevs && f->devs[i] != d) i++;
  if (i == f->ndevs || (r->dev >= 0 && i != r->dev)) return 0;
  if (strncmp(name, r->op, strlen(r->op))) return 0;
  return ++r->calls[i];
}

/* What the rules make of a call: its number under the rule that fails it (0: it runs), and
 * the microseconds it sleeps once it has run (*us). */
static long long judge(fault_be *f, tr_device *d, const char *name, long long *us) {
  long long failing = 0;
  *us = 0;
  for (int i = 0; i < f->nrules; i++) {
    fault_rule *r = &f->rule[i];
    const long long k = counted(f, r, d, name);
    if (!k) continue;
    if ((r->fail && k == r->fail) || (r->from && k >= r->from)) failing = k;
    *us += r->us + (k - 1) / r->every * r->grow;
  }
  return failing;
}

static int injected(tr_device *d, const char *name, long long k) {
  return tr__device_fail(d, TR_EDEVICE, "%s: an injected failure (call %lld; device spec fault)",
                         name, k);
}


/* Whether `prefix` begins the name of a call a rule can count (a kernel, gemm, capture) that
 * backend `be` makes (NULL: any backend): the decorator wraps only the slots it has. */
static bool counts_some(const char *prefix, const tr__backend *be) {
  const size_t n = strlen(prefix);
#define FAULT_NAME(name, params, args, checks) \
  if (!strncmp(#name, prefix, n) && (!be || be->name)) return true;
  TR__OP_MAP(FAULT_NAME)
#undef FAULT_NAME
  return !strncmp("gemm", prefix, n) ||
         (!strncmp("capture", prefix, n) && (!be || be->capture_end));
}

/* ---- the wrapped slots ---------------------------------------------------------------------- */

#define FAULT_OP(name, params, args, checks)                                           \
  static int fault_##name(tr_stream *s, TR__UNPAREN params) {                          \
    fault_be *f = fault_of(s->dev);                                                    \
    long long us;                                                                      \
    const long long k = judge(f, s->dev, #name, &us);                                  \
    if (k) return injected(s->dev, #name, k);                                          \
    const int rc = f->inner->name(s, TR__UNPAREN args);                                \
    if (!rc && us > 0) pause_us(us);                                                   \
    return rc;                                                                         \
  }
TR__OP_MAP(FAULT_OP)
#undef FAULT_OP

/* One wrapper for the three GEMM slots: `gemm` counts them all. */
#define FAULT_GEMM(slot, call)                                      \
  do {                                                              \
    fault_be *f = fault_of(s->dev);                                 \
    long long us;                                                   \
    const long long k = judge(f, s->dev, "gemm", &us);              \
    if (k) return injected(s->dev, #slot, k);                       \
    const int rc = f->inner->slot call;                             \
    if (!rc && us > 0) pause_us(us);                                \
    return rc;                                                      \
  } while (0)

static int fault_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
  FAULT_GEMM(gemm, (s, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}

static int fault_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K,
                              float alpha, const float *A, int lda, int64_t stride_a,
                              const float *B, int ldb, int64_t stride_b, float beta, float *C,
                              int ldc, int64_t stride_c, int batch) {
  FAULT_GEMM(gemm_batched, (s, opa, opb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                            beta, C, ldc, stride_c, batch));
}

static int fault_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                           const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B,
                           int ldb, int64_t stride_b, float beta, float *C, int ldc,
                           int64_t stride_c, int batch) {
  FAULT_GEMM(gemm_bf16, (s, opa, opb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta,
                         C, ldc, stride_c, batch));
}

/* A failed end of a capture drops the recording (it always ends), as a real one would. */
static int fault_capture_end(tr_stream *s, int keep, void **exec) {
  fault_be *f = fault_of(s->dev);
  long long us;
  const long long k = judge(f, s->dev, "capture", &us);
  if (k) {
    f->inner->capture_end(s, 0, exec);
    *exec = NULL;
    return injected(s->dev, "capture_end", k);
  }
  return f->inner->capture_end(s, keep, exec);
}

/* The device's own close, then the table's, with its last device. */
static void fault_close(tr_device *d) {
  fault_be *f = fault_of(d);
  f->inner->close(d);
  d->be = f->inner;
  if (--f->refs == 0) {
    for (int i = 0; i < f->nrules; i++) free(f->rule[i].calls);
    free(f->devs);
    free(f);
  }
}

static fault_be *decorate(const tr__backend *inner, const fault_rule *rules, int nrules,
                          const tr_device_list *list) {
  const int n = tr_device_list_count(list);
  fault_be *f = calloc(1, sizeof *f);
  if (!f || !(f->devs = malloc((size_t)n * sizeof *f->devs))) {
    free(f);
    return NULL;
  }
  for (int i = 0; i < n; i++) f->devs[i] = tr_device_list_at(list, i);
  f->ndevs = n;
  for (int i = 0; i < nrules; i++) {
    f->rule[i] = rules[i];
    if (!(f->rule[i].calls = calloc((size_t)n, sizeof *f->rule[i].calls))) {
      for (int k = 0; k < i; k++) free(f->rule[k].calls);
      free(f->devs);
      free(f);
      return NULL;
    }
  }
  f->nrules = nrules;
  f->inner = inner;
  f->table = *inner;
#define FAULT_SLOT(name, params, args, checks) \
  if (inner->name) f->table.name = fault_##name;
  TR__OP_MAP(FAULT_SLOT)
#undef FAULT_SLOT
  f->table.gemm = fault_gemm;
  if (inner->gemm_batched) f->table.gemm_batched = fault_gemm_batched;
  if (inner->gemm_bf16) f->table.gemm_bf16 = fault_gemm_bf16;
  if (inner->capture_end) f->table.capture_end = fault_capture_end;
  f->table.close = fault_close;
  return f;
}

/* ---- the spec ------------------------------------------------------------------------------ */

bool tr__fault_spec(const char *spec) { return spec && !strncmp(spec, "fault(", 6); }

static int parse_number(const char *v, long long lo, long long *out) {
  char *end;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo) return -1;
  *out = x;
  return 0;
}

/* RULE: key=value pairs, in place (commas and '=' overwritten). A rule that can never
 * fire is refused: one that says neither how to slow a call nor which to fail, or counts no
 * call (us=0 given is a delay asked for, of nothing: a test's sweep may start there). */
static int parse_rule(char *rule, fault_rule *f, const char *spec, char *err, size_t n) {
  *f = (fault_rule){.dev = -1, .every = 1};
  char text[128];
  snprintf(text, sizeof text, "%s", rule);
  int effects = 0; /* us, grow, fail and from given */
  for (char *p = rule; p && *p;) {
    char *next = strchr(p, ',');
    if (next) *next++ = 0;
    char *eq = strchr(p, '=');
    if (!eq)
      return tr_errorf(err, n, TR_EINVAL, "device spec '%s': '%s' is not key=value", spec, p);
    *eq = 0;
    const char *k = p, *v = eq + 1;
    effects += !strcmp(k, "us") || !strcmp(k, "grow") || !strcmp(k, "fail") || !strcmp(k, "from");
    long long x = 0;
    int bad = 0;
    if (!strcmp(k, "op")) {
      if (!*v)
        return tr_errorf(err, n, TR_EINVAL, "device spec '%s': rule '%s': op= names no call "
                         "(leave op out to count every call, or name one: mse_backward, gemm, "
                         "capture)", spec, text);
      if (strlen(v) >= sizeof f->op) bad = 1;
      else if (!counts_some(v, NULL))
        return tr_errorf(err, n, TR_EINVAL, "device spec '%s': op=%s names no call a rule "
                         "counts (a kernel of the device API such as mse_backward, gemm or "
                         "capture, or the beginning of one's name)", spec, v);
      else snprintf(f->op, sizeof f->op, "%s", v);
    } else if (!strcmp(k, "dev")) {
      bad = parse_number(v, 0, &x);
      f->dev = (int)x;
    } else if (!strcmp(k, "us")) bad = parse_number(v, 0, &f->us);
    else if (!strcmp(k, "grow")) bad = parse_number(v, 0, &f->grow);
    else if (!strcmp(k, "every")) bad = parse_number(v, 1, &f->every);
    else if (!strcmp(k, "fail")) bad = parse_number(v, 1, &f->fail);
    else if (!strcmp(k, "from")) bad = parse_number(v, 1, &f->from);
    else
      return tr_errorf(err, n, TR_EINVAL, "device spec '%s': unknown key '%s' (expected dev, "
                       "op, us, grow, every, fail or from)", spec, k);
    if (bad)
      return tr_errorf(err, n, TR_EINVAL, "device spec '%s': %s=%s is not a valid value",
                       spec, k, v);
    p = next;
  }
  if (!effects)
    return tr_errorf(err, n, TR_EINVAL, "device spec '%s': rule '%s' neither slows a call nor "
                     "fails one, so it would do nothing: give us=U or grow=G (slow), fail=N "
                     "or from=N (fail)", spec, text);
  return 0;
}

int tr__fault_list_open(tr_device_list **out, const char *spec, char *err, size_t err_size) {
  *out = NULL;
  const size_t len = strlen(spec);
  char *inner = malloc(len + 1);
  if (!inner) return tr_errorf(err, err_size, TR_ENOMEM, "device spec '%s': out of memory", spec);
  memcpy(inner, spec + 6, len - 5); /* after "fault(" */
  char *close = strrchr(inner, ')'), *semi = strchr(inner, ';');
  fault_rule rules[MAX_RULES];
  int rc;
  if (!close || close[1] || !semi || semi > close) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "device spec '%s': expected fault(SPEC;RULE)", spec);
    goto out;
  }
  if (tr__fault_spec(inner)) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "device spec '%s': one fault(...) per spec", spec);
    goto out;
  }
  *close = 0;
  *semi = 0;
  int nrules = 0;
  for (char *r = semi + 1; r; nrules++) { /* RULE;RULE...: each its own counts */
    char *next = strchr(r, ';');
    if (next) *next++ = 0;
    if (nrules == MAX_RULES) {
      rc = tr_errorf(err, err_size, TR_EINVAL, "device spec '%s': more than %d rules", spec,
                     MAX_RULES);
      goto out;
    }
    if ((rc = parse_rule(r, &rules[nrules], spec, err, err_size))) goto out;
    r = next;
  }
  tr_device_list *list;
  if ((rc = tr_device_list_open(&list, inner, err, err_size))) goto out;
  const int n = tr_device_list_count(list);
  for (int i = 0; i < nrules; i++) {
    if (rules[i].dev >= n) {
      tr_device_list_close(list);
      rc = tr_errorf(err, err_size, TR_EINVAL, "device spec '%s': dev=%d, of a list of %d",
                     spec, rules[i].dev, n);
      goto out;
    }
    bool fires = false; /* op=capture on host devices, which capture nothing, never does */
    for (int d = 0; d < n && !fires; d++)
      fires = (rules[i].dev < 0 || rules[i].dev == d) &&
              counts_some(rules[i].op, tr_device_list_at(list, d)->be);
    if (!fires) {
      const tr_device *d = tr_device_list_at(list, rules[i].dev < 0 ? 0 : rules[i].dev);
      rc = tr_errorf(err, err_size, TR_EINVAL, "device spec '%s': rule %d: op=%s is no call "
                     "the %s backend makes (%s), so it would never fire", spec, i + 1,
                     rules[i].op, d->be->name, tr_device_name(d));
      tr_device_list_close(list);
      goto out;
    }
  }
  fault_be *made[MAX_BACKENDS] = {0};
  for (int i = 0; i < n; i++) {
    tr_device *d = tr_device_list_at(list, i);
    int b = 0;
    while (b < MAX_BACKENDS && made[b] && made[b]->inner != d->be) b++;
    TR_ASSERT(b < MAX_BACKENDS);
    if (!made[b] && !(made[b] = decorate(d->be, rules, nrules, list))) {
      tr_device_list_close(list);
      rc = tr_errorf(err, err_size, TR_ENOMEM, "device spec '%s': out of memory", spec);
      goto out;
    }
    made[b]->refs++;
    d->be = &made[b]->table;
  }
  *out = list;
out:
  free(inner);
  return rc;
}
