/* compare.h — what the training tests compare runs by: the checkpoints they write. */
#ifndef TR_TEST_COMPARE_H
#define TR_TEST_COMPARE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe.h"

/* The optimizer's tensors of a checkpoint, beside the parameters. */
static inline bool optimizer_state(const char *name) {
  return !strncmp(name, "momentum.", 9) || !strncmp(name, "adam_m.", 7) ||
         !strncmp(name, "adam_v.", 7);
}

static inline double element(const tr_checkpoint_tensor *t, size_t i) {
  float v;
  memcpy(&v, (const char *)t->data + i * sizeof v, sizeof v);
  return v;
}

/* ||a - b|| / ||b|| of two float tensors of one size (||a - b|| when b is zero). */
static inline double relative_difference(const tr_checkpoint_tensor *a,
                                         const tr_checkpoint_tensor *b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b->nbytes / sizeof(float); i++) {
    const double x = element(a, i), y = element(b, i);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* The largest ||a - b|| / ||b|| over the parameter tensors (not optimizer state) of two
 * checkpoints holding the same tensors; +inf when they cannot be compared or hold NaN (it
 * then prints why), so that no comparison passes by accident. */
static inline double params_difference(const char *file_a, const char *file_b, char *worst, size_t n) {
  tr_checkpoint *a = NULL, *b = NULL;
  char err[512];
  double most = 0;
  snprintf(worst, n, "-");
  if (tr_checkpoint_open(&a, file_a, err, sizeof err) ||
      tr_checkpoint_open(&b, file_b, err, sizeof err)) {
    printf("  %s\n", err);
    most = INFINITY;
    goto out;
  }
  size_t params = 0, params_a = 0;
  for (size_t k = 0; k < tr_checkpoint_count(a); k++)
    params_a += !optimizer_state(tr_checkpoint_tensor_at(a, k)->name);
  for (size_t k = 0; k < tr_checkpoint_count(b); k++) {
    const tr_checkpoint_tensor *tb = tr_checkpoint_tensor_at(b, k);
    if (optimizer_state(tb->name)) continue;
    params++;
    const tr_checkpoint_tensor *ta = tr_checkpoint_find(a, tb->name);
    if (ta == NULL || ta->dtype != TR_DTYPE_F32 || tb->dtype != TR_DTYPE_F32 ||
        ta->nbytes != tb->nbytes) {
      printf("  tensor '%s': missing or of another type or size in %s\n", tb->name, file_a);
      most = INFINITY;
      goto out;
    }
    const double rel = relative_difference(ta, tb);
    if (isnan(rel)) printf("  tensor '%s' holds NaN or infinity\n", tb->name);
    if (!(rel < most)) { /* NaN included */
      most = isnan(rel) ? INFINITY : rel;
      snprintf(worst, n, "%s", tb->name);
    }
  }
  if (params == 0 || params != params_a) {
    printf("  %s holds %zu parameter tensors, %s %zu\n", file_a, params_a, file_b, params);
    most = INFINITY;
  }
out:
  tr_checkpoint_close(a);
  tr_checkpoint_close(b);
  return most;
}

/* A whole file, malloc'd; NULL when it cannot be read. */
static inline char *slurp(const char *file, size_t *size) {
  FILE *f = fopen(file, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  rewind(f);
  char *buf = malloc(*size ? *size : 1);
  if (buf && fread(buf, 1, *size, f) != *size) free(buf), buf = NULL;
  fclose(f);
  return buf;
}

/* Whether two files can be read and hold the same bytes. */
static inline bool same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  const bool same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

#endif
