/* test_cuda_vocab_ops.c — the CUDA backend's ops of a member's part of the vocabulary
 * (tr_embedding_part_*, tr_crossentropy_part_*) against the host backend (the oracle, itself
 * held to float64 by test_vocab_ops), through op_harness on the same inputs: normalised
 * error <= 1e-7, no NaN, guard bytes untouched, inputs unchanged. Every member of a split
 * is run (first, middle and last rows of the vocabulary), with more rows than a block or a
 * tile of the sorted backward holds and tokens that repeat across tiles.
 *
 * Exits 77 (skipped) when the machine has no GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "op_harness.h"

static tr_device_list *list;
static tr_device *host, *gpu;

static int setup(void **state) {
  (void)state;
  char err[256];
  if (tr_device_list_open(&list, "host:1,cuda:0", err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  host = tr_device_list_at(list, 0);
  gpu = tr_device_list_at(list, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tr_device_list_close(list);
  return 0;
}

typedef struct P {
  size_t N, B, T, C, V;
  int64_t lo, whole;
  float scale;
  int pos;
} P;

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define CMP(args, fn, p) assert_true(th_compare_devices(host, gpu, args, NARGS(args), fn, p))

static int run_emb_forward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_part_forward(s, a[2], a[0], a[1], p->B * p->T, p->C, p->V, p->lo);
}
static int run_emb_backward(tr_stream *s, void **a, void *ctx) {
  P *p = ctx;
  return tr_embedding_part_backward(s, a[2], p->pos ? a[3] : NULL, a[1], a[0], p->B, p->T, p->C,
                                    p->V, p->lo);
}

static void embedding_part_matches_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(1);
  /* (B, T, C, parts, V a part): the last has 4096 rows (16 tiles) and 8 tokens per member */
  static const size_t cases[][5] = {{1, 1, 1, 1, 1}, {2, 5, 33, 3, 4}, {3, 17, 64, 4, 5},
                                    {4, 64, 129, 2, 50}, {4, 1024, 96, 3, 8}};
  for (int k = 0; k < 5; k++) {
    const size_t B = cases[k][0], T = cases[k][1], C = cases[k][2], parts = cases[k][3],
                 V = cases[k][4], whole = parts * V, BT = B * T;
    float *wte = th_alloc_f(V * C), *dout = th_alloc_f(BT * C), *dwte = th_alloc_f(V * C),
          *dwpe = th_alloc_f(T * C);
    int32_t *idx = th_alloc_i(BT);
    th_fill_normal(&r, wte, V * C, 1), th_fill_normal(&r, dout, BT * C, 1);
    th_fill_normal(&r, dwte, V * C, 1), th_fill_normal(&r, dwpe, T * C, 1);
    th_fill_index(&r, idx, BT, (int32_t)whole);
    for (size_t part = 0; part < parts; part++)
      for (int pos = 0; pos < 2; pos++) {
        P p = {.B = B, .T = T, .C = C, .V = V, .lo = (int64_t)(part * V), .pos = pos};
        th_arg f[] = {{"idx", BT, 4, TH_IN, idx, 0}, {"wte", V * C, 4, TH_IN, wte, 0},
                      {"out", BT * C, 4, TH_OUT, NULL, 0}};
        if (!pos) CMP(f, run_emb_forward, &p);
        th_arg b[] = {{"idx", BT, 4, TH_IN, idx, 0}, {"dout", BT * C, 4, TH_IN, dout, 0},
                      {"dwte", V * C, 4, TH_OUT, dwte, 0}, {"dwpe", T * C, 4, TH_OUT, dwpe, 0}};
        CMP(b, run_emb_backward, &p);
      }
    free(wte), free(dout), free(dwte), free(dwpe), free(idx);
  }
}

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

static void crossentropy_parts_match_host(void **state) {
  (void)state;
  th_rng r = th_rng_for(2);
  /* (N, parts, V a part): the last takes more than one pass of the grid */
  static const size_t cases[][3] = {{1, 1, 1}, {5, 2, 7}, {33, 4, 64}, {64, 2, 500},
                                    {20000, 2, 33}};
  for (int k = 0; k < 5; k++) {
    const size_t N = cases[k][0], parts = cases[k][1], V = cases[k][2], n = N * V;
    float *z = th_alloc_f(n), *mx = th_alloc_f(N), *pair = th_alloc_f(2 * N),
          *probs = th_alloc_f(n);
    int32_t *t = th_alloc_i(N);
    th_fill_normal(&r, z, n, 3);
    for (size_t v = 0; v < V; v++) z[v] += 90.0f; /* float exp overflows at 88.7 */
    th_fill_index(&r, t, N, (int32_t)(parts * V));
    /* the all-reduced max and pair as a member could receive them: its own, a little more */
    for (size_t i = 0; i < N; i++) {
      float m = z[i * V];
      for (size_t v = 1; v < V; v++) m = z[i * V + v] > m ? z[i * V + v] : m;
      mx[i] = m + 0.25f;
    }
    th_fill_uniform(&r, probs, n, 0, 1);
    th_fill_uniform(&r, pair, 2 * N, 1, 4);
    for (size_t part = 0; part < parts; part++) {
      P p = {.N = N, .V = V, .lo = (int64_t)(part * V), .whole = (int64_t)(parts * V),
             .scale = 1.0f / (float)N};
      th_arg a[] = {{"logits", n, 4, TH_IN, z, 0}, {"mx", N, 4, TH_OUT, NULL, 0}};
      CMP(a, run_ce_max, &p);
      th_arg b[] = {{"logits", n, 4, TH_IN, z, 0}, {"mx", N, 4, TH_IN, mx, 0},
                    {"targets", N, 4, TH_IN, t, 0}, {"pair", 2 * N, 4, TH_OUT, NULL, 0},
                    {"exps", n, 4, TH_OUT, NULL, 0}};
      CMP(b, run_ce_sum, &p);
      th_arg c[] = {{"pair", 2 * N, 4, TH_IN, pair, 0}, {"mx", N, 4, TH_IN, mx, 0},
                    {"loss", 1, 4, TH_OUT, NULL, 0}, {"probs", n, 4, TH_OUT, probs, 0}};
      CMP(c, run_ce_finish, &p);
      th_arg d[] = {{"probs", n, 4, TH_IN, probs, 0}, {"targets", N, 4, TH_IN, t, 0},
                    {"dlogits", n, 4, TH_OUT, NULL, 0}};
      CMP(d, run_ce_backward, &p);
    }
    free(z), free(mx), free(pair), free(probs), free(t);
  }
}

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
  return tr_crossentropy_part_hits(s, a[1], a[1], a[0], p->N);
}

/* Both devices' outputs, bit for bit (votes are -infinity, which the normalised error refuses) */
static void same_bits(const th_arg *args, int nargs, th_run_fn fn, P *p) {
  void *want[4], *got[4];
  assert_int_equal(th_run(host, args, nargs, fn, p, want), 0);
  assert_int_equal(th_run(gpu, args, nargs, fn, p, got), 0);
  for (int i = 0; i < nargs; i++)
    if (args[i].dir == TH_OUT) assert_memory_equal(want[i], got[i], args[i].n * 4);
  th_free_outputs(want, nargs), th_free_outputs(got, nargs);
}

/* Logits from a few values, so rows tie: the first of equals must win on both. */
static void accuracy_parts_match_host_bit_for_bit(void **state) {
  (void)state;
  th_rng r = th_rng_for(3);
  static const size_t cases[][2] = {{1, 1}, {7, 5}, {40, 33}, {3000, 100}}; /* (N, V) */
  for (int k = 0; k < 4; k++) {
    const size_t N = cases[k][0], V = cases[k][1];
    float *z = th_alloc_f(N * V), *top = th_alloc_f(N), *at = th_alloc_f(N);
    int32_t *t = th_alloc_i(N);
    for (size_t i = 0; i < N * V; i++) z[i] = (float)(th_next(&r) % 4);
    th_fill_index(&r, t, N, (int32_t)(2 * V));
    for (size_t i = 0; i < N; i++) {
      top[i] = (float)(th_next(&r) % 5);
      at[i] = th_uniform(&r) < 0.2 ? -INFINITY : -(float)(th_next(&r) % (2 * V));
    }
    for (int part = 0; part < 2; part++) {
      P p = {.N = N, .V = V, .lo = (int64_t)part * (int64_t)V};
      th_arg a[] = {{"logits", N * V, 4, TH_IN, z, 0}, {"top", N, 4, TH_OUT, NULL, 0},
                    {"at", N, 4, TH_OUT, NULL, 0}};
      same_bits(a, 3, run_argmax, &p);
      th_arg b[] = {{"logits", N * V, 4, TH_IN, z, 0}, {"top", N, 4, TH_IN, top, 0},
                    {"at", N, 4, TH_OUT, at, 0}};
      same_bits(b, 3, run_vote, &p);
      th_arg h[] = {{"targets", N, 4, TH_IN, t, 0}, {"at/hits", N, 4, TH_OUT, at, 0}};
      same_bits(h, 2, run_hits, &p);
    }
    free(z), free(top), free(at), free(t);
  }
}

int main(void) {
  if (tr_device_count(TR_DEVICE_CUDA) == 0) {
    fprintf(stderr, "test_cuda_vocab_ops: no GPU on this machine: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(embedding_part_matches_host),
      cmocka_unit_test(crossentropy_parts_match_host),
      cmocka_unit_test(accuracy_parts_match_host_bit_for_bit),
  };
  fprintf(stderr, "TR_TEST_SEED=%llu\n", (unsigned long long)th_seed());
  return cmocka_run_group_tests(tests, setup, teardown);
}
