/* host_choices_file.c — the file where the host GEMM's choices per shape are kept between
 * processes (host_choose.h, host_choices_file.h): plain text, a first line that says what
 * it is, then one line per choice,
 *
 *   # troupe gemm-choices 1
 *   <machine and libraries> TAB <key> TAB <library> TAB <median ns of each candidate>
 *
 * beside the planner's file of costs. The planner (actors/) owns that file and sits above
 * gpu/, so the GEMM keeps its own, found the same way: $TROUPE_GEMM_CHOICES (empty: none),
 * else the folder of $TROUPE_COSTS, else $XDG_CACHE_HOME/troupe or ~/.cache/troupe.
 *
 * The path is the user's, and may name anything: the file is read, and replaced, only when
 * it is one of troupe's files of choices (its first line, or every line a choice: the format
 * before the first line was written), empty, or absent. Anything else (other text, a
 * checkpoint, more than MAX_BYTES, a FIFO or a device, a symlink to such) is never read as
 * choices, replaced or truncated: the process measures as it would and keeps none, and says
 * so once on stderr, naming the variable and the file. Opens never wait on a FIFO.
 *
 * Troupe's lock file beside it (tr_file.h: tr__file_keep_lock) is held while the file is
 * read and a line added: a process that measured a key adds its choice only if no other
 * process added one meanwhile, and otherwise takes that one, so that processes never decide
 * a key apart. A line is added by writing the whole file again through troupe's one writer
 * (file_write.h: an exclusive temporary file of an unpredictable name beside it, with the old
 * file's mode and, where the process may, its owner, renamed over it); a symlink is written
 * through and stays a link. Lines of other machines or libraries are kept as they are; past MAX_LINES
 * the oldest go. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_write.h"
#include "host_choices_file.h"
#include "tr_file.h"

#define FILE_NAME "gemm-choices"
#define HEADER "# troupe gemm-choices 1\n"
enum { MAX_LINES = 4096, MAX_BYTES = 16 << 20 };

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

/* What names the path, for messages: the variable that gave it. */
static const char *named_by(void) {
  const char *costs = getenv("TROUPE_COSTS");
  return getenv("TROUPE_GEMM_CHOICES")  ? "TROUPE_GEMM_CHOICES"
         : costs && *costs              ? "gemm-choices beside TROUPE_COSTS"
                                        : "the GEMM's choices";
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

/* ---- a path that keeps nothing ------------------------------------------------------------ */

/* The path whose file keeps no choices in this process (it is not one, or its lock cannot be
 * had), said once. The lock is held only to read and to add a line, never while measuring;
 * a holder that does not let go within LOCK_WAIT_MS (a process stopped there, or a child
 * that inherited the lock) is given up on, and the file with it for the rest of the process:
 * no product waits on it twice. */
enum { LOCK_WAIT_MS = 1000 };
/* why: "TROUPE_GEMM_CHOICES 'x': what is wrong" */
static void keep_none(const char *path, const char *why) {
  tr__file_keep_give_up(path, why, "the GEMM's choices are measured and none kept (name "
                                   "another file in TROUPE_GEMM_CHOICES, or set it empty for "
                                   "none)");
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Whether text is a file of choices of the format before the header: every line a choice,
 * its key as host_choose.c's key_text writes it. */
static bool former_format(const char *text) {
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n'), *key = strchr(line, '\t');
    if (!end) end = line + strlen(line);
    char ops[3], type[5];
    int n, k, b, used = 0;
    if (!key || key > end ||
        sscanf(key + 1, "%2[NT] N%d K%d x%d %4[bf1632]%n", ops, &n, &k, &b, type, &used) != 5 ||
        key[1 + used] != '\t')
      return false;
    line = *end ? end + 1 : end;
  }
  return true;
}

/* The file at path, read when it is one of choices: 0 with *text (NULL: absent or empty)
 * and, when it is there, *st (lstat of what a write replaces: its target); -1 when it is not
 * one, why saying what it is. */
static int read_choices(const char *path, char **text, struct stat *st, bool *there, char *why,
                        size_t n) {
  *text = NULL;
  *there = false;
  const char *what = named_by();
  if (stat(path, st) != 0 && errno == ENOENT) return 0; /* a dangling link too: written through */
  int fd;
  uint64_t size;
  char err[512];
  if (tr_file_open_regular(path, what, &fd, &size, err, sizeof err)) { /* no wait on a FIFO */
    snprintf(why, n, "%s", err);
    return -1;
  }
  *there = true;
  int rc = fstat(fd, st) == 0 ? 0 : -1;
  if (rc) snprintf(why, n, "%s '%s': %s", what, path, strerror(errno));
  else if (size > MAX_BYTES)
    rc = -1, snprintf(why, n, "%s '%s': %llu bytes, more than a file of GEMM choices holds "
                      "(%d MiB): not one", what, path, (unsigned long long)size, MAX_BYTES >> 20);
  char *t = rc == 0 ? malloc(size + 1) : NULL;
  if (rc == 0 && !t) rc = -1, snprintf(why, n, "%s '%s': out of memory", what, path);
  if (rc == 0 && tr_file_read_at(fd, t, size, 0, what, path, err, sizeof err))
    rc = -1, snprintf(why, n, "%s", err);
  close(fd);
  if (rc) {
    free(t);
    return rc;
  }
  t[size] = 0;
  if (size && strncmp(t, HEADER, strlen(HEADER)) && !former_format(t)) {
    snprintf(why, n, "%s '%s': not a file of GEMM choices (its first line is not '%.*s')",
             what, path, (int)strlen(HEADER) - 1, HEADER);
    free(t);
    return -1;
  }
  if (size) *text = t;
  else free(t);
  return 0;
}

/* The file's text, or NULL (absent, empty, or not a file of choices: then it keeps none). */
static char *slurp(const char *path) {
  char *text, why[1024];
  struct stat st;
  bool there;
  if (read_choices(path, &text, &st, &there, why, sizeof why)) keep_none(path, why);
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

/* ---- the lock ----------------------------------------------------------------------------- */

int tr__gemm_file_lock(const char *path, tr__gemm_file_held *held) {
  *held = (tr__gemm_file_held){.fd = -1};
  if (!path[0] || tr__file_keep_none(path)) return -1;
  make_folder(path);
  char *target = NULL, why[1024];
  if (tr_file_output_target(path, &target)) {
    snprintf(why, sizeof why, "%s '%s': %s", named_by(), path, strerror(ELOOP));
    keep_none(path, why);
    return -1;
  }
  const int rc = tr__file_keep_lock(target, named_by(), path, LOCK_WAIT_MS, &held->fd,
                                    &held->lock, why, sizeof why);
  free(target);
  if (rc) keep_none(path, why);
  return rc ? -1 : 0;
}

void tr__gemm_file_unlock(tr__gemm_file_held *held) {
  tr__file_keep_unlock(held->fd, held->lock);
  *held = (tr__gemm_file_held){.fd = -1};
}

/* ---- adding a line ------------------------------------------------------------------------ */

/* The lines of text after the header, the newest MAX_LINES - 2 of them (with the header and
 * the line added, MAX_LINES): shapes that tests draw at random would grow it for ever. */
static const char *newest(const char *text) {
  if (!strncmp(text, HEADER, strlen(HEADER))) text += strlen(HEADER);
  size_t lines = 0;
  for (const char *p = text; *p; p++) lines += *p == '\n';
  for (; lines > MAX_LINES - 2 && *text; lines--) {
    const char *nl = strchr(text, '\n');
    text = nl ? nl + 1 : text + strlen(text);
  }
  return text;
}

/* The file's new text: the header, the lines kept, the line added. */
typedef struct added {
  const char *keep, *line;
} added;

static int fill(void *arg, int fd) {
  const added *a = arg;
  const size_t len = strlen(a->keep);
  int e = tr__file_write_all(fd, HEADER, strlen(HEADER));
  if (!e) e = tr__file_write_all(fd, a->keep, len);
  if (!e && len && a->keep[len - 1] != '\n') e = tr__file_write_all(fd, "\n", 1);
  if (!e) e = tr__file_write_all(fd, a->line, strlen(a->line));
  return e ? e : tr__file_write_all(fd, "\n", 1);
}

void tr__gemm_file_add(const char *path, const char *line) {
  char *old = NULL, why[1024];
  struct stat st;
  bool there;
  if (!path[0] || tr__file_keep_none(path)) return;
  if (read_choices(path, &old, &st, &there, why, sizeof why)) {
    keep_none(path, why);
    return;
  }
  /* the one writer (file_write.h): a temporary file of troupe's own, the file's mode and
   * owner kept, renamed over nothing but a regular file; under the lock, so what it
   * replaces is what was read */
  added a = {old ? newest(old) : "", line};
  if (tr__file_write(path, named_by(), fill, &a, why, sizeof why)) keep_none(path, why);
  free(old);
}
