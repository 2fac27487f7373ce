/* plan.c — the stages' ports, checked as a whole and handed over when the graph runs. */
#include <stdio.h>
#include <stdlib.h>

#include "clipnorm.h"
#include "evaluate.h"
#include "group.h"
#include "plan.h"
#include "tensor_group.h"
#include "worker.h"

int tr__plan_open(tr__plan *p, tr__run *run, int n) {
  *p = (tr__plan){.run = run, .n = n};
  p->st = calloc((size_t)n, sizeof *p->st);
  p->links = calloc((size_t)n, sizeof *p->links);   /* a link per stage at most */
  p->groups = calloc((size_t)n, sizeof *p->groups); /* and a group */
  p->chained = calloc((size_t)(run->c.layout.replicas * tr__members(run)), sizeof *p->chained);
  if (tr__members(run) > 1)
    p->tensor = calloc((size_t)(run->c.layout.replicas * run->c.layout.stages), sizeof *p->tensor);
  return p->st && p->links && p->groups && p->chained && (p->tensor || tr__members(run) == 1)
             ? 0 : TR_ENOMEM;
}

int tr__plan_add_link(tr__plan *p, const tr__plan_link *l) {
  if (p->nlinks == p->n) return TR_EINVAL;
  p->links[p->nlinks++] = *l;
  p->chained[l->from / p->run->c.layout.stages]++; /* the chain's */
  return 0;
}

int tr__plan_add_group(tr__plan *p, const tr__plan_group *g) {
  if (p->ngroups == p->n) return TR_EINVAL;
  p->groups[p->ngroups++] = *g;
  p->grouped++;
  return 0;
}

bool tr__plan_here(const tr__plan *p, int i) {
  const tr_actor *a = p->st[i].actor;
  return a && tr_graph_actor_rank(p->run->g, a) == tr_graph_rank(p->run->g);
}

/* What stage i lacks, or NULL: the edges its chunks need (chunk k of stage s is piece
 * k × stages + s), a coordinator, and its policy's parts. */
static const char *lacks(const tr__plan *p, int i) {
  const tr__run *run = p->run;
  const tr__stage_plan *s = &p->st[i];
  const tr_job_config *c = &run->c;
  const int P = c->layout.stages, stage = i % P, pieces = tr__pieces(run);
  const bool first = stage == 0, last = (c->layout.chunks - 1) * P + stage == pieces - 1;
  const bool middle_in = c->layout.chunks > 1 || stage > 0;
  const bool middle_out = c->layout.chunks > 1 || stage < P - 1;
  unsigned what = 0;
  const char *missing;
  for (int k = 0; k < s->ports.nin; k++) what |= s->ports.in[k].what;
  if (!s->ports.report) return "a coordinator (tr_job_add_coordinator)";
  if (first && !(what & TR_BATCH_INPUTS)) return "an edge of inputs";
  if (last && !(what & TR_BATCH_TARGETS)) return "an edge of targets";
  if (middle_in && !s->ports.act_in.edge) return "activations from stage s-1";
  if (middle_out && !s->ports.act_out.edge) return "a chain to stage s+1";
  const tr__policy_row *row = tr__policy_find(c->step_policy, c);
  if (row == NULL) return "a step policy (tr_job_config.step_policy names none)";
  if (row->lacks && (missing = row->lacks(c, &s->parts))) return missing;
  return NULL;
}

/* The links, then what each stage of this rank lacks. */
static int check(tr__plan *p, char *err, size_t n) {
  int rc = tr__plan_links(p);
  if (rc) { /* a part that failed said why in p->error (err may be it) */
    char why[sizeof p->error];
    snprintf(why, sizeof why, "%s", p->error[0] ? p->error : tr_strerror(rc));
    return tr_errorf(err, n, rc, "planning the links between the stages: %s", why);
  }
  const int P = p->run->c.layout.stages, T = tr__members(p->run);
  for (int i = 0; i < p->n; i++) {
    const char *missing = tr__plan_here(p, i) ? lacks(p, i) : NULL;
    if (missing)
      return tr_errorf(err, n, TR_EINVAL, "stage %d of replica %d ('%s') is not wired: it "
                       "lacks %s", i % P, i / P / T, tr_actor_name(p->st[i].actor), missing);
  }
  return 0;
}

int tr__plan_check(tr__plan *p, char *err, size_t n) {
  if (!p->planned) { /* once: the links are made once, whatever the check finds */
    p->planned = true;
    p->status = check(p, p->error, sizeof p->error);
  }
  if (p->status) snprintf(err, n, "%s", p->error);
  return p->status;
}

int tr__plan_wire(tr__plan *p, char *err, size_t n) {
  const int P = p->run->c.layout.stages, T = tr__members(p->run);
  int rc = tr__plan_check(p, err, n);
  for (int i = 0; i < p->n && rc == 0; i++) {
    tr__stage_plan *s = &p->st[i];
    if (!tr__plan_here(p, i) || s->wired) continue;
    /* the strategy is the policy the plan gives the stage: the stage never asks */
    const tr_job_config *c = &p->run->c;
    rc = tr__policy_find(c->step_policy, c)->make(&s->ports.policy, &s->parts);
    if (rc)
      return tr_errorf(err, n, rc, "wiring stage %d of replica %d: out of memory", i % P,
                       i / P / T);
    if (p->tensor) /* its group's comm, member t's */
      s->ports.tensor.comm = p->tensor[i / P / T * P + i % P].comms[s->ports.tensor.member];
    tr__stage_wire(tr_actor_state(s->actor), &s->ports);
    s->wired = true;
  }
  return rc;
}

/* An edge seen from one of its ends: the actor at the other end, its credits, its carrier. */
static void print_edge(FILE *f, const tr__plan *p, const char *name, const tr_edge *e,
                       bool out, const tr_comm *nccl) {
  if (e == NULL) return;
  tr_graph *g = p->run->g;
  const tr_actor *other = out ? tr_edge_to(e) : tr_edge_from(e);
  const bool across = tr_graph_actor_rank(g, tr_edge_from(e)) != tr_graph_actor_rank(g, tr_edge_to(e));
  fprintf(f, "\n      %-7s %s '%s' (%d credits%s)", name, out ? "->" : "<-", tr_actor_name(other),
          tr_edge_credits(e), !across ? "" : nccl ? ", between processes by NCCL"
                                                  : ", between processes by MPI");
}

void tr__plan_print(const tr__plan *p, FILE *f) {
  const tr_job_config *c = &p->run->c;
  char tensor[48] = "";
  if (tr__members(p->run) > 1)
    snprintf(tensor, sizeof tensor, " x %d tensor member(s)", tr__members(p->run));
  fprintf(f, "plan: %s of %s, %d replica(s) x %d stage(s)%s x %d chunk(s), %d micro-batch(es) a "
          "step under %s%s\n", p->run->strategy, tr_model_name(c->model), c->layout.replicas,
          c->layout.stages, tensor, c->layout.chunks, c->layout.microbatches,
          tr_schedule_kind_name(c->layout.schedule), p->planned ? "" : " (links not planned yet)");
  if (tr__members(p->run) > 1) /* the tensor groups (tensor_group.h) */
    fprintf(f, "  tensor groups: %d members each (one per replica and stage), %s\n",
            tr__members(p->run), p->run->member_models
                                     ? "each member holding its part of the split layers"
                                     : "each member holding the model whole");
  if (c->local.sync_every > 0) /* local SGD (policy_local.c) */
    fprintf(f, "  local SGD: the replicas' parameters %s every %d steps, after %d steps of dp\n",
            c->local.outer == TR_OUTER_NESTEROV ? "put through DiLoCo's outer Nesterov step"
                                                : "averaged",
            c->local.sync_every, c->local.warmup_sync);
  if (c->eval.data) { /* on the batch edges, as the loader sends them (evaluate.h) */
    char every[64] = "";
    if (c->eval.every > 0)
      snprintf(every, sizeof every, "after every %lld steps and ", (long long)c->eval.every);
    fprintf(f, "  held-out evaluation: %lld samples of '%s' %sat the end, forward on the batch "
            "edges (replica 0: %d micro-batch(es))\n", (long long)c->eval.samples,
            tr_data_name(c->eval.data), every, tr__eval_microbatches(p->run, 0));
  }
  for (int i = 0; i < p->n; i++) {
    const tr__stage_plan *s = &p->st[i];
    if (s->actor == NULL) continue;
    const tr__stage_ports *q = &s->ports;
    const tr_device *dev = tr__stage_device(tr_actor_state(s->actor));
    const tr__policy_row *row = tr__policy_find(c->step_policy, c);
    fprintf(f, "  stage '%s' on %s (rank %d), policy %s", tr_actor_name(s->actor),
            tr_device_name(dev), tr_graph_actor_rank(p->run->g, s->actor), row ? row->name : "?");
    const tr__policy_parts *pp = &s->parts;
    char tensor[48] = "";
    const char *parts[4];
    int np = 0;
    if (tr__members(p->run) > 1) { /* its place in its tensor group (tensor_group.h) */
      snprintf(tensor, sizeof tensor, "member %d of a tensor group", q->tensor.member);
      parts[np++] = tensor;
    }
    if (pp->group) parts[np++] = "a replica group";
    if (pp->clip) parts[np++] = "the norm exchange";
    if (pp->worker) parts[np++] = "pushes to the server";
    for (int k = 0; k < np; k++) fprintf(f, "%s%s", k ? ", " : " (", parts[k]);
    if (np) fputc(')', f);
    for (int k = 0; k < q->nin; k++)
      print_edge(f, p, q->in[k].what == TR_BATCH_TARGETS ? "targets"
                       : q->in[k].what == TR_BATCH_INPUTS ? "inputs" : "batches",
                 q->in[k].edge, false, NULL);
    print_edge(f, p, "act", q->act_in.edge, false, q->act_in.nccl);
    print_edge(f, p, "act", q->act_out.edge, true, q->act_out.nccl);
    print_edge(f, p, "grad", q->grad_in.edge, false, q->grad_in.nccl);
    print_edge(f, p, "grad", q->grad_out.edge, true, q->grad_out.nccl);
    print_edge(f, p, "report", q->report, true, NULL);
    fputc('\n', f);
  }
}

void tr__plan_free(tr__plan *p) {
  for (int i = 0; p->st && i < p->n; i++) {
    tr__stage_plan *s = &p->st[i];
    if (s->wired) continue;
    tr__group_free(s->parts.group);
    tr__clip_free(s->parts.clip);
    tr__worker_free(s->parts.worker);
    tr__tensor_port *ports[] = {&s->ports.act_out, &s->ports.act_in, &s->ports.grad_out,
                                &s->ports.grad_in};
    for (int k = 0; k < 4; k++) tr_comm_abort(ports[k]->nccl); /* the other end may never come */
  }
  free(p->st);
  free(p->links);
  free(p->groups);
  free(p->chained);
  for (int k = 0; p->tensor && k < p->run->c.layout.replicas * p->run->c.layout.stages; k++)
    tr__tensor_group_close(&p->tensor[k]);
  free(p->tensor);
  p->tensor = NULL;
  p->st = NULL;
}
