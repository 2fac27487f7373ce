/* local_fixture.h — what test_local.c and test_local_elastic.c share: a tiny model (Linear,
 * ReLU, Linear) and the data it learns, and the parameters every run starts from (which the
 * float64 references start from too). A test defines IN, HID, OUT, BATCH and MAXP (an enum)
 * and includes specs.h (LINEAR, RELU) and scratch.h (setup, teardown) first. */
#ifndef TR_TEST_LOCAL_FIXTURE_H
#define TR_TEST_LOCAL_FIXTURE_H

#include <math.h>

static const tr_layer_spec tiny_layers[] = {LINEAR(IN, HID, 1), RELU(HID), LINEAR(HID, OUT, 1)};
static const tr_model_spec tiny = {
    .name = "tiny",
    .ctx = 1,
    .loss = TR_LOSS_MSE,
    .nlayers = 3,
    .layers = tiny_layers,
    .batch = BATCH,
    .optim = {.kind = TR_OPTIM_SGD, .lr = 0.1f},
};

/* Sample i: inputs and targets of its own, the same floats wherever they are made. */
static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg;
  for (size_t s = 0; s < count; s++) {
    const double i = (double)(first + s);
    for (int k = 0; k < IN && x; k++) ((float *)x)[s * IN + k] = (float)sin(0.37 * i + 0.91 * k);
    for (int c = 0; c < OUT && y; c++)
      ((float *)y)[s * OUT + c] = (float)(0.5 * cos(0.53 * i + 1.3 * c));
  }
  return 0;
}

static tr_data *data;
static tr_model *model;
static size_t off[4], numel; /* 0.weight, 0.bias, 2.weight, 2.bias in the parameters */
static double init[MAXP];

static int open_all(void **state) {
  if (setup(state)) return -1;
  char err[512];
  const tr_data_callback cb = {.name = "waves", .x_bytes = IN * sizeof(float),
                               .y_bytes = OUT * sizeof(float), .fill = fill};
  tr_device_list *devs = NULL;
  tr_stage *st = NULL;
  if (tr_data_open_callback(&data, &cb, err, sizeof err) ||
      tr_model_new(&model, &tiny, err, sizeof err) ||
      tr_device_list_open(&devs, "host:1", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  /* the parameters every run starts from (seed 1): a whole stage's, as a run's are made */
  tr_stage_config c = tr_stage_defaults(model);
  c.first = 0, c.end = 3, c.batch = BATCH, c.slots = 1, c.global_batch = BATCH, c.seed = 1;
  if (tr_stage_open(&st, model, tr_device_list_at(devs, 0), &c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  numel = tr_stage_info_of(st)->numel;
  float host[MAXP];
  if (numel > MAXP || tr_stage_download(st, TR_STAGE_PARAMS, host) ||
      tr_stream_synchronize(tr_stage_stream(st)))
    return -1;
  for (size_t i = 0; i < numel; i++) init[i] = host[i];
  for (int t = 0; t < 4; t++) off[t] = tr_model_tensor(model, t)->offset;
  tr_stage_close(st);
  tr_device_list_close(devs);
  return 0;
}

static int close_all(void **state) {
  tr_model_free(model);
  tr_data_close(data);
  return teardown(state);
}

#endif
