/* dropout.c — the dropout layer kind (inverted dropout): in training each element is kept
 * with probability 1 - p and scaled by 1/(1-p); in evaluation the identity. The mask is
 * drawn again in backward rather than kept: it is a pure function of (the layer's key, the
 * element's sample and place), so it costs no activation memory. */
#include "layers_impl.h"

tr_layer_spec tr_layer_dropout(int width, float p) {
  return (tr_layer_spec){.type = &tr_layer_dropout_type, .in = width, .out = width, .p = p};
}

static int check(const tr_layer_spec *l, int in, char *err, size_t err_size) {
  TR__TRY(tr__check_same_width(l, in, err, err_size));
  if (l->p >= 0.0f && l->p < 1.0f) return 0;
  return tr_errorf(err, err_size, TR_EINVAL, "p %g must lie in [0,1)", (double)l->p);
}

static int identity(const tr_layer_ctx *c) { return !c->training || c->l->p == 0.0f; }

/* to (N,C) = the micro-batch's mask: element e of sample b is number (first + b) C T + e of
 * the layer's stream, wherever the sample lands. A member of a tensor group (l->part of
 * l->parts, between a column- and a row-parallel linear layer) holds columns [k C, (k+1) C)
 * of every row of the whole activation, and draws the whole layer's mask there, row by row,
 * so every layout drops what a single device drops. */
static int mask(const tr_layer_ctx *c, float *to) {
  const size_t C = (size_t)c->l->in, per_sample = (size_t)c->T * C;
  if (c->first_sample == TR_SAMPLES_UNKNOWN)
    return tr_layer_fail(c, TR_EINVAL, "training needs the samples' positions "
                                       "(tr_stage_set_samples)");
  const float scale = (float)(1.0 / (1.0 - (double)c->l->p));
  if (c->l->parts <= 1)
    return tr_dropout_mask(c->s, to, (size_t)c->B * per_sample, c->l->p, scale, c->seed,
                           c->first_sample * per_sample);
  const size_t whole = C * (size_t)c->l->parts, rows = (size_t)c->B * c->T;
  for (size_t r = 0, row0 = c->first_sample * (size_t)c->T; r < rows; r++)
    TR__TRY(tr_dropout_mask(c->s, to + r * C, C, c->l->p, scale, c->seed,
                            (row0 + r) * whole + (size_t)c->l->part * C));
  return 0;
}

static int forward(const tr_layer_ctx *c) {
  const size_t n = tr__numel(c, c->l->in);
  if (identity(c)) return tr_memcpy(c->s, c->act, c->x, n * sizeof(float), TR_COPY_D2D);
  TR__TRY(mask(c, c->act));
  return tr_mul(c->s, c->act, c->act, c->x, n);
}

static int backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
  const size_t n = tr__numel(c, c->l->in);
  if (!dinp) return 0;
  if (identity(c)) return tr_memcpy(c->s, dinp, dout, n * sizeof(float), TR_COPY_D2D);
  TR__TRY(mask(c, dinp));
  return tr_mul(c->s, dinp, dinp, dout, n);
}

/* its masks depend on the samples (identity when p is 0) */
static int draws(const tr_layer_spec *l) { return l->p > 0.0f; }

const tr_layer_type tr_layer_dropout_type = {
    .name = "dropout", .check = check, .forward = forward, .backward = backward, .draws = draws};
