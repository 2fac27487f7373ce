/* host_blas.h — the library behind the host backend's GEMM: oneDNN (host_onednn.c, the
 * default) or OpenBLAS (host_openblas.c, -Dblas=openblas). host_gemm.c takes what the
 * library does poorly (tiny products, empty sums, bf16 a library cannot multiply) and hands
 * it the rest through one call.
 *
 * One thread per host device: every call computes on the calling thread alone, and never
 * starts threads (the parallelism comes from the devices, each on its own thread). */
#ifndef TR_HOST_BLAS_H
#define TR_HOST_BLAS_H

#include "host_impl.h"

/* Row-major C_i (M,N) = alpha op(A_i) op(B_i) + beta C_i for i < batch, A_i = A + i * sa and
 * so on (elements); the shapes and leading dimensions of tr_gemm. K > 0, alpha != 0. */
typedef struct tr__gemm_args {
  tr_op opa, opb;
  int M, N, K;
  float alpha, beta;
  const void *A, *B; /* float, or tr_bf16 when bf16 */
  float *C;
  int lda, ldb, ldc;
  int64_t sa, sb, sc;
  int batch;         /* >= 1 */
  int bf16;          /* A and B are bfloat16; only when info's bf16 is not CONVERTED */
} tr__gemm_args;

/* The library's state for one device (its own thread's): cached plans, scratch. */
typedef struct tr__host_blas tr__host_blas;

/* Fills what the library says of itself into the device's info: its name into `lib`
 * ("oneDNN 2.6.3"), info->isa (the instruction set it dispatches to) and info->bf16. */
void tr__host_blas_describe(tr_device_info *info, char *lib, size_t lib_size);
int tr__host_blas_open(tr_device *d, tr__host_blas **out);
void tr__host_blas_close(tr__host_blas *b);
/* The device's (host_dev.c). */
tr__host_blas *tr__host_blas_of(const tr_device *d);
/* 0, or a failure recorded on the stream's device. */
int tr__host_blas_gemm(tr_stream *s, tr__host_blas *b, const tr__gemm_args *g);

#endif
