/* snapshot_ranks.c — the parameters of a running job across two ranks (tr_job_snapshot):
 *
 *   mpirun -np 2 snapshot_ranks pipeline DIR
 *                     a pipeline of simplenet, a stage per rank (tr_train_run,
 *                     snapshot_every 5, checkpoint every 5 into DIR): the observer on rank 0
 *                     gets the parameters of steps 5, 10, 15, ... and the last, and each one
 *                     that finds its step's checkpoint on disk (the last always does) equals
 *                     it tensor for tensor, bit for bit: the stage of rank 1 sent its parts
 *                     at the snapshots' steps too
 *   mpirun -np 2 snapshot_ranks refused
 *                     an observer of the parameters on rank 1 (the coordinator is on rank 0)
 *                     is refused at wiring time, naming both ranks and the rule
 *
 * Exit status 0 when every check holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "troupe.h"
#include "tr_world.h"

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "snapshot_ranks: %s:%d: %s does not hold\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

enum { STEPS = 23, EVERY = 5 };

typedef struct watcher {
  const char *ckpt;
  int with_params, compared;
  bool last_compared;
} watcher;

static void watch(void *arg, const tr_report_msg *r) {
  watcher *w = arg;
  CHECK((r->params != NULL) == (r->last || r->step % EVERY == 0));
  if (r->params == NULL) return;
  w->with_params++;
  tr_checkpoint *file;
  char err[512];
  uint64_t step;
  if (tr_checkpoint_open(&file, w->ckpt, err, sizeof err)) {
    fprintf(stderr, "snapshot_ranks: %s\n", err);
    exit(1);
  }
  CHECK(tr_checkpoint_meta_u64(file, "step", &step) == 0 && (int64_t)step >= r->step);
  if ((int64_t)step == r->step) { /* not overwritten by a later one yet */
    CHECK(tr_checkpoint_count(file) == tr_checkpoint_count(r->params));
    for (size_t i = 0; i < tr_checkpoint_count(file); i++) {
      const tr_checkpoint_tensor *a = tr_checkpoint_tensor_at(file, i);
      const tr_checkpoint_tensor *b = tr_checkpoint_find(r->params, a->name);
      CHECK(b != NULL && b->nbytes == a->nbytes && memcmp(a->data, b->data, a->nbytes) == 0);
    }
    w->compared++;
    w->last_compared |= r->last != 0;
  }
  tr_checkpoint_close(file);
}

static int pipeline(tr_world *world, const char *dir) {
  char ckpt[512], err[1024];
  mkdir(dir, 0777); /* every rank: the same path (the ranks compare it); it may be there */
  snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", dir);
  watcher w = {.ckpt = ckpt};
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.strategy = TR_STRATEGY_PIPELINE;
  o.devices = "host:1";
  o.world = world;
  o.steps = STEPS;
  o.job.checkpoint.path = ckpt;
  o.job.checkpoint.every = EVERY;
  o.observe = watch; /* rank 0's is the one called */
  o.observe_arg = &w;
  o.snapshot_every = EVERY;
  tr_train_result r;
  if (tr_train_run(&o, &r, err, sizeof err)) {
    fprintf(stderr, "snapshot_ranks: %s\n", err);
    return 1;
  }
  if (tr_world_rank(world) == 0) {
    CHECK(w.with_params == STEPS / EVERY + 1);
    CHECK(w.last_compared);
  }
  return 0;
}

static int ignore(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}

static int refused(tr_world *world) {
  char err[1024];
  tr_model *model;
  tr_device_list *devs;
  tr_data *data;
  tr_graph *g;
  tr_job *j;
  CHECK(tr_model_simplenet(&model) == 0);
  CHECK(tr_world_devices(world, "host:1", &devs, err, sizeof err) == 0);
  CHECK(tr_data_open_for(&data, model, 1, NULL, NULL, err, sizeof err) == 0);
  CHECK(tr_graph_new(&g, NULL) == 0 && tr_graph_set_world(g, world) == 0);
  tr_job_config c = tr_job_defaults();
  c.model = model;
  c.data = data;
  c.layout.stages = 2;
  CHECK(tr_job_new(&j, g, &c, err, sizeof err) == 0);
  tr_actor *coord, *obs;
  static const tr_behaviour b = {.name = "observer", .receive = ignore};
  CHECK(tr_job_add_coordinator(j, &coord) == 0);
  CHECK(tr_graph_add_on(g, 1, &(tr_actor_config){.name = "observer", .kind = TR_ACTOR_LOOP,
                                                  .behaviour = &b},
                        &obs) == 0);
  tr_edge *in;
  CHECK(tr_job_observe(j, obs, 1, &in) == 0);
  CHECK(tr_job_snapshot(j, in, 4) == TR_EINVAL);
  const char *want = "tr_job_snapshot: the observer lives on rank 1, the coordinator on rank 0";
  if (!strstr(tr_job_error(j), want)) {
    fprintf(stderr, "snapshot_ranks: tr_job_error says '%s', not '%s'\n", tr_job_error(j), want);
    return 1;
  }
  if (tr_world_rank(world) == 0) printf("refused: %s\n", tr_job_error(j));
  tr_graph_free(g);
  tr_job_free(j);
  tr_data_close(data);
  tr_device_list_close(devs);
  tr_model_free(model);
  return 0;
}

int main(int argc, char **argv) {
  char err[1024];
  tr_world *world;
  if (argc < 2 || tr_world_open(&world, err, sizeof err)) {
    fprintf(stderr, "usage: mpirun -np 2 snapshot_ranks pipeline DIR | refused\n");
    return 2;
  }
  CHECK(tr_world_size(world) == 2);
  const int rc = !strcmp(argv[1], "pipeline") && argc > 2 ? pipeline(world, argv[2])
                 : !strcmp(argv[1], "refused")           ? refused(world)
                                                         : 2;
  tr_world_close(world);
  return rc;
}
