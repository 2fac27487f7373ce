/* codec_figures.c — the end-of-run figures' messages (tr__done_type, tr__server_done_type,
 * job_impl.h) with their wire codecs.
 *
 * KEPT APART ON PURPOSE (issue 20): these messages are being reworked by the figures-once
 * change (one table of run metrics) at the same time as the codecs moved beside their
 * messages. Whoever merges both folds this file into the part that owns the figures'
 * messages then, and deletes it. Everything here is the codecs that used to be actors/
 * codec.c's table rows for these two types, unchanged. */
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "job_impl.h"

/* A stage's figures: the struct, then the host copy of its parameters (replica groups check
 * their consistency at the coordinator, which takes the copy over). */
static size_t done_size(const tr_msg *m) {
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  return tr__codec_lay(sizeof(tr__done_msg), &bytes, 1).total;
}

static void done_put(const tr_msg *m, uint8_t *out) {
  const tr__report *r = &((const tr__done_msg *)m)->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  tr__codec_put_struct(m, out);
  if (bytes) memcpy(out + tr__codec_lay(sizeof(tr__done_msg), &bytes, 1).at[0], r->params, bytes);
}

static void done_sent(tr_msg *m) { free((void *)((tr__done_msg *)m)->report.params); }

static tr_msg *done_get(const tr_msgtype *type, const uint8_t *in, size_t n) {
  tr__done_msg *d = (tr__done_msg *)tr__codec_get_struct(type, in, n, sizeof *d - sizeof(tr_msg));
  if (d == NULL) return NULL;
  tr__report *r = &d->report;
  const size_t bytes = r->params ? tr__codec_floats(r->numel) : 0;
  const tr__codec_layout l = tr__codec_lay(sizeof *d, &bytes, 1);
  r->params = NULL;
  if (bytes && (l.total > n || !(r->params = tr__codec_copy_out(in, l.at[0], bytes)))) {
    tr_msg_free(d);
    return NULL;
  }
  return &d->hdr;
}

static const tr_msg_codec done_codec = {.size = done_size, .put = done_put, .get = done_get,
                                        .sent = done_sent};
TR_MSGTYPE_DEFINE_CODEC(tr__done_type, tr__done_msg, &done_codec);
/* The server's figures: flat (it crosses the untyped report edge). */
TR_MSGTYPE_DEFINE_CODEC(tr__server_done_type, tr__server_done_msg, &tr_msg_codec_flat);
