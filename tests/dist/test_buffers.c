/* test_buffers.c — the transport's message buffers (dist/buffers.h): a large buffer given
 * back is the next one taken for as many bytes or fewer (its pages mapped once), the smallest
 * kept one that holds a message is the one taken, small ones and those past the pool's count
 * go back to the allocator, and two threads taking and giving at once (the transport's actor
 * and its progress thread) never share a buffer. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "buffers.h"

enum { MIB = 1 << 20 };

static void a_large_buffer_given_back_is_taken_again(void **state) {
  (void)state;
  tr__buffers b;
  tr__buffers_init(&b);
  uint8_t *p = tr__buffer_take(&b, 4 * MIB);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 64, 0);
  memset(p, 1, 4 * MIB); /* every byte its own */
  tr__buffer_give(&b, p);
  assert_int_equal(b.n, 1);
  assert_ptr_equal(tr__buffer_take(&b, 3 * MIB), p); /* fewer bytes: the same */
  assert_int_equal(b.n, 0);
  tr__buffer_give(&b, p);
  uint8_t *q = tr__buffer_take(&b, 5 * MIB); /* more: a new one, the kept one stays */
  assert_ptr_not_equal(q, p);
  assert_int_equal(b.n, 1);
  tr__buffer_give(&b, q);
  tr__buffers_destroy(&b);
}

static void the_smallest_that_holds_it_is_taken(void **state) {
  (void)state;
  tr__buffers b;
  tr__buffers_init(&b);
  uint8_t *big = tr__buffer_take(&b, 8 * MIB), *mid = tr__buffer_take(&b, 2 * MIB),
          *least = tr__buffer_take(&b, 1 * MIB);
  tr__buffer_give(&b, big);
  tr__buffer_give(&b, least);
  tr__buffer_give(&b, mid);
  assert_ptr_equal(tr__buffer_take(&b, MIB + 1), mid);
  assert_ptr_equal(tr__buffer_take(&b, MIB / 2), least);
  assert_ptr_equal(tr__buffer_take(&b, MIB), big);
  tr__buffer_give(&b, big);
  tr__buffer_give(&b, mid);
  tr__buffer_give(&b, least);
  tr__buffers_destroy(&b);
}

static void small_buffers_and_those_past_the_count_are_freed(void **state) {
  (void)state;
  tr__buffers b;
  tr__buffers_init(&b);
  tr__buffer_give(&b, tr__buffer_take(&b, 4096));
  assert_int_equal(b.n, 0);
  uint8_t *p[TR__BUFFERS_KEPT + 2];
  for (int i = 0; i < TR__BUFFERS_KEPT + 2; i++) assert_non_null(p[i] = tr__buffer_take(&b, MIB));
  for (int i = 0; i < TR__BUFFERS_KEPT + 2; i++) tr__buffer_give(&b, p[i]);
  assert_int_equal(b.n, TR__BUFFERS_KEPT);
  assert_int_equal(b.bytes, (size_t)TR__BUFFERS_KEPT * MIB);
  tr__buffer_give(&b, NULL);
  tr__buffers_destroy(&b);
}

typedef struct worker {
  tr__buffers *b;
  uint8_t mark;
  int bad;
} worker;

/* Takes a buffer, fills it with its mark, lets the other thread run, finds its mark whole. */
static void *take_and_give(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 2000; i++) {
    const size_t n = (size_t)(256 << 10) + (size_t)(i % 7) * 4096;
    uint8_t *p = tr__buffer_take(w->b, n);
    if (p == NULL) return w->bad++, NULL;
    memset(p, w->mark, n);
    sched_yield();
    for (size_t k = 0; k < n; k += 997) w->bad += p[k] != w->mark;
    w->bad += p[n - 1] != w->mark;
    tr__buffer_give(w->b, p);
  }
  return NULL;
}

static void two_threads_never_share_a_buffer(void **state) {
  (void)state;
  tr__buffers b;
  tr__buffers_init(&b);
  worker w[2] = {{&b, 0xa5, 0}, {&b, 0x5a, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, take_and_give, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(w[0].bad + w[1].bad, 0);
  assert_true(b.n >= 1 && b.n <= TR__BUFFERS_KEPT); /* kept, never more than the pool holds */
  tr__buffers_destroy(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_large_buffer_given_back_is_taken_again),
      cmocka_unit_test(the_smallest_that_holds_it_is_taken),
      cmocka_unit_test(small_buffers_and_those_past_the_count_are_freed),
      cmocka_unit_test(two_threads_never_share_a_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
