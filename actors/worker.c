/* worker.c — an asynchronous worker's push and reply (worker.h), and the asynchronous
 * protocol's messages with their wire codecs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "codec.h"
#include "worker.h"

/* ---- the asynchronous protocol as bytes (tr_msg_codec): a push's gradient and parameters,
 * a reply's pull; what arrives points into the receiving transport's buffer ---------------- */

static tr__codec_layout push_layout(const tr__push_msg *p) {
  const size_t b = tr__codec_floats(p->numel);
  return tr__codec_lay(sizeof *p, (size_t[]){p->grads ? b : 0, p->params ? b : 0}, 2);
}

static size_t push_size(const tr_msg *m) { return push_layout((const tr__push_msg *)m).total; }

static void push_put(const tr_msg *m, uint8_t *out) {
  const tr__push_msg *p = (const tr__push_msg *)m;
  const tr__codec_layout l = push_layout(p);
  tr__codec_put_struct(m, out);
  if (p->grads) memcpy(out + l.at[0], p->grads, l.bytes[0]);
  if (p->params) memcpy(out + l.at[1], p->params, l.bytes[1]);
}

static tr_msg *push_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr__push_msg *p = (tr__push_msg *)tr__codec_get_struct(type, in, n, sizeof *p - sizeof(tr_msg));
  if (p == NULL) return NULL;
  const tr__codec_layout l = push_layout(p);
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

static size_t reply_size(const tr_msg *m) {
  const tr__reply_msg *r = (const tr__reply_msg *)m;
  const size_t b = r->params ? tr__codec_floats(r->numel) : 0;
  return tr__codec_lay(sizeof *r, &b, 1).total;
}

static void reply_put(const tr_msg *m, uint8_t *out) {
  const tr__reply_msg *r = (const tr__reply_msg *)m;
  const size_t b = r->params ? tr__codec_floats(r->numel) : 0;
  tr__codec_put_struct(m, out);
  if (b) memcpy(out + tr__codec_lay(sizeof *r, &b, 1).at[0], r->params, b);
}

static tr_msg *reply_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr__reply_msg *r = (tr__reply_msg *)tr__codec_get_struct(type, in, n, sizeof *r - sizeof(tr_msg));
  if (r == NULL) return NULL;
  const size_t b = r->params ? tr__codec_floats(r->numel) : 0;
  const tr__codec_layout l = tr__codec_lay(sizeof *r, &b, 1);
  if (r->share || l.total > n) { /* Hogwild! shares memory: never across processes */
    tr_msg_free(r);
    return NULL;
  }
  if (r->params) r->params = (const float *)(in + l.at[0]);
  r->ready = NULL;
  r->applied = NULL;
  return &r->hdr;
}

static const tr_msg_codec push_codec = {.size = push_size, .put = push_put, .get = push_get};
static const tr_msg_codec reply_codec = {.size = reply_size, .put = reply_put, .get = reply_get};

TR_MSGTYPE_DEFINE_CODEC(tr__push_type, tr__push_msg, &push_codec);
TR_MSGTYPE_DEFINE_CODEC(tr__reply_type, tr__reply_msg, &reply_codec);
TR_MSGTYPE_DEFINE_CODEC(tr__leave_type, tr__leave_msg, &tr_msg_codec_flat);
const tr_msgtype *const tr__push_carries[] = {&tr__push_type, &tr__leave_type, NULL};

struct tr__worker {
  const tr__run *run;
  int index;
  tr_actor *self;
  tr_stage *st;
  tr_device *dev;
  tr_edge *push, *reply;
  tr_event *push_ev;
  float *host; /* a server of another process, a device MPI cannot read: the push's copy
                  (gradient, parameters) */
  float *norm_dev, *norm_host; /* Hogwild!: the gradient's norm, before updating in place */
  int64_t version;       /* of the parameters held */
  int since_pull;
  bool pushed, replied, shared;
  tr__reply_msg got;     /* the reply to the push in flight (its fields) */
  _Atomic int64_t *applied; /* Hogwild!: updates applied to the shared parameters */
  int64_t sent;             /* bytes pushed (tr__worker_sent_bytes) */
};

tr__worker *tr__worker_new(const tr__run *run, int index, tr_edge *push, tr_edge *reply) {
  tr__worker *w = calloc(1, sizeof *w);
  if (w == NULL) return NULL;
  *w = (tr__worker){.run = run, .index = index, .push = push, .reply = reply};
  return w;
}

static int fail(tr__worker *w, const char *what) {
  return tr_actor_fail(w->self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(w->dev),
                       tr_stage_error(w->st));
}

int tr__worker_open(tr__worker *w, tr_actor *self, tr_stage *st) {
  w->self = self;
  w->st = st;
  w->dev = tr_stage_device(st);
  if (tr_event_open(w->dev, TR_EVENT_DEFAULT, &w->push_ev)) return fail(w, "opening events");
  if (w->run->c.async.hogwild &&
      (tr_device_alloc(w->dev, sizeof(float), (void **)&w->norm_dev) ||
       tr_host_alloc(w->dev, sizeof(float), (void **)&w->norm_host)))
    return fail(w, "allocating the gradient norm");
  tr_graph *g = w->run->g;
  const size_t numel = tr_stage_info_of(st)->numel;
  if (tr_graph_actor_rank(g, tr_edge_to(w->push)) != tr_graph_rank(g) &&
      tr_device_info_of(w->dev)->kind != TR_DEVICE_HOST &&
      tr_host_alloc(w->dev, 2 * (numel ? numel : 1) * sizeof(float), (void **)&w->host))
    return fail(w, "allocating the push's host copy");
  return 0;
}

/* The push's gradient and parameters where the server can read them: in place, or (for a
 * server of another process) a host copy, complete before the push goes. */
static int push_from(tr__worker *w, tr__push_msg *m) {
  m->grads = tr_stage_grads(w->st);
  m->params = tr_stage_params(w->st);
  if (w->host == NULL) return 0;
  const size_t n = m->numel;
  tr_stream *s = tr_stage_stream(w->st);
  if (tr_memcpy(s, w->host, m->grads, n * sizeof(float), TR_COPY_D2H) ||
      tr_memcpy(s, w->host + n, m->params, n * sizeof(float), TR_COPY_D2H) ||
      tr_stream_synchronize(s))
    return fail(w, "copying the push for another process");
  m->grads = w->host;
  m->params = w->host + n;
  return 0;
}

void tr__worker_receive(tr__worker *w, const tr__reply_msg *m) {
  /* parameters that came with the reply are read from its buffer: its credit (and with it
   * the buffer) goes back once they are copied in */
  if (!m->params) tr_edge_release(w->reply, 1);
  w->got.pulled = m->pulled; /* the fields: its header is the mailbox's */
  w->got.version = m->version;
  w->got.ready = m->ready;
  w->got.params = m->params;
  w->got.share = m->share;
  w->got.applied = m->applied;
  w->replied = true;
}

int tr__worker_begin(tr__worker *w) {
  if (!w->run->c.async.hogwild) return 1;
  if (!w->shared) { /* the server's parameters, before the first step */
    if (!w->replied) return 0;
    if (tr_stage_share_params(w->st, w->got.share))
      return tr_actor_fail(w->self, TR_EINVAL, "%s", tr_stage_error(w->st));
    w->applied = w->got.applied;
    w->shared = true;
    w->replied = false;
  }
  w->version = atomic_load(w->applied);
  return 1;
}

int tr__worker_step(tr__worker *w, int64_t pushes, int64_t batch_step, tr__busy *busy) {
  const tr_job_config *c = &w->run->c;
  if (!w->pushed) {
    if (!tr_edge_acquire(w->push)) return 0; /* the server still reads the last one */
    int64_t applied = -1;
    bool skipped = false;
    if (c->async.hogwild) {
      const uint64_t t0 = tr__busy_start(busy, w->self, pushes, "update", -1);
      double norm2;
      if (tr__norm2_now(tr_stage_stream(w->st), tr_stage_grads(w->st),
                        tr_stage_info_of(w->st)->numel, w->norm_dev, w->norm_host, &norm2))
        return fail(w, "the gradient's norm (Hogwild!)");
      skipped = !isfinite(norm2);
      if (skipped && c->on_nonfinite != TR_NONFINITE_SKIP)
        return tr_actor_fail(w->self, TR_ENONFINITE, "step %lld, worker %d on %s: the gradient "
                             "norm is %s: the run diverged (on_nonfinite skip goes on without "
                             "such updates)", (long long)batch_step, w->index,
                             tr_device_name(w->dev), tr__nonfinite_name(norm2));
      if ((!skipped && tr_stage_step(w->st, NULL)) || tr_stage_zero_grads(w->st))
        return fail(w, "optimizer step (Hogwild!)");
      applied = atomic_fetch_add(w->applied, 1);
      tr__busy_add(busy, w->self, pushes, "update", t0, -1);
    } else if (tr_event_record(w->push_ev, tr_stage_stream(w->st))) {
      return fail(w, "pushing the gradient");
    }
    const int every = c->async.pull_every > 0 ? c->async.pull_every : 1;
    tr__push_msg *m = tr_msg_new(&tr__push_type);
    m->worker = w->index;
    m->pull = w->since_pull + 1 >= every;
    m->skipped = skipped;
    m->step = batch_step;
    m->version = w->version;
    m->applied = applied;
    m->ready = c->async.hogwild ? NULL : w->push_ev;
    m->grads = m->params = NULL;
    m->numel = tr_stage_info_of(w->st)->numel;
    m->dev = w->dev;
    const int rc = c->async.hogwild ? 0 : push_from(w, m);
    if (rc) {
      tr_msg_free(m);
      return rc;
    }
    if (!c->async.hogwild) w->sent += 2 * (int64_t)(m->numel * sizeof(float)); /* grads, params */
    tr_edge_send(w->push, m);
    if (c->async.hogwild) return 1;
    w->pushed = true;
  }
  /* The next backward may write the gradients only once the server has read them. A
   * server of another process sends the parameters pulled with its reply. */
  if (!w->replied) return 0;
  tr_stream *s = tr_stage_stream(w->st);
  if ((w->got.ready && tr_stream_wait_event(s, w->got.ready)) ||
      (w->got.params && (tr_stage_upload(w->st, TR_STAGE_PARAMS, w->got.params) ||
                         tr_stream_synchronize(s))) ||
      tr_stage_zero_grads(w->st))
    return fail(w, "taking the server's reply");
  if (w->got.params) tr_edge_release(w->reply, 1);
  if (w->got.pulled) w->version = w->got.version, w->since_pull = 0;
  else w->since_pull++;
  w->pushed = w->replied = false;
  return 1;
}

int tr__worker_leave(tr__worker *w) {
  if (!tr_edge_acquire(w->push)) return 0; /* a Hogwild! push still being counted */
  tr__leave_msg *l = tr_msg_new(&tr__leave_type);
  l->worker = w->index;
  tr_edge_send(w->push, l);
  return 1;
}

void tr__worker_close(tr__worker *w) {
  if (w == NULL) return;
  if (w->push_ev) tr_event_close(w->push_ev);
  if (w->host) tr_host_free(w->dev, w->host);
  if (w->norm_dev) tr_device_free(w->dev, w->norm_dev);
  if (w->norm_host) tr_host_free(w->dev, w->norm_host);
  w->push_ev = NULL;
  w->host = w->norm_dev = w->norm_host = NULL;
}

void tr__worker_free(tr__worker *w) { free(w); }

int64_t tr__worker_sent_bytes(const tr__worker *w) { return w->sent; }
