/* protocol.c — tr_protocol.h's messages (batches, activations and gradients, reports) and
 * how each crosses processes as bytes (tr_msg_codec): a batch with its samples, a tensor
 * with its host bytes, a report byte for byte. What arrives points into the receiving
 * transport's buffer, kept until the consumer gives the edge's credit back. */
#include <string.h>

#include "codec.h"
#include "tr_protocol.h"

/* ---- a batch: x and y --------------------------------------------------------------------- */

static tr__codec_layout batch_layout(const tr_batch_msg *b) {
  const size_t bytes[2] = {b->x ? b->x_bytes : 0, b->y ? b->y_bytes : 0};
  return tr__codec_lay(sizeof *b, bytes, 2);
}

static size_t batch_size(const tr_msg *m) { return batch_layout((const tr_batch_msg *)m).total; }

static void batch_put(const tr_msg *m, uint8_t *out) {
  const tr_batch_msg *b = (const tr_batch_msg *)m;
  const tr__codec_layout l = batch_layout(b);
  tr__codec_put_struct(m, out);
  if (b->x) memcpy(out + l.at[0], b->x, l.bytes[0]);
  if (b->y) memcpy(out + l.at[1], b->y, l.bytes[1]);
}

static tr_msg *batch_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr_batch_msg *b = (tr_batch_msg *)tr__codec_get_struct(type, in, n, sizeof *b - sizeof(tr_msg));
  if (b == NULL) return NULL;
  const bool x = b->x != NULL, y = b->y != NULL;
  const tr__codec_layout l = batch_layout(b);
  b->x = b->y = NULL; /* the sender's */
  if (l.total > n) {
    tr_msg_free(b);
    return NULL;
  }
  if (x) b->x = (void *)(in + l.at[0]);
  if (y) b->y = (void *)(in + l.at[1]);
  return &b->hdr;
}

static const tr_msg_codec batch_codec = {.size = batch_size, .put = batch_put, .get = batch_get};

/* ---- an activation or its gradient: the tensor, in host memory --------------------------------
 * data NULL: its bytes go by NCCL on the edge's communicator (stage_actor.c), not here. */

static size_t carried(const tr_tensor_msg *t) { return t->data ? t->bytes : 0; }

static size_t tensor_size(const tr_msg *m) {
  const tr_tensor_msg *t = (const tr_tensor_msg *)m;
  const size_t b = carried(t);
  return tr__codec_lay(sizeof *t, &b, 1).total;
}

static void tensor_put(const tr_msg *m, uint8_t *out) {
  const tr_tensor_msg *t = (const tr_tensor_msg *)m;
  const size_t b = carried(t);
  tr__codec_put_struct(m, out);
  if (b) memcpy(out + tr__codec_lay(sizeof *t, &b, 1).at[0], t->data, b);
}

static tr_msg *tensor_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr_tensor_msg *t = (tr_tensor_msg *)tr__codec_get_struct(type, in, n, sizeof *t - sizeof(tr_msg));
  if (t == NULL) return NULL;
  const size_t b = carried(t); /* t->data: the sender's pointer, or NULL */
  const tr__codec_layout l = tr__codec_lay(sizeof *t, &b, 1);
  if (l.total > n) {
    tr_msg_free(t);
    return NULL;
  }
  t->data = t->data ? in + l.at[0] : NULL;
  t->ready = NULL; /* complete: it is host memory of this process (or NCCL brings it) */
  t->dev = NULL;
  return &t->hdr;
}

static const tr_msg_codec tensor_codec = {.size = tensor_size, .put = tensor_put,
                                          .get = tensor_get};

/* ---- the types ------------------------------------------------------------------------------- */

TR_MSGTYPE_DEFINE_CODEC(tr_batch_type, tr_batch_msg, &batch_codec);
/* one struct, two types with names of their own (a name says what a message is, on the wire
 * and in traces) */
const tr_msgtype tr_activation_type = {"tr_activation_msg", (uint32_t)sizeof(tr_tensor_msg),
                                       &tensor_codec};
const tr_msgtype tr_gradient_type = {"tr_gradient_msg", (uint32_t)sizeof(tr_tensor_msg),
                                     &tensor_codec};
/* ---- a report: byte for byte, but its parameters (an open checkpoint of the sender's
 * memory, never sent: tr_job_snapshot keeps their observer on the coordinator's rank) ---- */

static size_t report_size(const tr_msg *m) { return tr_msg_codec_flat.size(m); }
static void report_put(const tr_msg *m, uint8_t *out) { tr_msg_codec_flat.put(m, out); }

static tr_msg *report_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr_msg *m = tr_msg_codec_flat.get(type, in, n);
  if (m) ((tr_report_msg *)m)->params = NULL;
  return m;
}

static const tr_msg_codec report_codec = {.size = report_size, .put = report_put,
                                          .get = report_get};
/* it also crosses untyped edges (a stage's reports to the coordinator) */
TR_MSGTYPE_DEFINE_CODEC(tr_report_type, tr_report_msg, &report_codec);

tr_batch_msg *tr_batch_forward(const tr_batch_msg *b) {
  if (b == NULL) {
    tr__misuse(TR_EINVAL, "tr_batch_forward: b is NULL");
    return NULL;
  }
  tr_batch_msg *f = tr_msg_new(&tr_batch_type);
  *f = (tr_batch_msg){.hdr = f->hdr, .step = b->step, .mb = b->mb, .count = b->count,
                      .first = b->first, .x = b->x, .y = b->y, .x_bytes = b->x_bytes,
                      .y_bytes = b->y_bytes, .eval = b->eval};
  return f;
}
