/* misuse_models.c — hostile calls to models, layers, optimizers, losses and stages
 * (misuse.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "misuse.h"

static tr_model_spec spec_of(int nlayers, const tr_layer_spec *layers) {
  return (tr_model_spec){.name = "m", .ctx = 1, .nlayers = nlayers, .layers = layers, .batch = 4};
}

/* ---- models -------------------------------------------------------------------------------- */

MISUSE(model_new_null_out, "tr_model_new(NULL, &spec, err, n)", TR_EINVAL, "tr_model_new", "out") {
  const tr_layer_spec l[] = {tr_layer_linear(4, 2, 1)};
  const tr_model_spec s = spec_of(1, l);
  return tr_model_new(NULL, &s, msg, n);
}

MISUSE(model_new_null_spec, "tr_model_new(&m, NULL, err, n)", TR_EINVAL, "tr_model_new", "spec") {
  tr_model *m;
  return tr_model_new(&m, NULL, msg, n);
}

MISUSE(model_new_null_layers, "tr_model_new(&m, {.nlayers = 2, .layers = NULL}, err, n)",
       TR_EINVAL, "tr_model_new", "layers") {
  const tr_model_spec s = spec_of(2, NULL);
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_new_negative_layers, "tr_model_new(&m, {.nlayers = -1}, err, n)", TR_EINVAL,
       "tr_model_new", "nlayers") {
  const tr_layer_spec l[] = {tr_layer_linear(4, 2, 1)};
  const tr_model_spec s = spec_of(-1, l);
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_new_no_layers, "tr_model_new(&m, {.nlayers = 0}, err, n)", TR_EINVAL,
       "tr_model_new", "nlayers") {
  const tr_layer_spec l[] = {tr_layer_linear(4, 2, 1)};
  const tr_model_spec s = spec_of(0, l);
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_new_null_kind, "tr_model_new(&m, {.layers = {{.type = NULL}}}, err, n)", TR_EINVAL,
       "layer 0", NULL) {
  const tr_layer_spec l[] = {{.in = 4, .out = 2}};
  const tr_model_spec s = spec_of(1, l);
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_new_bad_no_err, "tr_model_new(&m, {.layers = widths that do not chain}, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  const tr_layer_spec l[] = {tr_layer_linear(4, 2, 1), tr_layer_linear(3, 1, 1)};
  const tr_model_spec s = spec_of(2, l);
  tr_model *m;
  return tr_model_new(&m, &s, NULL, 0);
}

MISUSE(model_new_negative_batch, "tr_model_new(&m, {.batch = -4}, err, n)", TR_EINVAL,
       "batch -4", NULL) {
  const tr_layer_spec l[] = {tr_layer_linear(4, 2, 1)};
  tr_model_spec s = spec_of(1, l);
  s.batch = -4;
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_new_residual_null_inner, "tr_model_new(&m, {tr_layer_residual(2, NULL)}, err, n)",
       TR_EINVAL, "residual", NULL) {
  const tr_layer_spec l[] = {tr_layer_linear(4, 4, 1), tr_layer_residual(2, NULL)};
  const tr_model_spec s = spec_of(2, l);
  tr_model *m;
  return tr_model_new(&m, &s, msg, n);
}

MISUSE(model_simplenet_null, "tr_model_simplenet(NULL)", TR_EINVAL, "tr_model_simplenet", "out") {
  return tr_model_simplenet(NULL);
}

MISUSE(model_mlp_null, "tr_model_mlp(NULL, 4, 2)", TR_EINVAL, "tr_model_mlp", "out") {
  return tr_model_mlp(NULL, 4, 2);
}

MISUSE(model_mlp_zero_width, "tr_model_mlp(&m, 0, 2)", TR_EINVAL, "tr_model_mlp", "width") {
  tr_model *m;
  return tr_model_mlp(&m, 0, 2);
}

MISUSE(model_mlp_negative_depth, "tr_model_mlp(&m, 4, -1)", TR_EINVAL, "tr_model_mlp", "depth") {
  tr_model *m;
  return tr_model_mlp(&m, 4, -1);
}

MISUSE(model_gpt_null, "tr_model_gpt(NULL, NULL)", TR_EINVAL, "tr_model_gpt", "out") {
  return tr_model_gpt(NULL, NULL);
}

MISUSE(model_gpt_zero_vocab, "tr_model_gpt(&m, {.vocab = 0, ...})", TR_EINVAL, "tr_model_gpt",
       "vocab") {
  tr_gpt_config c = tr_gpt_defaults();
  c.vocab = 0;
  tr_model *m;
  return tr_model_gpt(&m, &c);
}

MISUSE(model_gpt_heads, "tr_model_gpt(&m, {.heads = 3, .width = 256})", TR_EINVAL,
       "tr_model_gpt", "heads") {
  tr_gpt_config c = tr_gpt_defaults();
  c.heads = 3;
  tr_model *m;
  return tr_model_gpt(&m, &c);
}

MISUSE(model_named_null_name, "tr_model_named(&m, NULL, err, n)", TR_EINVAL, "tr_model_named",
       "name") {
  tr_model *m;
  return tr_model_named(&m, NULL, msg, n);
}

MISUSE(model_named_null_out, "tr_model_named(NULL, \"mlp\", err, n)", TR_EINVAL,
       "tr_model_named", "out") {
  return tr_model_named(NULL, "mlp", msg, n);
}

MISUSE(model_named_unknown_no_err, "tr_model_named(&m, \"nope\", NULL, 0)", TR_EINVAL, NULL,
       NULL) {
  tr_model *m;
  return tr_model_named(&m, "nope", NULL, 0);
}

MISUSE(model_free_null, "tr_model_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_model_free(NULL);
  return 0;
}

MISUSE(model_getters_null, "tr_model_name/_layer_count/_batch/_numel/...(NULL)", MISUSE_DEFINED,
       NULL, NULL) {
  size_t off = 1, num = 1;
  int first = 1, count = 1;
  tr_model_layer_span(NULL, 0, &off, &num);
  tr_model_layer_tensors(NULL, 0, &first, &count);
  return tr_model_name(NULL) && !tr_model_layer_count(NULL) && !tr_model_layer(NULL, 0) &&
                 !tr_model_ctx(NULL) && !tr_model_batch(NULL) && !tr_model_numel(NULL) &&
                 !tr_model_param_count(NULL) && !tr_model_input_bytes(NULL) &&
                 !tr_model_target_bytes(NULL) && !tr_model_tensor_count(NULL) &&
                 !tr_model_tensor(NULL, 0) && tr_model_layer_flops(NULL, 0) == 0 &&
                 tr_model_train_flops(NULL) == 0 && !off && !num && !count
             ? 0
             : 1;
}

MISUSE(model_index_out_of_range, "tr_model_layer/_tensor/_layer_span(m, 99)", MISUSE_DEFINED, NULL,
       NULL) {
  tr_model *m = model();
  size_t off = 1, num = 1;
  int first = 1, count = 1;
  tr_model_layer_span(m, 99, &off, &num);
  tr_model_layer_tensors(m, -1, &first, &count);
  return !tr_model_layer(m, 99) && !tr_model_layer(m, -1) && !tr_model_tensor(m, 999) &&
                 tr_model_layer_flops(m, 99) == 0 && !off && !num && !count
             ? 0
             : 1;
}

MISUSE(model_balance_null_model, "tr_model_balance(NULL, 2, cuts)", TR_EINVAL, "tr_model_balance",
       "m") {
  int cuts[3];
  return tr_model_balance(NULL, 2, cuts);
}

MISUSE(model_balance_zero_parts, "tr_model_balance(m, 0, cuts)", TR_EINVAL, "tr_model_balance",
       "parts") {
  int cuts[3];
  return tr_model_balance(model(), 0, cuts);
}

MISUSE(model_balance_null_cuts, "tr_model_balance(m, 2, NULL)", TR_EINVAL, "tr_model_balance",
       "cuts") {
  return tr_model_balance(model(), 2, NULL);
}

MISUSE(model_balance_too_many, "tr_model_balance(m, 99, cuts)", TR_EINVAL, "tr_model_balance",
       "parts") {
  int cuts[100];
  return tr_model_balance(model(), 99, cuts);
}

MISUSE(model_balance_costs_null, "tr_model_balance_costs(m, NULL, 2, cuts)", TR_EINVAL,
       "tr_model_balance_costs", "cost") {
  int cuts[3];
  return tr_model_balance_costs(model(), NULL, 2, cuts);
}

MISUSE(model_balance_costs_nan, "tr_model_balance_costs(m, {NAN, ...}, 2, cuts)", TR_EINVAL,
       "tr_model_balance_costs", "cost") {
  int cuts[3];
  const double cost[3] = {NAN, 1, 1};
  return tr_model_balance_costs(model(), cost, 2, cuts);
}

MISUSE(model_measure_null_device, "tr_model_measure_layers(m, NULL, 4, 1, cost, err, n)",
       TR_EINVAL, "tr_model_measure_layers", "d") {
  double cost[3];
  return tr_model_measure_layers(model(), NULL, 4, 1, cost, msg, n);
}

MISUSE(model_measure_zero_batch, "tr_model_measure_layers(m, dev, 0, 1, cost, err, n)", TR_EINVAL,
       "tr_model_measure_layers", "batch") {
  double cost[3];
  return tr_model_measure_layers(model(), device(), 0, 1, cost, msg, n);
}

MISUSE(model_measure_null_cost, "tr_model_measure_layers(m, dev, 4, 1, NULL, err, n)", TR_EINVAL,
       "tr_model_measure_layers", "cost") {
  return tr_model_measure_layers(model(), device(), 4, 1, NULL, msg, n);
}

MISUSE(model_measure_passes_null, "tr_model_measure_passes(m, dev, NULL, 4, 1, NULL, err, n)",
       TR_EINVAL, "tr_model_measure_passes", "times") {
  return tr_model_measure_passes(model(), device(), NULL, 4, 1, NULL, msg, n);
}

MISUSE(model_shard_part_too_big, "tr_model_shard(m, 2, 2, &member, err, n)", TR_EINVAL,
       "tr_model_shard", "part") {
  tr_model *member;
  return tr_model_shard(model(), 2, 2, &member, msg, n);
}

MISUSE(model_shard_zero_parts, "tr_model_shard(m, 0, 0, &member, err, n)", TR_EINVAL,
       "tr_model_shard", "parts") {
  tr_model *member;
  return tr_model_shard(model(), 0, 0, &member, msg, n);
}

MISUSE(model_shard_null, "tr_model_shard(NULL, 0, 1, &member, err, n)", TR_EINVAL,
       "tr_model_shard", "m") {
  tr_model *member;
  return tr_model_shard(NULL, 0, 1, &member, msg, n);
}

MISUSE(tensor_comms_open_null, "tr_tensor_comms_open(NULL, 2, comms, err, n)", TR_EINVAL,
       "tr_tensor_comms_open", "devs") {
  tr_tensor_comm *comms[2];
  return tr_tensor_comms_open(NULL, 2, comms, msg, n);
}

MISUSE(tensor_comms_open_zero, "tr_tensor_comms_open(devs, 0, comms, err, n)", TR_EINVAL,
       "tr_tensor_comms_open", "n") {
  tr_tensor_comm *comms[2];
  tr_device *devs[2] = {device(), tr_device_list_at(devices(), 1)};
  return tr_tensor_comms_open(devs, 0, comms, msg, n);
}

MISUSE(tensor_comms_open_null_comms, "tr_tensor_comms_open(devs, 2, NULL, err, n)", TR_EINVAL,
       "tr_tensor_comms_open", "comms") {
  tr_device *devs[2] = {device(), tr_device_list_at(devices(), 1)};
  return tr_tensor_comms_open(devs, 2, NULL, msg, n);
}

MISUSE(tensor_comms_close_null, "tr_tensor_comms_close(NULL, 2)", MISUSE_DEFINED, NULL, NULL) {
  tr_tensor_comms_close(NULL, 2);
  tr_tensor_comm_abort(NULL);
  return 0;
}

/* ---- layers and kinds ------------------------------------------------------------------------ */

MISUSE(layers_check_null, "tr_layers_check(2, NULL, 10, 0, err, n)", TR_EINVAL, "tr_layers_check",
       "layers") {
  return tr_layers_check(2, NULL, 10, 0, msg, n);
}

MISUSE(layers_check_negative, "tr_layers_check(-1, layers, 10, 0, err, n)", TR_EINVAL,
       "tr_layers_check", "n") {
  const tr_layer_spec l[] = {tr_layer_linear(10, 2, 1)};
  return tr_layers_check(-1, l, 10, 0, msg, n);
}

MISUSE(layer_slots_null, "tr_layer_flops/_act_floats/_tensor_count(NULL, ...)", MISUSE_DEFINED,
       NULL, NULL) {
  size_t act = 1, scratch = 1;
  tr_layer_bf16_elems(NULL, 1, 1, &act, &scratch);
  return tr_layer_flops(NULL, 1) == 0 && !tr_layer_act_floats(NULL, 1, 1) &&
                 !tr_layer_scratch_floats(NULL, 1, 1) && !tr_layer_keep_floats(NULL, 1, 1) &&
                 tr_layer_tensor_count(NULL, 1) <= 0 && !tr_layer_draws(NULL) &&
                 !tr_layer_splits(NULL) && !act && !scratch
             ? 0
             : 1;
}

MISUSE(tensor_part_copy_null, "tr_tensor_part_copy(NULL, whole, part, 1)", MISUSE_DEFINED,
       "tr_tensor_part_copy", "p") {
  float whole[4], part[4];
  tr_tensor_part_copy(NULL, whole, part, 1);
  const tr_tensor_part p = tr_model_tensor_part(model(), 0);
  tr_tensor_part_copy(&p, NULL, part, 1);
  return 0;
}

MISUSE(tensor_list_add_null, "tr_tensor_list_add(NULL, \"w\", 2, 2, ...)", TR_EINVAL,
       "tr_tensor_list_add", "t") {
  return tr_tensor_list_add(NULL, "w", 2, 2, TR_INIT_ZEROS, 0);
}

MISUSE(layer_fail_null, "tr_layer_fail(NULL, TR_EIO, ...)", TR_EIO, NULL, NULL) {
  return tr_layer_fail(NULL, TR_EIO, "%s", "lost");
}

MISUSE(layer_backward_halves_null, "tr_layer_backward_input(NULL, ...)", TR_EINVAL,
       "tr_layer_backward_input", "c") {
  return tr_layer_backward_input(NULL, NULL, NULL);
}

/* ---- optimizers and losses ------------------------------------------------------------------ */

MISUSE(optim_register_bad, "tr_optim_register({.name = NULL}, err, n)", TR_EINVAL,
       "optimizer", "needs a name") {
  static const tr_optim_type bad = {.update = NULL};
  return tr_optim_register(&bad, msg, n);
}

MISUSE(optim_register_bad_no_err, "tr_optim_register({.state_copies = 9}, NULL, 0)", TR_EINVAL,
       NULL, NULL) {
  static const tr_optim_type bad = {.name = "bad", .state_copies = 9};
  return tr_optim_register(&bad, NULL, 0);
}

MISUSE(optim_parse_null, "tr_optim_kind_parse(NULL, &k)", TR_EINVAL, NULL, NULL) {
  tr_optim_kind k;
  return tr_optim_kind_parse(NULL, &k);
}

MISUSE(optim_names_null, "tr_optim_kind_names(NULL, 10)", MISUSE_DEFINED, NULL, NULL) {
  tr_optim_kind_names(NULL, 10);
  char one[1];
  tr_optim_kind_names(one, 0);
  return 0;
}

MISUSE(loss_register_bad, "tr_loss_register({.forward = NULL}, err, n)", TR_EINVAL,
       "loss 'bad'", "forward") {
  static const tr_loss_type bad = {.name = "bad"};
  return tr_loss_register(&bad, msg, n);
}

MISUSE(loss_parse_null, "tr_loss_kind_parse(NULL, &k)", TR_EINVAL, NULL, NULL) {
  tr_loss_kind k;
  return tr_loss_kind_parse(NULL, &k);
}

/* ---- stages -------------------------------------------------------------------------------- */

static tr_stage_config stage_config(void) { return tr_stage_defaults(model()); }

MISUSE(stage_open_null_out, "tr_stage_open(NULL, m, dev, &c, err, n)", TR_EINVAL,
       "tr_stage_open", "out") {
  tr_stage_config c = stage_config();
  return tr_stage_open(NULL, model(), device(), &c, msg, n);
}

MISUSE(stage_open_null_model, "tr_stage_open(&st, NULL, dev, &c, err, n)", TR_EINVAL,
       "tr_stage_open", "m") {
  tr_stage_config c = stage_config();
  tr_stage *st;
  return tr_stage_open(&st, NULL, device(), &c, msg, n);
}

MISUSE(stage_open_null_device, "tr_stage_open(&st, m, NULL, &c, err, n)", TR_EINVAL,
       "tr_stage_open", "d") {
  tr_stage_config c = stage_config();
  tr_stage *st;
  return tr_stage_open(&st, model(), NULL, &c, msg, n);
}

MISUSE(stage_open_null_config, "tr_stage_open(&st, m, dev, NULL, err, n)", TR_EINVAL,
       "tr_stage_open", "cfg") {
  tr_stage *st;
  return tr_stage_open(&st, model(), device(), NULL, msg, n);
}

MISUSE(stage_open_zero_batch, "tr_stage_open(&st, m, dev, {.batch = 0}, err, n)", TR_EINVAL,
       "batch", NULL) {
  tr_stage_config c = stage_config();
  c.batch = 0;
  tr_stage *st;
  return tr_stage_open(&st, model(), device(), &c, msg, n);
}

MISUSE(stage_open_backwards, "tr_stage_open(&st, m, dev, {.first = 2, .end = 1}, err, n)",
       TR_EINVAL, "layers [2,1)", NULL) {
  tr_stage_config c = stage_config();
  c.first = 2;
  c.end = 1;
  tr_stage *st;
  return tr_stage_open(&st, model(), device(), &c, msg, n);
}

MISUSE(stage_open_negative_slots, "tr_stage_open(&st, m, dev, {.slots = -1}, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_stage_config c = stage_config();
  c.slots = -1;
  tr_stage *st;
  return tr_stage_open(&st, model(), device(), &c, NULL, 0);
}

MISUSE(stage_open_bad_shard, "tr_stage_open(&st, m, dev, {.shard = {2, 5}}, err, n)", TR_EINVAL,
       "shard", NULL) {
  tr_stage_config c = stage_config();
  c.shard = (tr_stage_shard){.count = 2, .index = 5};
  tr_stage *st;
  return tr_stage_open(&st, model(), device(), &c, msg, n);
}

MISUSE(stage_close_null, "tr_stage_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_stage_close(NULL);
  return 0;
}

MISUSE(stage_plan_null, "tr_stage_plan(NULL, &c, &info, NULL, err, n)", TR_EINVAL,
       "tr_stage_plan", "m") {
  tr_stage_config c = stage_config();
  tr_stage_info info;
  return tr_stage_plan(NULL, &c, &info, NULL, msg, n);
}

MISUSE(stage_plan_null_info, "tr_stage_plan(m, &c, NULL, NULL, err, n)", TR_EINVAL,
       "tr_stage_plan", "info") {
  tr_stage_config c = stage_config();
  return tr_stage_plan(model(), &c, NULL, NULL, msg, n);
}

MISUSE(stage_forward_null, "tr_stage_forward(NULL, 0)", TR_EINVAL, "tr_stage_forward", "st") {
  return tr_stage_forward(NULL, 0);
}

MISUSE(stage_forward_slot, "tr_stage_forward(st, 5)", TR_EINVAL, "tr_stage_forward", "slot") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_forward(st, 5), tr_stage_error(st));
}

MISUSE(stage_forward_negative_slot, "tr_stage_forward(st, -1)", TR_EINVAL, "tr_stage_forward",
       "slot") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_forward(st, -1), tr_stage_error(st));
}

MISUSE(stage_backward_slot, "tr_stage_backward(st, 7, NULL)", TR_EINVAL, "tr_stage_backward",
       "slot") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_backward(st, 7, NULL), tr_stage_error(st));
}

MISUSE(stage_backward_null, "tr_stage_backward(NULL, 0, NULL)", TR_EINVAL, "tr_stage_backward",
       "st") {
  return tr_stage_backward(NULL, 0, NULL);
}

MISUSE(stage_backward_input_unsplit, "tr_stage_backward_input(st opened without split, 0, NULL)",
       TR_EINVAL, "tr_stage_backward_input", "split") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_backward_input(st, 0, NULL), tr_stage_error(st));
}

MISUSE(stage_backward_weight_slot, "tr_stage_backward_weight(st, 9)", TR_EINVAL,
       "tr_stage_backward_weight", NULL) {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_backward_weight(st, 9), tr_stage_error(st));
}

MISUSE(stage_step_null, "tr_stage_step(NULL, NULL)", TR_EINVAL, "tr_stage_step", "st") {
  return tr_stage_step(NULL, NULL);
}

MISUSE(stage_zero_grads_null, "tr_stage_zero_grads(NULL)", TR_EINVAL, "tr_stage_zero_grads",
       "st") {
  return tr_stage_zero_grads(NULL);
}

MISUSE(stage_sumsq_null_out, "tr_stage_grad_sumsq(st, NULL, 0)", TR_EINVAL, "tr_stage_grad_sumsq",
       "out") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_grad_sumsq(st, NULL, 0), tr_stage_error(st));
}

MISUSE(stage_scale_null, "tr_stage_scale_grads(st, NULL)", TR_EINVAL, "tr_stage_scale_grads",
       "factor") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_scale_grads(st, NULL), tr_stage_error(st));
}

MISUSE(stage_download_null, "tr_stage_download(st, TR_STAGE_PARAMS, NULL)", TR_EINVAL,
       "tr_stage_download", "host") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_download(st, TR_STAGE_PARAMS, NULL), tr_stage_error(st));
}

MISUSE(stage_download_bad_buffer, "tr_stage_download(st, 7, host)", TR_EINVAL,
       "tr_stage_download", "which") {
  tr_stage *st = stage();
  static float host[4096];
  return said(msg, n, tr_stage_download(st, (tr_stage_buffer)7, host), tr_stage_error(st));
}

MISUSE(stage_upload_null, "tr_stage_upload(NULL, TR_STAGE_PARAMS, host)", TR_EINVAL,
       "tr_stage_upload", "st") {
  static float host[4096];
  return tr_stage_upload(NULL, TR_STAGE_PARAMS, host);
}

MISUSE(stage_set_optim_null, "tr_stage_set_optim(st, NULL)", TR_EINVAL, "tr_stage_set_optim",
       "o") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_set_optim(st, NULL), tr_stage_error(st));
}

MISUSE(stage_share_null, "tr_stage_share_params(st, NULL)", TR_EINVAL, "tr_stage_share_params",
       "owner") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_share_params(st, NULL), tr_stage_error(st));
}

MISUSE(stage_sample_losses_null, "tr_stage_sample_losses(st, 0, NULL)", TR_EINVAL,
       "tr_stage_sample_losses", "out") {
  tr_stage *st = stage();
  return said(msg, n, tr_stage_sample_losses(st, 0, NULL), tr_stage_error(st));
}

MISUSE(stage_slot_getters, "tr_stage_input/_output/_target/_dout/_loss(st, 9)", MISUSE_DEFINED,
       NULL, NULL) {
  tr_stage *st = stage();
  return !tr_stage_input(st, 9) && !tr_stage_output(st, -1) && !tr_stage_target(st, 9) &&
                 !tr_stage_dout(st, 9) && !tr_stage_loss(st, 9)
             ? 0
             : 1;
}

MISUSE(stage_setters_out_of_range, "tr_stage_set_samples(st, 9, 0), tr_stage_layer_span(st, 99)",
       MISUSE_DEFINED, NULL, NULL) {
  tr_stage *st = stage();
  size_t off = 1, num = 1;
  tr_stage_set_samples(st, 9, 0);
  tr_stage_layer_span(st, 99, &off, &num);
  return !off && !num ? 0 : 1;
}

MISUSE(stage_null_getters, "tr_stage_error/_info_of/_params/...(NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  tr_stage_set_lr(NULL, 0.1f);
  tr_stage_set_training(NULL, 0);
  tr_stage_set_samples(NULL, 0, 0);
  tr_stage_set_step_count(NULL, 3);
  tr_stage_use_grads(NULL, NULL);
  tr_stage_on_grad_ready(NULL, NULL, NULL);
  tr_stage_graphs_fail_next(NULL);
  return tr_stage_error(NULL) && !tr_stage_info_of(NULL) && !tr_stage_model(NULL) &&
                 !tr_stage_device(NULL) && !tr_stage_stream(NULL) && !tr_stage_params(NULL) &&
                 !tr_stage_grads(NULL) && !tr_stage_opt_state(NULL) && !tr_stage_optim(NULL) &&
                 !tr_stage_step_count(NULL) && !tr_stage_input(NULL, 0)
             ? 0
             : 1;
}

MISUSE(stage_defaults_null, "tr_stage_defaults(NULL)", MISUSE_DEFINED, NULL, NULL) {
  const tr_stage_config c = tr_stage_defaults(NULL);
  return c.batch == 0 ? 0 : 1;
}

MISUSE(stage_shard_span_bad, "tr_stage_shard_span(100, {.count = 2, .index = 3}, &o, &k)",
       MISUSE_DEFINED, NULL, NULL) {
  size_t off = 1, k = 1;
  tr_stage_shard_span(100, (tr_stage_shard){.count = 2, .index = 3}, &off, &k);
  tr_stage_shard_span(100, (tr_stage_shard){.count = 2, .index = 0}, NULL, NULL);
  return k == 0 ? 0 : 1;
}
