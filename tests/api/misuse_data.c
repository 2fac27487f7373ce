/* misuse_data.c — hostile calls to data sources and checkpoints (misuse.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "misuse.h"

static int fill_nothing(void *arg, uint64_t first, size_t count, void *x, void *y) {
  (void)arg, (void)first, (void)count, (void)x, (void)y;
  return 0;
}

/* ---- data sources ---------------------------------------------------------------------------- */

MISUSE(data_open_null_out, "tr_data_open(NULL, &c, err, n)", TR_EINVAL, "tr_data_open", "out") {
  tr_data_config c = {.kind = TR_DATA_GAUSSIAN, .in = 2, .out = 1};
  return tr_data_open(NULL, &c, msg, n);
}

MISUSE(data_open_null_config, "tr_data_open(&d, NULL, err, n)", TR_EINVAL, "tr_data_open", "c") {
  tr_data *d;
  return tr_data_open(&d, NULL, msg, n);
}

MISUSE(data_open_bad_kind, "tr_data_open(&d, {.kind = 99}, err, n)", TR_EINVAL, "kind", NULL) {
  tr_data *d;
  return tr_data_open(&d, &(tr_data_config){.kind = (tr_data_kind)99, .in = 2, .out = 1}, msg, n);
}

MISUSE(data_open_file_null_path, "tr_data_open(&d, {.kind = FILE, .path = NULL}, err, n)",
       TR_EINVAL, "path", NULL) {
  tr_data *d;
  return tr_data_open(&d, &(tr_data_config){.kind = TR_DATA_FILE, .ctx = 8}, msg, n);
}

MISUSE(data_open_npy_null_labels, "tr_data_open(&d, {.kind = NPY, .labels = NULL}, err, n)",
       TR_EINVAL, "labels", NULL) {
  tr_data *d;
  return tr_data_open(&d, &(tr_data_config){.kind = TR_DATA_NPY, .path = "/dev/null"}, msg, n);
}

MISUSE(data_open_zero_width, "tr_data_open(&d, {.kind = TEACHER, .in = 0}, err, n)", TR_EINVAL,
       "in", NULL) {
  tr_data *d;
  return tr_data_open(&d, &(tr_data_config){.kind = TR_DATA_TEACHER, .in = 0, .out = 1}, msg, n);
}

MISUSE(data_open_missing_no_err, "tr_data_open(&d, {.kind = FILE, .path = missing}, NULL, 0)",
       MISUSE_REFUSED, NULL, NULL) {
  tr_data *d;
  return tr_data_open(&d, &(tr_data_config){.kind = TR_DATA_FILE, .ctx = 8,
                                             .path = scratch_path("missing")}, NULL, 0);
}

MISUSE(data_callback_null, "tr_data_open_callback(&d, NULL, err, n)", TR_EINVAL,
       "tr_data_open_callback", "cb") {
  tr_data *d;
  return tr_data_open_callback(&d, NULL, msg, n);
}

MISUSE(data_callback_null_fill, "tr_data_open_callback(&d, {.fill = NULL}, err, n)", TR_EINVAL,
       "fill", NULL) {
  tr_data *d;
  return tr_data_open_callback(&d, &(tr_data_callback){.x_bytes = 4, .y_bytes = 4}, msg, n);
}

MISUSE(data_callback_zero_x, "tr_data_open_callback(&d, {.x_bytes = 0}, err, n)", TR_EINVAL,
       "x_bytes", NULL) {
  tr_data *d;
  return tr_data_open_callback(&d, &(tr_data_callback){.y_bytes = 4, .fill = fill_nothing}, msg,
                               n);
}

MISUSE(data_callback_negative_rows, "tr_data_open_callback(&d, {.rows = -1}, err, n)", TR_EINVAL,
       "rows", NULL) {
  tr_data *d;
  return tr_data_open_callback(&d, &(tr_data_callback){.x_bytes = 4, .fill = fill_nothing,
                                                       .rows = -1}, msg, n);
}

MISUSE(data_callback_null_out, "tr_data_open_callback(NULL, &cb, err, n)", TR_EINVAL,
       "tr_data_open_callback", "out") {
  return tr_data_open_callback(NULL, &(tr_data_callback){.x_bytes = 4, .fill = fill_nothing}, msg,
                               n);
}

MISUSE(data_open_for_null_model, "tr_data_open_for(&d, NULL, 1, NULL, NULL, err, n)", TR_EINVAL,
       "tr_data_open_for", "m") {
  tr_data *d;
  return tr_data_open_for(&d, NULL, 1, NULL, NULL, msg, n);
}

MISUSE(data_open_for_labels_only, "tr_data_open_for(&d, m, 1, NULL, \"y.npy\", err, n)",
       TR_EINVAL, "labels", NULL) {
  tr_data *d;
  return tr_data_open_for(&d, model(), 1, NULL, "y.npy", msg, n);
}

MISUSE(data_check_null, "tr_data_check(NULL, m, err, n)", TR_EINVAL, "tr_data_check", "d") {
  return tr_data_check(NULL, model(), msg, n);
}

MISUSE(data_check_null_model, "tr_data_check(d, NULL, err, n)", TR_EINVAL, "tr_data_check", "m") {
  return tr_data_check(data(), NULL, msg, n);
}

MISUSE(data_close_null, "tr_data_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_data_close(NULL);
  return 0;
}

MISUSE(data_getters_null, "tr_data_name/_x_bytes/_rows/_error/_corpus(NULL)", MISUSE_DEFINED, NULL,
       NULL) {
  size_t size = 1;
  return tr_data_name(NULL) && !tr_data_x_bytes(NULL) && !tr_data_y_bytes(NULL) &&
                 !tr_data_rows(NULL) && tr_data_error(NULL) && !tr_data_corpus(NULL, &size) &&
                 !size && !tr_data_can_generate(NULL)
             ? 0
             : 1;
}

MISUSE(data_fill_null, "tr_data_fill(NULL, 0, 1, x, y)", TR_EINVAL, "tr_data_fill", "d") {
  float x[16], y[16];
  return tr_data_fill(NULL, 0, 1, x, y);
}

MISUSE(data_fill_null_x, "tr_data_fill(d, 0, 1, NULL, y)", TR_EINVAL, "tr_data_fill", "x") {
  float y[16];
  tr_data *d = data();
  const int rc = tr_data_fill(d, 0, 1, NULL, y);
  return said(msg, n, rc, tr_data_error(d));
}

MISUSE(data_split_endless, "tr_data_split(endless, 0.2, 1, &t, &h, err, n)", TR_EINVAL,
       "endless source", "split") {
  tr_data *t, *h;
  return tr_data_split(data(), 0.2, 1, &t, &h, msg, n);
}

MISUSE(data_split_null, "tr_data_split(NULL, 0.2, 1, &t, &h, err, n)", TR_EINVAL,
       "tr_data_split", "d") {
  tr_data *t, *h;
  return tr_data_split(NULL, 0.2, 1, &t, &h, msg, n);
}

MISUSE(data_split_null_out, "tr_data_split(d, 0.2, 1, NULL, &h, err, n)", TR_EINVAL,
       "tr_data_split", "train") {
  tr_data *d, *h;
  if (tr_data_open_callback(&d, &(tr_data_callback){.x_bytes = 4, .fill = fill_nothing,
                                                    .rows = 10}, NULL, 0))
    return 1;
  return tr_data_split(d, 0.2, 1, NULL, &h, msg, n);
}

MISUSE(data_split_nan, "tr_data_split(d, NAN, 1, &t, &h, err, n)", TR_EINVAL, "held_out", NULL) {
  tr_data *d, *t, *h;
  if (tr_data_open_callback(&d, &(tr_data_callback){.x_bytes = 4, .fill = fill_nothing,
                                                    .rows = 10}, NULL, 0))
    return 1;
  return tr_data_split(d, NAN, 1, &t, &h, msg, n);
}

MISUSE(data_shard_no_workers, "tr_data_shard(3, 64, 0, 0, &first, &count)", MISUSE_DEFINED,
       "tr_data_shard", "workers") {
  uint64_t first = 1;
  size_t count = 1;
  tr_data_shard(3, 64, 0, 0, &first, &count);
  return count == 0 ? 0 : 1;
}

MISUSE(data_shard_worker_out_of_range, "tr_data_shard(3, 64, 5, 2, &first, &count)",
       MISUSE_DEFINED, "tr_data_shard", "worker") {
  uint64_t first = 1;
  size_t count = 1;
  tr_data_shard(3, 64, 5, 2, &first, &count);
  return count == 0 ? 0 : 1;
}

MISUSE(data_shard_null_out, "tr_data_shard(3, 64, 0, 1, NULL, NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_data_shard(3, 64, 0, 1, NULL, NULL);
  return 0;
}

MISUSE(data_config_for_null, "tr_data_config_for(NULL, m, 1, NULL), (&c, NULL, ...)",
       MISUSE_DEFINED, NULL, NULL) {
  tr_data_config c;
  tr_data_config_for(NULL, model(), 1, NULL);
  tr_data_config_for(&c, NULL, 1, NULL);
  return 0;
}

MISUSE(npy_null_path, "tr_data_write_npy(NULL, F32, 1, shape, data, err, n)", TR_EINVAL,
       "tr_data_write_npy", "path") {
  const float v[4] = {0};
  return tr_data_write_npy(NULL, TR_DTYPE_F32, 1, (int64_t[]){4}, v, msg, n);
}

MISUSE(npy_null_shape, "tr_data_write_npy(path, F32, 1, NULL, data, err, n)", TR_EINVAL,
       "tr_data_write_npy", "shape") {
  const float v[4] = {0};
  return tr_data_write_npy(scratch_path("a.npy"), TR_DTYPE_F32, 1, NULL, v, msg, n);
}

MISUSE(npy_zero_dims, "tr_data_write_npy(path, F32, 0, shape, data, err, n)", TR_EINVAL,
       "0 dimensions", NULL) {
  const float v[4] = {0};
  return tr_data_write_npy(scratch_path("a.npy"), TR_DTYPE_F32, 0, (int64_t[]){4}, v, msg, n);
}

MISUSE(npy_negative_dim, "tr_data_write_npy(path, F32, 1, {-1}, data, err, n)", TR_EINVAL,
       "dimension 0 is -1", NULL) {
  const float v[4] = {0};
  return tr_data_write_npy(scratch_path("a.npy"), TR_DTYPE_F32, 1, (int64_t[]){-1}, v, msg, n);
}

MISUSE(npy_null_data, "tr_data_write_npy(path, F32, 1, {4}, NULL, err, n)", TR_EINVAL,
       "tr_data_write_npy", "data") {
  return tr_data_write_npy(scratch_path("a.npy"), TR_DTYPE_F32, 1, (int64_t[]){4}, NULL, msg, n);
}

MISUSE(npy_bad_dtype, "tr_data_write_npy(path, 99, 1, {4}, data, err, n)", TR_EINVAL, "dtype",
       NULL) {
  const float v[4] = {0};
  return tr_data_write_npy(scratch_path("a.npy"), (tr_dtype)99, 1, (int64_t[]){4}, v, msg, n);
}

MISUSE(npy_bad_no_err, "tr_data_write_npy(path, F64, 1, {4}, data, NULL, 0)", TR_EINVAL, NULL,
       NULL) {
  const double v[4] = {0};
  return tr_data_write_npy(scratch_path("a.npy"), TR_DTYPE_F64, 1, (int64_t[]){4}, v, NULL, 0);
}

MISUSE(data_gen_open_null_out, "tr_data_gen_open(NULL, d, dev, err, n)", TR_EINVAL,
       "tr_data_gen_open", "out") {
  return tr_data_gen_open(NULL, data(), device(), msg, n);
}

MISUSE(data_gen_open_null_data, "tr_data_gen_open(&g, NULL, dev, err, n)", TR_EINVAL,
       "tr_data_gen_open", "d") {
  tr_data_gen *g;
  return tr_data_gen_open(&g, NULL, device(), msg, n);
}

MISUSE(data_gen_open_null_device, "tr_data_gen_open(&g, d, NULL, err, n)", TR_EINVAL,
       "tr_data_gen_open", "dev") {
  tr_data_gen *g;
  return tr_data_gen_open(&g, data(), NULL, msg, n);
}

MISUSE(data_gen_fill_null, "tr_data_gen_fill(NULL, s, 0, 1, x, y)", TR_EINVAL, "tr_data_gen_fill",
       "g") {
  float *p = device_floats(64);
  return tr_data_gen_fill(NULL, stream(), 0, 1, p, p + 32);
}

MISUSE(data_gen_close_null, "tr_data_gen_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_data_gen_close(NULL);
  return 0;
}

/* ---- checkpoints: writing -------------------------------------------------------------------- */

MISUSE(writer_free_null, "tr_checkpoint_writer_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_checkpoint_writer_free(NULL);
  return tr_checkpoint_writer_error(NULL) ? 0 : 1;
}

MISUSE(writer_add_null_writer, "tr_checkpoint_writer_add(NULL, \"x\", F32, 1, shape, data)",
       TR_EINVAL, "tr_checkpoint_writer_add", "w") {
  const float v[4] = {0};
  return tr_checkpoint_writer_add(NULL, "x", TR_DTYPE_F32, 1, (int64_t[]){4}, v);
}

#define ON_WRITER(w, call) said(msg, n, (call), tr_checkpoint_writer_error(w))

MISUSE(writer_add_null_name, "tr_checkpoint_writer_add(w, NULL, F32, 1, shape, data)", TR_EINVAL,
       "tr_checkpoint_writer_add", "name") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, NULL, TR_DTYPE_F32, 1, (int64_t[]){4}, v));
}

MISUSE(writer_add_null_shape, "tr_checkpoint_writer_add(w, \"x\", F32, 1, NULL, data)", TR_EINVAL,
       "tr_checkpoint_writer_add", "shape") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, 1, NULL, v));
}

MISUSE(writer_add_many_dims, "tr_checkpoint_writer_add(w, \"x\", F32, 9, shape, data)",
       TR_EINVAL, "tensor 'x'", "9 dimensions") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 4};
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, 9, shape, v));
}

MISUSE(writer_add_negative_dims, "tr_checkpoint_writer_add(w, \"x\", F32, -1, shape, data)",
       TR_EINVAL, "tensor 'x'", "-1 dimensions") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, -1, (int64_t[]){4}, v));
}

MISUSE(writer_add_bad_dtype, "tr_checkpoint_writer_add(w, \"x\", 99, 1, shape, data)", TR_EINVAL,
       "tensor 'x'", "dtype 99") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", (tr_dtype)99, 1, (int64_t[]){4}, v));
}

MISUSE(writer_add_null_data, "tr_checkpoint_writer_add(w, \"x\", F32, 1, {4}, NULL)", TR_EINVAL,
       "tensor 'x'", "no data") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, 1, (int64_t[]){4}, NULL));
}

MISUSE(writer_add_negative_shape, "tr_checkpoint_writer_add(w, \"x\", F32, 1, {-3}, data)",
       TR_EINVAL, "tensor 'x'", "dimension 0 is -3") {
  const float v[4] = {0};
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, 1, (int64_t[]){-3}, v));
}

MISUSE(writer_put_null_key, "tr_checkpoint_writer_put(w, NULL, \"v\")", TR_EINVAL,
       "tr_checkpoint_writer_put", "key") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_put(w, NULL, "v"));
}

MISUSE(writer_put_null_value, "tr_checkpoint_writer_put(w, \"k\", NULL)", TR_EINVAL,
       "tr_checkpoint_writer_put", "value") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_put(w, "k", NULL));
}

MISUSE(writer_put_null_writer, "tr_checkpoint_writer_put(NULL, \"k\", \"v\")", TR_EINVAL,
       "tr_checkpoint_writer_put", "w") {
  return tr_checkpoint_writer_put(NULL, "k", "v");
}

MISUSE(writer_put_u64s_null, "tr_checkpoint_writer_put_u64s(w, \"k\", NULL, 3)", TR_EINVAL,
       "tr_checkpoint_writer_put_u64s", "values") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_put_u64s(w, "k", NULL, 3));
}

MISUSE(writer_put_json_null, "tr_checkpoint_writer_put_json(w, \"k\", NULL)", TR_EINVAL,
       "tr_checkpoint_writer_put_json", "value") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_put_json(w, "k", NULL));
}

MISUSE(writer_save_null_writer, "tr_checkpoint_writer_save(NULL, path)", TR_EINVAL,
       "tr_checkpoint_writer_save", "w") {
  return tr_checkpoint_writer_save(NULL, scratch_path("ck"));
}

MISUSE(writer_save_null_path, "tr_checkpoint_writer_save(w, NULL)", TR_EINVAL,
       "tr_checkpoint_writer_save", "path") {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_save(w, NULL));
}

MISUSE(writer_save_empty_path, "tr_checkpoint_writer_save(w, \"\")", MISUSE_REFUSED, NULL, NULL) {
  tr_checkpoint_writer *w = writer();
  return ON_WRITER(w, tr_checkpoint_writer_save(w, ""));
}

MISUSE(writer_save_twice, "tr_checkpoint_writer_save(w, path) twice", MISUSE_DEFINED, NULL, NULL) {
  tr_checkpoint_writer *w = writer();
  const char *path = scratch_path("twice.safetensors");
  return !tr_checkpoint_writer_save(w, path) && !tr_checkpoint_writer_save(w, path) ? 0 : 1;
}

MISUSE(writer_bytes_null, "tr_checkpoint_writer_bytes(w, NULL, &size)", TR_EINVAL,
       "tr_checkpoint_writer_bytes", "bytes") {
  tr_checkpoint_writer *w = writer();
  size_t size;
  return ON_WRITER(w, tr_checkpoint_writer_bytes(w, NULL, &size));
}

/* ---- checkpoints: reading --------------------------------------------------------------------- */

MISUSE(open_null_out, "tr_checkpoint_open(NULL, path, err, n)", TR_EINVAL, "tr_checkpoint_open",
       "out") {
  return tr_checkpoint_open(NULL, scratch_path("ck"), msg, n);
}

MISUSE(open_null_path, "tr_checkpoint_open(&ck, NULL, err, n)", TR_EINVAL, "tr_checkpoint_open",
       "path") {
  tr_checkpoint *ck;
  return tr_checkpoint_open(&ck, NULL, msg, n);
}

MISUSE(open_missing_no_err, "tr_checkpoint_open(&ck, missing, NULL, 0)", MISUSE_REFUSED, NULL,
       NULL) {
  tr_checkpoint *ck;
  return tr_checkpoint_open(&ck, scratch_path("missing"), NULL, 0);
}

MISUSE(open_memory_null, "tr_checkpoint_open_memory(&ck, NULL, 16, NULL, err, n)", TR_EINVAL,
       "tr_checkpoint_open_memory", "bytes") {
  tr_checkpoint *ck;
  return tr_checkpoint_open_memory(&ck, NULL, 16, NULL, msg, n);
}

MISUSE(open_memory_empty, "tr_checkpoint_open_memory(&ck, bytes, 0, \"m\", NULL, 0)",
       MISUSE_REFUSED, NULL, NULL) {
  tr_checkpoint *ck;
  return tr_checkpoint_open_memory(&ck, "", 0, "m", NULL, 0);
}

MISUSE(view_null, "tr_checkpoint_view(NULL, &v, err, n)", TR_EINVAL, "tr_checkpoint_view", "ck") {
  tr_checkpoint *v;
  return tr_checkpoint_view(NULL, &v, msg, n);
}

MISUSE(view_null_out, "tr_checkpoint_view(ck, NULL, err, n)", TR_EINVAL, "tr_checkpoint_view",
       "out") {
  return tr_checkpoint_view(checkpoint(), NULL, msg, n);
}

MISUSE(close_null, "tr_checkpoint_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_checkpoint_close(NULL);
  return 0;
}

MISUSE(checkpoint_getters_null, "tr_checkpoint_count/_find/_meta/_error(NULL, ...)",
       MISUSE_DEFINED, NULL, NULL) {
  const char *k = "x", *v = "y";
  tr_checkpoint_meta_at(NULL, 0, &k, &v);
  return !tr_checkpoint_count(NULL) && !tr_checkpoint_find(NULL, "w") &&
                 !tr_checkpoint_tensor_at(NULL, 0) && !tr_checkpoint_meta(NULL, "step") &&
                 !tr_checkpoint_meta_count(NULL) && tr_checkpoint_error(NULL) && !k && !v
             ? 0
             : 1;
}

MISUSE(checkpoint_lookups_bad, "tr_checkpoint_find(ck, NULL), _tensor_at(ck, 99), ...",
       MISUSE_DEFINED, NULL, NULL) {
  tr_checkpoint *ck = checkpoint();
  const char *k = "x", *v = "y";
  tr_checkpoint_meta_at(ck, 99, &k, &v);
  tr_checkpoint_meta_at(ck, 0, NULL, NULL);
  return !tr_checkpoint_find(ck, NULL) && !tr_checkpoint_tensor_at(ck, 99) &&
                 !tr_checkpoint_meta(ck, NULL) && !k && !v
             ? 0
             : 1;
}

MISUSE(read_null_dst, "tr_checkpoint_read(ck, \"w\", F32, 1, {4}, NULL)", TR_EINVAL,
       "tr_checkpoint_read", "dst") {
  tr_checkpoint *ck = checkpoint();
  return said(msg, n, tr_checkpoint_read(ck, "w", TR_DTYPE_F32, 1, (int64_t[]){4}, NULL),
              tr_checkpoint_error(ck));
}

MISUSE(read_null_name, "tr_checkpoint_read(ck, NULL, F32, 1, {4}, dst)", TR_EINVAL,
       "tr_checkpoint_read", "name") {
  tr_checkpoint *ck = checkpoint();
  float dst[4];
  return said(msg, n, tr_checkpoint_read(ck, NULL, TR_DTYPE_F32, 1, (int64_t[]){4}, dst),
              tr_checkpoint_error(ck));
}

MISUSE(read_null_checkpoint, "tr_checkpoint_read(NULL, \"w\", F32, 1, {4}, dst)", TR_EINVAL,
       "tr_checkpoint_read", "ck") {
  float dst[4];
  return tr_checkpoint_read(NULL, "w", TR_DTYPE_F32, 1, (int64_t[]){4}, dst);
}

MISUSE(read_null_shape, "tr_checkpoint_read(ck, \"w\", F32, 1, NULL, dst)", TR_EINVAL,
       "tr_checkpoint_read", "shape") {
  tr_checkpoint *ck = checkpoint();
  float dst[4];
  return said(msg, n, tr_checkpoint_read(ck, "w", TR_DTYPE_F32, 1, NULL, dst),
              tr_checkpoint_error(ck));
}

MISUSE(expect_many_dims, "tr_checkpoint_expect(ck, \"w\", F32, 99, shape, NULL)",
       MISUSE_REFUSED, "w", NULL) {
  tr_checkpoint *ck = checkpoint();
  int64_t shape[99] = {4};
  return said(msg, n, tr_checkpoint_expect(ck, "w", TR_DTYPE_F32, 99, shape, NULL),
              tr_checkpoint_error(ck));
}

MISUSE(meta_u64_null_out, "tr_checkpoint_meta_u64(ck, \"step\", NULL)", TR_EINVAL,
       "tr_checkpoint_meta_u64", "out") {
  tr_checkpoint *ck = checkpoint();
  return said(msg, n, tr_checkpoint_meta_u64(ck, "step", NULL), tr_checkpoint_error(ck));
}

MISUSE(meta_u64_null_checkpoint, "tr_checkpoint_meta_u64(NULL, \"step\", &v)", TR_EINVAL,
       "tr_checkpoint_meta_u64", "ck") {
  uint64_t v;
  return tr_checkpoint_meta_u64(NULL, "step", &v);
}

MISUSE(meta_u64s_null_out, "tr_checkpoint_meta_u64s(ck, \"step\", NULL, 1)", TR_EINVAL,
       "tr_checkpoint_meta_u64s", "out") {
  tr_checkpoint *ck = checkpoint();
  return said(msg, n, tr_checkpoint_meta_u64s(ck, "step", NULL, 1), tr_checkpoint_error(ck));
}

MISUSE(meta_json_null_out, "tr_checkpoint_meta_json(ck, \"step\", NULL)", TR_EINVAL,
       "tr_checkpoint_meta_json", "out") {
  tr_checkpoint *ck = checkpoint();
  return said(msg, n, tr_checkpoint_meta_json(ck, "step", NULL), tr_checkpoint_error(ck));
}

MISUSE(dtype_bad, "tr_dtype_size(99), tr_dtype_name(-1), tr_dtype_parse(NULL, &d)",
       MISUSE_DEFINED, NULL, NULL) {
  tr_dtype d;
  return tr_dtype_size((tr_dtype)99) == 0 && tr_dtype_name((tr_dtype)-1) &&
                 tr_dtype_parse(NULL, &d) < 0
             ? 0
             : 1;
}
