/* coordinator.c — the coordinator actor (libuv loop): gathers every step's loss from the
 * stages that compute it, sends observers their reports, has checkpoints written from the
 * stages' parts, and reduces the parts' final figures into the run's result (run_metrics.h,
 * result_impl.h; the definitions of docs/WORKLOADS.md).
 *
 * Every message comes on a report edge from one source (a stage, or the server) and gives
 * its credit back as soon as it is handled, but a checkpoint part's: that credit comes back
 * once its checkpoint is on disk, so that a writer slower than the steps holds the stages
 * back rather than parts piling up. A step's loss is complete once every replica's last
 * stage has sent its share (asynchronous jobs: the worker that took the step; losses.h).
 * Each observer gets a report per `every` complete steps, timed by when the steps ended on
 * their stages (observers.h: the intervals, and the queues of reports waiting for credits);
 * the coordinator says when each may go.
 *
 * Checkpoints are written off the loop thread (the loaders share it): a whole checkpoint
 * goes to libuv's thread pool (uv_queue_work), one at a time and in step order, and its
 * end comes back as a message. A report of step k goes out only once every checkpoint of a
 * step up to k is on disk (the periodic ones due, and those begun), and the last report once
 * every checkpoint is: an observer that hears of step k may read checkpoint k. The parameters
 * observers asked for (tr_job_snapshot) are the same parts laid out in memory (snapshots.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "elastic.h"
#include "evaluate.h"
#include "file_write.h"
#include "graph_impl.h"
#include "job_config.h"
#include "join.h"
#include "losses.h"
#include "observers.h"
#include "result_impl.h"
#include "snapshots.h"
#include "stage.h"
#include "world.h"

enum { PENDING = 4 }; /* checkpoints begun at once: no more than a report edge's credits */

/* A checkpoint being assembled from its parts, then written. */
typedef struct pending {
  int64_t step;      /* -1: a free slot */
  int got;           /* parts come */
  bool whole;        /* every part has come: to be written */
  unsigned due;      /* TR__DUE_*: the file, the observers' parameters (tr_job_snapshot) */
  int from[TR_TRAIN_MAX_DEVICES + 1]; /* the parts' sources, whose credits wait for the disk */
  tr__part parts[TR__MAX_STAGES];
} pending;

/* A checkpoint on its way to disk, on libuv's thread pool. */
typedef struct write_req {
  uv_work_t req;
  const tr__run *run;
  tr__file_output *out; /* the coordinator's, written by one write at a time */
  tr_actor *coordinator;
  pending ck;
  int nparts, rc;
  void *image; size_t image_size; /* ck.due & TR__DUE_PARAMS: the checkpoint in memory */
  char err[512];
} write_req;

/* writer → coordinator: a checkpoint is on disk (rc 0), or why not */
typedef struct written_msg {
  tr_msg hdr;
  write_req *w;
} written_msg;
static TR_MSGTYPE_DEFINE(written_type, written_msg);

/* A source added during the run (join.h), in one process only. */
TR_MSGTYPE_DEFINE(tr__source_type, tr__source_msg);

typedef struct coordinator {
  const tr__run *run;
  tr_actor *self;
  uint64_t t_start;
  uint64_t last_end, slowest; /* when the last complete step ended; the longest step */
  int nsources;
  tr_edge **sources;         /* [source]: its report edge */
  tr__observer *obs;
  int nobs;
  pending ck[PENDING];
  write_req *writing;        /* the checkpoint on its way to disk, or NULL */
  tr__file_output ck_out;    /* checkpoint.path as the run began (file_write.h): the writer's */
  int64_t written;           /* the step of the last checkpoint on disk (-1: none yet) */
  tr__snapshots snaps;       /* parameters of steps observers hear of, and their readers */
  tr__report *dones;         /* [stage source] */
  int *rank;                 /* [stage source]: the process it ran in */
  tr__figures server;        /* async: the server's */
  int ndone, expected;       /* sources done; sources with a report edge (join.h: more come) */
  bool finished, done;       /* every source is done: the figures are in; so are the reports */
  tr__loss_book losses;
  tr__eval_book eval;        /* held-out evaluations (evaluate.h) */
  tr__reduced *red;
  tr_result *result;         /* the job's: the run's figures, once every source's are in */
  tr__left_book left;        /* local SGD's replicas that left (elastic.h) */
} coordinator;

void *tr__coordinator_new(const tr__run *run, tr_result *result) {
  coordinator *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->run = run;
  c->result = result;
  c->nsources = tr__stage_count(run) + (run->c.async.enabled != 0);
  c->sources = calloc((size_t)c->nsources, sizeof *c->sources);
  c->dones = calloc((size_t)tr__stage_count(run), sizeof *c->dones);
  c->rank = calloc((size_t)tr__stage_count(run), sizeof *c->rank);
  c->red = calloc(1, sizeof *c->red);
  if (c->sources == NULL || c->dones == NULL || c->rank == NULL || c->red == NULL) {
    free(c->sources);
    free(c->dones);
    free(c->rank);
    free(c->red);
    free(c);
    return NULL;
  }
  for (int i = 0; i < PENDING; i++) c->ck[i].step = -1;
  c->written = -1;
  return c;
}

int tr__coordinator_add_source(void *state, int source, tr_edge *e) {
  coordinator *c = state;
  if (source < 0 || source >= c->nsources || c->sources[source]) return TR_EINVAL;
  c->sources[source] = e;
  return 0;
}

int tr__coordinator_add_observer(void *state, tr_edge *e, int every) {
  coordinator *c = state;
  tr__observer *grown = realloc(c->obs, (size_t)(c->nobs + 1) * sizeof *grown);
  if (grown == NULL) return TR_ENOMEM;
  c->obs = grown;
  c->obs[c->nobs++] = (tr__observer){.edge = e, .every = every};
  return 0;
}

int tr__coordinator_snapshot(void *state, tr_edge *e, int every) {
  return tr__snapshots_reader(&((coordinator *)state)->snaps, e, every) ? 0 : TR_ENOMEM;
}

static bool may_tell(const coordinator *c, int64_t step, bool last);

bool tr__coordinator_complete(const void *state, char *what, size_t n) {
  const coordinator *c = state;
  if (!c->finished || !may_tell(c, INT64_MAX, true)) return false;
  const char *ck = c->run->c.checkpoint.path;
  snprintf(what, n, "its %lld steps trained, its figures recorded%s%s%s",
           (long long)(tr__result_int(c->result, TR__M_STEPS) -
                       tr__result_int(c->result, TR__M_FIRST_STEP)),
           ck ? ", its checkpoint " : "",
           ck ? ck : "", ck ? " written" : "");
  return true;
}

bool tr__coordinator_kept_aside(const void *state) {
  return ((const coordinator *)state)->ck_out.saved != NULL;
}

static int coordinator_start(tr_actor *self) {
  coordinator *c = tr_actor_state(self);
  c->self = self;
  for (int s = 0; s < c->nsources; s++) {
    c->expected += c->sources[s] != NULL;
    if (c->sources[s] == NULL && !tr__joins_later(c->run, s)) /* join.h: its edge comes then */
      return tr_actor_fail(self, TR_EINVAL, "the coordinator has no report edge from %s %d: "
                           "every stage (and the server) must be added to the job",
                           s < tr__stage_count(c->run) ? "stage" : "the server",
                           s);
  }
  const tr_job_config *jc = &c->run->c;
  tr_graph *g = c->run->g;
  const int64_t end = tr_graph_end_step(g), first = tr_graph_first_step(g);
  if (tr__loss_book_init(&c->losses, first, jc->async.enabled ? 1 : jc->layout.replicas,
                         jc->async.enabled, end == INT64_MAX ? 0 : end - first))
    return tr_actor_fail(self, TR_ENOMEM, "the losses of the last 1%% of %lld steps: out of "
                         "memory (%lld bytes asked for)", (long long)(end - first),
                         (long long)(((end - first) / 100 + 1) * (int64_t)sizeof(double)));
  char err[512];
  int rc = jc->checkpoint.path ? tr__file_output_open(&c->ck_out, jc->checkpoint.path,
                                                      TR__F("checkpoint.path"), true, err,
                                                      sizeof err)
                               : 0;
  if (rc) return tr_actor_fail(self, rc, "%s", err);
  tr__eval_book_init(&c->eval, jc->layout.replicas);
  tr__left_init(&c->left, c->run);
  c->t_start = c->last_end = tr_now_ns();
  for (int i = 0; i < c->nobs; i++)
    tr__observer_start(&c->obs[i], c->t_start, first, jc->global_batch);
  return 0;
}

/* The watchdog fits the run: a step much slower than any seen so far is a hang, a step as
 * slow as the others is not. Asynchronous steps end interleaved, a worker's each in turn. */
static void fit_watchdog(coordinator *c, uint64_t t) {
  const tr_job_config *jc = &c->run->c;
  uint64_t took = t > c->last_end ? t - c->last_end : 0;
  c->last_end = t > c->last_end ? t : c->last_end;
  if (jc->async.enabled) took *= (uint64_t)jc->layout.replicas;
  if (jc->watchdog_steps <= 0 || took <= c->slowest) return;
  c->slowest = took;
  const double ms = (double)took / 1e6 * jc->watchdog_steps;
  const int want = ms > INT32_MAX ? INT32_MAX : ms > jc->watchdog_min_ms ? (int)ms : jc->watchdog_min_ms;
  tr_system *sys = tr_graph_system(c->run->g);
  if (want != tr_system_watchdog_ms(sys)) tr_system_set_watchdog_ms(sys, want);
}

/* ---- observers -------------------------------------------------------------------------- */

/* A report goes out once the checkpoints it follows are on disk, the parameters it carries
 * are at hand (tr_job_snapshot) and the held-out evaluation of its step, when one was due,
 * is whole: report k carries the evaluation after step k. */
static bool ready(void *arg, const tr__observer *o, const tr_report_msg *r) {
  const coordinator *c = arg;
  return may_tell(c, r->step, r->last) &&
         tr__snap_ready(&c->snaps, tr__snapshots_of(&c->snaps, o->edge), r->step, r->last) &&
         (r->last || !tr__eval_due(c->run, r->step) || c->eval.step >= r->step);
}

static int fill(void *arg, const tr__observer *o, tr_report_msg *r) {
  coordinator *c = arg;
  tr__eval_book_report(&c->eval, r);
  return tr__snap_open(&c->snaps, tr__snapshots_of(&c->snaps, o->edge), r); /* a failure:
                                                                   tr__snapshots_given */
}

static void flush(coordinator *c, tr__observer *o) { tr__observer_flush(o, ready, fill, c); }

typedef struct step_ctx {
  coordinator *c;
  int rc;
} step_ctx;

static void on_step(void *arg, int64_t step, double loss, uint64_t t) {
  step_ctx *x = arg;
  fit_watchdog(x->c, t);
  for (int i = 0; i < x->c->nobs && x->rc == 0; i++) {
    tr__observer *o = &x->c->obs[i];
    if (tr__observer_add(o, loss) || /* and at the steps of its parameters (tr_job_snapshot) */
        tr__snap_wants(tr__snapshots_of(&x->c->snaps, o->edge), step + 1, false))
      x->rc = tr__observer_report(o, step + 1, loss, t, false);
  }
}

/* Every observer told of the end (the rest of its steps in a last report) and every
 * checkpoint on disk: the coordinator's part is over. */
static int maybe_done(coordinator *c) {
  if (!c->finished || c->done) return 0;
  bool all = true;
  for (int i = 0; i < c->nobs; i++) {
    tr__observer *o = &c->obs[i];
    if (!tr__observer_last_queued(o)) {
      int rc = tr__observer_report(o, tr_graph_first_step(c->run->g) + c->losses.complete,
                                   tr__loss_book_last(&c->losses), tr_now_ns(), true);
      if (rc) return rc;
    }
    flush(c, o);
    all &= o->told_last;
  }
  if (!all || !may_tell(c, INT64_MAX, true)) return 0; /* a credit, or the writer, brings
                                                          the coordinator back */
  c->done = true;
  tr_graph_done(c->run->g, c->self);
  return 0;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

static bool in_use(const pending *p) { return p->step >= 0; }

/* Whether a report of `step` may go out: every checkpoint of a step up to it is on disk —
 * those begun, the next periodic one due, the one at the end — and, for the last report,
 * every checkpoint. */
static bool may_tell(const coordinator *c, int64_t step, bool last) {
  const tr_job_config *jc = &c->run->c;
  if (!jc->checkpoint.path) return true;
  if (c->writing && (last || c->writing->ck.step <= step)) return false;
  for (int i = 0; i < PENDING; i++)
    if (in_use(&c->ck[i]) && (last || c->ck[i].step <= step)) return false;
  if (last) return true;
  tr_graph *g = c->run->g;
  const int64_t first = tr_graph_first_step(g), end = tr_graph_end_step(g);
  const int64_t every = jc->checkpoint.every, after = c->written > first ? c->written : first;
  if (every > 0 && after / every < INT64_MAX / every - 1) {
    const int64_t next = (after / every + 1) * every;
    if (next < end && next <= step) return false;
  }
  return end == INT64_MAX || step < end || c->written >= end;
}

static void write_work(uv_work_t *req) { /* on a thread of libuv's pool */
  write_req *w = req->data;
  w->rc = tr__checkpoint_write(w->run, w->out, w->ck.step, w->ck.parts, w->nparts, w->ck.due,
                               &w->image, &w->image_size, w->err, sizeof w->err);
}

static void write_done(uv_work_t *req, int status) { /* on the loop thread */
  write_req *w = req->data;
  if (status && !w->rc) { /* cancelled: never the case, as nothing cancels it */
    w->rc = TR_ESYS;
    snprintf(w->err, sizeof w->err, "%s: the checkpoint's write did not run",
             w->run->c.checkpoint.path);
  }
  written_msg *m = tr_msg_new(&written_type);
  m->w = w;
  tr_actor_send(w->coordinator, m); /* after a stop: freed with the system, w below */
}

/* Local SGD's replicas differ between syncs: each sends a part of its own, kept apart
 * (parts [r × pieces, ...) are replica r's). */
static bool replicas_apart(const tr_job_config *jc) { return jc->local.sync_every > 0; }

/* The lowest whole checkpoint to the writer, when it is free. */
static int write_next(coordinator *c) {
  pending *next = NULL;
  for (int i = 0; i < PENDING; i++)
    if (c->ck[i].whole && (!next || c->ck[i].step < next->step)) next = &c->ck[i];
  if (c->writing || next == NULL) return 0;
  write_req *w = calloc(1, sizeof *w);
  if (w == NULL)
    return tr_actor_fail(c->self, TR_ENOMEM, "writing the checkpoint of step %lld: out of "
                         "memory", (long long)next->step);
  *w = (write_req){.run = c->run, .out = &c->ck_out, .coordinator = c->self, .ck = *next,
                   .nparts = tr__part_count(c->run) *
                             (replicas_apart(&c->run->c) ? c->run->c.layout.replicas : 1)};
  w->nparts = tr__left_compact(&c->left, c->run, w->ck.step, w->ck.parts, w->nparts);
  w->req.data = w;
  *next = (pending){.step = -1}; /* its parts are the writer's now */
  int rc = uv_queue_work(tr_system_loop(tr_graph_system(c->run->g)), &w->req, write_work,
                         write_done);
  if (rc) {
    const long long step = (long long)w->ck.step;
    for (int s = 0; s < w->nparts; s++) tr__part_free(&w->ck.parts[s]);
    free(w);
    return tr_actor_fail(c->self, TR_ESYS, "writing the checkpoint of step %lld: uv_queue_work: "
                         "%s", step, uv_strerror(rc));
  }
  c->writing = w;
  return 0;
}

/* The writer is done: its parts' credits back, the reports that waited for it out. */
static int written(coordinator *c, write_req *w) {
  TR_ASSERT(w == c->writing);
  c->writing = NULL;
  for (int s = 0; s < w->nparts; s++) tr__part_free(&w->ck.parts[s]);
  for (int i = 0; i < w->ck.got; i++) tr_edge_release(c->sources[w->ck.from[i]], 1);
  int rc = w->rc;
  if (rc == 0 && w->image) /* taken over */
    rc = tr__snapshots_add(&c->snaps, w->ck.step, w->image, w->image_size, w->err, sizeof w->err);
  if (rc) tr_actor_fail(c->self, rc, "%s", w->err);
  else if ((w->ck.due & TR__DUE_CHECKPOINT) && w->ck.step > c->written) c->written = w->ck.step;
  free(w);
  return rc ? rc : write_next(c);
}

/* Each stage of replica 0 sends its part; under ZeRO every replica's stage sends its shard
 * of the optimizer state too, and the stage's part is whole once all have come. */
static int add_part(tr_actor *self, coordinator *c, tr__part_msg *p) {
  const tr_job_config *jc = &c->run->c;
  const int P = tr__part_count(c->run); /* a part per chunk of each stage (and member) */
  const int parts = tr__left_parts(&c->left, c->run, p->step,
                                   P * (jc->zero || replicas_apart(jc) ? jc->layout.replicas : 1));
  const int member = (p->source / jc->layout.stages) % tr__members(c->run);
  /* local SGD's replicas' parts apart (no tensor groups there: job_config refuses them) */
  const int at = tr__part_slot(c->run, member, p->stage) +
                 (replicas_apart(jc) ? p->part.replica * P : 0);
  pending *slot = NULL;
  for (int i = 0; i < PENDING && !slot; i++) /* a whole one waiting for the writer is done */
    if (c->ck[i].step == p->step && !c->ck[i].whole) slot = &c->ck[i];
  for (int i = 0; i < PENDING && !slot; i++)
    if (!in_use(&c->ck[i])) slot = &c->ck[i], slot->step = p->step;
  TR_ASSERT(slot != NULL && !slot->whole && slot->got < TR_TRAIN_MAX_DEVICES + 1);
  slot->from[slot->got++] = p->source;
  slot->due |= p->due;
  int rc = tr__part_merge(&slot->parts[at], &p->part, jc->optim.kind);
  if (rc) return tr_actor_fail(self, rc, "assembling the checkpoint of step %lld: out of memory",
                               (long long)p->step);
  if (slot->got < parts) return 0;
  slot->whole = true;
  return write_next(c);
}

/* ---- the figures ---------------------------------------------------------------------------- */

/* Every source's pairs reduced by the table's rules, then what docs/WORKLOADS.md derives
 * from them. 0, or TR_ENOMEM. */
static int record_result(coordinator *c) {
  const tr_job_config *jc = &c->run->c;
  tr_result *r = c->result;
  const int R = jc->layout.replicas, n = tr__stage_count(c->run);
  const tr__figures **src = calloc((size_t)n + 1, sizeof *src);
  if (src == NULL) return TR_ENOMEM;
  for (int i = 0; i < n; i++) src[i] = &c->dones[i].fig;
  src[n] = jc->async.enabled ? &c->server : NULL;
  int rc = tr__metrics_reduce(c->red, src, n + 1, n);
  free(src);
  if (rc || (rc = tr__metrics_apply(c->red, r))) return rc;
  tr__result_rates(c->run, c->red, r);
  /* replicas that left: the samples they did not train */
  if ((rc = tr__left_result(&c->left, c->run, r))) return rc;
  if (!jc->async.enabled && (R == 1 || c->dones[0].params)) /* else a policy's own (local SGD's) */
    tr__result_set_real(r, TR__M_CONSISTENCY,
                        R > 1 ? tr__replicas_consistency(c->run, c->dones) : 0);
  tr__eval_book_result(&c->eval, r);
  tr__result_set_real(r, TR__M_INITIAL_LOSS, c->losses.initial);
  tr__result_set_real(r, TR__M_FINAL_LOSS, tr__loss_book_final(&c->losses));
  const double samples_per_s = tr__result_real(r, TR__M_SAMPLES_PER_S);
  const tr_model *m = jc->model;
  if (tr_model_token_input(m))
    tr__result_set_real(r, TR__M_TOKENS_PER_S, samples_per_s * tr_model_ctx(m));
  tr__result_set_real(r, TR__M_GFLOPS, tr_model_train_flops(m) * samples_per_s / 1e9);
  return 0;
}

/* ---- messages ------------------------------------------------------------------------------- */

static int source_of(const coordinator *c, int source, bool release) {
  TR_ASSERT(source >= 0 && source < c->nsources);
  if (release) tr_edge_release(c->sources[source], 1);
  return source;
}

/* What to add to a time the sender of `m` took, to read it on this process's clock. */
static int64_t clock_offset(const coordinator *c, const tr_msg *m) {
  tr_graph *g = c->run->g;
  return tr__world_clock_offset(tr__graph_world(g), tr_graph_actor_rank(g, m->from));
}

/* Workers that left the run (tr_async_config.elastic), as the server's figures say, whose
 * figures never came: none will. Their devices are still named. */
static int departed(coordinator *c) {
  uint64_t gone = 0;
  for (int i = 0; i < c->server.n && i < TR__FIGURES_PAIRS; i++)
    if (c->server.pairs[i].key == TR__M_WORKERS_GONE) gone = (uint64_t)c->server.pairs[i].v.i;
  int n = 0;
  for (int i = 0; i < c->run->c.layout.replicas && i < 64; i++) {
    tr__report *r = &c->dones[i];
    if (!(gone >> i & 1) || r->device[0]) continue;
    tr_graph *g = c->run->g;
    tr_actor *from = tr_edge_from(c->sources[i]);
    c->rank[i] = tr_graph_actor_rank(g, from);
    snprintf(r->device, sizeof r->device, "%s",
             tr_graph_actor_rank(g, from) == tr_graph_rank(g)
                 ? tr_device_name(tr__stage_device(tr_actor_state(from)))
                 : tr_actor_name(from));
    n++;
  }
  return n;
}

/* Source i's replica, whose rank died (its step -1: elastic.c), left at the last step of it
 * that came: its last loss's, or a later checkpoint's part (a part of step k goes out before
 * the losses of step k, behind those before it: every part of a checkpoint up to that step
 * came). Said on stderr, as a replica that leaves says it. */
static int64_t lost_at(coordinator *c, int i) {
  int64_t at = c->left.heard[i];
  for (const pending *ck = c->ck; ck < c->ck + PENDING; ck++)
    for (int k = 0; in_use(ck) && k < ck->got; k++)
      if (ck->from[k] == i && ck->step > at) at = ck->step;
  const int64_t first = tr_graph_first_step(c->run->g);
  at = at < first ? first : at;
  const tr__report *r = &c->dones[i];
  const int64_t why = r->fig.pairs[1].v.i;
  fprintf(stderr, "troupe: replica %d (%s@r%d) left at step %lld: %s\n",
          i / c->run->c.layout.stages, r->device, c->rank[i], (long long)at,
          why >= 0 && why < TR__FIGURES_TEXT ? r->fig.text + why : "");
  return at;
}

/* Source i's replica left at `at` (elastic.h): later losses, evaluations, checkpoints lack it */
static int replica_left(coordinator *c, int i, int64_t at) {
  if (at < 0) c->dones[i].fig.pairs[0].v.i = at = lost_at(c, i);
  step_ctx x = {.c = c};
  const int64_t from = tr__left_add(&c->left, c->run, i, at);
  int rc = tr__loss_book_depart(&c->losses, from, on_step, &x);
  if (rc || (rc = x.rc) || (rc = tr__left_eval_gone(&c->left, &c->eval, i)) ||
      (rc = tr__left_none(&c->left, c->dones, c->self)))
    return rc;
  for (pending *ck = c->ck; ck < c->ck + PENDING; ck++)
    ck->whole |= in_use(ck) && ck->got >= tr__left_parts(&c->left, c->run, ck->step,
                                         tr__part_count(c->run) * c->run->c.layout.replicas);
  return write_next(c);
}

static int coordinator_receive(tr_actor *self, tr_msg *msg) {
  coordinator *c = tr_actor_state(self);
  int rc = 0;
  if (msg->type == &tr__loss_type) {
    const tr__loss_msg *m = (const tr__loss_msg *)msg;
    source_of(c, m->source, true);
    tr__left_heard(&c->left, m);
    step_ctx x = {.c = c};
    if ((rc = tr__loss_book_add(&c->losses, m, clock_offset(c, msg), on_step, &x)) ||
        (rc = x.rc))
      return rc;
  } else if (msg->type == &tr__eval_type) {
    const tr__eval_msg *m = (const tr__eval_msg *)msg;
    const int i = source_of(c, m->source, true);
    if (tr__left_eval(&c->left, &c->eval, i / (c->run->c.layout.stages * tr__members(c->run)),
                      &m->sums))
      return tr_actor_fail(self, TR_EINVAL, "held-out sums of step %lld from source %d: "
                           "more evaluations open at once than replicas can be apart",
                           (long long)m->sums.step, i);
  } else if (msg->type == &tr__part_type) {
    tr__part_msg *p = (tr__part_msg *)msg;
    source_of(c, p->source, false); /* its credit once the checkpoint is on disk */
    rc = add_part(self, c, p);
  } else if (msg->type == &written_type) {
    rc = written(c, ((written_msg *)msg)->w);
  } else if (msg->type == &tr__done_type) {
    const tr__done_msg *d = (const tr__done_msg *)msg;
    const int i = source_of(c, d->source, true);
    tr__report *r = &c->dones[i];
    *r = d->report;
    r->device[sizeof r->device - 1] = 0;
    c->rank[i] = tr_graph_actor_rank(c->run->g, msg->from);
    tr__figures_shift_clock(&r->fig, clock_offset(c, msg));
    c->ndone++;
    if (tr__left_said(r)) rc = replica_left(c, i, r->fig.pairs[0].v.i);
  } else if (msg->type == &tr__source_type) { /* a worker that joined the run (join.h) */
    const tr__source_msg *m = (const tr__source_msg *)msg;
    TR_ASSERT(m->source >= 0 && m->source < c->nsources && !c->sources[m->source]);
    c->sources[m->source] = m->edge;
    c->expected++;
    source_of(c, m->source, true);
  } else if (msg->type == &tr__server_done_type) {
    const tr__server_done_msg *d = (const tr__server_done_msg *)msg;
    source_of(c, d->source, true);
    c->server = d->fig;
    tr__figures_shift_clock(&c->server, clock_offset(c, msg));
    c->ndone++;
    c->ndone += departed(c);
  }
  if (rc) return rc;
  if (!c->finished && c->ndone == c->expected) {
    if ((rc = tr__result_settings(c->run, c->dones, c->rank, c->result)) ||
        (rc = record_result(c)))
      return tr_actor_fail(self, rc, "recording the run's figures: %s", tr_strerror(rc));
    c->finished = true;
  }
  for (int i = 0; i < c->nobs; i++) flush(c, &c->obs[i]); /* also on their credits */
  rc = maybe_done(c);
  return rc ? rc : tr__snapshots_given(&c->snaps, self);
}

/* Runs after every write the coordinator asked for has ended (the loop runs until then). */
static void coordinator_destroy(void *state) {
  coordinator *c = state;
  for (int i = 0; i < PENDING; i++)
    for (int s = 0; s < TR__MAX_STAGES; s++) tr__part_free(&c->ck[i].parts[s]);
  const int n = tr__stage_count(c->run);
  for (int i = 0; i < n; i++) free((void *)c->dones[i].params);
  free(c->dones);
  free(c->sources);
  for (int i = 0; i < c->nobs; i++) tr__observer_free(&c->obs[i]);
  free(c->obs);
  tr__snapshots_free(&c->snaps);
  tr__loss_book_free(&c->losses);
  if (c->writing) /* the run failed while it wrote: its message was never handled */
    for (int s = 0; s < c->writing->nparts; s++) tr__part_free(&c->writing->ck.parts[s]);
  if (c->writing) free(c->writing->image);
  free(c->writing);
  tr__file_output_close(&c->ck_out);
  tr__reduced_free(c->red);
  free(c->red);
  free(c->rank);
  free(c);
}

const tr_behaviour tr__coordinator_behaviour = {.name = "coordinator",
                                                .start = coordinator_start,
                                                .receive = coordinator_receive,
                                                .destroy = coordinator_destroy};
