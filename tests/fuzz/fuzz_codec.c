/* fuzz_codec.c — libFuzzer target for the decoders of messages that cross processes (each
 * type's tr_msg_codec, defined beside its message; runtime/codec.c's generic pieces): the
 * first byte picks a message type, the rest are its bytes as another
 * rank would send them. A decoder either refuses them or gives a message whose arrays lie
 * inside the input (or, for the arrays a receiver takes over, are its own copies), with
 * sizes that the input holds. Built by tests/models with clang; run with tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "job_impl.h"
#include "worker.h"

static const tr_msgtype *const types[] = {
    &tr_batch_type,  &tr_activation_type, &tr_gradient_type, &tr__part_type,
    &tr__done_type,  &tr__push_type,      &tr__reply_type,   &tr_report_type,
    &tr__loss_type,  &tr__server_done_type, &tr__leave_type, &tr__norm_type,
};

/* [p, p + n) inside [in, in + size)? */
static void inside(const void *p, size_t n, const uint8_t *in, size_t size) {
  const uint8_t *q = p;
  if (q < in || q > in + size || n > (size_t)(in + size - q)) abort();
  volatile uint8_t sink = 0;
  for (size_t k = 0; k < n; k += 64) sink ^= q[k]; /* touch it: ASan checks */
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const tr_msgtype *t = types[data[0] % (sizeof types / sizeof *types)];
  const uint8_t *in = data + 1;
  const size_t n = size - 1;
  const tr_msg_codec *c = t->codec; /* each type here crosses untyped edges too: it has one */
  if (c == NULL) abort();
  tr_msg *m = c->get(t, in, n);
  if (m == NULL) return 0;
  if (m->type != t) abort();
  if (t == &tr_batch_type) {
    const tr_batch_msg *b = (const tr_batch_msg *)m;
    if (b->x) inside(b->x, b->x_bytes, in, n);
    if (b->y) inside(b->y, b->y_bytes, in, n);
  } else if (t == &tr_activation_type || t == &tr_gradient_type) {
    const tr_tensor_msg *x = (const tr_tensor_msg *)m;
    if (x->ready || x->dev) abort(); /* nothing of the sender's process */
    if (x->data) inside(x->data, x->bytes, in, n); /* NULL: NCCL brings the bytes */
  } else if (t == &tr__part_type) {
    tr__part *p = &((tr__part_msg *)m)->part;
    if (!p->state) abort(); /* params may stay NULL: a ZeRO shard of the state alone */
    if (p->shard_offset > p->numel || p->shard_numel > p->numel - p->shard_offset) abort();
    if (p->params) memset(p->params, 0, p->numel * sizeof(float)); /* its own copies, that long */
    memset(p->state, 0, p->state_numel * sizeof(float));
    tr__part_free(p);
  } else if (t == &tr__done_type) {
    const tr__report *r = &((tr__done_msg *)m)->report;
    if (r->params) memset((void *)r->params, 0, r->numel * sizeof(float));
    free((void *)r->params);
  } else if (t == &tr__push_type) {
    const tr__push_msg *p = (const tr__push_msg *)m;
    if (p->ready || p->dev) abort();
    if (p->grads) inside(p->grads, p->numel * sizeof(float), in, n);
    if (p->params) inside(p->params, p->numel * sizeof(float), in, n);
  } else if (t == &tr__reply_type) {
    const tr__reply_msg *r = (const tr__reply_msg *)m;
    if (r->share || r->ready || r->applied) abort();
    if (r->params) inside(r->params, r->numel * sizeof(float), in, n);
  } else if (t == &tr__loss_type) {
    const tr__loss_msg *l = (const tr__loss_msg *)m;
    if (l->n < 0 || sizeof *l + (size_t)l->n * sizeof l->e[0] > m->size) abort();
    volatile float sink = 0;
    for (int i = 0; i < l->n; i++) sink += l->e[i].loss;
    (void)sink;
  }
  tr_msg_free(m);
  return 0;
}
