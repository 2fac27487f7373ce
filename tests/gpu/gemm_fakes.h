/* gemm_fakes.h — what test_gemm_choice.c and test_gemm_choices_file.c share: fake GEMM
 * libraries with known costs (the test hook tr__host_gemm_test_libs), each writing its own
 * mark into C, so the result says which one served a call; products on a fresh host device
 * among them; a folder of the program's own, its file of choices named by
 * TROUPE_GEMM_CHOICES (setup, teardown, use_file); a file's text (slurp). Include once, in a
 * test program, after cmocka.h and troupe.h. */
#ifndef TR_TEST_GEMM_FAKES_H
#define TR_TEST_GEMM_FAKES_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "host/host_blas.h"
#include "host/host_choose.h"
#include "op_harness.h"

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

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 20];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  return text;
}

#endif
