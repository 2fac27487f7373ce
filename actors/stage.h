/* stage.h — the stage runner: one device, a piece (or, interleaved, several chunks) of the
 * model, and every step the action list its schedule gives it (tr_schedule.h). It
 * interprets the actions and nothing else: what the strategy does at a step is its step
 * policy's (step_policy.h), what carries its tensors is each edge's (transfer.h), what it
 * tells the coordinator is its reporter's (reporter.h).
 *
 * The job's plan makes it in two moves: tr_job_add_stage reserves the actor in the graph
 * (its place: replica, stage, device), and when the graph runs, the plan hands it its
 * complete ports (tr__stage_wire), once.
 */
#ifndef TR_STAGE_ACTOR_H
#define TR_STAGE_ACTOR_H

#include "step_policy.h"
#include "tensor_group.h"

/* A batch edge into the stage, and what it brings (TR_BATCH_INPUTS | TR_BATCH_TARGETS). */
typedef struct tr__stage_input {
  tr_edge *edge;
  unsigned what;
} tr__stage_input;

/* One end of a tensor edge: the edge, and the NCCL communicator that carries its tensors
 * between two processes (NULL: the edge's messages carry them). */
typedef struct tr__tensor_port {
  tr_edge *edge;
  tr_comm *nccl;
} tr__tensor_port;

typedef struct tr__stage_ports {
  tr__stage_input in[2];
  int nin;
  tr__tensor_port act_out, grad_in;  /* to and from the next stage (or the next chunk) */
  tr__tensor_port act_in, grad_out;  /* from and to the previous one */
  tr_edge *report;                   /* to the coordinator */
  tr__policy policy;                 /* what the strategy does at the step */
  tr__tensor_member tensor;          /* its place in its tensor group (tensor_group.h) */
} tr__stage_ports;

extern const tr_behaviour tr__stage_behaviour;

void *tr__stage_new(const tr__run *run, int replica, int stage, tr_device *dev);
/* The stage takes the ports, the policy and the communicators included. */
void tr__stage_wire(void *stage, const tr__stage_ports *ports);
tr_device *tr__stage_device(const void *stage);

/* For a worker that left its run (elastic.c, tr_async_config.elastic), once its stage has
 * failed and runs no more: the policy it was wired with; a batch that comes, held as the
 * stage holds batches; every batch it holds given back (its device failed: those whose
 * copies may still be running too), so that its loader can end — true once the loader's end
 * (a batch of step -1) has come, given back now or taken before. */
const tr__policy *tr__stage_policy(const void *stage);
int tr__stage_hold_batch(void *stage, const tr_batch_msg *m);
bool tr__stage_give_back_batches(void *stage);

#endif
