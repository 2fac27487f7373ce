/* host_fixture.h — what the tests of the host backend's ops share (test_host_init.c,
 * test_host_ops.c, test_host_layers.c, test_host_gemm.c): host_device.h's device, setup,
 * teardown, RUN and CHECK, the sizes and shapes the ops are run on, and the struct P that
 * every run function reads. Each op is held to a float64 reference computed in its test:
 * normalised error <= 1e-7 (GEMM 1e-5), no NaN, guard bytes untouched, inputs unchanged,
 * fresh random inputs, shapes with 1, odd sizes and sizes no vector width divides. */
#ifndef TR_TEST_HOST_FIXTURE_H
#define TR_TEST_HOST_FIXTURE_H

#include "host_device.h"

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

#endif
