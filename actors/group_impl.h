/* group_impl.h — the inside of a replica group (group.h), for its two files: group.c (the
 * sums) and group_leave.c (members that leave). */
#ifndef TR_GROUP_IMPL_H
#define TR_GROUP_IMPL_H

#include <stdint.h>

#include "group.h"

typedef struct bucket {
  size_t lo, hi;  /* elements of the stage's gradients */
  int low_layer;  /* final once this layer's backward is issued */
} bucket;

/* What the members tell each other, per step parity. */
typedef struct group_step {
  int *ready;          /* [bucket]: members whose bucket is final */
  tr_event **peer_ev;  /* [bucket × n]: their events */
  tr_event **reduced;  /* [bucket × n]: the owners' events, waited for before the update */
  int nreduced;
  int *reduced_n;      /* [bucket]: its chunks summed here (across ranks: then summed on) */
  tr_event **final_ev; /* [bucket]: across ranks, the leader's once the whole sum is written */
  int across;          /* across ranks: the members whose sums it holds (0: every member) */
  int nfinal, next_cross;
  tr_event **own_ready, **own_reduced, **own_final; /* [bucket]: this member's */
  /* sharded */
  tr_event *updated, *own_gathered; /* this member's: its update issued, its shard written */
  tr_event **gathered;              /* [member]: theirs */
  int ngathered;
} group_step;

struct tr__group {
  tr_actor *self;
  tr_stage *st;
  tr_device *dev;
  tr_stream *comm;
  tr__busy *busy;
  int n, me, nb, next_bucket;
  tr_edge **out, **in;    /* [n] */
  tr_device **devs;       /* [n] */
  float **grads;          /* [n]: their gradient allocations, as their messages say */
  float **params;         /* [n]: their parameter allocations, likewise */
  bucket *buckets;
  bool sharded;           /* ZeRO stage 1: member r updates shard r alone */
  size_t shard_lo, shard_hi; /* this member's, of the stage's elements */
  group_step gs[2];
  float *scratch; /* chunks staged from members this device cannot read directly */
  bool direct;    /* every member's memory is readable here */
  bool armed;     /* the step's last backward runs: buckets are announced */
  int64_t step;   /* the armed step */
  int hook_rc;    /* a failure inside tr__group_grad_ready */
  /* Across ranks: the members here are the group's part in this process; their leader
   * (member 0 here) sums each bucket with the other ranks' through the transport. */
  int cross;              /* the group's number with the transport; -1: every member is here */
  tr_edge *sum, *summed;  /* the leader's, to and from the transport */
  int ranks;              /* the processes the group spans */
  int whole;              /* its members in every process */
  float *host;            /* the leader's gradients staged for MPI (not host memory) */
  /* NCCL (tr__group_use_nccl): this member's communicator over the group's members in
   * this process (member order = rank), or the leader's over the ranks */
  tr_comm *nccl, *across;
  char nccl_error[256];   /* its opening failed (a forced allreduce nccl): the run fails */
  int64_t sent;           /* bytes this member sent (tr__group_sent_bytes) */
  /* Members that left (tr__group_leave): member m takes part in the steps below
   * left_at[m] (INT64_MAX: every step) */
  int64_t *left_at;       /* [n] */
  int64_t last_ready;     /* the last step this member announced a bucket of (-1: none) */
  bool mid;               /* it announced a bucket of that step, whose sums it still waits for */
  bool gone;              /* this member left */
};

/* The members that take part in step `step`, and this member's place among them. */
static inline int tr__group_members_in(const tr__group *g, int64_t step, int *place) {
  int k = 0;
  for (int r = 0; r < g->n; r++) {
    if (r == g->me && place) *place = k;
    k += step < g->left_at[r];
  }
  return k;
}

static inline bool tr__group_takes_part(const tr__group *g, int r, int64_t step) {
  return step < g->left_at[r];
}


/* group.c's, for group_leave.c: bucket b's chunk of this member summed over the members
 * taking part in `step`, the sum written into theirs and announced. */
int tr__group_reduce_chunk(tr__group *g, group_step *s, int64_t step, int b);
/* group_leave.c's, for group.c: member `m` left, taking part in no step from `from` on. */
int tr__group_left(tr__group *g, int m, int64_t from);

#endif
