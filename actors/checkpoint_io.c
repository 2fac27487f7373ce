/* checkpoint_io.c — the model's parameters and optimizer state, gathered from its stages
 * (and under ZeRO from the shards of every replica), to a safetensors checkpoint with the
 * step and the run's configuration in its metadata; and each stage's share (or shard) back
 * from one. A checkpoint always holds the whole state, so it resumes into any layout.
 *
 * Tensors keep the model's names ("0.weight"); optimizer state is stored under the same
 * names with a prefix ("momentum.0.weight", "adam_m.0.weight", "adam_v.0.weight"), so that
 * PyTorch sees the weights as they are. The data of step k is a function of (seed, k)
 * (tr_data.h), so the step is the whole RNG state of the loader.
 *
 * Also the parts' message (tr__part_type) and its wire codec: a part crosses processes with
 * its arrays, which the coordinator takes over.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "file_write.h"
#include "job_impl.h"
#include "tensor_group.h"
#include "tr_checkpoint.h"

/* The optimizer state's tensors: how many copies of the parameters, and their names (the
 * kind's table, tr_optim.h: "<state name>.<tensor>"). */
static int state_prefixes(tr_optim_kind kind, const char **prefix) {
  for (int k = 0; k < kind->state_copies; k++) prefix[k] = kind->state_names[k];
  return kind->state_copies;
}

/* The optimizer's hyperparameters a checkpoint keeps in its metadata (its kind's, and lr for
 * every kind), written as "%.9g" and checked on resume against tr_optim_config_check's
 * rules: an impossible value is a sign of a corrupt or hand-made file, whose state would be
 * as doubtful. */
typedef struct hyper {
  tr_optim_kind kind; /* NULL: every kind */
  const char *key;    /* the metadata's key, tr_optim_config's field */
  size_t at;          /* offsetof(tr_optim_config, field) */
} hyper;

static const hyper hypers[] = {
    {NULL, "lr", offsetof(tr_optim_config, lr)},
    {&tr_optim_adamw_type, "beta1", offsetof(tr_optim_config, beta1)},
    {&tr_optim_adamw_type, "beta2", offsetof(tr_optim_config, beta2)},
    {&tr_optim_adamw_type, "eps", offsetof(tr_optim_config, eps)},
};

/* State copies that are never negative: a checkpoint holding a negative element there was
 * not written by a run of that optimizer. */
typedef struct nonneg_state {
  tr_optim_kind kind;
  const char *state; /* the kind's state_names[k] */
  const char *rule;
} nonneg_state;

static const nonneg_state nonneg[] = {
    {&tr_optim_adamw_type, "adam_v",
     "Adam's second moments are averages of squared gradients, never negative"},
};

static bool hyper_applies(const hyper *h, tr_optim_kind kind) {
  return h->kind == NULL || h->kind == kind;
}

typedef int (*tensor_fn)(void *ctx, const tr_model *m, int index, const char *name, float *data);

/* Calls fn for every tensor of the parts (consecutive stages of one model), parameters
 * then optimizer state (kind NULL: none), with the place of its data in its part's buffers;
 * named under `lead` when it is not "" (another replica's, a policy's copy). */
static int each_tensor(const tr_model *m, tr_optim_kind kind, const tr__part *parts,
                       int nparts, const char *lead, tensor_fn fn, void *ctx) {
  const char *prefix[TR_OPTIM_MAX_STATE];
  int copies = kind ? state_prefixes(kind, prefix) : 0;
  for (int copy = -1; copy < copies; copy++) {
    for (const tr__part *p = parts; p < parts + nparts; p++) {
      for (int layer = p->first; layer < p->end; layer++) {
        int first, count;
        tr_model_layer_tensors(m, layer, &first, &count);
        for (int i = first; i < first + count; i++) {
          const tr_tensor_info *t = tr_model_tensor(m, i);
          size_t at = t->offset - p->offset;
          char name[128];
          snprintf(name, sizeof name, "%s%s%s%s%s", lead, lead[0] ? "." : "",
                   copy < 0 ? "" : prefix[copy], copy < 0 ? "" : ".", t->name);
          float *data = copy < 0 ? p->params + at : p->state + (size_t)copy * p->numel + at;
          int rc = fn(ctx, m, i, name, data);
          if (rc) return rc;
        }
      }
    }
  }
  return 0;
}

static int add_tensor(void *ctx, const tr_model *m, int index, const char *name, float *data) {
  const tr_tensor_info *t = tr_model_tensor(m, index);
  return tr_checkpoint_writer_add(ctx, name, TR_DTYPE_F32, t->ndim, t->shape, data);
}

/* A member's part of a split tensor (tensor parallelism) is read from the whole one the
 * checkpoint holds, so that a checkpoint resumes into any layout. */
static int read_tensor(void *ctx, const tr_model *m, int index, const char *name, float *data) {
  const tr_tensor_info *t = tr_model_tensor(m, index);
  const tr_tensor_part part = tr_model_tensor_part(m, index);
  if (part.parts == 0) return tr_checkpoint_read(ctx, name, TR_DTYPE_F32, t->ndim, t->shape, data);
  const size_t numel = (size_t)part.whole[0] * (size_t)(t->ndim > 1 ? part.whole[1] : 1);
  float *whole = malloc(numel * sizeof *whole);
  if (whole == NULL) return TR_ENOMEM;
  const int rc = tr_checkpoint_read(ctx, name, TR_DTYPE_F32, t->ndim, part.whole, whole);
  if (rc == 0) tr_tensor_part_copy(&part, whole, data, 0);
  free(whole);
  return rc;
}

/* A part of layers [first, end) at `offset`, `numel` elements, holding optimizer state of
 * `copies` × elements [so, so + sn), with zeroed host buffers (padding stays 0). */
static int part_new(tr__part *p, const tr_stage_info *info, int copies, size_t so, size_t sn,
                    bool params) {
  *p = (tr__part){.first = info->first, .end = info->end, .offset = info->offset,
                  .numel = info->numel, .shard_offset = so, .shard_numel = sn,
                  .state_numel = (size_t)copies * sn};
  p->params = params ? calloc(info->numel ? info->numel : 1, sizeof *p->params) : NULL;
  p->state = calloc(p->state_numel ? p->state_numel : 1, sizeof *p->state);
  if ((p->params || !params) && p->state) return 0;
  tr__part_free(p);
  return TR_ENOMEM;
}

static int copies_of(tr_optim_kind kind) { return kind->state_copies; }

void tr__part_free(tr__part *p) {
  free(p->params);
  free(p->state);
  free(p->extra);
  p->params = p->state = p->extra = NULL;
  p->extra_copies = 0;
}

int tr__stage_snapshot(tr_stage *st, tr__part *p, bool params) {
  const tr_stage_info *info = tr_stage_info_of(st);
  int rc = part_new(p, info, copies_of(tr_stage_optim(st)->kind), info->shard_offset,
                    info->shard_numel, params);
  if (rc) return rc;
  if ((params && (rc = tr_stage_download(st, TR_STAGE_PARAMS, p->params))) ||
      (p->state_numel && (rc = tr_stage_download(st, TR_STAGE_OPT_STATE, p->state))) ||
      (rc = tr_stream_synchronize(tr_stage_stream(st))))
    tr__part_free(p);
  return rc;
}

int tr__part_merge(tr__part *whole, tr__part *part, tr_optim_kind kind) {
  const int copies = copies_of(kind);
  const size_t n = part->numel;
  if (!whole->params && !whole->state) {
    if (part->params && part->shard_offset == 0 && part->shard_numel == n) {
      *whole = *part; /* the whole stage in one part: taken over */
      part->params = part->state = part->extra = NULL;
      return 0;
    }
    const tr_stage_info shape = {.first = part->first, .end = part->end,
                                 .offset = part->offset, .numel = n};
    int rc = part_new(whole, &shape, copies, 0, n, true);
    if (rc) return rc;
  }
  TR_ASSERT(whole->first == part->first && whole->numel == n &&
            part->shard_offset + part->shard_numel <= n &&
            part->state_numel == (size_t)copies * part->shard_numel);
  TR_ASSERT(part->extra_copies == 0 && part->replica == whole->replica); /* shards: no extras */
  if (part->params) memcpy(whole->params, part->params, n * sizeof *whole->params);
  for (int k = 0; k < copies; k++) /* state: copy k of the shard, at its place in copy k */
    memcpy(whole->state + (size_t)k * n + part->shard_offset,
           part->state + (size_t)k * part->shard_numel, part->shard_numel * sizeof(float));
  tr__part_free(part);
  return 0;
}

/* The other replicas' parts (parts [pieces, nparts): replica r's stages, each replica in
 * turn, local SGD's) under "replica<r>.", then the policies' copies of every part. */
static void add_others(const tr__run *run, tr_checkpoint_writer *w, const tr__part *parts,
                       int nparts) {
  const tr_job_config *c = &run->c;
  const int pieces = tr__pieces(run);
  for (int first = pieces; first + pieces <= nparts; first += pieces) {
    char lead[24];
    snprintf(lead, sizeof lead, "replica%d", parts[first].replica);
    each_tensor(c->model, c->optim.kind, parts + first, pieces, lead, add_tensor, w);
  }
  for (const tr__part *p = parts; p < parts + nparts; p++)
    for (int k = 0; k < p->extra_copies; k++) {
      tr__part q = {.first = p->first, .end = p->end, .offset = p->offset, .numel = p->numel,
                    .params = p->extra + (size_t)k * p->numel};
      each_tensor(c->model, NULL, &q, 1, p->extra_names[k], add_tensor, w);
    }
}

/* The whole checkpoint of `step` from its parts, as a writer (NULL: out of memory). */
static tr_checkpoint_writer *writer_of(const tr__run *run, int64_t step, const tr__part *parts,
                                       int nparts) {
  const tr_job_config *c = &run->c;
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  if (w == NULL) return NULL;
  const tr_optim_config *o = &c->optim;
  uint64_t rng[2] = {c->seed, (uint64_t)step};
  const int pieces = tr__pieces(run);
  each_tensor(c->model, o->kind, parts, nparts < pieces ? nparts : pieces, "", add_tensor, w);
  add_others(run, w, parts, nparts);
  tr_checkpoint_writer_put(w, "format", TR__CHECKPOINT_FORMAT);
  tr_checkpoint_writer_put(w, "model", tr_model_name(c->model));
  tr_checkpoint_writer_put_u64(w, "step", (uint64_t)step);
  tr_checkpoint_writer_put_u64(w, "batch", (uint64_t)c->global_batch);
  tr_checkpoint_writer_put_u64s(w, "rng", rng, 2); /* data: a function of (seed, step) */
  tr_checkpoint_writer_put(w, "optimizer", tr_optim_kind_name(o->kind));
  for (size_t i = 0; i < sizeof hypers / sizeof *hypers; i++) {
    if (!hyper_applies(&hypers[i], o->kind)) continue;
    char v[32];
    float x;
    memcpy(&x, (const char *)o + hypers[i].at, sizeof x);
    snprintf(v, sizeof v, "%.9g", (double)x);
    tr_checkpoint_writer_put(w, hypers[i].key, v);
  }
  tr_checkpoint_writer_put(w, "strategy", run->strategy);
  return w;
}

int tr__checkpoint_write(const tr__run *run, tr__file_output *out, int64_t step,
                         const tr__part *parts, int nparts, unsigned due, void **image,
                         size_t *image_size, char *err, size_t err_size) {
  tr__part wholes[TR__MAX_STAGES] = {{0}}; /* split members' parts joined (tensor_group.h) */
  if (run->member_models && tr__tensor_join(run, parts, wholes)) {
    snprintf(err, err_size, "the checkpoint of step %lld: out of memory", (long long)step);
    return TR_ENOMEM;
  }
  if (run->member_models) parts = wholes, nparts = tr__pieces(run);
  tr_checkpoint_writer *w = writer_of(run, step, parts, nparts);
  if (w == NULL) {
    for (int k = 0; k < TR__MAX_STAGES; k++) tr__part_free(&wholes[k]);
    snprintf(err, err_size, "the checkpoint of step %lld: out of memory", (long long)step);
    return TR_ENOMEM;
  }
  int rc = 0;
  char content[64];
  snprintf(content, sizeof content, "the checkpoint of step %lld", (long long)step);
  if ((due & TR__DUE_CHECKPOINT) && (rc = tr__checkpoint_writer_save_to(w, out, content)))
    snprintf(err, err_size, "%s", tr_checkpoint_writer_error(w));
  else if ((due & TR__DUE_PARAMS) && (rc = tr_checkpoint_writer_bytes(w, image, image_size)))
    snprintf(err, err_size, "the parameters of step %lld for observers: %s", (long long)step,
             tr_checkpoint_writer_error(w));
  tr_checkpoint_writer_free(w);
  for (int k = 0; k < TR__MAX_STAGES; k++) tr__part_free(&wholes[k]); /* read by the save */
  return rc;
}

/* The first element of `t` (float32) that is not finite, or -1. */
static int64_t first_nonfinite(const tr_checkpoint_tensor *t) {
  const unsigned char *p = t->data;
  for (size_t i = 0; i < t->nbytes / 4; i++) {
    uint32_t u;
    memcpy(&u, p + 4 * i, 4); /* a file of another writer may not align its tensors */
    if ((u & 0x7f800000u) == 0x7f800000u) return (int64_t)i;
  }
  return -1;
}

/* The first element of `t` (float32) below zero, or -1. */
static int64_t first_negative(const tr_checkpoint_tensor *t) {
  const unsigned char *p = t->data;
  for (size_t i = 0; i < t->nbytes / 4; i++) {
    float v;
    memcpy(&v, p + 4 * i, 4);
    if (v < 0) return (int64_t)i;
  }
  return -1;
}

/* The rule state copy `name` of `kind` obeys, if it is never negative; else NULL. */
static const char *nonneg_rule(tr_optim_kind kind, const char *name) {
  for (size_t i = 0; i < sizeof nonneg / sizeof *nonneg; i++)
    if (nonneg[i].kind == kind && !strcmp(nonneg[i].state, name)) return nonneg[i].rule;
  return NULL;
}

/* The kind's hyperparameters the metadata holds, each within its rule (absent: not checked,
 * as checkpoints written before they were kept hold only lr). */
static int check_hypers(tr_checkpoint *ck, const char *path, tr_optim_kind kind, char *err,
                        size_t n) {
  tr_optim_config o = {0}; /* what is absent, 0, passes every rule */
  const char *text[sizeof hypers / sizeof *hypers] = {0};
  for (size_t i = 0; i < sizeof hypers / sizeof *hypers; i++) {
    const hyper *h = &hypers[i];
    const char *v = text[i] = hyper_applies(h, kind) ? tr_checkpoint_meta(ck, h->key) : NULL;
    if (v == NULL) continue;
    char *end;
    const float x = strtof(v, &end);
    if (end == v || *end)
      return tr_errorf(err, n, TR_EFORMAT, "%s: metadata '%s' is \"%.40s\": not a number",
                       path, h->key, v);
    memcpy((char *)&o + h->at, &x, sizeof x);
  }
  const char *field = NULL;
  char why[256];
  if (tr_optim_config_check(&o, &field, why, sizeof why) == 0) return 0;
  for (size_t i = 0; i < sizeof hypers / sizeof *hypers; i++)
    if (!strcmp(hypers[i].key, field))
      return tr_errorf(err, n, TR_EFORMAT, "%s: metadata '%s' is \"%.40s\": %s", path, field,
                       text[i], tr__optim_rule(field));
  return tr_errorf(err, n, TR_EFORMAT, "%s: metadata: %s", path, why);
}

/* Every tensor the model and its optimizer state need: there, float32, of its shape, and
 * finite (a checkpoint of a run that diverged would train on NaN from its first step), and
 * the state that is never negative not negative. */
static int check_tensors(tr_checkpoint *ck, const char *path, const tr_model *m,
                         tr_optim_kind kind, char *err, size_t n) {
  const char *prefix[TR_OPTIM_MAX_STATE];
  const int copies = state_prefixes(kind, prefix);
  for (int copy = -1; copy < copies; copy++) {
    const char *rule = copy < 0 ? NULL : nonneg_rule(kind, prefix[copy]);
    for (int i = 0; i < tr_model_tensor_count(m); i++) {
      const tr_tensor_info *info = tr_model_tensor(m, i);
      char name[96];
      snprintf(name, sizeof name, "%s%s%s", copy < 0 ? "" : prefix[copy], copy < 0 ? "" : ".",
               info->name);
      const tr_checkpoint_tensor *t;
      if (tr_checkpoint_expect(ck, name, TR_DTYPE_F32, info->ndim, info->shape, &t))
        return tr_errorf(err, n, TR_EFORMAT, "%s", tr_checkpoint_error(ck));
      const int64_t bad = first_nonfinite(t);
      if (bad >= 0) {
        float v;
        memcpy(&v, (const unsigned char *)t->data + 4 * bad, 4);
        return tr_errorf(err, n, TR_EFORMAT,
                         "%s: tensor '%s' holds %s (element %lld of %zu): a run that diverged "
                         "cannot be resumed from it",
                         path, name, tr__nonfinite_name(v), (long long)bad,
                         t->nbytes / 4);
      }
      const int64_t neg = rule ? first_negative(t) : -1;
      if (neg >= 0) {
        float v;
        memcpy(&v, (const unsigned char *)t->data + 4 * neg, 4);
        return tr_errorf(err, n, TR_EFORMAT, "%s: tensor '%s' holds %g (element %lld of %zu): %s",
                         path, name, (double)v, (long long)neg, t->nbytes / 4, rule);
      }
    }
  }
  return 0;
}

int tr__checkpoint_check(tr_checkpoint *ck, const char *path, const tr_model *m,
                         tr_optim_kind kind, int64_t *step, char *err, size_t n) {
  const char *format = tr_checkpoint_meta(ck, "format");
  const char *model = tr_checkpoint_meta(ck, "model");
  const char *opt = tr_checkpoint_meta(ck, "optimizer");
  const char *want = tr_optim_kind_name(kind);
  uint64_t s;
  if (format == NULL || strncmp(format, "troupe checkpoint ", 18) != 0)
    return tr_errorf(err, n, TR_EFORMAT, "%s: not a troupe checkpoint (its metadata has no "
                     "'format: %s')", path, TR__CHECKPOINT_FORMAT);
  if (strcmp(format, TR__CHECKPOINT_FORMAT) != 0)
    return tr_errorf(err, n, TR_EFORMAT, "%s: format '%s', but this troupe reads '%s'", path,
                     format, TR__CHECKPOINT_FORMAT);
  if (model == NULL || strcmp(model, tr_model_name(m)) != 0)
    return tr_errorf(err, n, TR_EFORMAT, "%s: a checkpoint of model '%s', not '%s'", path,
                     model ? model : "(none)", tr_model_name(m));
  const char *step_text = tr_checkpoint_meta(ck, "step");
  if (step_text == NULL)
    return tr_errorf(err, n, TR_EFORMAT, "%s: metadata key 'step' is missing: the steps the run had taken", path);
  if (tr_checkpoint_meta_u64(ck, "step", &s))
    return tr_errorf(err, n, TR_EFORMAT, "%s: metadata 'step' is \"%.40s\": the steps a run has "
                     "taken are a whole number >= 0", path, step_text);
  if (s >= (uint64_t)TR_GRAPH_STEP_LIMIT)
    return tr_errorf(err, n, TR_EFORMAT, "%s: step %llu is out of range (a run's steps are "
                     "below 2^61)", path, (unsigned long long)s);
  if (!tr_optim_registered(kind))
    return tr_errorf(err, n, TR_EINVAL, "%s: this run's optimizer '%s' is not registered "
                     "(tr_optim_register): checkpoints find their optimizer by its name", path,
                     want);
  if (opt == NULL || strcmp(opt, want) != 0) {
    tr_optim_kind was;
    return tr_errorf(err, n, TR_EFORMAT, "%s: optimizer state of '%s'%s, but this run uses '%s'",
                     path, opt ? opt : "(none)",
                     opt && tr_optim_kind_parse(opt, &was) ? " (not a registered optimizer)" : "",
                     want);
  }
  int rc = check_hypers(ck, path, kind, err, n);
  if (rc == 0) rc = check_tensors(ck, path, m, kind, err, n);
  if (rc == 0) *step = (int64_t)s;
  return rc;
}

/* ---- what a run that failed leaves --------------------------------------------------------- */

void tr__checkpoint_mark(tr__ck_mark *m, const char *path) {
  struct stat sb;
  *m = (tr__ck_mark){0};
  /* the fine clock: a file written before it has an earlier time, whether the file system
   * takes its times from the coarse clock (a tick behind) or from the fine one; a file
   * written within a coarse tick after it may not have a later time, but is a new inode */
  clock_gettime(CLOCK_REALTIME, &m->start);
  if (path && stat(path, &sb) == 0) m->had = true, m->dev = sb.st_dev, m->ino = sb.st_ino;
}

/* Whether the file at `path` is a checkpoint this run wrote: every write renames a new file
 * in place (a new inode), after the mark (a later time). */
static bool written_since(const char *path, const tr__ck_mark *m) {
  struct stat sb;
  if (stat(path, &sb)) return false;
  const bool later = sb.st_mtim.tv_sec > m->start.tv_sec ||
                     (sb.st_mtim.tv_sec == m->start.tv_sec && sb.st_mtim.tv_nsec > m->start.tv_nsec);
  return !m->had || sb.st_dev != m->dev || sb.st_ino != m->ino || later;
}

/* The metadata 'step' of the checkpoint at `path`, from its header alone (a large model's
 * checkpoint is large): 0, or -1 where there is none to read. */
static int peek_step(const char *path, uint64_t *step) {
  struct stat sb; /* a device is not opened (a tape rewinds); no FIFO is waited on */
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return -1;
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char len8[8];
  uint64_t len = 0;
  int rc = -1;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && pread(fd, len8, 8, 0) == 8)
    for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
  char *text = len > 0 && len <= TR_CHECKPOINT_MAX_HEADER && len <= (uint64_t)sb.st_size - 8
                   ? malloc(len) : NULL;
  if (text && pread(fd, text, len, 8) == (ssize_t)len) {
    cJSON *h = cJSON_ParseWithLength(text, len);
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(h, "__metadata__"), "step"));
    char *end;
    errno = 0;
    if (v && *v >= '0' && *v <= '9') *step = strtoull(v, &end, 10);
    if (v && *v >= '0' && *v <= '9' && !*end && !errno) rc = 0;
    cJSON_Delete(h);
  }
  free(text);
  close(fd);
  return rc;
}

void tr__checkpoint_lost(const char *path, const tr__ck_mark *m, char *buf, size_t n) {
  const size_t len = strlen(buf);
  if (path == NULL || len >= n) return;
  uint64_t step;
  const bool readable = peek_step(path, &step) == 0;
  if (readable && written_since(path, m))
    snprintf(buf + len, n - len, "; the last checkpoint, %s, holds the state after step %llu: "
             "the steps done since are lost", path, (unsigned long long)step);
  else if (readable)
    snprintf(buf + len, n - len, "; no checkpoint was written to %s by this run: any steps it "
             "did are lost (the file holds step %llu, of an earlier run)", path,
             (unsigned long long)step);
  else
    snprintf(buf + len, n - len, "; no checkpoint was written to %s: any steps this run did "
             "are lost", path);
}

/* The stage's shard of the whole state of p, in place: copy k of it to k × shard_numel. */
static void keep_shard(tr__part *p, const tr_stage_info *info, int copies) {
  for (int k = 0; k < copies; k++)
    memmove(p->state + (size_t)k * info->shard_numel,
            p->state + (size_t)k * p->numel + info->shard_offset,
            info->shard_numel * sizeof *p->state);
}

void tr__checkpoint_differences(tr_checkpoint *ck, uint64_t batch, uint64_t seed,
                                const char *strategy, char *buf, size_t n) {
  uint64_t was_batch = batch, rng[2] = {seed, 0};
  const char *was_strategy = tr_checkpoint_meta(ck, "strategy");
  tr_checkpoint_meta_u64(ck, "batch", &was_batch); /* left as it is where absent */
  tr_checkpoint_meta_u64s(ck, "rng", rng, 2);
  size_t len = 0;
  buf[0] = 0;
  if (was_batch != batch && len < n)
    len += (size_t)snprintf(buf + len, n - len, "batch %llu (this run: %llu)",
                            (unsigned long long)was_batch, (unsigned long long)batch);
  if (rng[0] != seed && len < n)
    len += (size_t)snprintf(buf + len, n - len, "%sseed %llu (this run: %llu)", len ? ", " : "",
                            (unsigned long long)rng[0], (unsigned long long)seed);
  if (was_strategy && strcmp(was_strategy, strategy) != 0 && len < n)
    snprintf(buf + len, n - len, "%sstrategy %s (this run: %s)", len ? ", " : "", was_strategy,
             strategy);
}

/* The name of the stage's first tensor under `lead`. */
static void first_name(const tr_stage *st, const char *lead, char *name, size_t n) {
  int first, count;
  tr_model_layer_tensors(tr_stage_model(st), tr_stage_info_of(st)->first, &first, &count);
  snprintf(name, n, "%s%s%s", lead, lead[0] ? "." : "",
           count ? tr_model_tensor(tr_stage_model(st), first)->name : "");
}

bool tr__stage_saved_as(const tr_stage *st, const tr_checkpoint *ck, const char *lead) {
  char t0[160];
  first_name(st, lead, t0, sizeof t0);
  return tr_checkpoint_find(ck, t0) != NULL;
}

int tr__stage_read_extra(const tr_stage *st, const tr_checkpoint *from, const char *name,
                         float *host, char *err, size_t err_size) {
  const tr_stage_info *info = tr_stage_info_of(st);
  tr_checkpoint *ck;
  int rc = tr_checkpoint_view(from, &ck, err, err_size);
  if (rc) return rc;
  tr__part q = {.first = info->first, .end = info->end, .offset = info->offset,
                .numel = info->numel, .params = host};
  if ((rc = each_tensor(tr_stage_model(st), NULL, &q, 1, name, read_tensor, ck)))
    snprintf(err, err_size, "%s", tr_checkpoint_error(ck));
  tr_checkpoint_close(ck);
  return rc;
}

int tr__stage_load(tr_stage *st, const tr_checkpoint *from, char *err, size_t err_size) {
  return tr__stage_load_as(st, from, "", err, err_size);
}

int tr__stage_load_as(tr_stage *st, const tr_checkpoint *from, const char *lead, char *err,
                      size_t err_size) {
  const tr_stage_info *info = tr_stage_info_of(st);
  tr_checkpoint *ck; /* this thread's own view of the bytes every stage shares */
  int rc = tr_checkpoint_view(from, &ck, err, err_size);
  if (rc) return rc;
  tr__part p = {0};
  uint64_t step;
  const tr_optim_kind kind = tr_stage_optim(st)->kind;
  const int copies = copies_of(kind);
  if ((rc = tr_checkpoint_meta_u64(ck, "step", &step)) ||
      (rc = part_new(&p, info, copies, 0, info->numel, true)) ||
      (rc = each_tensor(tr_stage_model(st), kind, &p, 1, lead, read_tensor, ck))) {
    if (rc == TR_ENOMEM)
      snprintf(err, err_size, "resuming the stage: out of memory (%zu bytes asked for)",
               (size_t)(1 + copies) * info->numel * sizeof(float));
    else
      snprintf(err, err_size, "%s", tr_checkpoint_error(ck));
  } else {
    keep_shard(&p, info, copies);
    if ((rc = tr_stage_upload(st, TR_STAGE_PARAMS, p.params)) ||
        (info->state_numel && (rc = tr_stage_upload(st, TR_STAGE_OPT_STATE, p.state))) ||
        (rc = tr_stream_synchronize(tr_stage_stream(st))))
      snprintf(err, err_size, "copying a checkpoint to the device: %s", tr_stage_error(st));
    else
      tr_stage_set_step_count(st, (int64_t)step);
  }
  tr_checkpoint_close(ck);
  tr__part_free(&p);
  return rc;
}

/* ---- a part as bytes (tr_msg_codec): its arrays, which the coordinator takes over ------------
 * A shard of the optimizer state (ZeRO) may come without the parameters. */

static tr__codec_layout part_layout(const tr__part *p) {
  const size_t bytes[3] = {p->params ? tr__codec_floats(p->numel) : 0,
                           tr__codec_floats(p->state_numel),
                           tr__codec_floats((size_t)p->extra_copies * p->numel)};
  return tr__codec_lay(sizeof(tr__part_msg), bytes, 3);
}

static size_t part_size(const tr_msg *m) {
  return part_layout(&((const tr__part_msg *)m)->part).total;
}

static void part_put(const tr_msg *m, uint8_t *out) {
  const tr__part *p = &((const tr__part_msg *)m)->part;
  const tr__codec_layout l = part_layout(p);
  tr__codec_put_struct(m, out);
  if (l.bytes[0]) memcpy(out + l.at[0], p->params, l.bytes[0]);
  if (l.bytes[1]) memcpy(out + l.at[1], p->state, l.bytes[1]);
  if (l.bytes[2]) memcpy(out + l.at[2], p->extra, l.bytes[2]);
}

static tr_msg *part_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr__part_msg *pm = (tr__part_msg *)tr__codec_get_struct(type, in, n, sizeof *pm - sizeof(tr_msg));
  if (pm == NULL) return NULL;
  tr__part *p = &pm->part;
  const tr__codec_layout l = part_layout(p); /* params: the sender's pointer, or NULL */
  const bool params = p->params != NULL;
  const bool extra = p->extra_copies > 0;
  p->params = p->state = p->extra = NULL;
  if (l.total <= n && p->shard_offset <= p->numel && p->shard_numel <= p->numel - p->shard_offset &&
      p->extra_copies >= 0 && p->extra_copies <= TR__PART_EXTRAS) {
    p->params = params ? tr__codec_copy_out(in, l.at[0], l.bytes[0]) : NULL;
    p->state = tr__codec_copy_out(in, l.at[1], l.bytes[1]);
    p->extra = extra ? tr__codec_copy_out(in, l.at[2], l.bytes[2]) : NULL;
  }
  if ((params && !p->params) || !p->state || (extra && !p->extra)) {
    tr__part_free(p);
    tr_msg_free(pm);
    return NULL;
  }
  return &pm->hdr;
}

static void part_sent(tr_msg *m) { tr__part_free(&((tr__part_msg *)m)->part); }

static const tr_msg_codec part_codec = {.size = part_size, .put = part_put, .get = part_get,
                                        .sent = part_sent};
TR_MSGTYPE_DEFINE_CODEC(tr__part_type, tr__part_msg, &part_codec);
