/* npy.h — the header of a NumPy .npy file, parsed from memory (private to models/).
 *
 * A .npy file is "\x93NUMPY", a version byte pair (1.0: a 2-byte header length; 2.0 and 3.0:
 * 4 bytes), then a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
 * padded with spaces to a 16-byte boundary (NumPy pads to 64) and ended by '\n', then the
 * array's data in C order. tr__npy_parse checks all of it against the size of the buffer and
 * accepts only what the data sources read: little-endian float32 and int32, and uint8, in C
 * order, with at least one dimension. It reads nothing outside [p, p + size): it is fuzzed
 * (tests/fuzz/fuzz_npy.c).
 *
 *   tr__npy a;
 *   if (tr__npy_parse(&a, map, size, "x.npy", err, sizeof err)) ...; // "x.npy: dtype '>f8' ..."
 *   const uint8_t *data = map + a.offset;                            // a.bytes of a.dtype
 */
#ifndef TR_NPY_H
#define TR_NPY_H

#include <stddef.h>
#include <stdint.h>

enum { TR__NPY_MAX_DIMS = 8 };

typedef enum tr__npy_dtype {
  TR__NPY_F4, /* '<f4' */
  TR__NPY_I4, /* '<i4' */
  TR__NPY_U1  /* '|u1' */
} tr__npy_dtype;

typedef struct tr__npy {
  tr__npy_dtype dtype;
  int ndim;                           /* 1 .. TR__NPY_MAX_DIMS */
  uint64_t shape[TR__NPY_MAX_DIMS];
  size_t offset;                      /* of the data: a multiple of 16 */
  size_t bytes;                       /* of the data: exactly the rest of the buffer */
} tr__npy;

/* 0, or TR_EINVAL with err "<name>: what is wrong". */
int tr__npy_parse(tr__npy *out, const uint8_t *p, size_t size, const char *name, char *err,
                  size_t err_size);
/* The same from the first `have` bytes of a file of `file_size`: enough for the header,
 * whose data is then checked against the file's size. */
int tr__npy_parse_head(tr__npy *out, const uint8_t *p, size_t have, uint64_t file_size,
                       const char *name, char *err, size_t err_size);

/* "float32", "int32", "uint8"; bytes of one element. */
const char *tr__npy_dtype_name(tr__npy_dtype t);
size_t tr__npy_item(tr__npy_dtype t);

/* The shape as Python writes it: "(60000,)", "(3, 4)". */
void tr__npy_shape_str(const tr__npy *a, char *buf, size_t size);

#endif
