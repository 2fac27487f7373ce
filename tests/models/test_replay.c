/* test_replay.c — CUDA graphs for a stage's passes (tr_stage_config.graphs): the decisions of
 * models/replay.c on their own (a key runs eagerly once, is captured the second time and
 * replayed after; a failure stops replays for good, said once; forgetting closes every
 * capture), and training through stages with graphs on against graphs off: a two-stage
 * pipeline of a small mlp and gpt, two micro-batch slots, several steps, parameters and losses
 * bitwise equal, also when the first capture is made to fail. Host devices do not capture,
 * so on them both runs are eager (and the test checks that nothing was captured);
 * TR_TEST_DEVICE=cuda:0 runs the same on a GPU, where the passes are replayed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <cmocka.h>

#include "mtest.h"
#include "replay.h"
#include "tr_model.h"
#include "tr_stage.h"

/* ---- the decisions ----------------------------------------------------------------------- */

/* Fake captures: addresses that are never read, and a count of those closed. */
static char fakes[8];
static int closed;
static void close_fake(tr_capture *g) {
  assert_true((char *)g >= fakes && (char *)g < fakes + sizeof fakes);
  closed++;
}
#define FAKE(i) ((tr_capture *)(fakes + (i)))

static void a_key_runs_eagerly_then_is_captured_then_replayed(void **state) {
  (void)state;
  tr__replay r = {.on = 1};
  tr_capture *g;
  const uint64_t k = tr__replay_key(TR__PASS_FORWARD, 0, 0, 1);
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_EAGER);
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_CAPTURE);
  tr__replay_keep(&r, k, FAKE(0));
  for (int i = 0; i < 3; i++) {
    assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_LAUNCH);
    assert_ptr_equal(g, FAKE(0));
  }
  assert_int_equal(r.captures, 1);
  assert_int_equal(r.launches, 3);
  closed = 0;
  tr__replay_free(&r, close_fake);
  assert_int_equal(closed, 1);
}

static void keys_differ_by_pass_slot_parity_and_training(void **state) {
  (void)state;
  const uint64_t k = tr__replay_key(TR__PASS_BACKWARD, 3, 1, 1);
  assert_int_not_equal(k, tr__replay_key(TR__PASS_BACKWARD_INPUT, 3, 1, 1));
  assert_int_not_equal(k, tr__replay_key(TR__PASS_BACKWARD, 2, 1, 1));
  assert_int_not_equal(k, tr__replay_key(TR__PASS_BACKWARD, 3, 0, 1));
  assert_int_not_equal(k, tr__replay_key(TR__PASS_BACKWARD, 3, 1, 0));
  assert_int_not_equal(tr__replay_key(TR__PASS_FORWARD, 1 << 20, 0, 0),
                       tr__replay_key(TR__PASS_FORWARD, 0, 0, 0));
  /* each key has its own warm-up: a second slot's first run is eager again */
  tr__replay r = {.on = 1};
  tr_capture *g;
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_EAGER);
  assert_int_equal(tr__replay_next(&r, tr__replay_key(TR__PASS_BACKWARD, 2, 1, 1), &g),
                   TR__REPLAY_EAGER);
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_CAPTURE);
  tr__replay_free(&r, close_fake);
}

static void a_failed_capture_stops_replays_and_is_said_once(void **state) {
  (void)state;
  tr__replay r = {.on = 1};
  tr_capture *g;
  const uint64_t a = tr__replay_key(TR__PASS_FORWARD, 0, 0, 1),
                 b = tr__replay_key(TR__PASS_FORWARD, 1, 0, 1);
  tr__replay_next(&r, a, &g), tr__replay_next(&r, b, &g);
  assert_int_equal(tr__replay_next(&r, a, &g), TR__REPLAY_CAPTURE);
  tr__replay_keep(&r, a, FAKE(1));
  assert_int_equal(tr__replay_next(&r, b, &g), TR__REPLAY_CAPTURE);
  assert_int_equal(tr__replay_fail(&r, "cudaStreamEndCapture: operation not permitted"), 1);
  assert_int_equal(tr__replay_fail(&r, "again"), 0); /* said once */
  assert_string_equal(r.why, "cudaStreamEndCapture: operation not permitted");
  closed = 0;
  tr__replay_forget(&r, close_fake);
  assert_int_equal(closed, 1); /* the capture kept before is closed */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(tr__replay_next(&r, a, &g), TR__REPLAY_EAGER);
    assert_null(g);
  }
  tr__replay_free(&r, close_fake);
}

static void forgetting_closes_every_capture_and_starts_over(void **state) {
  (void)state;
  tr__replay r = {.on = 1};
  tr_capture *g;
  for (int slot = 0; slot < 40; slot++) { /* past the table's first growth */
    const uint64_t k = tr__replay_key(TR__PASS_BACKWARD, slot, slot & 1, 1);
    assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_EAGER);
    assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_CAPTURE);
    tr__replay_keep(&r, k, FAKE(slot % 8));
  }
  closed = 0;
  tr__replay_forget(&r, close_fake);
  assert_int_equal(closed, 40);
  const uint64_t k = tr__replay_key(TR__PASS_BACKWARD, 0, 0, 1);
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_EAGER); /* warm-up again */
  assert_int_equal(tr__replay_next(&r, k, &g), TR__REPLAY_CAPTURE);
  tr__replay_free(&r, close_fake);
  assert_null(r.e);
}

static void off_never_captures(void **state) {
  (void)state;
  tr__replay r = {.on = 0};
  tr_capture *g;
  for (int i = 0; i < 4; i++)
    assert_int_equal(tr__replay_next(&r, tr__replay_key(TR__PASS_FORWARD, 0, 0, 1), &g),
                     TR__REPLAY_EAGER);
  assert_int_equal(r.n, 0);
  tr__replay_free(&r, close_fake);
}

/* ---- the device layer on host devices ------------------------------------------------------- */

static void host_devices_do_not_capture(void **state) {
  (void)state;
  tr_device_list *l;
  char err[256];
  assert_int_equal(tr_device_list_open(&l, "host:1", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  assert_int_equal(tr_device_can_capture(d), 0);
  assert_int_equal(tr_capture_begin(s), TR_EDEVICE);
  assert_non_null(strstr(tr_device_error(d), "does not capture"));
  tr_capture *g = FAKE(0);
  assert_int_equal(tr_capture_end(s, &g), TR_EDEVICE);
  assert_null(g);
  tr_capture_close(NULL);
  float *x;
  assert_int_equal(tr_device_alloc(d, 64, (void **)&x), 0); /* the stream is as it was */
  assert_int_equal(tr_fill(s, x, 16, 2.0f), 0);
  assert_int_equal(tr_device_free(d, x), 0);
  tr_device_list_close(l);
}

/* ---- training through stages, graphs on against off ----------------------------------------- */

enum { SLOTS = 2, PER = 4, STEPS = 4 };

typedef struct run {
  float *params; /* the model's, after STEPS steps */
  float loss[STEPS][SLOTS];
  tr_stage_graphs_figures fig[2];
  char note[256];
} run;

static void ok(tr_stage *st, int rc) {
  if (rc) fail_msg("%s", tr_stage_error(st));
}

/* Two stages of m on one device (one stream orders them), both slots forward, then both
 * backward in reverse (each stage's two input-gradient buffers alternate), then the
 * update; STEPS times, on fresh data each step. */
static run train(const tr_model *m, tr_graphs graphs, bool fail_first) {
  tr_device_list *l = mt_open(1);
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  const int cut = tr_model_layer_count(m) / 2, cuts[3] = {0, cut, tr_model_layer_count(m)};
  tr_stage *st[2];
  for (int k = 0; k < 2; k++) {
    const tr_stage_config c = {.first = cuts[k], .end = cuts[k + 1], .batch = PER, .slots = SLOTS,
                               .global_batch = SLOTS * PER, .seed = 9,
                               .optim = tr_model_optim(m), .graphs = graphs};
    char err[256];
    if (tr_stage_open(&st[k], m, d, &c, err, sizeof err)) fail_msg("%s", err);
    if (fail_first) tr_stage_graphs_fail_next(st[k]);
  }
  run o = {0};
  const size_t xb = tr_stage_info_of(st[0])->input_bytes, yb = tr_stage_info_of(st[1])->target_bytes;
  void *x = malloc(xb), *y = malloc(yb);
  mt_rng r = mt_rng_for(77);
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < SLOTS; i++) {
      mt_fill_batch(m, &r, x, y, xb, yb);
      assert_int_equal(tr_memcpy(s, tr_stage_input(st[0], i), x, xb, TR_COPY_H2D), 0);
      assert_int_equal(tr_memcpy(s, tr_stage_target(st[1], i), y, yb, TR_COPY_H2D), 0);
      assert_int_equal(tr_stream_synchronize(s), 0); /* x and y are refilled next */
      ok(st[0], tr_stage_forward(st[0], i));
      assert_int_equal(tr_memcpy(s, tr_stage_input(st[1], i), tr_stage_output(st[0], i),
                                 tr_stage_info_of(st[0])->output_bytes, TR_COPY_D2D), 0);
      ok(st[1], tr_stage_forward(st[1], i));
      assert_int_equal(tr_memcpy(s, &o.loss[step][i], tr_stage_loss(st[1], i), 4, TR_COPY_D2H), 0);
    }
    for (int i = SLOTS - 1; i >= 0; i--) {
      const float *din;
      ok(st[1], tr_stage_backward(st[1], i, &din));
      assert_int_equal(tr_memcpy(s, tr_stage_dout(st[0], i), din,
                                 tr_stage_info_of(st[1])->input_bytes, TR_COPY_D2D), 0);
      ok(st[0], tr_stage_backward(st[0], i, NULL));
    }
    for (int k = 0; k < 2; k++) {
      ok(st[k], tr_stage_step(st[k], NULL));
      ok(st[k], tr_stage_zero_grads(st[k]));
    }
  }
  o.params = calloc(tr_model_numel(m), sizeof *o.params);
  for (int k = 0; k < 2; k++) {
    ok(st[k], tr_stage_download(st[k], TR_STAGE_PARAMS, o.params + tr_stage_info_of(st[k])->offset));
    assert_int_equal(tr_stream_synchronize(s), 0);
    o.fig[k] = tr_stage_graphs(st[k]);
    if (!o.note[0]) snprintf(o.note, sizeof o.note, "%s", o.fig[k].note);
    o.fig[k].note = NULL;
    tr_stage_close(st[k]);
  }
  free(x);
  free(y);
  tr_device_list_close(l);
  return o;
}

static void graphs_on_trains_bitwise_what_graphs_off_trains_on(const tr_model *m) {
  tr_device_list *l = mt_open(1);
  const bool captures = tr_device_can_capture(tr_device_list_at(l, 0));
  tr_device_list_close(l);
  run off = train(m, TR_GRAPHS_OFF, false), on = train(m, TR_GRAPHS_ON, false),
      failed = train(m, TR_GRAPHS_ON, true);
  const size_t n = tr_model_numel(m);
  assert_memory_equal(on.params, off.params, n * sizeof(float));
  assert_memory_equal(on.loss, off.loss, sizeof on.loss);
  assert_memory_equal(failed.params, off.params, n * sizeof(float));
  assert_memory_equal(failed.loss, off.loss, sizeof failed.loss);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(off.fig[k].captures + off.fig[k].launches, 0);
    /* forward and backward of 2 slots: each captured in step 2, replayed from step 3 on;
     * the backwards of the first stage write no input gradient, so parity does not vary */
    if (captures) {
      assert_true(on.fig[k].captures >= 4);
      assert_true(on.fig[k].launches >= 4);
    } else {
      assert_int_equal(on.fig[k].captures + on.fig[k].launches, 0);
    }
    assert_int_equal(failed.fig[k].captures + failed.fig[k].launches, 0);
  }
  assert_string_equal(on.note, "");
  if (captures) assert_non_null(strstr(failed.note, "tr_stage_graphs_fail_next"));
  else assert_string_equal(failed.note, ""); /* nothing was captured, so nothing failed */
  free(off.params), free(on.params), free(failed.params);
}

static void mlp_trains_bitwise_alike_with_graphs_on_and_off(void **state) {
  (void)state;
  tr_model *m;
  assert_int_equal(tr_model_mlp(&m, 64, 4), 0);
  graphs_on_trains_bitwise_what_graphs_off_trains_on(m);
  tr_model_free(m);
}

static void gpt_trains_bitwise_alike_with_graphs_on_and_off(void **state) {
  (void)state;
  const tr_gpt_config g = {.vocab = 50, .ctx = 16, .width = 32, .layers = 2, .heads = 2,
                           .hidden = 64};
  tr_model *m;
  assert_int_equal(tr_model_gpt(&m, &g), 0);
  graphs_on_trains_bitwise_what_graphs_off_trains_on(m);
  tr_model_free(m);
}

static void graphs_settings_have_names(void **state) {
  (void)state;
  tr_graphs g;
  assert_int_equal(tr_graphs_parse("off", &g), 0);
  assert_int_equal(g, TR_GRAPHS_OFF);
  assert_int_equal(tr_graphs_parse("on", &g), 0);
  assert_int_equal(g, TR_GRAPHS_ON);
  assert_int_equal(tr_graphs_parse("yes", &g), TR_EINVAL);
  assert_int_equal(tr_graphs_parse(NULL, &g), TR_EINVAL);
  assert_string_equal(tr_graphs_name(TR_GRAPHS_OFF), "off");
  assert_string_equal(tr_graphs_name((tr_graphs)7), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_key_runs_eagerly_then_is_captured_then_replayed),
      cmocka_unit_test(keys_differ_by_pass_slot_parity_and_training),
      cmocka_unit_test(a_failed_capture_stops_replays_and_is_said_once),
      cmocka_unit_test(forgetting_closes_every_capture_and_starts_over),
      cmocka_unit_test(off_never_captures),
      cmocka_unit_test(host_devices_do_not_capture),
      cmocka_unit_test(graphs_settings_have_names),
      cmocka_unit_test(mlp_trains_bitwise_alike_with_graphs_on_and_off),
      cmocka_unit_test(gpt_trains_bitwise_alike_with_graphs_on_and_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
