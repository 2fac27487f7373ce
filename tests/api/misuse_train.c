/* misuse_train.c — hostile calls to training runs, their results, schedules and plans
 * (misuse.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "misuse.h"

/* ---- training runs ------------------------------------------------------------------------- */

MISUSE(train_null_options, "tr_train_run(NULL, &r, err, n)", TR_EINVAL, "tr_train_run", "o") {
  tr_train_result r;
  return tr_train_run(NULL, &r, msg, n);
}

MISUSE(train_null_result, "tr_train_run(&o, NULL, err, n)", TR_EINVAL, "tr_train_run", "r") {
  tr_train_options o = train_options();
  return tr_train_run(&o, NULL, msg, n);
}

MISUSE(train_null_err, "tr_train_run(&o bad, &r, NULL, 0)", TR_EINVAL, NULL, NULL) {
  tr_train_options o = train_options();
  o.model = "no-such-model";
  tr_train_result r;
  return tr_train_run(&o, &r, NULL, 0);
}

MISUSE(train_zero_err_size, "tr_train_run(&o bad, &r, err, 0)", TR_EINVAL, NULL, NULL) {
  tr_train_options o = train_options();
  o.model = "no-such-model";
  tr_train_result r;
  char err[1] = {'x'};
  const int rc = tr_train_run(&o, &r, err, 0);
  return err[0] == 'x' ? rc : 0;
}

MISUSE(train_null_err_bad_devices, "tr_train_run({.devices = \"host:0\"}, &r, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_train_options o = train_options();
  o.devices = "host:0";
  tr_train_result r;
  return tr_train_run(&o, &r, NULL, 0);
}

MISUSE(train_null_model, "tr_train_run({.model = NULL, .spec = NULL}, &r, err, n)", TR_EINVAL,
       "model", NULL) {
  tr_train_options o = train_options();
  o.model = NULL;
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_negative_steps, "tr_train_run({.steps = -5}, &r, err, n)", TR_EINVAL, "steps",
       NULL) {
  tr_train_options o = train_options();
  o.steps = -5;
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_nan_seconds, "tr_train_run({.steps = 0, .seconds = NAN}, &r, err, n)", TR_EINVAL,
       "seconds", NULL) {
  tr_train_options o = train_options();
  o.steps = 0;
  o.seconds = NAN;
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_null_devices, "tr_train_run({.devices = NULL}, &r, err, n)", TR_EINVAL, "devices",
       NULL) {
  tr_train_options o = train_options();
  o.devices = NULL;
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_bad_strategy, "tr_train_run({.strategy = 42}, &r, err, n)", TR_EINVAL, "strategy",
       NULL) {
  tr_train_options o = train_options();
  o.strategy = (tr_strategy)42;
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_job_model_given, "tr_train_run({.job.model = m}, &r, err, n)", TR_EINVAL,
       "job.model", NULL) {
  tr_train_options o = train_options();
  o.job.model = model();
  tr_train_result r;
  return tr_train_run(&o, &r, msg, n);
}

MISUSE(train_e_null_options, "tr_train_run_e(NULL, &r, &e)", TR_EINVAL, "tr_train_run_e", "o") {
  tr_train_result r;
  tr_error e;
  const int rc = tr_train_run_e(NULL, &r, &e);
  return said(msg, n, rc, e.message);
}

MISUSE(train_e_null_error, "tr_train_run_e(&o bad, &r, NULL)", TR_EINVAL, NULL, NULL) {
  tr_train_options o = train_options();
  o.model = "no-such-model";
  tr_train_result r;
  return tr_train_run_e(&o, &r, NULL);
}

MISUSE(result_json_null, "tr_train_result_json(NULL, f)", TR_EINVAL, "tr_train_result_json", "r") {
  return tr_train_result_json(NULL, stdout);
}

MISUSE(result_json_null_file, "tr_train_result_json(&r, NULL)", TR_EINVAL,
       "tr_train_result_json", "f") {
  tr_train_result r;
  memset(&r, 0, sizeof r);
  return tr_train_result_json(&r, NULL);
}

MISUSE(result_summary_null, "tr_train_result_summary(NULL, f)", TR_EINVAL,
       "tr_train_result_summary", "r") {
  return tr_train_result_summary(NULL, stdout);
}

MISUSE(result_summary_null_file, "tr_train_result_summary(&r, NULL)", TR_EINVAL,
       "tr_train_result_summary", "f") {
  tr_train_result r;
  memset(&r, 0, sizeof r);
  return tr_train_result_summary(&r, NULL);
}

/* ---- a run's figures by key (tr_result.h) ---------------------------------------------------- */

/* A refused run's result: its model and strategy, no devices. */
static tr_result *refused_result(void) {
  tr_train_options o = train_options();
  o.devices = NULL;
  tr_result *r = NULL;
  tr_train_run_result(&o, &r, NULL);
  if (r == NULL) exit(120); /* the fixture failed */
  return r;
}

MISUSE(train_result_null_options, "tr_train_run_result(NULL, &r, &e)", TR_EINVAL,
       "tr_train_run_result", "o") {
  tr_result *r;
  tr_error e;
  const int rc = tr_train_run_result(NULL, &r, &e);
  return said(msg, n, rc, e.message);
}

MISUSE(train_result_null_out, "tr_train_run_result(&o, NULL, &e)", TR_EINVAL,
       "tr_train_run_result", "out") {
  tr_train_options o = train_options();
  tr_error e;
  const int rc = tr_train_run_result(&o, NULL, &e);
  return said(msg, n, rc, e.message);
}

MISUSE(train_result_bad_option, "tr_train_run_result({.devices = NULL}, &r, &e)", TR_EINVAL,
       "devices", NULL) {
  tr_train_options o = train_options();
  o.devices = NULL;
  tr_result *r;
  tr_error e;
  const int rc = tr_train_run_result(&o, &r, &e);
  const char *model = NULL;
  if (r == NULL || tr_result_text(r, "model", &model) || strcmp(model, "simplenet")) return 0;
  return said(msg, n, rc, e.field);
}

MISUSE(result_unknown_key, "tr_result_real(r, \"samples_per_sec\", &v)", TR_EINVAL,
       "\"samples_per_sec\"", "did you mean \"samples_per_s\"") {
  double v;
  return tr_result_real(refused_result(), "samples_per_sec", &v);
}

MISUSE(result_null, "tr_result_int(NULL, \"steps\", &v)", TR_EINVAL, "tr_result_int", "r") {
  int64_t v;
  return tr_result_int(NULL, "steps", &v);
}

MISUSE(result_null_key, "tr_result_text(r, NULL, &v)", TR_EINVAL, "tr_result_text", "key") {
  const char *v;
  return tr_result_text(refused_result(), NULL, &v);
}

MISUSE(result_null_out, "tr_result_real(r, \"steps\", NULL)", TR_EINVAL, "tr_result_real",
       "out") {
  return tr_result_real(refused_result(), "steps", NULL);
}

MISUSE(result_other_type, "tr_result_int(r, \"final_loss\", &v)", TR_EINVAL, "\"final_loss\"",
       "tr_result_real") {
  int64_t v;
  return tr_result_int(refused_result(), "final_loss", &v);
}

MISUSE(result_index_beyond, "tr_result_real_at(r, \"utilization\", 0, &v) of no devices",
       TR_EINVAL, "\"utilization\"", "has 0") {
  double v;
  return tr_result_real_at(refused_result(), "utilization", 0, &v);
}

MISUSE(result_figure_at_beyond, "tr_result_figure_at(r, 9999, &f)", TR_EINVAL,
       "tr_result_figure_at", "9999") {
  tr_figure f;
  return tr_result_figure_at(refused_result(), 9999, &f);
}

MISUSE(result_figure_null_out, "tr_result_figure(r, \"steps\", NULL)", TR_EINVAL,
       "tr_result_figure", "out") {
  return tr_result_figure(refused_result(), "steps", NULL);
}

MISUSE(result_set_measured, "tr_result_set_real(r, \"samples_per_s\", 1)", TR_EINVAL,
       "\"samples_per_s\"", "sgemm_gflops") {
  return tr_result_set_real(refused_result(), "samples_per_s", 1);
}

MISUSE(result_json_of_null, "tr_result_json(NULL, f)", TR_EINVAL, "tr_result_json", "r") {
  return tr_result_json(NULL, stdout);
}

MISUSE(result_summary_null_f, "tr_result_summary(r, NULL)", TR_EINVAL, "tr_result_summary", "f") {
  return tr_result_summary(refused_result(), NULL);
}

MISUSE(result_free_and_count_null, "tr_result_free(NULL), tr_result_figure_count(NULL)",
       MISUSE_DEFINED, NULL, NULL) {
  tr_result_free(NULL);
  return tr_result_figure_count(NULL) != 0;
}

MISUSE(job_result_of_null, "tr_job_result_of(NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_job_result_of(NULL) != NULL;
}

MISUSE(signal_parse_null_out, "tr_signal_parse(\"SIGINT\", NULL)", TR_EINVAL, "tr_signal_parse",
       "signum") {
  return tr_signal_parse("SIGINT", NULL);
}

/* ---- schedules ------------------------------------------------------------------------------ */

MISUSE(schedule_new_null_out, "tr_schedule_new(NULL, &c)", TR_EINVAL, "tr_schedule_new", "out") {
  return tr_schedule_new(NULL, &(tr_schedule_config){.stages = 2, .microbatches = 2});
}

MISUSE(schedule_new_null_config, "tr_schedule_new(&sc, NULL)", TR_EINVAL, "tr_schedule_new",
       "config") {
  tr_schedule *sc;
  return tr_schedule_new(&sc, NULL);
}

MISUSE(schedule_new_no_stages, "tr_schedule_new(&sc, {.stages = 0})", TR_EINVAL,
       "tr_schedule_new", "stages") {
  tr_schedule *sc;
  return tr_schedule_new(&sc, &(tr_schedule_config){.stages = 0, .microbatches = 2});
}

MISUSE(schedule_new_bad_kind, "tr_schedule_new(&sc, {.kind = 99})", TR_EINVAL,
       "tr_schedule_new", "kind") {
  tr_schedule *sc;
  return tr_schedule_new(&sc, &(tr_schedule_config){.kind = (tr_schedule_kind)99, .stages = 2,
                                                    .microbatches = 2});
}

MISUSE(schedule_free_null, "tr_schedule_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_schedule_free(NULL);
  return 0;
}

MISUSE(schedule_stage_out_of_range, "tr_schedule_actions/_slots(sc, 99, ...)", MISUSE_DEFINED,
       NULL, NULL) {
  tr_schedule *sc = schedule();
  size_t k = 7;
  const tr_action *a = tr_schedule_actions(sc, 99, &k);
  return !a && k == 0 && tr_schedule_slots(sc, 99) == 0 && tr_schedule_slots(sc, -1) == 0 &&
                 tr_schedule_chunk_slots(sc, 0, 9) == 0 &&
                 tr_schedule_eval_actions(sc, 99, 2, NULL, 0) == 0
             ? 0
             : 1;
}

MISUSE(schedule_actions_null_count, "tr_schedule_actions(sc, 0, NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  return tr_schedule_actions(schedule(), 0, NULL) != NULL ? 0 : 1;
}

MISUSE(schedule_null, "tr_schedule_bubble/_config_of/_slots(NULL)", MISUSE_DEFINED, NULL, NULL) {
  size_t k;
  return isnan(tr_schedule_bubble(NULL)) && !tr_schedule_config_of(NULL) &&
                 !tr_schedule_slots(NULL, 0) && !tr_schedule_actions(NULL, 0, &k)
             ? 0
             : 1;
}

MISUSE(schedule_eval_null_out, "tr_schedule_eval_actions(sc, 0, 2, NULL, 8)", MISUSE_DEFINED, NULL,
       NULL) {
  /* cap 8 with no room: sized, nothing written */
  return tr_schedule_eval_actions(schedule(), 0, 2, NULL, 8) > 0 ? 0 : 1;
}

/* ---- plans ---------------------------------------------------------------------------------- */

MISUSE(simulate_null_schedule, "tr_plan_simulate(NULL, &c, &step, err, n)", TR_EINVAL,
       "tr_plan_simulate", "sc") {
  tr_plan_step step;
  return tr_plan_simulate(NULL, &(tr_plan_costs){0}, &step, msg, n);
}

MISUSE(simulate_null_costs, "tr_plan_simulate(sc, NULL, &step, err, n)", TR_EINVAL,
       "tr_plan_simulate", "c") {
  tr_plan_step step;
  return tr_plan_simulate(schedule(), NULL, &step, msg, n);
}

MISUSE(simulate_null_out, "tr_plan_simulate(sc, &c, NULL, err, n)", TR_EINVAL,
       "tr_plan_simulate", "out") {
  return tr_plan_simulate(schedule(), &(tr_plan_costs){0}, NULL, msg, n);
}

MISUSE(simulate_nan_cost, "tr_plan_simulate(sc, {.forward = {NAN, 1}}, &step, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_plan_step step;
  const double f[2] = {NAN, 1};
  return tr_plan_simulate(schedule(), &(tr_plan_costs){.forward = f}, &step, NULL, 0);
}

MISUSE(predict_null_options, "tr_plan_predict(NULL, NULL, &p, err, n)", TR_EINVAL,
       "tr_plan_predict", "o") {
  tr_plan_prediction p;
  return tr_plan_predict(NULL, NULL, &p, msg, n);
}

MISUSE(predict_null_out, "tr_plan_predict(&o, NULL, NULL, err, n)", TR_EINVAL, "tr_plan_predict",
       "out") {
  tr_train_options o = train_options();
  return tr_plan_predict(&o, NULL, NULL, msg, n);
}

MISUSE(predict_bad_model_no_err, "tr_plan_predict({.model = \"nope\"}, NULL, &p, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_train_options o = train_options();
  o.model = "nope";
  tr_plan_prediction p;
  return tr_plan_predict(&o, NULL, &p, NULL, 0);
}

MISUSE(layouts_null_model, "tr_plan_layouts(NULL, \"host:2\", out, cap, &k, err, n)", TR_EINVAL,
       "tr_plan_layouts", "model") {
  static tr_plan_layout out[TR_PLAN_MAX_LAYOUTS];
  int k;
  return tr_plan_layouts(NULL, "host:2", out, TR_PLAN_MAX_LAYOUTS, &k, msg, n);
}

MISUSE(layouts_null_out, "tr_plan_layouts(\"mlp\", \"host:2\", NULL, 24, &k, err, n)", TR_EINVAL,
       "tr_plan_layouts", "out") {
  int k;
  return tr_plan_layouts("mlp", "host:2", NULL, TR_PLAN_MAX_LAYOUTS, &k, msg, n);
}

MISUSE(layouts_negative_cap, "tr_plan_layouts(\"mlp\", \"host:2\", out, -1, &k, err, n)",
       TR_EINVAL, "tr_plan_layouts", "cap") {
  static tr_plan_layout out[TR_PLAN_MAX_LAYOUTS];
  int k;
  return tr_plan_layouts("mlp", "host:2", out, -1, &k, msg, n);
}

MISUSE(layouts_null_count, "tr_plan_layouts(\"mlp\", \"host:2\", out, 24, NULL, err, n)",
       TR_EINVAL, "tr_plan_layouts", "count") {
  static tr_plan_layout out[TR_PLAN_MAX_LAYOUTS];
  return tr_plan_layouts("mlp", "host:2", out, TR_PLAN_MAX_LAYOUTS, NULL, msg, n);
}

MISUSE(rank_null, "tr_plan_rank(NULL, 3, 0, NULL, err, n)", TR_EINVAL, "tr_plan_rank", "layouts") {
  return tr_plan_rank(NULL, 3, 0, NULL, msg, n);
}

MISUSE(rank_negative_count, "tr_plan_rank(layouts, -1, 0, NULL, err, n)", TR_EINVAL,
       "tr_plan_rank", "count") {
  static tr_plan_layout out[1];
  return tr_plan_rank(out, -1, 0, NULL, msg, n);
}

MISUSE(layer_times_null_model, "tr_plan_layer_times(NULL, dev, 4, NULL, t, &m, err, n)",
       TR_EINVAL, "tr_plan_layer_times", "m") {
  tr_layer_times t[8];
  bool measured;
  return tr_plan_layer_times(NULL, device(), 4, NULL, t, &measured, msg, n);
}

MISUSE(layer_times_null_device, "tr_plan_layer_times(m, NULL, 4, NULL, t, &m, err, n)",
       TR_EINVAL, "tr_plan_layer_times", "d") {
  tr_layer_times t[8];
  bool measured;
  return tr_plan_layer_times(model(), NULL, 4, NULL, t, &measured, msg, n);
}

MISUSE(layer_times_zero_batch, "tr_plan_layer_times(m, dev, 0, NULL, t, &m, err, n)", TR_EINVAL,
       "tr_plan_layer_times", "batch") {
  tr_layer_times t[8];
  bool measured;
  return tr_plan_layer_times(model(), device(), 0, NULL, t, &measured, msg, n);
}

MISUSE(layer_times_null_times, "tr_plan_layer_times(m, dev, 4, NULL, NULL, &m, err, n)",
       TR_EINVAL, "tr_plan_layer_times", "times") {
  bool measured;
  return tr_plan_layer_times(model(), device(), 4, NULL, NULL, &measured, msg, n);
}

MISUSE(costs_default_path, "tr_plan_costs_default_path()", MISUSE_DEFINED, NULL, NULL) {
  return tr_plan_costs_default_path() ? 0 : 1;
}

/* ---- how devices' tensors cross --------------------------------------------------------- */

MISUSE(allreduce_choose_null, "tr_allreduce_choose(AUTO, NULL, NULL, 2, ..., &out, err, n)",
       TR_EINVAL, "tr_allreduce_choose", "devs") {
  tr_allreduce out;
  return tr_allreduce_choose(TR_ALLREDUCE_AUTO, NULL, NULL, 2, false, &out, msg, n);
}

MISUSE(allreduce_choose_null_out, "tr_allreduce_choose(AUTO, devs, NULL, 1, ..., NULL, err, n)",
       TR_EINVAL, "tr_allreduce_choose", "out") {
  return tr_allreduce_choose(TR_ALLREDUCE_AUTO, tr_device_info_of(device()), NULL, 1, false, NULL,
                             msg, n);
}

MISUSE(allreduce_choose_negative, "tr_allreduce_choose(AUTO, devs, NULL, -1, ..., &out, err, n)",
       TR_EINVAL, "tr_allreduce_choose", "n") {
  tr_allreduce out;
  return tr_allreduce_choose(TR_ALLREDUCE_AUTO, tr_device_info_of(device()), NULL, -1, false,
                             &out, msg, n);
}

MISUSE(allreduce_choose_bad_kind, "tr_allreduce_choose(7, devs, NULL, 1, ..., &out, err, n)",
       TR_EINVAL, "allreduce", "7") {
  tr_allreduce out;
  return tr_allreduce_choose((tr_allreduce)7, tr_device_info_of(device()), NULL, 1, false, &out,
                             msg, n);
}

MISUSE(carrier_choose_null, "tr_edge_carrier_choose(AUTO, NULL, 0, NULL, 1, ..., &out, err, n)",
       TR_EINVAL, "tr_edge_carrier_choose", "from") {
  tr_edge_carrier out;
  return tr_edge_carrier_choose(TR_ALLREDUCE_AUTO, NULL, 0, NULL, 1, false, &out, msg, n);
}
