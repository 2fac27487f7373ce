/* simplenet_job.h — the simplenet job the actors tests wire by hand: the model, its default
 * data, host devices, a graph and a job of the configuration given, and their release. A test
 * that needs more keeps the fields in an anonymous member beside its own:
 *
 *   typedef struct run {
 *     union { simplenet_job base; struct { SIMPLENET_JOB_FIELDS; }; };
 *     tr_actor *stage;
 *   } run;
 *   simplenet_job_open(&r->base, "host:1", 1, NULL, tr_job_defaults());   // r->j, r->g, ...
 */
#ifndef TR_TEST_SIMPLENET_JOB_H
#define TR_TEST_SIMPLENET_JOB_H

#include <string.h>

#include "troupe.h"

#define SIMPLENET_JOB_FIELDS \
  tr_model *model;           \
  tr_data *data;             \
  tr_device_list *devs;      \
  tr_graph *g;               \
  tr_job *j

typedef struct simplenet_job {
  SIMPLENET_JOB_FIELDS;
} simplenet_job;

/* `c` with the model and its data filled in, on `devices`; the data drawn from `seed`; the
 * graph's system configured by `system` (NULL: the defaults). Fails the test on an error. */
static inline void simplenet_job_open(simplenet_job *x, const char *devices, uint64_t seed,
                                      const tr_system_config *system, tr_job_config c) {
  char err[512];
  memset(x, 0, sizeof *x);
  assert_int_equal(tr_model_simplenet(&x->model), 0);
  assert_int_equal(tr_device_list_open(&x->devs, devices, err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&x->data, x->model, seed, NULL, NULL, err, sizeof err), 0);
  assert_int_equal(tr_graph_new(&x->g, system), 0);
  c.model = x->model;
  c.data = x->data;
  if (tr_job_new(&x->j, x->g, &c, err, sizeof err)) fail_msg("%s", err);
}

/* The graph first: its actors use the job. */
static inline void simplenet_job_close(simplenet_job *x) {
  tr_graph_free(x->g);
  tr_job_free(x->j);
  tr_data_close(x->data);
  tr_device_list_close(x->devs);
  tr_model_free(x->model);
}

#endif
