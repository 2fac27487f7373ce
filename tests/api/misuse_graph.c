/* misuse_graph.c — hostile calls to training graphs (misuse.h): graphs, edges, steps, the
 * built-in actors' jobs and the messages of their protocol. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "misuse.h"

static int nothing_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour nothing = {.name = "nothing", .receive = nothing_receive};
static const tr_actor_config loop_actor = {.name = "x", .kind = TR_ACTOR_LOOP,
                                           .behaviour = &nothing};

/* An edge a -> b of g, 2 credits. */
static tr_edge *edge(tr_graph *g, tr_actor *a, tr_actor *b) {
  tr_edge *e;
  if (tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .type = &tr_batch_type,
                                            .credits = 2}, &e))
    _exit(120);
  return e;
}

/* ---- graphs ------------------------------------------------------------------------------- */

MISUSE(graph_new_null_out, "tr_graph_new(NULL, NULL)", TR_EINVAL, "tr_graph_new", "out") {
  return tr_graph_new(NULL, NULL);
}

MISUSE(graph_new_bad_watchdog, "tr_graph_new(&g, {.watchdog_ms = -7})", TR_EINVAL,
       "tr_graph_new", "watchdog_ms") {
  tr_graph *g;
  return tr_graph_new(&g, &(tr_system_config){.watchdog_ms = -7});
}

MISUSE(graph_free_null, "tr_graph_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_graph_free(NULL);
  return 0;
}

MISUSE(graph_getters_null, "tr_graph_system/_error/_signal/_rank(NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  return !tr_graph_system(NULL) && tr_graph_error(NULL) && !tr_graph_signal(NULL) &&
                 tr_graph_rank(NULL) == 0 && tr_graph_actor_rank(NULL, NULL) == -1
             ? 0
             : 1;
}

MISUSE(graph_add_null_graph, "tr_graph_add(NULL, &c, &a)", TR_EINVAL, "tr_graph_add", "g") {
  tr_actor *a;
  return tr_graph_add(NULL, &loop_actor, &a);
}

MISUSE(graph_add_null_config, "tr_graph_add(g, NULL, &a)", TR_EINVAL, "tr_graph_add", "config") {
  tr_graph *g = graph_new();
  tr_actor *a;
  return said(msg, n, tr_graph_add(g, NULL, &a), tr_graph_error(g));
}

MISUSE(graph_add_null_out, "tr_graph_add(g, &c, NULL)", TR_EINVAL, "tr_graph_add", "out") {
  tr_graph *g = graph_new();
  return said(msg, n, tr_graph_add(g, &loop_actor, NULL), tr_graph_error(g));
}

MISUSE(graph_add_null_behaviour, "tr_graph_add(g, {.behaviour = NULL}, &a)", TR_EINVAL,
       "tr_graph_add", "behaviour") {
  tr_graph *g = graph_new();
  tr_actor *a;
  return said(msg, n, tr_graph_add(g, &(tr_actor_config){.name = "x"}, &a), tr_graph_error(g));
}

MISUSE(graph_add_service_null_config, "tr_graph_add_service(g, NULL, &a)", TR_EINVAL,
       "tr_graph_add_service", "config") {
  tr_graph *g = graph_new();
  tr_actor *a;
  return said(msg, n, tr_graph_add_service(g, NULL, &a), tr_graph_error(g));
}

MISUSE(graph_add_on_bad_rank, "tr_graph_add_on(g, 5, &c, &a)", TR_EINVAL, "tr_graph_add_on",
       "rank") {
  tr_graph *g = graph_new();
  tr_actor *a;
  return said(msg, n, tr_graph_add_on(g, 5, &loop_actor, &a), tr_graph_error(g));
}

MISUSE(graph_add_after_run, "tr_graph_add(g, &c, &a) after the run", TR_ESTATE, "tr_graph_add",
       "run") {
  tr_graph *g = graph_ran(NULL);
  tr_actor *a;
  return said(msg, n, tr_graph_add(g, &loop_actor, &a), tr_graph_error(g));
}

MISUSE(graph_set_world_null_graph, "tr_graph_set_world(NULL, w)", TR_EINVAL,
       "tr_graph_set_world", "g") {
  return tr_graph_set_world(NULL, NULL);
}

MISUSE(graph_set_world_after_add, "tr_graph_set_world(g, w) after tr_graph_add", TR_ESTATE,
       "tr_graph_set_world", NULL) {
  tr_graph *g = graph_one(NULL);
  tr_world *w;
  if (tr_world_open(&w, NULL, 0)) return 1;
  return said(msg, n, tr_graph_set_world(g, w), tr_graph_error(g));
}

MISUSE(graph_connect_null_graph, "tr_graph_connect(NULL, &c, &e)", TR_EINVAL, "tr_graph_connect",
       "g") {
  tr_edge *e;
  return tr_graph_connect(NULL, &(tr_edge_config){.credits = 1}, &e);
}

MISUSE(graph_connect_null_config, "tr_graph_connect(g, NULL, &e)", TR_EINVAL, "tr_graph_connect",
       "config") {
  tr_graph *g = graph_new();
  tr_edge *e;
  return said(msg, n, tr_graph_connect(g, NULL, &e), tr_graph_error(g));
}

MISUSE(graph_connect_null_out, "tr_graph_connect(g, &c, NULL)", TR_EINVAL, "tr_graph_connect",
       "out") {
  tr_graph *g = graph_new();
  tr_actor *a = actor_of(g, "a"), *b = actor_of(g, "b");
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .type = &tr_batch_type,
                                                    .credits = 1}, NULL),
              tr_graph_error(g));
}

MISUSE(graph_connect_null_from, "tr_graph_connect(g, {.from = NULL}, &e)", TR_EINVAL,
       "tr_graph_connect", "from") {
  tr_graph *g = graph_new();
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.to = actor_of(g, "b"), .credits = 1}, &e),
              tr_graph_error(g));
}

MISUSE(graph_connect_null_to, "tr_graph_connect(g, {.to = NULL}, &e)", TR_EINVAL,
       "tr_graph_connect", "to") {
  tr_graph *g = graph_new();
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = actor_of(g, "a"), .credits = 1}, &e),
              tr_graph_error(g));
}

MISUSE(graph_connect_no_credits, "tr_graph_connect(g, {.credits = 0}, &e)", TR_EINVAL,
       "tr_graph_connect", "credits") {
  tr_graph *g = graph_new();
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = actor_of(g, "a"),
                                                    .to = actor_of(g, "b"), .credits = 0}, &e),
              tr_graph_error(g));
}

MISUSE(graph_connect_wake_above, "tr_graph_connect(g, {.credits = 2, .wake_at = 3}, &e)",
       TR_EINVAL, "tr_graph_connect", "wake_at") {
  tr_graph *g = graph_new();
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = actor_of(g, "a"),
                                                    .to = actor_of(g, "b"), .credits = 2,
                                                    .wake_at = 3}, &e),
              tr_graph_error(g));
}

MISUSE(graph_connect_foreign, "tr_graph_connect(g, {.to = another graph's actor}, &e)",
       TR_EINVAL, "tr_graph_connect", "to") {
  tr_graph *g = graph_new(), *h = graph_new();
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = actor_of(g, "a"),
                                                    .to = actor_of(h, "b"), .credits = 1}, &e),
              tr_graph_error(g));
}

MISUSE(graph_connect_untyped_unnamed, "tr_graph_connect(g, {.type = NULL, .name = NULL}, &e)",
       MISUSE_DEFINED, NULL, NULL) {
  tr_graph *g = graph_new();
  tr_edge *e;
  const int rc = tr_graph_connect(g, &(tr_edge_config){.from = actor_of(g, "a"),
                                                       .to = actor_of(g, "b"), .credits = 1}, &e);
  return rc == 0 && tr_edge_name(e) ? 0 : 1; /* a control edge: named "control" */
}

MISUSE(graph_connect_after_run, "tr_graph_connect(g, &c, &e) after the run", TR_ESTATE,
       "tr_graph_connect", "run") {
  tr_actor *a;
  tr_graph *g = graph_ran(&a);
  tr_edge *e;
  return said(msg, n,
              tr_graph_connect(g, &(tr_edge_config){.from = a, .to = a, .type = &tr_batch_type,
                                                    .credits = 1}, &e),
              tr_graph_error(g));
}

MISUSE(graph_run_null, "tr_graph_run(NULL, 0, 10, 0)", TR_EINVAL, "tr_graph_run", "g") {
  return tr_graph_run(NULL, 0, 10, 0);
}

MISUSE(graph_run_no_limit, "tr_graph_run(g, 0, 0, 0)", TR_EINVAL, "tr_graph_run", "end_step") {
  tr_graph *g = graph_one(NULL);
  return said(msg, n, tr_graph_run(g, 0, 0, 0), tr_graph_error(g));
}

MISUSE(graph_run_backwards, "tr_graph_run(g, 5, 3, 0)", TR_EINVAL, "tr_graph_run", "end_step") {
  tr_graph *g = graph_one(NULL);
  return said(msg, n, tr_graph_run(g, 5, 3, 0), tr_graph_error(g));
}

MISUSE(graph_run_negative_first, "tr_graph_run(g, -1, 10, 0)", TR_EINVAL, "tr_graph_run",
       "first_step") {
  tr_graph *g = graph_one(NULL);
  return said(msg, n, tr_graph_run(g, -1, 10, 0), tr_graph_error(g));
}

MISUSE(graph_run_nan_seconds, "tr_graph_run(g, 0, 0, NAN)", TR_EINVAL, "tr_graph_run", "seconds") {
  tr_graph *g = graph_one(NULL);
  return said(msg, n, tr_graph_run(g, 0, 0, NAN), tr_graph_error(g));
}

MISUSE(graph_run_no_actor, "tr_graph_run(g, 0, 1, 0) on an empty graph", TR_EINVAL,
       "tr_graph_run", "actor") {
  tr_graph *g = graph_new();
  return said(msg, n, tr_graph_run(g, 0, 1, 0), tr_graph_error(g));
}

MISUSE(graph_run_twice, "tr_graph_run(g, 0, 1, 0) twice", TR_ESTATE, "tr_graph_run", "once") {
  tr_graph *g = graph_ran(NULL);
  return said(msg, n, tr_graph_run(g, 0, 1, 0), tr_graph_error(g));
}

MISUSE(graph_after_run, "tr_graph_claim_step/_finish/_end_step/_print after the run",
       MISUSE_DEFINED, NULL, NULL) {
  tr_graph *g = graph_ran(NULL);
  tr_graph_finish(g);
  tr_graph_finish(g); /* idempotent */
  FILE *f = fopen("/dev/null", "w");
  tr_graph_print(g, f);
  fclose(f);
  /* no step was claimed (its actor claims none): the run ended before step 0 */
  return tr_graph_claim_step(g, 5) == 0 && tr_graph_claim_step(g, 0) == 0 &&
                 tr_graph_end_step(g) == 0
             ? 0
             : 1;
}

MISUSE(graph_steps_null, "tr_graph_claim_step/_take_step/_end_step/_finish(NULL, ...)",
       MISUSE_DEFINED, "tr_graph_claim_step", "g") {
  tr_graph_finish(NULL);
  return tr_graph_claim_step(NULL, 0) == 0 && tr_graph_take_step(NULL, NULL) == -1 &&
                 tr_graph_end_step(NULL) == 0 && tr_graph_first_step(NULL) == 0
             ? 0
             : 1;
}

MISUSE(graph_print_null, "tr_graph_print(NULL, f), tr_graph_print(g, NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  tr_graph_print(NULL, stdout);
  tr_graph_print(graph_one(NULL), NULL);
  return 0;
}

MISUSE(graph_done_null, "tr_graph_done(NULL, a), tr_graph_done(g, NULL)", MISUSE_DEFINED,
       "tr_graph_done", NULL) {
  tr_actor *a;
  tr_graph *g = graph_one(&a);
  tr_graph_done(NULL, a);
  tr_graph_done(g, NULL);
  return 0;
}

static int done_twice(tr_graph *g, tr_actor *self, char *msg, size_t n) {
  (void)msg, (void)n;
  tr_graph_done(g, self); /* during_start says it again */
  return 0;
}

MISUSE(graph_done_twice, "tr_graph_done(g, self) twice", MISUSE_DEFINED, "tr_graph_done",
       "twice") {
  return graph_during(done_twice, msg, n);
}

static int done_foreign(tr_graph *g, tr_actor *self, char *msg, size_t n) {
  (void)self, (void)msg, (void)n;
  tr_graph *h = graph_new();
  tr_graph_done(g, actor_of(h, "stranger")); /* not an actor of g */
  return 0;
}

MISUSE(graph_done_foreign, "tr_graph_done(g, another graph's actor)", MISUSE_DEFINED,
       "tr_graph_done", "stranger") {
  return graph_during(done_foreign, msg, n);
}

static int add_during(tr_graph *g, tr_actor *self, char *msg, size_t n) {
  (void)self;
  tr_actor *a;
  const int rc = tr_graph_add(g, NULL, &a);
  return said(msg, n, rc, tr_graph_error(g));
}

MISUSE(graph_add_null_while_running, "tr_graph_add(g, NULL, &a) while it runs", TR_EINVAL,
       "tr_graph_add", "config") {
  return graph_during(add_during, msg, n);
}

/* ---- edges -------------------------------------------------------------------------------- */

MISUSE(edge_acquire_null, "tr_edge_acquire(NULL)", MISUSE_DEFINED, "tr_edge_acquire", "e") {
  return tr_edge_acquire(NULL) == 0 ? 0 : 1;
}

MISUSE(edge_send_null, "tr_edge_send(NULL, m)", MISUSE_DEFINED, "tr_edge_send", "e") {
  tr_edge_send(NULL, tr_msg_new(&tr_batch_type));
  return 0;
}

MISUSE(edge_send_null_msg, "tr_edge_send(e, NULL)", MISUSE_DEFINED, "tr_edge_send", "msg") {
  tr_graph *g = graph_new();
  tr_edge_send(edge(g, actor_of(g, "a"), actor_of(g, "b")), NULL);
  return 0;
}

MISUSE(edge_send_wrong_type, "tr_edge_send(e, a message of another type)", MISUSE_DEFINED,
       "tr_edge_send", "type") {
  tr_graph *g = graph_new();
  tr_edge *e = edge(g, actor_of(g, "a"), actor_of(g, "b"));
  tr_edge_send(e, tr_msg_new(&tr_report_type));
  return 0;
}

MISUSE(edge_send_control_null, "tr_edge_send_control(NULL, m)", TR_EINVAL,
       "tr_edge_send_control", "e") {
  return tr_edge_send_control(NULL, tr_msg_new(&tr_batch_type));
}

MISUSE(edge_release_null, "tr_edge_release(NULL, 1)", MISUSE_DEFINED, "tr_edge_release", "e") {
  tr_edge_release(NULL, 1);
  return 0;
}

MISUSE(edge_release_negative, "tr_edge_release(e, -1)", MISUSE_DEFINED, "tr_edge_release", "n") {
  tr_graph *g = graph_new();
  tr_edge *e = edge(g, actor_of(g, "a"), actor_of(g, "b"));
  tr_edge_release(e, -1);
  return tr_edge_available(e) == 2 ? 0 : 1;
}

MISUSE(edge_release_unacquired, "tr_edge_release(e, 1) of a credit never taken", MISUSE_DEFINED,
       "tr_edge_release", "credits") {
  tr_graph *g = graph_new();
  tr_edge *e = edge(g, actor_of(g, "a"), actor_of(g, "b"));
  tr_edge_release(e, 1);
  return tr_edge_available(e) == 2 ? 0 : 1;
}

MISUSE(edge_getters_null, "tr_edge_available/_peak/_credits/_name/_from/_to(NULL)", MISUSE_DEFINED,
       NULL, NULL) {
  return !tr_edge_available(NULL) && !tr_edge_peak(NULL) && !tr_edge_credits(NULL) &&
                 tr_edge_name(NULL) && !tr_edge_from(NULL) && !tr_edge_to(NULL)
             ? 0
             : 1;
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static tr_job_config job_config(void) {
  tr_job_config c = tr_job_defaults();
  c.model = model();
  c.data = data();
  return c;
}

MISUSE(job_new_null_out, "tr_job_new(NULL, g, &c, err, n)", TR_EINVAL, "tr_job_new", "out") {
  tr_job_config c = job_config();
  return tr_job_new(NULL, graph_new(), &c, msg, n);
}

MISUSE(job_new_null_graph, "tr_job_new(&j, NULL, &c, err, n)", TR_EINVAL, "tr_job_new", "g") {
  tr_job_config c = job_config();
  tr_job *j;
  return tr_job_new(&j, NULL, &c, msg, n);
}

MISUSE(job_new_null_config, "tr_job_new(&j, g, NULL, err, n)", TR_EINVAL, "tr_job_new",
       "config") {
  tr_job *j;
  return tr_job_new(&j, graph_new(), NULL, msg, n);
}

MISUSE(job_new_null_model, "tr_job_new(&j, g, {.model = NULL}, err, n)", TR_EINVAL, "model",
       NULL) {
  tr_job_config c = job_config();
  c.model = NULL;
  tr_job *j;
  return tr_job_new(&j, graph_new(), &c, msg, n);
}

MISUSE(job_new_bad_layout_no_err, "tr_job_new(&j, g, {.layout.replicas = -2}, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_job_config c = job_config();
  c.layout.replicas = -2;
  tr_job *j;
  return tr_job_new(&j, graph_new(), &c, NULL, 0);
}

MISUSE(job_new_bad_microbatches, "tr_job_new(&j, g, {.layout.microbatches = -1}, err, n)",
       TR_EINVAL, "micro-batches", "-1") {
  tr_job_config c = job_config();
  c.layout.microbatches = -1;
  tr_job *j;
  return tr_job_new(&j, graph_new(), &c, msg, n);
}

MISUSE(job_new_cuts_count, "tr_job_new(&j, g, {.stages = 2, .cuts = {1}, .ncuts = 3}, err, n)",
       TR_EINVAL, "layout.cuts", "3 boundaries") {
  static const int cuts[1] = {1};
  tr_job_config c = job_config();
  c.layout.stages = 2;
  c.layout.ncuts = 3;
  c.layout.cuts = cuts;
  tr_job *j;
  return tr_job_new(&j, graph_new(), &c, msg, n);
}

MISUSE(job_new_after_run, "tr_job_new(&j, g, &c, err, n) on a graph that ran", TR_ESTATE,
       "tr_job_new", "ran") {
  tr_job_config c = job_config();
  tr_job *j;
  return tr_job_new(&j, graph_ran(NULL), &c, msg, n);
}

MISUSE(job_check_null_config, "tr_job_check(NULL, &e)", TR_EINVAL, "tr_job_check", "config") {
  tr_error e;
  const int rc = tr_job_check(NULL, &e);
  return said(msg, n, rc, e.message);
}

MISUSE(job_check_null_error, "tr_job_check({.model = NULL}, NULL)", TR_EINVAL, NULL, NULL) {
  tr_job_config c = job_config();
  c.model = NULL;
  return tr_job_check(&c, NULL);
}

MISUSE(job_free_null, "tr_job_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_job_free(NULL);
  return 0;
}

MISUSE(job_getters_null, "tr_job_error/_config_of/_microbatch_samples(NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  return tr_job_error(NULL) && !tr_job_config_of(NULL) && !tr_job_microbatch_samples(NULL) ? 0 : 1;
}

MISUSE(job_add_loader_null, "tr_job_add_loader(NULL, 0, &a)", TR_EINVAL, "tr_job_add_loader",
       "j") {
  tr_actor *a;
  return tr_job_add_loader(NULL, 0, &a);
}

MISUSE(job_add_loader_replica, "tr_job_add_loader(j, 5, &a)", TR_EINVAL, "tr_job_add_loader",
       "replica") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  return said(msg, n, tr_job_add_loader(j, 5, &a), tr_job_error(j));
}

MISUSE(job_add_loader_null_out, "tr_job_add_loader(j, 0, NULL)", TR_EINVAL, "tr_job_add_loader",
       "out") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_add_loader(j, 0, NULL), tr_job_error(j));
}

MISUSE(job_add_stage_null_job, "tr_job_add_stage(NULL, 0, 0, dev, &a)", TR_EINVAL,
       "tr_job_add_stage", "j") {
  tr_actor *a;
  return tr_job_add_stage(NULL, 0, 0, device(), &a);
}

MISUSE(job_add_stage_null_device, "tr_job_add_stage(j, 0, 0, NULL, &a)", TR_EINVAL,
       "tr_job_add_stage", "dev") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  return said(msg, n, tr_job_add_stage(j, 0, 0, NULL, &a), tr_job_error(j));
}

MISUSE(job_add_stage_bad_stage, "tr_job_add_stage(j, 0, 3, dev, &a)", TR_EINVAL,
       "tr_job_add_stage", "stage") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  return said(msg, n, tr_job_add_stage(j, 0, 3, device(), &a), tr_job_error(j));
}

MISUSE(job_add_stage_bad_replica, "tr_job_add_stage(j, -1, 0, dev, &a)", TR_EINVAL,
       "tr_job_add_stage", "replica") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  return said(msg, n, tr_job_add_stage(j, -1, 0, device(), &a), tr_job_error(j));
}

MISUSE(job_add_stage_null_out, "tr_job_add_stage(j, 0, 0, dev, NULL)", TR_EINVAL,
       "tr_job_add_stage", "out") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_add_stage(j, 0, 0, device(), NULL), tr_job_error(j));
}

MISUSE(job_add_stage_twice, "tr_job_add_stage(j, 0, 0, dev, &a) twice", TR_EINVAL,
       "tr_job_add_stage", "already") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  if (tr_job_add_stage(j, 0, 0, device(), &a)) return 1;
  return said(msg, n, tr_job_add_stage(j, 0, 0, device(), &a), tr_job_error(j));
}

MISUSE(job_add_stages_null, "tr_job_add_stages(j, NULL, NULL)", TR_EINVAL, "tr_job_add_stages",
       "devs") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_add_stages(j, NULL, NULL), tr_job_error(j));
}

MISUSE(job_add_coordinator_null, "tr_job_add_coordinator(NULL, &a)", TR_EINVAL,
       "tr_job_add_coordinator", "j") {
  tr_actor *a;
  return tr_job_add_coordinator(NULL, &a);
}

MISUSE(job_add_coordinator_null_out, "tr_job_add_coordinator(j, NULL)", TR_EINVAL,
       "tr_job_add_coordinator", "out") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_add_coordinator(j, NULL), tr_job_error(j));
}

MISUSE(job_add_coordinator_twice, "tr_job_add_coordinator(j, &a) twice", TR_EINVAL,
       "tr_job_add_coordinator", "already") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  if (tr_job_add_coordinator(j, &a)) return 1;
  return said(msg, n, tr_job_add_coordinator(j, &a), tr_job_error(j));
}

MISUSE(job_add_server_sync, "tr_job_add_server(j, dev, &a) of a synchronous job", TR_EINVAL,
       "tr_job_add_server", "async") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  return said(msg, n, tr_job_add_server(j, device(), &a), tr_job_error(j));
}

MISUSE(job_add_worker_null, "tr_job_add_worker(NULL, 0, dev, &a)", TR_EINVAL,
       "tr_job_add_worker", "j") {
  tr_actor *a;
  return tr_job_add_worker(NULL, 0, device(), &a);
}

MISUSE(job_feed_null, "tr_job_feed(j, NULL, NULL, NULL)", TR_EINVAL, "tr_job_", "NULL") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_feed(j, NULL, NULL, NULL), tr_job_error(j));
}

MISUSE(job_feed_null_job, "tr_job_feed(NULL, a, b, c)", TR_EINVAL, "tr_job_feed", "j") {
  return tr_job_feed(NULL, NULL, NULL, NULL);
}

MISUSE(job_chain_null, "tr_job_chain(j, NULL, NULL)", TR_EINVAL, "tr_job_chain", "from") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_chain(j, NULL, NULL), tr_job_error(j));
}

MISUSE(job_group_null, "tr_job_group(j, NULL, 2)", TR_EINVAL, "tr_job_group", "members") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_group(j, NULL, 2), tr_job_error(j));
}

MISUSE(job_group_negative, "tr_job_group(j, members, -1)", TR_EINVAL, "tr_job_group", "n") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  if (tr_job_add_stage(j, 0, 0, device(), &a)) return 1;
  return said(msg, n, tr_job_group(j, &a, -1), tr_job_error(j));
}

MISUSE(job_observe_null, "tr_job_observe(j, NULL, 1, &e)", TR_EINVAL, "tr_job_observe",
       "observer") {
  tr_job *j = job(graph_new());
  tr_actor *a;
  if (tr_job_add_coordinator(j, &a)) return 1;
  tr_edge *e;
  return said(msg, n, tr_job_observe(j, NULL, 1, &e), tr_job_error(j));
}

MISUSE(job_observe_every_zero, "tr_job_observe(j, obs, 0, &e)", TR_EINVAL, "tr_job_observe",
       "every") {
  tr_graph *g = graph_new();
  tr_job *j = job(g);
  tr_actor *a;
  if (tr_job_add_coordinator(j, &a)) return 1;
  tr_edge *e;
  return said(msg, n, tr_job_observe(j, actor_of(g, "obs"), 0, &e), tr_job_error(j));
}

MISUSE(job_snapshot_null, "tr_job_snapshot(j, NULL, 1)", TR_EINVAL, "tr_job_snapshot", "report") {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_snapshot(j, NULL, 1), tr_job_error(j));
}

MISUSE(job_connect_nothing, "tr_job_connect_batches(j, a, b, 0, NULL)", TR_EINVAL,
       "tr_job_connect_batches", "what") {
  tr_graph *g = graph_new();
  tr_job *j = job(g);
  return said(msg, n, tr_job_connect_batches(j, actor_of(g, "a"), actor_of(g, "b"), 0, NULL),
              tr_job_error(j));
}

MISUSE(job_serve_null, "tr_job_serve(j, NULL, NULL)", TR_EINVAL, "tr_job_serve", NULL) {
  tr_job *j = job(graph_new());
  return said(msg, n, tr_job_serve(j, NULL, NULL), tr_job_error(j));
}

MISUSE(job_plan_null, "tr_job_plan(NULL, err, n)", TR_EINVAL, "tr_job_plan", "j") {
  return tr_job_plan(NULL, msg, n);
}

MISUSE(job_plan_unwired_no_err, "tr_job_plan(j with a stage and nothing else, NULL, 0)",
       TR_EINVAL, NULL, NULL) {
  tr_job *j = job(graph_new());
  tr_actor *st;
  if (tr_job_add_stage(j, 0, 0, device(), &st)) return 1;
  return tr_job_plan(j, NULL, 0);
}

MISUSE(job_add_stage_after_plan, "tr_job_add_stage(j, ...) after tr_job_plan", TR_ESTATE,
       "tr_job_add_stage", "plan") {
  tr_graph *g = graph_new();
  tr_job *j = job(g);
  tr_actor *st, *l, *c;
  if (tr_job_add_stage(j, 0, 0, device(), &st) || tr_job_add_loader(j, 0, &l) ||
      tr_job_feed(j, l, st, st) || tr_job_add_coordinator(j, &c) || tr_job_plan(j, NULL, 0))
    return 1;
  tr_actor *again;
  return said(msg, n, tr_job_add_stage(j, 0, 0, device(), &again), tr_job_error(j));
}

MISUSE(job_print_plan_null, "tr_job_print_plan(NULL, f), (j, NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_job_print_plan(NULL, stdout);
  tr_job_print_plan(job(graph_new()), NULL);
  return 0;
}

MISUSE(job_result_null, "tr_job_result(NULL, &r), (j, NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_train_result r;
  tr_job_result(NULL, &r);
  tr_job_result(job(graph_new()), NULL);
  return 0;
}

MISUSE(job_result_before_run, "tr_job_result(j, &r) before the run", MISUSE_DEFINED, NULL, NULL) {
  tr_train_result r;
  tr_job_result(job(graph_new()), &r);
  return 0;
}

/* ---- protocol ------------------------------------------------------------------------------ */

MISUSE(batch_forward_null, "tr_batch_forward(NULL)", MISUSE_DEFINED, "tr_batch_forward", "b") {
  return tr_batch_forward(NULL) == NULL ? 0 : 1;
}

MISUSE(names_out_of_range, "tr_*_name(out of range)", MISUSE_DEFINED, NULL, NULL) {
  return tr_strategy_name((tr_strategy)99) && tr_nonfinite_policy_name((tr_nonfinite_policy)9) &&
                 tr_data_on_name((tr_data_on)-3) && tr_outer_name((tr_outer)77) &&
                 tr_allreduce_name((tr_allreduce)5) && tr_schedule_kind_name((tr_schedule_kind)9) &&
                 tr_action_kind_name((tr_action_kind)-1) && tr_graphs_name((tr_graphs)4) &&
                 tr_precision_name((tr_precision)8)
             ? 0
             : 1;
}

MISUSE(parse_null_name, "tr_strategy_parse(NULL, &s)", TR_EINVAL, NULL, NULL) {
  tr_strategy s;
  return tr_strategy_parse(NULL, &s);
}

MISUSE(parse_null_out, "tr_strategy_parse(\"dp\", NULL)", TR_EINVAL, "tr_strategy_parse", "out") {
  return tr_strategy_parse("dp", NULL);
}

MISUSE(parse_null_out_others, "tr_*_parse(name, NULL) of every enum", MISUSE_DEFINED, NULL, NULL) {
  const int rc[] = {tr_nonfinite_policy_parse("skip", NULL), tr_data_on_parse("host", NULL),
                    tr_outer_parse("average", NULL),         tr_allreduce_parse("peer", NULL),
                    tr_schedule_kind_parse("gpipe", NULL),   tr_graphs_parse("on", NULL),
                    tr_precision_parse("bf16", NULL),        tr_dtype_parse("F32", NULL),
                    tr_optim_kind_parse("sgd", NULL),        tr_loss_kind_parse("mse", NULL)};
  for (size_t i = 0; i < sizeof rc / sizeof *rc; i++)
    if (rc[i] != TR_EINVAL) return 1;
  return 0;
}
