/* figures.c — a run's figures read by key through the installed headers alone
 * (tools/check-install.sh): trains simplenet for 20 steps on one host device, reads figures
 * by key, walks every figure the result has with its key, unit, type and values, and writes
 * the JSON `troupe train --json` prints into DIR/figures.json. Exits 0 when each reads as
 * its description says.
 *
 *   cc figures.c $(pkg-config --cflags --libs troupe) && ./a.out DIR
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <troupe.h>

/* Every value of figure f, as its type reads; 0, or 1 where one does not read. */
static int read_all(const tr_result *r, const tr_figure *f) {
  for (int i = 0; i < f->count; i++) {
    int64_t n;
    double x;
    const char *s;
    int rc;
    if (f->shape == TR_FIGURE_ONE)
      rc = f->type == TR_FIGURE_TEXT  ? tr_result_text(r, f->key, &s)
           : f->type == TR_FIGURE_INT ? tr_result_int(r, f->key, &n)
                                      : tr_result_real(r, f->key, &x);
    else
      rc = f->type == TR_FIGURE_INT ? tr_result_int_at(r, f->key, i, &n)
                                    : tr_result_real_at(r, f->key, i, &x);
    if (rc) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = 20;
  tr_result *r;
  tr_error e;
  if (tr_train_run_result(&o, &r, &e)) {
    fprintf(stderr, "figures: %s\n", e.message);
    tr_result_free(r);
    return 1;
  }
  int64_t steps = 0;
  double rate = NAN, loss = NAN, utilization = NAN;
  const char *model = NULL;
  int bad = tr_result_int(r, "steps", &steps) || tr_result_real(r, "samples_per_s", &rate) ||
            tr_result_real(r, "final_loss", &loss) || tr_result_text(r, "model", &model) ||
            tr_result_real_at(r, "utilization", 0, &utilization);
  bad |= steps != 20 || !(rate > 0) || !isfinite(loss) || strcmp(model, "simplenet") != 0;
  printf("%s: %lld steps, %.0f samples/s, final loss %.4g, utilization %.2f\n", model,
         (long long)steps, rate, loss, utilization);
  int figures = 0, null = 0;
  for (int k = 0; k < tr_result_figure_count(r); k++) {
    tr_figure f;
    bad |= tr_result_figure_at(r, k, &f) != 0 || read_all(r, &f);
    figures++;
    null += f.null;
  }
  printf("%d figures, %d of them none in this run\n", figures, null);
  char path[4096];
  snprintf(path, sizeof path, "%s/figures.json", argc > 1 ? argv[1] : ".");
  FILE *json = fopen(path, "w");
  bad |= json == NULL || tr_result_json(r, json) != 0;
  if (json) bad |= fclose(json) != 0;
  tr_result_free(r);
  return bad || figures == 0;
}
