/* file_write.c — outputs written whole, never over what is not troupe's (file_write.h).
 *
 * A writer killed half-way leaves its temporary file behind. Each writer holds an exclusive
 * flock on its temporary file while it writes, and the lock dies with its process: so once a
 * write has succeeded, the temporaries of the same target that nobody holds (and that are
 * more than a moment old: a writer takes its lock just after creating the file) are
 * leftovers, and go. */
#include "file_write.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tr_base.h"
#include "tr_file.h"

/* "checkpoint.path 'ck.st'", or with no `what` the path alone, in messages */
#define NAME "%s%s%s%s"
#define NAME_OF(o) (o)->what ? (o)->what : "", (o)->what ? " '" : "", (o)->path, \
                   (o)->what ? "'" : ""

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

static void remember(tr__file_output *o, const struct stat *sb) {
  o->had = true;
  o->dev = sb->st_dev, o->ino = sb->st_ino, o->size = sb->st_size, o->mtime = sb->st_mtim;
  o->mode = sb->st_mode, o->uid = sb->st_uid, o->gid = sb->st_gid;
}

int tr__file_output_open(tr__file_output *o, const char *path, const char *what, bool run,
                         char *err, size_t err_size) {
  *o = (tr__file_output){.run = run};
  const size_t n = path ? strlen(path) : 0;
  struct stat sb;
  if (n == 0 || path[n - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
    return tr_errorf(err, err_size, TR_EINVAL, "%s%s'%s': not a file path", what ? what : "",
                     what ? " " : "", path ? path : "");
  if ((o->path = strdup(path)) == NULL || (what && (o->what = strdup(what)) == NULL)) {
    tr__file_output_close(o);
    return tr_errorf(err, err_size, TR_ENOMEM, "out of memory");
  }
  const int rc = tr_file_output_target(path, &o->target);
  if (rc) {
    const int e = errno;
    tr__file_output_close(o);
    return rc == TR_EIO ? tr_errorf(err, err_size, TR_EINVAL, "%s%s'%s': %s", what ? what : "",
                                    what ? " " : "", path, strerror(e))
                        : tr_errorf(err, err_size, TR_ENOMEM, "%s: out of memory", path);
  }
  if (lstat(o->target, &sb) == 0) remember(o, &sb);
  char *dir = tr__file_dir(o->target);
  if (dir && stat(dir, &sb) == 0) o->dir_dev = sb.st_dev, o->dir_ino = sb.st_ino;
  free(dir);
  return 0;
}

void tr__file_output_close(tr__file_output *o) {
  free(o->path);
  free(o->target);
  free(o->saved);
  free(o->what);
  o->path = o->target = o->saved = o->what = NULL;
}

/* Whether the write may replace what the path names now: 0, or 1 with `why` saying what
 * changed, or TR_ENOMEM. *now: what is at the target (*there: anything). */
static int refusal(const tr__file_output *o, char *why, size_t n, struct stat *now, bool *there) {
  const char *during = o->run ? "during the run" : "while it was written";
  char *target = NULL, *dir = NULL;
  *there = false;
  if (tr_file_output_target(o->path, &target)) {
    const int e = errno;
    if (e == ENOMEM) return TR_ENOMEM;
    snprintf(why, n, "its symbolic links cannot be followed %s: %s", during, strerror(e));
    return 1;
  }
  int rc = 1;
  struct stat d;
  if (strcmp(target, o->target) != 0) {
    if (!strcmp(o->target, o->path))
      snprintf(why, n, "became a symbolic link to '%s' %s", target, during);
    else if (!strcmp(target, o->path))
      snprintf(why, n, "was a symbolic link to '%s' and is none now: it changed %s", o->target,
               during);
    else
      snprintf(why, n, "led to '%s' and leads to '%s' now: the link changed %s", o->target,
               target, during);
  } else if ((dir = tr__file_dir(target)) == NULL) {
    rc = TR_ENOMEM;
  } else if (o->dir_ino && (stat(dir, &d) != 0 || d.st_dev != o->dir_dev ||
                            d.st_ino != o->dir_ino)) {
    snprintf(why, n, "its directory '%s' was replaced %s", dir, during);
  } else if (lstat(target, now) != 0) {
    rc = 0; /* nothing there (or nothing we may see): nothing is replaced */
  } else if ((*there = true), !S_ISREG(now->st_mode)) {
    if (o->had && S_ISREG(o->mode))
      snprintf(why, n, "became %s %s", tr__file_kind(now->st_mode), during);
    else if (!o->had)
      snprintf(why, n, "%s was made there by another program %s", tr__file_kind(now->st_mode),
               during);
    else snprintf(why, n, "%s, not a regular file", tr__file_kind(now->st_mode));
  } else if (!o->had) {
    snprintf(why, n, "a file was made there by another program %s", during);
  } else if (now->st_dev != o->dev || now->st_ino != o->ino || now->st_size != o->size ||
             now->st_mtim.tv_sec != o->mtime.tv_sec || now->st_mtim.tv_nsec != o->mtime.tv_nsec) {
    snprintf(why, n, "%s by another program %s",
             o->wrote ? "replaced or rewritten after this run wrote it," : "replaced or rewritten",
             during);
  } else {
    rc = 0; /* the file it was */
  }
  free(dir);
  free(target);
  return rc;
}

/* The content into the temporary file, synced; *sb the file written. SIGXFSZ is blocked
 * meanwhile, so that a file beyond RLIMIT_FSIZE fails the write with EFBIG instead of ending
 * the process; the signal that left pending is taken (unless the caller blocked it). */
static int fill_synced(int fd, tr__file_fill fill, void *arg, struct stat *sb,
                       const char **stage) {
  sigset_t xfsz, old, pending;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &xfsz, &old);
  *stage = "writing the temporary file";
  int e = fill(arg, fd);
  if (e == 0 && fsync(fd) != 0) e = errno, *stage = "syncing the temporary file";
  if (e == 0 && fstat(fd, sb) != 0) e = errno;
  if (!sigismember(&old, SIGXFSZ) && sigpending(&pending) == 0 &&
      sigismember(&pending, SIGXFSZ)) {
    const struct timespec zero = {0};
    while (sigtimedwait(&xfsz, NULL, &zero) == SIGXFSZ) continue;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return e;
}

/* The temporary file `tmp` moved to "<target>.troupe-saved-<8 hex>" (*saved, malloc'd; the
 * target's base cut as temporary files' are, so the name stays within NAME_MAX), never over
 * a file that is there: 0 or errno. */
static int keep_aside(const char *tmp, const char *target, char **saved) {
  const size_t n = strlen(target) + 32;
  const char *slash = strrchr(target, '/');
  const int dir = slash ? (int)(slash - target) + 1 : 0; /* with its slash */
  if ((*saved = malloc(n)) == NULL) return ENOMEM;
  for (int attempt = 0; attempt < 64; attempt++) {
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)(tr_now_ns() * 0x9e3779b97f4a7c15ULL >> 32) ^ (uint32_t)attempt;
    snprintf(*saved, n, "%.*s%.200s.troupe-saved-%08" PRIx32, dir, target, target + dir, r);
    int rc = renameat2(AT_FDCWD, tmp, AT_FDCWD, *saved, RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL) /* a file system without RENAME_NOREPLACE */
      rc = link(tmp, *saved) == 0 ? unlink(tmp), 0 : -1;
    if (rc == 0) return 0;
    if (errno != EEXIST) break;
  }
  const int e = errno;
  free(*saved);
  *saved = NULL;
  return e;
}

/* The temporary file onto the target: over the file checked (`there`), or where nothing is
 * (not over what came since). 0 or errno (EEXIST: something came). */
static int rename_onto(const char *tmp, const char *target, bool there) {
  if (there) return rename(tmp, target) ? errno : 0;
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, target, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL) return errno;
  return rename(tmp, target) ? errno : 0; /* a file system without RENAME_NOREPLACE */
}

static int fail_io(const tr__file_output *o, int e, const char *stage, const char *where,
                   char *err, size_t err_size) {
  char limit[96] = "";
  struct rlimit fsize;
  if (e == EFBIG && getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY)
    snprintf(limit, sizeof limit, ": this process may write files of %llu bytes at most "
             "(ulimit -f)", (unsigned long long)fsize.rlim_cur);
  return tr_errorf(err, err_size, TR_EIO, NAME ": %s%s%s: %s%s", NAME_OF(o), stage,
                   where ? " " : "", where ? where : "", strerror(e), limit);
}

int tr__file_output_write(tr__file_output *o, const char *content, tr__file_fill fill,
                          void *arg, char *err, size_t err_size) {
  char why[PATH_MAX + 256], *dir = tr__file_dir(o->target), *tmp = NULL, *saved = NULL;
  struct stat now, written;
  bool there;
  int fd = -1, e = 0, rc = dir ? refusal(o, why, sizeof why, &now, &there) : TR_ENOMEM;
  const char *stage = "creating a temporary file in", *where = dir;
  if (rc < 0) goto out;
  if (rc && !o->run) { /* refused before anything is written */
    rc = tr_errorf(err, err_size, TR_EINVAL, NAME ": %s: left as it is", NAME_OF(o), why);
    goto out;
  }
  const bool refused = rc;
  if ((fd = tr__file_temp_beside(o->target, &tmp)) < 0) {
    e = errno;
    if (tmp) tmp[0] = 0; /* a name tried, not ours */
    goto io;
  }
  where = NULL;
  stage = "giving the temporary file the mode of the one it replaces";
  /* the file's as it is where it is replaced, else as it was (a run's file kept aside) */
  if (!refused && there)
    e = tr__file_keep_attributes(fd, now.st_mode, now.st_uid, now.st_gid);
  else if (o->had && S_ISREG(o->mode))
    e = tr__file_keep_attributes(fd, o->mode, o->uid, o->gid);
  if (e || (e = fill_synced(fd, fill, arg, &written, &stage))) goto io;
  stage = "closing the temporary file";
  const int closed = close(fd);
  fd = -1;
  if (closed) {
    e = errno;
    goto io;
  }
  /* what the path names checked again, at the last moment (the fill may have taken long) */
  if (!refused && (rc = refusal(o, why, sizeof why, &now, &there)) < 0) goto out;
  if (rc == 0) {
    stage = "renaming the temporary file over it";
    e = rename_onto(tmp, o->target, there);
    if (e == EEXIST) {
      snprintf(why, sizeof why, "a file was made there by another program %s",
               o->run ? "during the run" : "while it was written");
      rc = 1;
    } else if (e) {
      goto io;
    }
  }
  if (rc && !o->run) {
    rc = tr_errorf(err, err_size, TR_EINVAL, NAME ": %s: left as it is", NAME_OF(o), why);
    goto out;
  }
  if (rc) {
    e = keep_aside(tmp, o->target, &saved);
    if (e == 0) tmp[0] = 0; /* it is the file kept aside now */
    free(o->saved);
    o->saved = e ? NULL : strdup(saved);
    rc = e ? tr_errorf(err, err_size, TR_EIO, NAME ": %s: left as it is, and %s could not be "
                       "kept beside it: %s", NAME_OF(o), why,
                       content ? content : "what was to be written", strerror(e))
           : tr_errorf(err, err_size, TR_EIO, NAME ": %s: left as it is; %s is in '%s'",
                       NAME_OF(o), why, content ? content : "what was to be written", saved);
    goto out;
  }
  tmp[0] = 0; /* it is the target now: nothing to clean up */
  /* as the file system shows it now, where it is the file written (a network file system
   * may set its times at the close) */
  struct stat placed;
  const bool same = lstat(o->target, &placed) == 0 && placed.st_dev == written.st_dev &&
                    placed.st_ino == written.st_ino;
  remember(o, same ? &placed : &written);
  o->wrote = true;
  /* The rename is durable only once the directory entry is: fsync the directory. Some file
   * systems cannot (EINVAL); the data itself is already synced. */
  stage = "syncing the directory", where = dir;
  const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  if (dfd < 0 || (fsync(dfd) && errno != EINVAL)) {
    e = errno;
    if (dfd >= 0) close(dfd);
    goto io;
  }
  close(dfd);
  const char *slash = strrchr(o->target, '/');
  remove_leftovers(dir, slash ? slash + 1 : o->target);
  goto out;
io:
  rc = fail_io(o, e, stage, where, err, err_size);
out:
  if (rc == TR_ENOMEM) tr_errorf(err, err_size, rc, NAME ": out of memory", NAME_OF(o));
  if (fd >= 0) close(fd);
  if (tmp && tmp[0]) unlink(tmp);
  free(saved);
  free(tmp);
  free(dir);
  return rc;
}

int tr__file_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    const ssize_t k = write(fd, c, n < (1u << 30) ? n : (1u << 30));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

int tr__file_fill_stream(int fd, int (*print)(void *arg, FILE *f), void *arg) {
  const int own = dup(fd); /* fclose closes this one; the writer closes fd */
  FILE *f = own >= 0 ? fdopen(own, "w") : NULL;
  if (f == NULL) {
    const int e = errno;
    if (own >= 0) close(own);
    return e;
  }
  errno = 0;
  const int rc = print(arg, f);
  int e = rc == TR_ENOMEM ? ENOMEM : rc || fflush(f) || ferror(f) ? (errno ? errno : EIO) : 0;
  if (fclose(f) != 0 && e == 0) e = errno;
  return e;
}

int tr__file_write(const char *path, const char *what, tr__file_fill fill, void *arg, char *err,
                   size_t err_size) {
  tr__file_output o;
  int rc = tr__file_output_open(&o, path, what, false, err, err_size);
  if (rc == 0) rc = tr__file_output_write(&o, NULL, fill, arg, err, err_size);
  tr__file_output_close(&o);
  return rc;
}
