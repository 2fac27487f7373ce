/* test_cuda_data.c — samples generated on a GPU (tr_data_gen, tr_synth_fill on cuda:0)
 * against tr_data_fill on the host: tokens and labels bit for bit, floats within one ulp
 * (and the count that are not the same bits printed), for every generated kind, mlp's size
 * included, over sample ranges that reach the ziggurat's tail, inputs and targets together,
 * inputs alone and targets alone, with nothing written past the buffers; and training with
 * the samples made on the GPU (data_on device) gives the parameters training with the
 * loader's batches gives (data_on host), deterministic runs bit for bit.
 *
 * Each test runs all its cases and prints each difference before it fails, so that one run
 * on a GPU says everything it can. Exits 77 (skipped) when there is no GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../../models/data_impl.h"
#include "troupe.h"

#define SCRATCH_NAME "cuda-data"
#include "../../actors/scratch.h"
#include "../../actors/compare.h"
#include "../../actors/specs.h"

static const tr_data_config sources[] = {
    {.kind = TR_DATA_GAUSSIAN, .seed = 3, .in = 7, .out = 5, .ctx = 3},
    {.kind = TR_DATA_GAUSSIAN, .seed = 1, .in = 1024, .out = 1024}, /* mlp's */
    {.kind = TR_DATA_TEACHER, .seed = 1, .in = 10, .out = 1},        /* simplenet's */
    {.kind = TR_DATA_TEACHER, .seed = 9, .in = 20, .out = 3, .ctx = 5},
    {.kind = TR_DATA_CLASSIFIER, .seed = 4, .in = 12, .classes = 4, .ctx = 3},
    {.kind = TR_DATA_ARITHMETIC, .seed = 1, .ctx = 64}, /* gpt's, 1 MiB */
};
enum { NSOURCES = sizeof sources / sizeof *sources, PAD = 256, SENTINEL = 0xa5 };

static const char *kind_name(const tr_synth *s) {
  static const char *const names[] = {"gaussian", "teacher", "classifier", "tokens"};
  return names[s->kind];
}

/* The first sample from `from` whose normals reach the ziggurat's tail. */
static uint64_t tail_sample(const tr_synth *src, uint64_t from) {
  const size_t rows = (size_t)src->rows;
  const size_t n = rows * (size_t)src->in + (src->kind == TR_SYNTH_GAUSSIAN ? rows * (size_t)src->out : 0);
  for (uint64_t i = from;; i++) {
    tr__rng r = tr__rng_for(src->seed, TR__TAG_SAMPLE, i);
    for (size_t v = 0; v < n; v++) {
      int32_t hz;
      unsigned iz;
      tr__zig_split(tr__rng_peek(&r, 0), &hz, &iz);
      if (iz == 0 && !tr__zig_inside(src->zig, hz, iz)) return i;
      (void)tr__normal(src->zig, &r);
    }
  }
}

/* Distance in ulps between two floats of one sign (and across 0). */
static int64_t ulps(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return llabs((long long)ia - ib);
}

/* got against want, `bytes` of floats (or of int32 when ints): false, printed, when they
 * differ by more than allowed; exact differences counted in *inexact. */
static bool compare(const char *what, const void *got, const void *want, size_t bytes, bool ints,
                    size_t *inexact) {
  if (ints) {
    if (!memcmp(got, want, bytes)) return true;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes / 4; i++)
      if (((const int32_t *)got)[i] != ((const int32_t *)want)[i]) first = bad++ ? first : i;
    printf("  %s: %zu of %zu int32 differ (first at %zu: %d, host %d)\n", what, bad, bytes / 4,
           first, ((const int32_t *)got)[first], ((const int32_t *)want)[first]);
    return false;
  }
  const float *g = got, *w = want;
  int64_t most = 0;
  size_t at = 0;
  for (size_t i = 0; i < bytes / 4; i++) {
    const int64_t u = isnan(g[i]) || isnan(w[i]) ? INT64_MAX : ulps(g[i], w[i]);
    *inexact += u != 0;
    if (u > most) most = u, at = i;
  }
  if (most <= 1) return true;
  printf("  %s: float %zu is %.9g, the host's %.9g (%lld ulps)\n", what, at, (double)g[at],
         (double)w[at], (long long)most);
  return false;
}

/* One range of one source on the GPU: both parts, inputs alone, targets alone. */
static bool check_range(tr_data *d, tr_data_gen *g, tr_device *dev, uint64_t first, size_t count,
                        size_t *inexact) {
  const tr_synth *src = d->ops->synth(d);
  const size_t xb = count * tr_data_x_bytes(d), yb = count * tr_data_y_bytes(d);
  uint8_t *want_x = malloc(xb), *want_y = malloc(yb), *got = malloc((xb > yb ? xb : yb) + PAD);
  assert_int_equal(tr_data_fill(d, first, count, want_x, want_y), 0);
  tr_stream *s = tr_device_stream(dev);
  bool ok = true;
  for (int part = 0; part < 3; part++) {
    void *x = NULL, *y = NULL;
    if (part != 2) assert_int_equal(tr_device_alloc(dev, xb + PAD, &x), 0);
    if (part != 1) assert_int_equal(tr_device_alloc(dev, yb + PAD, &y), 0);
    if ((x && tr_memset(s, x, SENTINEL, xb + PAD)) || (y && tr_memset(s, y, SENTINEL, yb + PAD)) ||
        tr_data_gen_fill(g, s, first, count, x, y)) {
      printf("  %s: %s\n", kind_name(src), tr_device_error(dev));
      ok = false;
    }
    const struct {
      void *dev;
      const uint8_t *want;
      size_t bytes;
      bool ints;
      const char *name;
    } parts[2] = {{x, want_x, xb, src->kind == TR_SYNTH_TOKENS, "x"},
                  {y, want_y, yb, src->kind == TR_SYNTH_TOKENS || src->kind == TR_SYNTH_CLASSIFIER, "y"}};
    for (int k = 0; k < 2 && ok; k++) {
      if (!parts[k].dev) continue;
      assert_int_equal(tr_memcpy(s, got, parts[k].dev, parts[k].bytes + PAD, TR_COPY_D2H), 0);
      assert_int_equal(tr_stream_synchronize(s), 0);
      char what[128];
      snprintf(what, sizeof what, "%s seed %llu, samples [%llu, %llu), %s (part %d)",
               kind_name(src), (unsigned long long)src->seed, (unsigned long long)first,
               (unsigned long long)(first + count), parts[k].name, part);
      ok = compare(what, got, parts[k].want, parts[k].bytes, parts[k].ints, inexact) && ok;
      for (size_t i = 0; i < PAD; i++)
        if (got[parts[k].bytes + i] != SENTINEL) {
          printf("  %s: written past its end (byte %zu)\n", what, i);
          ok = false;
          break;
        }
    }
    tr_device_free(dev, x);
    tr_device_free(dev, y);
  }
  free(want_x);
  free(want_y);
  free(got);
  return ok;
}

static void gpu_samples_are_the_hosts(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512];
  assert_int_equal(tr_device_list_open(&devs, "cuda:0", err, sizeof err), 0);
  tr_device *dev = tr_device_list_at(devs, 0);
  bool ok = true;
  for (int i = 0; i < NSOURCES; i++) {
    tr_data *d;
    assert_int_equal(tr_data_open(&d, &sources[i], err, sizeof err), 0);
    const tr_synth *src = d->ops->synth(d);
    tr_data_gen *g;
    if (tr_data_gen_open(&g, d, dev, err, sizeof err)) {
      printf("  %s\n", err);
      ok = false;
      tr_data_close(d);
      continue;
    }
    size_t inexact = 0, values = 0;
    const uint64_t firsts[3] = {0, 1000003, src->kind == TR_SYNTH_TOKENS ? 77 : tail_sample(src, 5)};
    const size_t counts[3] = {1, 256, 37};
    for (int r = 0; r < 3; r++) {
      ok = check_range(d, g, dev, firsts[r], counts[r], &inexact) && ok;
      values += 3 * counts[r] * (tr_data_x_bytes(d) + tr_data_y_bytes(d)) / 4;
    }
    printf("  %-10s seed %llu: %zu of about %zu values not the host's bits (floats: <= 1 ulp)\n",
           kind_name(src), (unsigned long long)src->seed, inexact, values);
    tr_data_gen_close(g);
    tr_data_close(d);
  }
  tr_device_list_close(devs);
  assert_true(ok);
}

/* ---- training --------------------------------------------------------------------------------- */

static bool run_to(tr_train_options o, const char *file) {
  char err[1024];
  tr_train_result r;
  o.job.checkpoint.path = path(file);
  int rc = tr_train_run(&o, &r, err, sizeof err);
  if (rc) printf("  %s on %s, data_on %s: FAILED: %s\n", model_name(&o), o.devices,
                 tr_data_on_name(o.job.data_on), err);
  return rc == 0;
}

static void training_on_gpu_made_samples_is_training_on_the_loaders(void **state) {
  (void)state;
  const struct {
    const char *model;
    const tr_model_spec *spec;
    const char *devices;
    tr_strategy strategy;
    int batch, microbatches;
  } cases[] = {
      {"mlp", NULL, "cuda:0", TR_STRATEGY_SINGLE, 0, 1},
      {"simplenet", NULL, "cuda:0", TR_STRATEGY_SINGLE, 0, 1},
      {NULL, &gpt1, "cuda:0,cuda:0", TR_STRATEGY_PIPELINE, 48, 4},
  };
  bool ok = true;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tr_train_options o = tr_train_defaults();
    o.model = cases[i].model;
    o.spec = cases[i].spec;
    o.devices = cases[i].devices;
    o.strategy = cases[i].strategy;
    o.job.global_batch = cases[i].batch;
    o.job.layout.microbatches = cases[i].microbatches;
    o.steps = 10;
    o.deterministic = 1;
    o.job.data_on = TR_DATA_ON_HOST;
    if (!run_to(o, "host.safetensors")) { ok = false; continue; }
    o.job.data_on = TR_DATA_ON_DEVICE;
    if (!run_to(o, "device.safetensors")) { ok = false; continue; }
    char worst[128];
    const bool same = same_file(path("host.safetensors"), path("device.safetensors"));
    const double diff = same ? 0 : params_difference(path("host.safetensors"),
                                                     path("device.safetensors"), worst, sizeof worst);
    printf("  %s on %s: %s\n", model_name(&o), o.devices,
           same ? "bitwise the same" : "parameters differ");
    if (!same) printf("    relative difference %.3g (%s)\n", diff, worst);
    ok = ok && diff <= 1e-5;
  }
  assert_true(ok);
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_data: no GPU on this machine: skipped\n");
    return 77;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_samples_are_the_hosts),
      cmocka_unit_test(training_on_gpu_made_samples_is_training_on_the_loaders),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
