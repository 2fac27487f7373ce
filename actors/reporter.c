/* reporter.c — a stage's messages to the coordinator: losses, checkpoint parts, held-out
 * evaluations' sums, figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "reporter.h"
#include "step_policy.h"

/* A stage's figures: the struct, then the host copy of its parameters (replica groups check
 * their consistency at the coordinator, which takes the copy over). */
static size_t done_size(const tr_msg *m) {
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  return tr__codec_lay(sizeof(tr__done_msg), &bytes, 1).total;
}

static void done_put(const tr_msg *m, uint8_t *out) {
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  tr__codec_put_struct(m, out);
  if (bytes) memcpy(out + tr__codec_lay(sizeof(tr__done_msg), &bytes, 1).at[0], r->params, bytes);
}

static void done_sent(tr_msg *m) { free((void *)((tr__done_msg *)m)->report.params); }

static tr_msg *done_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr__done_msg *d = (tr__done_msg *)tr__codec_get_struct(type, in, n, sizeof *d - sizeof(tr_msg));
  if (d == NULL) return NULL;
  tr__report *r = &d->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  const tr__codec_layout l = tr__codec_lay(sizeof *d, &bytes, 1);
  r->params = NULL;
  if (bytes && (l.total > n || !(r->params = tr__codec_copy_out(in, l.at[0], bytes)))) {
    tr_msg_free(d);
    return NULL;
  }
  return &d->hdr;
}

static const tr_msg_codec done_codec = {.size = done_size, .put = done_put, .get = done_get,
                                        .sent = done_sent};
TR_MSGTYPE_DEFINE_CODEC(tr__done_type, tr__done_msg, &done_codec);
void tr__reporter_init(tr__reporter *r, tr_edge *edge, int source) {
  *r = (tr__reporter){.log = {.edge = edge, .source = source}};
}

int tr__reporter_open(tr__reporter *r, tr_actor *self, tr_device *dev, bool losses, int m,
                      int64_t first) {
  r->self = self;
  r->dev = dev;
  if (losses && tr__loss_ring_open(&r->ring, dev, m, first))
    return tr_actor_fail(self, TR_EDEVICE, "allocating the loss ring on %s: %s",
                         tr_device_name(dev), tr_device_error(dev));
  return 0;
}

int tr__reporter_copy_loss(tr__reporter *r, tr_stream *s, int64_t step, int mb,
                           const float *loss, int64_t run_step) {
  return tr__loss_ring_copy(&r->ring, s, step, mb, loss, run_step);
}

void tr__reporter_step_ended(tr__reporter *r, int64_t step) {
  if (r->ring.dev) tr__loss_ring_ended(&r->ring, step);
}

int tr__reporter_read(tr__reporter *r, int64_t upto, bool room) {
  if (r->ring.dev == NULL) return 0;
  int rc = tr__loss_ring_read(&r->ring, &r->log, upto, room);
  if (rc == 0 && r->log.n == TR__LOSS_CHUNK && tr__loss_log_flush(&r->log, true))
    rc = tr__loss_ring_read(&r->ring, &r->log, upto, false); /* full: sent, read on */
  return rc;
}

int tr__reporter_flush(tr__reporter *r, int64_t upto) {
  do {
    if (!tr__loss_log_flush(&r->log, true)) return TR__REPORTER_WAIT; /* a credit brings it back */
    const int rc = tr__reporter_read(r, upto, false);
    if (rc) return rc;
  } while (r->log.n > 0);
  return TR__REPORTER_SENT;
}

int tr__reporter_parts(tr__reporter *r, const tr__chunks *c, int64_t step, unsigned due,
                       bool params, const tr__policy *policy) {
  for (; r->parts_sent < c->n; r->parts_sent++) {
    if (!tr_edge_acquire(r->log.edge)) return TR__REPORTER_WAIT;
    tr_stage *st = c->st[r->parts_sent];
    tr__part_msg *p = tr_msg_new(&tr__part_type);
    p->source = r->log.source;
    p->stage = r->parts_sent * c->stages + c->stage;
    p->step = step;
    p->due = due;
    int rc = tr__stage_snapshot(st, &p->part, params);
    if (rc == 0 && policy && policy->ops->part &&
        (rc = policy->ops->part(policy->state, &p->part)) != 0) {
      tr__part_free(&p->part); /* the policy failed the actor */
      tr_msg_free(p);
      tr_edge_release(r->log.edge, 1);
      return rc;
    }
    if (rc) {
      tr_msg_free(p);
      tr_edge_release(r->log.edge, 1);
      const tr_stage_info *info = tr_stage_info_of(st);
      if (rc == TR_ENOMEM)
        return tr_actor_fail(r->self, rc, "copying the stage for a checkpoint: out of memory "
                             "(%zu bytes asked for)",
                             (info->numel + info->state_numel) * sizeof(float));
      return tr_actor_fail(r->self, TR_EDEVICE, "copying the stage for a checkpoint on %s: %s",
                           tr_device_name(r->dev), tr_stage_error(st));
    }
    tr_edge_send(r->log.edge, p);
  }
  r->parts_sent = 0;
  return TR__REPORTER_SENT;
}

int tr__reporter_eval(tr__reporter *r, const tr__eval_sums *sums) {
  if (!tr_edge_acquire(r->log.edge)) return TR__REPORTER_WAIT;
  tr__eval_msg *m = tr_msg_new(&tr__eval_type);
  m->source = r->log.source;
  m->sums = *sums;
  tr_edge_send(r->log.edge, m);
  return TR__REPORTER_SENT;
}

/* What the stage's chunks allocated: parameters, gradients, optimizer state (a shard's). */
static void memory_figures(const tr__chunks *c, tr__figures *f) {
  int64_t params = 0, state = 0;
  for (int k = 0; k < c->n; k++) {
    const tr_stage_info *info = c->ch[k].info;
    params += (int64_t)(info->numel * sizeof(float));
    state += (int64_t)(info->state_numel * sizeof(float));
  }
  tr__figures_int(f, TR__M_MEMORY_PARAMS, params);
  tr__figures_int(f, TR__M_MEMORY_GRADS, params); /* a gradient per parameter */
  tr__figures_int(f, TR__M_MEMORY_STATE, state);
}

/* The chunks' CUDA graphs: captures, launches, and why they stopped (the first that says). */
static void graphs_figures(const tr__chunks *c, tr__figures *f) {
  int64_t captures = 0, launches = 0;
  const char *note = "";
  for (int k = 0; k < c->n; k++) {
    const tr_stage_graphs_figures g = tr_stage_graphs(c->st[k]);
    captures += g.captures;
    launches += g.launches;
    if (!note[0] && g.note[0]) note = g.note;
  }
  tr__figures_int(f, TR__M_GRAPH_CAPTURES, captures);
  tr__figures_int(f, TR__M_GRAPH_LAUNCHES, launches);
  char line[192]; /* as long as the result keeps */
  snprintf(line, sizeof line, "%s", note);
  tr__figures_text(f, TR__M_GRAPHS_NOTE, line);
}

/* A host copy of the parameters of a replica group's member (one chunk: tr_job_new). */
static int copy_params(tr__reporter *r, tr_stage *st, tr__report *d) {
  const size_t numel = tr_stage_info_of(st)->numel;
  float *host = malloc((numel ? numel : 1) * sizeof *host);
  if (host == NULL)
    return tr_actor_fail(r->self, TR_ENOMEM, "copying the parameters for the consistency "
                         "check: out of memory (%zu bytes asked for)", numel * sizeof *host);
  if (tr_stage_download(st, TR_STAGE_PARAMS, host) || tr_stream_synchronize(tr_stage_stream(st))) {
    free(host);
    return tr_actor_fail(r->self, TR_EDEVICE, "copying the parameters for the consistency "
                         "check on %s: %s", tr_device_name(r->dev), tr_stage_error(st));
  }
  d->params = host; /* the coordinator frees it */
  d->numel = numel;
  return 0;
}

/* The stage's figures, as pairs of the table of run metrics (run_metrics.h). A worker's
 * steps are its own pushes: the run's are the server's updates. */
int tr__reporter_figures(tr__reporter *r, const tr__chunks *c, const tr__stage_figures *s) {
  if (!tr_edge_acquire(r->log.edge)) return TR__REPORTER_WAIT;
  tr__done_msg *msg = tr_msg_new(&tr__done_type);
  msg->source = r->log.source;
  tr__report *d = &msg->report;
  *d = (tr__report){0};
  tr__figures *f = &d->fig;
  snprintf(d->device, sizeof d->device, "%s", tr_device_name(r->dev));
  uint64_t start, busy, aside;
  int64_t window_steps;
  tr__busy_window(s->busy, s->steps, s->first_step, &start, &busy, &aside, &window_steps);
  if (s->run_steps) {
    tr__figures_int(f, TR__M_STEPS, s->steps);
    tr__figures_int(f, TR__M_SKIPPED_STEPS, s->skipped);
  }
  tr__figures_int(f, s->run_steps ? TR__M_WINDOW_STEPS : TR__M_WINDOW_PUSHES, window_steps);
  tr__figures_int(f, TR__M_WINDOW_START, (int64_t)start);
  tr__figures_int(f, TR__M_WINDOW_END, (int64_t)s->window_end);
  tr__figures_int(f, TR__M_BUSY_NS, (int64_t)busy);
  tr__figures_int(f, TR__M_ASIDE_NS, (int64_t)aside);
  _Static_assert(TR__M_WORK_STEP_NS - TR__M_WORK_F_NS == TR__WORK_STEP,
                 "the WORK_*_NS measures follow metrics.h's TR__WORK_* kinds");
  for (int k = 0; k < TR__WORK_KINDS; k++)
    tr__figures_int(f, (tr__metric_id)(TR__M_WORK_F_NS + k), (int64_t)s->busy->work_ns[k]);
  uint64_t idle[TR__IDLE_KINDS];
  tr__idle_totals(&s->busy->idle, idle);
  for (int k = 0; k < TR__IDLE_KINDS; k++)
    tr__figures_int(f, (tr__metric_id)(TR__M_IDLE_EDGE_NS + k), (int64_t)idle[k]);
  tr__figures_int(f, TR__M_PEAK_MICROBATCHES, s->peak_microbatches);
  tr__figures_int(f, TR__M_PEAK_ACTIVATION_BYTES, s->peak_activation_bytes);
  memory_figures(c, f);
  graphs_figures(c, f);
  uint64_t collectives = 0, tensor_bytes = 0; /* its tensor group's, as the ring sends them */
  if (s->tensor) tr_tensor_comm_counts(s->tensor, &collectives, &tensor_bytes);
  tr__figures_int(f, TR__M_COMM_BYTES, s->edge_bytes + (int64_t)tensor_bytes);
  if (s->policy && s->policy->ops->figures) s->policy->ops->figures(s->policy->state, f);
  int rc = s->params ? copy_params(r, c->st[0], d) : 0;
  if (rc) {
    tr_msg_free(msg);
    tr_edge_release(r->log.edge, 1);
    return rc;
  }
  tr_edge_send(r->log.edge, msg);
  return TR__REPORTER_SENT;
}

void tr__reporter_close(tr__reporter *r) { tr__loss_ring_close(&r->ring); }
void tr__reporter_free(tr__reporter *r) { tr__loss_log_free(&r->log); }
