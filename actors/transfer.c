/* transfer.c — what carries a stage's tensor edges: in the process, MPI or NCCL. */
#include <stdlib.h>

#include "transfer.h"

#include "chunks.h"

static int fail(tr__tensor_edge *t, const char *what) {
  return tr_actor_fail(t->self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(t->dev),
                       tr_device_error(t->dev));
}

/* The next copy's place; *k: its index. */
static uint8_t *ring_take(tr__ring *r, int *k) {
  *k = r->next;
  r->next = (r->next + 1) % r->n;
  return r->buf + (size_t)*k * r->bytes;
}

void tr__tensor_edge_init(tr__tensor_edge *t, tr_edge *e, tr_comm *comm) {
  *t = (tr__tensor_edge){.edge = e};
  t->w.comm = comm;
}

/* Host copies where MPI carries the edge to another process from a device it cannot read. */
static int open_host(tr__tensor_edge *t, tr_graph *g, size_t bytes) {
  if (t->w.comm || tr_device_info_of(t->dev)->kind == TR_DEVICE_HOST ||
      tr_graph_actor_rank(g, tr_edge_to(t->edge)) == tr_graph_rank(g))
    return 0;
  t->host = (tr__ring){.n = tr_edge_credits(t->edge), .bytes = bytes};
  if (tr_host_alloc(t->dev, (size_t)t->host.n * (bytes ? bytes : 1), (void **)&t->host.buf))
    return fail(t, "allocating host copies for another process");
  return 0;
}

/* An NCCL edge's stream and events; a sender's ring of device copies, one per credit. */
static int open_wire(tr__tensor_edge *t, bool out, size_t bytes, const char *name) {
  tr__wire *w = &t->w;
  if (tr_stream_open(t->dev, name, &w->s) || tr_event_open(t->dev, TR_EVENT_DEFAULT, &w->ev) ||
      tr_event_open(t->dev, TR_EVENT_DEFAULT, &w->done))
    return fail(t, "opening a stream for NCCL");
  if (!out) return 0;
  tr__ring *c = &w->copies;
  *c = (tr__ring){.n = tr_edge_credits(t->edge), .bytes = bytes};
  w->sent = calloc((size_t)c->n, sizeof *w->sent);
  if (w->sent == NULL) return TR_ENOMEM;
  for (int i = 0; i < c->n; i++)
    if (tr_event_open(t->dev, TR_EVENT_DEFAULT, &w->sent[i])) return fail(t, "opening events");
  if (tr_device_alloc(t->dev, (size_t)c->n * (bytes ? bytes : 1), (void **)&c->buf))
    return fail(t, "allocating copies to send through NCCL");
  return 0;
}

int tr__tensor_edge_open(tr__tensor_edge *t, tr_actor *self, tr_device *dev, tr_graph *g,
                         bool out, size_t bytes, const char *name) {
  t->self = self;
  t->dev = dev;
  if (t->edge == NULL) return 0;
  if (!out && tr__queue_open(&t->q, tr_edge_credits(t->edge))) return TR_ENOMEM;
  int rc = out ? open_host(t, g, bytes) : 0;
  return rc == 0 && t->w.comm ? open_wire(t, out, bytes, name) : rc;
}

/* A tensor for another process through NCCL: a copy into the ring (once the send out of
 * that entry has run), then ncclSend of it on the edge's stream. */
static int send_nccl(tr__tensor_edge *t, tr_stream *s, const void *data, size_t bytes) {
  tr__wire *w = &t->w;
  int k;
  uint8_t *copy = ring_take(&w->copies, &k);
  if (tr_stream_wait_event(s, w->sent[k]) || tr_memcpy(s, copy, data, bytes, TR_COPY_D2D) ||
      tr_event_record(w->ev, s) || tr_stream_wait_event(w->s, w->ev) ||
      tr_comm_send(w->comm, w->s, copy, bytes, 1) || tr_event_record(w->sent[k], w->s))
    return fail(t, "sending a tensor through NCCL");
  return TR__DONE;
}

int tr__tensor_send(tr__tensor_edge *t, tr_stream *s, const tr_msgtype *type,
                    const tr__tensor_place *at, const void *data, size_t bytes, tr_event *ev) {
  const void *carried = data;
  if (t->w.comm) {
    carried = NULL; /* the message goes without its bytes (protocol.c's codec) */
  } else if (t->host.buf) { /* for another process: a host copy, complete before it goes */
    int k;
    uint8_t *copy = ring_take(&t->host, &k);
    if (tr_memcpy(s, copy, data, bytes, TR_COPY_D2H) || tr_stream_synchronize(s))
      return fail(t, "copying a tensor for another process");
    carried = copy;
  }
  if (tr_event_record(ev, s)) return fail(t, "sending a tensor");
  tr_tensor_msg *m = tr_msg_new(type);
  m->step = at->step;
  m->mb = at->mb;
  m->chunk = at->chunk;
  m->first = at->first;
  m->data = carried;
  m->bytes = bytes;
  m->ready = ev;
  m->dev = t->dev;
  tr_edge_send(t->edge, m);
  t->sent_bytes += (int64_t)bytes; /* the run's communication figures (run_metrics.h) */
  return t->w.comm ? send_nccl(t, s, data, bytes) : TR__DONE;
}

/* The bytes of a tensor whose message came without them: ncclRecv into dst on the edge's
 * stream once the compute stream is done with dst, the compute stream then waiting for it. */
static int receive_nccl(tr__tensor_edge *t, tr_stream *s, tr__returns *ret, void *dst,
                        size_t bytes) {
  tr__wire *w = &t->w;
  if (w->comm == NULL)
    return tr_actor_fail(t->self, TR_ESTATE, "a tensor without its bytes came on the %s edge "
                         "from '%s', which has no NCCL communicator here: the ranks disagree "
                         "on what carries it", tr_edge_name(t->edge),
                         tr_actor_name(tr_edge_from(t->edge)));
  if (tr_event_record(w->ev, s) || tr_stream_wait_event(w->s, w->ev) ||
      tr_comm_recv(w->comm, w->s, dst, bytes, 0) || tr_event_record(w->done, w->s) ||
      tr_stream_wait_event(s, w->done) || tr__returns_after(ret, w->s, t->edge))
    return fail(t, "receiving a tensor through NCCL");
  return TR__DONE;
}

int tr__tensor_receive(tr__tensor_edge *t, tr_stream *s, tr__returns *ret, void *dst,
                       const tr__lent *in) {
  if (in->data == NULL) return receive_nccl(t, s, ret, dst, in->bytes); /* NCCL carries it */
  if ((in->ready && tr_stream_wait_event(s, in->ready)) ||
      /* from another process: host memory, complete (in->dev and in->ready NULL) */
      (in->dev ? tr_memcpy_peer(s, dst, t->dev, in->data, in->dev, in->bytes)
               : tr_memcpy(s, dst, in->data, in->bytes, TR_COPY_H2D)) ||
      tr__returns_after(ret, s, t->edge))
    return fail(t, "receiving a tensor");
  return TR__DONE;
}

/* Once its operations have run (`abort`: without waiting for a peer that may never come).
 * The communicator first, so a receive waiting for a gone peer ends. */
static void close_wire(tr__tensor_edge *t, bool abort) {
  tr__wire *w = &t->w;
  if (abort) tr_comm_abort(w->comm);
  else if (w->s) tr_stream_synchronize(w->s);
  if (!abort) tr_comm_close(w->comm);
  w->comm = NULL;
  if (w->copies.buf) tr_device_free(t->dev, w->copies.buf);
  for (int i = 0; w->sent && i < w->copies.n; i++)
    if (w->sent[i]) tr_event_close(w->sent[i]);
  if (w->ev) tr_event_close(w->ev);
  if (w->done) tr_event_close(w->done);
  if (w->s) tr_stream_close(w->s);
  free(w->sent);
  *w = (tr__wire){0};
}

void tr__tensor_edge_abort(tr__tensor_edge *t) { close_wire(t, true); }

void tr__tensor_edge_close(tr__tensor_edge *t) {
  close_wire(t, false);
  if (t->host.buf) tr_host_free(t->dev, t->host.buf);
  t->host.buf = NULL;
}

void tr__tensor_edge_free(tr__tensor_edge *t) {
  tr_comm_abort(t->w.comm); /* never opened (the build failed): the other end may never come */
  t->w.comm = NULL;
  tr__queue_free(&t->q);
}

/* A tensor message for one of this stage's chunks, checked against the chunk's shape and
 * queued until its action comes. */
int tr__tensor_take(tr__tensor_edge *t, tr_actor *self, const struct tr__chunks *ch,
                    const tr_tensor_msg *m, bool act) {
  if (m->chunk < 0 || m->chunk >= ch->n)
    return tr_actor_fail(self, TR_EINVAL, "%s for chunk %d from '%s': this stage has %d",
                         act ? "an activation" : "a gradient", m->chunk,
                         tr_actor_name(m->hdr.from), ch->n);
  const tr_stage_info *info = ch->ch[m->chunk].info;
  const size_t want = act ? info->input_bytes : info->output_bytes;
  if (m->bytes != want)
    return tr_actor_fail(self, TR_EINVAL, "%s of %zu bytes from '%s': this stage takes %zu",
                         act ? "an activation" : "a gradient", m->bytes,
                         tr_actor_name(m->hdr.from), want);
  tr__queue_push(&t->q, (tr__lent){.step = m->step, .mb = m->mb, .chunk = m->chunk,
                                   .first = m->first, .data = m->data, .bytes = m->bytes,
                                   .ready = m->ready, .dev = m->dev});
  return 0;
}
