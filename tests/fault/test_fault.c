/* test_fault.c — training under faults (tr_train_run, host devices): a signal ends a run in
 * order within a step on every strategy, files that change underneath or are not files are
 * named instead of crashing or hanging, a resumed checkpoint is read once and checked first,
 * values that are not finite never reach the parameters, the watchdog follows slow steps,
 * and the figures of a long run live in bounded memory. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "losses.h" /* the coordinator's book of losses */
#include "poison.h" /* a relay that poisons batches, in graphs of the test's own */
#include "troupe.h"

#define SCRATCH_NAME "fault"
#include "../actors/compare.h" /* slurp */
#include "../actors/scratch.h"

static tr_train_options simplenet(int64_t steps) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = steps;
  o.deterministic = 1;
  return o;
}

static void train_ok(const tr_train_options *o, tr_train_result *r) {
  char err[1024];
  if (tr_train_run(o, r, err, sizeof err)) fail_msg("tr_train_run: %s", err);
}

static void expect(const tr_train_options *o, int status, const char *needle) {
  tr_train_result r;
  char err[1024];
  const int rc = tr_train_run(o, &r, err, sizeof err);
  if (rc != status) fail_msg("status %d (%s), expected %d: %s", rc, tr_strerror(rc), status, err);
  if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

static double seconds_since(uint64_t t0) { return (double)(tr_now_ns() - t0) / 1e9; }

static bool exists(const char *file) {
  struct stat sb;
  return stat(file, &sb) == 0;
}

static uint64_t step_of(const char *file) {
  tr_checkpoint *ck;
  char err[512];
  uint64_t step = 0;
  if (tr_checkpoint_open(&ck, file, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  tr_checkpoint_close(ck);
  return step;
}

/* ---- a helper thread that acts once the run is under way -------------------------------- */

typedef struct agent {
  const char *wait_for; /* a file the run writes (its periodic checkpoint) */
  void (*act)(struct agent *);
  const char *target;
  uint64_t acted_at;
  pthread_t thread;
} agent;

static void *agent_main(void *arg) {
  agent *a = arg;
  const uint64_t t0 = tr_now_ns();
  while (!exists(a->wait_for) && seconds_since(t0) < 60) usleep(2000);
  a->acted_at = tr_now_ns();
  a->act(a);
  return NULL;
}

static void agent_start(agent *a) { assert_int_equal(pthread_create(&a->thread, NULL, agent_main, a), 0); }
static void agent_join(agent *a) { pthread_join(a->thread, NULL); }

static void send_sigint(agent *a) {
  (void)a;
  kill(getpid(), SIGINT);
}

static void truncate_target(agent *a) { assert_int_equal(truncate(a->target, 0), 0); }

/* ---- signals ---------------------------------------------------------------------------- */

/* Each layout, its steps slowed to tenths of a second and its loader far ahead: the stop must
 * overtake the batches queued, end after the step in flight (well within 5 s of the signal),
 * and leave the checkpoint of the step reached. */
static void a_signal_ends_every_strategy_within_a_step(void **state) {
  (void)state;
  static const struct {
    tr_strategy strategy;
    const char *devices;
  } layouts[] = {{TR_STRATEGY_SINGLE, "host:1"}, {TR_STRATEGY_DP, "host:2"},
                 {TR_STRATEGY_PIPELINE, "host:2"}, {TR_STRATEGY_HYBRID, "host:4"},
                 {TR_STRATEGY_ASYNC, "host:2"}};
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
    tr_train_options o = simplenet(1000000);
    o.strategy = layouts[i].strategy;
    /* device 0 sleeps 40 ms after each GEMM (gpu/fault.h): 2 to 5 of them a step */
    char devices[64];
    snprintf(devices, sizeof devices, "fault(%s;dev=0,op=gemm,us=40000)", layouts[i].devices);
    o.devices = devices;
    o.job.layout.prefetch = 64;
    o.job.checkpoint.path = path("stopped.safetensors");
    o.job.checkpoint.every = 1;
    unlink(o.job.checkpoint.path);
    agent a = {.wait_for = o.job.checkpoint.path, .act = send_sigint};
    agent_start(&a);
    tr_train_result r;
    char err[1024];
    const int rc = tr_train_run(&o, &r, err, sizeof err);
    const double latency = seconds_since(a.acted_at);
    agent_join(&a);
    if (rc != TR_EINTR) fail_msg("%s: status %d: %s", tr_strategy_name(o.strategy), rc, err);
    assert_int_equal(r.signal, SIGINT);
    assert_non_null(strstr(err, "stopped by SIGINT after step"));
    if (latency > 5.0)
      fail_msg("%s: the run ended %.2f s after SIGINT", tr_strategy_name(o.strategy), latency);
    assert_true(r.steps >= 1 && isfinite(r.final_loss));
    assert_int_equal(step_of(o.job.checkpoint.path), r.steps); /* the step reached, saved */
  }
}

/* The run a signal ended resumes to the end, bitwise the run that was never stopped. */
static void a_run_stopped_by_a_signal_resumes_bitwise(void **state) {
  (void)state;
  tr_train_options o = simplenet(1000000);
  o.job.checkpoint.path = path("signalled.safetensors");
  o.job.checkpoint.every = 1;
  unlink(o.job.checkpoint.path);
  o.devices = "fault(host:1;op=gemm,us=5000)"; /* slow steps: the signal comes mid-run */
  agent a = {.wait_for = o.job.checkpoint.path, .act = send_sigint};
  agent_start(&a);
  tr_train_result r;
  char err[1024];
  assert_int_equal(tr_train_run(&o, &r, err, sizeof err), TR_EINTR);
  agent_join(&a);
  o.devices = "host:1";
  const int64_t reached = r.steps;
  o.steps = reached + 5;
  o.job.checkpoint.every = 0;
  o.job.checkpoint.resume = path("signalled.safetensors");
  o.job.checkpoint.path = path("resumed.safetensors");
  train_ok(&o, &r);
  assert_int_equal(r.first_step, reached);
  o.job.checkpoint.resume = NULL;
  o.job.checkpoint.path = path("straight.safetensors");
  train_ok(&o, &r);
  size_t na = 0, nb = 0;
  char *ba = slurp(path("resumed.safetensors"), &na), *bb = slurp(path("straight.safetensors"), &nb);
  assert_non_null(ba);
  assert_non_null(bb);
  assert_int_equal(na, nb);
  assert_memory_equal(ba, bb, na);
  free(ba);
  free(bb);
}

/* ---- files -------------------------------------------------------------------------------- */

static void write_file(const char *file, const void *p, size_t n) {
  FILE *f = fopen(file, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "a FIFO was waited on: the test's alarm went off\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(1);
}

/* A FIFO given as a checkpoint or data is refused at once, not opened and waited on. */
static void a_fifo_is_refused_without_waiting_for_a_writer(void **state) {
  (void)state;
  const char *fifo = path("fifo");
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  signal(SIGALRM, on_alarm);
  alarm(10);
  tr_train_options o = simplenet(5);
  o.job.checkpoint.resume = fifo;
  expect(&o, TR_EINVAL, "a FIFO, not a regular file");
  o = simplenet(5);
  o.model = "gpt";
  o.data = fifo;
  char needle[512];
  snprintf(needle, sizeof needle, "data '%s': a FIFO, not a regular file", fifo);
  expect(&o, TR_EINVAL, needle);
  o.data = dir;
  expect(&o, TR_EINVAL, "a directory, not a regular file");
  alarm(0);
}

/* Where the run will write is checked before it trains: a long run fails at once. */
static void paths_written_at_the_end_are_checked_before_training(void **state) {
  (void)state;
  const uint64_t t0 = tr_now_ns();
  tr_train_options o = simplenet(100000000);
  o.job.checkpoint.path = path("missing-dir/ck.safetensors");
  expect(&o, TR_EINVAL, "missing-dir' does not exist");
  o.job.checkpoint.path = "";
  expect(&o, TR_EINVAL, "checkpoint.path: an empty path");
  o.job.checkpoint.path = dir;
  expect(&o, TR_EINVAL, "a directory, not a file");
  o.job.checkpoint.path = NULL;
  o.trace = path("missing-dir/trace.json");
  expect(&o, TR_EINVAL, "trace '");
  assert_true(seconds_since(t0) < 5); /* not one of the 10^8 steps ran */
}

/* A data file cut short while the run reads it ends the run with a message naming it, not
 * the process with SIGBUS. */
static void a_data_file_cut_short_ends_the_run_with_a_message(void **state) {
  (void)state;
  const char *data = path("corpus.txt");
  enum { BYTES = 1 << 20 };
  char *text = malloc(BYTES);
  for (int i = 0; i < BYTES; i++) text[i] = (char)('a' + i % 26);
  write_file(data, text, BYTES);
  free(text);
  tr_train_options o = simplenet(100000000);
  o.model = "gpt";
  o.job.global_batch = 1;
  o.data = data;
  o.job.checkpoint.path = path("cut.safetensors");
  o.job.checkpoint.every = 1;
  unlink(o.job.checkpoint.path);
  agent a = {.wait_for = o.job.checkpoint.path, .act = truncate_target, .target = data};
  agent_start(&a);
  expect(&o, TR_EIO, "it changed (was truncated) while it was read");
  agent_join(&a);
}

/* ---- outputs changed under the run -------------------------------------------------------- */

/* What a user (or another program) moves over the checkpoint path once the run has written
 * it, at once, as `mv` does. */
static void move_over(agent *a, int kind) {
  const char *new = path("new");
  unlink(new);
  if (kind == 0) assert_int_equal(mkfifo(new, 0600), 0);
  else if (kind == 1) assert_int_equal(symlink("theirs.txt", new), 0);
  else if (kind == 2) write_file(new, "mine", 4);
  else assert_int_equal(mknod(new, S_IFCHR | 0666, makedev(1, 3)), 0);
  assert_int_equal(rename(new, a->target), 0);
}
static void move_fifo(agent *a) { move_over(a, 0); }
static void move_link(agent *a) { move_over(a, 1); }
static void move_file(agent *a) { move_over(a, 2); }
static void move_device(agent *a) { move_over(a, 3); }

/* The checkpoint path changed during the run — a FIFO, a symlink to another file, another
 * file, a device node (as root) moved over it — is left as it is at the next write, not
 * replaced nor written through: the run ends (TR_EIO) naming the change and the file of its
 * own that the checkpoint was kept in, which resumes. */
static void a_checkpoint_path_changed_during_the_run_is_left_and_the_state_kept(void **state) {
  (void)state;
  void (*const moves[])(agent *) = {move_fifo, move_link, move_file, move_device};
  const char *const whys[] = {
      "became a FIFO during the run: left as it is; the checkpoint of step ",
      "theirs.txt' during the run: left as it is; the checkpoint of step ", /* its dir first */
      ("replaced or rewritten after this run wrote it, by another program during the run: "
       "left as it is; the checkpoint of step "),
      "became a character device during the run: left as it is; the checkpoint of step "};
  const mode_t kinds[] = {S_IFIFO, S_IFLNK, S_IFREG, S_IFCHR};
  const bool root = geteuid() == 0;
  if (!root) printf("skip a character device: mknod is not permitted here\n");
  for (int c = 0; c < (root ? 4 : 3); c++) {
    const char *ck = path("moved.safetensors"), *theirs = path("theirs.txt");
    unlink(ck);
    write_file(theirs, "theirs", 6);
    tr_train_options o = simplenet(0);
    o.seconds = 30;
    o.job.checkpoint.path = ck;
    o.job.checkpoint.every = 1;
    agent a = {.wait_for = ck, .act = moves[c], .target = ck};
    const uint64_t t0 = tr_now_ns();
    agent_start(&a);
    tr_train_result r;
    char err[1024];
    const int rc = tr_train_run(&o, &r, err, sizeof err);
    agent_join(&a);
    if (rc != TR_EIO || !strstr(err, whys[c])) fail_msg("case %d: status %d: %s", c, rc, err);
    assert_true(seconds_since(t0) < 20); /* ended at that write, not at its 30 s */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", strstr(err, " is in '") + 8);
    assert_non_null(strchr(saved, '\''));
    *strchr(saved, '\'') = 0;
    assert_true(step_of(saved) >= 1); /* a whole checkpoint, which resumes */
    tr_train_options resume = simplenet(step_of(saved) + 1);
    resume.job.checkpoint.resume = saved;
    train_ok(&resume, &r);
    struct stat sb;
    assert_int_equal(lstat(ck, &sb), 0);
    assert_int_equal(sb.st_mode & S_IFMT, kinds[c]); /* left as it was moved there */
    char back[16] = {0};
    FILE *f = fopen(theirs, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, sizeof back - 1, f), 6);
    fclose(f);
    assert_string_equal(back, "theirs");
    if (c == 2) assert_int_equal(sb.st_size, 4); /* "mine", as it was */
    unlink(saved);
    unlink(ck);
    unlink(theirs);
  }
}

/* A checkpoint larger than the process may write (ulimit -f) ends the run with a message
 * naming the file and the limit (SIGXFSZ would end the process, its default action), and
 * leaves no temporary file. */
static void a_checkpoint_beyond_the_file_size_limit_ends_the_run_naming_it(void **state) {
  (void)state;
  const char *ck = path("large.safetensors");
  unlink(ck);
  tr_train_options o = simplenet(2);
  o.job.checkpoint.path = ck;
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 4096; /* simplenet's checkpoint is about 5 KB */
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  tr_train_result r;
  char err[1024];
  const int rc = tr_train_run(&o, &r, err, sizeof err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  if (rc != TR_EIO || !strstr(err, ck) ||
      !strstr(err, "File too large: this process may write files of 4096 bytes at most "
                   "(ulimit -f)"))
    fail_msg("status %d: %s", rc, err);
  assert_false(exists(ck));
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls -A %s | grep -q '^\\.large\\.safetensors\\.tmp\\.'", dir);
  assert_int_not_equal(system(cmd), 0); /* no temporary file */
}

/* Rewrites `from` into `to` with metadata key `key` set to `value` (NULL: removed) and,
 * when `poison` names a tensor, its element 3 set to `bad`. */
static void rewrite(const char *from, const char *to, const char *key, const char *value,
                    const char *poison, float bad) {
  tr_checkpoint *ck;
  char err[512];
  if (tr_checkpoint_open(&ck, from, err, sizeof err)) fail_msg("%s", err);
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  float *copies[256];
  size_t n = tr_checkpoint_count(ck);
  assert_true(n < 256);
  for (size_t i = 0; i < n; i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    copies[i] = malloc(t->nbytes);
    memcpy(copies[i], t->data, t->nbytes);
    if (poison && !strcmp(t->name, poison)) {
      assert_true(t->nbytes >= 4 * sizeof(float));
      copies[i][3] = bad;
    }
    assert_int_equal(tr_checkpoint_writer_add(w, t->name, t->dtype, t->ndim, t->shape, copies[i]), 0);
  }
  for (size_t i = 0; i < tr_checkpoint_meta_count(ck); i++) {
    const char *k, *v;
    tr_checkpoint_meta_at(ck, i, &k, &v);
    if (strcmp(k, key)) tr_checkpoint_writer_put(w, k, v);
  }
  if (value) tr_checkpoint_writer_put(w, key, value);
  assert_int_equal(tr_checkpoint_writer_save(w, to), 0);
  tr_checkpoint_writer_free(w);
  for (size_t i = 0; i < n; i++) free(copies[i]);
  tr_checkpoint_close(ck);
}

/* A checkpoint is checked before anything runs: values not finite (named by tensor), a step
 * out of range, another format. */
static void a_resumed_checkpoint_is_checked_before_the_run(void **state) {
  (void)state;
  tr_train_options o = simplenet(3);
  o.job.checkpoint.path = path("good.safetensors");
  tr_train_result r;
  train_ok(&o, &r);
  const char *bad = path("bad.safetensors");
  o = simplenet(10);
  o.job.checkpoint.resume = bad;
  rewrite(path("good.safetensors"), bad, "step", "3", "0.weight", NAN);
  expect(&o, TR_EFORMAT, "tensor '0.weight' holds NaN (element 3 of 1000)");
  rewrite(path("good.safetensors"), bad, "step", "3", "0.bias", -INFINITY);
  expect(&o, TR_EFORMAT, "tensor '0.bias' holds -Inf (element 3 of 100)");
  rewrite(path("good.safetensors"), bad, "step", "9223372036854775808", NULL, 0);
  expect(&o, TR_EFORMAT, "step 9223372036854775808 is out of range");
  o.steps = 0;
  o.seconds = 1; /* a timed run too: not zero steps and success */
  rewrite(path("good.safetensors"), bad, "step", "4611686018427387904", NULL, 0);
  expect(&o, TR_EFORMAT, "step 4611686018427387904 is out of range");
  o = simplenet(10);
  o.job.checkpoint.resume = bad;
  rewrite(path("good.safetensors"), bad, "format", "troupe checkpoint 2", NULL, 0);
  expect(&o, TR_EFORMAT, "format 'troupe checkpoint 2', but this troupe reads 'troupe checkpoint 1'");
  rewrite(path("good.safetensors"), bad, "format", NULL, NULL, 0);
  expect(&o, TR_EFORMAT, "not a troupe checkpoint");
}

/* What may differ between the run that wrote a checkpoint and the one resuming it is said
 * before the run: batch, seed, strategy. */
static void legal_differences_on_resume_are_noted(void **state) {
  (void)state;
  tr_train_options o = simplenet(2);
  o.job.checkpoint.path = path("noted.safetensors");
  tr_train_result r;
  train_ok(&o, &r);
  char *text = NULL;
  size_t len = 0;
  o = simplenet(4);
  o.notes = open_memstream(&text, &len);
  o.job.checkpoint.resume = path("noted.safetensors");
  o.job.global_batch = 32;
  o.job.seed = 7;
  o.strategy = TR_STRATEGY_DP;
  train_ok(&o, &r);
  fclose(o.notes);
  assert_non_null(strstr(text, "taken with batch 64 (this run: 32), seed 1 (this run: 7), "
                               "strategy single (this run: dp)"));
  free(text);
  text = NULL;
  o = simplenet(6);
  o.notes = open_memstream(&text, &len);
  o.job.checkpoint.resume = path("noted.safetensors");
  train_ok(&o, &r);
  fclose(o.notes);
  assert_int_equal(len, 0); /* nothing to say */
  free(text);
}

/* Rewrites `file` with a new version of itself every moment, alternating between a and b. */
typedef struct racer {
  const char *a, *b, *target;
  atomic_bool stop;
  atomic_int swaps;
} racer;

static void *race(void *arg) {
  racer *x = arg;
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.link", x->target);
  for (int i = 0; !atomic_load(&x->stop); i++) {
    unlink(tmp);
    if (link(i & 1 ? x->a : x->b, tmp) == 0 && rename(tmp, x->target) == 0) x->swaps++;
  }
  return NULL;
}

/* Every replica resumes from the same bytes, even while the file is replaced under them:
 * the checkpoint is read once for the whole run. */
static void replicas_resume_from_one_reading_of_a_changing_file(void **state) {
  (void)state;
  tr_train_options o = simplenet(2);
  o.job.checkpoint.path = path("a.safetensors");
  tr_train_result r;
  train_ok(&o, &r);
  o.job.seed = 99; /* other weights at the same step */
  o.job.checkpoint.path = path("b.safetensors");
  train_ok(&o, &r);
  rename(path("a.safetensors"), path("race.safetensors")); /* a first; b, a, b, ... */
  link(path("race.safetensors"), path("a.safetensors"));
  racer x = {.a = strdup(path("a.safetensors")), .b = strdup(path("b.safetensors")),
             .target = strdup(path("race.safetensors"))};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, race, &x), 0);
  /* the file is changing before the runs start, and (below) goes on changing while they run,
   * however busy the machine is */
  for (int waited = 0; atomic_load(&x.swaps) <= 10 && waited < 10000; waited++) usleep(1000);
  const int before = atomic_load(&x.swaps);
  for (int i = 0; i < 5; i++) {
    o = simplenet(3);
    o.strategy = TR_STRATEGY_DP;
    o.devices = "host:4";
    o.job.checkpoint.resume = x.target;
    train_ok(&o, &r);
    if (!(r.consistency <= 1e-6)) fail_msg("replicas differ by %g after resuming", r.consistency);
  }
  const int during = atomic_load(&x.swaps) - before;
  atomic_store(&x.stop, true);
  pthread_join(t, NULL);
  assert_true(before > 10);
  if (during < 1) fail_msg("the file was not replaced while the replicas resumed");
  free((void *)x.a), free((void *)x.b), free((void *)x.target);
}

/* The next successful write of a checkpoint removes the temporaries writers killed half-way
 * left of it, and leaves those a live writer holds and other files alone. */
static void leftovers_of_killed_writers_go_at_the_next_write(void **state) {
  (void)state;
  const char *stale = path(".ck.safetensors.tmp.0123456789abcdef");
  const char *held = path(".ck.safetensors.tmp.fedcba9876543210");
  const char *other = path(".ck.safetensors.tmp.not-a-temporary");
  const char *foreign = path(".other.safetensors.tmp.0123456789abcdef");
  const char *files[] = {stale, held, other, foreign};
  struct timeval old[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}}; /* long ago */
  for (int i = 0; i < 4; i++) {
    write_file(files[i], "x", 1);
    assert_int_equal(utimes(files[i], old), 0);
  }
  int fd = open(held, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(flock(fd, LOCK_EX), 0); /* a writer still at work */
  tr_train_options o = simplenet(2);
  o.job.checkpoint.path = path("ck.safetensors");
  tr_train_result r;
  train_ok(&o, &r);
  assert_false(exists(stale));
  assert_true(exists(held) && exists(other) && exists(foreign));
  close(fd);
}

/* ---- values that are not finite ------------------------------------------------------------- */

/* A step whose batch is NaN stops the run, naming the step and the stage, on every strategy;
 * skipping it instead leaves the parameters exactly as the run without that step has them.
 * The NaN comes from a relay between each loader and its first stage (poison.h), in a graph
 * of the test's own; the run without that step has the relay too, passing batches on. */
static void a_nonfinite_step_stops_the_run_or_is_skipped_on_every_stage(void **state) {
  (void)state;
  static const struct {
    tr_strategy strategy;
    const char *devices;
    const char *stage; /* where the norm is found first */
  } layouts[] = {{TR_STRATEGY_SINGLE, "host:1", "stage 0 of replica 0"},
                 {TR_STRATEGY_PIPELINE, "host:2", "step 2, stage"},
                 {TR_STRATEGY_DP, "host:2", "step 2, stage 0 of replica"},
                 /* the server's check of the push, or the worker's of its loss */
                 {TR_STRATEGY_ASYNC, "host:1", "step 2"}};
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
    poison_case c = {.strategy = layouts[i].strategy, .devices = layouts[i].devices,
                     .steps = 3, .nan_step = 2};
    tr_train_result r;
    char err[1024];
    int rc = poisoned_run(&c, &r, err, sizeof err);
    if (rc != TR_ENONFINITE || !strstr(err, layouts[i].stage))
      fail_msg("%s: status %d (%s), expected TR_ENONFINITE naming '%s': %s",
               tr_strategy_name(c.strategy), rc, tr_strerror(rc), layouts[i].stage, err);

    c.on_nonfinite = TR_NONFINITE_SKIP;
    c.checkpoint = path("skipped.safetensors");
    if (poisoned_run(&c, &r, err, sizeof err)) fail_msg("%s: %s", tr_strategy_name(c.strategy), err);
    assert_int_equal(r.skipped_steps, 1);
    assert_int_equal(r.steps, 3);
    assert_true(isfinite(r.final_loss) && isfinite(r.initial_loss));
    c.steps = 2; /* the same run without its last step, nothing poisoned */
    c.nan_step = -1;
    c.checkpoint = path("two.safetensors");
    if (poisoned_run(&c, &r, err, sizeof err)) fail_msg("%s: %s", tr_strategy_name(c.strategy), err);
    assert_int_equal(r.skipped_steps, 0);
    tr_checkpoint *a, *b;
    assert_int_equal(tr_checkpoint_open(&a, path("skipped.safetensors"), err, sizeof err), 0);
    assert_int_equal(tr_checkpoint_open(&b, path("two.safetensors"), err, sizeof err), 0);
    assert_int_equal(tr_checkpoint_count(a), tr_checkpoint_count(b));
    for (size_t k = 0; k < tr_checkpoint_count(a); k++) {
      const tr_checkpoint_tensor *ta = tr_checkpoint_tensor_at(a, k), *tb = tr_checkpoint_tensor_at(b, k);
      assert_string_equal(ta->name, tb->name);
      assert_int_equal(ta->nbytes, tb->nbytes);
      if (memcmp(ta->data, tb->data, ta->nbytes))
        fail_msg("%s: tensor '%s' changed in the skipped step", tr_strategy_name(c.strategy),
                 ta->name);
    }
    tr_checkpoint_close(a);
    tr_checkpoint_close(b);
  }
}

/* A run whose every step is skipped has no loss to show: it does not succeed. */
static void a_run_without_a_finite_loss_does_not_succeed(void **state) {
  (void)state;
  tr_train_options o = simplenet(200);
  o.job.optim.lr = 1e5f; /* diverges in a step or two */
  expect(&o, TR_ENONFINITE, "the run diverged");
  o.job.on_nonfinite = TR_NONFINITE_SKIP;
  expect(&o, TR_ENONFINITE, "the run's final loss is nan");
}

/* ---- the watchdog -------------------------------------------------------------------------- */

/* Steps that grow slower than the configured period, a handful of times the first step, are
 * a slow run, not a hang, when the watchdog follows the steps; a fixed period fails it. */
static void the_watchdog_follows_steps_that_slow_down(void **state) {
  (void)state;
  tr_train_options o = simplenet(6);
  o.watchdog_ms = 250;
  /* forward and backward: 50 ms each at the first step, 50 ms more at each step: a step's
   * callback takes 100 ms at first, 600 ms at the last */
  o.devices = "fault(host:1;op=mse,us=50000,grow=50000,every=2)"; /* gpu/fault.h */
  o.job.layout.prefetch = 2;
  expect(&o, TR_ETIMEDOUT, "no progress for 250 ms");
  o.job.watchdog_steps = 10;
  o.job.watchdog_min_ms = 250;
  tr_train_result r;
  train_ok(&o, &r);
  assert_int_equal(r.steps, 6);
}

/* ---- memory ------------------------------------------------------------------------------- */

/* The coordinator's book keeps exactly what the final loss needs, the last 1% of the steps,
 * in memory sized once for a run of known length; a timed run's grows with it, by an eighth
 * at a time. The final loss is the mean of that 1%, exactly. */
static void the_loss_book_keeps_the_last_percent_exactly_in_bounded_memory(void **state) {
  (void)state;
  enum { STEPS = 300000, CHUNK = 997 };
  for (int known = 0; known < 2; known++) {
    tr__loss_book b;
    assert_int_equal(tr__loss_book_init(&b, 1000, 1, false, known ? STEPS : 0), 0);
    const int64_t cap0 = b.tcap;
    tr__loss_msg *m = malloc(sizeof *m + CHUNK * sizeof(tr__loss_entry));
    for (int64_t k = 0; k < STEPS; k += CHUNK) {
      m->n = 0;
      for (int64_t s = k; s < k + CHUNK && s < STEPS; s++)
        m->e[m->n++] = (tr__loss_entry){.step = 1000 + s, .t = (uint64_t)s, .loss = (float)(1.0 / (1 + s))};
      assert_int_equal(tr__loss_book_add(&b, m, 0, NULL, NULL), 0);
    }
    free(m);
    double sum = 0;
    for (int64_t s = STEPS - STEPS / 100; s < STEPS; s++) sum += (float)(1.0 / (1 + s));
    assert_true(tr__loss_book_final(&b) == sum / (STEPS / 100));
    assert_true(b.initial == 1.0);
    if (known) assert_int_equal(b.tcap, cap0); /* never grown */
    assert_true(b.tcap <= STEPS / 100 + STEPS / 800 + 64);
    assert_true(b.wcap <= 4096); /* the window holds incomplete steps only */
    tr__loss_book_free(&b);
  }
}

/* Asynchronous workers run apart: one that falls 200000 steps behind the other (its losses
 * held back, as a starved thread's are) costs the book no memory: steps complete as their
 * losses come, and the final loss is the mean of the last 1% to come. */
static void an_async_book_holds_nothing_for_a_worker_far_behind(void **state) {
  (void)state;
  enum { STEPS = 200000, CHUNK = 1000 };
  tr__loss_book b;
  assert_int_equal(tr__loss_book_init(&b, 0, 1, true, 0), 0);
  tr__loss_msg *m = malloc(sizeof *m + CHUNK * sizeof(tr__loss_entry));
  int64_t done = 0;
  for (int64_t k = 1; k < STEPS; k += CHUNK) { /* the fast worker: every step but step 0 */
    m->n = 0;
    for (int64_t s = k; s < k + CHUNK && s < STEPS; s++)
      m->e[m->n++] = (tr__loss_entry){.step = s, .t = (uint64_t)s, .loss = 2.0f};
    assert_int_equal(tr__loss_book_add(&b, m, 0, NULL, NULL), 0);
    done += m->n;
    assert_int_equal(b.complete, done);
  }
  m->n = 1; /* the slow worker's one step, at last */
  m->e[0] = (tr__loss_entry){.step = 0, .t = 1, .loss = 1.0f};
  assert_int_equal(tr__loss_book_add(&b, m, 0, NULL, NULL), 0);
  free(m);
  assert_int_equal(b.complete, STEPS);
  assert_int_equal(b.wcap, 0); /* no window at all */
  assert_true(b.initial == 2.0);
  assert_true(tr__loss_book_final(&b) == (2.0 * (STEPS / 100 - 1) + 1.0) / (STEPS / 100));
  tr__loss_book_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_signal_ends_every_strategy_within_a_step),
      cmocka_unit_test(a_run_stopped_by_a_signal_resumes_bitwise),
      cmocka_unit_test(a_fifo_is_refused_without_waiting_for_a_writer),
      cmocka_unit_test(paths_written_at_the_end_are_checked_before_training),
      cmocka_unit_test(a_data_file_cut_short_ends_the_run_with_a_message),
      cmocka_unit_test(a_resumed_checkpoint_is_checked_before_the_run),
      cmocka_unit_test(legal_differences_on_resume_are_noted),
      cmocka_unit_test(replicas_resume_from_one_reading_of_a_changing_file),
      cmocka_unit_test(leftovers_of_killed_writers_go_at_the_next_write),
      cmocka_unit_test(a_checkpoint_path_changed_during_the_run_is_left_and_the_state_kept),
      cmocka_unit_test(a_checkpoint_beyond_the_file_size_limit_ends_the_run_naming_it),
      cmocka_unit_test(a_nonfinite_step_stops_the_run_or_is_skipped_on_every_stage),
      cmocka_unit_test(a_run_without_a_finite_loss_does_not_succeed),
      cmocka_unit_test(the_watchdog_follows_steps_that_slow_down),
      cmocka_unit_test(the_loss_book_keeps_the_last_percent_exactly_in_bounded_memory),
      cmocka_unit_test(an_async_book_holds_nothing_for_a_worker_far_behind),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
