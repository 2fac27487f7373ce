/* test_split_recompute.c — the two memory and scheduling levers of a stage against its plain
 * backward: backward split into the input's half and the weights' half (zero-bubble
 * schedules), and activation recomputation. Both must give the plain backward's loss,
 * input gradients and parameter gradients bit for bit, for every built-in kind (linear,
 * embedding, block, layernorm, dropout, residual with kinds of both sorts inside) and a kind
 * of one's own that does not split, with the halves of several micro-batches interleaved as
 * a zero-bubble schedule runs them and recomputed activations overwritten in between. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_layer_type.h"
#include "tr_model.h"
#include "tr_stage.h"

static tr_device_list *devs;

static int setup(void **state) {
  (void)state;
  devs = mt_open(2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(devs);
  return 0;
}

/* ---- a kind of one's own without a split: y = g x (gain_layer.h) ------------------------ */

#include "gain_layer.h"

/* ---- the models ------------------------------------------------------------------------------ */

static tr_model *model_of(const char *name, int nlayers, const tr_layer_spec *layers, int ctx,
                          tr_loss_kind loss) {
  tr_model *m;
  char err[256];
  const tr_model_spec spec = {.name = name, .ctx = ctx, .loss = loss, .nlayers = nlayers,
                              .layers = layers, .batch = 8,
                              .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.1f)};
  int rc = tr_model_new(&m, &spec, err, sizeof err);
  if (rc) fail_msg("%s: %s", name, err);
  return m;
}

static tr_model *tiny_gpt(void) {
  const tr_gpt_config g = {.vocab = 30, .ctx = 6, .width = 8, .layers = 2, .heads = 2,
                           .hidden = 20};
  tr_model *m;
  assert_int_equal(tr_model_gpt(&m, &g), 0);
  return m;
}

/* dropout, and a residual holding a kind that splits, one that does not and a dropout */
static tr_model *dropnet(void) {
  static tr_layer_spec inner[4];
  inner[0] = tr_layer_linear(12, 12, 1);
  inner[1] = (tr_layer_spec){.type = &gain_type, .in = 12, .out = 12};
  inner[2] = tr_layer_dropout(12, 0.25f);
  inner[3] = tr_layer_linear(12, 12, 0);
  const tr_layer_spec layers[] = {tr_layer_linear(5, 12, 1), tr_layer_dropout(12, 0.1f),
                                  tr_layer_residual(4, inner), tr_layer_relu(12),
                                  tr_layer_linear(12, 3, 1)};
  return model_of("dropnet", 5, layers, 1, TR_LOSS_MSE);
}

/* the kind of one's own first and last: the stage's own ends need no split either */
static tr_model *gainnet(void) {
  const tr_layer_spec layers[] = {{.type = &gain_type, .in = 6, .out = 6},
                                  tr_layer_linear(6, 6, 1), tr_layer_gelu(6),
                                  tr_layer_layernorm(6),
                                  {.type = &gain_type, .in = 6, .out = 6}};
  return model_of("gainnet", 5, layers, 2, TR_LOSS_MSE);
}

/* ---- one step of a pipeline of stages, in one of four ways ---------------------------- */

typedef struct way {
  int split, recompute;
} way;

typedef struct outcome {
  float loss[8];
  float *grads; /* the whole parameter space */
  size_t slot_bytes[2], work_bytes[2];
} outcome;

enum { MB = 4, PER = 2 };

static void ok(tr_stage *st, int rc) {
  if (rc) fail_msg("%s", tr_stage_error(st));
}

/* The backward of micro-batch i through every stage, last first, each stage's input
 * gradient into the stage before; split: only the input halves. */
static void backward(tr_stage **st, int n, int i, bool split) {
  for (int k = n - 1; k >= 0; k--) {
    const float *din = NULL;
    ok(st[k], split ? tr_stage_backward_input(st[k], i, &din) : tr_stage_backward(st[k], i, &din));
    if (k == 0) {
      assert_null(din);
      continue;
    }
    assert_int_equal(tr_memcpy_peer(tr_stage_stream(st[k]), tr_stage_dout(st[k - 1], i),
                                    tr_stage_device(st[k - 1]), din, tr_stage_device(st[k]),
                                    tr_stage_info_of(st[k])->input_bytes), 0);
  }
}

static void weights(tr_stage **st, int n, int i) {
  for (int k = n - 1; k >= 0; k--) ok(st[k], tr_stage_backward_weight(st[k], i));
}

/* GPipe's forwards, then the backwards: plain ones in micro-batch order, or split ones as
 * ZB-H1 orders them on a stage, each weight half a micro-batch behind its input half
 * (B0 B1 W0 B2 W1 ...), so that kept gradients outlive other micro-batches' passes. */
static outcome step(const tr_model *m, const int *cuts, int n, way w, const void *x,
                    const void *y) {
  tr_stage *st[2];
  outcome o = {0};
  for (int k = 0; k < n; k++) {
    const tr_stage_config c = {.first = cuts[k], .end = cuts[k + 1], .batch = PER, .slots = MB,
                               .recompute = w.recompute, .split = w.split,
                               .global_batch = MB * PER, .seed = 5,
                               .optim = tr_model_optim(m)};
    char err[256];
    if (tr_stage_open(&st[k], m, tr_device_list_at(devs, k), &c, err, sizeof err))
      fail_msg("%s", err);
    o.slot_bytes[k] = tr_stage_info_of(st[k])->slot_bytes;
    o.work_bytes[k] = tr_stage_info_of(st[k])->work_bytes;
  }
  const size_t xs = tr_model_input_bytes(m) * PER, ys = tr_model_target_bytes(m) * PER;
  tr_stage *last = st[n - 1];
  for (int i = 0; i < MB; i++) {
    tr_stream *s0 = tr_stage_stream(st[0]), *sl = tr_stage_stream(last);
    assert_int_equal(tr_memcpy(s0, tr_stage_input(st[0], i), (const char *)x + i * xs,
                               tr_stage_info_of(st[0])->input_bytes, TR_COPY_H2D), 0);
    assert_int_equal(tr_memcpy(sl, tr_stage_target(last, i), (const char *)y + i * ys,
                               tr_stage_info_of(last)->target_bytes, TR_COPY_H2D), 0);
    for (int k = 0; k < n; k++) {
      tr_stage_set_samples(st[k], i, (uint64_t)(i * PER));
      ok(st[k], tr_stage_forward(st[k], i));
      if (k + 1 < n)
        assert_int_equal(tr_memcpy_peer(tr_stage_stream(st[k + 1]), tr_stage_input(st[k + 1], i),
                                        tr_stage_device(st[k + 1]), tr_stage_output(st[k], i),
                                        tr_stage_device(st[k]),
                                        tr_stage_info_of(st[k])->output_bytes), 0);
    }
    assert_int_equal(tr_memcpy(sl, &o.loss[i], tr_stage_loss(last, i), 4, TR_COPY_D2H), 0);
  }
  for (int i = 0; i < MB; i++) {
    backward(st, n, i, w.split);
    if (w.split && i > 0) weights(st, n, i - 1);
  }
  if (w.split) weights(st, n, MB - 1);
  o.grads = calloc(tr_model_numel(m), sizeof *o.grads);
  for (int k = 0; k < n; k++) {
    ok(st[k], tr_stage_download(st[k], TR_STAGE_GRADS, o.grads + tr_stage_info_of(st[k])->offset));
    assert_int_equal(tr_stream_synchronize(tr_stage_stream(st[k])), 0);
    tr_stage_close(st[k]);
  }
  return o;
}

static const char *way_name(way w) {
  if (w.split) return w.recompute ? "split + recompute" : "split";
  return w.recompute ? "recompute" : "plain";
}

/* Every way against the plain one, bit for bit; recomputation keeps less in each slot. */
static void check_model(tr_model *m, const int *cuts, int n, uint64_t stream) {
  mt_rng r = mt_rng_for(stream);
  void *x, *y;
  mt_random_batch(m, &r, MB * PER, &x, &y);
  const outcome plain = step(m, cuts, n, (way){0, 0}, x, y);
  const size_t N = tr_model_numel(m);
  bool nonzero = false;
  for (size_t i = 0; i < N; i++) nonzero |= plain.grads[i] != 0;
  assert_true(nonzero);
  static const way ways[] = {{1, 0}, {0, 1}, {1, 1}};
  for (size_t k = 0; k < sizeof ways / sizeof *ways; k++) {
    outcome o = step(m, cuts, n, ways[k], x, y);
    if (memcmp(o.loss, plain.loss, sizeof o.loss))
      fail_msg("%s, %d stage(s), %s: the losses differ", tr_model_name(m), n, way_name(ways[k]));
    for (size_t i = 0; i < N; i++)
      if (memcmp(&o.grads[i], &plain.grads[i], sizeof(float)))
        fail_msg("%s, %d stage(s), %s: gradient element %zu is %.9g, the plain backward's %.9g",
                 tr_model_name(m), n, way_name(ways[k]), i, (double)o.grads[i],
                 (double)plain.grads[i]);
    for (int s = 0; s < n; s++) {
      if (ways[k].recompute) {
        assert_true(o.work_bytes[s] > 0);
        if (!ways[k].split && o.slot_bytes[s] >= plain.slot_bytes[s])
          fail_msg("%s stage %d: a recomputing slot holds %zu bytes, a plain one %zu",
                   tr_model_name(m), s, o.slot_bytes[s], plain.slot_bytes[s]);
      } else {
        assert_int_equal(o.work_bytes[s], 0);
      }
    }
    free(o.grads);
  }
  free(plain.grads);
  free(x);
  free(y);
}

static void split_and_recomputed_backwards_give_the_plain_gradients_bitwise(void **state) {
  (void)state;
  tr_model *m = tiny_gpt(); /* embedding, 2 blocks, layernorm, linear without bias */
  const int whole[2] = {0, 5}, gpt2[3] = {0, 2, 5};
  check_model(m, whole, 1, 1);
  check_model(m, gpt2, 2, 2);
  tr_model_free(m);
  assert_int_equal(tr_model_mlp(&m, 12, 3), 0);
  const int mlp[3] = {0, 2, 5};
  check_model(m, mlp, 2, 3);
  tr_model_free(m);
  m = dropnet();
  const int drop[3] = {0, 3, 5};
  check_model(m, drop, 2, 4);
  tr_model_free(m);
  m = gainnet();
  const int gain[3] = {0, 2, 5};
  check_model(m, gain, 2, 5);
  tr_model_free(m);
}

/* ---- the grad-ready hook fires in the weight half -------------------------------------------- */

typedef struct seen {
  int n, layer[16];
} seen;

static void on_ready(void *arg, tr_stage *st, int layer) {
  (void)st;
  seen *s = arg;
  if (s->n < 16) s->layer[s->n] = layer;
  s->n++;
}

static void grad_ready_fires_in_the_weight_half_last_layer_first(void **state) {
  (void)state;
  tr_model *m;
  assert_int_equal(tr_model_mlp(&m, 8, 3), 0);
  tr_stage_config c = tr_stage_defaults(m);
  c.batch = 2;
  c.split = 1;
  tr_stage *st;
  assert_int_equal(tr_stage_open(&st, m, tr_device_list_at(devs, 0), &c, NULL, 0), 0);
  seen s = {0};
  tr_stage_on_grad_ready(st, on_ready, &s);
  ok(st, tr_stage_forward(st, 0));
  ok(st, tr_stage_backward_input(st, 0, NULL));
  assert_int_equal(s.n, 0);
  ok(st, tr_stage_backward_weight(st, 0));
  assert_int_equal(s.n, 5);
  for (int i = 0; i < 5; i++) assert_int_equal(s.layer[i], 4 - i);
  tr_stage_close(st);
  tr_model_free(m);
}

/* ---- a kind with half a split -------------------------------------------------------- */

static int half(const tr_layer_ctx *c, const float *dout) {
  (void)c, (void)dout;
  return 0;
}

static void a_kind_with_one_half_of_a_split_is_refused(void **state) {
  (void)state;
  const tr_layer_type odd = {.name = "odd", .forward = gain_forward, .backward = gain_backward,
                             .tensors = gain_tensors, .scratch_floats = gain_scratch,
                             .backward_weight = half};
  const tr_layer_spec layers[] = {tr_layer_linear(4, 4, 1), {.type = &odd, .in = 4, .out = 4}};
  const tr_model_spec spec = {.name = "odd", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 2,
                              .layers = layers, .batch = 2,
                              .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.1f)};
  tr_model *m = NULL;
  char err[256] = "";
  assert_int_equal(tr_model_new(&m, &spec, err, sizeof err), TR_EINVAL);
  assert_null(m);
  if (!strstr(err, "layer 1 (odd)") || !strstr(err, "both halves"))
    fail_msg("the error does not name the layer and what it lacks: %s", err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_and_recomputed_backwards_give_the_plain_gradients_bitwise),
      cmocka_unit_test(grad_ready_fires_in_the_weight_half_last_layer_first),
      cmocka_unit_test(a_kind_with_one_half_of_a_split_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
