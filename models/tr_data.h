/* tr_data.h — the training data of docs/WORKLOADS.md: synthetic generators and byte files.
 *
 * A data set is an endless numbered sequence of samples; sample i is a pure function of
 * (seed, i), so any thread can fill any range, in any order, on any number of workers, and
 * get the same bytes. Step k of a run with global batch G uses samples [k*G, (k+1)*G);
 * tr_data_shard splits that range among workers (data-parallel replicas, micro-batches),
 * so N workers see disjoint samples whose union is exactly the single-device batch.
 *
 *   TR_DATA_TEACHER     x ~ N(0,1)^in; y = a fixed random teacher Linear(in,32) -> tanh ->
 *                       Linear(32,out), initialised as PyTorch initialises a Linear, from a
 *                       stream of the seed the student's init never uses (simplenet)
 *   TR_DATA_GAUSSIAN    x ~ N(0,1)^in, y ~ N(0,1)^out (mlp: throughput, not learning)
 *   TR_DATA_ARITHMETIC  a corpus generated in code, lines of small-integer sums such as
 *                       "37+58=95\n"; a sample is `ctx` bytes at an offset drawn from
 *                       (seed, i), its targets the `ctx` bytes after each (gpt)
 *   TR_DATA_FILE        the same sampling over any byte or text file, mapped read-only
 *
 * Inputs and targets are floats (TEACHER, GAUSSIAN: in and out per sample) or int32 byte
 * tokens (ARITHMETIC, FILE: ctx each), written to host memory; the loader copies them on.
 *
 *   tr_data_config c;
 *   tr_data_config_for(&c, model, seed, NULL);          // the model's workload data
 *   tr_data *d;
 *   if (tr_data_open(&d, &c, err, sizeof err)) ...;
 *   uint64_t first; size_t n;
 *   tr_data_shard(step, global_batch, worker, workers, &first, &n);
 *   tr_data_fill(d, first, n, x, y);                    // n samples of x and y
 *   tr_data_close(d);
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_data_kind {
  TR_DATA_TEACHER,
  TR_DATA_GAUSSIAN,
  TR_DATA_ARITHMETIC,
  TR_DATA_FILE
} tr_data_kind;

typedef struct tr_data_config {
  tr_data_kind kind;
  uint64_t seed;
  int in, out;          /* TEACHER, GAUSSIAN: floats per sample of x and y */
  int ctx;              /* ARITHMETIC, FILE: tokens per sample */
  size_t corpus_bytes;  /* ARITHMETIC: size of the generated corpus (0: 1 MiB) */
  const char *path;     /* FILE (copied) */
} tr_data_config;

struct tr_model;
/* The data a model trains on by default: simplenet the teacher, other float models
 * Gaussian samples of their widths, token models the arithmetic corpus, or `path` when it
 * is not NULL. */
void tr_data_config_for(tr_data_config *c, const struct tr_model *m, uint64_t seed,
                        const char *path);

typedef struct tr_data tr_data;

/* TR_EINVAL for a bad configuration, TR_EIO for a file that cannot be read or is shorter
 * than ctx + 1 bytes; err names the cause. */
int tr_data_open(tr_data **out, const tr_data_config *c, char *err, size_t err_size);
void tr_data_close(tr_data *d);

/* Bytes of one sample's x and y. */
size_t tr_data_x_bytes(const tr_data *d);
size_t tr_data_y_bytes(const tr_data *d);

/* Samples [first, first + count) into x (count x x_bytes) and y (count x y_bytes; NULL:
 * skip). Reads the data set only: threads may fill concurrently. */
void tr_data_fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y);

/* Worker `worker` of `workers` at step `step` of global batch `global_batch`: its samples
 * are [*first, *first + *count), contiguous, sizes differing by at most one. */
void tr_data_shard(uint64_t step, size_t global_batch, int worker, int workers, uint64_t *first,
                   size_t *count);

/* The corpus (ARITHMETIC, FILE), for inspection and sampling text; NULL otherwise. */
const uint8_t *tr_data_corpus(const tr_data *d, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
