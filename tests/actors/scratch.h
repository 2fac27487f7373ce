/* scratch.h — a scratch directory per test program (checkpoints, traces), made by the group
 * setup and removed by its teardown; path("x") names a file in it. Include once, in a test
 * program, after defining SCRATCH_NAME ("train" gives /tmp/troupe-train-XXXXXX). */
#ifndef TR_TEST_SCRATCH_H
#define TR_TEST_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

static char dir[] = "/tmp/troupe-" SCRATCH_NAME "-XXXXXX";

static int setup(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd);
}

/* Eight names may be alive at once. */
static const char *path(const char *name) {
  static char buf[8][256];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", dir, name);
  return p;
}

#endif
