/* test_tensor_comm.c — a tensor group's collectives (tr_tensor_comms_open, tr_layer_type.h) on
 * host devices, each member on a thread of its own: many rounds of all-reduce (sum, max),
 * all-gather and reduce-scatter of sizes 1 to large with T = 2, 3 and 4, every member's
 * result bitwise the sum in member order; the counts (ring-equivalent bytes); members that
 * disagree refused together; groups that cannot be refused at open. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_model.h"

static const size_t sizes[] = {1, 2, 3, 17, 64, 1000, 4099, 1 << 16};
enum { NSIZES = sizeof sizes / sizeof sizes[0], MAXT = 4 };

static int scale(void) {
  const char *e = getenv("TR_TEST_SCALE");
  return e && atoi(e) > 1 ? atoi(e) : 1;
}

/* Member m's value at i in round r: fractions whose sums round, so an order other than the
 * members' would show. */
static float value(int r, int m, size_t i) {
  const uint64_t h = tr_layer_seed((uint64_t)r * 8 + (uint64_t)m, i);
  return (float)((int64_t)(h % 2000001) - 1000000) / 997.0f;
}

typedef struct member_run {
  int rank, T, rounds;
  tr_device *dev;
  const tr_tensor_comm *c;
  int failed;            /* the first round that went wrong, + 1 */
  char why[160];
  uint64_t expect_bytes;
} member_run;

/* round r's collective and size: every member derives the same */
static int kind_of(int r) { return r % 4; }
static size_t size_of(int r, int T) { return sizes[(r / 4 + (size_t)T) % NSIZES]; }

static int check_round(member_run *me, int r, const float *got, size_t n) {
  const int T = me->T, k = kind_of(r);
  const size_t out = k == 2 ? n * (size_t)T : n;
  for (size_t i = 0; i < out; i++) {
    float want;
    if (k == 2) {
      want = value(r, (int)(i / n), i % n);
    } else {
      const size_t at = k == 3 ? (size_t)me->rank * n + i : i;
      want = value(r, 0, at);
      for (int m = 1; m < T; m++) {
        const float x = value(r, m, at);
        want = k == 1 ? (x > want ? x : want) : want + x;
      }
    }
    if (memcmp(&want, &got[i], sizeof want)) {
      snprintf(me->why, sizeof me->why, "T %d round %d (kind %d, n %zu) member %d: [%zu] %.9g, "
               "not %.9g", T, r, k, n, me->rank, i, got[i], want);
      return 1;
    }
  }
  return 0;
}

static void *member_main(void *arg) {
  member_run *me = arg;
  if (tr_device_bind(me->dev)) abort();
  tr_stream *s = tr_device_stream(me->dev);
  const size_t most = sizes[NSIZES - 1] * MAXT;
  float *in, *out, *hin = malloc(most * 4), *hout = malloc(most * 4);
  if (!hin || !hout || tr_device_alloc(me->dev, most * 4, (void **)&in) ||
      tr_device_alloc(me->dev, most * 4, (void **)&out))
    abort();
  const int T = me->T;
  for (int r = 0; r < me->rounds && !me->failed; r++) {
    const size_t n = size_of(r, T);
    const int k = kind_of(r);
    const size_t whole = k == 3 ? n * (size_t)T : n;
    for (size_t i = 0; i < whole; i++) hin[i] = value(r, me->rank, i);
    int rc = tr_memcpy(s, in, hin, whole * 4, TR_COPY_H2D);
    if (rc) abort();
    const float *got = out;
    switch (k) {
    case 0:
      rc = me->c->all_reduce(me->c, s, in, n, TR_REDUCE_SUM), got = in;
      me->expect_bytes += 2 * (uint64_t)(T - 1) * n * 4 / (uint64_t)T;
      break;
    case 1:
      rc = me->c->all_reduce(me->c, s, in, n, TR_REDUCE_MAX), got = in;
      me->expect_bytes += 2 * (uint64_t)(T - 1) * n * 4 / (uint64_t)T;
      break;
    case 2:
      rc = me->c->all_gather(me->c, s, in, out, n);
      me->expect_bytes += (uint64_t)(T - 1) * n * 4;
      break;
    default:
      rc = me->c->reduce_scatter(me->c, s, in, out, n);
      me->expect_bytes += (uint64_t)(T - 1) * n * 4;
      break;
    }
    const size_t got_n = k == 2 ? n * (size_t)T : n;
    if (!rc) rc = tr_memcpy(s, hout, got, got_n * 4, TR_COPY_D2H);
    if (!rc) rc = tr_stream_synchronize(s);
    if (rc) {
      snprintf(me->why, sizeof me->why, "round %d: %s", r, tr_strerror(rc));
      me->failed = r + 1;
    } else if (check_round(me, r, hout, n)) {
      me->failed = r + 1;
    }
  }
  tr_device_free(me->dev, in);
  tr_device_free(me->dev, out);
  free(hin), free(hout);
  return NULL;
}

static void run_group(int T, int rounds) {
  tr_device_list *l = mt_open(T);
  tr_device *devs[MAXT];
  for (int i = 0; i < T; i++) devs[i] = tr_device_list_at(l, i);
  tr_tensor_comm *comms[MAXT];
  char err[256];
  if (tr_tensor_comms_open(devs, T, comms, err, sizeof err)) fail_msg("%s", err);
  member_run runs[MAXT];
  pthread_t th[MAXT];
  for (int i = 0; i < T; i++) {
    assert_int_equal(comms[i]->rank, i);
    assert_int_equal(comms[i]->size, T);
    runs[i] = (member_run){.rank = i, .T = T, .rounds = rounds, .dev = devs[i], .c = comms[i]};
    assert_int_equal(pthread_create(&th[i], NULL, member_main, &runs[i]), 0);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < T; i++) {
    if (runs[i].failed) fail_msg("%s", runs[i].why);
    uint64_t colls, bytes;
    tr_tensor_comm_counts(comms[i], &colls, &bytes);
    assert_int_equal(colls, (uint64_t)rounds);
    assert_int_equal(bytes, runs[i].expect_bytes);
  }
  tr_tensor_comms_close(comms, T);
  assert_null(comms[0]);
  tr_device_list_close(l);
}

static void every_member_gets_the_sum_in_member_order_with_two(void **state) {
  (void)state;
  run_group(2, 160 * scale());
}

static void every_member_gets_the_sum_in_member_order_with_three(void **state) {
  (void)state;
  run_group(3, 160 * scale());
}

static void every_member_gets_the_sum_in_member_order_with_four(void **state) {
  (void)state;
  run_group(4, 160 * scale());
}

static void a_group_of_one_copies_and_counts_no_bytes(void **state) {
  (void)state;
  run_group(1, 16);
}

/* Members that call different collectives (here: different sizes) all fail, none hangs. */
typedef struct odd_run {
  tr_device *dev;
  const tr_tensor_comm *c;
  size_t n;
  int rc, rc_after;
} odd_run;

static void *odd_main(void *arg) {
  odd_run *o = arg;
  if (tr_device_bind(o->dev)) abort();
  float *b;
  if (tr_device_alloc(o->dev, 64 * 4, (void **)&b)) abort();
  tr_stream *s = tr_device_stream(o->dev);
  if (tr_fill(s, b, 64, 1.0f)) abort();
  o->rc = o->c->all_reduce(o->c, s, b, o->n, TR_REDUCE_SUM);
  o->rc_after = o->c->all_reduce(o->c, s, b, 8, TR_REDUCE_SUM); /* the group goes on */
  tr_device_free(o->dev, b);
  return NULL;
}

static void members_that_disagree_are_all_refused_and_the_group_goes_on(void **state) {
  (void)state;
  tr_device_list *l = mt_open(3);
  tr_device *devs[3] = {tr_device_list_at(l, 0), tr_device_list_at(l, 1), tr_device_list_at(l, 2)};
  tr_tensor_comm *comms[3];
  char err[256];
  assert_int_equal(tr_tensor_comms_open(devs, 3, comms, err, sizeof err), 0);
  odd_run o[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    o[i] = (odd_run){.dev = devs[i], .c = comms[i], .n = i == 2 ? 9 : 8};
    assert_int_equal(pthread_create(&th[i], NULL, odd_main, &o[i]), 0);
  }
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(o[i].rc, TR_EINVAL);
    assert_int_equal(o[i].rc_after, 0);
  }
  tr_tensor_comms_close(comms, 3);
  tr_device_list_close(l);
}

/* A member that fails aborts the group: the others, waiting for it, return. */
typedef struct abort_run {
  tr_device *dev;
  const tr_tensor_comm *c;
  int aborts, rc, rc_after;
} abort_run;

static void *abort_main(void *arg) {
  abort_run *o = arg;
  if (tr_device_bind(o->dev)) abort();
  float *b;
  if (tr_device_alloc(o->dev, 64 * 4, (void **)&b)) abort();
  tr_stream *s = tr_device_stream(o->dev);
  if (tr_fill(s, b, 64, 1.0f)) abort();
  o->rc = 0;
  if (o->aborts) {
    struct timespec ms = {0, 20 * 1000 * 1000}; /* let the others wait first */
    nanosleep(&ms, NULL);
    tr_tensor_comm_abort(o->c);
  } else {
    o->rc = o->c->all_reduce(o->c, s, b, 64, TR_REDUCE_SUM);
  }
  o->rc_after = o->c->all_gather(o->c, s, b, b, 1);
  tr_device_free(o->dev, b);
  return NULL;
}

static void a_failing_member_aborts_the_group_and_no_one_waits(void **state) {
  (void)state;
  tr_device_list *l = mt_open(3);
  tr_device *devs[3] = {tr_device_list_at(l, 0), tr_device_list_at(l, 1), tr_device_list_at(l, 2)};
  tr_tensor_comm *comms[3];
  char err[256];
  assert_int_equal(tr_tensor_comms_open(devs, 3, comms, err, sizeof err), 0);
  abort_run o[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    o[i] = (abort_run){.dev = devs[i], .c = comms[i], .aborts = i == 1};
    assert_int_equal(pthread_create(&th[i], NULL, abort_main, &o[i]), 0);
  }
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) {
    if (i != 1) assert_int_equal(o[i].rc, TR_ESTATE);
    assert_int_equal(o[i].rc_after, TR_ESTATE);
  }
  tr_tensor_comms_close(comms, 3);
  tr_device_list_close(l);
}

static void a_device_twice_is_refused_naming_it(void **state) {
  (void)state;
  tr_device_list *l = mt_open(2);
  tr_device *devs[2] = {tr_device_list_at(l, 1), tr_device_list_at(l, 1)};
  tr_tensor_comm *comms[2];
  char err[256] = "";
  assert_int_equal(tr_tensor_comms_open(devs, 2, comms, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "members 0 and 1"));
  assert_null(comms[0]);
  assert_int_equal(tr_tensor_comms_open(devs, 0, comms, err, sizeof err), TR_EINVAL);
  tr_device_list_close(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_member_gets_the_sum_in_member_order_with_two),
      cmocka_unit_test(every_member_gets_the_sum_in_member_order_with_three),
      cmocka_unit_test(every_member_gets_the_sum_in_member_order_with_four),
      cmocka_unit_test(a_group_of_one_copies_and_counts_no_bytes),
      cmocka_unit_test(members_that_disagree_are_all_refused_and_the_group_goes_on),
      cmocka_unit_test(a_failing_member_aborts_the_group_and_no_one_waits),
      cmocka_unit_test(a_device_twice_is_refused_naming_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
