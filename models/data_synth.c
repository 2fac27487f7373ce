/* data_synth.c — the synthetic sources of tr_data.h: standard normal inputs, and targets that
 * are normal too (GAUSSIAN), a fixed random teacher's outputs (TEACHER) or the class it
 * scores highest (CLASSIFIER). Opening makes what the generator reads (the ziggurat's tables,
 * the teacher's weights); the samples themselves are synth_impl.h's, on the host through
 * tr__synth_fill_cpu and on a GPU through tr_synth_fill (tr_data_gen). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "data_impl.h"

#define TAG_TEACHER 0x7465616368657231ull /* the teacher's weights */

typedef struct synth {
  tr_synth src;      /* zig and teacher point below */
  tr_synth_zig z;
  float *teacher;    /* W1^T (in,32), b1 (32), W2 (out,32), b2 (out) */
} synth;

/* The ziggurat's layers (synth_impl.h), in double: made once, here, and copied to devices. */
static void zig_tables(tr_synth_zig *z) {
  const double m = 2147483648.0, q = TR__ZIG_V / exp(-0.5 * TR__ZIG_R * TR__ZIG_R);
  double dn = TR__ZIG_R, tn = dn;
  z->k[0] = (uint32_t)(dn / q * m);
  z->k[1] = 0;
  z->w[0] = (float)(q / m);
  z->w[127] = (float)(dn / m);
  z->f[0] = 1.0f;
  z->f[127] = (float)exp(-0.5 * dn * dn);
  for (int i = 126; i >= 1; i--) {
    dn = sqrt(-2.0 * log(TR__ZIG_V / dn + exp(-0.5 * dn * dn)));
    z->k[i + 1] = (uint32_t)(dn / tn * m);
    tn = dn;
    z->f[i] = (float)exp(-0.5 * dn * dn);
    z->w[i] = (float)(dn / m);
  }
}

/* uniform in [-1, 1) */
static double symmetric(tr__rng *r) { return 2 * tr__rng_uniform(r) - 1; }

/* Drawn as PyTorch draws a fresh Linear (weights and biases uniform in +-1/sqrt(fan_in)),
 * from the teacher's own stream of the seed: what a Python script would get from
 * nn.Sequential(Linear(10,32), Tanh(), Linear(32,1)) under another seed. */
static int make_teacher(synth *g) {
  const int in = g->src.in, out = g->src.out, H = TR__SYNTH_HIDDEN;
  if (!(g->teacher = malloc(tr__synth_teacher_floats(in, out) * sizeof *g->teacher)))
    return TR_ENOMEM;
  tr__rng r = tr__rng_for(g->src.seed, TAG_TEACHER, 0);
  float *w1t = g->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  const double k1 = 1 / sqrt((double)in), k2 = 1 / sqrt((double)H);
  /* drawn in PyTorch's order, W1 (32,in) row by row, kept transposed for the forward */
  for (int j = 0; j < H; j++)
    for (int i = 0; i < in; i++) w1t[(size_t)i * H + j] = (float)(k1 * symmetric(&r));
  for (int j = 0; j < H; j++) b1[j] = (float)(k1 * symmetric(&r));
  for (size_t i = 0; i < (size_t)out * H; i++) w2[i] = (float)(k2 * symmetric(&r));
  for (int i = 0; i < out; i++) b2[i] = (float)(k2 * symmetric(&r));
  g->src.teacher = g->teacher;
  return 0;
}

static int fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  tr__synth_fill_cpu(&((const synth *)d->self)->src, first, count, x, y);
  return 0;
}

static const tr_synth *describe(const tr_data *d) { return &((const synth *)d->self)->src; }

static void close_synth(tr_data *d) {
  synth *g = d->self;
  if (g) free(g->teacher);
  free(g);
}

static const tr__data_ops synth_ops = {.fill = fill, .close = close_synth, .synth = describe};

int tr__data_open_synthetic(tr_data *d, const tr_data_config *c, char *err, size_t err_size) {
  const bool classes = c->kind == TR_DATA_CLASSIFIER;
  const int out = classes ? c->classes : c->out;
  d->ops = &synth_ops;
  if (c->in <= 0 || out <= 0 || c->ctx < 0)
    return tr_errorf(err, err_size, TR_EINVAL,
                     "data '%s': in %d, %s %d, ctx %d: widths must be positive", d->name, c->in,
                     classes ? "classes" : "out", out, c->ctx);
  synth *g = calloc(1, sizeof *g);
  if (!(d->self = g)) return TR_ENOMEM;
  const tr_synth_kind kind = c->kind == TR_DATA_GAUSSIAN ? TR_SYNTH_GAUSSIAN
                             : classes                   ? TR_SYNTH_CLASSIFIER
                                                         : TR_SYNTH_TEACHER;
  g->src = (tr_synth){.kind = kind, .seed = c->seed, .in = c->in, .out = out,
                      .rows = c->ctx ? c->ctx : 1, .zig = &g->z};
  zig_tables(&g->z);
  d->x_bytes = tr__synth_x_bytes(&g->src);
  d->y_bytes = tr__synth_y_bytes(&g->src);
  return kind == TR_SYNTH_GAUSSIAN ? 0 : make_teacher(g);
}
