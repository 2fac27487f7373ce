/* custom_pipeline.c — a classifier of 28×28 images composed from parts of its own: data it
 * writes as NumPy arrays, a fifth of it held out; a layer kind it defines; an actor that
 * normalises the inputs between the loader and the first stage (the held-out batches pass
 * through it too); and an actor that follows the run's reports every 25 steps, with the
 * library's evaluation on the held-out images in them. It trains three ways — on one
 * device, as a two-stage pipeline of four micro-batches, and data-parallel on two devices —
 * and checks that each learns and that the three agree, as they must: every layout trains
 * the single device's model.
 *
 * Run it as `custom_pipeline [DIR]` (the .npy files go to DIR; default: a new directory in
 * /tmp). It exits 0 once all three runs reached 90% held-out accuracy alike.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <troupe.h>

enum { SAMPLES = 4096, PIXELS = 784, CLASSES = 10, STEPS = 200, EVERY = 25 };

/* ---- the data: images of ten classes, each a fixed pattern under noise, as MNIST's
 * shapes and types: x (N, 784) uint8, y (N,) uint8 ---------------------------------------- */
static int write_data(const char *x_path, const char *y_path, char *err, size_t n) {
  static uint8_t x[SAMPLES][PIXELS], y[SAMPLES], pattern[CLASSES][PIXELS];
  srand(7);
  for (int c = 0; c < CLASSES; c++)
    for (int p = 0; p < PIXELS; p++) pattern[c][p] = (uint8_t)(rand() % 28);
  for (int i = 0; i < SAMPLES; i++) {
    y[i] = (uint8_t)(rand() % CLASSES);
    for (int p = 0; p < PIXELS; p++) x[i][p] = (uint8_t)(pattern[y[i]][p] + rand() % 208);
  }
  const int64_t xs[2] = {SAMPLES, PIXELS}, ys[1] = {SAMPLES};
  int rc = tr_data_write_npy(x_path, TR_DTYPE_U8, 2, xs, x, err, n);
  return rc ? rc : tr_data_write_npy(y_path, TR_DTYPE_U8, 1, ys, y, err, n);
}

/* ---- a layer kind of our own: the logits times one learned scale, as CLIP learns its
 * temperature. Written with tr_device.h's ops, so it runs on host devices and GPUs. ------ */
static int scale_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)l, (void)T;
  return tr_tensor_list_add(t, "scale", 1, 0, TR_INIT_ONES, 0);
}
static size_t scale_scratch(const tr_layer_spec *l, int B, int T) { return (size_t)B * T * l->in; }
static int scale_forward(const tr_layer_ctx *c) { /* out = s x */
  const size_t n = (size_t)c->B * c->T * c->l->in;
  int rc = tr_memcpy(c->s, c->act, c->x, n * sizeof(float), TR_COPY_D2D);
  return rc ? rc : tr_scale_dev(c->s, c->act, c->p[0], n);
}
static int scale_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const size_t n = (size_t)c->B * c->T * c->l->in;
  int rc = tr_mul(c->s, c->scratch, c->x, dout, n); /* ds += Σ x dout */
  if (!rc) rc = tr_sum(c->s, c->g[0], c->scratch, n, 1);
  if (!rc && dinp) rc = tr_memcpy(c->s, dinp, dout, n * sizeof(float), TR_COPY_D2D);
  return rc || !dinp ? rc : tr_scale_dev(c->s, dinp, c->p[0], n); /* dx = s dout */
}
static const tr_layer_type logit_scale = {.name = "logit_scale", .tensors = scale_tensors,
                                          .scratch_floats = scale_scratch,
                                          .forward = scale_forward, .backward = scale_backward};

/* ---- an actor between the loader and the first stage: pixels 0..255 to [-1, 1], in place,
 * then the batch goes on; each release the stage sends back is passed on to the loader ---- */
typedef struct normaliser {
  tr_edge *in, *out;
} normaliser;

static int normalise(tr_actor *self, tr_msg *msg) {
  normaliser *n = tr_actor_state(self);
  if (msg->type == &tr_edge_credit_type) {
    tr_edge_release(n->in, ((tr_edge_credit_msg *)msg)->count);
  } else if (msg->type == &tr_batch_type) {
    tr_batch_msg *b = (tr_batch_msg *)msg;
    float *x = b->x;
    for (size_t i = 0; i < (size_t)b->count * PIXELS; i++) x[i] = x[i] / 127.5f - 1.0f;
    if (!tr_edge_acquire(n->out)) return tr_actor_fail(self, TR_ESTATE, "no credit");
    tr_edge_send(n->out, tr_batch_forward(b));
  }
  return 0;
}
static const tr_behaviour normaliser_behaviour = {.name = "normaliser", .receive = normalise};

/* ---- an actor that follows the run from its reports: the training loss, and the held-out
 * loss and accuracy of the evaluation each report brings (tr_job_config.eval) --------------- */
typedef struct follower {
  tr_graph *g;
  tr_edge *in;
  tr_report_msg last;
} follower;

static int follow(tr_actor *self, tr_msg *msg) {
  follower *f = tr_actor_state(self);
  const tr_report_msg *r = (const tr_report_msg *)msg;
  if (msg->type != &tr_report_type) return 0;
  if (r->steps > 0) printf("  step %4lld: loss %.4f\n", (long long)r->step, r->loss);
  if (r->eval_step >= 0 && r->eval_step != f->last.eval_step) /* a new evaluation */
    printf("  held-out after step %lld: loss %.4f, accuracy %.1f%%\n", (long long)r->eval_step,
           r->eval_loss, 100 * r->eval_accuracy);
  f->last = *r;
  tr_edge_release(f->in, 1);
  if (r->last) tr_graph_done(f->g, self); /* its part is over with the run's last report */
  return 0;
}
static const tr_behaviour follower_behaviour = {.name = "follower", .receive = follow};

/* ---- one run: the layout's stages, and per replica a loader whose inputs pass through a
 * normaliser while its targets go straight to the last stage ------------------------------ */
typedef struct layout {
  const char *name, *devices;
  int replicas, stages, microbatches;
} layout;

static int train(const layout *L, const tr_model *m, tr_data *const d[2], follower *f,
                 char *err, size_t n) {
  tr_device_list *devs = NULL;
  tr_graph *g = NULL;
  tr_job *j = NULL;
  tr_job_config c = tr_job_defaults(); /* the model's batch and optimizer */
  c.model = m;
  c.data = d[0];
  c.eval = (tr_eval_config){.data = d[1], .every = EVERY}; /* every held-out image */
  c.layout = (tr_layout_config){.replicas = L->replicas, .stages = L->stages,
                                .microbatches = L->microbatches};
  normaliser norm[2];
  tr_actor *stage[2], *loader, *actor;
  int rc = tr_device_list_open(&devs, L->devices, err, n);
  if (!rc) rc = tr_graph_new(&g, NULL);
  if (!rc) rc = tr_job_new(&j, g, &c, err, n);
  if (!rc) rc = tr_job_add_stages(j, devs, stage);
  for (int r = 0; r < L->replicas && !rc; r++) {
    const tr_actor_config nc = {.name = r ? "normaliser1" : "normaliser0",
                                .kind = TR_ACTOR_PINNED, .behaviour = &normaliser_behaviour,
                                .state = &norm[r]};
    tr_actor *first = stage[r * L->stages], *last = stage[r * L->stages + L->stages - 1];
    rc = tr_job_add_loader(j, r, &loader);
    if (!rc) rc = tr_graph_add_service(g, &nc, &actor); /* no part of its own to finish */
    if (!rc) rc = tr_job_connect_batches(j, loader, actor, TR_BATCH_INPUTS, &norm[r].in);
    if (!rc) rc = tr_job_connect_batches(j, actor, first, TR_BATCH_INPUTS | TR_BATCH_NOTIFY,
                                         &norm[r].out);
    if (!rc) rc = tr_job_connect_batches(j, loader, last, TR_BATCH_TARGETS, NULL);
  }
  *f = (follower){.g = g, .last.eval_step = -1};
  const tr_actor_config fc = {.name = "follower", .kind = TR_ACTOR_LOOP,
                              .behaviour = &follower_behaviour, .state = f};
  if (!rc) rc = tr_job_add_coordinator(j, &actor);
  if (!rc) rc = tr_graph_add(g, &fc, &actor);
  if (!rc) rc = tr_job_observe(j, actor, EVERY, &f->in);
  if (rc && j && tr_job_error(j)[0]) snprintf(err, n, "%s", tr_job_error(j));
  if (!rc && (rc = tr_graph_run(g, 0, STEPS, 0))) snprintf(err, n, "%s", tr_graph_error(g));
  else if (rc && !err[0]) snprintf(err, n, "building the graph: %s", tr_strerror(rc));
  tr_graph_free(g); /* its actors use the job: free it first */
  tr_job_free(j);
  tr_device_list_close(devs);
  return rc;
}

int main(int argc, char **argv) {
  char tmp[] = "/tmp/custom-pipeline-XXXXXX", x_path[512], y_path[512], err[1024] = "";
  const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
  snprintf(x_path, sizeof x_path, "%s/images.npy", dir);
  snprintf(y_path, sizeof y_path, "%s/labels.npy", dir);
  const tr_layer_spec layers[] = {
      tr_layer_linear(PIXELS, 256, 1), tr_layer_relu(256), tr_layer_dropout(256, 0.1f),
      tr_layer_linear(256, 128, 1),    tr_layer_relu(128), tr_layer_linear(128, CLASSES, 1),
      {.type = &logit_scale, .in = CLASSES, .out = CLASSES},
  };
  const tr_model_spec spec = {.name = "digits", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY,
                              .nlayers = 7, .layers = layers, .batch = 64,
                              .optim = tr_optim_defaults(TR_OPTIM_ADAMW, 1e-3f)};
  const layout layouts[3] = {{"one device", "host:1", 1, 1, 1},
                             {"a 2-stage pipeline of 4 micro-batches", "host:2", 1, 2, 4},
                             {"data-parallel on 2 devices", "host:2", 2, 1, 1}};
  tr_model *m = NULL;
  tr_data *all = NULL, *d[2] = {NULL, NULL}; /* to train on, held out */
  follower f[3];
  int rc = write_data(x_path, y_path, err, sizeof err);
  if (!rc) rc = tr_model_new(&m, &spec, err, sizeof err);
  if (!rc) rc = tr_data_open_for(&all, m, 1, x_path, y_path, err, sizeof err);
  if (!rc) rc = tr_data_split(all, 0.2, 1, &d[0], &d[1], err, sizeof err);
  for (int k = 0; k < 3 && !rc; k++) {
    printf("%s, %s:\n", spec.name, layouts[k].name);
    rc = train(&layouts[k], m, d, &f[k], err, sizeof err);
  }
  tr_data_close(d[0]);
  tr_data_close(d[1]);
  tr_data_close(all);
  tr_model_free(m);
  if (rc) {
    fprintf(stderr, "custom_pipeline: %s\n", err);
    return 1;
  }
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    const tr_report_msg *r = &f[k].last, *r0 = &f[0].last;
    const bool learned = r->eval_accuracy >= 0.9;
    const bool alike = fabs(r->eval_loss - r0->eval_loss) <= 1e-4 * r0->eval_loss;
    printf("%s: held-out loss %.4f, accuracy %.1f%%%s%s\n", layouts[k].name, r->eval_loss,
           100 * r->eval_accuracy, learned ? "" : ", NOT LEARNED", alike ? "" : ", NOT AS ON ONE DEVICE");
    ok &= learned && alike;
  }
  return ok ? 0 : 1;
}
