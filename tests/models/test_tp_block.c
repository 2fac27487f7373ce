/* test_tp_block.c — the transformer block split across a tensor group (Megatron: heads per
 * member, qkv column-parallel in its three blocks, the projections row-parallel, the MLP
 * column then row): a model of two blocks with T = 2 and 4 members, each on a thread of its
 * own, against the model held whole: the loss, every member's gradients against the whole's
 * parts, and its parameters after several AdamW steps, within 1e-5; backward in halves and
 * bf16 products alike; T = 1 bitwise the whole; exactly two all-reduces per block in forward
 * and two in backward; heads or hidden units that do not divide refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tp_harness.h"

enum { C = 32, NH = 4, HID = 128, CTX = 8, BATCH = 2, NBLOCKS = 2 };

static tr_device_list *devs;

static int setup(void **state) {
  (void)state;
  devs = mt_open(TP_MAXT + 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(devs);
  return 0;
}

static tr_model *model_of(const tr_layer_spec *layers, int n) {
  const tr_model_spec sp = {.name = "blocks", .ctx = CTX, .nlayers = n, .layers = layers,
                            .batch = BATCH};
  tr_model *m;
  char err[256];
  if (tr_model_new(&m, &sp, err, sizeof err)) fail_msg("%s", err);
  return m;
}

/* Member `part` of `parts`: every block split by its kind's shard. */
static tr_model *member_of(int part, int parts) {
  tr_layer_spec layers[NBLOCKS];
  for (int i = 0; i < NBLOCKS; i++) {
    const tr_layer_spec whole = tr_layer_block(C, NH, HID);
    char err[128];
    if (whole.type->shard(&whole, TR_SPLIT_SELF, part, parts, &layers[i], err, sizeof err))
      fail_msg("%s", err);
  }
  return model_of(layers, NBLOCKS);
}

static tr_model *whole_model(void) {
  tr_layer_spec layers[NBLOCKS];
  for (int i = 0; i < NBLOCKS; i++) layers[i] = tr_layer_block(C, NH, HID);
  return model_of(layers, NBLOCKS);
}

static void batch(const tr_model *m, void **x, void **y) {
  mt_rng r = mt_rng_for(42);
  mt_random_batch(m, &r, BATCH, x, y);
}

/* T members against the whole: losses, gradients and parameters within tol; returns the
 * collectives of member 0's first forward and backward. */
static void check_layout(int T, tp_opts o, double tol, uint64_t *fwd, uint64_t *bwd) {
  tr_model *whole = whole_model(), *members[TP_MAXT];
  for (int i = 0; i < T; i++) members[i] = member_of(i, T);
  void *x, *y;
  batch(whole, &x, &y);
  tp_job wj, mj[TP_MAXT];
  tp_run(devs, whole, members, T, x, y, o, &wj, mj);
  for (int i = 0; i < T; i++) {
    for (int s = 0; s < TP_STEPS; s++) {
      const double e = fabs(mj[i].loss[s] - wj.loss[s]) / fabs(wj.loss[s]);
      if (e > tol)
        fail_msg("T %d member %d step %d: loss %.9g, whole %.9g", T, i, s, mj[i].loss[s],
                 wj.loss[s]);
    }
    const char *where = "";
    double e = tp_compare(whole, wj.grads, members[i], mj[i].grads, &where);
    if (e > tol) fail_msg("T %d member %d: gradient of %s off by %.3g", T, i, where, e);
    e = tp_compare(whole, wj.params, members[i], mj[i].params, &where);
    if (e > tol)
      fail_msg("T %d member %d: %s after %d steps off by %.3g", T, i, where, TP_STEPS, e);
    /* every member made the same collectives */
    assert_int_equal(mj[i].fwd, mj[0].fwd);
    assert_int_equal(mj[i].bwd, mj[0].bwd);
    /* a member holds its share: heads, hidden units */
    if (T > 1) assert_true(mj[i].numel < wj.numel);
  }
  *fwd = mj[0].fwd, *bwd = mj[0].bwd;
  for (int i = 0; i < T; i++) tp_job_free(&mj[i]), tr_model_free(members[i]);
  tp_job_free(&wj);
  tr_model_free(whole);
  free(x), free(y);
}

static void split_blocks_train_as_the_whole(void **state) {
  (void)state;
  for (int T = 2; T <= 4; T += 2) {
    uint64_t fwd, bwd;
    check_layout(T, (tp_opts){0}, 1e-5, &fwd, &bwd);
    /* per block: after attention's projection and after the MLP's; the input gradients of
     * the column-parallel qkv and fc */
    assert_int_equal(fwd, 2 * NBLOCKS);
    assert_int_equal(bwd, 2 * NBLOCKS);
  }
}

static void split_halves_and_bf16_alike(void **state) {
  (void)state;
  uint64_t fwd, bwd;
  for (int T = 2; T <= 4; T += 2) {
    check_layout(T, (tp_opts){.split = 1}, 1e-5, &fwd, &bwd);
    assert_int_equal(fwd, 2 * NBLOCKS);
    assert_int_equal(bwd, 2 * NBLOCKS);
  }
  /* bf16 products round alike on both sides; the partial sums' order differs */
  check_layout(2, (tp_opts){.bf16 = 1}, 1e-3, &fwd, &bwd);
  assert_int_equal(fwd, 2 * NBLOCKS);
  assert_int_equal(bwd, 2 * NBLOCKS);
}

static void one_member_is_the_whole_bitwise(void **state) {
  (void)state;
  tr_model *whole = whole_model(), *one = member_of(0, 1);
  void *x, *y;
  batch(whole, &x, &y);
  tp_job wj, mj;
  tp_run(devs, whole, &one, 1, x, y, (tp_opts){0}, &wj, &mj);
  assert_int_equal(mj.numel, wj.numel);
  assert_memory_equal(mj.loss, wj.loss, sizeof wj.loss);
  assert_memory_equal(mj.grads, wj.grads, wj.numel * 4);
  assert_memory_equal(mj.params, wj.params, wj.numel * 4);
  assert_int_equal(mj.fwd + mj.bwd, 0);
  tp_job_free(&wj), tp_job_free(&mj);
  tr_model_free(whole), tr_model_free(one);
  free(x), free(y);
}

static void heads_or_hidden_that_do_not_divide_are_refused(void **state) {
  (void)state;
  const struct {
    int heads, hidden, parts;
    const char *says;
  } bad[] = {{4, 128, 3, "4 heads and an MLP of 128 across 3 members"},
             {8, 100, 8, "8 heads and an MLP of 100 across 8 members"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const tr_layer_spec l = tr_layer_block(32, bad[i].heads, bad[i].hidden);
    tr_layer_spec m;
    char err[200] = "";
    assert_int_equal(l.type->shard(&l, TR_SPLIT_SELF, 0, bad[i].parts, &m, err, sizeof err),
                     TR_EINVAL);
    assert_non_null(strstr(err, bad[i].says));
  }
  /* a member is split already */
  const tr_layer_spec l = tr_layer_block(32, 4, 128);
  tr_layer_spec m, m2;
  char err[200] = "";
  assert_int_equal(l.type->shard(&l, TR_SPLIT_SELF, 1, 2, &m, err, sizeof err), 0);
  assert_int_equal(m.heads, 2);
  assert_int_equal(m.hidden, 64);
  assert_int_equal(m.part * 10 + m.parts, 12);
  assert_int_equal(l.type->shard(&m, TR_SPLIT_SELF, 0, 2, &m2, err, sizeof err), TR_EINVAL);
}

/* A split block run without its member's comm (a stage would refuse it first; a caller of
 * the kind's table directly is told). */
static void a_split_block_without_a_comm_fails_naming_it(void **state) {
  (void)state;
  tr_model *m = member_of(0, 2);
  tr_stage_config cfg = tr_stage_defaults(m);
  tr_stage *st;
  char err[512] = "";
  assert_int_equal(tr_stage_open(&st, m, tr_device_list_at(devs, TP_MAXT), &cfg, err, sizeof err),
                   TR_EINVAL);
  assert_non_null(strstr(err, "(block) is part 0 of 2"));
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_blocks_train_as_the_whole),
      cmocka_unit_test(split_halves_and_bf16_alike),
      cmocka_unit_test(one_member_is_the_whole_bitwise),
      cmocka_unit_test(heads_or_hidden_that_do_not_divide_are_refused),
      cmocka_unit_test(a_split_block_without_a_comm_fails_naming_it),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
