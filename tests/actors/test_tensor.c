/* test_tensor.c — tensor parallelism's job (tr_layout_config.tensor T): every layout with
 * tensor groups of 2 and 4 members (tp, dp × tp, pp × tp, dp × pp × tp; ZeRO-1,
 * recomputation, the interleaved and zero-bubble schedules) trains what single trains
 * (parameters within 1e-5), and T 1 exactly what no tensor parallelism trains; the figures
 * say the members per group; the checkpoints hold whole tensors (single's names and shapes)
 * and resume into another layout; the layouts tensor groups do not fit are refused, naming
 * the field. Runs go through tr_train_run; parameters are compared through the checkpoint
 * each run writes at its end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

#define SCRATCH_NAME "tensor"
#include "scratch.h"

#include "compare.h"
#include "simplenet_job.h"
#include "specs.h"

static const double tolerance = 1e-5;
enum { STEPS = 4 };

static tr_train_options options(const tr_model_spec *spec, int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.spec = spec;
  o.devices = "host:1";
  o.steps = steps;
  o.job.global_batch = spec->batch;
  o.deterministic = 1; /* cuts by FLOPs: every pipelined run cuts alike */
  o.watchdog_ms = 20000;
  return o;
}

/* A layout with tensor groups of `tensor` members, and ZeRO where asked. */
typedef struct tensor_case {
  layout_case layout;
  int tensor, zero;
} tensor_case;

/* tp: one group of every device (layout.tensor 0 says the same) */
#define TP(devices, t) {{TR_STRATEGY_TP, devices, -1, 0, 0, 0}, t, 0}
#define WITH_TENSOR(t, layout) {layout, t, 0}
#define WITH_ZERO(t, layout) {layout, t, 1}

static const tensor_case cases[] = {
    TP("host:2", 0),
    TP("host:4", 4),
    WITH_TENSOR(2, DP("host:4")),
    WITH_ZERO(2, DP("host:4")),
    WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4)),
    WITH_TENSOR(4, PIPELINE("host:8", TR_SCHEDULE_GPIPE, 4)),
    WITH_TENSOR(2, RECOMPUTING("host:4", TR_SCHEDULE_1F1B, 4)),
    WITH_TENSOR(2, INTERLEAVED("host:4", 2, 4)),
    WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_ZB1, 4)),
    WITH_TENSOR(2, HYBRID("host:8")),
    WITH_ZERO(2, HYBRID("host:8")),
};
enum { NCASES = sizeof cases / sizeof *cases };

static tr_train_options with_tensor(tr_train_options o, const tensor_case *c) {
  o = with_layout(o, &c->layout);
  o.job.layout.tensor = c->tensor;
  o.job.zero = c->zero;
  return o;
}

static void describe(char *what, size_t n, const tr_train_options *o, const tensor_case *c) {
  char sched[64];
  snprintf(what, n, "%s%s tensor %d on %s (%s) of %s", tr_strategy_name(c->layout.strategy),
           c->zero ? " zero" : "", c->tensor, c->layout.devices,
           layout_schedule(&c->layout, sched, sizeof sched), model_name(o));
}

static void run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  if (tr_train_run(&o, r, err, sizeof err))
    fail_msg("%s tensor %d %s on %s: %s", tr_strategy_name(o.strategy), o.job.layout.tensor,
             model_name(&o), o.devices, err);
  assert_int_equal(r->steps, o.steps);
}

static void assert_close(const char *file, const char *reference, double allowed,
                         const char *what) {
  char worst[128];
  const double d = params_difference(path(file), path(reference), worst, sizeof worst);
  if (!(d <= allowed))
    fail_msg("%s: %s differs from %s by %.3g (tensor '%s'), allowed %.0e", what, file,
             reference, d, worst, allowed);
}

/* ---- equivalence ---------------------------------------------------------------------------- */

/* gpt1 has 2 heads: groups of 2 */
static const tensor_case gpt_cases[] = {
    TP("host:2", 2),
    WITH_TENSOR(2, DP("host:4")),
    WITH_ZERO(2, DP("host:4")),
    WITH_TENSOR(2, RECOMPUTING("host:4", TR_SCHEDULE_1F1B, 4)),
    WITH_TENSOR(2, INTERLEAVED("host:4", 2, 4)),
    WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_ZB1, 4)),
    WITH_TENSOR(2, HYBRID("host:8")),
};

static void trains_like_single(const tr_model_spec *spec, const tensor_case *cases, int ncases) {
  tr_train_result r;
  const tr_train_options base = options(spec, STEPS);
  run_to(base, "single.safetensors", &r);
  const double single_loss = r.final_loss;
  tr_train_options shorter = base;
  shorter.steps--; /* the comparison can see a step */
  run_to(shorter, "shorter.safetensors", &r);
  char worst[128];
  const double step = params_difference(path("shorter.safetensors"), path("single.safetensors"),
                                        worst, sizeof worst);
  assert_true(step > 10 * tolerance && isfinite(step));
  for (int k = 0; k < ncases; k++) {
    char what[160];
    const tensor_case *c = &cases[k];
    describe(what, sizeof what, &base, c);
    run_to(with_tensor(base, c), "tensor.safetensors", &r);
    const int T = c->tensor ? c->tensor : 2; /* tp on host:2 */
    if (r.tensor != T) fail_msg("%s: the figures say tensor %d", what, r.tensor);
    assert_close("tensor.safetensors", "single.safetensors", tolerance, what);
    /* member 0 of a last stage speaks for its group: the loss is single's, not T times it */
    if (!(fabs(r.final_loss - single_loss) <= tolerance * fabs(single_loss)))
      fail_msg("%s: final loss %.9g, single's %.9g", what, r.final_loss, single_loss);
  }
}

static void tensor_groups_train_the_mlp_like_single(void **state) {
  (void)state;
  trains_like_single(&mlp4, cases, NCASES);
}

static void tensor_groups_train_gpt_like_single(void **state) {
  (void)state;
  trains_like_single(&gpt1, gpt_cases, sizeof gpt_cases / sizeof *gpt_cases);
}

/* Clipping by the global norm: a split tensor's parts count once each, a tensor held whole
 * once over its group (not T times), with ZeRO's shards too. */
static void tensor_groups_clip_by_the_norm_of_every_part_once(void **state) {
  (void)state;
  static const tensor_case clipped[] = {
      TP("host:2", 2),
      WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4)),
      WITH_ZERO(2, DP("host:4")),
      WITH_TENSOR(4, DP("host:8")),
  };
  tr_train_result r;
  tr_train_options base = options(&mlp4, STEPS);
  base.job.optim.clip = 0.05f; /* below the gradients' norm: every step clips */
  run_to(base, "clipped.safetensors", &r);
  tr_train_options unclipped = options(&mlp4, STEPS);
  run_to(unclipped, "unclipped.safetensors", &r);
  char worst[128];
  const double d = params_difference(path("unclipped.safetensors"), path("clipped.safetensors"),
                                     worst, sizeof worst);
  assert_true(d > 10 * tolerance && isfinite(d)); /* the clip changes what is trained */
  for (size_t k = 0; k < sizeof clipped / sizeof *clipped; k++) {
    char what[160];
    describe(what, sizeof what, &base, &clipped[k]);
    run_to(with_tensor(base, &clipped[k]), "tensor.safetensors", &r);
    assert_close("tensor.safetensors", "clipped.safetensors", tolerance, what);
  }
}

/* Each member holds its part of the split layers: its device's parameters are about
 * single's / T (every linear layer of mlp4 splits; the row layers' biases are whole); the
 * tensor comm's bytes are in comm_bytes_per_step; a held-out evaluation is single's. */
static void figures_show_each_members_part(void **state) {
  (void)state;
  tr_train_result single, r;
  tr_train_options o = options(&mlp4, STEPS);
  tr_model *m;
  tr_data *held; /* the model's own data, drawn with another seed */
  char err[256];
  assert_int_equal(tr_model_new(&m, &mlp4, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&held, m, 7, NULL, NULL, err, sizeof err), 0);
  o.job.eval.data = held;
  o.job.eval.samples = 96;
  run_to(o, "single.safetensors", &single);
  assert_true(isfinite(single.eval_loss));
  for (int T = 2; T <= 4; T += 2) {
    tr_train_options t = o;
    t.strategy = TR_STRATEGY_TP;
    t.devices = T == 2 ? "host:2" : "host:4";
    run_to(t, "tensor.safetensors", &r);
    const double whole = (double)single.memory.devices[0].params;
    for (int i = 0; i < T; i++) {
      const double mine = (double)r.memory.devices[i].params;
      if (!(mine >= whole / T && mine < 1.1 * whole / T))
        fail_msg("tp on %d: member %d holds %.0f bytes of parameters, single %.0f", T, i, mine,
                 whole);
    }
    if (!(r.comm_bytes_per_step > 0))
      fail_msg("tp on %d: comm_bytes_per_step %g", T, r.comm_bytes_per_step);
    if (!(fabs(r.eval_loss - single.eval_loss) <= tolerance * fabs(single.eval_loss)) ||
        r.eval_count != single.eval_count)
      fail_msg("tp on %d: held-out loss %.9g (%d evaluations), single's %.9g (%d)", T,
               r.eval_loss, r.eval_count, single.eval_loss, single.eval_count);
  }
  /* dp × pp × tp: each replica's share of the held-out samples, member 0 of each last stage
   * reporting its group's sums */
  tr_train_options h = with_tensor(o, &(tensor_case)WITH_TENSOR(2, HYBRID("host:8")));
  h.job.eval.every = 2;
  run_to(h, "tensor.safetensors", &r);
  tr_train_options every = o;
  every.job.eval.every = 2;
  run_to(every, "single.safetensors", &single);
  if (!(fabs(r.eval_loss - single.eval_loss) <= tolerance * fabs(single.eval_loss)) ||
      r.eval_count != single.eval_count || r.eval_count != 2)
    fail_msg("hybrid tensor 2: held-out loss %.9g (%d evaluations), single's %.9g (%d)",
             r.eval_loss, r.eval_count, single.eval_loss, single.eval_count);
  tr_data_close(held);
  tr_model_free(m);
}

/* bf16 GEMMs (float32 sums): a member's partial products round apart from the whole's, so
 * within bf16's rounding of single's bf16 run, not 1e-5. */
static void tensor_groups_train_in_bf16_like_single(void **state) {
  (void)state;
  static const tensor_case bf16[] = {
      TP("host:2", 2),
      WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4)),
  };
  tr_train_result r;
  tr_train_options base = options(&mlp4, STEPS);
  base.job.precision.gemm = TR_PRECISION_BF16;
  run_to(base, "single16.safetensors", &r);
  for (size_t k = 0; k < sizeof bf16 / sizeof *bf16; k++) {
    char what[160];
    describe(what, sizeof what, &base, &bf16[k]);
    run_to(with_tensor(base, &bf16[k]), "tensor16.safetensors", &r);
    assert_close("tensor16.safetensors", "single16.safetensors", 1e-3, what);
  }
}

/* gpt's held-out accuracy under a vocabulary-parallel last layer: each row's largest output
 * over every member's columns (never one member's alone), as single's. */
static void gpt_held_out_accuracy_is_over_the_whole_rows(void **state) {
  (void)state;
  tr_model *m;
  tr_data *held;
  char err[256];
  assert_int_equal(tr_model_new(&m, &gpt1, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&held, m, 7, NULL, NULL, err, sizeof err), 0);
  tr_train_result single, r;
  tr_train_options o = options(&gpt1, STEPS);
  o.job.eval.data = held;
  o.job.eval.samples = 48;
  run_to(o, "single.safetensors", &single);
  const tensor_case layouts[] = {TP("host:2", 2), WITH_TENSOR(2, DP("host:4"))};
  for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
    char what[160];
    describe(what, sizeof what, &o, &layouts[k]);
    run_to(with_tensor(o, &layouts[k]), "tensor.safetensors", &r);
    if (!(fabs(r.eval_loss - single.eval_loss) <= tolerance * fabs(single.eval_loss)) ||
        !(fabs(r.eval_accuracy - single.eval_accuracy) <= 2.0 / (48 * 16)))
      fail_msg("%s: held-out loss %.9g, accuracy %.6f; single's %.9g, %.6f", what, r.eval_loss,
               r.eval_accuracy, single.eval_loss, single.eval_accuracy);
  }
  tr_data_close(held);
  tr_model_free(m);
}

/* comm_bytes_per_step counts the tensor comm's collectives as the ring sends them: mlp4's
 * two column-row pairs all-reduce their outputs forward (two), and the second pair its
 * input's gradient backward (the first's input wants none): 3 all-reduces of a batch's
 * 48 × 64 floats, each 2 (T - 1) / T × 4 bytes a float from each member. */
static void comm_bytes_count_the_groups_all_reduces(void **state) {
  (void)state;
  tr_train_result r;
  for (int T = 2; T <= 4; T += 2) {
    tr_train_options o = options(&mlp4, STEPS);
    o.strategy = TR_STRATEGY_TP;
    o.devices = T == 2 ? "host:2" : "host:4";
    run_to(o, "tensor.safetensors", &r);
    const double each = 3 * 2.0 * (T - 1) / T * 4 * 48 * 64;
    if (!(fabs(r.comm_bytes_per_step - T * each) < 1e-6 * each))
      fail_msg("tp on %d: comm_bytes_per_step %.0f, the ring's %.0f", T, r.comm_bytes_per_step,
               T * each);
    for (int i = 0; i < T; i++)
      if (!(fabs(r.comm_bytes_device[i] - each) < 1e-6 * each))
        fail_msg("tp on %d: member %d sent %.0f bytes a step, the ring's %.0f", T, i,
                 r.comm_bytes_device[i], each);
  }
}

/* A pair split, then a stage of layers held whole (a layer norm and a last linear layer
 * under MSE): its members count its gradients once between them; and a model of one linear
 * layer, which nothing splits: its members are whole copies, each counting its own chain. */
static const tr_layer_spec pair_then_whole_layers[] = {
    LINEAR(64, 64, 1), RELU(64), LINEAR(64, 64, 1), LAYERNORM(64), LINEAR(64, 64, 1),
};
static const tr_model_spec pair_then_whole = {
    .name = "pair_then_whole", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 5,
    .layers = pair_then_whole_layers, .batch = 48,
    .optim = {.kind = TR_OPTIM_MOMENTUM, .lr = 0.01f, .momentum = 0.9f},
};
static const tr_layer_spec one_linear_layers[] = {LINEAR(64, 64, 1)};
static const tr_model_spec one_linear = {
    .name = "one_linear", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 1,
    .layers = one_linear_layers, .batch = 48,
    .optim = {.kind = TR_OPTIM_MOMENTUM, .lr = 0.01f, .momentum = 0.9f},
};

static void clipping_counts_what_is_held_whole_once(void **state) {
  (void)state;
  static const int cut[] = {3};
  const tr_model_spec *specs[] = {&pair_then_whole, &one_linear};
  for (int k = 0; k < 2; k++) {
    tr_train_result r;
    tr_train_options base = options(specs[k], STEPS);
    base.job.optim.clip = 0.05f;
    run_to(base, "clipped.safetensors", &r);
    const tensor_case layouts[] = {TP("host:2", 2),
                                   WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4))};
    for (int l = 0; l < (k == 0 ? 2 : 1); l++) {
      char what[160];
      tr_train_options o = with_tensor(base, &layouts[l]);
      if (l == 1) o.job.layout.cuts = cut, o.job.layout.ncuts = 1;
      describe(what, sizeof what, &o, &layouts[l]);
      run_to(o, "tensor.safetensors", &r);
      assert_close("tensor.safetensors", "clipped.safetensors", tolerance, what);
    }
  }
}

/* layout.tensor 1 is no tensor parallelism: the same bits as 0, and the figures say 1. */
static void one_member_is_no_tensor_parallelism(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = options(&mlp4, STEPS);
  o.strategy = TR_STRATEGY_HYBRID;
  o.devices = "host:4";
  run_to(o, "none.safetensors", &r);
  assert_int_equal(r.tensor, 1);
  o.job.layout.tensor = 1;
  run_to(o, "one.safetensors", &r);
  assert_int_equal(r.tensor, 1);
  assert_int_equal(r.replicas, 2);
  assert_close("one.safetensors", "none.safetensors", 0, "hybrid with tensor 1");
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

/* A run cut in two, its second half resumed from the first's checkpoint in another layout,
 * ends where the whole run in one layout does. */
static void checkpoints_resume_into_another_layout(void **state) {
  (void)state;
  static const struct {
    tensor_case from, to;
  } hops[] = {
      {TP("host:2", 2), WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4))},
      {WITH_TENSOR(2, DP("host:4")), TP("host:4", 0)},
      {TP("host:4", 4), {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0}, 0, 0}},
      {{{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0}, 0, 0}, WITH_TENSOR(2, HYBRID("host:8"))},
      {WITH_ZERO(2, DP("host:4")), WITH_TENSOR(4, PIPELINE("host:8", TR_SCHEDULE_1F1B, 4))},
      {WITH_TENSOR(4, DP("host:8")), WITH_ZERO(2, HYBRID("host:8"))},
  };
  tr_train_result r;
  const tr_train_options base = options(&mlp4, 2 * STEPS);
  run_to(base, "whole.safetensors", &r);
  for (size_t k = 0; k < sizeof hops / sizeof *hops; k++) {
    char what[400], a[160], b[160];
    describe(a, sizeof a, &base, &hops[k].from);
    describe(b, sizeof b, &base, &hops[k].to);
    snprintf(what, sizeof what, "%s resumed as %s", a, b);
    tr_train_options first = with_tensor(base, &hops[k].from);
    first.steps = STEPS;
    run_to(first, "half.safetensors", &r);
    assert_close("half.safetensors", "half.safetensors", 0, what); /* whole tensors, readable */
    tr_train_options second = with_tensor(base, &hops[k].to);
    second.job.checkpoint.resume = path("half.safetensors");
    run_to(second, "resumed.safetensors", &r);
    assert_int_equal(r.first_step, STEPS);
    assert_close("resumed.safetensors", "whole.safetensors", tolerance, what);
  }
}

/* The parameters handed to an observer (tr_job_snapshot) are whole tensors too: the
 * checkpoint's bytes, under single's names and shapes. */
typedef struct watched {
  int reports;
  size_t nbytes;
  float first[4];
} watched;

static void watch(void *arg, const tr_report_msg *r) {
  watched *w = arg;
  const tr_checkpoint_tensor *t = r->params ? tr_checkpoint_find(r->params, "2.weight") : NULL;
  if (t == NULL || !r->last) return;
  w->reports++;
  w->nbytes = t->nbytes;
  memcpy(w->first, t->data, sizeof w->first);
}

static void snapshots_hold_whole_tensors(void **state) {
  (void)state;
  tr_train_result r;
  watched w = {0};
  const tensor_case pp = WITH_TENSOR(2, PIPELINE("host:4", TR_SCHEDULE_1F1B, 4));
  tr_train_options o = with_tensor(options(&mlp4, STEPS), &pp);
  o.observe = watch;
  o.observe_arg = &w;
  o.snapshot_every = STEPS;
  run_to(o, "observed.safetensors", &r);
  assert_int_equal(w.reports, 1);
  assert_int_equal(w.nbytes, 64 * 64 * sizeof(float));
  tr_checkpoint *ck;
  char err[256];
  assert_int_equal(tr_checkpoint_open(&ck, path("observed.safetensors"), err, sizeof err), 0);
  const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, "2.weight");
  assert_non_null(t);
  assert_memory_equal(t->data, w.first, sizeof w.first);
  tr_checkpoint_close(ck);
}

/* ---- by hand --------------------------------------------------------------------------------- */

/* A job of simplenet wired by hand (tensor 0: one stage; else T members of it), run: its
 * final loss. */
static double hand_wired(int T, const char *devices) {
  simplenet_job x;
  tr_job_config c = tr_job_defaults();
  c.layout.tensor = T;
  simplenet_job_open(&x, devices, 1, NULL, c);
  tr_actor *stage[4], *loader, *coordinator, *extra;
  const int n = T > 1 ? T : 1;
  for (int t = 0; t < n; t++) /* the t-th call adds member t */
    assert_int_equal(tr_job_add_stage(x.j, 0, 0, tr_device_list_at(x.devs, t), &stage[t]), 0);
  if (T > 1) {
    assert_string_equal(tr_actor_name(stage[1]), "stage0.t1");
    assert_int_equal(tr_job_add_stage(x.j, 0, 0, tr_device_list_at(x.devs, 0), &extra), TR_EINVAL);
    assert_non_null(strstr(tr_job_error(x.j), "each of its layout.tensor members"));
  }
  for (int t = 0; t < n; t++) { /* a loader per member: the replica's samples each */
    assert_int_equal(tr_job_add_loader(x.j, 0, &loader), 0);
    assert_int_equal(tr_job_feed(x.j, loader, stage[t], stage[t]), 0);
  }
  assert_int_equal(tr_job_add_loader(x.j, 0, &extra), TR_EINVAL);
  assert_int_equal(tr_job_add_coordinator(x.j, &coordinator), 0);
  if (tr_graph_run(x.g, 0, 2 * STEPS, 0)) fail_msg("%s", tr_graph_error(x.g));
  tr_train_result r;
  tr_job_result(x.j, &r);
  assert_int_equal(r.tensor, n);
  assert_int_equal(r.ndevices, n);
  simplenet_job_close(&x);
  return r.final_loss;
}

static void a_tensor_group_wired_by_hand_trains_as_one_stage(void **state) {
  (void)state;
  const double one = hand_wired(0, "host:1");
  for (int T = 2; T <= 4; T += 2) {
    const double group = hand_wired(T, T == 2 ? "host:2" : "host:4");
    if (!(fabs(group - one) <= tolerance * fabs(one)))
      fail_msg("simplenet wired by hand in a group of %d: final loss %.9g, one stage's %.9g", T,
               group, one);
  }
}

/* ---- refusals ------------------------------------------------------------------------------- */

static void expect_einval(tr_train_options o, const char *field, const char *needle) {
  tr_train_result r;
  tr_error e;
  const int rc = tr_train_run_e(&o, &r, &e);
  if (rc != TR_EINVAL) fail_msg("expected a refusal naming %s, got %d: %s", field, rc, e.message);
  if (strcmp(e.field, field) != 0 || !strstr(e.message, needle))
    fail_msg("refused by field '%s', not %s (or without '%s'): %s", e.field, field, needle,
             e.message);
}

static void layouts_tensor_groups_do_not_fit_are_refused(void **state) {
  (void)state;
  tr_train_options o = options(&mlp4, STEPS);
  o.strategy = TR_STRATEGY_DP;
  o.devices = "host:3";
  o.job.layout.tensor = 2;
  expect_einval(o, "devices", "tensor groups of 2");
  o.strategy = TR_STRATEGY_ASYNC;
  o.devices = "host:2";
  expect_einval(o, "layout.tensor", "async");
  o.strategy = TR_STRATEGY_SINGLE;
  expect_einval(o, "layout.tensor", "one device");
  o.strategy = TR_STRATEGY_TP;
  o.devices = "host:4";
  o.job.layout.tensor = 2;
  expect_einval(o, "layout.tensor", "one tensor group");
  o.job.layout.tensor = -1;
  o.strategy = TR_STRATEGY_DP;
  expect_einval(o, "layout.tensor", "give the members");
  o.strategy = TR_STRATEGY_TP; /* 64 features do not divide by 3: tp chose T, not the caller */
  o.devices = "host:3";
  o.job.layout.tensor = 0;
  expect_einval(o, "strategy", "64 output features across 3 members");
  o.strategy = TR_STRATEGY_DP; /* the caller's T named as given */
  o.job.layout.tensor = 3;
  expect_einval(o, "layout.tensor", "64 output features across 3 members");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tensor_groups_train_the_mlp_like_single),
      cmocka_unit_test(tensor_groups_train_gpt_like_single),
      cmocka_unit_test(tensor_groups_clip_by_the_norm_of_every_part_once),
      cmocka_unit_test(figures_show_each_members_part),
      cmocka_unit_test(tensor_groups_train_in_bf16_like_single),
      cmocka_unit_test(gpt_held_out_accuracy_is_over_the_whole_rows),
      cmocka_unit_test(comm_bytes_count_the_groups_all_reduces),
      cmocka_unit_test(clipping_counts_what_is_held_whole_once),
      cmocka_unit_test(one_member_is_no_tensor_parallelism),
      cmocka_unit_test(checkpoints_resume_into_another_layout),
      cmocka_unit_test(snapshots_hold_whole_tensors),
      cmocka_unit_test(a_tensor_group_wired_by_hand_trains_as_one_stage),
      cmocka_unit_test(layouts_tensor_groups_do_not_fit_are_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
