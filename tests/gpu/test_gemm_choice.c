/* test_gemm_choice.c — the host GEMM's library chosen per shape (gpu/host/host_choose.h):
 * the faster of two candidates wins, a key is measured once and its choice reused, threads
 * meeting a key at once get one answer, TROUPE_GEMM pins (and a bad value is refused naming
 * it), the file of choices is read back by a fresh process without measuring, and a
 * library is timed by its own thread's CPU time (time lost to other threads is not its).
 *
 * The candidates are fakes with known costs (the test hook tr__host_gemm_test_libs), each
 * writing its own mark into C, so the result says which one served a call. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "host/host_blas.h"
#include "host/host_choose.h"
#include "op_harness.h"
#include "troupe.h"

/* ---- the fakes: C = beta C + mark, the slow one after computing a while ------------------ */

static _Atomic int calls[2];

static double cpu_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* `us` microseconds of the thread's own CPU time, as a library's arithmetic takes it (a
 * machine busy with other tests stretches it on the wall clock, not here) */
static void compute(long us) {
  const double end = cpu_us() + (double)us;
  while (cpu_us() < end) {
  }
}

static int fake(const tr__gemm_args *g, float mark, long busy_us, int which) {
  calls[which]++;
  compute(busy_us);
  for (int b = 0; b < g->batch; b++)
    for (int i = 0; i < g->M; i++)
      for (int j = 0; j < g->N; j++) {
        float *c = g->C + b * g->sc + (ptrdiff_t)i * g->ldc + j;
        *c = g->beta * *c + mark;
      }
  return 0;
}
static int slow_gemm(tr_stream *s, void *st, const tr__gemm_args *g) {
  (void)s, (void)st;
  return fake(g, 1.0f, 2000, 0);
}
static int fast_gemm(tr_stream *s, void *st, const tr__gemm_args *g) {
  (void)s, (void)st;
  return fake(g, 2.0f, 0, 1);
}
static void fake_describe(tr__host_lib_info *out) {
  snprintf(out->label, sizeof out->label, "fake");
  snprintf(out->isa, sizeof out->isa, "none");
  out->bf16 = TR_BF16_CONVERTED;
}
static const tr__host_lib slow = {.name = "slow", .describe = fake_describe, .gemm = slow_gemm};
static const tr__host_lib fast = {.name = "fast", .describe = fake_describe, .gemm = fast_gemm};
/* the slow one first: a tie, or a chooser that took the first, would pick it */
static const tr__host_lib *const fakes[] = {&slow, &fast};
/* as fast as `fast`, but each call loses its CPU for 5 ms (another thread had it) */
static int preempted_gemm(tr_stream *s, void *st, const tr__gemm_args *g) {
  (void)s, (void)st;
  nanosleep(&(struct timespec){0, 5000 * 1000}, NULL);
  return fake(g, 5.0f, 0, 1);
}
static const tr__host_lib preempted = {.name = "preempted", .describe = fake_describe,
                                       .gemm = preempted_gemm};
/* fast, but only for products of at most 8x8x8 */
static int small_gemm(tr_stream *s, void *st, const tr__gemm_args *g) {
  (void)s, (void)st;
  return fake(g, 3.0f, 0, 1);
}
static int small_fits(const tr__gemm_args *g) { return g->M * g->N * g->K <= 8 * 8 * 8; }
static const tr__host_lib small = {.name = "small", .describe = fake_describe, .gemm = small_gemm,
                                   .fits = small_fits};

enum { M = 8, N = 8, K = 8 };

/* C (M x N) = beta C + op on dev (bound to the calling thread), N and K as given. */
static float *gemm_on(tr_device *dev, float *C, int m, int n, int k, float beta) {
  static float A[64 * 64], B[64 * 64];
  assert_int_equal(tr_gemm(tr_device_stream(dev), TR_OP_N, TR_OP_N, m, n, k, 1.0f, A, k, B, n,
                           beta, C, n),
                   0);
  return C;
}

static tr_device_list *open_host(const char *spec) {
  tr_device_list *l = NULL;
  char err[256];
  const int rc = tr_device_list_open(&l, spec, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return l;
}

/* One M x N x K product on a fresh host:1 among the fake libraries, into C. */
static void fake_product(float *C) {
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  gemm_on(d, C, M, N, K, 0.0f);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
}

static char dir[256];

/* The tests' file of choices, in a folder of their own. */
static int use_file(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/choices", dir);
  return setenv("TROUPE_GEMM_CHOICES", path, 1);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/troupe-gemm-choice-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  unsetenv("TROUPE_GEMM");
  return use_file();
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void the_faster_of_two_candidates_serves_the_shape(void **state) {
  (void)state;
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  const long before = tr__host_gemm_measurements();
  float C[M * N];
  for (int i = 0; i < M * N; i++) C[i] = 10.0f;
  gemm_on(d, C, M, N, K, 1.0f);
  /* timed on C, then C restored: the result is the fast one's, once */
  for (int i = 0; i < M * N; i++) assert_float_equal(C[i], 12.0f, 0);
  assert_int_equal(tr__host_gemm_measurements(), before + 1);
  assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, M, N, K, 1, 0), "fast");
  double ns[TR__HOST_LIBS_MAX];
  assert_true(tr__host_gemm_timings(TR_OP_N, TR_OP_N, N, K, 1, 0, ns));
  assert_true(ns[0] > ns[1] && ns[0] >= 2e6);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
}

/* A library's time is its own arithmetic: one whose calls lost their CPU to other threads
 * (5 ms each, more than the other's 2 ms of computing) is still the faster. */
static void time_lost_to_other_threads_is_not_a_librarys(void **state) {
  (void)state;
  const tr__host_lib *const rows[] = {&slow, &preempted};
  tr__host_gemm_test_libs(rows, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  float C[M * N] = {0};
  gemm_on(d, C, M, N, K, 0.0f);
  assert_float_equal(C[0], 5.0f, 0);
  assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, M, N, K, 1, 0), "preempted");
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
}

static void a_key_is_measured_once_and_its_choice_reused(void **state) {
  (void)state;
  setenv("TROUPE_GEMM_CHOICES", "", 1); /* no file: the first test's choice is in it */
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  const long before = tr__host_gemm_measurements();
  float C[64 * 64];
  gemm_on(d, C, M, N, K, 0.0f);
  const int slow_calls = calls[0];
  for (int m = 1; m <= 32; m++) { /* M is no part of the key: one choice for every M */
    gemm_on(d, C, m, N, K, 0.0f);
    for (int i = 0; i < m * N; i++) assert_float_equal(C[i], 2.0f, 0);
  }
  assert_int_equal(calls[0], slow_calls);
  assert_int_equal(tr__host_gemm_measurements(), before + 1);
  gemm_on(d, C, M, N + 1, K, 0.0f); /* another N: another key */
  assert_int_equal(tr__host_gemm_measurements(), before + 2);
  gemm_on(d, C, M, N, K + 1, 0.0f); /* another K too */
  assert_int_equal(tr__host_gemm_measurements(), before + 3);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  use_file();
}

/* A row that serves only small products, chosen at a small M, leaves a larger M of the same
 * key to the first row that fits it, without measuring again. */
static void a_row_that_cannot_serve_a_larger_m_gives_it_to_the_first_that_can(void **state) {
  (void)state;
  setenv("TROUPE_GEMM_CHOICES", "", 1);
  const tr__host_lib *const rows[] = {&slow, &small};
  tr__host_gemm_test_libs(rows, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  const long before = tr__host_gemm_measurements();
  float C[64 * 64];
  gemm_on(d, C, M, N, K, 0.0f);
  assert_float_equal(C[0], 3.0f, 0);
  assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, M, N, K, 1, 0), "small");
  gemm_on(d, C, 2 * M, N, K, 0.0f);
  for (int i = 0; i < 2 * M * N; i++) assert_float_equal(C[i], 1.0f, 0);
  assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, 2 * M, N, K, 1, 0), "slow");
  gemm_on(d, C, M / 2, N, K, 0.0f);
  assert_float_equal(C[0], 3.0f, 0);
  assert_int_equal(tr__host_gemm_measurements(), before + 1);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  use_file();
}

/* A library whose rows vary with the rows around them serves under auto only products
 * whose op(A) is A transposed (its rows are never a batch's), and under fastest any. */
static int vary_gemm(tr_stream *s, void *st, const tr__gemm_args *g) {
  (void)s, (void)st;
  return fake(g, 4.0f, 0, 1);
}
static const tr__host_lib vary = {.name = "vary", .describe = fake_describe, .gemm = vary_gemm,
                                  .rows_vary = 1};

static void rows_that_vary_serve_only_weight_gradients_unless_fastest(void **state) {
  (void)state;
  setenv("TROUPE_GEMM_CHOICES", "", 1);
  const tr__host_lib *const rows[] = {&slow, &vary};
  tr__host_gemm_test_libs(rows, 2);
  for (int f = 0; f < 2; f++) {
    setenv("TROUPE_GEMM", f ? "fastest" : "auto", 1);
    tr_device_list *l = open_host("host:1");
    tr_device *d = tr_device_list_at(l, 0);
    tr_device_bind(d);
    static float A[64 * 64], B[64 * 64], C[64 * 64];
    for (int t = 0; t < 2; t++) {
      const tr_op opa = (tr_op)t;
      assert_int_equal(tr_gemm(tr_device_stream(d), opa, TR_OP_N, M, N, K + f, 1.0f, A,
                               opa == TR_OP_N ? K + f : M, B, N, 0.0f, C, N),
                       0);
      assert_float_equal(C[0], opa == TR_OP_T || f ? 4.0f : 1.0f, 0);
    }
    tr_device_list_close(l);
  }
  unsetenv("TROUPE_GEMM");
  tr__host_gemm_test_libs(NULL, 0);
  use_file();
}

/* ---- threads at once ------------------------------------------------------------------------ */

enum { THREADS = 4, ROUNDS = 20 };

typedef struct racer {
  tr_device *dev;
  pthread_barrier_t *go;
  float first[ROUNDS]; /* C[0] after each round's call */
} racer;

static void *race(void *arg) {
  racer *r = arg;
  tr_device_bind(r->dev);
  for (int k = 0; k < ROUNDS; k++) {
    float C[M * N];
    pthread_barrier_wait(r->go);
    gemm_on(r->dev, C, M, N, 16 + k, 0.0f); /* every round a key no thread has met */
    r->first[k] = C[0];
  }
  return NULL;
}

static void threads_meeting_a_key_at_once_get_one_answer(void **state) {
  (void)state;
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:4");
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS);
  racer rs[THREADS];
  pthread_t t[THREADS];
  const long before = tr__host_gemm_measurements();
  for (int i = 0; i < THREADS; i++) {
    rs[i] = (racer){.dev = tr_device_list_at(l, i), .go = &go};
    assert_int_equal(pthread_create(&t[i], NULL, race, &rs[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&go);
  for (int k = 0; k < ROUNDS; k++)
    for (int i = 0; i < THREADS; i++) assert_float_equal(rs[i].first[k], rs[0].first[k], 0);
  assert_int_equal(tr__host_gemm_measurements(), before + ROUNDS); /* once per key */
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
}

/* ---- the pin -------------------------------------------------------------------------------- */

static void troupe_gemm_pins_a_library_and_a_bad_value_is_refused(void **state) {
  (void)state;
  tr_device_list *l = NULL;
  char err[256] = "";
  setenv("TROUPE_GEMM", "quickest", 1);
  assert_int_not_equal(tr_device_list_open(&l, "host:1", err, sizeof err), 0);
  assert_non_null(strstr(err, "TROUPE_GEMM=quickest"));
  assert_non_null(strstr(err, "auto, fastest, "));
  const char *pins[] = {"openblas", "onednn"};
  for (size_t p = 0; p < sizeof pins / sizeof pins[0]; p++) {
    setenv("TROUPE_GEMM", pins[p], 1);
    if (tr_device_list_open(&l, "host:1", err, sizeof err)) {
      assert_string_equal(pins[p], "onednn"); /* a build without libdnnl */
      assert_non_null(strstr(err, "TROUPE_GEMM=onednn"));
      continue;
    }
    tr_device *d = tr_device_list_at(l, 0);
    tr_device_bind(d);
    const long before = tr__host_gemm_measurements();
    static float C[128 * 128];
    gemm_on(d, C, 64, 64, 64, 0.0f);
    gemm_on(d, C, 128, 128, 64, 0.0f);
    assert_int_equal(tr__host_gemm_measurements(), before);
    /* the smallest products stay on the direct path, as they did with one library */
    assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, 64, 64, 64, 1, 0), "tiny");
    assert_string_equal(tr__host_gemm_served(TR_OP_N, TR_OP_N, 128, 128, 64, 1, 0), pins[p]);
    char policy[256];
    tr__host_gemm_policy_describe(policy, sizeof policy);
    assert_non_null(strstr(policy, pins[p]));
    assert_non_null(strstr(policy, "TROUPE_GEMM"));
    tr_device_list_close(l);
  }
  unsetenv("TROUPE_GEMM");
  l = open_host("host:1");
  tr_device_list_close(l);
  if (!strcmp(TR_GEMM_DEFAULT, "auto")) assert_int_equal(tr__host_gemm_pinned(), -1);
  else assert_true(tr__host_gemm_pinned() >= 0); /* a build pinned by meson's `blas` */
}

/* ---- every library computes ---------------------------------------------------------------- */

/* g's C against float64 sums of its A and B (floats), from C0 as it was before. */
static void check_products(const char *lib, const tr__gemm_args *g, const float *C0) {
  const float *A = g->A, *B = g->B;
  double *ref = malloc(sizeof(double) * (size_t)g->M * (size_t)g->N);
  float *got = malloc(sizeof(float) * (size_t)g->M * (size_t)g->N);
  assert_true(ref && got);
  for (int b = 0; b < g->batch; b++) {
    for (int i = 0; i < g->M; i++)
      for (int j = 0; j < g->N; j++) {
        double sum = 0;
        for (int k = 0; k < g->K; k++) {
          const float a = g->opa ? A[b * g->sa + (int64_t)k * g->lda + i] : A[b * g->sa + (int64_t)i * g->lda + k];
          const float bb = g->opb ? B[b * g->sb + (int64_t)j * g->ldb + k] : B[b * g->sb + (int64_t)k * g->ldb + j];
          sum += (double)a * bb;
        }
        const int64_t at = b * g->sc + (int64_t)i * g->ldc + j;
        ref[i * g->N + j] = g->alpha * sum + g->beta * (double)C0[at];
        got[i * g->N + j] = g->C[at];
      }
    char what[96];
    snprintf(what, sizeof what, "%s %c%c batch %d", lib, g->opa ? 'T' : 'N', g->opb ? 'T' : 'N', b);
    assert_true(th_check(what, got, ref, (size_t)g->M * g->N, TH_TOL_GEMM));
  }
  free(ref), free(got);
}

/* Every library of the build, pinned, and auto: each transpose, leading dimensions padded,
 * alpha and beta, a strided batch, fp32 and bf16, against float64 (th_check). */
static void every_library_matches_float64_in_every_form(void **state) {
  (void)state;
  enum { BM = 70, BN = 90, BK = 80, PAD = 3, BATCH = 2 };
  const int lda = 96, ldb = 96, ldc = BN + PAD; /* >= every op's columns, + PAD */
  const int64_t sa = (int64_t)96 * lda, sb = (int64_t)96 * ldb, sc = (int64_t)BM * ldc;
  float *A = malloc(sizeof(float) * (size_t)sa * BATCH), *B = malloc(sizeof(float) * (size_t)sb * BATCH);
  float *C = malloc(sizeof(float) * (size_t)sc * BATCH), *C0 = malloc(sizeof(float) * (size_t)sc * BATCH);
  tr_bf16 *A16 = malloc(2 * (size_t)sa * BATCH), *B16 = malloc(2 * (size_t)sb * BATCH);
  assert_true(A && B && C && C0 && A16 && B16);
  th_rng r = th_rng_for(7);
  th_fill_normal(&r, A, (size_t)sa * BATCH, 1);
  th_fill_normal(&r, B, (size_t)sb * BATCH, 1);
  th_fill_normal(&r, C0, (size_t)sc * BATCH, 1);
  for (int64_t i = 0; i < sa * BATCH; i++) { /* rounded to bf16 and back: the bf16 values */
    uint32_t u;
    memcpy(&u, &A[i], 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&A[i], &u, 4);
    A16[i] = (tr_bf16)(u >> 16);
  }
  for (int64_t i = 0; i < sb * BATCH; i++) {
    uint32_t u;
    memcpy(&u, &B[i], 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&B[i], &u, 4);
    B16[i] = (tr_bf16)(u >> 16);
  }
  const char *pins[] = {"openblas", "onednn", "auto"};
  for (size_t p = 0; p < sizeof pins / sizeof pins[0]; p++) {
    setenv("TROUPE_GEMM", pins[p], 1);
    tr_device_list *l = NULL;
    char err[256];
    if (tr_device_list_open(&l, "host:1", err, sizeof err)) {
      assert_string_equal(pins[p], "onednn"); /* a build without libdnnl */
      continue;
    }
    tr_device *d = tr_device_list_at(l, 0);
    tr_device_bind(d);
    tr_stream *s = tr_device_stream(d);
    for (int t = 0; t < 8; t++) {
      const tr_op opa = (tr_op)(t & 1), opb = (tr_op)((t >> 1) & 1);
      const int bf16 = t >> 2;
      const float alpha = -1.5f, beta = 0.5f;
      memcpy(C, C0, sizeof(float) * (size_t)sc * BATCH);
      const int rc = bf16 ? tr_gemm_batched_bf16(s, opa, opb, BM, BN, BK, alpha, A16, lda, sa, B16,
                                                 ldb, sb, beta, C, ldc, sc, BATCH)
                          : tr_gemm_batched(s, opa, opb, BM, BN, BK, alpha, A, lda, sa, B, ldb, sb,
                                            beta, C, ldc, sc, BATCH);
      assert_int_equal(rc, 0);
      char what[64];
      snprintf(what, sizeof what, "%s %s", pins[p], bf16 ? "bf16" : "fp32");
      const tr__gemm_args g = {.opa = opa, .opb = opb, .M = BM, .N = BN, .K = BK, .alpha = alpha,
                               .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb,
                               .ldc = ldc, .sa = sa, .sb = sb, .sc = sc, .batch = BATCH};
      check_products(what, &g, C0);
    }
    tr_device_list_close(l);
  }
  unsetenv("TROUPE_GEMM");
  free(A), free(B), free(C), free(C0), free(A16), free(B16);
}

/* The row of the build's table of that name, or -1. */
static int row_named(const char *name) {
  for (int i = 0; i < tr__host_nlibs; i++)
    if (!strcmp(tr__host_libs[i]->name, name)) return i;
  return -1;
}

/* oneDNN on B transposed (host_onednn_bt.c) serves the forms whose B is not transposed, as
 * exactly as the others. Called directly: it serves a shape only where it measures fastest. */
static void onednn_on_b_transposed_matches_float64(void **state) {
  (void)state;
  const int row = row_named("onednn-bt");
  if (row < 0) skip(); /* a build without libdnnl */
  const tr__host_lib *bt = tr__host_libs[row];
  enum { BM = 33, BN = 70, BK = 45, BATCH = 2 };
  const int ld = 80; /* >= every op's columns */
  const int64_t stride = (int64_t)80 * ld;
  float *A = malloc(sizeof(float) * (size_t)stride * BATCH), *B = malloc(sizeof(float) * (size_t)stride * BATCH);
  float *C = malloc(sizeof(float) * (size_t)stride * BATCH), *C0 = malloc(sizeof(float) * (size_t)stride * BATCH);
  assert_true(A && B && C && C0);
  th_rng r = th_rng_for(11);
  th_fill_normal(&r, A, (size_t)stride * BATCH, 1);
  th_fill_normal(&r, B, (size_t)stride * BATCH, 1);
  th_fill_normal(&r, C0, (size_t)stride * BATCH, 1);
  tr_device_list *l = NULL;
  char err[256];
  assert_int_equal(tr_device_list_open(&l, "host:1", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  for (int t = 0; t < 4; t++) {
    const tr_op opa = (tr_op)(t & 1);
    const int batch = t < 2 ? 1 : BATCH;
    tr__gemm_args g = {.opa = opa, .opb = TR_OP_N, .M = BM, .N = BN, .K = BK, .alpha = 0.75f,
                       .beta = t & 1 ? 0.0f : -0.5f, .A = A, .B = B, .C = C, .lda = ld,
                       .ldb = ld, .ldc = ld, .sa = stride, .sb = stride, .sc = stride,
                       .batch = batch};
    assert_true(bt->fits(&g));
    memcpy(C, C0, sizeof(float) * (size_t)stride * BATCH);
    assert_int_equal(bt->gemm(tr_device_stream(d), tr__host_lib_state(d, row), &g), 0);
    check_products("onednn-bt fp32", &g, C0);
    g.opb = TR_OP_T; /* what it leaves to the others */
    assert_false(bt->fits(&g));
  }
  tr_device_list_close(l);
  free(A), free(B), free(C), free(C0);
}

/* troupe's own blocked GEMM, or the test skipped on a CPU without AVX2 and FMA (where it
 * serves nothing). */
static const tr__host_lib *blocked_here(void) {
  const int row = row_named("blocked");
  assert_true(row >= 0);
  const tr__gemm_args probe = {.M = 1, .N = 1, .K = 1, .alpha = 1, .batch = 1};
  if (!tr__host_libs[row]->fits(&probe)) skip();
  return tr__host_libs[row];
}

/* troupe's own blocked GEMM (host_blocked.c), called directly: every form, against float64,
 * in a shape past each of its blocks' edges (rows past MC = 144 and not a multiple of 6,
 * columns past NC = 1024 and not a multiple of 16, depth past KC = 256 and not a multiple of
 * 8), with alpha and beta, beta 0 reading nothing of C (NaN there), and a strided batch. */
static void blocked_matches_float64_in_every_form(void **state) {
  (void)state;
  const tr__host_lib *bl = blocked_here();
  enum { BM = 150, BN = 1050, BK = 300, LD = 1056, BATCH = 2 };
  const int64_t stride = (int64_t)LD * LD; /* every operand, either way round */
  const size_t all = (size_t)stride * BATCH;
  float *A = malloc(sizeof(float) * all), *B = malloc(sizeof(float) * all);
  float *C = malloc(sizeof(float) * all), *C0 = malloc(sizeof(float) * all);
  assert_true(A && B && C && C0);
  th_rng r = th_rng_for(12);
  th_fill_normal(&r, A, all, 1);
  th_fill_normal(&r, B, all, 1);
  th_fill_normal(&r, C0, all, 1);
  tr_device_list *l = NULL;
  char err[256];
  assert_int_equal(tr_device_list_open(&l, "host:1", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  for (int t = 0; t < 5; t++) {
    const int batch = t == 4 ? BATCH : 1;
    const float beta = t & 1 ? 0.0f : -0.5f;
    tr__gemm_args g = {.opa = (tr_op)(t & 1), .opb = (tr_op)((t >> 1) & 1), .M = BM, .N = BN,
                       .K = BK, .alpha = 0.75f, .beta = beta, .A = A, .B = B, .C = C,
                       .lda = LD, .ldb = LD, .ldc = LD, .sa = stride, .sb = stride, .sc = stride,
                       .batch = batch};
    memcpy(C, C0, sizeof(float) * all);
    if (beta == 0.0f)
      for (int i = 0; i < BM; i++) C[(size_t)i * LD] = NAN; /* read, it would spread */
    assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &g), 0);
    check_products("blocked fp32", &g, C0);
  }
  tr_device_list_close(l);
  free(A), free(B), free(C), free(C0);
}

/* Its rows are the same bits at any place among any rows: the rows [o, o + m) of a product
 * of 64 rows, multiplied on their own, for pieces at offsets that no block divides. */
static void blocked_rows_do_not_depend_on_the_rows_around_them(void **state) {
  (void)state;
  const tr__host_lib *bl = blocked_here();
  enum { RM = 64, RN = 80, RK = 300 };
  float *A = malloc(sizeof(float) * RM * RK), *B = malloc(sizeof(float) * RK * RN);
  float *whole = malloc(sizeof(float) * RM * RN), *part = malloc(sizeof(float) * RM * RN);
  assert_true(A && B && whole && part);
  th_rng r = th_rng_for(13);
  th_fill_normal(&r, A, (size_t)RM * RK, 1);
  th_fill_normal(&r, B, (size_t)RK * RN, 1);
  tr_device_list *l = NULL;
  char err[256];
  assert_int_equal(tr_device_list_open(&l, "host:1", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  const int pieces[][2] = {{0, 16}, {5, 7}, {13, 24}, {40, 24}, {63, 1}};
  for (int t = 0; t < 2; t++) { /* NN (an input gradient), NT (a forward) */
    tr__gemm_args g = {.opb = (tr_op)t, .M = RM, .N = RN, .K = RK, .alpha = 1, .A = A, .B = B,
                       .C = whole, .lda = RK, .ldb = t ? RK : RN, .ldc = RN, .batch = 1};
    assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &g), 0);
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
      tr__gemm_args q = g;
      q.M = pieces[p][1];
      q.A = A + (size_t)pieces[p][0] * RK;
      q.C = part;
      assert_int_equal(bl->gemm(tr_device_stream(d), NULL, &q), 0);
      if (memcmp(part, whole + (size_t)pieces[p][0] * RN, sizeof(float) * q.M * RN))
        fail_msg("N%c: rows %d..%d alone differ from the same rows among %d", t ? 'T' : 'N',
                 pieces[p][0], pieces[p][0] + q.M - 1, RM);
    }
  }
  tr_device_list_close(l);
  free(A), free(B), free(whole), free(part);
}

/* ---- the file ------------------------------------------------------------------------------- */

static char self[4096];

/* A fresh process: the fakes, one call of the first test's shape; exit 0 when C holds `want`
 * (the mark of the row that served) and a key was measured or not, as `measured` says. */
static int child(float want, int measured) {
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = NULL;
  char err[256];
  if (tr_device_list_open(&l, "host:1", err, sizeof err)) return 3;
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  static float A[M * K], B[K * N], C[M * N];
  if (tr_gemm(tr_device_stream(d), TR_OP_N, TR_OP_N, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N))
    return 4;
  const int ok = (tr__host_gemm_measurements() > 0) == measured && C[0] == want;
  tr_device_list_close(l);
  return ok ? 0 : 1;
}

static int run_child(float want, int measured) {
  char arg[32];
  snprintf(arg, sizeof arg, "%g", want);
  const pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--child", arg, measured ? "1" : "0", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 20];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  return text;
}

static void a_fresh_process_reads_the_choice_back_without_measuring(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/fresh/gemm-choices", dir); /* its folder made when needed */
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  float C[M * N];
  fake_product(C);
  /* one line, naming the fast one */
  char *text = slurp(path);
  assert_non_null(strstr(text, "\tNN N8 K8 x1 f32\tfast\t"));
  assert_int_equal(run_child(2.0f, 0), 0);
  /* the file, not another measurement, decides: swapped to the slow one, the child uses it */
  char *at = strstr(text, "\tfast\t");
  memcpy(at, "\tslow\t", 6);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(run_child(1.0f, 0), 0);
  /* a line written while a library ran on another instruction set (OPENBLAS_CORETYPE or
   * ONEDNN_MAX_CPU_ISA set otherwise) is not this process's: measured again, fast serves */
  at = strstr(text, "slow:none");
  assert_non_null(at);
  memcpy(at, "slow:avx2", 9);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(run_child(2.0f, 1), 0);
  /* a file that is not ours to replace (a folder) is left alone, and nothing fails */
  char folder[300];
  snprintf(folder, sizeof folder, "%s/a-folder", dir);
  assert_int_equal(mkdir(folder, 0700), 0);
  setenv("TROUPE_GEMM_CHOICES", folder, 1);
  fake_product(C);
  assert_float_equal(C[0], 2.0f, 0);
  struct stat st;
  assert_int_equal(stat(folder, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  use_file();
}

/* The file keeps its newest lines: shapes drawn at random by tests would grow it for ever. */
static void the_file_keeps_its_newest_lines(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/full", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int i = 0; i < 5000; i++) fprintf(f, "another machine\tNN N%d K1 x1 f32\tslow\t\n", i);
  fclose(f);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  float C[M * N];
  fake_product(C);
  const char *text = slurp(path);
  int lines = 0;
  for (const char *p = text; *p; p++) lines += *p == '\n';
  assert_true(lines <= 4096 && lines > 4000);
  assert_null(strstr(text, "\tNN N0 K1 x1"));           /* the oldest went */
  assert_non_null(strstr(text, "\tNN N4999 K1 x1"));    /* the newest stayed */
  assert_non_null(strstr(text, "\tNN N8 K8 x1 f32\tfast\t")); /* and the new one came */
  use_file();
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) self[n] = 0;
  if (argc == 4 && !strcmp(argv[1], "--child")) return child(strtof(argv[2], NULL), atoi(argv[3]));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_faster_of_two_candidates_serves_the_shape),
      cmocka_unit_test(time_lost_to_other_threads_is_not_a_librarys),
      cmocka_unit_test(a_key_is_measured_once_and_its_choice_reused),
      cmocka_unit_test(a_row_that_cannot_serve_a_larger_m_gives_it_to_the_first_that_can),
      cmocka_unit_test(rows_that_vary_serve_only_weight_gradients_unless_fastest),
      cmocka_unit_test(threads_meeting_a_key_at_once_get_one_answer),
      cmocka_unit_test(troupe_gemm_pins_a_library_and_a_bad_value_is_refused),
      cmocka_unit_test(every_library_matches_float64_in_every_form),
      cmocka_unit_test(onednn_on_b_transposed_matches_float64),
      cmocka_unit_test(blocked_matches_float64_in_every_form),
      cmocka_unit_test(blocked_rows_do_not_depend_on_the_rows_around_them),
      cmocka_unit_test(a_fresh_process_reads_the_choice_back_without_measuring),
      cmocka_unit_test(the_file_keeps_its_newest_lines),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
