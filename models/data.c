/* data.c — the synthetic data sets and byte files of tr_data.h. Every sample is drawn from
 * its own counter-based stream (splitmix64 seeded by a hash of the seed, a tag and the
 * sample's index), so samples need no shared state and no order. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host_cpu.h"
#include "tr_data.h"
#include "tr_model.h"

enum { TEACHER_HIDDEN = 32, GROUP = 8 /* samples through the teacher at once */ };

/* Tags keep the streams of one seed apart. */
#define TAG_TEACHER 0x7465616368657231ull /* the teacher's weights */
#define TAG_SAMPLE 0x73616d706c657331ull  /* sample i's values or offset */
#define TAG_CORPUS 0x636f727075733121ull  /* the arithmetic corpus */

typedef struct zig {
  uint32_t k[128];
  float w[128], f[128];
} zig;

struct tr_data {
  tr_data_config c;
  zig z;
  float *teacher;  /* W1^T (in,32), b1 (32), W2 (out,32), b2 (out) */
  uint8_t *corpus; /* ARITHMETIC: malloc'd; FILE: mapped */
  size_t size;
  char *path;
};

/* ---- random numbers ----------------------------------------------------------------------- */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct rng {
  uint64_t s;
} rng;

static rng rng_for(uint64_t seed, uint64_t tag, uint64_t index) {
  return (rng){mix(seed ^ mix(tag ^ mix(index)))};
}

static uint64_t next(rng *r) { return mix(r->s += 0x9e3779b97f4a7c15ull); }

static double uniform(rng *r) { return (double)(next(r) >> 11) * 0x1p-53; } /* [0,1) */

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
static __attribute__((noinline)) float normal_edge(const zig *z, rng *r, uint64_t u) {
  for (;; u = next(r)) {
    int32_t hz;
    unsigned iz;
    zig_split(u, &hz, &iz);
    const float x = (float)hz * z->w[iz];
    if (zig_inside(z, hz, iz)) return x;
    if (iz == 0) { /* the tail beyond R */
      double t, y;
      do {
        t = -log(1.0 - uniform(r)) / ZIG_R;
        y = -log(1.0 - uniform(r));
      } while (y + y < t * t);
      return (float)(hz > 0 ? ZIG_R + t : -ZIG_R - t);
    }
    /* the wedge: accept under the density, else draw again */
    if (z->f[iz] + (float)uniform(r) * (z->f[iz - 1] - z->f[iz]) < expf(-0.5f * x * x)) return x;
  }
}

static inline float normal(const zig *z, rng *r) {
  const uint64_t u = next(r);
  int32_t hz;
  unsigned iz;
  zig_split(u, &hz, &iz);
  return zig_inside(z, hz, iz) ? (float)hz * z->w[iz] : normal_edge(z, r, u);
}

/* ---- opening --------------------------------------------------------------------------------- */

static int say(int rc, char *err, size_t size, const char *fmt, ...) {
  if (err && size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
  }
  return rc;
}

void tr_data_config_for(tr_data_config *c, const struct tr_model *m, uint64_t seed,
                        const char *path) {
  const int L = tr_model_layer_count(m);
  *c = (tr_data_config){.seed = seed, .ctx = tr_model_ctx(m), .path = path,
                        .in = tr_model_layer(m, 0)->in, .out = tr_model_layer(m, L - 1)->out};
  if (tr_model_token_input(m)) c->kind = path ? TR_DATA_FILE : TR_DATA_ARITHMETIC;
  else c->kind = strcmp(tr_model_name(m), "simplenet") ? TR_DATA_GAUSSIAN : TR_DATA_TEACHER;
}

/* Drawn as PyTorch draws a fresh Linear (weights and biases uniform in +-1/sqrt(fan_in)),
 * from the teacher's own stream of the seed: what a Python script would get from
 * nn.Sequential(Linear(10,32), Tanh(), Linear(32,1)) under another seed. */
static int make_teacher(tr_data *d) {
  const int in = d->c.in, out = d->c.out, H = TEACHER_HIDDEN;
  const size_t n = (size_t)in * H + H + (size_t)out * H + out;
  if (!(d->teacher = malloc(n * sizeof *d->teacher))) return TR_ENOMEM;
  rng r = rng_for(d->c.seed, TAG_TEACHER, 0);
  float *w1t = d->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  const double k1 = 1 / sqrt((double)in), k2 = 1 / sqrt((double)H);
  /* drawn in PyTorch's order, W1 (32,in) row by row, kept transposed for the forward */
  for (int j = 0; j < H; j++)
    for (int i = 0; i < in; i++) w1t[(size_t)i * H + j] = (float)(k1 * (2 * uniform(&r) - 1));
  for (int j = 0; j < H; j++) b1[j] = (float)(k1 * (2 * uniform(&r) - 1));
  for (size_t i = 0; i < (size_t)out * H; i++) w2[i] = (float)(k2 * (2 * uniform(&r) - 1));
  for (int i = 0; i < out; i++) b2[i] = (float)(k2 * (2 * uniform(&r) - 1));
  return 0;
}

/* Lines "a+b=c\n", a and b uniform in [0, 100), until the corpus is full. */
static int make_corpus(tr_data *d) {
  const size_t size = d->c.corpus_bytes ? d->c.corpus_bytes : (size_t)1 << 20;
  if (!(d->corpus = malloc(size + 16))) return TR_ENOMEM;
  rng r = rng_for(d->c.seed, TAG_CORPUS, 0);
  size_t at = 0;
  while (at < size) {
    const int a = (int)(next(&r) % 100), b = (int)(next(&r) % 100);
    at += (size_t)snprintf((char *)d->corpus + at, 16, "%d+%d=%d\n", a, b, a + b);
  }
  d->size = size;
  return 0;
}

static int map_file(tr_data *d, char *err, size_t err_size) {
  int fd = open(d->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return say(TR_EIO, err, err_size, "data file '%s': %s", d->path, strerror(errno));
  struct stat sb;
  int rc = 0;
  if (fstat(fd, &sb)) {
    rc = say(TR_EIO, err, err_size, "data file '%s': %s", d->path, strerror(errno));
  } else if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < (uint64_t)d->c.ctx + 1) {
    rc = say(TR_EIO, err, err_size, "data file '%s': %lld bytes, needs at least %d (context + 1)",
             d->path, (long long)sb.st_size, d->c.ctx + 1);
  } else {
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) rc = say(TR_EIO, err, err_size, "data file '%s': mmap: %s", d->path, strerror(errno));
    else d->corpus = p, d->size = (size_t)sb.st_size;
  }
  close(fd);
  return rc;
}

int tr_data_open(tr_data **out, const tr_data_config *c, char *err, size_t err_size) {
  *out = NULL;
  const int floats = c->kind == TR_DATA_TEACHER || c->kind == TR_DATA_GAUSSIAN;
  if ((unsigned)c->kind > TR_DATA_FILE || (floats && (c->in <= 0 || c->out <= 0)) ||
      (!floats && c->ctx <= 0) || (c->kind == TR_DATA_FILE && !c->path))
    return say(TR_EINVAL, err, err_size, "data: kind %d, widths %d/%d, context %d, path %s: invalid",
               (int)c->kind, c->in, c->out, c->ctx, c->path ? c->path : "(none)");
  tr_data *d = calloc(1, sizeof *d);
  if (!d) return say(TR_ENOMEM, err, err_size, "data: out of memory");
  d->c = *c;
  zig_tables(&d->z);
  int rc = 0;
  if (c->path && !(d->path = strdup(c->path))) rc = TR_ENOMEM;
  d->c.path = d->path;
  if (!rc) {
    switch (c->kind) {
    case TR_DATA_TEACHER: rc = make_teacher(d); break;
    case TR_DATA_GAUSSIAN: break;
    case TR_DATA_ARITHMETIC:
      rc = make_corpus(d);
      if (!rc && d->size < (size_t)c->ctx + 1)
        rc = say(TR_EINVAL, err, err_size, "data: corpus of %zu bytes, context %d", d->size, c->ctx);
      break;
    case TR_DATA_FILE: rc = map_file(d, err, err_size); break;
    }
  }
  if (rc == TR_ENOMEM) say(rc, err, err_size, "data: out of memory");
  if (rc) {
    tr_data_close(d);
    return rc;
  }
  *out = d;
  return 0;
}

void tr_data_close(tr_data *d) {
  if (!d) return;
  if (d->c.kind == TR_DATA_FILE && d->corpus) munmap(d->corpus, d->size);
  else free(d->corpus);
  free(d->teacher);
  free(d->path);
  free(d);
}

/* ---- samples ----------------------------------------------------------------------------------- */

size_t tr_data_x_bytes(const tr_data *d) {
  return d->c.kind <= TR_DATA_GAUSSIAN ? (size_t)d->c.in * sizeof(float)
                                       : (size_t)d->c.ctx * sizeof(int32_t);
}

size_t tr_data_y_bytes(const tr_data *d) {
  return d->c.kind <= TR_DATA_GAUSSIAN ? (size_t)d->c.out * sizeof(float)
                                       : (size_t)d->c.ctx * sizeof(int32_t);
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

/* y (out) = W2 tanh(W1 x + b1) + b2, in float, for n <= GROUP samples at once (x and y rows
 * of in and out floats), one per vector lane: each sample's sums run in the order one
 * sample alone would take, so grouping changes no bit, while the loops vectorise across
 * samples (one sample's sums are sequential, and its tanh half a vector). */
static inline __attribute__((always_inline)) void teacher(const tr_data *d, const float *x,
                                                          float *y, size_t n) {
  enum { CHUNK = 16 }; /* inputs transposed at a time, before any is read back */
  const int in = d->c.in, out = d->c.out, H = TEACHER_HIDDEN;
  const float *w1t = d->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  float h[TEACHER_HIDDEN][GROUP], xt[CHUNK][GROUP] = {{0}}, a[GROUP];
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
    for (size_t s = 0; s < n; s++) y[s * (size_t)out + (size_t)o] = a[s];
  }
}

/* AVX2 doubles the lanes and changes no bit (no fused multiply-adds, host_cpu.h). */
TR__TARGET_AVX2 static void teacher_avx2(const tr_data *d, const float *x, float *y, size_t n) {
  teacher(d, x, y, n);
}
static void teacher_base(const tr_data *d, const float *x, float *y, size_t n) { teacher(d, x, y, n); }

void tr_data_fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y) {
  const size_t xb = tr_data_x_bytes(d), yb = tr_data_y_bytes(d);
  for (size_t k = 0; k < count; k++) {
    rng r = rng_for(d->c.seed, TAG_SAMPLE, first + k);
    void *xs = (char *)x + k * xb, *ys = y ? (char *)y + k * yb : NULL;
    if (d->c.kind == TR_DATA_TEACHER || d->c.kind == TR_DATA_GAUSSIAN) {
      float *xf = xs, *yf = ys;
      for (int i = 0; i < d->c.in; i++) xf[i] = normal(&d->z, &r);
      if (!yf) continue;
      if (d->c.kind == TR_DATA_GAUSSIAN) {
        for (int i = 0; i < d->c.out; i++) yf[i] = normal(&d->z, &r);
      } else if ((k + 1) % GROUP == 0 || k + 1 == count) { /* a group has its x: its y */
        const size_t g = k - k % GROUP;
        (tr__cpu_avx2() ? teacher_avx2 : teacher_base)(d, (const float *)((char *)x + g * xb),
                                                       (float *)((char *)y + g * yb), k + 1 - g);
      }
    } else {
      const int T = d->c.ctx;
      const size_t at = (size_t)(next(&r) % (uint64_t)(d->size - (size_t)T));
      int32_t *xt = xs, *yt = ys;
      for (int t = 0; t < T; t++) xt[t] = d->corpus[at + (size_t)t];
      if (yt)
        for (int t = 0; t < T; t++) yt[t] = d->corpus[at + (size_t)t + 1];
    }
  }
}

void tr_data_shard(uint64_t step, size_t global_batch, int worker, int workers, uint64_t *first,
                   size_t *count) {
  TR_ASSERT(workers > 0 && worker >= 0 && worker < workers);
  const size_t lo = global_batch * (size_t)worker / (size_t)workers;
  const size_t hi = global_batch * ((size_t)worker + 1) / (size_t)workers;
  *first = step * global_batch + lo;
  *count = hi - lo;
}

const uint8_t *tr_data_corpus(const tr_data *d, size_t *size) {
  if (size) *size = d->corpus ? d->size : 0;
  return d->corpus;
}
