/* file.c — the files a run is given, checked before the work that needs them (tr_file.h). */
#include "tr_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
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

/* The directory part of `path` ("." for none, "/" for the root): malloc'd. */
static char *dir_of(const char *path) {
  const size_t n = strlen(path);
  char *dir = malloc(n + 2);
  if (dir == NULL) return NULL;
  const char *slash = strrchr(path, '/');
  if (slash == NULL) strcpy(dir, ".");
  else if (slash == path) strcpy(dir, "/");
  else memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
  return dir;
}

const char *tr__file_kind(unsigned mode) { return kind_of((mode_t)mode); }
char *tr__file_dir(const char *path) { return dir_of(path); }

enum { MAX_LINKS = 40 }; /* as the kernel's own limit on a path's symlinks */

int tr_file_output_target(const char *path, char **out) {
  TR__NOT_NULL(out);
  *out = NULL;
  TR__NOT_NULL(path);
  char *cur = strdup(path);
  if (cur == NULL) return TR_ENOMEM;
  for (int hops = 0;; hops++) {
    struct stat sb;
    if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) break; /* the target, or nothing yet */
    if (hops == MAX_LINKS) {
      free(cur);
      errno = ELOOP;
      return TR_EIO;
    }
    char *link = malloc((size_t)sb.st_size + 2);
    const ssize_t k = link ? readlink(cur, link, (size_t)sb.st_size + 1) : -1;
    if (k < 0 || k > sb.st_size) { /* gone or changed under us: write where it was */
      free(link);
      break;
    }
    link[k] = 0;
    char *next = link;
    if (link[0] != '/') { /* relative to the directory holding the link */
      char *dir = dir_of(cur);
      next = dir ? malloc(strlen(dir) + (size_t)k + 2) : NULL;
      if (next && !strcmp(dir, ".")) strcpy(next, link);
      else if (next) sprintf(next, "%s/%s", dir, link);
      free(dir);
      free(link);
      if (next == NULL) {
        free(cur);
        return TR_ENOMEM;
      }
    }
    free(cur);
    cur = next;
  }
  *out = cur;
  return 0;
}

int tr_file_keep_mode(int fd, const char *target) {
  struct stat sb;
  if (stat(target, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
  return tr__file_keep_attributes(fd, sb.st_mode, sb.st_uid, sb.st_gid);
}

int tr__file_keep_attributes(int fd, unsigned mode, unsigned uid, unsigned gid) {
  /* the owner first: a chown clears the setuid and setgid bits that the chmod sets again */
  if (fchown(fd, (uid_t)uid, (gid_t)gid) != 0) (void)!fchown(fd, (uid_t)-1, (gid_t)gid);
  return fchmod(fd, (mode_t)mode & 07777) ? errno : 0;
}

int tr_file_check_output(const char *path, const char *what, char *err, size_t err_size) {
  if (path == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_file_check_output: path (%s) is NULL",
                     what ? what : "output");
  if (what == NULL) what = "output";
  if (path == NULL || path[0] == 0)
    return tr_errorf(err, err_size, TR_EINVAL, "%s: an empty path", what);
  const size_t n = strlen(path);
  struct stat sb;
  if (path[n - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
    return tr_errorf(err, err_size, TR_EINVAL, "%s '%s': a directory, not a file", what, path);
  char *target = NULL, *dir = NULL;
  int rc = tr_file_output_target(path, &target);
  if (rc == TR_EIO)
    return tr_errorf(err, err_size, TR_EINVAL, "%s '%s': %s", what, path, strerror(ELOOP));
  if (rc == 0 && (dir = dir_of(target)) == NULL) rc = TR_ENOMEM;
  if (rc) {
    free(target);
    return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
  }
  /* The rename would replace a device, FIFO or socket by a regular file (as root, even
   * /dev/null): what is there already must be a regular file. */
  if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': %s, not a regular file", what, path,
                   kind_of(sb.st_mode));
  } else if (stat(dir, &sb) != 0) {
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
  free(target);
  return rc;
}

int tr__file_temp_create(const char *dir, const char *base, char *tmp, size_t cap) {
  for (int attempt = 0; attempt < 64; attempt++) {
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = tr_now_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() ^ (uint64_t)attempt;
    /* The base is cut so the name stays within NAME_MAX; uniqueness comes from r. */
    snprintf(tmp, cap, "%s/.%.200s.tmp.%016" PRIx64, dir, base, r);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd >= 0) flock(fd, LOCK_EX | LOCK_NB); /* a new file: no one else holds it */
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

int tr__file_temp_beside(const char *target, char **tmp) {
  char *dir = dir_of(target);
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  *tmp = dir ? malloc(strlen(dir) + 256) : NULL;
  const int fd = *tmp ? tr__file_temp_create(dir, base, *tmp, strlen(dir) + 256) : -1;
  if (*tmp == NULL) errno = ENOMEM;
  free(dir);
  return fd;
}

bool tr__file_temp_of(const char *name, const char *base) {
  char prefix[256];
  const int n = snprintf(prefix, sizeof prefix, ".%.200s.tmp.", base);
  if (strncmp(name, prefix, (size_t)n) != 0 || strlen(name) != (size_t)n + 16) return false;
  for (const char *p = name + n; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* Whether this process may remove others' files from sticky directories (CAP_FOWNER, bit 3
 * of its effective capabilities), as root usually may. */
static bool may_override_sticky(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long caps = 0;
  bool found = false;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &caps) == 1) {
      found = true;
      break;
    }
  if (f) fclose(f);
  return found ? (caps >> 3) & 1 : geteuid() == 0;
}

/* What the write's final rename onto `target` in `dir` would meet that a rename between two
 * names of our own does not: a name the file system refuses, a file of another user in a
 * sticky directory (the kernel's check_sticky). 0 or the errno. */
static int rename_onto_target(const char *target, const char *dir, const char *base) {
  const long max = pathconf(dir, _PC_NAME_MAX);
  if (strlen(base) > (size_t)(max > 0 ? max : NAME_MAX)) return ENAMETOOLONG;
  struct stat d, t;
  if (stat(dir, &d) == 0 && (d.st_mode & S_ISVTX) && lstat(target, &t) == 0 &&
      t.st_uid != geteuid() && d.st_uid != geteuid() && !may_override_sticky())
    return EPERM;
  return 0;
}

int tr_file_probe_output(const char *path, const char *what, char *err, size_t err_size) {
  if (path == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_file_probe_output: path (%s) is NULL",
                     what ? what : "output");
  if (what == NULL) what = "output";
  int rc = tr_file_check_output(path, what, err, err_size);
  if (rc) return rc;
  char *target = NULL, *dir = NULL, *tmp = NULL, *moved = NULL;
  if (tr_file_output_target(path, &target) || (dir = dir_of(target)) == NULL ||
      (tmp = malloc(strlen(dir) + 256)) == NULL || (moved = malloc(strlen(dir) + 256)) == NULL) {
    rc = tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
    goto out;
  }
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  if (strlen(target) >= PATH_MAX) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': a path of %zu bytes: %s", what, path,
                   strlen(target), strerror(ENAMETOOLONG));
    goto out;
  }
  int e = rename_onto_target(target, dir, base);
  if (e == ENAMETOOLONG) {
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': a name of %zu bytes: %s", what, path,
                   strlen(base), strerror(e));
    goto out;
  }
  if (e == EPERM) {
    rc = tr_errorf(err, err_size, TR_EINVAL,
                   "%s '%s': directory '%s' is sticky and the file is another user's: the "
                   "write could not replace it (%s)",
                   what, path, dir, strerror(e));
    goto out;
  }
  const int fd = tr__file_temp_create(dir, base, tmp, strlen(dir) + 256);
  if (fd < 0) {
    e = errno;
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': cannot create a file in directory '%s': %s",
                   what, path, dir, strerror(e));
    goto out;
  }
  close(fd);
  /* renamed onto a second temporary file of our own (a rename that replaces a file, as the
   * write's does), never onto the output: the output stays as it is */
  const int mfd = tr__file_temp_create(dir, base, moved, strlen(dir) + 256);
  if (mfd >= 0) close(mfd);
  if (mfd < 0 || rename(tmp, moved) != 0) {
    e = errno;
    if (mfd >= 0) unlink(moved);
    unlink(tmp);
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': cannot rename a file in directory '%s': "
                   "%s", what, path, dir, strerror(e));
    goto out;
  }
  if (unlink(moved) != 0)
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': cannot remove a file from directory "
                   "'%s': %s", what, path, dir, strerror(errno));
out:
  free(moved);
  free(tmp);
  free(dir);
  free(target);
  return rc;
}

/* Where `path` writes, made absolute: its target's directory resolved, then its name.
 * NULL when the directory cannot be resolved (then no other path can be found equal). */
static char *absolute_target(const char *path) {
  char *target = NULL;
  if (tr_file_output_target(path, &target)) return NULL;
  char *dir = dir_of(target), *real = dir ? realpath(dir, NULL) : NULL, *out = NULL;
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  if (real && (out = malloc(strlen(real) + strlen(base) + 2))) sprintf(out, "%s/%s", real, base);
  free(real);
  free(dir);
  free(target);
  return out;
}

int tr_file_check_distinct(const char *out, const char *what, const char *other,
                           const char *other_what, char *err, size_t err_size) {
  if (out == NULL || other == NULL || !out[0] || !other[0]) return 0;
  struct stat a, b;
  const int ha = stat(out, &a) == 0, hb = stat(other, &b) == 0;
  bool same;
  if (ha && hb) {
    same = a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  } else if (ha != hb) {
    same = false; /* one is there and the other is not */
  } else {
    char *x = absolute_target(out), *y = absolute_target(other);
    same = x && y && !strcmp(x, y);
    free(x);
    free(y);
  }
  if (!same) return 0;
  return tr_errorf(err, err_size, TR_EINVAL, "%s '%s': the same file as %s '%s'", what, out,
                   other_what, other);
}

/* ---- lock files ------------------------------------------------------------------------ */

/* A lock file of troupe's begins with this line; what does not is the user's, and is never
 * written, truncated or removed. */
#define LOCK_MAGIC "troupe lock file\n"

char *tr__file_lock_name(const char *target) {
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  const int dir = slash ? (int)(slash - target) + 1 : 0; /* with its slash */
  char *out = malloc((size_t)dir + 256);
  /* the base cut as a temporary file's is, so the name stays within NAME_MAX */
  if (out) sprintf(out, "%.*s.%.200s.troupe-lock", dir, target, base);
  return out;
}

int tr__file_lock_open(const char *target, const char *what, const char *path, char **lock,
                       int *fd, char *err, size_t err_size) {
  *fd = -1;
  if ((*lock = tr__file_lock_name(target)) == NULL)
    return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
  /* O_NOFOLLOW: a symlink planted there is not followed; O_NONBLOCK: a FIFO does not wait
   * for a reader (O_RDWR never does on Linux, but the rule is kept for every open). */
  const int f = open(*lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  struct stat sb;
  if (f < 0 && (errno == ELOOP || errno == EMLINK)) {
    return tr_errorf(err, err_size, TR_EINVAL,
                     "%s '%s': its lock file '%s' is a symbolic link, not troupe's: it is left "
                     "as it is (remove it, or write elsewhere)", what, path, *lock);
  }
  if (f < 0 || fstat(f, &sb) != 0) {
    const int e = errno;
    if (f >= 0) close(f);
    return tr_errorf(err, err_size, TR_EIO, "%s '%s': cannot make its lock file '%s': %s", what,
                     path, *lock, strerror(e));
  }
  char head[sizeof LOCK_MAGIC - 1];
  const char *wrong = NULL;
  if (!S_ISREG(sb.st_mode)) wrong = kind_of(sb.st_mode);
  else if (sb.st_size > 0 && (pread(f, head, sizeof head, 0) != (ssize_t)sizeof head ||
                              memcmp(head, LOCK_MAGIC, sizeof head) != 0))
    wrong = "a file that is not troupe's lock file";
  if (wrong) {
    close(f);
    return tr_errorf(err, err_size, TR_EINVAL,
                     "%s '%s': its lock file '%s' is %s: it is left as it is (remove it, or "
                     "write elsewhere)", what, path, *lock, wrong);
  }
  *fd = f;
  return 0;
}

/* The pid a lock file names ("pid 4242"), or 0. */
static long lock_holder(int fd) {
  char text[sizeof LOCK_MAGIC + 32] = {0};
  const ssize_t k = pread(fd, text, sizeof text - 1, 0);
  const char *pid = k > 0 ? strstr(text, "pid ") : NULL;
  return pid ? strtol(pid + 4, NULL, 10) : 0;
}

int tr__file_lock_claim(int fd) {
  char text[sizeof LOCK_MAGIC + 32];
  const int k = snprintf(text, sizeof text, LOCK_MAGIC "pid %ld\n", (long)getpid());
  return ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)k, 0) == k ? 0 : errno;
}

bool tr__file_lock_current(int fd, const char *lock) {
  struct stat held, now;
  return fstat(fd, &held) == 0 && lstat(lock, &now) == 0 && held.st_dev == now.st_dev &&
         held.st_ino == now.st_ino;
}

void tr__file_lock_remove(int fd, const char *lock) {
  if (tr__file_lock_current(fd, lock)) unlink(lock);
}

/* The locks this process holds: taking one again (tr_train_run takes the checkpoint's, then
 * the job it makes does) counts, and the last release lets go. A forked child inherits the
 * list but not the right: its entries name their parent's pid. */
struct tr_file_lock {
  int fd, refs;
  pid_t pid;
  char *path; /* the lock file's */
  tr_file_lock *next;
};
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static tr_file_lock *held_locks;

int tr_file_lock_output(const char *path, const char *what, tr_file_lock **out, char *err,
                        size_t err_size) {
  if (out == NULL || path == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_file_lock_output: %s is NULL",
                     out ? "path" : "out");
  if (what == NULL) what = "output";
  *out = NULL;
  char *target = NULL;
  tr_file_lock *l = calloc(1, sizeof *l);
  if (l == NULL || tr_file_output_target(path, &target) ||
      (l->path = tr__file_lock_name(target)) == NULL) {
    free(target);
    free(l);
    return tr_errorf(err, err_size, TR_ENOMEM, "%s '%s': out of memory", what, path);
  }
  pthread_mutex_lock(&held_mu);
  for (tr_file_lock *h = held_locks; h; h = h->next)
    if (h->pid == getpid() && !strcmp(h->path, l->path)) {
      h->refs++;
      pthread_mutex_unlock(&held_mu);
      free(target);
      free(l->path);
      free(l);
      *out = h;
      return 0;
    }
  free(l->path);
  l->path = NULL;
  /* The holder removes the file before it lets go: a lock taken on a file that is no longer
   * the one at the path was taken too late, and is taken again on the new one. */
  int rc = TR_EIO;
  for (int attempt = 0;; attempt++) {
    free(l->path);
    if ((rc = tr__file_lock_open(target, what, path, &l->path, &l->fd, err, err_size))) break;
    if (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      const long who = lock_holder(l->fd);
      if (e == EWOULDBLOCK && who > 0)
        rc = tr_errorf(err, err_size, TR_EINVAL,
                       "%s '%s': another run (pid %ld) writes it: it holds '%s'", what, path,
                       who, l->path);
      else if (e == EWOULDBLOCK)
        rc = tr_errorf(err, err_size, TR_EINVAL,
                       "%s '%s': another run writes it: it holds '%s'", what, path, l->path);
      else
        rc = tr_errorf(err, err_size, TR_EIO, "%s '%s': cannot lock '%s': %s", what, path,
                       l->path, strerror(e));
      break;
    }
    if (tr__file_lock_current(l->fd, l->path)) {
      const int e = tr__file_lock_claim(l->fd);
      if (e == 0) {
        l->refs = 1;
        l->pid = getpid();
        l->next = held_locks;
        held_locks = *out = l;
        pthread_mutex_unlock(&held_mu);
        free(target);
        return 0;
      }
      rc = tr_errorf(err, err_size, TR_EIO, "%s '%s': cannot write its lock file '%s': %s",
                     what, path, l->path, strerror(e));
      break;
    }
    close(l->fd); /* removed by the writer before us: take the new one */
    l->fd = -1;
    if (attempt == 100) {
      rc = tr_errorf(err, err_size, TR_EIO, "%s '%s': its lock file '%s' keeps being replaced",
                     what, path, l->path);
      break;
    }
  }
  pthread_mutex_unlock(&held_mu);
  if (l->fd >= 0) close(l->fd);
  free(target);
  free(l->path);
  free(l);
  return rc;
}

void tr_file_unlock(tr_file_lock *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&held_mu);
  const bool last = --l->refs == 0;
  if (last)
    for (tr_file_lock **p = &held_locks; *p; p = &(*p)->next)
      if (*p == l) {
        *p = l->next;
        break;
      }
  pthread_mutex_unlock(&held_mu);
  if (!last) return;
  tr__file_lock_remove(l->fd, l->path);
  close(l->fd);
  free(l->path);
  free(l);
}

int tr_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size,
                         char *err, size_t err_size) {
  if (fd == NULL || size == NULL || path == NULL)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_file_open_regular: %s is NULL",
                     !fd ? "fd" : !size ? "size" : "path");
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
  if (buf == NULL && n)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_file_read_at: buf is NULL");
  if (what == NULL) what = "file";
  if (path == NULL) path = "?";
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
