/* costs_ranks.c — the links between the processes of a job under mpirun (planner.h:
 * tr__costs_ranks): a message's latency and time per byte from one rank to another, and an
 * MPI sum's over every rank, each the line through a few sizes timed by every rank together
 * (world.h: tr__world_time_links) fitted by least squares. Kept in the file of costs per
 * kind of device, number of ranks and of machines they span; rank 0 reads and writes the
 * file and every rank takes its figures, so that all decide alike whether to time (a
 * collective). Timing takes some tens of milliseconds, so unlike the layers it is done
 * before a run where the file has none.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "planner.h"
#include "world.h"

/* A message of one activation to a bucket of gradients and beyond (mlp's are 1 and 4 MiB). */
static const size_t SIZES[] = {4 << 10, 256 << 10, 1 << 20, 4 << 20};
enum { NSIZES = sizeof SIZES / sizeof SIZES[0], HOST = 64, MAX_RANKS = TR_PLAN_MAX_DEVICES };
/* A message's line and a sum's: each a start (0 where the fit went through the origin) and a
 * time per byte (0 where the times did not grow with the bytes). */
static const tr__costs_unit LINES[4] = {TR__COSTS_SECONDS_OR_0, TR__COSTS_PER_BYTE_OR_0,
                                        TR__COSTS_SECONDS_OR_0, TR__COSTS_PER_BYTE_OR_0};

void tr__costs_fit_line(const double *x, const double *y, int n, double *alpha,
                        double *per_unit) {
  double mx = 0, my = 0;
  for (int i = 0; i < n; i++) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0;
  for (int i = 0; i < n; i++) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  double b = sxx > 0 ? sxy / sxx : 0;
  if (b < 0) b = 0;
  double a = my - b * mx;
  if (a < 0) { /* through the origin instead: time in proportion to the bytes */
    double xy = 0, xx = 0;
    for (int i = 0; i < n; i++) xy += x[i] * y[i], xx += x[i] * x[i];
    a = 0, b = xx > 0 && xy > 0 ? xy / xx : 0;
  }
  *alpha = a, *per_unit = b;
}

/* Distinct host names among the ranks' (MAX_RANKS at most). */
static int machines(tr_world *w, int *count) {
  char mine[HOST] = "", all[MAX_RANKS][HOST];
  const int size = tr_world_size(w);
  gethostname(mine, sizeof mine - 1);
  if (tr_world_allgather(w, mine, sizeof mine, all)) return TR_ESYS;
  *count = 0;
  for (int r = 0; r < size; r++) {
    bool seen = false;
    for (int q = 0; q < r && !seen; q++) seen = !strcmp(all[r], all[q]);
    *count += !seen;
  }
  return 0;
}

int tr__costs_ranks(tr_world *w, const tr_device *d, const tr_plan_costs_config *c,
                    tr__rank_links *out, char *err, size_t n) {
  *out = (tr__rank_links){.ranks = tr_world_size(w)};
  if (out->ranks < 2) return tr_errorf(err, n, TR_EINVAL, "costs: one process has no links");
  if (out->ranks > MAX_RANKS) /* the same on every rank: none times */
    return tr_errorf(err, n, TR_EINVAL, "costs: %d ranks, the planner times at most %d",
                     out->ranks, MAX_RANKS);
  int rc = machines(w, &out->machines);
  if (rc) return tr_errorf(err, n, rc, "costs: the ranks could not compare their hosts");
  char name[256], what[64];
  snprintf(what, sizeof what, "ranks %d on %d machines: a message, a sum", out->ranks,
           out->machines);
  tr__costs_key(d, what, name, sizeof name);
  /* rank 0's file says whether every rank times them */
  struct {
    double v[4];
    int kept;
  } mine = {{0}, 0}, all[MAX_RANKS];
  const tr_plan_costs_config read = {.path = c ? c->path : NULL};
  char why[256];
  if (tr_world_rank(w) == 0)
    mine.kept = tr__costs_entry(&read, name, 1, 4, LINES, tr__costs_not_kept, name, mine.v,
                                why, sizeof why) == 0 && !(c && c->remeasure);
  if (tr_world_allgather(w, &mine, sizeof mine, all))
    return tr_errorf(err, n, TR_ESYS, "costs: the ranks could not share the links' costs");
  double *v = all[0].v;
  if (!all[0].kept) {
    double message[NSIZES], sum[NSIZES], x[NSIZES];
    rc = tr__world_time_links(w, SIZES, NSIZES, message, sum);
    if (rc) return tr_errorf(err, n, rc, "costs: timing the links between the ranks");
    for (int i = 0; i < NSIZES; i++) x[i] = (double)SIZES[i];
    tr__costs_fit_line(x, message, NSIZES, &v[0], &v[1]);
    tr__costs_fit_line(x, sum, NSIZES, &v[2], &v[3]);
    if (tr_world_rank(w) == 0) /* a file that is not one of costs keeps them from the next */
      (void)tr__costs_keep(&read, name, 1, 4, LINES, v, why, sizeof why);
  }
  out->message = v[0], out->message_per_byte = v[1];
  out->sum = v[2], out->sum_per_byte = v[3];
  return 0;
}
