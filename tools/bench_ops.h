/* bench_ops.h — what `troupe bench ops` (bench_ops.c) shares with its GEMM references
 * (bench_ops_raw.c): one device's context, and the libraries called directly. */
#ifndef TR_BENCH_OPS_H
#define TR_BENCH_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "troupe.h"

typedef struct raw_dnnl raw_dnnl;

typedef struct ctx {
  tr_device *dev;
  tr_stream *s;
  bool host;
  float *a, *b, *c, *d, *e, *f, *g; /* device buffers, n floats each */
  int32_t *idx;
  size_t n;
  /* GEMM */
  tr_op opa, opb;
  int M, N, K, batch;
  float beta;
  tr_bf16 *a16, *b16; /* a and b in bf16, for the bf16 rows */
  raw_dnnl *raw;      /* the shape's oneDNN reference */
  int status;
} ctx;

typedef void (*op_fn)(ctx *c);

static inline int lda_of(const ctx *c) { return c->opa == TR_OP_N ? c->K : c->M; }
static inline int ldb_of(const ctx *c) { return c->opb == TR_OP_N ? c->N : c->K; }

/* cblas_sgemm on the context's shape and buffers, each matrix of a batch in turn */
void gemm_raw(ctx *c);
/* oneDNN's matmul made once for the shape (NULL where oneDNN is not built, or it fails),
 * run, and closed */
raw_dnnl *raw_dnnl_open(const ctx *c, int bf16);
void gemm_raw_dnnl(ctx *c);
void raw_dnnl_close(raw_dnnl *r);
/* The references on one thread, as each host device computes */
void raw_one_thread(void);
/* One core's fp32 multiply-add peak in GFLOP/s with vectors of `bits` (256: AVX2 and FMA,
 * 512: AVX-512), measured on the calling thread; 0 where the CPU has no such vectors. */
double raw_fma_peak(int bits);

#endif
