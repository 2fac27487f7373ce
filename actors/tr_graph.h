/* tr_graph.h — training graphs: actors joined by typed edges that carry credits, run for a
 * number of steps, a number of seconds, or until stopped.
 *
 * A graph owns a tr_system. Add actors to it (the built-in ones of tr_job.h, or your own
 * behaviours), connect them with edges, and run it. Every strategy troupe ships is built
 * with exactly these calls, and every path between its actors, control traffic included,
 * is an edge: so a graph can be printed (tr_graph_print) and a stuck one explained.
 *
 * Edges. An edge carries messages of one type from one actor to another and has a fixed
 * number of credits: how many of its buffers may be in flight. The producer takes a credit
 * before it fills a buffer and sends (tr_edge_acquire, tr_edge_send); the consumer gives it
 * back once it is done with the buffer (tr_edge_release, from any thread). A producer that
 * finds no credit stops producing; a tr_edge_credit_msg reaches it on its priority lane once
 * `wake_at` credits are free again, and it tries again. So memory is bounded by
 * construction, and a producer far ahead of a slow consumer sleeps instead of spinning
 * (`wake_at` > 1 wakes it once for a run of buffers rather than once per buffer). An edge
 * made with `notify` instead tells its producer of every release (a relay that passes
 * buffers on learns when to give its own back). Control edges, whose protocol bounds what
 * is in flight, take a credit per message too: the count is then a checked invariant, and
 * what is in flight shows in tr_graph_print.
 *
 *   tr_edge *e;                                   // loader -> stage, 16 batches in flight
 *   tr_graph_connect(g, &(tr_edge_config){.from = loader, .to = stage, .type = &batch_type,
 *                                         .credits = 16, .wake_at = 8}, &e);
 *   // loader, on start and on every tr_edge_credit_msg:
 *   while (tr_graph_claim_step(g, next) && tr_edge_acquire(e)) {
 *     batch_msg *b = tr_msg_new(&batch_type);
 *     fill(b, next++);
 *     tr_edge_send(e, b);
 *   }
 *   // stage, once it has copied the batch:   tr_edge_release(e, 1);
 *
 * Steps and the end of a run. A step is one unit of the graph's work (for training, one
 * optimizer update). An actor calls tr_graph_claim_step before it starts a step (for
 * training, the first stage of each replica, before the step's first forward; a source that
 * fills buffers ahead need not: what it filled past the end is dropped); the answer says
 * whether that step belongs to the run. With a step limit the end is known from the start
 * (tr_graph_end_step). With a time limit, or tr_graph_finish, the run ends after the
 * highest step claimed so far: every claimant sees the same answer for every step, so
 * replicas stop at the same step, and every actor receives a tr_graph_end_msg naming the
 * end. Claiming where the work starts, not where its input is made, keeps a timed run from
 * running on through every batch prefetched when the time is up. Sources that share out
 * the steps among themselves take them with tr_graph_take_step. Each actor calls
 * tr_graph_done once its part is over; when all have, tr_graph_run returns 0. A service
 * (tr_graph_add_service: a relay, say) has no part of its own and is not waited for. An actor's failure (its callback returning non-zero)
 * stops the whole graph, and tr_graph_run returns that status (tr_graph_error says who).
 *
 * Hangs: every graph has a watchdog unless its config turns it off: a graph that makes no
 * progress, busy or idle, for the watchdog's period stops with TR_ETIMEDOUT and an error
 * that names each actor's state and prints the graph: which actors are done, and each edge's
 * credits in flight. tr_system_config.watchdog_ms is the period: 0 (and a NULL config) for
 * the default, TR_GRAPH_WATCHDOG_MS (or TR_WATCHDOG_MS from the environment, in ms), which
 * no healthy run reaches (no message handled anywhere for a minute); TR_WATCHDOG_OFF for
 * none. A graph that is quiet — every actor waiting for a message no one will send, and
 * nothing out that could send one (no timer, no checkpoint being written, no other rank:
 * across processes a graph is never quiet) — is stopped within about a second, whatever
 * the period, and the error says first which of your actors the graph waits on and the fix
 * for the mistakes an actor makes: a relay that keeps the credits of its way in (give each
 * back: tr_edge_release on its tr_edge_credit_msg), a relay's way out made without notify
 * (TR_BATCH_NOTIFY), a consumer that keeps its messages (an observer that never releases a
 * report), an actor that never calls tr_graph_done (a relay added with tr_graph_add rather
 * than tr_graph_add_service). Work of your own outside the actors that will send one of
 * them a message (a thread of yours) is bracketed with tr_system_work_begin and
 * tr_system_work_end (tr_system.h), or the graph is taken for quiet once it alone is left.
 *
 * A stuck end: where only the end of a job's run is stuck — every step trained, the figures
 * recorded, every checkpoint on disk, and an actor of yours never says it is done or keeps
 * the last report — the run is not lost: tr_graph_run returns 0 once the graph is quiet
 * (within about a second), tr_job_result_of holds every step's figures, the final checkpoint
 * is in place, and tr_graph_warning (also written to stderr) names the actor and the fix.
 * A graph's system calls the graph's own describe and on_quiet (tr_system_config): those of
 * the config are not used.
 *
 * Growing while it runs: in a world of one process, tr_graph_add, tr_graph_add_service and
 * tr_graph_connect may be called while the graph runs, from any actor's callbacks (any
 * thread). An actor added then starts at once, is waited for like the others (a service
 * is not), and, added after the end of the run is known (tr_graph_finish, a time limit),
 * gets its tr_graph_end_msg as it is added, once. The adder hands the new actor its edges
 * itself (a message). Once every waited actor is done the system is stopping: an add is
 * then refused (TR_ESTATE, tr_graph_error naming why). Across processes nothing is added
 * once the graph runs (TR_ESTATE, the error naming the rule: every rank must build the same
 * graph, before tr_graph_run).
 *
 * Threads: build and run the graph from one thread (and grow it from actors, above);
 * tr_edge_* and tr_graph_claim_step, tr_graph_finish and tr_graph_done from the actors, as
 * noted.
 *
 * Misuse (tr_base.h): the calls that return a status refuse a NULL graph, config or out, an
 * actor not of the graph and a count out of range with TR_EINVAL, and a call out of order
 * (a second run, an add or connect once the run is ending, a world after the first actor)
 * with TR_ESTATE, tr_graph_error naming the call and the argument (stderr for a NULL graph).
 * Those that return none say it on stderr: a send on an edge NULL frees the message; inside
 * a run, a NULL message, one of another type than the edge's, or a release of more buffers
 * than are in flight stops the run with TR_EINVAL naming the edge (a message or a credit
 * would be lost); a second tr_graph_done of an actor, or one of an actor not of the graph,
 * is ignored. Getters of NULL answer 0, NULL or "".
 */
#ifndef TR_GRAPH_H
#define TR_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "tr_system.h"
#include "tr_world.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_graph tr_graph;
typedef struct tr_edge tr_edge;

/* The watchdog's default period (ms), and the value of tr_system_config.watchdog_ms that
 * turns a graph's watchdog off (see Hangs above). */
#define TR_GRAPH_WATCHDOG_MS 60000
#define TR_WATCHDOG_OFF (-1)

/* A graph on a fresh system configured by `config` (NULL: defaults, the watchdog on). A
 * watchdog_ms below TR_WATCHDOG_OFF, or out NULL, is refused (TR_EINVAL, said on stderr). */
TR_API int tr_graph_new(tr_graph **out, const tr_system_config *config);
/* After tr_graph_run has returned (or instead of running): frees the actors and edges. */
TR_API void tr_graph_free(tr_graph *g);
TR_API tr_system *tr_graph_system(const tr_graph *g);

/* Adds an actor; it starts when the graph runs, or at once while it runs (Growing while it
 * runs, above: a world of one process; TR_ESTATE once the run is ending). */
TR_API int tr_graph_add(tr_graph *g, const tr_actor_config *config, tr_actor **out);
/* The same for a service: the run ends without waiting for its tr_graph_done. */
TR_API int tr_graph_add_service(tr_graph *g, const tr_actor_config *config, tr_actor **out);

/* Across processes (tr_world.h): every rank builds the same graph, in the same order, after
 * tr_graph_set_world (before any actor is added), and places each actor on a rank: there it
 * is the actor, elsewhere a placeholder that edges name (its state is kept, never run, and
 * destroyed with the graph). An edge between two ranks is carried
 * by the graph's transport (dist/, one pinned actor per rank), credits included; a message
 * crosses as its type's codec says (tr_msgtype.codec: tr_protocol.h's and the job's own types
 * have one; a type of yours without one goes byte for byte on an edge of its type: no
 * pointers in it, then). An untyped edge names the types it carries (tr_edge_config.carries)
 * for the receiving rank to know them. TR_ESTATE once an actor is added. A world of one
 * changes nothing. */
TR_API int tr_graph_set_world(tr_graph *g, tr_world *w);
TR_API int tr_graph_add_on(tr_graph *g, int rank, const tr_actor_config *config, tr_actor **out);
TR_API int tr_graph_add_service_on(tr_graph *g, int rank, const tr_actor_config *config,
                            tr_actor **out);
/* This process's rank; the rank an actor of the graph lives on (-1: not the graph's). */
TR_API int tr_graph_rank(const tr_graph *g);
TR_API int tr_graph_actor_rank(const tr_graph *g, const tr_actor *a);

typedef struct tr_edge_config {
  tr_actor *from, *to;    /* both added to this graph */
  const tr_msgtype *type; /* what it carries; NULL: messages of several types (control) */
  const char *name;       /* for reports ("act", "grad"); NULL: the type's name */
  int credits;            /* buffers in flight at most, >= 1 */
  int wake_at;            /* a starved producer is woken once this many are free; 0: 1 */
  int notify;             /* the producer gets a tr_edge_credit_msg for every release */
  /* Untyped edges between processes: the types it may carry, NULL-terminated (each with a
   * codec, tr_msgtype.codec). NULL: none besides `type`. */
  const tr_msgtype *const *carries;
} tr_edge_config;

/* An edge; TR_EINVAL for credits < 1 or wake_at > credits, or an end NULL or not of the
 * graph, tr_graph_error naming the field. Also while the graph runs, in a world of one
 * process (Growing while it runs, above); TR_ESTATE once the run is ending or has ended. */
TR_API int tr_graph_connect(tr_graph *g, const tr_edge_config *config, tr_edge **out);

/* Producer: takes a credit (1), or finds none (0; a tr_edge_credit_msg follows later). */
TR_API int tr_edge_acquire(tr_edge *e);
/* Producer: sends `msg` (of the edge's type) on the consumer's data lane, spending a credit
 * taken with tr_edge_acquire. */
TR_API void tr_edge_send(tr_edge *e, void *msg);
/* Producer, on a control edge whose protocol guarantees a credit: takes it and sends, or
 * returns TR_ESTATE with the actor's error naming the edge (a broken protocol).
 * Call from the producer's callbacks. */
TR_API int tr_edge_send_control(tr_edge *e, void *msg);
/* Consumer, any thread: `n` buffers of the edge are free again (more than are in flight:
 * the run stops, see Misuse above). */
TR_API void tr_edge_release(tr_edge *e, int n);
/* Credits in the producer's hands now; the most that were ever out at once (an upper bound
 * on what the consumer held, which tests of memory bounds check). */
TR_API int tr_edge_available(const tr_edge *e);
TR_API int tr_edge_peak(const tr_edge *e);
TR_API int tr_edge_credits(const tr_edge *e);
TR_API const char *tr_edge_name(const tr_edge *e);
TR_API tr_actor *tr_edge_from(const tr_edge *e);
TR_API tr_actor *tr_edge_to(const tr_edge *e);

/* "Credits are free again: try tr_edge_acquire." On the producer's priority lane. `count`:
 * on a notify edge, the credits that release gave back; else how many were free. */
typedef struct tr_edge_credit_msg {
  tr_msg hdr;
  tr_edge *edge;
  int count;
} tr_edge_credit_msg;
TR_API extern const tr_msgtype tr_edge_credit_type;

/* Steps are below this: the end of a run is kept in one word with flags above it. */
#define TR_GRAPH_STEP_LIMIT (INT64_C(1) << 61)

/* Runs steps [first_step, end_step) (end_step 0: no step limit; both below
 * TR_GRAPH_STEP_LIMIT), for at most `seconds`
 * (0: no time limit; one of the two limits is required), until every actor is done. 0, or
 * the first failure's status (arguments refused: TR_EINVAL, tr_graph_error naming the
 * argument and the rule). Once per graph: again, TR_ESTATE.
 *
 * Signals (tr_system_config.handle_signals): the first SIGINT, SIGTERM, SIGHUP, SIGQUIT,
 * SIGUSR1 or SIGUSR2 finishes the run
 * (tr_graph_finish): every actor ends its part in order, as at the end of a timed run, and
 * tr_graph_run returns TR_EINTR once they all have, the actors' figures complete
 * (tr_graph_signal says which signal). A second signal ends the process at once. */
TR_API int tr_graph_run(tr_graph *g, int64_t first_step, int64_t end_step, double seconds);
TR_API const char *tr_graph_error(const tr_graph *g);
/* After a run that returned 0 though its end was stuck (A stuck end, above): which actor the
 * graph waited on and the fix ("'relay' was added with tr_graph_add, so the run waits for
 * its tr_graph_done, ...: a relay that never calls tr_graph_done must be a service
 * (tr_graph_add_service)"); "" after a run that ended as it should. */
TR_API const char *tr_graph_warning(const tr_graph *g);
/* The signal that finished the run (SIGINT, SIGTERM, ...), or 0. Any thread. */
TR_API int tr_graph_signal(const tr_graph *g);

/* Sources, any thread: 1 when `step` belongs to the run (claiming it), 0 when the run ends
 * before it; across processes, -1 while the ranks agree on the end of a timed run (a
 * tr_graph_end_msg comes once they have: ask again then). */
TR_API int tr_graph_claim_step(tr_graph *g, int64_t step);
/* Sources that share the steps out, from their callbacks: the next step no one has taken,
 * claimed, or -1 when the run has no more; across processes, -2 while rank 0 (which hands
 * every rank's steps out) answers: a tr_graph_wake_msg comes, then ask again. */
TR_API int64_t tr_graph_take_step(tr_graph *g, tr_actor *self);
/* The first step not run: known from the start with a step limit, else INT64_MAX until the
 * run is finished. Any thread. */
TR_API int64_t tr_graph_end_step(const tr_graph *g);
TR_API int64_t tr_graph_first_step(const tr_graph *g);
/* Ends the run after the steps claimed so far (and before the step limit); any thread,
 * idempotent. Every actor gets a tr_graph_end_msg on its priority lane, so that one idle
 * at that moment learns the end; a busy one may as well read tr_graph_end_step after each
 * step. With a step limit alone no message comes: the end is known from the start. */
TR_API void tr_graph_finish(tr_graph *g);
/* An actor's part of the run is over; once every actor added has said so, the run ends
 * cleanly. Once per actor, from its own callbacks (a second time: said, and ignored). */
TR_API void tr_graph_done(tr_graph *g, tr_actor *self);

typedef struct tr_graph_end_msg {
  tr_msg hdr;
  int64_t end_step;
} tr_graph_end_msg;
TR_API extern const tr_msgtype tr_graph_end_type;

/* "What you waited on in the graph has come: look again" (tr_graph_take_step). */
typedef struct tr_graph_wake_msg {
  tr_msg hdr;
} tr_graph_wake_msg;
TR_API extern const tr_msgtype tr_graph_wake_type;

/* Writes the graph: each actor (its kind, whether its part is done, what it is handling and
 * what waits in its mailbox) and each edge (producer → consumer, name, credits in flight of
 * its total, the most ever in flight). Any thread; a snapshot while it runs. */
TR_API void tr_graph_print(tr_graph *g, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
