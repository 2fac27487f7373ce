/* predict_async.c — an asynchronous job's rate from its costs (planner.h: tr__plan_async): R
 * workers, each training whole batches on its own replica, pushing its gradient to the
 * parameter server and waiting for the reply; the server applies the pushes one at a time
 * (server.c).
 *
 * Every worker costs the same, so the job is a closed loop of R alike customers and one
 * server with fixed times: a worker's cycle is its compute C, its push's and reply's hand-
 * overs 2L, and its own update A at the server (the optimizer over the parameters, the copy
 * of them into the worker's memory, delay compensation's passes). With no bound on
 * staleness, or one of a push or more, workers alike never wait for each other: they fall
 * into turns at the server, and the rate is R / (C + 2L + A) pushes a second until the
 * server is busy all the time, 1 / A. A bound of 0 (SSP: no worker a push ahead of the
 * slowest) makes rounds: all R compute, then the server applies their R pushes one after
 * the other before any reply, C + 2L + R·A a round. Each update's staleness is the others'
 * pushes applied since its pull: R − 1 in turns; in rounds, where every pull follows the
 * round's last update, those applied before it in its round: (R − 1) / 2 on average.
 *
 * Host devices share the machine: a worker computes as much slower as the devices at once
 * slow it (tr__costs_together), in proportion to how many compute at once on average; the
 * server's update is slowed alike (it is another thread of the same machine). And the
 * server's thread takes its share of the CPUs: where the workers at work and the server at
 * work are more threads than CPUs, every one of them has that much less of a CPU. The
 * server's work depends on the rate, which depends on the slowdown: a few rounds find where
 * they agree.
 */
#include <math.h>

#include "planner.h"

/* rounds of rate and slowdown: each moves the rate less than the last (a few % by the 3rd) */
enum { ROUNDS = 4 };

static void rate(const tr__async_costs *c, double slow, tr__async_step *out) {
  const int R = c->workers;
  const double C = c->compute * slow, A = c->apply * slow, L2 = 2 * c->latency;
  if (c->staleness == 0) { /* rounds */
    out->cycle = C + L2 + R * A;
    out->pushes_per_s = R / out->cycle;
    out->staleness = (R - 1) / 2.0;
    out->server_bound = false;
  } else {
    const double free_running = R / (C + L2 + A), server = A > 0 ? 1 / A : INFINITY;
    out->server_bound = server < free_running;
    out->pushes_per_s = out->server_bound ? server : free_running;
    out->cycle = R / out->pushes_per_s;
    out->staleness = R - 1;
  }
  out->utilization = out->cycle > 0 ? C / out->cycle : 0;
}

int tr__plan_async(const tr__async_costs *c, tr__async_step *out) {
  *out = (tr__async_step){0};
  if (c->workers < 1 || !(c->compute > 0) || !(c->apply >= 0) || !(c->latency >= 0) ||
      !(c->together >= 1) || c->cpus < 0 ||
      !isfinite(c->compute + c->apply + c->latency + c->together))
    return TR_EINVAL;
  double applied = 1; /* the slowdown of the rate in out */
  rate(c, applied, out);
  for (int round = 0; round < ROUNDS && (c->together > 1 || c->cpus > 0); round++) {
    /* devices computing at once, on average: each worker's share of its cycle */
    const double busy = c->workers * out->utilization;
    double slow = c->workers > 1 ? 1 + (c->together - 1) * (busy > 1 ? busy - 1 : 0) /
                                           (c->workers - 1)
                                 : 1;
    /* the server's thread beside them: its share of the time, at the rate just found */
    const double server = out->pushes_per_s * c->apply * applied;
    if (c->cpus > 0 && busy + server > c->cpus)
      slow *= (busy + server) / (busy > c->cpus ? busy : c->cpus);
    rate(c, applied = slow, out);
  }
  return 0;
}
