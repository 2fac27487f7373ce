/* test_gemm_choice.c — the host GEMM's library chosen per shape (gpu/host/host_choose.h):
 * the faster of two candidates wins, a key is measured once and its choice reused, threads
 * meeting a key at once get one answer, TROUPE_GEMM pins (and a bad value is refused naming
 * it), the file of choices is read back by a fresh process without measuring, and a
 * library is timed by its own thread's CPU time (time lost to other threads is not its).
 * What the file itself keeps, and leaves alone, is test_gemm_choices_file.c's.
 *
 * The candidates are fakes with known costs (gemm_fakes.h). */
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

#include "troupe.h"
#include "gemm_fakes.h"

/* ---- more fakes ----------------------------------------------------------------------------- */

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


static void spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

/* The file's text with the first choice of fast at or after `from` made slow, written back. */
static void choose_slow(const char *path, char *text, const char *from) {
  assert_non_null(from);
  char *at = strstr(from, "\tfast\t");
  assert_non_null(at);
  memcpy(at, "\tslow\t", 6);
  spit(path, text);
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
  choose_slow(path, text, text);
  assert_int_equal(run_child(1.0f, 0), 0);
  /* a line written while a library ran on another instruction set (OPENBLAS_CORETYPE or
   * ONEDNN_MAX_CPU_ISA set otherwise) is not this process's: measured again, fast serves */
  char *at = strstr(text, "slow:none");
  assert_non_null(at);
  memcpy(at, "slow:avx2", 9);
  spit(path, text);
  assert_int_equal(run_child(2.0f, 1), 0);
  /* so is one written by another version of a library (its label; troupe's own kernels carry
   * a revision in theirs): the line just added, set to slow, serves the same fakes, and not
   * the fakes labelled as a new version */
  text = slurp(path);
  choose_slow(path, text, strstr(text, "slow:none (fake)"));
  assert_int_equal(run_child(1.0f, 0), 0);
  setenv("TR_TEST_FAKE_LABEL", "fake r2", 1);
  assert_int_equal(run_child(2.0f, 1), 0);
  unsetenv("TR_TEST_FAKE_LABEL");
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
      cmocka_unit_test(a_fresh_process_reads_the_choice_back_without_measuring),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
