/* host_choose.c — the host GEMM's policy and its choices per shape (see host_choose.h).
 *
 * The choices are one table for the process, open addressing on the key. A GEMM reads it
 * without a lock: an entry's key is written before its state is published (release) and
 * read only after the state is seen (acquire). The first thread to meet a key claims its
 * entry under the mutex and decides (the file of choices, else measuring) with the mutex
 * released (and the file's lock too, while measuring); a thread meeting a claimed key waits on the condition until it is decided, so
 * a key is decided once, and every device uses the same row for it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_choices_file.h"
#include "host_choose.h"

#ifndef TR_GEMM_DEFAULT
#define TR_GEMM_DEFAULT "auto"
#endif

enum { SLOTS = 4096, ROUNDS = 5, ROUNDS_LONG = 3 };
enum { EMPTY, CLAIMED, DECIDED };

typedef struct key {
  int32_t opa, opb, N, K, batch, bf16;
} key;

typedef struct choice {
  key k;
  int lib;                      /* the row chosen */
  int measured;                 /* ns holds the medians */
  double ns[TR__HOST_LIBS_MAX]; /* each row's median, 0 when it was not a candidate */
} choice;

typedef struct slot {
  _Atomic int state;
  choice c; /* k written before the state leaves EMPTY, the rest before it is DECIDED */
} slot;

static slot slots[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t decided = PTHREAD_COND_INITIALIZER;
static atomic_long measurements;

/* The policy: -1 auto (fastest: every row a candidate for every product), else the pinned row
 * of tr__host_libs; which word set it. */
static _Atomic int pinned = -1;
static _Atomic int fastest;
static _Atomic int pinned_by_env;

/* The candidates: tr__host_libs, or a test's. */
static const tr__host_lib *const *libs = tr__host_libs;
static int nlibs = -1; /* -1: tr__host_nlibs (not a constant expression) */

static int count(void) { return nlibs < 0 ? tr__host_nlibs : nlibs; }

/* ---- the policy ----------------------------------------------------------------------------- */

int tr__host_gemm_policy_open(tr_device *d) {
  const char *env = getenv("TROUPE_GEMM"), *v = env && *env ? env : TR_GEMM_DEFAULT;
  int at = -2;
  if (!strcmp(v, "auto") || !strcmp(v, "fastest")) at = -1;
  for (int i = 0; i < tr__host_nlibs && at == -2; i++)
    if (!tr__host_libs[i]->fits && !strcmp(v, tr__host_libs[i]->name)) at = i;
  if (at == -2) {
    char names[128] = "auto, fastest";
    for (int i = 0; i < tr__host_nlibs; i++)
      if (!tr__host_libs[i]->fits)
        snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", tr__host_libs[i]->name);
    return tr__device_fail(d, TR_EINVAL, "%s=%s: not a GEMM library of this build (one of: %s)",
                           env && *env ? "TROUPE_GEMM" : "the build's option blas", v, names);
  }
  atomic_store(&pinned, at);
  atomic_store(&fastest, !strcmp(v, "fastest"));
  atomic_store(&pinned_by_env, env && *env);
  return 0;
}

int tr__host_gemm_pinned(void) { return atomic_load(&pinned); }

const char *tr__host_gemm_policy_name(void) {
  const int p = atomic_load(&pinned);
  return p >= 0 ? tr__host_libs[p]->name : atomic_load(&fastest) ? "fastest" : "auto";
}

void tr__host_gemm_policy_describe(char *out, size_t n) {
  const int p = atomic_load(&pinned);
  if (p >= 0) {
    snprintf(out, n, "%s, pinned by %s (the direct path below %d multiply-adds)",
             tr__host_libs[p]->name, atomic_load(&pinned_by_env) ? "TROUPE_GEMM" : "the build",
             TR__HOST_TINY_MNK);
    return;
  }
  char path[4096];
  tr__gemm_file_path(path, sizeof path);
  snprintf(out, n, "%s: the faster for each shape, measured on first use%s%s%s",
           atomic_load(&fastest) ? "fastest" : "auto",
           atomic_load(&fastest) ? "" : " (libraries whose rows vary only for op(A) = A^T)",
           path[0] ? ", kept in " : "", path);
}

/* ---- the table ------------------------------------------------------------------------------ */

static key key_of(const tr__gemm_args *g) {
  key k;
  memset(&k, 0, sizeof k);
  k.opa = g->opa, k.opb = g->opb, k.N = g->N, k.K = g->K, k.batch = g->batch, k.bf16 = g->bf16;
  return k;
}

static unsigned hash(const key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return (unsigned)(h ^ (h >> 32));
}

/* The entry of k, or the empty one where it would go (NULL: the table is full). Without the
 * mutex it may miss an entry being claimed; the caller then looks again under the mutex. */
static slot *probe(const key *k) {
  const unsigned h = hash(k);
  for (unsigned i = 0; i < SLOTS; i++) {
    slot *s = &slots[(h + i) % SLOTS];
    if (atomic_load_explicit(&s->state, memory_order_acquire) == EMPTY) return s;
    if (!memcmp(&s->c.k, k, sizeof *k)) return s;
  }
  return NULL;
}

/* Whether row i may serve g: it fits, and under auto, its rows do not vary where g's rows
 * may be a batch's (op(A) = A). */
static int may_serve(int i, const tr__gemm_args *g) {
  if (libs[i]->fits && !libs[i]->fits(g)) return 0;
  return !libs[i]->rows_vary || g->opa == TR_OP_T || atomic_load(&fastest);
}

/* The first row that may serve g: what serves a key when nothing better is known. */
static int first_fit(const tr__gemm_args *g) {
  for (int i = 0; i < count(); i++)
    if (may_serve(i, g)) return i;
  return 0;
}

/* The key's row, unless it cannot serve this product (the direct path, chosen at a smaller
 * M than this one's): then the first that can, the same for every such product. */
static int serving(int lib, const tr__gemm_args *g) {
  return may_serve(lib, g) ? lib : first_fit(g);
}

/* ---- deciding ------------------------------------------------------------------------------- */

/* The floats C spans. */
static size_t c_span(const tr__gemm_args *g) {
  return (size_t)((int64_t)(g->batch - 1) * g->sc + (int64_t)(g->M - 1) * g->ldc + g->N);
}

/* Each candidate timed on g's buffers: a round untimed (plans made, caches warmed), then
 * rounds of one call each, the order turned every round so that none always follows the
 * same; C is restored before every call when beta reads it, and at the end. The medians go
 * to ns (by row); the fastest to *best.
 *
 * A call is timed by the calling thread's CPU time: the libraries run on it alone (held to
 * one thread), and a call that lost its CPU for a while to another thread (a tensor group's
 * members timing their shapes at once, more devices than CPUs, another process) is not
 * charged for it. On the wall clock, one library's rounds could meet those losses and
 * another's not: a choice measured that way once served mlp's row-parallel forward by the
 * library 2x slower. */
static int measure(tr_stream *s, const tr__gemm_args *g, const int *cand, int nc,
                   tr__gemm_run_fn run, double *ns, int *best) {
  const size_t span = c_span(g);
  float *save = NULL;
  if (g->beta != 0.0f) {
    if (!(save = tr__host_scratch(s, TR__SCRATCH_SAVE, span * sizeof(float))))
      return tr__device_fail(s->dev, TR_ENOMEM, "gemm: %zu floats to keep C while timing the "
                             "libraries: out of memory", span);
    memcpy(save, g->C, span * sizeof(float));
  }
  double t[TR__HOST_LIBS_MAX][ROUNDS], first = 0;
  int rounds = ROUNDS, rc = 0;
  for (int r = -1; r < rounds && !rc; r++)
    for (int j = 0; j < nc && !rc; j++) {
      const int c = cand[(j + (r < 0 ? 0 : r)) % nc];
      if (save) memcpy(g->C, save, span * sizeof(float));
      const uint64_t t0 = tr__thread_cpu_ns();
      rc = run(s, libs[c], c, g);
      const double dt = (double)(tr__thread_cpu_ns() - t0);
      if (r < 0) first += dt;
      else t[c][r] = dt;
      if (r < 0 && j == nc - 1 && first > 50e6) rounds = ROUNDS_LONG; /* a long product */
    }
  if (save) memcpy(g->C, save, span * sizeof(float));
  if (rc) return rc;
  *best = cand[0];
  for (int j = 0; j < nc; j++) {
    const int c = cand[j];
    tr__sort_doubles(t[c], (size_t)rounds);
    ns[c] = t[c][rounds / 2];
    if (ns[c] < ns[*best]) *best = c;
  }
  atomic_fetch_add(&measurements, 1);
  return 0;
}

/* What a line of the file is for: this machine and these candidates, each with the
 * instruction set it runs on (OPENBLAS_CORETYPE or ONEDNN_MAX_CPU_ISA changes what is
 * fastest) and its label (a library's version, troupe's own kernels' revision: an upgrade
 * measures again); and the key. "cpu|": timed by CPU time (lines timed by the wall clock
 * before could have been wrong, and are measured again). */
static void signature(const tr_device *d, char *out, size_t n) {
  snprintf(out, n, "%s|cpu|%s", d->info.model, atomic_load(&fastest) ? "fastest|" : "");
  for (int i = 0; i < count(); i++) {
    tr__host_lib_info in = {0}; /* the build's rows described once; a test's, each time */
    if (libs == tr__host_libs) in = *tr__host_lib_info_of(i);
    else libs[i]->describe(&in);
    snprintf(out + strlen(out), n - strlen(out), "%s%s:%s (%s)", i ? "," : "", libs[i]->name,
             in.isa, in.label);
  }
  for (char *p = out; *p; p++)
    if (*p == '\t' || *p == '\n') *p = ' ';
}

static void key_text(const key *k, char *out, size_t n) {
  snprintf(out, n, "%c%c N%d K%d x%d %s", k->opa ? 'T' : 'N', k->opb ? 'T' : 'N', k->N, k->K,
           k->batch, k->bf16 ? "bf16" : "f32");
}

/* The row for k: the file's, else measured among the rows that fit g (and then added). */
static int decide(tr_stream *s, const tr__gemm_args *g, tr__gemm_run_fn run, choice *e) {
  int cand[TR__HOST_LIBS_MAX], nc = 0;
  for (int i = 0; i < count(); i++)
    if (may_serve(i, g)) cand[nc++] = i;
  e->lib = nc ? cand[0] : 0;
  if (nc < 2) return 0;
  char path[4096], sig[1024], kt[96], name[32];
  tr__gemm_file_path(path, sizeof path);
  signature(s->dev, sig, sizeof sig);
  key_text(&e->k, kt, sizeof kt);
  /* the file's choice: as this process first read it, else read again under its lock; else
   * measured without it, then added unless another process added one meanwhile, which is
   * taken instead */
  if (tr__gemm_file_known(path, sig, kt, name, sizeof name))
    for (int j = 0; j < nc; j++)
      if (!strcmp(libs[cand[j]]->name, name)) return e->lib = cand[j], 0;
  for (int pass = 0; pass < 2; pass++) {
    tr__gemm_file_held held;
    const int locked = tr__gemm_file_lock(path, &held) == 0;
    if (locked && tr__gemm_file_find(path, sig, kt, name, sizeof name))
      for (int j = 0; j < nc; j++)
        if (!strcmp(libs[cand[j]]->name, name)) {
          e->lib = cand[j];
          tr__gemm_file_unlock(&held);
          return 0;
        }
    if (pass == 1) {
      if (locked) {
        char line[2048];
        snprintf(line, sizeof line, "%s\t%s\t%s\t", sig, kt, libs[e->lib]->name);
        for (int j = 0; j < nc; j++)
          snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s=%.0f", j ? " " : "",
                   libs[cand[j]]->name, e->ns[cand[j]]);
        tr__gemm_file_add(path, line);
      }
      tr__gemm_file_unlock(&held);
      break;
    }
    tr__gemm_file_unlock(&held);
    const int rc = measure(s, g, cand, nc, run, e->ns, &e->lib);
    if (rc) return rc;
    e->measured = 1;
  }
  return 0;
}

/* Which row the rule of a pinned library gives g: the direct path for the smallest products
 * (a quarter of them for NT ones, which it begins by copying B transposed), else the pin. */
static int rule(const tr__gemm_args *g, int pin) {
  const int64_t mnk = (int64_t)g->M * g->N * g->K;
  const int nt = g->opa == TR_OP_N && g->opb == TR_OP_T;
  if (mnk > (nt ? TR__HOST_TINY_MNK / 4 : TR__HOST_TINY_MNK)) return pin;
  for (int i = 0; i < tr__host_nlibs; i++)
    if (tr__host_libs[i] == &tr__host_tiny) return i;
  return pin;
}

int tr__host_gemm_choose(tr_stream *s, const tr__gemm_args *g, tr__gemm_run_fn run,
                         const tr__host_lib **row, int *i) {
  const int pin = atomic_load(&pinned);
  if (pin >= 0 && libs == tr__host_libs) {
    *i = rule(g, pin);
    *row = tr__host_libs[*i];
    return 0;
  }
  const key k = key_of(g);
  slot *e = probe(&k);
  if (e && atomic_load_explicit(&e->state, memory_order_acquire) == DECIDED) {
    *i = serving(e->c.lib, g), *row = libs[*i];
    return 0;
  }
  pthread_mutex_lock(&mu);
  for (;;) {
    e = probe(&k);
    const int st = e ? atomic_load_explicit(&e->state, memory_order_acquire) : EMPTY;
    if (!e || st == DECIDED) break;
    if (st == EMPTY) {
      e->c.k = k;
      atomic_store_explicit(&e->state, CLAIMED, memory_order_release);
      break;
    }
    pthread_cond_wait(&decided, &mu);
  }
  pthread_mutex_unlock(&mu);
  if (!e) { /* every entry taken: the first that fits, every time */
    *i = first_fit(g), *row = libs[*i];
    return 0;
  }
  int rc = 0;
  if (atomic_load_explicit(&e->state, memory_order_acquire) == CLAIMED) {
    choice mine = {.k = k}; /* decided apart: readers see only what is published */
    rc = decide(s, g, run, &mine);
    pthread_mutex_lock(&mu);
    e->c.lib = mine.lib, e->c.measured = mine.measured; /* not k: readers compare it now */
    memcpy(e->c.ns, mine.ns, sizeof mine.ns);
    atomic_store_explicit(&e->state, DECIDED, memory_order_release);
    pthread_cond_broadcast(&decided);
    pthread_mutex_unlock(&mu);
  }
  *i = serving(e->c.lib, g), *row = libs[*i];
  return rc;
}

/* ---- what was chosen ------------------------------------------------------------------------ */

static const slot *decided_slot(const key *k) {
  const slot *e = probe(k);
  return e && atomic_load_explicit(&e->state, memory_order_acquire) == DECIDED ? e : NULL;
}

const char *tr__host_gemm_served(tr_op opa, tr_op opb, int M, int N, int K, int batch, int bf16) {
  const tr__gemm_args g = {.opa = opa, .opb = opb, .M = M, .N = N, .K = K,
                           .batch = batch < 1 ? 1 : batch, .bf16 = bf16};
  const int pin = atomic_load(&pinned);
  if (pin >= 0 && libs == tr__host_libs) return tr__host_libs[rule(&g, pin)]->name;
  const key k = key_of(&g);
  const slot *e = decided_slot(&k);
  return e ? libs[serving(e->c.lib, &g)]->name : NULL;
}

int tr__host_gemm_timings(tr_op opa, tr_op opb, int N, int K, int batch, int bf16,
                          double ns[TR__HOST_LIBS_MAX]) {
  const tr__gemm_args g = {.opa = opa, .opb = opb, .N = N, .K = K, .batch = batch < 1 ? 1 : batch,
                           .bf16 = bf16};
  const key k = key_of(&g);
  const slot *e = decided_slot(&k);
  if (!e || !e->c.measured) return 0;
  memcpy(ns, e->c.ns, sizeof e->c.ns);
  return 1;
}

/* ---- for tests ------------------------------------------------------------------------------ */

void tr__host_gemm_forget(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++) atomic_store(&slots[i].state, EMPTY);
  pthread_mutex_unlock(&mu);
}

void tr__host_gemm_test_libs(const tr__host_lib *const *rows, int n) {
  pthread_mutex_lock(&mu);
  libs = rows ? rows : tr__host_libs;
  nlibs = rows ? (n < TR__HOST_LIBS_MAX ? n : TR__HOST_LIBS_MAX) : -1;
  pthread_mutex_unlock(&mu);
  tr__host_gemm_forget();
}

long tr__host_gemm_measurements(void) { return atomic_load(&measurements); }
