/* test_allreduce_choice.c — how a replica group sums (tr_allreduce_choose, tr_job.h): NCCL
 * where the build has it and every member is a CUDA device on a GPU of its own, troupe's
 * peer reduction otherwise; a forced nccl that cannot be is refused, naming the devices and
 * why; peer is always honoured. The same rule for what carries a pipeline edge's tensors
 * between ranks (tr_edge_carrier_choose). Pure functions: no device is opened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "troupe.h"

/* A device and the rank that owns it (the world's to say: the device layer knows no ranks). */
typedef struct member {
  tr_device_info info;
  int rank;
} member;

/* A GPU as discovery describes it: each rank on a host of its own unless placed() says
 * where it is */
static member gpu(int ordinal, int rank, const char *name) {
  member m = {.info = {.kind = TR_DEVICE_CUDA, .ordinal = ordinal}, .rank = rank};
  snprintf(m.info.name, sizeof m.info.name, "%s", name);
  snprintf(m.info.gpu_id, sizeof m.info.gpu_id, "host%d/ordinal %d", rank, ordinal);
  return m;
}

static member host(int ordinal, const char *name) {
  member m = {.info = {.kind = TR_DEVICE_HOST, .ordinal = ordinal}};
  snprintf(m.info.name, sizeof m.info.name, "%s", name);
  return m;
}

/* asked on devs with or without NCCL: the status, *how, and err */
static int choose(tr_allreduce asked, const member *devs, int n, bool have,
                  tr_allreduce *how, char *err) {
  tr_device_info infos[8];
  int ranks[8];
  for (int i = 0; i < n && i < 8; i++) infos[i] = devs[i].info, ranks[i] = devs[i].rank;
  *how = TR_ALLREDUCE_AUTO;
  err[0] = 0;
  return tr_allreduce_choose(asked, infos, ranks, n, have, how, err, 256);
}

static void auto_takes_nccl_for_distinct_gpus_only(void **state) {
  (void)state;
  char err[256];
  tr_allreduce how;
  const member two[] = {gpu(0, 0, "cuda:0"), gpu(1, 0, "cuda:1")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, two, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_NCCL);
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, two, 2, false, &how, err), 0); /* not built */
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  const member shared[] = {gpu(0, 0, "cuda:0"), gpu(0, 0, "cuda:0/1")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, shared, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  const member hosts[] = {host(0, "host:0"), host(1, "host:1")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, hosts, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  const member mixed[] = {gpu(0, 0, "cuda:0"), host(0, "host:0")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, mixed, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  /* ordinal 0 on two ranks: two processes' GPUs (leaders across ranks), not one GPU */
  const member ranks[] = {gpu(0, 0, "cuda:0"), gpu(0, 1, "cuda:0@r1")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, ranks, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_NCCL);
}

static void peer_is_always_honoured(void **state) {
  (void)state;
  char err[256];
  tr_allreduce how;
  const member two[] = {gpu(0, 0, "cuda:0"), gpu(1, 0, "cuda:1")};
  assert_int_equal(choose(TR_ALLREDUCE_PEER, two, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
}

static void forced_nccl_that_cannot_be_is_refused_naming_why(void **state) {
  (void)state;
  char err[256];
  tr_allreduce how;
  const member hosts[] = {host(0, "host:0"), host(1, "host:1")};
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, hosts, 2, true, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "allreduce: nccl asked, but host:0 is a host device"));
  const member shared[] = {gpu(0, 0, "cuda:0"), gpu(0, 0, "cuda:0/1")};
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, shared, 2, true, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "cuda:0 and cuda:0/1 are logical devices of one GPU (0)"));
  const member two[] = {gpu(0, 0, "cuda:0"), gpu(1, 0, "cuda:1")};
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, two, 2, false, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "built without NCCL"));
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, two, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_NCCL);
  /* one member: forced, a communicator of one (what a single GPU can check) */
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, two, 1, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_NCCL);
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, two, 1, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  assert_int_equal(choose((tr_allreduce)7, two, 2, true, &how, err), TR_EINVAL);
}

static void names_parse_back(void **state) {
  (void)state;
  for (int a = 0; a < TR_ALLREDUCE_COUNT; a++) {
    tr_allreduce back;
    assert_int_equal(tr_allreduce_parse(tr_allreduce_name((tr_allreduce)a), &back), 0);
    assert_int_equal(back, a);
  }
  tr_allreduce x;
  assert_int_equal(tr_allreduce_parse("ring", &x), TR_EINVAL);
  assert_int_equal(tr_allreduce_parse(NULL, &x), TR_EINVAL);
  assert_string_equal(tr_allreduce_name(TR_ALLREDUCE_COUNT), "?");
}

/* The device layer: a build without NCCL says so; host devices never have collectives. */
static void host_devices_have_no_communicator(void **state) {
  (void)state;
  tr_device_list *devs;
  char err[256];
  assert_int_equal(tr_device_list_open(&devs, "host:2", err, sizeof err), 0);
  tr_device *d[2] = {tr_device_list_at(devs, 0), tr_device_list_at(devs, 1)};
  tr_comm *c[2];
  assert_int_equal(tr_comm_open_all(d, 2, c, err, sizeof err), TR_EDEVICE);
  assert_non_null(strstr(err, "host:0: a host device has no collectives"));
  tr_comm_id id;
  assert_int_equal(tr_comm_id_init(TR_DEVICE_HOST, &id, err, sizeof err), TR_EDEVICE);
  tr_device_list_close(devs);
}

/* one GPU seen from two processes: the same gpu_id, whatever the ordinals say */
static member placed(member d, const char *gpu_id) {
  snprintf(d.info.gpu_id, sizeof d.info.gpu_id, "%s", gpu_id);
  return d;
}

static void leaders_on_one_gpu_in_two_processes_sum_with_peer(void **state) {
  (void)state;
  char err[256];
  tr_allreduce how;
  const member one[] = {placed(gpu(0, 0, "cuda:0"), "n1/0000:3B:00.0"),
                                placed(gpu(0, 1, "cuda:0"), "n1/0000:3B:00.0")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, one, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_PEER);
  assert_int_equal(choose(TR_ALLREDUCE_NCCL, one, 2, true, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "cuda:0 of rank 0 and cuda:0 of rank 1 are one GPU (n1/0000:3B:00.0)"));
  /* two hosts' GPUs at one bus id are two GPUs */
  const member two[] = {placed(gpu(0, 0, "cuda:0"), "n1/0000:3B:00.0"),
                                placed(gpu(0, 1, "cuda:0"), "n2/0000:3B:00.0")};
  assert_int_equal(choose(TR_ALLREDUCE_AUTO, two, 2, true, &how, err), 0);
  assert_int_equal(how, TR_ALLREDUCE_NCCL);
}

static int carrier(tr_allreduce asked, member from, member to, bool have,
                   tr_edge_carrier *how, char *err) {
  *how = (tr_edge_carrier)-1;
  err[0] = 0;
  return tr_edge_carrier_choose(asked, &from.info, from.rank, &to.info, to.rank, have, how, err,
                                256);
}

static void edges_take_nccl_between_two_gpus_only(void **state) {
  (void)state;
  char err[256];
  tr_edge_carrier how;
  const member a = placed(gpu(0, 0, "cuda:0"), "n1/0000:3B:00.0");
  const member b = placed(gpu(0, 1, "cuda:0"), "n1/0000:5E:00.0");
  const member a1 = placed(gpu(0, 1, "cuda:0"), "n1/0000:3B:00.0"); /* a, rank 1 */
  member h = host(0, "host:0");
  h.rank = 1;
  assert_int_equal(carrier(TR_ALLREDUCE_AUTO, a, b, true, &how, err), 0);
  assert_int_equal(how, TR_EDGE_CARRIER_NCCL);
  assert_int_equal(carrier(TR_ALLREDUCE_AUTO, a, b, false, &how, err), 0); /* not built */
  assert_int_equal(how, TR_EDGE_CARRIER_MPI);
  assert_int_equal(carrier(TR_ALLREDUCE_PEER, a, b, true, &how, err), 0); /* no NCCL at all */
  assert_int_equal(how, TR_EDGE_CARRIER_MPI);
  assert_int_equal(carrier(TR_ALLREDUCE_AUTO, a, a1, true, &how, err), 0); /* one GPU */
  assert_int_equal(how, TR_EDGE_CARRIER_MPI);
  assert_int_equal(carrier(TR_ALLREDUCE_AUTO, a, h, true, &how, err), 0);
  assert_int_equal(how, TR_EDGE_CARRIER_MPI);
  assert_int_equal(carrier(TR_ALLREDUCE_NCCL, a, b, true, &how, err), 0);
  assert_int_equal(how, TR_EDGE_CARRIER_NCCL);
}

static void edges_forced_to_nccl_that_cannot_be_are_refused_naming_the_ends(void **state) {
  (void)state;
  char err[256];
  tr_edge_carrier how;
  const member a = placed(gpu(0, 0, "cuda:0"), "n1/0000:3B:00.0");
  const member a1 = placed(gpu(0, 1, "cuda:0"), "n1/0000:3B:00.0");
  const member b = placed(gpu(1, 1, "cuda:1"), "n1/0000:5E:00.0");
  member h = host(0, "host:0");
  h.rank = 1;
  assert_int_equal(carrier(TR_ALLREDUCE_NCCL, a, a1, true, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "edge from cuda:0 of rank 0 to cuda:0 of rank 1 joins one GPU (n1/0000:3B:00.0)"));
  assert_int_equal(how, TR_EDGE_CARRIER_MPI);
  assert_int_equal(carrier(TR_ALLREDUCE_NCCL, a, h, true, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "to host:0 of rank 1 has a host device at an end"));
  assert_int_equal(carrier(TR_ALLREDUCE_NCCL, a, b, false, &how, err), TR_EINVAL);
  assert_non_null(strstr(err, "built without NCCL"));
  /* not an edge between ranks: a mistake of the caller's, named */
  assert_int_equal(carrier(TR_ALLREDUCE_AUTO, a, placed(gpu(1, 0, "cuda:1"), "x"), true, &how, err),
                   TR_EINVAL);
  assert_non_null(strstr(err, "both on rank 0"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(auto_takes_nccl_for_distinct_gpus_only),
      cmocka_unit_test(peer_is_always_honoured),
      cmocka_unit_test(leaders_on_one_gpu_in_two_processes_sum_with_peer),
      cmocka_unit_test(edges_take_nccl_between_two_gpus_only),
      cmocka_unit_test(edges_forced_to_nccl_that_cannot_be_are_refused_naming_the_ends),
      cmocka_unit_test(forced_nccl_that_cannot_be_is_refused_naming_why),
      cmocka_unit_test(names_parse_back),
      cmocka_unit_test(host_devices_have_no_communicator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
