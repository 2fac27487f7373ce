/* host_blas.h — the libraries behind the host backend's GEMM, one row of a table each:
 * oneDNN (host_onednn.c, where libdnnl was found at build time), OpenBLAS or any CBLAS
 * (host_openblas.c), troupe's own blocked GEMM on AVX2 (host_blocked.c), and the direct path
 * for small products (host_tiny.c). host_gemm.c
 * takes what no library does well (empty sums) and hands every other product to the row
 * that host_choose.h picks for its shape: by measurement (TROUPE_GEMM=auto), or the one
 * pinned.
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
  int bf16;          /* A and B are bfloat16; only for a row whose bf16 is not CONVERTED */
} tr__gemm_args;

/* What a library says of itself: its name and version ("oneDNN 2.7.3"), the instruction set
 * it dispatches to, and how it multiplies bf16 (CONVERTED: host_gemm.c widens for it). */
typedef struct tr__host_lib_info {
  char label[40];
  char isa[32];
  tr_bf16_support bf16;
} tr__host_lib_info;

/* One library. `name` is the word TROUPE_GEMM and the file of choices use. */
typedef struct tr__host_lib {
  const char *name;
  void (*describe)(tr__host_lib_info *out);
  /* the device's state (cached plans, scratch): NULL open for none */
  int (*open)(tr_device *d, void **state);
  void (*close)(void *state);
  /* 0, or a failure recorded on the stream's device */
  int (*gemm)(tr_stream *s, void *state, const tr__gemm_args *g);
  /* whether it may serve g at all (NULL: any product), and what it serves then, in words */
  int (*fits)(const tr__gemm_args *g);
  const char *fits_what;
  /* 1: a row of C's bits depend on the rows multiplied with it (OpenBLAS: on the row's place
   * in its kernel's blocks of rows), so a batch split into micro-batches or replicas would
   * not see the whole batch's activations. TROUPE_GEMM=auto gives such a library only the
   * products whose rows are not a batch's (op(A) = A transposed: weight gradients). */
  int rows_vary;
} tr__host_lib;

/* The libraries of this build (host_libs.c), in the order a tie goes to the first. */
enum { TR__HOST_LIBS_MAX = 5 };
extern const tr__host_lib *const tr__host_libs[];
extern const int tr__host_nlibs;

/* The rows, each in its own file. */
extern const tr__host_lib tr__host_onednn;    /* host_onednn.c, TR_BLAS_ONEDNN builds */
extern const tr__host_lib tr__host_onednn_bt; /* host_onednn_bt.c, the same builds */
extern const tr__host_lib tr__host_openblas; /* host_openblas.c */
extern const tr__host_lib tr__host_blocked;  /* host_blocked.c: troupe's own, AVX2 and FMA */
extern const tr__host_lib tr__host_tiny;     /* host_tiny.c */

/* host_libs.c: the device's state of library i of tr__host_libs, and what row i says of
 * itself (found once per process). */
void *tr__host_lib_state(const tr_device *d, int i);
const tr__host_lib_info *tr__host_lib_info_of(int i);

#endif
