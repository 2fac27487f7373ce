/* memory_need.h — what a run will hold in memory, found from its configuration before
 * anything is allocated, so that a run too large for its devices is refused at once with
 * the figure and a batch that fits, instead of being killed by the kernel (or failing in an
 * allocation) minutes later.
 *
 * Each stage's part is the plan its tr_stage_open will make (tr_stage_plan: parameters,
 * gradients, optimizer state or its ZeRO shard, the micro-batches whose activations its
 * schedule keeps at once, backward's scratch, recomputation's work area, bf16 copies); each
 * loader's, its prefetch ring of micro-batches. Parts are summed by where their memory is:
 * one GPU (its logical devices together), or the host (its devices all share its memory, and
 * the loaders' rings are there). Devices of other processes are theirs to count.
 *
 *   tr__memory_needs need;
 *   if (tr__memory_need(&job, devices, &need, err, sizeof err)) ...;  // job: completed
 *   if (tr__memory_check(&job, devices, err, sizeof err)) ...;
 *   // "global_batch 1048576: needs 41.2 GiB on host:0 (parameters 32.0 MiB, gradients ...,
 *   //  activations 41.1 GiB at 1 micro-batch, ...), it has 22.9 GiB; the largest batch that
 *   //  fits with 10% to spare is 471856"
 */
#ifndef TR_MEMORY_NEED_H
#define TR_MEMORY_NEED_H

#include <stdint.h>

#include "tr_job.h"

enum { TR__MEMORY_PLACES = TR_TRAIN_MAX_DEVICES + 1 };

/* One place's memory, in bytes. */
typedef struct tr__memory_place {
  char name[64];        /* "host:0", "host:0..host:3", "cuda:0" */
  uint64_t params, grads, state; /* state: the optimizer's, with its scratch */
  uint64_t activations; /* slots × a micro-batch's, scratch, work area, bf16 copies */
  uint64_t loader;      /* the loaders' prefetch rings (host) */
  uint64_t need;        /* the sum */
  uint64_t has;         /* what the place has free; 0: not known (never refused) */
  int microbatches;     /* the most micro-batches a stage here keeps activations of */
} tr__memory_place;

typedef struct tr__memory_needs {
  int n;
  tr__memory_place place[TR__MEMORY_PLACES];
} tr__memory_needs;

/* The memory the job `c` (tr__job_config_complete's; layout.cuts may be NULL: cut by FLOPs,
 * as tr_job_new would) will hold on `devices` (stage s of replica r on device r × stages +
 * s; async: worker w on device w). 0, or a stage's refusal of its configuration (TR_EINVAL,
 * with err), TR_ENOMEM. */
int tr__memory_need(const tr_job_config *c, const tr_device_list *devices,
                    tr__memory_needs *out, char *err, size_t err_size);

/* Refuses a job that needs more than a place has: TR_EINVAL naming global_batch, the place,
 * its figures and the largest global batch that would fit in 90% of what each place has
 * (room for what the count leaves out), or "a layout with more stages" where none does. Where nothing is known of what a place has, nothing is refused. */
int tr__memory_check(const tr_job_config *c, const tr_device_list *devices, char *err,
                     size_t err_size);

/* What the host has: its available memory (MemAvailable, or `free` where /proc/meminfo
 * says nothing) no more than its cgroup's limit (/sys/fs/cgroup/memory.max), and its free
 * swap no more than the cgroup's (memory.swap.max). 0: not known. */
uint64_t tr__memory_host_available(uint64_t free);

#endif
