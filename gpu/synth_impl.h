/* synth_impl.h — the generator of the synthetic samples (tr_synth_fill, tr_data.h's
 * synthetic sources and arithmetic corpus), written once for the host and the GPU: the
 * counter-based streams, Marsaglia and Tsang's ziggurat, the teacher network and the offset
 * of a corpus sample. models/ opens the sources (tables, teacher weights, corpus) and fills
 * on the host through tr__synth_fill_cpu (host/host_synth.c); cuda/cuda_synth.cu runs the
 * same functions in its kernels.
 *
 * The host's evaluation defines the values: every product and sum rounded on its own, never
 * fused into a multiply-add (the host builds for baseline x86-64, and its AVX2 path asks for
 * no FMA, host_cpu.h). TR__FMUL and TR__FADD keep nvcc from fusing them on the GPU
 * (__fmul_rn and __fadd_rn are never contracted), and no function of libm decides a value
 * but the tail's log: the wedge's density is tr__synth_exp, a polynomial of those operations
 * (CUDA's expf and glibc's differ by an ulp now and then, which would flip an accept/reject
 * decision and shift every later value of that sample). What may still differ on a GPU: the
 * tail beyond R (about 0.03% of normals) takes log in double, which the device may round an
 * ulp of double apart; the value is rounded to float, which hides it, and the test of the
 * tail flips only on a tie at double precision. Integer tokens involve no floating point and
 * are always bitwise the same. */
#ifndef TR_SYNTH_IMPL_H
#define TR_SYNTH_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tr_device.h"

#ifndef TR__HD
#define TR__HD
#endif

#if defined(__CUDA_ARCH__)
#define TR__FMUL(a, b) __fmul_rn((a), (b))
#define TR__FADD(a, b) __fadd_rn((a), (b))
#define TR__FSUB(a, b) __fsub_rn((a), (b))
#define TR__DMUL(a, b) __dmul_rn((a), (b))
#define TR__DADD(a, b) __dadd_rn((a), (b))
#define TR__SYNTH_NOINLINE /* one call site per kernel: inlined, its state in registers */
#else
#define TR__FMUL(a, b) ((a) * (b))
#define TR__FADD(a, b) ((a) + (b))
#define TR__FSUB(a, b) ((a) - (b))
#define TR__DMUL(a, b) ((a) * (b))
#define TR__DADD(a, b) ((a) + (b))
#define TR__SYNTH_NOINLINE __attribute__((noinline))
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { TR__SYNTH_HIDDEN = 32 /* the teacher's hidden width */ };

/* ---- random streams: splitmix64 seeded by a hash of (seed, tag, index) -------------------- */

/* Tags keep the streams of one seed apart. */
#define TR__TAG_SAMPLE 0x73616d706c657331ull /* sample i's values or offset */
#define TR__RNG_GAMMA 0x9e3779b97f4a7c15ull  /* splitmix64's step */

static inline TR__HD uint64_t tr__mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct tr__rng {
  uint64_t s;
} tr__rng;

static inline TR__HD tr__rng tr__rng_for(uint64_t seed, uint64_t tag, uint64_t index) {
  tr__rng r = {tr__mix(seed ^ tr__mix(tag ^ tr__mix(index)))};
  return r;
}

static inline TR__HD uint64_t tr__rng_next(tr__rng *r) { return tr__mix(r->s += TR__RNG_GAMMA); }

/* The draw `ahead` + 1 calls of tr__rng_next from now would return, without taking any: the
 * state only adds a constant, so a warp reads 32 draws of one stream at once. */
static inline TR__HD uint64_t tr__rng_peek(const tr__rng *r, uint64_t ahead) {
  return tr__mix(r->s + (ahead + 1) * TR__RNG_GAMMA);
}

/* uniform in [0, 1) */
static inline TR__HD double tr__rng_uniform(tr__rng *r) {
  return (double)(tr__rng_next(r) >> 11) * 0x1p-53;
}

/* e^x for |x| <= 18, written so that a loop of it vectorises and that the host and the GPU
 * give the same bits (no libm: CUDA's expf and glibc's differ by an ulp now and then): 2^k
 * p(r), k rounded by the 1.5 * 2^23 trick, 2^k put into the exponent bits, p the degree-6
 * Taylor polynomial on |r| <= ln2/2 (relative error 1.2e-7; the coefficients 1/6, 1/24,
 * 1/120, 1/720 rounded to float). */
static inline TR__HD float tr__synth_exp(float x) {
  const float k = TR__FSUB(TR__FADD(TR__FMUL(x, 1.44269504f), 12582912.0f), 12582912.0f);
  const float r = TR__FSUB(TR__FSUB(x, TR__FMUL(k, 0.693145752f)), TR__FMUL(k, 1.42860677e-6f));
  float p = 0x1.6c16c2p-10f; /* 1/720 */
  p = TR__FADD(0x1.111112p-7f /* 1/120 */, TR__FMUL(r, p));
  p = TR__FADD(0x1.555556p-5f /* 1/24 */, TR__FMUL(r, p));
  p = TR__FADD(0x1.555556p-3f /* 1/6 */, TR__FMUL(r, p));
  p = TR__FADD(0.5f, TR__FMUL(r, p));
  p = TR__FADD(1.0f, TR__FMUL(r, p));
  p = TR__FADD(1.0f, TR__FMUL(r, p));
  const int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  memcpy(&two_k, &bits, sizeof two_k);
  return TR__FMUL(p, two_k);
}

/* ---- normals: the ziggurat (tables in tr_synth_zig, tr_device.h) ---------------------------- */

/* Normals by Marsaglia and Tsang's ziggurat (128 layers): one 64-bit draw, a table look-up
 * and a compare for 98% of them, where Box-Muller spends a log, a sqrt and a sincos. Bits
 * 0-6 pick the layer, bits 32-63 are the signed abscissa, so the two do not correlate. */
#define TR__ZIG_R 3.442619855899
#define TR__ZIG_V 9.91256303526217e-3

/* A draw's layer (bits 0-6) and signed abscissa (bits 32-63). */
static inline TR__HD void tr__zig_split(uint64_t u, int32_t *hz, unsigned *iz) {
  *hz = (int32_t)(u >> 32);
  *iz = (unsigned)u & 127;
}

static inline TR__HD bool tr__zig_inside(const tr_synth_zig *z, int32_t hz, unsigned iz) {
  return (uint32_t)(hz < 0 ? -(int64_t)hz : hz) < z->k[iz];
}

/* The normal of a draw that falls inside its layer's rectangle. */
static inline TR__HD float tr__zig_value(const tr_synth_zig *z, int32_t hz, unsigned iz) {
  return TR__FMUL((float)hz, z->w[iz]);
}

/* The 2% of draws that fall outside their layer's rectangle, out of line so that the
 * common case inlines into the fill loops. */
static TR__SYNTH_NOINLINE TR__HD float tr__normal_edge(const tr_synth_zig *z, tr__rng *r,
                                                       uint64_t u) {
  for (;; u = tr__rng_next(r)) {
    int32_t hz;
    unsigned iz;
    tr__zig_split(u, &hz, &iz);
    const float x = tr__zig_value(z, hz, iz);
    if (tr__zig_inside(z, hz, iz)) return x;
    if (iz == 0) { /* the tail beyond R */
      double t, y;
      do {
        t = -log(1.0 - tr__rng_uniform(r)) / TR__ZIG_R;
        y = -log(1.0 - tr__rng_uniform(r));
      } while (TR__DADD(y, y) < TR__DMUL(t, t));
      return (float)(hz > 0 ? TR__DADD(TR__ZIG_R, t) : -TR__ZIG_R - t);
    }
    /* the wedge: accept under the density, else draw again */
    const float lo = z->f[iz], span = TR__FSUB(z->f[iz - 1], z->f[iz]);
    if (TR__FADD(lo, TR__FMUL((float)tr__rng_uniform(r), span)) <
        tr__synth_exp(TR__FMUL(TR__FMUL(-0.5f, x), x)))
      return x;
  }
}

static inline TR__HD float tr__normal(const tr_synth_zig *z, tr__rng *r) {
  const uint64_t u = tr__rng_next(r);
  int32_t hz;
  unsigned iz;
  tr__zig_split(u, &hz, &iz);
  return tr__zig_inside(z, hz, iz) ? tr__zig_value(z, hz, iz) : tr__normal_edge(z, r, u);
}

/* ---- the teacher: y (out) = W2 tanh(W1 x + b1) + b2 ----------------------------------------- */

/* tanh(a) = (e - 1) / (e + 1), e = exp(2a) with |a| <= 9 (tr__synth_exp). The teacher is
 * defined by this function; libm's tanhf (through expm1f, scalar) cost four fifths of the
 * whole batch. Absolute error below 2e-7. */
static inline TR__HD float tr__synth_tanh(float a) {
  const float e = tr__synth_exp(2.0f * (a > 9.0f ? 9.0f : a < -9.0f ? -9.0f : a));
  return TR__FSUB(e, 1.0f) / TR__FADD(e, 1.0f);
}

/* Floats of a teacher's weights: W1^T (in,32), b1 (32), W2 (out,32), b2 (out). */
static inline TR__HD size_t tr__synth_teacher_floats(int in, int out) {
  return (size_t)in * TR__SYNTH_HIDDEN + TR__SYNTH_HIDDEN + (size_t)out * TR__SYNTH_HIDDEN +
         (size_t)out;
}

/* One row through the teacher, its sums in the order that defines the values: h[j] = b1[j],
 * then += W1[j][i] x[i] for i = 0, 1, ...; out[o] = 0 + b2[o], then += W2[o][j] h[j] for j
 * = 0, 1, ... (host_synth.c runs eight rows at once in vector lanes, each in this order).
 * y (out floats), or with `label` not NULL the argmax of the outputs (the first on ties). */
static inline TR__HD void tr__synth_teacher_row(const float *teacher, int in, int out,
                                                const float *x, float *y, int32_t *label) {
  enum { H = TR__SYNTH_HIDDEN };
  const float *w1t = teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  float h[H], best = 0.0f;
  for (int j = 0; j < H; j++) h[j] = b1[j];
  for (int i = 0; i < in; i++)
    for (int j = 0; j < H; j++) h[j] = TR__FADD(h[j], TR__FMUL(w1t[(size_t)i * H + j], x[i]));
  for (int j = 0; j < H; j++) h[j] = tr__synth_tanh(h[j]);
  for (int o = 0; o < out; o++) {
    float a = TR__FADD(0.0f, b2[o]);
    for (int j = 0; j < H; j++) a = TR__FADD(a, TR__FMUL(w2[(size_t)o * H + j], h[j]));
    if (!label) y[o] = a;
    else if (o == 0 || a > best) best = a, *label = o;
  }
}

/* ---- the corpus: where sample `index` starts -------------------------------------------------- */

static inline TR__HD size_t tr__synth_offset(uint64_t seed, uint64_t index, size_t size, int ctx) {
  tr__rng r = tr__rng_for(seed, TR__TAG_SAMPLE, index);
  return (size_t)(tr__rng_next(&r) % (uint64_t)(size - (size_t)ctx));
}

/* ---- a source's description ------------------------------------------------------------------ */

static inline TR__HD bool tr__synth_floats(tr_synth_kind k) {
  return k == TR_SYNTH_GAUSSIAN || k == TR_SYNTH_TEACHER || k == TR_SYNTH_CLASSIFIER;
}

/* Why `src` cannot be filled from, or NULL. */
static inline const char *tr__synth_invalid(const tr_synth *src) {
  if (tr__synth_floats(src->kind)) {
    if (src->in <= 0 || src->out <= 0 || src->rows <= 0) return "in, out and rows must be > 0";
    if (!src->zig) return "zig (the ziggurat's tables) is NULL";
    if (src->kind != TR_SYNTH_GAUSSIAN && !src->teacher) return "teacher is NULL";
    return NULL;
  }
  if (src->kind != TR_SYNTH_TOKENS) return "unknown kind";
  if (!src->corpus) return "corpus is NULL";
  if (src->ctx <= 0 || src->corpus_size <= (size_t)src->ctx)
    return "ctx must be > 0 and the corpus longer than ctx";
  return NULL;
}

/* Bytes of one sample's x and y. */
static inline size_t tr__synth_x_bytes(const tr_synth *src) {
  return src->kind == TR_SYNTH_TOKENS ? (size_t)src->ctx * sizeof(int32_t)
                                      : (size_t)src->rows * (size_t)src->in * sizeof(float);
}
static inline size_t tr__synth_y_bytes(const tr_synth *src) {
  return src->kind == TR_SYNTH_TOKENS        ? (size_t)src->ctx * sizeof(int32_t)
         : src->kind == TR_SYNTH_CLASSIFIER ? (size_t)src->rows * sizeof(int32_t)
                                             : (size_t)src->rows * (size_t)src->out * sizeof(float);
}

/* Samples [first, first + count) of `src` (host memory) into x and y (NULL: inputs only), on
 * the calling thread: tr_data_fill of the built-in sources, and the host backend's
 * tr_synth_fill. */
void tr__synth_fill_cpu(const tr_synth *src, uint64_t first, size_t count, void *x, void *y);

#ifdef __cplusplus
}
#endif
#endif
