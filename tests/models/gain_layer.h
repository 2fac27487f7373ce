/* gain_layer.h — a layer kind written outside the library, as tr_layer_type.h's example:
 * y = g x with one learned gain g, its backward whole (no split halves). The tests of layer
 * kinds and of split backward and recomputation share it. */
#ifndef TR_TEST_GAIN_LAYER_H
#define TR_TEST_GAIN_LAYER_H

#include <stdio.h>

#include "troupe.h"

static int gain_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
  (void)l, (void)T;
  return tr_tensor_list_add(t, "gain", 1, 0, TR_INIT_ONES, 0);
}

static size_t gain_scratch(const tr_layer_spec *l, int B, int T) { return (size_t)B * T * l->in; }

static int gain_forward(const tr_layer_ctx *c) {
  const size_t n = (size_t)c->B * c->T * c->l->in;
  int rc = tr_memcpy(c->s, c->act, c->x, n * sizeof(float), TR_COPY_D2D);
  return rc ? rc : tr_scale_dev(c->s, c->act, c->p[0], n);
}

static int gain_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const size_t n = (size_t)c->B * c->T * c->l->in;
  int rc = tr_mul(c->s, c->scratch, c->x, dout, n);
  if (!rc) rc = tr_sum(c->s, c->g[0], c->scratch, n, 1);
  if (!rc && dinp) rc = tr_memcpy(c->s, dinp, dout, n * sizeof(float), TR_COPY_D2D);
  return rc || !dinp ? rc : tr_scale_dev(c->s, dinp, c->p[0], n);
}

static int gain_check(const tr_layer_spec *l, int in, char *err, size_t size) {
  return l->out == in ? 0 : (snprintf(err, size, "out must equal in"), TR_EINVAL);
}

static const tr_layer_type gain_type = {.name = "gain", .check = gain_check,
                                        .tensors = gain_tensors, .scratch_floats = gain_scratch,
                                        .forward = gain_forward, .backward = gain_backward};

#endif
