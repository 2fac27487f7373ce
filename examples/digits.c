/* digits.c — a real data set: scikit-learn's handwritten digits (1,797 images of 8×8 pixels,
 * ten classes), split at random into 80% to train on and 20% held out, and a small
 * classifier trained three ways — on one device, as a two-stage pipeline of four micro-
 * batches, data-parallel on two devices — each evaluated on the held-out images as it
 * trains, by the library (tr_job_config.eval).
 *
 *   build/examples/digits [FILE]     # run from the repository root
 *
 * FILE is digits.csv.gz (64 pixel values 0..16, then the class, per line). Without it the
 * program looks for data/digits.csv.gz and for the copy an installed python3-sklearn has,
 * then fetches the file with tools/fetch-digits.sh (Debian's package, downloaded and
 * unpacked, not installed). Exit 0 once every layout reached 95% held-out accuracy (PyTorch's
 * median on such splits is 96.7%: tools/reference-digits.py), the same in each; 77
 * (a skipped test) when the file could not be had, saying how to get it; 1 otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <troupe.h>
#include <zlib.h>

enum { ROWS = 1797, PIXELS = 64, CLASSES = 10, STEPS = 600, EVERY = 150 };

typedef struct digits {
  float x[ROWS][PIXELS]; /* pixels scaled to [0, 1] */
  int32_t y[ROWS];
} digits;

/* The whole file, checked: ROWS lines of 65 integers, pixels in 0..16, classes in 0..9.
 * 0, or -1 with err saying where it is not such a file. */
static int read_digits(const char *path, digits *d, char *err, size_t n) {
  gzFile f = gzopen(path, "rb");
  if (f == NULL) return snprintf(err, n, "%s: cannot be opened", path), -1;
  char line[1024];
  int rows = 0, bad = 0; /* bad: the 1-based place of a value that does not belong */
  for (; !bad && gzgets(f, line, sizeof line); rows++) {
    char *p = line, *end;
    for (int k = 0; k <= PIXELS && !bad; k++, p = end + (*end == ',')) {
      const long v = strtol(p, &end, 10);
      if (end == p || rows >= ROWS || v < 0 || v > (k < PIXELS ? 16 : CLASSES - 1)) bad = k + 1;
      else if (k < PIXELS) d->x[rows][k] = (float)v / 16.0f;
      else d->y[rows] = (int32_t)v;
    }
  }
  gzclose(f);
  if (bad) return snprintf(err, n, "%s: line %d, value %d: not a digits file", path, rows, bad), -1;
  if (rows != ROWS) return snprintf(err, n, "%s: %d lines, not %d", path, rows, ROWS), -1;
  return 0;
}

/* The data source: sample i is image i (of ROWS: a finite source, which tr_data_split cuts). */
static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
  const digits *d = arg;
  for (size_t k = 0; k < count; k++) {
    const size_t i = (size_t)((first + k) % ROWS);
    memcpy((float *)x + k * PIXELS, d->x[i], sizeof d->x[i]);
    if (y) ((int32_t *)y)[k] = d->y[i];
  }
  return 0;
}

static const char *find_file(int argc, char **argv) {
  static const char *const places[] = {
      "data/digits.csv.gz",
      "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"};
  struct stat st;
  if (argc > 1) return argv[1];
  for (int k = 0; k < 2; k++)
    if (stat(places[k], &st) == 0) return places[k];
  if (stat("tools/fetch-digits.sh", &st) == 0 && system("tools/fetch-digits.sh data >/dev/null") == 0)
    return places[0];
  return NULL;
}

/* Each held-out evaluation as it comes (the reports of tr_train_options.observe). */
static void observe(void *arg, const tr_report_msg *r) {
  int64_t *seen = arg;
  if (r->eval_step < 0 || r->eval_step == *seen) return;
  *seen = r->eval_step;
  printf("  step %4lld: held-out loss %.4f, accuracy %.1f%%\n", (long long)r->eval_step,
         r->eval_loss, 100 * r->eval_accuracy);
}

int main(int argc, char **argv) {
  const char *path = find_file(argc, argv);
  if (path == NULL) {
    fprintf(stderr, "digits: no digits.csv.gz: give its path, or get it with "
                    "tools/fetch-digits.sh (apt-get download python3-sklearn; dpkg-deb -x "
                    "the .deb; the file is sklearn/datasets/data/digits.csv.gz)\n");
    return 77;
  }
  static digits set;
  char err[1024] = "";
  if (read_digits(path, &set, err, sizeof err)) {
    fprintf(stderr, "digits: %s\n", err);
    return 1;
  }
  const tr_layer_spec layers[] = {tr_layer_linear(PIXELS, 128, 1), tr_layer_relu(128),
                                  tr_layer_linear(128, 64, 1), tr_layer_relu(64),
                                  tr_layer_linear(64, CLASSES, 1)};
  const tr_model_spec spec = {.name = "digits", .ctx = 1, .loss = TR_LOSS_CROSSENTROPY,
                              .nlayers = 5, .layers = layers, .batch = 64,
                              .optim = tr_optim_defaults(TR_OPTIM_ADAMW, 2e-3f)};
  const tr_data_callback cb = {.name = "digits", .x_bytes = sizeof set.x[0],
                               .y_bytes = sizeof set.y[0], .fill = fill, .arg = &set,
                               .rows = ROWS};
  const struct {
    const char *name, *devices;
    tr_strategy strategy;
    int microbatches;
  } layouts[3] = {{"one device", "host:1", TR_STRATEGY_SINGLE, 1},
                  {"a 2-stage pipeline of 4 micro-batches", "host:2", TR_STRATEGY_PIPELINE, 4},
                  {"data-parallel on 2 devices", "host:2", TR_STRATEGY_DP, 1}};
  tr_data *all = NULL, *train = NULL, *held = NULL;
  double loss[3], accuracy[3]; /* held out, after the last step: the runs' "eval.*" figures */
  int rc = tr_data_open_callback(&all, &cb, err, sizeof err);
  if (!rc) rc = tr_data_split(all, 0.2, 1, &train, &held, err, sizeof err);
  if (!rc)
    printf("digits: %lld images to train on, %lld held out\n", (long long)tr_data_rows(train),
           (long long)tr_data_rows(held));
  for (int k = 0; k < 3 && !rc; k++) {
    int64_t seen = -1;
    tr_train_options o = tr_train_defaults();
    o.spec = &spec;
    o.strategy = layouts[k].strategy;
    o.devices = layouts[k].devices;
    o.steps = STEPS;
    o.job.data = train;
    o.job.layout.microbatches = layouts[k].microbatches;
    o.job.eval = (tr_eval_config){.data = held, .every = EVERY}; /* every held-out row */
    o.observe = observe;
    o.observe_arg = &seen;
    printf("%s:\n", layouts[k].name);
    tr_result *r;
    tr_error e;
    rc = tr_train_run_result(&o, &r, &e);
    snprintf(err, sizeof err, "%s", e.message);
    if (!rc) tr_result_real(r, "eval.loss", &loss[k]);
    if (!rc) tr_result_real(r, "eval.accuracy", &accuracy[k]);
    tr_result_free(r);
  }
  tr_data_close(held);
  tr_data_close(train);
  tr_data_close(all);
  if (rc) {
    fprintf(stderr, "digits: %s\n", err);
    return 1;
  }
  /* Each learned, and as on one device: every layout trains the same model (dp sums the
   * replicas' gradients in another order than one device sums the batch's, a rounding
   * apart that 600 steps of Adam carry to about 1e-4 of the loss). */
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    const bool alike = fabs(loss[k] - loss[0]) <= 1e-3 * loss[0];
    printf("%-40s held-out accuracy %.1f%% (loss %.6f)%s\n", layouts[k].name, 100 * accuracy[k],
           loss[k], alike ? "" : ", NOT AS ON ONE DEVICE");
    ok &= accuracy[k] >= 0.95 && alike;
  }
  return ok ? 0 : 1;
}
