/* test_owner.c — a device used off its owner thread aborts the process (debug builds), and
 * when a run had failed before, the run's error is printed first: the cause before the
 * symptom (a failed run torn down wrongly must not hide why it failed). Each case runs in a
 * child process whose stderr the test reads. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "troupe.h"

static int fail_start(tr_actor *self) {
  return tr_actor_fail(self, TR_EIO, "the cause: the disk is on fire");
}
static int ignore(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour failing = {.name = "stage", .start = fail_start, .receive = ignore};

static void *alloc_elsewhere(void *arg) {
  void *p;
  tr_device_alloc(arg, 64, &p); /* not the owner: aborts */
  return NULL;
}

/* The child: optionally a run that fails, then the device used by two threads. */
static void child(bool run_fails) {
  char err[256];
  if (run_fails) {
    tr_system *sys;
    tr_actor *a;
    if (tr_system_new(&sys, NULL) ||
        tr_actor_spawn(sys, &(tr_actor_config){.name = "stage0", .kind = TR_ACTOR_LOOP,
                                               .behaviour = &failing},
                       &a) ||
        tr_system_run(sys) != TR_EIO)
      _exit(3);
    tr_system_free(sys);
  }
  tr_device_list *devs;
  void *p;
  if (tr_device_list_open(&devs, "host:1", err, sizeof err)) _exit(4);
  tr_device *d = tr_device_list_at(devs, 0);
  if (tr_device_alloc(d, 64, &p)) _exit(5); /* this thread owns it */
  pthread_t t;
  pthread_create(&t, NULL, alloc_elsewhere, d);
  pthread_join(t, NULL);
  _exit(0); /* not reached in a debug build */
}

/* Runs child(run_fails); its stderr in out; its wait status. */
static int run_child(bool run_fails, char *out, size_t n) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(NULL);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    child(run_fails);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t k;
  while (len + 1 < n && (k = read(fd[0], out + len, n - 1 - len)) > 0) len += (size_t)k;
  out[len] = 0;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return status;
}

static void the_runs_error_comes_before_the_owner_assertion(void **state) {
  (void)state;
#ifdef NDEBUG
  skip(); /* release builds do not check the owner */
#endif
  char out[4096];
  int status = run_child(true, out, sizeof out);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
    fail_msg("the child did not abort (status %d): %s", status, out);
  const char *cause = strstr(out, "the run had failed before this:");
  const char *symptom = strstr(out, "does not own it");
  if (!cause || !symptom || cause > symptom || !strstr(cause, "the disk is on fire"))
    fail_msg("the run's error is not printed before the assertion: %s", out);
  /* a process whose run did not fail says nothing of a run */
  status = run_child(false, out, sizeof out);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  if (strstr(out, "the run had failed") || !strstr(out, "does not own it"))
    fail_msg("without a failed run: %s", out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_runs_error_comes_before_the_owner_assertion),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
