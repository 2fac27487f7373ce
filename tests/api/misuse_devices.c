/* misuse_devices.c — hostile calls to the device layer (misuse.h): lists, devices, memory,
 * streams, events, captures, copies, ops, layers of device ops and collectives. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "misuse.h"

/* What a call on a device said: its return status, with tr_device_error in msg. */
#define ON_DEVICE(call) said(msg, n, (call), tr_device_error(device()))

/* ---- lists ---------------------------------------------------------------------------------- */

MISUSE(list_open_null_out, "tr_device_list_open(NULL, \"host:1\", err, n)", TR_EINVAL,
       "tr_device_list_open", "out") {
  return tr_device_list_open(NULL, "host:1", msg, n);
}

MISUSE(list_open_null_spec, "tr_device_list_open(&l, NULL, err, n)", TR_EINVAL, "device spec",
       NULL) {
  tr_device_list *l;
  return tr_device_list_open(&l, NULL, msg, n);
}

MISUSE(list_open_zero_no_err, "tr_device_list_open(&l, \"host:0\", NULL, 0)", TR_EINVAL, NULL,
       NULL) {
  tr_device_list *l;
  return tr_device_list_open(&l, "host:0", NULL, 0);
}

MISUSE(list_open_too_many, "tr_device_list_open(&l, \"host:99999\", err, n)", TR_EINVAL,
       "host:99999", NULL) {
  tr_device_list *l;
  return tr_device_list_open(&l, "host:99999", msg, n);
}

MISUSE(list_open_garbage, "tr_device_list_open(&l, \"cuda:x,\", err, n)", TR_EINVAL, "cuda:x",
       NULL) {
  tr_device_list *l;
  return tr_device_list_open(&l, "cuda:x,", msg, n);
}

MISUSE(list_close_null, "tr_device_list_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_device_list_close(NULL);
  return 0;
}

MISUSE(list_at_out_of_range, "tr_device_list_at(l, 5), (l, -1), (NULL, 0)", MISUSE_DEFINED, NULL,
       NULL) {
  return !tr_device_list_at(devices(), 5) && !tr_device_list_at(devices(), -1) &&
                 !tr_device_list_at(NULL, 0) && tr_device_list_count(NULL) == 0
             ? 0
             : 1;
}

MISUSE(list_open_empty_null, "tr_device_list_open_empty(NULL)", TR_EINVAL,
       "tr_device_list_open_empty", "out") {
  return tr_device_list_open_empty(NULL);
}

MISUSE(placeholder_out_of_range, "tr_device_list_add_placeholder(l, 5, &info)", TR_EINVAL,
       "tr_device_list_add_placeholder", "at") {
  tr_device_list *l;
  if (tr_device_list_open_empty(&l)) return 1;
  return tr_device_list_add_placeholder(l, 5, tr_device_info_of(device()));
}

MISUSE(placeholder_null_info, "tr_device_list_add_placeholder(l, 0, NULL)", TR_EINVAL,
       "tr_device_list_add_placeholder", "info") {
  tr_device_list *l;
  if (tr_device_list_open_empty(&l)) return 1;
  return tr_device_list_add_placeholder(l, 0, NULL);
}

MISUSE(placeholder_null_list, "tr_device_list_add_placeholder(NULL, 0, &info)", TR_EINVAL,
       "tr_device_list_add_placeholder", "list") {
  return tr_device_list_add_placeholder(NULL, 0, tr_device_info_of(device()));
}

MISUSE(placeholder_run, "tr_device_alloc(placeholder, 64, &p)", TR_EINVAL, "tr_device_alloc",
       "placeholder") {
  tr_device_list *l;
  if (tr_device_list_open_empty(&l) ||
      tr_device_list_add_placeholder(l, 0, tr_device_info_of(device())))
    return 1;
  void *p;
  tr_device *d = tr_device_list_at(l, 0);
  return said(msg, n, tr_device_alloc(d, 64, &p), tr_device_error(d));
}

MISUSE(device_getters_null, "tr_device_name/_info_of/_error/_stream(NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  return tr_device_name(NULL) && !tr_device_info_of(NULL) && tr_device_error(NULL) &&
                 !tr_device_stream(NULL) && !tr_stream_device(NULL) &&
                 !tr_device_is_placeholder(NULL) && !tr_device_can_capture(NULL) &&
                 !tr_device_can_access_peer(NULL, device()) &&
                 !tr_device_same_gpu(NULL, tr_device_info_of(device()))
             ? 0
             : 1;
}

MISUSE(device_count_bad_kind, "tr_device_count(99), tr_device_kind_name(99)", MISUSE_DEFINED, NULL,
       NULL) {
  return tr_device_count((tr_device_kind)99) == 0 && tr_device_kind_name((tr_device_kind)99) ? 0 : 1;
}

MISUSE(device_bind_null, "tr_device_bind(NULL)", TR_EINVAL, "tr_device_bind", "d") {
  return tr_device_bind(NULL);
}

MISUSE(device_update_memory_null, "tr_device_update_memory(NULL)", TR_EINVAL,
       "tr_device_update_memory", "d") {
  return tr_device_update_memory(NULL);
}

MISUSE(device_tf32_null, "tr_device_set_tf32(NULL, 1)", TR_EINVAL, "tr_device_set_tf32", "d") {
  return tr_device_set_tf32(NULL, 1);
}

/* ---- memory --------------------------------------------------------------------------------- */

MISUSE(alloc_null_device, "tr_device_alloc(NULL, 64, &p)", TR_EINVAL, "tr_device_alloc", "d") {
  void *p;
  return tr_device_alloc(NULL, 64, &p);
}

MISUSE(alloc_null_out, "tr_device_alloc(d, 64, NULL)", TR_EINVAL, "tr_device_alloc", "out") {
  return ON_DEVICE(tr_device_alloc(device(), 64, NULL));
}

MISUSE(alloc_huge, "tr_device_alloc(d, SIZE_MAX, &p)", MISUSE_REFUSED, "host:0", NULL) {
  void *p;
  return ON_DEVICE(tr_device_alloc(device(), SIZE_MAX, &p));
}

MISUSE(free_null_pointer, "tr_device_free(d, NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_device_free(device(), NULL) == 0 ? 0 : 1;
}

MISUSE(free_null_device, "tr_device_free(NULL, p)", TR_EINVAL, "tr_device_free", "d") {
  return tr_device_free(NULL, device_floats(4));
}

MISUSE(host_alloc_null_device, "tr_host_alloc(NULL, 64, &p)", TR_EINVAL, "tr_host_alloc", "d") {
  void *p;
  return tr_host_alloc(NULL, 64, &p);
}

MISUSE(host_alloc_null_out, "tr_host_alloc(d, 64, NULL)", TR_EINVAL, "tr_host_alloc", "out") {
  return ON_DEVICE(tr_host_alloc(device(), 64, NULL));
}

MISUSE(host_free_null, "tr_host_free(d, NULL), tr_host_free(NULL, NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  return tr_host_free(device(), NULL) == 0 && tr_host_free(NULL, NULL) <= 0 ? 0 : 1;
}

MISUSE(stream_alloc_null, "tr_stream_alloc(NULL, 64, &p)", TR_EINVAL, "tr_stream_alloc", "s") {
  void *p;
  return tr_stream_alloc(NULL, 64, &p);
}

/* ---- streams, events, captures ---------------------------------------------------------------- */

MISUSE(stream_open_null_device, "tr_stream_open(NULL, \"x\", &s)", TR_EINVAL, "tr_stream_open",
       "d") {
  tr_stream *s;
  return tr_stream_open(NULL, "x", &s);
}

MISUSE(stream_open_null_out, "tr_stream_open(d, \"x\", NULL)", TR_EINVAL, "tr_stream_open",
       "out") {
  return ON_DEVICE(tr_stream_open(device(), "x", NULL));
}

MISUSE(stream_close_null, "tr_stream_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_stream_close(NULL);
  return 0;
}

MISUSE(stream_close_compute, "tr_stream_close(the device's compute stream)", MISUSE_DEFINED,
       "tr_stream_close", "compute stream") {
  tr_stream_close(stream());
  return tr_fill(stream(), device_floats(4), 4, 1.0f) == 0 ? 0 : 1; /* still usable */
}

MISUSE(stream_sync_null, "tr_stream_synchronize(NULL)", TR_EINVAL, "tr_stream_synchronize", "s") {
  return tr_stream_synchronize(NULL);
}

MISUSE(event_open_null_device, "tr_event_open(NULL, 0, &e)", TR_EINVAL, "tr_event_open", "d") {
  tr_event *e;
  return tr_event_open(NULL, 0, &e);
}

MISUSE(event_open_null_out, "tr_event_open(d, 0, NULL)", TR_EINVAL, "tr_event_open", "out") {
  return ON_DEVICE(tr_event_open(device(), 0, NULL));
}

MISUSE(event_close_null, "tr_event_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_event_close(NULL);
  return 0;
}

MISUSE(event_record_null, "tr_event_record(NULL, s)", TR_EINVAL, "tr_event_record", "e") {
  return ON_DEVICE(tr_event_record(NULL, stream()));
}

MISUSE(event_record_null_stream, "tr_event_record(e, NULL)", TR_EINVAL, "tr_event_record", "s") {
  tr_event *e;
  if (tr_event_open(device(), 0, &e)) return 1;
  return tr_event_record(e, NULL);
}

MISUSE(event_record_other_device, "tr_event_record(e of host:0, stream of host:1)", TR_EINVAL,
       "tr_event_record", "device") {
  tr_event *e;
  if (tr_event_open(device(), 0, &e)) return 1;
  tr_device *other = tr_device_list_at(devices(), 1);
  return said(msg, n, tr_event_record(e, tr_device_stream(other)), tr_device_error(other));
}

MISUSE(event_query_null, "tr_event_query(NULL)", TR_EINVAL, "tr_event_query", "e") {
  return tr_event_query(NULL);
}

MISUSE(event_sync_null, "tr_event_synchronize(NULL)", TR_EINVAL, "tr_event_synchronize", "e") {
  return tr_event_synchronize(NULL);
}

MISUSE(stream_wait_null, "tr_stream_wait_event(s, NULL)", TR_EINVAL, "tr_stream_wait_event",
       "e") {
  return ON_DEVICE(tr_stream_wait_event(stream(), NULL));
}

MISUSE(elapsed_null, "tr_event_elapsed_ms(NULL, NULL, &ms)", TR_EINVAL, "tr_event_elapsed_ms",
       "start") {
  float ms;
  return tr_event_elapsed_ms(NULL, NULL, &ms);
}

MISUSE(elapsed_null_ms, "tr_event_elapsed_ms(e, e, NULL)", TR_EINVAL, "tr_event_elapsed_ms",
       "ms") {
  tr_event *e;
  if (tr_event_open(device(), TR_EVENT_TIMING, &e)) return 1;
  return ON_DEVICE(tr_event_elapsed_ms(e, e, NULL));
}

MISUSE(capture_begin_null, "tr_capture_begin(NULL)", TR_EINVAL, "tr_capture_begin", "s") {
  return tr_capture_begin(NULL);
}

MISUSE(capture_end_not_capturing, "tr_capture_end(s, &g) with no capture", MISUSE_REFUSED,
       "tr_capture_end", NULL) {
  tr_capture *g;
  return ON_DEVICE(tr_capture_end(stream(), &g));
}

MISUSE(capture_launch_null, "tr_capture_launch(NULL, s)", TR_EINVAL, "tr_capture_launch", "g") {
  return ON_DEVICE(tr_capture_launch(NULL, stream()));
}

MISUSE(capture_close_null, "tr_capture_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_capture_close(NULL);
  return 0;
}

/* ---- copies ----------------------------------------------------------------------------------- */

MISUSE(memcpy_null_stream, "tr_memcpy(NULL, dst, src, 4, H2D)", TR_EINVAL, "tr_memcpy", "s") {
  float x = 1, y;
  return tr_memcpy(NULL, &y, &x, 4, TR_COPY_H2D);
}

MISUSE(memcpy_null_dst, "tr_memcpy(s, NULL, src, 4, H2D)", TR_EINVAL, "tr_memcpy", "dst") {
  float x = 1;
  return ON_DEVICE(tr_memcpy(stream(), NULL, &x, 4, TR_COPY_H2D));
}

MISUSE(memcpy_bad_kind, "tr_memcpy(s, dst, src, 4, 99)", TR_EINVAL, "tr_memcpy", "kind") {
  float x = 1;
  return ON_DEVICE(tr_memcpy(stream(), device_floats(1), &x, 4, (tr_copy_kind)99));
}

MISUSE(memcpy_peer_null_device, "tr_memcpy_peer(s, dst, NULL, src, d, 4)", TR_EINVAL,
       "tr_memcpy_peer", "dst_dev") {
  float *p = device_floats(2);
  return ON_DEVICE(tr_memcpy_peer(stream(), p, NULL, p + 1, device(), 4));
}

MISUSE(memcpy_peer_foreign_stream, "tr_memcpy_peer(stream of neither device, ...)", TR_EINVAL,
       "tr_memcpy_peer", "s") {
  float *p = device_floats(2);
  tr_device *other = tr_device_list_at(devices(), 1);
  return said(msg, n, tr_memcpy_peer(tr_device_stream(other), p, device(), p + 1, device(), 4),
              tr_device_error(other));
}

MISUSE(memset_null, "tr_memset(s, NULL, 0, 16)", TR_EINVAL, "tr_memset", "dst") {
  return ON_DEVICE(tr_memset(stream(), NULL, 0, 16));
}

/* ---- ops ---------------------------------------------------------------------------------------- */

MISUSE(gemm_null_stream, "tr_gemm(NULL, N, N, 2, 2, 2, ...)", TR_EINVAL, "tr_gemm", "s") {
  float a[4] = {0}, b[4] = {0}, c[4];
  return tr_gemm(NULL, TR_OP_N, TR_OP_N, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
}

MISUSE(gemm_negative_size, "tr_gemm(s, N, N, -1, 2, 2, ...)", TR_EINVAL, "tr_gemm", "M") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_gemm(stream(), TR_OP_N, TR_OP_N, -1, 2, 2, 1, p, 2, p, 2, 0, p + 8, 2));
}

MISUSE(gemm_null_a, "tr_gemm(s, N, N, 2, 2, 2, 1, NULL, ...)", TR_EINVAL, "tr_gemm", "A") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_gemm(stream(), TR_OP_N, TR_OP_N, 2, 2, 2, 1, NULL, 2, p, 2, 0, p + 8, 2));
}

MISUSE(gemm_small_lda, "tr_gemm(s, N, N, 2, 2, 4, ..., lda 1, ...)", TR_EINVAL, "tr_gemm", "lda") {
  float *p = device_floats(32);
  return ON_DEVICE(tr_gemm(stream(), TR_OP_N, TR_OP_N, 2, 2, 4, 1, p, 1, p, 2, 0, p + 16, 2));
}

MISUSE(gemm_bad_op, "tr_gemm(s, 7, N, ...)", TR_EINVAL, "tr_gemm", "TR_OP") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_gemm(stream(), (tr_op)7, TR_OP_N, 2, 2, 2, 1, p, 2, p, 2, 0, p + 8, 2));
}

MISUSE(gemm_batched_negative, "tr_gemm_batched(s, ..., batch -1)", TR_EINVAL, "tr_gemm_batched",
       "batch") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_gemm_batched(stream(), TR_OP_N, TR_OP_N, 2, 2, 2, 1, p, 2, 4, p, 2, 4, 0,
                                   p + 8, 2, 4, -1));
}

MISUSE(fill_null_stream, "tr_fill(NULL, x, 4, 1)", TR_EINVAL, "tr_fill", "s") {
  float x[4];
  return tr_fill(NULL, x, 4, 1.0f);
}

MISUSE(fill_null_x, "tr_fill(s, NULL, 4, 1)", TR_EINVAL, "tr_fill", "x") {
  return ON_DEVICE(tr_fill(stream(), NULL, 4, 1.0f));
}

MISUSE(relu_null_out, "tr_relu_forward(s, NULL, x, 4)", TR_EINVAL, "tr_relu_forward", "out") {
  return ON_DEVICE(tr_relu_forward(stream(), NULL, device_floats(4), 4));
}

MISUSE(add_null_b, "tr_add(s, out, a, NULL, 4)", TR_EINVAL, "tr_add", "b") {
  float *p = device_floats(8);
  return ON_DEVICE(tr_add(stream(), p, p + 4, NULL, 4));
}

MISUSE(sumsq_null_out, "tr_sumsq(s, NULL, x, 4, 0)", TR_EINVAL, "tr_sumsq", "out") {
  return ON_DEVICE(tr_sumsq(stream(), NULL, device_floats(4), 4, 0));
}

MISUSE(softmax_null_inp, "tr_softmax_forward(s, out, NULL, 2, 2)", TR_EINVAL,
       "tr_softmax_forward", "inp") {
  return ON_DEVICE(tr_softmax_forward(stream(), device_floats(4), NULL, 2, 2));
}

MISUSE(layernorm_null_inp, "tr_layernorm_forward(s, out, mean, rstd, NULL, w, b, 2, 2, eps)",
       TR_EINVAL, "tr_layernorm_forward", "inp") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_layernorm_forward(stream(), p, p + 4, p + 6, NULL, p + 8, p + 10, 2, 2, 1e-5f));
}

MISUSE(crossentropy_null_targets, "tr_crossentropy_forward(s, loss, probs, logits, NULL, ...)",
       TR_EINVAL, "tr_crossentropy_forward", "targets") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_crossentropy_forward(stream(), p, p + 4, p + 8, NULL, 2, 2, 0.5f));
}

MISUSE(mse_null_target, "tr_mse_forward(s, loss, pred, NULL, 4, 0.25)", TR_EINVAL,
       "tr_mse_forward", "target") {
  float *p = device_floats(8);
  return ON_DEVICE(tr_mse_forward(stream(), p, p + 4, NULL, 4, 0.25f));
}

MISUSE(sgd_null_param, "tr_sgd_update(s, NULL, grad, 4, 0.1, 0)", TR_EINVAL, "tr_sgd_update",
       "param") {
  return ON_DEVICE(tr_sgd_update(stream(), NULL, device_floats(4), 4, 0.1f, 0));
}

MISUSE(adamw_null_m, "tr_adamw_update(s, p, g, NULL, v, ...)", TR_EINVAL, "tr_adamw_update", "m") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_adamw_update(stream(), p, p + 4, NULL, p + 8, 4, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                   0, 1));
}

MISUSE(to_bf16_null, "tr_to_bf16(s, NULL, x, 4)", TR_EINVAL, "tr_to_bf16", "out") {
  return ON_DEVICE(tr_to_bf16(stream(), NULL, device_floats(4), 4));
}

/* the layers of tr_layers.h are ops in sequence: the op given the NULL names it */
MISUSE(linear_null_weight, "tr_linear_forward(s, out, inp, NULL, NULL, 2, 2, 2, NULL)", TR_EINVAL,
       "tr_gemm", "B is NULL") {
  float *p = device_floats(16);
  return ON_DEVICE(tr_linear_forward(stream(), p, p + 4, NULL, NULL, 2, 2, 2, NULL));
}

MISUSE(linear_null_stream, "tr_linear_forward(NULL, ...)", TR_EINVAL, "tr_gemm", "s is NULL") {
  float p[16] = {0};
  return tr_linear_forward(NULL, p, p + 4, p + 8, NULL, 2, 2, 2, NULL);
}

MISUSE(synth_fill_null, "tr_synth_fill(s, NULL, 0, 1, x, y)", TR_EINVAL, "tr_synth_fill", "src") {
  float *p = device_floats(8);
  return ON_DEVICE(tr_synth_fill(stream(), NULL, 0, 1, p, p + 4));
}

MISUSE(precision_parse_null, "tr_precision_parse(NULL, &p)", TR_EINVAL, NULL, NULL) {
  tr_precision p;
  return tr_precision_parse(NULL, &p);
}

/* ---- collectives ------------------------------------------------------------------------------ */

MISUSE(comm_open_all_null, "tr_comm_open_all(NULL, 2, comms, err, n)", MISUSE_REFUSED,
       "tr_comm_open_all", NULL) {
  tr_comm *comms[2];
  return tr_comm_open_all(NULL, 2, comms, msg, n);
}

MISUSE(comm_id_init_null, "tr_comm_id_init(CUDA, NULL, err, n)", MISUSE_REFUSED, NULL, NULL) {
  return tr_comm_id_init(TR_DEVICE_CUDA, NULL, msg, n);
}

MISUSE(comm_close_null, "tr_comm_close(NULL), tr_comm_abort(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_comm_close(NULL);
  tr_comm_abort(NULL);
  return 0;
}

MISUSE(comm_allreduce_null, "tr_comm_allreduce(NULL, s, x, x, 4)", TR_EINVAL, "tr_comm_allreduce",
       "c") {
  float *p = device_floats(4);
  return tr_comm_allreduce(NULL, stream(), p, p, 4);
}

MISUSE(comm_getters_null, "tr_comm_rank/_count/_device(NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_comm_rank(NULL) <= 0 && tr_comm_count(NULL) == 0 && !tr_comm_device(NULL) ? 0 : 1;
}
