/* world_solo.c — dist/ in a build without MPI (-Dmpi=disabled), where nothing of dist/ is
 * compiled: the world is this process alone (tr_world.h keeps its functions for programs
 * written for any world), a graph never has a remote side, and the collectives' round and
 * sum protocol (collective.h) exist only to be named. Built instead of dist/world.c and
 * dist/collective.c, never beside them. */
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "world.h"

struct tr_world {
  int unused;
};

static tr_world *opened; /* as with MPI: one world at a time */

TR_MSGTYPE_DEFINE(tr__sum_type, tr__sum_msg);
TR_MSGTYPE_DEFINE(tr__summed_type, tr__summed_msg);

int tr_world_open(tr_world **out, char *err, size_t n) {
  if (out == NULL) return tr_errorf(err, n, TR_EINVAL, "tr_world_open: out is NULL");
  *out = NULL;
  if (opened) return tr_errorf(err, n, TR_EINVAL, "world: one is open already in this process");
  tr_world *w = calloc(1, sizeof *w);
  if (w == NULL) return tr_errorf(err, n, TR_ENOMEM, "world: out of memory");
  opened = *out = w;
  return 0;
}

void tr_world_close(tr_world *w) {
  if (w == NULL) return;
  opened = NULL;
  free(w);
}

int tr_world_rank(const tr_world *w) { return (void)w, 0; }
int tr_world_size(const tr_world *w) { return (void)w, 1; }
const char *tr_world_kind(const tr_world *w) { return (void)w, "one process"; }
void tr__world_broken(tr_world *w) { (void)w; }
int64_t tr__world_clock_offset(const tr_world *w, int rank) { return (void)w, (void)rank, 0; }

int tr__world_time_links(tr_world *w, const size_t *bytes, int n, double *message, double *sum) {
  (void)w, (void)bytes, (void)n, (void)message, (void)sum;
  return TR_EINVAL; /* no other rank to reach */
}

int tr_world_allgather(tr_world *w, const void *mine, size_t bytes, void *all) {
  TR__NOT_NULL(w);
  if (bytes && (mine == NULL || all == NULL))
    return tr__misuse(TR_EINVAL, "tr_world_allgather: %s is NULL", mine ? "all" : "mine");
  memmove(all, mine, bytes);
  return 0;
}

int tr_world_agree(tr_world *w, const char *what, const void *mine, size_t bytes, char *err,
                   size_t n) {
  (void)what;
  if (w == NULL || (mine == NULL && bytes))
    return tr_errorf(err, n, TR_EINVAL, "tr_world_agree: %s is NULL", w ? "mine" : "w");
  return 0; /* one rank agrees with itself */
}

int tr_world_devices(tr_world *w, const char *spec, tr_device_list **out, char *err, size_t n) {
  if (w == NULL || out == NULL)
    return tr_errorf(err, n, TR_EINVAL, "tr_world_devices: %s is NULL", w ? "out" : "w");
  *out = NULL;
  if (spec == NULL) return tr_errorf(err, n, TR_EINVAL, "devices: no rank has any");
  return tr_device_list_open(out, spec, err, n);
}

int tr_world_device_rank(const tr_world *w, const tr_device *d) { return (void)w, (void)d, 0; }

int tr__dist_comm_round(tr_world *w, int owner, bool yes, tr__comm_word **all, char *why,
                        size_t size) {
  (void)w;
  if (!(*all = calloc(1, sizeof **all))) return TR_ENOMEM;
  if (yes)
    (*all)[0].yes = owner != 0 || tr_comm_id_init(TR_DEVICE_CUDA, &(*all)[0].id, why, size) == 0;
  return 0;
}
