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
  tr_train_result r;
  char err[1024];
  if (tr_train_run(&o, &r, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  printf("trained %lld steps on %s: loss %.4f -> %.4f, %.0f samples/s\n", (long long)r.steps,
         r.devices, r.initial_loss, r.final_loss, r.samples_per_s);
  return r.final_loss < 0.1 * r.initial_loss ? 0 : 1; /* it learned */
}
