/* tensor_group.c — a job's tensor groups (tensor_group.h): the members' models, made once
 * per job, and each group's comms. */
#include <stdlib.h>
#include <string.h>

#include "tensor_group.h"

int tr__tensor_models_open(const tr_job_config *c, tr_model ***out, char *err, size_t n) {
  (void)err;
  (void)n;
  *out = NULL;
  if (c->layout.tensor <= 1) return 0;
  /* until tr_model_shard splits layers, every member holds the model whole (and computes
   * what single does) */
  return 0;
}

void tr__tensor_models_close(tr_model **models, int T) {
  for (int t = 0; models && t < T; t++) tr_model_free(models[t]);
  free(models);
}

int tr__tensor_group_open(tr__tensor_group *g, tr_device *const *devs, int n, char *err,
                          size_t err_size) {
  (void)devs;
  (void)err;
  (void)err_size;
  memset(g, 0, sizeof *g);
  g->n = n;
  return 0;
}

void tr__tensor_group_close(tr__tensor_group *g) {
  (void)g;
}
