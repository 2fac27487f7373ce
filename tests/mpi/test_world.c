/* test_world.c — the world of ranks (tr_world.h) and what a graph's edges carry between them
 * (dist/). One program, three ways to run it:
 *
 *   test_world one        a world of one process (no mpirun; a build without MPI too): its
 *                         rank, size and devices, none of them a placeholder, all its own
 *   mpirun -np 2 test_world two
 *                         every rank's devices in rank order, each owned by the rank it came
 *                         from and a placeholder elsewhere; an untyped edge from rank 0 to
 *                         rank 1 carries a type of the user's with its own codec (an array
 *                         behind a pointer) and a typed edge a flat type byte for byte;
 *                         the graph refuses to grow while it runs (every rank builds it)
 *   mpirun -np 2 test_world refused
 *                         a type the untyped edge does not say it carries is refused, the run
 *                         failing with the edge named (tests/mpi/mpi.sh checks the text)
 *
 * Exit status 0 when every check holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe.h"
#include "tr_world.h"

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "test_world: %s:%d: %s does not hold\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

enum { FLOATS = 1000, ALIGN = 64 };

/* ---- a type of the user's whose codec carries what it points at ------------------------- */

typedef struct blob_msg {
  tr_msg hdr;
  size_t n;
  float *data; /* n floats */
} blob_msg;

static size_t at(void) { return (sizeof(blob_msg) - sizeof(tr_msg) + ALIGN - 1) / ALIGN * ALIGN; }
static size_t blob_size(const tr_msg *m) { return at() + ((const blob_msg *)m)->n * sizeof(float); }
static void blob_put(const tr_msg *m, uint8_t *out) {
  const blob_msg *b = (const blob_msg *)m;
  memcpy(out, &b->n, sizeof b->n);
  memcpy(out + at(), b->data, b->n * sizeof(float));
}
static tr_msg *blob_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  size_t count;
  if (n < at()) return NULL;
  memcpy(&count, in, sizeof count);
  if (count > (n - at()) / sizeof(float) || n != at() + count * sizeof(float)) return NULL;
  blob_msg *b = tr_msg_new(type);
  b->n = count;
  b->data = (float *)(in + at()); /* the receiver's buffer, kept until the credit comes back */
  return &b->hdr;
}
static const tr_msg_codec blob_codec = {.size = blob_size, .put = blob_put, .get = blob_get};
static TR_MSGTYPE_DEFINE_CODEC(blob_type, blob_msg, &blob_codec);

/* flat, no codec: crosses byte for byte on an edge of its own type only */
typedef struct note_msg {
  tr_msg hdr;
  int value;
} note_msg;
static TR_MSGTYPE_DEFINE(note_type, note_msg);

static const tr_msgtype *const blobs_carry[] = {&blob_type, NULL};

/* ---- the two actors ------------------------------------------------------------------------- */

typedef struct side {
  tr_graph *g;
  tr_edge *blobs, *notes;
  float data[FLOATS];
  bool refused; /* send a note on the untyped edge, which does not carry it */
  int got;
  int grow_rc, connect_rc; /* adding an actor, an edge while the graph runs across ranks */
  char grow_err[256];
} side;

static int late_receive(tr_actor *self, tr_msg *m) { return (void)self, (void)m, 0; }
static const tr_behaviour sender_late = {.name = "late", .receive = late_receive};

static int sender_start(tr_actor *self) {
  side *s = tr_actor_state(self);
  for (int i = 0; i < FLOATS; i++) s->data[i] = (float)i * 0.5f;
  tr_actor *late; /* every rank builds the same graph before it runs: no growing then */
  s->grow_rc = tr_graph_add(s->g, &(tr_actor_config){.name = "late", .kind = TR_ACTOR_LOOP,
                                                     .behaviour = &sender_late},
                            &late);
  snprintf(s->grow_err, sizeof s->grow_err, "%s", tr_graph_error(s->g));
  tr_edge *e;
  s->connect_rc = tr_graph_connect(s->g, &(tr_edge_config){.from = self, .to = self,
                                                           .name = "loop", .credits = 1},
                                   &e);
  if (s->refused) {
    note_msg *n = tr_msg_new(&note_type);
    n->value = 7;
    return tr_edge_send_control(s->blobs, n); /* the transport refuses it */
  }
  blob_msg *b = tr_msg_new(&blob_type);
  b->n = FLOATS;
  b->data = s->data;
  int rc = tr_edge_send_control(s->blobs, b);
  note_msg *n = tr_msg_new(&note_type);
  n->value = 42;
  if (rc == 0) rc = tr_edge_send_control(s->notes, n);
  tr_graph_done(s->g, self);
  return rc;
}
static int sender_receive(tr_actor *self, tr_msg *m) { return (void)self, (void)m, 0; }

static int receiver_receive(tr_actor *self, tr_msg *m) {
  side *s = tr_actor_state(self);
  if (m->type == &blob_type) {
    const blob_msg *b = (const blob_msg *)m;
    CHECK(b->n == FLOATS);
    for (int i = 0; i < FLOATS; i++) CHECK(b->data[i] == (float)i * 0.5f);
    tr_edge_release(s->blobs, 1);
    s->got++;
  } else if (m->type == &note_type) {
    CHECK(((const note_msg *)m)->value == 42);
    tr_edge_release(s->notes, 1);
    s->got++;
  }
  if (s->got == 2) tr_graph_done(s->g, self);
  return 0;
}

static const tr_behaviour sender = {.name = "sender", .start = sender_start,
                                    .receive = sender_receive};
static const tr_behaviour receiver = {.name = "receiver", .receive = receiver_receive};

/* ---- the checks ------------------------------------------------------------------------------ */

static void devices(tr_world *w, const char *spec, int per_rank) {
  char err[256];
  tr_device_list *list;
  CHECK(tr_world_devices(w, spec, &list, err, sizeof err) == 0);
  const int size = tr_world_size(w), me = tr_world_rank(w);
  CHECK(tr_device_list_count(list) == per_rank * size);
  for (int i = 0; i < per_rank * size; i++) {
    const tr_device *d = tr_device_list_at(list, i);
    const int owner = i / per_rank; /* rank order */
    CHECK(tr_world_device_rank(w, d) == owner);
    CHECK(tr_device_is_placeholder(d) == (owner != me));
    CHECK(tr_device_info_of(d)->index == i);
  }
  tr_device_list_close(list);
}

static void one(void) {
  char err[256];
  tr_world *w, *again;
  CHECK(tr_world_open(&w, err, sizeof err) == 0);
  CHECK(tr_world_rank(w) == 0 && tr_world_size(w) == 1);
  CHECK(strcmp(tr_world_kind(w), "one process") == 0);
  CHECK(tr_world_open(&again, err, sizeof err) == TR_EINVAL && again == NULL);
  CHECK(strstr(err, "one is open already") != NULL);
  const int mine = 5;
  int all = 0;
  CHECK(tr_world_allgather(w, &mine, sizeof mine, &all) == 0 && all == 5);
  CHECK(tr_world_agree(w, "the options", &mine, sizeof mine, err, sizeof err) == 0);
  devices(w, "host:2", 2);
  tr_device_list *none;
  CHECK(tr_world_devices(w, NULL, &none, err, sizeof err) == TR_EINVAL && none == NULL);
  tr_world_close(w);
  CHECK(tr_world_open(&w, err, sizeof err) == 0); /* closed: one may open again */
  tr_world_close(w);
}

static int two(bool refused) {
  char err[256];
  tr_world *w;
  CHECK(tr_world_open(&w, err, sizeof err) == 0);
  CHECK(tr_world_size(w) == 2);
  devices(w, "host:1", 1);
  tr_graph *g;
  CHECK(tr_graph_new(&g, &(tr_system_config){.name = "world", .watchdog_ms = 20000}) == 0);
  CHECK(tr_graph_set_world(g, w) == 0);
  static side s0, s1;
  s0 = (side){.g = g, .refused = refused};
  s1 = (side){.g = g};
  tr_actor *a, *b;
  CHECK(tr_graph_add_on(g, 0, &(tr_actor_config){.name = "a", .kind = TR_ACTOR_LOOP,
                                                 .behaviour = &sender,
                                                 .state = tr_world_rank(w) == 0 ? &s0 : NULL},
                        &a) == 0);
  CHECK(tr_graph_add_on(g, 1, &(tr_actor_config){.name = "b", .kind = TR_ACTOR_LOOP,
                                                 .behaviour = &receiver,
                                                 .state = tr_world_rank(w) == 1 ? &s1 : NULL},
                        &b) == 0);
  tr_edge *blobs, *notes;
  CHECK(tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .name = "blobs",
                                              .credits = 1, .carries = blobs_carry},
                         &blobs) == 0);
  CHECK(tr_graph_connect(g, &(tr_edge_config){.from = a, .to = b, .type = &note_type,
                                              .name = "notes", .credits = 1},
                         &notes) == 0);
  s0.blobs = s1.blobs = blobs;
  s0.notes = s1.notes = notes;
  const int rc = tr_graph_run(g, 0, 1, 0);
  if (rc) fprintf(stderr, "test_world: rank %d: %s\n", tr_world_rank(w), tr_graph_error(g));
  if (rc == 0 && tr_world_rank(w) == 1) CHECK(s1.got == 2);
  if (tr_world_rank(w) == 0) {
    CHECK(s0.grow_rc == TR_ESTATE && s0.connect_rc == TR_ESTATE);
    CHECK(strstr(s0.grow_err, "every rank must build the same graph") != NULL);
  }
  tr_graph_free(g);
  tr_world_close(w); /* after a failed run: ends every rank (MPI_Abort) */
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "one";
  if (!strcmp(mode, "one")) {
    one();
    printf("ok   a world of one process\n");
    return 0;
  }
  if (!strcmp(mode, "two") || !strcmp(mode, "refused")) return two(!strcmp(mode, "refused"));
  fprintf(stderr, "usage: test_world [one|two|refused]\n");
  return 2;
}
