/* test_cuda_devices.c — the device layer on CUDA GPUs: what a device reports, stream-ordered
 * memory, event ordering between streams, peer copies between two logical devices on one
 * GPU (cuda:0,cuda:0) driven from two threads, exact FP32 GEMM unless TF32 is asked for,
 * captures (CUDA graphs) that replay what they recorded and refuse what they cannot hold,
 * and failures that name the device, the CUDA call and file:line. Public API only.
 *
 * Exits 77 (skipped) when the machine has no GPU. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "op_harness.h"

static tr_device_list *open_ok(const char *spec) {
  tr_device_list *l = NULL;
  char err[256];
  int rc = tr_device_list_open(&l, spec, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  assert_non_null(l);
  return l;
}

#define OK(call) assert_int_equal((call), 0)

/* ---- what a device reports ------------------------------------------------------------ */

static void cuda_devices_report_model_memory_and_capability(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0,cuda:0");
  assert_int_equal(tr_device_list_count(l), 2);
  const tr_device_info *a = tr_device_info_of(tr_device_list_at(l, 0));
  const tr_device_info *b = tr_device_info_of(tr_device_list_at(l, 1));
  assert_string_equal(a->name, "cuda:0");
  assert_string_not_equal(b->name, a->name); /* two logical devices, two names */
  assert_int_equal(a->kind, TR_DEVICE_CUDA);
  assert_int_equal(a->ordinal, 0);
  assert_int_equal(b->ordinal, 0);
  assert_true(strlen(a->model) > 0);
  assert_true(a->cc_major >= 7 && a->multiprocessors > 0);
  assert_true(a->memory_total > 0 && a->memory_free <= a->memory_total);
  /* one GPU: each logical device reaches the other's memory directly */
  assert_int_equal(tr_device_can_access_peer(tr_device_list_at(l, 0), tr_device_list_at(l, 1)), 1);
  tr_device *d = tr_device_list_at(l, 0);
  OK(tr_device_update_memory(d));
  assert_true(tr_device_info_of(d)->memory_free > 0);
  tr_device_list_close(l);
  assert_true(tr_device_count(TR_DEVICE_CUDA) >= 1);
}

/* ---- memory --------------------------------------------------------------------------- */

static void stream_ordered_memory_is_reused_and_freed_at_close(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d), *b;
  const uint64_t free_at_open = tr_device_info_of(d)->memory_free;
  OK(tr_stream_open(d, "alloc", &b));
  enum { N = 1 << 22 };
  float *host = th_alloc_f(N);
  /* a block freed on a stream is handed to later work on it without any synchronisation:
   * 100 rounds of 16 MiB take no more memory than a few */
  for (int i = 0; i < 100; i++) {
    float *x;
    OK(tr_device_alloc(d, N * 4, (void **)&x));
    assert_true(((uintptr_t)x & 63) == 0);
    OK(tr_fill(s, x, N, (float)i));
    if (i == 99) {
      OK(tr_memcpy(s, host, x, N * 4, TR_COPY_D2H));
      OK(tr_stream_synchronize(s));
      for (int k = 0; k < N; k++) assert_true(host[k] == 99.0f);
    }
    OK(tr_device_free(d, x));
  }
  OK(tr_device_update_memory(d));
  assert_true(tr_device_info_of(d)->memory_free + (256u << 20) > free_at_open);
  /* the same on another stream of the device */
  float *y;
  OK(tr_stream_alloc(b, N * 4, (void **)&y));
  OK(tr_fill(b, y, N, 2.0f));
  OK(tr_memcpy(b, host, y, N * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(b));
  assert_true(host[0] == 2.0f && host[N - 1] == 2.0f);
  OK(tr_stream_free(b, y));
  /* freeing what this device never gave out fails, and says so */
  int bogus;
  assert_int_equal(tr_device_free(d, &bogus), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "cuda:0"));
  /* 2 GiB left allocated on purpose: closing the list gives it back to the GPU */
  float *leak;
  OK(tr_device_alloc(d, (size_t)2 << 30, (void **)&leak));
  OK(tr_fill(s, leak, 1024, 1.0f));
  tr_stream_close(b);
  free(host);
  tr_device_list_close(l);
  l = open_ok("cuda:0");
  assert_true(tr_device_info_of(tr_device_list_at(l, 0))->memory_free + (1u << 30) > free_at_open);
  tr_device_list_close(l);
}

static void pinned_host_memory_round_trips(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  enum { N = 4099 };
  float *h, *back, *x;
  OK(tr_host_alloc(d, N * 4, (void **)&h));
  OK(tr_host_alloc(d, N * 4, (void **)&back));
  OK(tr_device_alloc(d, N * 4, (void **)&x));
  for (int i = 0; i < N; i++) h[i] = (float)i - 7.5f;
  OK(tr_memcpy(s, x, h, N * 4, TR_COPY_H2D));
  OK(tr_memcpy(s, back, x, N * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_memory_equal(back, h, N * 4);
  OK(tr_memset(s, x, 0, N * 4));
  OK(tr_memcpy(s, back, x, N * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  for (int i = 0; i < N; i++) assert_true(back[i] == 0.0f);
  OK(tr_device_free(d, x));
  OK(tr_host_free(d, h));
  OK(tr_host_free(d, back));
  tr_device_list_close(l);
}

/* ---- ordering between streams ----------------------------------------------------------- */

/* Stream A does enough work that stream B, had it not waited, would read y before A wrote
 * it: x = 1, then y = x @ x (each element M) repeated, then the event. */
static void work_waiting_on_an_event_sees_the_recorded_work(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *a = tr_device_stream(d), *b;
  tr_event *e, *t0, *t1;
  enum { M = 1024 };
  float *x, *y, *z, *host = th_alloc_f(M * M);
  OK(tr_stream_open(d, "b", &b));
  OK(tr_event_open(d, TR_EVENT_DEFAULT, &e));
  OK(tr_event_open(d, TR_EVENT_TIMING, &t0));
  OK(tr_event_open(d, TR_EVENT_TIMING, &t1));
  assert_int_equal(tr_event_query(e), 1); /* never recorded: complete */
  OK(tr_device_alloc(d, M * M * 4, (void **)&x));
  OK(tr_device_alloc(d, M * M * 4, (void **)&y));
  OK(tr_device_alloc(d, M * M * 4, (void **)&z));
  OK(tr_memset(a, y, 0, M * M * 4));
  OK(tr_fill(a, x, M * M, 1.0f));
  OK(tr_event_record(t0, a));
  for (int i = 0; i < 50; i++) OK(tr_gemm(a, TR_OP_N, TR_OP_N, M, M, M, 1, x, M, x, M, 0, y, M));
  OK(tr_event_record(t1, a));
  OK(tr_event_record(e, a));
  OK(tr_stream_wait_event(b, e));
  OK(tr_memcpy(b, z, y, M * M * 4, TR_COPY_D2D));
  OK(tr_memcpy(b, host, z, M * M * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(b));
  for (int i = 0; i < M * M; i++) assert_true(host[i] == (float)M);
  assert_int_equal(tr_event_query(e), 1);
  OK(tr_event_synchronize(e));
  float ms = -1;
  OK(tr_event_elapsed_ms(t0, t1, &ms));
  assert_true(ms > 0.0f && ms < 60000.0f);
  tr_event_close(e), tr_event_close(t0), tr_event_close(t1);
  tr_stream_close(b);
  tr_device_free(d, x), tr_device_free(d, y), tr_device_free(d, z);
  free(host);
  tr_device_list_close(l);
}

/* GEMMs on four streams at once (each stream has its own cuBLAS handle and workspace) give
 * what the same GEMM gives alone. */
static void gemms_on_several_streams_at_once_agree(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  enum { M = 512, S = 4 };
  tr_stream *st[S];
  float *a, *c[S], *host = th_alloc_f(M * M), *want = th_alloc_f(M * M);
  OK(tr_device_alloc(d, M * M * 4, (void **)&a));
  OK(tr_init_normal(tr_device_stream(d), a, M * M, 0, 1, 42, 0));
  tr_event *ready;
  OK(tr_event_open(d, TR_EVENT_DEFAULT, &ready));
  OK(tr_event_record(ready, tr_device_stream(d)));
  for (int i = 0; i < S; i++) {
    char name[16];
    snprintf(name, sizeof name, "gemm%d", i);
    OK(tr_stream_open(d, name, &st[i]));
    OK(tr_stream_alloc(st[i], M * M * 4, (void **)&c[i]));
    OK(tr_stream_wait_event(st[i], ready));
    for (int k = 0; k < 5; k++)
      OK(tr_gemm(st[i], TR_OP_N, TR_OP_T, M, M, M, 1, a, M, a, M, 0, c[i], M));
  }
  for (int i = 0; i < S; i++) {
    OK(tr_memcpy(st[i], i ? host : want, c[i], M * M * 4, TR_COPY_D2H));
    OK(tr_stream_synchronize(st[i]));
    if (i) assert_memory_equal(host, want, M * M * 4);
    OK(tr_stream_free(st[i], c[i]));
    tr_stream_close(st[i]);
  }
  tr_event_close(ready);
  OK(tr_device_free(d, a));
  free(host), free(want);
  tr_device_list_close(l);
}

/* ---- two logical devices on one GPU, two threads ---------------------------------------- */

static void peer_copy_between_logical_devices_after_an_event(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0,cuda:0");
  tr_device *src = tr_device_list_at(l, 0), *dst = tr_device_list_at(l, 1);
  size_t n = (1 << 22) + 3;
  /* 200 scalings keep the producer busy long enough that a copy not ordered by the event
   * would read unfinished data */
  assert_true(th_peer_copy_two_threads(src, dst, n, 200));
  /* and back, issued on the source's stream this time */
  float *src_buf, *dst_buf, *host = th_alloc_f(n);
  tr_stream *s = tr_device_stream(src);
  OK(tr_device_alloc(src, n * 4, (void **)&src_buf));
  OK(tr_device_alloc(dst, n * 4, (void **)&dst_buf));
  OK(tr_fill(tr_device_stream(dst), dst_buf, n, 3.0f));
  tr_event *e;
  OK(tr_event_open(dst, TR_EVENT_DEFAULT, &e));
  OK(tr_event_record(e, tr_device_stream(dst)));
  OK(tr_stream_wait_event(s, e));
  OK(tr_memcpy_peer(s, src_buf, src, dst_buf, dst, n * 4));
  OK(tr_memcpy(s, host, src_buf, n * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(host[0] == 3.0f && host[n - 1] == 3.0f);
  free(host);
  tr_event_close(e);
  tr_device_free(src, src_buf);
  tr_device_free(dst, dst_buf);
  tr_device_list_close(l);
}

/* Every GPU of the machine, one list: peer copies between each pair (direct where the
 * topology allows it, staged by the driver otherwise). */
static void peer_copies_between_every_pair_of_gpus(void **state) {
  (void)state;
  int n = tr_device_count(TR_DEVICE_CUDA);
  if (n < 2) {
    fprintf(stderr, "(one GPU: the pairs are logical devices, tested above)\n");
    return;
  }
  char spec[256] = "cuda:";
  for (int i = 0; i < n && i < 16; i++)
    snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%d", i ? "," : "", i);
  tr_device_list *l = open_ok(spec);
  n = tr_device_list_count(l);
  enum { N = 1 << 20 };
  float *buf[16], *host = th_alloc_f(N);
  for (int i = 0; i < n; i++) {
    tr_device *d = tr_device_list_at(l, i);
    OK(tr_device_alloc(d, N * 4, (void **)&buf[i]));
    OK(tr_fill(tr_device_stream(d), buf[i], N, (float)i));
    OK(tr_stream_synchronize(tr_device_stream(d)));
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      tr_device *src = tr_device_list_at(l, i), *dst = tr_device_list_at(l, j);
      tr_stream *s = tr_device_stream(dst);
      OK(tr_memcpy_peer(s, buf[j], dst, buf[i], src, N * 4));
      OK(tr_memcpy(s, host, buf[j], N * 4, TR_COPY_D2H));
      OK(tr_stream_synchronize(s));
      assert_true(host[0] == (float)i && host[N - 1] == (float)i);
      OK(tr_fill(s, buf[j], N, (float)j));
      OK(tr_stream_synchronize(s));
    }
  for (int i = 0; i < n; i++) OK(tr_device_free(tr_device_list_at(l, i), buf[i]));
  free(host);
  tr_device_list_close(l);
}

/* ---- precision -------------------------------------------------------------------------- */

/* 1 + 2^-20 needs more than TF32's 10 mantissa bits: exact FP32 keeps it. With K = 8 and
 * B = 1/8 every partial sum is representable, so any summation order gives it exactly. */
static void gemm_is_exact_fp32_unless_tf32_is_asked_for(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  enum { M = 256, K = 8 };
  float *a, *b, *c, *host = th_alloc_f(M * M);
  OK(tr_device_alloc(d, M * K * 4, (void **)&a));
  OK(tr_device_alloc(d, K * M * 4, (void **)&b));
  OK(tr_device_alloc(d, M * M * 4, (void **)&c));
  OK(tr_fill(s, a, M * K, 1.0f + 0x1p-20f));
  OK(tr_fill(s, b, K * M, 1.0f / K));
  OK(tr_gemm(s, TR_OP_N, TR_OP_N, M, M, K, 1, a, K, b, M, 0, c, M));
  OK(tr_memcpy(s, host, c, M * M * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  for (int i = 0; i < M * M; i++) assert_true(host[i] == 1.0f + 0x1p-20f);
  /* TF32 may round the inputs; it must still compute a product close to the exact one */
  OK(tr_device_set_tf32(d, 1));
  OK(tr_gemm(s, TR_OP_N, TR_OP_N, M, M, K, 1, a, K, b, M, 0, c, M));
  OK(tr_memcpy(s, host, c, M * M * 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(fabsf(host[0] - 1.0f) < 1e-3f);
  OK(tr_device_set_tf32(d, 0));
  tr_device_free(d, a), tr_device_free(d, b), tr_device_free(d, c);
  free(host);
  tr_device_list_close(l);
}

/* ---- captures (CUDA graphs) ------------------------------------------------------------------ */

/* Ops recorded between tr_capture_begin and tr_capture_end do not run then; each launch of
 * the capture runs them once, as eager ops would. What a recording cannot hold (an
 * allocation, an event) is refused while it records, and a dropped recording leaves the
 * stream as it was. */
static void captures_replay_what_they_recorded_and_refuse_what_they_cannot_hold(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  enum { N = 4096 };
  float *x, *sum, host[2];
  assert_int_equal(tr_device_can_capture(d), 1);
  OK(tr_device_alloc(d, N * 4, (void **)&x));
  OK(tr_device_alloc(d, 64, (void **)&sum));
  OK(tr_fill(s, x, N, 1.0f));
  OK(tr_sum(s, sum, x, N, 0)); /* eagerly once: the reduction's scratch is there */
  tr_capture *g = NULL;
  OK(tr_capture_begin(s));
  OK(tr_scale(s, x, 2.0f, N));
  OK(tr_sum(s, sum, x, N, 0));
  OK(tr_capture_end(s, &g));
  assert_non_null(g);
  OK(tr_memcpy(s, host, x, 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(host[0] == 1.0f); /* recorded, not run */
  for (int i = 0; i < 3; i++) OK(tr_capture_launch(g, s));
  OK(tr_memcpy(s, host, x, 4, TR_COPY_D2H));
  OK(tr_memcpy(s, host + 1, sum, 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(host[0] == 8.0f);
  assert_true(host[1] == 8.0f * N);
  /* refused while recording, then dropped */
  tr_event *e;
  void *p;
  OK(tr_event_open(d, TR_EVENT_DEFAULT, &e));
  OK(tr_capture_begin(s));
  assert_int_equal(tr_capture_begin(s), TR_ESTATE);
  assert_int_equal(tr_device_alloc(d, 256, &p), TR_ESTATE);
  assert_non_null(strstr(tr_device_error(d), "captures"));
  assert_int_equal(tr_event_record(e, s), TR_ESTATE);
  assert_int_equal(tr_capture_launch(g, s), TR_ESTATE);
  OK(tr_scale(s, x, 0.0f, N));
  OK(tr_capture_end(s, NULL));
  assert_int_equal(tr_capture_end(s, NULL), TR_ESTATE); /* nothing records any more */
  OK(tr_event_record(e, s));
  OK(tr_event_synchronize(e));
  OK(tr_memcpy(s, host, x, 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(host[0] == 8.0f); /* the dropped scale never ran */
  tr_event_close(e);
  tr_capture_close(g);
  tr_capture_close(NULL);
  OK(tr_device_free(d, x));
  OK(tr_device_free(d, sum));
  tr_device_list_close(l);
}

/* ---- failures ------------------------------------------------------------------------------ */

/* A failing CUDA call reports the device, the call, CUDA's words and file:line, and leaves
 * the device usable (these failures are not sticky). */
static void failures_name_the_device_the_call_and_the_line(void **state) {
  (void)state;
  tr_device_list *l = open_ok("cuda:0,cuda:0");
  tr_device *d = tr_device_list_at(l, 1);
  void *p = NULL;
  int rc = tr_device_alloc(d, (size_t)1 << 55, &p); /* 32 PiB */
  assert_true(rc == TR_ENOMEM || rc == TR_EDEVICE);
  const char *msg = tr_device_error(d);
  fprintf(stderr, "(expected) %s\n", msg);
  assert_non_null(strstr(msg, tr_device_name(d)));
  assert_non_null(strstr(msg, "cudaMallocFromPoolAsync"));
  assert_non_null(strstr(msg, "gpu/cuda/cuda_backend.cu:"));
  rc = tr_host_alloc(d, (size_t)1 << 55, &p);
  assert_true(rc == TR_ENOMEM || rc == TR_EDEVICE);
  assert_non_null(strstr(tr_device_error(d), "cudaHostAlloc"));
  /* still works */
  float *x, y = 0;
  tr_stream *s = tr_device_stream(d);
  OK(tr_device_alloc(d, 4096, (void **)&x));
  OK(tr_fill(s, x, 1024, 5.0f));
  OK(tr_sum(s, x + 1023, x, 1023, 0));
  OK(tr_memcpy(s, &y, x + 1023, 4, TR_COPY_D2H));
  OK(tr_stream_synchronize(s));
  assert_true(y == 5115.0f);
  OK(tr_device_free(d, x));
  tr_device_list_close(l);
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_devices: no GPU on this machine: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cuda_devices_report_model_memory_and_capability),
      cmocka_unit_test(stream_ordered_memory_is_reused_and_freed_at_close),
      cmocka_unit_test(pinned_host_memory_round_trips),
      cmocka_unit_test(work_waiting_on_an_event_sees_the_recorded_work),
      cmocka_unit_test(gemms_on_several_streams_at_once_agree),
      cmocka_unit_test(peer_copy_between_logical_devices_after_an_event),
      cmocka_unit_test(peer_copies_between_every_pair_of_gpus),
      cmocka_unit_test(gemm_is_exact_fp32_unless_tf32_is_asked_for),
      cmocka_unit_test(captures_replay_what_they_recorded_and_refuse_what_they_cannot_hold),
      cmocka_unit_test(failures_name_the_device_the_call_and_the_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
