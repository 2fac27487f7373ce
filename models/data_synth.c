/* data_synth.c — the synthetic sources of tr_data.h: standard normal inputs, and targets that
 * are normal too (GAUSSIAN), a fixed random teacher's outputs (TEACHER) or the class it
 * scores highest (CLASSIFIER). Sample i is `rows` rows of x drawn from its own stream, then
 * (GAUSSIAN) its y from the same stream; the teacher maps each row on its own. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"
#include "host/host_cpu.h"

enum { TEACHER_HIDDEN = 32, GROUP = 8 /* rows through the teacher at once */ };

#define TAG_TEACHER 0x7465616368657231ull /* the teacher's weights */

typedef struct zig {
  uint32_t k[128];
  float w[128], f[128];
} zig;

typedef struct synth {
  tr_data_kind kind;
  uint64_t seed;
  int in, out, rows; /* per row: in floats of x, out floats of y (CLASSIFIER: out classes) */
  zig z;
  float *teacher;    /* W1^T (in,32), b1 (32), W2 (out,32), b2 (out) */
} synth;

/* Normals by Marsaglia and Tsang's ziggurat (128 layers): one 64-bit draw, a table look-up
 * and a compare for 98% of them, where Box-Muller spends a log, a sqrt and a sincos. Bits
 * 0-6 pick the layer, bits 32-63 are the signed abscissa, so the two do not correlate. */
#define ZIG_R 3.442619855899
#define ZIG_V 9.91256303526217e-3

static void zig_tables(zig *z) {
  const double m = 2147483648.0, q = ZIG_V / exp(-0.5 * ZIG_R * ZIG_R);
  double dn = ZIG_R, tn = dn;
  z->k[0] = (uint32_t)(dn / q * m);
  z->k[1] = 0;
  z->w[0] = (float)(q / m);
  z->w[127] = (float)(dn / m);
  z->f[0] = 1.0f;
  z->f[127] = (float)exp(-0.5 * dn * dn);
  for (int i = 126; i >= 1; i--) {
    dn = sqrt(-2.0 * log(ZIG_V / dn + exp(-0.5 * dn * dn)));
    z->k[i + 1] = (uint32_t)(dn / tn * m);
    tn = dn;
    z->f[i] = (float)exp(-0.5 * dn * dn);
    z->w[i] = (float)(dn / m);
  }
}

/* A draw's layer (bits 0-6) and signed abscissa (bits 32-63). */
static inline void zig_split(uint64_t u, int32_t *hz, unsigned *iz) {
  *hz = (int32_t)(u >> 32);
  *iz = (unsigned)u & 127;
}

static inline bool zig_inside(const zig *z, int32_t hz, unsigned iz) {
  return (uint32_t)(hz < 0 ? -(int64_t)hz : hz) < z->k[iz];
}

/* The 2% of draws that fall outside their layer's rectangle, out of line so that the
 * common case inlines into the fill loops. */
static __attribute__((noinline)) float normal_edge(const zig *z, tr__rng *r, uint64_t u) {
  for (;; u = tr__rng_next(r)) {
    int32_t hz;
    unsigned iz;
    zig_split(u, &hz, &iz);
    const float x = (float)hz * z->w[iz];
    if (zig_inside(z, hz, iz)) return x;
    if (iz == 0) { /* the tail beyond R */
      double t, y;
      do {
        t = -log(1.0 - tr__rng_uniform(r)) / ZIG_R;
        y = -log(1.0 - tr__rng_uniform(r));
      } while (y + y < t * t);
      return (float)(hz > 0 ? ZIG_R + t : -ZIG_R - t);
    }
    /* the wedge: accept under the density, else draw again */
    if (z->f[iz] + (float)tr__rng_uniform(r) * (z->f[iz - 1] - z->f[iz]) < expf(-0.5f * x * x))
      return x;
  }
}

static inline float normal(const zig *z, tr__rng *r) {
  const uint64_t u = tr__rng_next(r);
  int32_t hz;
  unsigned iz;
  zig_split(u, &hz, &iz);
  return zig_inside(z, hz, iz) ? (float)hz * z->w[iz] : normal_edge(z, r, u);
}

/* uniform in [-1, 1) */
static double symmetric(tr__rng *r) { return 2 * tr__rng_uniform(r) - 1; }

/* Drawn as PyTorch draws a fresh Linear (weights and biases uniform in +-1/sqrt(fan_in)),
 * from the teacher's own stream of the seed: what a Python script would get from
 * nn.Sequential(Linear(10,32), Tanh(), Linear(32,1)) under another seed. */
static int make_teacher(synth *g) {
  const int in = g->in, out = g->out, H = TEACHER_HIDDEN;
  const size_t n = (size_t)in * H + H + (size_t)out * H + out;
  if (!(g->teacher = malloc(n * sizeof *g->teacher))) return TR_ENOMEM;
  tr__rng r = tr__rng_for(g->seed, TAG_TEACHER, 0);
  float *w1t = g->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  const double k1 = 1 / sqrt((double)in), k2 = 1 / sqrt((double)H);
  /* drawn in PyTorch's order, W1 (32,in) row by row, kept transposed for the forward */
  for (int j = 0; j < H; j++)
    for (int i = 0; i < in; i++) w1t[(size_t)i * H + j] = (float)(k1 * symmetric(&r));
  for (int j = 0; j < H; j++) b1[j] = (float)(k1 * symmetric(&r));
  for (size_t i = 0; i < (size_t)out * H; i++) w2[i] = (float)(k2 * symmetric(&r));
  for (int i = 0; i < out; i++) b2[i] = (float)(k2 * symmetric(&r));
  return 0;
}

/* tanh(a) = (e - 1) / (e + 1), e = exp(2a) with |a| <= 9, written so that a loop of it
 * vectorises: exp as 2^k p(r), k rounded by the 1.5 * 2^23 trick, 2^k put into the exponent
 * bits, p the degree-6 Taylor polynomial on |r| <= ln2/2 (relative error 1.2e-7). The
 * teacher is defined by this function; libm's tanhf (through expm1f, scalar) cost four
 * fifths of the whole batch. Absolute error below 2e-7. */
static inline float tanh_vec(float a) {
  const float x = 2.0f * (a > 9.0f ? 9.0f : a < -9.0f ? -9.0f : a);
  const float k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  memcpy(&two_k, &bits, sizeof two_k);
  const float e = p * two_k;
  return (e - 1.0f) / (e + 1.0f);
}

/* GROUP floats in one value (the compilers' vector extension): a sum along a loop kept in
 * registers, where GCC's vectoriser would keep it in memory. */
typedef float lanes __attribute__((vector_size(GROUP * sizeof(float))));

/* y (out) = W2 tanh(W1 x + b1) + b2, in float, for n <= GROUP rows at once (x and y rows of
 * in and out floats), one per vector lane: each row's sums run in the order one row alone
 * would take, so grouping changes no bit, while the loops vectorise across rows (one
 * row's sums are sequential, and its tanh half a vector). With `label` not NULL, each
 * row's argmax over the outputs (the first on ties) goes there instead of y. */
static inline __attribute__((always_inline)) void teacher(const synth *g, const float *x,
                                                          float *y, int32_t *label, size_t n) {
  enum { CHUNK = 16 }; /* inputs transposed at a time, before any is read back */
  const int in = g->in, out = g->out, H = TEACHER_HIDDEN;
  const float *w1t = g->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  float h[TEACHER_HIDDEN][GROUP], xt[CHUNK][GROUP] = {{0}}, a[GROUP], best[GROUP];
  for (int j = 0; j < H; j++)
    for (int s = 0; s < GROUP; s++) h[j][s] = b1[j];
  for (int i0 = 0; i0 < in; i0 += CHUNK) {
    const int ni = in - i0 < CHUNK ? in - i0 : CHUNK;
    for (size_t s = 0; s < n; s++)
      for (int i = 0; i < ni; i++) xt[i][s] = x[s * (size_t)in + (size_t)(i0 + i)];
    for (int i = 0; i < ni; i++)
      for (int j = 0; j < H; j++)
        for (int s = 0; s < GROUP; s++) h[j][s] += w1t[(size_t)(i0 + i) * H + j] * xt[i][s];
  }
  for (int j = 0; j < H; j++)
    for (int s = 0; s < GROUP; s++) h[j][s] = tanh_vec(h[j][s]);
  for (int o = 0; o < out; o++) { /* a sum along j per lane: kept in a register */
    lanes acc = (lanes){0} + b2[o], hj;
    for (int j = 0; j < H; j++) {
      memcpy(&hj, h[j], sizeof hj);
      acc += w2[(size_t)o * H + j] * hj;
    }
    memcpy(a, &acc, sizeof a);
    if (!label) {
      for (size_t s = 0; s < n; s++) y[s * (size_t)out + (size_t)o] = a[s];
    } else {
      for (size_t s = 0; s < n; s++)
        if (o == 0 || a[s] > best[s]) best[s] = a[s], label[s] = o;
    }
  }
}

/* AVX2 doubles the lanes and changes no bit (no fused multiply-adds, host_cpu.h). */
TR__TARGET_AVX2 static void teacher_avx2(const synth *g, const float *x, float *y, int32_t *label,
                                         size_t n) {
  teacher(g, x, y, label, n);
}
static void teacher_base(const synth *g, const float *x, float *y, int32_t *label, size_t n) {
  teacher(g, x, y, label, n);
}

static int fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const synth *g = d->self;
  const size_t xn = (size_t)g->rows * (size_t)g->in, rows = (size_t)g->rows;
  void (*const run)(const synth *, const float *, float *, int32_t *, size_t) =
      tr__cpu_avx2() ? teacher_avx2 : teacher_base;
  float *xf = x, *yf = y;
  size_t done = 0; /* rows whose targets are written */
  for (size_t k = 0; k < count; k++) {
    tr__rng r = tr__rng_for(g->seed, TR__TAG_SAMPLE, first + k);
    for (size_t i = 0; i < xn; i++) xf[k * xn + i] = normal(&g->z, &r);
    if (!y) continue;
    if (g->kind == TR_DATA_GAUSSIAN) {
      const size_t yn = rows * (size_t)g->out;
      for (size_t i = 0; i < yn; i++) yf[k * yn + i] = normal(&g->z, &r);
      continue;
    }
    /* whole groups of rows whose x is drawn, and what is left at the end */
    const size_t ready = (k + 1) * rows;
    while (ready - done >= GROUP || (k + 1 == count && done < ready)) {
      const size_t n = ready - done < GROUP ? ready - done : GROUP;
      const float *xs = xf + done * (size_t)g->in;
      if (g->kind == TR_DATA_CLASSIFIER) run(g, xs, NULL, (int32_t *)y + done, n);
      else run(g, xs, yf + done * (size_t)g->out, NULL, n);
      done += n;
    }
  }
  return 0;
}

static void close_synth(tr_data *d) {
  synth *g = d->self;
  if (g) free(g->teacher);
  free(g);
}

static const tr__data_ops synth_ops = {.fill = fill, .close = close_synth};

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
  *g = (synth){.kind = c->kind, .seed = c->seed, .in = c->in, .out = out,
               .rows = c->ctx ? c->ctx : 1};
  zig_tables(&g->z);
  d->x_bytes = (size_t)g->rows * (size_t)g->in * sizeof(float);
  d->y_bytes = (size_t)g->rows * (classes ? sizeof(int32_t) : (size_t)out * sizeof(float));
  return c->kind == TR_DATA_GAUSSIAN ? 0 : make_teacher(g);
}
