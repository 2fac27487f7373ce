/* train_agree.c — what the ranks of one job compare before any opens a device: a digest of
 * every option that changes the result (tr_train_options, tr_train.h), exchanged and
 * compared with rank 0's, a difference named by its option and its rank. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "job_impl.h"
#include "train_agree.h"

/* FNV-1a, for comparing what the ranks were given. */
static uint64_t digest(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t digest_str(uint64_t h, const char *s) {
  return s ? digest(h, s, strlen(s) + 1) : digest(h, "", 1);
}

/* What every rank of a job must have been given alike, and whether it got this far. */
typedef struct agreement {
  int failed; /* this rank could not read its options (its own message says why) */
  int observed; /* rank 0's counts: tr_train_options.observe (a terminal's, or not) */
  uint64_t model, run, layout, optim, async, checkpoint;
  uint64_t precision, nonfinite, data, data_on, watchdog, eval;
} agreement;

static uint64_t model_digest(const tr_model *m) {
  const size_t f[] = {(size_t)tr_model_layer_count(m), tr_model_numel(m),
                      tr_model_param_count(m),         tr_model_input_bytes(m),
                      tr_model_target_bytes(m),        (size_t)tr_model_batch(m)};
  uint64_t h = digest(digest_str(0xcbf29ce484222325ull, tr_model_name(m)), f, sizeof f);
  for (int l = 0; l < tr_model_layer_count(m); l++) {
    size_t span[2];
    tr_model_layer_span(m, l, &span[0], &span[1]);
    const double flops = tr_model_layer_flops(m, l);
    h = digest(digest(h, span, sizeof span), &flops, sizeof flops);
  }
  return h;
}

/* A file the ranks name: the same file (one machine: its device and inode) of the same size,
 * whatever path each rank reaches it by; a file a rank cannot see, by its path. */
static uint64_t file_digest(uint64_t h, const char *path) {
  struct stat st;
  if (path == NULL) return digest(h, "-", 1);
  if (stat(path, &st) != 0) return digest_str(h, path);
  const uint64_t f[] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size};
  return digest(h, f, sizeof f);
}

static agreement agreement_of(const tr_model *model, const tr_train_options *o) {
  const uint64_t h0 = 0xcbf29ce484222325ull;
  const tr_job_config *j = &o->job;
  const tr_layout_config *l = &j->layout;
  const tr_optim_config *op = &j->optim;
  const tr_async_config *as = &j->async;
  const double run_f[] = {(double)o->steps, o->seconds, (double)j->seed, j->global_batch,
                          o->deterministic};
  const int layout_f[] = {(int)o->strategy, l->replicas, l->stages, l->microbatches,
                          (int)l->schedule, l->ncuts, l->prefetch, j->zero, l->chunks,
                          j->memory.recompute};
  const float optim_f[] = {op->lr, op->momentum, op->weight_decay, op->beta1, op->beta2,
                           op->eps, op->clip, (float)op->nesterov};
  const float async_f[] = {(float)as->staleness, as->dc_lambda, (float)as->momentum_correction,
                           (float)as->staleness_lr, (float)as->pull_every, (float)as->hogwild};
  agreement a = {.model = model ? model_digest(model) : 0,
                 .run = digest(h0, run_f, sizeof run_f),
                 .layout = digest(h0, layout_f, sizeof layout_f),
                 .optim = digest_str(digest(h0, optim_f, sizeof optim_f),
                                     op->kind == TR_OPTIM_MODEL ? "" : tr_optim_kind_name(op->kind)),
                 .async = digest(h0, async_f, sizeof async_f),
                 .checkpoint = digest_str(digest_str(digest(h0, &j->checkpoint.every,
                                                            sizeof j->checkpoint.every),
                                                     j->checkpoint.path),
                                          j->checkpoint.resume)};
  if (l->cuts) a.layout = digest(a.layout, l->cuts, (size_t)l->ncuts * sizeof *l->cuts);
  const float local_f[] = {(float)j->local.sync_every, (float)j->local.warmup_sync,
                           (float)j->local.outer, j->local.outer_lr, j->local.outer_momentum};
  a.layout = digest(a.layout, local_f, sizeof local_f); /* local SGD's period and outer step */
  /* the stages of every rank send their parts at the observer's snapshots */
  a.checkpoint = digest(a.checkpoint, &o->snapshot_every, sizeof o->snapshot_every);
  /* What changes the result without changing the steps: a bf16 rank beside fp32 ones, or
   * one that skips a step its peers stop on, trains silently wrong (or hangs) */
  const int precision_f[] = {(int)j->precision.gemm, j->precision.tf32};
  const int watchdog_f[] = {o->watchdog_ms, j->watchdog_steps, j->watchdog_min_ms};
  a.precision = digest(h0, precision_f, sizeof precision_f);
  a.nonfinite = digest(h0, &j->on_nonfinite, sizeof j->on_nonfinite);
  a.data = file_digest(file_digest(h0, o->data), o->labels);
  a.data_on = digest(h0, &j->data_on, sizeof j->data_on);
  a.watchdog = digest(h0, watchdog_f, sizeof watchdog_f);
  /* the held-out samples: which files, which part of data, how many and how often */
  const double eval_f[] = {o->eval_split, (double)j->eval.samples, (double)j->eval.every,
                           j->eval.data != NULL};
  a.eval = file_digest(file_digest(digest(h0, eval_f, sizeof eval_f), o->eval_data),
                       o->eval_labels);
  return a;
}

/* Every rank compares what it was given with rank 0's before any opens a device; `rc` is
 * this rank's own verdict so far. A failure names the ranks that differ, or the first that
 * could not read its options. */
int tr__train_agree(const tr_model *model, const tr_train_options *o, int rc, bool *observed,
                    char *err, size_t n) {
  static const struct {
    size_t at;
    const char *what;
  } fields[] = {{offsetof(agreement, model), "model"},
                {offsetof(agreement, run), "steps, seconds, seed, batch or deterministic"},
                {offsetof(agreement, layout), "strategy or layout"},
                {offsetof(agreement, optim), "optim"},
                {offsetof(agreement, async), "async"},
                {offsetof(agreement, checkpoint), "checkpoint or snapshot_every"},
                {offsetof(agreement, precision), "precision"},
                {offsetof(agreement, nonfinite), "on-nonfinite"},
                {offsetof(agreement, data), "data or labels"},
                {offsetof(agreement, data_on), "data-on"},
                {offsetof(agreement, watchdog), "watchdog"},
                {offsetof(agreement, eval), "eval-data, eval-labels, eval-split, eval-every or "
                                            "eval-samples"}};
  tr_world *w = o->world;
  const int size = tr_world_size(w);
  agreement mine = agreement_of(model, o), *all = calloc((size_t)size, sizeof *all);
  mine.failed = rc != 0;
  mine.observed = o->observe != NULL;
  if (all == NULL || tr_world_allgather(w, &mine, sizeof mine, all)) {
    free(all);
    return rc ? rc : tr_errorf(err, n, TR_ESYS, "options: the ranks could not compare them");
  }
  char differ[512] = "";
  size_t len = 0;
  int failed = -1;
  *observed = all[0].observed;
  for (int r = 0; r < size; r++) {
    if (all[r].failed && failed < 0) failed = r;
    for (size_t f = 0; f < sizeof fields / sizeof *fields && r > 0; f++)
      if (len < sizeof differ &&
          memcmp((char *)&all[r] + fields[f].at, (char *)&all[0] + fields[f].at, sizeof(uint64_t)))
        len += (size_t)snprintf(differ + len, sizeof differ - len, "%s%s on rank %d",
                                len ? ", " : "", fields[f].what, r);
  }
  free(all);
  if (rc) return rc; /* this rank's own message */
  if (failed >= 0)
    return tr_errorf(err, n, TR_EINVAL, "rank %d could not start (its own message says why)",
                     failed);
  if (len)
    return tr_errorf(err, n, TR_EINVAL, "options: the %s differ from rank 0's: every rank of "
                     "a job must be given the same", differ);
  return 0;
}
