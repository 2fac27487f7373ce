/* single.c — the seed's SimpleNet (10 → 100 → ReLU → 1) trained on one device.
 *
 * The model is spelled out layer by layer and handed to troupe's single-device graph: a
 * loader actor on the event loop keeps batches ready, a stage actor owns the device and
 * trains. Run it as `single [DEVICES]` (default host:1; `cuda:0` on a GPU machine).
 */
#include <stdio.h>

#include <troupe.h>

int main(int argc, char **argv) {
  const tr_layer_spec layers[] = {
      tr_layer_linear(10, 100, 1), /* in, out, with a bias */
      tr_layer_relu(100),
      tr_layer_linear(100, 1, 1),
  };
  const tr_model_spec simplenet = {
      .name = "simplenet", /* its data: x ~ N(0,1)^10, y from a fixed random teacher */
      .ctx = 1,
      .loss = TR_LOSS_MSE,
      .nlayers = 3,
      .layers = layers,
      .batch = 64,
      .optim = tr_optim_defaults(TR_OPTIM_SGD, 0.01f),
  };

  tr_train_options o = tr_train_defaults();
  o.spec = &simplenet;
  o.devices = argc > 1 ? argv[1] : "host:1";
  o.steps = 2000;
  tr_result *r; /* the run's figures, each by its key (tr_result.h) */
  tr_error e;
  if (tr_train_run_result(&o, &r, &e)) {
    fprintf(stderr, "%s\n", e.message);
    tr_result_free(r);
    return 1;
  }
  int64_t steps;
  const char *devices;
  double first, last, rate;
  tr_result_int(r, "steps", &steps);
  tr_result_text(r, "devices", &devices);
  tr_result_real(r, "initial_loss", &first);
  tr_result_real(r, "final_loss", &last);
  tr_result_real(r, "samples_per_s", &rate);
  printf("trained %lld steps on %s: loss %.4f -> %.4f, %.0f samples/s\n", (long long)steps,
         devices, first, last, rate);
  tr_result_free(r);
  return last < 0.1 * first ? 0 : 1; /* it learned */
}
