/* stage_actor.c — the stage actor: owns one device and trains the model's layers on it.
 *
 * Each batch message is one whole step: copy the batch in, forward, backward, update. The
 * actor never waits on its device in the hot path: it records events and polls them at the
 * next step, returning a buffer to the loader once its copy has run and reading each step's
 * loss once it has landed in host memory. On host devices every event has completed by the
 * time it is polled, so credits and losses come back at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "tr_trace.h"

enum { LOSS_RING = 256, REPORT_NS = 100 * 1000 * 1000 };

typedef struct stage_actor {
  tr__run *run;
  tr_device *dev;
  tr_stage *st;
  tr_stream *s;
  /* the batch buffers lent to the loader */
  int depth;
  void **x, **y;
  tr_event **copied; /* per buffer: the device has copied out of it */
  /* The buffers back here, in the order their batches came (a ring of slots from `head`):
   * the first `nready` copied in (one stream completes them in order), the rest still
   * copying. Their credits go back credit_group at a time (harvest). */
  int *held;
  int head, nheld, nready, credit_group;
  /* per-step losses: device → loss_ring[step % LOSS_RING] → losses */
  float *loss_ring;
  tr_event *loss_ev[LOSS_RING];
  int64_t harvested; /* steps whose loss has been read */
  float *losses;
  size_t nlosses, cap;
  /* timing */
  int64_t step, warm_step;
  uint64_t window_start, busy_ns, last_report, now; /* now: the end of the last step */
  bool done;
  bool polling; /* a poll message to itself is on its way */
  char err[512];
} stage_actor;

void *tr__stage_new(tr__run *run, tr_device *dev) {
  stage_actor *a = calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->run = run;
  a->dev = dev;
  a->depth = run->prefetch;
  return a;
}

static int fail_device(tr_actor *self, stage_actor *a, const char *what) {
  const char *why = a->st ? tr_stage_error(a->st) : tr_device_error(a->dev);
  return tr_actor_fail(self, TR_EDEVICE, "%s on %s: %s", what, tr_device_name(a->dev), why);
}

static int64_t warmup_steps(const tr__run *run) {
  if (run->end_step == INT64_MAX) return 10;
  int64_t total = run->end_step - run->first_step;
  if (total < 10) return 0;
  return total / 10 < 100 ? total / 10 : 100;
}

static int stage_open(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  tr__run *run = a->run;
  if (tr_device_bind(a->dev)) return fail_device(self, a, "binding the device");

  tr_stage_config c = tr_stage_defaults(run->model);
  c.batch = run->batch;
  c.global_batch = run->batch;
  c.slots = 1;
  c.seed = run->opt->seed;
  c.optim = run->optim;
  if (tr_stage_open(&a->st, run->model, a->dev, &c, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EDEVICE, "opening the stage on %s: %s",
                         tr_device_name(a->dev), a->err);
  a->s = tr_stage_stream(a->st);
  if (run->opt->resume && tr__stage_load(a->st, run->opt->resume, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EFORMAT, "%s", a->err);

  const tr_stage_info *info = tr_stage_get_info(a->st);
  a->x = calloc((size_t)a->depth, sizeof *a->x);
  a->y = calloc((size_t)a->depth, sizeof *a->y);
  a->copied = calloc((size_t)a->depth, sizeof *a->copied);
  a->held = calloc((size_t)a->depth, sizeof *a->held);
  if (!a->x || !a->y || !a->copied || !a->held) return TR_ENOMEM;
  a->credit_group = a->depth / 2 > 1 ? a->depth / 2 : 1;
  for (int i = 0; i < a->depth; i++) {
    if (tr_host_alloc(a->dev, info->input_bytes, &a->x[i]) ||
        tr_host_alloc(a->dev, info->target_bytes, &a->y[i]) ||
        tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->copied[i]))
      return fail_device(self, a, "allocating batch buffers");
  }
  if (tr_host_alloc(a->dev, LOSS_RING * sizeof(float), (void **)&a->loss_ring))
    return fail_device(self, a, "allocating the loss ring");
  for (int i = 0; i < LOSS_RING; i++)
    if (tr_event_open(a->dev, TR_EVENT_DEFAULT, &a->loss_ev[i]))
      return fail_device(self, a, "opening events");

  a->step = a->harvested = run->first_step;
  a->warm_step = run->first_step + warmup_steps(run);
  a->window_start = a->last_report = tr_now_ns();

  tr__ring_msg *r = tr_msg_new(&tr__ring_type);
  r->hdr.from = self;
  r->depth = a->depth;
  r->x = a->x;
  r->y = a->y;
  tr_actor_send(run->loader, r);
  return 0;
}

static int keep_loss(stage_actor *a, float loss) {
  if (a->nlosses == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 1024;
    float *grown = realloc(a->losses, cap * sizeof *grown);
    if (grown == NULL) return TR_ENOMEM;
    a->losses = grown;
    a->cap = cap;
  }
  a->losses[a->nlosses++] = loss;
  return 0;
}

/* Returns the buffers whose copies have run and reads the losses that have landed.
 *
 * Credits go back credit_group (half the ring) at a time: a credit that finds the loader's
 * loop asleep wakes it (an eventfd write here, a context switch there: 3 µs each on a VM,
 * per step when they go one by one), while a group wakes it once for that many fills in a
 * row, and the other half of the ring keeps this actor busy meanwhile. Holding them cannot
 * stall the run: with no batch left to train on, every buffer is back here, a full group. */
static int harvest(tr_actor *self, stage_actor *a) {
  while (a->nready < a->nheld &&
         tr_event_query(a->copied[a->held[(a->head + a->nready) % a->depth]]) == 1)
    a->nready++;
  if (a->nready >= a->credit_group) {
    for (; a->nready > 0; a->nready--, a->nheld--, a->head = (a->head + 1) % a->depth) {
      tr__credit_msg *c = tr_msg_new(&tr__credit_type);
      c->hdr.from = self;
      c->slot = a->held[a->head];
      tr_actor_send_ctl(a->run->loader, c);
    }
  }
  while (a->harvested < a->step) {
    int k = (int)(a->harvested % LOSS_RING);
    int q = tr_event_query(a->loss_ev[k]);
    if (q < 0) return fail_device(self, a, "reading a loss");
    if (q == 0) break;
    if (keep_loss(a, a->loss_ring[k])) return TR_ENOMEM;
    a->harvested++;
  }
  return 0;
}

/* A buffer whose copy has not run yet goes back only once its event completes. With no
 * batch coming (the loader may be waiting for exactly that buffer), the actor polls by
 * sending itself a message, so it never blocks on the device (host devices never need to). */
static void poll_later(tr_actor *self, stage_actor *a) {
  if (a->nready == a->nheld || a->polling) return; /* no copy in flight, or a poll coming */
  a->polling = true;
  tr_msg *p = tr_msg_new(&tr__poll_type);
  p->from = self;
  tr_actor_send(self, p);
}

static int finish(tr_actor *self, stage_actor *a) {
  tr__run *run = a->run;
  if (tr_stream_synchronize(a->s)) return fail_device(self, a, "finishing the run");
  uint64_t end = tr_now_ns();
  int rc = harvest(self, a);
  if (rc) return rc;
  if (run->opt->checkpoint &&
      tr__stage_save(a->st, run, a->step, run->opt->checkpoint, a->err, sizeof a->err))
    return tr_actor_fail(self, TR_EIO, "%s", a->err);

  tr__done_msg *d = tr_msg_new(&tr__done_type);
  d->hdr.from = self;
  d->steps = a->step;
  bool warmed = a->step > a->warm_step;
  d->window_steps = warmed ? a->step - a->warm_step : a->step - run->first_step;
  d->window_ns = end - a->window_start;
  d->busy_ns = a->busy_ns;
  d->initial_loss = a->nlosses ? a->losses[0] : NAN;
  size_t tail = a->nlosses / 100 ? a->nlosses / 100 : 1;
  double sum = 0;
  for (size_t i = a->nlosses >= tail ? a->nlosses - tail : 0; i < a->nlosses; i++)
    sum += a->losses[i];
  d->final_loss = a->nlosses ? sum / (double)(a->nlosses < tail ? a->nlosses : tail) : NAN;
  tr_actor_send(run->coordinator, d);
  a->done = true;
  return 0;
}

static int train_step(tr_actor *self, stage_actor *a, const tr__batch_msg *b) {
  const tr_stage_info *info = tr_stage_get_info(a->st);
  tr_stage *st = a->st;
  int slot = b->slot;
  const bool traced = tr_trace_enabled(self); /* the phases' own clock readings: traces only */
  uint64_t t0 = tr_now_ns();

  /* Before the loss of this step may overwrite a ring entry, that entry must be read. */
  if (a->step - a->harvested >= LOSS_RING) {
    if (tr_event_synchronize(a->loss_ev[a->harvested % LOSS_RING]))
      return fail_device(self, a, "waiting for a loss");
    int rc = harvest(self, a);
    if (rc) return rc;
  }
  if (tr_memcpy(a->s, tr_stage_input(st, 0), a->x[slot], info->input_bytes, TR_COPY_H2D) ||
      tr_memcpy(a->s, tr_stage_target(st, 0), a->y[slot], info->target_bytes, TR_COPY_H2D) ||
      tr_event_record(a->copied[slot], a->s))
    return fail_device(self, a, "copying a batch in");
  a->held[(a->head + a->nheld++) % a->depth] = slot;

  uint64_t t1 = traced ? tr_now_ns() : 0;
  if (tr_stage_zero_grads(st) || tr_stage_forward(st, 0)) return fail_device(self, a, "forward");
  uint64_t t2 = traced ? tr_now_ns() : 0;
  if (tr_stage_backward(st, 0, NULL)) return fail_device(self, a, "backward");
  uint64_t t3 = traced ? tr_now_ns() : 0;
  if (tr_stage_step(st, NULL)) return fail_device(self, a, "optimizer step");
  int k = (int)(a->step % LOSS_RING);
  if (tr_memcpy(a->s, &a->loss_ring[k], tr_stage_loss(st, 0), sizeof(float), TR_COPY_D2H) ||
      tr_event_record(a->loss_ev[k], a->s))
    return fail_device(self, a, "copying the loss out");
  uint64_t t4 = a->now = tr_now_ns();

  if (traced) {
    tr_trace_record(self, "copy in", t0, t1, b->step);
    tr_trace_record(self, "forward", t1, t2, b->step);
    tr_trace_record(self, "backward", t2, t3, b->step);
    tr_trace_record(self, "update", t3, t4, b->step);
  }
  if (a->step >= a->warm_step) a->busy_ns += t4 - t0;
  a->step++;
  if (a->step == a->warm_step) {
    /* The window opens once the warm-up steps have really run. */
    if (tr_stream_synchronize(a->s)) return fail_device(self, a, "warming up");
    a->window_start = tr_now_ns();
    a->busy_ns = 0;
  }
  return harvest(self, a);
}

static int stage_receive(tr_actor *self, tr_msg *msg) {
  stage_actor *a = tr_actor_state(self);
  tr__run *run = a->run;
  if (a->done) return 0;
  if (msg->type == &tr__finish_type) return finish(self, a);
  if (msg->type == &tr__poll_type) {
    a->polling = false;
    int rc = harvest(self, a);
    if (rc == 0) poll_later(self, a);
    return rc;
  }
  if (msg->type != &tr__batch_type) return 0;

  const tr__batch_msg *b = (const tr__batch_msg *)msg;
  TR_ASSERT(b->step == a->step); /* the loader sends steps in order over one edge */
  int rc = train_step(self, a, b);
  if (rc) return rc;

  int64_t every = run->opt->checkpoint_every;
  if (run->opt->checkpoint && every > 0 && a->step % every == 0 && a->step < run->end_step) {
    if (tr__stage_save(a->st, run, a->step, run->opt->checkpoint, a->err, sizeof a->err))
      return tr_actor_fail(self, TR_EIO, "%s", a->err);
  }
  if (a->now - a->last_report >= REPORT_NS && a->nlosses) {
    a->last_report = a->now;
    tr__progress_msg *p = tr_msg_new(&tr__progress_type);
    p->hdr.from = self;
    p->step = a->step;
    p->loss = a->losses[a->nlosses - 1];
    tr_actor_send(run->coordinator, p);
  }
  if (a->step >= run->end_step) return finish(self, a);
  poll_later(self, a);
  return 0;
}

/* Device resources go back on the device's own thread. */
static void stage_stop(tr_actor *self) {
  stage_actor *a = tr_actor_state(self);
  if (a->s) tr_stream_synchronize(a->s);
  for (int i = 0; i < a->depth && a->copied; i++) {
    if (a->x && a->x[i]) tr_host_free(a->dev, a->x[i]);
    if (a->y && a->y[i]) tr_host_free(a->dev, a->y[i]);
    if (a->copied[i]) tr_event_close(a->copied[i]);
  }
  for (int i = 0; i < LOSS_RING; i++)
    if (a->loss_ev[i]) tr_event_close(a->loss_ev[i]);
  if (a->loss_ring) tr_host_free(a->dev, a->loss_ring);
  tr_stage_close(a->st);
  a->st = NULL;
}

static int stage_start(tr_actor *self) {
  int rc = stage_open(self);
  if (rc) stage_stop(self); /* a failed start gets no stop callback: release what it got */
  return rc;
}

static void stage_destroy(void *state) {
  stage_actor *a = state;
  free(a->x);
  free(a->y);
  free(a->copied);
  free(a->held);
  free(a->losses);
  free(a);
}

const tr_behaviour tr__stage_behaviour = {.name = "stage",
                                          .start = stage_start,
                                          .receive = stage_receive,
                                          .stop = stage_stop,
                                          .destroy = stage_destroy};
