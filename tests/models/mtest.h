/* mtest.h — what the models tests share: a seeded generator, normalised errors, and device
 * buffers on one host device (every call from the test's thread, which owns the device). */
#ifndef TR_MTEST_H
#define TR_MTEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tr_device.h"
#include "tr_model.h"

/* ---- random inputs: splitmix64, seeded by TR_TEST_SEED when set (else fixed) ----------------- */

typedef struct mt_rng {
  uint64_t s;
} mt_rng;

static inline mt_rng mt_rng_for(uint64_t stream) {
  const char *env = getenv("TR_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : 0x5eedull;
  return (mt_rng){seed * 0x9e3779b97f4a7c15ull ^ (stream + 1) * 0xd1b54a32d192ed03ull};
}

static inline uint64_t mt_next(mt_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline double mt_uniform(mt_rng *r) { return (double)(mt_next(r) >> 11) * 0x1p-53; }

static inline double mt_normal(mt_rng *r) {
  double u1 = 1.0 - mt_uniform(r), u2 = mt_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* n values N(0, std^2), kept at least `gap` away from 0 (so ReLU's kink is never probed). */
static inline float *mt_normals(mt_rng *r, size_t n, double std, double gap) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    double v = std * mt_normal(r);
    if (fabs(v) < gap) v = v < 0 ? v - gap : v + gap;
    x[i] = (float)v;
  }
  return x;
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* sum (x - ref)^2 / sum ref^2 (ref all zero: sum x^2); a NaN or infinity anywhere: INFINITY. */
static inline double mt_nerr(const float *x, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(ref[i])) return INFINITY;
    num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

static inline double mt_nerr_f(const float *x, const float *ref, size_t n) {
  double *r = malloc(n * sizeof *r);
  for (size_t i = 0; i < n; i++) r[i] = ref[i];
  double e = mt_nerr(x, r, n);
  free(r);
  return e;
}

static inline double *mt_to_double(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

/* ---- device buffers ------------------------------------------------------------------------------ */

/* n devices: host:n, or TR_TEST_DEVICE repeated n times (TR_TEST_DEVICE=cuda:0 runs the
 * models tests on one GPU, its n logical devices sharing the card). */
static inline tr_device_list *mt_open(int n) {
  tr_device_list *l = NULL;
  char err[256], spec[256] = "";
  const char *dev = getenv("TR_TEST_DEVICE");
  if (!dev || !*dev) snprintf(spec, sizeof spec, "host:%d", n);
  else
    for (int i = 0; i < n; i++)
      snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%s", i ? "," : "", dev);
  if (tr_device_list_open(&l, spec, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
  return l;
}

/* A device copy of n floats of host (or zeros when host is NULL). */
static inline float *mt_up(tr_device *d, const void *host, size_t n) {
  void *p = NULL;
  if (tr_device_alloc(d, (n ? n : 1) * 4, &p)) abort();
  tr_stream *s = tr_device_stream(d);
  if (host ? tr_memcpy(s, p, host, n * 4, TR_COPY_H2D) : tr_memset(s, p, 0, n * 4)) abort();
  return p;
}

/* A new host copy of n floats of device memory. */
static inline float *mt_down(tr_device *d, const void *dev, size_t n) {
  float *h = malloc((n ? n : 1) * 4);
  tr_stream *s = tr_device_stream(d);
  if (tr_memcpy(s, h, dev, n * 4, TR_COPY_D2H) || tr_stream_synchronize(s)) abort();
  return h;
}

/* ---- batches ------------------------------------------------------------------------------------- */

/* Random inputs and targets of a model into x (xb bytes) and y (yb bytes): tokens below the
 * vocabulary or normals, classes below the last layer's width or normals. */
static inline void mt_fill_batch(const tr_model *m, mt_rng *r, void *x, void *y, size_t xb,
                                 size_t yb) {
  const int V = tr_model_layer(m, tr_model_layer_count(m) - 1)->out;
  for (size_t i = 0; i < xb / 4; i++) {
    if (tr_model_token_input(m))
      ((int32_t *)x)[i] = (int32_t)(mt_next(r) % (uint64_t)tr_model_layer(m, 0)->vocab);
    else ((float *)x)[i] = (float)mt_normal(r);
  }
  for (size_t i = 0; i < yb / 4; i++) {
    if (tr_model_loss(m) == TR_LOSS_CROSSENTROPY) ((int32_t *)y)[i] = (int32_t)(mt_next(r) % (uint64_t)V);
    else ((float *)y)[i] = (float)mt_normal(r);
  }
}

/* The same for n samples, into new allocations. */
static inline void mt_random_batch(const tr_model *m, mt_rng *r, int n, void **x, void **y) {
  const size_t xb = tr_model_input_bytes(m) * (size_t)n, yb = tr_model_target_bytes(m) * (size_t)n;
  *x = malloc(xb), *y = malloc(yb);
  mt_fill_batch(m, r, *x, *y, xb, yb);
}

#endif
