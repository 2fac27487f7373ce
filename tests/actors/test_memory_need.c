/* test_memory_need.c — the memory a run will hold, found from its configuration before it
 * runs (actors/memory_need.c), against what runs on host devices really hold (mlp single,
 * dp and dp under ZeRO; gpt pipelined and recomputing): the parameters, gradients and
 * optimizer state their stages report exactly, the activations no fewer than their measured
 * peak, and the whole within 20% of the memory the run's process grew by (its peak resident
 * set, measured in a child of its own). A run that does not fit is refused naming
 * global_batch with the largest batch that fits with 10% to spare, which is at that edge;
 * parameters that fit at no batch are refused saying so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"

#include "job_config.h"
#include "memory_need.h"
#include "specs.h"

typedef struct run_case {
  const char *model, *devices;
  tr_strategy strategy;
  int replicas, stages; /* what the strategy and the devices make */
  int microbatches, batch, recompute, zero;
} run_case;

static tr_train_options options_of(const run_case *k) {
  tr_train_options o = tr_train_defaults();
  o.model = k->model;
  o.strategy = k->strategy;
  o.devices = k->devices;
  o.steps = 1;
  o.deterministic = 1; /* cut by FLOPs, as the estimate is without a measured cut */
  o.job.global_batch = k->batch;
  o.job.layout.microbatches = k->microbatches;
  o.job.memory.recompute = k->recompute;
  o.job.zero = k->zero;
  return o;
}

/* The estimate for the case, from the job tr_train_run made of it (the layout it ran). */
static void estimate(const run_case *k, const tr_train_result *r, tr__memory_needs *need) {
  char err[512];
  tr_model *m;
  tr_data *d;
  tr_device_list *devs;
  assert_int_equal(tr_model_named(&m, k->model, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&d, m, 0, NULL, NULL, err, sizeof err), 0);
  assert_int_equal(tr_device_list_open(&devs, k->devices, err, sizeof err), 0);
  tr_train_options o = options_of(k);
  tr_job_config c = o.job;
  c.model = m;
  c.data = d;
  c.strategy = tr_strategy_name(k->strategy);
  c.layout.replicas = r->replicas;
  c.layout.stages = r->stages;
  c.layout.microbatches = r->microbatches;
  assert_true(r->replicas == k->replicas && r->stages == k->stages);
  if (tr__job_config_complete(&c, err, sizeof err)) fail_msg("%s", err);
  if (tr__memory_need(&c, devs, need, err, sizeof err)) fail_msg("%s", err);
  tr_device_list_close(devs);
  tr_data_close(d);
  tr_model_free(m);
}

/* Resident bytes now (/proc/self/statm's second field). */
static uint64_t resident(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, pages = 0;
  if (f == NULL || fscanf(f, "%llu %llu", &size, &pages) != 2) pages = 0;
  if (f) fclose(f);
  return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

typedef struct measured {
  tr_train_result r;
  uint64_t grew; /* the peak resident set over the run, less what was resident before it */
} measured;

/* Runs the case in a child (a peak resident set of its own) and reads back what it held. */
static void run(const run_case *k, measured *out) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    measured m = {0};
    char err[512];
    tr_train_options o = options_of(k);
    const uint64_t before = resident();
    if (tr_train_run(&o, &m.r, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      _exit(1);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    m.grew = (uint64_t)ru.ru_maxrss * 1024 - before;
    _exit(write(fd[1], &m, sizeof m) == (ssize_t)sizeof m ? 0 : 2);
  }
  close(fd[1]);
  size_t got = 0;
  while (got < sizeof *out) {
    const ssize_t n = read(fd[0], (char *)out + got, sizeof *out - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(got, sizeof *out);
}

/* Under a sanitizer the process's memory is the sanitizer's as much as the run's (shadow
 * memory, quarantined blocks): the estimate is held to the run's own figures only. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static void check_case(const run_case *k) {
  tr__memory_needs need;
  measured got;
  run(k, &got);
  estimate(k, &got.r, &need);
  const int n = k->replicas * k->stages;
  int64_t params = 0, grads = 0, state = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    params += got.r.memory.devices[i].params;
    grads += got.r.memory.devices[i].grads;
    state += got.r.memory.devices[i].optimizer_state;
    peak += got.r.peak_activation_bytes[i];
  }
  const tr__memory_place *h = &need.place[0];
  printf("%s %s on %s, batch %d: estimate %.1f MiB (activations %.1f MiB, loader %.1f MiB), "
         "the run grew by %.1f MiB, its stages' peak activations %.1f MiB\n",
         k->model, tr_strategy_name(k->strategy), k->devices, k->batch, h->need / 1048576.0,
         h->activations / 1048576.0, h->loader / 1048576.0, got.grew / 1048576.0,
         peak / 1048576.0);
  assert_int_equal(need.n, 1); /* host devices: one place, the host's */
  assert_int_equal(h->params, params);
  assert_int_equal(h->grads, grads);
  assert_int_equal(h->state, state); /* momentum and AdamW: no scratch */
  assert_true(h->activations >= (uint64_t)peak);
  if (!SANITIZED && (h->need > got.grew * 1.2 || h->need < got.grew * 0.8))
    fail_msg("the estimate %.1f MiB is not within 20%% of the %.1f MiB the run grew by",
             h->need / 1048576.0, got.grew / 1048576.0);
}

static void mlp_single_estimate_matches_the_run(void **state) {
  (void)state;
  check_case(&(run_case){"mlp", "host:1", TR_STRATEGY_SINGLE, 1, 1, 0, 4096, 0, 0});
}

static void mlp_dp_estimate_matches_the_run(void **state) {
  (void)state;
  check_case(&(run_case){"mlp", "host:2", TR_STRATEGY_DP, 2, 1, 0, 4096, 0, 0});
}

static void mlp_dp_zero_estimate_matches_the_run(void **state) {
  (void)state;
  check_case(&(run_case){"mlp", "host:2", TR_STRATEGY_DP, 2, 1, 0, 4096, 0, 1});
}

static void gpt_pipeline_estimate_matches_the_run(void **state) {
  (void)state;
  check_case(&(run_case){"gpt", "host:2", TR_STRATEGY_PIPELINE, 1, 2, 4, 64, 0, 0});
}

static void gpt_recompute_estimate_matches_the_run(void **state) {
  (void)state;
  check_case(&(run_case){"gpt", "host:1", TR_STRATEGY_SINGLE, 1, 1, 0, 64, 1, 0});
}

/* The case's need against what the host has now, as a fraction. */
static double fraction_of_host(const run_case *k, const tr_train_result *layout) {
  tr__memory_needs need;
  estimate(k, layout, &need);
  return (double)need.place[0].need / (double)need.place[0].has;
}

/* Far too large a batch: refused before anything runs, naming global_batch, the figures and
 * the largest batch that fits with 10% to spare: at that edge, and 15% more beyond it. */
static void a_batch_too_large_is_refused_with_one_that_fits(void **state) {
  (void)state;
  run_case k = {"gpt", "host:2", TR_STRATEGY_PIPELINE, 1, 2, 4, 1 << 20, 0, 0};
  tr_train_options o = options_of(&k);
  tr_train_result r;
  char err[512];
  assert_int_equal(tr_train_run(&o, &r, err, sizeof err), TR_EINVAL);
  int batch = 0;
  const char *fit = "; the largest batch that fits with 10% to spare is ";
  const char *at = strstr(err, fit);
  if (strncmp(err, "global_batch 1048576: needs ", 28) ||
      !strstr(err, " GiB on host:0..host:1 together (parameters ") ||
      !strstr(err, "at 2 micro-batches") || at == NULL ||
      sscanf(at + strlen(fit), "%d", &batch) != 1)
    fail_msg("not the refusal with its figures: %s", err);
  tr_error e;
  assert_int_equal(tr_train_run_e(&o, &r, &e), TR_EINVAL);
  assert_string_equal(e.field, "global_batch");
  r.replicas = 1, r.stages = 2, r.microbatches = 4;
  assert_true(batch > 0 && batch % 4 == 0);
  /* at 90% of what the host has, give or take what others take and free meanwhile */
  k.batch = batch;
  const double at_batch = fraction_of_host(&k, &r);
  k.batch = batch + batch / 80 * 12; /* 15% more, whole micro-batches */
  const double beyond = fraction_of_host(&k, &r);
  printf("batch %d: %.4f of the host; %d: %.4f\n", batch, at_batch, k.batch, beyond);
  if (!(at_batch <= 0.95 && beyond > 0.95))
    fail_msg("batch %d needs %.3f of the host, %d needs %.3f", batch, at_batch, k.batch, beyond);
}

/* One Linear(2^17, 2^17): 64 GiB of parameters, as many of gradients and of momentum. */
static const tr_layer_spec huge_layers[] = {LINEAR(1 << 17, 1 << 17, 0)};
static const tr_model_spec huge = {.name = "huge", .ctx = 1, .loss = TR_LOSS_MSE, .nlayers = 1,
                                   .layers = huge_layers, .batch = 1,
                                   .optim = {.kind = TR_OPTIM_MOMENTUM, .lr = 0.01f,
                                             .momentum = 0.9f}};

/* Parameters too large at any batch: counted (nothing allocated, so at once), and refused
 * saying that no batch fits, where the host has less than they need. */
static void parameters_too_large_for_any_batch(void **state) {
  (void)state;
  char err[512];
  tr_model *m;
  tr_device_list *devs;
  assert_int_equal(tr_model_new(&m, &huge, err, sizeof err), 0);
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr_job_config c = tr_job_defaults();
  c.model = m;
  c.global_batch = 1;
  c.layout.replicas = c.layout.stages = c.layout.microbatches = c.layout.chunks = 1;
  c.optim = huge.optim;
  tr__memory_needs need;
  assert_int_equal(tr__memory_need(&c, devs, &need, err, sizeof err), 0);
  const uint64_t gib = 1ull << 30;
  assert_int_equal(need.place[0].params, 64 * gib);
  assert_int_equal(need.place[0].grads, 64 * gib);
  assert_int_equal(need.place[0].state, 64 * gib);
  if (need.place[0].has && need.place[0].has < 192 * gib) {
    assert_int_equal(tr__memory_check(&c, devs, err, sizeof err), TR_EINVAL);
    if (!strstr(err, "needs 192.0 GiB on host:0 (parameters 64.0 GiB, gradients 64.0 GiB, "
                     "optimizer state 64.0 GiB") ||
        !strstr(err, "no batch fits: give a layout with more stages"))
      fail_msg("%s", err);
  }
  tr_device_list_close(devs);
  tr_model_free(m);
}

/* The loader's ring is counted where the loader fills it: not where the stages make their
 * samples on their devices (data_on device). */
static void the_loaders_ring_only_where_it_fills(void **state) {
  (void)state;
  char err[512];
  tr_model *m;
  tr_data *d;
  tr_device_list *devs;
  assert_int_equal(tr_model_named(&m, "gpt", err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&d, m, 0, NULL, NULL, err, sizeof err), 0);
  assert_int_equal(tr_device_list_open(&devs, "host:1", err, sizeof err), 0);
  tr_job_config c = tr_job_defaults();
  c.model = m;
  c.data = d;
  c.global_batch = 64;
  c.layout.replicas = c.layout.stages = c.layout.microbatches = 1;
  c.layout.prefetch = 3;
  if (tr__job_config_complete(&c, err, sizeof err)) fail_msg("%s", err);
  tr__memory_needs need;
  assert_int_equal(tr__memory_need(&c, devs, &need, err, sizeof err), 0);
  assert_int_equal(need.place[0].loader,
                   3 * 64 * (tr_model_input_bytes(m) + tr_model_target_bytes(m)));
  c.data_on = TR_DATA_ON_DEVICE;
  assert_true(tr_data_can_generate(d));
  assert_int_equal(tr__memory_need(&c, devs, &need, err, sizeof err), 0);
  assert_int_equal(need.place[0].loader, 0);
  tr_device_list_close(devs);
  tr_data_close(d);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_single_estimate_matches_the_run),
      cmocka_unit_test(mlp_dp_estimate_matches_the_run),
      cmocka_unit_test(mlp_dp_zero_estimate_matches_the_run),
      cmocka_unit_test(gpt_pipeline_estimate_matches_the_run),
      cmocka_unit_test(gpt_recompute_estimate_matches_the_run),
      cmocka_unit_test(a_batch_too_large_is_refused_with_one_that_fits),
      cmocka_unit_test(parameters_too_large_for_any_batch),
      cmocka_unit_test(the_loaders_ring_only_where_it_fills),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
