/* layers.c — linear, activations, layernorm, embedding and the losses: each layer's forward
 * and backward as tr_device.h ops. The transformer's attention and block are in
 * attention.c. */
#include "tr_layers.h"

#include "models_impl.h"

/* ---- linear ------------------------------------------------------------------------------- */

static int linear_fwd(tr_stream *s, float *out, float beta, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC) {
  TR__TRY(tr_gemm(s, TR_OP_N, TR_OP_T, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC));
  if (bias) TR__TRY(tr_bias_add(s, out, bias, (size_t)N, (size_t)OC));
  return 0;
}

int tr_linear_forward(tr_stream *s, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC) {
  return linear_fwd(s, out, 0.0f, inp, weight, bias, N, C, OC);
}

int tr_linear_forward_add(tr_stream *s, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int C, int OC) {
  return linear_fwd(s, out, 1.0f, inp, weight, bias, N, C, OC);
}

int tr_linear_backward(tr_stream *s, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int N, int C,
                       int OC) {
  TR__TRY(tr_linear_backward_input(s, dinp, dout, weight, N, C, OC));
  return tr_linear_backward_weight(s, dweight, dbias, dout, inp, N, C, OC);
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

/* ---- activations ------------------------------------------------------------------------------ */

int tr_relu_forward(tr_stream *s, float *out, const float *inp, size_t n) {
  return tr_relu_fwd(s, out, inp, n);
}

int tr_relu_backward(tr_stream *s, float *dinp, const float *dout, const float *inp, size_t n) {
  return tr_relu_bwd(s, dinp, inp, dout, n);
}

int tr_gelu_forward(tr_stream *s, float *out, const float *inp, size_t n) {
  return tr_gelu_fwd(s, out, inp, n);
}

int tr_gelu_backward(tr_stream *s, float *dinp, const float *dout, const float *inp, size_t n) {
  return tr_gelu_bwd(s, dinp, inp, dout, n);
}

/* ---- layernorm --------------------------------------------------------------------------------- */

int tr_layernorm_forward(tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
                         const float *weight, const float *bias, int N, int C) {
  return tr_layernorm_fwd(s, out, mean, rstd, inp, weight, bias, (size_t)N, (size_t)C,
                          TR_LAYERNORM_EPS);
}

int tr_layernorm_backward(tr_stream *s, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight,
                          const float *mean, const float *rstd, int N, int C) {
  return tr_layernorm_bwd(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, (size_t)N,
                          (size_t)C);
}

/* ---- embedding ---------------------------------------------------------------------------------- */

int tr_embedding_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                         const float *wpe, int B, int T, int C, int V) {
  return tr_embedding_fwd(s, out, idx, wte, wpe, (size_t)B, (size_t)T, (size_t)C, (size_t)V);
}

int tr_embedding_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                          const int32_t *idx, int B, int T, int C, int V) {
  return tr_embedding_bwd(s, dwte, dwpe, dout, idx, (size_t)B, (size_t)T, (size_t)C, (size_t)V);
}

/* ---- losses -------------------------------------------------------------------------------------- */

int tr_mse_forward(tr_stream *s, float *loss, const float *pred, const float *target, size_t n,
                   float scale) {
  return tr_mse_fwd(s, loss, pred, target, n, scale);
}

int tr_mse_backward(tr_stream *s, float *dpred, const float *pred, const float *target,
                    size_t n, float scale) {
  return tr_mse_bwd(s, dpred, pred, target, n, scale);
}

int tr_crossentropy_forward(tr_stream *s, float *loss, float *probs, const float *logits,
                            const int32_t *targets, int N, int V, float scale) {
  return tr_crossentropy_fwd(s, loss, probs, logits, targets, (size_t)N, (size_t)V, scale);
}

int tr_crossentropy_backward(tr_stream *s, float *dlogits, const float *probs,
                             const int32_t *targets, int N, int V, float scale) {
  return tr_crossentropy_bwd(s, dlogits, probs, targets, (size_t)N, (size_t)V, scale);
}
