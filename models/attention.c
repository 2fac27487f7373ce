/* attention.c — causal multi-head self-attention and the pre-LN transformer block.
 *
 * Heads are never permuted into a (B,NH,T,hs) copy: head h of sequence b is a (T,hs) matrix
 * inside qkv with row stride 3C, so each product is a strided-batched GEMM over the heads of
 * one sequence (or over the sequences of one head, whichever loop is shorter). The full
 * (T,T) score matrix is computed; the causal softmax zeroes what lies above the diagonal. */
#include <math.h>
#include <string.h>

#include "tr_layers.h"

#include "layers/layers_impl.h"
#include "models_impl.h"

/* A matrix of each (b, h): its start advances by `bs` elements per sequence and `hs` per head;
 * float, or bf16 (the products' operands in mixed precision). */
typedef struct heads_mat {
  const void *p;
  int ld;
  int64_t bs, hs;
} heads_mat;

static const void *advance(const void *p, int64_t elems, int bf16) {
  return (const char *)p + elems * (int64_t)(bf16 ? sizeof(tr_bf16) : sizeof(float));
}

/* For every (b, h): C_bh = op(A_bh) op(B_bh) (beta 0), as B or NH batched GEMMs; A and B
 * float, or both bf16. */
static int heads_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, heads_mat a,
                      heads_mat b, int bf16, float *c, int ldc, int64_t c_bs, int64_t c_hs,
                      int B, int NH) {
  const int by_sequence = B <= NH; /* outer loop over the shorter dimension */
  const int outer = by_sequence ? B : NH, inner = by_sequence ? NH : B;
  for (int i = 0; i < outer; i++) {
    const int64_t ao = by_sequence ? i * a.bs : i * a.hs, as = by_sequence ? a.hs : a.bs;
    const int64_t bo = by_sequence ? i * b.bs : i * b.hs, bst = by_sequence ? b.hs : b.bs;
    const int64_t co = by_sequence ? i * c_bs : i * c_hs, cs = by_sequence ? c_hs : c_bs;
    const void *ap = advance(a.p, ao, bf16), *bp = advance(b.p, bo, bf16);
    TR__TRY(bf16 ? tr_gemm_batched_bf16(s, opa, opb, M, N, K, 1.0f, ap, a.ld, as, bp, b.ld, bst,
                                        0.0f, c + co, ldc, cs, inner)
                 : tr_gemm_batched(s, opa, opb, M, N, K, 1.0f, ap, a.ld, as, bp, b.ld, bst, 0.0f,
                                   c + co, ldc, cs, inner));
  }
  return 0;
}

/* q, k and v of qkv (B,T,3C) (float or bf16) as the heads' matrices. */
static void qkv_heads(const void *qkv, int bf16, int T, int C, int NH, heads_mat *q, heads_mat *k,
                      heads_mat *v) {
  const int hs = C / NH, C3 = 3 * C;
  const int64_t bs = (int64_t)T * C3;
  *q = (heads_mat){qkv, C3, bs, hs};
  *k = (heads_mat){advance(qkv, C, bf16), C3, bs, hs};
  *v = (heads_mat){advance(qkv, 2 * C, bf16), C3, bs, hs};
}

int tr_attention_forward(tr_stream *s, float *out, float *att, const float *qkv, int B, int T,
                         int C, int NH, const tr_attention_bf16 *mp) {
  TR_ASSERT(NH > 0 && C % NH == 0);
  const int hs = C / NH, bf16 = mp != NULL;
  const int64_t tt = (int64_t)T * T;
  heads_mat q, k, v;
  if (bf16) TR__TRY(tr_to_bf16(s, mp->qkv, qkv, (size_t)B * T * 3 * C));
  qkv_heads(bf16 ? (const void *)mp->qkv : qkv, bf16, T, C, NH, &q, &k, &v);
  /* preatt (T,T) = q (T,hs) @ k^T, then the causal softmax of scale * preatt in place */
  TR__TRY(heads_gemm(s, TR_OP_N, TR_OP_T, T, T, hs, q, k, bf16, att, T, NH * tt, tt, B, NH));
  TR__TRY(tr_attn_softmax_forward(s, att, att, (size_t)B * NH, (size_t)T, 1.0f / sqrtf((float)hs)));
  if (bf16) TR__TRY(tr_to_bf16(s, mp->att, att, (size_t)(B * NH * tt)));
  /* out (T,hs) = att (T,T) @ v (T,hs), into the head's columns of out (B,T,C) */
  const heads_mat a = {bf16 ? (const void *)mp->att : att, T, NH * tt, tt};
  return heads_gemm(s, TR_OP_N, TR_OP_N, T, hs, T, a, v, bf16, out, C, (int64_t)T * C, hs, B,
                    NH);
}

int tr_attention_backward(tr_stream *s, float *dqkv, float *datt, float *dpreatt,
                          const float *dout, const float *qkv, const float *att, int B, int T,
                          int C, int NH, const tr_attention_bf16 *mp) {
  TR_ASSERT(NH > 0 && C % NH == 0);
  const int hs = C / NH, C3 = 3 * C, bf16 = mp != NULL;
  const int64_t tt = (int64_t)T * T, qkv_bs = (int64_t)T * C3, out_bs = (int64_t)T * C;
  heads_mat q, k, v;
  qkv_heads(bf16 ? (const void *)mp->qkv : qkv, bf16, T, C, NH, &q, &k, &v);
  if (bf16) TR__TRY(tr_to_bf16(s, mp->grad, dout, (size_t)B * T * C));
  const heads_mat dy = {bf16 ? (const void *)mp->grad : dout, C, out_bs, hs},
                  a = {bf16 ? (const void *)mp->att : att, T, NH * tt, tt};
  /* datt (T,T) = dy (T,hs) @ v^T;  dv (T,hs) = att^T (T,T) @ dy */
  TR__TRY(heads_gemm(s, TR_OP_N, TR_OP_T, T, T, hs, dy, v, bf16, datt, T, NH * tt, tt, B, NH));
  TR__TRY(heads_gemm(s, TR_OP_T, TR_OP_N, T, hs, T, a, dy, bf16, dqkv + 2 * C, C3, qkv_bs, hs, B,
                     NH));
  TR__TRY(tr_attn_softmax_backward(s, dpreatt, att, datt, (size_t)B * NH, (size_t)T,
                              1.0f / sqrtf((float)hs)));
  /* dq (T,hs) = dpreatt (T,T) @ k;  dk (T,hs) = dpreatt^T @ q (dy's bf16 is done with) */
  if (bf16) TR__TRY(tr_to_bf16(s, mp->grad, dpreatt, (size_t)(B * NH * tt)));
  const heads_mat dp = {bf16 ? (const void *)mp->grad : dpreatt, T, NH * tt, tt};
  TR__TRY(heads_gemm(s, TR_OP_N, TR_OP_N, T, hs, T, dp, k, bf16, dqkv, C3, qkv_bs, hs, B, NH));
  return heads_gemm(s, TR_OP_T, TR_OP_N, T, hs, T, dp, q, bf16, dqkv + C, C3, qkv_bs, hs, B, NH);
}

/* ---- the block ------------------------------------------------------------------------------- */

/* Tensor parallelism (Megatron's split, tr__block_* in layers_impl.h): a member holds its heads
 * (attention `ca` = C / parts wide: its columns of q, k and v, and the projection's input
 * features) and d.H of the MLP's hidden units; d.NH and d.H are the member's, d.C the whole
 * width. The layernorms, the residual stream and the row-parallel projections' outputs (and
 * biases) are whole on every member. A block held whole is ca == C with no comm. */

/* Hands out aligned parts of one buffer (or only counts them when base is NULL). */
typedef struct carver {
  float *base;
  size_t used;
} carver;

static float *carve(carver *c, size_t n) {
  float *p = c->base ? c->base + c->used : NULL;
  c->used += tr__align_floats(n);
  return p;
}

size_t tr__block_acts_carve(tr_block_acts *a, float *base, tr_block_dims d, int ca) {
  const size_t N = (size_t)d.B * d.T, C = (size_t)d.C, H = (size_t)d.H, A = (size_t)ca;
  carver c = {base, 0};
  tr_block_acts t;
  t.out = carve(&c, N * C);
  t.ln1 = carve(&c, N * C);
  t.ln1_mean = carve(&c, N);
  t.ln1_rstd = carve(&c, N);
  t.qkv = carve(&c, N * 3 * A);
  t.att = carve(&c, (size_t)d.B * d.NH * d.T * d.T);
  t.atty = carve(&c, N * A);
  t.res1 = carve(&c, N * C);
  t.ln2 = carve(&c, N * C);
  t.ln2_mean = carve(&c, N);
  t.ln2_rstd = carve(&c, N);
  t.fch = carve(&c, N * H);
  t.fch_gelu = carve(&c, N * H);
  if (base) *a = t;
  return c.used;
}

size_t tr_block_acts_carve(tr_block_acts *a, float *base, tr_block_dims d) {
  return tr__block_acts_carve(a, base, d, d.C);
}

size_t tr__block_scratch_carve(tr_block_scratch *sc, float *base, tr_block_dims d, int ca) {
  const size_t N = (size_t)d.B * d.T, C = (size_t)d.C, A = (size_t)ca;
  const size_t att = (size_t)d.B * d.NH * d.T * d.T;
  carver c = {base, 0};
  tr_block_scratch t;
  t.dres1 = carve(&c, N * C);
  t.dln = carve(&c, N * C);
  t.datty = carve(&c, N * C); /* (N, ca) of a member, and dinp's stand-in (N, C) */
  t.dqkv = carve(&c, N * 3 * A);
  t.dfch = carve(&c, N * (size_t)d.H);
  t.datt = carve(&c, att);
  t.dpreatt = carve(&c, att);
  if (base) *sc = t;
  return c.used;
}

size_t tr_block_scratch_carve(tr_block_scratch *sc, float *base, tr_block_dims d) {
  return tr__block_scratch_carve(sc, base, d, d.C);
}

void tr__block_bf16_carve(tr_block_bf16 *h, tr_bf16 *act, tr_bf16 *scratch, tr_block_dims d,
                          int ca, size_t *act_elems, size_t *scratch_elems) {
  const size_t N = (size_t)d.B * d.T, C = (size_t)d.C, H = (size_t)d.H, A = (size_t)ca;
  const size_t att = (size_t)d.B * d.NH * d.T * d.T;
  tr_bf16 **parts[] = {&h->ln1, &h->attn.qkv, &h->attn.att, &h->atty, &h->ln2, &h->fch_gelu};
  const size_t sizes[] = {N * C, N * 3 * A, att, N * A, N * C, N * H};
  const int set = act && scratch;
  size_t at = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (set) *parts[i] = act + at;
    at += tr__align_bf16(sizes[i]);
  }
  *act_elems = at;
  /* one gradient at a time: dout, dfch, dres1, attention's dy and dpreatt, dqkv (a member's
   * dout and dres1, N x C, may be the widest) */
  size_t g = N * 3 * A > N * H ? N * 3 * A : N * H;
  if (N * C > g) g = N * C;
  *scratch_elems = tr__align_bf16(g > att ? g : att);
  if (set) h->grad = h->attn.grad = scratch;
}

void tr_block_bf16_carve(tr_block_bf16 *h, tr_bf16 *act, tr_bf16 *scratch, tr_block_dims d,
                         size_t *act_elems, size_t *scratch_elems) {
  tr__block_bf16_carve(h, act, scratch, d, d.C, act_elems, scratch_elems);
}

/* The block's four linears in bf16, or all NULL in fp32. */
typedef struct block_linears {
  tr_linear_bf16 qkv, proj, fc, fcproj;
  int on;
} block_linears;

static block_linears linears_of(const tr_block_bf16 *mp) {
  if (!mp) return (block_linears){.on = 0};
  return (block_linears){.qkv = {mp->qkvw, mp->ln1, mp->grad},
                         .proj = {mp->projw, mp->atty, mp->grad},
                         .fc = {mp->fcw, mp->ln2, mp->grad},
                         .fcproj = {mp->fcprojw, mp->fch_gelu, mp->grad},
                         .on = 1};
}
#define LIN(which) (lin.on ? &lin.which : NULL)

/* out (N,OC) = resid + x @ w^T + b, a projection onto the residual stream. Whole: the GEMM
 * adds onto a copy of the stream. Row-parallel (tc): x and w are the member's input features,
 * so its product is a partial sum: all-reduced (Megatron's g), then the stream and the bias,
 * which every member holds whole, added once. */
static int project_add(tr_stream *s, const tr_tensor_comm *tc, float *out, const float *resid,
                       const float *x, const float *w, const float *b, int N, int in, int OC,
                       const tr_linear_bf16 *mp) {
  const size_t n = (size_t)N * OC;
  if (!tc) {
    TR__TRY(tr_memcpy(s, out, resid, n * sizeof(float), TR_COPY_D2D));
    return tr_linear_forward_add(s, out, x, w, b, N, in, OC, mp);
  }
  TR__TRY(tr_linear_forward(s, out, x, w, NULL, N, in, OC, mp));
  TR__TRY(tc->all_reduce(tc, s, out, n, TR_REDUCE_SUM));
  TR__TRY(tr_add(s, out, out, resid, n));
  return tr_bias_add(s, out, b, (size_t)N, (size_t)OC);
}

int tr__block_forward(tr_stream *s, const tr_block_acts *a, const tr_block_params *p,
                      const float *inp, tr_block_dims d, int ca, const tr_tensor_comm *tc,
                      const tr_block_bf16 *mp) {
  const int N = d.B * d.T, C = d.C, H = d.H;
  const block_linears lin = linears_of(mp);
  TR__TRY(tr_layernorm_forward(s, a->ln1, a->ln1_mean, a->ln1_rstd, inp, p->ln1w, p->ln1b, N, C,
                           TR_LAYERNORM_EPS));
  /* column-parallel: the member's q, k and v columns, its heads' */
  TR__TRY(tr_linear_forward(s, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * ca, LIN(qkv)));
  TR__TRY(tr_attention_forward(s, a->atty, a->att, a->qkv, d.B, d.T, ca, d.NH,
                               mp ? &mp->attn : NULL));
  TR__TRY(project_add(s, tc, a->res1, inp, a->atty, p->projw, p->projb, N, ca, C, LIN(proj)));
  TR__TRY(tr_layernorm_forward(s, a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, p->ln2w, p->ln2b, N, C,
                           TR_LAYERNORM_EPS));
  TR__TRY(tr_linear_forward(s, a->fch, a->ln2, p->fcw, p->fcb, N, C, H, LIN(fc)));
  TR__TRY(tr_gelu_forward(s, a->fch_gelu, a->fch, (size_t)N * H));
  return project_add(s, tc, a->out, a->res1, a->fch_gelu, p->fcprojw, p->fcprojb, N, H, C,
                     LIN(fcproj));
}

int tr_block_forward(tr_stream *s, const tr_block_acts *a, const tr_block_params *p,
                     const float *inp, tr_block_dims d, const tr_block_bf16 *mp) {
  return tr__block_forward(s, a, p, inp, d, d.C, NULL, mp);
}

size_t tr__block_keep_carve(tr_block_keep *k, float *base, tr_block_dims d, int ca) {
  const size_t N = (size_t)d.B * d.T, C = (size_t)d.C;
  carver c = {base, 0};
  tr_block_keep t;
  t.dfch = carve(&c, N * (size_t)d.H);
  t.dres1 = carve(&c, N * C);
  t.dqkv = carve(&c, N * 3 * (size_t)ca);
  if (base) *k = t;
  return c.used;
}

size_t tr_block_keep_carve(tr_block_keep *k, float *base, tr_block_dims d) {
  return tr__block_keep_carve(k, base, d, d.C);
}

/* A linear's backward inside the block: whole (its weights' gradients too, the products in
 * bf16 with l), or its input's half alone. */
static int linear_back(tr_stream *s, bool whole, float *dx, float *dw, float *db, const float *dy,
                       const float *x, const float *w, int N, int in, int out,
                       const tr_linear_bf16 *l) {
  return whole ? tr_linear_backward(s, dx, dw, db, dy, x, w, N, in, out, l)
               : tr_linear_backward_input(s, dx, dy, w, N, in, out);
}

/* The gradient of a column-parallel linear's input is the members' partial sums (each from
 * its own output features): all-reduced (Megatron's f, backward). */
static int join_input_grad(tr_stream *s, const tr_tensor_comm *tc, float *dx, size_t n) {
  return tc ? tc->all_reduce(tc, s, dx, n, TR_REDUCE_SUM) : 0;
}

/* The block's backward: the MLP branch, then the attention branch, each product's weight
 * gradient beside its input's (whole) or left for tr_block_backward_weight, which reads the
 * gradients dfch, dres1 and dqkv kept here. Split (tc): two all-reduces, of the layernorms'
 * input gradients that the column-parallel fc and qkv leave in parts. */
static int block_backward(tr_stream *s, bool whole, float *dinp, const tr_block_params *g,
                          const tr_block_scratch *sc, float *dfch, float *dres1, float *dqkv,
                          const float *dout, const float *inp, const tr_block_params *p,
                          const tr_block_acts *a, tr_block_dims d, int ca,
                          const tr_tensor_comm *tc, const tr_block_bf16 *mp) {
  const int N = d.B * d.T, C = d.C, H = d.H;
  const size_t nc = (size_t)N * C;
  const block_linears lin = linears_of(mp);
  /* the MLP branch, back to the first residual: dres1 = dout + d(ln2 path) */
  TR__TRY(linear_back(s, whole, dfch, g->fcprojw, g->fcprojb, dout, a->fch_gelu, p->fcprojw, N,
                      H, C, LIN(fcproj)));
  TR__TRY(tr_gelu_backward(s, dfch, a->fch, dfch, (size_t)N * H));
  TR__TRY(linear_back(s, whole, sc->dln, g->fcw, g->fcb, dfch, a->ln2, p->fcw, N, C, H, LIN(fc)));
  TR__TRY(join_input_grad(s, tc, sc->dln, nc));
  TR__TRY(tr_layernorm_backward(s, dres1, g->ln2w, g->ln2b, sc->dln, a->res1, p->ln2w, a->ln2_mean,
                           a->ln2_rstd, N, C));
  TR__TRY(tr_add(s, dres1, dres1, dout, nc)); /* dout is not read after this */
  /* the attention branch, back to the input: dinp = dres1 + d(ln1 path) */
  TR__TRY(linear_back(s, whole, sc->datty, g->projw, g->projb, dres1, a->atty, p->projw, N, ca, C,
                      LIN(proj)));
  TR__TRY(tr_attention_backward(s, dqkv, sc->datt, sc->dpreatt, sc->datty, a->qkv, a->att, d.B,
                                d.T, ca, d.NH, mp ? &mp->attn : NULL));
  TR__TRY(linear_back(s, whole, sc->dln, g->qkvw, g->qkvb, dqkv, a->ln1, p->qkvw, N, C, 3 * ca,
                      LIN(qkv)));
  TR__TRY(join_input_grad(s, tc, sc->dln, nc));
  /* without dinp the layernorm still owes its parameter gradients; datty is free by now */
  float *dx = dinp ? dinp : sc->datty;
  TR__TRY(tr_layernorm_backward(s, dx, g->ln1w, g->ln1b, sc->dln, inp, p->ln1w, a->ln1_mean,
                           a->ln1_rstd, N, C));
  return dinp ? tr_add(s, dinp, dinp, dres1, nc) : 0;
}

int tr__block_backward_input(tr_stream *s, float *dinp, const tr_block_params *g,
                             const tr_block_scratch *sc, const tr_block_keep *k,
                             const float *dout, const float *inp, const tr_block_params *p,
                             const tr_block_acts *a, tr_block_dims d, int ca,
                             const tr_tensor_comm *tc) {
  return block_backward(s, false, dinp, g, sc, k->dfch, k->dres1, k->dqkv, dout, inp, p, a, d,
                        ca, tc, NULL);
}

int tr_block_backward_input(tr_stream *s, float *dinp, const tr_block_params *g,
                            const tr_block_scratch *sc, const tr_block_keep *k,
                            const float *dout, const float *inp, const tr_block_params *p,
                            const tr_block_acts *a, tr_block_dims d) {
  return tr__block_backward_input(s, dinp, g, sc, k, dout, inp, p, a, d, d.C, NULL);
}

/* The weight halves: of the MLP's output projection (from dout alone), and of the others
 * (from what the input half kept). No collective: each member's weights are its own. */
int tr__block_backward_weight(tr_stream *s, const tr_block_params *g, const tr_block_keep *k,
                              const float *dout, const tr_block_acts *a, tr_block_dims d,
                              int ca) {
  const int N = d.B * d.T, C = d.C, H = d.H;
  TR__TRY(tr_linear_backward_weight(s, g->fcprojw, g->fcprojb, dout, a->fch_gelu, N, H, C));
  TR__TRY(tr_linear_backward_weight(s, g->fcw, g->fcb, k->dfch, a->ln2, N, C, H));
  TR__TRY(tr_linear_backward_weight(s, g->projw, g->projb, k->dres1, a->atty, N, ca, C));
  return tr_linear_backward_weight(s, g->qkvw, g->qkvb, k->dqkv, a->ln1, N, C, 3 * ca);
}

int tr_block_backward_weight(tr_stream *s, const tr_block_params *g, const tr_block_keep *k,
                             const float *dout, const tr_block_acts *a, tr_block_dims d) {
  return tr__block_backward_weight(s, g, k, dout, a, d, d.C);
}

/* Both halves at once, the products in bf16 when mp is given. */
int tr__block_backward(tr_stream *s, float *dinp, const tr_block_params *g,
                       const tr_block_scratch *sc, const float *dout, const float *inp,
                       const tr_block_params *p, const tr_block_acts *a, tr_block_dims d, int ca,
                       const tr_tensor_comm *tc, const tr_block_bf16 *mp) {
  return block_backward(s, true, dinp, g, sc, sc->dfch, sc->dres1, sc->dqkv, dout, inp, p, a, d,
                        ca, tc, mp);
}

int tr_block_backward(tr_stream *s, float *dinp, const tr_block_params *g,
                      const tr_block_scratch *sc, const float *dout, const float *inp,
                      const tr_block_params *p, const tr_block_acts *a, tr_block_dims d,
                      const tr_block_bf16 *mp) {
  return tr__block_backward(s, dinp, g, sc, dout, inp, p, a, d, d.C, NULL, mp);
}
