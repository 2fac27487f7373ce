/* costs_fixture.h — what test_plan_costs.c and test_costs_file.c share: a folder of the
 * test's own with the file of costs in it, a host device and a small mlp (setup, teardown),
 * the layers' times through a file (times_of), a path refused (expect_refused). Include
 * once, in a test program, after cmocka.h, troupe.h and planner.h. */
#ifndef TR_TEST_COSTS_FIXTURE_H
#define TR_TEST_COSTS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 3 }; /* mlp of depth 2: linear, relu, linear */
static const tr__costs_unit seconds = TR__COSTS_SECONDS;

typedef struct fixture {
  char dir[64], path[128];
  tr_device_list *devs;
  tr_device *dev;
  tr_model *m;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/troupe-costs-XXXXXX");
  if (!f || !mkdtemp(f->dir)) return -1;
  snprintf(f->path, sizeof f->path, "%s/costs.safetensors", f->dir);
  char err[256];
  if (tr_device_list_open(&f->devs, "host:1", err, sizeof err) || tr_model_mlp(&f->m, 16, 2))
    return -1;
  f->dev = tr_device_list_at(f->devs, 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  if (system(cmd) != 0) return -1;
  tr_model_free(f->m);
  tr_device_list_close(f->devs);
  free(f);
  return 0;
}

/* times of f->m at `batch` through `path`; whether they were measured. */
static bool times_of(fixture *f, const tr_model *m, int batch, const tr_plan_costs_config *c,
                     tr_layer_times *t) {
  bool measured;
  char err[512] = "";
  const int rc = tr_plan_layer_times(m, f->dev, batch, c, t, &measured, err, sizeof err);
  if (rc) fail_msg("tr_plan_layer_times: %s (%d)", err, rc);
  return measured;
}

/* What is at a path given and is not a file of costs is not ours: refused, left as it was. */
static void expect_refused(fixture *f, const char *path, const char *want) {
  tr_layer_times t[L];
  bool measured = true;
  char err[512] = "";
  assert_int_equal(tr_plan_layer_times(f->m, f->dev, 4, &(tr_plan_costs_config){.path = path},
                                       t, &measured, err, sizeof err),
                   TR_EINVAL);
  if (!strstr(err, want)) fail_msg("the error \"%s\" does not say \"%s\"", err, want);
  assert_false(measured);
}

#endif
