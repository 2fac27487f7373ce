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
 * `what` begins each message: the field or the kind of file the caller knows it by.
 */
#ifndef TR_FILE_H
#define TR_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "tr_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a file can be created at `path`, or replace the one there, by writing a
 * temporary file beside it and renaming it over (how checkpoints and traces are written):
 * the path is not empty, does not name a directory, and its directory exists, is a
 * directory and may be written by this process. 0, or TR_EINVAL with err naming the path
 * and what is wrong. A check, not a promise: a disk may still fill up later. */
TR_API int tr_file_check_output(const char *path, const char *what, char *err, size_t err_size);

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
