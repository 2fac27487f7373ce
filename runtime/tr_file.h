/* tr_file.h — the files a run is given, checked before the work that needs them.
 *
 * A run that trains for an hour and then finds it cannot write its checkpoint, or that
 * blocks forever opening a FIFO it was given as data, has wasted the hour or hangs before
 * any watchdog runs. These checks answer at once, with a message naming the file:
 *
 *   char err[512];
 *   if (tr_file_check_output(path, "checkpoint.path", err, sizeof err)) ...;
 *   // "checkpoint.path 'nodir/ck.st': directory 'nodir' does not exist"
 *   int fd;
 *   uint64_t size;
 *   if (tr_file_open_regular(path, "data", &fd, &size, err, sizeof err)) ...;
 *   // "data 'f': a FIFO, not a regular file"; "data 'f': cannot open: No such file ..."
 *   ... pread(fd, ...) ...; close(fd);
 *
 * `what` begins each message: the field or the kind of file the caller knows it by (NULL:
 * "output", "file"). A NULL path, out or fd is TR_EINVAL, err naming the function and the
 * argument ("tr_file_lock_output: out is NULL").
 */
#ifndef TR_FILE_H
#define TR_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tr_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a file can be created at `path`, or replace the one there, by writing a
 * temporary file beside it and renaming it over (how checkpoints and traces are written):
 * the path is not empty, does not name a directory, what is there (a symlink's target,
 * tr_file_output_target) is a regular file or nothing (never a device, FIFO or socket, which
 * the rename would replace), and its directory exists, is a directory and may be written by
 * this process. 0, or TR_EINVAL with err naming the path
 * and what is wrong. A check, not a promise: a disk may still fill up later. */
TR_API int tr_file_check_output(const char *path, const char *what, char *err, size_t err_size);

/* tr_file_check_output, then the write itself tried in place, at once rather than after the
 * run: a temporary file made in the output's directory under the name a write uses
 * (tr__file_temp_create), renamed once onto a second such name, and removed. What only the
 * write would find fails here, TR_EINVAL naming the path and the cause: a directory where
 * nothing may be created (/proc, /sys, a read-only mount), a name longer than the file
 * system takes (255 bytes), a file owned by another user in a sticky directory (/tmp) that
 * the rename could not replace. Neither the output nor anything else is left changed: the
 * probe never touches the file at `path`.
 *
 *   if (tr_file_probe_output("/proc/ck.st", "checkpoint.path", err, sizeof err)) ...;
 *   // "checkpoint.path '/proc/ck.st': cannot create a file in directory '/proc': No such
 *   // file or directory"
 */
TR_API int tr_file_probe_output(const char *path, const char *what, char *err, size_t err_size);

/* The file a write to `path` lands on: `path` with the symlinks of its last component
 * followed (a relative link's target read from the link's directory), so that writing
 * by renaming a temporary file over it writes the link's target and leaves the link a
 * link. A path that is no symlink is itself. 0 with *out (free it), TR_ENOMEM, or TR_EIO
 * for a loop of links (errno ELOOP). */
TR_API int tr_file_output_target(const char *path, char **out);

/* Copies the mode of the regular file at `target` (permissions, setgid and sticky bits)
 * onto `fd`, the temporary file that is to replace it, so that a rewrite keeps it (a
 * checkpoint made 600 stays 600), and its owner and group where this process may set them
 * (root: both; others: a group they belong to). No file there, or not a regular one:
 * nothing to keep, 0. 0, or errno of the fchmod. */
TR_API int tr_file_keep_mode(int fd, const char *target);
/* Internal: the same from the file's mode, owner and group as they were noted. */
int tr__file_keep_attributes(int fd, unsigned mode, unsigned uid, unsigned gid);

/* Refuses an output that is the same file as another file of the run (an input, or the
 * other output): the same device and inode where both exist, else the same target
 * (tr_file_output_target, its directory made absolute). Either path NULL: 0. TR_EINVAL,
 * "trace 'ck.st': the same file as checkpoint.path 'ck.st'". */
TR_API int tr_file_check_distinct(const char *out, const char *what, const char *other,
                                  const char *other_what, char *err, size_t err_size);

/* One writer per output: an exclusive flock on the lock file ".<name>.troupe-lock" beside
 * the output's target, which holds troupe's header and the writer's pid. The kernel drops
 * the lock when its process ends however it ends, so a crashed writer leaves no stale lock
 * (only the file, which the next writer takes over). Readers take no lock: the writer
 * replaces the output by an atomic rename. A file at the lock file's name that troupe did
 * not make (a symlink, a FIFO, a file without troupe's header) is never followed, written,
 * truncated or removed: the lock is refused, naming it.
 *
 *   tr_file_lock *l;
 *   if (tr_file_lock_output("ck.st", "checkpoint.path", &l, err, sizeof err)) ...;
 *   // "checkpoint.path 'ck.st': another run (pid 4242) writes it: it holds
 *   // '.ck.st.troupe-lock'"
 *   ... the run ...
 *   tr_file_unlock(l);  // removes the lock file, then drops the lock
 *
 * A process that holds the lock may take it again (tr_train_run holds it, and so does the
 * job it makes): the takings are counted, and the last tr_file_unlock lets go. TR_EINVAL
 * when another process holds it (naming its pid) or the lock file is not troupe's, TR_EIO
 * when the lock file cannot be made, TR_ENOMEM. */
typedef struct tr_file_lock tr_file_lock;
TR_API int tr_file_lock_output(const char *path, const char *what, tr_file_lock **out,
                               char *err, size_t err_size);
TR_API void tr_file_unlock(tr_file_lock *l);

/* Internal: troupe's lock files, for the writers above and for the files troupe keeps
 * between runs (the costs, the GEMM's choices), which lock only to read and add.
 * tr__file_lock_name: "<dir>/.<base>.troupe-lock" beside `target` (malloc'd; NULL: no
 * memory). tr__file_lock_open: opens it, creating it if absent, without following a symlink
 * or blocking on a FIFO; *lock its name (free it, also on failure), *fd the descriptor, on
 * which the caller takes its flock. What is there and is not troupe's (not a regular file,
 * or text without troupe's header) is refused: TR_EINVAL with err naming it ("checkpoint.path
 * 'ck.st': its lock file '.ck.st.troupe-lock' is a FIFO, ..."), TR_EIO, TR_ENOMEM.
 * tr__file_lock_claim: once the flock is held, writes the header and this process's pid (0
 * or errno). tr__file_lock_current: whether `fd` is still the file at `lock` (a holder that
 * removed it let go before the caller's flock was taken: open again).
 * tr__file_lock_remove: removes `lock` if it is still `fd`'s file; call it while holding the
 * flock, before closing `fd`. */
char *tr__file_lock_name(const char *target);
int tr__file_lock_open(const char *target, const char *what, const char *path, char **lock,
                       int *fd, char *err, size_t err_size);
int tr__file_lock_claim(int fd);
bool tr__file_lock_current(int fd, const char *lock);
void tr__file_lock_remove(int fd, const char *lock);

/* Internal (file_keep.c): the lock of a file troupe keeps between runs (the costs, the GEMM's
 * choices), held only to read it and add to it: tr__file_lock_open's lock file beside
 * `target`, its flock waited for up to `wait_ms` and then given up on (never a blocking
 * wait: a holder may be stopped), and claimed. 0 with *fd and *lock (give both to
 * tr__file_keep_unlock, which removes the lock file and lets go); TR_EINVAL when what is at
 * the lock file's name is not troupe's, TR_ETIMEDOUT when another process held it all that
 * time ("costs '/x/c.st': another process held its lock file '/x/.c.st.troupe-lock' for more
 * than 5000 ms"), TR_EIO, TR_ENOMEM; err names the file. */
int tr__file_keep_lock(const char *target, const char *what, const char *path, int wait_ms,
                       int *fd, char **lock, char *err, size_t err_size);
void tr__file_keep_unlock(int fd, char *lock);
/* A kept file this process gives up on (it is not one of its kind, its lock stayed held):
 * tr__file_keep_none says whether `path` was given up on; tr__file_keep_give_up gives it up
 * and, the first time, says so on stderr: "troupe: <why>; nothing there is changed: <what>"
 * (why: "costs '/x/c.st': ..."; what: "the costs this process measures are not kept"). */
bool tr__file_keep_none(const char *path);
void tr__file_keep_give_up(const char *path, const char *why, const char *what);

/* Internal: what a file of `mode` is, in messages ("a FIFO", "a character device");
 * the directory part of `path` ("." for none, "/" for the root; malloc'd, NULL: no memory). */
const char *tr__file_kind(unsigned mode);
char *tr__file_dir(const char *path);

/* Internal (file_write.c and the probe above): the temporary file that
 * replaces `base` in `dir`, "<dir>/.<base>.tmp.<16 hex digits>" (the base cut to 200 bytes so
 * the name stays within NAME_MAX), created exclusively, mode 0666 less the umask, and
 * flock'ed (a new file: no one else holds it). Its name goes to `tmp`; the descriptor, or
 * -1 with errno. tr__file_temp_of: whether `name` is such a temporary file of `base`. */
int tr__file_temp_create(const char *dir, const char *base, char *tmp, size_t cap);
/* The same beside `target` (its directory and base): *tmp malloc'd (free it, also on -1). */
int tr__file_temp_beside(const char *target, char **tmp);
bool tr__file_temp_of(const char *name, const char *base);

/* Opens `path` for reading when it is a regular file: *fd (close it) and its *size. FIFOs,
 * sockets, devices and directories are refused without blocking (the open does not wait for
 * a writer: O_NONBLOCK, then fstat): TR_EINVAL naming what it is ("data 'f': a FIFO, not a
 * regular file"). A file that cannot be opened (missing, not permitted): TR_EIO with the
 * system's reason ("data 'f': cannot open: No such file or directory"). With `what` NULL
 * the messages begin with the path alone ("f: cannot open: ..."). */
TR_API int tr_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size,
                         char *err, size_t err_size);

/* Reads exactly `n` bytes at `offset` (pread, again after a signal or a short read). 0, or
 * TR_EIO with err naming the file: a file that ended before them ("is 100 bytes now: it
 * changed while it was read") or the system's reason. */
TR_API int tr_file_read_at(int fd, void *buf, size_t n, uint64_t offset, const char *what,
                    const char *path, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
