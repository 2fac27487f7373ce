/* tr_system.h — actors, and the system that runs them.
 *
 * An actor is a behaviour (a struct of callbacks) plus state, with two mailboxes: a priority
 * lane for control messages (stop, errors, credits) and a data lane. It handles one message
 * at a time; nothing else touches its state. There are two kinds:
 *
 *   TR_ACTOR_PINNED  owns an OS thread (named after the actor). On an empty mailbox it spins
 *                    briefly, then parks on a futex; the one sender that finds it parked wakes
 *                    it. Devices belong to pinned actors.
 *   TR_ACTOR_LOOP    runs on the system's single libuv loop thread, with timers, signals and
 *                    I/O. A send to it pushes and calls uv_async_send; the loop drains every
 *                    loop actor's mailbox per wake-up (sends coalesce).
 *
 * A turn handles the whole priority lane, then at most `turn_batch` data messages, up to the
 * newest one present when the turn began, and ends early when a control message arrives: a
 * busy producer cannot starve control traffic, and a stop overtakes queued data.
 *
 *   static int pong_receive(tr_actor *self, tr_msg *m) {
 *     ping_msg *reply = tr_msg_new(&ping_type);
 *     reply->seq = ((ping_msg *)m)->seq;
 *     tr_actor_send(m->from, reply);
 *     return 0;
 *   }
 *   static const tr_behaviour pong = {.name = "pong", .receive = pong_receive};
 *
 *   tr_system *sys;
 *   tr_system_new(&sys, &(tr_system_config){.handle_signals = 1});
 *   tr_actor *a;
 *   tr_actor_spawn(sys, &(tr_actor_config){.name = "pong", .kind = TR_ACTOR_PINNED,
 *                                         .behaviour = &pong}, &a);
 *   int rc = tr_system_run(sys);     // the loop runs on this thread until someone stops it
 *   if (rc) fprintf(stderr, "%s\n", tr_system_error(sys));
 *   tr_system_free(sys);
 *
 * Errors: a callback that returns non-zero stops the whole system; tr_system_run returns that
 * status and tr_system_error names the actor, its kind and the message type it was handling.
 *
 * Watchdog: with watchdog_ms set, the loop looks at every actor four times a second (and at
 * least four times per period) and stops a stuck system with TR_ETIMEDOUT. Stuck is busy
 * without progress: for a whole period not one message handled although an actor was
 * handling one or had some waiting. With watchdog_idle, stuck is also idle but not done:
 * every actor waiting for a message that nobody will send, no timer pending, no stop. Such a
 * system is quiet when nothing is out either that could still send a message (below): then
 * nothing can ever happen in it again, and it is stopped after a second (or the period,
 * when shorter), not a whole period; while work is out, after the whole period. The error
 * names each actor's state (tr_system_report), then adds what the layer above says of
 * itself:
 *
 *   static void graph_describe(void *arg, char *buf, size_t size) {
 *     const my_graph *g = arg;    // atomics only: the graph's actors are still running
 *     snprintf(buf, size, "graph: loader->stage0 %d of %d credits",
 *              atomic_load(&g->credits), g->depth);
 *   }
 *   tr_system_new(&sys, &(tr_system_config){.watchdog_ms = 5000, .watchdog_idle = 1,
 *                                           .describe = graph_describe, .describe_arg = g});
 *
 * The idle watchdog sees what the runtime knows of: mailboxes, timers, loop actors' own
 * handles, requests on the loop (uv_queue_work, uv_fs_*: libuv counts them), and work begun
 * with tr_system_work_begin and not yet ended. Work elsewhere that will send a message (a
 * thread of your own, a device's completion callback) is invisible to it unless bracketed
 * so; otherwise a system waiting for it alone is taken for quiet and stopped:
 *
 *   tr_system_work_begin(sys);          // in the actor, before the thread can end it
 *   pthread_create(&t, NULL, crunch, job);
 *   // crunch(), on its thread:  ...; tr_actor_send(job->reply_to, result);
 *   //                           tr_system_work_end(sys);   // after the send
 *
 * Shutdown is a protocol: tr_system_stop (from any thread, or a signal when handle_signals
 * is set: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2) sends a stop on every
 * actor's priority lane; each runs its `stop` callback on its own thread and quits, pinned
 * threads are joined, loop handles closed, and tr_system_run returns. Messages still queued
 * are freed by tr_system_free, which also calls each behaviour's `destroy`. Sends after the
 * system stopped are accepted and freed there.
 *
 * Threads: tr_actor_send, tr_actor_send_ctl, tr_system_stop, tr_system_fail and
 * tr_system_work_begin / _end may be called from any thread while the system exists;
 * everything else from the thread that created the system or from actor callbacks, as noted.
 */
#ifndef TR_SYSTEM_H
#define TR_SYSTEM_H

#include <stdarg.h>
#include <stdint.h>

#include "tr_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_system tr_system;
typedef struct tr_actor tr_actor;
typedef struct uv_loop_s uv_loop_t;

typedef enum tr_actor_kind { TR_ACTOR_PINNED, TR_ACTOR_LOOP } tr_actor_kind;

typedef struct tr_behaviour {
  const char *name;                             /* the kind of actor ("stage", "loader") */
  int (*start)(tr_actor *self);                 /* optional: first, on the actor's thread */
  int (*receive)(tr_actor *self, tr_msg *msg);  /* required: one message */
  void (*stop)(tr_actor *self);                 /* optional: last, on the actor's thread */
  void (*destroy)(void *state);                 /* optional: frees state, at tr_system_free */
} tr_behaviour;

/* How long a pinned actor spins on an empty mailbox before it parks: a number of µs, or 0
 * for the system's default, or one of these. While messages stream in, it waits longer
 * between looks (up to ~25 µs, see tr_spin), so a shorter spin may run that long once, when
 * the stream ends. */
#define TR_SPIN_NONE (-1)    /* park at once */
#define TR_SPIN_FOREVER (-2) /* never park: lowest latency, burns a core */

typedef struct tr_actor_config {
  const char *name;              /* copied; names the thread, errors and trace lanes */
  tr_actor_kind kind;
  const tr_behaviour *behaviour; /* not copied: must outlive the system */
  void *state;                   /* tr_actor_state(); owned by the actor if destroy is set */
  int spin_us;                   /* pinned: see TR_SPIN_NONE; 0 for the system's default */
} tr_actor_config;

typedef struct tr_system_config {
  const char *name;   /* for messages; "troupe" if NULL */
  int handle_signals; /* SIGINT, SIGTERM, SIGHUP (unless ignored when the process began,
                         as under nohup), SIGQUIT, SIGUSR1 and SIGUSR2 start a graceful
                         stop (tr_system_run: TR_EINTR), or with on_signal, whatever
                         on_signal starts (see below). SIGQUIT (Ctrl-\), whose default
                         is a core dump, and SIGUSR1 and SIGUSR2, which batch schedulers
                         send before a job's time limit (Slurm's --signal=USR1@60), are
                         SIGTERM's twins: each asks for the work to end, not to be lost */
  int trace;          /* record every handled message (see tr_trace.h) */
  int turn_batch;     /* data messages per turn at most; 0 for the default (64) */
  int spin_us;        /* default spin of pinned actors; 0 for the default (20 µs) */
  int watchdog_ms;    /* 0: off (for a graph, its default: see tr_graph.h). Else: when,
                         over this long, no actor handled a message although one was busy
                         or had messages waiting, the system stops with TR_ETIMEDOUT and
                         tr_system_error names each actor's state. */
  int watchdog_idle;  /* with watchdog_ms: a system idle but not done is stuck too. When no
                         actor handled a message, every actor had started and was handling
                         nothing with nothing waiting, no timer was pending, no loop actor's
                         own handle was active and nobody stopped the system, over a second
                         (quiet: nothing out, see Watchdog above; or watchdog_ms, when
                         shorter) or over watchdog_ms (work out all along), it stops with
                         TR_ETIMEDOUT ("idle but not done") and tr_system_error names each
                         actor's state. */
  /* Optional, with watchdog_ms: the layer above describes itself (its graph, its edges and
   * credits) in `buf`, which starts empty; the text is appended to the watchdog's error.
   * Called on the loop thread, once, when the watchdog fires, while pinned actors still
   * run: it must not block (the loop waits for it), must read only what another thread
   * may read (atomics, its own locks) and must not free or run the system. It may call
   * tr_system_report and tr_system_stop. */
  void (*describe)(void *arg, char *buf, size_t size);
  void *describe_arg;
  /* Optional, with handle_signals: the first of those signals is handed to on_signal (on
   * the loop thread) instead of stopping the system, so that the layer above can end its
   * work in order (a training graph finishes its step and writes its checkpoint). The
   * system's handlers go at that moment: a second signal has its default effect and ends
   * the process at once, which is what a user pressing Ctrl-C twice means. */
  void (*on_signal)(void *arg, int signum);
  void *signal_arg;
  /* Optional, with watchdog_idle: the system is quiet (idle but not done, with nothing out
   * that could wake it): on the loop thread, once, before the watchdog stops it, so that
   * the layer above can end it its own way — tr_system_stop(sys, 0) when its work is done
   * nonetheless (a training graph's every step trained, only an actor of the user's never
   * said it was done), tr_system_fail with a text of its own. If it stops nothing, the
   * watchdog stops the system as above. The same rules as describe's: it must not block
   * and must not free or run the system. */
  void (*on_quiet)(void *arg);
  void *quiet_arg;
} tr_system_config;

/* Opens /dev/null on standard input, output or error where one is closed, so that no
 * descriptor the system (or MPI) opens is taken for one. tr_system_new calls it; a program
 * that opens descriptors of its own first calls it before them. */
TR_API void tr_stdio_reserve(void);

/* Creates a system (standard streams first: tr_stdio_reserve). On failure *out is NULL
 * and the status says why: TR_EINVAL for out NULL or a negative count in config (config NULL:
 * the defaults), said on stderr ("troupe: tr_system_new: config->turn_batch -1: ..."). */
TR_API int tr_system_new(tr_system **out, const tr_system_config *config);

/* Creates an actor. Before tr_system_run it starts when the system runs; during a run it
 * starts at once. Callable from the creating thread or from actor callbacks. TR_EINVAL,
 * said on stderr naming the argument, for sys, config or out NULL, a behaviour or receive
 * callback missing, a kind or spin_us not among the values above. */
TR_API int tr_actor_spawn(tr_system *sys, const tr_actor_config *config, tr_actor **out);

/* Runs the system on the calling thread (which becomes the loop thread) until it is stopped.
 * Returns 0 after a clean stop, otherwise the first failure's status. Once per system: again,
 * TR_ESTATE (said on stderr); sys NULL, TR_EINVAL. */
TR_API int tr_system_run(tr_system *sys);

/* Starts a graceful stop; any thread, any number of times: the first status is kept. A
 * status of 0 is a clean stop. */
TR_API void tr_system_stop(tr_system *sys, int status);
/* The same with the failure's text (printf's format), which tr_system_error returns when
 * it is the first failure: `tr_system_fail(sys, TR_ETIMEDOUT, "%s never answered", who)`.
 * A status of 0 stops cleanly; the text is then dropped. Any thread. */
TR_API void tr_system_fail(tr_system *sys, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The first failure's text, or "" when there was none (and for sys NULL). */
TR_API const char *tr_system_error(const tr_system *sys);

/* The signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) that reached the system,
 * or 0. Any thread. */
TR_API int tr_system_signal(const tr_system *sys);
/* "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", or "a signal"; parse: the
 * number of one of those names (a run's "signal" figure, tr_result.h), or TR_EINVAL. */
TR_API const char *tr_signal_name(int signum);
TR_API int tr_signal_parse(const char *name, int *signum);

/* A program's start-up (opening data, measuring devices) before its system runs: from
 * tr_signals_hold on, the first of the signals handle_signals takes is kept instead of
 * ending the process, and tr_signals_held says which (0: none), so that the program can
 * stop where it is, saying so. A system that runs with handle_signals takes over: it acts
 * on a signal held as on one that reaches it running, and when it ends without one, a
 * program still holding holds again (a bench between its runs). Calls nest: the last
 * tr_signals_release puts back what was there before the first hold; a signal held then is
 * dropped (raise it again to act on it). SIGHUP ignored when the process began (nohup)
 * stays ignored, while holding and while running. Not thread-safe: the program's main
 * thread. */
TR_API void tr_signals_hold(void);
TR_API int tr_signals_held(void);
TR_API void tr_signals_release(void);

/* The watchdog's period in milliseconds (0: off), and a new one for a system whose watchdog
 * is on (ms >= 1; a system configured without one keeps none): the layer above may learn
 * how long its work takes only once it runs (a step of a large model on a slow device).
 * Any thread; the next look of the watchdog uses it. */
TR_API int tr_system_watchdog_ms(const tr_system *sys);
TR_API void tr_system_set_watchdog_ms(tr_system *sys, int ms);

/* Work outside the actors that will send one of them a message has begun / has ended (its
 * message sent first): while any is out, an idle system is not quiet, and only the whole
 * watchdog period makes it stuck (Watchdog above). Calls count: one end per begin. Any
 * thread; 0, TR_EINVAL for a NULL sys, TR_ESTATE for an end with no work out. */
TR_API int tr_system_work_begin(tr_system *sys);
TR_API int tr_system_work_end(tr_system *sys);

/* Stops nothing: call after tr_system_run has returned (or instead of running it). Frees
 * the actors, their pending messages and the loop. */
TR_API void tr_system_free(tr_system *sys);

/* Writes every actor's state into `buf`, the busy ones first, then the idle ones, each in
 * spawn order ("'stage1' (pinned stage): handling 'fwd_msg', messages waiting (data lane),
 * 1234 handled"; "'loader' (loop loader): idle, nothing waiting, 87 handled"), then how
 * many actors there are and how many are idle. States: "not started", "handling 'type'",
 * "parked" (a pinned actor asleep on its futex), "between turns" (messages waiting, none
 * taken yet), "idle". Lanes say whether messages wait, not how many: mailboxes keep no
 * count, which every push would pay for. Actors that do not fit are counted ("12 more not
 * shown"). Any thread; a snapshot for diagnosing a graph that stopped moving. */
TR_API void tr_system_report(tr_system *sys, char *buf, size_t size);

/* The libuv loop, for loop actors that want handles of their own (close them in `stop`). */
TR_API uv_loop_t *tr_system_loop(tr_system *sys);

/* Sends on the data lane / the priority lane. Never fails and never blocks: bounding what
 * is in flight is the graph's job (credits). `to` NULL: the message is freed, and that said on
 * stderr; msg NULL: nothing sent, said. */
TR_API void tr_actor_send(tr_actor *to, void *msg);
TR_API void tr_actor_send_ctl(tr_actor *to, void *msg);

/* Posts tr_timer_msg{tag} to `a` after `timeout_ms`, then every `repeat_ms` (0: once).
 * Timers run on the loop; any actor may own them. `a` NULL: TR_EINVAL (both calls). */
TR_API int tr_actor_timer_start(tr_actor *a, uint64_t timeout_ms, uint64_t repeat_ms, uint64_t tag);
/* Cancels `a`'s timers with `tag`; a tick already posted may still arrive. */
TR_API int tr_actor_timer_stop(tr_actor *a, uint64_t tag);

/* Records a failure's text on the actor and returns `status`, for
 * `return tr_actor_fail(self, TR_EDEVICE, "cudaMemcpyAsync: %s", cudaGetErrorString(e));`
 * (self NULL: the text goes to stderr, and `status` comes back all the same). */
TR_API int tr_actor_fail(tr_actor *self, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Of NULL: "", TR_ACTOR_PINNED, NULL, NULL. */
TR_API const char *tr_actor_name(const tr_actor *a);
TR_API tr_actor_kind tr_actor_kind_of(const tr_actor *a);
TR_API void *tr_actor_state(const tr_actor *a);
TR_API tr_system *tr_actor_system(const tr_actor *a);

#ifdef __cplusplus
}
#endif
#endif
