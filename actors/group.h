/* group.h — the replica group: the members holding the same stage of every data-parallel
 * replica sum their gradients bucket by bucket while backward still runs.
 *
 * During the last micro-batch's backward of a step, each bucket of layers (about a MiB of
 * gradients, last layers first) is announced to every member once final. The member that
 * owns chunk c of a bucket sums chunk c over all members, in member order (the same bits on
 * every member, whatever the timing), on its own stream, writes the sum into every member's
 * gradients and announces that. A member updates once every chunk of every bucket has
 * been announced (tr__group_wait).
 *
 * Sharded (ZeRO stage 1, tr_stage_shard): member c's chunk of a bucket is the part of it in
 * member c's shard, and its sum stays there (a reduce-scatter): member c alone updates
 * those parameters. Then it writes its updated shard into every member's parameters and
 * announces that (tr__group_gather, an all-gather); a member goes on to the next step once
 * every member's shard is in (tr__group_gathered). Through NCCL (tr__group_use_nccl), no
 * bucket messages go between the members: each queues NCCL's sum of each bucket on its own
 * stream as soon as the bucket is final here (ncclAllReduce; sharded, ncclReduce of each
 * member's part to it and ncclBroadcast of the updated shards), and NCCL meets the members'
 * calls on the GPUs; the sums are then NCCL's order, not member order. Across processes, the members of each process do that
 * among themselves, and then their leader sums each bucket with the other processes'
 * through the transport (transport.h) and writes the total to them; they wait for its word.
 * Announcements travel on edges between every two members,
 * whose credits the protocol bounds: bucket messages of the next step may arrive before
 * this one is over, never those of the step after (they need this member's chunks).
 *
 * The stage actor drives it from its own thread:
 *
 *   tr__group_open(g, self, st, &busy);           // once, at start
 *   tr_stage_on_grad_ready(st, tr__group_grad_ready, g);
 *   tr__group_arm(g, step);                       // before the step's last backward
 *   tr_stage_backward(st, slot, &dinput);
 *   rc = tr__group_disarm(g);                     // every bucket announced
 *   ...  tr__group_receive(g, msg) for each tr__bucket_msg ...
 *   rc = tr__group_wait(g, step, stream);         // 1 once summed (stream waits), 0: not yet
 *   tr_stage_step(st, ...);                       // sharded: then
 *   rc = tr__group_gather(g, step);               // this member's shard to every member
 *   rc = tr__group_gathered(g, step, stream);     // 1 once every shard is in, 0: not yet
 */
#ifndef TR_GROUP_H
#define TR_GROUP_H

#include <stdbool.h>

#include "job_impl.h"
#include "metrics.h"

typedef struct tr__group tr__group;

typedef enum tr__bucket_news {
  TR__BUCKET_READY,    /* the sender's bucket is final */
  TR__BUCKET_REDUCED,  /* the sender's chunk of it is summed */
  TR__BUCKET_FINAL,    /* across ranks: the leader has the sum over every rank written */
  TR__BUCKET_GATHERED, /* sharded: the sender's updated shard is in every member's parameters
                          (bucket -1) */
  TR__BUCKET_LEFT      /* the sender left: it takes part in no step from `step` on (bucket -1;
                          tr__group_leave) */
} tr__bucket_news;

typedef struct tr__bucket_msg {
  tr_msg hdr;
  int bucket, member;
  tr__bucket_news news;
  int64_t step;
  tr_event *ready;
  float *grads, *params; /* the sender's gradient and parameter allocations */
  int members;           /* FINAL: the members across ranks that took part (0: all) */
} tr__bucket_msg;
extern const tr_msgtype tr__bucket_type;

/* Buckets of layers [first, end) of m: what the edges' credits are sized by. */
int tr__group_buckets(const tr_model *m, int first, int end);
/* Those buckets, last layers first (tr__group_buckets of them): each one's lowest layer, whose
 * backward makes it final, and its floats. 0 or TR_ENOMEM. */
int tr__group_bucket_plan(const tr_model *m, int first, int end, int *low_layer,
                          size_t *floats);
/* Credits of an edge between two members holding `buckets` buckets: two steps of a ready
 * and a reduced bucket each, and of a gathered shard. */
static inline int tr__group_credits(int buckets) { return 4 * buckets + 2; }

/* Member `me` of `n`; out[i], in[i]: the edges to and from member i (NULL for me); devs[i]:
 * member i's device. Sharded: each member's stage holds shard `me` of `n` (tr_stage_shard). */
tr__group *tr__group_new(int n, int me, tr_edge *const *out, tr_edge *const *in,
                         tr_device *const *devs, bool sharded);
/* What the member's stage must be opened with: shard me of n, or the whole (unsharded). */
tr_stage_shard tr__group_shard(const tr__group *g);
int tr__group_open(tr__group *g, tr_actor *self, tr_stage *st, tr__busy *busy);
void tr__group_arm(tr__group *g, int64_t step);
int tr__group_disarm(tr__group *g);
void tr__group_grad_ready(void *group, tr_stage *st, int layer);
/* A tr__bucket_msg, or (the leader of a group across ranks) a tr__summed_msg. */
int tr__group_receive(tr__group *g, const tr_msg *m);
/* The group spans `ranks` ranks (transport.h): the members given to tr__group_new are its
 * part in this process of its `whole` members, number `group` with the transport; the
 * leader (member 0) sums through it. Where its sums outlive a rank (collective.h), each says
 * how many members took part: tr__group_gone counts those of a rank that was lost. */
void tr__group_span_ranks(tr__group *g, int group, int ranks, int whole, tr_edge *sum,
                          tr_edge *summed);
/* NCCL (tr_job.h's tr_allreduce; made where the group is wired): `inside`, this member's
 * communicator over the group's members in this process (its rank, its member number), or
 * NULL: peer; `across`, the leader's over the group's ranks, or NULL: the transport's MPI.
 * The group owns them and closes them on the member's thread. `error`: opening them
 * failed (allreduce nccl was asked): the member fails at open, saying this. */
void tr__group_use_nccl(tr__group *g, tr_comm *inside, tr_comm *across, const char *error);
int tr__group_wait(tr__group *g, int64_t step, tr_stream *s);
/* Sharded: the update of this member's shard is issued on the stage's stream; it goes into
 * every other member's parameters and they are told. Unsharded: nothing. */
int tr__group_gather(tr__group *g, int64_t step);
/* 1 once every member's updated shard is in this member's parameters (s waits for the
 * copies), 0: not yet. Unsharded: 1. */
int tr__group_gathered(tr__group *g, int64_t step, tr_stream *s);
/* The bytes this member sent over the run (the run's figures, run_metrics.h), counted as the
 * algorithm sends them from it. For each bucket of B elements of which it owns a chunk of c
 * (group.c's own_chunk; sharded: the part in its shard): its B − c elements the owners of
 * the other chunks read and sum, then (unsharded) the sum of its chunk written into the
 * n − 1 others; sharded, its updated shard of S elements written into the n − 1 others
 * once per update. Over the members that is 2 (n − 1) B a bucket, a ring all-reduce's
 * volume; through NCCL it is counted alike (ncclAllReduce's ring sends 2 (n − 1) / n of
 * the bucket from each member, ncclReduce and ncclBroadcast as much, up to the chunks'
 * rounding). Across ranks the leader adds the bucket's sum with the other ranks: through
 * NCCL's ring 2 (k − 1) / k of the bucket for k ranks, through the transport's MPI the
 * bucket it hands over once (MPI's own algorithm is not seen here), and the total it
 * writes into the n − 1 members here. */
int64_t tr__group_sent_bytes(const tr__group *g);
/* ---- a member that leaves (local SGD's elastic replicas, policy_local.c) ----------------
 * A member whose stage failed leaves the group: it sends a leave on its edge to every
 * member, behind the bucket messages it sent before (the edges are FIFO), saying the first
 * step it takes no part in. A member waiting for a step's buckets gets the leave in their
 * place and sums the others': each step is summed over the members taking part in it, in
 * member order, their chunks cut among them alone — the same members, and the same bits, on
 * every one. A member that already announced a bucket of a step whose sums it has not had
 * cannot leave (the others may have summed part of it): tr__group_leave refuses, saying so
 * in `why`, as it does for a group through NCCL, across processes, or sharded. dp never
 * leaves: its groups behave as before.
 *
 *   rc = tr__group_leave(g, why, sizeof why);    // 0: gone; then, for every message after:
 *   tr__group_left_receive(g, msg);              // its credit back, nothing else
 *   k = n - tr__group_gone(g, step);             // the members taking part in step (n: the
 *                                                // group's, across processes too, where a
 *                                                // rank that died takes part in none) */
int tr__group_leave(tr__group *g, char *why, size_t n);
void tr__group_left_receive(tr__group *g, const tr_msg *msg);
int tr__group_gone(const tr__group *g, int64_t step); /* NULL: 0 */

/* The group's stream has run everything (the end of the run). */
int tr__group_sync(tr__group *g);
/* A failed run: its NCCL communicators aborted, so that no stream waits for ever on a sum
 * that a member which is gone never joins (before any stream is synchronised). */
void tr__group_abort(tr__group *g);
/* Device resources, on the stage's thread; then the rest. */
void tr__group_close(tr__group *g);
void tr__group_free(tr__group *g);

#endif
