/* test_fault_device.c — the fault decorator (device spec fault(SPEC;RULE), gpu/fault.h): the
 * devices of SPEC under their own names, the calls its rule counts slowed (by a delay that
 * grows every E calls) or failed on the N-th, on the device it names only, and rules that do
 * not parse refused by name; several rules in one spec, each counting its own calls, and
 * from=N (every call from the N-th fails). On host devices, whose ops run on the calling
 * thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tr_device.h"

static tr_device_list *open_ok(const char *spec) {
  tr_device_list *l = NULL;
  char err[256];
  if (tr_device_list_open(&l, spec, err, sizeof err)) fail_msg("%s: %s", spec, err);
  return l;
}

/* The milliseconds a tr_scale of 16 floats takes on d, and its status in *rc. */
static double scale_ms(tr_device *d, float *x, int *rc) {
  const uint64_t t0 = tr_now_ns();
  *rc = tr_scale(tr_device_stream(d), x, 2.0f, 16);
  return (double)(tr_now_ns() - t0) / 1e6;
}

static void a_fault_spec_names_its_devices_as_the_spec_inside(void **state) {
  (void)state;
  tr_device_list *l = open_ok("fault(host:2;dev=1,op=scale,us=1000)");
  assert_int_equal(tr_device_list_count(l), 2);
  assert_string_equal(tr_device_name(tr_device_list_at(l, 0)), "host:0");
  assert_string_equal(tr_device_name(tr_device_list_at(l, 1)), "host:1");
  assert_int_equal(tr_device_info_of(tr_device_list_at(l, 1))->kind, TR_DEVICE_HOST);
  /* one backend still: peers, as two host devices are */
  assert_true(tr_device_can_access_peer(tr_device_list_at(l, 0), tr_device_list_at(l, 1)));
  /* and to a host device of another list, undecorated (an asynchronous job's server) */
  tr_device_list *plain = open_ok("host:1");
  tr_device *a = tr_device_list_at(plain, 0), *b = tr_device_list_at(l, 1);
  assert_true(tr_device_can_access_peer(a, b) && tr_device_can_access_peer(b, a));
  assert_int_equal(tr_device_bind(a), 0);
  assert_int_equal(tr_device_bind(b), 0);
  float *x, *y, h[4] = {1, 2, 3, 4}, back[4] = {0};
  assert_int_equal(tr_device_alloc(a, sizeof h, (void **)&x), 0);
  assert_int_equal(tr_device_alloc(b, sizeof h, (void **)&y), 0);
  assert_int_equal(tr_memcpy(tr_device_stream(a), x, h, sizeof h, TR_COPY_H2D), 0);
  assert_int_equal(tr_memcpy_peer(tr_device_stream(b), y, b, x, a, sizeof h), 0);
  assert_int_equal(tr_memcpy(tr_device_stream(b), back, y, sizeof h, TR_COPY_D2H), 0);
  assert_memory_equal(back, h, sizeof h);
  tr_device_free(a, x);
  tr_device_free(b, y);
  tr_device_list_close(plain);
  tr_device_list_close(l);
}

static void the_named_device_sleeps_after_the_counted_ops_and_fails_the_nth(void **state) {
  (void)state;
  tr_device_list *l = open_ok("fault(host:2;dev=1,op=scale,us=20000,fail=3)");
  tr_device *fast = tr_device_list_at(l, 0), *slow = tr_device_list_at(l, 1);
  assert_int_equal(tr_device_bind(fast), 0);
  assert_int_equal(tr_device_bind(slow), 0);
  float *x, *y;
  assert_int_equal(tr_device_alloc(fast, 16 * sizeof(float), (void **)&x), 0);
  assert_int_equal(tr_device_alloc(slow, 16 * sizeof(float), (void **)&y), 0);
  assert_int_equal(tr_fill(tr_device_stream(slow), y, 16, 1.0f), 0); /* not counted */
  int rc;
  for (int k = 0; k < 3; k++) {
    const double ms = scale_ms(fast, x, &rc);
    assert_int_equal(rc, 0);
    if (ms > 15) fail_msg("host:0 is not named by the rule, yet its scale took %.1f ms", ms);
  }
  for (int k = 1; k <= 2; k++) {
    const double ms = scale_ms(slow, y, &rc);
    assert_int_equal(rc, 0);
    if (ms < 19) fail_msg("host:1's scale %d took %.1f ms, not the 20 asked", k, ms);
  }
  assert_int_equal(scale_ms(slow, y, &rc) < 15, 1); /* fails at once, without running */
  assert_int_equal(rc, TR_EDEVICE);
  if (!strstr(tr_device_error(slow), "host:1") || !strstr(tr_device_error(slow), "injected"))
    fail_msg("the failure reads '%s'", tr_device_error(slow));
  float h[16];
  assert_int_equal(tr_memcpy(tr_device_stream(slow), h, y, sizeof h, TR_COPY_D2H), 0);
  assert_true(h[0] == 4.0f); /* two scales ran, the third did not */
  assert_int_equal(scale_ms(slow, y, &rc) > 19, 1); /* only the third */
  assert_int_equal(rc, 0);
  tr_device_free(fast, x);
  tr_device_free(slow, y);
  tr_device_list_close(l);
}

static void the_delay_grows_every_e_calls(void **state) {
  (void)state;
  tr_device_list *l = open_ok("fault(host:1;op=scale,grow=15000,every=2)");
  tr_device *d = tr_device_list_at(l, 0);
  assert_int_equal(tr_device_bind(d), 0);
  float *x;
  assert_int_equal(tr_device_alloc(d, 16 * sizeof(float), (void **)&x), 0);
  int rc;
  const double want[] = {0, 0, 15, 15, 30};
  for (int k = 0; k < 5; k++) {
    const double ms = scale_ms(d, x, &rc);
    assert_int_equal(rc, 0);
    if (ms < want[k] - 1 || ms > want[k] + 12)
      fail_msg("call %d took %.1f ms, expected about %.0f", k + 1, ms, want[k]);
  }
  tr_device_free(d, x);
  tr_device_list_close(l);
}

/* fault(SPEC;RULE;RULE): each rule counts its own calls; from=N fails the N-th counted call
 * and every one after it (a device that died), on its device only. */
static void several_rules_each_count_and_from_n_fails_every_call_after(void **state) {
  (void)state;
  tr_device_list *l = open_ok("fault(host:3;dev=1,op=scale,from=2;dev=2,op=scale,from=4)");
  int rc;
  float *x[3];
  for (int d = 0; d < 3; d++) {
    tr_device *dev = tr_device_list_at(l, d);
    assert_int_equal(tr_device_bind(dev), 0);
    assert_int_equal(tr_device_alloc(dev, 16 * sizeof(float), (void **)&x[d]), 0);
  }
  const int first_failing[3] = {0, 2, 4}; /* 0: none */
  for (int d = 0; d < 3; d++)
    for (int k = 1; k <= 6; k++) {
      scale_ms(tr_device_list_at(l, d), x[d], &rc);
      const bool fails = first_failing[d] && k >= first_failing[d];
      if (rc != (fails ? TR_EDEVICE : 0))
        fail_msg("host:%d's scale %d: status %d, expected %s", d, k, rc, fails ? "a failure" : "0");
    }
  for (int d = 0; d < 3; d++) tr_device_free(tr_device_list_at(l, d), x[d]);
  tr_device_list_close(l);
  char err[256] = "";
  assert_int_equal(tr_device_list_open(&l, "fault(host:2;dev=1,fail=1;dev=2,fail=1)", err,
                                       sizeof err), TR_EINVAL);
  if (!strstr(err, "dev=2, of a list of 2")) fail_msg("the second rule's device: '%s'", err);
  assert_int_equal(tr_device_list_open(&l, "fault(host:1;from=0)", err, sizeof err), TR_EINVAL);
  if (!strstr(err, "from=0")) fail_msg("from=0: '%s'", err);
}

/* Across processes a rank's list takes the other ranks' devices as placeholders, which
 * renumbers its own (tr_device_list_add_placeholder): a rule still names the spec's device,
 * and counts it where its counts live (the index it had grew past the rule's counters). */
static void placeholders_before_the_devices_leave_the_rules_theirs(void **state) {
  (void)state;
  tr_device_list *l = open_ok("fault(host:2;dev=1,op=scale,fail=2)");
  const tr_device_info other = *tr_device_info_of(tr_device_list_at(l, 0));
  for (int k = 0; k < 3; k++) /* a rank 0 of three devices before this one's */
    assert_int_equal(tr_device_list_add_placeholder(l, 0, &other), 0);
  tr_device *mine[2] = {tr_device_list_at(l, 3), tr_device_list_at(l, 4)};
  assert_int_equal(tr_device_info_of(mine[1])->index, 4);
  float *x[2];
  for (int d = 0; d < 2; d++) {
    assert_int_equal(tr_device_bind(mine[d]), 0);
    assert_int_equal(tr_device_alloc(mine[d], 16 * sizeof(float), (void **)&x[d]), 0);
  }
  int rc;
  for (int k = 1; k <= 3; k++) {
    scale_ms(mine[0], x[0], &rc);
    assert_int_equal(rc, 0); /* the spec's host:0: no rule */
    scale_ms(mine[1], x[1], &rc);
    if (rc != (k == 2 ? TR_EDEVICE : 0)) fail_msg("the spec's host:1, scale %d: status %d", k, rc);
  }
  for (int d = 0; d < 2; d++) tr_device_free(mine[d], x[d]);
  tr_device_list_close(l);
}

static void bad_rules_are_refused_by_name(void **state) {
  (void)state;
  static const struct {
    const char *spec, *needle;
  } bad[] = {
      {"fault(host:1)", "expected fault(SPEC;RULE)"},
      {"fault(host:1;us=5", "expected fault(SPEC;RULE)"},
      {"fault(host:1;speed=2)", "unknown key 'speed'"},
      {"fault(host:1;op=bogus,from=2)", "op=bogus names no call a rule counts"},
      {"fault(host:1;us=-3)", "us=-3"},
      {"fault(host:1;fail=0)", "fail=0"},
      {"fault(host:2;dev=2,us=1)", "dev=2, of a list of 2"},
      {"fault(host:x;us=1)", "device spec 'host:x'"},
      {"fault(fault(host:1;us=1);us=1)", "one fault(...) per spec"},
      /* rules that could never fire: no effect, no call, a call the backend never makes */
      {"fault(host:1;op=mse_b)", "rule 'op=mse_b' neither slows a call nor fails one"},
      {"fault(host:1;dev=0,every=2)", "would do nothing: give us=U"},
      {"fault(host:1;op=mse,us=5;)", "rule '' neither slows"},
      {"fault(host:1;op=,fail=1)", "op= names no call (leave op out to count every call"},
      {"fault(host:2;dev=1,op=capture,fail=1)",
       "rule 1: op=capture is no call the host backend makes (host:1), so it would never fire"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tr_device_list *l = NULL;
    char err[256] = "";
    assert_int_equal(tr_device_list_open(&l, bad[i].spec, err, sizeof err), TR_EINVAL);
    assert_null(l);
    if (!strstr(err, bad[i].needle)) fail_msg("%s: '%s' does not say '%s'", bad[i].spec, err, bad[i].needle);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_fault_spec_names_its_devices_as_the_spec_inside),
      cmocka_unit_test(the_named_device_sleeps_after_the_counted_ops_and_fails_the_nth),
      cmocka_unit_test(the_delay_grows_every_e_calls),
      cmocka_unit_test(several_rules_each_count_and_from_n_fails_every_call_after),
      cmocka_unit_test(placeholders_before_the_devices_leave_the_rules_theirs),
      cmocka_unit_test(bad_rules_are_refused_by_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
