/* hello.c — the smallest program built against an installed troupe (tools/check-install.sh):
 * a pinned actor sends itself one message and, on receiving it on its own thread, stops the
 * system. Exits 0 when that happened as described.
 *
 *   cc hello.c $(pkg-config --cflags --libs troupe) && ./a.out
 */
#include <pthread.h>
#include <stdio.h>

#include <troupe.h>

typedef struct {
  tr_msg hdr;
  int answer;
} greeting_msg;
TR_MSGTYPE_DEFINE(greeting_type, greeting_msg);

static pthread_t main_thread;
static int received;

static int hello_start(tr_actor *self) {
  greeting_msg *m = tr_msg_new(&greeting_type);
  m->hdr.from = self;
  m->answer = 42;
  tr_actor_send(self, m);
  return 0;
}

static int hello_receive(tr_actor *self, tr_msg *msg) {
  if (msg->type != &greeting_type) return 0; /* the runtime's own messages */
  if (((greeting_msg *)msg)->answer != 42 || pthread_equal(pthread_self(), main_thread))
    return tr_actor_fail(self, TR_EINVAL, "greeting garbled or on the wrong thread");
  received = 1;
  printf("hello from actor '%s' on its own thread (troupe %s, message memory: %s)\n",
         tr_actor_name(self), TR_VERSION_STRING, tr_msg_allocator());
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}

static const tr_behaviour hello = {.name = "hello", .start = hello_start,
                                   .receive = hello_receive};

int main(void) {
  main_thread = pthread_self();
  tr_system *sys;
  int rc = tr_system_new(&sys, &(tr_system_config){.name = "hello"});
  if (rc) {
    fprintf(stderr, "hello: tr_system_new: %s\n", tr_strerror(rc));
    return 1;
  }
  tr_actor *a;
  rc = tr_actor_spawn(sys, &(tr_actor_config){.name = "hello", .kind = TR_ACTOR_PINNED,
                                              .behaviour = &hello}, &a);
  if (!rc) rc = tr_system_run(sys);
  if (rc) fprintf(stderr, "hello: %s: %s\n", tr_strerror(rc), tr_system_error(sys));
  tr_system_free(sys);
  return rc || !received;
}
