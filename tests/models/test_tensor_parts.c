/* test_tensor_parts.c — tensors declared as parts of whole ones (tr_tensor_list_add_part):
 * a member's parts start bitwise as the whole tensor's elements they hold (rows, columns,
 * fused blocks of rows or columns, vectors), are named and shaped as the whole
 * (tr_model_tensor_part), move in and out of the whole tensor (tr_tensor_part_copy); a stage
 * of split layers lends its tensor comm to them alone and is refused without the right one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_stage.h"

/* A kind whose spec says how its tensors are split: `config` points at a split_cfg. Its
 * whole tensors are a weight (W0, W1) and a bias (W0); forward copies its input and checks
 * that it was lent a comm exactly when it is a part. */
typedef struct split_cfg {
  int W0, W1, axis, groups;
  int *saw_comm;   /* forward: 1 when ctx->tensor was set, 0 when not */
} split_cfg;

static int part_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)T;
  const split_cfg *c = l->config;
  const float scale = 0.3f;
  if (l->parts < 1) {
    if (tr_tensor_list_add(t, "weight", c->W0, c->W1, TR_INIT_UNIFORM, scale)) return TR_EINVAL;
    return tr_tensor_list_add(t, "bias", c->W0, 0, TR_INIT_NORMAL, scale);
  }
  const int P = l->parts;
  const int d0 = c->axis ? c->W0 : c->W0 / P, d1 = c->axis ? c->W1 / P : c->W1;
  if (tr_tensor_list_add_part(t, "weight", d0, d1, TR_INIT_UNIFORM, scale, c->axis, c->groups,
                              l->part, P))
    return TR_EINVAL;
  return c->axis ? tr_tensor_list_add(t, "bias", c->W0, 0, TR_INIT_NORMAL, scale)
                 : tr_tensor_list_add_part(t, "bias", c->W0 / P, 0, TR_INIT_NORMAL, scale, 0,
                                           c->groups, l->part, P);
}

static int part_forward(const tr_layer_ctx *c) {
  const split_cfg *cfg = c->l->config;
  *cfg->saw_comm = c->tensor != NULL;
  return tr_memcpy(c->s, c->act, c->x, (size_t)c->B * c->T * c->l->in * 4, TR_COPY_D2D);
}

static int part_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  return dinp ? tr_memcpy(c->s, dinp, dout, (size_t)c->B * c->T * c->l->in * 4, TR_COPY_D2D) : 0;
}

static const tr_layer_type part_type = {.name = "part", .tensors = part_tensors,
                                        .forward = part_forward, .backward = part_backward};

/* A model of [linear(4,4), part(4), linear(4,4)]: the middle layer whole (parts 0) or part
 * `part` of `parts`. */
static tr_model *model_of(split_cfg *c, int part, int parts) {
  tr_layer_spec layers[3] = {tr_layer_linear(4, 4, 1),
                             {.type = &part_type, .in = 4, .out = 4, .config = c,
                              .part = part, .parts = parts},
                             tr_layer_linear(4, 4, 1)};
  tr_model_spec sp = {.name = "parts", .ctx = 1, .nlayers = 3, .layers = layers, .batch = 2};
  tr_model *m;
  char err[256];
  if (tr_model_new(&m, &sp, err, sizeof err)) fail_msg("%s", err);
  return m;
}

/* The stage's parameters after open, on the host. */
static float *params_of(tr_device *d, const tr_model *m, const tr_tensor_comm *comm) {
  tr_stage_config cfg = tr_stage_defaults(m);
  cfg.seed = 77;
  cfg.tensor = comm;
  tr_stage *st;
  char err[512];
  if (tr_stage_open(&st, m, d, &cfg, err, sizeof err)) fail_msg("%s", err);
  const size_t n = tr_stage_info_of(st)->numel;
  float *h = malloc(n * sizeof *h);
  assert_int_equal(tr_stage_download(st, TR_STAGE_PARAMS, h), 0);
  assert_int_equal(tr_stream_synchronize(tr_stage_stream(st)), 0);
  tr_stage_close(st);
  return h;
}

/* Every part of every member against the whole model's tensor, bitwise, both ways. */
static void check_split(split_cfg c, int parts) {
  int saw = -1;
  c.saw_comm = &saw;
  tr_device_list *l = mt_open(1);
  tr_device *d = tr_device_list_at(l, 0);
  tr_model *whole = model_of(&c, 0, 0);
  float *wp = params_of(d, whole, NULL);
  tr_tensor_comm fake = {.size = parts}; /* never called: the kind runs no collective */
  for (int part = 0; part < parts; part++) {
    tr_model *m = model_of(&c, part, parts);
    fake.rank = part;
    float *mp = params_of(d, m, &fake);
    assert_int_equal(tr_model_tensor_count(m), tr_model_tensor_count(whole));
    assert_true(tr_model_param_count(m) < tr_model_param_count(whole));
    for (int t = 0; t < tr_model_tensor_count(m); t++) {
      const tr_tensor_info *mi = tr_model_tensor(m, t), *wi = tr_model_tensor(whole, t);
      const tr_tensor_part p = tr_model_tensor_part(m, t);
      assert_string_equal(mi->name, wi->name);
      assert_int_equal(p.whole[0], wi->shape[0]);
      assert_int_equal(p.whole[1], wi->shape[1]);
      /* the part, cut out of the whole tensor, equals the member's bitwise */
      float *cut = calloc(mi->numel, sizeof *cut), *back = calloc(wi->numel, sizeof *back);
      tr_tensor_part_copy(&p, wp + wi->offset, cut, 0);
      if (memcmp(cut, mp + mi->offset, mi->numel * sizeof *cut))
        fail_msg("%s: part %d of %d (axis %d, %d groups) does not start as the whole's "
                 "elements", mi->name, part, parts, c.axis, c.groups);
      /* and written back into a whole tensor, lands where it came from */
      tr_tensor_part_copy(&p, back, mp + mi->offset, 1);
      size_t landed = 0;
      for (size_t i = 0; i < wi->numel; i++)
        if (back[i] != 0) {
          assert_memory_equal(&back[i], &wp[wi->offset + i], sizeof *back);
          landed++;
        }
      assert_int_equal(landed, mi->numel);
      free(cut), free(back);
    }
    free(mp);
    tr_model_free(m);
  }
  free(wp);
  tr_model_free(whole);
  tr_device_list_close(l);
}

static void row_parts_start_as_the_whole_rows(void **state) {
  (void)state;
  check_split((split_cfg){.W0 = 12, .W1 = 6, .axis = 0, .groups = 1}, 2);
  check_split((split_cfg){.W0 = 12, .W1 = 6, .axis = 0, .groups = 1}, 3);
  check_split((split_cfg){.W0 = 12, .W1 = 6, .axis = 0, .groups = 1}, 4);
}

static void column_parts_start_as_the_whole_columns(void **state) {
  (void)state;
  check_split((split_cfg){.W0 = 5, .W1 = 12, .axis = 1, .groups = 1}, 2);
  check_split((split_cfg){.W0 = 5, .W1 = 12, .axis = 1, .groups = 1}, 3);
}

/* a fused q, k, v weight: each member holds its part of each of the three blocks */
static void fused_parts_take_their_share_of_each_block(void **state) {
  (void)state;
  check_split((split_cfg){.W0 = 12, .W1 = 6, .axis = 0, .groups = 3}, 2);
  check_split((split_cfg){.W0 = 6, .W1 = 12, .axis = 1, .groups = 3}, 4);
}

static void a_part_that_does_not_divide_is_refused(void **state) {
  (void)state;
  tr_layer_spec layers[1] = {{.type = &part_type, .in = 4, .out = 4}};
  tr_model_spec sp = {.name = "bad", .ctx = 1, .nlayers = 1, .layers = layers, .batch = 1};
  split_cfg c = {.W0 = 12, .W1 = 6, .axis = 0, .groups = 5}; /* 6 rows in 5 groups */
  layers[0].config = &c;
  layers[0].part = 0, layers[0].parts = 2;
  tr_model *m = NULL;
  char err[256] = "";
  assert_int_equal(tr_model_new(&m, &sp, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "layer 0 (part)"));
  assert_non_null(strstr(err, "5 groups"));
}

static void a_stage_lends_its_comm_to_split_layers_only_and_needs_the_right_one(void **state) {
  (void)state;
  int saw = -1;
  split_cfg c = {.W0 = 12, .W1 = 6, .axis = 0, .groups = 1, .saw_comm = &saw};
  tr_device_list *l = mt_open(1);
  tr_device *d = tr_device_list_at(l, 0);
  tr_model *m = model_of(&c, 1, 2);
  tr_tensor_comm wrong = {.rank = 0, .size = 2}, right = {.rank = 1, .size = 2};
  tr_stage_config cfg = tr_stage_defaults(m);
  tr_stage *st = NULL;
  char err[512] = "";
  assert_int_equal(tr_stage_open(&st, m, d, &cfg, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "layer 1 (part) is part 1 of 2"));
  tr_stage_info info; /* a plan alone (a memory estimate) needs no comm: the member's sizes */
  size_t opt;
  assert_int_equal(tr_stage_plan(m, &cfg, &info, &opt, err, sizeof err), 0);
  assert_int_equal(info.numel, tr_model_numel(m));
  cfg.tensor = &wrong;
  assert_int_equal(tr_stage_open(&st, m, d, &cfg, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "member 0 of 2"));
  cfg.tensor = &right;
  if (tr_stage_open(&st, m, d, &cfg, err, sizeof err)) fail_msg("%s", err);
  tr_stream *s = tr_stage_stream(st);
  assert_int_equal(tr_memset(s, tr_stage_input(st, 0), 0, tr_stage_info_of(st)->input_bytes), 0);
  assert_int_equal(tr_memset(s, tr_stage_target(st, 0), 0, tr_stage_info_of(st)->target_bytes), 0);
  assert_int_equal(tr_stage_forward(st, 0), 0);
  assert_int_equal(saw, 1);
  tr_stage_close(st);
  tr_model_free(m);
  /* held whole: no comm, even when the stage has one */
  m = model_of(&c, 0, 0);
  if (tr_stage_open(&st, m, d, &cfg, err, sizeof err)) fail_msg("%s", err);
  s = tr_stage_stream(st);
  assert_int_equal(tr_memset(s, tr_stage_input(st, 0), 0, tr_stage_info_of(st)->input_bytes), 0);
  assert_int_equal(tr_memset(s, tr_stage_target(st, 0), 0, tr_stage_info_of(st)->target_bytes), 0);
  assert_int_equal(tr_stage_forward(st, 0), 0);
  assert_int_equal(saw, 0);
  tr_stage_close(st);
  tr_model_free(m);
  tr_device_list_close(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(row_parts_start_as_the_whole_rows),
      cmocka_unit_test(column_parts_start_as_the_whole_columns),
      cmocka_unit_test(fused_parts_take_their_share_of_each_block),
      cmocka_unit_test(a_part_that_does_not_divide_is_refused),
      cmocka_unit_test(a_stage_lends_its_comm_to_split_layers_only_and_needs_the_right_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
