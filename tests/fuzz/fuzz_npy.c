/* fuzz_npy.c — libFuzzer target for the .npy header parser (models/npy.c): any bytes either
 * fail with a message naming the input, or give a header whose data starts on a 16-byte
 * boundary after the header and fills the rest of the input exactly, with a shape of 1 to 8
 * dimensions whose elements make up that many bytes (none when a dimension is 0). Built by
 * tests/models with clang; run with tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tr__npy a;
  char err[512];
  err[0] = '\0';
  if (tr__npy_parse(&a, data, size, "fuzz.npy", err, sizeof err)) {
    if (strncmp(err, "fuzz.npy: ", 10) != 0 || strlen(err) <= 10) abort();
    return 0;
  }
  if (a.ndim < 1 || a.ndim > TR__NPY_MAX_DIMS) abort();
  if (a.offset % 16 || a.offset < 10 || a.offset > size || a.offset + a.bytes != size) abort();
  if (data[a.offset - 1] != '\n') abort();
  uint64_t n = tr__npy_item(a.dtype);
  int zero = 0, over = 0;
  for (int i = 0; i < a.ndim; i++)
    if (!a.shape[i]) zero = 1;
    else over |= __builtin_mul_overflow(n, a.shape[i], &n);
  if (zero ? a.bytes != 0 : over || n != a.bytes) abort();
  char shape[TR__NPY_MAX_DIMS * 24 + 8];
  tr__npy_shape_str(&a, shape, sizeof shape);
  if (shape[0] != '(' || shape[strlen(shape) - 1] != ')') abort();
  if (!tr__npy_dtype_name(a.dtype)) abort();
  return 0;
}
