/* clipnorm.h — the gradients' global norm before each update, across the stages of a
 * replica: every stage adds its share of the squared gradients and tells the others, and
 * each sums the shares in stage order (the same number on every stage). Clipping scales by
 * min(1, clip / norm), and a norm that is not finite stops the run or skips the update on
 * every stage alike. Replicas need no exchange: after the all-reduce their gradients, and
 * so their norms, are equal. A stage whose norm is its own (no clipping across stages, no
 * skipping to agree on) has a norm of one stage: tr__clip_new(1, 0, ...).
 *
 *   rc = tr__clip_global(c, step, &sumsq, &norm2); // 0: not yet (device work or other
 *                                                  // stages' shares pending), 1: sumsq on
 *                                                  // the device, norm2 its value
 *   if (rc == 1 && isfinite(norm2)) tr_stage_step(st, sumsq);
 */
#ifndef TR_CLIPNORM_H
#define TR_CLIPNORM_H

#include <stdbool.h>

#include "job_impl.h"

typedef struct tr__clip tr__clip;

typedef struct tr__norm_msg {
  tr_msg hdr;
  int stage;
  int64_t step;
  double sumsq;
} tr__norm_msg;
extern const tr_msgtype tr__norm_type;

/* Stage `me` of `stages`; out[s], in[s]: the edges to and from stage s (NULL for me; NULL
 * arrays for one stage). Each carries at most two steps' shares: its credits. */
enum { TR__CLIP_CREDITS = 2 };
tr__clip *tr__clip_new(int stages, int me, tr_edge *const *out, tr_edge *const *in);
int tr__clip_open(tr__clip *c, tr_actor *self, tr_stage *st);
int tr__clip_receive(tr__clip *c, const tr__norm_msg *m);
int tr__clip_global(tr__clip *c, int64_t step, const float **sumsq, double *norm2);
/* The sum of squares of n gradients, now (the stream synchronised; `dev` and `host` a float
 * each of scratch): for actors that update within one callback (the parameter server, a
 * Hogwild! worker). 0, or the device's status. */
int tr__norm2_now(tr_stream *s, const float *grads, size_t n, float *dev, float *host,
                  double *norm2);
/* Waits on the device (the caller polls its events meanwhile). */
bool tr__clip_waiting(const tr__clip *c);
void tr__clip_close(tr__clip *c);
void tr__clip_free(tr__clip *c);

#endif
