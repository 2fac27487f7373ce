/* test_devices.c — the device layer around the ops: device specs and their errors, memory,
 * copies (peer ones between logical devices), stream and event ordering, the owner-thread
 * rule, and initialisation that does not depend on how many devices or threads run it.
 * Written against the public API only, on host devices. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>

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

/* ---- specs ------------------------------------------------------------------------------ */

static void host_spec_opens_n_devices_named_in_order(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:3");
  assert_int_equal(tr_device_list_count(l), 3);
  for (int i = 0; i < 3; i++) {
    const tr_device_info *in = tr_device_info_of(tr_device_list_at(l, i));
    char name[16];
    snprintf(name, sizeof name, "host:%d", i);
    assert_string_equal(in->name, name);
    assert_int_equal(in->kind, TR_DEVICE_HOST);
    assert_int_equal(in->index, i);
    assert_true(in->memory_total > 0 && in->memory_free <= in->memory_total);
    assert_true(strlen(in->model) > 0);
  }
  tr_device_list_close(l);
  assert_true(tr_device_count(TR_DEVICE_HOST) >= 1);
  assert_string_equal(tr_device_kind_name(TR_DEVICE_CUDA), "cuda");
}

static void bad_specs_are_rejected_naming_the_bad_part(void **state) {
  (void)state;
  static const char *cases[][3] = {
      /* spec, what the message must contain, and a second part */
      {"host:0", "'host:0'", "from 1 to 256"},
      {"host:x", "'host:x'", "'x' is not a whole number"},
      {"host:", "'host:'", "is not a whole number"},
      {"host:257", "'host:257'", "from 1 to 256"},
      {"host:-1", "'host:-1'", "not a whole number"},
      {"cuda:7", "'cuda:7'", "cuda"},
      {"gpu:0", "'gpu:0'", "unknown device kind 'gpu'"},
      {"", "device spec ''", "empty"},
      {"host:1,", "host:1,", "empty item"},
      {"3", "'3'", "names no kind"},
      {"host:1,2", "'2'", "names no kind"},
      {"auto,host:1", "'auto'", "stand alone"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_device_list *l = (tr_device_list *)1;
    char err[256];
    int rc = tr_device_list_open(&l, cases[i][0], err, sizeof err);
    if (rc != TR_EINVAL || !strstr(err, cases[i][1]) || !strstr(err, cases[i][2]))
      fprintf(stderr, "spec '%s': rc %d, message '%s'\n", cases[i][0], rc, err);
    assert_int_equal(rc, TR_EINVAL);
    assert_null(l);
    assert_non_null(strstr(err, cases[i][1]));
    assert_non_null(strstr(err, cases[i][2]));
  }
  /* the GPU that is not there is named with how many there are */
  char err[256];
  tr_device_list *l;
  if (tr_device_count(TR_DEVICE_CUDA) < 8) {
    assert_int_equal(tr_device_list_open(&l, "cuda:7", err, sizeof err), TR_EINVAL);
    assert_true(strstr(err, "no CUDA backend") || strstr(err, "no cuda device 7"));
  }
}

static void auto_opens_every_gpu_else_one_host_device(void **state) {
  (void)state;
  tr_device_list *l = open_ok("auto");
  int gpus = tr_device_count(TR_DEVICE_CUDA);
  if (gpus == 0) {
    assert_int_equal(tr_device_list_count(l), 1);
    assert_int_equal(tr_device_info_of(tr_device_list_at(l, 0))->kind, TR_DEVICE_HOST);
  } else {
    assert_int_equal(tr_device_list_count(l), gpus);
    for (int i = 0; i < gpus; i++)
      assert_int_equal(tr_device_info_of(tr_device_list_at(l, i))->kind, TR_DEVICE_CUDA);
  }
  tr_device_list_close(l);
}

/* ---- memory and copies ------------------------------------------------------------------- */

static void alloc_is_aligned_and_reuses_freed_blocks_in_stream_order(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  void *p[5];
  const size_t sz[] = {1, 3, 64, 1000, 1 << 20};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(tr_device_alloc(d, sz[i], &p[i]), 0);
    assert_int_equal((uintptr_t)p[i] % 64, 0);
  }
  void *again;
  assert_int_equal(tr_device_free(d, p[3]), 0);
  assert_int_equal(tr_device_alloc(d, sz[3], &again), 0);
  assert_ptr_equal(again, p[3]); /* the same stream: no wait needed */
  void *none = (void *)1;
  assert_int_equal(tr_device_alloc(d, 0, &none), 0);
  assert_null(none);
  void *h;
  assert_int_equal(tr_host_alloc(d, 100, &h), 0);
  assert_int_equal((uintptr_t)h % 64, 0);
  assert_int_equal(tr_host_free(d, h), 0);
  for (int i = 0; i < 5; i++) assert_int_equal(tr_device_free(d, p[i]), 0);
  tr_device_list_close(l);
}

static void free_on_the_wrong_device_is_reported(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:2");
  tr_device *a = tr_device_list_at(l, 0), *b = tr_device_list_at(l, 1);
  void *p;
  assert_int_equal(tr_device_alloc(a, 256, &p), 0);
  assert_int_equal(tr_device_free(b, p), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(b), "host:1"));
  assert_non_null(strstr(tr_device_error(b), "not allocated on this device"));
  assert_int_equal(tr_device_free(a, p), 0);
  tr_device_list_close(l); /* and a block still held is released with its device */
}

static void copies_and_memset_round_trip(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  enum { N = 1027 };
  float *x = th_alloc_f(N), *y = th_alloc_f(N);
  th_rng r = th_rng_for(20);
  th_fill_normal(&r, x, N, 1);
  void *a, *b;
  assert_int_equal(tr_device_alloc(d, N * 4, &a), 0);
  assert_int_equal(tr_device_alloc(d, N * 4, &b), 0);
  assert_int_equal(tr_memcpy(s, a, x, N * 4, TR_COPY_H2D), 0);
  assert_int_equal(tr_memcpy(s, b, a, N * 4, TR_COPY_D2D), 0);
  assert_int_equal(tr_memcpy(s, y, b, N * 4, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(s), 0);
  assert_memory_equal(x, y, N * 4);
  assert_int_equal(tr_memset(s, b, 0, N * 4), 0);
  assert_int_equal(tr_memcpy(s, y, b, N * 4, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(s), 0);
  for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
  tr_device_free(d, a), tr_device_free(d, b);
  free(x), free(y);
  tr_device_list_close(l);
}

/* ---- two devices, two threads: events order work across them ------------------------------ */

static void peer_copy_after_an_event_sees_the_other_devices_work(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:2");
  tr_device *src = tr_device_list_at(l, 0), *dst = tr_device_list_at(l, 1);
  assert_int_equal(tr_device_can_access_peer(src, dst), 1);
  assert_true(th_peer_copy_two_threads(src, dst, 4099, 1));
  tr_device_list_close(l);
}

static void work_waiting_on_an_event_sees_the_recorded_work(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *a = tr_device_stream(d), *b;
  tr_event *e;
  enum { M = 128 };
  float *x, *y, *z, *host = th_alloc_f(M * M);
  assert_int_equal(tr_stream_open(d, "b", &b), 0);
  assert_int_equal(tr_event_open(d, TR_EVENT_DEFAULT, &e), 0);
  assert_int_equal(tr_device_alloc(d, M * M * 4, (void **)&x), 0);
  assert_int_equal(tr_device_alloc(d, M * M * 4, (void **)&y), 0);
  assert_int_equal(tr_device_alloc(d, M * M * 4, (void **)&z), 0);
  /* stream A: x = 1, y = x @ x (every element M), then the event */
  assert_int_equal(tr_fill(a, x, M * M, 1.0f), 0);
  assert_int_equal(tr_gemm(a, TR_OP_N, TR_OP_N, M, M, M, 1, x, M, x, M, 0, y, M), 0);
  assert_int_equal(tr_event_record(e, a), 0);
  /* stream B waits for it, then reads y */
  assert_int_equal(tr_stream_wait_event(b, e), 0);
  assert_int_equal(tr_memcpy(b, z, y, M * M * 4, TR_COPY_D2D), 0);
  assert_int_equal(tr_memcpy(b, host, z, M * M * 4, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(b), 0);
  for (int i = 0; i < M * M; i++) assert_true(host[i] == (float)M);
  assert_int_equal(tr_event_query(e), 1);
  assert_int_equal(tr_event_synchronize(e), 0);
  tr_event_close(e);
  tr_stream_close(b);
  tr_device_free(d, x), tr_device_free(d, y), tr_device_free(d, z);
  free(host);
  tr_device_list_close(l);
}

static void timing_events_measure_elapsed_time(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_stream *s = tr_device_stream(d);
  tr_event *t0, *t1, *plain;
  assert_int_equal(tr_event_open(d, TR_EVENT_TIMING, &t0), 0);
  assert_int_equal(tr_event_open(d, TR_EVENT_TIMING, &t1), 0);
  assert_int_equal(tr_event_open(d, TR_EVENT_DEFAULT, &plain), 0);
  assert_int_equal(tr_event_query(plain), 1); /* never recorded: complete */
  assert_int_equal(tr_event_record(t0, s), 0);
  usleep(2000);
  assert_int_equal(tr_event_record(t1, s), 0);
  assert_int_equal(tr_event_synchronize(t1), 0);
  float ms = -1;
  assert_int_equal(tr_event_elapsed_ms(t0, t1, &ms), 0);
  assert_true(ms >= 1.5f && ms < 1000.0f);
  assert_int_equal(tr_event_record(plain, s), 0);
  assert_int_equal(tr_event_elapsed_ms(t0, plain, &ms), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "TR_EVENT_TIMING"));
  tr_event_close(t0), tr_event_close(t1), tr_event_close(plain);
  tr_device_list_close(l);
}

/* ---- independence from devices and threads ------------------------------------------------- */

typedef struct shard_ctx {
  tr_device *dev;
  size_t off, n;
  float *host; /* the whole tensor, this shard written at off */
  int normal, rc;
} shard_ctx;

static void *init_shard(void *arg) {
  shard_ctx *c = arg;
  tr_device_bind(c->dev);
  tr_stream *s = tr_device_stream(c->dev);
  float *x;
  c->rc = tr_device_alloc(c->dev, c->n * 4, (void **)&x);
  if (c->rc) return NULL;
  c->rc = c->normal ? tr_init_normal(s, x, c->n, 0.5f, 2.0f, 0xC0FFEE, c->off)
                    : tr_init_uniform(s, x, c->n, -0.1f, 0.1f, 0xC0FFEE, c->off);
  c->rc |= tr_memcpy(s, c->host + c->off, x, c->n * 4, TR_COPY_D2H);
  c->rc |= tr_stream_synchronize(s);
  c->rc |= tr_device_free(c->dev, x);
  return NULL;
}

static void init_values_do_not_depend_on_device_or_thread_count(void **state) {
  (void)state;
  enum { N = 100003 };
  for (int normal = 0; normal < 2; normal++) {
    float *whole = th_alloc_f(N), *sharded = th_alloc_f(N);
    tr_device_list *one = open_ok("host:1");
    shard_ctx c1 = {tr_device_list_at(one, 0), 0, N, whole, normal, 0};
    init_shard(&c1);
    assert_int_equal(c1.rc, 0);
    tr_device_list_close(one);
    tr_device_list *four = open_ok("host:4");
    const size_t cut[] = {0, 1, 40000, 77777, N};
    shard_ctx c[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
      c[i] = (shard_ctx){tr_device_list_at(four, i), cut[i], cut[i + 1] - cut[i], sharded, normal, 0};
      pthread_create(&t[i], NULL, init_shard, &c[i]);
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(t[i], NULL);
      assert_int_equal(c[i].rc, 0);
    }
    tr_device_list_close(four);
    assert_memory_equal(whole, sharded, N * sizeof(float));
    free(whole), free(sharded);
  }
}

typedef struct gemm_ctx {
  tr_device *dev;
  const float *a, *b; /* host inputs */
  float *c;           /* host result */
  int n, reps, rc;
} gemm_ctx;

static void *gemm_thread(void *arg) {
  gemm_ctx *g = arg;
  tr_device_bind(g->dev);
  tr_stream *s = tr_device_stream(g->dev);
  size_t bytes = (size_t)g->n * g->n * 4;
  float *a, *b, *c;
  g->rc = tr_device_alloc(g->dev, bytes, (void **)&a) | tr_device_alloc(g->dev, bytes, (void **)&b) |
          tr_device_alloc(g->dev, bytes, (void **)&c);
  if (g->rc) return NULL;
  g->rc |= tr_memcpy(s, a, g->a, bytes, TR_COPY_H2D) | tr_memcpy(s, b, g->b, bytes, TR_COPY_H2D);
  for (int r = 0; r < g->reps; r++)
    g->rc |= tr_gemm(s, TR_OP_N, TR_OP_T, g->n, g->n, g->n, 1, a, g->n, b, g->n, 0, c, g->n);
  g->rc |= tr_memcpy(s, g->c, c, bytes, TR_COPY_D2H) | tr_stream_synchronize(s);
  tr_device_free(g->dev, a), tr_device_free(g->dev, b), tr_device_free(g->dev, c);
  return NULL;
}

static void host_devices_run_gemm_concurrently_with_identical_results(void **state) {
  (void)state;
  enum { N = 192, T = 3 };
  float *a = th_alloc_f(N * N), *b = th_alloc_f(N * N), *want = th_alloc_f(N * N);
  th_rng r = th_rng_for(21);
  th_fill_normal(&r, a, N * N, 1);
  th_fill_normal(&r, b, N * N, 1);
  tr_device_list *l = open_ok("host:3");
  gemm_ctx alone = {tr_device_list_at(l, 0), a, b, want, N, 1, 0};
  gemm_thread(&alone);
  assert_int_equal(alone.rc, 0);
  gemm_ctx g[T];
  pthread_t t[T];
  for (int i = 0; i < T; i++) {
    g[i] = (gemm_ctx){tr_device_list_at(l, i), a, b, th_alloc_f(N * N), N, 8, 0};
    pthread_create(&t[i], NULL, gemm_thread, &g[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(g[i].rc, 0);
    assert_memory_equal(g[i].c, want, N * N * 4); /* one BLAS thread: deterministic */
    free(g[i].c);
  }
  tr_device_list_close(l);
  free(a), free(b), free(want);
}

/* The threads of this process now. */
static int process_threads(void) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

typedef struct lone_ctx {
  tr_device *dev;
  pthread_barrier_t *all_done;
  int threads_seen, rc;
} lone_ctx;

/* Products large enough for the library (oneDNN or OpenBLAS), then the thread count while
 * every device's thread is still alive. */
static void *lone_thread(void *arg) {
  lone_ctx *c = arg;
  enum { N = 256 };
  tr_device_bind(c->dev);
  tr_stream *s = tr_device_stream(c->dev);
  float *a;
  c->rc = tr_device_alloc(c->dev, 3 * N * N * sizeof(float), (void **)&a);
  tr_bf16 *h = (tr_bf16 *)(a + N * N); /* bf16 copies of a's first two matrices */
  if (!c->rc) c->rc = tr_fill(s, a, 2 * N * N, 0.5f);
  for (int t = 0; t < 4 && !c->rc; t++)
    c->rc = tr_gemm(s, (tr_op)(t & 1), (tr_op)(t >> 1), N, N, N, 1, a, N, a + N * N, N, 0,
                    a + 2 * N * N, N);
  if (!c->rc) c->rc = tr_to_bf16(s, h, a, 2 * N * N);
  for (int t = 0; t < 4 && !c->rc; t++)
    c->rc = tr_gemm_bf16(s, (tr_op)(t & 1), (tr_op)(t >> 1), N, N, N, 1, h, N, h + N * N, N, 0,
                         a + 2 * N * N, N);
  if (c->all_done) pthread_barrier_wait(c->all_done);
  c->threads_seen = process_threads();
  if (c->all_done) pthread_barrier_wait(c->all_done); /* nobody leaves before all counted */
  tr_device_free(c->dev, a);
  return NULL;
}

/* Each host device computes on its own thread and nowhere else: GEMMs (fp32 and bf16) on the
 * main thread and then on three device threads at once leave the process with no thread more
 * than those (no BLAS or OpenMP team grows behind the devices' backs). */
static void host_gemm_computes_on_the_calling_thread_alone(void **state) {
  (void)state;
  enum { T = 3 };
  tr_device_list *l = open_ok("host:3");
  const int base = process_threads();
  lone_ctx main_ctx = {tr_device_list_at(l, 0), NULL, 0, 0};
  lone_thread(&main_ctx);
  assert_int_equal(main_ctx.rc, 0);
  assert_int_equal(main_ctx.threads_seen, base);
  pthread_barrier_t all_done;
  pthread_barrier_init(&all_done, NULL, T);
  lone_ctx c[T];
  pthread_t t[T];
  for (int i = 0; i < T; i++) {
    c[i] = (lone_ctx){tr_device_list_at(l, i), &all_done, 0, 0};
    pthread_create(&t[i], NULL, lone_thread, &c[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(c[i].rc, 0);
    assert_int_equal(c[i].threads_seen, base + T);
  }
  pthread_barrier_destroy(&all_done);
  assert_int_equal(process_threads(), base);
  tr_device_list_close(l);
}

/* ---- the owner thread ------------------------------------------------------------------------ */

static void *use_without_bind(void *arg) {
  float *x;
  tr_device_alloc(arg, 64, (void **)&x); /* not the owner: aborts in debug builds */
  return NULL;
}

static void use_off_the_owner_thread_aborts_in_debug_builds(void **state) {
  (void)state;
#ifdef NDEBUG
  skip();
#else
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    freopen("/dev/null", "w", stderr);
    tr_device_list *l;
    if (tr_device_list_open(&l, "host:1", NULL, 0)) _exit(3);
    tr_device *d = tr_device_list_at(l, 0);
    float *x;
    if (tr_device_alloc(d, 64, (void **)&x)) _exit(4); /* binds this thread */
    pthread_t t;
    pthread_create(&t, NULL, use_without_bind, d);
    pthread_join(t, NULL);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGABRT);
#endif
}

static void errors_name_the_device_and_the_operation(void **state) {
  (void)state;
  tr_device_list *l = open_ok("host:2");
  tr_device *d = tr_device_list_at(l, 1);
  tr_stream *s = tr_device_stream(d);
  float *x;
  assert_int_equal(tr_device_alloc(d, 64 * 4, (void **)&x), 0);
  assert_int_equal(tr_add(s, NULL, x, x, 4), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "host:1"));
  assert_non_null(strstr(tr_device_error(d), "tr_add"));
  assert_non_null(strstr(tr_device_error(d), "out is NULL"));
  assert_int_equal(tr_gemm(s, TR_OP_N, TR_OP_N, 4, 4, 4, 1, x, 3, x, 4, 0, x, 4), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "lda=3 needs 4"));
  assert_int_equal(tr_adamw_update(s, x, x, x, x, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "step 0"));
  tr_device_free(d, x);
  tr_device_list_close(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(host_spec_opens_n_devices_named_in_order),
      cmocka_unit_test(bad_specs_are_rejected_naming_the_bad_part),
      cmocka_unit_test(auto_opens_every_gpu_else_one_host_device),
      cmocka_unit_test(alloc_is_aligned_and_reuses_freed_blocks_in_stream_order),
      cmocka_unit_test(free_on_the_wrong_device_is_reported),
      cmocka_unit_test(copies_and_memset_round_trip),
      cmocka_unit_test(peer_copy_after_an_event_sees_the_other_devices_work),
      cmocka_unit_test(work_waiting_on_an_event_sees_the_recorded_work),
      cmocka_unit_test(timing_events_measure_elapsed_time),
      cmocka_unit_test(init_values_do_not_depend_on_device_or_thread_count),
      cmocka_unit_test(host_devices_run_gemm_concurrently_with_identical_results),
      cmocka_unit_test(host_gemm_computes_on_the_calling_thread_alone),
      cmocka_unit_test(use_off_the_owner_thread_aborts_in_debug_builds),
      cmocka_unit_test(errors_name_the_device_and_the_operation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
