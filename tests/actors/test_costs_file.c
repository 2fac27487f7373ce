/* test_costs_file.c — the planner's file of costs as a file (actors/costs.c): what is at its
 * path and is not one (a device, a symlink to a checkpoint or to a text) is refused and left
 * as it was, a rewrite keeps its mode and a link stays a link; processes adding entries at
 * once keep every one (each reads the file again under troupe's lock file and merges); a lock
 * file that is not troupe's is refused, a holder that does not let go is given up on; a cost
 * no machine takes (0, 1e-300 s, 1e300 s, not finite) is measured again, never kept. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"
#include "planner.h" /* tr__costs_keep, tr__costs_entry */
#include "costs_fixture.h"
#include "tr_file.h" /* tr__file_keep_lock */

/* A device node (as root: a private one in the test's folder, never one under /dev), a
 * symlink to a checkpoint and one to a text: refused, and left as they were (a link still a
 * link, its target's bytes the same). */
static void links_and_devices_are_refused_and_kept(void **state) {
  fixture *f = *state;
  char ck[160], text[160], link[160];
  snprintf(ck, sizeof ck, "%s/ck.st", f->dir);
  snprintf(text, sizeof text, "%s/notes", f->dir);
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const int64_t shape[1] = {2};
  const float x[2] = {1, 2};
  assert_int_equal(tr_checkpoint_writer_add(w, "w", TR_DTYPE_F32, 1, shape, x), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, ck), 0);
  tr_checkpoint_writer_free(w);
  FILE *t = fopen(text, "w");
  assert_non_null(t);
  fputs("my notes\n", t);
  fclose(t);
  struct stat before_ck, before_text, st;
  assert_int_equal(stat(ck, &before_ck), 0);
  assert_int_equal(stat(text, &before_text), 0);
  snprintf(link, sizeof link, "%s/to-ck", f->dir);
  assert_int_equal(symlink(ck, link), 0);
  expect_refused(f, link, "not a file of layer costs");
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  snprintf(link, sizeof link, "%s/to-notes", f->dir);
  assert_int_equal(symlink(text, link), 0);
  expect_refused(f, link, "not a file of layer costs");
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(stat(ck, &st), 0);
  assert_true(st.st_ino == before_ck.st_ino && st.st_size == before_ck.st_size &&
              st.st_mtim.tv_nsec == before_ck.st_mtim.tv_nsec);
  assert_int_equal(stat(text, &st), 0);
  assert_true(st.st_ino == before_text.st_ino && st.st_size == before_text.st_size);
  if (geteuid() != 0) {
    fprintf(stderr, "[  SKIPPED ] a device node: mknod needs root\n");
    return;
  }
  char node[160];
  snprintf(node, sizeof node, "%s/null", f->dir);
  assert_int_equal(mknod(node, S_IFCHR | 0666, makedev(1, 3)), 0);
  expect_refused(f, node, "character device");
  assert_int_equal(lstat(node, &st), 0);
  assert_true(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
}

/* The file's mode is kept when an entry is added (600 stays 600), and a symlink to a file of
 * costs is written through: the link stays a link. */
static void a_costs_file_keeps_its_mode_and_a_link_stays(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path, .reps = 1};
  tr_layer_times t[L];
  assert_true(times_of(f, f->m, 4, &c, t));
  assert_int_equal(chmod(f->path, 0600), 0);
  assert_true(times_of(f, f->m, 8, &c, t));
  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  char link[160];
  snprintf(link, sizeof link, "%s/link", f->dir);
  assert_int_equal(symlink(f->path, link), 0);
  const tr_plan_costs_config through = {.path = link, .reps = 1};
  assert_false(times_of(f, f->m, 8, &through, t));
  assert_true(times_of(f, f->m, 16, &through, t));
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_false(times_of(f, f->m, 16, &c, t)); /* in the file it names */
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
}

/* Troupe's lock file beside the file of costs (".costs.safetensors.troupe-lock"): a FIFO
 * there is not troupe's, and a path given is refused naming it, without waiting on it, and
 * the FIFO left as it is. */
static void a_lock_file_not_troupes_is_refused_and_kept(void **state) {
  fixture *f = *state;
  char lock[160];
  snprintf(lock, sizeof lock, "%s/.costs.safetensors.troupe-lock", f->dir);
  assert_int_equal(mkfifo(lock, 0600), 0);
  tr_layer_times t[L];
  bool measured = false;
  char err[512] = "";
  alarm(20); /* an open that waited on the FIFO would hang: it fails instead */
  const int rc = tr_plan_layer_times(f->m, f->dev, 4, &(tr_plan_costs_config){.path = f->path},
                                     t, &measured, err, sizeof err);
  alarm(0);
  assert_int_equal(rc, TR_EINVAL);
  if (!strstr(err, ".costs.safetensors.troupe-lock") || !strstr(err, "FIFO"))
    fail_msg("the error \"%s\" does not name the lock file a FIFO", err);
  struct stat st;
  assert_int_equal(lstat(lock, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  assert_int_equal(access(f->path, F_OK), -1);
}

/* Processes adding entries to one file at once keep every entry: each addition reads the
 * file again under its lock and merges (three `troupe plan` at once lost entries in 3 of 3
 * tries). */
enum { WRITERS = 4, ENTRIES = 15 };

static void concurrent_writers_keep_every_entry(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path};
  pid_t pids[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    if ((pids[w] = fork()) == 0) {
      char name[64], err[512];
      for (int e = 0; e < ENTRIES; e++) {
        snprintf(name, sizeof name, "writer %d entry %d", w, e);
        const double v = 1e-3 * (1 + w * ENTRIES + e);
        if (tr__costs_keep(&c, name, 1, 1, &seconds, &v, err, sizeof err)) {
          fprintf(stderr, "%s: %s\n", name, err);
          _exit(1);
        }
      }
      _exit(0);
    }
    assert_true(pids[w] > 0);
  }
  for (int w = 0; w < WRITERS; w++) {
    int status;
    assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  tr_checkpoint *ck;
  char err[256];
  assert_int_equal(tr_checkpoint_open(&ck, f->path, err, sizeof err), 0);
  int kept = 0;
  for (int w = 0; w < WRITERS; w++)
    for (int e = 0; e < ENTRIES; e++) {
      char name[64];
      snprintf(name, sizeof name, "writer %d entry %d", w, e);
      kept += tr_checkpoint_find(ck, name) != NULL;
    }
  tr_checkpoint_close(ck);
  if (kept != WRITERS * ENTRIES) fail_msg("%d entries of %d kept", kept, WRITERS * ENTRIES);
}

/* ---- what a cost can be ---------------------------------------------------------------------- */

/* The file's entry of f->m at batch 4 set to `x` everywhere, as this version wrote it now. */
static void put_layers(fixture *f, double x) {
  char name[512];
  tr__costs_entry_name(f->m, f->dev, 4, name, sizeof name);
  double v[L * 4];
  for (int i = 0; i < L * 4; i++) v[i] = x;
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const int64_t shape[2] = {L, 4};
  char when[32];
  snprintf(when, sizeof when, "%lld", (long long)time(NULL));
  assert_int_equal(tr_checkpoint_writer_add(w, name, TR_DTYPE_F64, 2, shape, v), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, name, when), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "format", "troupe layer costs"), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "troupe", TR_VERSION_STRING), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, f->path), 0);
  tr_checkpoint_writer_free(w);
}

/* A layer's pass takes at least a nanosecond and at most an hour: a file that says 0, 1e-300,
 * 1e300, a negative time or one that is not a number is not acted on: measured again, and
 * the measurement kept in its place. */
static void impossible_costs_in_the_file_are_measured_again(void **state) {
  fixture *f = *state;
  const double wrong[] = {0, 1e-300, 1e300, -1e-3, NAN, INFINITY, 1e-10, 7200};
  const tr_plan_costs_config c = {.path = f->path, .reps = 1};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    put_layers(f, wrong[i]);
    tr_layer_times t[L];
    if (!times_of(f, f->m, 4, &c, t)) fail_msg("a pass of %g s was taken from the file", wrong[i]);
    for (int l = 0; l < L; l++) assert_true(t[l].forward >= 1e-9 && t[l].forward < 1);
    assert_false(times_of(f, f->m, 4, &c, t)); /* the measurement replaced it */
  }
  put_layers(f, 1e-3); /* what a pass may take is taken */
  tr_layer_times t[L];
  assert_false(times_of(f, f->m, 4, &c, t));
  assert_true(t[0].forward == 1e-3);
}

/* Figures handed in are kept only when they are costs: a hand-over of 0 s is none. */
static void impossible_figures_are_not_kept(void **state) {
  fixture *f = *state;
  const tr_plan_costs_config c = {.path = f->path};
  char err[512] = "";
  const double zero = 0, sane = 2e-6;
  assert_int_equal(tr__costs_keep(&c, "a hand-over", 1, 1, &seconds, &zero, err, sizeof err),
                   TR_EINVAL);
  if (!strstr(err, "'a hand-over'") || !strstr(err, "1 ns to 1 hour"))
    fail_msg("the error \"%s\" does not name the entry and what it may be", err);
  assert_int_equal(access(f->path, F_OK), -1);
  assert_int_equal(tr__costs_keep(&c, "a hand-over", 1, 1, &seconds, &sane, err, sizeof err), 0);
  double v = 0;
  assert_int_equal(tr__costs_entry(&c, "a hand-over", 1, 1, &seconds, tr__costs_not_kept,
                                   "a hand-over", &v, err, sizeof err),
                   0);
  assert_true(v == sane);
}

/* A process that holds the file's lock and does not let go (stopped there) is given up on
 * after a bounded wait: the entry is measured and not kept, and the next does not wait. */
static void a_holder_that_keeps_the_lock_is_given_up_on(void **state) {
  fixture *f = *state;
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    int fd;
    char *lock, err[512];
    if (tr__file_keep_lock(f->path, "test", f->path, 1000, &fd, &lock, err, sizeof err))
      _exit(1);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause(); /* holds it until killed */
    _exit(0);
  }
  char x;
  assert_int_equal(read(ready[0], &x, 1), 1);
  const tr_plan_costs_config c = {.path = f->path};
  char err[512] = "";
  const double v = 1e-3;
  const uint64_t t0 = tr_now_ns();
  assert_int_equal(tr__costs_keep(&c, "first", 1, 1, &seconds, &v, err, sizeof err), 0);
  const double first = (double)(tr_now_ns() - t0) / 1e9;
  assert_int_equal(tr__costs_keep(&c, "second", 1, 1, &seconds, &v, err, sizeof err), 0);
  const double both = (double)(tr_now_ns() - t0) / 1e9;
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  close(ready[0]);
  close(ready[1]);
  assert_true(first < 30 && both - first < 1); /* a bounded wait, once */
  assert_int_equal(access(f->path, F_OK), -1); /* nothing kept */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(links_and_devices_are_refused_and_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(a_costs_file_keeps_its_mode_and_a_link_stays, setup, teardown),
      cmocka_unit_test_setup_teardown(a_lock_file_not_troupes_is_refused_and_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(concurrent_writers_keep_every_entry, setup, teardown),
      cmocka_unit_test_setup_teardown(impossible_costs_in_the_file_are_measured_again, setup, teardown),
      cmocka_unit_test_setup_teardown(impossible_figures_are_not_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(a_holder_that_keeps_the_lock_is_given_up_on, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
