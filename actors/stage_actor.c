/* stage_actor.c — the stage runner: one device, layers [cuts[s], cuts[s+1]) of the model,
 * and every step the action list its schedule gives it (tr_schedule.h). Nothing else: the
 * replica group's all-reduce (group.c), the norm exchange of clipping (clipnorm.c) and the
 * asynchronous worker's push (worker.c) are parts it calls at the step action; what others
 * lend it waits in inbox.c's queues; losses and figures are losses.c's and metrics.c's.
 *
 * The actor never waits inside a callback. Messages (batches, activations, gradients, and
 * the parts' own) are queued on arrival, then the action list runs as far as it can: an
 * action whose input has not come yet stops it until the next message. Work goes to the
 * device's streams in order; what other devices need is handed over with an event, and a
 * buffer lent by another actor goes back (its edge's credit) once the event of the copy out
 * of it has completed. On host devices every event has completed by the time it is
 * queried, so credits go back at once; on CUDA the actor polls itself while any copy is in
 * flight.
 *
 * Asynchronous jobs: the stage is a worker (the whole model, one micro-batch of a whole
 * global batch). `step` counts its own pushes; the loader's batches say which step of the
 * run each one is, and a batch of step -1 ends the worker's part.
 *
 * The end is a sequence too: the device finishes, the losses still held go to the
 * coordinator, then (replica 0) the last checkpoint part, the figures, and (a worker) the
 * leave. Each waits for a credit of its edge where it must.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clipnorm.h"
#include "group.h"
#include "inbox.h"
#include "transport.h"
#include "losses.h"
#include "metrics.h"
#include "tr_trace.h"
#include "worker.h"

enum { BLOCKED = 0, DONE = 1 };
/* Where the step action is: the sums of the replica group, the norm exchange and the
 * update, the updated shards of the others (sharded optimizer), the update done and a
 * checkpoint part to send. */
enum { STEP_REDUCE, STEP_CLIP, STEP_GATHER, STEP_SAVE };
/* Where the end is. */
enum { END_DEVICE, END_LOSSES, END_PART, END_FIGURES, END_LEAVE };

/* Copies of the tensors sent to a stage of another process, one per credit of the edge,
 * reused in order as the credits come back: pinned host memory where MPI carries them from a
 * device whose memory it cannot read, device memory where NCCL sends them (wire). */
typedef struct ring {
  uint8_t *buf; /* n × bytes; NULL: sent from where they are */
  int n, next;
  size_t bytes;
} ring;

/* The next copy's place; *k: its index. */
static uint8_t *ring_take(ring *r, int *k) {
  *k = r->next;
  r->next = (r->next + 1) % r->n;
  return r->buf + (size_t)*k * r->bytes;
}

/* An edge to or from a stage of another process whose tensors NCCL carries (job.c chose it:
 * tr_edge_carrier_choose): the message still goes through the transport, its data NULL, and
 * the bytes by ncclSend / ncclRecv on a communicator of the edge's two ends, on a stream of
 * the edge's own at each end. Each edge's messages are in order, so both ends issue its
 * operations in one order; a stream per edge keeps one direction's rendezvous from waiting
 * behind the other's (a stage that sends activations and receives gradients would deadlock
 * on one stream: each end's send waiting for a receive queued behind the other's send), and
 * the compute stream waits only on receives, as it waits on a neighbour's copy in a
 * process. The sender sends from a ring of device copies, one per credit, as host staging
 * does: its slots and input-gradient buffers are reused on the schedule's terms, a copy only
 * once its credit is back (the receive has run). */
typedef struct wire {
  tr_comm *comm; /* NULL: MPI carries the edge (or it stays in the process) */
  tr_stream *s;
  tr_event *ev;       /* sender: the copy into the ring made; receiver: the destination free */
  tr_event *done;     /* receiver: the receive has run */
  tr_event **sent;    /* sender [copies.n]: copy i may be written again */
  ring copies;        /* sender's, in device memory */
} wire;

/* One model chunk on this device (interleaved schedules put several): layers between two
 * cuts, and what its slots hold. */
typedef struct chunk {
  tr_stage *st;
  const tr_stage_info *info;
  tr_event **act_ev;    /* [slot] */
  uint64_t *slot_first; /* [slot]: the first sample of the micro-batch in it */
} chunk;

/* A batch edge into this stage and what it brings. */
typedef struct input {
  tr_edge *edge;
  unsigned what;
  tr__queue q;
} input;

typedef struct stage_actor {
  tr_actor *self;
  const tr__run *run;
  int replica, stage, index;
  tr_device *dev;
  chunk *ch;
  int nch, cur;   /* cur: the chunk whose action runs (errors name its layers) */
  tr_stream *s;   /* the device's, every chunk's */
  int m;
  const tr_action *acts;
  size_t nacts, pc;
  signed char *holds; /* [action]: +1 where a micro-batch takes its slot, -1 where it frees it */
  int64_t step;

  input in[2];
  int nin;
  tr_edge *act_out, *act_in, *grad_out, *grad_in;
  ring act_host, grad_host; /* act_out's and grad_out's, across processes by MPI */
  wire act_w, grad_w, act_in_w, grad_in_w; /* act_out's, grad_out's, act_in's, grad_in's */
  tr__queue actq, gradq;
  tr_event *grad_ev[2];
  int grad_parity;
  bool grad_credit;
  const float *dinput;
  tr__returns returns;   /* credits owed once the copies out of lent buffers have run */
  tr_data_gen *gen;      /* the job's data on this device, once a batch asks for it */

  tr__group *group;
  tr__clip *clip;
  tr__worker *worker;
  tr_edge *report;
  int step_phase, end_phase, parts_sent;
  int64_t batch_step; /* the run's step of the batch in hand (a worker's differs from step) */

  /* losses (last stage): the device → ring → log → the coordinator */
  tr__loss_ring ring;
  tr__loss_log losses;

  tr__busy busy;
  int64_t skipped; /* updates skipped for a norm that was not finite */
  int live, peak;
  int64_t live_bytes, peak_bytes;
  uint64_t window_end;
  bool finishing, done, polling;
  bool ended; /* the run was finished early (a signal, its time): a worker's queued batches
                 are not started */
  char err[512];
} stage_actor;

void *tr__stage_new(const tr__run *run, int replica, int stage, tr_device *dev) {
  stage_actor *a = calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->run = run;
  a->replica = replica;
  a->stage = stage;
  a->index = tr__device_index(run, replica, stage);
  a->dev = dev;
  a->m = run->c.layout.microbatches;
  return a;
}

tr_device *tr__stage_device(const void *state) { return ((const stage_actor *)state)->dev; }

int tr__stage_add_input(void *state, tr_edge *e, unsigned what) {
  stage_actor *a = state;
  if (a->nin == 2) return TR_EINVAL;
  a->in[a->nin++] = (input){.edge = e, .what = what};
  return 0;
}

void tr__stage_set_chain(void *state, tr_edge *out, tr_edge *in, bool forward) {
  stage_actor *a = state;
  if (forward) {
    a->act_out = out; /* to the next stage */
    a->grad_in = in;
  } else {
    a->grad_out = out; /* to the previous stage */
    a->act_in = in;
  }
}

int tr__stage_set_group(void *state, int n, int me, tr_edge *const *out, tr_edge *const *in,
                        tr_device *const *devs) {
  stage_actor *a = state;
  a->group = tr__group_new(n, me, out, in, devs, a->run->c.zero != 0);
  return a->group ? 0 : TR_ENOMEM;
}

void tr__stage_use_nccl_edge(void *state, tr_edge *e, tr_comm *comm) {
  stage_actor *a = state;
  wire *w = e == a->act_out ? &a->act_w : e == a->grad_out ? &a->grad_w
            : e == a->act_in ? &a->act_in_w : e == a->grad_in ? &a->grad_in_w : NULL;
  TR_ASSERT(w != NULL && w->comm == NULL);
  w->comm = comm;
}

void tr__stage_use_nccl(void *state, tr_comm *inside, tr_comm *across, const char *error) {
  tr__group_use_nccl(((stage_actor *)state)->group, inside, across, error);
}

void tr__stage_span_ranks(void *state, int group, tr_edge *sum, tr_edge *summed) {
  tr__group_span_ranks(((stage_actor *)state)->group, group, sum, summed);
}

int tr__stage_set_clip(void *state, int n, int me, tr_edge *const *out, tr_edge *const *in) {
  stage_actor *a = state;
  a->clip = tr__clip_new(n, me, out, in);
  return a->clip ? 0 : TR_ENOMEM;
}

void tr__stage_set_report(void *state, tr_edge *report) {
  stage_actor *a = state;
  a->report = report;
  a->losses = (tr__loss_log){.edge = report, .source = a->index};
}

int tr__stage_set_server(void *state, tr_edge *push, tr_edge *reply) {
  stage_actor *a = state;
  a->worker = tr__worker_new(a->run, a->replica, push, reply);
  return a->worker ? 0 : TR_ENOMEM;
}

/* ZeRO stage 1: this stage holds one shard of the optimizer, its group the others. */
static bool sharded(const stage_actor *a) {
  return a->group && tr__group_shard(a->group).count > 1;
}

static int fail_device(tr_actor *self, stage_actor *a, const char *what) {
  const tr_stage *st = a->ch ? a->ch[a->cur].st : NULL;
  const char *why = st ? tr_stage_error(st) : tr_device_error(a->dev);
  return tr_actor_fail(self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(a->dev), why);
}

static void busy(stage_actor *a, const char *what, uint64_t t0, int mb) {
  tr__busy_add(&a->busy, a->self, a->step, what, t0, mb);
}

/* ---- opening ------------------------------------------------------------------------------ */

static int open_events(stage_actor *a, tr_event **ev, int n) {
  for (int i = 0; i < n; i++)
    if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &ev[i])) return fail_device(a->self, a, "opening events");
  return 0;
}

/* A queue per edge that lends this stage buffers, and room to owe every credit back. */
static int open_staged(stage_actor *a, ring *h, const wire *w, tr_edge *e, size_t bytes) {
  tr_graph *g = a->run->g;
  if (e == NULL || w->comm || tr_device_get_info(a->dev)->kind == TR_DEVICE_HOST ||
      tr_graph_actor_rank(g, tr_edge_to(e)) == tr_graph_rank(g))
    return 0;
  *h = (ring){.n = tr_edge_credits(e), .bytes = bytes};
  if (tr_host_alloc(a->dev, (size_t)h->n * (bytes ? bytes : 1), (void **)&h->buf))
    return fail_device(a->self, a, "allocating host copies for another process");
  return 0;
}

/* A wire's stream and events; a sender's (`out`) ring of copies, one per credit. */
static int open_wire(stage_actor *a, wire *w, tr_edge *out, size_t bytes, const char *name) {
  if (w->comm == NULL) return 0;
  if (tr_stream_open(a->dev, name, &w->s) || tr_event_open(a->dev, TR_EVENT_DEFAULT, &w->ev) ||
      tr_event_open(a->dev, TR_EVENT_DEFAULT, &w->done))
    return fail_device(a->self, a, "opening a stream for NCCL");
  if (out == NULL) return 0;
  ring *c = &w->copies;
  *c = (ring){.n = tr_edge_credits(out), .bytes = bytes};
  w->sent = calloc((size_t)c->n, sizeof *w->sent);
  if (w->sent == NULL) return TR_ENOMEM;
  if ((c->n && open_events(a, w->sent, c->n)) ||
      tr_device_alloc(a->dev, (size_t)c->n * (bytes ? bytes : 1), (void **)&c->buf))
    return fail_device(a->self, a, "allocating copies to send through NCCL");
  return 0;
}

/* Once its operations have run (`abort`: without waiting for a peer that may never come:
 * the run failed). The communicator first, so a receive waiting for a gone peer ends. */
static void close_wire(stage_actor *a, wire *w, bool abort) {
  if (abort) tr_comm_abort(w->comm);
  else if (w->s) tr_stream_synchronize(w->s);
  if (!abort) tr_comm_close(w->comm);
  w->comm = NULL;
  if (w->copies.buf) tr_device_free(a->dev, w->copies.buf);
  for (int i = 0; w->sent && i < w->copies.n; i++)
    if (w->sent[i]) tr_event_close(w->sent[i]);
  if (w->ev) tr_event_close(w->ev);
  if (w->done) tr_event_close(w->done);
  if (w->s) tr_stream_close(w->s);
  free(w->sent);
  *w = (wire){0};
}

/* The most bytes a tensor of this kind takes over the chunks (host copies fit any). */
static size_t largest(const stage_actor *a, bool outputs) {
  size_t most = 0;
  for (int c = 0; c < a->nch; c++) {
    const size_t b = outputs ? a->ch[c].info->output_bytes : a->ch[c].info->input_bytes;
    most = b > most ? b : most;
  }
  return most;
}

static int open_queues(stage_actor *a) {
  int owed = 0, rc = 0;
  for (int i = 0; i < a->nin; i++) {
    rc |= tr__queue_open(&a->in[i].q, tr_edge_credits(a->in[i].edge));
    owed += tr_edge_credits(a->in[i].edge);
  }
  if (a->act_in) rc |= tr__queue_open(&a->actq, tr_edge_credits(a->act_in)), owed += tr_edge_credits(a->act_in);
  if (a->grad_in) rc |= tr__queue_open(&a->gradq, tr_edge_credits(a->grad_in)), owed += tr_edge_credits(a->grad_in);
  for (int c = 0; c < a->nch; c++) {
    chunk *ch = &a->ch[c];
    ch->act_ev = calloc((size_t)ch->info->slots, sizeof *ch->act_ev);
    ch->slot_first = calloc((size_t)ch->info->slots, sizeof *ch->slot_first);
    if (!ch->act_ev || !ch->slot_first) rc = TR_ENOMEM;
  }
  if (rc) return TR_ENOMEM;
  if ((rc = tr__returns_open(&a->returns, a->dev, owed)))
    return rc == TR_EDEVICE ? fail_device(a->self, a, "opening events") : rc;
  for (int c = 0; c < a->nch && a->act_out; c++)
    if ((rc = open_events(a, a->ch[c].act_ev, a->ch[c].info->slots))) return rc;
  if (a->grad_out && (rc = open_events(a, a->grad_ev, 2))) return rc;
  if ((rc = open_staged(a, &a->act_host, &a->act_w, a->act_out, largest(a, true))) ||
      (rc = open_staged(a, &a->grad_host, &a->grad_w, a->grad_out, largest(a, false))) ||
      (rc = open_wire(a, &a->act_w, a->act_out, largest(a, true), "nccl act out")) ||
      (rc = open_wire(a, &a->grad_w, a->grad_out, largest(a, false), "nccl grad out")) ||
      (rc = open_wire(a, &a->act_in_w, NULL, 0, "nccl act in")) ||
      (rc = open_wire(a, &a->grad_in_w, NULL, 0, "nccl grad in")))
    return rc;
  return 0;
}

static int check_wiring(tr_actor *self, stage_actor *a) {
  bool first = false, last = false, middle_in = false, middle_out = false;
  for (int c = 0; c < a->nch; c++) {
    first |= a->ch[c].info->is_first, last |= a->ch[c].info->is_last;
    middle_in |= !a->ch[c].info->is_first, middle_out |= !a->ch[c].info->is_last;
  }
  unsigned what = 0;
  for (int i = 0; i < a->nin; i++) what |= a->in[i].what;
  const tr_job_config *c = &a->run->c;
  const char *missing = !a->report                                 ? "a coordinator (tr_job_add_coordinator)"
                        : first && !(what & TR_BATCH_INPUTS)             ? "an edge of inputs"
                        : last && !(what & TR_BATCH_TARGETS)             ? "an edge of targets"
                        : middle_in && !a->act_in                        ? "activations from stage s-1"
                        : middle_out && !a->act_out                      ? "a chain to stage s+1"
                        : c->async.enabled && !a->worker                 ? "a server (tr_job_serve)"
                        : c->zero && !a->group                           ? "a replica group (tr_job_group)"
                        : c->zero && c->optim.clip > 0 && !a->clip       ? "the norm exchange with "
                                                       "every stage (tr_job_group of every stage)"
                                                                         : NULL;
  if (missing)
    return tr_actor_fail(self, TR_EINVAL, "stage %d of replica %d is not wired: it lacks %s",
                         a->stage, a->replica, missing);
  return 0;
}

/* Where each (chunk, micro-batch) takes its slot and frees it: its first action and its
 * last, as the schedule assigned the slots. */
static int plan_holds(stage_actor *a) {
  const int m = a->m;
  int *last = malloc((size_t)(a->nch * m) * sizeof *last);
  a->holds = calloc(a->nacts, 1);
  if (last == NULL || a->holds == NULL) {
    free(last);
    return TR_ENOMEM;
  }
  for (int i = 0; i < a->nch * m; i++) last[i] = -1;
  for (size_t k = 0; k < a->nacts; k++) {
    const tr_action *x = &a->acts[k];
    if (x->mb < 0) continue;
    if (last[x->chunk * m + x->mb] < 0) a->holds[k] = 1;
    last[x->chunk * m + x->mb] = (int)k;
  }
  for (int i = 0; i < a->nch * m; i++)
    if (last[i] >= 0) a->holds[last[i]] -= 1;
  free(last);
  return 0;
}

/* Each chunk's stage: its layers, its slots, and a checkpoint's share when resuming. */
static int open_chunks(tr_actor *self, stage_actor *a) {
  const tr__run *run = a->run;
  const tr_job_config *c = &run->c;
  a->nch = c->layout.chunks;
  a->ch = calloc((size_t)a->nch, sizeof *a->ch);
  if (a->ch == NULL) return TR_ENOMEM;
  for (int k = 0; k < a->nch; k++) {
    chunk *ch = &a->ch[k];
    const int piece = k * c->layout.stages + a->stage;
    tr_stage_config sc = {.first = run->cuts[piece],
                          .end = run->cuts[piece + 1],
                          .batch = run->mb_batch,
                          .slots = tr_schedule_chunk_slots(run->sc, a->stage, k),
                          .recompute = c->memory.recompute,
                          .split = c->layout.schedule == TR_SCHEDULE_ZB1,
                          .global_batch = c->global_batch,
                          .seed = c->seed,
                          .optim = c->optim,
                          .precision = c->precision,
                          .graphs = c->graphs,
                          .shard = a->group ? tr__group_shard(a->group) : (tr_stage_shard){0}};
    if (tr_stage_open(&ch->st, c->model, a->dev, &sc, a->err, sizeof a->err))
      return tr_actor_fail(self, TR_EDEVICE, "opening the stage on %s: %s",
                           tr_device_name(a->dev), a->err);
    ch->info = tr_stage_get_info(ch->st);
    a->cur = k;
    if (c->checkpoint.resume_from &&
        tr__stage_load(ch->st, c->checkpoint.resume_from, a->err, sizeof a->err))
      return tr_actor_fail(self, TR_EFORMAT, "%s", a->err);
    if (tr_stage_zero_grads(ch->st)) return fail_device(self, a, "zeroing gradients");
    a->live_bytes += (int64_t)ch->info->work_bytes; /* always in use */
  }
  a->cur = 0;
  a->peak_bytes = a->live_bytes;
  a->s = tr_stage_stream(a->ch[0].st);
  return 0;
}

static tr_stage *const *stages_of(stage_actor *a, tr_stage **out) {
  for (int c = 0; c < a->nch; c++) out[c] = a->ch[c].st;
  return out;
}

static int stage_open(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  const tr__run *run = a->run;
  const tr_job_config *c = &run->c;
  a->self = self;
  if (tr_device_bind(a->dev)) return fail_device(self, a, "binding the device");
  tr_trace_label(self, tr_device_name(a->dev)); /* the timeline names lanes by device */
  int rc = open_chunks(self, a);
  if (rc) return rc;
  a->acts = tr_schedule_actions(run->sc, a->stage, &a->nacts);
  if ((rc = check_wiring(self, a)) || (rc = plan_holds(a)) || (rc = open_queues(a))) return rc;
  tr_graph *g = run->g;
  a->step = a->worker ? 0 : tr_graph_first_step(g);
  const tr_stage_info *last = a->ch[a->nch - 1].info;
  if (last->is_last && tr__loss_ring_open(&a->ring, a->dev, a->m, a->step))
    return fail_device(self, a, "allocating the loss ring");
  tr_stage *st = a->ch[0].st; /* a replica group and a worker: one chunk (tr_job_new) */
  if (a->group) {
    if ((rc = tr__group_open(a->group, self, st, &a->busy))) return rc;
    tr_stage_on_grad_ready(st, tr__group_grad_ready, a->group);
  }
  /* every update checks the gradients' norm: across the stages when they must agree
   * (clipping, skipping), else this stage's own */
  if (!a->worker && !a->clip && !(a->clip = tr__clip_new(1, 0, NULL, NULL))) return TR_ENOMEM;
  tr_stage *all[TR__MAX_STAGES];
  if (a->clip && (rc = tr__clip_open(a->clip, self, stages_of(a, all), a->nch))) return rc;
  if (a->worker && (rc = tr__worker_open(a->worker, self, st))) return rc;

  /* an asynchronous worker pushes about its share of the steps */
  const int64_t end = tr_graph_end_step(g);
  a->busy = tr__busy_begin(a->step, end == INT64_MAX ? INT64_MAX
                                                     : (end - tr_graph_first_step(g)) /
                                                           (a->worker ? c->layout.replicas : 1));
  a->busy.stage = a->stage;
  return 0;
}

/* ---- receiving -------------------------------------------------------------------------- */

/* The edge a batch came on: its producer's; of two edges from one producer, the one that
 * carries inputs when the batch has them. */
static input *input_of(stage_actor *a, const tr_batch_msg *b) {
  input *match = NULL;
  for (int i = 0; i < a->nin; i++)
    if (tr_edge_from(a->in[i].edge) == b->hdr.from &&
        (match == NULL || ((a->in[i].what & TR_BATCH_INPUTS) != 0) == (b->x != NULL)))
      match = &a->in[i];
  return match;
}

static int take_batch(tr_actor *self, stage_actor *a, const tr_batch_msg *b) {
  input *in = input_of(a, b);
  const char *from = b->hdr.from ? tr_actor_name(b->hdr.from) : "?";
  if (in == NULL)
    return tr_actor_fail(self, TR_EINVAL, "a batch from '%s', which has no batch edge to this "
                         "stage", from);
  if (b->step >= 0 && b->generate) {
    const tr_data *data = a->run->c.data;
    if (b->count != a->run->mb_batch || !tr_data_can_generate(data))
      return tr_actor_fail(self, TR_EINVAL, "a batch from '%s' of %d samples to generate on "
                           "the device: this stage takes micro-batches of %d samples, and data "
                           "'%s' %s be generated on a device", from, b->count, a->run->mb_batch,
                           tr_data_name(data), tr_data_can_generate(data) ? "can" : "cannot");
  } else if (b->step >= 0) {
    const bool want_x = in->what & TR_BATCH_INPUTS, want_y = in->what & TR_BATCH_TARGETS;
    const tr_model *m = a->run->c.model;
    const size_t n = (size_t)a->run->mb_batch;
    if (b->count != a->run->mb_batch ||
        (want_x && (!b->x || b->x_bytes != n * tr_model_input_bytes(m))) ||
        (want_y && a->ch[a->nch - 1].info->is_last &&
         (!b->y || b->y_bytes != n * tr_model_target_bytes(m))))
      return tr_actor_fail(self, TR_EINVAL, "a batch from '%s' of %d samples (%zu bytes of "
                           "inputs, %zu of targets): this stage takes micro-batches of %d "
                           "samples with %s (%zu and %zu bytes)", from, b->count,
                           b->x ? b->x_bytes : 0, b->y ? b->y_bytes : 0, a->run->mb_batch,
                           want_x && want_y ? "inputs and targets" : want_x ? "inputs" : "targets",
                           want_x ? n * tr_model_input_bytes(m) : 0,
                           want_y ? n * tr_model_target_bytes(m) : 0);
  }
  tr__queue_push(&in->q, (tr__lent){.step = b->step, .mb = b->mb, .count = b->count,
                                    .first = b->first, .x = b->x, .y = b->y,
                                    .generate = b->generate != 0});
  return 0;
}

static int take_tensor(tr_actor *self, stage_actor *a, const tr_tensor_msg *t, bool act) {
  if (t->chunk < 0 || t->chunk >= a->nch)
    return tr_actor_fail(self, TR_EINVAL, "%s for chunk %d from '%s': this stage has %d",
                         act ? "an activation" : "a gradient", t->chunk,
                         tr_actor_name(t->hdr.from), a->nch);
  const tr_stage_info *info = a->ch[t->chunk].info;
  const size_t want = act ? info->input_bytes : info->output_bytes;
  if (t->bytes != want)
    return tr_actor_fail(self, TR_EINVAL, "%s of %zu bytes from '%s': this stage takes %zu",
                         act ? "an activation" : "a gradient", t->bytes,
                         tr_actor_name(t->hdr.from), want);
  tr__queue_push(act ? &a->actq : &a->gradq,
                 (tr__lent){.step = t->step, .mb = t->mb, .chunk = t->chunk, .first = t->first,
                            .data = t->data, .bytes = t->bytes, .ready = t->ready, .dev = t->dev});
  return 0;
}

/* ---- the actions -------------------------------------------------------------------------- */

/* The micro-batch of the action just done took its slot (+1) or freed it (-1). */
static void hold(stage_actor *a, const tr_action *act, int delta) {
  a->live += delta;
  a->live_bytes += delta * (int64_t)a->ch[act->chunk].info->slot_bytes;
  if (a->live > a->peak) a->peak = a->live;
  if (a->live_bytes > a->peak_bytes) a->peak_bytes = a->live_bytes;
}

static int out_of_order(tr_actor *self, stage_actor *a, const char *what, const tr__lent *e,
                        const tr_action *act) {
  if (a->nch > 1)
    return tr_actor_fail(self, TR_EINVAL, "%s of step %lld, micro-batch %d, chunk %d came where "
                         "the schedule has step %lld, micro-batch %d, chunk %d: producers send "
                         "in schedule order", what, (long long)e->step, e->mb, e->chunk,
                         (long long)a->step, act->mb, act->chunk);
  return tr_actor_fail(self, TR_EINVAL, "%s of step %lld, micro-batch %d came where the "
                       "schedule has step %lld, micro-batch %d: producers send in schedule order",
                       what, (long long)e->step, e->mb, (long long)a->step, act->mb);
}

/* The bytes of a tensor whose message came without them: ncclRecv into dst on the edge's
 * stream once the compute stream is done with dst, the compute stream then waiting for it. */
static int receive_nccl(tr_actor *self, stage_actor *a, tr_edge *e, void *dst, size_t bytes) {
  wire *w = e == a->act_in ? &a->act_in_w : &a->grad_in_w;
  if (w->comm == NULL)
    return tr_actor_fail(self, TR_ESTATE, "a tensor without its bytes came on the %s edge "
                         "from '%s', which has no NCCL communicator here: the ranks disagree "
                         "on what carries it", e == a->act_in ? "act" : "grad",
                         tr_actor_name(tr_edge_from(e)));
  if (tr_event_record(w->ev, a->s) || tr_stream_wait_event(w->s, w->ev) ||
      tr_comm_recv(w->comm, w->s, dst, bytes, 0) || tr_event_record(w->done, w->s) ||
      tr_stream_wait_event(a->s, w->done) || tr__returns_after(&a->returns, w->s, e))
    return fail_device(self, a, "receiving a tensor through NCCL");
  return DONE;
}

/* A tensor from a neighbour into this stage's `dst`, then its credit goes back. */
static int receive_tensor(tr_actor *self, stage_actor *a, tr__queue *q, tr_edge *e, void *dst,
                          const tr_action *act) {
  const tr__lent *in = tr__queue_peek(q);
  if (in == NULL) return BLOCKED;
  if (in->step != a->step || in->mb != act->mb || in->chunk != act->chunk)
    return out_of_order(self, a, "a tensor", in, act);
  const char *what = act->kind == TR_ACTION_RECV_ACT ? "recv act" : "recv grad";
  uint64_t t0 = tr__busy_start(&a->busy, self, a->step, what, act->mb);
  if (in->data == NULL) { /* NCCL carries it */
    const int rc = receive_nccl(self, a, e, dst, in->bytes);
    if (rc != DONE) return rc;
  } else if ((in->ready && tr_stream_wait_event(a->s, in->ready)) ||
             /* from another process: host memory, complete (in->dev and in->ready NULL) */
             (in->dev ? tr_memcpy_peer(a->s, dst, a->dev, in->data, in->dev, in->bytes)
                      : tr_memcpy(a->s, dst, in->data, in->bytes, TR_COPY_H2D)) ||
             tr__returns_after(&a->returns, a->s, e)) {
    return fail_device(self, a, "receiving a tensor");
  }
  if (act->kind == TR_ACTION_RECV_ACT) a->ch[act->chunk].slot_first[act->slot] = in->first;
  tr__queue_pop(q);
  busy(a, what, t0, act->mb);
  return DONE;
}

/* The chunk a tensor this stage sends is for, on the device that takes it: activations
 * of the last stage go on to the next chunk of the first, gradients of the first back to
 * the previous chunk of the last. */
static int peer_chunk(const stage_actor *a, const tr_action *act) {
  const int P = a->run->c.layout.stages;
  if (act->kind == TR_ACTION_SEND_ACT) return act->chunk + (a->stage == P - 1);
  return act->chunk - (a->stage == 0);
}

/* A tensor for another process through NCCL: a copy into the ring (once the send out of
 * that entry has run), then ncclSend of it on the edge's stream. */
static int send_nccl(stage_actor *a, wire *w, const void *data, size_t bytes) {
  int k;
  uint8_t *copy = ring_take(&w->copies, &k);
  if (tr_stream_wait_event(a->s, w->sent[k]) || tr_memcpy(a->s, copy, data, bytes, TR_COPY_D2D) ||
      tr_event_record(w->ev, a->s) || tr_stream_wait_event(w->s, w->ev) ||
      tr_comm_send(w->comm, w->s, copy, bytes, 1) || tr_event_record(w->sent[k], w->s))
    return fail_device(a->self, a, "sending a tensor through NCCL");
  return DONE;
}

/* NCCL's send goes after the message: NCCL connects two ranks at their first send and
 * receive, and the first send waits, on this thread, until the peer has issued its first
 * receive, which it does when the message comes (receive_nccl). */
static int send_tensor(stage_actor *a, tr_edge *e, ring *h, wire *w, const tr_msgtype *type,
                       const void *data, size_t bytes, tr_event *ev, const tr_action *act) {
  const void *carried = data;
  if (w->comm) {
    carried = NULL; /* the message goes without its bytes (codec.h) */
  } else if (h->buf) { /* for another process: a host copy, complete before it goes */
    int k;
    uint8_t *copy = ring_take(h, &k);
    if (tr_memcpy(a->s, copy, data, bytes, TR_COPY_D2H) || tr_stream_synchronize(a->s))
      return fail_device(a->self, a, "copying a tensor for another process");
    carried = copy;
  }
  if (tr_event_record(ev, a->s)) return fail_device(a->self, a, "sending a tensor");
  tr_tensor_msg *t = tr_msg_new(type);
  t->step = a->step;
  t->mb = act->mb;
  t->chunk = peer_chunk(a, act);
  t->first = a->ch[act->chunk].slot_first[act->slot];
  t->data = carried;
  t->bytes = bytes;
  t->ready = ev;
  t->dev = a->dev;
  tr_edge_send(e, t);
  return w->comm ? send_nccl(a, w, data, bytes) : DONE;
}

/* Whether a forward of chunk `info` takes a batch from edge `in`: inputs for the model's
 * first layers, targets for its last. */
static bool takes(const input *in, const tr_stage_info *info) {
  return ((in->what & TR_BATCH_INPUTS) && info->is_first) ||
         ((in->what & TR_BATCH_TARGETS) && info->is_last);
}

/* A batch's samples made on this device, into x and y (either may be NULL), the job's data
 * copied here first. */
static int generate(tr_actor *self, stage_actor *a, const tr__lent *e, void *x, void *y) {
  if (!a->gen) {
    char err[512];
    int rc = tr_data_gen_open(&a->gen, a->run->c.data, a->dev, err, sizeof err);
    if (rc) return tr_actor_fail(self, rc, "%s", err);
  }
  if ((x || y) && tr_data_gen_fill(a->gen, a->s, e->first, (size_t)e->count, x, y))
    return fail_device(self, a, "generating a batch");
  return DONE;
}

/* The micro-batch's samples from each batch edge it takes into the slot. */
static int take_inputs(tr_actor *self, stage_actor *a, const tr_action *act) {
  chunk *c = &a->ch[act->chunk];
  const tr_stage_info *info = c->info;
  for (int i = 0; i < a->nin; i++) {
    input *in = &a->in[i];
    if (!takes(in, info)) continue;
    const tr__lent *e = tr__queue_peek(&in->q);
    if ((!a->worker && e->step != a->step) || e->mb != act->mb)
      return out_of_order(self, a, "a batch", e, act);
    a->batch_step = e->step;
    const bool inputs = (in->what & TR_BATCH_INPUTS) && info->is_first;
    const bool targets = (in->what & TR_BATCH_TARGETS) && info->is_last;
    if (inputs) c->slot_first[act->slot] = e->first;
    if (e->generate) {
      int rc = generate(self, a, e, inputs ? tr_stage_input(c->st, act->slot) : NULL,
                        targets ? tr_stage_target(c->st, act->slot) : NULL);
      if (rc != DONE) return rc;
    } else {
      if (inputs &&
          tr_memcpy(a->s, tr_stage_input(c->st, act->slot), e->x, info->input_bytes, TR_COPY_H2D))
        return fail_device(self, a, "copying a batch in");
      if (targets &&
          tr_memcpy(a->s, tr_stage_target(c->st, act->slot), e->y, info->target_bytes, TR_COPY_H2D))
        return fail_device(self, a, "copying targets in");
    }
    if (tr__returns_after(&a->returns, a->s, in->edge))
      return fail_device(self, a, "copying a batch in");
    tr__queue_pop(&in->q);
  }
  return DONE;
}

static int forward(tr_actor *self, stage_actor *a, const tr_action *act) {
  chunk *c = &a->ch[act->chunk];
  for (int i = 0; i < a->nin; i++) /* its range opens only once it can run */
    if (takes(&a->in[i], c->info) && tr__queue_peek(&a->in[i].q) == NULL) return BLOCKED;
  uint64_t t0 = tr__busy_start(&a->busy, self, a->step, "forward", act->mb);
  int rc = take_inputs(self, a, act);
  if (rc != DONE) return rc;
  /* random layers draw each sample's mask from its place in the data set */
  tr_stage_set_samples(c->st, act->slot, c->slot_first[act->slot]);
  if (tr_stage_forward(c->st, act->slot)) return fail_device(self, a, "forward");
  if (c->info->is_last && tr__loss_ring_copy(&a->ring, a->s, a->step, act->mb,
                                              tr_stage_loss(c->st, act->slot),
                                              a->worker ? a->batch_step : a->step))
    return fail_device(self, a, "copying the loss out");
  busy(a, "forward", t0, act->mb);
  return DONE;
}

/* The backward, or one of its halves: B (which the gradient's send follows) and W (whose
 * weight gradients the replica group's hook reduces). */
static int backward(tr_actor *self, stage_actor *a, const tr_action *act) {
  chunk *c = &a->ch[act->chunk];
  const bool weights = act->kind != TR_ACTION_BACKWARD_INPUT;
  /* The input gradient lands in one of two buffers: the one sent two backwards ago must
   * have been copied out (its credit back) first. */
  if (act->kind != TR_ACTION_BACKWARD_WEIGHT && !c->info->is_first && !a->grad_credit) {
    if (!tr_edge_acquire(a->grad_out)) return BLOCKED;
    a->grad_credit = true;
  }
  const char *what = act->kind == TR_ACTION_BACKWARD         ? "backward"
                     : act->kind == TR_ACTION_BACKWARD_INPUT ? "backward input"
                                                             : "backward weight";
  uint64_t t0 = tr__busy_start(&a->busy, self, a->step, what, act->mb);
  /* buckets go out as the layers of the last micro-batch finish */
  const bool last = a->group && weights && act->mb == a->m - 1;
  if (last) tr__group_arm(a->group, a->step);
  const int rc = act->kind == TR_ACTION_BACKWARD ? tr_stage_backward(c->st, act->slot, &a->dinput)
                 : weights ? tr_stage_backward_weight(c->st, act->slot)
                           : tr_stage_backward_input(c->st, act->slot, &a->dinput);
  if (rc) return fail_device(self, a, what);
  if (last) {
    int grc = tr__group_disarm(a->group);
    if (grc) return grc;
  }
  busy(a, what, t0, act->mb);
  return DONE;
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Step `step` diverged, named (on_nonfinite TR_NONFINITE_STOP). */
static int not_finite(tr_actor *self, stage_actor *a, int64_t step, const char *what,
                      double value) {
  return tr_actor_fail(self, TR_ENONFINITE, "step %lld, stage %d of replica %d on %s: %s is "
                       "%s: the run diverged (on_nonfinite skip goes on without such updates)",
                       (long long)step, a->stage, a->replica, tr_device_name(a->dev), what,
                       tr__nonfinite_name(value));
}

/* Gives back the credits whose copies have run, and reads the losses that have landed
 * (`room`: waiting for the oldest if the next step would overwrite it). */
static int harvest(tr_actor *self, stage_actor *a, bool room) {
  if (tr__returns_drain(&a->returns)) return fail_device(self, a, "returning credits");
  int rc = a->ring.dev ? tr__loss_ring_read(&a->ring, &a->losses, a->step, room) : 0;
  if (rc == 0 && a->ring.dev && a->losses.n == TR__LOSS_CHUNK && /* full: send, read on */
      tr__loss_log_flush(&a->losses, true))
    rc = tr__loss_ring_read(&a->ring, &a->losses, a->step, false);
  if (rc) return rc == TR_EDEVICE ? fail_device(self, a, "reading a loss") : rc;
  const tr__loss_log *l = &a->losses;
  if (l->nonfinite && a->run->c.on_nonfinite != TR_NONFINITE_SKIP)
    return not_finite(self, a, l->nonfinite_step, "the loss", l->nonfinite_loss);
  return 0;
}

/* Replica 0 sends the checkpoint its parameters and optimizer state; sharded, every replica
 * sends its shard of the state (the coordinator puts them together). */
static bool sends_parts(const stage_actor *a) {
  return a->run->c.checkpoint.path && !a->worker && (a->replica == 0 || sharded(a));
}

/* This stage's parts of the checkpoint of `step`, a chunk's each, as credits of the report
 * edge come free. */
static int send_parts(tr_actor *self, stage_actor *a, int64_t step) {
  for (; a->parts_sent < a->nch; a->parts_sent++) {
    if (!tr_edge_acquire(a->report)) return BLOCKED;
    tr__part_msg *p = tr_msg_new(&tr__part_type);
    p->source = a->index;
    p->stage = a->parts_sent * a->run->c.layout.stages + a->stage;
    p->step = step;
    a->cur = a->parts_sent;
    const tr_stage_info *info = a->ch[a->cur].info;
    const int rc = tr__stage_snapshot(a->ch[a->cur].st, &p->part, a->replica == 0);
    if (rc) {
      tr_msg_free(p);
      tr_edge_release(a->report, 1);
      if (rc == TR_ENOMEM)
        return tr_actor_fail(self, rc, "copying the stage for a checkpoint: out of memory (%zu "
                             "bytes asked for)", (info->numel + info->state_numel) * sizeof(float));
      return fail_device(self, a, "copying the stage for a checkpoint");
    }
    tr_edge_send(a->report, p);
  }
  a->parts_sent = 0;
  return DONE;
}

static int update(tr_actor *self, stage_actor *a) {
  if (a->step_phase == STEP_REDUCE) {
    if (a->group) {
      int rc = tr__group_wait(a->group, a->step, a->s);
      if (rc != DONE) return rc;
    }
    a->step_phase = STEP_CLIP;
  }
  if (a->step_phase == STEP_CLIP) {
    const float *sumsq = NULL;
    double norm2 = 0;
    int rc = tr__clip_global(a->clip, a->step, &sumsq, &norm2);
    if (rc != DONE) return rc;
    if (!isfinite(norm2)) { /* the same number on every stage and replica: none updates */
      if (a->run->c.on_nonfinite != TR_NONFINITE_SKIP)
        return not_finite(self, a, a->worker ? a->batch_step : a->step, "the gradient norm",
                          sqrt(norm2));
      a->skipped++;
      for (a->cur = 0; a->cur < a->nch; a->cur++)
        if (tr_stage_zero_grads(a->ch[a->cur].st)) return fail_device(self, a, "zeroing gradients");
      a->cur = 0;
      return DONE;
    }
    uint64_t t0 = tr__busy_start(&a->busy, self, a->step, "update", -1); /* its range opens */
    for (a->cur = 0; a->cur < a->nch; a->cur++)
      if (tr_stage_step(a->ch[a->cur].st, sumsq) || tr_stage_zero_grads(a->ch[a->cur].st))
        return fail_device(self, a, "optimizer step");
    a->cur = 0;
    rc = a->group ? tr__group_gather(a->group, a->step) : 0; /* sharded: the shard out */
    busy(a, "update", t0, -1);
    if (rc) return rc;
    a->step_phase = STEP_GATHER;
  }
  return a->group ? tr__group_gathered(a->group, a->step, a->s) : DONE;
}

/* The step is over: figures, losses; then the checkpoint part when one is due. */
static int step_over(tr_actor *self, stage_actor *a) {
  if (a->ring.dev) tr__loss_ring_ended(&a->ring, a->step);
  a->step++;
  if (a->step == a->busy.warm_step) {
    /* The window opens once the warm-up steps have really run. */
    if (tr_stream_synchronize(a->s)) return fail_device(self, a, "warming up");
    tr__busy_open_window(&a->busy, a->step);
  }
  int rc = harvest(self, a, true);
  if (rc) return rc;
  tr__loss_log_flush(&a->losses, false);
  return 0;
}

static int step_action(tr_actor *self, stage_actor *a) {
  if (a->step_phase != STEP_SAVE) {
    int rc = a->worker ? tr__worker_step(a->worker, a->step, a->batch_step, &a->busy)
                       : update(self, a);
    if (rc != DONE) return rc;
    if ((rc = step_over(self, a))) return rc;
    a->step_phase = STEP_SAVE;
  }
  const tr_job_config *c = &a->run->c;
  const int64_t every = c->checkpoint.every;
  if (sends_parts(a) && every > 0 && a->step % every == 0 &&
      a->step < tr_graph_end_step(a->run->g)) {
    int rc = send_parts(self, a, a->step);
    if (rc != DONE) return rc;
  }
  a->step_phase = STEP_REDUCE;
  a->pc = 0;
  return DONE;
}

/* ---- the end ------------------------------------------------------------------------------- */

/* What the stage's chunks allocated: parameters, gradients, optimizer state (a shard's). */
static tr_memory_figures memory_figures(const stage_actor *a) {
  tr_memory_figures m = {0};
  for (int c = 0; c < a->nch; c++) {
    const tr_stage_info *info = a->ch[c].info;
    m.params += (int64_t)(info->numel * sizeof(float));
    m.grads += (int64_t)(info->numel * sizeof(float));
    m.optimizer_state += (int64_t)(info->state_numel * sizeof(float));
  }
  return m;
}

static int send_figures(tr_actor *self, stage_actor *a) {
  if (!tr_edge_acquire(a->report)) return BLOCKED;
  tr__done_msg *msg = tr_msg_new(&tr__done_type);
  msg->source = a->index;
  tr__report *d = &msg->report;
  *d = (tr__report){.replica = a->replica,
                    .stage = a->stage,
                    .steps = a->step,
                    .window_end = a->window_end,
                    .peak_microbatches = a->peak,
                    .peak_activation_bytes = a->peak_bytes,
                    .skipped = a->skipped,
                    .memory = memory_figures(a)};
  snprintf(d->device, sizeof d->device, "%s", tr_device_name(a->dev));
  for (int c = 0; c < a->nch; c++) {
    const tr_stage_graphs_figures g = tr_stage_graphs(a->ch[c].st);
    d->graph_captures += g.captures;
    d->graph_launches += g.launches;
    if (!d->graphs_note[0] && g.note[0]) snprintf(d->graphs_note, sizeof d->graphs_note, "%s", g.note);
  }
  const int64_t first = a->worker ? 0 : tr_graph_first_step(a->run->g);
  tr__busy_window(&a->busy, a->step, first, &d->window_start, &d->busy_ns, &d->window_steps);
  if (a->group) { /* one chunk (tr_job_new) */
    const size_t numel = a->ch[0].info->numel;
    float *host = malloc((numel ? numel : 1) * sizeof *host);
    if (host == NULL || tr_stage_download(a->ch[0].st, TR_STAGE_PARAMS, host) ||
        tr_stream_synchronize(a->s)) {
      tr_msg_free(msg);
      tr_edge_release(a->report, 1);
      if (host == NULL)
        return tr_actor_fail(self, TR_ENOMEM, "copying the parameters for the consistency "
                             "check: out of memory (%zu bytes asked for)",
                             numel * sizeof *host);
      free(host);
      return fail_device(self, a, "copying the parameters for the consistency check");
    }
    d->params = host; /* the coordinator frees it */
    d->numel = numel;
  }
  tr_edge_send(a->report, msg);
  return DONE;
}

static int finish(tr_actor *self, stage_actor *a) {
  int rc = DONE;
  if (a->end_phase == END_DEVICE) {
    if (tr_stream_synchronize(a->s) || (a->group && tr__group_sync(a->group)))
      return fail_device(self, a, "finishing the run");
    a->window_end = tr_now_ns();
    if ((rc = harvest(self, a, false))) return rc;
    a->end_phase = END_LOSSES;
  }
  if (a->end_phase == END_LOSSES) { /* every loss read and sent, a chunk at a time */
    do {
      if (!tr__loss_log_flush(&a->losses, true)) return 0; /* a credit brings it back */
      if ((rc = harvest(self, a, false))) return rc;
    } while (a->losses.n > 0);
    a->end_phase = END_PART;
  }
  if (a->end_phase == END_PART) {
    if (sends_parts(a) && (rc = send_parts(self, a, a->step)) != DONE)
      return rc;
    a->end_phase = END_FIGURES;
  }
  if (a->end_phase == END_FIGURES) {
    if ((rc = send_figures(self, a)) != DONE) return rc;
    a->end_phase = END_LEAVE;
  }
  if (a->worker && (rc = tr__worker_leave(a->worker)) != DONE) return rc;
  a->done = true;
  tr_graph_done(a->run->g, self);
  return 0;
}

/* Runs the action list as far as the messages that have come allow. */
static int run_actions(tr_actor *self, stage_actor *a) {
  while (!a->done) {
    if (a->finishing) {
      int rc = finish(self, a);
      return rc < 0 ? rc : 0;
    }
    if (a->pc == 0 && a->step_phase == STEP_REDUCE) {
      /* The step's losses need their places in the ring: its oldest read first (they wait
       * on the device, or on a credit to send the losses read before them). */
      if (a->ring.dev && !tr__loss_ring_free(&a->ring, a->step)) {
        int rc = harvest(self, a, false);
        if (rc) return rc;
        if (!tr__loss_ring_free(&a->ring, a->step)) break;
      }
      if (a->worker) { /* asynchronous: until the loader has no more */
        const tr__lent *x = tr__queue_peek(&a->in[0].q);
        if (x == NULL) break;
        /* step -1: the loader is done; after an early end, batches taken but not started
         * are dropped, so a stop waits for one push at most. Their credits go back. */
        if (x->step < 0 || a->ended) {
          a->finishing = x->step < 0;
          tr_edge_release(a->in[0].edge, 1);
          tr__queue_pop(&a->in[0].q);
          continue;
        }
        int rc = tr__worker_begin(a->worker);
        if (rc != DONE) return rc < 0 ? rc : 0;
      } else {
        /* the first stage claims each step as it starts it; -1: the ranks are agreeing on
         * the end, which a tr_graph_end_msg brings */
        const int claim = a->stage == 0 ? tr_graph_claim_step(a->run->g, a->step)
                                        : a->step < tr_graph_end_step(a->run->g);
        if (claim < 0) break;
        if (claim == 0) {
          a->finishing = true;
          continue;
        }
      }
    }
    const tr_action *act = &a->acts[a->pc];
    chunk *c = &a->ch[act->chunk];
    const tr_stage_info *info = c->info;
    a->cur = act->chunk;
    a->busy.stage = act->chunk * a->run->c.layout.stages + a->stage; /* its virtual stage */
    int rc;
    switch (act->kind) {
      case TR_ACTION_RECV_ACT:
        rc = receive_tensor(self, a, &a->actq, a->act_in, tr_stage_input(c->st, act->slot), act);
        break;
      case TR_ACTION_FORWARD: rc = forward(self, a, act); break;
      case TR_ACTION_SEND_ACT:
        if (!tr_edge_acquire(a->act_out)) {
          rc = BLOCKED;
          break;
        }
        rc = send_tensor(a, a->act_out, &a->act_host, &a->act_w, &tr_activation_type,
                         tr_stage_output(c->st, act->slot), info->output_bytes,
                         c->act_ev[act->slot], act);
        break;
      case TR_ACTION_RECV_GRAD:
        rc = receive_tensor(self, a, &a->gradq, a->grad_in, tr_stage_dout(c->st, act->slot), act);
        break;
      case TR_ACTION_BACKWARD:
      case TR_ACTION_BACKWARD_INPUT:
      case TR_ACTION_BACKWARD_WEIGHT: rc = backward(self, a, act); break;
      case TR_ACTION_SEND_GRAD:
        TR_ASSERT(a->grad_credit);
        a->grad_credit = false;
        rc = send_tensor(a, a->grad_out, &a->grad_host, &a->grad_w, &tr_gradient_type, a->dinput,
                         info->input_bytes,
                         a->grad_ev[a->grad_parity], act);
        a->grad_parity ^= 1;
        break;
      case TR_ACTION_STEP:
        rc = step_action(self, a);
        if (rc == DONE) continue; /* pc is 0 again */
        break;
      default: TR_ASSERT(!"an action kind the stage does not know");
    }
    if (rc < 0) return rc;
    if (rc == BLOCKED) break;
    if (a->holds[a->pc]) hold(a, act, a->holds[a->pc]);
    a->pc++;
  }
  return 0;
}

static void poll_later(tr_actor *self, stage_actor *a) {
  /* a full log waits for its credit's message, not for polls */
  const bool waiting = tr__returns_owed(&a->returns) || (a->clip && tr__clip_waiting(a->clip)) ||
                       (a->ring.dev && a->ring.read < a->step &&
                        a->losses.n < TR__LOSS_CHUNK);
  if (!waiting || a->polling || a->done) return;
  a->polling = true;
  tr_actor_send(self, tr_msg_new(&tr__poll_type));
}

static int stage_receive(tr_actor *self, tr_msg *msg) {
  stage_actor *a = tr_actor_state(self);
  if (a->done) return 0;
  const tr_msgtype *t = msg->type;
  int rc = 0;
  if (t == &tr_batch_type) rc = take_batch(self, a, (const tr_batch_msg *)msg);
  else if (t == &tr_activation_type) rc = take_tensor(self, a, (const tr_tensor_msg *)msg, true);
  else if (t == &tr_gradient_type) rc = take_tensor(self, a, (const tr_tensor_msg *)msg, false);
  else if (t == &tr__bucket_type || t == &tr__summed_type) rc = tr__group_receive(a->group, msg);
  else if (t == &tr__norm_type) rc = tr__clip_receive(a->clip, (const tr__norm_msg *)msg);
  else if (t == &tr__reply_type) tr__worker_receive(a->worker, (const tr__reply_msg *)msg);
  else if (t == &tr__poll_type) {
    a->polling = false;
    rc = harvest(self, a, false);
  } else if (t == &tr_graph_end_type) {
    a->ended = true;
  }
  /* tr_edge_credit_msg and tr_graph_end_msg only say "look again". */
  if (rc == 0) rc = run_actions(self, a);
  if (rc == 0) poll_later(self, a);
  return rc;
}

/* Device resources go back on the device's own thread. */
static void stage_stop(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  wire *wires[] = {&a->act_w, &a->grad_w, &a->act_in_w, &a->grad_in_w};
  if (!a->done) { /* a failed run: a peer's operation may never come, and the streams wait */
    for (int i = 0; i < 4; i++) close_wire(a, wires[i], true);
    tr__group_abort(a->group);
  }
  if (a->s) tr_stream_synchronize(a->s);
  for (int i = 0; i < 4; i++) close_wire(a, wires[i], false);
  tr__group_close(a->group);
  tr__clip_close(a->clip);
  tr__worker_close(a->worker);
  tr__returns_close(&a->returns);
  for (int c = 0; c < a->nch; c++)
    for (int i = 0; a->ch[c].info && i < a->ch[c].info->slots && a->ch[c].act_ev; i++)
      if (a->ch[c].act_ev[i]) tr_event_close(a->ch[c].act_ev[i]);
  for (int i = 0; i < 2; i++)
    if (a->grad_ev[i]) tr_event_close(a->grad_ev[i]);
  tr__loss_ring_close(&a->ring);
  tr_data_gen_close(a->gen);
  a->gen = NULL;
  if (a->act_host.buf) tr_host_free(a->dev, a->act_host.buf);
  if (a->grad_host.buf) tr_host_free(a->dev, a->grad_host.buf);
  a->act_host.buf = a->grad_host.buf = NULL;
  for (int c = 0; c < a->nch; c++) {
    tr_stage_close(a->ch[c].st);
    a->ch[c].st = NULL;
    a->ch[c].info = NULL;
  }
}

static int stage_start(tr_actor *self) {
  int rc = stage_open(self);
  if (rc) stage_stop(self); /* a failed start gets no stop callback: release what it got */
  else rc = run_actions(self, tr_actor_state(self)); /* a run may be over before it starts */
  return rc;
}

static void stage_destroy(void *state) {
  stage_actor *a = state;
  /* never started (the build failed): the other end may never come */
  const wire *wires[] = {&a->act_w, &a->grad_w, &a->act_in_w, &a->grad_in_w};
  for (int i = 0; i < 4; i++) tr_comm_abort(wires[i]->comm);
  for (int i = 0; i < a->nin; i++) tr__queue_free(&a->in[i].q);
  tr__queue_free(&a->actq);
  tr__queue_free(&a->gradq);
  tr__returns_free(&a->returns);
  for (int c = 0; c < a->nch; c++) {
    free(a->ch[c].act_ev);
    free(a->ch[c].slot_first);
  }
  free(a->ch);
  free(a->holds);
  tr__group_free(a->group);
  tr__clip_free(a->clip);
  tr__worker_free(a->worker);
  tr__loss_log_free(&a->losses);
  free(a);
}

const tr_behaviour tr__stage_behaviour = {.name = "stage",
                                          .start = stage_start,
                                          .receive = stage_receive,
                                          .stop = stage_stop,
                                          .destroy = stage_destroy};
