/* file_atomic.c — files written so that a reader, or a crash, sees the old file or the new
 * one and never a part: the bytes go to a temporary file beside the target, which is synced
 * and renamed over it, and then the directory is synced (models_impl.h). Checkpoints and
 * .npy arrays are written this way.
 *
 * The temporary file is named as tr__file_temp_create says (tr_file.h), so that
 * tr_file_probe_output tries the very names a write will use. A writer killed half-way
 * leaves its temporary file behind. Each writer holds an exclusive flock on its temporary
 * file while it writes, and the lock dies with its process: so once a write has succeeded,
 * the temporaries of the same target that nobody holds (and that are more than a moment
 * old: a writer takes its lock just after creating the file) are leftovers, and go.
 *
 * A target that is a symlink is written through: the temporary file goes beside the link's
 * target and is renamed over it, so the link stays a link (tr_file_output_target). The
 * temporary file takes the mode of the file it replaces, so a rewrite keeps it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models_impl.h"
#include "tr_file.h"

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n < (1u << 30) ? n : (1u << 30));
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

enum { LEFTOVER_AGE_S = 2 }; /* younger temporaries may belong to a writer just starting */

/* Removes the temporaries of `base` in `dir` that no live writer holds. Best effort: a
 * leftover that cannot be removed is left for the next write. */
static void remove_leftovers(const char *dir, const char *base) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  const int dfd = dirfd(d);
  const time_t now = time(NULL);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!tr__file_temp_of(e->d_name, base)) continue;
    const int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) continue;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_mtime + LEFTOVER_AGE_S < now &&
        flock(fd, LOCK_EX | LOCK_NB) == 0)
      unlinkat(dfd, e->d_name, 0);
    close(fd);
  }
  closedir(d);
}

int tr__write_atomic(const char *path, const tr__span *spans, size_t n, char *err,
                     size_t err_size) {
  const size_t plen = path ? strlen(path) : 0;
  if (!plen || path[plen - 1] == '/') {
    snprintf(err, err_size, "'%s' is not a file path", path ? path : "");
    return TR_EINVAL;
  }
  char *target = NULL;
  int rc = tr_file_output_target(path, &target), fd = -1, e = 0;
  if (rc == TR_EIO) {
    snprintf(err, err_size, "%s: %s", path, strerror(ELOOP));
    return rc;
  }
  const size_t tlen = target ? strlen(target) : 0;
  char *dir = target ? malloc(tlen + 2) : NULL, *tmp = target ? malloc(tlen + 256) : NULL;
  rc = TR_ENOMEM;
  const char *stage = NULL, *where = NULL;
  if (tmp) tmp[0] = '\0'; /* no temporary file to remove yet */
  if (!dir || !tmp) goto out;
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  if (!slash) strcpy(dir, ".");
  else if (slash == target) strcpy(dir, "/");
  else memcpy(dir, target, (size_t)(slash - target)), dir[slash - target] = '\0';

  rc = TR_EIO;
  fd = tr__file_temp_create(dir, base, tmp, tlen + 256);
  if (fd < 0) {
    e = errno, stage = "creating a temporary file in", where = dir;
    tmp[0] = '\0';
    goto out;
  }
  stage = "giving the temporary file the mode of the one it replaces";
  if ((e = tr_file_keep_mode(fd, target))) goto out;
  stage = "writing the temporary file";
  for (size_t i = 0; i < n; i++)
    if (spans[i].n && (e = write_all(fd, spans[i].p, spans[i].n))) goto out;
  stage = "syncing the temporary file";
  if (fsync(fd)) {
    e = errno;
    goto out;
  }
  stage = "closing the temporary file";
  int c = close(fd);
  fd = -1;
  if (c) {
    e = errno;
    goto out;
  }
  stage = "renaming the temporary file over it";
  if (rename(tmp, target)) {
    e = errno;
    goto out;
  }
  tmp[0] = '\0'; /* it is the target now: nothing to clean up */
  /* The rename is durable only once the directory entry is: fsync the directory. Some file
   * systems cannot (EINVAL); the data itself is already synced. */
  stage = "syncing the directory", where = dir;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || (fsync(dfd) && errno != EINVAL)) {
    e = errno;
    if (dfd >= 0) close(dfd);
    goto out;
  }
  close(dfd);
  rc = 0;
  remove_leftovers(dir, base);
out:
  if (fd >= 0) close(fd);
  if (tmp && tmp[0]) unlink(tmp);
  if (rc == TR_ENOMEM) {
    snprintf(err, err_size, "%s: out of memory", path);
  } else if (rc) {
    char ebuf[128];
    snprintf(err, err_size, "%s: %s%s%s: %s", path, stage, where ? " " : "", where ? where : "",
             strerror_r(e, ebuf, sizeof ebuf));
  }
  free(dir);
  free(tmp);
  free(target);
  return rc;
}
