/* bench_scaleout.c — `troupe bench scaleout`: a job across processes against the same job in
 * one, and the replica groups' sum across ranks against raw MPI_Allreduce.
 *
 *   training     `troupe train --strategy dp --devices host:R` in one process against
 *                `mpirun -np R troupe train --strategy dp --devices host:1`, alternated, each
 *                run's samples/s from its --json; medians and their ratio
 *   all-reduce   `mpirun -np R troupe bench allreduce`: buckets of several sizes summed across
 *                the ranks the way a replica group does it (a leader actor hands each bucket
 *                to its transport, which runs MPI_Iallreduce on its progress thread and
 *                answers with a message) against blocking MPI_Allreduce on the same bytes,
 *                alternated in the same processes; bus bandwidth as nccl-tests defines it,
 *                bytes / time × 2 (R − 1) / R
 *
 * The ranks run on this machine (shared memory between them); over a network the same
 * commands under `mpirun -H ...` measure that instead. Timing never gates CI.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "troupe.h"

#ifdef TR_HAVE_MPI
#include <mpi.h>

#include "collective.h"
#include "graph_impl.h"
#endif

enum { MAX_REPEATS = 15, SIZES = 4 };
static const size_t bucket_bytes[SIZES] = {64 << 10, 1 << 20, 4 << 20, 16 << 20};

/* ---- running the commands ------------------------------------------------------------------ */

/* Runs argv (NULL-terminated) with stdout into `out` (size n, NUL-terminated), stderr passed
 * through; its exit status, or -1. */
static int capture(char *const *argv, char *out, size_t n) {
  int fd[2];
  if (pipe(fd)) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    close(fd[0]);
    close(fd[1]);
    execvp(argv[0], argv);
    fprintf(stderr, "troupe: bench scaleout: cannot run %s\n", argv[0]);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  for (ssize_t got; len + 1 < n && (got = read(fd[0], out + len, n - 1 - len)) > 0;)
    len += (size_t)got;
  out[len] = 0;
  char sink[4096];
  while (read(fd[0], sink, sizeof sink) > 0) {}
  close(fd[0]);
  int status;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A number after "key": in a JSON object (NaN when absent or null). */
static double json_field(const char *json, const char *key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *p = strstr(json, pattern);
  if (p == NULL) return NAN;
  char *end;
  const double v = strtod(p + strlen(pattern), &end);
  return end == p + strlen(pattern) ? NAN : v;
}

/* mpirun with what a small shared machine needs: as root, more ranks than cores, no
 * binding (one process's threads are not pinned either). */
static int mpirun_prefix(char **argv, int ranks, char *np) {
  int k = 0;
  argv[k++] = getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun";
  if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
  argv[k++] = "--oversubscribe";
  argv[k++] = "--bind-to";
  argv[k++] = "none";
  argv[k++] = "-np";
  snprintf(np, 16, "%d", ranks);
  argv[k++] = np;
  return k;
}

typedef struct options {
  const char *model;
  int ranks, repeats;
  double seconds;
  int json;
} options;

static const cli_option rows[] = {
    CLI_MODEL(options, model, "the workload (default mlp)"),
    {"--ranks", "R", CLI_INT, offsetof(options, ranks), .lo = 2, .hi = 64,
     .help = "processes (default 2)"},
    CLI_SECONDS(options, seconds, 0.1, 3600, "each run's (default 5)"),
    CLI_REPEATS(options, repeats, MAX_REPEATS, "runs of each, alternated (default 3)"),
    CLI_JSON(options, json, "one JSON object on stdout"),
};
static const cli_table table = {
    "bench scaleout", rows, CLI_COUNT(rows),
    .about = "dp over R processes (mpirun, host:1 each) against dp over host:R in one process,\n"
             "alternated N times; then the all-reduce across R ranks against raw\n"
             "MPI_Allreduce (troupe bench allreduce).\n"};

/* samples/s of one run of dp: in one process (host:R), or across R (host:1 each). */
static double train_once(const char *self, const options *o, bool across) {
  char *argv[32], np[16], devices[16], seconds[32], out[1 << 14];
  int k = across ? mpirun_prefix(argv, o->ranks, np) : 0;
  snprintf(devices, sizeof devices, "host:%d", across ? 1 : o->ranks);
  snprintf(seconds, sizeof seconds, "%g", o->seconds);
  const cli_table *t = &cli_train_table;
  const char *rest[] = {self,
                        "train",
                        cli_flag(t, "model"),
                        o->model,
                        cli_flag(t, "strategy"),
                        "dp",
                        cli_flag(t, "devices"),
                        devices,
                        cli_flag(t, "seconds"),
                        seconds,
                        cli_flag(t, "json"),
                        cli_flag(t, "quiet"),
                        NULL};
  for (int i = 0; rest[i]; i++) argv[k++] = (char *)rest[i];
  argv[k] = NULL;
  const int rc = capture(argv, out, sizeof out);
  if (rc != 0) {
    fprintf(stderr, "troupe: bench scaleout: %s exited %d\n", argv[0], rc);
    return NAN;
  }
  return json_field(out, "samples_per_s");
}

int bench_scaleout(int argc, char **argv) {
  options o = {.model = "mlp", .ranks = 2, .repeats = 3, .seconds = 5};
  const int parsed = cli_parse(&table, argc, argv, &o, NULL);
  if (parsed != CLI_GO) return parsed;
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    fprintf(stderr, "troupe: bench scaleout: cannot find its own executable\n");
    return CLI_FAIL;
  }
  self[len] = 0;

  double one[MAX_REPEATS], across[MAX_REPEATS];
  int n1 = 0, n2 = 0;
  for (int r = 0; r < o.repeats; r++) { /* alternated: drift in the machine hits both alike */
    const double a = train_once(self, &o, false), b = train_once(self, &o, true);
    if (isfinite(a)) one[n1++] = a;
    if (isfinite(b)) across[n2++] = b;
    if (!o.json) fprintf(stderr, "  run %d: one process %.0f samples/s, %d processes %.0f\n", r + 1, a, o.ranks, b);
  }
  if (n1 == 0 || n2 == 0) {
    fprintf(stderr, "troupe: bench scaleout: no run finished (is Open MPI's mpirun installed, and "
                    "troupe built with MPI?)\n");
    return CLI_FAIL;
  }
  const double m1 = cli_median(one, n1), m2 = cli_median(across, n2);

  char *ar[32], np[16], out[1 << 14];
  int k = mpirun_prefix(ar, o.ranks, np);
  ar[k++] = self;
  ar[k++] = "bench";
  ar[k++] = "allreduce";
  ar[k++] = (char *)cli_flag(&table, "json");
  ar[k] = NULL;
  const int arc = capture(ar, out, sizeof out);
  if (o.json) {
    printf("{\"model\":\"%s\",\"ranks\":%d,\"repeats\":%d,\"seconds\":%g,"
           "\"one_process_samples_per_s\":%.6g,\"processes_samples_per_s\":%.6g,\"ratio\":%.4f,"
           "\"allreduce\":%s}\n",
           o.model, o.ranks, o.repeats, o.seconds, m1, m2, m2 / m1, arc == 0 ? out : "null");
    return arc == 0 ? CLI_OK : CLI_FAIL;
  }
  printf("scale-out: %s dp, median of %d alternated runs of %g s\n", o.model, o.repeats, o.seconds);
  printf("  one process, host:%-3d %12.0f samples/s\n", o.ranks, m1);
  printf("  %d processes, host:1 %12.0f samples/s   %.3f× one process\n", o.ranks, m2, m2 / m1);
  if (arc != 0) {
    fprintf(stderr, "troupe: bench scaleout: troupe bench allreduce under mpirun failed\n");
    return CLI_FAIL;
  }
  printf("\nall-reduce across %d ranks, bus bandwidth (GB/s), median of the runs\n", o.ranks);
  printf("  %10s %15s %17s %7s\n", "bytes", "MPI_Allreduce", "troupe transport", "ratio");
  for (int s = 0; s < SIZES; s++) {
    char key[32];
    snprintf(key, sizeof key, "mpi_%zu", bucket_bytes[s]);
    const double raw = json_field(out, key);
    snprintf(key, sizeof key, "troupe_%zu", bucket_bytes[s]);
    const double ours = json_field(out, key);
    printf("  %10zu %15.2f %17.2f %7.3f\n", bucket_bytes[s], raw, ours, ours / raw);
  }
  return CLI_OK;
}

/* ---- troupe bench allreduce (under mpirun) ----------------------------------------------- */

#ifdef TR_HAVE_MPI

/* A replica group's leader, reduced to its protocol with the transport: one bucket at a
 * time, each summed across the ranks before the next goes. */
typedef struct leader {
  tr_graph *g;
  tr_edge *sum, *summed;
  float *p;
  size_t n;
  int iters, done;
  uint64_t t0, t1;
} leader;

static int send_bucket(leader *l) {
  tr__sum_msg *s = tr_msg_new(&tr__sum_type);
  s->group = 0;
  s->bucket = 0;
  s->step = l->done;
  s->p = l->p;
  s->n = l->n;
  s->complete = false;
  return tr_edge_send_control(l->sum, s);
}

static int leader_start(tr_actor *self) {
  leader *l = tr_actor_state(self);
  l->t0 = tr_now_ns();
  return send_bucket(l);
}

static int leader_receive(tr_actor *self, tr_msg *m) {
  leader *l = tr_actor_state(self);
  if (m->type != &tr__summed_type) return 0;
  tr_edge_release(l->summed, 1);
  if (++l->done < l->iters) return send_bucket(l);
  l->t1 = tr_now_ns();
  tr_graph_done(l->g, self);
  return 0;
}

static const tr_behaviour leader_behaviour = {
    .name = "leader", .start = leader_start, .receive = leader_receive};

/* Seconds for `iters` sums of p[0, n) through the graph's transport. */
static double through_transport(tr_world *w, float *p, size_t n, int iters) {
  const int rank = tr_world_rank(w), size = tr_world_size(w);
  tr_graph *g;
  if (tr_graph_new(&g, &(tr_system_config){.name = "allreduce"}) || tr_graph_set_world(g, w))
    return NAN;
  leader l = {.g = g, .p = p, .n = n, .iters = iters};
  int rc = 0, ranks[64];
  tr_actor *leaders[64];
  for (int r = 0; r < size && rc == 0; r++) {
    ranks[r] = r;
    char name[32];
    snprintf(name, sizeof name, "leader%d", r);
    rc = tr_graph_add_on(g, r,
                         &(tr_actor_config){.name = name, .kind = TR_ACTOR_PINNED,
                                            .behaviour = &leader_behaviour,
                                            .state = r == rank ? &l : NULL},
                         &leaders[r]);
  }
  if (rc == 0) rc = tr__graph_sum_group(g, 0, ranks, size, false);
  for (int r = 0; r < size && rc == 0; r++) {
    tr_edge *sum, *summed;
    tr_actor *t = tr__graph_transport_on(g, r);
    rc = tr_graph_connect(g, &(tr_edge_config){.from = leaders[r], .to = t, .type = &tr__sum_type,
                                               .name = "sum", .credits = 1}, &sum);
    if (rc == 0)
      rc = tr_graph_connect(g, &(tr_edge_config){.from = t, .to = leaders[r],
                                                 .type = &tr__summed_type, .name = "summed",
                                                 .credits = 1}, &summed);
    if (rc == 0 && r == rank) {
      l.sum = sum, l.summed = summed;
      rc = tr__graph_sum_edges(g, 0, sum, summed);
    }
  }
  if (rc == 0) rc = tr_graph_run(g, 0, 1, 0);
  if (rc) fprintf(stderr, "troupe: bench allreduce: rank %d: %s\n", rank, tr_graph_error(g));
  tr_graph_free(g);
  return rc ? NAN : (double)(l.t1 - l.t0) / 1e9;
}

static double raw_allreduce(float *p, size_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const uint64_t t0 = tr_now_ns();
  for (int i = 0; i < iters; i++)
    MPI_Allreduce(MPI_IN_PLACE, p, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return (double)(tr_now_ns() - t0) / 1e9;
}

typedef struct allreduce_args {
  int json;
} allreduce_args;

static const cli_option allreduce_rows[] = {
    CLI_JSON(allreduce_args, json, "one JSON object on stdout"),
};
static const cli_table allreduce_table = {
    "bench allreduce", allreduce_rows, CLI_COUNT(allreduce_rows),
    .about = "Under mpirun: buckets summed across the ranks as a replica group sums them,\n"
             "against blocking MPI_Allreduce on the same bytes.\n"};

int bench_allreduce(int argc, char **argv) {
  allreduce_args args = {0};
  const int parsed = cli_parse(&allreduce_table, argc, argv, &args, NULL);
  if (parsed != CLI_GO) return parsed;
  const bool json = args.json;
  char err[256];
  tr_world *w;
  if (tr_world_open(&w, err, sizeof err)) {
    fprintf(stderr, "troupe: bench allreduce: %s\n", err);
    return CLI_FAIL;
  }
  const int rank = tr_world_rank(w), size = tr_world_size(w);
  if (size < 2) {
    fprintf(stderr, "troupe: bench allreduce: run it under mpirun -np 2 (or more)\n");
    tr_world_close(w);
    return CLI_USAGE;
  }
  enum { REPEATS = 5 };
  double raw[SIZES][REPEATS], ours[SIZES][REPEATS];
  float *p = malloc(bucket_bytes[SIZES - 1]);
  for (size_t i = 0; p && i < bucket_bytes[SIZES - 1] / sizeof *p; i++) p[i] = 0;
  int rc = p ? 0 : 1;
  for (int s = 0; s < SIZES && rc == 0; s++) {
    const size_t n = bucket_bytes[s] / sizeof(float);
    const int iters = (int)(((size_t)64 << 20) / bucket_bytes[s]); /* 64 MiB per timing */
    raw_allreduce(p, n, iters / 4 + 1); /* warm: connections, buffers */
    for (int k = 0; k < REPEATS && rc == 0; k++) { /* alternated */
      const double a = raw_allreduce(p, n, iters), b = through_transport(w, p, n, iters);
      const double bus = (double)bucket_bytes[s] * iters * 2.0 * (size - 1) / size / 1e9;
      raw[s][k] = bus / a;
      ours[s][k] = bus / b;
      rc = isfinite(b) ? 0 : 1;
    }
  }
  if (rank == 0 && rc == 0) {
    if (json) printf("{");
    for (int s = 0; s < SIZES; s++) {
      const double a = cli_median(raw[s], REPEATS), b = cli_median(ours[s], REPEATS);
      if (json)
        printf("%s\"mpi_%zu\":%.4f,\"troupe_%zu\":%.4f", s ? "," : "", bucket_bytes[s], a,
               bucket_bytes[s], b);
      else
        printf("%10zu bytes: MPI_Allreduce %.2f GB/s, troupe transport %.2f GB/s (%.3f×)\n",
               bucket_bytes[s], a, b, b / a);
    }
    if (json) printf("}\n");
  }
  free(p);
  tr_world_close(w);
  return rc ? CLI_FAIL : CLI_OK;
}

#else

int bench_allreduce(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "troupe: bench allreduce: this troupe was built without MPI (meson -Dmpi)\n");
  return CLI_USAGE;
}

#endif
