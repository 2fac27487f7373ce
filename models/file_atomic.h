/* file_atomic.h — checkpoints and .npy arrays written as spans of memory, whole (file_atomic.c,
 * through the runtime's writer, file_write.h): the target holds the old file or the whole new
 * one, whatever happens, and nothing that is not a regular file is written over. Private to
 * models/: its writers (checkpoint_write.c, data_npy.c) call it.
 *
 *   const tr__span spans[] = {{head, head_n}, {data, data_n}};
 *   rc = tr__write_atomic("a.npy", spans, 2, err, sizeof err);
 */
#ifndef TR_FILE_ATOMIC_H
#define TR_FILE_ATOMIC_H

#include <stddef.h>

/* A piece of a file to write. */
typedef struct tr__span {
  const void *p;
  size_t n;
} tr__span;

/* Writes the spans to `path` so that it holds the old file or the whole new one, whatever
 * happens, and never over what is not a regular file. 0, or TR_EINVAL (not a file path, or
 * what is there may not be replaced: left as it is), TR_EIO, TR_ENOMEM with `err` naming the
 * path, what failed and why. */
int tr__write_atomic(const char *path, const tr__span *spans, size_t n, char *err,
                     size_t err_size);
/* The same to an output written again and again (a run's checkpoint, file_write.h), which
 * refuses a path changed since it was opened and keeps `content` ("the checkpoint of step
 * 500") aside, naming it. */
struct tr__file_output; /* file_write.h */
int tr__write_atomic_to(struct tr__file_output *out, const char *content, const tr__span *spans,
                        size_t n, char *err, size_t err_size);

#endif
