/* test_tp_gpt.c — gpt split across a tensor group by tr_model_shard (Megatron's split: the
 * embedding vocabulary-parallel, each block by heads and MLP units, the head Linear(width,
 * vocab) by columns, the cross-entropy vocabulary-parallel) with T = 2 and 4 members, each on
 * a thread of its own, against the model held whole: the loss, the per-sample losses, every
 * member's gradients against the whole's parts and its parameters after several AdamW steps
 * within 1e-5, backward in halves and recomputation alike (bf16 within 1e-3); T = 1 bitwise
 * the whole; the collectives of a step counted (per block two all-reduces each way); the
 * embedding alone split bitwise the whole; vocabularies, heads and hidden units that do not
 * divide refused naming the layer; the loss's memory per member, never a whole row; the
 * accuracy of split logits (tr_crossentropy_correct_parts) the whole rows'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tp_harness.h"
#include "tr_loss.h"

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

static const tr_gpt_config small = {.vocab = 64, .ctx = 8, .width = 32, .layers = 2, .heads = 4,
                                    .hidden = 128};

static tr_model *gpt_of(tr_gpt_config cfg) {
  tr_model *m;
  assert_int_equal(tr_model_gpt(&m, &cfg), 0);
  return m;
}

static tr_model *member_of(const tr_model *whole, int part, int parts) {
  tr_model *m;
  char err[512];
  if (tr_model_shard(whole, part, parts, &m, err, sizeof err)) fail_msg("%s", err);
  return m;
}

static void check_loss(const char *what, int T, int i, float got, float want, double tol) {
  if (fabs((double)got - want) > tol * fabs((double)want))
    fail_msg("T %d member %d: %s %.9g, whole %.9g", T, i, what, got, want);
}

/* T members against the whole; *fwd and *bwd: member 0's collectives of a step */
static void check_layout(tr_gpt_config g, int T, tp_opts o, double tol, uint64_t *fwd,
                         uint64_t *bwd) {
  tr_model *whole = gpt_of(g), *members[TP_MAXT];
  for (int i = 0; i < T; i++) members[i] = member_of(whole, i, T);
  void *x, *y;
  mt_rng r = mt_rng_for(7);
  mt_random_batch(whole, &r, tr_model_batch(whole), &x, &y);
  tp_job wj, mj[TP_MAXT];
  tp_run(devs, whole, members, T, x, y, o, &wj, mj);
  for (int i = 0; i < T; i++) {
    for (int s = 0; s < TP_STEPS; s++) check_loss("loss", T, i, mj[i].loss[s], wj.loss[s], tol);
    for (int b = 0; b < tr_model_batch(whole); b++)
      check_loss("a sample's loss", T, i, mj[i].samples[b], wj.samples[b], tol);
    const char *where = "";
    double e = tp_compare(whole, wj.grads, members[i], mj[i].grads, &where);
    if (e > tol) fail_msg("T %d member %d: gradient of %s off by %.3g", T, i, where, e);
    /* Adam's steps make near-zero gradients' rounding (bf16's, larger) steps of lr: the
     * parameters of bf16 runs are held to 1e-2 */
    e = tp_compare(whole, wj.params, members[i], mj[i].params, &where);
    if (e > (o.bf16 ? 1e-2 : tol))
      fail_msg("T %d member %d: %s after %d steps off by %.3g", T, i, where, TP_STEPS, e);
    assert_int_equal(mj[i].fwd, mj[0].fwd);
    assert_int_equal(mj[i].bwd, mj[0].bwd);
  }
  *fwd = mj[0].fwd, *bwd = mj[0].bwd;
  for (int i = 0; i < T; i++) tp_job_free(&mj[i]), tr_model_free(members[i]);
  tp_job_free(&wj);
  tr_model_free(whole);
  free(x), free(y);
}

static void gpt_split_trains_as_the_whole(void **state) {
  (void)state;
  for (int T = 2; T <= 4; T += 2) {
    uint64_t fwd, bwd;
    check_layout(small, T, (tp_opts){0}, 1e-5, &fwd, &bwd);
    /* forward: the embedding's sum, two per block, the loss's row max and (sum, target) */
    assert_int_equal(fwd, 1 + 2 * (uint64_t)small.layers + 2);
    /* backward: two per block, the head's input gradient (column-parallel); none for the
     * loss and the embedding */
    assert_int_equal(bwd, 2 * (uint64_t)small.layers + 1);
  }
}

static void gpt_split_halves_recomputation_and_bf16_alike(void **state) {
  (void)state;
  const uint64_t F = 1 + 2 * (uint64_t)small.layers + 2, B = 2 * (uint64_t)small.layers + 1;
  uint64_t fwd, bwd;
  check_layout(small, 2, (tp_opts){.split = 1}, 1e-5, &fwd, &bwd);
  assert_int_equal(fwd, F);
  assert_int_equal(bwd, B);
  /* backward runs the forward again (the loss too: it keeps nothing), its collectives with it */
  check_layout(small, 4, (tp_opts){.recompute = 1}, 1e-5, &fwd, &bwd);
  assert_int_equal(fwd, F);
  assert_int_equal(bwd, B + F);
  /* bf16 products round alike on both sides; the partial sums' order differs */
  check_layout(small, 2, (tp_opts){.bf16 = 1}, 1e-3, &fwd, &bwd);
  assert_int_equal(fwd, F);
  assert_int_equal(bwd, B);
}

static void one_member_is_the_whole_bitwise(void **state) {
  (void)state;
  tr_model *whole = gpt_of(small), *one = member_of(whole, 0, 1);
  void *x, *y;
  mt_rng r = mt_rng_for(7);
  mt_random_batch(whole, &r, tr_model_batch(whole), &x, &y);
  tp_job wj, mj;
  tp_run(devs, whole, &one, 1, x, y, (tp_opts){0}, &wj, &mj);
  assert_int_equal(mj.numel, wj.numel);
  assert_memory_equal(mj.loss, wj.loss, sizeof wj.loss);
  assert_memory_equal(mj.samples, wj.samples, sizeof wj.samples);
  assert_memory_equal(mj.grads, wj.grads, wj.numel * 4);
  assert_memory_equal(mj.params, wj.params, wj.numel * 4);
  tp_job_free(&wj), tp_job_free(&mj);
  tr_model_free(whole), tr_model_free(one);
  free(x), free(y);
}

static void what_does_not_divide_is_refused_naming_the_layer(void **state) {
  (void)state;
  const struct {
    tr_gpt_config g;
    int parts;
    const char *says;
  } bad[] = {
      {{.vocab = 64, .ctx = 8, .width = 48, .layers = 1, .heads = 4, .hidden = 96}, 3,
       "layer 0 (embedding): a vocabulary of 64 across 3 members"},
      {{.vocab = 96, .ctx = 8, .width = 48, .layers = 1, .heads = 4, .hidden = 96}, 3,
       "layer 1 (block): 4 heads and an MLP of 96 across 3 members"},
      {{.vocab = 96, .ctx = 8, .width = 48, .layers = 2, .heads = 6, .hidden = 100}, 3,
       "layer 1 (block): 6 heads and an MLP of 100 across 3 members"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tr_model *whole = gpt_of(bad[i].g), *m = NULL;
    char err[512] = "";
    assert_int_equal(tr_model_shard(whole, 0, bad[i].parts, &m, err, sizeof err), TR_EINVAL);
    assert_null(m);
    if (!strstr(err, bad[i].says)) fail_msg("%zu: '%s' does not say '%s'", i, err, bad[i].says);
    tr_model_free(whole);
  }
}

/* The loss keeps the member's columns of the probabilities and reduces N-float vectors: no
 * buffer of a whole row of logits on a member. */
static void the_loss_holds_a_members_columns_only(void **state) {
  (void)state;
  const tr_loss_type *ce = TR_LOSS_CROSSENTROPY;
  assert_true(ce->vocab_parallel);
  const int N = 64, V = 1024;
  for (int T = 1; T <= 4; T *= 2) {
    assert_int_equal(ce->keep_floats(N, V / T), (size_t)N * V / T);
    assert_true(ce->scratch_floats(N, V / T) <= 3 * (size_t)N);
  }
  /* the member's stage: its last layer's output and the loss's keep are V / T wide */
  tr_model *whole = gpt_of(small), *m = member_of(whole, 1, 4);
  const tr_layer_spec *head = tr_model_layer(m, tr_model_layer_count(m) - 1);
  assert_int_equal(head->out, small.vocab / 4);
  tr_stage_info wi, mi;
  size_t opt;
  char err[256];
  tr_stage_config wc = tr_stage_defaults(whole), mc = tr_stage_defaults(m);
  const tr_tensor_comm plan_only = {.rank = 1, .size = 4}; /* a plan runs no collective */
  mc.tensor = &plan_only;
  assert_int_equal(tr_stage_plan(whole, &wc, &wi, &opt, err, sizeof err), 0);
  if (tr_stage_plan(m, &mc, &mi, &opt, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(mi.output_bytes * 4, wi.output_bytes);
  assert_true(mi.slot_bytes < wi.slot_bytes);
  assert_true(mi.numel < wi.numel);
  tr_model_free(m), tr_model_free(whole);
}

/* The embedding alone (an MSE on its output): each token's row comes from the one member
 * that holds it and the others add zeros, so its members' forward, loss and gradients are
 * the whole's bitwise, backward adding into the member's rows only. */
static void the_split_embedding_is_the_whole_bitwise(void **state) {
  (void)state;
  const tr_layer_spec emb = tr_layer_embedding(64, 32);
  const tr_model_spec sp = {.name = "emb", .ctx = 8, .nlayers = 1, .layers = &emb, .batch = 4};
  tr_model *whole, *members[TP_MAXT];
  char err[256];
  assert_int_equal(tr_model_new(&whole, &sp, err, sizeof err), 0);
  void *x, *y;
  mt_rng r = mt_rng_for(11);
  mt_random_batch(whole, &r, 4, &x, &y);
  for (int T = 2; T <= 4; T += 2) {
    for (int i = 0; i < T; i++) members[i] = member_of(whole, i, T);
    assert_int_equal(tr_model_layer(members[0], 0)->vocab, 64 / T);
    tp_job wj, mj[TP_MAXT];
    tp_run(devs, whole, members, T, x, y, (tp_opts){0}, &wj, mj);
    for (int i = 0; i < T; i++) {
      const char *where = "";
      assert_memory_equal(mj[i].loss, wj.loss, sizeof wj.loss);
      if (tp_compare(whole, wj.grads, members[i], mj[i].grads, &where) != 0)
        fail_msg("T %d member %d: gradient of %s not the whole's", T, i, where);
      if (tp_compare(whole, wj.params, members[i], mj[i].params, &where) != 0)
        fail_msg("T %d member %d: %s not the whole's after %d steps", T, i, where, TP_STEPS);
      assert_int_equal(mj[i].fwd, 1);
      assert_int_equal(mj[i].bwd, 0);
      tp_job_free(&mj[i]), tr_model_free(members[i]);
    }
    tp_job_free(&wj);
  }
  tr_model_free(whole);
  free(x), free(y);
}

/* ---- the accuracy of split logits (tr_crossentropy_correct_parts) ------------------------ */

enum { AN = 200, AV = 24 };

typedef struct argmax_member {
  tr_device *dev;
  const tr_tensor_comm *c;
  const float *logits;   /* the whole (AN, AV) */
  const int32_t *target;
  int T;
  int64_t correct;
  int rc;
} argmax_member;

static void *argmax_main(void *arg) {
  argmax_member *a = arg;
  if (tr_device_bind(a->dev)) abort();
  const int V = AV / a->T, r = a->c->rank;
  float *mine = malloc((size_t)AN * V * 4);
  for (int n = 0; n < AN; n++)
    memcpy(mine + (size_t)n * V, a->logits + (size_t)n * AV + (size_t)r * V, (size_t)V * 4);
  float *pred = mt_up(a->dev, mine, (size_t)AN * V), *scratch = mt_up(a->dev, NULL, 2 * AN);
  int32_t *target = (int32_t *)mt_up(a->dev, a->target, AN);
  a->rc = tr_crossentropy_correct_parts(a->c, tr_device_stream(a->dev), pred, target, AN, V,
                                        scratch, &a->correct);
  tr_device_free(a->dev, pred), tr_device_free(a->dev, scratch), tr_device_free(a->dev, target);
  free(mine);
  return NULL;
}

/* Every member counts the rows whose whole argmax (the first of equals) is the target, ties
 * within and across members' columns included. */
static void the_accuracy_of_split_logits_is_the_wholes(void **state) {
  (void)state;
  float logits[AN * AV];
  int32_t target[AN];
  mt_rng r = mt_rng_for(3);
  int64_t want = 0;
  for (int n = 0; n < AN; n++) {
    /* coarse values: ties are common, within a member's columns and across members */
    for (int v = 0; v < AV; v++) logits[n * AV + v] = (float)(mt_next(&r) % 6);
    int best = 0;
    for (int v = 1; v < AV; v++)
      if (logits[n * AV + v] > logits[n * AV + best]) best = v;
    /* half the rows right, the others a tie's later column or any other */
    target[n] = n % 2 ? best : (int32_t)(mt_next(&r) % AV);
    want += target[n] == best;
  }
  for (int T = 1; T <= 4; T *= 2) {
    tr_device *d[TP_MAXT];
    tr_tensor_comm *comms[TP_MAXT];
    char err[256];
    for (int i = 0; i < T; i++) d[i] = tr_device_list_at(devs, i);
    if (tr_tensor_comms_open(d, T, comms, err, sizeof err)) fail_msg("%s", err);
    argmax_member m[TP_MAXT];
    pthread_t th[TP_MAXT];
    for (int i = 0; i < T; i++) {
      m[i] = (argmax_member){.dev = d[i], .c = comms[i], .logits = logits, .target = target,
                             .T = T};
      assert_int_equal(pthread_create(&th[i], NULL, argmax_main, &m[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    tr_tensor_comms_close(comms, T);
    for (int i = 0; i < T; i++) {
      assert_int_equal(m[i].rc, 0);
      if (m[i].correct != want)
        fail_msg("T %d member %d: %lld rows correct, the whole rows' argmax %lld", T, i,
                 (long long)m[i].correct, (long long)want);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpt_split_trains_as_the_whole),
      cmocka_unit_test(gpt_split_halves_recomputation_and_bf16_alike),
      cmocka_unit_test(one_member_is_the_whole_bitwise),
      cmocka_unit_test(the_split_embedding_is_the_whole_bitwise),
      cmocka_unit_test(what_does_not_divide_is_refused_naming_the_layer),
      cmocka_unit_test(the_loss_holds_a_members_columns_only),
      cmocka_unit_test(the_accuracy_of_split_logits_is_the_wholes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
