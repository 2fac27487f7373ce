/* file_atomic.c — checkpoints and .npy arrays written as spans of memory, whole, through the
 * runtime's writer (file_write.h): a temporary file of troupe's own beside the target,
 * synced and renamed over it, never over what is not troupe's (file_atomic.h). */
#include "file_atomic.h"
#include "file_write.h"

typedef struct spans {
  const tr__span *s;
  size_t n;
} spans;

static int write_spans(void *arg, int fd) {
  const spans *sp = arg;
  int e = 0;
  for (size_t i = 0; i < sp->n && !e; i++) e = tr__file_write_all(fd, sp->s[i].p, sp->s[i].n);
  return e;
}

int tr__write_atomic(const char *path, const tr__span *s, size_t n, char *err,
                     size_t err_size) {
  spans sp = {s, n};
  return tr__file_write(path, NULL, write_spans, &sp, err, err_size);
}

int tr__write_atomic_to(tr__file_output *out, const char *content, const tr__span *s, size_t n,
                        char *err, size_t err_size) {
  spans sp = {s, n};
  return tr__file_output_write(out, content, write_spans, &sp, err, err_size);
}
