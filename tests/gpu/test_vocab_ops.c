/* test_vocab_ops.c — the host backend's ops of a member's part of the vocabulary
 * (tr_embedding_part_*, tr_crossentropy_part_*) against a float64 reference computed here,
 * through op_harness (guard bytes, inputs unchanged, outputs NaN-filled first so an element
 * an op forgets fails). The vocabulary is cut into members' parts and the test plays the
 * collectives between them (the max and the sum across parts), so the pieces together must
 * give the whole embedding and the whole cross-entropy. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host_device.h"

typedef struct P {
  size_t N, B, T, C, V;
  int64_t lo, whole;
  float scale;
  int pos; /* dwpe given */
} P;

/* (B, T, C, parts, V a part) */
static const size_t emb_cases[][5] = {{1, 1, 1, 1, 1}, {1, 3, 7, 2, 3}, {2, 5, 33, 3, 4},
                                      {3, 17, 64, 4, 5}, {4, 64, 129, 2, 50}};
enum { NEMB = sizeof emb_cases / sizeof emb_cases[0] };

/* ---- the embedding ------------------------------------------------------------------------- */

static int run_emb_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_part_forward(s, a[2], a[0], a[1], p->B * p->T, p->C, p->V, p->lo);
}
static int run_emb_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_part_backward(s, a[2], p->pos ? a[3] : NULL, a[1], a[0], p->B, p->T, p->C,
                                    p->V, p->lo);
}

static void embedding_part_gathers_its_rows_and_adds_into_them_alone(void **state) {
  (void)state;
  th_rng r = th_rng_for(1);
  for (int k = 0; k < NEMB; k++) {
    const size_t B = emb_cases[k][0], T = emb_cases[k][1], C = emb_cases[k][2],
                 parts = emb_cases[k][3], V = emb_cases[k][4], whole = parts * V, BT = B * T;
    float *wte = th_alloc_f(whole * C), *dout = th_alloc_f(BT * C), *dwte0 = th_alloc_f(V * C),
          *dwpe0 = th_alloc_f(T * C);
    int32_t *idx = th_alloc_i(BT);
    th_fill_normal(&r, wte, whole * C, 1);
    th_fill_normal(&r, dout, BT * C, 1);
    th_fill_normal(&r, dwte0, V * C, 1); /* gradients accumulate */
    th_fill_normal(&r, dwpe0, T * C, 1);
    th_fill_index(&r, idx, BT, (int32_t)whole);
    idx[BT - 1] = (int32_t)(whole - 1); /* the last row of the vocabulary, on the last member */
    double *ref = th_alloc_d(BT * C), *sum = th_alloc_d(BT * C), *rwte = th_alloc_d(V * C),
           *rwpe = th_alloc_d(T * C);
    memset(sum, 0, BT * C * sizeof *sum);
    for (size_t part = 0; part < parts; part++) {
      const int64_t lo = (int64_t)(part * V);
      const float *mine = wte + part * V * C;
      for (int pos = 0; pos < 2; pos++) {
        P p = {.B = B, .T = T, .C = C, .V = V, .lo = lo, .pos = pos};
        void *out[4];
        if (!pos) {
          th_arg f[] = {{"idx", BT, 4, TH_IN, idx, 0}, {"wte", V * C, 4, TH_IN, mine, 0},
                        {"out", BT * C, 4, TH_OUT, NULL, 0}};
          RUN(f, run_emb_forward, &p, out);
          for (size_t i = 0; i < BT; i++)
            for (size_t c = 0; c < C; c++) {
              const int64_t row = idx[i] - lo;
              ref[i * C + c] = row >= 0 && row < (int64_t)V ? mine[row * C + c] : 0.0;
            }
          CHECK("embedding_part_forward", out[2], ref, BT * C, 0);
          for (size_t i = 0; i < BT * C; i++) sum[i] += ((float *)out[2])[i];
          th_free_outputs(out, 3);
        }
        for (size_t i = 0; i < V * C; i++) rwte[i] = dwte0[i];
        for (size_t i = 0; i < T * C; i++) rwpe[i] = dwpe0[i];
        for (size_t i = 0; i < BT; i++) {
          const int64_t row = idx[i] - lo;
          for (size_t c = 0; c < C; c++) {
            if (row >= 0 && row < (int64_t)V) rwte[row * C + c] += dout[i * C + c];
            rwpe[(i % T) * C + c] += dout[i * C + c];
          }
        }
        th_arg b[] = {{"idx", BT, 4, TH_IN, idx, 0}, {"dout", BT * C, 4, TH_IN, dout, 0},
                      {"dwte", V * C, 4, TH_OUT, dwte0, 0}, {"dwpe", T * C, 4, TH_OUT, dwpe0, 0}};
        RUN(b, run_emb_backward, &p, out);
        CHECK("embedding_part_backward dwte", out[2], rwte, V * C, TH_TOL_ELEMENTWISE);
        if (pos) CHECK("embedding_part_backward dwpe", out[3], rwpe, T * C, TH_TOL_ELEMENTWISE);
        else assert_memory_equal(out[3], dwpe0, T * C * sizeof(float)); /* NULL: untouched */
        th_free_outputs(out, 4);
      }
    }
    /* the members' rows summed (the all-reduce) are the whole table's gather */
    for (size_t i = 0; i < BT; i++)
      for (size_t c = 0; c < C; c++) ref[i * C + c] = wte[(size_t)idx[i] * C + c];
    for (size_t i = 0; i < BT * C; i++) assert_true(sum[i] == ref[i]);
    free(wte), free(dout), free(dwte0), free(dwpe0), free(idx);
    free(ref), free(sum), free(rwte), free(rwpe);
  }
}

/* ---- the cross-entropy --------------------------------------------------------------------- */

static int run_ce_max(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_max(s, a[1], a[0], p->N, p->V);
}
static int run_ce_sum(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_sum(s, a[3], a[4], a[0], a[1], a[2], p->N, p->V, p->lo, p->whole);
}
static int run_ce_finish(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_finish(s, a[2], a[3], a[0], a[1], p->N, p->V, p->scale);
}
static int run_ce_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_backward(s, a[2], a[0], a[1], p->N, p->V, p->lo, p->scale);
}
static int run_ce_backward_inplace(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_backward(s, a[1], a[1], a[0], p->N, p->V, p->lo, p->scale);
}

/* (N, parts, V a part) */
static const size_t ce_cases[][3] = {{1, 1, 1}, {1, 2, 1}, {5, 2, 7}, {33, 4, 64}, {64, 2, 500}};
enum { NCE = sizeof ce_cases / sizeof ce_cases[0] };

static void crossentropy_parts_give_the_whole_loss_and_gradient(void **state) {
  (void)state;
  th_rng r = th_rng_for(2);
  for (int k = 0; k < NCE; k++) {
    const size_t N = ce_cases[k][0], parts = ce_cases[k][1], V = ce_cases[k][2],
                 whole = parts * V;
    const float scale = 1.0f / (float)N;
    float *z = th_alloc_f(N * whole), *zp = th_alloc_f(N * V), *mx = th_alloc_f(N),
          *pair = th_alloc_f(2 * N), *exps = th_alloc_f(N * whole), *probs = th_alloc_f(N * V);
    int32_t *t = th_alloc_i(N);
    th_fill_normal(&r, z, N * whole, 3);
    for (size_t v = 0; v < whole; v++) z[v] += 90.0f; /* float exp overflows at 88.7 */
    th_fill_index(&r, t, N, (int32_t)whole);
    double *rmx = th_alloc_d(N), *rpair = th_alloc_d(2 * N), *rp = th_alloc_d(N * whole),
           *rexp = th_alloc_d(N * V), rloss = 0;
    for (size_t i = 0; i < N; i++) { /* the whole rows' softmax and loss, in float64 */
      double m = -INFINITY, s = 0;
      for (size_t v = 0; v < whole; v++) m = z[i * whole + v] > m ? z[i * whole + v] : m;
      for (size_t v = 0; v < whole; v++) s += exp((double)z[i * whole + v] - m);
      for (size_t v = 0; v < whole; v++) rp[i * whole + v] = exp((double)z[i * whole + v] - m) / s;
      rloss += log(s) - ((double)z[i * whole + t[i]] - m);
    }
    rloss *= scale;
    for (size_t i = 0; i < N; i++) mx[i] = -INFINITY;
    memset(pair, 0, 2 * N * sizeof *pair);
    void *out[5];
    for (size_t part = 0; part < parts; part++) { /* each member's max; the all-reduce MAX */
      for (size_t i = 0; i < N; i++) memcpy(zp + i * V, z + i * whole + part * V, V * 4);
      P p = {.N = N, .V = V};
      th_arg a[] = {{"logits", N * V, 4, TH_IN, zp, 0}, {"mx", N, 4, TH_OUT, NULL, 0}};
      RUN(a, run_ce_max, &p, out);
      for (size_t i = 0; i < N; i++) {
        double m = -INFINITY;
        for (size_t v = 0; v < V; v++) m = zp[i * V + v] > m ? zp[i * V + v] : m;
        rmx[i] = m;
      }
      CHECK("crossentropy_part_max", out[1], rmx, N, 0);
      for (size_t i = 0; i < N; i++) mx[i] = fmaxf(mx[i], ((float *)out[1])[i]);
      th_free_outputs(out, 2);
    }
    for (size_t part = 0; part < parts; part++) { /* exps and pairs; the all-reduce SUM */
      for (size_t i = 0; i < N; i++) memcpy(zp + i * V, z + i * whole + part * V, V * 4);
      P p = {.N = N, .V = V, .lo = (int64_t)(part * V), .whole = (int64_t)whole};
      th_arg a[] = {{"logits", N * V, 4, TH_IN, zp, 0}, {"mx", N, 4, TH_IN, mx, 0},
                    {"targets", N, 4, TH_IN, t, 0}, {"pair", 2 * N, 4, TH_OUT, NULL, 0},
                    {"exps", N * V, 4, TH_OUT, NULL, 0}};
      RUN(a, run_ce_sum, &p, out);
      for (size_t i = 0; i < N; i++) {
        double s = 0;
        for (size_t v = 0; v < V; v++) s += rexp[i * V + v] = exp((double)zp[i * V + v] - mx[i]);
        const int64_t col = t[i] - p.lo;
        rpair[2 * i] = s, rpair[2 * i + 1] = col >= 0 && col < (int64_t)V ? zp[i * V + col] : 0;
      }
      CHECK("crossentropy_part_sum exps", out[4], rexp, N * V, TH_TOL_ELEMENTWISE);
      CHECK("crossentropy_part_sum pair", out[3], rpair, 2 * N, TH_TOL_ELEMENTWISE);
      for (size_t i = 0; i < 2 * N; i++) pair[i] += ((float *)out[3])[i];
      for (size_t i = 0; i < N; i++) memcpy(exps + i * whole + part * V, (float *)out[4] + i * V, V * 4);
      th_free_outputs(out, 5);
    }
    for (size_t part = 0; part < parts; part++) { /* every member: the whole loss, its probs */
      for (size_t i = 0; i < N; i++) memcpy(zp + i * V, exps + i * whole + part * V, V * 4);
      P p = {.N = N, .V = V, .scale = scale, .lo = (int64_t)(part * V)};
      th_arg a[] = {{"pair", 2 * N, 4, TH_IN, pair, 0}, {"mx", N, 4, TH_IN, mx, 0},
                    {"loss", 1, 4, TH_OUT, NULL, 0}, {"probs", N * V, 4, TH_OUT, zp, 0}};
      RUN(a, run_ce_finish, &p, out);
      double rl[1] = {rloss}, *rpp = th_alloc_d(N * V), *rd = th_alloc_d(N * V);
      for (size_t i = 0; i < N; i++)
        for (size_t v = 0; v < V; v++) rpp[i * V + v] = rp[i * whole + part * V + v];
      /* log Σ exp less the target's logit: float32 cancels where the loss is tiny (a target
       * far above the rest), so within float32's absolute precision as well */
      const double got = ((const float *)out[2])[0];
      if (!(fabs(got - rl[0]) <= 3e-4 * fabs(rl[0]) + 1e-6))
        fail_msg("crossentropy_part_finish loss %.9g, want %.9g", got, rl[0]);
      CHECK("crossentropy_part_finish probs", out[3], rpp, N * V, TH_TOL_ELEMENTWISE);
      memcpy(probs, out[3], N * V * 4);
      th_free_outputs(out, 4);
      for (size_t i = 0; i < N; i++)
        for (size_t v = 0; v < V; v++)
          rd[i * V + v] = scale * ((double)probs[i * V + v] - ((int64_t)v == t[i] - p.lo));
      th_arg b[] = {{"probs", N * V, 4, TH_IN, probs, 0}, {"targets", N, 4, TH_IN, t, 0},
                    {"dlogits", N * V, 4, TH_OUT, NULL, 0}};
      RUN(b, run_ce_backward, &p, out);
      CHECK("crossentropy_part_backward", out[2], rd, N * V, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 3);
      th_arg bi[] = {{"targets", N, 4, TH_IN, t, 0}, {"probs/dlogits", N * V, 4, TH_OUT, probs, 0}};
      RUN(bi, run_ce_backward_inplace, &p, out);
      CHECK("crossentropy_part_backward in place", out[1], rd, N * V, TH_TOL_ELEMENTWISE);
      th_free_outputs(out, 2);
      free(rpp), free(rd);
    }
    free(z), free(zp), free(mx), free(pair), free(exps), free(probs), free(t);
    free(rmx), free(rpair), free(rp), free(rexp);
  }
}

static void crossentropy_part_sum_rejects_a_target_outside_the_whole_vocabulary(void **state) {
  (void)state;
  tr_stream *s = tr_device_stream(dev);
  float *z, *e, *mx, *pair;
  int32_t *t;
  assert_int_equal(tr_device_alloc(dev, 2 * 4 * sizeof(float), (void **)&z), 0);
  assert_int_equal(tr_device_alloc(dev, 2 * 4 * sizeof(float), (void **)&e), 0);
  assert_int_equal(tr_device_alloc(dev, 2 * sizeof(float), (void **)&mx), 0);
  assert_int_equal(tr_device_alloc(dev, 4 * sizeof(float), (void **)&pair), 0);
  assert_int_equal(tr_device_alloc(dev, 2 * sizeof(int32_t), (void **)&t), 0);
  tr_fill(s, z, 8, 0.5f), tr_fill(s, mx, 2, 0.5f);
  t[0] = 1, t[1] = 8; /* columns [4, 8) of a vocabulary of 8 */
  assert_int_equal(tr_crossentropy_part_sum(s, pair, e, z, mx, t, 2, 4, 4, 8), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(dev), "crossentropy_part_sum: target 1 is 8"));
  t[1] = 7;
  assert_int_equal(tr_crossentropy_part_sum(s, pair, e, z, mx, t, 2, 4, 4, 8), 0);
  assert_true(pair[0] == 4.0f && pair[1] == 0.0f && pair[3] == 0.5f); /* target 1: not here */
  /* columns that do not fit the vocabulary */
  assert_int_equal(tr_crossentropy_part_sum(s, pair, e, z, mx, t, 2, 4, 6, 8), TR_EINVAL);
  assert_non_null(strstr(tr_device_error(dev), "[6, 10)"));
  tr_device_free(dev, z), tr_device_free(dev, e), tr_device_free(dev, mx);
  tr_device_free(dev, pair), tr_device_free(dev, t);
}

/* ---- the accuracy of split logits ---------------------------------------------------------- */

static int run_argmax(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_argmax(s, a[1], a[2], a[0], p->N, p->V, p->lo);
}
static int run_vote(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_vote(s, a[2], a[0], a[1], p->N, p->V, p->lo);
}
static int run_hits(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_crossentropy_part_hits(s, a[1], a[1], a[0], p->N); /* in place */
}

/* Logits from a few values, so rows tie within and across members: the whole row's first
 * largest column must win, whichever member holds it. */
static void accuracy_parts_find_the_first_largest_of_the_whole_row(void **state) {
  (void)state;
  th_rng r = th_rng_for(3);
  static const size_t cases[][3] = {{1, 1, 1}, {7, 2, 1}, {40, 3, 5}, {200, 4, 33}};
  for (int k = 0; k < 4; k++) {
    const size_t N = cases[k][0], parts = cases[k][1], V = cases[k][2], whole = parts * V;
    float *z = th_alloc_f(N * whole), *zp = th_alloc_f(N * V), *top = th_alloc_f(N),
          *at = th_alloc_f(N), *tops = th_alloc_f(parts * N), *ats = th_alloc_f(parts * N);
    int32_t *t = th_alloc_i(N), *best = th_alloc_i(N);
    for (size_t i = 0; i < N * whole; i++) z[i] = (float)(th_next(&r) % 4);
    for (size_t i = 0; i < N; i++) {
      best[i] = 0;
      for (size_t v = 1; v < whole; v++)
        if (z[i * whole + v] > z[i * whole + (size_t)best[i]]) best[i] = (int32_t)v;
      t[i] = th_uniform(&r) < 0.5 ? best[i] : (int32_t)(th_next(&r) % whole);
    }
    for (size_t i = 0; i < N; i++) top[i] = at[i] = -INFINITY;
    void *out[3];
    for (size_t part = 0; part < parts; part++) { /* argmax; the all-reduce MAX of top */
      for (size_t i = 0; i < N; i++) memcpy(zp + i * V, z + i * whole + part * V, V * 4);
      P p = {.N = N, .V = V, .lo = (int64_t)(part * V)};
      th_arg a[] = {{"logits", N * V, 4, TH_IN, zp, 0}, {"top", N, 4, TH_OUT, NULL, 0},
                    {"at", N, 4, TH_OUT, NULL, 0}};
      RUN(a, run_argmax, &p, out);
      for (size_t i = 0; i < N; i++) {
        size_t b = 0;
        for (size_t v = 1; v < V; v++)
          if (zp[i * V + v] > zp[i * V + b]) b = v;
        assert_true(((float *)out[1])[i] == zp[i * V + b]);
        assert_true(((float *)out[2])[i] == -(float)(p.lo + (int64_t)b));
        tops[part * N + i] = ((float *)out[1])[i], ats[part * N + i] = ((float *)out[2])[i];
        top[i] = fmaxf(top[i], tops[part * N + i]);
      }
      th_free_outputs(out, 3);
    }
    for (size_t part = 0; part < parts; part++) { /* vote; the all-reduce MAX of at */
      for (size_t i = 0; i < N; i++) memcpy(zp + i * V, z + i * whole + part * V, V * 4);
      P p = {.N = N, .V = V, .lo = (int64_t)(part * V)};
      th_arg a[] = {{"logits", N * V, 4, TH_IN, zp, 0}, {"top", N, 4, TH_IN, top, 0},
                    {"at", N, 4, TH_OUT, ats + part * N, 0}};
      RUN(a, run_vote, &p, out);
      for (size_t i = 0; i < N; i++) {
        const float want = tops[part * N + i] < top[i] ? -INFINITY : ats[part * N + i];
        assert_true(((float *)out[2])[i] == want);
        at[i] = fmaxf(at[i], want);
      }
      th_free_outputs(out, 3);
    }
    int64_t want = 0;
    for (size_t i = 0; i < N; i++) {
      assert_true(at[i] == -(float)best[i]); /* the whole row's first largest */
      want += t[i] == best[i];
    }
    P p = {.N = N};
    th_arg h[] = {{"targets", N, 4, TH_IN, t, 0}, {"at/hits", N, 4, TH_OUT, at, 0}};
    RUN(h, run_hits, &p, out);
    int64_t got = 0;
    for (size_t i = 0; i < N; i++) {
      const float hi = ((float *)out[1])[i];
      assert_true(hi == (t[i] == best[i] ? 1.0f : 0.0f));
      got += hi == 1.0f;
    }
    assert_int_equal(got, want);
    th_free_outputs(out, 2);
    free(z), free(zp), free(top), free(at), free(tops), free(ats), free(t), free(best);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(embedding_part_gathers_its_rows_and_adds_into_them_alone),
      cmocka_unit_test(crossentropy_parts_give_the_whole_loss_and_gradient),
      cmocka_unit_test(crossentropy_part_sum_rejects_a_target_outside_the_whole_vocabulary),
      cmocka_unit_test(accuracy_parts_find_the_first_largest_of_the_whole_row),
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
