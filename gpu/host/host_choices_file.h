/* host_choices_file.h — the file where the host GEMM's choices per shape are kept between
 * processes (host_choices_file.c), for host_choose.c, which reads and adds to it. A header
 * apart from host_choose.h, so that the file's code, plain I/O, is compiled with nothing of
 * the backend's. */
#ifndef TR_HOST_CHOICES_FILE_H
#define TR_HOST_CHOICES_FILE_H

#include <stddef.h>

/* The path ("" when there is none); lock (0, or -1 when the file cannot be had: the choice
 * is then measured and not kept); the choice for (sig, key) into choice[n] (1 found, 0 not);
 * a line added (the file written again into a temporary file of its own and renamed over
 * it, never over something that is not a file of choices); unlock. A path whose file is not one of choices, or whose lock is not troupe's
 * or stays held, keeps nothing for the rest of the process, said once on stderr. */
void tr__gemm_file_path(char *out, size_t n);
/* (sig, key) in the file as this process first read it (no lock) */
int tr__gemm_file_known(const char *path, const char *sig, const char *key, char *choice,
                        size_t n);
typedef struct tr__gemm_file_held {
  int fd;     /* -1: none */
  char *lock; /* the lock file's name */
} tr__gemm_file_held;
int tr__gemm_file_lock(const char *path, tr__gemm_file_held *held);
int tr__gemm_file_find(const char *path, const char *sig, const char *key, char *choice,
                       size_t n);
void tr__gemm_file_add(const char *path, const char *line);
void tr__gemm_file_unlock(tr__gemm_file_held *held);

#endif
