/* file_write.h — the files troupe writes (checkpoints, arrays, traces, timelines), written
 * whole and never over what is not troupe's (file_write.c). Internal: the library's writers
 * and the tools call it; programs write through tr_checkpoint_writer_save, tr_data_write_npy,
 * tr_system_trace_write.
 *
 * The content goes to a temporary file of troupe's own beside the target (created
 * exclusively under an unpredictable name, tr__file_temp_create), synced, and renamed over
 * the target, so a reader or a crash sees the old file or the new one. A symlink is written
 * through (its target replaced, the link kept). At the moment of each write, what the
 * rename would replace must be a regular file or nothing: a device, a FIFO, a socket or a
 * directory is refused, named, and left as it is. The file replaced keeps its mode, and its
 * owner and group where this process may set them.
 *
 * An output written again and again (a run's periodic and final checkpoints, its trace) is
 * opened once, when the run begins, and remembers what its path named then and the file it
 * wrote last. A later write finds the path as it left it, or refuses: a path that became a
 * device, a FIFO or a symlink to another file, or a file another program made or rewrote,
 * is left as it is, and what was to be written is kept in a new file of troupe's own beside
 * the target, "<target>.troupe-saved-<8 hex digits>", which the error names:
 *
 *   tr__file_output out;
 *   if (tr__file_output_open(&out, "ck.st", "checkpoint.path", true, err, n)) ...;
 *   ... each checkpoint:
 *   rc = tr__file_output_write(&out, "the checkpoint of step 500", fill, state, err, n);
 *   // "checkpoint.path 'ck.st' became a FIFO during the run: not replaced; the checkpoint
 *   // of step 500 is in 'ck.st.troupe-saved-1f0e9a3c'"
 *   tr__file_output_close(&out);
 *
 * A file the run resumed from and writes again is the file its path named when the output
 * was opened: it may be replaced. A path removed during the run is written anew (nothing is
 * replaced). A write larger than this process may write (ulimit -f, RLIMIT_FSIZE) fails with
 * EFBIG, naming the limit, instead of killing the process with SIGXFSZ, and leaves nothing.
 */
#ifndef TR_FILE_WRITE_H
#define TR_FILE_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* Writes the whole content to `fd` (a new, empty file): 0 or an errno. */
typedef int (*tr__file_fill)(void *arg, int fd);

/* For fills: writes all `n` bytes at `p` (again after a signal or a short write, in pieces a
 * write takes whole): 0 or an errno. */
int tr__file_write_all(int fd, const void *p, size_t n);

/* For fills that print: `print` writes to a stdio stream on `fd`, which is flushed and
 * closed (fd itself stays the writer's). 0 or an errno: print's nonzero return (errno, else
 * EIO; TR_ENOMEM: ENOMEM), or the stream's error. */
int tr__file_fill_stream(int fd, int (*print)(void *arg, FILE *f), void *arg);

typedef struct tr__file_output {
  char *path;         /* as given */
  char *target;       /* where it writes: the path's symlinks followed when it was opened */
  char *what;         /* the field or kind of file it is known by (NULL: the path alone) */
  bool run;           /* a run's output: a refused write keeps its file aside */
  bool had, wrote;    /* a file was at the target (as below); this output wrote it */
  char *saved;        /* the file the last refused write was kept in, or NULL */
  dev_t dev, dir_dev; /* the file's identity, and its directory's */
  ino_t ino, dir_ino;
  off_t size;
  struct timespec mtime;
  mode_t mode; /* the file's, kept by the next write */
  uid_t uid;
  gid_t gid;
} tr__file_output;

/* Notes what `path` names now; `what` (may be NULL) begins its messages. 0, TR_EINVAL
 * (an empty path, a directory, a loop of symlinks), TR_ENOMEM, with err naming the path. */
int tr__file_output_open(tr__file_output *o, const char *path, const char *what, bool run,
                         char *err, size_t err_size);

/* Writes what `fill` writes to the output, whole, or refuses as above. `content` names what
 * is written in messages ("the checkpoint of step 500"; NULL: "what was to be written").
 * 0; TR_EINVAL for a refusal of an output that is not a run's (nothing written); TR_EIO for
 * a run's refusal (its file kept aside, or why it could not be) and for a failed write (the
 * target left as it was, no temporary file left); TR_ENOMEM. */
int tr__file_output_write(tr__file_output *o, const char *content, tr__file_fill fill,
                          void *arg, char *err, size_t err_size);

void tr__file_output_close(tr__file_output *o);

/* One write to `path`: open, write, close. */
int tr__file_write(const char *path, const char *what, tr__file_fill fill, void *arg, char *err,
                   size_t err_size);

#endif
