/* file_keep.c — the locks of the files troupe keeps between runs (the planner's costs, the
 * host GEMM's choices; tr_file.h: tr__file_keep_lock).
 *
 * Such a file is read and added to by every process that measures something new, often
 * several at once (ranks, concurrent plans, tests), so each addition reads the file again
 * under the lock and merges. The lock is troupe's lock file beside it (tr__file_lock_open:
 * never a symlink followed, a FIFO waited on, or a file of the user's touched), held only to
 * read and add, never while measuring: a holder that keeps it past a bounded wait (a process
 * stopped there, a child that inherited it) is given up on rather than waited for. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "tr_base.h"
#include "tr_file.h"

int tr__file_keep_lock(const char *target, const char *what, const char *path, int wait_ms,
                       int *fd, char **lock, char *err, size_t err_size) {
  *fd = -1;
  *lock = NULL;
  const uint64_t until = tr_now_ns() + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000u;
  for (;;) {
    free(*lock);
    *lock = NULL;
    int rc = tr__file_lock_open(target, what, path, lock, fd, err, err_size);
    if (rc) {
      free(*lock);
      *lock = NULL;
      return rc;
    }
    int got, e = 0;
    while ((got = flock(*fd, LOCK_EX | LOCK_NB)) != 0 &&
           ((e = errno) == EWOULDBLOCK || e == EINTR) && tr_now_ns() < until)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (got == 0 && tr__file_lock_current(*fd, *lock)) {
      if ((e = tr__file_lock_claim(*fd)) == 0) return 0;
      rc = tr_errorf(err, err_size, TR_EIO, "%s '%s': cannot write its lock file '%s': %s",
                     what, path, *lock, strerror(e));
    } else if (got != 0 && e != EWOULDBLOCK && e != EINTR) {
      rc = tr_errorf(err, err_size, TR_EIO, "%s '%s': cannot lock '%s': %s", what, path, *lock,
                     strerror(e));
    } else if (tr_now_ns() >= until) {
      rc = tr_errorf(err, err_size, TR_ETIMEDOUT,
                     "%s '%s': another process held its lock file '%s' for more than %d ms",
                     what, path, *lock, wait_ms);
    }
    close(*fd); /* with the lock, if taken: a holder removed the file before us */
    *fd = -1;
    if (rc) {
      free(*lock);
      *lock = NULL;
      return rc;
    }
  }
}

void tr__file_keep_unlock(int fd, char *lock) {
  if (fd >= 0) {
    tr__file_lock_remove(fd, lock);
    close(fd); /* the flock goes with it */
  }
  free(lock);
}

/* The paths given up on, each said once: few (the costs, the choices), for the process's
 * life. */
typedef struct given_up {
  struct given_up *next;
  char path[];
} given_up;
static pthread_mutex_t given_mu = PTHREAD_MUTEX_INITIALIZER;
static given_up *given;

static bool find_given(const char *path) {
  for (const given_up *g = given; g; g = g->next)
    if (!strcmp(g->path, path)) return true;
  return false;
}

bool tr__file_keep_none(const char *path) {
  pthread_mutex_lock(&given_mu);
  const bool none = find_given(path);
  pthread_mutex_unlock(&given_mu);
  return none;
}

void tr__file_keep_give_up(const char *path, const char *why, const char *what) {
  pthread_mutex_lock(&given_mu);
  given_up *g = find_given(path) ? NULL : malloc(sizeof *g + strlen(path) + 1);
  if (g) {
    strcpy(g->path, path);
    g->next = given;
    given = g;
    fprintf(stderr, "troupe: %s; nothing there is changed: %s\n", why, what);
  }
  pthread_mutex_unlock(&given_mu);
}
