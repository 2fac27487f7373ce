/* host_fixture.h — what the tests of the host backend's ops share (test_host_init.c,
 * test_host_ops.c, test_host_layers.c, test_host_gemm.c): one host device for the whole group
 * (setup, teardown), the sizes and shapes the ops are run on, the struct P that every run
 * function reads, and RUN and CHECK over op_harness.h's th_run and th_check. Each op is held
 * to a float64 reference computed in its test: normalised error <= 1e-7 (GEMM 1e-5), no NaN,
 * guard bytes untouched, inputs unchanged, fresh random inputs, shapes with 1, odd sizes and
 * sizes no vector width divides. */
#ifndef TR_TEST_HOST_FIXTURE_H
#define TR_TEST_HOST_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "op_harness.h"

static tr_device_list *list;
static tr_device *dev;

static inline int setup(void **state) {
  (void)state;
  char err[256];
  if (tr_device_list_open(&list, "host:1", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  dev = tr_device_list_at(list, 0);
  return 0;
}

static inline int teardown(void **state) {
  (void)state;
  tr_device_list_close(list);
  return 0;
}

/* Sizes: 1, odd, around and not divisible by vector widths (4, 8, 16), and larger. */
static const size_t sizes[] = {1, 3, 7, 16, 17, 31, 255, 1000, 4099};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };
static const size_t shapes[][2] = {{1, 1}, {1, 7}, {3, 17}, {5, 64}, {7, 33}, {2, 768}, {33, 129}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* Every run function reads its sizes and scalars from one of these. */
typedef struct P {
  size_t n, N, C, B, T, V;
  float a, b, c, d, e;
  int flag;
  int64_t t;
  tr_op opa, opb;
  int M, K, lda, ldb, ldc, batch;
  int64_t sa, sb, sc;
} P;

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define RUN(args, fn, p, out) assert_int_equal(th_run(dev, args, NARGS(args), fn, p, out), 0)
#define CHECK(what, got, ref, n, tol) assert_true(th_check(what, got, ref, n, tol))

#endif
