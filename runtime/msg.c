/* msg.c — message memory (per-thread pools over the allocator) and the runtime's own
 * message types.
 *
 * Why pools: in a graph, messages are allocated on one thread and freed on another. Through
 * jemalloc alone every such free lands in the receiver's thread cache and travels back to
 * the sender's through the arena, locks and slab bitmaps included: ~10 M msgs/s on this
 * machine's 1→1 benchmark. A pool that takes its messages back in batches moves the same
 * memory with one compare-and-swap per 64 messages (`troupe bench mailbox` shows both).
 */
#include "tr_msg.h"

#include <stdlib.h>
#include <string.h>

#ifdef TR_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

TR_MSGTYPE_DEFINE(tr_msg_stop_type, tr_msg);

/* The flow id lives in what was padding; the sixth word is the edge's send stamp. */
_Static_assert(sizeof(void *) != 8 || sizeof(tr_msg) == 48, "tr_msg grew");
TR_MSGTYPE_DEFINE(tr_timer_msg_type, tr_timer_msg);

static void *sys_alloc(size_t size) {
#ifdef TR_USE_JEMALLOC
  return mallocx(size, MALLOCX_ALIGN(TR_CACHE_LINE));
#else
  return aligned_alloc(TR_CACHE_LINE, size);
#endif
}

static void sys_free(void *p, size_t size) {
#ifdef TR_USE_JEMALLOC
  sdallocx(p, size, MALLOCX_ALIGN(TR_CACHE_LINE)); /* sized: no lookup on the hot path */
#else
  (void)size;
  free(p);
#endif
}

#ifdef TR_USE_MSG_POOL

enum { POOL_CLASSES = 4, SLAB_MESSAGES = 64, RETURN_BATCH = 64 };

typedef struct pool_class {
  tr_msg *local;                                    /* the owner's free list */
  _Alignas(TR_CACHE_LINE) _Atomic(tr_msg *) remote; /* others push batches; owner takes all */
  char pad[TR_CACHE_LINE - sizeof(tr_msg *)];
} pool_class;

typedef struct slab {
  void *mem;
  size_t size;
} slab;

struct tr_msg_pool {
  pool_class cls[POOL_CLASSES]; /* messages of 1, 2, 3, 4 cache lines */
  slab *slabs;                  /* the owner's: everything this pool ever carved */
  size_t nslabs, cap;
};

/* The calling thread's pool, and the frees it holds for another pool until a batch fills. */
static __thread tr_msg_pool *current __attribute__((tls_model("initial-exec")));
static __thread struct {
  tr_msg *head, *tail;
  tr_msg_pool *pool;
  unsigned cls, n;
} held __attribute__((tls_model("initial-exec")));

static void push_home(tr_msg_pool *p, unsigned cls, tr_msg *head, tr_msg *tail) {
  _Atomic(tr_msg *) *stack = &p->cls[cls].remote;
  tr_msg *top = atomic_load_explicit(stack, memory_order_relaxed);
  do {
    atomic_store_explicit(&tail->next, top, memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(stack, &top, head, memory_order_release,
                                                  memory_order_relaxed));
}

static void send_held_home(void) {
  if (held.n == 0) return;
  push_home(held.pool, held.cls, held.head, held.tail);
  held.head = held.tail = NULL;
  held.n = 0;
}

static tr_msg *pool_grow(tr_msg_pool *p, unsigned cls) {
  size_t size = (size_t)(cls + 1) * TR_CACHE_LINE;
  char *slab = sys_alloc(SLAB_MESSAGES * size);
  TR_ASSERT(slab != NULL);
  if (p->nslabs == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 16;
    p->slabs = realloc(p->slabs, p->cap * sizeof *p->slabs);
    TR_ASSERT(p->slabs != NULL);
  }
  p->slabs[p->nslabs++] = (struct slab){slab, SLAB_MESSAGES * size};
  for (size_t i = 0; i < SLAB_MESSAGES; i++) {
    tr_msg *m = (tr_msg *)(slab + i * size);
    m->size = (uint32_t)size;
    atomic_store_explicit(&m->next, i + 1 < SLAB_MESSAGES ? (tr_msg *)(slab + (i + 1) * size) : NULL,
                          memory_order_relaxed);
  }
  return (tr_msg *)slab;
}

static tr_msg *pool_take(tr_msg_pool *p, unsigned cls) {
  pool_class *c = &p->cls[cls];
  tr_msg *m = c->local;
  if (m == NULL) m = atomic_exchange_explicit(&c->remote, NULL, memory_order_acquire);
  if (m == NULL) m = pool_grow(p, cls);
  c->local = atomic_load_explicit(&m->next, memory_order_relaxed);
  m->pool = p;
  return m;
}

static void pool_give(tr_msg *m) {
  tr_msg_pool *p = m->pool;
  unsigned cls = m->size / TR_CACHE_LINE - 1;
  if (p == current) {
    atomic_store_explicit(&m->next, p->cls[cls].local, memory_order_relaxed);
    p->cls[cls].local = m;
  } else if (current == NULL) {
    /* No pool, so no moment to flush a batch later: send it home at once. */
    push_home(p, cls, m, m);
  } else {
    if (held.n && (held.pool != p || held.cls != cls)) send_held_home();
    atomic_store_explicit(&m->next, held.head, memory_order_relaxed);
    if (held.n == 0) held.tail = m;
    held.head = m;
    held.pool = p;
    held.cls = cls;
    if (++held.n == RETURN_BATCH) send_held_home();
  }
}

tr_msg_pool *tr_msg_pool_new(void) {
  tr_msg_pool *p = sys_alloc(sizeof *p);
  TR_ASSERT(p != NULL);
  memset(p, 0, sizeof *p);
  return p;
}

void tr_msg_pool_attach(tr_msg_pool *pool) {
  send_held_home();
  current = pool;
}

void tr_msg_pool_flush(void) { send_held_home(); }

void tr_msg_pool_free(tr_msg_pool *pool) {
  if (pool == NULL) return;
  for (size_t i = 0; i < pool->nslabs; i++) sys_free(pool->slabs[i].mem, pool->slabs[i].size);
  free(pool->slabs);
  sys_free(pool, sizeof *pool);
}

#else /* no pools: every message is one allocation, visible to sanitizers */

tr_msg_pool *tr_msg_pool_new(void) { return NULL; }
void tr_msg_pool_attach(tr_msg_pool *pool) { TR_ASSERT(pool == NULL); }
void tr_msg_pool_flush(void) {}
void tr_msg_pool_free(tr_msg_pool *pool) { TR_ASSERT(pool == NULL); }

#endif

void *tr_msg_new_size(const tr_msgtype *type, size_t size) {
  if (type == NULL) {
    tr__misuse(TR_EINVAL, "tr_msg_new_size: type is NULL");
    return NULL;
  }
  if (size < sizeof(tr_msg) || size > UINT32_MAX - TR_CACHE_LINE) {
    tr__misuse(TR_EINVAL, "tr_msg_new_size: size %zu of type '%s': give sizeof(tr_msg) (%zu "
               "bytes) to 4 GiB", size, type->name, sizeof(tr_msg));
    return NULL;
  }
  /* Whole cache lines: a consumer reading one message must not share a line with the next
   * message a producer is writing (a 48-byte class halves queue throughput). */
  size = (size + TR_CACHE_LINE - 1) & ~(size_t)(TR_CACHE_LINE - 1);
  tr_msg *m;
#ifdef TR_USE_MSG_POOL
  if (current != NULL && size <= POOL_CLASSES * TR_CACHE_LINE) {
    m = pool_take(current, (unsigned)(size / TR_CACHE_LINE - 1));
  } else
#endif
  {
    m = sys_alloc(size);
    TR_ASSERT(m != NULL);
    m->pool = NULL;
    m->size = (uint32_t)size;
  }
  m->type = type;
  m->from = NULL;
  m->flow = 0;
  m->sent_ns = 0;
  return m;
}

void *tr_msg_new(const tr_msgtype *type) {
  if (type == NULL) {
    tr__misuse(TR_EINVAL, "tr_msg_new: type is NULL");
    return NULL;
  }
  return tr_msg_new_size(type, type->size);
}

void tr_msg_free(void *msg) {
  tr_msg *m = msg;
  if (m == NULL) return;
#ifdef TR_USE_MSG_POOL
  if (m->pool != NULL) {
    pool_give(m);
    return;
  }
#endif
  sys_free(m, m->size);
}

const char *tr_msg_allocator(void) {
#if defined(TR_USE_MSG_POOL) && defined(TR_USE_JEMALLOC)
  return "pools over jemalloc";
#elif defined(TR_USE_MSG_POOL)
  return "pools over libc";
#elif defined(TR_USE_JEMALLOC)
  return "jemalloc";
#else
  return "libc";
#endif
}
