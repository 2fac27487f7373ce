/* registry.h — the names of the kinds a process knows (optimizers, losses): the built-in
 * rows from the start, and the ones a user registers. One per process, like the log sink:
 * a kind is code in the process, and its name is how a checkpoint or a flag finds it. Adds
 * take a lock; lookups read a count published after its rows, and need none. */
#ifndef TR_REGISTRY_H
#define TR_REGISTRY_H

#include <pthread.h>
#include <stddef.h>

#define TR__REGISTRY_MAX 32

typedef struct tr__registry {
  pthread_mutex_t lock;
  int n;                                  /* rows published (atomic) */
  const void *rows[TR__REGISTRY_MAX];     /* a table's address */
  const char *names[TR__REGISTRY_MAX];    /* its name */
} tr__registry;

/* Adds the row; the same row again is a no-op. TR_EINVAL with err naming `what` (an
 * "optimizer", a "loss") when another row has the name, or the registry is full. */
int tr__registry_add(tr__registry *r, const void *row, const char *name, const char *what,
                     char *err, size_t err_size);
/* The row of that name, or NULL. */
const void *tr__registry_find(tr__registry *r, const char *name);
/* 1 when the row is registered. */
int tr__registry_has(tr__registry *r, const void *row);
/* "a, b, c": the names in the order they came. */
void tr__registry_names(tr__registry *r, char *buf, size_t size);

#endif
