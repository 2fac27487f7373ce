/* bench_mailbox.c — `troupe bench mailbox`: the actor kernel's messaging against references
 * measured in the same run.
 *
 *   throughput   the mailbox against liburcu's wait-free queue (wfcqueue) and a mutex +
 *                condition-variable queue, 1→1 with message memory recycled (the queues
 *                alone, their consumers waiting alike); 1→1 allocating and freeing every
 *                message (troupe's pools, jemalloc, glibc's malloc); 2→1 allocating
 *   round trips  two pinned actors that spin, against a raw cache-line ping-pong; two
 *                pinned actors that park at once, against a raw futex ping-pong; a pinned
 *                and a loop actor, against the same primitives used raw (uv_async_send to
 *                the loop, a futex back); and, for scale, uv_async_send between two loops
 *
 * Throughput runs pin producer and consumer to different CPUs where there are two, so the
 * figures are cross-core. Round trips pin their two sides to CPUs 0 and 1 too, actors and
 * raw references alike: left to the scheduler, one pair may share a CPU while the other
 * pays for waking an idle one (tens of µs on a virtual machine), and the ratio would
 * measure the scheduler instead.
 *
 * Timing tests never gate CI; this command is where speed is proven.
 */
#include <linux/futex.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <urcu/wfcqueue.h>
#include <uv.h>

#include "cli.h"
#include "troupe.h"

#ifdef TR_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#define HAVE_JEMALLOC 1
#else
#define HAVE_JEMALLOC 0
#endif

enum { ROUNDS_MAX = 5 };

/* glibc's allocator, reachable even where jemalloc replaces malloc. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);

/* A cache line, like every message tr_msg_new makes, so the recycled pool matches. */
typedef struct bench_msg {
  tr_msg hdr;
  uint64_t seq;
  uint64_t stamp;
  struct cds_wfcq_node wfcq; /* the link of the reference queue, liburcu's */
} __attribute__((aligned(TR_CACHE_LINE))) bench_msg;
static TR_MSGTYPE_DEFINE(bench_type, bench_msg);

static void pin_to_cpu(int cpu) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Threads inherit their creator's affinity: actors' threads must not inherit a pin. */
static void unpin(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; c++) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- the reference queue: a mutex, a condition variable, an intrusive list ------------- */

typedef struct mutex_queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tr_msg *head, *tail;
  bool waiting;
} mutex_queue;

static void mq_init(mutex_queue *q) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->head = q->tail = NULL;
  q->waiting = false;
}

static void mq_push(mutex_queue *q, tr_msg *m) {
  atomic_store_explicit(&m->next, NULL, memory_order_relaxed);
  pthread_mutex_lock(&q->mu);
  if (q->tail) atomic_store_explicit(&q->tail->next, m, memory_order_relaxed);
  else q->head = m;
  q->tail = m;
  bool wake = q->waiting;
  pthread_mutex_unlock(&q->mu);
  if (wake) pthread_cond_signal(&q->cv);
}

static tr_msg *mq_pop_wait(mutex_queue *q) {
  pthread_mutex_lock(&q->mu);
  while (q->head == NULL) {
    q->waiting = true;
    pthread_cond_wait(&q->cv, &q->mu);
    q->waiting = false;
  }
  tr_msg *m = q->head;
  q->head = atomic_load_explicit(&m->next, memory_order_relaxed);
  if (q->head == NULL) q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  return m;
}

/* ---- throughput ------------------------------------------------------------------------- */

/* The mailbox, the mutex queue, and liburcu's wait-free concurrent queue (wfcqueue: the same
 * exchange-then-link push as Vyukov's; its pop keeps no stub, and takes the last message back
 * from the producers with a compare-and-swap on their tail). */
typedef enum queue_kind { Q_MAILBOX, Q_MUTEX, Q_WFCQ } queue_kind;
/* Where messages come from: a recycled ring (the queue alone), the runtime's per-thread
 * pools (tr_msg_new on threads with a pool, as actors' threads are), jemalloc alone, or
 * glibc's malloc. */
typedef enum mem_kind { MEM_RECYCLED, MEM_TROUPE, MEM_JEMALLOC, MEM_LIBC } mem_kind;

enum { POOL = 4096, PUBLISH = 256 }; /* recycled messages; consumer progress granularity */

typedef struct flow {
  queue_kind queue;
  mem_kind mem;
  int producers;
  uint64_t per_producer;
  tr_mailbox mailbox;
  mutex_queue mq;
  _Alignas(64) struct __cds_wfcq_head wfcq_head; /* the consumer's */
  _Alignas(64) struct cds_wfcq_tail wfcq_tail;   /* the producers' */
  bench_msg *ring;                        /* MEM_RECYCLED */
  tr_msg_pool *pools[3];                  /* MEM_TROUPE: the producers' and the consumer's */
  _Alignas(64) _Atomic uint64_t consumed; /* MEM_RECYCLED: published every PUBLISH pops */
  _Alignas(64) _Atomic int ready;
} flow;

typedef struct producer_arg {
  flow *f;
  int cpu, index;
} producer_arg;

static inline bench_msg *flow_alloc(flow *f, uint64_t i) {
  switch (f->mem) {
    case MEM_RECYCLED: {
      /* Message i reuses the slot of i - POOL, released once i - POOL + 1 was popped. */
      if (i >= POOL && i % PUBLISH == 0)
        while (atomic_load_explicit(&f->consumed, memory_order_acquire) + POOL < i + PUBLISH)
          tr_cpu_relax();
      return &f->ring[i % POOL];
    }
    case MEM_TROUPE:
      return tr_msg_new(&bench_type);
    case MEM_JEMALLOC:
#ifdef TR_USE_JEMALLOC
      return mallocx(sizeof(bench_msg), 0);
#endif
    case MEM_LIBC:
      return __libc_malloc(sizeof(bench_msg));
  }
  return NULL;
}

/* A recycled message goes back as the runtime's pools take one back: its link written. A
 * consumer that only read it would leave its line shared, and the producer's next write to
 * it would wait for the other copy's invalidation behind its exchange: ~20 ns a message
 * here, against ~4 when the consumer wrote it last (an upgrade no prefetcher starts early). */
static inline void flow_free(flow *f, tr_msg *m) {
  if (m == NULL) return;
  if (f->mem == MEM_RECYCLED) atomic_store_explicit(&m->next, NULL, memory_order_relaxed);
  else if (f->mem == MEM_TROUPE) tr_msg_free(m);
#ifdef TR_USE_JEMALLOC
  else if (f->mem == MEM_JEMALLOC) sdallocx(m, sizeof(bench_msg), 0);
#endif
  else if (f->mem == MEM_LIBC) __libc_free(m);
}

static void *flow_producer(void *arg) {
  producer_arg *pa = arg;
  flow *f = pa->f;
  pin_to_cpu(pa->cpu);
  if (f->mem == MEM_TROUPE) tr_msg_pool_attach(f->pools[pa->index]);
  atomic_fetch_add(&f->ready, 1);
  while (atomic_load(&f->ready) <= f->producers) tr_cpu_relax();
  for (uint64_t i = 0; i < f->per_producer; i++) {
    bench_msg *m = flow_alloc(f, i);
    m->seq = i;
    if (f->queue == Q_MAILBOX) {
      tr_mailbox_push(&f->mailbox, &m->hdr);
    } else if (f->queue == Q_WFCQ) {
      cds_wfcq_node_init(&m->wfcq);
      cds_wfcq_enqueue(&f->wfcq_head, &f->wfcq_tail, &m->wfcq);
    } else {
      mq_push(&f->mq, &m->hdr);
    }
  }
  tr_msg_pool_attach(NULL);
  return NULL;
}

static inline struct cds_wfcq_node *wfcq_pop(flow *f) {
  struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(&f->wfcq_head, &f->wfcq_tail);
  return node == CDS_WFCQ_WOULDBLOCK ? NULL : node;
}

/* Messages per second through one consumer, on the calling thread. */
static double flow_run(queue_kind queue, mem_kind mem, int producers, uint64_t per_producer) {
  flow *f = aligned_alloc(64, sizeof *f);
  memset(f, 0, sizeof *f);
  f->queue = queue;
  f->mem = mem;
  f->producers = producers;
  f->per_producer = per_producer;
  tr_mailbox_init(&f->mailbox);
  mq_init(&f->mq);
  __cds_wfcq_init(&f->wfcq_head, &f->wfcq_tail);
  if (mem == MEM_RECYCLED) f->ring = aligned_alloc(64, POOL * sizeof *f->ring);
  if (mem == MEM_TROUPE)
    for (int p = 0; p <= producers; p++) f->pools[p] = tr_msg_pool_new();

  pin_to_cpu(0);
  tr_msg_pool_attach(f->pools[producers]);
  pthread_t t[2];
  producer_arg args[2];
  for (int p = 0; p < producers; p++) {
    args[p] = (producer_arg){f, 1, p};
    pthread_create(&t[p], NULL, flow_producer, &args[p]);
  }
  while (atomic_load(&f->ready) < producers) tr_cpu_relax();
  uint64_t total = per_producer * (uint64_t)producers, t0 = tr_now_ns();
  atomic_fetch_add(&f->ready, 1);
  tr_spin spin = TR_SPIN_INIT; /* the queues' consumers wait as a pinned actor does */
  for (uint64_t n = 0; n < total; n++) {
    tr_msg *m, *released = NULL;
    if (queue == Q_MAILBOX) {
      if ((m = tr_mailbox_pop(&f->mailbox, &released)) == NULL) {
        tr_spin_begin(&spin);
        do tr_spin_wait(&spin); while ((m = tr_mailbox_pop(&f->mailbox, &released)) == NULL);
        tr_spin_found(&spin);
      }
    } else if (queue == Q_WFCQ) {
      /* "Would block" (a push between its exchange and its link) waits as empty does. */
      struct cds_wfcq_node *node = wfcq_pop(f);
      if (node == NULL) {
        tr_spin_begin(&spin);
        do tr_spin_wait(&spin); while ((node = wfcq_pop(f)) == NULL);
        tr_spin_found(&spin);
      }
      m = &caa_container_of(node, bench_msg, wfcq)->hdr;
    } else {
      m = mq_pop_wait(&f->mq);
    }
    /* The mailbox hands back the previous message; the other queues this one, once read. */
    (void)((bench_msg *)m)->seq;
    flow_free(f, queue == Q_MAILBOX ? released : m);
    if (mem == MEM_RECYCLED && n % PUBLISH == 0)
      atomic_store_explicit(&f->consumed, n, memory_order_release);
  }
  double secs = (double)(tr_now_ns() - t0) / 1e9;
  for (int p = 0; p < producers; p++) pthread_join(t[p], NULL);
  tr_msg *last = atomic_load(&f->mailbox.tail);
  if (queue == Q_MAILBOX && last != &f->mailbox.stub) flow_free(f, last);
  tr_msg_pool_attach(NULL);
  for (int p = 0; p <= producers; p++) tr_msg_pool_free(f->pools[p]);
  free(f->ring);
  free(f);
  unpin();
  return (double)total / secs;
}

/* The end-to-end stream through the runtime: a thread with a pool of its own allocates and
 * sends (tr_actor_send) to a pinned actor, whose turns receive the messages and free them. */
/* The actor's line: the sender reads nothing of it while messages flow. */
typedef struct sink {
  _Alignas(64) uint64_t count, got, t_end;
  _Atomic int started;
} sink;

static int sink_start(tr_actor *self) {
  pin_to_cpu(0);
  atomic_store(&((sink *)tr_actor_state(self))->started, 1);
  return 0;
}
static int sink_receive(tr_actor *self, tr_msg *msg) {
  (void)msg;
  sink *s = tr_actor_state(self);
  if (++s->got == s->count) {
    s->t_end = tr_now_ns();
    tr_system_stop(tr_actor_system(self), 0);
  }
  return 0;
}
static const tr_behaviour sink_behaviour = {
    .name = "sink", .start = sink_start, .receive = sink_receive};

typedef struct sender {
  _Alignas(64) tr_actor *to;
  sink *sink;
  tr_msg_pool *pool;
  uint64_t count, t0;
} sender;

static void *sender_main(void *arg) {
  sender *s = arg;
  pin_to_cpu(1);
  tr_msg_pool_attach(s->pool);
  while (!atomic_load(&s->sink->started)) tr_cpu_relax();
  s->t0 = tr_now_ns();
  for (uint64_t i = 0; i < s->count; i++) {
    bench_msg *m = tr_msg_new(&bench_type);
    m->seq = i;
    tr_actor_send(s->to, m);
  }
  tr_msg_pool_attach(NULL);
  return NULL;
}

static double actor_flow_run(uint64_t count) {
  tr_system *sys;
  TR_ASSERT(tr_system_new(&sys, &(tr_system_config){.name = "bench"}) == 0);
  sink k = {.count = count};
  tr_actor *a;
  TR_ASSERT(tr_actor_spawn(sys,
                           &(tr_actor_config){.name = "sink",
                                              .kind = TR_ACTOR_PINNED,
                                              .behaviour = &sink_behaviour,
                                              .state = &k},
                           &a) == 0);
  sender s = {.to = a, .sink = &k, .pool = tr_msg_pool_new(), .count = count};
  pthread_t t;
  pthread_create(&t, NULL, sender_main, &s);
  TR_ASSERT(tr_system_run(sys) == 0);
  pthread_join(t, NULL);
  tr_system_free(sys);
  tr_msg_pool_free(s.pool); /* after the system: the actor's thread sent its frees home */
  unpin();
  return (double)count / ((double)(k.t_end - s.t0) / 1e9);
}

/* ---- round trips through the runtime ---------------------------------------------------- */

typedef struct rtt_state {
  tr_actor *peer;
  bool origin;
  int cpu; /* the thread that runs it, pinned as the raw references' are */
  uint64_t warmup, count, done;
  uint64_t *samples;
} rtt_state;

static int rtt_receive(tr_actor *self, tr_msg *msg) {
  rtt_state *s = tr_actor_state(self);
  bench_msg *in = (bench_msg *)msg;
  bench_msg *out = tr_msg_new(&bench_type);
  if (s->origin) {
    uint64_t now = tr_now_ns();
    if (in->seq >= s->warmup) s->samples[s->done++] = now - in->stamp;
    if (s->done == s->count) {
      tr_msg_free(out);
      tr_system_stop(tr_actor_system(self), 0);
      return 0;
    }
    out->seq = in->seq + 1;
    out->stamp = tr_now_ns();
  } else {
    out->seq = in->seq;
    out->stamp = in->stamp;
  }
  tr_actor_send(s->peer, out);
  return 0;
}
static int rtt_start(tr_actor *self) {
  pin_to_cpu(((rtt_state *)tr_actor_state(self))->cpu);
  return 0;
}
static const tr_behaviour rtt_behaviour = {
    .name = "bench", .start = rtt_start, .receive = rtt_receive};

typedef struct latency {
  double median_us, p99_us;
} latency;

static latency summarize(uint64_t *samples, uint64_t n) {
  qsort(samples, n, sizeof *samples, cmp_u64);
  return (latency){(double)samples[n / 2] / 1e3, (double)samples[n * 99 / 100] / 1e3};
}

/* Each round-trip function runs WARMUP(count) unrecorded round trips, then records `count`
 * into `out` (ns). */
#define WARMUP(count) ((count) / 10)

/* Round trips between an origin (pinned) and an echo of `echo_kind`. */
static void actor_rtt(tr_actor_kind echo_kind, int spin_us, uint64_t count, uint64_t *out) {
  tr_system *sys;
  TR_ASSERT(tr_system_new(&sys, &(tr_system_config){.name = "bench"}) == 0);
  rtt_state origin = {
      .origin = true, .cpu = 0, .warmup = WARMUP(count), .count = count, .samples = out};
  rtt_state echo = {.cpu = 1}; /* a loop echo pins the loop thread, this one */
  tr_actor *a, *b;
  TR_ASSERT(tr_actor_spawn(sys,
                           &(tr_actor_config){.name = "origin",
                                              .kind = TR_ACTOR_PINNED,
                                              .behaviour = &rtt_behaviour,
                                              .state = &origin,
                                              .spin_us = spin_us},
                           &a) == 0);
  TR_ASSERT(tr_actor_spawn(sys,
                           &(tr_actor_config){.name = "echo",
                                              .kind = echo_kind,
                                              .behaviour = &rtt_behaviour,
                                              .state = &echo,
                                              .spin_us = spin_us},
                           &b) == 0);
  origin.peer = b;
  echo.peer = a;
  bench_msg *first = tr_msg_new(&bench_type);
  first->seq = 0;
  first->stamp = tr_now_ns();
  tr_actor_send(b, first);
  TR_ASSERT(tr_system_run(sys) == 0);
  tr_system_free(sys);
  unpin();
}

/* ---- raw references ---------------------------------------------------------------------- */

typedef struct raw_pingpong {
  _Alignas(64) _Atomic uint32_t ping;
  _Alignas(64) _Atomic uint32_t pong;
  uint64_t count;
  bool futex;
} raw_pingpong;

static void raw_wait(_Atomic uint32_t *w, uint32_t old, bool futex) {
  while (atomic_load_explicit(w, memory_order_acquire) == old) {
    if (futex) syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
    else tr_cpu_relax();
  }
}

static void raw_post(_Atomic uint32_t *w, uint32_t v, bool futex) {
  atomic_store_explicit(w, v, memory_order_release);
  if (futex) syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *raw_echo(void *arg) {
  raw_pingpong *r = arg;
  pin_to_cpu(1);
  for (uint32_t i = 1; i <= r->count + WARMUP(r->count); i++) {
    raw_wait(&r->ping, i - 1, r->futex);
    raw_post(&r->pong, i, r->futex);
  }
  return NULL;
}

/* A plain cache-line (or futex) ping-pong between two threads: the floor for a round trip. */
static void raw_rtt(bool futex, uint64_t count, uint64_t *out) {
  raw_pingpong r = {.count = count, .futex = futex};
  pin_to_cpu(0);
  pthread_t t;
  pthread_create(&t, NULL, raw_echo, &r);
  uint64_t warm = WARMUP(count);
  for (uint32_t i = 1; i <= count + warm; i++) {
    uint64_t t0 = tr_now_ns();
    raw_post(&r.ping, i, futex);
    raw_wait(&r.pong, i - 1, futex);
    if (i > warm) out[i - 1 - warm] = tr_now_ns() - t0;
  }
  pthread_join(t, NULL);
  unpin();
}

/* Two libuv loops answering each other's uv_async_send. */
typedef struct uv_side {
  uv_loop_t loop;
  uv_async_t in;
  struct uv_side *peer;
  bool origin;
  _Atomic int stop; /* the echo closes its own handle: uv_close is not thread-safe */
  uint64_t count, n, t0;
  uint64_t *out;
} uv_side;

static void uv_side_cb(uv_async_t *h) {
  uv_side *s = h->data;
  if (!s->origin) {
    if (atomic_load(&s->stop)) uv_close((uv_handle_t *)h, NULL);
    else uv_async_send(&s->peer->in);
    return;
  }
  uint64_t rtt = tr_now_ns() - s->t0, warm = WARMUP(s->count);
  if (s->n++ >= warm) s->out[s->n - 1 - warm] = rtt;
  if (s->n == s->count + warm) {
    atomic_store(&s->peer->stop, 1);
    uv_async_send(&s->peer->in);
    uv_close((uv_handle_t *)h, NULL);
    return;
  }
  s->t0 = tr_now_ns();
  uv_async_send(&s->peer->in);
}

static void *uv_echo_thread(void *arg) {
  uv_side *s = arg;
  pin_to_cpu(1);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  return NULL;
}

static void uv_async_rtt(uint64_t count, uint64_t *out) {
  uv_side a = {.origin = true, .count = count, .out = out}, b = {.count = count};
  a.peer = &b;
  b.peer = &a;
  uv_loop_init(&a.loop);
  uv_loop_init(&b.loop);
  uv_async_init(&a.loop, &a.in, uv_side_cb);
  uv_async_init(&b.loop, &b.in, uv_side_cb);
  a.in.data = &a;
  b.in.data = &b;
  pin_to_cpu(0);
  pthread_t t;
  pthread_create(&t, NULL, uv_echo_thread, &b);
  a.t0 = tr_now_ns();
  uv_async_send(&b.in);
  uv_run(&a.loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  uv_loop_close(&a.loop);
  uv_loop_close(&b.loop);
  unpin();
}

/* The primitives under a pinned ↔ loop round trip, without the runtime: a thread wakes a
 * loop with uv_async_send and sleeps on a futex; the loop's callback wakes it back. */
typedef struct uv_futex {
  uv_loop_t loop;
  uv_async_t in;
  _Alignas(64) _Atomic uint32_t reply;
  _Atomic int stop;
  uint32_t n;
} uv_futex;

static void uv_futex_cb(uv_async_t *h) {
  uv_futex *u = h->data;
  if (atomic_load(&u->stop)) {
    uv_close((uv_handle_t *)h, NULL);
    return;
  }
  raw_post(&u->reply, ++u->n, true);
}

static void *uv_futex_loop(void *arg) {
  pin_to_cpu(1);
  uv_run(&((uv_futex *)arg)->loop, UV_RUN_DEFAULT);
  return NULL;
}

static void uv_futex_rtt(uint64_t count, uint64_t *out) {
  uv_futex *u = aligned_alloc(64, sizeof *u);
  memset(u, 0, sizeof *u);
  uv_loop_init(&u->loop);
  uv_async_init(&u->loop, &u->in, uv_futex_cb);
  u->in.data = u;
  pin_to_cpu(0);
  pthread_t t;
  pthread_create(&t, NULL, uv_futex_loop, u);
  uint64_t warm = WARMUP(count);
  for (uint32_t i = 1; i <= count + warm; i++) {
    uint64_t t0 = tr_now_ns();
    uv_async_send(&u->in);
    raw_wait(&u->reply, i - 1, true);
    if (i > warm) out[i - 1 - warm] = tr_now_ns() - t0;
  }
  atomic_store(&u->stop, 1);
  uv_async_send(&u->in);
  pthread_join(t, NULL);
  uv_loop_close(&u->loop);
  free(u);
  unpin();
}

/* ---- the report -------------------------------------------------------------------------- */

typedef struct row {
  const char *name;
  double value;
  const char *unit;
  const char *ref_name;
  double ref;
  const char *target;
  bool met;
} row;

/* printf's widths count bytes; the table has arrows and µ, so pad by characters. */
static void put_cell(const char *text, int width) {
  int chars = 0;
  for (const char *p = text; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
  fprintf(stderr, " %s%*s |", text, width > chars ? width - chars : 0, "");
}

static void print_row(const row *r) {
  char value[32], ref[64], ratio[32] = "";
  snprintf(value, sizeof value, "%.3g %s", r->value, r->unit);
  snprintf(ref, sizeof ref, "%s %.3g", r->ref_name, r->ref);
  if (r->ref > 0) snprintf(ratio, sizeof ratio, "%.2f×", r->value / r->ref);
  fputc('|', stderr);
  put_cell(r->name, 34);
  put_cell(value, 14);
  put_cell(ref, 26);
  put_cell(ratio, 8);
  put_cell(r->target, 24);
  fputc('\n', stderr);
}

typedef struct args {
  int json, quick;
} args;

static const cli_option options[] = {
    CLI_JSON(args, json, "one JSON object on stdout"),
    {"--quick", NULL, CLI_SWITCH, offsetof(args, quick),
     .help = "a tenth of the messages (a smoke test, not a measurement)"},
};
static const cli_table table = {
    "bench mailbox", options, CLI_COUNT(options),
    .about = "Messaging throughput and round trips of the actor kernel, each against a\n"
             "reference measured in the same run (mutex queue, raw futex, raw uv_async).\n"};

int bench_mailbox(int argc, char **argv) {
  args a = {0};
  const int parsed = cli_parse(&table, argc, argv, &a, NULL);
  if (parsed != CLI_GO) return parsed;
  const bool json = a.json, quick = a.quick;
  int rounds = quick ? 2 : ROUNDS_MAX;
  uint64_t n = quick ? 1000000 : 4000000, nrt = quick ? 10000 : 40000;
  uint64_t nmutex = n / 4, npark = nrt / 4;
  const double M = 1e6;

  /* Cases alternate round by round, so that a change in the machine's load (other
   * processes, frequency) hits troupe and its reference alike; figures are medians over
   * rounds (throughput) or over every sample of every round (latency). */
  enum { T_QMB, T_QWF, T_QMQ, T_EMB, T_EMQ, T_EACT, T_EJE, T_ELIBC, T_MMB, T_MMQ, NT };
  enum { L_SPIN, L_SPIN_RAW, L_PARK, L_PARK_RAW, L_LOOP, L_LOOP_RAW, L_LOOP_UV2, NL };
  double tput[NT][ROUNDS_MAX];
  uint64_t *lat[NL];
  uint64_t lcount[NL] = {nrt, nrt, npark, npark, npark, npark, npark};
  for (int c = 0; c < NL; c++) lat[c] = malloc(rounds * lcount[c] * sizeof **lat);
  for (int r = 0; r < rounds; r++) {
    tput[T_QMB][r] = flow_run(Q_MAILBOX, MEM_RECYCLED, 1, n) / M;
    tput[T_QWF][r] = flow_run(Q_WFCQ, MEM_RECYCLED, 1, n) / M;
    tput[T_QMQ][r] = flow_run(Q_MUTEX, MEM_RECYCLED, 1, nmutex) / M;
    tput[T_EMB][r] = flow_run(Q_MAILBOX, MEM_TROUPE, 1, n) / M;
    tput[T_EMQ][r] = flow_run(Q_MUTEX, MEM_TROUPE, 1, nmutex) / M;
    tput[T_EACT][r] = actor_flow_run(n) / M;
    tput[T_EJE][r] = HAVE_JEMALLOC ? flow_run(Q_MAILBOX, MEM_JEMALLOC, 1, n) / M : 0;
    tput[T_ELIBC][r] = flow_run(Q_MAILBOX, MEM_LIBC, 1, n) / M;
    tput[T_MMB][r] = flow_run(Q_MAILBOX, MEM_TROUPE, 2, n / 2) / M;
    tput[T_MMQ][r] = flow_run(Q_MUTEX, MEM_TROUPE, 2, nmutex / 2) / M;
    actor_rtt(TR_ACTOR_PINNED, TR_SPIN_FOREVER, nrt, lat[L_SPIN] + r * nrt);
    raw_rtt(false, nrt, lat[L_SPIN_RAW] + r * nrt);
    actor_rtt(TR_ACTOR_PINNED, TR_SPIN_NONE, npark, lat[L_PARK] + r * npark);
    raw_rtt(true, npark, lat[L_PARK_RAW] + r * npark);
    actor_rtt(TR_ACTOR_LOOP, TR_SPIN_NONE, npark, lat[L_LOOP] + r * npark);
    uv_futex_rtt(npark, lat[L_LOOP_RAW] + r * npark);
    uv_async_rtt(npark, lat[L_LOOP_UV2] + r * npark);
  }
  double q_mb = cli_median(tput[T_QMB], rounds), q_wf = cli_median(tput[T_QWF], rounds),
         q_mq = cli_median(tput[T_QMQ], rounds);
  double e_mb = cli_median(tput[T_EMB], rounds), e_mq = cli_median(tput[T_EMQ], rounds);
  double e_act = cli_median(tput[T_EACT], rounds);
  double e_libc = cli_median(tput[T_ELIBC], rounds);
#ifdef TR_USE_JEMALLOC
  double e_je = cli_median(tput[T_EJE], rounds);
#endif
  double m_mb = cli_median(tput[T_MMB], rounds), m_mq = cli_median(tput[T_MMQ], rounds);
  latency l[NL];
  for (int c = 0; c < NL; c++) {
    l[c] = summarize(lat[c], rounds * lcount[c]);
    free(lat[c]);
  }
  latency spin = l[L_SPIN], spin_raw = l[L_SPIN_RAW], park = l[L_PARK],
          park_raw = l[L_PARK_RAW], loop = l[L_LOOP], loop_raw = l[L_LOOP_RAW],
          loop_uv2 = l[L_LOOP_UV2];

  const row rows[] = {
      {"queue 1→1, memory recycled", q_mb, "M msg/s", "liburcu wfcqueue", q_wf,
       "≥ 0.8× wfcqueue", q_mb >= 0.8 * q_wf},
      {"queue 1→1, mutex queue", q_mq, "M msg/s", "troupe's queue", q_mb, "(reference)", true},
      {"end to end 1→1, alloc+free", e_mb, "M msg/s", "mutex queue", e_mq, "≥ 30 M/s", e_mb >= 30},
      {"end to end 1→1, to a pinned actor", e_act, "M msg/s", "the same, queue only", e_mb,
       "≥ 30 M/s", e_act >= 30},
#ifdef TR_USE_JEMALLOC
      {"end to end 1→1, jemalloc alone", e_je, "M msg/s", "troupe's messages", e_mb,
       "(allocator choice)", true},
#endif
      {"end to end 1→1, glibc malloc", e_libc, "M msg/s", "troupe's messages", e_mb,
       "(allocator choice)", true},
      {"end to end 2→1, alloc+free", m_mb, "M msg/s", "mutex queue", m_mq, "", true},
      {"round trip, spinning, median", spin.median_us, "µs", "raw cache line", spin_raw.median_us,
       "≤ 1 µs", spin.median_us <= 1.0},
      {"round trip, spinning, p99", spin.p99_us, "µs", "raw cache line", spin_raw.p99_us, "", true},
      {"round trip, parked, median", park.median_us, "µs", "raw futex", park_raw.median_us,
       "≤ 1.5× raw futex", park.median_us <= 1.5 * park_raw.median_us},
      {"round trip, parked, p99", park.p99_us, "µs", "raw futex", park_raw.p99_us, "", true},
      {"round trip, pinned↔loop, median", loop.median_us, "µs", "raw uv_async+futex",
       loop_raw.median_us, "≤ 1.5× raw uv_async", loop.median_us <= 1.5 * loop_raw.median_us},
      {"round trip, pinned↔loop, p99", loop.p99_us, "µs", "raw uv_async+futex", loop_raw.p99_us,
       "", true},
      {"round trip, two loops, median", loop_uv2.median_us, "µs", "pinned↔loop", loop.median_us,
       "(uv_async both ways)", true},
  };
  enum { NROWS = sizeof rows / sizeof rows[0] };

  fprintf(stderr, "troupe bench mailbox: %ld CPUs, message memory: %s%s\n",
          sysconf(_SC_NPROCESSORS_ONLN), tr_msg_allocator(), quick ? " (quick: not a measurement)" : "");
  static const row header = {"case", 0, "", "", 0, "target", true};
  fputc('|', stderr);
  put_cell(header.name, 34);
  put_cell("troupe", 14);
  put_cell("reference", 26);
  put_cell("ratio", 8);
  put_cell(header.target, 24);
  fputs("\n|------------------------------------|----------------|----------------------------"
        "|----------|--------------------------|\n", stderr);
  int missed = 0;
  for (int i = 0; i < NROWS; i++) {
    print_row(&rows[i]);
    missed += !rows[i].met;
  }
  if (missed) fprintf(stderr, "%d target(s) missed on this run\n", missed);
  if (json) {
    printf("{\"bench\":\"mailbox\",\"allocator\":\"%s\",\"cpus\":%ld,\"quick\":%s,\"rows\":[",
           tr_msg_allocator(), sysconf(_SC_NPROCESSORS_ONLN), quick ? "true" : "false");
    for (int i = 0; i < NROWS; i++)
      printf("%s{\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"reference\":\"%s\","
             "\"reference_value\":%.6g,\"target\":\"%s\",\"met\":%s}",
             i ? "," : "", rows[i].name, rows[i].value, rows[i].unit, rows[i].ref_name,
             rows[i].ref, rows[i].target, rows[i].met ? "true" : "false");
    printf("]}\n");
  }
  return CLI_OK;
}
