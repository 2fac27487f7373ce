/* server_members.c — the parameter server's book of the workers that come and go
 * (server_impl.h): a worker that joins a running job (tr_async_config.join_at) is welcomed
 * with the parameters of that moment and counted by SSP from then; one that fails and leaves
 * (tr_async_config.elastic) is dropped, saying so on stderr; the figures say who did which at
 * which step. */
#include <stdio.h>

#include "server_impl.h"

/* Worker i's device as messages name it: with its rank when it lives in another process. */
static const char *worker_name(const server *sv, int i, char *buf, size_t n) {
  const worker *w = &sv->w[i];
  if (!w->remote) return tr_device_name(w->dev);
  snprintf(buf, n, "%s@r%d", tr_device_name(w->dev),
           tr_graph_actor_rank(sv->run->g, tr_edge_from(w->push)));
  return buf;
}

/* The parameters of this moment to worker i, which joins with them at `step`, level with the
 * slowest in SSP's count. */
static int welcome_one(tr_actor *self, server *sv, int i, int64_t step, int64_t slowest) {
  worker *w = &sv->w[i];
  if (tr_memcpy(sv->s, w->host, tr_stage_params(sv->st), sv->numel * sizeof(float),
                TR_COPY_D2H) || tr_stream_synchronize(sv->s))
    return tr__server_fail_device(self, sv, "copying the parameters a worker joins with");
  tr__reply_msg *r = tr_msg_new(&tr__reply_type);
  *r = (tr__reply_msg){.hdr = r->hdr, .pulled = true, .version = sv->version,
                       .params = w->host, .numel = sv->numel};
  sv->fig.sent += (int64_t)(sv->numel * sizeof(float));
  w->joined = true;
  w->joined_at = step;
  w->clock = slowest == INT64_MAX ? 0 : slowest;
  char name[64];
  fprintf(stderr, "troupe: worker %d (%s) joined at step %lld\n", i,
          worker_name(sv, i, name, sizeof name), (long long)step);
  return tr_edge_send_control(w->reply, r);
}

/* The step the server has reached, and the clock of the slowest worker that trains
 * (INT64_MAX: none). */
static int64_t slowest_clock(const server *sv) {
  int64_t slowest = INT64_MAX;
  for (int i = 0; i < sv->W; i++)
    if (sv->w[i].active && sv->w[i].joined && sv->w[i].clock < slowest) slowest = sv->w[i].clock;
  return slowest;
}

/* Workers that join (tr_async_config.join_at), once the server has applied the updates up
 * to step join_at, or when no worker that trains is left: one wired before the run gets the
 * parameters of that moment with the reply; one that joins a running job (deferred) is asked
 * for while the run has steps left (none once a worker has left at the end, its loader
 * finding no more), and gets them once its edges have come (joined). */
int tr__server_welcome(tr_actor *self, server *sv) {
  const tr_async_config *ac = &sv->run->c.async;
  if (ac->join_at <= 0) return 0;
  tr_graph *g = sv->run->g;
  const int64_t step = tr_graph_first_step(g) + sv->version;
  const int64_t slowest = slowest_clock(sv);
  if (step < ac->join_at && slowest != INT64_MAX) return 0;
  for (int i = 0; i < sv->W; i++) {
    worker *w = &sv->w[i];
    if (w->deferred) {
      if (w->asked || sv->no_steps || step >= tr_graph_end_step(g))
        continue; /* none left to train: never added */
      w->asked = true;
      sv->active++; /* its leave ends its part, as any worker's */
      int rc = sv->join(sv->join_arg, i);
      if (rc) return rc;
      continue;
    }
    if (!w->active || w->joined) continue;
    int rc = welcome_one(self, sv, i, step, slowest);
    if (rc) return rc;
  }
  return 0;
}

int tr__server_defer(void *state, int i, int (*fn)(void *arg, int worker), void *arg) {
  server *sv = state;
  if (i < 0 || i >= sv->W || sv->w[i].push || sv->w[i].deferred) return TR_EINVAL;
  sv->w[i].deferred = true;
  sv->join = fn;
  sv->join_arg = arg;
  return 0;
}

/* A deferred worker's edges have come (join.c): its slot is filled, it gets the parameters. */
int tr__server_joined(tr_actor *self, server *sv, const tr__joined_msg *m) {
  worker *w = &sv->w[m->worker];
  TR_ASSERT(w->deferred && w->asked && !w->push);
  w->push = m->push;
  w->reply = m->reply;
  w->dev = m->dev;
  w->active = true;
  tr_edge_release(w->push, 1); /* the credit this message took */
  int rc = tr__server_open_worker(sv, m->worker);
  return rc ? rc : welcome_one(self, sv, m->worker, tr_graph_first_step(sv->run->g) + sv->version,
                               slowest_clock(sv));
}

/* ---- workers that leave (tr_async_config.elastic) ------------------------------------------ */

/* Worker l->worker failed and left: what it pushed stays applied; a reply SSP held for it is
 * dropped, and SSP's bound no longer counts it (serve: only workers still running). */
void tr__server_depart(server *sv, const tr__leave_msg *l) {
  worker *w = &sv->w[l->worker];
  w->left = true;
  w->waiting = false;
  w->left_at = tr_graph_first_step(sv->run->g) + sv->version;
  snprintf(w->why, sizeof w->why, "%.*s", (int)sizeof w->why - 1, l->why);
  sv->departed++;
  char name[64];
  fprintf(stderr, "troupe: worker %d (%s) left at step %lld: %s\n", l->worker,
          worker_name(sv, l->worker, name, sizeof name), (long long)w->left_at, w->why);
}

/* Every worker failed: the run fails, naming them. */
int tr__server_all_departed(tr_actor *self, server *sv) {
  char list[400];
  size_t n = 0;
  list[0] = 0;
  char name[64];
  for (int i = 0; i < sv->W && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%sworker %d (%s) at step %lld: %s",
                          i ? "; " : "", i, worker_name(sv, i, name, sizeof name),
                          (long long)sv->w[i].left_at, sv->w[i].why);
  return tr_actor_fail(self, TR_EDEVICE, "async.elastic: every worker left, none is left to "
                       "train: %s", list);
}

/* The run is over: each worker that left gives back what it holds (elastic.c). */
int tr__server_tell_departed(server *sv) {
  for (int i = 0; i < sv->W; i++) {
    if (!sv->w[i].left) continue;
    tr__reply_msg *r = tr_msg_new(&tr__reply_type);
    *r = (tr__reply_msg){.hdr = r->hdr, .version = sv->version, .ended = true};
    int rc = tr_edge_send_control(sv->w[i].reply, r);
    if (rc) return rc;
  }
  return 0;
}

/* "2@37,3@40": the workers that left (`joined`: that joined), each at its step; a list
 * too long for the figures stops short (the bitmask of those that left says the rest). */
static void members(const server *sv, bool joined, char *list, size_t size) {
  size_t n = 0;
  list[0] = 0;
  for (int i = 0; i < sv->W; i++) {
    const worker *w = &sv->w[i];
    if (joined ? !tr__worker_joins(&sv->run->c, i) || !w->joined : !w->left) continue;
    const int k = snprintf(list + n, size - n, "%s%d@%lld", n ? "," : "", i,
                           (long long)(joined ? w->joined_at : w->left_at));
    if (k < 0 || (size_t)k >= size - n) break;
    n += (size_t)k;
  }
}

/* Who left and who joined, and how many still ran at the end. */
void tr__server_members_figures(const server *sv, tr__figures *f) {
  char list[TR__FIGURES_TEXT / 3]; /* twice: those that left, those that joined */
  uint64_t gone = 0;
  for (int i = 0; i < sv->W; i++)
    if (sv->w[i].left) gone |= UINT64_C(1) << i;
  int never = 0; /* workers that were to join a running job whose turn never came */
  for (int i = 0; i < sv->W; i++) never += sv->w[i].deferred && !sv->w[i].asked;
  tr__figures_int(f, TR__M_WORKERS_ALIVE, sv->W - sv->departed - never);
  tr__figures_int(f, TR__M_WORKERS_GONE, (int64_t)gone);
  members(sv, false, list, sizeof list);
  tr__figures_text(f, TR__M_WORKERS_LEFT, list);
  members(sv, true, list, sizeof list);
  tr__figures_text(f, TR__M_WORKERS_JOINED, list);
}

