/* test_file.c — the output checks and the writer's lock of tr_file.h, as library calls: a
 * symlink's target, what may not be replaced, two names of one file, a mode kept, and one
 * writer per output across processes (a second refused naming the first's pid, a lock taken
 * again in the process that holds it, no stale lock after a writer dies), and the write tried
 * in place before a run (tr_file_probe_output); and the writer of file_write.h: a run's
 * output that refuses a path changed since it began and keeps its file aside, and writes
 * through the link it began with. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "file_write.h" /* internal: the writer */
#include "troupe.h"

static char dir[] = "/tmp/troupe-test-file-XXXXXX";

static int setup(void **state) {
  (void)state;
  if (mkdtemp(dir) == NULL || chdir(dir) != 0) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void touch(const char *path, mode_t mode) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "x", 1), 1);
  close(fd);
}

static void expect_target(const char *path, const char *want) {
  char *t = NULL;
  assert_int_equal(tr_file_output_target(path, &t), 0);
  assert_string_equal(t, want);
  free(t);
}

static void target_follows_links(void **state) {
  (void)state;
  assert_int_equal(mkdir("d", 0777), 0);
  assert_int_equal(symlink("real", "d/rel"), 0);   /* relative: from the link's directory */
  assert_int_equal(symlink("d/rel", "chain"), 0);  /* a link to a link */
  assert_int_equal(symlink("/nowhere/x", "abs"), 0);
  expect_target("plain", "plain");
  expect_target("d/rel", "d/real");
  expect_target("chain", "d/real");
  expect_target("abs", "/nowhere/x");
  assert_int_equal(symlink("loop2", "loop1"), 0);
  assert_int_equal(symlink("loop1", "loop2"), 0);
  char *t = NULL;
  assert_int_equal(tr_file_output_target("loop1", &t), TR_EIO);
  assert_null(t);
  char err[256];
  assert_int_equal(tr_file_check_output("loop1", "out", err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "out 'loop1': "));
}

static void output_kinds(void **state) {
  (void)state;
  char err[256];
  assert_int_equal(mkfifo("fifo", 0666), 0);
  assert_int_equal(symlink("fifo", "to-fifo"), 0);
  assert_int_equal(tr_file_check_output("fifo", "out", err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "out 'fifo': a FIFO, not a regular file");
  assert_int_equal(tr_file_check_output("to-fifo", "out", err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "out 'to-fifo': a FIFO, not a regular file");
  touch("reg", 0644);
  assert_int_equal(symlink("reg", "to-reg"), 0);
  assert_int_equal(symlink("new", "to-new"), 0);
  assert_int_equal(tr_file_check_output("reg", "out", err, sizeof err), 0);
  assert_int_equal(tr_file_check_output("to-reg", "out", err, sizeof err), 0);
  assert_int_equal(tr_file_check_output("to-new", "out", err, sizeof err), 0);
  assert_int_equal(symlink("nodir/x", "to-nodir"), 0); /* the target's directory counts */
  assert_int_equal(tr_file_check_output("to-nodir", "out", err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "out 'to-nodir': directory 'nodir' does not exist");
}

static void distinct_files(void **state) {
  (void)state;
  char err[256];
  touch("a", 0644);
  touch("b", 0644);
  assert_int_equal(link("a", "a-hard"), 0);
  assert_int_equal(mkdir("sub", 0777), 0);
  assert_int_equal(tr_file_check_distinct("a", "out", "b", "in", err, sizeof err), 0);
  assert_int_equal(tr_file_check_distinct("a", "out", NULL, "in", err, sizeof err), 0);
  assert_int_equal(tr_file_check_distinct("a-hard", "out", "a", "in", err, sizeof err),
                   TR_EINVAL);
  assert_string_equal(err, "out 'a-hard': the same file as in 'a'");
  /* neither there: where they would be made */
  assert_int_equal(tr_file_check_distinct("sub/../n", "out", "./n", "in", err, sizeof err),
                   TR_EINVAL);
  assert_int_equal(tr_file_check_distinct("sub/n", "out", "n", "in", err, sizeof err), 0);
  assert_int_equal(symlink("sub/n", "to-sub-n"), 0); /* a dangling link writes its target */
  assert_int_equal(tr_file_check_distinct("to-sub-n", "out", "sub/n", "in", err, sizeof err),
                   TR_EINVAL);
  assert_int_equal(tr_file_check_distinct("a", "out", "n", "in", err, sizeof err), 0);
}

static void mode_kept(void **state) {
  (void)state;
  touch("m", 0600);
  assert_int_equal(chmod("m", 0640), 0);
  const int fd = open("m.tmp", O_WRONLY | O_CREAT | O_EXCL, 0666);
  assert_true(fd >= 0);
  assert_int_equal(tr_file_keep_mode(fd, "m"), 0);
  struct stat sb;
  assert_int_equal(fstat(fd, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0640);
  assert_int_equal(tr_file_keep_mode(fd, "absent"), 0); /* nothing to keep */
  close(fd);
}

/* In a child: tries the lock on `path`; exits 0 when taken (and, with `die`, dies holding
 * it), 2 when refused with a message naming `holder`'s pid, 1 otherwise. */
static int child_try(const char *path, pid_t holder, int die) {
  const pid_t p = fork();
  if (p == 0) {
    char err[512], want[64];
    tr_file_lock *l;
    const int rc = tr_file_lock_output(path, "ck", &l, err, sizeof err);
    snprintf(want, sizeof want, "(pid %ld)", (long)holder);
    if (rc == 0) {
      if (!die) tr_file_unlock(l);
      _exit(0);
    }
    _exit(rc == TR_EINVAL && strstr(err, want) && strstr(err, "ck 'ck.st': another run") ? 2
                                                                                          : 1);
  }
  int status;
  assert_int_equal(waitpid(p, &status, 0), p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void one_writer(void **state) {
  (void)state;
  char err[512];
  tr_file_lock *a, *b;
  assert_int_equal(tr_file_lock_output("ck.st", "ck", &a, err, sizeof err), 0);
  assert_int_equal(access(".ck.st.troupe-lock", F_OK), 0);
  assert_int_equal(child_try("ck.st", getpid(), 0), 2);
  /* taken again here (a run and the job it makes): counted; the first release keeps it */
  assert_int_equal(tr_file_lock_output("ck.st", "ck", &b, err, sizeof err), 0);
  tr_file_unlock(b);
  assert_int_equal(child_try("ck.st", getpid(), 0), 2);
  tr_file_unlock(a);
  assert_int_equal(access(".ck.st.troupe-lock", F_OK), -1); /* the last release removes it */
  assert_int_equal(child_try("ck.st", getpid(), 0), 0);
  /* a writer that dies holding it leaves the file, not the lock */
  assert_int_equal(child_try("ck.st", getpid(), 1), 0);
  assert_int_equal(access(".ck.st.troupe-lock", F_OK), 0);
  assert_int_equal(tr_file_lock_output("ck.st", "ck", &a, err, sizeof err), 0);
  tr_file_unlock(a);
}

/* The size and first bytes of `path`, to see that nothing wrote it. */
static void expect_text(const char *path, const char *text) {
  char buf[64] = {0};
  const int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(read(fd, buf, sizeof buf - 1), (ssize_t)strlen(text));
  assert_string_equal(buf, text);
  close(fd);
}

/* A lock file troupe did not make is never written, truncated, followed or removed: the
 * user's "flake.lock" beside an output "flake" is another name altogether, and what sits at
 * troupe's own name without being troupe's (a file of other text, a FIFO, a symlink) refuses
 * the lock, naming it, and stays as it was. */
static void lock_files_not_ours_are_left_alone(void **state) {
  (void)state;
  char err[512];
  tr_file_lock *l;
  int fd = open("flake.lock", O_WRONLY | O_CREAT | O_EXCL, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "{\"nodes\":{}}\n", 13), 13);
  close(fd);
  assert_int_equal(tr_file_lock_output("flake", "ck", &l, err, sizeof err), 0);
  tr_file_unlock(l);
  expect_text("flake.lock", "{\"nodes\":{}}\n");

  fd = open(".other.troupe-lock", O_WRONLY | O_CREAT | O_EXCL, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "mine\n", 5), 5);
  close(fd);
  assert_int_equal(tr_file_lock_output("other", "ck", &l, err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "ck 'other': its lock file '.other.troupe-lock' is a file that "
                           "is not troupe's lock file: it is left as it is (remove it, or "
                           "write elsewhere)");
  expect_text(".other.troupe-lock", "mine\n");

  assert_int_equal(mkfifo(".fifo.troupe-lock", 0644), 0);
  assert_int_equal(tr_file_lock_output("fifo", "ck", &l, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "its lock file '.fifo.troupe-lock' is a FIFO: it is left"));
  struct stat sb;
  assert_int_equal(lstat(".fifo.troupe-lock", &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));

  touch("victim", 0644);
  assert_int_equal(symlink("victim", ".link.troupe-lock"), 0);
  assert_int_equal(tr_file_lock_output("link", "ck", &l, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "its lock file '.link.troupe-lock' is a symbolic link"));
  expect_text("victim", "x");
  assert_int_equal(lstat(".link.troupe-lock", &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
}

/* Entries of `path` (the probe leaves none behind). */
static int entries(const char *path) {
  DIR *d = opendir(path);
  int n = 0;
  assert_non_null(d);
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* The write tried in place before the run: what only the write would find is refused now,
 * and the probe changes nothing, the output least of all. */
static void probe_tries_the_write_in_place(void **state) {
  (void)state;
  char err[512];
  assert_int_equal(mkdir("p", 0777), 0);
  touch("p/keep.st", 0600);
  struct stat before, after;
  assert_int_equal(stat("p/keep.st", &before), 0);
  const int n = entries("p");
  assert_int_equal(tr_file_probe_output("p/keep.st", "out", err, sizeof err), 0);
  assert_int_equal(tr_file_probe_output("p/new.st", "out", err, sizeof err), 0);
  assert_int_equal(stat("p/keep.st", &after), 0);
  assert_true(after.st_ino == before.st_ino && after.st_size == 1 &&
              (after.st_mode & 07777) == 0600 && after.st_mtime == before.st_mtime);
  assert_int_equal(entries("p"), n); /* no temporary file, no new.st */
  assert_int_equal(tr_file_probe_output("/proc/ck.st", "out", err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "out '/proc/ck.st': cannot create a file in directory '/proc'"));
  char name[3 + 301] = "p/";
  memset(name + 2, 'n', 300);
  name[302] = 0;
  assert_int_equal(tr_file_probe_output(name, "out", err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "a name of 300 bytes"));
  name[2 + 255] = 0; /* 255 bytes: the file system's limit, and the temporary name is cut */
  assert_int_equal(tr_file_probe_output(name, "out", err, sizeof err), 0);
  assert_int_equal(entries("p"), n);
  /* tr_file_check_output's refusals come first */
  assert_int_equal(tr_file_probe_output("p/", "out", err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "out 'p/': a directory, not a file");
}

/* A file of another user in a sticky directory: the write's rename could not replace it
 * (the kernel's rule, checked here too), so the probe refuses it. Shown by a child that is
 * nobody (uid 65534), so only where this test runs as root. */
static void probe_refuses_what_a_sticky_directory_keeps(void **state) {
  (void)state;
  if (geteuid() != 0) skip(); /* a file of another user and a child of another uid */
  assert_int_equal(chmod(dir, 0711), 0);
  assert_int_equal(mkdir("sticky", 0777), 0);
  assert_int_equal(chmod("sticky", 01777), 0);
  touch("sticky/theirs.st", 0644);
  assert_int_equal(chown("sticky/theirs.st", 1, 1), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char err[512];
    if (setgid(65534) || setuid(65534)) _exit(10);
    if (tr_file_probe_output("sticky/theirs.st", "out", err, sizeof err) != TR_EINVAL ||
        !strstr(err, "directory 'sticky' is sticky and the file is another user's"))
      _exit(1);
    const int fd = open("sticky/mine", O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) _exit(2);
    close(fd);
    if (rename("sticky/mine", "sticky/theirs.st") == 0 || errno != EPERM) _exit(3);
    unlink("sticky/mine");
    if (tr_file_probe_output("sticky/new.st", "out", err, sizeof err) != 0) _exit(4);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- the writer (file_write.h) --------------------------------------------------------- */

static int fill_text(void *arg, int fd) {
  const char *text = arg;
  return write(fd, text, strlen(text)) == (ssize_t)strlen(text) ? 0 : errno ? errno : EIO;
}

/* Each writer test in a directory of its own, to count what it leaves. */
static void enter(const char *sub) {
  assert_int_equal(mkdir(sub, 0755), 0);
  assert_int_equal(chdir(sub), 0);
}

/* `what` renamed over `path` at once, as a user's `mv` does. */
static void swap_in(const char *what, const char *path) { assert_int_equal(rename(what, path), 0); }

/* The file a refused write was kept in, from its message ("... is in 'NAME'"): its text is
 * `text`, its mode `mode`; then it goes. */
static void expect_kept(const char *err, const char *text, mode_t mode) {
  const char *in = strstr(err, " is in '");
  assert_non_null(in);
  char name[256];
  snprintf(name, sizeof name, "%s", in + 8);
  assert_non_null(strchr(name, '\''));
  *strchr(name, '\'') = 0;
  assert_non_null(strstr(name, ".troupe-saved-"));
  expect_text(name, text);
  struct stat sb;
  assert_int_equal(lstat(name, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, mode);
  unlink(name);
}

/* A run's output, written again and again, finds its path as it left it or refuses: a path
 * that became a FIFO, a symlink to another file, another file, or its own file rewritten by
 * another program is left as it is, and what was to be written is kept in a new file of its
 * own beside it, with the mode of the file it was to replace, named in the error. */
static void a_run_output_refuses_a_path_changed_since_and_keeps_its_file(void **state) {
  (void)state;
  char err[1024];
  tr__file_output o;
  static const char *const changes[] = {"fifo", "link", "other", "rewritten", "device"};
  enter("changed");
  for (int c = 0; c < 5; c++) {
    touch("out", 0600); /* the user's mode: the file kept aside keeps it */
    assert_int_equal(chmod("out", 0600), 0);
    assert_int_equal(tr__file_output_open(&o, "out", "checkpoint.path", true, err, sizeof err), 0);
    assert_int_equal(tr__file_output_write(&o, "the first", fill_text, "one", err, sizeof err), 0);
    expect_text("out", "one");
    const char *why = NULL;
    touch("theirs", 0644);
    if (c == 0) {
      assert_int_equal(mkfifo("new", 0644), 0);
      why = "checkpoint.path 'out': became a FIFO during the run: left as it is; the second "
            "is in 'out.troupe-saved-";
    } else if (c == 1) {
      assert_int_equal(symlink("theirs", "new"), 0);
      why = "checkpoint.path 'out': became a symbolic link to 'theirs' during the run: left "
            "as it is; the second is in 'out.troupe-saved-";
    } else if (c == 2) {
      touch("new", 0644);
      why = "replaced or rewritten after this run wrote it, by another program during the run";
    } else if (c == 3) {
      const int fd = open("out", O_WRONLY | O_APPEND);
      assert_true(fd >= 0);
      assert_int_equal(write(fd, "!", 1), 1); /* the same inode, not the same file */
      close(fd);
      why = "replaced or rewritten after this run wrote it";
    } else if (mknod("new", S_IFCHR | 0666, makedev(1, 3)) == 0) {
      why = "checkpoint.path 'out': became a character device during the run";
    } else {
      printf("skip a character device: mknod is not permitted here\n");
      tr__file_output_close(&o);
      unlink("out");
      continue;
    }
    if (c != 3) swap_in("new", "out");
    struct stat before, after;
    assert_int_equal(lstat("out", &before), 0);
    assert_int_equal(tr__file_output_write(&o, "the second", fill_text, "two", err, sizeof err),
                     TR_EIO);
    if (!strstr(err, why)) fail_msg("%s: '%s' lacks '%s'", changes[c], err, why);
    assert_ptr_not_equal(o.saved, NULL);
    expect_kept(err, "two", 0600);
    assert_int_equal(lstat("out", &after), 0); /* left as it was */
    assert_int_equal(after.st_ino, before.st_ino);
    assert_int_equal(after.st_mode, before.st_mode);
    assert_int_equal(after.st_size, before.st_size);
    expect_text("theirs", "x");
    tr__file_output_close(&o);
    unlink("out");
    unlink("theirs");
  }
  assert_int_equal(entries("."), 2); /* no temporary file left: . and .. */
  assert_int_equal(chdir(".."), 0);
}

/* What a run's output may replace: the file it resumed from (there when it was opened), its
 * own file again, a link's target through the link as it was (the link kept), a path removed
 * meanwhile (nothing is replaced). A link turned elsewhere is not followed. */
static void a_run_output_writes_its_own_file_and_through_its_link(void **state) {
  (void)state;
  char err[1024];
  tr__file_output o;
  enter("own");
  touch("resumed", 0640);
  assert_int_equal(chmod("resumed", 0640), 0);
  assert_int_equal(tr__file_output_open(&o, "resumed", NULL, true, err, sizeof err), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tr__file_output_write(&o, NULL, fill_text, "new", err, sizeof err), 0);
  expect_text("resumed", "new");
  struct stat sb;
  assert_int_equal(stat("resumed", &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0640);
  unlink("resumed");
  assert_int_equal(tr__file_output_write(&o, NULL, fill_text, "again", err, sizeof err), 0);
  expect_text("resumed", "again");
  tr__file_output_close(&o);
  unlink("resumed");

  assert_int_equal(symlink("real", "lnk"), 0);
  assert_int_equal(tr__file_output_open(&o, "lnk", "trace", true, err, sizeof err), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(tr__file_output_write(&o, NULL, fill_text, "through", err, sizeof err), 0);
  assert_int_equal(lstat("lnk", &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  expect_text("real", "through");
  touch("elsewhere", 0644);
  assert_int_equal(symlink("elsewhere", "lnk2"), 0);
  swap_in("lnk2", "lnk");
  assert_int_equal(tr__file_output_write(&o, "the trace", fill_text, "no", err, sizeof err),
                   TR_EIO);
  if (!strstr(err, "trace 'lnk': led to 'real' and leads to 'elsewhere' now: the link changed "
                   "during the run: left as it is; the trace is in 'real.troupe-saved-"))
    fail_msg("%s", err);
  expect_kept(err, "no", 0644);
  expect_text("elsewhere", "x");
  expect_text("real", "through");
  tr__file_output_close(&o);
  unlink("lnk");
  unlink("real");
  unlink("elsewhere");
  assert_int_equal(entries("."), 2);
  assert_int_equal(chdir(".."), 0);
}

/* A single write (not a run's) refuses what is not a regular file before writing anything,
 * and keeps nothing aside: the caller still has what it wanted written. */
static void a_single_write_refuses_a_special_file_at_once(void **state) {
  (void)state;
  char err[1024];
  enter("single");
  assert_int_equal(mkfifo("f", 0644), 0);
  assert_int_equal(tr__file_write("f", "out", fill_text, "x", err, sizeof err), TR_EINVAL);
  assert_string_equal(err, "out 'f': a FIFO, not a regular file: left as it is");
  assert_int_equal(entries("."), 3); /* the FIFO alone */
  unlink("f");
  assert_int_equal(chdir(".."), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(target_follows_links), cmocka_unit_test(output_kinds),
      cmocka_unit_test(distinct_files), cmocka_unit_test(mode_kept),
      cmocka_unit_test(one_writer), cmocka_unit_test(lock_files_not_ours_are_left_alone),
      cmocka_unit_test(probe_tries_the_write_in_place),
      cmocka_unit_test(probe_refuses_what_a_sticky_directory_keeps),
      cmocka_unit_test(a_run_output_refuses_a_path_changed_since_and_keeps_its_file),
      cmocka_unit_test(a_run_output_writes_its_own_file_and_through_its_link),
      cmocka_unit_test(a_single_write_refuses_a_special_file_at_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
