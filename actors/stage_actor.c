/* stage_actor.c — the stage runner: one device, layers [cuts[s], cuts[s+1]) of the model
 * (a chunk of them each, interleaved), and every step the action list its schedule gives it
 * (tr_schedule.h). It interprets the actions; at a step's start, around the backward that
 * makes the gradients final, at the step action and at the end it calls its step policy
 * (step_policy.h), never asking which one it has. Tensors go through their edges' carriers
 * (transfer.h); losses, checkpoint parts and figures through its reporter (reporter.h).
 *
 * The actor never waits inside a callback. Messages (batches, activations, gradients, and
 * the policy's own) are queued on arrival, then the action list runs as far as it can: an
 * action whose input has not come yet stops it until the next message. Work goes to the
 * device's streams in order; what other devices need is handed over with an event, and a
 * buffer lent by another actor goes back (its edge's credit) once the event of the copy out
 * of it has completed. On host devices every event has completed by the time it is
 * queried, so credits go back at once; on CUDA the actor polls itself while any copy is in
 * flight.
 *
 * A held-out evaluation (tr_job_config.eval) is an action list of its own (evaluate.h's
 * pass), which the same interpreter runs in place of the step's at a step's boundary —
 * after the step action of a step its count says one follows, and before the end — until
 * its EVAL_END action closes it; its time is no training's (not busy time), its slots are
 * no schedule's, and what its actions compute is evaluate.c's.
 *
 * The end is a sequence too: the device finishes, the losses still held go to the
 * coordinator, then the last checkpoint part, the figures, and the policy's leave. Each
 * waits for a credit of its edge where it must.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_in.h"
#include "evaluate.h"
#include "reporter.h"
#include "stage.h"
#include "tr_trace.h"
#include "transfer.h"

/* Where the step action is, and where the end is. */
enum { STEP_UPDATE, STEP_SAVE };
enum { END_DEVICE, END_LOSSES, END_PART, END_FIGURES, END_LEAVE };

typedef struct stage_actor {
  tr_actor *self;
  const tr__run *run;
  int replica, stage;
  tr__tensor_member tp; /* its place in its tensor group */
  tr_device *dev;
  tr__chunks ch;
  int cur;           /* the chunk whose action runs (errors name its layers) */
  tr_stream *s;      /* the device's, every chunk's */
  int m;
  const tr_action *acts; /* the list in hand: the step's, or a held-out pass's */
  size_t nacts, pc;
  const tr_action *step_acts; /* the step's: its time is busy time, its slots held as planned */
  size_t step_nacts;
  int64_t step;       /* the stage's own count */
  int64_t run_step;   /* the run's step of the step in hand (a worker's differs from step) */

  tr__batch_in in;
  tr__tensor_edge act_out, act_in, grad_out, grad_in;
  tr_event *grad_ev[2];
  int grad_parity;
  bool grad_credit;
  const float *dinput;
  tr__returns returns; /* credits owed once the copies out of lent buffers have run */

  tr__policy policy;
  tr__policy_ctx ctx;
  tr__reporter rep;
  int step_phase, end_phase;

  tr__eval_pass eval; /* the held-out evaluation's list, and its state */

  tr__busy busy;
  uint64_t window_end;
  bool finishing, done, polling;
  bool ended; /* the run was ended early (a signal, its time) */
} stage_actor;

void *tr__stage_new(const tr__run *run, int replica, int stage, tr_device *dev) {
  stage_actor *a = calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->run = run;
  a->replica = replica;
  a->stage = stage;
  a->dev = dev;
  a->m = run->c.layout.microbatches;
  return a;
}

void tr__stage_wire(void *state, const tr__stage_ports *p) {
  stage_actor *a = state;
  a->in.n = p->nin;
  for (int i = 0; i < p->nin; i++) a->in.in[i] = (tr__batch_edge){.edge = p->in[i].edge, .what = p->in[i].what};
  tr__tensor_edge_init(&a->act_out, p->act_out.edge, p->act_out.nccl);
  tr__tensor_edge_init(&a->grad_in, p->grad_in.edge, p->grad_in.nccl);
  tr__tensor_edge_init(&a->act_in, p->act_in.edge, p->act_in.nccl);
  tr__tensor_edge_init(&a->grad_out, p->grad_out.edge, p->grad_out.nccl);
  a->tp = p->tensor;
  tr__reporter_init(&a->rep, p->report,
                    tr__stage_index(a->run, a->replica, a->tp.member, a->stage));
  a->policy = p->policy;
}

tr_device *tr__stage_device(const void *state) { return ((const stage_actor *)state)->dev; }

const tr__policy *tr__stage_policy(const void *state) { return &((const stage_actor *)state)->policy; }

int tr__stage_hold_batch(void *state, const tr_batch_msg *m) { /* a worker: one whole chunk */
  return tr__batch_in_take(&((stage_actor *)state)->in, m, true);
}

bool tr__stage_give_back_batches(void *state) {
  stage_actor *a = state;
  tr__returns_abandon(&a->returns); /* its device failed: its events may never say */
  return tr__batch_in_drop_all(&a->in) || a->finishing || a->done || a->eval.ending;
}

static const tr_stage_info *last_chunk(const stage_actor *a) { return a->ch.ch[a->ch.n - 1].info; }

/* A last stage's losses: its tensor group's member 0 speaks for the group. */
static bool reports_losses(const stage_actor *a) {
  return last_chunk(a)->is_last && a->tp.member == 0;
}

static int fail_device(tr_actor *self, stage_actor *a, const char *what) {
  const tr_stage *st = a->ch.ch ? a->ch.ch[a->cur].st : NULL;
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

static int credits(const tr__tensor_edge *t) { return t->edge ? tr_edge_credits(t->edge) : 0; }

/* A queue per edge that lends this stage buffers, room to owe every credit back, and the
 * carriers of its tensor edges. */
static int open_queues(stage_actor *a) {
  const int owed = credits(&a->act_in) + credits(&a->grad_in) + tr__batch_in_credits(&a->in);
  int rc = tr__batch_in_open(&a->in, a->self, a->run, a->dev);
  if (rc) return rc;
  if ((rc = tr__returns_open(&a->returns, a->dev, owed)))
    return rc == TR_EDEVICE ? fail_device(a->self, a, "opening events") : rc;
  if (a->act_out.edge && (rc = tr__chunks_open_events(&a->ch))) return rc;
  if (a->grad_out.edge && (rc = open_events(a, a->grad_ev, 2))) return rc;
  tr_graph *g = a->run->g;
  const size_t out = tr__chunks_largest(&a->ch, true), in = tr__chunks_largest(&a->ch, false);
  if ((rc = tr__tensor_edge_open(&a->act_out, a->self, a->dev, g, true, out, "nccl act out")) ||
      (rc = tr__tensor_edge_open(&a->grad_out, a->self, a->dev, g, true, in, "nccl grad out")) ||
      (rc = tr__tensor_edge_open(&a->act_in, a->self, a->dev, g, false, 0, "nccl act in")) ||
      (rc = tr__tensor_edge_open(&a->grad_in, a->self, a->dev, g, false, 0, "nccl grad in")))
    return rc;
  return 0;
}

/* The evaluation pass's action list for this replica's share, and (the last stage) room for
 * its figures. */
static int open_eval(stage_actor *a) {
  int rc = tr__eval_pass_open(&a->eval, a->run, a->replica, a->stage, a->dev, last_chunk(a));
  if (rc == 0) /* member 0 reports its tensor group's sums */
    rc = tr__eval_pass_tensor(&a->eval, a->tp.comm, a->tp.member, a->ch.st[a->ch.n - 1]);
  if (rc == TR_ENOMEM)
    return tr_actor_fail(a->self, rc, "room for held-out figures: out of memory");
  return rc ? fail_device(a->self, a, "allocating held-out losses") : 0;
}

static int stage_open(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  const tr__run *run = a->run;
  a->self = self;
  if (tr_device_bind(a->dev)) return fail_device(self, a, "binding the device");
  tr_trace_label(self, tr_device_name(a->dev)); /* the timeline names lanes by device */
  int rc = tr__chunks_open(&a->ch, self, run, a->stage, a->dev,
                           a->policy.ops->shard(a->policy.state), &a->tp);
  if (rc) return rc;
  a->s = tr_stage_stream(a->ch.st[0]);
  a->acts = a->step_acts = tr_schedule_actions(run->sc, a->stage, &a->nacts);
  a->step_nacts = a->nacts;
  if ((rc = tr__chunks_plan_holds(&a->ch, a->acts, a->nacts, a->m)) || (rc = open_queues(a)) ||
      (rc = open_eval(a)))
    return rc;
  tr_graph *g = run->g;
  a->step = a->policy.ops->first_step(a->policy.state, run);
  if ((rc = tr__reporter_open(&a->rep, self, a->dev, reports_losses(a), a->m,
                              a->step)))
    return rc;
  a->ctx = (tr__policy_ctx){.self = self, .run = run, .replica = a->replica, .stage = a->stage,
                            .dev = a->dev, .s = a->s, .chunks = a->ch.st, .nch = a->ch.n,
                            .busy = &a->busy};
  if ((rc = a->policy.ops->open(a->policy.state, &a->ctx))) return rc;
  const int64_t end = tr_graph_end_step(g);
  a->busy = tr__busy_begin(a->step, a->policy.ops->share(a->policy.state, run,
                                                         end == INT64_MAX ? INT64_MAX
                                                         : end - tr_graph_first_step(g)));
  a->busy.stage = a->stage;
  tr__idle_begin(&a->busy.idle, self, a->busy.run_start);
  return 0;
}

/* ---- the actions -------------------------------------------------------------------------- */

/* A tensor from a neighbour into this stage's `dst`, then its credit goes back. */
static int receive_tensor(tr_actor *self, stage_actor *a, tr__tensor_edge *t, void *dst,
                          const tr_action *act, bool timed) {
  const tr__lent *in = tr__queue_peek(&t->q);
  if (in == NULL) return TR__BLOCKED;
  if (in->step != a->step || in->mb != act->mb || in->chunk != act->chunk)
    return tr__out_of_order(self, "a tensor", in, a->step, act->mb, act->chunk);
  const char *what = act->kind == TR_ACTION_RECV_ACT ? "recv act" : "recv grad";
  uint64_t t0 = timed ? tr__busy_start(&a->busy, self, a->step, what, act->mb) : 0;
  const int rc = tr__tensor_receive(t, a->s, &a->returns, dst, in);
  if (rc != TR__DONE) return rc;
  if (act->kind == TR_ACTION_RECV_ACT) a->ch.ch[act->chunk].slot_first[act->slot] = in->first;
  tr__queue_pop(&t->q);
  if (timed) busy(a, what, t0, act->mb);
  return TR__DONE;
}

/* The tensor of a send action, for the chunk it is for on the device that takes it:
 * activations of the last stage go on to the next chunk of the first, gradients of the
 * first back to the previous chunk of the last. */
static int send_tensor(stage_actor *a, const tr_action *act) {
  const bool fwd = act->kind == TR_ACTION_SEND_ACT;
  const int P = a->run->c.layout.stages;
  const tr__chunk *c = &a->ch.ch[act->chunk];
  const tr__tensor_place at = {
      .step = a->step, .mb = act->mb, .first = c->slot_first[act->slot],
      .chunk = fwd ? act->chunk + (a->stage == P - 1) : act->chunk - (a->stage == 0)};
  if (fwd)
    return tr__tensor_send(&a->act_out, a->s, &tr_activation_type, &at,
                           tr_stage_output(c->st, act->slot), c->info->output_bytes,
                           c->act_ev[act->slot]);
  TR_ASSERT(a->grad_credit);
  a->grad_credit = false;
  tr_event *ev = a->grad_ev[a->grad_parity];
  a->grad_parity ^= 1;
  return tr__tensor_send(&a->grad_out, a->s, &tr_gradient_type, &at, a->dinput,
                         c->info->input_bytes, ev);
}

static int forward(tr_actor *self, stage_actor *a, const tr_action *act) {
  tr__chunk *c = &a->ch.ch[act->chunk];
  if (!tr__batch_in_ready(&a->in, c->info)) return TR__BLOCKED; /* its range opens once it can run */
  uint64_t t0 = tr__busy_start(&a->busy, self, a->step, "forward", act->mb);
  int count;
  int rc = tr__batch_in_fill(&a->in, a->s, &a->returns, c->info, tr_stage_input(c->st, act->slot),
                             tr_stage_target(c->st, act->slot), a->run_step, act->mb, act->chunk,
                             false, &c->slot_first[act->slot], &count);
  if (rc != TR__DONE) return rc;
  /* random layers draw each sample's mask from its place in the data set */
  tr_stage_set_samples(c->st, act->slot, c->slot_first[act->slot]);
  if (tr_stage_forward(c->st, act->slot)) return fail_device(self, a, "forward");
  if (c->info->is_last && reports_losses(a) &&
      tr__reporter_copy_loss(&a->rep, a->s, a->step, act->mb, tr_stage_loss(c->st, act->slot),
                             a->run_step))
    return fail_device(self, a, "copying the loss out");
  busy(a, "forward", t0, act->mb);
  return TR__DONE;
}

/* The backward, or one of its halves: B (which the gradient's send follows) and W (whose
 * weight gradients the policy hears of when they are the step's last). */
static int backward(tr_actor *self, stage_actor *a, const tr_action *act) {
  tr__chunk *c = &a->ch.ch[act->chunk];
  const bool weights = act->kind != TR_ACTION_BACKWARD_INPUT;
  /* The input gradient lands in one of two buffers: the one sent two backwards ago must
   * have been copied out (its credit back) first. */
  if (act->kind != TR_ACTION_BACKWARD_WEIGHT && !c->info->is_first && !a->grad_credit) {
    if (!tr_edge_acquire(a->grad_out.edge)) return TR__BLOCKED;
    a->grad_credit = true;
  }
  const char *what = act->kind == TR_ACTION_BACKWARD         ? "backward"
                     : act->kind == TR_ACTION_BACKWARD_INPUT ? "backward input"
                                                             : "backward weight";
  uint64_t t0 = tr__busy_start(&a->busy, self, a->step, what, act->mb);
  const tr__policy *p = &a->policy;
  const bool last = weights && act->mb == a->m - 1;
  int rc = last ? p->ops->last_backward(p->state, a->step, false) : 0;
  if (rc) return rc;
  rc = act->kind == TR_ACTION_BACKWARD ? tr_stage_backward(c->st, act->slot, &a->dinput)
       : weights ? tr_stage_backward_weight(c->st, act->slot)
                 : tr_stage_backward_input(c->st, act->slot, &a->dinput);
  if (rc) return fail_device(self, a, what);
  if (last && (rc = p->ops->last_backward(p->state, a->step, true))) return rc;
  busy(a, what, t0, act->mb);
  return TR__DONE;
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Gives back the credits whose copies have run, and reads the losses that have landed
 * (`room`: waiting for the oldest if the next step would overwrite it). */
static int harvest(tr_actor *self, stage_actor *a, bool room) {
  if (tr__returns_drain(&a->returns)) return fail_device(self, a, "returning credits");
  const int rc = tr__reporter_read(&a->rep, a->step, room);
  if (rc) return rc == TR_EDEVICE ? fail_device(self, a, "reading a loss") : rc;
  const tr__loss_log *l = &a->rep.log;
  if (l->nonfinite && a->run->c.on_nonfinite != TR_NONFINITE_SKIP)
    return tr__policy_not_finite(&a->ctx, l->nonfinite_step, "the loss", l->nonfinite_loss);
  return 0;
}

/* What this stage's parts are due for at its step (TR__DUE_*; 0: none), the step action's
 * (`end` false) or the run's end: a checkpoint every checkpoint.every steps, the observers'
 * parameters every snapshot_every steps (tr_job_snapshot), each at the end too. One
 * gathering serves both. */
static unsigned parts_due(const stage_actor *a, bool end) {
  const tr__run *run = a->run;
  if (!a->policy.ops->sends_parts(a->policy.state, a->replica) ||
      !tr__member_sends_parts(run, a->tp.member))
    return 0;
  const int64_t last = tr_graph_end_step(run->g);
  return (run->c.checkpoint.path && tr__due_at(run->c.checkpoint.every, a->step, end, last)
              ? TR__DUE_CHECKPOINT : 0u) |
         (run->snapshot_every && tr__due_at(run->snapshot_every, a->step, end, last)
              ? TR__DUE_PARAMS : 0u);
}

/* The step is over: figures, losses; then the parts when some are due. */
static int step_action(tr_actor *self, stage_actor *a) {
  if (a->step_phase == STEP_UPDATE) {
    int rc = a->policy.ops->update(a->policy.state, a->step, a->run_step);
    if (rc != TR__DONE) return rc;
    tr__reporter_step_ended(&a->rep, a->step);
    a->step++;
    if (a->step == a->busy.warm_step) {
      /* The window opens once the warm-up steps have really run. */
      if (tr_stream_synchronize(a->s)) return fail_device(self, a, "warming up");
      tr__busy_open_window(&a->busy, a->step);
    }
    if ((rc = harvest(self, a, true))) return rc;
    tr__loss_log_flush(&a->rep.log, false);
    a->step_phase = STEP_SAVE;
  }
  const unsigned due = parts_due(a, false);
  if (due) {
    int rc = tr__reporter_parts(&a->rep, &a->ch, a->step, due, a->replica == 0, &a->policy);
    if (rc != TR__DONE) return rc;
  }
  a->step_phase = STEP_UPDATE;
  a->pc = 0;
  return TR__DONE;
}

/* ---- a held-out evaluation ------------------------------------------------------------------ */

/* Whether the list in hand is the step's (not a held-out pass's). */
static bool training(const stage_actor *a) { return a->acts == a->step_acts; }

/* The evaluation after step a->step begins (`ending`: the run's last), its list in hand in
 * place of the step's until its EVAL_END action. */
static void begin_eval(stage_actor *a, bool ending) {
  tr__eval_pass_begin(&a->eval, a->step, ending, a->ch.st, a->ch.n);
  tr__eval_pass_drop_stale(&a->eval, &a->in, a->step);
  a->acts = a->eval.acts;
  a->nacts = a->eval.n;
  a->pc = 0;
}

/* It is over: the step's list again, from its start (or, the run's last, the end). */
static void end_eval(stage_actor *a, bool ending) {
  a->finishing = ending;
  a->acts = a->step_acts;
  a->nacts = a->step_nacts;
  a->pc = 0;
}

/* ---- the end ------------------------------------------------------------------------------- */

static int finish(tr_actor *self, stage_actor *a) {
  int rc = TR__DONE;
  const tr__chunks *c = &a->ch;
  if (a->end_phase == END_DEVICE) {
    if (tr_stream_synchronize(a->s)) return fail_device(self, a, "finishing the run");
    if ((rc = a->policy.ops->finish(a->policy.state))) return rc;
    a->window_end = tr_now_ns();
    tr__idle_work(&a->busy.idle, a->window_end); /* the last gap ends with the window */
    if ((rc = harvest(self, a, false))) return rc;
    a->end_phase = END_LOSSES;
  }
  if (a->end_phase == END_LOSSES) { /* every loss read and sent, a chunk at a time */
    if ((rc = tr__reporter_flush(&a->rep, a->step)) != TR__DONE)
      return rc == TR_EDEVICE ? fail_device(self, a, "reading a loss") : rc;
    if ((rc = harvest(self, a, false))) return rc;
    a->end_phase = END_PART;
  }
  if (a->end_phase == END_PART) {
    const unsigned due = parts_due(a, true);
    if (due && (rc = tr__reporter_parts(&a->rep, c, a->step, due, a->replica == 0,
                                         &a->policy)) != TR__DONE)
      return rc;
    a->end_phase = END_FIGURES;
  }
  if (a->end_phase == END_FIGURES) {
    const tr__policy *p = &a->policy;
    const tr__stage_figures f = {.run_steps = p->ops->run_steps, .steps = a->step,
                                 .first_step = p->ops->first_step(p->state, a->run),
                                 .skipped = p->ops->skipped(p->state),
                                 .window_end = a->window_end, .peak_microbatches = c->peak,
                                 .peak_activation_bytes = c->peak_bytes, .busy = &a->busy,
                                 .params = p->ops->consistency(p->state), .policy = p,
                                 .edge_bytes = a->act_out.sent_bytes + a->grad_out.sent_bytes,
                                 .tensor = a->tp.comm};
    if ((rc = tr__reporter_figures(&a->rep, c, &f)) != TR__DONE) return rc;
    a->end_phase = END_LEAVE;
  }
  if ((rc = a->policy.ops->leave(a->policy.state)) != TR__DONE) return rc;
  a->done = true;
  tr_graph_done(a->run->g, self);
  return 0;
}

/* A step may start: its losses have their places, and the policy says so. */
static int begin_step(stage_actor *a) {
  /* The step's losses need their places in the ring: its oldest read first (they wait on
   * the device, or on a credit to send the losses read before them). */
  if (!tr__reporter_room(&a->rep, a->step)) {
    int rc = harvest(a->self, a, false);
    if (rc) return rc;
    if (!tr__reporter_room(&a->rep, a->step)) return TR__BEGIN_WAIT;
  }
  const int flags = a->policy.ops->begin(a->policy.state, a->step, tr__batch_in_head(&a->in),
                                         a->ended, &a->run_step);
  if (flags > 0 && (flags & TR__BEGIN_DROP)) tr__batch_in_drop(&a->in); /* its credit goes back */
  if (flags > 0 && (flags & TR__BEGIN_END)) { /* the end, after the last evaluation if due */
    if (tr__eval_at_end(a->run, a->step)) begin_eval(a, true);
    else a->finishing = true;
  }
  return flags;
}

/* Runs the action list as far as the messages that have come allow. */
static int run_actions(tr_actor *self, stage_actor *a) {
  tr__eval_pass_drop_stale(&a->eval, &a->in, a->step);
  while (!a->done) {
    if (a->finishing) {
      int rc = finish(self, a);
      return rc < 0 ? rc : 0;
    }
    if (a->pc == 0 && training(a) && a->step_phase == STEP_UPDATE) {
      const int flags = begin_step(a);
      if (flags < 0) return flags;
      if (flags == TR__BEGIN_WAIT) {
        tr__idle_block(&a->busy.idle, TR__WAIT_STEP, a->step, tr_now_ns());
        break;
      }
      if (!(flags & TR__BEGIN_GO)) continue;
    }
    const tr_action *act = &a->acts[a->pc];
    tr__chunk *c = &a->ch.ch[act->chunk];
    a->cur = act->chunk;
    if (training(a)) a->busy.stage = act->chunk * a->run->c.layout.stages + a->stage; /* virtual */
    int rc;
    const char *what = NULL;
    switch (act->kind) {
      case TR_ACTION_RECV_ACT:
        rc = receive_tensor(self, a, &a->act_in, tr_stage_input(c->st, act->slot), act,
                            training(a));
        break;
      case TR_ACTION_FORWARD: rc = forward(self, a, act); break;
      case TR_ACTION_SEND_ACT: /* a held-out pass's credits are in hand (tr__eval_forward) */
        rc = tr__eval_pass_spend(&a->eval) || tr_edge_acquire(a->act_out.edge)
                 ? send_tensor(a, act) : TR__BLOCKED;
        break;
      case TR_ACTION_RECV_GRAD:
        rc = receive_tensor(self, a, &a->grad_in, tr_stage_dout(c->st, act->slot), act, true);
        break;
      case TR_ACTION_BACKWARD:
      case TR_ACTION_BACKWARD_INPUT:
      case TR_ACTION_BACKWARD_WEIGHT: rc = backward(self, a, act); break;
      case TR_ACTION_SEND_GRAD: rc = send_tensor(a, act); break;
      case TR_ACTION_STEP:
        rc = step_action(self, a);
        if (rc == TR__DONE && tr__eval_due(a->run, a->step)) begin_eval(a, false);
        if (rc == TR__DONE) continue; /* pc is 0 again */
        break;
      case TR_ACTION_EVAL_FORWARD:
        rc = tr__eval_forward(&a->eval, &a->in, &a->returns, a->s, c, a->act_out.edge, a->step,
                              act, &what);
        if (what) return fail_device(self, a, what);
        break;
      case TR_ACTION_EVAL_END: {
        const bool ending = a->eval.ending;
        rc = tr__eval_pass_end(&a->eval, &a->rep, a->s, a->act_out.edge, a->ch.st, a->ch.n,
                               &a->busy);
        if (rc == TR_EDEVICE) return fail_device(self, a, "reading a loss");
        if (rc == TR__DONE) end_eval(a, ending);
        if (rc == TR__DONE) continue; /* pc is 0 again */
        break;
      }
      default: TR_ASSERT(!"an action kind the stage does not know");
    }
    if (rc < 0) return rc;
    if (rc == TR__BLOCKED) {
      if (training(a))
        tr__idle_block(&a->busy.idle, tr__idle_wait_of(act->kind), a->step, tr_now_ns());
      break;
    }
    if (training(a)) tr__chunks_hold(&a->ch, a->pc, act);
    a->pc++;
  }
  return 0;
}

static void poll_later(tr_actor *self, stage_actor *a) {
  /* a full log waits for its credit's message, not for polls */
  const bool waiting = tr__returns_owed(&a->returns) ||
                       a->policy.ops->waiting(a->policy.state) ||
                       tr__reporter_waiting(&a->rep, a->step);
  if (!waiting || a->polling || a->done) return;
  a->polling = true;
  tr_actor_send(self, tr_msg_new(&tr__poll_type));
}

static int stage_receive(tr_actor *self, tr_msg *msg) {
  stage_actor *a = tr_actor_state(self);
  if (a->done) return 0;
  const tr_msgtype *t = msg->type;
  int rc = 0;
  tr__idle_heard(&a->busy.idle, msg);
  if (t == &tr_batch_type) rc = tr__batch_in_take(&a->in, (const tr_batch_msg *)msg, last_chunk(a)->is_last);
  else if (t == &tr_activation_type) rc = tr__tensor_take(&a->act_in, self, &a->ch, (const tr_tensor_msg *)msg, true);
  else if (t == &tr_gradient_type) rc = tr__tensor_take(&a->grad_in, self, &a->ch, (const tr_tensor_msg *)msg, false);
  else if (t == &tr__poll_type) {
    a->polling = false;
    rc = harvest(self, a, false);
  } else if (t == &tr_graph_end_type) {
    a->ended = true;
  } else {
    a->policy.ops->receive(a->policy.state, msg, &rc);
  }
  /* tr_edge_credit_msg and tr_graph_end_msg only say "look again". */
  if (rc == 0) rc = run_actions(self, a);
  if (rc == 0) poll_later(self, a);
  return rc;
}

/* Device resources go back on the device's own thread. */
static void stage_stop(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  tr__tensor_edge *edges[] = {&a->act_out, &a->grad_out, &a->act_in, &a->grad_in};
  if (!a->done) { /* a failed run: a peer's operation may never come, and the streams wait */
    for (int i = 0; i < 4; i++) tr__tensor_edge_abort(edges[i]);
    a->policy.ops->abort(a->policy.state);
    if (a->tp.comm) tr_tensor_comm_abort(a->tp.comm); /* its group's members wait no more */
  }
  if (a->s) tr_stream_synchronize(a->s);
  for (int i = 0; i < 4; i++) tr__tensor_edge_close(edges[i]);
  a->policy.ops->close(a->policy.state);
  tr__returns_close(&a->returns);
  for (int i = 0; i < 2; i++)
    if (a->grad_ev[i]) tr_event_close(a->grad_ev[i]);
  tr__reporter_close(&a->rep);
  tr__idle_end(&a->busy.idle);
  tr__eval_pass_close(&a->eval);
  tr__batch_in_close(&a->in);
  tr__chunks_close(&a->ch);
}

static int stage_start(tr_actor *self) {
  int rc = stage_open(self);
  if (rc) stage_stop(self); /* a failed start gets no stop callback: release what it got */
  else rc = run_actions(self, tr_actor_state(self)); /* a run may be over before it starts */
  return rc;
}

static void stage_destroy(void *state) {
  stage_actor *a = state;
  tr__tensor_edge *edges[] = {&a->act_out, &a->grad_out, &a->act_in, &a->grad_in};
  for (int i = 0; i < 4; i++) tr__tensor_edge_free(edges[i]);
  tr__batch_in_free(&a->in);
  tr__returns_free(&a->returns);
  tr__chunks_free(&a->ch);
  if (a->policy.ops) a->policy.ops->free(a->policy.state);
  tr__reporter_free(&a->rep);
  free(a);
}

const tr_behaviour tr__stage_behaviour = {.name = "stage", .start = stage_start,
                                          .receive = stage_receive, .stop = stage_stop,
                                          .destroy = stage_destroy};
