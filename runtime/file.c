/* file.c — the files a run is given, checked before the work that needs them (tr_file.h). */
#include "tr_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tr_base.h"

static const char *kind_of(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
                          : "not a regular file";
}

int tr_file_check_output(const char *path, const char *what, char *err, size_t err_size) {
  if (path == NULL || path[0] == 0)
    return tr_errorf(err, err_size, TR_EINVAL, "%s: an empty path", what);
  const size_t n = strlen(path);
  struct stat sb;
  if (path[n - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
    return tr_errorf(err, err_size, TR_EINVAL, "%s '%s': a directory, not a file", what, path);
  char *dir = malloc(n + 2);
  if (dir == NULL) return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
  const char *slash = strrchr(path, '/');
  if (slash == NULL) strcpy(dir, ".");
  else if (slash == path) strcpy(dir, "/");
  else memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
  int rc = 0;
  if (stat(dir, &sb) != 0) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': directory '%s' %s", what, path, dir,
                   errno == ENOENT ? "does not exist" : strerror(errno));
  } else if (!S_ISDIR(sb.st_mode)) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': '%s' is not a directory", what, path,
                   dir);
  } else if (access(dir, W_OK | X_OK) != 0) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': directory '%s' is not writable: %s",
                   what, path, dir, strerror(errno));
  }
  free(dir);
  return rc;
}

int tr_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size,
                         char *err, size_t err_size) {
  *fd = -1;
  *size = 0;
  if (path == NULL || path[0] == 0)
    return tr_errorf(err, err_size, TR_EINVAL, "%s: an empty path", what ? what : "file");
  /* "data 'x': ..." or, with no `what`, "x: ..." */
  const char *q = what ? "'" : "", *sp = what ? " " : "";
  if (what == NULL) what = "";
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  const int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (f < 0 || fstat(f, &sb) != 0) {
    const int e = errno;
    if (f >= 0) close(f);
    return tr_errorf(err, err_size, TR_EIO, "%s%s%s%s%s: cannot open: %s", what, sp, q, path, q,
                     strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return tr_errorf(err, err_size, TR_EINVAL, "%s%s%s%s%s: %s, not a regular file", what, sp,
                     q, path, q, kind_of(sb.st_mode));
  }
  *fd = f;
  *size = (uint64_t)sb.st_size;
  return 0;
}

int tr_file_read_at(int fd, void *buf, size_t n, uint64_t offset, const char *what,
                    const char *path, char *err, size_t err_size) {
  char *p = buf;
  while (n) {
    const ssize_t k = pread(fd, p, n < (1u << 30) ? n : (1u << 30), (off_t)offset);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      return tr_errorf(err, err_size, TR_EIO, "%s '%s': reading %zu bytes at %llu: %s", what,
                       path, n, (unsigned long long)offset, strerror(errno));
    if (k == 0) {
      struct stat sb;
      const long long now = fstat(fd, &sb) == 0 ? (long long)sb.st_size : -1;
      return tr_errorf(err, err_size, TR_EIO,
                       "%s '%s': ends at %lld bytes, before %zu bytes at %llu: it changed "
                       "(was truncated) while it was read",
                       what, path, now, n, (unsigned long long)offset);
    }
    p += k;
    n -= (size_t)k;
    offset += (uint64_t)k;
  }
  return 0;
}
