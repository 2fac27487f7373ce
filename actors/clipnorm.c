/* clipnorm.c — the norm exchange of clipping across stages (clipnorm.h). */
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "tensor_group.h"

/* flat: a norm crosses processes byte for byte */
TR_MSGTYPE_DEFINE_CODEC(tr__norm_type, tr__norm_msg, &tr_msg_codec_flat);

enum { IDLE, MEASURING, GATHERING };

struct tr__clip {
  tr_actor *self;
  tr__busy *busy;
  tr_stage *st[TR__MAX_STAGES];
  int nst;
  tr_device *dev;
  int n, me, phase;
  tr_edge **out, **in; /* [n] */
  float *host, *dev_sumsq; /* host[0]: this stage's share, host[1]: the global sum */
  tr_event *ev;
  double part[2][TR_TRAIN_MAX_DEVICES]; /* per step parity: each one's share */
  int got[2];
  int64_t sent; /* bytes of shares sent to the others (the run's figures) */
};

tr__clip *tr__clip_new(int n, int me, tr_edge *const *out, tr_edge *const *in) {
  TR_ASSERT(n >= 1 && n <= TR_TRAIN_MAX_DEVICES && me >= 0 && me < n);
  tr__clip *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->n = n;
  c->me = me;
  c->out = malloc((size_t)n * sizeof *c->out);
  c->in = malloc((size_t)n * sizeof *c->in);
  if (!c->out || !c->in) {
    tr__clip_free(c);
    return NULL;
  }
  for (int s = 0; s < n; s++) {
    c->out[s] = out ? out[s] : NULL;
    c->in[s] = in ? in[s] : NULL;
  }
  return c;
}

static int fail(tr__clip *c) {
  return tr_actor_fail(c->self, TR_EDEVICE, "the gradient norm on %s: %s",
                       tr_device_name(c->dev), tr_device_error(c->dev));
}

int tr__clip_open(tr__clip *c, tr_actor *self, tr_stage *const *st, int n, tr__busy *busy) {
  TR_ASSERT(n >= 1 && n <= TR__MAX_STAGES);
  c->self = self;
  c->busy = busy;
  memcpy(c->st, st, (size_t)n * sizeof *st);
  c->nst = n;
  c->dev = tr_stage_device(st[0]);
  if (tr_host_alloc(c->dev, 2 * sizeof(float), (void **)&c->host) ||
      tr_device_alloc(c->dev, sizeof(float), (void **)&c->dev_sumsq) ||
      tr_event_open(c->dev, TR_EVENT_DEFAULT, &c->ev))
    return fail(c);
  return 0;
}

int tr__clip_receive(tr__clip *c, const tr__norm_msg *m) {
  tr_edge_release(c->in[m->from], 1);
  c->part[m->step & 1][m->from] = m->sumsq;
  c->got[m->step & 1]++;
  return 0;
}

int tr__clip_global(tr__clip *c, int64_t step, const float **sumsq, double *norm2) {
  const int par = (int)(step & 1);
  tr_stream *s = tr_stage_stream(c->st[0]);
  if (c->phase == IDLE) {
    const uint64_t t0 = tr__busy_start(c->busy, c->self, step, "norm", -1);
    for (int k = 0; k < c->nst; k++)
      if (tr__tensor_grad_sumsq(c->st[k], c->dev_sumsq, k > 0)) return fail(c); /* a tensor
                                                             group's whole tensors once */
    if (tr_memcpy(s, c->host, c->dev_sumsq, sizeof(float), TR_COPY_D2H) ||
        tr_event_record(c->ev, s))
      return fail(c);
    tr__busy_add(c->busy, c->self, step, "norm", t0, -1);
    c->phase = MEASURING;
  }
  if (c->phase == MEASURING) {
    const int q = tr_event_query(c->ev);
    if (q < 0) return fail(c);
    if (q == 0) return 0;
    for (int t = 0; t < c->n; t++) {
      if (t == c->me) continue;
      tr__norm_msg *n = tr_msg_new(&tr__norm_type);
      n->from = c->me;
      n->step = step;
      n->sumsq = c->host[0];
      int rc = tr_edge_send_control(c->out[t], n);
      if (rc) return rc;
      c->sent += (int64_t)sizeof n->sumsq; /* what a share carries: one double */
    }
    c->part[par][c->me] = c->host[0];
    c->got[par]++;
    c->phase = GATHERING;
  }
  if (c->got[par] < c->n) return 0;
  double total = 0; /* in order: every one adds the same numbers alike */
  for (int t = 0; t < c->n; t++) total += c->part[par][t];
  c->got[par] = 0;
  c->host[1] = (float)total; /* one stage: the device holds this number already */
  if (c->n > 1 && tr_memcpy(s, c->dev_sumsq, &c->host[1], sizeof(float), TR_COPY_H2D))
    return fail(c);
  c->phase = IDLE;
  *sumsq = c->dev_sumsq;
  *norm2 = total;
  return 1;
}

bool tr__clip_waiting(const tr__clip *c) { return c->phase == MEASURING; }

int tr__norm2_now(tr_stream *s, const float *grads, size_t n, float *dev, float *host,
                  double *norm2) {
  int rc = tr_sumsq(s, dev, grads, n, 0);
  if (rc == 0) rc = tr_memcpy(s, host, dev, sizeof(float), TR_COPY_D2H);
  if (rc == 0) rc = tr_stream_synchronize(s);
  if (rc == 0) *norm2 = *host;
  return rc;
}

void tr__clip_close(tr__clip *c) {
  if (c == NULL || c->dev == NULL) return;
  if (c->host) tr_host_free(c->dev, c->host);
  if (c->dev_sumsq) tr_device_free(c->dev, c->dev_sumsq);
  if (c->ev) tr_event_close(c->ev);
  c->host = NULL;
  c->dev_sumsq = NULL;
  c->ev = NULL;
}

void tr__clip_free(tr__clip *c) {
  if (c == NULL) return;
  free(c->out);
  free(c->in);
  free(c);
}

int64_t tr__clip_sent_bytes(const tr__clip *c) { return c ? c->sent : 0; }
