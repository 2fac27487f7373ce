/* tr_ops.h — what a device computes: the ops on a stream (tr_device.h), GEMM and the kernels
 * the layers of a network need, the optimizers' updates, and a tensor-parallel member's part
 * of the vocabulary. Each is a request on a stream: queued (CUDA) or run at once by the
 * calling thread (host), complete for others once an event recorded after it has; each
 * returns 0, or a negative TR_E status with tr_device_error(device) saying why.
 *
 * Conventions (llm.c style shapes in the comments, row-major, float32 unless an
 * argument is a tr_bf16):
 *   - sizes may be 0 (nothing happens; reductions then write 0 or leave an accumulator),
 *     except the length of a row that must have one (layernorm's C, cross-entropy's V);
 *   - activation gradients (dinp) are overwritten; parameter gradients (dweight, dbias,
 *     dwte, dwpe) accumulate (+=), so gradients of micro-batches add up: zero them once per
 *     step with tr_memset;
 *   - `out` may equal `inp` (in place) for element-wise ops unless a comment says otherwise;
 *   - token indices are int32 and must lie in [0, V).
 */
#ifndef TR_OPS_H
#define TR_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GEMM ------------------------------------------------------------------------------------ */

typedef enum tr_op { TR_OP_N = 0, TR_OP_T = 1 } tr_op;

/* Row-major: C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C.
 * A is (M,K) with row stride lda >= K when TR_OP_N, (K,M) with lda >= M when TR_OP_T;
 * likewise B (K,N) or (N,K); C (M,N) with ldc >= N. beta == 0 ignores C's old contents
 * (NaN included). Linear forward: out (B,OC) = inp (B,C) @ weight (OC,C)^T is
 * tr_gemm(s, TR_OP_N, TR_OP_T, B, OC, C, 1, inp, C, weight, C, 0, out, OC). */
TR_API int tr_gemm(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
            const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* `batch` independent GEMMs; matrix i starts at A + i*stride_a, B + i*stride_b,
 * C + i*stride_c (elements). For attention: (B*NH) products of (T,hs) matrices. */
TR_API int tr_gemm_batched(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                    const float *A, int lda, int64_t stride_a, const float *B, int ldb,
                    int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                    int batch);

/* Mixed precision: the same products with A and B in bfloat16, summed in float32 and C in
 * float32: each C element is alpha * sum_k a_ik b_kj + beta C, the products of bf16 values
 * (exact in float32) added in float32 in some order. How the device multiplies them is
 * tr_device_info.bf16; the result is of this definition however it is done. */
TR_API int tr_gemm_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                 const tr_bf16 *A, int lda, const tr_bf16 *B, int ldb, float beta, float *C,
                 int ldc);
TR_API int tr_gemm_batched_bf16(tr_stream *s, tr_op opa, tr_op opb, int M, int N, int K, float alpha,
                         const tr_bf16 *A, int lda, int64_t stride_a, const tr_bf16 *B, int ldb,
                         int64_t stride_b, float beta, float *C, int ldc, int64_t stride_c,
                         int batch);

/* out (n) = inp (n) rounded to the nearest bfloat16, ties to even (NaN stays NaN, infinities
 * and overflow to infinity stay infinite). */
TR_API int tr_to_bf16(tr_stream *s, tr_bf16 *out, const float *inp, size_t n);

/* ---- fills and initialisation -------------------------------------------------------------- */

/* x (n) = value */
TR_API int tr_fill(tr_stream *s, float *x, size_t n, float value);

/* Counter-based random initialisation: element i of x receives the value of global index
 * j = offset + i, computed from (seed, j) alone with Philox4x32-10, so a tensor initialised
 * whole or in shards (offset = the shard's start) on any device or thread holds the same
 * values. Key = (seed low 32 bits, seed high 32 bits).
 *   uniform: counter (j/4 low, j/4 high, 0, 0), word j%4 = w; u = (w >> 8) * 2^-24 in [0,1);
 *            x = lo + (hi - lo) * u.
 *   normal:  counter (j/2 low, j/2 high, 1, 0), words (w0,w1) when j is even, (w2,w3) when
 *            odd; u1 = ((w0 >> 8) + 1) * 2^-24 in (0,1], u2 = (w1 >> 8) * 2^-24;
 *            x = mean + std * sqrt(-2 ln u1) * cos(2 pi u2) (Box-Muller). */
TR_API int tr_init_uniform(tr_stream *s, float *x, size_t n, float lo, float hi, uint64_t seed,
                    uint64_t offset);
TR_API int tr_init_normal(tr_stream *s, float *x, size_t n, float mean, float std, uint64_t seed,
                   uint64_t offset);

/* Dropout's mask, counter-based like the initialisers: element i of mask (n) receives
 * `scale` when u_j >= p and 0 otherwise, for j = offset + i and u_j = (w >> 8) * 2^-24 in
 * [0,1), w word j%4 of Philox4x32-10 at counter (j/4 low, j/4 high, 2, 0) with the key of
 * tr_init_*. A pure function of (seed, j): every backend, whole or in pieces, gives the same
 * mask. An element is kept with probability 1 - p (exactly, for p a multiple of 2^-24);
 * inverted dropout takes scale = 1/(1 - p). p in [0,1], scale finite. */
TR_API int tr_dropout_mask(tr_stream *s, float *mask, size_t n, float p, float scale, uint64_t seed,
                    uint64_t offset);

/* ---- element-wise arithmetic ------------------------------------------------------------------ */

/* out (n) = a (n) + b (n) */
TR_API int tr_add(tr_stream *s, float *out, const float *a, const float *b, size_t n);
/* out (n) = a (n) * b (n) */
TR_API int tr_mul(tr_stream *s, float *out, const float *a, const float *b, size_t n);
/* y (n) += alpha * x (n) */
TR_API int tr_axpy(tr_stream *s, float *y, float alpha, const float *x, size_t n);
/* x (n) *= alpha */
TR_API int tr_scale(tr_stream *s, float *x, float alpha, size_t n);
/* x (n) *= scalar[0], a float in device memory outside x (clipping without a host round
 * trip) */
TR_API int tr_scale_dev(tr_stream *s, float *x, const float *scalar, size_t n);

/* ---- reductions (one float result in device memory) ------------------------------------------- */

/* out[0] = sum x^2 (accumulate: out[0] += sum x^2), summed in double on host devices */
TR_API int tr_sumsq(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
/* out[0] = sum x (accumulate: +=) */
TR_API int tr_sum(tr_stream *s, float *out, const float *x, size_t n, int accumulate);
/* factor[0] = min(1, max_norm / (sqrt(sumsq[0]) + 1e-6)): the global-norm clipping factor,
 * for tr_scale_dev. factor may equal sumsq. */
TR_API int tr_clip_factor(tr_stream *s, float *factor, const float *sumsq, float max_norm);

/* ---- linear layers --------------------------------------------------------------------------- */

/* out (N,C) += bias (C), for each of the N rows */
TR_API int tr_bias_add(tr_stream *s, float *out, const float *bias, size_t N, size_t C);
/* dbias (C) += sum over the N rows of dout (N,C) */
TR_API int tr_bias_grad(tr_stream *s, float *dbias, const float *dout, size_t N, size_t C);

/* ---- activations ------------------------------------------------------------------------------- */

/* out (n) = max(inp, 0) */
TR_API int tr_relu_forward(tr_stream *s, float *out, const float *inp, size_t n);
/* dinp (n) = inp > 0 ? dout : 0; dinp may equal dout */
TR_API int tr_relu_backward(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);
/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp */
TR_API int tr_gelu_forward(tr_stream *s, float *out, const float *inp, size_t n);
/* dinp (n) = gelu'(inp) * dout; dinp may equal dout */
TR_API int tr_gelu_backward(tr_stream *s, float *dinp, const float *inp, const float *dout, size_t n);

/* ---- layernorm --------------------------------------------------------------------------------- */

/* inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N) (saved for backward):
 * out = (inp - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), var biased.
 * out must not overlap inp. */
TR_API int tr_layernorm_forward(tr_stream *s, float *out, float *mean, float *rstd, const float *inp,
                     const float *weight, const float *bias, size_t N, size_t C, float eps);
/* dout (N,C), inp (N,C), weight (C), mean (N), rstd (N) -> dinp (N,C) (overwritten),
 * dweight (C) += , dbias (C) += . dinp must not overlap dout or inp. */
TR_API int tr_layernorm_backward(tr_stream *s, float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, const float *mean,
                     const float *rstd, size_t N, size_t C);

/* ---- softmax --------------------------------------------------------------------------------- */

/* out (N,C) = softmax of each row of inp (N,C) */
TR_API int tr_softmax_forward(tr_stream *s, float *out, const float *inp, size_t N, size_t C);
/* dinp (N,C) = out * (dout - sum_c out * dout), from the forward's out (N,C) */
TR_API int tr_softmax_backward(tr_stream *s, float *dinp, const float *out, const float *dout, size_t N,
                   size_t C);
/* Causal attention: att (BH,T,T) from preatt (BH,T,T): row t of each matrix is the softmax
 * of scale * preatt[t][0..t]; entries t2 > t are 0. att may equal preatt. */
TR_API int tr_attn_softmax_forward(tr_stream *s, float *att, const float *preatt, size_t BH, size_t T,
                        float scale);
/* dpreatt (BH,T,T) = scale * att * (datt - sum_t2 att * datt) on t2 <= t, 0 above. */
TR_API int tr_attn_softmax_backward(tr_stream *s, float *dpreatt, const float *att, const float *datt,
                        size_t BH, size_t T, float scale);

/* ---- losses ------------------------------------------------------------------------------------- */

/* logits (N,V), targets (N) -> probs (N,V) (softmax, saved for backward) and
 * loss[0] = scale * sum_n -log probs[n][targets[n]] (scale 1/N: the mean), computed as
 * log-sum-exp minus the target's logit, so it stays finite where probs underflow. probs must
 * not overlap logits. */
TR_API int tr_crossentropy_forward(tr_stream *s, float *loss, float *probs, const float *logits,
                        const int32_t *targets, size_t N, size_t V, float scale);
/* dlogits (N,V) = scale * (probs - onehot(targets)); dlogits may equal probs. */
TR_API int tr_crossentropy_backward(tr_stream *s, float *dlogits, const float *probs,
                        const int32_t *targets, size_t N, size_t V, float scale);
/* loss[0] = scale * sum (pred - target)^2 over pred (n), target (n) (scale 1/n: the mean) */
TR_API int tr_mse_forward(tr_stream *s, float *loss, const float *pred, const float *target, size_t n,
               float scale);
/* dpred (n) = 2 * scale * (pred - target) */
TR_API int tr_mse_backward(tr_stream *s, float *dpred, const float *pred, const float *target, size_t n,
               float scale);

/* ---- embedding ---------------------------------------------------------------------------------- */

/* idx (B,T) in [0,V), wte (V,C), wpe (T,C) or NULL -> out (B,T,C) = wte[idx] (+ wpe[t]).
 * Host devices report an index outside [0,V) as TR_EINVAL; GPUs cannot, cheaply. */
TR_API int tr_embedding_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                     const float *wpe, size_t B, size_t T, size_t C, size_t V);
/* dout (B,T,C) -> dwte (V,C) += scatter-add over idx; dwpe (T,C) += sum over B (if not NULL).
 * Deterministic everywhere: the same inputs give the same bits. Host devices add the rows
 * in (b, t) order; CUDA sorts the rows by token and sums them in tiles of 256 rows, in the
 * host's order within a tile (bits equal to the host's when no token's rows cross a tile's
 * edge, within rounding otherwise), and skips an index outside [0,V). */
TR_API int tr_embedding_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                     const int32_t *idx, size_t B, size_t T, size_t C, size_t V);

/* ---- asynchronous updates ---------------------------------------------------------------------- */

/* Delay compensation (DC-ASGD, Zheng et al. 2017): grad (n) += lambda * grad * grad *
 * (now (n) - pulled (n)), the first-order correction of a gradient computed at parameters
 * `pulled` for use at parameters `now`. */
TR_API int tr_dc_asgd(tr_stream *s, float *grad, const float *now, const float *pulled, size_t n,
               float lambda);

/* ---- optimizer updates (PyTorch's definitions) -------------------------------------------------- */

/* param (n) -= lr * (grad + weight_decay * param) */
TR_API int tr_sgd_update(tr_stream *s, float *param, const float *grad, size_t n, float lr,
                  float weight_decay);
/* g = grad + weight_decay * param; mom = momentum * mom + g;
 * param -= lr * (nesterov ? g + momentum * mom : mom). mom (n) starts at 0. */
TR_API int tr_momentum_update(tr_stream *s, float *param, const float *grad, float *mom, size_t n,
                       float lr, float momentum, float weight_decay, int nesterov);
/* AdamW, step t >= 1: param *= 1 - lr * weight_decay; m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; param -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
 * m (n), v (n) start at 0. */
TR_API int tr_adamw_update(tr_stream *s, float *param, const float *grad, float *m, float *v,
                    size_t n, float lr, float beta1, float beta2, float eps,
                    float weight_decay, int64_t t);

/* ---- a member's part of the vocabulary (Megatron's vocabulary-parallel split) ------------------- */

/* A tensor group's member holds rows (or columns) [lo, lo + V) of a whole vocabulary; these
 * are its pieces of the embedding and of the cross-entropy, the collectives between them
 * left to the caller. Tokens and targets are whole-vocabulary indices. */

/* idx (N) -> out (N,C) = wte[idx - lo] for a token in [lo, lo + V), zeros for any other:
 * wte (V,C) is the member's rows. */
TR_API int tr_embedding_part_forward(tr_stream *s, float *out, const int32_t *idx, const float *wte,
                                     size_t N, size_t C, size_t V, int64_t lo);
/* dout (B,T,C) -> dwte (V,C) += scatter-add over the tokens in [lo, lo + V) alone (others
 * skipped); dwpe (T,C) += sum over B of every row (if not NULL). Deterministic as
 * tr_embedding_backward, in the same order (host: bits of the whole op on the same rows). */
TR_API int tr_embedding_part_backward(tr_stream *s, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *idx, size_t B, size_t T, size_t C, size_t V,
                                      int64_t lo);
/* mx (N) = the largest of each row of the member's logits (N,V) */
TR_API int tr_crossentropy_part_max(tr_stream *s, float *mx, const float *logits, size_t N,
                                    size_t V);
/* Given mx (N), each row's largest over the whole vocabulary (all-reduced): exps (N,V) =
 * exp(logits - mx), pair (N,2) = (sum of the row's exps, summed in double; the target's logit
 * when it lies in [lo, lo + V), else 0). A target outside [0, whole): host devices fail with
 * TR_EINVAL, GPUs make the pair's logit NaN. exps must not overlap logits. */
TR_API int tr_crossentropy_part_sum(tr_stream *s, float *pair, float *exps, const float *logits,
                                    const float *mx, const int32_t *targets, size_t N, size_t V,
                                    int64_t lo, int64_t whole);
/* Given pair (N,2) summed over the members and mx (N): probs (N,V) *= 1 / pair's sum (the
 * exps become the member's columns of the softmax) and loss[0] = scale * sum_n
 * (log sum_n - (logit_n - mx_n)): the whole cross-entropy on every member. */
TR_API int tr_crossentropy_part_finish(tr_stream *s, float *loss, float *probs, const float *pair,
                                       const float *mx, size_t N, size_t V, float scale);
/* dlogits (N,V) = scale * (probs - onehot(targets - lo)) on the member's columns: a target
 * outside [lo, lo + V) has no column here. dlogits may equal probs. */
TR_API int tr_crossentropy_part_backward(tr_stream *s, float *dlogits, const float *probs,
                                         const int32_t *targets, size_t N, size_t V, int64_t lo,
                                         float scale);

/* The accuracy of split logits (N,V), columns [lo, lo + V) of the whole, in three steps around
 * two all-reduces MAX of N floats. argmax: top (N) = each row's largest, at (N) = -(lo + the
 * first column holding it) (class indices below 2^24: exact in float). vote, given top
 * all-reduced: at = -infinity where the member's largest is below the row's (it has no say).
 * hits, given at all-reduced: hits (N) = 1 where -at is the row's target, else 0 (hits may
 * equal at). */
TR_API int tr_crossentropy_part_argmax(tr_stream *s, float *top, float *at, const float *logits,
                                       size_t N, size_t V, int64_t lo);
TR_API int tr_crossentropy_part_vote(tr_stream *s, float *at, const float *logits, const float *top,
                                     size_t N, size_t V, int64_t lo);
TR_API int tr_crossentropy_part_hits(tr_stream *s, float *hits, const float *at,
                                     const int32_t *targets, size_t N);

#ifdef __cplusplus
}
#endif
#endif
