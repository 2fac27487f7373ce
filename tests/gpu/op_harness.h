/* op_harness.h — checks device ops: against a float64 reference computed by the test, or
 * one device against another (the CUDA backend against the host oracle).
 *
 * An op under test is a list of arguments (buffers) plus a function that issues the op on a
 * stream. th_run gives each buffer guard zones on the device (sentinel bytes before and
 * after), uploads the inputs, fills outputs that have no initial value with NaN (so an
 * element the op forgets to write fails the check), runs the op, synchronises, downloads
 * the outputs and verifies that no guard byte changed.
 *
 *   static int run_relu(tr_stream *s, void **a, void *ctx) {
 *     size_t n = *(size_t *)ctx;
 *     return tr_relu_forward(s, a[1], a[0], n);
 *   }
 *   th_arg args[] = {{"inp", n, 4, TH_IN, x}, {"out", n, 4, TH_OUT, NULL}};
 *   void *got[2];
 *   assert_int_equal(th_run(dev, args, 2, run_relu, &n, got), 0);
 *   assert_true(th_check("relu_forward", got[1], ref, n, TH_TOL_ELEMENTWISE));
 *   th_free_outputs(got, 2);
 *
 *   // CUDA vs host: same arguments, same run function
 *   assert_true(th_compare_devices(host, cuda, args, 2, run_relu, &n, TH_TOL_ELEMENTWISE));
 *
 * Normalised error: sum (x - ref)^2 / sum ref^2 (sum x^2 when ref is all zero); any NaN or
 * infinity in x or ref fails. Inputs come from th_rng, seeded per process from the clock or
 * from TR_TEST_SEED, printed on failure so that a failing case can be replayed.
 */
#ifndef TR_OP_HARNESS_H
#define TR_OP_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#define TH_TOL_ELEMENTWISE 1e-7
#define TH_TOL_GEMM 1e-5

/* ---- random inputs -------------------------------------------------------------------- */

/* xoshiro256** seeded by splitmix64: fast, and independent of the device code under test. */
typedef struct th_rng {
  uint64_t s[4];
} th_rng;

/* The process's test seed: TR_TEST_SEED if set, else from the clock (chosen once). */
uint64_t th_seed(void);
/* A generator for one test case: th_seed() mixed with `stream`. */
th_rng th_rng_for(uint64_t stream);
uint64_t th_next(th_rng *r);
double th_uniform(th_rng *r);                       /* [0, 1) */
void th_fill_uniform(th_rng *r, float *x, size_t n, float lo, float hi);
void th_fill_normal(th_rng *r, float *x, size_t n, float std);
void th_fill_index(th_rng *r, int32_t *x, size_t n, int32_t bound); /* [0, bound) */

/* ---- checks --------------------------------------------------------------------------- */

double th_nerr(const float *x, const double *ref, size_t n);
double th_nerr_f(const float *x, const float *ref, size_t n);
/* true when th_nerr(x, ref) <= tol and nothing is NaN or infinite; otherwise prints what,
 * the error, the worst element and the seed to stderr. */
bool th_check(const char *what, const float *x, const double *ref, size_t n, double tol);
bool th_check_f(const char *what, const float *x, const float *ref, size_t n, double tol);

/* ---- running ops ------------------------------------------------------------------------ */

enum { TH_IN = 0, TH_OUT = 1 };

typedef struct th_arg {
  const char *name;
  size_t n;          /* elements */
  size_t elem;       /* bytes per element (4 for float and int32) */
  int dir;           /* TH_IN (read only: checked unchanged) or TH_OUT (float, compared) */
  const void *init;  /* host data of n elements; outputs: NULL for NaN-filled */
  double tol;        /* outputs, th_compare_devices: 0 for TH_TOL_ELEMENTWISE */
} th_arg;

/* Issues the op on `s`; args[i] is the device pointer of the i-th argument. */
typedef int (*th_run_fn)(tr_stream *s, void **args, void *ctx);

/* Runs the op on `d` (from the calling thread, which becomes its owner). out[i] receives a
 * malloc'ed host copy of each TH_OUT buffer (NULL for inputs). Returns 0, the op's status
 * (with tr_device_error printed), or -1 when a guard zone or an input was overwritten. */
int th_run(tr_device *d, const th_arg *args, int nargs, th_run_fn run, void *ctx, void **out);
void th_free_outputs(void **out, int nargs);

/* Runs the op on both devices with the same inputs and compares every output of `dev`
 * with `ref_dev`'s by normalised error (each output's tol). */
bool th_compare_devices(tr_device *ref_dev, tr_device *dev, const th_arg *args, int nargs,
                        th_run_fn run, void *ctx);

/* ---- guarded device buffers (th_run uses them; tests may too) ----------------------------- */

typedef struct th_buf th_buf;
th_buf *th_buf_new(tr_device *d, size_t bytes);   /* NULL on failure (printed) */
void *th_buf_ptr(th_buf *b);                      /* the device pointer between the guards */
bool th_buf_guards_intact(th_buf *b, const char *what); /* prints what was overwritten */
void th_buf_free(th_buf *b);

/* Two devices, two threads, one event: src's thread initialises n floats and scales them
 * `rounds` times (x2, x0.5, x2, ...), records an event and posts it; dst's thread makes a
 * copy stream wait on it, copies peer to peer and checks the bytes against the same work
 * redone on dst. True when they match. The devices are bound to the threads and left bound
 * to the last one; bind them back before freeing anything of theirs. */
bool th_peer_copy_two_threads(tr_device *src, tr_device *dst, size_t n, int rounds);

/* Host copies that the test frees: th_dup_f(src, n). */
float *th_alloc_f(size_t n);
double *th_alloc_d(size_t n);
int32_t *th_alloc_i(size_t n);

#endif
