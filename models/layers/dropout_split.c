/* dropout_split.c — dropout on a member's columns (tensor parallelism): between a column- and
 * a row-parallel linear layer each member holds columns [k w, (k+1) w) of every row of the
 * whole activation (w = the member's width), and draws for each of its elements the mask
 * element that the whole layer draws at the same place (tr_dropout_mask: a pure function of
 * the layer's key and the element's index in the data set), so every layout drops what a
 * single device drops. The model's plan (tr_model_shard) makes it of a dropout's spec. */
#include "layers_impl.h"

static int identity(const tr_layer_ctx *c) { return !c->training || c->l->p == 0.0f; }

/* to (N,w) = the member's columns of the whole micro-batch's mask, one row at a time */
static int mask(const tr_layer_ctx *c, float *to) {
  const size_t w = (size_t)c->l->in, whole = w * (size_t)c->l->parts;
  if (c->first_sample == TR_SAMPLES_UNKNOWN)
    return tr_layer_fail(c, TR_EINVAL, "training needs the samples' positions "
                                       "(tr_stage_set_samples)");
  const float scale = (float)(1.0 / (1.0 - (double)c->l->p));
  const size_t rows = (size_t)c->B * c->T, row0 = c->first_sample * (size_t)c->T;
  for (size_t r = 0; r < rows; r++)
    TR__TRY(tr_dropout_mask(c->s, to + r * w, w, c->l->p, scale, c->seed,
                            (row0 + r) * whole + (size_t)c->l->part * w));
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

static int draws(const tr_layer_spec *l) { return l->p > 0.0f; }

const tr_layer_type tr__layer_dropout_columns_type = {
    .name = "dropout (columns)", .check = tr__check_same_width, .forward = forward,
    .backward = backward, .draws = draws};
