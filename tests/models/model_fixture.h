/* model_fixture.h — what test_model.c and test_stage.c share: three host devices opened for
 * the whole group (setup, teardown), the tiny gpt and MLP they train, a normalised error,
 * and stages chained into a pipeline on one device each (pipe_open, then pipe_forward,
 * pipe_backward and pipe_step per batch, pipe_download to read the whole parameter space). */
#ifndef TR_TEST_MODEL_FIXTURE_H
#define TR_TEST_MODEL_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mtest.h"
#include "tr_model.h"
#include "tr_stage.h"

static tr_device_list *devs;

static inline int setup(void **state) {
  (void)state;
  devs = mt_open(3);
  return 0;
}

static inline int teardown(void **state) {
  (void)state;
  tr_device_list_close(devs);
  return 0;
}

static inline tr_model *tiny_gpt(int vocab) {
  const tr_gpt_config g = {.vocab = vocab, .ctx = 6, .width = 8, .layers = 2, .heads = 2, .hidden = 20};
  tr_model *m;
  assert_int_equal(tr_model_gpt(&m, &g), 0);
  return m;
}

static inline tr_model *tiny_mlp(void) {
  tr_model *m;
  assert_int_equal(tr_model_mlp(&m, 12, 3), 0);
  return m;
}

static inline double norm_rel(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return sqrt(num / den);
}

/* ---- stages chained into a pipeline (GPipe order), on one device each --------------------------- */

typedef struct pipe {
  int n;
  tr_stage *st[4];
  const tr_model *m;
} pipe;

static inline pipe pipe_open(const tr_model *m, const int *cuts, int n, int batch, int slots,
                             int global_batch, tr_optim_config o, uint64_t seed) {
  pipe p = {.n = n, .m = m};
  for (int k = 0; k < n; k++) {
    tr_stage_config c = {.first = cuts[k], .end = cuts[k + 1], .batch = batch, .slots = slots,
                         .global_batch = global_batch, .seed = seed, .optim = o};
    char err[256];
    int rc = tr_stage_open(&p.st[k], m, tr_device_list_at(devs, k), &c, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
  }
  return p;
}

static inline void pipe_close(pipe *p) {
  for (int k = 0; k < p->n; k++) tr_stage_close(p->st[k]);
}

static inline tr_stream *sof(const pipe *p, int k) { return tr_stage_stream(p->st[k]); }

/* x and y: the micro-batch's samples (host) */
static inline float pipe_forward(pipe *p, int slot, const void *x, const void *y) {
  tr_stage *first = p->st[0], *last = p->st[p->n - 1];
  assert_int_equal(tr_memcpy(sof(p, 0), tr_stage_input(first, slot), x,
                             tr_stage_info_of(first)->input_bytes, TR_COPY_H2D), 0);
  assert_int_equal(tr_memcpy(sof(p, p->n - 1), tr_stage_target(last, slot), y,
                             tr_stage_info_of(last)->target_bytes, TR_COPY_H2D), 0);
  for (int k = 0; k < p->n; k++) {
    int rc = tr_stage_forward(p->st[k], slot);
    if (rc) fprintf(stderr, "%s\n", tr_stage_error(p->st[k]));
    assert_int_equal(rc, 0);
    if (k + 1 < p->n)
      assert_int_equal(tr_memcpy_peer(sof(p, k + 1), tr_stage_input(p->st[k + 1], slot),
                                      tr_stage_device(p->st[k + 1]), tr_stage_output(p->st[k], slot),
                                      tr_stage_device(p->st[k]),
                                      tr_stage_info_of(p->st[k])->output_bytes), 0);
  }
  float loss;
  assert_int_equal(tr_memcpy(sof(p, p->n - 1), &loss, tr_stage_loss(last, slot), 4, TR_COPY_D2H), 0);
  assert_int_equal(tr_stream_synchronize(sof(p, p->n - 1)), 0);
  return loss;
}

static inline void pipe_backward(pipe *p, int slot) {
  for (int k = p->n - 1; k >= 0; k--) {
    const float *din;
    assert_int_equal(tr_stage_backward(p->st[k], slot, &din), 0);
    if (k == 0) assert_null(din);
    else
      assert_int_equal(tr_memcpy_peer(sof(p, k), tr_stage_dout(p->st[k - 1], slot),
                                      tr_stage_device(p->st[k - 1]), din, tr_stage_device(p->st[k]),
                                      tr_stage_info_of(p->st[k])->input_bytes), 0);
  }
}

static inline void pipe_zero(pipe *p) {
  for (int k = 0; k < p->n; k++) assert_int_equal(tr_stage_zero_grads(p->st[k]), 0);
}

/* Global-norm clipping as the strategies do it: partial sums of squares, added, every stage
 * stepping with the total (gathered through the host here). */
static inline void pipe_step(pipe *p) {
  float *part[4], total = 0;
  for (int k = 0; k < p->n; k++) {
    tr_device *d = tr_stage_device(p->st[k]);
    part[k] = mt_up(d, NULL, 1);
    assert_int_equal(tr_stage_grad_sumsq(p->st[k], part[k], 0), 0);
    float *h = mt_down(d, part[k], 1);
    total += *h;
    free(h);
  }
  for (int k = 0; k < p->n; k++) {
    tr_stream *s = sof(p, k);
    assert_int_equal(tr_memcpy(s, part[k], &total, 4, TR_COPY_H2D), 0);
    assert_int_equal(tr_stage_step(p->st[k], part[k]), 0);
    assert_int_equal(tr_stream_synchronize(s), 0);
    tr_device_free(tr_stage_device(p->st[k]), part[k]);
  }
}

/* The whole parameter space (params or grads) gathered from the stages. */
static inline float *pipe_download(pipe *p, tr_stage_buffer which) {
  float *h = calloc(tr_model_numel(p->m), sizeof *h);
  for (int k = 0; k < p->n; k++) {
    assert_int_equal(tr_stage_download(p->st[k], which, h + tr_stage_info_of(p->st[k])->offset), 0);
    assert_int_equal(tr_stream_synchronize(sof(p, k)), 0);
  }
  return h;
}

#endif
