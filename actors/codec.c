/* codec.c — the built-in messages as bytes (codec.h). A payload is the message's struct
 * (header excluded, pointers meaningless on arrival) followed by what its pointers point
 * at, each part starting on a 64-byte boundary of the payload so that arrays land aligned in
 * the receiver's buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "codec.h"
#include "losses.h"
#include "job_impl.h"
#include "worker.h"

enum { ALIGN = 64 };

/* Sizes read from another process's bytes may be anything: past TOO_BIG they make a total no
 * buffer holds, rather than wrapping around. */
#define TOO_BIG (SIZE_MAX / 4)

static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }
static size_t floats(size_t n) { return n < TOO_BIG / sizeof(float) ? n * sizeof(float) : TOO_BIG; }

/* The struct, then `n` arrays of the given bytes. */
typedef struct layout {
  size_t at[4], bytes[4], total;
  int n;
} layout;

static layout lay(size_t head, const size_t *bytes, int n) {
  layout l = {.n = n, .total = up(head)};
  for (int i = 0; i < n; i++) {
    l.at[i] = l.total;
    l.bytes[i] = bytes[i];
    l.total = bytes[i] < TOO_BIG && l.total < TOO_BIG ? l.total + up(bytes[i]) : SIZE_MAX;
  }
  return l;
}

static size_t body(const tr_msgtype *t) { return t->size - sizeof(tr_msg); }

static void put_struct(const tr_msg *m, uint8_t *out) {
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), body(m->type));
}

/* A message of type t with its struct from `in`. */
static tr_msg *get_struct(const tr_msgtype *t, const uint8_t *in, size_t n, size_t need) {
  if (n < need || n < body(t)) return NULL;
  tr_msg *m = tr_msg_new(t);
  memcpy((uint8_t *)m + sizeof(tr_msg), in, body(t));
  return m;
}

/* ---- byte for byte (a message's allocated size: variable-size types included) ---------- */

static size_t flat_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  return m->size - sizeof(tr_msg);
}

static void flat_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), m->size - sizeof(tr_msg));
}

static tr_msg *flat_get(const tr__codec *c, const uint8_t *in, size_t n) {
  if (n < body(c->type) || n > UINT32_MAX / 2) return NULL;
  tr_msg *m = tr_msg_new_size(c->type, sizeof(tr_msg) + n);
  memcpy((uint8_t *)m + sizeof(tr_msg), in, n);
  return m;
}

/* ---- a chunk of losses: the entries it holds, in a message of the one chunk size --------- */

static size_t loss_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  const tr__loss_msg *l = (const tr__loss_msg *)m;
  return offsetof(tr__loss_msg, e) - sizeof(tr_msg) + (size_t)l->n * sizeof *l->e;
}

static void loss_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  memcpy(out, (const uint8_t *)m + sizeof(tr_msg), loss_size(c, m));
}

static tr_msg *loss_get(const tr__codec *c, const uint8_t *in, size_t n) {
  (void)c;
  const size_t head = offsetof(tr__loss_msg, e) - sizeof(tr_msg);
  tr__loss_msg *l = tr_msg_new_size(&tr__loss_type, sizeof *l + TR__LOSS_CHUNK * sizeof *l->e);
  if (n >= head) memcpy((uint8_t *)l + sizeof(tr_msg), in, head);
  if (n < head || l->n < 0 || l->n > TR__LOSS_CHUNK || n != head + (size_t)l->n * sizeof *l->e) {
    tr_msg_free(l);
    return NULL;
  }
  memcpy(l->e, in + head, (size_t)l->n * sizeof *l->e);
  return &l->hdr;
}

/* ---- a batch: x and y --------------------------------------------------------------------- */

static layout batch_layout(const tr_batch_msg *b) {
  const size_t bytes[2] = {b->x ? b->x_bytes : 0, b->y ? b->y_bytes : 0};
  return lay(sizeof *b, bytes, 2);
}

static size_t batch_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  return batch_layout((const tr_batch_msg *)m).total;
}

static void batch_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr_batch_msg *b = (const tr_batch_msg *)m;
  const layout l = batch_layout(b);
  put_struct(m, out);
  if (b->x) memcpy(out + l.at[0], b->x, l.bytes[0]);
  if (b->y) memcpy(out + l.at[1], b->y, l.bytes[1]);
}

static tr_msg *batch_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr_batch_msg *b = (tr_batch_msg *)get_struct(c->type, in, n, sizeof *b - sizeof(tr_msg));
  if (b == NULL) return NULL;
  const bool x = b->x != NULL, y = b->y != NULL;
  const layout l = batch_layout(b);
  b->x = b->y = NULL; /* the sender's */
  if (l.total > n) {
    tr_msg_free(b);
    return NULL;
  }
  if (x) b->x = (void *)(in + l.at[0]);
  if (y) b->y = (void *)(in + l.at[1]);
  return &b->hdr;
}

/* ---- an activation or its gradient: the tensor, in host memory --------------------------------
 * data NULL: its bytes go by NCCL on the edge's communicator (stage_actor.c), not here. */

static size_t carried(const tr_tensor_msg *t) { return t->data ? t->bytes : 0; }

static size_t tensor_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  const tr_tensor_msg *t = (const tr_tensor_msg *)m;
  const size_t b = carried(t);
  return lay(sizeof *t, &b, 1).total;
}

static void tensor_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr_tensor_msg *t = (const tr_tensor_msg *)m;
  const size_t b = carried(t);
  put_struct(m, out);
  if (b) memcpy(out + lay(sizeof *t, &b, 1).at[0], t->data, b);
}

static tr_msg *tensor_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr_tensor_msg *t = (tr_tensor_msg *)get_struct(c->type, in, n, sizeof *t - sizeof(tr_msg));
  if (t == NULL) return NULL;
  const size_t b = carried(t); /* t->data: the sender's pointer, or NULL */
  const layout l = lay(sizeof *t, &b, 1);
  if (l.total > n) {
    tr_msg_free(t);
    return NULL;
  }
  t->data = t->data ? in + l.at[0] : NULL;
  t->ready = NULL; /* complete: it is host memory of this process (or NCCL brings it) */
  t->dev = NULL;
  return &t->hdr;
}

/* ---- a checkpoint part and the final figures: arrays the coordinator takes over ------------ */

/* A shard of the optimizer state (ZeRO) may come without the parameters. */
static layout part_layout(const tr__part *p) {
  const size_t bytes[2] = {p->params ? floats(p->numel) : 0, floats(p->state_numel)};
  return lay(sizeof(tr__part_msg), bytes, 2);
}

static size_t part_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  return part_layout(&((const tr__part_msg *)m)->part).total;
}

static void part_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr__part *p = &((const tr__part_msg *)m)->part;
  const layout l = part_layout(p);
  put_struct(m, out);
  if (l.bytes[0]) memcpy(out + l.at[0], p->params, l.bytes[0]);
  if (l.bytes[1]) memcpy(out + l.at[1], p->state, l.bytes[1]);
}

/* A malloc'd copy of `bytes` at `in + at` (at least one byte, as the stages allocate). */
static float *copy_out(const uint8_t *in, size_t at, size_t bytes) {
  float *f = malloc(bytes ? bytes : 1);
  if (f && bytes) memcpy(f, in + at, bytes);
  return f;
}

static tr_msg *part_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr__part_msg *pm = (tr__part_msg *)get_struct(c->type, in, n, sizeof *pm - sizeof(tr_msg));
  if (pm == NULL) return NULL;
  tr__part *p = &pm->part;
  const layout l = part_layout(p); /* params: the sender's pointer, or NULL */
  const bool params = p->params != NULL;
  p->params = p->state = NULL;
  if (l.total <= n && p->shard_offset <= p->numel && p->shard_numel <= p->numel - p->shard_offset) {
    p->params = params ? copy_out(in, l.at[0], l.bytes[0]) : NULL;
    p->state = copy_out(in, l.at[1], l.bytes[1]);
  }
  if ((params && !p->params) || !p->state) {
    tr__part_free(p);
    tr_msg_free(pm);
    return NULL;
  }
  return &pm->hdr;
}

static void part_sent(tr_msg *m) { tr__part_free(&((tr__part_msg *)m)->part); }

static size_t done_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? floats(r->numel) : 0;
  return lay(sizeof(tr__done_msg), &bytes, 1).total;
}

static void done_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? floats(r->numel) : 0;
  put_struct(m, out);
  if (bytes) memcpy(out + lay(sizeof(tr__done_msg), &bytes, 1).at[0], r->params, bytes);
}

static void done_sent(tr_msg *m) { free((void *)((tr__done_msg *)m)->report.params); }

static tr_msg *done_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr__done_msg *d = (tr__done_msg *)get_struct(c->type, in, n, sizeof *d - sizeof(tr_msg));
  if (d == NULL) return NULL;
  tr__report *r = &d->report;
  const size_t bytes = r->params ? floats(r->numel) : 0;
  const layout l = lay(sizeof *d, &bytes, 1);
  r->params = NULL;
  if (bytes && (l.total > n || !(r->params = copy_out(in, l.at[0], bytes)))) {
    tr_msg_free(d);
    return NULL;
  }
  return &d->hdr;
}

/* ---- the asynchronous protocol: a push's gradient and parameters, a reply's pull ----------- */

static layout push_layout(const tr__push_msg *p) {
  const size_t b = floats(p->numel);
  return lay(sizeof *p, (size_t[]){p->grads ? b : 0, p->params ? b : 0}, 2);
}

static size_t push_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  return push_layout((const tr__push_msg *)m).total;
}

static void push_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr__push_msg *p = (const tr__push_msg *)m;
  const layout l = push_layout(p);
  put_struct(m, out);
  if (p->grads) memcpy(out + l.at[0], p->grads, l.bytes[0]);
  if (p->params) memcpy(out + l.at[1], p->params, l.bytes[1]);
}

static tr_msg *push_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr__push_msg *p = (tr__push_msg *)get_struct(c->type, in, n, sizeof *p - sizeof(tr_msg));
  if (p == NULL) return NULL;
  const layout l = push_layout(p);
  if (l.total > n) {
    tr_msg_free(p);
    return NULL;
  }
  if (p->grads) p->grads = (float *)(in + l.at[0]);
  if (p->params) p->params = (float *)(in + l.at[1]);
  p->ready = NULL;
  p->dev = NULL;
  return &p->hdr;
}

static size_t reply_size(const tr__codec *c, const tr_msg *m) {
  (void)c;
  const tr__reply_msg *r = (const tr__reply_msg *)m;
  const size_t b = r->params ? floats(r->numel) : 0;
  return lay(sizeof *r, &b, 1).total;
}

static void reply_put(const tr__codec *c, const tr_msg *m, uint8_t *out) {
  (void)c;
  const tr__reply_msg *r = (const tr__reply_msg *)m;
  const size_t b = r->params ? floats(r->numel) : 0;
  put_struct(m, out);
  if (b) memcpy(out + lay(sizeof *r, &b, 1).at[0], r->params, b);
}

static tr_msg *reply_get(const tr__codec *c, const uint8_t *in, size_t n) {
  tr__reply_msg *r = (tr__reply_msg *)get_struct(c->type, in, n, sizeof *r - sizeof(tr_msg));
  if (r == NULL) return NULL;
  const size_t b = r->params ? floats(r->numel) : 0;
  const layout l = lay(sizeof *r, &b, 1);
  if (r->share || l.total > n) { /* Hogwild! shares memory: never across processes */
    tr_msg_free(r);
    return NULL;
  }
  if (r->params) r->params = (const float *)(in + l.at[0]);
  r->ready = NULL;
  r->applied = NULL;
  return &r->hdr;
}

/* ---- the table ------------------------------------------------------------------------------ */

#define FLAT(t) {&t, flat_size, flat_put, flat_get, NULL}
static const tr__codec codecs[] = {
    {&tr_batch_type, batch_size, batch_put, batch_get, NULL},
    {&tr_activation_type, tensor_size, tensor_put, tensor_get, NULL},
    {&tr_gradient_type, tensor_size, tensor_put, tensor_get, NULL},
    {&tr__part_type, part_size, part_put, part_get, part_sent},
    {&tr__done_type, done_size, done_put, done_get, done_sent},
    {&tr__push_type, push_size, push_put, push_get, NULL},
    {&tr__reply_type, reply_size, reply_put, reply_get, NULL},
    FLAT(tr_report_type),
    {&tr__loss_type, loss_size, loss_put, loss_get, NULL},
    FLAT(tr__server_done_type),
    FLAT(tr__leave_type),
    FLAT(tr__norm_type),
};
#undef FLAT

const tr__codec *tr__codec_find(const char *name, const tr_msgtype *fallback,
                                tr__codec *scratch) {
  for (size_t i = 0; i < sizeof codecs / sizeof *codecs; i++)
    if (!strcmp(codecs[i].type->name, name)) return &codecs[i];
  if (fallback && !strcmp(fallback->name, name)) {
    *scratch = (tr__codec){fallback, flat_size, flat_put, flat_get, NULL};
    return scratch;
  }
  return NULL;
}
