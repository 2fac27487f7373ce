/* registry.c — the names of the kinds a process knows (registry.h). */
#include <stdio.h>
#include <string.h>

#include "registry.h"
#include "tr_base.h"

static int count(tr__registry *r) { return __atomic_load_n(&r->n, __ATOMIC_ACQUIRE); }

static int index_of(tr__registry *r, int n, const void *row, const char *name) {
  for (int i = 0; i < n; i++)
    if (r->rows[i] == row || (name && strcmp(r->names[i], name) == 0)) return i;
  return -1;
}

int tr__registry_add(tr__registry *r, const void *row, const char *name, const char *what,
                     char *err, size_t err_size) {
  pthread_mutex_lock(&r->lock);
  const int n = r->n, i = index_of(r, n, row, name);
  int rc = 0;
  if (i >= 0 && r->rows[i] != row)
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': another %s of that name is registered",
                   what, name, what);
  else if (i < 0 && n == TR__REGISTRY_MAX)
    rc = tr_errorf(err, err_size, TR_EINVAL, "%s '%s': %d kinds are registered, the most there "
                   "may be", what, name, TR__REGISTRY_MAX);
  else if (i < 0) {
    r->rows[n] = row;
    r->names[n] = name;
    __atomic_store_n(&r->n, n + 1, __ATOMIC_RELEASE); /* the row before its count */
  }
  pthread_mutex_unlock(&r->lock);
  return rc;
}

const void *tr__registry_find(tr__registry *r, const char *name) {
  if (!name) return NULL;
  const int n = count(r);
  for (int i = 0; i < n; i++)
    if (strcmp(r->names[i], name) == 0) return r->rows[i];
  return NULL;
}

int tr__registry_has(tr__registry *r, const void *row) {
  return index_of(r, count(r), row, NULL) >= 0;
}

void tr__registry_names(tr__registry *r, char *buf, size_t size) {
  const int n = count(r);
  size_t len = 0;
  if (size) buf[0] = 0;
  for (int i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", r->names[i]);
}
