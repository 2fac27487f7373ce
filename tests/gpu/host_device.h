/* host_device.h — one host device for a whole group of cmocka tests of the host backend's
 * ops (setup, teardown open and close host:1 as `dev`), and RUN and CHECK over op_harness.h's
 * th_run and th_check on it. Shared by host_fixture.h's programs and test_vocab_ops.c. */
#ifndef TR_TEST_HOST_DEVICE_H
#define TR_TEST_HOST_DEVICE_H

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

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define RUN(args, fn, p, out) assert_int_equal(th_run(dev, args, NARGS(args), fn, p, out), 0)
#define CHECK(what, got, ref, n, tol) assert_true(th_check(what, got, ref, n, tol))

#endif
