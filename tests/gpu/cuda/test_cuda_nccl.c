/* test_cuda_nccl.c — replica groups through NCCL (tr_device.h "collectives", tr_job.h
 * tr_allreduce) on GPUs: a communicator of one member sums, reduces and broadcasts in place
 * and refuses a member it does not have; two logical devices of one GPU cannot share one
 * (NCCL takes one member per GPU), so dp there sums with peer under auto and a forced nccl
 * is refused; and, where the machine has two GPUs or more, dp and ZeRO-1 dp through NCCL
 * train what single trains within 1e-5 (NCCL adds up in its own order: not bitwise).
 * Built where the build has NCCL; exits 77 (skipped) without a GPU. */
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

#define SCRATCH_NAME "cuda-nccl"
#include "../../actors/scratch.h"
#include "../../actors/compare.h"
#include "../../actors/specs.h"

enum { N = 4099 }; /* not a multiple of anything NCCL chunks by */

static void one_member_communicator_sums_reduces_and_broadcasts(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512];
  assert_int_equal(tr_device_list_open(&devs, "cuda:0", err, sizeof err), 0);
  tr_device *d = tr_device_list_at(devs, 0);
  tr_comm *c;
  if (tr_comm_open_all(&d, 1, &c, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_comm_count(c), 1);
  assert_int_equal(tr_comm_rank(c), 0);
  tr_stream *s = tr_device_stream(d);
  float *x, *y, host[N];
  assert_int_equal(tr_device_alloc(d, N * sizeof(float), (void **)&x), 0);
  assert_int_equal(tr_device_alloc(d, N * sizeof(float), (void **)&y), 0);
  assert_int_equal(tr_init_uniform(s, x, N, -1, 1, 7, 0), 0);
  int rc = tr_comm_allreduce(c, s, x, y, N);               /* out of place */
  if (!rc) rc = tr_comm_allreduce(c, s, y, y, N);          /* in place */
  if (!rc) rc = tr_comm_reduce(c, s, y, y, N, 0);
  if (!rc) rc = tr_comm_broadcast(c, s, y, y, N, 0);
  if (rc) fail_msg("%s", tr_device_error(d));
  assert_int_equal(tr_axpy(s, y, -1.0f, x, N), 0);         /* a sum over one member is x */
  assert_int_equal(tr_memcpy(s, host, y, sizeof host, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(s), 0);
  for (int i = 0; i < N; i++) assert_true(host[i] == 0.0f);
  /* a root it does not have, named */
  assert_int_equal(tr_comm_reduce(c, s, y, y, N, 1), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(d), "member 1 of 1"));
  assert_int_equal(tr_device_free(d, x), 0);
  assert_int_equal(tr_device_free(d, y), 0);
  tr_comm_close(c);
  tr_device_list_close(devs);
}

static void logical_devices_of_one_gpu_cannot_share_a_communicator(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[512];
  assert_int_equal(tr_device_list_open(&devs, "cuda:0,cuda:0", err, sizeof err), 0);
  tr_device *d[2] = {tr_device_list_at(devs, 0), tr_device_list_at(devs, 1)};
  tr_comm *c[2];
  assert_int_equal(tr_comm_open_all(d, 2, c, err, sizeof err), TR_EINVAL);
  printf("  refused: %s\n", err);
  assert_non_null(strstr(err, "are on the same GPU 0"));
  tr_device_list_close(devs);
}

static tr_train_options options(const tr_model_spec *spec, const char *devices) {
  tr_train_options o = tr_train_defaults();
  o.spec = spec;
  o.devices = devices;
  o.steps = 4;
  o.job.global_batch = 48;
  o.watchdog_ms = 20000;
  return o;
}

static int run_to(tr_train_options o, const char *file, tr_train_result *r) {
  char err[1024];
  o.job.checkpoint.path = path(file);
  int rc = tr_train_run(&o, r, err, sizeof err);
  if (rc) printf("  %s on %s: FAILED: %s\n", model_name(&o), o.devices, err);
  return rc;
}

static void dp_on_logical_devices_of_one_gpu_sums_with_peer(void **state) {
  (void)state;
  tr_train_result r;
  tr_train_options o = options(&mlp4, "cuda:0,cuda:0");
  o.strategy = TR_STRATEGY_DP;
  assert_int_equal(run_to(o, "peer.safetensors", &r), 0);
  assert_int_equal(r.allreduce, TR_ALLREDUCE_PEER);
  char err[512];
  o.job.allreduce = TR_ALLREDUCE_NCCL;
  o.job.checkpoint.path = path("never.safetensors");
  assert_int_equal(tr_train_run(&o, &r, err, sizeof err), TR_EINVAL);
  printf("  refused: %s\n", err);
  assert_non_null(strstr(err, "logical devices of one GPU"));
}

/* Against single on cuda:0: what every layout is held to on host devices (1e-5), NCCL's
 * order of summation included. */
static void dp_through_nccl_matches_single(void **state) {
  (void)state;
  if (tr_device_count(TR_DEVICE_CUDA) < 2) {
    printf("  dp through NCCL needs two GPUs; this machine has %d: skipped\n",
           tr_device_count(TR_DEVICE_CUDA));
    skip();
  }
  const tr_model_spec *specs[] = {&mlp4, &gpt1};
  int failures = 0;
  for (int m = 0; m < 2; m++) {
    tr_train_result r;
    tr_train_options o = options(specs[m], "cuda:0");
    if (run_to(o, "single.safetensors", &r)) fail_msg("single failed");
    o.devices = "cuda:0,cuda:1";
    o.strategy = TR_STRATEGY_DP;
    o.job.allreduce = TR_ALLREDUCE_NCCL;
    for (int zero = 0; zero <= 1; zero++) {
      o.job.zero = zero;
      if (run_to(o, "nccl.safetensors", &r)) fail_msg("dp through NCCL failed");
      assert_int_equal(r.allreduce, TR_ALLREDUCE_NCCL);
      char worst[128];
      const double d = params_difference(path("nccl.safetensors"), path("single.safetensors"),
                                         worst, sizeof worst);
      const bool ok = d <= 1e-5;
      printf("  %s dp%s through NCCL against single: %.3g %s (tensor %s)\n", specs[m]->name,
             zero ? " zero 1" : "", d, ok ? "ok" : "FAIL", worst);
      failures += !ok;
    }
  }
  if (failures) fail_msg("%d run(s) differ from single (above)", failures);
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_nccl: no GPU on this machine: skipped\n");
    return 77;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("%s\n", tr_comm_library());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_member_communicator_sums_reduces_and_broadcasts),
      cmocka_unit_test(logical_devices_of_one_gpu_cannot_share_a_communicator),
      cmocka_unit_test(dp_on_logical_devices_of_one_gpu_sums_with_peer),
      cmocka_unit_test(dp_through_nccl_matches_single),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
