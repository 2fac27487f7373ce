/* host_synth.c — the synthetic samples on the host (synth_impl.h): tr_data_fill of the
 * built-in generated sources, and the host backend's tr_synth_fill (host device memory is
 * host memory). Sample i is `rows` rows of x drawn from its own stream, then (GAUSSIAN) its
 * y from the same stream; the teacher maps each row on its own. */
#include <stdlib.h>

#include "host_cpu.h"
#include "host_impl.h"
#include "synth_impl.h"

enum { GROUP = 8 /* rows through the teacher at once */ };

/* GROUP floats in one value (the compilers' vector extension): a sum along a loop kept in
 * registers, where GCC's vectoriser would keep it in memory. */
typedef float lanes __attribute__((vector_size(GROUP * sizeof(float))));

/* tr__synth_teacher_row for n <= GROUP rows at once (x and y rows of in and out floats), one
 * per vector lane: each row's sums run in the order one row alone takes, so grouping changes
 * no bit, while the loops vectorise across rows (one row's sums are sequential, and its tanh
 * half a vector). With `label` not NULL, each row's argmax over the outputs (the first on
 * ties) goes there instead of y. */
static inline __attribute__((always_inline)) void teacher(const tr_synth *g, const float *x,
                                                          float *y, int32_t *label, size_t n) {
  enum { CHUNK = 16, H = TR__SYNTH_HIDDEN }; /* CHUNK: inputs transposed at a time */
  const int in = g->in, out = g->out;
  const float *w1t = g->teacher, *b1 = w1t + (size_t)in * H, *w2 = b1 + H, *b2 = w2 + (size_t)out * H;
  float h[H][GROUP], xt[CHUNK][GROUP] = {{0}}, a[GROUP], best[GROUP];
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
    for (int s = 0; s < GROUP; s++) h[j][s] = tr__synth_tanh(h[j][s]);
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
TR__TARGET_AVX2 static void teacher_avx2(const tr_synth *g, const float *x, float *y,
                                         int32_t *label, size_t n) {
  teacher(g, x, y, label, n);
}
static void teacher_base(const tr_synth *g, const float *x, float *y, int32_t *label, size_t n) {
  teacher(g, x, y, label, n);
}

static void fill_floats(const tr_synth *g, uint64_t first, size_t count, float *xf, void *y) {
  const size_t xn = (size_t)g->rows * (size_t)g->in, rows = (size_t)g->rows;
  void (*const run)(const tr_synth *, const float *, float *, int32_t *, size_t) =
      tr__cpu_avx2() ? teacher_avx2 : teacher_base;
  float *yf = y;
  /* in locals: with -fno-strict-aliasing every store of a float could change g's fields */
  const tr_synth_zig *const z = g->zig;
  size_t done = 0; /* rows whose targets are written */
  for (size_t k = 0; k < count; k++) {
    tr__rng r = tr__rng_for(g->seed, TR__TAG_SAMPLE, first + k);
    for (size_t i = 0; i < xn; i++) xf[k * xn + i] = tr__normal(z, &r);
    if (!y) continue;
    if (g->kind == TR_SYNTH_GAUSSIAN) {
      const size_t yn = rows * (size_t)g->out;
      for (size_t i = 0; i < yn; i++) yf[k * yn + i] = tr__normal(z, &r);
      continue;
    }
    /* whole groups of rows whose x is drawn, and what is left at the end */
    const size_t ready = (k + 1) * rows;
    while (ready - done >= GROUP || (k + 1 == count && done < ready)) {
      const size_t n = ready - done < GROUP ? ready - done : GROUP;
      const float *xs = xf + done * (size_t)g->in;
      if (g->kind == TR_SYNTH_CLASSIFIER) run(g, xs, NULL, (int32_t *)y + done, n);
      else run(g, xs, yf + done * (size_t)g->out, NULL, n);
      done += n;
    }
  }
}

static void fill_tokens(const tr_synth *g, uint64_t first, size_t count, int32_t *x, int32_t *y) {
  const int T = g->ctx;
  for (size_t k = 0; k < count; k++) {
    const uint8_t *bytes = g->corpus + tr__synth_offset(g->seed, first + k, g->corpus_size, T);
    int32_t *xt = x + k * (size_t)T;
    for (int i = 0; i < T; i++) xt[i] = bytes[i];
    if (!y) continue;
    int32_t *yt = y + k * (size_t)T;
    for (int i = 0; i < T; i++) yt[i] = bytes[i + 1];
  }
}

void tr__synth_fill_cpu(const tr_synth *src, uint64_t first, size_t count, void *x, void *y) {
  if (src->kind == TR_SYNTH_TOKENS) fill_tokens(src, first, count, x, y);
  else fill_floats(src, first, count, x, y);
}

int tr__host_synth_fill(tr_stream *s, const tr_synth *src, uint64_t first, size_t count, void *x,
                        void *y) {
  (void)s;
  tr__synth_fill_cpu(src, first, count, x, y);
  return 0;
}
