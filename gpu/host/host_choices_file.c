/* host_choices_file.c — the file where the host GEMM's choices per shape are kept between
 * processes (host_choose.h): plain text, one line per choice,
 *
 *   <machine and libraries> TAB <key> TAB <library> TAB <median ns of each candidate>
 *
 * beside the planner's file of costs. The planner (actors/) owns that file and sits above
 * gpu/, so the GEMM keeps its own, found the same way: $TROUPE_GEMM_CHOICES (empty: none),
 * else the folder of $TROUPE_COSTS, else $XDG_CACHE_HOME/troupe or ~/.cache/troupe.
 *
 * A lock file beside it (flock) is held while the file is read and a line added: a process
 * that measured a key adds its choice only if no other process added one meanwhile, and
 * otherwise takes that one, so that processes never decide a key apart; lines are only added, through a temporary file renamed over the old,
 * never over something that is not a regular file. Lines of other machines or libraries are
 * kept as they are; past MAX_LINES the oldest go. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "host_choose.h"

#define FILE_NAME "gemm-choices"
enum { MAX_LINES = 4096 };

void tr__gemm_file_path(char *out, size_t n) {
  const char *env = getenv("TROUPE_GEMM_CHOICES"), *costs = getenv("TROUPE_COSTS");
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  out[0] = 0;
  if (env) snprintf(out, n, "%s", env);
  else if (costs && *costs) {
    const char *slash = strrchr(costs, '/');
    if (slash) snprintf(out, n, "%.*s/" FILE_NAME, (int)(slash - costs), costs);
    else snprintf(out, n, FILE_NAME);
  } else if (xdg && *xdg) snprintf(out, n, "%s/troupe/" FILE_NAME, xdg);
  else if (home && *home) snprintf(out, n, "%s/.cache/troupe/" FILE_NAME, home);
}

/* mkdir -p of path's folder */
static void make_folder(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return;
  *slash = 0;
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      (void)mkdir(dir, 0777);
      *p = '/';
    }
  (void)mkdir(dir, 0777);
}

/* The lock is held only to read and to add a line, never while measuring; a holder that
 * does not let go within LOCK_WAIT_MS (a process stopped there, or a child that inherited
 * the lock) is given up on, and the lock with it for the rest of the process: no product
 * waits on it twice. */
enum { LOCK_WAIT_MS = 1000 };
static _Atomic int given_up;

int tr__gemm_file_lock(const char *path) {
  if (!path[0] || atomic_load(&given_up)) return -1;
  char lock[4200];
  snprintf(lock, sizeof lock, "%s.lock", path);
  make_folder(path);
  const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  for (int ms = 0; ms < LOCK_WAIT_MS; ms++) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  atomic_store(&given_up, 1);
  close(fd);
  return -1;
}

void tr__gemm_file_unlock(int fd) {
  if (fd >= 0) close(fd); /* the lock goes with it */
}

/* The file's text, NUL-terminated (NULL when absent, unreadable or not a regular file). */
static char *slurp(const char *path) {
  struct stat st;
  if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_size > (16 << 20)) return NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = malloc((size_t)st.st_size + 1);
  size_t got = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
  fclose(f);
  if (text) text[got] = 0;
  return text;
}

/* The line of (sig, key) in text: its choice into choice[n]; 1 found, 0 not. */
static int find_in(char *text, const char *sig, const char *key, char *choice, size_t n) {
  const size_t ls = strlen(sig), lk = strlen(key);
  int found = 0;
  for (char *line = text; *line && !found;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    if (!strncmp(line, sig, ls) && line[ls] == '\t' && !strncmp(line + ls + 1, key, lk) &&
        line[ls + 1 + lk] == '\t') {
      const char *c = line + ls + 1 + lk + 1;
      snprintf(choice, n, "%.*s", (int)strcspn(c, "\t"), c);
      found = choice[0] != 0;
    }
    if (end) *end = '\n';
    line = end ? end + 1 : line + strlen(line);
  }
  return found;
}

int tr__gemm_file_find(const char *path, const char *sig, const char *key, char *choice,
                       size_t n) {
  char *text = path[0] ? slurp(path) : NULL;
  if (!text) return 0;
  const int found = find_in(text, sig, key, choice, n);
  free(text);
  return found;
}

/* The file as this process first read it (again when the path changes): a key found there
 * needs neither the lock nor a read. Lines are only added (the oldest dropped), and a reader
 * sees the file whole (it is renamed into place), so what it says of a key stays true. */
static pthread_mutex_t snap_mu = PTHREAD_MUTEX_INITIALIZER;
static char *snap, snap_path[4096];

int tr__gemm_file_known(const char *path, const char *sig, const char *key, char *choice,
                        size_t n) {
  if (!path[0]) return 0;
  pthread_mutex_lock(&snap_mu);
  if (strcmp(snap_path, path)) {
    free(snap);
    snap = slurp(path);
    snprintf(snap_path, sizeof snap_path, "%s", path);
  }
  const int found = snap && find_in(snap, sig, key, choice, n);
  pthread_mutex_unlock(&snap_mu);
  return found;
}

void tr__gemm_file_add(const char *path, const char *line) {
  struct stat st;
  if (!path[0] || (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))) return;
  char *old = slurp(path);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(old);
    return;
  }
  int ok = 1;
  if (old && old[0]) {
    /* the newest MAX_LINES - 1 lines kept: shapes that tests draw at random would otherwise
     * grow it for ever */
    const char *from = old;
    size_t lines = 0;
    for (const char *p = old; *p; p++) lines += *p == '\n';
    for (; lines >= MAX_LINES && *from; lines--) {
      const char *nl = strchr(from, '\n');
      from = nl ? nl + 1 : from + strlen(from);
    }
    const size_t len = strlen(from);
    ok = fwrite(from, 1, len, f) == len && (!len || from[len - 1] == '\n' || fputc('\n', f) != EOF);
  }
  ok = ok && fprintf(f, "%s\n", line) > 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) unlink(tmp);
  free(old);
}
