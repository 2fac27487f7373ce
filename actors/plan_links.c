/* plan_links.c — the plan's one pass over what the wiring calls recorded, once the graph is
 * built and before it runs: the norm exchange between the stages that must agree on the
 * gradients' norm, what carries each pipeline edge between two processes (NCCL or MPI), and
 * the NCCL communicators of the replica groups. Every rank makes the same pass in the same
 * order (the NCCL ids go round every rank with tr_world_allgather), so the ends of an edge
 * or a group open their members together, or neither does.
 */
#include <stdlib.h>
#include <string.h>

#include "clipnorm.h"
#include "collective.h"
#include "graph_impl.h"
#include "group.h"
#include "plan.h"
#include "tensor_group.h"

static tr_device *device_of(const tr__plan *p, int i) {
  return tr__stage_device(tr_actor_state(p->st[i].actor));
}

/* Whether the stages exchange their gradients' norms: to clip by the global one, or to skip
 * a step whose norm is not finite on every stage alike. */
static bool agree_on_norms(const tr_job_config *c) {
  return c->optim.clip > 0 || c->on_nonfinite == TR_NONFINITE_SKIP;
}

/* Every two of the stages at[0, n) exchange gradient norms: the stages of one replica,
 * whose gradients are whole after the all-reduce; sharded (ZeRO), every stage of every
 * replica, each of which holds the sum of its shard alone. */
static int connect_norms(tr__plan *p, const int *at, int n) {
  tr_edge *(*e)[TR_TRAIN_MAX_DEVICES] = calloc((size_t)n, sizeof *e);
  if (e == NULL) return TR_ENOMEM;
  int rc = 0;
  for (int s = 0; s < n && rc == 0; s++)
    for (int t = 0; t < n && rc == 0; t++)
      if (s != t)
        rc = tr_graph_connect(p->run->g,
                              &(tr_edge_config){.from = p->st[at[s]].actor,
                                                .to = p->st[at[t]].actor,
                                                .type = &tr__norm_type, .name = "norm",
                                                .credits = TR__CLIP_CREDITS},
                              &e[s][t]);
  for (int s = 0; s < n && rc == 0; s++) {
    tr_edge *out[TR_TRAIN_MAX_DEVICES], *in[TR_TRAIN_MAX_DEVICES];
    for (int t = 0; t < n; t++) out[t] = e[s][t], in[t] = e[t][s];
    if (!(p->st[at[s]].parts.clip = tr__clip_new(n, s, out, in))) rc = TR_ENOMEM;
  }
  free(e);
  return rc;
}

/* Sharded, every stage of every replica once every stage is in a group; else the stages
 * of each replica whose chain is whole. Under tensor parallelism, whole members compute
 * alike: each member's stages agree among themselves (as if the others were not there);
 * split members hold parts of the gradients, so a replica's members agree together. */
static int plan_norms(tr__plan *p) {
  const tr__run *run = p->run;
  const tr_job_config *c = &run->c;
  const int R = c->layout.replicas, P = c->layout.stages, T = tr__members(run);
  const bool split = run->member_models && tr__tensor_split(run->member_models[0]);
  if (!agree_on_norms(c)) return 0;
  int at[TR_TRAIN_MAX_DEVICES], n, rc = 0;
  if (c->zero) {
    if (p->grouped != P * T) return 0;
    for (int t = 0; t < (split ? 1 : T) && rc == 0; t++) {
      n = 0;
      for (int i = 0; i < R * T * P; i++)
        if (split || i / P % T == t) at[n++] = i;
      rc = connect_norms(p, at, n);
    }
    return rc;
  }
  for (int q = 0; q < R * T && rc == 0; q += split ? T : 1) {
    bool whole = true;
    n = 0;
    for (int k = q; k < q + (split ? T : 1); k++) {
      whole &= p->chained[k] >= P - 1;
      for (int s = 0; s < P; s++) at[n++] = k * P + s;
    }
    if (whole && n > 1) rc = connect_norms(p, at, n);
  }
  return rc;
}

/* Each tensor group of this process (every member here): its comms, over its members'
 * devices. A group whose members live in several processes was refused as it was wired. */
static int tensor_groups(tr__plan *p) {
  const tr__run *run = p->run;
  const int R = run->c.layout.replicas, P = run->c.layout.stages, T = tr__members(run);
  for (int g = 0; p->tensor && g < R * P; g++) {
    tr_device *devs[TR_TRAIN_MAX_DEVICES];
    bool here = true;
    for (int t = 0; t < T; t++) {
      const int i = tr__stage_index(run, g / P, t, g % P);
      here &= tr__plan_here(p, i);
      devs[t] = here ? device_of(p, i) : NULL;
    }
    if (!here) continue;
    char why[256];
    const int rc = tr__tensor_group_open(&p->tensor[g], devs, T, why, sizeof why);
    if (rc) {
      snprintf(p->error, sizeof p->error, "tensor group of replica %d, stage %d: %s", g / P,
               g % P, why);
      return rc;
    }
  }
  return 0;
}

/* The end of edge e at stage i takes communicator c. */
static void give_comm(tr__plan *p, int i, const tr_edge *e, tr_comm *c) {
  tr__stage_ports *q = &p->st[i].ports;
  tr__tensor_port *ends[] = {&q->act_out, &q->act_in, &q->grad_out, &q->grad_in};
  for (int k = 0; k < 4; k++)
    if (ends[k]->edge == e) ends[k]->nccl = c;
}

/* What carries the tensors of edge `e` from stage `from` to stage `to` when they live on two
 * ranks (tr_edge_carrier_choose): NCCL, on a communicator of the two opened here, or the
 * transport over MPI. A choice that fails here (NCCL asked but impossible) was refused by
 * tr_train_run first; an opening that fails leaves the edge to MPI. */
static int carry(tr__plan *p, int from, int to, const tr_edge *e, const char *what) {
  tr__run *run = p->run;
  tr_graph *g = run->g;
  const int rf = tr_graph_actor_rank(g, p->st[from].actor), rt = tr_graph_actor_rank(g, p->st[to].actor);
  if (rf == rt) return 0;
  tr_device *dev[2] = {device_of(p, from), device_of(p, to)};
  const tr_device_info *in[2] = {tr_device_info_of(dev[0]), tr_device_info_of(dev[1])};
  tr_edge_carrier how = TR_EDGE_CARRIER_MPI;
  if (tr_edge_carrier_choose(run->c.allreduce, in[0], rf, in[1], rt, tr_comm_library() != NULL,
                             &how, NULL, 0))
    return TR_EINVAL;
  /* Whether the ranks go round for a communicator is decided on what every rank knows
   * alike: the devices and the option, as if every build had NCCL (each end's own build
   * then says yes or no in the round) */
  tr_edge_carrier able;
  tr_edge_carrier_choose(run->c.allreduce, in[0], rf, in[1], rt, true, &able, NULL, 0);
  if (able != TR_EDGE_CARRIER_NCCL) {
    run->edges_mpi++;
    return 0;
  }
  const int me = tr_graph_rank(g);
  char why[256] = "";
  tr__comm_word *all;
  const int rc = tr__dist_comm_round(tr__graph_world(g), rf,
                                     (me == rf || me == rt) && how == TR_EDGE_CARRIER_NCCL, &all,
                                     why, sizeof why);
  if (rc) return rc;
  const bool both = all[rf].yes && all[rt].yes;
  const tr_comm_id id = all[rf].id;
  free(all);
  tr_comm *c = NULL;
  if (both && (me == rf || me == rt) &&
      tr_comm_open_rank(dev[me == rt], &id, 2, me == rt, &c, why, sizeof why))
    c = NULL; /* the other end fails too (NCCL's init is collective) */
  if (why[0]) /* the edge still runs, over MPI: say why NCCL did not take it */
    fprintf(stderr, "troupe: the %s edge from %s to %s goes over MPI: %s\n", what,
            in[0]->name, in[1]->name, why);
  if (c) give_comm(p, me == rf ? from : to, e, c); /* the end on this rank owns it */
  if (both && !why[0]) run->edges_nccl++;
  else run->edges_mpi++;
  return 0;
}

static void member_infos(const tr__plan *p, const int *members, int n, tr_device **devs,
                         tr_device_info *infos) {
  for (int i = 0; i < n; i++) {
    devs[i] = device_of(p, members[i]);
    infos[i] = *tr_device_info_of(devs[i]);
  }
}

/* A group in one process: its members share an NCCL communicator where they may
 * (tr_allreduce_choose), opened here, on the thread that builds the graph. */
static int group_comm(tr__plan *p, const tr__plan_group *gr) {
  tr_device *devs[TR_TRAIN_MAX_DEVICES];
  tr_device_info infos[TR_TRAIN_MAX_DEVICES];
  member_infos(p, gr->members, gr->n, devs, infos);
  tr_allreduce how = TR_ALLREDUCE_PEER;
  if (tr_allreduce_choose(p->run->c.allreduce, infos, NULL, gr->n, tr_comm_library() != NULL,
                          &how, NULL, 0))
    return TR_EINVAL; /* tr_train_run says why, first */
  if (how != TR_ALLREDUCE_NCCL) return 0;
  char why[256] = "";
  tr_comm *comms[TR_TRAIN_MAX_DEVICES] = {NULL};
  if (tr_comm_open_all(devs, gr->n, comms, why, sizeof why)) /* each member fails at open */
    snprintf(why + strlen(why), sizeof why - strlen(why), " (allreduce peer sums without NCCL)");
  for (int a = 0; a < gr->n; a++)
    tr__group_use_nccl(p->st[gr->members[a]].parts.group, comms[a], NULL, why);
  p->run->nccl = true;
  return 0;
}

/* A group over several ranks: the leaders' communicator (each rank's member of lowest
 * index) through NCCL where they are GPUs and the build has it: an id made on the group's
 * first rank reaches the others over MPI (every rank takes part, in the same order), and
 * each rank holding members opens its leader's member. Else the transport's MPI sums. */
static int leaders_comm(tr__plan *p, const tr__plan_group *gr) {
  tr_graph *g = p->run->g;
  const int me = tr_graph_rank(g), size = tr_world_size(tr__graph_world(g));
  int ranks[TR_TRAIN_MAX_DEVICES], leaders[TR_TRAIN_MAX_DEVICES], nranks = 0;
  for (int rank = 0; rank < size; rank++)
    for (int i = 0; i < gr->n; i++)
      if (tr_graph_actor_rank(g, p->st[gr->members[i]].actor) == rank) {
        ranks[nranks] = rank;
        leaders[nranks++] = gr->members[i];
        break;
      }
  tr_device *devs[TR_TRAIN_MAX_DEVICES];
  tr_device_info infos[TR_TRAIN_MAX_DEVICES];
  member_infos(p, leaders, nranks, devs, infos);
  tr_allreduce how;
  if (tr_allreduce_choose(p->run->c.allreduce, infos, ranks, nranks, tr_comm_library() != NULL,
                          &how, NULL, 0) || how != TR_ALLREDUCE_NCCL)
    return 0;
  char why[256] = "";
  tr__comm_word *all;
  const int rc = tr__dist_comm_round(tr__graph_world(g), ranks[0], me == ranks[0], &all, why,
                                     sizeof why);
  if (rc == TR_ENOMEM) return rc;
  const tr__comm_word first = rc ? (tr__comm_word){0} : all[ranks[0]];
  free(all);
  tr_comm *c = NULL;
  int i = 0; /* this rank's place among the leaders (nranks: none) */
  while (i < nranks && ranks[i] != me) i++;
  const int mine = i < nranks ? leaders[i] : -1;
  if (rc || !first.yes) {
    if (!why[0])
      snprintf(why, sizeof why, "rank %d could not make an NCCL id%s", ranks[0],
               rc ? " (MPI failed)" : "");
  } else if (mine >= 0 && tr_comm_open_rank(devs[i], &first.id, nranks, i, &c, why, sizeof why)) {
    snprintf(why + strlen(why), sizeof why - strlen(why),
             " (allreduce peer sums across ranks over MPI)");
  }
  if (mine >= 0 && (c || why[0])) {
    tr__group_use_nccl(p->st[mine].parts.group, NULL, c, why);
    p->run->nccl |= c != NULL;
  } else {
    tr_comm_abort(c);
  }
  return 0;
}

int tr__plan_links(tr__plan *p) {
  int rc = plan_norms(p);
  if (rc == 0) rc = tensor_groups(p);
  for (int k = 0; k < p->nlinks && rc == 0; k++) {
    const tr__plan_link *l = &p->links[k];
    rc = carry(p, l->from, l->to, l->act, "act");
    if (rc == 0) rc = carry(p, l->to, l->from, l->grad, "grad");
  }
  for (int k = 0; k < p->ngroups && rc == 0; k++) {
    const tr__plan_group *gr = &p->groups[k];
    if (gr->across) rc = leaders_comm(p, gr);
    else if (gr->n > 1 && tr__plan_here(p, gr->members[0])) rc = group_comm(p, gr);
  }
  return rc;
}
