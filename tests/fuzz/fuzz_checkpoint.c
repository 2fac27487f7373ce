/* fuzz_checkpoint.c — libFuzzer target for the checkpoint reader: any bytes, opened as a
 * checkpoint from memory, either fail with a message or give a checkpoint whose every
 * tensor lies inside the input and whose every lookup works. Built by tests/models with
 * clang; run with tools/fuzz.sh. */
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tr_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tr_checkpoint *ck;
  char err[512];
  err[0] = '\0';
  if (tr_checkpoint_open_memory(&ck, data, size, "fuzz.safetensors", err, sizeof err)) {
    /* A refusal always says why, naming the input. */
    if (strncmp(err, "fuzz.safetensors: ", 18) != 0) abort();
    return 0;
  }
  /* Accepted: the tensors tile [8 + N, size) exactly and each is found by its name. */
  size_t total = 0;
  for (size_t i = 0; i < tr_checkpoint_count(ck); i++) {
    const tr_checkpoint_tensor *t = tr_checkpoint_tensor_at(ck, i);
    const uint8_t *p = t->data;
    if (p < data || p + t->nbytes > data + size) abort();
    if (tr_checkpoint_find(ck, t->name) != t) abort();
    if (tr_checkpoint_expect(ck, t->name, t->dtype, t->ndim, t->shape, NULL)) abort();
    volatile uint8_t sink = 0;
    for (size_t k = 0; k < t->nbytes; k += 64) sink ^= p[k]; /* touch it: ASan checks */
    if (t->nbytes) sink ^= p[t->nbytes - 1];
    (void)sink;
    total += t->nbytes;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | data[i];
  if (8 + n + total != size) abort();
  for (size_t i = 0; i < tr_checkpoint_meta_count(ck); i++) {
    const char *key, *value;
    tr_checkpoint_meta_at(ck, i, &key, &value);
    if (tr_checkpoint_meta(ck, key) == NULL) abort();
    uint64_t u[4];
    tr_checkpoint_meta_u64(ck, key, u);
    tr_checkpoint_meta_u64s(ck, key, u, 4);
    cJSON *j = NULL;
    if (tr_checkpoint_meta_json(ck, key, &j) == 0) cJSON_Delete(j);
  }
  tr_checkpoint_close(ck);
  return 0;
}
