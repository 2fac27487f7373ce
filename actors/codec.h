/* codec.h — messages as bytes, to cross from one process to another (transport.c).
 *
 * A message on the wire is its type's name and its payload. Flat types (no pointers: norms,
 * figures, reports, losses, and types of the user's own) travel byte for byte, header
 * excluded. Types that point at memory carry what they point at: a batch its samples, an
 * activation or gradient its tensor (host memory: a CUDA stage stages it first; none where
 * its data is NULL: NCCL carries the bytes, stage_actor.c), a
 * checkpoint part or the final figures their parameter arrays, a push its gradient and
 * parameters, a reply the parameters pulled. What arrives points into the receiving
 * transport's buffer, which it keeps until the consumer gives the edge's credit back; arrays
 * a consumer takes ownership of (parts, figures) are copies of their own.
 *
 *   const tr__codec *c = tr__codec_find(msg->type->name, edge_type);
 *   size_t n = c->size(c, msg);  c->put(c, msg, buf);            // the sender
 *   if (c->sent) c->sent(msg);  tr_msg_free(msg);
 *   tr_msg *m = c->get(c, buf, n);                               // the receiver
 */
#ifndef TR_CODEC_H
#define TR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "tr_msg.h"

typedef struct tr__codec tr__codec;
struct tr__codec {
  const tr_msgtype *type;
  size_t (*size)(const tr__codec *c, const tr_msg *m);       /* bytes of the payload */
  void (*put)(const tr__codec *c, const tr_msg *m, uint8_t *out);
  tr_msg *(*get)(const tr__codec *c, const uint8_t *in, size_t n); /* NULL: malformed */
  /* After put, what the sent message owned (arrays its receiver would have freed); NULL:
   * nothing */
  void (*sent)(tr_msg *m);
};

/* The built-in codec of the type named `name`, else byte for byte as `fallback` (the edge's
 * own type), else NULL. The returned pointer may be a static table entry or `scratch`. */
const tr__codec *tr__codec_find(const char *name, const tr_msgtype *fallback,
                                tr__codec *scratch);

#endif
