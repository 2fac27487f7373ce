/* misuse.h — the hostile calls of test_misuse.c, and the objects they are made on.
 *
 * A case is one call to the public API given what it must refuse: a NULL where an object or
 * a buffer belongs, a count or size out of range, or a call out of its order. It is written
 * as a function that makes the call and returns its status, copying the message the library
 * left (the `err` buffer it gave, or the owning object's error text) into `msg`:
 *
 *   MISUSE(graph_add_null_config, "tr_graph_add(g, NULL, &a)", TR_EINVAL, "tr_graph_add",
 *          "config") {
 *     tr_graph *g = graph_new();
 *     tr_actor *a;
 *     int rc = tr_graph_add(g, NULL, &a);
 *     return said(msg, n, rc, tr_graph_error(g));
 *   }
 *
 * `want` is the status the call must return (TR_EINVAL, TR_ESTATE), MISUSE_REFUSED for any
 * negative status (a file that cannot be read may be TR_EIO), or MISUSE_DEFINED for a call
 * that returns no status (a void function, a getter): the case then returns 0 when the call
 * did what its header says of such an argument, and 1 when it did not. The strings after
 * `want` (two, NULL for none) must appear in what the call said: in `msg`, or on stderr, where
 * calls with no buffer and no object say it (the process's log). Every case runs in a child
 * process of its own (test_misuse.c), so a case need not free what it makes.
 *
 * Uses the public header alone, as a user's program does.
 */
#ifndef MISUSE_H
#define MISUSE_H

#include <stddef.h>
#include <stdio.h>

#include <troupe.h>

enum { MISUSE_REFUSED = 1, MISUSE_DEFINED = 2 };

typedef int (*misuse_fn)(char *msg, size_t n);

void misuse_register(const char *id, const char *call, misuse_fn fn, int want, const char *say1,
                     const char *say2, const char *file, int line);

#define MISUSE(id, call, want, say1, say2)                                                 \
  static int id(char *msg, size_t n);                                                        \
  __attribute__((constructor)) static void id##_register(void) {                             \
    misuse_register(#id, call, id, want, say1, say2, __FILE__, __LINE__);                    \
  }                                                                                          \
  static int id(char *msg __attribute__((unused)), size_t n __attribute__((unused)))

/* Makes `call`, then copies `text` (read after the call; NULL: nothing) into msg, and is the
 * call's status. */
#define said(msg, n, call, text) \
  (misuse_rc = (call), misuse_said((msg), (n), misuse_rc, (text)))
extern int misuse_rc;
int misuse_said(char *msg, size_t n, int rc, const char *text);

/* Objects the calls are made on, made afresh in each child; each aborts the case (exit
 * status 120, "the fixture failed") when it cannot be made: that is not the call's fault. */
tr_system *system_new(void);
tr_graph *graph_new(void);
/* A graph whose one actor says it is done at its start. */
tr_graph *graph_one(tr_actor **actor);
/* graph_one after a run of one step, which returned 0. */
tr_graph *graph_ran(tr_actor **actor);
/* A graph that runs: `fn` is called on the actor's thread, at its start, with the graph and
 * the actor, before the actor says it is done. Its status, or when that is 0 the run's (and
 * tr_graph_error in msg), is the case's. */
int graph_during(int (*fn)(tr_graph *g, tr_actor *self, char *msg, size_t n), char *msg,
                 size_t n);
tr_actor *actor_of(tr_graph *g, const char *name); /* a loop actor that does nothing */
tr_model *model(void);                              /* simplenet */
tr_device_list *devices(void);                      /* host:2 */
tr_device *device(void);                            /* host:0 of devices() */
tr_stream *stream(void);                            /* its compute stream */
float *device_floats(size_t count);                 /* on device() */
tr_stage *stage(void);                              /* simplenet whole on device(), 1 slot */
tr_data *data(void);                                /* simplenet's data */
tr_job *job(tr_graph *g);                           /* simplenet, single, on g */
tr_checkpoint_writer *writer(void);                 /* one tensor "w" (4 floats), a key "step" */
tr_checkpoint *checkpoint(void);                    /* writer()'s, saved and opened */
tr_schedule *schedule(void);                        /* 1f1b, 2 stages, 4 micro-batches */
const char *scratch_path(const char *name);         /* a path in the case's own directory */
tr_train_options train_options(void);               /* simplenet, host:1, 2 steps */

#endif
