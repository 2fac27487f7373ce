/* host_nn.c — the host backend's row-wise kernels: layernorm, softmax (plain and causal
 * attention), losses and embeddings. Row statistics are summed in double and softmaxes
 * subtract the row's maximum, so the results are as exact as float storage allows. */
#include <math.h>
#include <string.h>

#include "host_impl.h"

/* Largest element of a row, lane-wise (a NaN anywhere comes out as NaN further on, through
 * the exponentials, so it needs no special care here). */
HOST_INLINE float row_max(const float *x, size_t n) {
  float acc[HOST_LANES];
  size_t i = 0;
  for (int k = 0; k < HOST_LANES; k++) acc[k] = -INFINITY;
  for (; i + HOST_LANES <= n; i += HOST_LANES)
    HOST_EACH_LANE
    for (int k = 0; k < HOST_LANES; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
  float m = -INFINITY;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  for (int k = 0; k < HOST_LANES; k++) m = acc[k] > m ? acc[k] : m;
  return m;
}

/* sum of a[i] * b[i] * c[i], in double */
HOST_INLINE double dot3(const float *a, const float *b, const float *c, size_t n) {
  double acc[HOST_LANES] = {0};
  size_t i = 0;
  for (; i + HOST_LANES <= n; i += HOST_LANES)
    HOST_EACH_LANE
    for (int k = 0; k < HOST_LANES; k++)
      acc[k] += (double)a[i + k] * (double)b[i + k] * (double)c[i + k];
  double s = 0;
  for (; i < n; i++) s += (double)a[i] * (double)b[i] * (double)c[i];
  for (int k = 0; k < HOST_LANES; k++) s += acc[k];
  return s;
}

/* out = exp(scale * (inp - max)) / sum over the row, given the row's max (scale > 0, so the
 * exponents are <= 0); returns log(sum) for the caller's loss. out may equal inp. */
HOST_INLINE double softmax_row_max(float *out, const float *inp, size_t n, float scale, float mx) {
  for (size_t i = 0; i < n; i++) out[i] = tr__host_expf_nonpos(scale * (inp[i] - mx));
  const double sum = tr__host_sum_d(out, n);
  const float inv = (float)(1.0 / sum);
  for (size_t i = 0; i < n; i++) out[i] *= inv;
  return log(sum);
}

HOST_INLINE double softmax_row(float *out, const float *inp, size_t n, float scale) {
  return softmax_row_max(out, inp, n, scale, row_max(inp, n));
}

/* ---- layernorm ------------------------------------------------------------------------------- */

HOST_LOOPS tr__host_layernorm_forward_loops(tr_stream *s, float *out, float *mean, float *rstd,
                                            const float *inp, const float *weight,
                                            const float *bias, size_t N, size_t C, float eps) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    const float *x = inp + r * C;
    float *o = out + r * C;
    /* Centred in double, twice: the variance from the deviations (not E[x^2] - mean^2), and
     * the output from the exact mean, so rows far from zero lose nothing to cancellation. */
    const double mu = tr__host_sum_d(x, C) / (double)C;
    double acc[HOST_LANES] = {0}, var = 0;
    size_t c = 0;
    for (; c + HOST_LANES <= C; c += HOST_LANES)
      HOST_EACH_LANE
      for (int k = 0; k < HOST_LANES; k++) {
        const double d = (double)x[c + k] - mu;
        acc[k] += d * d;
      }
    for (; c < C; c++) var += ((double)x[c] - mu) * ((double)x[c] - mu);
    for (int k = 0; k < HOST_LANES; k++) var += acc[k];
    const double rs = 1.0 / sqrt(var / (double)C + (double)eps);
    for (c = 0; c < C; c++) o[c] = (float)(((double)x[c] - mu) * rs) * weight[c] + bias[c];
    mean[r] = (float)mu;
    rstd[r] = (float)rs;
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_layernorm_forward,
              (tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
               const float *weight, const float *bias, size_t N, size_t C, float eps),
              (s, out, mean, rstd, inp, weight, bias, N, C, eps))

HOST_LOOPS tr__host_layernorm_backward_loops(tr_stream *s, float *dinp, float *dweight,
                                             float *dbias, const float *dout, const float *inp,
                                             const float *weight, const float *mean,
                                             const float *rstd, size_t N, size_t C) {
  /* per-channel parameter gradients summed over the rows in double, added once */
  double *dw = tr__host_scratch(s, TR__SCRATCH_OPS, 2 * C * sizeof(double));
  if (!dw) return tr__device_fail(s->dev, TR_ENOMEM, "layernorm_backward: out of memory");
  double *db = dw + C;
  memset(dw, 0, 2 * C * sizeof(double));
  for (size_t r = 0; r < N; r++) {
    const float *x = inp + r * C, *g = dout + r * C;
    float *di = dinp + r * C;
    const float mu = mean[r], rs = rstd[r];
    /* di holds norm, then dnorm = weight * dout, until the row's two means are known */
    for (size_t c = 0; c < C; c++) di[c] = (x[c] - mu) * rs;
    for (size_t c = 0; c < C; c++) {
      db[c] += (double)g[c];
      dw[c] += (double)di[c] * (double)g[c];
    }
    const double dnorm_norm_mean = dot3(weight, g, di, C) / (double)C;
    const double dnorm_mean = tr__host_dot_d(weight, g, C) / (double)C;
    const float m1 = (float)dnorm_mean, m2 = (float)dnorm_norm_mean;
    for (size_t c = 0; c < C; c++) di[c] = (weight[c] * g[c] - m1 - di[c] * m2) * rs;
  }
  for (size_t c = 0; c < C; c++) {
    dweight[c] = (float)((double)dweight[c] + dw[c]);
    dbias[c] = (float)((double)dbias[c] + db[c]);
  }
  return 0;
}
HOST_AVX2_TOO(tr__host_layernorm_backward,
              (tr_stream *s, float *dinp, float *dweight, float *dbias, const float *dout,
               const float *inp, const float *weight, const float *mean, const float *rstd,
               size_t N, size_t C),
              (s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))

/* ---- softmax ----------------------------------------------------------------------------------- */

HOST_LOOPS tr__host_softmax_forward_loops(tr_stream *s, float *out, const float *inp, size_t N,
                                          size_t C) {
  (void)s;
  for (size_t r = 0; r < N; r++) softmax_row(out + r * C, inp + r * C, C, 1.0f);
  return 0;
}
HOST_AVX2_TOO(tr__host_softmax_forward,
              (tr_stream *s, float *out, const float *inp, size_t N, size_t C),
              (s, out, inp, N, C))

/* dinp = scale * out * (dout - <out, dout>) over the first n entries of a row */
HOST_INLINE void softmax_backward_row(float *dinp, const float *out, const float *dout, size_t n,
                                      float scale) {
  const float d = (float)tr__host_dot_d(out, dout, n);
  for (size_t i = 0; i < n; i++) dinp[i] = scale * out[i] * (dout[i] - d);
}

HOST_LOOPS tr__host_softmax_backward_loops(tr_stream *s, float *dinp, const float *out,
                                           const float *dout, size_t N, size_t C) {
  (void)s;
  for (size_t r = 0; r < N; r++) softmax_backward_row(dinp + r * C, out + r * C, dout + r * C, C, 1.0f);
  return 0;
}
HOST_AVX2_TOO(tr__host_softmax_backward,
              (tr_stream *s, float *dinp, const float *out, const float *dout, size_t N,
               size_t C),
              (s, dinp, out, dout, N, C))

HOST_LOOPS tr__host_attn_softmax_forward_loops(tr_stream *s, float *att, const float *preatt,
                                               size_t BH, size_t T, float scale) {
  (void)s;
  for (size_t m = 0; m < BH; m++)
    for (size_t t = 0; t < T; t++) {
      const size_t row = (m * T + t) * T;
      softmax_row(att + row, preatt + row, t + 1, scale);
      memset(att + row + t + 1, 0, (T - t - 1) * sizeof *att);
    }
  return 0;
}
HOST_AVX2_TOO(tr__host_attn_softmax_forward,
              (tr_stream *s, float *att, const float *preatt, size_t BH, size_t T, float scale),
              (s, att, preatt, BH, T, scale))

HOST_LOOPS tr__host_attn_softmax_backward_loops(tr_stream *s, float *dpreatt, const float *att,
                                                const float *datt, size_t BH, size_t T,
                                                float scale) {
  (void)s;
  for (size_t m = 0; m < BH; m++)
    for (size_t t = 0; t < T; t++) {
      const size_t row = (m * T + t) * T;
      softmax_backward_row(dpreatt + row, att + row, datt + row, t + 1, scale);
      memset(dpreatt + row + t + 1, 0, (T - t - 1) * sizeof *dpreatt);
    }
  return 0;
}
HOST_AVX2_TOO(tr__host_attn_softmax_backward,
              (tr_stream *s, float *dpreatt, const float *att, const float *datt, size_t BH,
               size_t T, float scale),
              (s, dpreatt, att, datt, BH, T, scale))

/* ---- losses --------------------------------------------------------------------------------------- */

static int bad_target(tr_stream *s, const char *op, size_t n, int32_t t, size_t V) {
  return tr__device_fail(s->dev, TR_EINVAL, "%s: target %zu is %d, outside [0, %zu)", op, n,
                         (int)t, V);
}

int tr__host_crossentropy_forward(tr_stream *s, float *loss, float *probs, const float *logits,
                              const int32_t *targets, size_t N, size_t V, float scale) {
  double total = 0;
  for (size_t r = 0; r < N; r++) {
    const int32_t t = targets[r];
    if (t < 0 || (size_t)t >= V) return bad_target(s, "crossentropy_forward", r, t, V);
    const float *z = logits + r * V;
    /* -log p_t = log(sum exp(z - max)) - (z_t - max): exact even where p_t underflows */
    const float mx = row_max(z, V);
    const double lse = softmax_row_max(probs + r * V, z, V, 1.0f, mx);
    total += lse - ((double)z[t] - (double)mx);
  }
  loss[0] = (float)((double)scale * total);
  return 0;
}

int tr__host_crossentropy_backward(tr_stream *s, float *dlogits, const float *probs,
                              const int32_t *targets, size_t N, size_t V, float scale) {
  for (size_t r = 0; r < N; r++) {
    const int32_t t = targets[r];
    if (t < 0 || (size_t)t >= V) return bad_target(s, "crossentropy_backward", r, t, V);
    const float *p = probs + r * V;
    float *d = dlogits + r * V;
    const float pt = p[t]; /* before d (perhaps p itself) is written */
    for (size_t v = 0; v < V; v++) d[v] = scale * p[v];
    d[t] = scale * (pt - 1.0f);
  }
  return 0;
}

int tr__host_mse_forward(tr_stream *s, float *loss, const float *pred, const float *target, size_t n,
                     float scale) {
  (void)s;
  double acc[HOST_LANES] = {0};
  size_t i = 0;
  for (; i + HOST_LANES <= n; i += HOST_LANES)
    HOST_EACH_LANE
    for (int k = 0; k < HOST_LANES; k++) {
      const double e = (double)pred[i + k] - (double)target[i + k];
      acc[k] += e * e;
    }
  double total = 0;
  for (; i < n; i++) {
    const double e = (double)pred[i] - (double)target[i];
    total += e * e;
  }
  for (int k = 0; k < HOST_LANES; k++) total += acc[k];
  loss[0] = (float)((double)scale * total);
  return 0;
}

int tr__host_mse_backward(tr_stream *s, float *dpred, const float *pred, const float *target, size_t n,
                     float scale) {
  (void)s;
  const float k = 2.0f * scale;
  for (size_t i = 0; i < n; i++) dpred[i] = k * (pred[i] - target[i]);
  return 0;
}

/* ---- embedding -------------------------------------------------------------------------------------- */

static int bad_index(tr_stream *s, const char *op, size_t n, int32_t t, size_t V) {
  return tr__device_fail(s->dev, TR_EINVAL, "%s: index %zu is %d, outside [0, %zu)", op, n, (int)t, V);
}

int tr__host_embedding_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                           const float *wpe, size_t B, size_t T, size_t C, size_t V) {
  for (size_t b = 0; b < B; b++)
    for (size_t t = 0; t < T; t++) {
      const size_t bt = b * T + t;
      const int32_t ix = idx[bt];
      if (ix < 0 || (size_t)ix >= V) return bad_index(s, "embedding_forward", bt, ix, V);
      float *o = out + bt * C;
      const float *e = wte + (size_t)ix * C;
      if (wpe) {
        const float *p = wpe + t * C;
        for (size_t c = 0; c < C; c++) o[c] = e[c] + p[c];
      } else {
        memcpy(o, e, C * sizeof *o);
      }
    }
  return 0;
}

/* In (b, t) order, so the sums of a repeated token are always added in the same order. */
int tr__host_embedding_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                           const int32_t *idx, size_t B, size_t T, size_t C, size_t V) {
  for (size_t bt = 0; bt < B * T; bt++)
    if (idx[bt] < 0 || (size_t)idx[bt] >= V) return bad_index(s, "embedding_backward", bt, idx[bt], V);
  for (size_t b = 0; b < B; b++)
    for (size_t t = 0; t < T; t++) {
      const size_t bt = b * T + t;
      const float *g = dout + bt * C;
      float *e = dwte + (size_t)idx[bt] * C;
      for (size_t c = 0; c < C; c++) e[c] += g[c];
      if (dwpe) {
        float *p = dwpe + t * C;
        for (size_t c = 0; c < C; c++) p[c] += g[c];
      }
    }
  return 0;
}

/* ---- a member's part of the vocabulary ------------------------------------------------------ */

/* The row in [0, V) of whole-vocabulary token t, or -1 when another member holds it. */
static int64_t part_row(int32_t t, int64_t lo, size_t V) {
  const int64_t r = (int64_t)t - lo;
  return r >= 0 && r < (int64_t)V ? r : -1;
}

int tr__host_embedding_part_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                                    size_t N, size_t C, size_t V, int64_t lo) {
  (void)s;
  for (size_t i = 0; i < N; i++) {
    const int64_t r = part_row(idx[i], lo, V);
    if (r >= 0)
      memcpy(out + i * C, wte + (size_t)r * C, C * sizeof *out);
    else
      memset(out + i * C, 0, C * sizeof *out);
  }
  return 0;
}

/* In (b, t) order, as tr__host_embedding_backward */
int tr__host_embedding_part_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *idx, size_t B, size_t T, size_t C, size_t V,
                                     int64_t lo) {
  (void)s;
  for (size_t b = 0; b < B; b++)
    for (size_t t = 0; t < T; t++) {
      const size_t bt = b * T + t;
      const float *g = dout + bt * C;
      const int64_t r = part_row(idx[bt], lo, V);
      if (r >= 0) {
        float *e = dwte + (size_t)r * C;
        for (size_t c = 0; c < C; c++) e[c] += g[c];
      }
      if (dwpe) {
        float *p = dwpe + t * C;
        for (size_t c = 0; c < C; c++) p[c] += g[c];
      }
    }
  return 0;
}

/* In column order with `>`, so a row's first largest wins (the bits the vocabulary-parallel
 * loss has always had on host devices). */
int tr__host_crossentropy_part_max(tr_stream *s, float *mx, const float *logits, size_t N,
                                   size_t V) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    const float *z = logits + r * V;
    float m = z[0];
    for (size_t v = 1; v < V; v++) m = z[v] > m ? z[v] : m;
    mx[r] = m;
  }
  return 0;
}

/* libm's expf and a sum in column order, in double: the member's columns give the same bits
 * wherever they are computed on the host. */
int tr__host_crossentropy_part_sum(tr_stream *s, float *pair, float *exps, const float *logits,
                                   const float *mx, const int32_t *targets, size_t N, size_t V,
                                   int64_t lo, int64_t whole) {
  for (size_t r = 0; r < N; r++)
    if (targets[r] < 0 || targets[r] >= whole)
      return bad_target(s, "crossentropy_part_sum", r, targets[r], (size_t)whole);
  for (size_t r = 0; r < N; r++) {
    const float *z = logits + r * V;
    float *p = exps + r * V;
    double sum = 0;
    for (size_t v = 0; v < V; v++) sum += p[v] = expf(z[v] - mx[r]);
    const int64_t t = part_row(targets[r], lo, V);
    pair[2 * r] = (float)sum;
    pair[2 * r + 1] = t >= 0 ? z[t] : 0.0f;
  }
  return 0;
}

int tr__host_crossentropy_part_finish(tr_stream *s, float *loss, float *probs, const float *pair,
                                      const float *mx, size_t N, size_t V, float scale) {
  (void)s;
  double total = 0;
  for (size_t r = 0; r < N; r++) {
    const float inv = 1.0f / pair[2 * r];
    for (size_t v = 0; v < V; v++) probs[r * V + v] *= inv;
    total += log((double)pair[2 * r]) - ((double)pair[2 * r + 1] - (double)mx[r]);
  }
  loss[0] = (float)((double)scale * total);
  return 0;
}

int tr__host_crossentropy_part_backward(tr_stream *s, float *dlogits, const float *probs,
                                        const int32_t *targets, size_t N, size_t V, int64_t lo,
                                        float scale) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    const float *p = probs + r * V;
    float *d = dlogits + r * V;
    const int64_t t = part_row(targets[r], lo, V);
    const float pt = t >= 0 ? p[t] : 0.0f; /* before d (perhaps p itself) is written */
    for (size_t v = 0; v < V; v++) d[v] = scale * p[v];
    if (t >= 0) d[t] = scale * (pt - 1.0f);
  }
  return 0;
}

/* The first of equals, by `>` in column order (tr_crossentropy_correct_parts' bits) */
int tr__host_crossentropy_part_argmax(tr_stream *s, float *top, float *at, const float *logits,
                                      size_t N, size_t V, int64_t lo) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    const float *z = logits + r * V;
    size_t best = 0;
    for (size_t v = 1; v < V; v++)
      if (z[v] > z[best]) best = v;
    top[r] = z[best];
    at[r] = -(float)(lo + (int64_t)best);
  }
  return 0;
}

int tr__host_crossentropy_part_vote(tr_stream *s, float *at, const float *logits, const float *top,
                                    size_t N, size_t V, int64_t lo) {
  (void)s;
  for (size_t r = 0; r < N; r++) {
    if (!isfinite(at[r])) continue; /* already without a say */
    const int64_t col = -(int64_t)at[r] - lo;
    if (col < 0 || col >= (int64_t)V || logits[r * V + (size_t)col] < top[r]) at[r] = -INFINITY;
  }
  return 0;
}

int tr__host_crossentropy_part_hits(tr_stream *s, float *hits, const float *at,
                                    const int32_t *targets, size_t N) {
  (void)s;
  for (size_t r = 0; r < N; r++) /* a row no member had a say in (NaN logits) misses */
    hits[r] = isfinite(at[r]) && (int64_t)(-at[r]) == targets[r] ? 1.0f : 0.0f;
  return 0;
}
