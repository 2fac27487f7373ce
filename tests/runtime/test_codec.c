/* test_codec.c — the generic pieces of message codecs (runtime/codec.h) and byte for byte
 * (tr_msg_codec_flat): arrays laid out on 64-byte boundaries, sizes from another process that
 * would wrap around making a total no buffer holds, a flat message (variable size too) back
 * as it went, short bytes refused, and which codec a type crosses an edge with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codec.h"

typedef struct flat_msg {
  tr_msg hdr;
  int a;
  double b;
} flat_msg;
static TR_MSGTYPE_DEFINE(flat_type, flat_msg);

static size_t none_size(const tr_msg *m) { return (void)m, 0; }
static void none_put(const tr_msg *m, uint8_t *out) { (void)m, (void)out; }
static tr_msg *none_get(const tr_msgtype *t, const uint8_t *in, size_t n) {
  return (void)in, (void)n, tr_msg_new(t);
}
static const tr_msg_codec own = {.size = none_size, .put = none_put, .get = none_get};
static TR_MSGTYPE_DEFINE_CODEC(own_type, flat_msg, &own);

static void arrays_start_on_64_byte_boundaries(void **state) {
  (void)state;
  const size_t bytes[3] = {1, 64, 0};
  const tr__codec_layout l = tr__codec_lay(40, bytes, 3);
  assert_int_equal(l.at[0], 64);
  assert_int_equal(l.at[1], 128);
  assert_int_equal(l.at[2], 192);
  assert_int_equal(l.total, 192);
  for (int i = 0; i < 3; i++) assert_int_equal(l.at[i] % 64, 0);
}

static void sizes_that_would_wrap_make_a_total_no_buffer_holds(void **state) {
  (void)state;
  assert_int_equal(tr__codec_floats(SIZE_MAX / 2), TR__CODEC_TOO_BIG);
  assert_int_equal(tr__codec_floats(10), 40);
  const size_t huge[2] = {tr__codec_floats(SIZE_MAX / 3), 8};
  assert_true(tr__codec_lay(64, huge, 2).total == SIZE_MAX);
  const size_t big[2] = {SIZE_MAX / 4 - 1, SIZE_MAX / 4 - 1};
  assert_true(tr__codec_lay(64, big, 2).total > SIZE_MAX / 4);
}

static void flat_messages_come_back_as_they_went(void **state) {
  (void)state;
  flat_msg *m = tr_msg_new(&flat_type);
  m->a = 7, m->b = 2.5;
  const tr_msg_codec *c = &tr_msg_codec_flat;
  const size_t n = c->size(&m->hdr);
  assert_true(n >= sizeof *m - sizeof(tr_msg));
  uint8_t *buf = malloc(n);
  c->put(&m->hdr, buf);
  flat_msg *back = (flat_msg *)c->get(&flat_type, buf, n);
  assert_non_null(back);
  assert_ptr_equal(back->hdr.type, &flat_type);
  assert_int_equal(back->a, 7);
  assert_true(back->b == 2.5);
  assert_null(c->get(&flat_type, buf, sizeof(int))); /* shorter than the struct */
  /* variable size: the whole payload allocated (whole cache lines) */
  flat_msg *v = tr_msg_new_size(&flat_type, sizeof *v + 100);
  assert_int_equal(c->size(&v->hdr), v->hdr.size - sizeof(tr_msg));
  assert_true(c->size(&v->hdr) >= sizeof *v + 100 - sizeof(tr_msg));
  tr_msg_free(v);
  tr_msg_free(back);
  tr_msg_free(m);
  free(buf);
}

static void a_type_crosses_with_its_own_codec_else_flat_on_its_own_edge_only(void **state) {
  (void)state;
  assert_ptr_equal(tr__codec_of(&own_type, NULL), &own);
  assert_ptr_equal(tr__codec_of(&own_type, &flat_type), &own);
  assert_ptr_equal(tr__codec_of(&flat_type, &flat_type), &tr_msg_codec_flat);
  assert_null(tr__codec_of(&flat_type, NULL));     /* an untyped edge: no codec, no crossing */
  assert_null(tr__codec_of(&flat_type, &own_type)); /* another type's edge */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(arrays_start_on_64_byte_boundaries),
      cmocka_unit_test(sizes_that_would_wrap_make_a_total_no_buffer_holds),
      cmocka_unit_test(flat_messages_come_back_as_they_went),
      cmocka_unit_test(a_type_crosses_with_its_own_codec_else_flat_on_its_own_edge_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
