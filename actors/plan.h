/* plan.h — the job's plan of its stages: what each one is wired to (its ports: batch edges,
 * tensor edges and their carriers, the report edge) and the parts of its step policy (its
 * replica group, its norm exchange, its server), as the wiring calls of tr_job.h record
 * them. When the graph runs, the plan is checked as a whole (each error names the stage
 * and what it lacks), each stage's policy is made, and each stage receives its complete
 * ports, once (tr__stage_wire). Nothing is handed to a stage before then, so the order of
 * the wiring calls does not matter.
 *
 *   tr__plan_open(&p, run, replicas × stages);
 *   p.st[i].ports.act_out.edge = e;  ...                 // tr_job_chain, tr_job_group, ...
 *   rc = tr__plan_wire(&p, err, n);                      // tr_graph_run, before it starts
 */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include <stdio.h>

#include "stage.h"

typedef struct tr__stage_plan {
  tr_actor *actor;        /* NULL: not added */
  tr__stage_ports ports;  /* the policy is made by tr__plan_wire from the parts below */
  tr__policy_parts parts;
  bool wired;             /* the stage owns its ports now */
} tr__stage_plan;

/* A link of a pipeline chain (tr_job_chain): its activation and gradient edges. */
typedef struct tr__plan_link {
  int from, to; /* stages (tr__device_index) */
  tr_edge *act, *grad;
} tr__plan_link;

/* A replica group (tr_job_group): its members, and whether it spans ranks. */
typedef struct tr__plan_group {
  int members[TR_TRAIN_MAX_DEVICES];
  int n;
  bool across;
} tr__plan_group;

typedef struct tr__plan {
  tr__run *run;
  tr__stage_plan *st; /* [tr__stage_index: (replica × T + member) × stages + stage] */
  int n;
  tr__tensor_group *tensor; /* [replica × stages + stage]: the tensor groups' comms, opened
                               by the pass (T > 1), closed with the plan; else NULL */
  tr__plan_link *links;
  int nlinks;
  tr__plan_group *groups;
  int ngroups;
  int *chained; /* [replica × T + member]: links of its chain */
  int grouped;  /* stages with a group */
  bool planned; /* the links are made and the plan checked (no more wiring) */
  int status;   /* the check's verdict, and its message */
  char error[512];
} tr__plan;

int tr__plan_open(tr__plan *p, tr__run *run, int n);
int tr__plan_add_link(tr__plan *p, const tr__plan_link *l);
int tr__plan_add_group(tr__plan *p, const tr__plan_group *g);
/* Whether stage i lives in this process. */
bool tr__plan_here(const tr__plan *p, int i);
/* The pass over what was recorded (plan_links.c): the norm exchange, the carriers of edges
 * between processes, the groups' communicators. Every rank, in the same order. */
int tr__plan_links(tr__plan *p);
/* The links, then every stage of this rank checked: 0, or the first problem in err. Once. */
int tr__plan_check(tr__plan *p, char *err, size_t n);
/* Checked (if it was not), then each stage of this rank wired. */
int tr__plan_wire(tr__plan *p, char *err, size_t n);
/* Each stage, its ports, their carriers and its policy's parts, a line each. */
void tr__plan_print(const tr__plan *p, FILE *f);
/* What was not handed to a stage. */
void tr__plan_free(tr__plan *p);

#endif
