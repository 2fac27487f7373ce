/* tr_data.h — training data (docs/WORKLOADS.md): built-in sources and the user's own, behind one
 * interface.
 *
 * A data set is an endless numbered sequence of samples. Step k of a run with global batch
 * G uses samples [k*G, (k+1)*G); tr_data_shard splits that range among workers (data-
 * parallel replicas, micro-batches), so N workers see disjoint samples whose union is
 * exactly the single-device batch. The built-in sources make sample i a pure function of
 * (seed, i), so any thread can fill any range, in any order, on any number of workers, and
 * get the same bytes: a run resumed from a checkpoint at step k sees what it would have seen.
 *
 * Built-in sources (tr_data_config, tr_data_open):
 *   TR_DATA_TEACHER     x ~ N(0,1)^in per row; y = a fixed random teacher Linear(in,32) ->
 *                       tanh -> Linear(32,out) of the row, initialised as PyTorch initialises
 *                       a Linear, from a stream of the seed the student's init never uses
 *   TR_DATA_GAUSSIAN    x ~ N(0,1)^in, y ~ N(0,1)^out per row (throughput, not learning)
 *   TR_DATA_CLASSIFIER  x ~ N(0,1)^in per row; y = the int32 class in [0, classes) that such
 *                       a teacher with `classes` outputs scores highest
 *   TR_DATA_ARITHMETIC  a corpus generated in code, lines of small-integer sums such as
 *                       "37+58=95\n"; a sample is `ctx` bytes at an offset drawn from
 *                       (seed, i), its targets the `ctx` bytes after each
 *   TR_DATA_FILE        the same sampling over any byte or text file, read as it trains (a
 *                       file cut short meanwhile fails tr_data_fill with TR_EIO, not the
 *                       process with SIGBUS)
 *   TR_DATA_NPY         two NumPy .npy files, features `path` of shape (N, ...) and `labels`
 *                       of shape (N,) or (N, ...), read likewise; dtypes little-endian
 *                       float32 '<f4', int32 '<i4' or uint8 '|u1', C order. Sample i is row
 *                       perm_e(i mod N) of both, where e = i / N is the epoch and perm_e a
 *                       pseudo-random permutation of [0, N) drawn from (seed, e): each epoch
 *                       visits every row once, in an order of its own. Features arrive as
 *                       float32 (uint8 and int32 converted, values unchanged); labels as
 *                       int32 class indices in [0, classes) when classes > 0 (from int32 or
 *                       uint8, every one checked at open), else as float32 targets.
 * The float sources' samples are `ctx` rows (0 or 1: one). Inputs and targets are written
 * to host memory; the loader copies them on.
 *
 * The user's source (tr_data_callback, tr_data_open_callback): a function that fills any
 * range of samples, and the bytes of one sample's x and y.
 *
 * What a model trains on (tr_data_open_for), by what the model is:
 *   token input (gpt)          the arithmetic corpus; or `path`, a byte or text file
 *   float input, MSE           the teacher at the model's widths, rows = ctx per sample (the
 *                              workload simplenet's); the workload "mlp": Gaussian x and y
 *   float input, cross-entropy the teacher classifier, one int32 label per row
 *   float input, with `path`   .npy features `path` and labels `labels`, both required
 * and the source's sizes checked against the model's (tr_data_check).
 *
 *   tr_data *d;
 *   if (tr_data_open_for(&d, model, seed, NULL, NULL, err, sizeof err)) ...; // err says why
 *   uint64_t first; size_t n;
 *   tr_data_shard(step, global_batch, worker, workers, &first, &n);
 *   if ((rc = tr_data_fill(d, first, n, x, y))) ...;  // n samples of x and y
 *   tr_data_close(d);
 *
 * A source of one's own, say from an array the program holds:
 *
 *   static int fill(void *arg, uint64_t first, size_t count, void *x, void *y) {
 *     const my_set *s = arg;
 *     for (size_t k = 0; k < count; k++) {
 *       const size_t i = (size_t)((first + k) % s->n);
 *       memcpy((float *)x + k * 784, s->images + i * 784, 784 * sizeof(float));
 *       if (y) ((int32_t *)y)[k] = s->labels[i];
 *     }
 *     return 0;
 *   }
 *   tr_data_callback cb = {.name = "mine", .x_bytes = 784 * 4, .y_bytes = 4, .fill = fill,
 *                          .arg = &set};
 *   if (tr_data_open_callback(&d, &cb, err, sizeof err)) ...;
 *   if (tr_data_check(d, model, err, sizeof err)) ...;  // its sizes are the model's
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"
#include "tr_checkpoint.h"
#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_data_kind {
  TR_DATA_TEACHER,
  TR_DATA_GAUSSIAN,
  TR_DATA_ARITHMETIC,
  TR_DATA_FILE,
  TR_DATA_CLASSIFIER,
  TR_DATA_NPY
} tr_data_kind;

typedef struct tr_data_config {
  tr_data_kind kind;
  uint64_t seed;
  int in, out;          /* TEACHER, GAUSSIAN, CLASSIFIER: floats per row of x (in) and y (out) */
  int classes;          /* CLASSIFIER: the teacher's outputs; NPY: > 0, int32 labels in
                           [0, classes); 0, float32 targets */
  int ctx;              /* float sources: rows per sample (0: 1); ARITHMETIC, FILE: tokens */
  size_t corpus_bytes;  /* ARITHMETIC: size of the generated corpus (0: 1 MiB) */
  const char *path;     /* FILE: the bytes; NPY: the features */
  const char *labels;   /* NPY: the labels */
} tr_data_config;

struct tr_model;
/* The built-in source a model trains on by default (the table above); with `path` not NULL
 * the file of a token model, or the .npy features of a float model (labels: set
 * c->labels). */
TR_API void tr_data_config_for(tr_data_config *c, const struct tr_model *m, uint64_t seed,
                        const char *path);

typedef struct tr_data tr_data;

/* Misuse (tr_base.h): the calls with an err refuse NULL arguments there (TR_EINVAL, naming
 * the function and the argument); tr_data_fill refuses d NULL (said on stderr) and x NULL
 * (tr_data_error); getters of NULL answer "", 0 or NULL; tr_data_shard of a worker not
 * among `workers` gives it no samples (*count 0), said on stderr.
 *
 * TR_EINVAL for a bad configuration, a malformed file, or a path that is not a regular file
 * (a FIFO, a device, a directory: refused without waiting on it), TR_EIO for a file that
 * cannot be read (or a byte file shorter than ctx + 1 bytes); err names the file and the
 * cause: "labels.npy: shape (60000,) but features have 59999 rows". Paths are not kept. */
TR_API int tr_data_open(tr_data **out, const tr_data_config *c, char *err, size_t err_size);

/* A user's source: fill writes samples [first, first + count) of an endless numbered
 * sequence, count * x_bytes into x and count * y_bytes into y (y NULL: inputs only), and
 * returns 0 or a negative TR_E... status (a positive value counts as TR_EIO), which
 * tr_data_fill returns: a failing source stops a run. fill is called from the loaders'
 * threads, several at once, with ranges in any order and sometimes more than once: the
 * built-in sources' contract, a pure function of (seed, index), is what makes runs
 * reproducible and resumable, and a callback should keep it too. */
typedef int (*tr_data_fill_fn)(void *arg, uint64_t first, size_t count, void *x, void *y);

typedef struct tr_data_callback {
  const char *name;         /* in messages (copied); NULL: "callback" */
  size_t x_bytes, y_bytes;  /* of one sample; x_bytes > 0 */
  tr_data_fill_fn fill;
  void *arg;                /* fill's first argument; outlives the tr_data */
  int64_t rows;             /* 0: an endless source; else it holds this many rows and its
                               samples [0, rows) are each of them once (tr_data_rows, what
                               tr_data_split splits); < 0 refused */
} tr_data_callback;

TR_API int tr_data_open_callback(tr_data **out, const tr_data_callback *cb, char *err, size_t err_size);

/* The data `m` trains on (the table above), checked with tr_data_check. path NULL: the
 * default (labels NULL too); token models: path is a byte or text file (labels NULL);
 * float models: path and labels are the .npy features and labels, both required. */
TR_API int tr_data_open_for(tr_data **out, const struct tr_model *m, uint64_t seed, const char *path,
                     const char *labels, char *err, size_t err_size);

/* TR_EINVAL, naming both sizes, when a sample's x or y bytes differ from the model's input
 * or target bytes (tr_model_input_bytes, tr_model_target_bytes):
 * "data 'teacher': 40 bytes of targets per sample, model 'mnist' wants 4 (one int32 label)". */
TR_API int tr_data_check(const tr_data *d, const struct tr_model *m, char *err, size_t err_size);

/* Whether samples [first, first + count) hold finite numbers where `m` reads numbers: its
 * inputs unless it reads tokens, its targets unless they are class indices (integers are
 * always finite). x and y: the samples as tr_data_fill filled them (either NULL: not
 * checked); both NULL: read here (tr_data_fill). 0, or TR_ENONFINITE with err naming the
 * first value that is not finite, where it comes from (a .npy file's row and column, a
 * split's row of its source, else the sample and element) and what it holds; or the
 * source's status when reading fails. Training catches such values in the gradients' norm
 * (on_nonfinite); held-out samples have none, so evaluation checks them with this
 * (tr_job.h, tr_eval_config):
 *
 *   "held-x.npy: row 17, column 3 holds NaN: a sample's values must be finite (...)" */
TR_API int tr_data_check_finite(const tr_data *d, const struct tr_model *m, uint64_t first,
                                size_t count, const void *x, const void *y, char *err,
                                size_t err_size);

TR_API void tr_data_close(tr_data *d);

/* "teacher", "gaussian", "classifier", "arithmetic", the file's path, the callback's name;
 * a part of a split its source's and which part: "x.npy[train 80%]", "x.npy[held out 20%]". */
TR_API const char *tr_data_name(const tr_data *d);
/* Bytes of one sample's x and y. */
TR_API size_t tr_data_x_bytes(const tr_data *d);
TR_API size_t tr_data_y_bytes(const tr_data *d);

/* Samples [first, first + count) into x (count x x_bytes) and y (count x y_bytes; NULL:
 * skip); 0 or the source's TR_E... status (tr_data_error says why). Threads may fill
 * concurrently. */
TR_API int tr_data_fill(const tr_data *d, uint64_t first, size_t count, void *x, void *y);

/* Rows of a finite source: a .npy source's N, a callback's `rows`, a part of a split; 0 for
 * an endless one (the generated sources, byte and text files). Samples [0, rows) of a
 * finite source are each of its rows once (a .npy source's in its first epoch's order). */
TR_API int64_t tr_data_rows(const tr_data *d);

/* Splits a finite source's rows in two, at random: `held` gets round(held_out × rows) of
 * them (by a permutation drawn from seed), `train` the others. Each part is a finite source
 * of its own: train's sample i is row perm_e(i mod n) of its n rows, e = i / n (every epoch
 * each row once, in an order of its own, as a .npy source), held's samples [0, n) its rows
 * in order, what tr_job_config.eval evaluates. Both read d, which must outlive them. 0, or
 * TR_EINVAL naming the rule: an endless source, held_out not in (0, 1), a part of no rows.
 *
 *   tr_data *all, *train, *held;
 *   tr_data_open_for(&all, model, 1, "x.npy", "y.npy", err, sizeof err);
 *   tr_data_split(all, 0.2, 1, &train, &held, err, sizeof err);   // 80% train, 20% held out
 *   cfg.data = train;
 *   cfg.eval = (tr_eval_config){.data = held, .every = 100};       // tr_job.h
 *   ...
 *   tr_data_close(train); tr_data_close(held); tr_data_close(all);
 */
TR_API int tr_data_split(const tr_data *d, double held_out, uint64_t seed, tr_data **train,
                         tr_data **held, char *err, size_t err_size);

/* Worker `worker` of `workers` at step `step` of global batch `global_batch`: its samples
 * are [*first, *first + *count), contiguous, sizes differing by at most one. */
TR_API void tr_data_shard(uint64_t step, size_t global_batch, int worker, int workers, uint64_t *first,
                   size_t *count);

/* Writes an array as a NumPy .npy file (version 1.0, C order), the kind the NPY source reads:
 * dtype TR_DTYPE_F32, TR_DTYPE_I32 or TR_DTYPE_U8, ndim 1 to 8 dimensions of `shape`, the
 * product of the dimensions elements at `data`. The file is written atomically (a temporary
 * file renamed over it), so a reader sees the old file or the new one. 0, or TR_EINVAL (a
 * dtype or shape it cannot write) or TR_EIO with err naming the file. */
TR_API int tr_data_write_npy(const char *path, tr_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, char *err, size_t err_size);

/* The generated corpus (ARITHMETIC), for inspection and sampling text; NULL otherwise (a
 * FILE source reads its file as it trains, never holding it whole). */
TR_API const uint8_t *tr_data_corpus(const tr_data *d, size_t *size);

/* What went wrong in the source's first failing tr_data_fill ("data 'big.bin': ends at 0
 * bytes, before 129 bytes at 52311: it changed (was truncated) while it was read"), or "".
 * Any thread. */
TR_API const char *tr_data_error(const tr_data *d);

/* ---- on a device -------------------------------------------------------------------------- */

/* The generated sources (TEACHER, GAUSSIAN, CLASSIFIER, ARITHMETIC) can make their samples on
 * the device that trains on them (tr_synth_fill, tr_device.h), so that no host thread fills
 * and no copy crosses the bus: the same tokens bit for bit as tr_data_fill, the same floats
 * within an ulp (in practice the same bits; synth_impl.h says when they could differ). A
 * tr_data_gen is one source's tables (the ziggurat's, the teacher's weights, the corpus)
 * copied to one device; it is used on the device's owner thread, like the device.
 *
 *   tr_data_gen *g;
 *   if (tr_data_gen_open(&g, d, dev, err, sizeof err)) ...;  // a FILE, NPY or callback source:
 *                                                           // TR_EINVAL saying so
 *   if (tr_data_gen_fill(g, stream, first, n, x, y)) ...;    // device memory; tr_device_error
 *   tr_data_gen_close(g);
 *
 * Training jobs do this by themselves (tr_job_config.data_on). */
typedef struct tr_data_gen tr_data_gen;

/* 1 when the source can be generated on a device, else 0. */
TR_API int tr_data_can_generate(const tr_data *d);

/* TR_EINVAL when the source cannot be generated on a device (err names it), TR_ENOMEM or
 * TR_EDEVICE when its tables do not reach the device's memory (err has the device's words).
 * The tables are copied on the device's compute stream; `d` must outlive the generator. */
TR_API int tr_data_gen_open(tr_data_gen **out, const tr_data *d, tr_device *dev, char *err,
                     size_t err_size);
/* Samples [first, first + count) into x and y, device memory of the generator's device, on
 * stream `s` of it (asynchronous, like every op). y NULL: inputs only. x NULL: targets only
 * (the inputs, which the targets are made from, go to scratch memory the generator keeps,
 * ordered on `s`).
 * 0 or the op's status (tr_device_error says why). */
TR_API int tr_data_gen_fill(tr_data_gen *g, tr_stream *s, uint64_t first, size_t count,
                     void *x, void *y);
/* Frees the tables on the device (ordered on its compute stream). NULL: nothing. */
TR_API void tr_data_gen_close(tr_data_gen *g);

#ifdef __cplusplus
}
#endif
#endif
