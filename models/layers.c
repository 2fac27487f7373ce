/* layers.c — the linear layer's forward and backward as tr_device.h ops. The transformer's
 * attention and block are in attention.c. */
#include "tr_layers.h"

/* ---- linear ------------------------------------------------------------------------------- */

static int linear_forward(tr_stream *s, float *out, float beta, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC, const tr_linear_bf16 *mp) {
  if (mp) {
    TR__TRY(tr_to_bf16(s, mp->inp, inp, (size_t)N * C));
    TR__TRY(tr_gemm_bf16(s, TR_OP_N, TR_OP_T, N, OC, C, 1.0f, mp->inp, C, mp->weight, C, beta,
                         out, OC));
  } else {
    TR__TRY(tr_gemm(s, TR_OP_N, TR_OP_T, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC));
  }
  if (bias) TR__TRY(tr_bias_add(s, out, bias, (size_t)N, (size_t)OC));
  return 0;
}

int tr_linear_forward(tr_stream *s, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC, const tr_linear_bf16 *mp) {
  return linear_forward(s, out, 0.0f, inp, weight, bias, N, C, OC, mp);
}

int tr_linear_forward_add(tr_stream *s, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int C, int OC, const tr_linear_bf16 *mp) {
  return linear_forward(s, out, 1.0f, inp, weight, bias, N, C, OC, mp);
}

int tr_linear_backward(tr_stream *s, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int N, int C,
                       int OC, const tr_linear_bf16 *mp) {
  /* dinp (N,C) = dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T @ inp (N,C) */
  if (mp == NULL) {
    TR__TRY(tr_linear_backward_input(s, dinp, dout, weight, N, C, OC));
    return tr_linear_backward_weight(s, dweight, dbias, dout, inp, N, C, OC);
  }
  TR__TRY(tr_to_bf16(s, mp->dout, dout, (size_t)N * OC));
  if (dinp)
    TR__TRY(tr_gemm_bf16(s, TR_OP_N, TR_OP_N, N, C, OC, 1.0f, mp->dout, OC, mp->weight, C, 0.0f,
                         dinp, C));
  TR__TRY(tr_gemm_bf16(s, TR_OP_T, TR_OP_N, OC, C, N, 1.0f, mp->dout, OC, mp->inp, C, 1.0f,
                       dweight, C));
  return dbias ? tr_bias_grad(s, dbias, dout, (size_t)N, (size_t)OC) : 0;
}

int tr_linear_backward_input(tr_stream *s, float *dinp, const float *dout, const float *weight,
                             int N, int C, int OC) {
  /* dinp (N,C) = dout (N,OC) @ weight (OC,C) */
  return dinp ? tr_gemm(s, TR_OP_N, TR_OP_N, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C)
              : 0;
}

int tr_linear_backward_weight(tr_stream *s, float *dweight, float *dbias, const float *dout,
                              const float *inp, int N, int C, int OC) {
  /* dweight (OC,C) += dout^T @ inp (N,C) */
  TR__TRY(tr_gemm(s, TR_OP_T, TR_OP_N, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C));
  return dbias ? tr_bias_grad(s, dbias, dout, (size_t)N, (size_t)OC) : 0;
}
