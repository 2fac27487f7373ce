/* tr_msg.h — messages: a header plus a typed payload.
 *
 * A message type is a constant descriptor naming the type and the size of its struct. The
 * struct starts with a tr_msg header; the runtime links messages through that header, so a
 * send never allocates or copies beyond the message itself.
 *
 *   typedef struct { tr_msg hdr; uint32_t microbatch; float *activations; } fwd_msg;
 *   TR_MSGTYPE_DEFINE(fwd_type, fwd_msg);                 // in one .c file
 *
 *   fwd_msg *m = tr_msg_new(&fwd_type);                   // sender
 *   m->microbatch = 3; m->activations = buf;
 *   tr_actor_send(stage1, m);
 *
 *   if (msg->type == &fwd_type) { fwd_msg *f = (fwd_msg *)msg; ... }   // receiver
 *
 * Ownership: a sent message belongs to the runtime. The receiver reads it during its
 * handler and must not keep it; the runtime frees it afterwards. Payloads that outlive a
 * handler (tensors, buffers) are referenced from the message, never copied into it.
 *
 * Message memory: each actor thread allocates from a pool of its own (whole cache lines,
 * 1 to 4 of them, carved from slabs). Its own frees are a list push; a message freed by
 * another thread (the receiver, usually) goes home through a lock-free stack in batches,
 * one compare-and-swap per batch. Larger messages, and threads without a pool, use the
 * allocator (jemalloc; libc in sanitizer builds, which also turn the pools off so that the
 * sanitizer sees every message). Every message occupies whole cache lines, so neighbouring
 * messages never share one.
 */
#ifndef TR_MSG_H
#define TR_MSG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_actor;
typedef struct tr_msg_pool tr_msg_pool;

struct tr_msg;
typedef struct tr_msg_codec tr_msg_codec;

typedef struct tr_msgtype {
  const char *name; /* for traces and error messages, and on the wire */
  uint32_t size;    /* bytes of the message struct, header included */
  /* How a message of this type crosses to another process as bytes. NULL: byte for byte
   * (header excluded), and only on an edge declared of this type; a type that points at
   * memory, or travels on edges of other types, gives its own. */
  const tr_msg_codec *codec;
} tr_msgtype;

#define TR_MSGTYPE_DEFINE(var, T) const tr_msgtype var = {#T, (uint32_t)sizeof(T), NULL}
/* A type with its codec, defined beside the part that owns the message. */
#define TR_MSGTYPE_DEFINE_CODEC(var, T, c) const tr_msgtype var = {#T, (uint32_t)sizeof(T), c}

/* A message as bytes: the payload `size` says, written by `put` on the sending process and
 * read back by `get` on the receiving one, into a new message of `type` that may point into
 * `in` (the receiver keeps those bytes until the message's edge credit comes back). `get`
 * returns NULL for bytes it refuses: they come from another process and may be anything.
 * `sent`, optional, frees what the sent message owned once it is written (arrays its
 * receiver would have freed), and what a message never handled owned (one left in a
 * mailbox when its system is freed: a run that failed with it in flight). A type without pointers needs none; one with them writes the
 * struct and then what it points at (inside the library, runtime/codec.h has the pieces the
 * built-in codecs are made of). */
struct tr_msg_codec {
  size_t (*size)(const struct tr_msg *m);
  void (*put)(const struct tr_msg *m, uint8_t *out);
  struct tr_msg *(*get)(const tr_msgtype *type, const uint8_t *in, size_t n);
  void (*sent)(struct tr_msg *m);
};

/* Byte for byte: the message's allocated payload (variable-size messages included). */
TR_API extern const tr_msg_codec tr_msg_codec_flat;

typedef struct tr_msg {
  _Atomic(struct tr_msg *) next; /* mailbox link, the runtime's */
  const tr_msgtype *type;
  struct tr_actor *from; /* the sender if it set it; the runtime's own messages set it */
  tr_msg_pool *pool;     /* where its memory goes back to; NULL: the allocator */
  uint32_t size;         /* bytes allocated, header included */
  uint32_t flow;         /* a traced send's flow id (tr_trace_flow), else 0: in the padding */
  uint64_t sent_ns;      /* when an edge sent it (tr_edge_send; a credit: when it was freed),
                            on this process's tr_now_ns clock; 0: not sent by an edge. The
                            receiver's accounting of its idle time reads it (how long a message
                            that was sent took to be handled) */
} tr_msg;

/* Allocates a message of `type` (type->size bytes, payload uninitialised). Never returns
 * NULL for a type: running out of memory for a message aborts, since no actor could report
 * it. type NULL is the caller's mistake: NULL, said on stderr. */
TR_API void *tr_msg_new(const tr_msgtype *type);

/* The same with a payload of `size` bytes in all (>= sizeof(tr_msg)), for variable-length
 * messages; a smaller size (or above 4 GiB): NULL, said on stderr. */
TR_API void *tr_msg_new_size(const tr_msgtype *type, size_t size);

/* Frees a message that was never sent (NULL: nothing). Sent messages are freed by the
 * runtime. */
TR_API void tr_msg_free(void *msg);

/* What is behind message memory: "pools over jemalloc", "jemalloc", "libc"... */
TR_API const char *tr_msg_allocator(void);

/* Pools. The runtime gives every actor thread one; other threads may have one too (a
 * benchmark's producer). tr_msg_pool_attach makes the calling thread allocate from `pool`
 * (NULL: from the allocator) and first sends home the frees it batched. A pool is freed
 * with all its memory: every message from it must be freed or unreachable by then. In
 * builds without pools, tr_msg_pool_new returns NULL and attaching NULL changes nothing. */
TR_API tr_msg_pool *tr_msg_pool_new(void);
TR_API void tr_msg_pool_attach(tr_msg_pool *pool);
/* Sends home the frees the calling thread holds for other pools (before it sleeps). */
TR_API void tr_msg_pool_flush(void);
TR_API void tr_msg_pool_free(tr_msg_pool *pool);

/* Messages the runtime itself sends. */
TR_API extern const tr_msgtype tr_msg_stop_type; /* priority lane: stop now */

typedef struct tr_timer_msg {
  tr_msg hdr;
  uint64_t tag; /* the tag given to tr_actor_timer_start */
} tr_timer_msg;
TR_API extern const tr_msgtype tr_timer_msg_type;

#ifdef __cplusplus
}
#endif
#endif
