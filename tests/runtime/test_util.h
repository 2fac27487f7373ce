/* test_util.h — small helpers shared by the runtime tests. */
#ifndef TR_TEST_UTIL_H
#define TR_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>

/* Test sizes scale with TR_TEST_SCALE (the stress suite sets it; sanitizer runs may lower
 * it): n × scale, at least 1. */
static inline uint64_t test_scaled(uint64_t n) {
  const char *s = getenv("TR_TEST_SCALE");
  double scale = s ? atof(s) : 1.0;
  uint64_t v = (uint64_t)((double)n * scale);
  return v ? v : 1;
}

/* xorshift64*: a fast per-thread generator for random delays. */
static inline uint64_t test_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

#endif
