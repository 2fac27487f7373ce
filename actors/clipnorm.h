/* clipnorm.h — global-norm clipping across the stages of a replica: before each update,
 * every stage adds its share of the squared gradients and tells the others, and each sums
 * the shares in stage order (the same number on every stage), so all scale their gradients
 * by the same min(1, clip / norm). Replicas need no exchange: after the all-reduce their
 * gradients, and so their norms, are equal.
 *
 *   rc = tr__clip_global(c, step, &sumsq);   // 0: not yet (device work or other stages'
 *                                            // shares pending), 1: sumsq on the device
 *   if (rc == 1) tr_stage_step(st, sumsq);
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

/* Stage `me` of `stages`; out[s], in[s]: the edges to and from stage s (NULL for me). Each
 * carries at most two steps' shares: its credits. */
enum { TR__CLIP_CREDITS = 2 };
tr__clip *tr__clip_new(int stages, int me, tr_edge *const *out, tr_edge *const *in);
/* The stage's chunks st[0, n) (one but under interleaving), on one device: its share is
 * theirs summed. */
int tr__clip_open(tr__clip *c, tr_actor *self, tr_stage *const *st, int n);
int tr__clip_receive(tr__clip *c, const tr__norm_msg *m);
int tr__clip_global(tr__clip *c, int64_t step, const float **sumsq);
/* Waits on the device (the caller polls its events meanwhile). */
bool tr__clip_waiting(const tr__clip *c);
void tr__clip_close(tr__clip *c);
void tr__clip_free(tr__clip *c);

#endif
