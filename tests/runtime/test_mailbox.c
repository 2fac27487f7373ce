/* test_mailbox.c — the MPSC queue: nothing lost, nothing duplicated, FIFO per producer,
 * the empty mark wakes exactly one sender, and draining gives back what the messages never
 * handled own. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_util.h"
#include "tr_mailbox.h"

typedef struct seq_msg {
  tr_msg hdr;
  uint32_t producer;
  uint64_t seq;
} seq_msg;
static TR_MSGTYPE_DEFINE(seq_type, seq_msg);

/* A message type that owns memory: its codec's `sent` gives it back and counts. */
typedef struct owning_msg {
  tr_msg hdr;
  int *owned;
} owning_msg;
static int given_back;
static void owning_sent(tr_msg *m) {
  free(((owning_msg *)m)->owned);
  ((owning_msg *)m)->owned = NULL;
  given_back++;
}
static const tr_msg_codec owning_codec = {.sent = owning_sent};
static TR_MSGTYPE_DEFINE_CODEC(owning_type, owning_msg, &owning_codec);

static void mailbox_pop_on_empty_returns_null(void **state) {
  (void)state;
  tr_mailbox q;
  tr_mailbox_init(&q);
  tr_msg *released = (tr_msg *)1;
  assert_null(tr_mailbox_pop(&q, &released));
  assert_true(tr_mailbox_empty(&q));
  tr_mailbox_drain(&q);
}

static void mailbox_is_fifo_and_releases_the_previous_message(void **state) {
  (void)state;
  tr_mailbox q;
  tr_mailbox_init(&q);
  seq_msg *m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = tr_msg_new(&seq_type);
    m[i]->seq = (uint64_t)i;
    tr_mailbox_push(&q, &m[i]->hdr);
  }
  tr_msg *released;
  assert_ptr_equal(tr_mailbox_pop(&q, &released), &m[0]->hdr);
  assert_null(released); /* the stub */
  assert_ptr_equal(tr_mailbox_pop(&q, &released), &m[1]->hdr);
  assert_ptr_equal(released, &m[0]->hdr);
  tr_msg_free(released);
  assert_ptr_equal(tr_mailbox_newest(&q), &m[2]->hdr);
  tr_mailbox_drain(&q); /* frees m[1] (the stub now) and m[2] */
  assert_true(tr_mailbox_empty(&q));
}

/* Draining gives back what the messages never handled own (a run that failed with a
 * checkpoint part in flight leaked it), and leaves the handled one's to its handler. */
static void draining_gives_back_what_unhandled_messages_own(void **state) {
  (void)state;
  tr_mailbox q;
  tr_mailbox_init(&q);
  owning_msg *m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = tr_msg_new(&owning_type);
    m[i]->owned = malloc(sizeof(int));
    tr_mailbox_push(&q, &m[i]->hdr);
  }
  tr_msg *released;
  assert_ptr_equal(tr_mailbox_pop(&q, &released), &m[0]->hdr); /* handled: its handler's */
  free(m[0]->owned);
  given_back = 0;
  tr_mailbox_drain(&q);
  assert_int_equal(given_back, 2);
}

static void mailbox_mark_tells_exactly_one_sender(void **state) {
  (void)state;
  tr_mailbox q;
  tr_mailbox_init(&q);
  /* A new queue is marked: its first sender must wake the consumer. */
  assert_true(tr_mailbox_push(&q, tr_msg_new(&seq_type)));
  assert_false(tr_mailbox_push(&q, tr_msg_new(&seq_type)));
  assert_false(tr_mailbox_mark_empty(&q)); /* two pending */
  tr_msg *released;
  assert_non_null(tr_mailbox_pop(&q, &released));
  assert_non_null(tr_mailbox_pop(&q, &released));
  tr_msg_free(released);
  assert_true(tr_mailbox_mark_empty(&q));
  assert_true(tr_mailbox_mark_empty(&q)); /* marking twice is harmless */
  assert_true(tr_mailbox_push(&q, tr_msg_new(&seq_type)));
  assert_false(tr_mailbox_push(&q, tr_msg_new(&seq_type)));
  tr_mailbox_drain(&q);
}

enum { PRODUCERS = 4 };

typedef struct producer_arg {
  tr_mailbox *q;
  uint32_t id;
  uint64_t count;
  _Atomic uint64_t *wakes;
} producer_arg;

static void *producer(void *p) {
  producer_arg *a = p;
  uint64_t wakes = 0;
  for (uint64_t i = 0; i < a->count; i++) {
    seq_msg *m = tr_msg_new(&seq_type);
    m->producer = a->id;
    m->seq = i;
    wakes += tr_mailbox_push(a->q, &m->hdr);
  }
  atomic_fetch_add(a->wakes, wakes);
  return NULL;
}

/* The consumer also marks the queue empty whenever it finds it so; every mark must be
 * answered by exactly one sender's "wake" (plus the initial mark). */
static void mailbox_four_producers_lose_nothing_and_keep_order(void **state) {
  (void)state;
  tr_mailbox q;
  tr_mailbox_init(&q);
  uint64_t per = test_scaled(1000000);
  _Atomic uint64_t wakes = 0;
  pthread_t t[PRODUCERS];
  producer_arg args[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    args[i] = (producer_arg){&q, i, per, &wakes};
    assert_int_equal(pthread_create(&t[i], NULL, producer, &args[i]), 0);
  }
  uint64_t next[PRODUCERS] = {0};
  uint64_t got = 0, marks = 1; /* init marks the queue */
  bool marked = true;
  while (got < per * PRODUCERS) {
    tr_msg *released;
    tr_msg *m = tr_mailbox_pop(&q, &released);
    tr_msg_free(released);
    if (m == NULL) {
      if (!marked && tr_mailbox_mark_empty(&q)) {
        marked = true;
        marks++;
      }
      continue;
    }
    marked = false;
    seq_msg *s = (seq_msg *)m;
    assert_true(s->producer < PRODUCERS);
    if (s->seq != next[s->producer]) fail_msg("producer %u: got %llu, expected %llu",
                                              s->producer, (unsigned long long)s->seq,
                                              (unsigned long long)next[s->producer]);
    next[s->producer]++;
    got++;
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
  tr_msg *released;
  assert_null(tr_mailbox_pop(&q, &released)); /* nothing duplicated */
  for (int i = 0; i < PRODUCERS; i++) assert_int_equal(next[i], per);
  /* Each mark but a final unanswered one was answered by exactly one sender. */
  uint64_t w = atomic_load(&wakes);
  assert_true(w == marks || w + 1 == marks);
  tr_mailbox_drain(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mailbox_pop_on_empty_returns_null),
      cmocka_unit_test(mailbox_is_fifo_and_releases_the_previous_message),
      cmocka_unit_test(draining_gives_back_what_unhandled_messages_own),
      cmocka_unit_test(mailbox_mark_tells_exactly_one_sender),
      cmocka_unit_test(mailbox_four_producers_lose_nothing_and_keep_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
