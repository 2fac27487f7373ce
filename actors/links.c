/* links.c — what a message between two devices' actors costs before its bytes: the time from
 * a send to the receiving stage at work on it, measured once per kind of device and kept in
 * the file of costs (planner.h: tr__costs_link).
 *
 * Two pinned actors, as two stages are, pass a message back and forth; the sender waits
 * (sleeps) between rounds longer than a pinned actor spins, so the receiver has parked, as a
 * stage waiting for its neighbour has: a round trip is then two wake-ups and two hand-overs.
 * Half the median round trip is the latency a pipeline's edge adds to each message.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner.h"
#include "tr_system.h"

enum { ROUNDS = 64, PAUSE_US = 300 };

typedef struct ping_msg {
  tr_msg hdr;
  uint64_t sent;
} ping_msg;
static TR_MSGTYPE_DEFINE(ping_type, ping_msg);

typedef struct ping {
  tr_actor *peer;
  double rtt[ROUNDS];
  int n;
} ping;

static void send_ping(tr_actor *self, ping *p) {
  ping_msg *m = tr_msg_new(&ping_type);
  m->hdr.from = self;
  m->sent = tr_now_ns();
  tr_actor_send(p->peer, m);
}

static int ping_start(tr_actor *self) {
  send_ping(self, tr_actor_state(self));
  return 0;
}

static int ping_receive(tr_actor *self, tr_msg *msg) {
  ping *p = tr_actor_state(self);
  if (msg->type != &ping_type) return 0;
  p->rtt[p->n++] = (double)(tr_now_ns() - ((ping_msg *)msg)->sent) / 1e9;
  if (p->n == ROUNDS) {
    tr_system_stop(tr_actor_system(self), 0);
    return 0;
  }
  /* long enough that the other parks, as a stage waiting for its neighbour has */
  nanosleep(&(struct timespec){.tv_nsec = PAUSE_US * 1000}, NULL);
  send_ping(self, p);
  return 0;
}

static int pong_receive(tr_actor *self, tr_msg *msg) {
  if (msg->type != &ping_type) return 0;
  ping_msg *m = tr_msg_new(&ping_type);
  m->hdr.from = self;
  m->sent = ((ping_msg *)msg)->sent;
  tr_actor_send(msg->from, m);
  return 0;
}

static const tr_behaviour ping_behaviour = {.name = "ping", .start = ping_start,
                                            .receive = ping_receive};
static const tr_behaviour pong_behaviour = {.name = "pong", .receive = pong_receive};

static int measure_link(void *arg, double *v, char *err, size_t n) {
  (void)arg;
  ping p = {0};
  tr_system *sys;
  tr_actor *a, *b;
  int rc = tr_system_new(&sys, &(tr_system_config){.name = "link"});
  if (rc) return rc;
  rc = tr_actor_spawn(sys, &(tr_actor_config){.name = "pong", .kind = TR_ACTOR_PINNED,
                                              .behaviour = &pong_behaviour},
                      &b);
  p.peer = b;
  if (rc == 0)
    rc = tr_actor_spawn(sys, &(tr_actor_config){.name = "ping", .kind = TR_ACTOR_PINNED,
                                                .behaviour = &ping_behaviour, .state = &p},
                        &a);
  if (rc == 0) rc = tr_system_run(sys);
  if (rc && err && n) snprintf(err, n, "measuring a message's latency: %s", tr_system_error(sys));
  tr_system_free(sys);
  if (rc) return rc;
  tr__sort_doubles(p.rtt, ROUNDS);
  v[0] = p.rtt[ROUNDS / 2] / 2;
  return 0;
}

int tr__costs_link(tr_device *d, const tr_plan_costs_config *c, double *latency, char *err,
                   size_t n) {
  char name[256];
  tr__costs_key(d, "link latency", name, sizeof name);
  return tr__costs_entry(c, name, 1, 1, (const tr__costs_unit[]){TR__COSTS_SECONDS}, measure_link,
                         NULL, latency, err, n);
}
