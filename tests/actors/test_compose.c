/* test_compose.c — actors of the user's own in the built-in training graph, through the
 * messages of tr_protocol.h: a producer that replaces the loader trains exactly what the
 * loader would, a relay between the loader and the first stage sees every batch and can
 * change it, an observer hears every N steps and the end, a user's classifier learns its
 * default data under single, pipeline and dp alike, a graph left waiting is stopped with its
 * picture, and what does not fit (a data source of
 * other sizes than the model's, batches of the wrong size) is refused by name. */
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

#define SCRATCH_NAME "compose"
#include "scratch.h"

#include "compare.h"
#include "simplenet_job.h"
#include "specs.h"

enum { STEPS = 60, SEED = 1 };

/* ---- the user's actors ------------------------------------------------------------------ */

/* A loader of the user's: its own ring of buffers, one per credit of its edge, filled from
 * the data set as tr_data_shard says, step after step until the run's end. `count` is what
 * it claims a batch holds (the test of a bad producer lies). */
typedef struct producer {
  tr_graph *g;
  tr_edge *out;
  const tr_data *data;
  int global_batch, count, ring;
  void **x, **y;
  int slot;
  int64_t step;
  bool done;
} producer;

static int produce(tr_actor *self, tr_msg *msg) {
  (void)msg;
  producer *p = tr_actor_state(self);
  while (p->step < tr_graph_end_step(p->g) && tr_edge_acquire(p->out)) {
    uint64_t first;
    size_t n;
    tr_data_shard((uint64_t)p->step, (size_t)p->global_batch, 0, 1, &first, &n);
    tr_data_fill(p->data, first, n, p->x[p->slot], p->y[p->slot]);
    tr_batch_msg *b = tr_msg_new(&tr_batch_type);
    *b = (tr_batch_msg){.hdr = b->hdr, .step = p->step++, .mb = 0, .count = p->count,
                        .first = first, .x = p->x[p->slot], .y = p->y[p->slot],
                        .x_bytes = (size_t)p->count * tr_data_x_bytes(p->data),
                        .y_bytes = (size_t)p->count * tr_data_y_bytes(p->data)};
    tr_edge_send(p->out, b);
    p->slot = (p->slot + 1) % p->ring;
  }
  if (p->step == tr_graph_end_step(p->g) && !p->done) {
    p->done = true;
    tr_graph_done(p->g, self);
  }
  return 0;
}
static int producer_start(tr_actor *self) { return produce(self, NULL); }
static const tr_behaviour producer_behaviour = {.name = "my-loader", .start = producer_start,
                                                .receive = produce};

/* A relay that multiplies every input by `scale` in place and passes the batch on; its way
 * out notifies it of each release, which it passes back to the loader. */
typedef struct relay {
  tr_edge *in, *out;
  size_t floats; /* of a batch's inputs */
  float scale;
  int64_t batches;
} relay;

static int relay_receive(tr_actor *self, tr_msg *msg) {
  relay *r = tr_actor_state(self);
  if (msg->type == &tr_batch_type) {
    tr_batch_msg *b = (tr_batch_msg *)msg;
    float *x = b->x;
    for (size_t i = 0; i < r->floats; i++) x[i] *= r->scale;
    r->batches++;
    if (!tr_edge_acquire(r->out))
      return tr_actor_fail(self, TR_ESTATE, "no credit: the relay's edges differ");
    tr_edge_send(r->out, tr_batch_forward(b));
  } else if (msg->type == &tr_edge_credit_type) {
    tr_edge_release(r->in, ((tr_edge_credit_msg *)msg)->count);
  }
  return 0;
}
static const tr_behaviour relay_behaviour = {.name = "relay", .receive = relay_receive};

/* A relay that keeps every batch: the stage after it waits for ever. */
static int swallow(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour swallower_behaviour = {.name = "swallower", .receive = swallow};

/* An observer that keeps the reports it hears. */
enum { MAX_REPORTS = 64 };
typedef struct observer {
  tr_graph *g;
  tr_edge *in;
  tr_report_msg got[MAX_REPORTS];
  int n;
} observer;

static int observer_receive(tr_actor *self, tr_msg *msg) {
  observer *o = tr_actor_state(self);
  if (msg->type != &tr_report_type) return 0;
  const tr_report_msg *r = (const tr_report_msg *)msg;
  if (o->n < MAX_REPORTS) o->got[o->n++] = *r;
  tr_edge_release(o->in, 1);
  if (r->last) tr_graph_done(o->g, self);
  return 0;
}
static const tr_behaviour observer_behaviour = {.name = "observer", .receive = observer_receive};

/* ---- a single-stage simplenet job, wired by hand ------------------------------------------- */

typedef struct run {
  union {
    simplenet_job base;
    struct {
      SIMPLENET_JOB_FIELDS;
    };
  };
  tr_actor *stage, *coordinator;
} run;

static void open_run(run *r, const char *checkpoint) {
  memset(r, 0, sizeof *r);
  tr_job_config c = tr_job_defaults();
  c.checkpoint.path = checkpoint ? path(checkpoint) : NULL;
  simplenet_job_open(&r->base, "host:1", SEED, &(tr_system_config){.watchdog_ms = 20000}, c);
  assert_int_equal(tr_job_add_stage(r->j, 0, 0, tr_device_list_at(r->devs, 0), &r->stage), 0);
  assert_int_equal(tr_job_add_coordinator(r->j, &r->coordinator), 0);
}

static void run_ok(run *r, tr_train_result *result) {
  if (tr_graph_run(r->g, 0, STEPS, 0)) fail_msg("%s", tr_graph_error(r->g));
  tr_job_result(r->j, result);
  assert_int_equal(result->steps, STEPS);
}

static void close_run(run *r) { simplenet_job_close(&r->base); }

/* The built-in loader's run, for reference. */
static void with_loader(const char *checkpoint, tr_train_result *result) {
  run r;
  open_run(&r, checkpoint);
  tr_actor *loader;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_job_feed(r.j, loader, r.stage, r.stage), 0);
  run_ok(&r, result);
  close_run(&r);
}

/* The user's loader in the run, its ring as deep as its edge's credits. */
static void add_producer(run *r, producer *p, int count) {
  *p = (producer){.g = r->g, .data = r->data, .global_batch = tr_model_batch(r->model),
                  .count = count};
  tr_actor *a;
  assert_int_equal(tr_graph_add(r->g, &(tr_actor_config){.name = "my-loader", .kind = TR_ACTOR_LOOP,
                                                         .behaviour = &producer_behaviour, .state = p},
                                &a),
                   0);
  assert_int_equal(tr_job_connect_batches(r->j, a, r->stage, TR_BATCH_INPUTS | TR_BATCH_TARGETS,
                                          &p->out),
                   0);
  p->ring = tr_edge_credits(p->out);
  p->x = calloc((size_t)p->ring, sizeof *p->x);
  p->y = calloc((size_t)p->ring, sizeof *p->y);
  for (int i = 0; i < p->ring; i++) {
    p->x[i] = malloc((size_t)p->global_batch * tr_data_x_bytes(r->data));
    p->y[i] = malloc((size_t)p->global_batch * tr_data_y_bytes(r->data));
  }
}

static void free_producer(producer *p) {
  for (int i = 0; i < p->ring; i++) free(p->x[i]), free(p->y[i]);
  free(p->x);
  free(p->y);
}

static void assert_same(const char *a, const char *b, bool same, const char *what) {
  char worst[128];
  const double d = params_difference(path(a), path(b), worst, sizeof worst);
  if (same ? d != 0 : !(d > 1e-3 && isfinite(d)))
    fail_msg("%s: the parameters differ by %.3g (tensor %s)", what, d, worst);
}

/* ---- the tests ------------------------------------------------------------------------------- */

static void a_producer_of_the_users_trains_what_the_loader_would(void **state) {
  (void)state;
  tr_train_result loaded, own;
  with_loader("loader.safetensors", &loaded);

  run r;
  open_run(&r, "own.safetensors");
  producer p;
  add_producer(&r, &p, tr_model_batch(r.model));
  run_ok(&r, &own);
  close_run(&r);
  free_producer(&p);
  assert_same("own.safetensors", "loader.safetensors", true, "a producer of the user's");
  assert_memory_equal(&own.final_loss, &loaded.final_loss, sizeof own.final_loss);
}

/* An identity relay changes nothing and sees every batch; one that doubles the inputs
 * trains another model. */
static void a_relay_before_the_stage_sees_and_can_change_every_batch(void **state) {
  (void)state;
  tr_train_result plain;
  with_loader("plain.safetensors", &plain);
  const float scales[2] = {1.0f, 2.0f};
  for (int k = 0; k < 2; k++) {
    run r;
    open_run(&r, k ? "doubled.safetensors" : "relayed.safetensors");
    relay rl = {.scale = scales[k],
                .floats = (size_t)tr_job_microbatch_samples(r.j) * tr_model_input_bytes(r.model) /
                          sizeof(float)};
    tr_actor *loader, *relay_actor;
    assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
    assert_int_equal(tr_graph_add_service(r.g, &(tr_actor_config){.name = "relay",
                                                                   .kind = TR_ACTOR_PINNED,
                                                                   .behaviour = &relay_behaviour,
                                                                   .state = &rl},
                                          &relay_actor),
                     0);
    /* loader → relay: inputs; relay → stage: inputs (told of each release); loader → stage:
     * targets, directly */
    assert_int_equal(tr_job_connect_batches(r.j, loader, relay_actor, TR_BATCH_INPUTS, &rl.in), 0);
    assert_int_equal(tr_job_connect_batches(r.j, relay_actor, r.stage,
                                            TR_BATCH_INPUTS | TR_BATCH_NOTIFY, &rl.out),
                     0);
    assert_int_equal(tr_job_connect_batches(r.j, loader, r.stage, TR_BATCH_TARGETS, NULL), 0);
    tr_train_result result;
    run_ok(&r, &result);
    close_run(&r);
    if (rl.batches < STEPS) fail_msg("the relay passed %lld batches of %d", (long long)rl.batches, STEPS);
  }
  assert_same("relayed.safetensors", "plain.safetensors", true, "an identity relay");
  assert_same("doubled.safetensors", "plain.safetensors", false, "a relay doubling the inputs");
}

static void an_observer_hears_every_n_steps_and_the_end(void **state) {
  (void)state;
  enum { EVERY = 7 };
  run r;
  open_run(&r, NULL);
  tr_actor *loader, *obs_actor;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_job_feed(r.j, loader, r.stage, r.stage), 0);
  observer *o = calloc(1, sizeof *o);
  o->g = r.g;
  assert_int_equal(tr_graph_add(r.g, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                        .behaviour = &observer_behaviour, .state = o},
                                &obs_actor),
                   0);
  assert_int_equal(tr_job_observe(r.j, obs_actor, EVERY, &o->in), 0);
  tr_train_result result;
  run_ok(&r, &result);
  close_run(&r);
  if (o->n < 2) fail_msg("%d reports", o->n);
  int64_t covered = 0;
  for (int i = 0; i < o->n; i++) {
    const tr_report_msg *m = &o->got[i];
    covered += m->steps;
    if (m->step != covered || m->last != (i == o->n - 1) ||
        (!m->last && (m->steps == 0 || m->steps % EVERY)) || m->samples != m->step * 64 ||
        (m->steps && !(isfinite(m->loss) && m->loss > 0)) || !(m->seconds >= 0))
      fail_msg("report %d: step %lld, %lld steps, loss %g, samples %lld, last %d", i,
               (long long)m->step, (long long)m->steps, m->loss, (long long)m->samples, m->last);
  }
  assert_int_equal(covered, STEPS);
  /* the loss each reports is the mean of its steps': the run's falls */
  if (!(o->got[o->n - 1].last_loss < o->got[0].loss))
    fail_msg("the loss went from %g to %g", o->got[0].loss, o->got[o->n - 1].last_loss);
  free(o);
}

/* A user's MNIST-sized classifier, 784 -> 512 -> 256 -> 128 -> 10 with cross-entropy, on the
 * data it gets by default (a teacher's classes; it once got Gaussian float targets, 40
 * bytes where its stage wanted 4: a crash): it learns under single, pipeline and dp, and
 * the three end alike. AdamW's eps is 1e-4, not 1e-8: with a tiny eps an element's first
 * updates are the sign of its gradient, so a gradient near zero turns the last bit of
 * a sum, which micro-batches and replicas add in other orders (and oneDNN's kernels block
 * differently by rows), into a whole step of lr; 150 steps of that left pipeline 10% away
 * from single where the GEMMs are right to 1e-6. */
static const tr_layer_spec mnist_layers[] = {
    LINEAR(784, 512, 1), RELU(512), LINEAR(512, 256, 1), RELU(256), LINEAR(256, 128, 1),
    RELU(128), LINEAR(128, 10, 1),
};
static const tr_model_spec mnist = {.name = "mnist", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY,
                                    .nlayers = 7, .layers = mnist_layers, .batch = 64,
                                    .optim = {.kind = TR_OPTIM_ADAMW, .lr = 1e-3f, .beta1 = 0.9f,
                                              .beta2 = 0.999f, .eps = 1e-4f}};

static void a_users_classifier_learns_under_single_pipeline_and_dp(void **state) {
  (void)state;
  const layout_case layouts[] = {{TR_STRATEGY_SINGLE, "host:1", -1, 0, 0, 0},
                                 PIPELINE("host:2", TR_SCHEDULE_1F1B, 4), DP("host:2")};
  const char *files[] = {"mnist-single.safetensors", "mnist-pipeline.safetensors",
                         "mnist-dp.safetensors"};
  for (int k = 0; k < 3; k++) {
    tr_train_options o = tr_train_defaults();
    o.spec = &mnist;
    o.steps = 150;
    o.job.seed = 2;
    o.job.checkpoint.path = path(files[k]);
    o = with_layout(o, &layouts[k]);
    tr_train_result r;
    char err[512];
    if (tr_train_run(&o, &r, err, sizeof err)) fail_msg("%s: %s", o.devices, err);
    /* ln 10 = 2.30 at the start; measured on one device: 2.32 -> 1.0 */
    if (!(r.initial_loss > 2.0 && r.final_loss < 0.6 * r.initial_loss))
      fail_msg("%s on %s: loss %.3f -> %.3f", r.strategy, r.devices, r.initial_loss, r.final_loss);
  }
  for (int k = 1; k < 3; k++) {
    char worst[128];
    const double d = params_difference(path(files[k]), path(files[0]), worst, sizeof worst);
    if (!(d < 1e-5)) fail_msg("%s differs from single by %.3g (%s)", files[k], d, worst);
  }
}

/* A relay that never passes a batch on leaves every actor waiting: the watchdog stops the run
 * as idle but not done, naming the actors and printing the graph's edges, with the relay's
 * way out empty and its way in full. */
static void a_graph_left_waiting_is_stopped_and_printed(void **state) {
  (void)state;
  run r;
  memset(&r, 0, sizeof r);
  char err[512];
  assert_int_equal(tr_model_simplenet(&r.model), 0);
  assert_int_equal(tr_device_list_open(&r.devs, "host:1", err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&r.data, r.model, SEED, NULL, NULL, err, sizeof err), 0);
  assert_int_equal(tr_graph_new(&r.g, &(tr_system_config){.watchdog_ms = 300}), 0);
  tr_job_config c = tr_job_defaults();
  c.model = r.model;
  c.data = r.data;
  c.layout.prefetch = 4;
  assert_int_equal(tr_job_new(&r.j, r.g, &c, err, sizeof err), 0);
  assert_int_equal(tr_job_add_stage(r.j, 0, 0, tr_device_list_at(r.devs, 0), &r.stage), 0);
  assert_int_equal(tr_job_add_coordinator(r.j, &r.coordinator), 0);
  tr_actor *loader, *relay_actor;
  assert_int_equal(tr_job_add_loader(r.j, 0, &loader), 0);
  assert_int_equal(tr_graph_add_service(r.g, &(tr_actor_config){.name = "swallower",
                                                                 .kind = TR_ACTOR_LOOP,
                                                                 .behaviour = &swallower_behaviour},
                                        &relay_actor),
                   0);
  assert_int_equal(tr_job_connect_batches(r.j, loader, relay_actor, TR_BATCH_INPUTS, NULL), 0);
  assert_int_equal(tr_job_connect_batches(r.j, relay_actor, r.stage,
                                          TR_BATCH_INPUTS | TR_BATCH_NOTIFY, NULL), 0);
  assert_int_equal(tr_job_connect_batches(r.j, loader, r.stage, TR_BATCH_TARGETS, NULL), 0);
  const uint64_t t0 = tr_now_ns();
  assert_int_equal(tr_graph_run(r.g, 0, STEPS, 0), TR_ETIMEDOUT);
  const double took = (double)(tr_now_ns() - t0) / 1e9;
  const char *e = tr_graph_error(r.g);
  const char *want[] = {"idle but not done", "'stage0'", "'loader'", "'swallower'",
                        "edge loader -> swallower 'inputs' (tr_batch_msg): 4 of 4 in flight",
                        "edge swallower -> stage0 'inputs' (tr_batch_msg): 0 of 4 in flight"};
  for (size_t k = 0; k < sizeof want / sizeof *want; k++)
    if (!strstr(e, want[k])) fail_msg("the error lacks \"%s\": %s", want[k], e);
  if (!(took >= 0.3 && took < 5)) fail_msg("the stuck run stopped after %.2f s", took);
  close_run(&r);
}

static void data_of_other_sizes_than_the_model_is_refused_by_name(void **state) {
  (void)state;
  tr_model *m;
  char err[512];
  assert_int_equal(tr_model_new(&m, &mnist, err, sizeof err), 0);
  tr_data *d; /* ten float targets per sample, where the model takes one int32 label */
  tr_data_config dc = {.kind = TR_DATA_GAUSSIAN, .seed = 1, .in = 784, .out = 10};
  assert_int_equal(tr_data_open(&d, &dc, err, sizeof err), 0);
  tr_graph *g;
  assert_int_equal(tr_graph_new(&g, NULL), 0);
  tr_job_config c = tr_job_defaults();
  c.model = m;
  c.data = d;
  tr_job *j;
  assert_int_equal(tr_job_new(&j, g, &c, err, sizeof err), TR_EINVAL);
  if (!strstr(err, "40") || !strstr(err, " 4") || !strstr(err, "mnist"))
    fail_msg("the error does not name both sizes: '%s'", err);
  tr_graph_free(g);
  tr_data_close(d);
  tr_model_free(m);
}

static void a_batch_of_the_wrong_size_stops_the_run_naming_its_producer(void **state) {
  (void)state;
  run r;
  open_run(&r, NULL);
  producer p;
  add_producer(&r, &p, tr_model_batch(r.model) / 2);
  assert_int_equal(tr_graph_run(r.g, 0, STEPS, 0), TR_EINVAL);
  const char *err = tr_graph_error(r.g);
  if (!strstr(err, "my-loader") || !strstr(err, "32 samples") || !strstr(err, "64"))
    fail_msg("the error does not name the producer and both sizes: '%s'", err);
  close_run(&r);
  free_producer(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_producer_of_the_users_trains_what_the_loader_would),
      cmocka_unit_test(a_relay_before_the_stage_sees_and_can_change_every_batch),
      cmocka_unit_test(an_observer_hears_every_n_steps_and_the_end),
      cmocka_unit_test(a_users_classifier_learns_under_single_pipeline_and_dp),
      cmocka_unit_test(a_graph_left_waiting_is_stopped_and_printed),
      cmocka_unit_test(data_of_other_sizes_than_the_model_is_refused_by_name),
      cmocka_unit_test(a_batch_of_the_wrong_size_stops_the_run_naming_its_producer),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
