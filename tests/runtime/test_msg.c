/* test_msg.c — message memory: whole cache lines, pools that take their messages back from
 * other threads, and no message lost or shared between two owners under concurrency. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_util.h"
#include "troupe.h"

typedef struct small_msg {
  tr_msg hdr;
  uint64_t v;
} small_msg;
static TR_MSGTYPE_DEFINE(small_type, small_msg);

static void messages_take_whole_cache_lines(void **state) {
  (void)state;
  for (size_t size = sizeof(tr_msg); size < 600; size += 37) {
    tr_msg *m = tr_msg_new_size(&small_type, size);
    assert_int_equal((uintptr_t)m % TR_CACHE_LINE, 0);
    assert_int_equal(m->size % TR_CACHE_LINE, 0);
    assert_true(m->size >= size);
    assert_ptr_equal(m->type, &small_type);
    assert_null(m->from);
    tr_msg_free(m);
  }
}

enum { BATCH = 64 };

typedef struct handoff {
  tr_msg *msgs[BATCH];
} handoff;

static void *free_them(void *arg) {
  handoff *h = arg;
  tr_msg_pool *mine = tr_msg_pool_new();
  tr_msg_pool_attach(mine);
  for (int i = 0; i < BATCH; i++) tr_msg_free(h->msgs[i]);
  tr_msg_pool_attach(NULL); /* sends the batch home */
  tr_msg_pool_free(mine);
  return NULL;
}

static void pool_takes_back_messages_freed_on_another_thread(void **state) {
  (void)state;
  tr_msg_pool *pool = tr_msg_pool_new();
  if (pool == NULL) skip(); /* a build without pools */
  tr_msg_pool_attach(pool);
  handoff h;
  for (int i = 0; i < BATCH; i++) h.msgs[i] = tr_msg_new(&small_type);
  void *first[BATCH];
  for (int i = 0; i < BATCH; i++) first[i] = h.msgs[i];
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, free_them, &h), 0);
  pthread_join(t, NULL);
  /* Every returned message comes back into use before the pool grows without bound. */
  enum { TRIES = 1024 };
  tr_msg **again = malloc(TRIES * sizeof *again);
  int reused = 0;
  for (int i = 0; i < TRIES; i++) {
    again[i] = tr_msg_new(&small_type);
    for (int j = 0; j < BATCH; j++) reused += (void *)again[i] == first[j];
  }
  assert_int_equal(reused, BATCH);
  for (int i = 0; i < TRIES; i++) tr_msg_free(again[i]);
  free(again);
  tr_msg_pool_attach(NULL);
  tr_msg_pool_free(pool);
}

/* Producers with pools send to a consumer with a pool, which frees every message it pops:
 * each message's payload must be intact (no two owners at once) and nothing lost. */
enum { PRODUCERS = 3 };

typedef struct pool_flow {
  tr_mailbox q;
  uint64_t per;
} pool_flow;

typedef struct pool_producer {
  pool_flow *f;
  uint32_t id;
} pool_producer;

static void *pool_produce(void *arg) {
  pool_producer *p = arg;
  tr_msg_pool *pool = tr_msg_pool_new();
  tr_msg_pool_attach(pool);
  for (uint64_t i = 0; i < p->f->per; i++) {
    small_msg *m = tr_msg_new(&small_type);
    m->v = ((uint64_t)p->id << 48) | i;
    tr_mailbox_push(&p->f->q, &m->hdr);
  }
  tr_msg_pool_attach(NULL);
  /* Its messages may still be queued: the pool is freed by the test once they are drained. */
  return pool;
}

static void pooled_messages_survive_many_threads(void **state) {
  (void)state;
  pool_flow f;
  tr_mailbox_init(&f.q);
  f.per = test_scaled(300000);
  tr_msg_pool *mine = tr_msg_pool_new();
  tr_msg_pool_attach(mine);
  pthread_t t[PRODUCERS];
  pool_producer args[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    args[i] = (pool_producer){&f, i};
    assert_int_equal(pthread_create(&t[i], NULL, pool_produce, &args[i]), 0);
  }
  uint64_t next[PRODUCERS] = {0}, got = 0;
  while (got < f.per * PRODUCERS) {
    tr_msg *released;
    small_msg *m = (small_msg *)tr_mailbox_pop(&f.q, &released);
    tr_msg_free(released);
    if (m == NULL) continue;
    uint32_t id = (uint32_t)(m->v >> 48);
    assert_true(id < PRODUCERS);
    assert_int_equal(m->v & ((1ULL << 48) - 1), next[id]);
    next[id]++;
    got++;
  }
  tr_msg_pool *pools[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], (void **)&pools[i]);
  tr_mailbox_drain(&f.q);
  tr_msg_pool_attach(NULL);
  for (int i = 0; i < PRODUCERS; i++) tr_msg_pool_free(pools[i]);
  tr_msg_pool_free(mine);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(messages_take_whole_cache_lines),
      cmocka_unit_test(pool_takes_back_messages_freed_on_another_thread),
      cmocka_unit_test(pooled_messages_survive_many_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
