/* costs.c — what each layer of a model costs on a kind of device, measured once and kept in
 * a file (tr_plan.h: tr_plan_layer_times), so that planning, cutting a pipeline by measured
 * cost and every later run reuse it instead of timing the layers again.
 *
 * The file is a safetensors file (tr_checkpoint.h: written atomically, every byte validated
 * when read), one F64 tensor [layers, 4] per entry — forward, backward, its input half, its
 * weight half — named "<device>|<model>|<fingerprint>|b<batch>", with the time it was
 * measured in the metadata under the same name. An entry is used when the library's version
 * (metadata "troupe") is this one, it is younger than TR_PLAN_COSTS_MAX_AGE, and every number
 * is one its unit allows (planner.h: tr__costs_unit; a pass of 0 s, 1e-300 s or 1e300 s is
 * none a machine takes); otherwise the layers are measured again and the entry replaced. A
 * file that is not a costs file is never replaced (the caller's path may name anything).
 * A measurement is kept only if the machine ran at its pace meanwhile (at_pace below). Other
 * entries share the file and its rules: a message's latency (links.c), the slowdown of
 * devices at once (costs_together.c), a tensor group's members (below).
 *
 * Processes add entries at once (concurrent plans, ranks, `--layout auto` runs): an entry is
 * looked up without a lock (the file is replaced whole by a rename), and added under
 * troupe's lock file beside it (tr_file.h: tr__file_keep_lock), held only to read the file
 * again, merge, and write it: every process's entries are kept. The lock is never held while
 * measuring; a holder that keeps it past LOCK_WAIT_MS (a process stopped there) is given up
 * on, the file with it for the rest of the process: its entries are measured and not kept,
 * and stderr says so once.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "job_impl.h"
#include "planner.h"
#include "tr_checkpoint.h"
#include "tr_file.h"

#define FORMAT "troupe layer costs"
enum { PASSES = 4, LOCK_WAIT_MS = 5000 };

/* What each unit may be (planner.h): [lo, hi], or 0 where `none` allows it. */
static const struct {
  double lo, hi;
  bool none;
  const char *text;
} units_of[] = {
    [TR__COSTS_SECONDS] = {1e-9, 3600, false, "1 ns to 1 hour"},
    [TR__COSTS_SECONDS_OR_0] = {1e-9, 3600, true, "0, or 1 ns to 1 hour"},
    [TR__COSTS_PER_BYTE] = {1e-15, 1e-3, false, "1e-15 to 1e-3 s a byte"},
    [TR__COSTS_PER_BYTE_OR_0] = {1e-15, 1e-3, true, "0, or 1e-15 to 1e-3 s a byte"},
    [TR__COSTS_FACTOR] = {1, 1e4, false, "1 to 10000 times"},
};

/* The first of v[count] (cols a row) that its unit does not allow, or -1. */
static long outside(const tr__costs_unit *units, int cols, const double *v, size_t count) {
  for (size_t i = 0; i < count; i++) {
    const tr__costs_unit u = units[i % (size_t)cols];
    if (!(isfinite(v[i]) && ((v[i] == 0 && units_of[u].none) ||
                             (v[i] >= units_of[u].lo && v[i] <= units_of[u].hi))))
      return (long)i;
  }
  return -1;
}

/* A model's fingerprint: its name, and every tensor's name and shape and every layer's FLOPs
 * hashed (FNV-1a), so that a model changed under the same name is not taken for the old. */
static uint64_t fingerprint(const tr_model *m) {
  uint64_t h = 1469598103934665603ull;
#define MIX(p, n)                                                          \
  for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ ((const uint8_t *)(p))[i_]) * 1099511628211ull
  const char *name = tr_model_name(m);
  MIX(name, strlen(name));
  for (int i = 0; i < tr_model_tensor_count(m); i++) {
    const tr_tensor_info *t = tr_model_tensor(m, i);
    MIX(t->name, strlen(t->name));
    MIX(t->shape, sizeof t->shape);
  }
  for (int l = 0; l < tr_model_layer_count(m); l++) {
    const double f = tr_model_layer_flops(m, l);
    MIX(&f, sizeof f);
  }
#undef MIX
  return h;
}

void tr__costs_key(const tr_device *d, const char *what, char *out, size_t n) {
  const tr_device_info *i = tr_device_info_of(d);
  snprintf(out, n, "%s %s %s|%s", tr_device_kind_name(i->kind), i->model, i->isa, what);
}

void tr__costs_model_key(const tr_model *m, const tr_device *d, const char *what, char *out,
                         size_t n) {
  char key[384];
  snprintf(key, sizeof key, "%s|%016llx|%s", tr_model_name(m),
           (unsigned long long)fingerprint(m), what);
  tr__costs_key(d, key, out, n);
}

void tr__costs_entry_name(const tr_model *m, const tr_device *d, int batch, char *out, size_t n) {
  char what[32];
  snprintf(what, sizeof what, "b%d", batch);
  tr__costs_model_key(m, d, what, out, n);
}

const char *tr_plan_costs_default_path(void) {
  static char path[4096];
  const char *env = getenv("TROUPE_COSTS"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (env) snprintf(path, sizeof path, "%s", env);
  else if (xdg && *xdg) snprintf(path, sizeof path, "%s/troupe/costs.safetensors", xdg);
  else if (home && *home) snprintf(path, sizeof path, "%s/.cache/troupe/costs.safetensors", home);
  else path[0] = 0;
  return path;
}

/* The file's entries, or none (*ck NULL) when there is no file. A file that is there but is
 * not a costs file is refused (TR_EINVAL): it is not ours to replace. */
static int open_costs(const char *path, const char *named_by, tr_checkpoint **ck, char *err,
                      size_t n) {
  *ck = NULL;
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) return 0;
  char why[512];
  int rc = tr_checkpoint_open(ck, path, why, sizeof why);
  if (rc == 0) {
    const char *format = tr_checkpoint_meta(*ck, "format");
    if (format && strcmp(format, FORMAT) == 0) return 0;
    tr_checkpoint_close(*ck);
    *ck = NULL;
    snprintf(why, sizeof why, "%s: not a file of layer costs (no metadata format \"%s\")",
             path, FORMAT);
  }
  /* why begins with the path */
  snprintf(err, n, "costs file %s%s: give another path (%s)", why,
           rc == TR_EFORMAT ? " (not a file of layer costs)" : "", named_by);
  return TR_EINVAL;
}

/* The entry, when it is of this version, young enough, and every number one its unit allows:
 * 1 and v[rows × cols] filled. */
static int cached(tr_checkpoint *ck, const char *name, int rows, int cols,
                  const tr__costs_unit *units, double *v) {
  const char *version = tr_checkpoint_meta(ck, "troupe"), *when = tr_checkpoint_meta(ck, name);
  const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, name);
  if (!version || strcmp(version, TR_VERSION_STRING) || !when || !t) return 0;
  char *end;
  const long long at = strtoll(when, &end, 10), now = (long long)time(NULL);
  if (*end || at > now || now - at > TR_PLAN_COSTS_MAX_AGE) return 0;
  const int64_t shape[2] = {rows, cols};
  return tr_checkpoint_read(ck, name, TR_DTYPE_F64, 2, shape, v) == 0 &&
         outside(units, cols, v, (size_t)rows * (size_t)cols) < 0;
}

/* Whether an entry of another process's may be kept: F64 numbers, none negative or not
 * finite (what no unit allows; each is checked against its own when it is read). */
static bool keepable(const tr_checkpoint_tensor *t) {
  if (t->dtype != TR_DTYPE_F64) return false;
  for (size_t i = 0; i < t->nbytes / sizeof(double); i++) {
    double x;
    memcpy(&x, (const char *)t->data + i * sizeof x, sizeof x); /* the data may be unaligned */
    if (!isfinite(x) || x < 0) return false;
  }
  return true;
}

/* The file again with the new entry (the others of this version kept as they were). */
static int save(const char *path, tr_checkpoint *old, const char *name, int rows, int cols,
                const double *v, char *err, size_t n) {
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  int rc = w ? 0 : TR_ENOMEM;
  const int64_t shape[2] = {rows, cols};
  if (rc == 0) rc = tr_checkpoint_writer_add(w, name, TR_DTYPE_F64, 2, shape, v);
  char when[32];
  snprintf(when, sizeof when, "%lld", (long long)time(NULL));
  if (rc == 0) rc = tr_checkpoint_writer_put(w, name, when);
  const char *version = old ? tr_checkpoint_meta(old, "troupe") : NULL;
  const bool keep = version && strcmp(version, TR_VERSION_STRING) == 0;
  for (size_t i = 0; rc == 0 && keep && i < tr_checkpoint_count(old); i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(old, i);
    const char *at = tr_checkpoint_meta(old, t->name);
    if (strcmp(t->name, name) == 0 || !at || !keepable(t)) continue;
    rc = tr_checkpoint_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    if (rc == 0) rc = tr_checkpoint_writer_put(w, t->name, at);
  }
  if (rc == 0) rc = tr_checkpoint_writer_put(w, "format", FORMAT);
  if (rc == 0) rc = tr_checkpoint_writer_put(w, "troupe", TR_VERSION_STRING);
  if (rc == 0) rc = tr_checkpoint_writer_save(w, path);
  if (rc) snprintf(err, n, "costs '%s': %s", path, w ? tr_checkpoint_writer_error(w) : "out of memory");
  tr_checkpoint_writer_free(w);
  return rc;
}

/* mkdir -p of the default path's directory (a path given is the caller's to make). */
static void make_parent(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    (void)mkdir(dir, 0777);
    *p = '/';
  }
}

/* tr__costs_keep's measure: the figures already in hand. */
typedef struct in_hand_arg {
  const double *v;
  size_t count;
} in_hand_arg;

static int in_hand(void *arg, double *v, char *err, size_t n) {
  (void)err, (void)n;
  const in_hand_arg *g = arg;
  memcpy(v, g->v, g->count * sizeof *v);
  return 0;
}

/* measure(arg, v) at the machine's pace (costs_pace.c): where the probes around it ran more
 * than PACE_SLACK slower than the process's fastest, something else had the machine for a
 * while. Then the machine is probed until it is back at its pace (PACE_WAIT_S at most) and
 * measured once more, and the attempt at the faster pace is kept: a machine slow for longer
 * is the machine the user has. */
#define PACE_SLACK 0.25
#define PACE_WAIT_S 0.5
static bool at_its_pace(double pace) { return pace <= tr__pace_best() * (1 + PACE_SLACK); }

static int at_pace(int (*measure)(void *arg, double *v, char *err, size_t n), void *arg,
                   double *v, size_t count, char *err, size_t n) {
  (void)tr__pace_best(); /* a probe before any, to compare the first with */
  double before = tr__pace_probe();
  int rc = measure(arg, v, err, n);
  const double first = fmax(before, tr__pace_probe());
  if (rc || at_its_pace(first)) return rc;
  double *again = malloc(count * sizeof *again);
  if (again == NULL) return TR_ENOMEM;
  const uint64_t t0 = tr_now_ns();
  do before = tr__pace_probe(); /* the probes are the wait */
  while (!at_its_pace(before) && tr_now_ns() - t0 < PACE_WAIT_S * 1e9);
  rc = measure(arg, again, err, n);
  if (rc == 0 && fmax(before, tr__pace_probe()) < first)
    memcpy(v, again, count * sizeof *v);
  free(again);
  return rc;
}

/* The path whose file keeps nothing more in this process (its lock stayed held, or is not
 * troupe's where the path is the default one), said once. */
static void keep_none(const char *path, const char *why) {
  tr__file_keep_give_up(path, why, "the costs this process measures are not kept");
}

/* Entry `name` added to the file at `path` under its lock: the file read again, so that what
 * other processes added meanwhile is kept beside it. A path given (`given`) must take it:
 * a file that is no longer one of costs, or a lock file that is not troupe's, is its error;
 * the default path is a convenience. A lock held past LOCK_WAIT_MS keeps the entry out. */
static int add(const char *path, const char *named_by, bool given, const char *name, int rows,
               int cols, const double *v, char *err, size_t n) {
  if (tr__file_keep_none(path)) return 0;
  char *target = NULL, *lock = NULL, why[1024];
  int fd = -1, rc = tr_file_output_target(path, &target);
  if (rc) {
    snprintf(why, sizeof why, "%s '%s': %s", named_by, path,
             rc == TR_EIO ? strerror(ELOOP) : "out of memory");
  } else {
    rc = tr__file_keep_lock(target, named_by, path, LOCK_WAIT_MS, &fd, &lock, why, sizeof why);
  }
  free(target);
  if (rc) {
    if (given && rc == TR_EINVAL) return tr_errorf(err, n, rc, "costs: %s", why);
    keep_none(path, why);
    return 0;
  }
  tr_checkpoint *ck = NULL;
  rc = open_costs(path, named_by, &ck, err, n);
  if (rc == 0) rc = save(path, ck, name, rows, cols, v, err, n);
  tr_checkpoint_close(ck);
  tr__file_keep_unlock(fd, lock);
  return given ? rc : 0;
}

static int entry(const tr_plan_costs_config *c, const char *name, int rows, int cols,
                 const tr__costs_unit *units,
                 int (*measure)(void *arg, double *v, char *err, size_t n), void *arg,
                 double *v, bool *measured, char *err, size_t n) {
  const tr_plan_costs_config none = {0};
  if (c == NULL) c = &none;
  /* a path given (or named by $TROUPE_COSTS) must work; the default one is a convenience:
   * where it cannot be read or written, the costs are measured and nothing is kept */
  const bool env = getenv("TROUPE_COSTS") != NULL, given = c->path || env;
  const char *named_by = c->path ? "tr_plan_costs_config.path" : env ? "TROUPE_COSTS" : "costs";
  const char *path = c->path ? c->path : tr_plan_costs_default_path();
  const size_t count = (size_t)rows * (size_t)cols;
  *measured = false;
  tr_checkpoint *ck = NULL;
  bool keep = *path != 0;
  if (keep && !given) make_parent(path);
  if (keep) {
    int rc = open_costs(path, named_by, &ck, err, n);
    if (rc == 0) rc = tr_file_check_output(path, named_by, err, n);
    if (rc && given) {
      tr_checkpoint_close(ck);
      return rc;
    }
    keep = rc == 0;
  }
  const bool hit = ck && !c->remeasure && cached(ck, name, rows, cols, units, v);
  tr_checkpoint_close(ck);
  if (hit) return 0;
  /* what is not a timing (figures in hand; none, where only the file may answer) is not
   * probed for the machine's pace */
  const bool timed = measure != tr__costs_not_kept && measure != in_hand;
  int rc = timed ? at_pace(measure, arg, v, count, err, n) : measure(arg, v, err, n);
  if (rc) return rc;
  *measured = true;
  const long bad = outside(units, cols, v, count);
  if (bad >= 0 && measure == in_hand)
    return tr_errorf(err, n, TR_EINVAL, "costs: entry '%s': %g is not a cost (%s): not kept",
                     name, v[bad], units_of[units[bad % cols]].text);
  /* a measurement no machine makes (a clock too coarse to time a pass) is used, not kept */
  return keep && bad < 0 ? add(path, named_by, given, name, rows, cols, v, err, n) : 0;
}

int tr__costs_entry(const tr_plan_costs_config *c, const char *name, int rows, int cols,
                    const tr__costs_unit *units,
                    int (*measure)(void *arg, double *v, char *err, size_t n), void *arg,
                    double *v, char *err, size_t n) {
  bool measured;
  return entry(c, name, rows, cols, units, measure, arg, v, &measured, err, n);
}

/* A layer's four passes, each a time. */
static const tr__costs_unit passes_units[PASSES] = {TR__COSTS_SECONDS, TR__COSTS_SECONDS,
                                                    TR__COSTS_SECONDS, TR__COSTS_SECONDS};

typedef struct passes_arg {
  const tr_model *m;
  tr_device *d;
  int batch, reps;
} passes_arg;

static int measure_passes(void *arg, double *v, char *err, size_t n) {
  const passes_arg *a = arg;
  const int L = tr_model_layer_count(a->m);
  tr_layer_times *t = malloc((size_t)L * sizeof *t);
  if (t == NULL) return TR_ENOMEM;
  const int rc = tr_model_measure_passes(a->m, a->d, NULL, a->batch, a->reps, t, err, n);
  for (int l = 0; rc == 0 && l < L; l++) {
    v[l * PASSES] = t[l].forward, v[l * PASSES + 1] = t[l].backward;
    v[l * PASSES + 2] = t[l].backward_input, v[l * PASSES + 3] = t[l].backward_weight;
  }
  free(t);
  return rc;
}

int tr__costs_keep(const tr_plan_costs_config *c, const char *name, int rows, int cols,
                   const tr__costs_unit *units, const double *v, char *err, size_t n) {
  tr_plan_costs_config write = c ? *c : (tr_plan_costs_config){0};
  write.remeasure = 1;
  in_hand_arg g = {.v = v, .count = (size_t)rows * (size_t)cols};
  double *kept = malloc(g.count * sizeof *kept);
  if (kept == NULL) return TR_ENOMEM;
  const int rc = tr__costs_entry(&write, name, rows, cols, units, in_hand, &g, kept, err, n);
  free(kept);
  return rc;
}

/* layers_cached: the entry was not in the file. */
int tr__costs_not_kept(void *arg, double *v, char *err, size_t n) {
  (void)v;
  snprintf(err, n, "costs: the layers of %s are not in the file of costs "
           "(tr_plan_costs_config.layers_cached): troupe plan measures them", (const char *)arg);
  return TR_ESTATE;
}

int tr_plan_layer_times(const tr_model *m, tr_device *d, int batch, const tr_plan_costs_config *c,
                        tr_layer_times *times, bool *measured, char *err, size_t n) {
  if (!m || !d || !times || !measured)
    return tr_errorf(err, n, TR_EINVAL, "tr_plan_layer_times: %s is NULL",
                     !m ? "m" : !d ? "d" : !times ? "times" : "measured");
  if (batch < 1)
    return tr_errorf(err, n, TR_EINVAL, "tr_plan_layer_times: batch %d: give 1 or more samples",
                     batch);
  char scratch[512]; /* err NULL or of no size: nothing written (tr_base.h) */
  if (err == NULL || n == 0) err = scratch, n = sizeof scratch;
  const int L = tr_model_layer_count(m);
  char name[512];
  tr__costs_entry_name(m, d, batch, name, sizeof name);
  passes_arg a = {.m = m, .d = d, .batch = batch, .reps = c && c->reps > 0 ? c->reps : 5};
  const bool only = c && c->layers_cached;
  double *v = malloc((size_t)L * PASSES * sizeof *v);
  if (v == NULL) return TR_ENOMEM;
  const int rc = entry(c, name, L, PASSES, passes_units,
                       only ? tr__costs_not_kept : measure_passes, only ? (void *)name : &a, v,
                       measured, err, n);
  for (int l = 0; rc == 0 && l < L; l++)
    times[l] = (tr_layer_times){.forward = v[l * PASSES], .backward = v[l * PASSES + 1],
                                .backward_input = v[l * PASSES + 2],
                                .backward_weight = v[l * PASSES + 3]};
  free(v);
  return rc;
}

/* ---- a tensor group's members ----------------------------------------------------------------
 * A member's split layers run only beside their group (their collectives meet the other
 * members'), so the members are measured together, each from a thread of its own on its own
 * device with its comm: their times hold the collectives and the members' sharing of the
 * machine, as a run meets them. Member 0's are kept. */

typedef struct members {
  tr_model *const *m;
  tr_device_list *devs;
  tr_tensor_comm **comms;
  int T, batch, reps;
  tr_layer_times *times[TR_PLAN_MAX_DEVICES];
  int rc[TR_PLAN_MAX_DEVICES];
  char err[TR_PLAN_MAX_DEVICES][256];
} members;

typedef struct member_thread {
  members *g;
  int t;
} member_thread;

static void *member_run(void *arg) {
  member_thread *a = arg;
  members *g = a->g;
  const int t = a->t;
  g->rc[t] = tr_model_measure_passes(g->m[t], tr_device_list_at(g->devs, t), g->comms[t],
                                     g->batch, g->reps, g->times[t], g->err[t], sizeof g->err[t]);
  if (g->rc[t]) tr_tensor_comm_abort(g->comms[t]); /* the others stop waiting for it */
  return NULL;
}

static int measure_members(void *arg, double *v, char *err, size_t n) {
  members *g = arg;
  tr_device *devs[TR_PLAN_MAX_DEVICES];
  tr_tensor_comm *comms[TR_PLAN_MAX_DEVICES] = {0};
  const int L = tr_model_layer_count(g->m[0]);
  for (int t = 0; t < g->T; t++) devs[t] = tr_device_list_at(g->devs, t);
  int rc = tr_tensor_comms_open(devs, g->T, comms, err, n);
  g->comms = comms;
  for (int t = 0; t < g->T && rc == 0; t++)
    if (!(g->times[t] = malloc((size_t)L * sizeof *g->times[t]))) rc = TR_ENOMEM;
  pthread_t th[TR_PLAN_MAX_DEVICES];
  member_thread a[TR_PLAN_MAX_DEVICES];
  int started = 0;
  for (; rc == 0 && started < g->T; started++) {
    a[started] = (member_thread){.g = g, .t = started};
    if (pthread_create(&th[started], NULL, member_run, &a[started])) {
      for (int t = 0; t < started; t++) tr_tensor_comm_abort(comms[t]);
      rc = TR_ESYS;
      break;
    }
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < started && rc == 0; t++)
    if (g->rc[t]) {
      rc = g->rc[t];
      snprintf(err, n, "measuring tensor member %d of %d: %s", t, g->T, g->err[t]);
    }
  for (int l = 0; rc == 0 && l < L; l++) {
    const tr_layer_times *x = &g->times[0][l];
    v[l * PASSES] = x->forward, v[l * PASSES + 1] = x->backward;
    v[l * PASSES + 2] = x->backward_input, v[l * PASSES + 3] = x->backward_weight;
  }
  for (int t = 0; t < g->T; t++) free(g->times[t]);
  tr_tensor_comms_close(comms, g->T);
  return rc;
}

int tr__costs_member_times(tr_model *const *m, tr_device_list *devs, int T, int batch,
                           const tr_plan_costs_config *c, tr_layer_times *times, bool *measured,
                           char *err, size_t n) {
  *measured = false;
  if (T > tr_device_list_count(devs) || T >= TR_PLAN_MAX_DEVICES) return TR_EINVAL;
  const int L = tr_model_layer_count(m[0]);
  char name[560];
  tr__costs_entry_name(m[0], tr_device_list_at(devs, 0), batch, name, sizeof name);
  snprintf(name + strlen(name), sizeof name - strlen(name), "|member 0 of %d", T);
  members *g = calloc(1, sizeof *g);
  double *v = malloc((size_t)L * PASSES * sizeof *v);
  int rc = g && v ? 0 : TR_ENOMEM;
  const bool only = c && c->layers_cached;
  if (rc == 0) {
    *g = (members){.m = m, .devs = devs, .T = T, .batch = batch,
                   .reps = c && c->reps > 0 ? c->reps : 5};
    rc = entry(c, name, L, PASSES, passes_units, only ? tr__costs_not_kept : measure_members,
               only ? (void *)name : g, v, measured, err, n);
  }
  for (int l = 0; rc == 0 && l < L; l++)
    times[l] = (tr_layer_times){.forward = v[l * PASSES], .backward = v[l * PASSES + 1],
                                .backward_input = v[l * PASSES + 2],
                                .backward_weight = v[l * PASSES + 3]};
  free(g);
  free(v);
  return rc;
}

int tr__costs_cut(const tr_model *m, tr_device *d, const tr_job_config *c, int *cuts) {
  const int L = tr_model_layer_count(m);
  const int pieces = c->layout.stages * tr_schedule_chunks(c->layout.schedule, c->layout.chunks);
  const int parts = c->layout.replicas * (c->layout.microbatches > 0 ? c->layout.microbatches : 1);
  const int global = c->global_batch ? c->global_batch : tr_model_batch(m), batch = global / parts;
  if (pieces < 2 || pieces > L || pieces > TR__MAX_STAGES || batch < 1 || global % parts)
    return 0; /* one piece, or not a layout: tr_job_new says why */
  tr_layer_times *t = malloc((size_t)L * sizeof *t);
  double *cost = malloc((size_t)L * sizeof *cost);
  bool measured;
  int ok = t && cost && !tr_device_is_placeholder(d) &&
           tr_plan_layer_times(m, d, batch, NULL, t, &measured, NULL, 0) == 0;
  for (int l = 0; ok && l < L; l++) cost[l] = t[l].forward + t[l].backward;
  ok = ok && tr_model_balance_costs(m, cost, pieces, cuts) == 0;
  free(t);
  free(cost);
  return ok;
}
