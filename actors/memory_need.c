/* memory_need.c — a run's memory, found from its configuration before anything is
 * allocated (memory_need.h). Each stage's part is the plan tr_stage_open makes
 * (tr_stage_plan), opened as chunks.c opens it: the figures are those the run allocates. */
#include "memory_need.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_config.h"
#include "job_impl.h"
#include "tr_schedule.h"
#include "tr_stage.h"

/* Where a device's memory is: place 0 is the host's (its devices, and the loaders' rings);
 * a GPU is a place of its own, its logical devices together. */
static tr__memory_place *place_of(tr__memory_needs *out, const tr_device_info **gpu,
                                  const tr_device_info *di) {
  if (di->kind == TR_DEVICE_HOST) {
    tr__memory_place *h = &out->place[0];
    char first[sizeof h->name];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(h->name, " "), h->name);
    char *dots = strstr(first, "..");
    if (dots) *dots = 0; /* "host:0..host:3 together": host:0 */
    if (h->name[0] == 0) snprintf(h->name, sizeof h->name, "%s", di->name);
    else if (strcmp(first, di->name))
      snprintf(h->name, sizeof h->name, "%.24s..%.24s together", first, di->name);
    if (di->memory_free > h->has) h->has = di->memory_free;
    return h;
  }
  for (int i = 1; i < out->n; i++)
    if (tr_device_same_gpu(gpu[i], di)) return &out->place[i];
  tr__memory_place *p = &out->place[out->n];
  gpu[out->n++] = di;
  snprintf(p->name, sizeof p->name, "%s", di->name);
  p->has = di->memory_free;
  return p;
}

/* Stage s of replica r, its chunks opened as chunks.c opens them, added to place p. */
/* (A tensor group's member: its model's, with a comm that plans it.) */
static int add_stage(tr__memory_place *p, const tr_job_config *c, const tr_model *model,
                     const tr_tensor_comm *tensor, const tr_schedule *sc, const int *cuts,
                     int s, int r, int mb, char *err, size_t n) {
  const int P = c->layout.stages, R = c->layout.replicas;
  int held = 0;
  for (int k = 0; k < c->layout.chunks; k++) {
    const int piece = k * P + s;
    const tr_stage_config cfg = {
        .first = cuts[piece], .end = cuts[piece + 1], .batch = mb,
        .slots = tr_schedule_chunk_slots(sc, s, k), .recompute = c->memory.recompute,
        .split = c->layout.schedule == TR_SCHEDULE_ZB1, .global_batch = c->global_batch,
        .seed = c->seed, .optim = c->optim, .precision = c->precision, .graphs = c->graphs,
        .shard = c->zero && R > 1 && !c->async.enabled ? (tr_stage_shard){R, r}
                                                       : (tr_stage_shard){0, 0},
        .tensor = tensor};
    tr_stage_info in;
    size_t opt_scratch;
    const int rc = tr_stage_plan(model, &cfg, &in, &opt_scratch, err, n);
    if (rc) return rc;
    p->params += in.numel * sizeof(float);
    p->grads += in.numel * sizeof(float);
    p->state += in.state_numel * sizeof(float) + opt_scratch;
    if (c->local.sync_every > 0 && c->local.outer == TR_OUTER_NESTEROV) /* policy_local.c */
      p->state += 2 * in.numel * sizeof(float); /* DiLoCo's global parameters and velocity */
    p->activations += (uint64_t)in.slot_bytes * (uint64_t)in.slots + in.scratch_bytes +
                      in.work_bytes + in.params16_bytes;
    held += in.slots;
  }
  if (held > p->microbatches) p->microbatches = held;
  return 0;
}

int tr__memory_need(const tr_job_config *c, const tr_device_list *devices,
                    tr__memory_needs *out, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  out->n = 1;
  const int R = c->layout.replicas, P = c->async.enabled ? 1 : c->layout.stages;
  const int M = c->layout.microbatches, pieces = P * c->layout.chunks;
  const int mb = c->global_batch / (c->async.enabled ? 1 : R * M);
  int cuts[TR__MAX_STAGES + 1] = {0};
  if (pieces > TR__MAX_STAGES || R * P > tr_device_list_count(devices) || mb < 1)
    return 0; /* not a layout: the job's checks say why */
  cuts[pieces] = tr_model_layer_count(c->model);
  if (c->layout.cuts) memcpy(cuts + 1, c->layout.cuts, (size_t)(pieces - 1) * sizeof *cuts);
  else if (tr_model_balance(c->model, pieces, cuts)) return 0; /* tr_job_new says why */
  tr_schedule *sc = NULL;
  int rc = tr_schedule_new(&sc, &(tr_schedule_config){.kind = c->layout.schedule, .stages = P,
                                                      .microbatches = M,
                                                      .chunks = c->layout.chunks});
  if (rc) return 0; /* tr_job_new says why */
  const tr_device_info *gpu[TR__MEMORY_PLACES] = {0};
  const int prefetch = c->layout.prefetch > 0 ? c->layout.prefetch
                       : c->async.enabled     ? 2
                                              : tr__job_default_prefetch(c, mb);
  /* stage s of replica r, tensor member t, on device (r × P + s) × T + t (tr_job_add_stages) */
  const int T = c->layout.tensor > 1 && !c->async.enabled ? c->layout.tensor : 1;
  /* fewer devices than that: not a layout, the job's checks say why */
  int places = R * P * T <= tr_device_list_count(devices) ? R * P * T : 0;
  tr_model *member = NULL; /* a tensor group's members hold alike: member 0's part */
  const tr_tensor_comm planned = {.rank = 0, .size = T}; /* planning runs no collective */
  char why[256];
  if (T > 1 && tr_model_shard(c->model, 0, T, &member, why, sizeof why)) places = 0; /* the
                                                                            job says why */
  for (int k = 0; k < places && rc == 0; k++) {
    const int r = k / (P * T), s = k / T % P;
    const tr_device *d = tr_device_list_at(devices, k);
    if (tr_device_is_placeholder(d)) continue; /* another process's to count */
    tr__memory_place *p = place_of(out, gpu, tr_device_info_of(d));
    rc = add_stage(p, c, member ? member : c->model, member ? &planned : NULL, sc, cuts, s, r,
                   mb, err, err_size);
    if (s > 0) continue;
    /* the loader's ring: what the replica's stages do not make on their devices, inputs
     * also where only targets are filled (the source makes them from the inputs) */
    const bool first = tr__job_generates_on(c, d);
    const bool last =
        tr__job_generates_on(c, tr_device_list_at(devices, k + (P - 1) * T));
    const size_t sample = (first && last ? 0 : tr_model_input_bytes(c->model)) +
                          (last ? 0 : tr_model_target_bytes(c->model));
    out->place[0].loader += (uint64_t)prefetch * (uint64_t)mb * sample;
  }
  tr_schedule_free(sc);
  tr_model_free(member);
  out->place[0].has = tr__memory_host_available(out->place[0].has);
  tr__memory_place *host = &out->place[0];
  if (host->name[0] == 0) snprintf(host->name, sizeof host->name, "the host");
  for (int i = 0; i < out->n; i++) {
    tr__memory_place *p = &out->place[i];
    p->need = p->params + p->grads + p->state + p->activations + p->loader;
  }
  return rc;
}

/* /proc/meminfo's `key` in bytes, or 0. */
static uint64_t meminfo(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kb = 0;
  const size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1) break;
  if (f) fclose(f);
  return (uint64_t)kb * 1024;
}

/* A cgroup v2 limit of this process's (/sys/fs/cgroup/NAME), or UINT64_MAX for none. */
static uint64_t cgroup_limit(const char *name) {
  char path[64];
  snprintf(path, sizeof path, "/sys/fs/cgroup/%s", name);
  FILE *f = fopen(path, "r"); /* "max" where there is no limit */
  unsigned long long limit;
  const bool has = f && fscanf(f, "%llu", &limit) == 1;
  if (f) fclose(f);
  return has ? (uint64_t)limit : UINT64_MAX;
}

uint64_t tr__memory_host_available(uint64_t free) {
  const uint64_t avail = meminfo("MemAvailable"), swap = meminfo("SwapFree");
  const uint64_t memory = avail > free ? avail : free, mem_max = cgroup_limit("memory.max");
  if (memory == 0) return 0; /* not known */
  /* a run may page out to swap today: it fits, slowly, and is not refused */
  const uint64_t swap_max = cgroup_limit("memory.swap.max");
  const uint64_t in_swap = swap < swap_max ? swap : swap_max;
  return (memory < mem_max ? memory : mem_max) + in_swap;
}

/* The first place that needs more than `share` of what it has, or NULL. */
static const tr__memory_place *over(const tr__memory_needs *need, double share) {
  for (int i = 0; i < need->n; i++) {
    const tr__memory_place *p = &need->place[i];
    if (p->has && (double)p->need > share * (double)p->has) return p;
  }
  return NULL;
}

/* "1.5 GiB", "12.0 MiB", "640 bytes" */
static const char *size_text(char *buf, uint64_t b) {
  if (b >= (1ull << 30)) snprintf(buf, 24, "%.1f GiB", (double)b / (1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, 24, "%.1f MiB", (double)b / (1ull << 20));
  else if (b >= (1ull << 10)) snprintf(buf, 24, "%.1f KiB", (double)b / (1ull << 10));
  else snprintf(buf, 24, "%" PRIu64 " bytes", b);
  return buf;
}

/* Whether the job fits with micro-batches of `mb` samples (its global batch scaled) in
 * SUGGESTED_PERCENT of what each place has: the batch suggested leaves room for what the count
 * leaves out (a few buffers, the allocator's own). */
enum { SUGGESTED_PERCENT = 90 };
static int fits(const tr_job_config *c, const tr_device_list *devices, int mb) {
  tr_job_config t = *c;
  t.global_batch = mb * (c->async.enabled ? 1 : c->layout.replicas * c->layout.microbatches);
  tr__memory_needs need;
  char err[256];
  return tr__memory_need(&t, devices, &need, err, sizeof err) == 0 &&
         over(&need, SUGGESTED_PERCENT / 100.0) == NULL;
}

int tr__memory_check(const tr_job_config *c, const tr_device_list *devices, char *err,
                     size_t err_size) {
  tr__memory_needs need;
  int rc = tr__memory_need(c, devices, &need, err, err_size);
  if (rc) return rc;
  const tr__memory_place *p = over(&need, 1.0);
  if (p == NULL) return 0;
  /* the largest micro-batch that fits: need grows with it, so halve the gap */
  const int parts = c->async.enabled ? 1 : c->layout.replicas * c->layout.microbatches;
  int lo = 0, hi = c->global_batch / parts;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    *(fits(c, devices, mid) ? &lo : &hi) = mid;
  }
  char fit[160], a[24], b[24], s[24], x[24], l[24], t[24], h[24];
  if (lo > 0)
    snprintf(fit, sizeof fit, "the largest batch that fits with %d%% to spare is %d",
             100 - SUGGESTED_PERCENT, lo * parts);
  else
    snprintf(fit, sizeof fit, "no batch fits: give a layout with more stages (or recompute, "
             "or zero with more replicas)");
  return tr_errorf(err, err_size, TR_EINVAL,
                   TR__F("global_batch") " %d: needs %s on %s (parameters %s, gradients %s, "
                   "optimizer state %s, activations %s at %d micro-batch%s, loader buffers %s), "
                   "it has %s; %s",
                   c->global_batch, size_text(t, p->need), p->name, size_text(a, p->params),
                   size_text(b, p->grads), size_text(s, p->state), size_text(x, p->activations),
                   p->microbatches, p->microbatches == 1 ? "" : "es", size_text(l, p->loader),
                   size_text(h, p->has), fit);
}
