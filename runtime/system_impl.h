/* system_impl.h — the insides of actors and systems, shared by the runtime's .c files. */
#ifndef TR_SYSTEM_IMPL_H
#define TR_SYSTEM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "tr_mailbox.h"
#include "tr_system.h"
#include "tr_trace.h"

enum { TR__RUNNING = 0, TR__PARKING = 1 }; /* tr_actor.park, a futex word */

/* The signals a system ends its run on in order (tr_system_config.handle_signals): SIGINT,
 * SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, in system.c's table. */
enum { TR__SIGNALS = 6 };

typedef struct tr__trace_chunk tr__trace_chunk;

/* One thread's trace events. Only that thread appends; readers wait for the run's end. A
 * thread that needs room for its events frees the oldest full chunks of every buffer (the
 * budget, trace.c): links and unlinks of chunks take `lock`, appends to `last` do not. */
typedef struct tr__trace_buf {
  struct tr__trace_buf *next; /* the system's list */
  tr_system *sys;
  char thread[32];
  char label[32]; /* tr_trace_label's, or empty */
  int tid;
  uint32_t flow_seq; /* this thread's flows so far (trace.c makes ids of tid and it) */
  int64_t no_room;   /* 1 + the step that found no room in the budget; 0: none */
  pthread_mutex_t lock;
  tr__trace_chunk *first, *last;
} tr__trace_buf;

struct tr_actor {
  tr_mailbox ctl;  /* priority lane */
  tr_mailbox data; /* data lane */
  _Alignas(TR_CACHE_LINE) _Atomic uint32_t park; /* pinned: TR__RUNNING or TR__PARKING */

  _Alignas(TR_CACHE_LINE) tr_system *sys;
  const tr_behaviour *b;
  void *state;
  char *name;
  tr_actor_kind kind;
  int spin_us;
  uint32_t id;
  _Atomic bool started; /* start callback ran; read by the watchdog (starting is not idle) */
  bool done;    /* stopped or failed: handles nothing more */
  bool has_thread;
  pthread_t thread;
  tr_msg_pool *pool;    /* pinned: message memory of its thread */
  tr__trace_buf *trace; /* the buffer of the thread that runs it */
  char *error;          /* set by tr_actor_fail */
  /* Written by the actor's thread, read by the watchdog: relaxed stores, no contention. */
  _Atomic(const tr_msgtype *) handling;
  _Atomic uint64_t handled;
  tr_actor *next_all;   /* the system's lists */
  tr_actor *next_loop;
};

typedef struct tr__timer tr__timer;

struct tr_system {
  uv_loop_t loop;
  uv_async_t async;
  uv_signal_t sigs[TR__SIGNALS]; /* system.c's signums'; SIGHUP's unless ignored (nohup) */
  uv_timer_t watchdog;
  _Atomic int watchdog_ms; /* may change while it runs (tr_system_set_watchdog_ms) */
  bool watchdog_idle;
  void (*describe)(void *arg, char *buf, size_t size);
  void *describe_arg;
  void (*on_signal)(void *arg, int signum);
  void *signal_arg;
  void (*on_quiet)(void *arg);
  void *quiet_arg;
  _Atomic int signal; /* the signal that came, or 0 */
  uint64_t watchdog_handled; /* loop thread: total handled at the previous tick */
  int watchdog_seen;         /* loop thread: what the previous ticks saw (watchdog.c) */
  uint64_t watchdog_since;   /* loop thread: uv_now when they began to see it */
  _Atomic int work_out;      /* tr_system_work_begin's not yet ended */
  tr_mailbox requests; /* timer requests, consumed on the loop */
  char *name;
  int turn_batch;
  int spin_us;
  bool trace_on;
  bool handle_signals;
  /* The profiling window (trace.c): set before the run, moved by tr_system_trace_step. */
  bool trace_window;                 /* a window was set: closed outside it */
  _Atomic bool trace_closed;         /* records and NVTX ranges are off now */
  int64_t trace_from, trace_to;      /* steps [from, to); to 0: no end */
  int64_t trace_step;                /* the newest step begun (under lock) */
  uint64_t trace_nvtx_window;        /* the NVTX range of the open window */
  tr_trace_classify_fn trace_classify;
  /* The budget (trace.c): events of steps before trace_floor are dropped to keep the chunks
   * within trace_budget bytes. */
  size_t trace_budget;               /* 0: TR_TRACE_BUDGET_DEFAULT */
  _Atomic size_t trace_bytes, trace_peak; /* held in chunks now, and at most */
  _Atomic int64_t trace_now;         /* trace_step, for recording threads to tag events */
  int64_t trace_floor;               /* under lock */
  _Atomic uint64_t trace_freed;      /* events in chunks freed */
  _Atomic uint64_t trace_lost;       /* events not recorded: their step alone was too many */
  _Atomic int64_t trace_lost_step;   /* the first step that lost some */

  _Atomic(tr_actor *) actors;      /* every actor, newest first */
  _Atomic(tr_actor *) loop_actors; /* loop actors, newest first */
  _Atomic uint32_t next_id;
  _Atomic int running;             /* tr_system_run has started the pinned threads */
  _Atomic int stopping;
  _Atomic int async_closed;
  _Atomic uint32_t pinned_started, pinned_exited;
  int shutdown_phase; /* loop thread only */
  bool ran;
  tr__timer *timers; /* loop thread only */

  pthread_mutex_t lock; /* the first error, the trace buffer list */
  int status;
  char error[4096]; /* room for a watchdog's report of many actors */
  tr__trace_buf *traces;
  tr__trace_buf *loop_trace;
  tr_msg_pool *loop_pool;
};

/* trace.c */
tr__trace_buf *tr__trace_buf_new(tr_system *sys, const char *thread, int tid);
void tr__trace_free_all(tr_system *sys);
/* The calling thread records into `b` (NULL: nowhere); names it for NVTX once. */
void tr__trace_thread(tr__trace_buf *b, const char *name);
/* deliver() and the start callback when something traces: NVTX range, record, flow in. */
int tr__trace_deliver(tr_actor *a, tr_msg *m);
int tr__trace_start(tr_actor *a);
/* trace_nvtx.c: a tool is attached (set once NVTX is initialised; 0 without NVTX). */
#ifdef TR_HAVE_NVTX
extern int tr__nvtx_live;
#else
#define tr__nvtx_live 0
#endif

/* system.c */
void tr__system_fail(tr_system *sys, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))); /* tr_system_fail, for the runtime's own */
void tr__loop_wake(tr_system *sys);
/* Whether h is one of the system's own signal handles (sys->sigs). */
static inline bool tr__system_signal_handle(const tr_system *sys, const uv_handle_t *h) {
  for (int i = 0; i < TR__SIGNALS; i++)
    if (h == (const uv_handle_t *)&sys->sigs[i]) return true;
  return false;
}

/* watchdog.c */
void tr__watchdog_start(tr_system *sys); /* loop thread, when the run begins */

/* actor.c */
int tr__actor_turn(tr_actor *a); /* messages handled, or -1 when the actor is done */
void *tr__pinned_main(void *arg);
void tr__actor_stop_now(tr_actor *a); /* runs `stop` once, marks the actor done */

#endif
