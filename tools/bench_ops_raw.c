/* bench_ops_raw.c — the GEMM references of `troupe bench ops`: cblas_sgemm and oneDNN's
 * matmul called directly on the benchmark's buffers (dense, as cblas has them), one thread
 * each, and the roof above them all: one core's multiply-add peak at each vector width. */
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

/* ---- one core's multiply-add peak ------------------------------------------------------ */

/* The roof every GEMM row is under: fused multiply-adds on registers alone, 12 independent
 * sums (more than an FMA's latency times the units that issue them), no loads. `vec` is a
 * vector type of the width measured; the loop is timed in rounds of 2^20, the best of 5. */
#define PEAK_LOOP(vec, fma, set1, lanes)                                             \
  {                                                                                  \
    vec c0 = set1(0), c1 = set1(1), c2 = set1(2), c3 = set1(3), c4 = set1(4),        \
        c5 = set1(5), c6 = set1(6), c7 = set1(7), c8 = set1(8), c9 = set1(9),        \
        c10 = set1(10), c11 = set1(11), m = set1(0.999f), a = set1(1e-4f);            \
    double best = 1e30;                                                              \
    for (int round = 0; round < 5; round++) {                                        \
      const double t0 = tr_now_ns();                                                 \
      for (long i = 0; i < (1L << 20); i++) {                                        \
        c0 = fma(c0, m, a), c1 = fma(c1, m, a), c2 = fma(c2, m, a);                  \
        c3 = fma(c3, m, a), c4 = fma(c4, m, a), c5 = fma(c5, m, a);                  \
        c6 = fma(c6, m, a), c7 = fma(c7, m, a), c8 = fma(c8, m, a);                  \
        c9 = fma(c9, m, a), c10 = fma(c10, m, a), c11 = fma(c11, m, a);              \
        __asm__ volatile("" : "+x"(m)); /* kept a variable: the loop is not folded */ \
      }                                                                              \
      const double t = tr_now_ns() - t0;                                             \
      if (t < best) best = t;                                                        \
    }                                                                                \
    vec s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;             \
    __asm__ volatile("" : : "x"(s)); /* the sums are used */                         \
    return 12.0 * 2 * (lanes) * (1L << 20) / best;                                   \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static double peak_avx2(void)
    PEAK_LOOP(__m256, _mm256_fmadd_ps, _mm256_set1_ps, 8)
__attribute__((target("avx512f"))) static double peak_avx512(void)
    PEAK_LOOP(__m512, _mm512_fmadd_ps, _mm512_set1_ps, 16)

double raw_fma_peak(int bits) {
  __builtin_cpu_init();
  if (bits == 256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return peak_avx2();
  if (bits == 512 && __builtin_cpu_supports("avx512f")) return peak_avx512();
  return 0;
}
#else
double raw_fma_peak(int bits) { return (void)bits, 0; }
#endif
