/* bench_ops_raw.c — the GEMM references of `troupe bench ops`: cblas_sgemm and oneDNN's
 * matmul called directly on the benchmark's buffers (dense, as cblas has them), one thread
 * each, and the CPU's instruction sets for the header. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_ops.h"

#ifdef TR_BLAS_ONEDNN
#include <oneapi/dnnl/dnnl.h>

extern void omp_set_num_threads(int n); /* libgomp's, oneDNN's runtime */
#endif

void raw_one_thread(void) {
#ifdef TR_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

void gemm_raw(ctx *c) {
  const int nb = c->batch ? c->batch : 1;
  for (int i = 0; i < nb; i++)
    cblas_sgemm(CblasRowMajor, c->opa == TR_OP_T ? CblasTrans : CblasNoTrans,
                c->opb == TR_OP_T ? CblasTrans : CblasNoTrans, c->M, c->N, c->K, 1.0f,
                c->a + (size_t)i * c->M * c->K, lda_of(c), c->b + (size_t)i * c->K * c->N, ldb_of(c),
                c->beta, c->c + (size_t)i * c->M * c->N, c->N);
}

#ifdef TR_BLAS_ONEDNN
/* The oneDNN reference: its matmul primitive made once for the shape, with the operands as
 * dense as the raw cblas call has them, on the same buffers, on one thread. */
struct raw_dnnl {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  dnnl_exec_arg_t args[3];
};

static dnnl_status_t raw_desc(dnnl_memory_desc_t *md, int batch, int rows, int cols, int trans,
                              dnnl_data_type_t type) {
  const dnnl_dim_t r = trans ? 1 : cols, c = trans ? rows : 1;
  if (!batch) return dnnl_memory_desc_init_by_strides(md, 2, (dnnl_dims_t){rows, cols}, type,
                                                      (dnnl_dims_t){r, c});
  return dnnl_memory_desc_init_by_strides(md, 3, (dnnl_dims_t){batch, rows, cols}, type,
                                          (dnnl_dims_t){(dnnl_dim_t)rows * cols, r, c});
}

void raw_dnnl_close(raw_dnnl *r) {
  if (!r) return;
  for (int i = 0; i < 3; i++)
    if (r->args[i].memory) dnnl_memory_destroy(r->args[i].memory);
  if (r->prim) dnnl_primitive_destroy(r->prim);
  if (r->stream) dnnl_stream_destroy(r->stream);
  if (r->engine) dnnl_engine_destroy(r->engine);
  free(r);
}

/* For c's shape, bf16 operands (a16, b16) or fp32 (a, b); NULL when oneDNN cannot. */
raw_dnnl *raw_dnnl_open(const ctx *c, int bf16) {
  omp_set_num_threads(1);
  raw_dnnl *r = calloc(1, sizeof *r);
  const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t md[3];
  dnnl_matmul_desc_t mm;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  void *ptr[3] = {bf16 ? (void *)c->a16 : c->a, bf16 ? (void *)c->b16 : c->b, c->c};
  const int args[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
  int ok = r && !dnnl_engine_create(&r->engine, dnnl_cpu, 0) &&
           !dnnl_stream_create(&r->stream, r->engine, dnnl_stream_default_flags) &&
           !raw_desc(&md[0], c->batch, c->M, c->K, c->opa == TR_OP_T, in) &&
           !raw_desc(&md[1], c->batch, c->K, c->N, c->opb == TR_OP_T, in) &&
           !raw_desc(&md[2], c->batch, c->M, c->N, 0, dnnl_f32) &&
           !dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) &&
           !dnnl_primitive_attr_create(&attr);
  if (ok && c->beta != 0.0f)
    ok = !dnnl_post_ops_create(&ops) && !dnnl_post_ops_append_sum(ops, c->beta) &&
         !dnnl_primitive_attr_set_post_ops(attr, ops);
  ok = ok && !dnnl_primitive_desc_create(&pd, &mm, attr, r->engine, NULL) &&
       !dnnl_primitive_create(&r->prim, pd);
  for (int i = 0; ok && i < 3; i++) {
    r->args[i].arg = args[i];
    ok = !dnnl_memory_create(&r->args[i].memory, &md[i], r->engine, ptr[i]);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) raw_dnnl_close(r), r = NULL;
  return r;
}

void gemm_raw_dnnl(ctx *c) {
  if (dnnl_primitive_execute(c->raw->prim, c->raw->stream, 3, c->raw->args)) c->status = TR_EDEVICE;
}
#else
raw_dnnl *raw_dnnl_open(const ctx *c, int bf16) {
  (void)c, (void)bf16;
  return NULL;
}
void raw_dnnl_close(raw_dnnl *r) { (void)r; }
void gemm_raw_dnnl(ctx *c) { (void)c; }
#endif

/* The instruction sets of the CPU that runs, as the GEMM libraries care about them. */

