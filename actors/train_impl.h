/* train_impl.h — what the training actors share: the run, and the messages between them.
 *
 *   loader (loop) ──batch──► stage (pinned, one device) ──progress, done──► coordinator (loop)
 *          ◄──credit (priority lane)──┘      ◄──finish (priority lane)──┘
 *                                    └─poll─┘ (to itself, while a copy is in flight)
 *
 * The stage owns the batch buffers (host memory its device copies from fast) and lends them
 * to the loader: a credit returns a buffer once the device has copied it, so the loader is
 * never more than `prefetch` batches ahead and memory stays bounded. Credits go back half a
 * ring at a time, so the loader's loop wakes once per half ring rather than once a step.
 */
#ifndef TR_TRAIN_IMPL_H
#define TR_TRAIN_IMPL_H

#include <stdbool.h>

#include "tr_data.h"
#include "tr_device.h"
#include "tr_model.h"
#include "tr_system.h"
#include "tr_train.h"

/* Everything one run shares. Written before the system runs, or by the actor named. */
typedef struct tr__run {
  const tr_train_options *opt;
  tr_system *sys;
  tr_model *model;
  tr_device_list *devices;
  tr_data *data;
  tr_optim_config optim;
  int batch;          /* samples per step */
  int prefetch;
  int64_t first_step; /* 0, or the resumed checkpoint's step */
  int64_t end_step;   /* INT64_MAX when the run is timed */
  tr_actor *loader, *stage, *coordinator;
  tr_train_result *result; /* filled by the coordinator */
} tr__run;

/* stage → loader: the buffers it lends, one pair per credit */
typedef struct tr__ring_msg {
  tr_msg hdr;
  int depth;
  void **x, **y;
} tr__ring_msg;

/* loader → stage: buffer `slot` holds the samples of `step` */
typedef struct tr__batch_msg {
  tr_msg hdr;
  int slot;
  int64_t step;
} tr__batch_msg;

/* stage → loader: buffer `slot` is free again */
typedef struct tr__credit_msg {
  tr_msg hdr;
  int slot;
} tr__credit_msg;

/* stage → coordinator, a few times a second */
typedef struct tr__progress_msg {
  tr_msg hdr;
  int64_t step;
  float loss;
} tr__progress_msg;

/* stage → coordinator, once: the stage's figures */
typedef struct tr__done_msg {
  tr_msg hdr;
  int64_t steps;       /* the last step reached */
  int64_t window_steps;
  uint64_t window_ns, busy_ns;
  double initial_loss, final_loss;
} tr__done_msg;

/* coordinator → stage: the time is up, finish after this step */
typedef struct tr__finish_msg {
  tr_msg hdr;
} tr__finish_msg;

/* stage → itself: look at the device's events again */
typedef struct tr__poll_msg {
  tr_msg hdr;
} tr__poll_msg;

extern const tr_msgtype tr__ring_type, tr__batch_type, tr__credit_type, tr__progress_type,
    tr__done_type, tr__finish_type, tr__poll_type;

extern const tr_behaviour tr__loader_behaviour, tr__stage_behaviour, tr__coordinator_behaviour;

/* State of each behaviour (their .c files). */
void *tr__loader_new(tr__run *run);
void *tr__stage_new(tr__run *run, tr_device *dev);
void *tr__coordinator_new(tr__run *run);

/* Checkpoints (checkpoint_io.c). peek: the step a checkpoint of model `m` was taken at,
 * checked before any thread starts; save and load: on the stage's own thread. */
int tr__checkpoint_peek(const char *path, const tr_model *m, int64_t *step, char *err,
                        size_t err_size);
int tr__stage_save(tr_stage *st, const tr__run *run, int64_t step, const char *path, char *err,
                   size_t err_size);
int tr__stage_load(tr_stage *st, const char *path, char *err, size_t err_size);

#endif
