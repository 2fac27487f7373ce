/* test_gemm_choices_file.c — the host GEMM's file of choices as a file (gpu/host/
 * host_choices_file.c): it keeps its newest lines and says what it is on its first line (a
 * file of the format before, every line a choice, is given the header). A path that holds
 * anything else (other text, a checkpoint, a file too large, a FIFO, a device, a link to
 * such) is never read, replaced or truncated, and the run says once that it keeps no choices;
 * a rewrite keeps the file's mode and owner and a link stays a link; the temporary file is
 * never one that could have been planted; the lock is troupe's own lock file, one that is
 * not troupe's is left alone, and a holder that does not let go is given up on. Opens that
 * could wait on a FIFO run under a watchdog (alarm): a hang fails the test. */
#include <fcntl.h>
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
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"
#include "gemm_fakes.h"
#include "tr_file.h" /* tr__file_keep_lock */

/* The file keeps its newest lines: shapes drawn at random by tests would grow it for ever. */
static void the_file_keeps_its_newest_lines(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/full", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int i = 0; i < 5000; i++) fprintf(f, "another machine\tNN N%d K1 x1 f32\tslow\t\n", i);
  fclose(f);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  float C[M * N];
  fake_product(C);
  const char *text = slurp(path);
  int lines = 0;
  for (const char *p = text; *p; p++) lines += *p == '\n';
  assert_true(lines <= 4096 && lines > 4000);
  /* a file of the format before the header (every line a choice's) is taken as one, and
   * given its header */
  assert_int_equal(strncmp(text, "# troupe gemm-choices 1\n", 24), 0);
  assert_null(strstr(text, "\tNN N0 K1 x1"));           /* the oldest went */
  assert_non_null(strstr(text, "\tNN N4999 K1 x1"));    /* the newest stayed */
  assert_non_null(strstr(text, "\tNN N8 K8 x1 f32\tfast\t")); /* and the new one came */
  use_file();
}

/* stderr, from capture_begin to capture_end, into a file of the test's; its text. */
static int saved_stderr = -1;
static char captured[300];

static void capture_begin(void) {
  snprintf(captured, sizeof captured, "%s/stderr", dir);
  fflush(stderr);
  saved_stderr = dup(2);
  const int fd = open(captured, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(saved_stderr >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
}

static const char *capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  const char *text = slurp(captured);
  fprintf(stderr, "%s", text); /* still shown */
  return text;
}

static int count_of(const char *text, const char *what) {
  int k = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) k++;
  return k;
}

/* Products of two keys, on a fresh host:1 among the fakes, under a watchdog: an open that
 * waited on a FIFO would hang the test, and fails it instead. The fast one serves. */
static void fake_products(void) {
  alarm(20);
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  float C[M * N];
  for (int k = 0; k < 2; k++) {
    gemm_on(d, C, M, N, 40 + k, 0.0f);
    assert_float_equal(C[0], 2.0f, 0);
  }
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  alarm(0);
}

/* What lstat says of a file, and its bytes: enough to tell that nothing changed it. */
typedef struct seen {
  struct stat st;
  char *text; /* regular files' */
} seen;

static seen seen_of(const char *path) {
  seen s = {.text = NULL};
  assert_int_equal(lstat(path, &s.st), 0);
  if (S_ISREG(s.st.st_mode)) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    s.text = malloc((size_t)s.st.st_size + 1);
    assert_int_equal(fread(s.text, 1, (size_t)s.st.st_size, f), (size_t)s.st.st_size);
    fclose(f);
  }
  return s;
}

static void expect_unchanged(const char *path, seen *before) {
  seen now = seen_of(path);
  if (now.st.st_mode != before->st.st_mode || now.st.st_size != before->st.st_size ||
      now.st.st_ino != before->st.st_ino || now.st.st_rdev != before->st.st_rdev ||
      now.st.st_uid != before->st.st_uid || now.st.st_gid != before->st.st_gid)
    fail_msg("%s changed: mode %o size %lld, was mode %o size %lld", path, now.st.st_mode,
             (long long)now.st.st_size, before->st.st_mode, (long long)before->st.st_size);
  if (before->text && memcmp(now.text, before->text, (size_t)now.st.st_size))
    fail_msg("%s: its bytes changed", path);
  free(now.text);
  free(before->text);
}

/* TROUPE_GEMM_CHOICES names `path`, which is not a file of choices: the products are served
 * all the same, `path` is left exactly as it was, and stderr says once that no choices are
 * kept, naming the variable and the file. */
static void expect_left_alone(const char *path) {
  seen before = seen_of(path);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  capture_begin();
  fake_products();
  fake_products(); /* again, as the run's other devices and keys would */
  const char *said = capture_end();
  expect_unchanged(path, &before);
  char named[400];
  snprintf(named, sizeof named, "TROUPE_GEMM_CHOICES '%s'", path);
  if (count_of(said, named) != 1 || !strstr(said, "none kept"))
    fail_msg("stderr did not say once that %s keeps no choices: \"%s\"", named, said);
  use_file();
}

static void write_file(const char *path, const void *p, size_t n, mode_t mode) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, p, n), (ssize_t)n);
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

static void in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void a_file_that_is_not_one_of_choices_is_never_read_or_replaced(void **state) {
  (void)state;
  char path[300], other[300];
  /* a text of 5,000 lines (the oldest were cut to keep 4,096), mode 600 */
  in_dir(path, sizeof path, "notes.txt");
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int i = 0; i < 5000; i++) fprintf(f, "line %d of my notes\n", i);
  fclose(f);
  assert_int_equal(chmod(path, 0600), 0);
  expect_left_alone(path);
  /* a checkpoint */
  in_dir(path, sizeof path, "ck.st");
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  const int64_t shape[1] = {2};
  const float x[2] = {1, 2};
  assert_int_equal(tr_checkpoint_writer_add(w, "w", TR_DTYPE_F32, 1, shape, x), 0);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  assert_int_equal(chmod(path, 0600), 0);
  expect_left_alone(path);
  /* 20 MiB that begin as a file of choices would (shrunk to one line before) */
  in_dir(path, sizeof path, "huge");
  char *big = calloc(20 << 20, 1);
  assert_non_null(big);
  memcpy(big, "# troupe gemm-choices 1\n", 24);
  write_file(path, big, 20 << 20, 0644);
  free(big);
  expect_left_alone(path);
  /* a FIFO, refused without waiting on it */
  in_dir(path, sizeof path, "fifo");
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_left_alone(path);
  /* a symlink to a text: the text and the link stay */
  in_dir(other, sizeof other, "notes.txt");
  in_dir(path, sizeof path, "link-to-notes");
  assert_int_equal(symlink(other, path), 0);
  seen text = seen_of(other);
  expect_left_alone(path);
  expect_unchanged(other, &text);
  /* a device node (as root: a private one in the test's folder, never one under /dev) */
  if (geteuid() != 0) {
    fprintf(stderr, "[  SKIPPED ] a device node: mknod needs root\n");
    return;
  }
  in_dir(path, sizeof path, "null");
  assert_int_equal(mknod(path, S_IFCHR | 0666, makedev(1, 3)), 0);
  expect_left_alone(path);
}

/* A file of choices of troupe's is rewritten keeping its mode (600 stayed 600, not 644) and,
 * where the process may (root), its owner and group; a symlink to one is written through
 * and stays a link. */
static void a_rewritten_file_keeps_its_mode_and_owner_and_a_link_stays(void **state) {
  (void)state;
  char path[300], link[300];
  in_dir(path, sizeof path, "mine");
  write_file(path, "# troupe gemm-choices 1\n", 24, 0600);
  const bool root = geteuid() == 0;
  if (root) assert_int_equal(chown(path, 4321, 8765), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  fake_products();
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0600);
  if (root) assert_true(st.st_uid == 4321 && st.st_gid == 8765);
  const char *text = slurp(path);
  assert_int_equal(strncmp(text, "# troupe gemm-choices 1\n", 24), 0);
  assert_int_equal(count_of(text, "\tfast\t"), 2);
  /* through a link: the link stays a link, its target gets the lines */
  in_dir(link, sizeof link, "link-to-mine");
  assert_int_equal(symlink(path, link), 0);
  setenv("TROUPE_GEMM_CHOICES", link, 1);
  tr__host_gemm_test_libs(fakes, 2);
  tr_device_list *l = open_host("host:1");
  tr_device *d = tr_device_list_at(l, 0);
  tr_device_bind(d);
  float C[M * N];
  gemm_on(d, C, M, N, 50, 0.0f);
  tr_device_list_close(l);
  tr__host_gemm_test_libs(NULL, 0);
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 3);
  if (!root) fprintf(stderr, "[  SKIPPED ] the owner kept: chown needs root\n");
  use_file();
}

/* The writer's temporary file was "<file>.tmp.<pid>": a symlink planted there made the run
 * write its target, and a FIFO hung it. Neither is used now; the choices are kept. */
static void a_temporary_file_at_a_predictable_name_is_never_used(void **state) {
  (void)state;
  char path[300], tmp[400], victim[300];
  in_dir(path, sizeof path, "planted");
  in_dir(victim, sizeof victim, "victim");
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  write_file(victim, "mine\n", 5, 0644);
  assert_int_equal(symlink(victim, tmp), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  seen v = seen_of(victim);
  fake_products();
  expect_unchanged(victim, &v);
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode)); /* not the planted link, renamed into place */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  assert_int_equal(unlink(tmp), 0);
  assert_int_equal(mkfifo(tmp, 0600), 0);
  assert_int_equal(unlink(path), 0);
  fake_products(); /* under the watchdog: the FIFO is not opened */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  use_file();
}

/* The lock is troupe's own lock file (".<file>.troupe-lock"): a user's "<file>.lock" (a
 * symlink to where nothing is yet) is not followed, and the choices are kept; a FIFO at the
 * lock's name is not troupe's: left as it is, the choices measured and none kept, said
 * once. */
static void a_lock_file_not_troupes_is_left_alone(void **state) {
  (void)state;
  char path[300], lock[400], elsewhere[300];
  in_dir(path, sizeof path, "locked");
  in_dir(elsewhere, sizeof elsewhere, "elsewhere");
  snprintf(lock, sizeof lock, "%s.lock", path);
  assert_int_equal(symlink(elsewhere, lock), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  fake_products();
  assert_int_equal(access(elsewhere, F_OK), -1); /* not created through the link */
  assert_int_equal(count_of(slurp(path), "\tfast\t"), 2);
  /* a FIFO where troupe's lock file goes */
  in_dir(path, sizeof path, "fifo-locked");
  in_dir(lock, sizeof lock, ".fifo-locked.troupe-lock");
  assert_int_equal(mkfifo(lock, 0600), 0);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  seen before = seen_of(lock);
  capture_begin();
  fake_products();
  fake_products();
  const char *said = capture_end();
  expect_unchanged(lock, &before);
  assert_int_equal(access(path, F_OK), -1); /* nothing kept */
  if (count_of(said, ".fifo-locked.troupe-lock") != 1 || !strstr(said, "FIFO"))
    fail_msg("stderr did not say once that the lock file is a FIFO: \"%s\"", said);
  use_file();
}

/* A process that holds the lock and does not let go (stopped there, or a child that
 * inherited it) is given up on after a bounded wait: the products are served, nothing is
 * kept, and stderr says so once. */
static void a_holder_that_keeps_the_lock_is_given_up_on(void **state) {
  (void)state;
  char path[300];
  in_dir(path, sizeof path, "held");
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    int fd;
    char *lock, err[512];
    if (tr__file_keep_lock(path, "test", path, 1000, &fd, &lock, err, sizeof err)) _exit(1);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause(); /* holds it until killed */
    _exit(0);
  }
  char x;
  assert_int_equal(read(ready[0], &x, 1), 1);
  setenv("TROUPE_GEMM_CHOICES", path, 1);
  capture_begin();
  const uint64_t t0 = tr_now_ns();
  fake_products();
  fake_products();
  const double waited = (double)(tr_now_ns() - t0) / 1e9;
  const char *said = capture_end();
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  close(ready[0]);
  close(ready[1]);
  assert_true(waited < 15); /* once, about a second */
  assert_int_equal(access(path, F_OK), -1);
  if (count_of(said, "held its lock file") != 1)
    fail_msg("stderr did not say once that the lock stayed held: \"%s\"", said);
  use_file();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_file_keeps_its_newest_lines),
      cmocka_unit_test(a_file_that_is_not_one_of_choices_is_never_read_or_replaced),
      cmocka_unit_test(a_rewritten_file_keeps_its_mode_and_owner_and_a_link_stays),
      cmocka_unit_test(a_temporary_file_at_a_predictable_name_is_never_used),
      cmocka_unit_test(a_lock_file_not_troupes_is_left_alone),
      cmocka_unit_test(a_holder_that_keeps_the_lock_is_given_up_on),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
