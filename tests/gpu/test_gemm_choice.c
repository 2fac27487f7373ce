/* test_gemm_choice.c — the host GEMM's library chosen per shape (gpu/host/host_choose.h):
 * the faster of two candidates wins, a key is measured once and its choice reused, threads
 * meeting a key at once get one answer, TROUPE_GEMM pins (and a bad value is refused naming
 * it), the file of choices is read back by a fresh process without measuring, and a
 * library is timed by its own thread's CPU time (time lost to other threads is not its).
 * The file is troupe's only when its first line says so: anything else at its path (other
 * text, a checkpoint, a file too large, a FIFO, a device, a link to such) is never read,
 * replaced or truncated, and the run says once that it keeps no choices; a rewrite keeps the
 * file's mode and owner, goes through a temporary file no one could plant, and takes a lock
 * file of troupe's own.
 *
 * The candidates are fakes with known costs (the test hook tr__host_gemm_test_libs), each
 * writing its own mark into C, so the result says which one served a call. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "host/host_blas.h"
#include "host/host_choose.h"
#include "op_harness.h"
#include "tr_file.h" /* tr__file_keep_lock */
#include "troupe.h"

/* ---- the fakes: C = beta C + mark, the slow one after computing a while ------------------ */

static _Atomic int calls[2];

/* `us` microseconds of the thread's own CPU time, as a library's arithmetic takes it (a
 * machine busy with other tests stretches it on the wall clock, not here) */
static void compute(long us) {
  const uint64_t end = tr__thread_cpu_ns() + (uint64_t)us * 1000;
  while (tr__thread_cpu_ns() < end) {
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
  const char *label = getenv("TR_TEST_FAKE_LABEL"); /* a new version of the fakes */
  snprintf(out->label, sizeof out->label, "%s", label ? label : "fake");
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
  /* a file of the format before the header (every line a choice's) is taken as one, and
   * given its header */
  assert_int_equal(strncmp(text, "# troupe gemm-choices 1\n", 24), 0);
  assert_null(strstr(text, "\tNN N0 K1 x1"));           /* the oldest went */
  assert_non_null(strstr(text, "\tNN N4999 K1 x1"));    /* the newest stayed */
  assert_non_null(strstr(text, "\tNN N8 K8 x1 f32\tfast\t")); /* and the new one came */
  use_file();
}

/* ---- what is not a file of choices ---------------------------------------------------------- */

/* stderr, from capture_begin to capture_end, into a file of the test's; its text. */
static int saved_stderr = -1;
static char captured[300];

static void capture_begin(void) {
  snprintf(captured, sizeof captured, "%s/stderr", dir);
  fflush(stderr);
  saved_stderr = dup(2);
  const int fd = open(captured, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(saved_stderr >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
}

static const char *capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  const char *text = slurp(captured);
  fprintf(stderr, "%s", text); /* still shown */
  return text;
}

static int count_of(const char *text, const char *what) {
  int k = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) k++;
  return k;
}

/* Products of two keys, on a fresh host:1 among the fakes, under a watchdog: an open that
 * waited on a FIFO would hang the test, and fails it instead. The fast one serves. */
static void fake_products(void) {
  alarm(20);
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  float C[M * N];
  for (int k = 0; k < 2; k++) {
    gemm_on(d, C, M, N, 40 + k, 0.0f);
    assert_float_equal(C[0], 2.0f, 0);
  }
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  alarm(0);
}

/* What lstat says of a file, and its bytes: enough to tell that nothing changed it. */
typedef struct seen {
  struct stat st;
  char *text; /* regular files' */
} seen;

static seen seen_of(const char *path) {
  seen s = {.text = NULL};
  assert_int_equal(lstat(path, &s.st), 0);
  if (S_ISREG(s.st.st_mode)) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    s.text = malloc((size_t)s.st.st_size + 1);
    assert_int_equal(fread(s.text, 1, (size_t)s.st.st_size, f), (size_t)s.st.st_size);
    fclose(f);
  }
  return s;
}

static void expect_unchanged(const char *path, seen *before) {
  seen now = seen_of(path);
  if (now.st.st_mode != before->st.st_mode || now.st.st_size != before->st.st_size ||
      now.st.st_ino != before->st.st_ino || now.st.st_rdev != before->st.st_rdev ||
      now.st.st_uid != before->st.st_uid || now.st.st_gid != before->st.st_gid)
    fail_msg("%s changed: mode %o size %lld, was mode %o size %lld", path, now.st.st_mode,
             (long long)now.st.st_size, before->st.st_mode, (long long)before->st.st_size);
  if (before->text && memcmp(now.text, before->text, (size_t)now.st.st_size))
    fail_msg("%s: its bytes changed", path);
  free(now.text);
  free(before->text);
}

/* TROUPE_GEMM_CHOICES names `path`, which is not a file of choices: the products are served
 * all the same, `path` is left exactly as it was, and stderr says once that no choices are
 * kept, naming the variable and the file. */
static void expect_left_alone(const char *path) {
  seen before = seen_of(path);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  capture_begin();
  fake_products();
  fake_products(); /* again, as the run's other devices and keys would */
  const char *said = capture_end();
  expect_unchanged(path, &before);
  char named[400];
  snprintf(named, sizeof named, "TROUPE_GEMM_CHOICES '%s'", path);
  if (count_of(said, named) != 1 || !strstr(said, "none kept"))
    fail_msg("stderr did not say once that %s keeps no choices: \"%s\"", named, said);
  use_file();
}

static void write_file(const char *path, const void *p, size_t n, mode_t mode) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, p, n), (ssize_t)n);
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

static void in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void a_file_that_is_not_one_of_choices_is_never_read_or_replaced(void **state) {
  (void)state;
  char path[300], other[300];
  /* a text of 5,000 lines (the oldest were cut to keep 4,096), mode 600 */
  in_dir(path, sizeof path, "notes.txt");
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int i = 0; i < 5000; i++) fprintf(f, "line %d of my notes\n", i);
  fclose(f);
  assert_int_equal(chmod(path, 0600), 0);
  expect_left_alone(path);
  /* a checkpoint */
  in_dir(path, sizeof path, "ck.st");
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const int64_t shape[1] = {2};
  const float x[2] = {1, 2};
  assert_int_equal(tr_checkpoint_writer_add(w, "w", TR_DTYPE_F32, 1, shape, x), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  assert_int_equal(chmod(path, 0600), 0);
  expect_left_alone(path);
  /* 20 MiB that begin as a file of choices would (shrunk to one line before) */
  in_dir(path, sizeof path, "huge");
  char *big = calloc(20 << 20, 1);
  assert_non_null(big);
  memcpy(big, "# troupe gemm-choices 1\n", 24);
  write_file(path, big, 20 << 20, 0644);
  free(big);
  expect_left_alone(path);
  /* a FIFO, refused without waiting on it */
  in_dir(path, sizeof path, "fifo");
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_left_alone(path);
  /* a symlink to a text: the text and the link stay */
  in_dir(other, sizeof other, "notes.txt");
  in_dir(path, sizeof path, "link-to-notes");
  assert_int_equal(symlink(other, path), 0);
  seen text = seen_of(other);
  expect_left_alone(path);
  expect_unchanged(other, &text);
  /* a device node (as root: a private one in the test's folder, never one under /dev) */
  if (geteuid() != 0) {
    fprintf(stderr, "[  SKIPPED ] a device node: mknod needs root\n");
    return;
  }
  in_dir(path, sizeof path, "null");
  assert_int_equal(mknod(path, S_IFCHR | 0666, makedev(1, 3)), 0);
  expect_left_alone(path);
}

/* A file of choices of troupe's is rewritten keeping its mode (600 stayed 600, not 644) and,
 * where the process may (root), its owner and group; a symlink to one is written through
 * and stays a link. */
static void a_rewritten_file_keeps_its_mode_and_owner_and_a_link_stays(void **state) {
  (void)state;
  char path[300], link[300];
  in_dir(path, sizeof path, "mine");
  write_file(path, "# troupe gemm-choices 1\n", 24, 0600);
  const bool root = geteuid() == 0;
  if (root) assert_int_equal(chown(path, 4321, 8765), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  fake_products();
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0600);
  if (root) assert_true(st.st_uid == 4321 && st.st_gid == 8765);
  const char *text = slurp(path);
  assert_int_equal(strncmp(text, "# troupe gemm-choices 1\n", 24), 0);
  assert_int_equal(count_of(text, "\tfast\t"), 2);
  /* through a link: the link stays a link, its target gets the lines */
  in_dir(link, sizeof link, "link-to-mine");
  assert_int_equal(symlink(path, link), 0);
  setenv("TROUPE_GEMM_CHOICES", link, 1);
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  float C[M * N];
  gemm_on(d, C, M, N, 50, 0.0f);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 3);
  if (!root) fprintf(stderr, "[  SKIPPED ] the owner kept: chown needs root\n");
  use_file();
}

/* The writer's temporary file was "<file>.tmp.<pid>": a symlink planted there made the run
 * write its target, and a FIFO hung it. Neither is used now; the choices are kept. */
static void a_temporary_file_at_a_predictable_name_is_never_used(void **state) {
  (void)state;
  char path[300], tmp[400], victim[300];
  in_dir(path, sizeof path, "planted");
  in_dir(victim, sizeof victim, "victim");
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  write_file(victim, "mine\n", 5, 0644);
  assert_int_equal(symlink(victim, tmp), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  seen v = seen_of(victim);
  fake_products();
  expect_unchanged(victim, &v);
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode)); /* not the planted link, renamed into place */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  assert_int_equal(unlink(tmp), 0);
  assert_int_equal(mkfifo(tmp, 0600), 0);
  assert_int_equal(unlink(path), 0);
  fake_products(); /* under the watchdog: the FIFO is not opened */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  use_file();
}

/* The lock is troupe's own lock file (".<file>.troupe-lock"): a user's "<file>.lock" (a
 * symlink to where nothing is yet) is not followed, and the choices are kept; a FIFO at the
 * lock's name is not troupe's: left as it is, the choices measured and none kept, said
 * once. */
static void a_lock_file_not_troupes_is_left_alone(void **state) {
  (void)state;
  char path[300], lock[400], elsewhere[300];
  in_dir(path, sizeof path, "locked");
  in_dir(elsewhere, sizeof elsewhere, "elsewhere");
  snprintf(lock, sizeof lock, "%s.lock", path);
  assert_int_equal(symlink(elsewhere, lock), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  fake_products();
  assert_int_equal(access(elsewhere, F_OK), -1); /* not created through the link */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  /* a FIFO where troupe's lock file goes */
  in_dir(path, sizeof path, "fifo-locked");
  in_dir(lock, sizeof lock, ".fifo-locked.troupe-lock");
  assert_int_equal(mkfifo(lock, 0600), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  seen before = seen_of(lock);
  capture_begin();
  fake_products();
  fake_products();
  const char *said = capture_end();
  expect_unchanged(lock, &before);
  assert_int_equal(access(path, F_OK), -1); /* nothing kept */
  if (count_of(said, ".fifo-locked.troupe-lock") != 1 || !strstr(said, "FIFO"))
    fail_msg("stderr did not say once that the lock file is a FIFO: \"%s\"", said);
  use_file();
}

/* A process that holds the lock and does not let go (stopped there, or a child that
 * inherited it) is given up on after a bounded wait: the products are served, nothing is
 * kept, and stderr says so once. */
static void a_holder_that_keeps_the_lock_is_given_up_on(void **state) {
  (void)state;
  char path[300];
  in_dir(path, sizeof path, "held");
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    int fd;
    char *lock, err[512];
    if (tr__file_keep_lock(path, "test", path, 1000, &fd, &lock, err, sizeof err)) _exit(1);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause(); /* holds it until killed */
    _exit(0);
  }
  char x;
  assert_int_equal(read(ready[0], &x, 1), 1);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  capture_begin();
  const uint64_t t0 = tr_now_ns();
  fake_products();
  fake_products();
  const double waited = (double)(tr_now_ns() - t0) / 1e9;
  const char *said = capture_end();
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  close(ready[0]);
  close(ready[1]);
  assert_true(waited < 15); /* once, about a second */
  assert_int_equal(access(path, F_OK), -1);
  if (count_of(said, "held its lock file") != 1)
    fail_msg("stderr did not say once that the lock stayed held: \"%s\"", said);
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
      cmocka_unit_test(the_file_keeps_its_newest_lines),
      cmocka_unit_test(a_file_that_is_not_one_of_choices_is_never_read_or_replaced),
      cmocka_unit_test(a_rewritten_file_keeps_its_mode_and_owner_and_a_link_stays),
      cmocka_unit_test(a_temporary_file_at_a_predictable_name_is_never_used),
      cmocka_unit_test(a_lock_file_not_troupes_is_left_alone),
      cmocka_unit_test(a_holder_that_keeps_the_lock_is_given_up_on),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
