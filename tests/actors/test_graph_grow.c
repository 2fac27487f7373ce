/* test_graph_grow.c — a graph that grows while it runs (tr_graph.h): an actor adds another and
 * an edge to itself mid-run and the run waits for the new one; one added after the end is
 * known learns it once; adding once every waited actor is done is refused naming why; and,
 * scaled up in the stress suite (and run under TSan there), many adds race with sources that
 * share steps out, finish the run and are done.
 *
 * Actors never call cmocka from their threads: they record what they saw in their state, and
 * the test asserts on it once tr_graph_run has returned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../runtime/test_util.h"
#include "tr_graph.h"
#include "troupe.h"

typedef struct item_msg {
  tr_msg hdr;
  int64_t seq;
  tr_edge *edge; /* the edge it came on, whose credit its consumer gives back */
} item_msg;
static TR_MSGTYPE_DEFINE(item_type, item_msg);

typedef struct go_msg {
  tr_msg hdr;
} go_msg;
static TR_MSGTYPE_DEFINE(go_type, go_msg);

static void send_go(tr_actor *to) { tr_actor_send(to, tr_msg_new(&go_type)); }

static tr_graph *graph_new(void) {
  tr_graph *g;
  assert_int_equal(tr_graph_new(&g, NULL), 0);
  return g;
}

/* What tr_graph_print writes now, malloc'd. */
static char *printed(tr_graph *g) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  tr_graph_print(g, f);
  fclose(f);
  return text;
}

/* ---- an actor added mid-run, with its edge ---------------------------------------------- */

/* Sends `total` items, slowly, once it is given its edge (a go), then is done. */
typedef struct child {
  tr_graph *g;
  tr_edge *e;
  int64_t total, sent;
  int delay_us;
  int ends;      /* end messages received */
  int64_t end_said;
  bool wait_end; /* done only once the end message has come too */
  bool go;       /* its edge has come (its adder wrote `e` before sending the go) */
  bool done;
} child;

static void child_maybe_done(tr_actor *self, child *c) {
  if (!c->done && c->go && c->sent == c->total && (!c->wait_end || c->ends > 0)) {
    c->done = true;
    tr_graph_done(c->g, self);
  }
}

static int child_receive(tr_actor *self, tr_msg *msg) {
  child *c = tr_actor_state(self);
  if (msg->type == &tr_graph_end_type) {
    c->ends++;
    c->end_said = ((tr_graph_end_msg *)msg)->end_step;
  } else if (msg->type == &go_type || (msg->type == &tr_edge_credit_type && c->go)) {
    /* the go, or credits back after it found none (a host slow to take the items: a loaded
     * machine; without this the child waited for ever) */
    c->go = true;
    while (c->sent < c->total && tr_edge_acquire(c->e)) {
      if (c->delay_us) usleep((useconds_t)c->delay_us);
      item_msg *m = tr_msg_new(&item_type);
      m->seq = c->sent++;
      m->edge = c->e;
      tr_edge_send(c->e, m);
    }
  }
  child_maybe_done(self, c);
  return 0;
}
static const tr_behaviour child_behaviour = {.name = "child", .receive = child_receive};

/* On start: adds its child and the edge child → itself, gives the child the edge, and is done
 * at once: the run must still wait for the child. Gives each item's credit back. */
typedef struct host {
  tr_graph *g;
  child *c;
  int add_rc, connect_rc;
  char *before, *after; /* the graph printed before and after the adds */
  int64_t received;
} host;

static int host_start(tr_actor *self) {
  host *h = tr_actor_state(self);
  h->before = printed(h->g);
  tr_actor *ca = NULL;
  h->add_rc = tr_graph_add(h->g, &(tr_actor_config){.name = "child", .kind = TR_ACTOR_PINNED,
                                                    .behaviour = &child_behaviour, .state = h->c},
                           &ca);
  tr_edge *e = NULL;
  if (h->add_rc == 0)
    h->connect_rc = tr_graph_connect(h->g, &(tr_edge_config){.from = ca, .to = self,
                                                             .type = &item_type, .name = "items",
                                                             .credits = 4},
                                     &e);
  h->after = printed(h->g);
  if (e) {
    h->c->e = e; /* the go's send publishes it to the child */
    send_go(ca);
  }
  tr_graph_done(h->g, self);
  return 0;
}

static int host_receive(tr_actor *self, tr_msg *msg) {
  host *h = tr_actor_state(self);
  if (msg->type == &item_type) {
    h->received++;
    tr_edge_release(((item_msg *)msg)->edge, 1);
  }
  return 0;
}
static const tr_behaviour host_behaviour = {.name = "host", .start = host_start,
                                            .receive = host_receive};

static void an_actor_added_mid_run_is_waited_for(void **state) {
  (void)state;
  tr_graph *g = graph_new();
  child c = {.g = g, .total = 40, .delay_us = 2000};
  host h = {.g = g, .c = &c};
  tr_actor *ha;
  assert_int_equal(tr_graph_add(g, &(tr_actor_config){.name = "host", .kind = TR_ACTOR_PINNED,
                                                      .behaviour = &host_behaviour, .state = &h},
                                &ha),
                   0);
  assert_int_equal(tr_graph_run(g, 0, 1, 0), 0);
  assert_int_equal(h.add_rc, 0);
  assert_int_equal(h.connect_rc, 0);
  /* the host was done at once; the run ended only once the child had sent everything */
  assert_true(c.done);
  assert_int_equal(c.sent, c.total);
  if (strstr(h.before, "'child'") || !strstr(h.before, "graph of 1 actors"))
    fail_msg("before the add the graph named the child:\n%s", h.before);
  if (!strstr(h.after, "graph of 2 actors") || !strstr(h.after, "actor 'child' (pinned)") ||
      !strstr(h.after, "edge child -> host 'items'"))
    fail_msg("after the add the graph lacks the child or its edge:\n%s", h.after);
  free(h.before);
  free(h.after);
  /* the run is over: nothing more is added, and the error says why */
  tr_actor *late;
  child c2 = {.g = g};
  assert_int_equal(tr_graph_add(g, &(tr_actor_config){.name = "late", .kind = TR_ACTOR_LOOP,
                                                      .behaviour = &child_behaviour, .state = &c2},
                                &late),
                   TR_ESTATE);
  if (!strstr(tr_graph_error(g), "'late'") ||
      !strstr(tr_graph_error(g), "every actor it waited for is done"))
    fail_msg("the refusal does not say why: '%s'", tr_graph_error(g));
  tr_graph_free(g);
}

/* ---- the end, told once to an actor added after it is known --------------------------- */

/* Waits for the end message, then a little more (a second one would come meanwhile). */
typedef struct waiter {
  tr_graph *g;
  int ends;
  int64_t end_said;
  bool done;
} waiter;

static int waiter_receive(tr_actor *self, tr_msg *msg) {
  waiter *w = tr_actor_state(self);
  if (msg->type == &tr_graph_end_type) {
    w->end_said = ((tr_graph_end_msg *)msg)->end_step;
    if (w->ends++ == 0) tr_actor_timer_start(self, 30, 0, 0);
  } else if (msg->type == &tr_timer_msg_type && !w->done) {
    w->done = true;
    tr_graph_done(w->g, self);
  }
  return 0;
}
static const tr_behaviour waiter_behaviour = {.name = "waiter", .receive = waiter_receive};

typedef struct finisher {
  tr_graph *g;
  waiter *late;
  int add_rc;
} finisher;

static int finisher_start(tr_actor *self) {
  finisher *f = tr_actor_state(self);
  for (int64_t s = 0; s < 5; s++) tr_graph_claim_step(f->g, s);
  tr_graph_finish(f->g);
  tr_actor *a;
  f->add_rc = tr_graph_add(f->g, &(tr_actor_config){.name = "late", .kind = TR_ACTOR_PINNED,
                                                    .behaviour = &waiter_behaviour,
                                                    .state = f->late},
                           &a);
  tr_graph_done(f->g, self);
  return 0;
}
static const tr_behaviour finisher_behaviour = {.name = "finisher", .start = finisher_start,
                                                .receive = NULL};

static int ignore(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}

static void an_actor_added_after_the_end_learns_it_once(void **state) {
  (void)state;
  static const tr_actor_kind kinds[] = {TR_ACTOR_PINNED, TR_ACTOR_LOOP};
  for (int k = 0; k < 2; k++) {
    tr_graph *g = graph_new();
    waiter early = {.g = g}, late = {.g = g};
    finisher f = {.g = g, .late = &late};
    tr_behaviour fb = finisher_behaviour;
    fb.receive = ignore;
    tr_actor *a;
    assert_int_equal(tr_graph_add(g, &(tr_actor_config){.name = "early", .kind = kinds[k],
                                                        .behaviour = &waiter_behaviour,
                                                        .state = &early},
                                  &a),
                     0);
    assert_int_equal(tr_graph_add(g, &(tr_actor_config){.name = "finisher", .kind = kinds[k],
                                                        .behaviour = &fb, .state = &f},
                                  &a),
                     0);
    assert_int_equal(tr_graph_run(g, 0, 0, 30.0), 0);
    assert_int_equal(f.add_rc, 0);
    assert_int_equal(tr_graph_end_step(g), 5);
    assert_int_equal(early.ends, 1);
    assert_int_equal(late.ends, 1); /* not missed, not told twice */
    assert_int_equal(late.end_said, 5);
    assert_true(late.done);
    tr_graph_free(g);
  }
}

/* ---- stress: adds race with claims, the end and the last actors done ------------------ */

/* A source takes steps until there are none; one of them finishes the run after `finish_after`. */
typedef struct source {
  tr_graph *g;
  int64_t taken, finish_after;
  bool done;
} source;

static int source_start(tr_actor *self) {
  send_go(self);
  return 0;
}

static int source_receive(tr_actor *self, tr_msg *msg) {
  source *s = tr_actor_state(self);
  if (msg->type != &go_type || s->done) return 0;
  for (int i = 0; i < 16; i++) {
    if (tr_graph_take_step(s->g, self) < 0) {
      s->done = true;
      tr_graph_done(s->g, self);
      return 0;
    }
    if (++s->taken == s->finish_after) tr_graph_finish(s->g);
  }
  send_go(self);
  return 0;
}
static const tr_behaviour source_behaviour = {.name = "source", .start = source_start,
                                              .receive = source_receive};

/* Adds children one per turn, up to `quota`; each sends one item to it and is done once that
 * is sent and the end has come. A waited grower never sees a refusal; a service one may,
 * once every waited actor is done, and stops there. */
typedef struct grower {
  tr_graph *g;
  child *children;
  int quota, added, refused_rc;
  int64_t received;
  bool service, done;
  char error[256];
} grower;

static int grower_receive(tr_actor *self, tr_msg *msg) {
  grower *gr = tr_actor_state(self);
  if (msg->type == &item_type) {
    gr->received++;
    tr_edge_release(((item_msg *)msg)->edge, 1);
    return 0;
  }
  if (msg->type != &go_type || gr->done || gr->refused_rc) return 0;
  child *c = &gr->children[gr->added];
  *c = (child){.g = gr->g, .total = 1, .wait_end = true};
  char name[32];
  snprintf(name, sizeof name, "%s%d", gr->service ? "s" : "w", gr->added);
  tr_actor *ca;
  int rc = tr_graph_add(gr->g, &(tr_actor_config){.name = name,
                                                  .kind = gr->added % 8 ? TR_ACTOR_LOOP
                                                                        : TR_ACTOR_PINNED,
                                                  .behaviour = &child_behaviour, .state = c},
                        &ca);
  tr_edge *e = NULL;
  if (rc == 0)
    rc = tr_graph_connect(gr->g, &(tr_edge_config){.from = ca, .to = self, .type = &item_type,
                                                   .credits = 1},
                          &e);
  if (rc) {
    gr->refused_rc = rc;
    snprintf(gr->error, sizeof gr->error, "%s", tr_graph_error(gr->g));
    return 0;
  }
  c->e = e;
  send_go(ca);
  if (++gr->added < gr->quota) send_go(self);
  else if (!gr->service) {
    gr->done = true;
    tr_graph_done(gr->g, self);
  }
  return 0;
}
static const tr_behaviour grower_behaviour = {.name = "grower", .start = source_start,
                                              .receive = grower_receive};

static void adds_race_with_claims_the_end_and_the_last_done(void **state) {
  (void)state;
  const int rounds = (int)test_scaled(4), quota = (int)test_scaled(40);
  for (int round = 0; round < rounds; round++) {
    tr_graph *g = graph_new();
    child *wk = calloc((size_t)quota, sizeof *wk), *sk = calloc((size_t)quota, sizeof *sk);
    assert_non_null(wk);
    assert_non_null(sk);
    source s1 = {.g = g, .finish_after = 50 + round * 37}, s2 = {.g = g};
    grower waited = {.g = g, .children = wk, .quota = quota};
    grower service = {.g = g, .children = sk, .quota = quota, .service = true};
    tr_actor *a;
    struct {
      const char *name;
      tr_actor_kind kind;
      const tr_behaviour *b;
      void *state;
      bool service;
    } actors[] = {{"source1", TR_ACTOR_PINNED, &source_behaviour, &s1, false},
                  {"source2", TR_ACTOR_LOOP, &source_behaviour, &s2, false},
                  {"grower", TR_ACTOR_PINNED, &grower_behaviour, &waited, false},
                  {"adder", TR_ACTOR_PINNED, &grower_behaviour, &service, true}};
    for (size_t k = 0; k < sizeof actors / sizeof *actors; k++) {
      const tr_actor_config c = {.name = actors[k].name, .kind = actors[k].kind,
                                 .behaviour = actors[k].b, .state = actors[k].state};
      assert_int_equal(actors[k].service ? tr_graph_add_service(g, &c, &a) : tr_graph_add(g, &c, &a),
                       0);
    }
    assert_int_equal(tr_graph_run(g, 0, 0, 60.0), 0);
    assert_true(s1.done && s2.done);
    assert_int_equal(s1.taken + s2.taken, tr_graph_end_step(g));
    assert_int_equal(waited.refused_rc, 0); /* a waited adder is never refused */
    assert_int_equal(waited.added, quota);
    if (service.refused_rc && (service.refused_rc != TR_ESTATE ||
                               !strstr(service.error, "every actor it waited for is done")))
      fail_msg("the service's add was refused with %d: '%s'", service.refused_rc, service.error);
    /* every child accepted was waited for: it sent its item and learnt the end, once */
    for (int k = 0; k < waited.added + service.added; k++) {
      const child *c = k < waited.added ? &wk[k] : &sk[k - waited.added];
      if (!c->done || c->sent != 1 || c->ends != 1)
        fail_msg("round %d, child %d of %s: done %d, sent %lld, ends %d", round, k,
                 k < waited.added ? "the grower" : "the service", c->done, (long long)c->sent,
                 c->ends);
    }
    tr_graph_free(g);
    free(wk);
    free(sk);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_actor_added_mid_run_is_waited_for),
      cmocka_unit_test(an_actor_added_after_the_end_learns_it_once),
      cmocka_unit_test(adds_race_with_claims_the_end_and_the_last_done),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
