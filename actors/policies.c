/* policies.c — the table of step policies (step_policy.h): the built-in rows, and the rows a
 * program adds before them. */
#include <string.h>

#include "step_policy.h"

static bool serves_async(const tr_job_config *c) { return c->async.enabled; }
static bool serves_sync(const tr_job_config *c) { return !c->async.enabled; }

static const char *lacks_async(const tr_job_config *c, const tr__policy_parts *parts) {
  (void)c;
  return parts->worker ? NULL : "a server (tr_job_serve)";
}

static const char *lacks_sync(const tr_job_config *c, const tr__policy_parts *parts) {
  if (c->zero && !parts->group) return "a replica group (tr_job_group)";
  if (c->zero && c->optim.clip > 0 && !parts->clip)
    return "the norm exchange with every stage (tr_job_group of every stage)";
  return NULL;
}

static int make_async(tr__policy *out, const tr__policy_parts *parts) {
  return tr__policy_async(out, parts->worker);
}

static int make_sync(tr__policy *out, const tr__policy_parts *parts) {
  return tr__policy_sync(out, parts);
}

/* Local SGD (policy_local.c): a replica group wherever there are replicas to average. */
int tr__policy_local(tr__policy *out, const tr__policy_parts *parts);
static bool serves_local(const tr_job_config *c) { return c->local.sync_every > 0; }

static const char *lacks_local(const tr_job_config *c, const tr__policy_parts *parts) {
  return c->layout.replicas > 1 && !parts->group ? "a replica group (tr_job_group)" : NULL;
}

static const tr__policy_row builtin[] = {
    {"async", serves_async, lacks_async, make_async},
    {"local", serves_local, lacks_local, tr__policy_local},
    {"sync", serves_sync, lacks_sync, make_sync},
};

enum { MAX_ADDED = 8 };
/* Rows a program added: written before any job is made, read after (like layer kinds). */
static const tr__policy_row *added[MAX_ADDED];
static int nadded;

int tr__policy_add(const tr__policy_row *row) {
  if (nadded == MAX_ADDED) return TR_ENOMEM;
  added[nadded++] = row;
  return 0;
}

static bool fits(const tr__policy_row *r, const char *name, const tr_job_config *c) {
  return name ? strcmp(r->name, name) == 0 : r->serves && r->serves(c);
}

const tr__policy_row *tr__policy_find(const char *name, const tr_job_config *c) {
  for (int i = nadded - 1; i >= 0; i--)
    if (fits(added[i], name, c)) return added[i];
  for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
    if (fits(&builtin[i], name, c)) return &builtin[i];
  return NULL;
}

int64_t tr__policy_run_first_step(const void *p, const tr__run *run) {
  (void)p;
  return tr_graph_first_step(run->g);
}

int64_t tr__policy_every_step(const void *p, const tr__run *run, int64_t steps) {
  (void)p, (void)run;
  return steps;
}

int tr__policy_claim(const tr__policy_ctx *ctx, int64_t step, int64_t *run_step) {
  tr_graph *g = ctx->run->g;
  /* -1: the ranks are agreeing on the end, which a tr_graph_end_msg brings */
  const int claim = ctx->stage == 0 ? tr_graph_claim_step(g, step) : step < tr_graph_end_step(g);
  *run_step = step;
  return claim < 0 ? TR__BEGIN_WAIT : claim == 0 ? TR__BEGIN_END : TR__BEGIN_GO;
}
