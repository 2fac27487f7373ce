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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clipnorm.h"
#include "group.h"
#include "inbox.h"
#include "losses.h"
#include "metrics.h"
#include "worker.h"

enum { BLOCKED = 0, DONE = 1 };
/* Where the step action is: the sums of the replica group, the norm exchange, the update
 * done and a checkpoint part to send. */
enum { STEP_REDUCE, STEP_CLIP, STEP_SAVE };
/* Where the end is. */
enum { END_DEVICE, END_LOSSES, END_PART, END_FIGURES, END_LEAVE };

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
  tr_stage *st;
  const tr_stage_info *info;
  tr_stream *s;
  int m;
  const tr_action *acts;
  size_t nacts, pc;
  int64_t step;

  input in[2];
  int nin;
  tr_edge *act_out, *act_in, *grad_out, *grad_in;
  tr__queue actq, gradq;
  tr_event **act_ev; /* [slot] */
  tr_event *grad_ev[2];
  int grad_parity;
  bool grad_credit;
  const float *dinput;
  uint64_t *slot_first; /* [slot]: the first sample of the micro-batch in it */
  tr__returns returns;   /* credits owed once the copies out of lent buffers have run */

  tr__group *group;
  tr__clip *clip;
  tr__worker *worker;
  tr_edge *report;
  int step_phase, end_phase;
  int64_t batch_step; /* the run's step of the batch in hand (a worker's differs from step) */

  /* losses (last stage): the device → ring → log → the coordinator */
  tr__loss_ring ring;
  tr__loss_log losses;

  tr__busy busy;
  int live, peak;
  uint64_t window_end;
  bool finishing, done, polling;
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
  a->group = tr__group_new(n, me, out, in, devs);
  return a->group ? 0 : TR_ENOMEM;
}

int tr__stage_set_clip(void *state, tr_edge *const *out, tr_edge *const *in) {
  stage_actor *a = state;
  a->clip = tr__clip_new(a->run->c.layout.stages, a->stage, out, in);
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

static int fail_device(tr_actor *self, stage_actor *a, const char *what) {
  const char *why = a->st ? tr_stage_error(a->st) : tr_device_error(a->dev);
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
static int open_queues(stage_actor *a) {
  int owed = 0, rc = 0;
  for (int i = 0; i < a->nin; i++) {
    rc |= tr__queue_open(&a->in[i].q, tr_edge_credits(a->in[i].edge));
    owed += tr_edge_credits(a->in[i].edge);
  }
  if (a->act_in) rc |= tr__queue_open(&a->actq, tr_edge_credits(a->act_in)), owed += tr_edge_credits(a->act_in);
  if (a->grad_in) rc |= tr__queue_open(&a->gradq, tr_edge_credits(a->grad_in)), owed += tr_edge_credits(a->grad_in);
  a->act_ev = calloc((size_t)a->info->slots, sizeof *a->act_ev);
  a->slot_first = calloc((size_t)a->info->slots, sizeof *a->slot_first);
  if (rc || !a->act_ev || !a->slot_first) return TR_ENOMEM;
  if ((rc = tr__returns_open(&a->returns, a->dev, owed)))
    return rc == TR_EDEVICE ? fail_device(a->self, a, "opening events") : rc;
  if (a->act_out && (rc = open_events(a, a->act_ev, a->info->slots))) return rc;
  if (a->grad_out && (rc = open_events(a, a->grad_ev, 2))) return rc;
  return 0;
}

static int check_wiring(tr_actor *self, stage_actor *a) {
  const tr_stage_info *info = a->info;
  unsigned what = 0;
  for (int i = 0; i < a->nin; i++) what |= a->in[i].what;
  const char *missing = !a->report                                 ? "a coordinator (tr_job_add_coordinator)"
                        : info->is_first && !(what & TR_BATCH_INPUTS)    ? "an edge of inputs"
                        : info->is_last && !(what & TR_BATCH_TARGETS)    ? "an edge of targets"
                        : !info->is_first && !a->act_in                  ? "activations from stage s-1"
                        : !info->is_last && !a->act_out                  ? "a chain to stage s+1"
                        : a->run->c.async.enabled && !a->worker          ? "a server (tr_job_serve)"
                                                                         : NULL;
  if (missing)
    return tr_actor_fail(self, TR_EINVAL, "stage %d of replica %d is not wired: it lacks %s",
                         a->stage, a->replica, missing);
  return 0;
}

static int stage_open(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  const tr__run *run = a->run;
  const tr_job_config *c = &run->c;
  a->self = self;
  if (tr_device_bind(a->dev)) return fail_device(self, a, "binding the device");
  tr_stage_config sc = {.first = run->cuts[a->stage],
                        .end = run->cuts[a->stage + 1],
                        .batch = run->mb_batch,
                        .slots = tr_schedule_slots(run->sc, a->stage),
                        .global_batch = c->global_batch,
                        .seed = c->seed,
                        .optim = c->optim,
                        .precision = c->precision};
  if (tr_stage_open(&a->st, c->model, a->dev, &sc, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EDEVICE, "opening the stage on %s: %s",
                         tr_device_name(a->dev), a->err);
  a->info = tr_stage_get_info(a->st);
  a->s = tr_stage_stream(a->st);
  a->acts = tr_schedule_actions(run->sc, a->stage, &a->nacts);
  int rc = check_wiring(self, a);
  if (rc) return rc;
  if (c->checkpoint.resume && tr__stage_load(a->st, c->checkpoint.resume, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EFORMAT, "%s", a->err);
  if (tr_stage_zero_grads(a->st)) return fail_device(self, a, "zeroing gradients");
  if ((rc = open_queues(a))) return rc;
  tr_graph *g = run->g;
  a->step = a->worker ? 0 : tr_graph_first_step(g);
  if (a->info->is_last && tr__loss_ring_open(&a->ring, a->dev, a->m, a->step))
    return fail_device(self, a, "allocating the loss ring");
  if (a->group) {
    if ((rc = tr__group_open(a->group, self, a->st, &a->busy))) return rc;
    tr_stage_on_grad_ready(a->st, tr__group_grad_ready, a->group);
  }
  if (a->clip && (rc = tr__clip_open(a->clip, self, a->st))) return rc;
  if (a->worker && (rc = tr__worker_open(a->worker, self, a->st))) return rc;

  /* an asynchronous worker pushes about its share of the steps */
  const int64_t end = tr_graph_end_step(g);
  a->busy = tr__busy_begin(a->step, end == INT64_MAX ? INT64_MAX
                                                     : (end - tr_graph_first_step(g)) /
                                                           (a->worker ? c->layout.replicas : 1));
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
  if (b->step >= 0) {
    const bool want_x = in->what & TR_BATCH_INPUTS, want_y = in->what & TR_BATCH_TARGETS;
    if (b->count != a->run->mb_batch || (want_x && !b->x) || (want_y && a->info->is_last && !b->y))
      return tr_actor_fail(self, TR_EINVAL, "a batch from '%s' of %d samples%s%s: this stage "
                           "takes micro-batches of %d samples with %s", from, b->count,
                           b->x ? "" : ", no inputs", b->y ? "" : ", no targets",
                           a->run->mb_batch, want_x && want_y ? "inputs and targets"
                                             : want_x ? "inputs" : "targets");
  }
  tr__queue_push(&in->q, (tr__lent){.step = b->step, .mb = b->mb, .count = b->count,
                                    .first = b->first, .x = b->x, .y = b->y});
  return 0;
}

static int take_tensor(tr_actor *self, stage_actor *a, const tr_tensor_msg *t, bool act) {
  const size_t want = act ? a->info->input_bytes : a->info->output_bytes;
  if (t->bytes != want)
    return tr_actor_fail(self, TR_EINVAL, "%s of %zu bytes from '%s': this stage takes %zu",
                         act ? "an activation" : "a gradient", t->bytes,
                         tr_actor_name(t->hdr.from), want);
  tr__queue_push(act ? &a->actq : &a->gradq,
                 (tr__lent){.step = t->step, .mb = t->mb, .first = t->first, .data = t->data,
                            .bytes = t->bytes, .ready = t->ready, .dev = t->dev});
  return 0;
}

/* ---- the actions -------------------------------------------------------------------------- */

static void slow_down(stage_actor *a) {
  const tr__test_hooks *h = &a->run->hooks;
  if (h->slow_us > 0 && a->index == h->slow_device) usleep((useconds_t)h->slow_us);
}

static void hold(stage_actor *a, int delta) {
  a->live += delta;
  if (a->live > a->peak) a->peak = a->live;
}

static int out_of_order(tr_actor *self, stage_actor *a, const char *what, const tr__lent *e,
                        const tr_action *act) {
  return tr_actor_fail(self, TR_EINVAL, "%s of step %lld, micro-batch %d came where the "
                       "schedule has step %lld, micro-batch %d: producers send in schedule order",
                       what, (long long)e->step, e->mb, (long long)a->step, act->mb);
}

/* A tensor from a neighbour into this stage's `dst`, then its credit goes back. */
static int receive_tensor(tr_actor *self, stage_actor *a, tr__queue *q, tr_edge *e, void *dst,
                          const tr_action *act) {
  const tr__lent *in = tr__queue_peek(q);
  if (in == NULL) return BLOCKED;
  if (in->step != a->step || in->mb != act->mb) return out_of_order(self, a, "a tensor", in, act);
  uint64_t t0 = tr_now_ns();
  if (tr_stream_wait_event(a->s, in->ready) ||
      tr_memcpy_peer(a->s, dst, a->dev, in->data, in->dev, in->bytes) ||
      tr__returns_after(&a->returns, a->s, e))
    return fail_device(self, a, "receiving a tensor");
  if (act->kind == TR_ACTION_RECV_ACT) a->slot_first[act->slot] = in->first;
  tr__queue_pop(q);
  busy(a, act->kind == TR_ACTION_RECV_ACT ? "recv act" : "recv grad", t0, act->mb);
  return DONE;
}

static int send_tensor(stage_actor *a, tr_edge *e, const tr_msgtype *type, const void *data,
                       size_t bytes, tr_event *ev, const tr_action *act) {
  if (tr_event_record(ev, a->s)) return fail_device(a->self, a, "sending a tensor");
  tr_tensor_msg *t = tr_msg_new(type);
  t->step = a->step;
  t->mb = act->mb;
  t->first = a->slot_first[act->slot];
  t->data = data;
  t->bytes = bytes;
  t->ready = ev;
  t->dev = a->dev;
  tr_edge_send(e, t);
  return DONE;
}

/* The micro-batch's samples from each batch edge into the slot. */
static int take_inputs(tr_actor *self, stage_actor *a, const tr_action *act) {
  const tr_stage_info *info = a->info;
  for (int i = 0; i < a->nin; i++)
    if (tr__queue_peek(&a->in[i].q) == NULL) return BLOCKED;
  for (int i = 0; i < a->nin; i++) {
    input *in = &a->in[i];
    const tr__lent *e = tr__queue_peek(&in->q);
    if ((!a->worker && e->step != a->step) || e->mb != act->mb)
      return out_of_order(self, a, "a batch", e, act);
    a->batch_step = e->step;
    if ((in->what & TR_BATCH_INPUTS) && info->is_first) {
      a->slot_first[act->slot] = e->first;
      if (tr_memcpy(a->s, tr_stage_input(a->st, act->slot), e->x, info->input_bytes, TR_COPY_H2D))
        return fail_device(self, a, "copying a batch in");
    }
    if ((in->what & TR_BATCH_TARGETS) && info->is_last &&
        tr_memcpy(a->s, tr_stage_target(a->st, act->slot), e->y, info->target_bytes, TR_COPY_H2D))
      return fail_device(self, a, "copying targets in");
    if (tr__returns_after(&a->returns, a->s, in->edge))
      return fail_device(self, a, "copying a batch in");
    tr__queue_pop(&in->q);
  }
  if (info->is_first) hold(a, 1);
  return DONE;
}

static int forward(tr_actor *self, stage_actor *a, const tr_action *act) {
  const tr_stage_info *info = a->info;
  uint64_t t0 = tr_now_ns();
  if (a->nin) {
    int rc = take_inputs(self, a, act);
    if (rc != DONE) return rc;
  }
  /* random layers draw each sample's mask from its place in the data set */
  tr_stage_set_samples(a->st, act->slot, a->slot_first[act->slot]);
  if (tr_stage_forward(a->st, act->slot)) return fail_device(self, a, "forward");
  if (info->is_last && tr__loss_ring_copy(&a->ring, a->s, a->step, act->mb,
                                           tr_stage_loss(a->st, act->slot),
                                           a->worker ? a->batch_step : a->step))
    return fail_device(self, a, "copying the loss out");
  slow_down(a);
  busy(a, "forward", t0, act->mb);
  return DONE;
}

static int backward(tr_actor *self, stage_actor *a, const tr_action *act) {
  /* The input gradient lands in one of two buffers: the one sent two backwards ago must
   * have been copied out (its credit back) first. */
  if (a->grad_out && !a->grad_credit) {
    if (!tr_edge_acquire(a->grad_out)) return BLOCKED;
    a->grad_credit = true;
  }
  uint64_t t0 = tr_now_ns();
  const bool last = a->group && act->mb == a->m - 1; /* buckets go out as layers finish */
  if (last) tr__group_arm(a->group, a->step);
  if (tr_stage_backward(a->st, act->slot, &a->dinput)) return fail_device(self, a, "backward");
  if (last) {
    int rc = tr__group_disarm(a->group);
    if (rc) return rc;
  }
  if (a->info->is_first) hold(a, -1);
  slow_down(a);
  busy(a, "backward", t0, act->mb);
  return DONE;
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Gives back the credits whose copies have run, and reads the losses that have landed
 * (`room`: waiting for the oldest if the next step would overwrite it). */
static int harvest(tr_actor *self, stage_actor *a, bool room) {
  if (tr__returns_drain(&a->returns)) return fail_device(self, a, "returning credits");
  const int rc = a->ring.dev ? tr__loss_ring_read(&a->ring, &a->losses, a->step, room) : 0;
  return rc == TR_EDEVICE ? fail_device(self, a, "reading a loss") : rc;
}

/* This stage's part of the checkpoint of `step`, once a credit of the report edge is free. */
static int send_part(tr_actor *self, stage_actor *a, int64_t step) {
  if (!tr_edge_acquire(a->report)) return BLOCKED;
  tr__part_msg *p = tr_msg_new(&tr__part_type);
  p->source = a->index;
  p->stage = a->stage;
  p->step = step;
  if (tr__stage_snapshot(a->st, &p->part)) {
    tr_msg_free(p);
    tr_edge_release(a->report, 1);
    return fail_device(self, a, "copying the stage for a checkpoint");
  }
  tr_edge_send(a->report, p);
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
  const float *sumsq = NULL;
  if (a->clip) {
    int rc = tr__clip_global(a->clip, a->step, &sumsq);
    if (rc != DONE) return rc;
  }
  uint64_t t0 = tr_now_ns();
  if (tr_stage_step(a->st, sumsq) || tr_stage_zero_grads(a->st))
    return fail_device(self, a, "optimizer step");
  busy(a, "update", t0, -1);
  return DONE;
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
  if (c->checkpoint.path && every > 0 && !a->worker && a->replica == 0 && a->step % every == 0 &&
      a->step < tr_graph_end_step(a->run->g)) {
    int rc = send_part(self, a, a->step);
    if (rc != DONE) return rc;
  }
  a->step_phase = STEP_REDUCE;
  a->pc = 0;
  return DONE;
}

/* ---- the end ------------------------------------------------------------------------------- */

static int send_figures(tr_actor *self, stage_actor *a) {
  if (!tr_edge_acquire(a->report)) return BLOCKED;
  tr__done_msg *msg = tr_msg_new(&tr__done_type);
  msg->source = a->index;
  tr__report *d = &msg->report;
  *d = (tr__report){.replica = a->replica,
                    .stage = a->stage,
                    .steps = a->step,
                    .window_start = a->busy.window_start,
                    .window_end = a->window_end,
                    .busy_ns = a->busy.busy_ns,
                    .peak_microbatches = a->peak};
  snprintf(d->device, sizeof d->device, "%s", tr_device_name(a->dev));
  const int64_t first = a->worker ? 0 : tr_graph_first_step(a->run->g);
  d->window_steps = a->step > a->busy.warm_step ? a->step - a->busy.warm_step : a->step - first;
  if (a->group) {
    float *host = malloc((a->info->numel ? a->info->numel : 1) * sizeof *host);
    if (host == NULL || tr_stage_download(a->st, TR_STAGE_PARAMS, host) ||
        tr_stream_synchronize(a->s)) {
      free(host);
      tr_msg_free(msg);
      tr_edge_release(a->report, 1);
      return fail_device(self, a, "copying the parameters for the consistency check");
    }
    d->params = host; /* the coordinator frees it */
    d->numel = a->info->numel;
  }
  tr_edge_send(a->report, msg);
  return DONE;
}

static int finish(tr_actor *self, stage_actor *a) {
  const tr_job_config *c = &a->run->c;
  int rc = DONE;
  if (a->end_phase == END_DEVICE) {
    if (tr_stream_synchronize(a->s) || (a->group && tr__group_sync(a->group)))
      return fail_device(self, a, "finishing the run");
    a->window_end = tr_now_ns();
    if ((rc = harvest(self, a, false))) return rc;
    a->end_phase = END_LOSSES;
  }
  if (a->end_phase == END_LOSSES) {
    if (!tr__loss_log_flush(&a->losses, true)) return 0;
    a->end_phase = END_PART;
  }
  if (a->end_phase == END_PART) {
    if (c->checkpoint.path && !a->worker && a->replica == 0 &&
        (rc = send_part(self, a, a->step)) != DONE)
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
      if (a->worker) { /* asynchronous: until the loader has no more */
        const tr__lent *x = tr__queue_peek(&a->in[0].q);
        if (x == NULL) break;
        if (x->step < 0) { /* its credit goes back; the loader is done */
          tr_edge_release(a->in[0].edge, 1);
          tr__queue_pop(&a->in[0].q);
          a->finishing = true;
          continue;
        }
        int rc = tr__worker_begin(a->worker);
        if (rc != DONE) return rc < 0 ? rc : 0;
      } else if (a->stage == 0 ? !tr_graph_claim_step(a->run->g, a->step)
                               : a->step >= tr_graph_end_step(a->run->g)) {
        a->finishing = true; /* the first stage claims each step as it starts it */
        continue;
      }
    }
    const tr_action *act = &a->acts[a->pc];
    const tr_stage_info *info = a->info;
    int rc;
    switch (act->kind) {
      case TR_ACTION_RECV_ACT:
        rc = receive_tensor(self, a, &a->actq, a->act_in, tr_stage_input(a->st, act->slot), act);
        if (rc == DONE) hold(a, 1);
        break;
      case TR_ACTION_FORWARD: rc = forward(self, a, act); break;
      case TR_ACTION_SEND_ACT:
        if (!tr_edge_acquire(a->act_out)) {
          rc = BLOCKED;
          break;
        }
        rc = send_tensor(a, a->act_out, &tr_activation_type, tr_stage_output(a->st, act->slot),
                         info->output_bytes, a->act_ev[act->slot], act);
        break;
      case TR_ACTION_RECV_GRAD:
        rc = receive_tensor(self, a, &a->gradq, a->grad_in, tr_stage_dout(a->st, act->slot), act);
        break;
      case TR_ACTION_BACKWARD: rc = backward(self, a, act); break;
      case TR_ACTION_SEND_GRAD:
        TR_ASSERT(a->grad_credit);
        a->grad_credit = false;
        rc = send_tensor(a, a->grad_out, &tr_gradient_type, a->dinput, info->input_bytes,
                         a->grad_ev[a->grad_parity], act);
        a->grad_parity ^= 1;
        if (rc == DONE) hold(a, -1);
        break;
      case TR_ACTION_STEP:
        rc = step_action(self, a);
        if (rc == DONE) continue; /* pc is 0 again */
        break;
      default: TR_ASSERT(!"an action kind the stage does not know");
    }
    if (rc < 0) return rc;
    if (rc == BLOCKED) break;
    a->pc++;
  }
  return 0;
}

static void poll_later(tr_actor *self, stage_actor *a) {
  const bool waiting = tr__returns_owed(&a->returns) || (a->clip && tr__clip_waiting(a->clip)) ||
                       (a->ring.dev && a->ring.read < a->step);
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
  else if (t == &tr__bucket_type) rc = tr__group_receive(a->group, (const tr__bucket_msg *)msg);
  else if (t == &tr__norm_type) rc = tr__clip_receive(a->clip, (const tr__norm_msg *)msg);
  else if (t == &tr__reply_type) tr__worker_receive(a->worker, (const tr__reply_msg *)msg);
  else if (t == &tr__poll_type) {
    a->polling = false;
    rc = harvest(self, a, false);
  }
  /* tr_edge_credit_msg and tr_graph_end_msg only say "look again". */
  if (rc == 0) rc = run_actions(self, a);
  if (rc == 0) poll_later(self, a);
  return rc;
}

/* Device resources go back on the device's own thread. */
static void stage_stop(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  if (a->s) tr_stream_synchronize(a->s);
  tr__group_close(a->group);
  tr__clip_close(a->clip);
  tr__worker_close(a->worker);
  tr__returns_close(&a->returns);
  for (int i = 0; a->info && i < a->info->slots && a->act_ev; i++)
    if (a->act_ev[i]) tr_event_close(a->act_ev[i]);
  for (int i = 0; i < 2; i++)
    if (a->grad_ev[i]) tr_event_close(a->grad_ev[i]);
  tr__loss_ring_close(&a->ring);
  tr_stage_close(a->st);
  a->st = NULL;
  a->info = NULL;
}

static int stage_start(tr_actor *self) {
  int rc = stage_open(self);
  if (rc) stage_stop(self); /* a failed start gets no stop callback: release what it got */
  else rc = run_actions(self, tr_actor_state(self)); /* a run may be over before it starts */
  return rc;
}

static void stage_destroy(void *state) {
  stage_actor *a = state;
  for (int i = 0; i < a->nin; i++) tr__queue_free(&a->in[i].q);
  tr__queue_free(&a->actq);
  tr__queue_free(&a->gradq);
  tr__returns_free(&a->returns);
  free(a->act_ev);
  free(a->slot_first);
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
