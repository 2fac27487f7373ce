/* host_onednn.c — the host backend's GEMM on oneDNN's matmul primitive (Debian's libdnnl:
 * JIT kernels for AVX2, AVX-512, AVX512-BF16 and AMX, picked for the CPU that runs); the row
 * tr__host_onednn of host_blas.h's table, built where libdnnl is found.
 *
 * A primitive is made for one shape: transposes, sizes, leading dimensions, batch strides,
 * alpha (an output scale) and beta (a sum post-op), each as oneDNN memory strides, so the
 * operands are read where they lie and nothing is copied. Making one costs far more than
 * running it, so each device keeps the primitives it made in a table keyed by all of that,
 * with memory objects whose data pointers are set at each call. A training step meets the
 * same few dozen shapes again and again; a table that fills up is emptied and starts over.
 * oneDNN's process-wide cache of primitives is turned off: a device's are its own.
 *
 * Threads: Debian builds oneDNN on OpenMP (libgomp), which sizes a primitive's team from the
 * calling thread's omp_get_max_threads() when it is made and when it runs. Every call here
 * first sets that to 1 for the calling thread (a thread-local setting), so no OpenMP team is
 * ever started: each host device computes on its own thread alone. The scratchpad is the
 * device's own (user mode), so devices never share oneDNN's.
 *
 * A primitive runs alike every time for a shape, so results repeat bitwise; its sums are not
 * OpenBLAS's, so fp32 results differ from an OpenBLAS build in the last bits. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "host_blas.h"

/* libgomp's (oneDNN's runtime), declared here: omp.h is the compiler's, and clang's would be
 * another runtime's. */
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);

enum { TABLE = 256, PROBES = 16 };

/* What a primitive is made for: every field of the call but the pointers. */
typedef struct key {
  int32_t opa, opb, M, N, K, lda, ldb, ldc, batch, bf16;
  int64_t sa, sb, sc;
  float alpha, beta;
} key;

typedef struct plan {
  key k;
  dnnl_primitive_t prim; /* NULL: an empty entry */
  dnnl_memory_t a, b, c, pad;
  size_t pad_bytes;
} plan;

typedef struct onednn {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  plan *table; /* TABLE entries */
  int used;
} onednn;

static void one_thread(void) {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

/* ---- what oneDNN is on this machine ------------------------------------------------------ */

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "baseline";
  }
}

/* Whether oneDNN has a bf16 matmul here at all: on AVX2 alone it has none (and we convert
 * to fp32 instead); on AVX-512 without BF16 it emulates the instructions. */
static tr_bf16_support bf16_support(dnnl_engine_t engine, dnnl_cpu_isa_t isa) {
  const dnnl_dims_t dims = {16, 16};
  dnnl_memory_desc_t a, c;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_memory_desc_init_by_tag(&a, 2, dims, dnnl_bf16, dnnl_ab) ||
      dnnl_memory_desc_init_by_tag(&c, 2, dims, dnnl_f32, dnnl_ab) ||
      dnnl_matmul_desc_init(&md, &a, &a, NULL, &c) ||
      dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL))
    return TR_BF16_CONVERTED;
  const char *impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  const int ref = !strncmp(impl, "ref", 3); /* a reference loop: slower than converting */
  dnnl_primitive_desc_destroy(pd);
  if (ref) return TR_BF16_CONVERTED;
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? TR_BF16_NATIVE
                                                                               : TR_BF16_EMULATED;
}

/* The machine's, found once for the process. */
static pthread_once_t found_once = PTHREAD_ONCE_INIT;
static tr_bf16_support found_bf16;

/* Once per process: oneDNN's own primitive cache off (each device keeps the primitives it
 * makes in its table, so that no two device threads share a primitive, or its lock), and
 * what bf16 is here. */
static void find_bf16(void) {
  dnnl_engine_t engine;
  dnnl_set_primitive_cache_capacity(0);
  found_bf16 = TR_BF16_CONVERTED;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return;
  one_thread();
  found_bf16 = bf16_support(engine, dnnl_get_effective_cpu_isa());
  dnnl_engine_destroy(engine);
}

static void describe(tr__host_lib_info *out) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(out->label, sizeof out->label, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
  snprintf(out->isa, sizeof out->isa, "%s", isa_name(dnnl_get_effective_cpu_isa()));
  pthread_once(&found_once, find_bf16);
  out->bf16 = found_bf16;
}

/* ---- the device's table of plans ---------------------------------------------------------- */

static void plan_free(plan *p) {
  dnnl_memory_t mems[] = {p->a, p->b, p->c, p->pad};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  memset(p, 0, sizeof *p);
}

static void table_clear(onednn *b) {
  for (int i = 0; i < TABLE; i++)
    if (b->table[i].prim) plan_free(&b->table[i]);
  b->used = 0;
}

static void close_(void *state);

static int open_(tr_device *d, void **out) {
  *out = NULL;
  onednn *b = calloc(1, sizeof *b);
  if (b) b->table = calloc(TABLE, sizeof *b->table);
  if (!b || !b->table) {
    if (b) free(b->table);
    free(b);
    return tr__device_fail(d, TR_ENOMEM, "open: out of memory");
  }
  dnnl_status_t st = dnnl_engine_create(&b->engine, dnnl_cpu, 0);
  if (st == dnnl_success) st = dnnl_stream_create(&b->stream, b->engine, dnnl_stream_default_flags);
  if (st != dnnl_success) {
    close_(b);
    return tr__device_fail(d, TR_EDEVICE, "open: oneDNN's CPU engine: status %d", (int)st);
  }
  *out = b;
  return 0;
}

static void close_(void *state) {
  onednn *b = state;
  if (!b) return;
  if (b->table) table_clear(b);
  if (b->stream) dnnl_stream_destroy(b->stream);
  if (b->engine) dnnl_engine_destroy(b->engine);
  free(b->table);
  free(b);
}

static key key_of(const tr__gemm_args *g) {
  key k;
  memset(&k, 0, sizeof k); /* padding too: keys are compared as bytes */
  k.opa = g->opa, k.opb = g->opb, k.M = g->M, k.N = g->N, k.K = g->K;
  k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc, k.batch = g->batch, k.bf16 = g->bf16;
  if (g->batch > 1) k.sa = g->sa, k.sb = g->sb, k.sc = g->sc;
  k.alpha = g->alpha, k.beta = g->beta;
  return k;
}

static unsigned key_hash(const key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return (unsigned)(h ^ (h >> 32));
}

/* (rows, cols) of a row-major matrix with leading dimension ld, stored transposed or not,
 * as strides of dims {batch,} rows, cols. */
static int desc(dnnl_memory_desc_t *md, const key *k, int rows, int cols, int trans, int ld,
                int64_t stride, dnnl_data_type_t type) {
  const dnnl_dim_t r = trans ? 1 : ld, c = trans ? ld : 1;
  if (k->batch == 1) {
    const dnnl_dims_t dims = {rows, cols}, strides = {r, c};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides);
  }
  const dnnl_dims_t dims = {k->batch, rows, cols}, strides = {stride, r, c};
  return dnnl_memory_desc_init_by_strides(md, 3, dims, type, strides);
}

static dnnl_status_t plan_make(onednn *b, const key *k, plan *p) {
  const dnnl_data_type_t in = k->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a, w, c;
  dnnl_matmul_desc_t md;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t st;
  if ((st = desc(&a, k, k->M, k->K, k->opa == TR_OP_T, k->lda, k->sa, in)) ||
      (st = desc(&w, k, k->K, k->N, k->opb == TR_OP_T, k->ldb, k->sb, in)) ||
      (st = desc(&c, k, k->M, k->N, 0, k->ldc, k->sc, dnnl_f32)) ||
      (st = dnnl_matmul_desc_init(&md, &a, &w, NULL, &c)) ||
      (st = dnnl_primitive_attr_create(&attr)) ||
      (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)))
    goto done;
  if (k->alpha != 1.0f && (st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha)))
    goto done;
  if (k->beta != 0.0f && ((st = dnnl_post_ops_create(&ops)) ||
                          (st = dnnl_post_ops_append_sum(ops, k->beta)) ||
                          (st = dnnl_primitive_attr_set_post_ops(attr, ops))))
    goto done;
  if ((st = dnnl_primitive_desc_create(&pd, &md, attr, b->engine, NULL))) goto done;
  const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p->pad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
  if ((st = dnnl_primitive_create(&p->prim, pd)) ||
      (st = dnnl_memory_create(&p->a, &a, b->engine, DNNL_MEMORY_NONE)) ||
      (st = dnnl_memory_create(&p->b, &w, b->engine, DNNL_MEMORY_NONE)) ||
      (st = dnnl_memory_create(&p->c, &c, b->engine, DNNL_MEMORY_NONE)) ||
      (p->pad_bytes && (st = dnnl_memory_create(&p->pad, pad, b->engine, DNNL_MEMORY_NONE))))
    goto done;
  p->k = *k;
done:
  if (st != dnnl_success) plan_free(p);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

/* The plan for g: found in the table, or made and entered (the table emptied first when
 * its probes are full). */
static dnnl_status_t plan_for(onednn *b, const tr__gemm_args *g, plan **out) {
  const key k = key_of(g);
  const unsigned h = key_hash(&k);
  int i = 0; /* ends at the chain's first empty entry, or PROBES when it is full */
  for (; i < PROBES; i++) {
    plan *p = &b->table[(h + (unsigned)i) % TABLE];
    if (!p->prim) break;
    if (!memcmp(&p->k, &k, sizeof k)) return *out = p, dnnl_success;
  }
  if (i == PROBES || b->used >= TABLE * 3 / 4) table_clear(b), i = 0;
  plan *p = &b->table[(h + (unsigned)i) % TABLE];
  dnnl_status_t st = plan_make(b, &k, p);
  if (st == dnnl_success) b->used++, *out = p;
  return st;
}

static int gemm(tr_stream *s, void *state, const tr__gemm_args *g) {
  onednn *b = state;
  one_thread();
  plan *p = NULL;
  dnnl_status_t st = plan_for(b, g, &p);
  void *pad = NULL;
  if (st == dnnl_success && p->pad_bytes &&
      !(pad = tr__host_scratch(s, TR__SCRATCH_BLAS, p->pad_bytes)))
    return tr__device_fail(s->dev, TR_ENOMEM, "gemm: oneDNN scratchpad of %zu bytes: out of memory",
                           p->pad_bytes);
  if (st == dnnl_success) st = dnnl_memory_set_data_handle_v2(p->a, (void *)g->A, b->stream);
  if (st == dnnl_success) st = dnnl_memory_set_data_handle_v2(p->b, (void *)g->B, b->stream);
  if (st == dnnl_success) st = dnnl_memory_set_data_handle_v2(p->c, g->C, b->stream);
  if (st == dnnl_success && p->pad) st = dnnl_memory_set_data_handle_v2(p->pad, pad, b->stream);
  if (st == dnnl_success) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c},
                               {DNNL_ARG_SCRATCHPAD, p->pad}};
    st = dnnl_primitive_execute(p->prim, b->stream, p->pad ? 4 : 3, args);
  }
  if (st == dnnl_success) return 0;
  return tr__device_fail(s->dev, TR_EDEVICE, "gemm: oneDNN matmul %s%c%c %dx%dx%d (x%d): status %d",
                         g->bf16 ? "bf16 " : "", g->opa == TR_OP_T ? 'T' : 'N',
                         g->opb == TR_OP_T ? 'T' : 'N', g->M, g->N, g->K, g->batch, (int)st);
}

const tr__host_lib tr__host_onednn = {
    .name = "onednn", .describe = describe, .open = open_, .close = close_, .gemm = gemm};
