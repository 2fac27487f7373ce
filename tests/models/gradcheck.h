/* gradcheck.h — the models tests' gradient check: a layer's float32 forward against a
 * float64 reference written in the test, and its float32 backward against central
 * differences of that reference, by normalised squared error (sum (x - ref)^2 / sum ref^2,
 * NaN never passing). The objective is sum(out * R) for a random R (what backward receives
 * as dout), or out itself when R is NULL (a loss). Include after cmocka.h. */
#ifndef TR_GRADCHECK_H
#define TR_GRADCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mtest.h"

/* Measured on the host backend (OpenBLAS) over nine seeds: forwards at most 2.5e-14,
 * gradients at most 6.8e-13 (the block's; single layers 1e-14). A wrong term is O(1). */
#define FWD_TOL 2e-12
#define GRAD_TOL 5e-11
/* Mixed precision (bf16 products) against the same float64 reference of the unrounded
 * values: each input of a product is off by up to 2^-8 of itself; measured (oneDNN, nine
 * seeds) forwards at most 2e-5, gradients at most 1.5e-4 (the block's). */
#define BF16_FWD_TOL 1e-3
#define BF16_GRAD_TOL 3e-3
#define FD_STEP 1e-5

typedef struct tens {
  const char *name;
  float *h;     /* values */
  size_t n;
  float *grad;  /* the layer's analytic gradient (host), or NULL: not checked */
} tens;

typedef void (*ref_fn)(const void *ctx, double *const *t, double *out);

static double objective(const void *ctx, ref_fn ref, double *const *t, double *out, size_t nout,
                        const float *R) {
  ref(ctx, t, out);
  double f = 0;
  for (size_t i = 0; i < nout; i++) f += out[i] * (R ? (double)R[i] : 1.0);
  return f;
}

static void gradcheck_within(const char *what, const void *ctx, ref_fn ref, tens *ts, int nt,
                             const float *out32, size_t nout, const float *R, double fwd_tol,
                             double grad_tol) {
  double *t[16], *out = malloc(nout * sizeof *out);
  assert_true(nt <= 16);
  for (int k = 0; k < nt; k++) t[k] = mt_to_double(ts[k].h, ts[k].n);
  ref(ctx, t, out);
  const double fwd = mt_nerr(out32, out, nout);
  fprintf(stderr, "%-12s forward %.1e", what, fwd);
  double worst = 0;
  for (int k = 0; k < nt; k++) {
    if (!ts[k].grad) continue;
    double *fd = malloc(ts[k].n * sizeof *fd);
    for (size_t j = 0; j < ts[k].n; j++) {
      const double v = t[k][j];
      t[k][j] = v + FD_STEP;
      const double fp = objective(ctx, ref, t, out, nout, R);
      t[k][j] = v - FD_STEP;
      const double fm = objective(ctx, ref, t, out, nout, R);
      t[k][j] = v;
      fd[j] = (fp - fm) / (2 * FD_STEP);
    }
    const double e = mt_nerr(ts[k].grad, fd, ts[k].n);
    fprintf(stderr, "  d%s %.1e", ts[k].name, e);
    if (!(e <= grad_tol)) fprintf(stderr, " (bound %.0e!)", grad_tol);
    worst = e > worst || isnan(e) ? e : worst;
    free(fd);
  }
  fprintf(stderr, "\n");
  for (int k = 0; k < nt; k++) free(t[k]);
  free(out);
  assert_true(fwd <= fwd_tol);
  assert_true(worst <= grad_tol);
}

static void gradcheck(const char *what, const void *ctx, ref_fn ref, tens *ts, int nt,
                      const float *out32, size_t nout, const float *R) {
  gradcheck_within(what, ctx, ref, ts, nt, out32, nout, R, FWD_TOL, GRAD_TOL);
}

/* float64 references of the layers the tests build others from */

static void lin64(double *out, const double *x, const double *w, const double *b, int N, int C,
                  int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double a = b ? b[o] : 0;
      for (int c = 0; c < C; c++) a += x[n * C + c] * w[o * C + c];
      out[n * OC + o] = a;
    }
}

static double gelu64(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

#endif
