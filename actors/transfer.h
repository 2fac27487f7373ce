/* transfer.h — the tensor edges of a pipeline stage (activations forward, input gradients
 * back) and what carries each: the stage sends and receives device tensors, and the edge's
 * carrier, chosen by the job's plan, moves them.
 *
 *   in the process   the message carries the tensor where it is, with the event after which
 *                    it is valid; the receiver copies it (a peer copy) and gives the credit
 *                    back once that copy has run
 *   MPI (another     host devices send from where the tensor is; a device that MPI cannot
 *   process)         read sends a host copy from a ring of them, one per credit of the edge,
 *                    reused as the credits come back; the transport carries the bytes
 *   NCCL (another    the message goes without its bytes; they go by ncclSend/ncclRecv on a
 *   process, GPUs)   communicator of the edge's two ends (made by the plan), on a stream of
 *                    the edge's own at each end, the sender sending from a ring of device
 *                    copies; each edge's messages are in order, so both ends issue its
 *                    operations in one order
 *
 * A stream per NCCL edge keeps one direction's rendezvous from waiting behind the other's (a
 * stage that sends activations and receives gradients would deadlock on one stream: each
 * end's send waiting for a receive queued behind the other's send), and the compute stream
 * waits only on receives, as it waits on a neighbour's copy in a process. NCCL's send goes
 * after the message: NCCL connects two ranks at their first send and receive, and the first
 * send waits, on this thread, until the peer has issued its first receive, which it does
 * when the message comes.
 *
 *   tr__tensor_out_open(&o, self, dev, bytes);      // on the device's thread
 *   rc = tr__tensor_send(&o, s, &msg_fields, data, ev);
 *   rc = tr__tensor_receive(&i, s, &returns, dst, lent);
 */
#ifndef TR_TRANSFER_H
#define TR_TRANSFER_H

#include "inbox.h"

/* Copies of the tensors sent, one per credit of the edge, reused in order. */
typedef struct tr__ring {
  uint8_t *buf; /* n × bytes; NULL: sent from where they are */
  int n, next;
  size_t bytes;
} tr__ring;

typedef struct tr__wire {
  tr_comm *comm;  /* NULL: not NCCL */
  tr_stream *s;
  tr_event *ev;   /* sender: the copy into the ring made; receiver: the destination free */
  tr_event *done; /* receiver: the receive has run */
  tr_event **sent; /* sender [copies.n]: copy i may be written again */
  tr__ring copies; /* sender's, in device memory */
} tr__wire;

/* One tensor edge at one of its ends. */
typedef struct tr__tensor_edge {
  tr_edge *edge;     /* NULL: the stage has none such */
  tr_actor *self;
  tr_device *dev;
  tr__ring host;     /* a sender's host copies for another process (MPI) */
  tr__wire w;
  tr__queue q;       /* a receiver's tensors come, in schedule order */
  int64_t sent_bytes; /* a sender's: the tensors' bytes it sent, whatever carried them */
} tr__tensor_edge;

/* The end of `e` in this stage; `comm`: NCCL carries its tensors (the edge then owns it). */
void tr__tensor_edge_init(tr__tensor_edge *t, tr_edge *e, tr_comm *comm);
/* On the device's thread: a sender's copies for tensors of at most `bytes`, a receiver's
 * queue; `name` names an NCCL stream. */
int tr__tensor_edge_open(tr__tensor_edge *t, tr_actor *self, tr_device *dev, tr_graph *g,
                         bool out, size_t bytes, const char *name);
struct tr__chunks;
/* An activation (`act`) or a gradient that came for one of the stage's chunks `ch`: checked
 * against the chunk's shape (the actor fails naming the sender otherwise), then queued on t
 * until its action comes. */
int tr__tensor_take(tr__tensor_edge *t, tr_actor *self, const struct tr__chunks *ch,
                    const tr_tensor_msg *m, bool act);
/* A tensor message's place in the schedule. */
typedef struct tr__tensor_place {
  int64_t step;
  int mb, chunk;
  uint64_t first;
} tr__tensor_place;
/* Sends `bytes` of `data` (valid once `ev`, recorded here on s, has completed) as a message
 * of `type`. TR__DONE or a status (the actor failed). */
int tr__tensor_send(tr__tensor_edge *t, tr_stream *s, const tr_msgtype *type,
                    const tr__tensor_place *at, const void *data, size_t bytes, tr_event *ev);
/* The tensor `in` (the head of t->q) into `dst` on s; its credit goes back through `ret`
 * once the copy has run. */
int tr__tensor_receive(tr__tensor_edge *t, tr_stream *s, tr__returns *ret, void *dst,
                       const tr__lent *in);
/* A failed run, before any stream is synchronised: its communicator aborted, so that no
 * stream waits for ever on a peer that is gone. On the device's thread. */
void tr__tensor_edge_abort(tr__tensor_edge *t);
/* Once its operations have run, on the device's thread. */
void tr__tensor_edge_close(tr__tensor_edge *t);
void tr__tensor_edge_free(tr__tensor_edge *t);

#endif
