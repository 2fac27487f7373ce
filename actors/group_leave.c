/* group_leave.c — members that leave a replica group (group.h: local SGD's elastic
 * replicas): the leave each sends behind its buckets, and what a member does when one comes
 * — each step is summed over the members taking part in it. */
#include <stdio.h>

#include "group_impl.h"

/* Member `m` left: it takes part in no step from `from` on (it announced nothing of them).
 * A bucket of the step in hand that waited for it alone is whole now. Buckets of a later
 * step counted there (a peer ahead) lack this member's own, so they cannot be mistaken for
 * whole: fewer members take part in a later step, never more. */
int tr__group_left(tr__group *g, int m, int64_t from) {
  g->left_at[m] = from;
  const int64_t step = g->step;
  group_step *s = &g->gs[step & 1];
  const int k = tr__group_members_in(g, step, NULL);
  for (int b = 0; b < g->nb && !g->gone; b++) {
    if (s->ready[b] == 0 || s->ready[b] < k) continue;
    s->ready[b] = 0;
    int rc = tr__group_reduce_chunk(g, s, step, b);
    if (rc) return rc;
  }
  return 0;
}

int tr__group_leave(tr__group *g, char *why, size_t n) {
  if (g->nccl || g->cross >= 0 || g->sharded) {
    snprintf(why, n, "its replica group sums %s, where a member cannot leave",
             g->nccl ? "through NCCL" : g->cross >= 0 ? "across processes" : "sharded");
    return TR_ESTATE;
  }
  if (g->mid) {
    snprintf(why, n, "it failed after it began sending its part of the sum of step %lld: the "
             "other replicas may have summed some of it, so it cannot leave consistently",
             (long long)g->last_ready);
    return TR_ESTATE;
  }
  const int64_t from = g->last_ready + 1;
  for (int r = 0; r < g->n; r++) {
    if (r == g->me || !tr__group_takes_part(g, r, from)) continue;
    tr__bucket_msg *m = tr_msg_new(&tr__bucket_type);
    *m = (tr__bucket_msg){.hdr = m->hdr, .bucket = -1, .member = g->me,
                          .news = TR__BUCKET_LEFT, .step = from};
    int rc = tr_edge_send_control(g->out[r], m);
    if (rc) {
      snprintf(why, n, "its leave found no credit on the edge to member %d", r);
      return rc;
    }
  }
  g->left_at[g->me] = from;
  g->gone = true;
  return 0;
}

void tr__group_left_receive(tr__group *g, const tr_msg *msg) {
  if (msg->type != &tr__bucket_type) return;
  const tr__bucket_msg *m = (const tr__bucket_msg *)msg;
  if (m->member != g->me) tr_edge_release(g->in[m->member], 1);
}

int tr__group_gone(const tr__group *g, int64_t step) {
  if (g == NULL) return 0;
  const int across = g->gs[step & 1].across; /* the members whose sums the step's hold */
  return g->cross >= 0 ? (across > 0 ? g->whole - across : 0)
                       : g->n - tr__group_members_in(g, step, NULL);
}

