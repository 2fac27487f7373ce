/* data_gen.c — a generated source on a device (tr_data.h's tr_data_gen): the source's
 * tr_synth with its tables copied to the device's memory once, then tr_synth_fill. */
#include <stdio.h>
#include <stdlib.h>

#include "data_impl.h"

struct tr_data_gen {
  tr_device *dev;
  tr_synth src;     /* its pointers: the device's copies below */
  void *zig, *teacher, *corpus;
  void *scratch;    /* inputs a targets-only fill draws, ordered on scratch_stream */
  tr_stream *scratch_stream;
  size_t scratch_bytes;
};

/* The source's description for tr_synth_fill, or NULL: it cannot be generated. */
static const tr_synth *synth_of(const tr_data *d) { return d->ops->synth ? d->ops->synth(d) : NULL; }

int tr_data_can_generate(const tr_data *d) { return d && synth_of(d) != NULL; }

/* A copy of `bytes` of host memory `src` in the device's memory, or NULL for none. */
static int upload(tr_data_gen *g, const void *src, size_t bytes, void **out) {
  *out = NULL;
  if (!src || !bytes) return 0;
  tr_stream *s = tr_device_stream(g->dev);
  int rc = tr_device_alloc(g->dev, bytes, out);
  return rc ? rc : tr_memcpy(s, *out, src, bytes, TR_COPY_H2D);
}

int tr_data_gen_open(tr_data_gen **out, const tr_data *d, tr_device *dev, char *err,
                     size_t err_size) {
  if (!out || !d || !dev)
    return tr_errorf(err, err_size, TR_EINVAL, "tr_data_gen_open: %s is NULL",
                     !out ? "out" : !d ? "d" : "dev");
  *out = NULL;
  const tr_synth *host = synth_of(d);
  if (!host)
    return tr_errorf(err, err_size, TR_EINVAL, "data '%s': cannot be generated on a device "
                     "(only the synthetic sources and the arithmetic corpus can; files are "
                     "read by the loader)", d->name);
  tr_data_gen *g = calloc(1, sizeof *g);
  if (!g) return tr_errorf(err, err_size, TR_ENOMEM, "data '%s': out of memory", d->name);
  g->dev = dev;
  g->src = *host;
  const bool floats = tr__synth_floats(host->kind);
  int rc = upload(g, floats ? host->zig : NULL, sizeof *host->zig, &g->zig);
  if (!rc && host->teacher)
    rc = upload(g, host->teacher,
                tr__synth_teacher_floats(host->in, host->out) * sizeof *host->teacher, &g->teacher);
  if (!rc) rc = upload(g, host->corpus, host->corpus_size, &g->corpus);
  /* the host's copies are read until the copies have run: the source outlives them, but a
   * failure frees the device's memory, so wait for the stream once */
  if (!rc) rc = tr_stream_synchronize(tr_device_stream(dev));
  if (rc) {
    tr_errorf(err, err_size, rc, "data '%s': copying its tables to %s: %s", d->name,
              tr_device_name(dev), tr_device_error(dev));
    tr_data_gen_close(g);
    return rc;
  }
  g->src.zig = g->zig;
  g->src.teacher = g->teacher;
  g->src.corpus = g->corpus;
  *out = g;
  return 0;
}

int tr_data_gen_fill(tr_data_gen *g, tr_stream *s, uint64_t first, size_t count, void *x,
                     void *y) {
  TR__NOT_NULL(g);
  TR__NOT_NULL(s);
  if (!x && count) { /* targets only: the inputs they come from go to scratch */
    const size_t bytes = count * tr__synth_x_bytes(&g->src);
    if (bytes > g->scratch_bytes || s != g->scratch_stream) {
      int rc = g->scratch ? tr_stream_free(g->scratch_stream, g->scratch) : 0;
      g->scratch = NULL;
      g->scratch_bytes = 0;
      if (rc || (rc = tr_stream_alloc(s, bytes, &g->scratch))) return rc;
      g->scratch_stream = s;
      g->scratch_bytes = bytes;
    }
    x = g->scratch;
  }
  return tr_synth_fill(s, &g->src, first, count, x, y);
}

void tr_data_gen_close(tr_data_gen *g) {
  if (!g) return;
  void *mem[] = {g->zig, g->teacher, g->corpus};
  for (size_t i = 0; i < sizeof mem / sizeof *mem; i++)
    if (mem[i]) tr_device_free(g->dev, mem[i]);
  if (g->scratch) tr_stream_free(g->scratch_stream, g->scratch);
  free(g);
}
