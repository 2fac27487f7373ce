/* tr_layers.h — the layers of troupe's networks that are more than one device op, as free
 * functions with explicit forward and backward passes (llm.c style: no autograd engine):
 * linear, causal self-attention and the transformer block. Each is a short sequence of
 * tr_device.h ops on one stream over device pointers, so the same code runs on host devices
 * and GPUs; the layers that are one op (activations, layernorm, embedding, the losses) are
 * those ops themselves (tr_relu_forward, tr_layernorm_backward, tr_mse_forward, ...).
 *
 * Conventions: row-major float32; N is the number of rows (B for a batch of vectors, B*T
 * for a batch of sequences); shapes are in the comment above each function. Forward passes
 * write their outputs and whatever they save for backward. Backward passes OVERWRITE
 * activation gradients (dinp; pass NULL where it is not wanted, e.g. for a network's first
 * layer) and ADD to parameter gradients (dweight, dbias, ...), so the gradients of several
 * micro-batches add up until the caller zeroes them. GEMMs are shaped for row-major BLAS
 * with weights stored as PyTorch stores them, (out, in): nothing is ever transposed in
 * memory. A failing op's status is returned at once (its text: tr_device_error).
 *
 *   // a two-layer perceptron on stream s, batch of N rows
 *   tr_linear_forward(s, h, x, w1, b1, N, 10, 100);           // h (N,100)
 *   tr_relu_forward(s, a, h, (size_t)N * 100);                    // a (N,100)
 *   tr_linear_forward(s, y, a, w2, b2, N, 100, 1);            // y (N,1)
 *   tr_mse_forward(s, loss, y, target, N, 1.0f / N);
 *   tr_mse_backward(s, dy, y, target, N, 1.0f / N);
 *   tr_linear_backward(s, da, dw2, db2, dy, a, w2, N, 100, 1);
 *   tr_relu_backward(s, da, h, da, (size_t)N * 100);               // in place
 *   tr_linear_backward(s, NULL, dw1, db1, da, x, w1, N, 10, 100);
 *
 * The transformer block keeps its parameters, saved activations and backward scratch in
 * structs of pointers; the carve functions lay the latter two out in one buffer each.
 *
 * Mixed precision: each function takes its products' bf16 operands in a struct (NULL: all in
 * fp32). Weights come converted (a stage converts them once per step); a forward converts
 * the inputs of its products into the struct's buffers, where its backward reads them again,
 * and a backward converts each gradient once on its way into its two products. Products
 * take bf16 and sum in fp32 (tr_gemm_bf16); everything else stays fp32.
 */
#ifndef TR_LAYERS_H
#define TR_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_LAYERNORM_EPS 1e-5f /* PyTorch's default */

/* ---- linear ---------------------------------------------------------------------------- */

/* A linear layer's bf16 operands. */
typedef struct tr_linear_bf16 {
  const tr_bf16 *weight; /* (OC,C) */
  tr_bf16 *inp;          /* (N,C): forward writes inp here, backward reads it */
  tr_bf16 *dout;         /* (N,OC): backward's scratch */
} tr_linear_bf16;

/* inp (N,C), weight (OC,C), bias (OC) or NULL -> out (N,OC) = inp @ weight^T + bias */
TR_API int tr_linear_forward(tr_stream *s, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC, const tr_linear_bf16 *mp);
/* The same, added to what out holds: out (N,OC) += inp @ weight^T + bias (a residual). */
TR_API int tr_linear_forward_add(tr_stream *s, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int C, int OC, const tr_linear_bf16 *mp);
/* dout (N,OC), inp (N,C), weight (OC,C) -> dinp (N,C) (or NULL), dweight (OC,C) +=,
 * dbias (OC) += (NULL when the layer has no bias). mp: as forward left it. */
TR_API int tr_linear_backward(tr_stream *s, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int N, int C,
                       int OC, const tr_linear_bf16 *mp);
/* Its two halves in fp32, which a zero-bubble schedule runs apart (tr_layer_type.h): the
 * input's gradient dinp (N,C) = dout @ weight, then the parameters' dweight += dout^T @ inp,
 * dbias += the sum of dout's rows. tr_linear_backward without mp is the one, then the other. */
TR_API int tr_linear_backward_input(tr_stream *s, float *dinp, const float *dout, const float *weight,
                             int N, int C, int OC);
TR_API int tr_linear_backward_weight(tr_stream *s, float *dweight, float *dbias, const float *dout,
                              const float *inp, int N, int C, int OC);

/* ---- causal multi-head self-attention (the part between the two projections) -------------- */

/* Attention's bf16 operands: forward writes qkv and att here, backward reads them. */
typedef struct tr_attention_bf16 {
  tr_bf16 *qkv;  /* (B,T,3C) */
  tr_bf16 *att;  /* (B,NH,T,T) */
  tr_bf16 *grad; /* backward's scratch: max((B,T,C), (B,NH,T,T)) elements */
} tr_attention_bf16;

/* qkv (B,T,3C), each row [q | k | v] with head h in columns h*hs .. h*hs+hs-1 of each part
 * (hs = C/NH) -> att (B,NH,T,T) (the softmax weights, saved for backward), out (B,T,C) with
 * head h in columns h*hs..: out = softmax(q k^T / sqrt(hs), causal) v, head by head. The
 * heads are read and written in place through GEMM strides; C % NH == 0. */
TR_API int tr_attention_forward(tr_stream *s, float *out, float *att, const float *qkv, int B, int T,
                         int C, int NH, const tr_attention_bf16 *mp);
/* dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) -> dqkv (B,T,3C) (overwritten); datt and
 * dpreatt (B,NH,T,T) are scratch. */
TR_API int tr_attention_backward(tr_stream *s, float *dqkv, float *datt, float *dpreatt,
                          const float *dout, const float *qkv, const float *att, int B, int T,
                          int C, int NH, const tr_attention_bf16 *mp);

/* ---- the pre-LN transformer block -------------------------------------------------------
 * out = x + proj(attn(qkv(ln1(x)))) then out += fcproj(gelu(fc(ln2(.)))): x (B,T,C), NH heads,
 * an MLP of H hidden units (4C in GPT-2). */

typedef struct tr_block_dims {
  int B, T, C, NH, H;
} tr_block_dims;

/* The parameters, or their gradients (same shapes). */
typedef struct tr_block_params {
  float *ln1w, *ln1b;         /* (C), (C) */
  float *qkvw, *qkvb;         /* (3C,C), (3C) */
  float *projw, *projb;       /* (C,C), (C) */
  float *ln2w, *ln2b;         /* (C), (C) */
  float *fcw, *fcb;           /* (H,C), (H) */
  float *fcprojw, *fcprojb;   /* (C,H), (C) */
} tr_block_params;

/* What forward saves for backward, and its output. */
typedef struct tr_block_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
  float *qkv;                       /* (B,T,3C) */
  float *att;                       /* (B,NH,T,T) */
  float *atty;                      /* (B,T,C) attention output, before its projection */
  float *res1;                      /* (B,T,C) x + projection */
  float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C), (B,T), (B,T) */
  float *fch, *fch_gelu;            /* (B,T,H), (B,T,H) */
  float *out;                       /* (B,T,C) */
} tr_block_acts;

/* Backward's temporaries: shared by every block of the same dims, kept by no one. */
typedef struct tr_block_scratch {
  float *dres1, *dln, *datty;  /* (B,T,C) each */
  float *dqkv;                 /* (B,T,3C) */
  float *dfch;                 /* (B,T,H) */
  float *datt, *dpreatt;       /* (B,NH,T,T) each */
} tr_block_scratch;

/* What the input half of a split backward keeps for the weight half: the gradients of the
 * outputs of the three projections before the last (the last one's is the block's dout). */
typedef struct tr_block_keep {
  float *dfch;                 /* (B,T,H) of fc, after GELU */
  float *dres1;                /* (B,T,C) of proj: the first residual's */
  float *dqkv;                 /* (B,T,3C) of qkv */
} tr_block_keep;

/* Lay the activations / scratch / kept gradients out from `base` (64-byte aligned; each
 * part is too); return the floats they take. base NULL: only the size (the struct is left
 * untouched). The activations' output comes first: a->out == base. */
TR_API size_t tr_block_acts_carve(tr_block_acts *a, float *base, tr_block_dims d);
TR_API size_t tr_block_scratch_carve(tr_block_scratch *sc, float *base, tr_block_dims d);
TR_API size_t tr_block_keep_carve(tr_block_keep *k, float *base, tr_block_dims d);

/* The block's bf16 operands: its weights, the inputs of its products (forward writes them,
 * backward reads them), and backward's scratch, where one gradient at a time goes on its
 * way into a product (attention's too: attn.grad is grad). */
typedef struct tr_block_bf16 {
  const tr_bf16 *qkvw, *projw, *fcw, *fcprojw; /* (3C,C), (C,C), (H,C), (C,H) */
  tr_bf16 *ln1, *atty, *ln2, *fch_gelu;        /* (B,T,C) each but fch_gelu (B,T,H) */
  tr_attention_bf16 attn;                      /* qkv (B,T,3C), att (B,NH,T,T) */
  tr_bf16 *grad;
} tr_block_bf16;

/* Lays the bf16 inputs out from `act` and the scratch from `scratch` (64-byte aligned; either
 * NULL: sizes only, h is left untouched) and sets *act_elems and *scratch_elems to the bf16
 * elements each takes. The weights are the caller's to set. */
TR_API void tr_block_bf16_carve(tr_block_bf16 *h, tr_bf16 *act, tr_bf16 *scratch, tr_block_dims d,
                         size_t *act_elems, size_t *scratch_elems);

/* inp (B,T,C) -> a->out (B,T,C) and everything else in *a (and *mp) */
TR_API int tr_block_forward(tr_stream *s, const tr_block_acts *a, const tr_block_params *p,
                     const float *inp, tr_block_dims d, const tr_block_bf16 *mp);
/* dout (B,T,C) -> dinp (B,T,C) (or NULL), g += parameter gradients. dinp may equal dout. */
TR_API int tr_block_backward(tr_stream *s, float *dinp, const tr_block_params *g,
                      const tr_block_scratch *sc, const float *dout, const float *inp,
                      const tr_block_params *p, const tr_block_acts *a, tr_block_dims d,
                      const tr_block_bf16 *mp);
/* The same in two halves, in fp32 (tr_layer_type.h): the input's gradient, with the
 * layernorms' parameter gradients (one pass over the rows gives both) and the attention's
 * (it has no parameters), keeping in k what the four projections' weights need; later those
 * weights' gradients, from the same dout. dinp must not overlap dout here: the second half
 * reads it. */
TR_API int tr_block_backward_input(tr_stream *s, float *dinp, const tr_block_params *g,
                            const tr_block_scratch *sc, const tr_block_keep *k,
                            const float *dout, const float *inp, const tr_block_params *p,
                            const tr_block_acts *a, tr_block_dims d);
TR_API int tr_block_backward_weight(tr_stream *s, const tr_block_params *g, const tr_block_keep *k,
                             const float *dout, const tr_block_acts *a, tr_block_dims d);

#ifdef __cplusplus
}
#endif
#endif
