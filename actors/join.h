/* join.h — the workers that join a running job, in a world of one process (join.c): what the
 * job, the server and the coordinator say to each other about them.
 *
 * A worker that joins (tr_job_join_worker, tr_async_config.join_at) is not created before the
 * run. The server keeps its slot empty and, on its own thread, asks for it when its turn
 * comes (tr__server_defer's hook); join.c then adds it to the running graph — its stage
 * actor, its loader, the batch edge between them, push and reply with the server, the report
 * edge to the coordinator — and wires its ports. The server learns the new edges from the
 * first message on the push edge (tr__joined_msg), the coordinator its new source from the
 * first on the report edge (tr__source_msg): each on its own thread. A joiner whose turn
 * never comes is never created, and nothing waits for it.
 */
#ifndef TR_JOIN_H
#define TR_JOIN_H

#include "graph_impl.h"
#include "job_impl.h"
#include "worker.h"

typedef struct tr__join tr__join;

/* Whether source `source` (a stage's number, tr__stage_index) is a worker that joins the
 * running job, added then: async.join_at's, in a world of one process. */
static inline bool tr__joins_later(const tr__run *run, int source) {
  return run->c.async.enabled && source < run->c.layout.replicas &&
         tr__worker_joins(&run->c, source) && tr_world_size(tr__graph_world(run->g)) == 1;
}

/* The job's part (tr_job_join_worker makes it), freed with the job, after its graph. */
void tr__join_free(tr__join *jn);

/* Server: worker `worker`'s slot stays empty until the worker joins; on its turn the server
 * calls fn(arg, worker) on its own thread (0, or a failure that fails the server). */
int tr__server_defer(void *server, int worker, int (*fn)(void *arg, int worker), void *arg);

/* The joiner → the server, first on its push edge: its edges and device. */
typedef struct tr__joined_msg {
  tr_msg hdr;
  int worker;
  tr_edge *push, *reply;
  tr_device *dev;
} tr__joined_msg;
extern const tr_msgtype tr__joined_type;

/* The joiner → the coordinator, first on its report edge: source `source` reports on `edge`. */
typedef struct tr__source_msg {
  tr_msg hdr;
  int source;
  tr_edge *edge;
} tr__source_msg;
extern const tr_msgtype tr__source_type;

#endif
