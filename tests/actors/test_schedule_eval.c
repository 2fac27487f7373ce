/* test_schedule_eval.c — an evaluation pass's action lists (tr_schedule_eval_actions): each
 * device's, for every schedule, p <= 8 and (interleaved) v <= 4 chunks, checked action by
 * action and run in a small simulation of its own: forward only, one activation in flight
 * per device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "troupe.h"

enum { P_MAX = 8, V_MAX = 4 };

static const tr_schedule_kind kinds[] = {TR_SCHEDULE_GPIPE, TR_SCHEDULE_1F1B,
                                         TR_SCHEDULE_INTERLEAVED, TR_SCHEDULE_ZB1};

static const char *name_of(const tr_schedule *sc) {
  return tr_schedule_kind_name(tr_schedule_config_of(sc)->kind);
}

static int chunks_of(const tr_schedule *sc) { return tr_schedule_config_of(sc)->chunks; }

/* Each device's list: micro-batch by micro-batch, every chunk in order, receive (but on the
 * first virtual stage), forward, send (but on the last), all in slot 0, the peers the
 * neighbouring virtual stages' devices. Run with one activation in flight per device (the
 * stage holds every credit before a forward, as slot 0 is reused): each receive finds its
 * message first on its edge, and every device reaches its end. */
static void check_eval(const tr_schedule *sc, int p, int m) {
  (void)m;
  const int v = chunks_of(sc), last = p * v - 1;
  for (int me = 0; me <= 5; me += 5) {
    tr_action list[P_MAX][V_MAX * 3 * 5];
    size_t n[P_MAX], pc[P_MAX] = {0};
    for (int s = 0; s < p; s++) {
      n[s] = tr_schedule_eval_actions(sc, s, me, NULL, 0);
      assert_true(n[s] <= sizeof list[s] / sizeof list[s][0]);
      assert_int_equal(tr_schedule_eval_actions(sc, s, me, list[s], n[s]), n[s]);
      size_t k = 0;
      for (int i = 0; i < me; i++)
        for (int c = 0; c < v; c++) {
          const int vs = c * p + s;
          const tr_action_kind want[3] = {TR_ACTION_RECV_ACT, TR_ACTION_FORWARD,
                                          TR_ACTION_SEND_ACT};
          for (int w = 0; w < 3; w++) {
            if ((w == 0 && vs == 0) || (w == 2 && vs == last)) continue;
            const tr_action *a = &list[s][k++];
            const int peer = w == 0 ? (s + p - 1) % p : w == 2 ? (s + 1) % p : -1;
            if (a->kind != want[w] || a->mb != i || a->chunk != c || a->slot != 0 ||
                a->peer != peer)
              fail_msg("%s p=%d v=%d, device %d action %zu: %s mb %d chunk %d slot %d peer %d",
                       name_of(sc), p, v, s, k - 1, tr_action_kind_name(a->kind), a->mb,
                       a->chunk, a->slot, a->peer);
          }
        }
      assert_int_equal(k, n[s]);
    }
    /* the run: in[to] holds the (chunk, mb) sent to it, one a device at most */
    int in_vs[P_MAX], in_mb[P_MAX], inflight[P_MAX] = {0}, queued[P_MAX] = {0};
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < p; s++)
        while (pc[s] < n[s]) {
          const tr_action *a = &list[s][pc[s]];
          const int vs = a->chunk * p + s;
          if (a->kind == TR_ACTION_RECV_ACT) {
            if (!queued[s]) break;
            if (in_vs[s] != vs || in_mb[s] != a->mb)
              fail_msg("%s p=%d v=%d: device %d finds another's activation", name_of(sc), p, v,
                       s);
            queued[s] = 0, inflight[a->peer] = 0;
          } else if (a->kind == TR_ACTION_FORWARD) {
            if (vs < last && inflight[s]) break; /* slot 0 still lent */
          } else {
            if (queued[a->peer]) break;
            queued[a->peer] = 1, inflight[s] = 1, in_vs[a->peer] = vs + 1, in_mb[a->peer] = a->mb;
          }
          pc[s]++, moved = true;
        }
    }
    for (int s = 0; s < p; s++)
      if (pc[s] != n[s])
        fail_msg("%s p=%d v=%d: the evaluation deadlocks on device %d", name_of(sc), p, v, s);
  }
}

static void an_evaluation_pass_takes_each_microbatch_through_every_chunk(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    const bool il = kinds[k] == TR_SCHEDULE_INTERLEAVED;
    for (int v = il ? 2 : 1; v <= (il ? V_MAX : 1); v++)
      for (int p = il ? 2 : 1; p <= P_MAX; p++) {
        tr_schedule *sc;
        assert_int_equal(tr_schedule_new(&sc, &(tr_schedule_config){kinds[k], p, 4, v}), 0);
        check_eval(sc, p, 4);
        tr_schedule_free(sc);
      }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_evaluation_pass_takes_each_microbatch_through_every_chunk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
