/* clipnorm.h — the gradients' global norm before each update: every participant adds its
 * share of the squared gradients and tells the others, and each sums the shares in order
 * (the same number on every one). Clipping scales by min(1, clip / norm), and a norm that is
 * not finite stops the run or skips the update everywhere alike. The participants are the
 * stages of a replica: replicas need no exchange, since after the all-reduce their
 * gradients, and so their norms, are equal. Sharded (ZeRO), a replica's stage holds the sum
 * of its shard alone, so the exchange is among every stage of every replica, each adding its
 * shard's share (tr_stage_grad_sumsq). A stage whose norm is its own (no clipping across
 * stages, no skipping to agree on) is one participant: tr__clip_new(1, 0, NULL, NULL).
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
#include "metrics.h"

typedef struct tr__clip tr__clip;

typedef struct tr__norm_msg {
  tr_msg hdr;
  int from; /* the sender's number in the exchange */
  int64_t step;
  double sumsq;
} tr__norm_msg;
extern const tr_msgtype tr__norm_type;

/* Number `me` of `n` in the exchange (at most TR_TRAIN_MAX_DEVICES); out[s], in[s]: the
 * edges to and from number s (NULL for me; NULL arrays for one). Each carries at most two
 * steps' shares: its credits. */
enum { TR__CLIP_CREDITS = 2 };
tr__clip *tr__clip_new(int n, int me, tr_edge *const *out, tr_edge *const *in);
/* The stage's chunks st[0, n) (one but under interleaving), on one device: its share is
 * theirs summed, work timed in `busy` (a range "norm": it reads every gradient once). */
int tr__clip_open(tr__clip *c, tr_actor *self, tr_stage *const *st, int n, tr__busy *busy);
int tr__clip_receive(tr__clip *c, const tr__norm_msg *m);
int tr__clip_global(tr__clip *c, int64_t step, const float **sumsq, double *norm2);
/* The sum of squares of n gradients, now (the stream synchronised; `dev` and `host` a float
 * each of scratch): for actors that update within one callback (the parameter server, a
 * Hogwild! worker). 0, or the device's status. */
int tr__norm2_now(tr_stream *s, const float *grads, size_t n, float *dev, float *host,
                  double *norm2);
/* Waits on the device (the caller polls its events meanwhile). */
bool tr__clip_waiting(const tr__clip *c);
/* The bytes of shares this participant sent over the run: a double to each of the n − 1
 * others per update (the run's figures, run_metrics.h). */
int64_t tr__clip_sent_bytes(const tr__clip *c);
void tr__clip_close(tr__clip *c);
void tr__clip_free(tr__clip *c);

#endif
