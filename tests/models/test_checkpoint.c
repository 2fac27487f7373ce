/* test_checkpoint.c — safetensors checkpoints: bitwise round trips, the exact file layout,
 * atomic replacement, and a reader that answers every corrupt or mismatched file with a
 * message naming the file, the tensor and the problem. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cmocka.h>
#include <cJSON.h>

#include "tr_checkpoint.h"

/* ---- helpers --------------------------------------------------------------------------- */

typedef struct tmpdir {
  char path[256];
} tmpdir;

static int dir_setup(void **state) {
  tmpdir *d = malloc(sizeof *d);
  assert_non_null(d);
  const char *base = getenv("TMPDIR");
  snprintf(d->path, sizeof d->path, "%s/troupe-ckpt.XXXXXX", base && *base ? base : "/tmp");
  assert_non_null(mkdtemp(d->path));
  *state = d;
  return 0;
}

static int dir_teardown(void **state) {
  tmpdir *d = *state;
  DIR *dh = opendir(d->path);
  if (dh) {
    struct dirent *e;
    while ((e = readdir(dh))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char p[600];
      snprintf(p, sizeof p, "%s/%s", d->path, e->d_name);
      if (unlink(p)) rmdir(p);
    }
    closedir(dh);
  }
  chmod(d->path, 0700);
  rmdir(d->path);
  free(d);
  return 0;
}

static char *path_in(const tmpdir *d, const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", d->path, name);
  return p;
}

/* Number of directory entries other than . and .. */
static int dir_entries(const tmpdir *d) {
  DIR *dh = opendir(d->path);
  assert_non_null(dh);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh)))
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(dh);
  return n;
}

static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return b;
}

/* A file of `header` (length prefix added, no padding) followed by `data_len` bytes. */
static unsigned char *make_file(const char *header, size_t data_len, size_t *size) {
  size_t h = strlen(header);
  unsigned char *b = calloc(1, 8 + h + data_len + 1);
  assert_non_null(b);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(b + 8, header, h);
  *size = 8 + h + data_len;
  return b;
}

/* The reader refuses `bytes` with TR_EFORMAT and a message that names the file and
 * contains every one of the NULL-terminated phrases. */
static void assert_rejected_bytes(const void *bytes, size_t size, ...) {
  char err[512] = "";
  tr_checkpoint *ck = (tr_checkpoint *)1;
  int rc = tr_checkpoint_open_memory(&ck, bytes, size, "bad.safetensors", err, sizeof err);
  if (rc != TR_EFORMAT) fail_msg("accepted or wrong status %d (%s)", rc, err);
  assert_null(ck);
  if (strncmp(err, "bad.safetensors: ", 17) != 0) fail_msg("message does not name the file: %s", err);
  va_list ap;
  va_start(ap, size);
  for (const char *s; (s = va_arg(ap, const char *));) {
    if (!strstr(err, s)) fail_msg("message '%s' lacks '%s'", err, s);
  }
  va_end(ap);
}

static void assert_rejected(const char *header, size_t data_len, ...) {
  size_t size;
  unsigned char *b = make_file(header, data_len, &size);
  char err[512] = "";
  tr_checkpoint *ck = (tr_checkpoint *)1;
  int rc = tr_checkpoint_open_memory(&ck, b, size, "bad.safetensors", err, sizeof err);
  if (rc != TR_EFORMAT) fail_msg("header %s accepted or wrong status %d (%s)", header, rc, err);
  assert_null(ck);
  if (strncmp(err, "bad.safetensors: ", 17) != 0) fail_msg("message does not name the file: %s", err);
  va_list ap;
  va_start(ap, data_len);
  for (const char *s; (s = va_arg(ap, const char *));) {
    if (!strstr(err, s)) fail_msg("header %s: message '%s' lacks '%s'", header, err, s);
  }
  va_end(ap);
  free(b);
}

static tr_checkpoint *open_ok(const void *bytes, size_t size) {
  char err[512] = "";
  tr_checkpoint *ck = NULL;
  int rc = tr_checkpoint_open_memory(&ck, bytes, size, "ok.safetensors", err, sizeof err);
  if (rc) fail_msg("rejected (%d): %s", rc, err);
  return ck;
}

/* ---- round trips ----------------------------------------------------------------------- */

static void tensors_of_every_kind_round_trip_bitwise(void **state) {
  tmpdir *d = *state;
  float f32[2][3] = {{1.5f, -0.0f, 3e38f}, {1e-45f, 0, -7}};
  uint32_t nan_bits = 0x7fc01234u; /* a NaN with a payload must survive bit for bit */
  memcpy(&f32[1][1], &nan_bits, 4);
  double f64[5] = {3.141592653589793, -1e308, 5e-324, 0, 42};
  int32_t i32[2][2][2] = {{{1, -2}, {3, -4}}, {{INT32_MIN, INT32_MAX}, {0, 7}}};
  int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
  uint8_t u8[7] = {0, 1, 2, 127, 128, 254, 255}; /* odd size: later tensors would misalign */
  uint16_t bf16[3] = {0x3f80, 0xbf80, 0x7fc0};
  float scalar = 0.125f;
  uint64_t u64[1][1][1][1][1][1][1][2] = {{{{{{{{UINT64_MAX, 9}}}}}}}};

  int64_t s_f32[] = {2, 3}, s_f64[] = {5}, s_i32[] = {2, 2, 2}, s_i64[] = {3}, s_u8[] = {7},
          s_bf16[] = {3}, s_empty[] = {0, 4}, s_u64[] = {1, 1, 1, 1, 1, 1, 1, 2};
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "u8", TR_DTYPE_U8, 1, s_u8, u8), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "f32", TR_DTYPE_F32, 2, s_f32, f32), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "bf16", TR_DTYPE_BF16, 1, s_bf16, bf16), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "f64", TR_DTYPE_F64, 1, s_f64, f64), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "i32", TR_DTYPE_I32, 3, s_i32, i32), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "i64", TR_DTYPE_I64, 1, s_i64, i64), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "scalar", TR_DTYPE_F32, 0, NULL, &scalar), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "empty", TR_DTYPE_F32, 2, s_empty, NULL), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "u64.8d", TR_DTYPE_U64, 8, s_u64, u64), 0);
  const char *path = path_in(d, "all.safetensors");
  if (tr_checkpoint_writer_save(w, path)) fail_msg("%s", tr_checkpoint_writer_error(w));
  tr_checkpoint_writer_free(w);

  char err[512];
  tr_checkpoint *ck;
  if (tr_checkpoint_open(&ck, path, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_checkpoint_count(ck), 9);
  /* In name order, and every tensor aligned to its element size in the mapping. */
  for (size_t i = 0; i < tr_checkpoint_count(ck); i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    if (i) assert_true(strcmp(tr_checkpoint_tensor_at(ck, i - 1)->name, t->name) < 0);
    assert_int_equal((uintptr_t)t->data % tr_dtype_size(t->dtype), 0);
  }
  struct {
    const char *name;
    tr_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
    size_t nbytes;
  } want[] = {
      {"u8", TR_DTYPE_U8, 1, s_u8, u8, sizeof u8},
      {"f32", TR_DTYPE_F32, 2, s_f32, f32, sizeof f32},
      {"bf16", TR_DTYPE_BF16, 1, s_bf16, bf16, sizeof bf16},
      {"f64", TR_DTYPE_F64, 1, s_f64, f64, sizeof f64},
      {"i32", TR_DTYPE_I32, 3, s_i32, i32, sizeof i32},
      {"i64", TR_DTYPE_I64, 1, s_i64, i64, sizeof i64},
      {"scalar", TR_DTYPE_F32, 0, NULL, &scalar, sizeof scalar},
      {"empty", TR_DTYPE_F32, 2, s_empty, NULL, 0},
      {"u64.8d", TR_DTYPE_U64, 8, s_u64, u64, sizeof u64},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, want[i].name);
    assert_non_null(t);
    assert_string_equal(t->name, want[i].name);
    assert_int_equal(t->dtype, want[i].dtype);
    assert_int_equal(t->ndim, want[i].ndim);
    for (int k = 0; k < t->ndim; k++) assert_int_equal(t->shape[k], want[i].shape[k]);
    assert_int_equal(t->nbytes, want[i].nbytes);
    if (t->nbytes) assert_memory_equal(t->data, want[i].data, t->nbytes);
    assert_int_equal(tr_checkpoint_expect(ck, want[i].name, want[i].dtype, want[i].ndim,
                                          want[i].shape, NULL), 0);
  }
  float back[2][3];
  assert_int_equal(tr_checkpoint_read(ck, "f32", TR_DTYPE_F32, 2, s_f32, back), 0);
  assert_memory_equal(back, f32, sizeof f32);
  assert_null(tr_checkpoint_find(ck, "nope"));
  tr_checkpoint_close(ck);
}

static void metadata_round_trips_strings_u64s_and_json(void **state) {
  tmpdir *d = *state;
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  const char *tricky = "quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xc3\xa9\xe2\x82\xac";
  uint64_t rng[4] = {0, 1, UINT64_MAX, 0x9e3779b97f4a7c15ULL};
  cJSON *cfg = cJSON_CreateObject();
  assert_non_null(cfg);
  cJSON_AddStringToObject(cfg, "model", "gpt");
  cJSON_AddNumberToObject(cfg, "lr", 3e-4);
  cJSON_AddNumberToObject(cfg, "batch", 8);
  assert_int_equal(tr_checkpoint_writer_put(w, "optimizer", "sgd"), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "optimizer", "adamw"), 0); /* replaces */
  assert_int_equal(tr_checkpoint_writer_put(w, "tricky", tricky), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "empty", ""), 0);
  assert_int_equal(tr_checkpoint_writer_put_u64(w, "step", UINT64_MAX), 0);
  assert_int_equal(tr_checkpoint_writer_put_u64s(w, "rng", rng, 4), 0);
  assert_int_equal(tr_checkpoint_writer_put_u64s(w, "none", NULL, 0), 0);
  assert_int_equal(tr_checkpoint_writer_put_json(w, "config", cfg), 0);
  const char *path = path_in(d, "meta.safetensors");
  if (tr_checkpoint_writer_save(w, path)) fail_msg("%s", tr_checkpoint_writer_error(w));
  tr_checkpoint_writer_free(w);

  char err[512];
  tr_checkpoint *ck;
  if (tr_checkpoint_open(&ck, path, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(tr_checkpoint_count(ck), 0);
  assert_int_equal(tr_checkpoint_meta_count(ck), 7);
  assert_string_equal(tr_checkpoint_meta(ck, "optimizer"), "adamw");
  assert_string_equal(tr_checkpoint_meta(ck, "tricky"), tricky);
  assert_string_equal(tr_checkpoint_meta(ck, "empty"), "");
  assert_string_equal(tr_checkpoint_meta(ck, "rng"), "[0, 1, 18446744073709551615, 11400714819323198485]");
  assert_null(tr_checkpoint_meta(ck, "absent"));
  uint64_t step = 0, back[4] = {0};
  assert_int_equal(tr_checkpoint_meta_u64(ck, "step", &step), 0);
  assert_true(step == UINT64_MAX);
  assert_int_equal(tr_checkpoint_meta_u64s(ck, "rng", back, 4), 0);
  assert_memory_equal(back, rng, sizeof rng);
  assert_int_equal(tr_checkpoint_meta_u64s(ck, "none", back, 0), 0);
  cJSON *j = NULL;
  assert_int_equal(tr_checkpoint_meta_json(ck, "config", &j), 0);
  assert_true(cJSON_Compare(j, cfg, 1));
  cJSON_Delete(j);
  cJSON_Delete(cfg);
  const char *key, *value;
  tr_checkpoint_meta_at(ck, 0, &key, &value); /* key order */
  assert_string_equal(key, "config");

  /* Typed getters name the key and say what is wrong. */
  assert_int_equal(tr_checkpoint_meta_u64(ck, "absent", &step), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "metadata key 'absent' is missing"));
  assert_int_equal(tr_checkpoint_meta_u64(ck, "optimizer", &step), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "'optimizer' is \"adamw\", not an unsigned"));
  assert_int_equal(tr_checkpoint_meta_u64s(ck, "rng", back, 3), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "'rng' has 4 values, expected 3"));
  assert_int_equal(tr_checkpoint_meta_json(ck, "tricky", &j), TR_EFORMAT);
  assert_null(j);
  assert_non_null(strstr(tr_checkpoint_error(ck), "'tricky' is not valid JSON"));
  assert_non_null(strstr(tr_checkpoint_error(ck), path));
  tr_checkpoint_close(ck);

  /* u64 that overflows, signs and spaces are refused. */
  const char *bad_u64[] = {"18446744073709551616", "-1", " 1", "1 ", "", "0x10", "+3"};
  for (size_t i = 0; i < sizeof bad_u64 / sizeof *bad_u64; i++) {
    w = tr_checkpoint_writer_new();
    assert_non_null(w);
    tr_checkpoint_writer_put(w, "n", bad_u64[i]);
    assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
    tr_checkpoint_writer_free(w);
    assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), 0);
    if (tr_checkpoint_meta_u64(ck, "n", &step) != TR_EFORMAT) fail_msg("accepted '%s'", bad_u64[i]);
    tr_checkpoint_close(ck);
  }
}

/* ---- the file format ------------------------------------------------------------------- */

static void file_is_exactly_the_safetensors_layout(void **state) {
  tmpdir *d = *state;
  uint8_t b3[3] = {0xaa, 0xbb, 0xcc};
  float a2[2] = {1.0f, 2.0f};
  int64_t s2[] = {2}, s3[] = {3};
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "b", TR_DTYPE_U8, 1, s3, b3), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "a", TR_DTYPE_F32, 1, s2, a2), 0);
  assert_int_equal(tr_checkpoint_writer_put_u64(w, "step", 7), 0);
  const char *path = path_in(d, "layout.safetensors");
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);

  size_t size;
  unsigned char *f = read_file(path, &size);
  /* Larger elements first (F32 before U8), so data is aligned without gaps. */
  const char *json = "{\"__metadata__\":{\"step\":\"7\"},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
  size_t jl = strlen(json), n = (jl + 7) / 8 * 8;
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | f[i];
  assert_int_equal(len, n); /* little-endian length of the padded header */
  assert_int_equal(len % 8, 0);
  assert_memory_equal(f + 8, json, jl);
  for (size_t i = jl; i < n; i++) assert_int_equal(f[8 + i], ' ');
  assert_int_equal(size, 8 + n + 11);
  assert_memory_equal(f + 8 + n, a2, 8);
  assert_memory_equal(f + 8 + n + 8, b3, 3);
  free(f);

  /* No tensors and no metadata: "{}" padded to 8 bytes, an empty data section. */
  w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  f = read_file(path, &size);
  assert_int_equal(size, 16);
  assert_memory_equal(f, "\x08\0\0\0\0\0\0\0{}      ", 16);
  tr_checkpoint *ck = open_ok(f, size);
  assert_int_equal(tr_checkpoint_count(ck), 0);
  assert_int_equal(tr_checkpoint_meta_count(ck), 0);
  tr_checkpoint_close(ck);
  free(f);
}

/* Files written elsewhere: any key order, metadata null, tensors in any order, an empty
 * tensor anywhere a boundary is, names with escapes. */
static void reader_accepts_valid_files_from_other_writers(void **state) {
  (void)state;
  size_t size;
  unsigned char *b = make_file(
      "{\"z\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"I32\"},"
      "\"__metadata__\":null,\"e\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[4,4]},"
      "\"a\\u00e9\\n\":{\"shape\":[1,2],\"dtype\":\"BF16\",\"data_offsets\":[4,8]}}\n  ",
      8, &size);
  tr_checkpoint *ck = open_ok(b, size);
  assert_int_equal(tr_checkpoint_count(ck), 3);
  const tr_checkpoint_tensor *t = tr_checkpoint_find(ck, "a\xc3\xa9\n");
  assert_non_null(t);
  assert_int_equal(t->offset, 4);
  assert_int_equal(tr_checkpoint_find(ck, "z")->ndim, 0);
  assert_int_equal(tr_checkpoint_find(ck, "e")->nbytes, 0);
  tr_checkpoint_close(ck);
  free(b);
}

/* ---- atomic writes --------------------------------------------------------------------- */

static tr_checkpoint_writer *writer_of(const float *x, int64_t n) {
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "x", TR_DTYPE_F32, 1, &n, x), 0);
  return w;
}

static void save_replaces_an_existing_checkpoint(void **state) {
  tmpdir *d = *state;
  float v1[4] = {1, 2, 3, 4}, v2[2] = {5, 6};
  const char *path = path_in(d, "c.safetensors");
  tr_checkpoint_writer *w = writer_of(v1, 4);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  w = writer_of(v2, 2);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  char err[512];
  tr_checkpoint *ck;
  assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), 0);
  int64_t two = 2;
  float back[2];
  assert_int_equal(tr_checkpoint_read(ck, "x", TR_DTYPE_F32, 1, &two, back), 0);
  assert_memory_equal(back, v2, sizeof v2);
  tr_checkpoint_close(ck);
  assert_int_equal(dir_entries(d), 1); /* no temporary file left behind */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(st.st_mode & S_IRUSR);
}

/* The write fails half-way (the file size limit: EFBIG after the first bytes, root or not):
 * the old checkpoint is untouched and the temporary file is gone. */
static void failed_write_leaves_the_old_checkpoint_and_no_temporary(void **state) {
  tmpdir *d = *state;
  float small[4] = {1, 2, 3, 4};
  const char *path = path_in(d, "c.safetensors");
  tr_checkpoint_writer *w = writer_of(small, 4);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  size_t before_size;
  unsigned char *before = read_file(path, &before_size);

  enum { BIG = 64 * 1024 };
  float *big = calloc(BIG, sizeof *big);
  assert_non_null(big);
  w = writer_of(big, BIG);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = tr_checkpoint_writer_save(w, path);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, old_handler);
  assert_int_equal(rc, TR_EIO);
  const char *msg = tr_checkpoint_writer_error(w);
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "writing the temporary file"));
  assert_non_null(strstr(msg, strerror(EFBIG)));
  tr_checkpoint_writer_free(w);
  free(big);

  size_t after_size;
  unsigned char *after = read_file(path, &after_size);
  assert_int_equal(after_size, before_size);
  assert_memory_equal(after, before, before_size);
  assert_int_equal(dir_entries(d), 1);
  free(before);
  free(after);
}

/* A directory at the target (a non-empty one, which a rename could not replace either) is
 * refused before anything is written: no temporary file, the directory as it was. */
static void a_directory_at_the_target_is_refused_and_left(void **state) {
  tmpdir *d = *state;
  char target[512];
  snprintf(target, sizeof target, "%s", path_in(d, "dir.safetensors"));
  assert_int_equal(mkdir(target, 0700), 0);
  char inner[600];
  snprintf(inner, sizeof inner, "%s/keep", target);
  FILE *f = fopen(inner, "w");
  assert_non_null(f);
  fclose(f);
  float x[2] = {1, 2};
  tr_checkpoint_writer *w = writer_of(x, 2);
  assert_int_equal(tr_checkpoint_writer_save(w, target), TR_EINVAL);
  assert_non_null(strstr(tr_checkpoint_writer_error(w), "not a file path"));
  tr_checkpoint_writer_free(w);
  assert_int_equal(dir_entries(d), 1); /* the directory only */
  assert_int_equal(access(inner, F_OK), 0);
  unlink(inner);
}

/* What save would replace must be a regular file or nothing: a FIFO, a symlink to one, a
 * socket, and (as root, a node of our own; 1,3 is /dev/null's) a character device are
 * refused, named, left as they were, and no temporary file stays. Were they replaced, a
 * program saving to /dev/null as root would replace the system's. */
static void save_refuses_a_special_file_and_leaves_it(void **state) {
  tmpdir *d = *state;
  float x[2] = {1, 2};
  tr_checkpoint_writer *w = writer_of(x, 2);
  char fifo[512], link[512], dev[512];
  snprintf(fifo, sizeof fifo, "%s", path_in(d, "fifo"));
  snprintf(link, sizeof link, "%s", path_in(d, "to-fifo"));
  snprintf(dev, sizeof dev, "%s", path_in(d, "null"));
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(symlink("fifo", link), 0);
  const bool root = mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0;
  if (!root) printf("skip a character device: mknod is not permitted here\n");
  const char *paths[] = {fifo, link, dev};
  const char *kinds[] = {"a FIFO", "a FIFO", "a character device"};
  for (int i = 0; i < (root ? 3 : 2); i++) {
    assert_int_equal(tr_checkpoint_writer_save(w, paths[i]), TR_EINVAL);
    const char *msg = tr_checkpoint_writer_error(w);
    if (!strstr(msg, paths[i]) || !strstr(msg, kinds[i]) || !strstr(msg, "left as it is"))
      fail_msg("%s: %s", paths[i], msg);
  }
  struct stat sb;
  assert_int_equal(lstat(fifo, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  assert_int_equal(lstat(link, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  if (root) {
    assert_int_equal(lstat(dev, &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));
    assert_int_equal(sb.st_rdev, makedev(1, 3));
  }
  assert_int_equal(dir_entries(d), root ? 3 : 2); /* no temporary file */
  tr_checkpoint_writer_free(w);
}

/* A checkpoint larger than the process may write (ulimit -f) fails with a message naming
 * the file and the limit, instead of SIGXFSZ ending the process (whose default action it
 * is), and leaves the old checkpoint and no temporary file. */
static void a_checkpoint_beyond_the_file_size_limit_fails_naming_the_limit(void **state) {
  tmpdir *d = *state;
  float small[4] = {1, 2, 3, 4};
  const char *path = path_in(d, "c.safetensors");
  tr_checkpoint_writer *w = writer_of(small, 4);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  enum { BIG = 64 * 1024 };
  float *big = calloc(BIG, sizeof *big);
  assert_non_null(big);
  w = writer_of(big, BIG);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 4096;
  assert_int_equal(signal(SIGXFSZ, SIG_DFL) != SIG_ERR, 1);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  const int rc = tr_checkpoint_writer_save(w, path);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  assert_int_equal(rc, TR_EIO);
  const char *msg = tr_checkpoint_writer_error(w);
  if (!strstr(msg, path) || !strstr(msg, strerror(EFBIG)) ||
      !strstr(msg, "may write files of 4096 bytes at most (ulimit -f)"))
    fail_msg("%s", msg);
  tr_checkpoint_writer_free(w);
  free(big);
  assert_int_equal(dir_entries(d), 1);
  tr_checkpoint *ck;
  char err[512];
  assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), 0); /* the old one, whole */
  tr_checkpoint_close(ck);
}

/* A rewrite keeps the replaced file's owner and group, as it keeps its mode (as root, which
 * may give a file to anyone; others keep at least a group of theirs). */
static void a_rewrite_keeps_the_owner_and_group(void **state) {
  tmpdir *d = *state;
  if (geteuid() != 0) skip();
  float x[2] = {1, 2};
  const char *path = path_in(d, "c.safetensors");
  tr_checkpoint_writer *w = writer_of(x, 2);
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  assert_int_equal(chown(path, 4321, 4322), 0);
  assert_int_equal(chmod(path, 02640), 0); /* setgid: cleared by a chown made after it */
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_uid, 4321);
  assert_int_equal(sb.st_gid, 4322);
  assert_int_equal(sb.st_mode & 07777, 02640);
}

static void unwritable_or_missing_directory_fails_with_a_message(void **state) {
  tmpdir *d = *state;
  float x[2] = {1, 2};
  tr_checkpoint_writer *w = writer_of(x, 2);
  const char *missing = path_in(d, "no/such/dir/c.safetensors");
  assert_int_equal(tr_checkpoint_writer_save(w, missing), TR_EIO);
  assert_non_null(strstr(tr_checkpoint_writer_error(w), "creating a temporary file in"));
  assert_non_null(strstr(tr_checkpoint_writer_error(w), strerror(ENOENT)));

  /* Root writes anywhere: only check permission failures as another user. */
  if (geteuid() != 0) {
    const char *path = path_in(d, "c.safetensors");
    assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
    assert_int_equal(chmod(d->path, 0500), 0);
    assert_int_equal(tr_checkpoint_writer_save(w, path), TR_EIO);
    assert_non_null(strstr(tr_checkpoint_writer_error(w), strerror(EACCES)));
    assert_int_equal(chmod(d->path, 0700), 0);
    assert_int_equal(dir_entries(d), 1);
  }
  tr_checkpoint_writer_free(w);
}

static void writer_refuses_bad_tensors_and_then_refuses_to_save(void **state) {
  tmpdir *d = *state;
  float x[4] = {0};
  int64_t ok[] = {4}, neg[] = {-1}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  int64_t huge[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  struct {
    const char *name;
    tr_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
    const char *says;
  } bad[] = {
      {"", TR_DTYPE_F32, 1, ok, x, "empty, reserved or not UTF-8"},
      {"__metadata__", TR_DTYPE_F32, 1, ok, x, "reserved"},
      {"bad\xff", TR_DTYPE_F32, 1, ok, x, "not UTF-8"},
      {"t", (tr_dtype)99, 1, ok, x, "unknown dtype"},
      {"t", TR_DTYPE_F32, 9, nine, x, "9 dimensions"},
      {"t", TR_DTYPE_F32, 1, neg, x, "dimension 0 is -1"},
      {"t", TR_DTYPE_F32, 2, huge, x, "shape too large"},
      {"t", TR_DTYPE_F32, 1, ok, NULL, "no data"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tr_checkpoint_writer *w = tr_checkpoint_writer_new();
    assert_non_null(w);
    assert_int_equal(tr_checkpoint_writer_add(w, bad[i].name, bad[i].dtype, bad[i].ndim,
                                              bad[i].shape, bad[i].data), TR_EINVAL);
    if (!strstr(tr_checkpoint_writer_error(w), bad[i].says))
      fail_msg("case %zu: '%s' lacks '%s'", i, tr_checkpoint_writer_error(w), bad[i].says);
    tr_checkpoint_writer_free(w);
  }
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "t", TR_DTYPE_F32, 1, ok, x), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "t", TR_DTYPE_F32, 1, ok, x), TR_EINVAL);
  assert_non_null(strstr(tr_checkpoint_writer_error(w), "'t' added twice"));
  assert_int_equal(tr_checkpoint_writer_put(w, "k", "bad\xc3"), TR_EINVAL);
  const char *path = path_in(d, "never.safetensors");
  assert_int_equal(tr_checkpoint_writer_save(w, path), TR_EINVAL);
  assert_non_null(strstr(tr_checkpoint_writer_error(w), "not written, an earlier call failed"));
  assert_non_null(strstr(tr_checkpoint_writer_error(w), "added twice"));
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(dir_entries(d), 0);
  tr_checkpoint_writer_free(w);
}

/* ---- the reader refuses broken files ------------------------------------------------- */

/* Every prefix of a valid file is refused, with the reason its length implies. */
static void truncated_files_are_refused_at_every_cut(void **state) {
  tmpdir *d = *state;
  double a[3] = {1, 2, 3};
  int32_t b[5] = {1, 2, 3, 4, 5};
  int64_t sa[] = {3}, sb[] = {5};
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "a", TR_DTYPE_F64, 1, sa, a), 0);
  assert_int_equal(tr_checkpoint_writer_add(w, "b", TR_DTYPE_I32, 1, sb, b), 0);
  assert_int_equal(tr_checkpoint_writer_put(w, "k", "v"), 0);
  const char *path = path_in(d, "t.safetensors");
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);
  size_t size;
  unsigned char *f = read_file(path, &size);
  assert_int_equal(f[1], 0);
  size_t header_end = 8 + (size_t)f[0];
  tr_checkpoint_close(open_ok(f, size));
  for (size_t cut = 0; cut < size; cut++) {
    /* A copy of exactly `cut` bytes, so a read past it is a sanitizer error. */
    unsigned char *c = malloc(cut ? cut : 1);
    assert_non_null(c);
    memcpy(c, f, cut);
    if (cut < 8) assert_rejected_bytes(c, cut, "too short for the 8-byte header length", NULL);
    else if (cut < header_end) assert_rejected_bytes(c, cut, "runs past the end of the file", NULL);
    else if (cut < header_end + 24) /* 'a' holds bytes [0, 24) and comes first */
      assert_rejected_bytes(c, cut, "tensor 'a'", "end past the data section", NULL);
    else assert_rejected_bytes(c, cut, "tensor 'b'", "end past the data section", NULL);
    free(c);
  }
  /* A truncated file on disk: the message names its path. */
  assert_int_equal(truncate(path, (off_t)size - 1), 0);
  char err[512];
  tr_checkpoint *ck;
  assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), TR_EFORMAT);
  assert_null(ck);
  char want[600];
  snprintf(want, sizeof want, "%s: tensor 'b': data_offsets [24, 44) end past the data section (43 bytes)", path);
  assert_string_equal(err, want);
  free(f);
}

static void header_length_past_the_end_or_over_the_limit_is_refused(void **state) {
  (void)state;
  unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
  assert_rejected_bytes(b, sizeof b, "exceeds safetensors' limit", NULL);
  memset(b, 0, 8);
  b[0] = 9; /* one byte more than there is */
  assert_rejected_bytes(b, sizeof b, "header length 9 runs past the end of the file (16 bytes", NULL);
  b[0] = 0x00, b[3] = 0x10; /* 256 MiB */
  assert_rejected_bytes(b, sizeof b, "header length 268435456 exceeds", NULL);
  assert_rejected("", 4, "does not begin with '{'", NULL);
  assert_rejected(" {}", 0, "does not begin with '{'", NULL);
}

static void malformed_json_is_refused(void **state) {
  (void)state;
  assert_rejected("{", 0, "not valid JSON", NULL);
  assert_rejected("{\"a\":}", 0, "not valid JSON (error near byte 5", NULL);
  assert_rejected("{} {}", 0, "not valid JSON", NULL);
  assert_rejected("{\"a\":1,}", 0, "not valid JSON", NULL);
  assert_rejected("{\"a\xff\":1}", 0, "not UTF-8 at byte 3", NULL);
  assert_rejected("{\"\xed\xa0\x80\":1}", 0, "not UTF-8", NULL);   /* a surrogate */
  assert_rejected("{\"\xc0\xaf\":1}", 0, "not UTF-8", NULL);       /* overlong '/' */
  assert_rejected("{\"a\\u0000b\":{}}", 0, "\\u0000", NULL);
  unsigned char nul[] = {10, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':', '1', '}', 0, ' ', ' '};
  assert_rejected_bytes(nul, sizeof nul, "NUL byte", NULL);
  /* Deep nesting is refused by the parser's limit, not by a stack overflow. */
  enum { DEPTH = 100000 };
  char *deep = malloc(2 * DEPTH + 8);
  assert_non_null(deep);
  size_t o = 0;
  deep[o++] = '{', deep[o++] = '"', deep[o++] = 'a', deep[o++] = '"', deep[o++] = ':';
  for (int i = 0; i < DEPTH; i++) deep[o++] = '[';
  for (int i = 0; i < DEPTH; i++) deep[o++] = ']';
  deep[o++] = '}';
  deep[o] = '\0';
  assert_rejected(deep, 0, "not valid JSON", NULL);
  free(deep);
}

static void bad_tensor_entries_are_refused_naming_the_tensor(void **state) {
  (void)state;
#define T(body) "{\"w\":" body "}"
  assert_rejected(T("[]"), 0, "tensor 'w': entry is not a JSON object", NULL);
  assert_rejected(T("{\"shape\":[1],\"data_offsets\":[0,4]}"), 4, "tensor 'w'", "\"dtype\" missing", NULL);
  assert_rejected(T("{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4,
                  "tensor 'w': unknown dtype 'F33'", NULL);
  assert_rejected(T("{\"dtype\":\"float32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4,
                  "unknown dtype 'float32'", NULL);
  assert_rejected(T("{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}"), 4, "\"dtype\" missing or not a string", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}"), 4, "tensor 'w': \"shape\" missing", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}"), 4,
                  "tensor 'w': shape dimension 0 is not a non-negative integer", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,4]}"), 4,
                  "shape dimension 1 is not a non-negative integer", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}"), 4,
                  "shape dimension 0", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}"), 4,
                  "shape dimension 0", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}"), 4,
                  "9 dimensions, troupe reads at most 8", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}"), 8,
                  "tensor 'w': shape [3] of F32 needs 12 bytes, data_offsets [0, 8) hold 8", NULL);
  assert_rejected(T("{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}"), 8,
                  "shape [4294967296, 4294967296] overflows", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1]}"), 4, "\"data_offsets\" missing", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}"), 4, "\"data_offsets\" missing or not [begin, end]", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}"), 8, "not [begin, end]", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}"), 4, "not non-negative integers", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}"), 4, "not non-negative integers", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}"), 4, "[4, 0) begin after their end", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 3,
                  "tensor 'w': data_offsets [0, 4) end past the data section (3 bytes)", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[0,4096]}"), 4000,
                  "tensor 'w': data_offsets [0, 4096) end past the data section (4000 bytes)", NULL);
  assert_rejected(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e20,1e20]}"), 4,
                  "not non-negative integers", NULL);
  /* A name that cannot be printed as it is comes out escaped, and long ones are cut. */
  assert_rejected("{\"a\\u0007b\":[]}", 0, "tensor 'a\\x07b'", NULL);
  char longname[400];
  snprintf(longname, sizeof longname, "{\"%0300d\":[]}", 0);
  assert_rejected(longname, 0, "...': entry is not", NULL);
#undef T
}

static void overlaps_gaps_and_duplicates_are_refused(void **state) {
  (void)state;
  assert_rejected("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 12,
                  "tensor 'b': data_offsets [4, 12) overlap tensor 'a' [0, 8)", NULL);
  assert_rejected("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
                  "overlap tensor", NULL);
  assert_rejected("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
                  "tensor 'b'", "overlap tensor 'a'", NULL);
  assert_rejected("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12,
                  "bytes [4, 8) of the data section belong to no tensor (before tensor 'b')", NULL);
  assert_rejected("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 6,
                  "bytes [4, 6) of the data section belong to no tensor (after the last one)", NULL);
  assert_rejected("{}", 1, "bytes [0, 1) of the data section belong to no tensor", NULL);
  assert_rejected("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
                  "tensor 'a' appears twice", NULL);
}

static void metadata_that_is_not_an_object_of_strings_is_refused(void **state) {
  (void)state;
  assert_rejected("{\"__metadata__\":{\"step\":7}}", 0,
                  "\"__metadata__\" value of 'step' is not a string", NULL);
  assert_rejected("{\"__metadata__\":{\"cfg\":{\"lr\":\"1\"}}}", 0, "value of 'cfg' is not a string", NULL);
  assert_rejected("{\"__metadata__\":{\"a\":null}}", 0, "value of 'a' is not a string", NULL);
  assert_rejected("{\"__metadata__\":[\"a\"]}", 0, "\"__metadata__\" is not a JSON object", NULL);
  assert_rejected("{\"__metadata__\":\"x\"}", 0, "\"__metadata__\" is not a JSON object", NULL);
  assert_rejected("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "appears twice", NULL);
  assert_rejected("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "metadata key 'k' appears twice", NULL);
}

/* What a model does on resume: a checkpoint of another model (or another size) fails with
 * a message naming the first tensor that does not fit. */
static void checkpoint_of_another_model_is_refused_naming_the_tensor(void **state) {
  tmpdir *d = *state;
  float w1[100 * 10] = {0};
  int64_t s_file[] = {100, 10};
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  assert_non_null(w);
  assert_int_equal(tr_checkpoint_writer_add(w, "stage0.w1", TR_DTYPE_F32, 2, s_file, w1), 0);
  const char *path = path_in(d, "other.safetensors");
  assert_int_equal(tr_checkpoint_writer_save(w, path), 0);
  tr_checkpoint_writer_free(w);

  char err[512], want[700];
  tr_checkpoint *ck;
  assert_int_equal(tr_checkpoint_open(&ck, path, err, sizeof err), 0);
  int64_t s_model[] = {10, 100}, s_3d[] = {100, 10, 1};
  float dst[1000];
  assert_int_equal(tr_checkpoint_read(ck, "stage0.w1", TR_DTYPE_F32, 2, s_model, dst), TR_EFORMAT);
  snprintf(want, sizeof want, "%s: tensor 'stage0.w1' has shape [100, 10], expected [10, 100]", path);
  assert_string_equal(tr_checkpoint_error(ck), want);
  assert_int_equal(tr_checkpoint_expect(ck, "stage0.w1", TR_DTYPE_F32, 3, s_3d, NULL), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "expected [100, 10, 1]"));
  assert_int_equal(tr_checkpoint_expect(ck, "stage0.w1", TR_DTYPE_F64, 2, s_file, NULL), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "'stage0.w1' has dtype F32, expected F64"));
  assert_int_equal(tr_checkpoint_expect(ck, "stage1.w1", TR_DTYPE_F32, 2, s_file, NULL), TR_EFORMAT);
  assert_non_null(strstr(tr_checkpoint_error(ck), "no tensor 'stage1.w1' among its 1"));
  tr_checkpoint_close(ck);
}

static void files_that_are_not_checkpoints_are_refused(void **state) {
  tmpdir *d = *state;
  char err[512];
  tr_checkpoint *ck;
  const char *missing = path_in(d, "missing.safetensors");
  assert_int_equal(tr_checkpoint_open(&ck, missing, err, sizeof err), TR_EIO);
  assert_null(ck);
  assert_non_null(strstr(err, "missing.safetensors: cannot open"));
  assert_int_equal(tr_checkpoint_open(&ck, d->path, err, sizeof err), TR_EINVAL);
  assert_non_null(strstr(err, "a directory, not a regular file"));
  /* a FIFO is refused at once, not waited on for a writer that never comes */
  const char *fifo = path_in(d, "fifo.safetensors");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(tr_checkpoint_open(&ck, fifo, err, sizeof err), TR_EINVAL);
  assert_null(ck);
  assert_non_null(strstr(err, "fifo.safetensors: a FIFO, not a regular file"));
  const char *empty = path_in(d, "empty.safetensors");
  FILE *f = fopen(empty, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(tr_checkpoint_open(&ck, empty, err, sizeof err), TR_EFORMAT);
  assert_non_null(strstr(err, "empty.safetensors: 0 bytes, too short"));
  /* A pickle (PyTorch's .pt) is not a safetensors file. */
  const unsigned char pickle[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8};
  assert_rejected_bytes(pickle, sizeof pickle, "exceeds safetensors' limit", NULL);
  /* A NULL error buffer is allowed. */
  assert_int_equal(tr_checkpoint_open(&ck, empty, NULL, 0), TR_EFORMAT);
}

/* The fuzzer's seeds (tests/fuzz/corpus) are valid checkpoints: mutations start from files
 * that reach every check. */
static void fuzz_seed_corpus_files_are_valid_checkpoints(void **state) {
  (void)state;
  const char *dir = getenv("TR_FUZZ_CORPUS");
  if (!dir) skip();
  DIR *dh = opendir(dir);
  assert_non_null(dh);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh))) {
    if (e->d_name[0] == '.') continue;
    char p[1024], err[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    tr_checkpoint *ck;
    if (tr_checkpoint_open(&ck, p, err, sizeof err)) fail_msg("%s", err);
    tr_checkpoint_close(ck);
    n++;
  }
  closedir(dh);
  assert_true(n >= 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define WITH_DIR(f) cmocka_unit_test_setup_teardown(f, dir_setup, dir_teardown)
      WITH_DIR(tensors_of_every_kind_round_trip_bitwise),
      WITH_DIR(metadata_round_trips_strings_u64s_and_json),
      WITH_DIR(file_is_exactly_the_safetensors_layout),
      cmocka_unit_test(reader_accepts_valid_files_from_other_writers),
      WITH_DIR(save_replaces_an_existing_checkpoint),
      WITH_DIR(failed_write_leaves_the_old_checkpoint_and_no_temporary),
      WITH_DIR(a_directory_at_the_target_is_refused_and_left),
      WITH_DIR(save_refuses_a_special_file_and_leaves_it),
      WITH_DIR(a_checkpoint_beyond_the_file_size_limit_fails_naming_the_limit),
      WITH_DIR(a_rewrite_keeps_the_owner_and_group),
      WITH_DIR(unwritable_or_missing_directory_fails_with_a_message),
      WITH_DIR(writer_refuses_bad_tensors_and_then_refuses_to_save),
      WITH_DIR(truncated_files_are_refused_at_every_cut),
      cmocka_unit_test(header_length_past_the_end_or_over_the_limit_is_refused),
      cmocka_unit_test(malformed_json_is_refused),
      cmocka_unit_test(bad_tensor_entries_are_refused_naming_the_tensor),
      cmocka_unit_test(overlaps_gaps_and_duplicates_are_refused),
      cmocka_unit_test(metadata_that_is_not_an_object_of_strings_is_refused),
      WITH_DIR(checkpoint_of_another_model_is_refused_naming_the_tensor),
      WITH_DIR(files_that_are_not_checkpoints_are_refused),
      cmocka_unit_test(fuzz_seed_corpus_files_are_valid_checkpoints),
#undef WITH_DIR
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
