/* costs_together.c — how much slower host devices compute when several compute at once
 * (planner.h: tr__costs_together), measured once per model, kind of device, micro-batch and
 * number of devices, and kept in the file of costs.
 *
 * Host devices are threads of one machine: k of them computing at once share its cores,
 * caches and memory bandwidth (and two vCPUs may be one core's hyperthreads), so each
 * computes slower than alone — the more so the more of the caches each one's layers fill.
 * The factor is measured as a run meets it: k threads, each its own device and a stage of the
 * whole model at the micro-batch, running forwards and backwards together, against the first
 * alone. The machine is shared and noisy (another process can take a core for a while), so a
 * single alone run and a single together run say more of the moment than of the devices: the
 * phases alternate — alone, together, alone, together — each the same work, and the factor is
 * the median of the pairs' ratios, and never below k over the CPUs the process may use. k
 * copies of the model: measured by troupe plan, read by a run's own prediction
 * (layers_cached), never measured before a run.
 */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "job_impl.h"
#include "planner.h"

/* Pairs of phases: at least MIN_PAIRS, then more while the measurement has taken less than
 * BUDGET seconds, at most MAX_PAIRS. A phase is at least PHASE seconds of rounds alone. */
enum { MIN_PAIRS = 5, MAX_PAIRS = 15 };
#define PHASE 0.04
#define BUDGET 1.0

/* A round is the forwards of SLOTS slots, then their backwards from the last, as micro-
 * batches go through a stage: what a backward reads was saved a while before (a backward
 * right after its forward reads a hot cache; models/measure.c's rounds are the same). */
enum { SLOTS = 2 };

typedef struct together {
  const tr_model *m;
  tr_device_list *devs;
  int k, batch;
  pthread_barrier_t bar;
  int rounds;  /* rounds per phase (thread 0's calibration alone) */
  int more;    /* another pair follows (thread 0 decides, between barriers) */
  int pairs;
  double alone[MAX_PAIRS];                          /* seconds per round */
  double with[MAX_PAIRS * TR_PLAN_MAX_DEVICES];     /* [pair × k + thread] */
  int rc[TR_PLAN_MAX_DEVICES];
} together;

typedef struct together_thread {
  together *t;
  int i;
} together_thread;

static int run_rounds(tr_stage *st, int rounds, double *per) {
  int rc = 0;
  const uint64_t t0 = tr_now_ns();
  for (int r = 0; r < rounds && rc == 0; r++) {
    for (int s = 0; s < SLOTS && rc == 0; s++) rc = tr_stage_forward(st, s);
    for (int s = SLOTS - 1; s >= 0 && rc == 0; s--) rc = tr_stage_backward(st, s, NULL);
    if (rc == 0) rc = tr_stream_synchronize(tr_stage_stream(st));
  }
  *per = (double)(tr_now_ns() - t0) / 1e9 / rounds;
  return rc;
}

/* Every thread meets every barrier, a failed one without working, so none waits forever. */
static void *together_run(void *arg) {
  together_thread *th = arg;
  together *t = th->t;
  const int i = th->i;
  tr_device *d = tr_device_list_at(t->devs, i);
  tr_stage_config c = tr_stage_defaults(t->m);
  c.batch = c.global_batch = t->batch;
  c.slots = SLOTS;
  tr_stage *st = NULL;
  int rc = tr_device_bind(d);
  if (rc == 0) rc = tr_stage_open(&st, t->m, d, &c, NULL, 0);
  if (rc == 0) tr_stage_set_samples(st, 0, 0);
  double per;
  if (rc == 0) rc = run_rounds(st, 1, &per); /* every device's memory touched once */
  pthread_barrier_wait(&t->bar);
  if (i == 0) { /* calibration, alone: enough rounds for PHASE seconds */
    t->rounds = 1;
    if (rc == 0) rc = run_rounds(st, 1, &per);
    if (rc == 0 && per > 0 && per < PHASE) t->rounds = (int)(PHASE / per) + 1;
    t->more = 1;
  }
  const uint64_t t0 = tr_now_ns();
  for (int p = 0;; p++) {
    pthread_barrier_wait(&t->bar);
    if (!t->more) break;
    if (i == 0 && rc == 0) rc = run_rounds(st, t->rounds, &t->alone[p]);
    pthread_barrier_wait(&t->bar);
    if (rc == 0) rc = run_rounds(st, t->rounds, &t->with[p * t->k + i]);
    if (i == 0) {
      t->pairs = p + 1;
      const double spent = (double)(tr_now_ns() - t0) / 1e9;
      t->more = t->pairs < MAX_PAIRS && (t->pairs < MIN_PAIRS || spent < BUDGET);
    }
  }
  t->rc[i] = rc;
  tr_stage_close(st);
  return NULL;
}

double tr__costs_together_ratio(const double *alone, const double *with, int pairs, int k) {
  double r[MAX_PAIRS];
  int n = 0;
  for (int p = 0; p < pairs && n < MAX_PAIRS; p++) {
    double sum = 0;
    for (int i = 0; i < k; i++) sum += with[p * k + i];
    if (alone[p] > 0) r[n++] = sum / k / alone[p];
  }
  if (n == 0) return 1;
  tr__sort_doubles(r, (size_t)n);
  const double median = n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
  return median > 1 ? median : 1; /* no faster than alone: what is measured below is noise */
}

static int measure_together(void *arg, double *v, char *err, size_t n) {
  together *t = arg;
  pthread_t th[TR_PLAN_MAX_DEVICES];
  together_thread a[TR_PLAN_MAX_DEVICES];
  if (pthread_barrier_init(&t->bar, NULL, (unsigned)t->k)) return TR_ESYS;
  int started = 0;
  for (; started < t->k; started++) {
    a[started] = (together_thread){.t = t, .i = started};
    if (pthread_create(&th[started], NULL, together_run, &a[started])) break;
  }
  if (started < t->k) abort(); /* the barrier would hold the others forever */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&t->bar);
  for (int i = 0; i < t->k; i++)
    if (t->rc[i]) {
      snprintf(err, n, "measuring %d devices at once: device %d: %s", t->k, i,
               tr_strerror(t->rc[i]));
      return t->rc[i];
    }
  v[0] = tr__costs_together_ratio(t->alone, t->with, t->pairs, t->k);
  return 0;
}

int tr__costs_together(const tr_model *m, tr_device_list *devs, int k, int batch,
                       const tr_plan_costs_config *c, double *slowdown, char *err, size_t n) {
  *slowdown = 1;
  if (k <= 1) return 0;
  if (k > tr_device_list_count(devs) || k >= TR_PLAN_MAX_DEVICES) return TR_EINVAL;
  char name[560];
  tr__costs_entry_name(m, tr_device_list_at(devs, 0), batch, name, sizeof name);
  snprintf(name + strlen(name), sizeof name - strlen(name), "|together %d", k);
  together *t = calloc(1, sizeof *t);
  if (t == NULL) return TR_ENOMEM;
  *t = (together){.m = m, .devs = devs, .k = k, .batch = batch};
  const bool only = c && c->layers_cached; /* k copies of the model: not before a run */
  int rc = tr__costs_entry(c, name, 1, 1, (const tr__costs_unit[]){TR__COSTS_FACTOR},
                           only ? tr__costs_not_kept : measure_together,
                           only ? (void *)name : t, slowdown, err, n);
  if (rc == TR_ESTATE && only) *slowdown = 1, rc = 0; /* not kept: none assumed */
  /* k threads on fewer CPUs than k cannot each have more than cpus / k of one: a factor
   * measured below that met a machine already loaded (alone slowed as much as together) */
  const int cpus = tr__plan_cpus();
  if (rc == 0 && k > cpus && *slowdown < (double)k / cpus) *slowdown = (double)k / cpus;
  free(t);
  return rc;
}

int tr__plan_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
