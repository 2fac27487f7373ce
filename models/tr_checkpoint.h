/* tr_checkpoint.h — checkpoints as safetensors files: named host tensors plus string
 * metadata, written atomically and read back with every byte of the file validated.
 *
 * The format is Hugging Face's safetensors, so PyTorch reads the weights with
 * `safetensors.torch.load_file`: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end)}, ...} plus an
 * optional "__metadata__" object of string values), then the data section. The writer pads
 * the header with spaces to a multiple of 8 and lays tensors out by element size, largest
 * first, so each tensor of a file it wrote is aligned to its element size.
 *
 * This module knows nothing about models: the model code hands it named tensors (host
 * memory) and puts the step, RNG state, optimizer and run configuration in the metadata.
 *
 *   // save
 *   tr_checkpoint_writer *w = tr_checkpoint_writer_new();
 *   if (!w) return TR_ENOMEM;
 *   int64_t shape[2] = {100, 10};
 *   tr_checkpoint_writer_add(w, "stage0.w1", TR_DTYPE_F32, 2, shape, host_w1);
 *   tr_checkpoint_writer_put(w, "optimizer", "adamw");
 *   tr_checkpoint_writer_put_u64(w, "step", step);
 *   tr_checkpoint_writer_put_u64s(w, "rng", rng_state, 4);
 *   int rc = tr_checkpoint_writer_save(w, "run.safetensors"); // also reports earlier failures
 *   if (rc) fprintf(stderr, "%s\n", tr_checkpoint_writer_error(w));
 *   tr_checkpoint_writer_free(w);
 *
 *   // load
 *   tr_checkpoint *ck;
 *   char err[512];
 *   if (tr_checkpoint_open(&ck, "run.safetensors", err, sizeof err)) { fprintf(stderr, "%s\n", err); ... }
 *   uint64_t step;
 *   if (tr_checkpoint_meta_u64(ck, "step", &step) ||
 *       tr_checkpoint_read(ck, "stage0.w1", TR_DTYPE_F32, 2, shape, host_w1))
 *     fprintf(stderr, "%s\n", tr_checkpoint_error(ck)); // "run.safetensors: tensor
 *                                                       //  'stage0.w1' has shape [10, 100], expected [100, 10]"
 *   tr_checkpoint_close(ck);
 *
 * Errors: functions return 0 or a negative TR_E... status (tr_base.h). TR_EFORMAT means the
 * file is not a valid checkpoint (or not the one expected), TR_EIO/TR_ESYS a failed system
 * call, TR_EINVAL a bad argument (a NULL writer, checkpoint, name, key, shape, buffer or
 * out, a count out of range: named, and for a writer remembered as any failure of it is,
 * but a NULL path or out of save and bytes, which another call may give), TR_ENOMEM what it
 * says. Getters of a NULL checkpoint, name or key answer 0, NULL or "", and
 * tr_checkpoint_meta_at of an entry it lacks gives NULL and NULL. The message names the file, the
 * tensor or key and the problem; it lives on the writer or the open checkpoint, or, for
 * tr_checkpoint_open, in the caller's buffer.
 *
 * Writes are atomic: a temporary file in the target's directory is written, fsynced and
 * renamed over the target, then the directory is fsynced. A crash or a failed write leaves
 * the previous file at the target path as it was, and a failed write removes its temporary.
 * (Only when the last step, the directory's fsync, fails is the new file already in place;
 * save still reports it, as the rename may not survive a crash. A process killed mid-write
 * leaves a ".<name>.tmp.*" file beside the target, never a partial target; the next
 * successful write of that target removes it, and any other no live writer holds.) The new file
 * keeps the mode of the file it replaces, and its owner and group where the process may set
 * them. What the rename would replace must be a regular file or nothing: a device, a FIFO,
 * a socket or a directory at the path (or at its symlink's target) is refused, TR_EINVAL,
 * and left as it is. A checkpoint larger than the process may write (ulimit -f) fails with
 * TR_EIO naming the limit, not with SIGXFSZ.
 *
 * Reads validate everything: the header length (at most 100 MB, inside the file), the JSON
 * (UTF-8, one object, padding only spaces), each tensor (known dtype, at most
 * TR_CHECKPOINT_MAX_DIMS non-negative integer dimensions whose element count times the
 * dtype's size is its byte length, offsets inside the data section), the layout (tensors
 * cover the data section exactly, with no overlap and no gap, as safetensors requires),
 * unique names, and "__metadata__" (an object of strings). No input makes it crash.
 *
 * Threads: a writer or an open checkpoint belongs to one thread at a time; different ones
 * may be used from different threads (cJSON records its last parse error in a global, a
 * race without consequence here, since the reader takes error positions from the call).
 * Threads that read one file each take a view of it (tr_checkpoint_view): the file is read
 * once, and every view sees the same bytes.
 */
#ifndef TR_CHECKPOINT_H
#define TR_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "tr_base.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* X(name, safetensors name, size in bytes): the element types of safetensors. */
#define TR_DTYPE_MAP(X)      \
  X(BOOL, "BOOL", 1)         \
  X(U8, "U8", 1)             \
  X(I8, "I8", 1)             \
  X(F8_E5M2, "F8_E5M2", 1)   \
  X(F8_E4M3, "F8_E4M3", 1)   \
  X(U16, "U16", 2)           \
  X(I16, "I16", 2)           \
  X(F16, "F16", 2)           \
  X(BF16, "BF16", 2)         \
  X(U32, "U32", 4)           \
  X(I32, "I32", 4)           \
  X(F32, "F32", 4)           \
  X(U64, "U64", 8)           \
  X(I64, "I64", 8)           \
  X(F64, "F64", 8)

typedef enum tr_dtype {
#define TR__DTYPE_ENUM(name, text, size) TR_DTYPE_##name,
  TR_DTYPE_MAP(TR__DTYPE_ENUM)
#undef TR__DTYPE_ENUM
  TR_DTYPE_COUNT
} tr_dtype;

/* Bytes per element (0 for a value outside the enum). */
TR_API size_t tr_dtype_size(tr_dtype dtype);
/* The safetensors name ("F32"), or "?" for a value outside the enum. */
TR_API const char *tr_dtype_name(tr_dtype dtype);
/* The dtype a safetensors name stands for; TR_EFORMAT when it names none. */
TR_API int tr_dtype_parse(const char *name, tr_dtype *out);

/* safetensors itself has no limit; troupe's tensors have at most this many dimensions. */
#define TR_CHECKPOINT_MAX_DIMS 8
/* safetensors' own limit on the header, which keeps a corrupt length from allocating much. */
#define TR_CHECKPOINT_MAX_HEADER 100000000u

/* One tensor of an open checkpoint. `data` points into the file's mapping (valid until
 * tr_checkpoint_close) and is aligned to the element size only if the writer made it so
 * (troupe's writer does; to be safe with other files, copy with tr_checkpoint_read). */
typedef struct tr_checkpoint_tensor {
  const char *name;
  tr_dtype dtype;
  int ndim;                                /* 0 for a scalar */
  int64_t shape[TR_CHECKPOINT_MAX_DIMS];
  const void *data;
  size_t nbytes;                           /* elements × tr_dtype_size(dtype) */
  size_t offset;                           /* begin of data_offsets, from the data section */
} tr_checkpoint_tensor;

/* ---- writing ------------------------------------------------------------------------- */

typedef struct tr_checkpoint_writer tr_checkpoint_writer;

/* A writer with no tensors and no metadata; NULL when out of memory. */
TR_API tr_checkpoint_writer *tr_checkpoint_writer_new(void);
TR_API void tr_checkpoint_writer_free(tr_checkpoint_writer *w);

/* Adds a tensor of `ndim` dimensions (0..TR_CHECKPOINT_MAX_DIMS; 0 is a scalar of one
 * element). The name is copied; `data` (host bytes, element count × dtype size of them) is
 * read only by tr_checkpoint_writer_save and must stay valid until then; it may be NULL
 * when the tensor has no elements. Names are unique, valid UTF-8, not empty and not
 * "__metadata__". A failure here is remembered and makes save fail too, so a checkpoint
 * missing a tensor is never written. */
TR_API int tr_checkpoint_writer_add(tr_checkpoint_writer *w, const char *name, tr_dtype dtype,
                             int ndim, const int64_t *shape, const void *data);

/* Metadata: string values under string keys (UTF-8), copied. Putting a key again replaces
 * its value. The typed forms store text that other tools read as well:
 *   put_u64   decimal ("1234"), exact over the whole range;
 *   put_u64s  a JSON array of decimals ("[1, 2, 3]"), e.g. an RNG state; exact, because
 *             tr_checkpoint_meta_u64s parses it as integers (a JSON library's doubles would
 *             round values above 2^53);
 *   put_json  the compact JSON text of a cJSON value (e.g. the run's configuration). */
TR_API int tr_checkpoint_writer_put(tr_checkpoint_writer *w, const char *key, const char *value);
TR_API int tr_checkpoint_writer_put_u64(tr_checkpoint_writer *w, const char *key, uint64_t value);
TR_API int tr_checkpoint_writer_put_u64s(tr_checkpoint_writer *w, const char *key,
                                  const uint64_t *values, size_t count);
TR_API int tr_checkpoint_writer_put_json(tr_checkpoint_writer *w, const char *key,
                                  const struct cJSON *value);

/* Writes the checkpoint to `path` atomically (see the top of this file). The writer stays
 * usable: saving again (e.g. to another path, or after the data changed) is allowed. */
TR_API int tr_checkpoint_writer_save(tr_checkpoint_writer *w, const char *path);
/* Internal: save to an output a run writes again and again (runtime/file_write.h): a path
 * changed since the run began is left as it is, and the checkpoint (`content`, "the
 * checkpoint of step 500") is kept aside in a file the error names; TR_EIO. */
struct tr__file_output;
int tr__checkpoint_writer_save_to(tr_checkpoint_writer *w, struct tr__file_output *out,
                                  const char *content);

/* The bytes save would write, in memory: *bytes (malloc'd: free it) and *size, which
 * tr_checkpoint_open_memory reads back. For a copy of the state kept without a file (a
 * running job's parameters handed to an observer, tr_job_snapshot). Fails as save does. */
TR_API int tr_checkpoint_writer_bytes(tr_checkpoint_writer *w, void **bytes, size_t *size);

/* The text of the writer's last failure, or "". */
TR_API const char *tr_checkpoint_writer_error(const tr_checkpoint_writer *w);

/* ---- reading ------------------------------------------------------------------------- */

typedef struct tr_checkpoint tr_checkpoint;

/* Reads and validates a checkpoint file (read whole, not mapped: a file changed under a
 * reader cannot crash it). On failure *out is NULL and `err` (when not NULL) receives the
 * message, which begins with the path: TR_EIO for a file that cannot be read, TR_EINVAL for
 * a path that is not a regular file (a FIFO is refused without waiting on it), TR_EFORMAT
 * for one that is not a valid checkpoint. */
TR_API int tr_checkpoint_open(tr_checkpoint **out, const char *path, char *err, size_t err_size);

/* The same for `size` bytes in memory, which the checkpoint borrows: keep them unchanged
 * until tr_checkpoint_close. `name` stands for the file in messages (NULL: "<memory>"). */
TR_API int tr_checkpoint_open_memory(tr_checkpoint **out, const void *bytes, size_t size,
                              const char *name, char *err, size_t err_size);

/* Another open checkpoint over the same bytes as `ck` (no copy, no file read): for another
 * thread, whose lookups and errors are then its own. Close every view before `ck`. */
TR_API int tr_checkpoint_view(const tr_checkpoint *ck, tr_checkpoint **out, char *err,
                       size_t err_size);

TR_API void tr_checkpoint_close(tr_checkpoint *ck);

/* The text of the last failure of a lookup on `ck`, or "". */
TR_API const char *tr_checkpoint_error(const tr_checkpoint *ck);

/* Tensors, in name order (strcmp): index 0..count-1. */
TR_API size_t tr_checkpoint_count(const tr_checkpoint *ck);
TR_API const tr_checkpoint_tensor *tr_checkpoint_tensor_at(const tr_checkpoint *ck, size_t index);

/* The tensor of that name, or NULL. */
TR_API const tr_checkpoint_tensor *tr_checkpoint_find(const tr_checkpoint *ck, const char *name);

/* Checks that the checkpoint has tensor `name` with exactly this dtype and shape (what a
 * model expects of its own checkpoints); TR_EFORMAT with a message naming the tensor, what
 * the file has and what was expected otherwise. `out` (may be NULL) receives the tensor. */
TR_API int tr_checkpoint_expect(tr_checkpoint *ck, const char *name, tr_dtype dtype, int ndim,
                         const int64_t *shape, const tr_checkpoint_tensor **out);

/* tr_checkpoint_expect, then copies the tensor's bytes to `dst` (which holds them all). */
TR_API int tr_checkpoint_read(tr_checkpoint *ck, const char *name, tr_dtype dtype, int ndim,
                       const int64_t *shape, void *dst);

/* Metadata. tr_checkpoint_meta returns the value, or NULL when the key is absent. The typed
 * getters fail with TR_EFORMAT (message naming the key) when the key is absent or its value
 * is not of the form the matching put wrote. tr_checkpoint_meta_u64s wants exactly `count`
 * values. tr_checkpoint_meta_json parses the value; free *out with cJSON_Delete. */
TR_API size_t tr_checkpoint_meta_count(const tr_checkpoint *ck);
/* The key and value of metadata entry `index` (in key order). */
TR_API void tr_checkpoint_meta_at(const tr_checkpoint *ck, size_t index, const char **key,
                           const char **value);
TR_API const char *tr_checkpoint_meta(const tr_checkpoint *ck, const char *key);
TR_API int tr_checkpoint_meta_u64(tr_checkpoint *ck, const char *key, uint64_t *out);
TR_API int tr_checkpoint_meta_u64s(tr_checkpoint *ck, const char *key, uint64_t *out, size_t count);
TR_API int tr_checkpoint_meta_json(tr_checkpoint *ck, const char *key, struct cJSON **out);

#ifdef __cplusplus
}
#endif
#endif
