/* codec.h — the generic pieces of message codecs (tr_msg_codec, tr_msg.h), for the parts that
 * give their message types one; the codecs themselves live beside the messages they carry.
 *
 * A payload is the message's struct (header excluded; its pointers mean nothing on arrival)
 * followed by what its pointers point at, each array starting on a 64-byte boundary of the
 * payload, so that arrays land aligned in the receiver's buffer:
 *
 *   static tr__codec_layout lay_of(const my_msg *m) {
 *     return tr__codec_lay(sizeof *m, (size_t[]){tr__codec_floats(m->n)}, 1);
 *   }
 *   size: lay_of(m).total
 *   put:  tr__codec_put_struct(msg, out); memcpy(out + l.at[0], m->data, l.bytes[0]);
 *   get:  m = (my_msg *)tr__codec_get_struct(type, in, n, sizeof *m - sizeof(tr_msg));
 *         then check lay_of(m).total <= n before pointing m->data at in + l.at[0].
 *
 * Sizes read from another process may be anything: past TR__CODEC_TOO_BIG they make a total
 * no buffer holds (SIZE_MAX), rather than wrapping around. (Internal to the library.)
 */
#ifndef TR_CODEC_H
#define TR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "tr_msg.h"

#define TR__CODEC_TOO_BIG (SIZE_MAX / 4)

/* The struct, then n (at most 4) arrays of the given bytes. */
typedef struct tr__codec_layout {
  size_t at[4], bytes[4], total;
  int n;
} tr__codec_layout;

tr__codec_layout tr__codec_lay(size_t head, const size_t *bytes, int n);
/* Bytes of n floats, or TR__CODEC_TOO_BIG. */
size_t tr__codec_floats(size_t n);
/* The message's struct, header excluded (type->size − the header's). */
void tr__codec_put_struct(const tr_msg *m, uint8_t *out);
/* A new message of `type` with its struct from `in`; NULL when n < need or n holds less
 * than the struct. */
tr_msg *tr__codec_get_struct(const tr_msgtype *type, const uint8_t *in, size_t n, size_t need);
/* A malloc'd copy of `bytes` at `in + at` (one byte at least, as the stages allocate). */
float *tr__codec_copy_out(const uint8_t *in, size_t at, size_t bytes);

/* The codec a message of `type` crosses with on an edge declared of type `edge` (NULL: any):
 * its type's own, else byte for byte when it is the edge's type, else NULL (it cannot
 * cross). */
const tr_msg_codec *tr__codec_of(const tr_msgtype *type, const tr_msgtype *edge);

#endif
