/* tr_layer_type.h — layer kinds as tables of operations: the built-in kinds, and how to
 * write one of your own.
 *
 * A layer of a model is a tr_layer_spec: a pointer to its kind's table (a tr_layer_type)
 * and the sizes the kind reads. Stages (tr_stage.h) know no kind by name: they ask the table
 * what a layer needs (parameter tensors, activation memory per micro-batch, backward
 * scratch), and call its forward and backward with a tr_layer_ctx that says where
 * everything lies. A kind written with the device API alone (tr_device.h's ops on ctx->s)
 * runs on host devices and GPUs alike, under every parallel strategy.
 *
 * A kind of one's own: y = g * x, with one learned gain g (initialised to 1).
 *
 *   static int gain_tensors(const tr_layer_spec *l, int T, tr_tensor_list *t) {
 *     return tr_tensor_list_add(t, "gain", 1, 0, TR_INIT_ONES, 0);
 *   }
 *   static size_t gain_scratch(const tr_layer_spec *l, int B, int T) {
 *     return (size_t)B * T * l->in;
 *   }
 *   static int gain_forward(const tr_layer_ctx *c) {             // act[0..n) = g x
 *     const size_t n = (size_t)c->B * c->T * c->l->in;
 *     int rc = tr_memcpy(c->s, c->act, c->x, n * sizeof(float), TR_COPY_D2D);
 *     return rc ? rc : tr_scale_dev(c->s, c->act, c->p[0], n);
 *   }
 *   static int gain_backward(const tr_layer_ctx *c, const float *dout, float *dinp) {
 *     const size_t n = (size_t)c->B * c->T * c->l->in;
 *     int rc = tr_mul(c->s, c->scratch, c->x, dout, n);           // dg += sum x dout
 *     if (!rc) rc = tr_sum(c->s, c->g[0], c->scratch, n, 1);
 *     if (!rc && dinp) rc = tr_memcpy(c->s, dinp, dout, n * sizeof(float), TR_COPY_D2D);
 *     return rc || !dinp ? rc : tr_scale_dev(c->s, dinp, c->p[0], n);  // dinp = g dout
 *   }
 *   static int gain_check(const tr_layer_spec *l, int in, char *err, size_t size) {
 *     return l->out == in ? 0 : (snprintf(err, size, "out must equal in"), TR_EINVAL);
 *   }
 *   const tr_layer_type gain_type = {.name = "gain", .check = gain_check,
 *       .tensors = gain_tensors, .scratch_floats = gain_scratch,
 *       .forward = gain_forward, .backward = gain_backward};
 *
 *   const tr_layer_spec layers[] = {
 *       tr_layer_linear(10, 100, 1), {.type = &gain_type, .in = 100, .out = 100},
 *       tr_layer_dropout(100, 0.1f), tr_layer_linear(100, 1, 1)};
 *
 * Tensors are named "<layer>.<name>" in the model ("1.gain"), and a composite's inner
 * layers "<layer>.<i>.<name>" ("2.0.weight"), as PyTorch names the parameters of a
 * Sequential: checkpoints load into the PyTorch model of the same shape.
 *
 * Zero-bubble schedules run backward in two halves, the input's gradient first and the
 * weights' later. A kind whose weight gradient costs what gain's does need not care: its
 * backward runs whole as the first half. One with GEMMs worth putting off adds
 * backward_input and backward_weight (and keep_floats for what the first leaves the
 * second), as linear, embedding, block and residual do.
 *
 * Misuse (tr_base.h): the table's slots with their defaults (below) answer 0 for a NULL spec
 * or one with no kind; the calls that return a status refuse NULL lists, contexts and names
 * with TR_EINVAL, in the list's err or on stderr; tr_layer_fail(NULL, ...) says the text on
 * stderr and returns its status.
 */
#ifndef TR_LAYER_TYPE_H
#define TR_LAYER_TYPE_H

#include <stddef.h>
#include <stdint.h>

#include "tr_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_layer_type tr_layer_type;

/* A layer: its kind and the sizes the kind reads. Rows are N = B*T per micro-batch (B
 * samples of T = the model's ctx rows each); `in` and `out` are row widths. */
typedef struct tr_layer_spec {
  const tr_layer_type *type;
  int in, out;
  int bias;                    /* linear: 1 with a bias */
  int vocab;                   /* embedding */
  int heads, hidden;           /* block */
  float p;                     /* dropout: the probability of dropping an element */
  int n;                       /* residual (any composite): inner layers, */
  const struct tr_layer_spec *inner; /*   n specs, deep-copied by tr_model_new */
  const void *config;          /* a user kind's own parameters: not copied, must outlive the
                                  model */
  /* Tensor parallelism (below): a member's spec, as its kind's `shard` wrote it, is part
   * `part` of `parts` (0 and 0 for a layer held whole). */
  int part, parts;
} tr_layer_spec;

/* The built-in kinds, and constructors that fill their specs. */
TR_API extern const tr_layer_type tr_layer_linear_type;    /* (N,in) -> (N,out): weight (out,in),
                                                        bias (out) unless bias == 0 */
TR_API extern const tr_layer_type tr_layer_relu_type;      /* (N,in) -> (N,in) */
TR_API extern const tr_layer_type tr_layer_gelu_type;      /* (N,in) -> (N,in), tanh approximation */
TR_API extern const tr_layer_type tr_layer_layernorm_type; /* (N,in) -> (N,in): weight, bias (in) */
TR_API extern const tr_layer_type tr_layer_embedding_type; /* tokens (B,T) in [0,vocab) -> (B,T,out):
                                                        wte (vocab,out), wpe (T,out); the model's
                                                        first layer only */
TR_API extern const tr_layer_type tr_layer_block_type;     /* pre-LN transformer block (B,T,in) ->
                                                        (B,T,in): `heads`, an MLP of `hidden` */
TR_API extern const tr_layer_type tr_layer_dropout_type;   /* (N,in) -> (N,in): inverted dropout */
TR_API extern const tr_layer_type tr_layer_residual_type;  /* x + f(x), f the n inner layers */

TR_API tr_layer_spec tr_layer_linear(int in, int out, int bias);
TR_API tr_layer_spec tr_layer_relu(int width);
TR_API tr_layer_spec tr_layer_gelu(int width);
TR_API tr_layer_spec tr_layer_layernorm(int width);
TR_API tr_layer_spec tr_layer_embedding(int vocab, int width);
TR_API tr_layer_spec tr_layer_block(int width, int heads, int hidden);
/* In training (tr_stage_set_training), each element is zeroed with probability p in [0,1)
 * and the others scaled by 1/(1-p); in evaluation, the identity. Whether element e of sample
 * s is kept is a pure function of (the stage's seed, the layer's place in the model, s, e)
 * (tr_dropout_mask), so a batch split across micro-batches, replicas and stages draws the
 * masks it draws whole: the stage must know its samples (tr_stage_set_samples). */
TR_API tr_layer_spec tr_layer_dropout(int width, float p);
/* out = x + f(x), f the n layers inner[0..n) in order, of any kinds (composites and kinds of
 * one's own included), whose widths lead from x's back to it. One layer for cutting: its
 * inner layers always share a stage. `inner` is read by tr_model_new, which copies it. */
TR_API tr_layer_spec tr_layer_residual(int n, const tr_layer_spec *inner);

/* ---- tensor parallelism ---------------------------------------------------------------- */

/* A tensor group (tr_layout_config.tensor): `size` members, each a device that holds part
 * of some layers' tensors (Megatron's split: a linear layer's output features column by
 * column, the next one's input features, attention's heads, the embedding's vocabulary)
 * and runs its share of their forward and backward. The collectives a split layer needs
 * are its member's tensor comm, lent in tr_layer_ctx.tensor (and tr_loss_ctx.tensor).
 * Every member calls the same collectives in the same order with the same n, on its
 * compute stream; the result is in place as the stream sees it (host devices: on return).
 * The comm counts its collectives and bytes (tr_tensor_comm_counts). */
typedef enum tr_reduce { TR_REDUCE_SUM, TR_REDUCE_MAX } tr_reduce;

typedef struct tr_tensor_comm tr_tensor_comm;
struct tr_tensor_comm {
  int rank, size;             /* this member, and the members */
  /* buf[0..n) = the members' buf[0..n) reduced element by element (in member order) */
  int (*all_reduce)(const tr_tensor_comm *c, tr_stream *s, float *buf, size_t n, tr_reduce op);
  /* whole[m*n, (m+1)*n) = member m's part[0..n), for every m */
  int (*all_gather)(const tr_tensor_comm *c, tr_stream *s, const float *part, float *whole,
                    size_t n);
  /* part[0..n) = the sum over members of their whole[rank*n, (rank+1)*n) */
  int (*reduce_scatter)(const tr_tensor_comm *c, tr_stream *s, const float *whole, float *part,
                        size_t n);
  void *impl;
};

/* How a layer is to be split across a tensor group, as the model's plan chooses it: a
 * linear layer followed (through layers that act element by element) by another is split
 * COLUMN then ROW, so that one all-reduce after the second joins them (Megatron's f and g). A
 * kind that splits itself (the transformer block, the embedding) ignores it. */
typedef enum tr_split {
  TR_SPLIT_COLUMN,            /* each member computes a slice of the output features */
  TR_SPLIT_ROW,               /* each member reads a slice of the input features; the
                                 outputs are all-reduced (a bias added once, after) */
  TR_SPLIT_SELF               /* the kind's own way */
} tr_split;

/* ---- what a kind is -------------------------------------------------------------------- */

/* tr_layer_ctx.first_sample before tr_stage_set_samples */
#define TR_SAMPLES_UNKNOWN UINT64_MAX

/* Everything forward and backward need: where the layer's data lies, for one micro-batch. */
typedef struct tr_layer_ctx {
  tr_stream *s;               /* every op goes on this stream */
  const tr_layer_spec *l;
  int B, T;                   /* samples, rows per sample: N = B*T rows */
  float *const *p;            /* the layer's tensors, in the order `tensors` declared them */
  float *const *g;            /* their gradients (same shapes): backward ADDS to them */
  const void *x;              /* the input: floats (N, in), or int32 tokens (B,T) for a kind
                                 with token_input */
  float *act;                 /* act_floats floats, this micro-batch's own (64-byte aligned):
                                 forward writes the output (N, out) at act[0] and keeps
                                 whatever backward needs after it */
  float *scratch;             /* scratch_floats floats (64-byte aligned), shared by every
                                 micro-batch and layer: good within one call only */
  uint64_t seed;              /* the layer's random key: the run's seed mixed with the
                                 layer's place in the model, the same however it is cut */
  uint64_t first_sample;      /* the data set's index of sample 0 of this micro-batch; sample
                                 b is first_sample + b. TR_SAMPLES_UNKNOWN until set */
  int training;               /* 0: evaluation */
  char *err;                  /* tr_layer_fail's text goes here */
  size_t err_size;
  float *keep;                /* keep_floats floats, this micro-batch's own (64-byte aligned):
                                 what backward_input leaves for backward_weight in a split
                                 backward; NULL otherwise */
  /* Mixed precision: the stage's precision of GEMM inputs (tr_precision_config.gemm). Under
   * TR_PRECISION_BF16 the three pointers are set (else NULL), for a kind that multiplies in
   * bf16 (tr_gemm_bf16): */
  tr_precision precision;
  const tr_bf16 *const *p16;  /* bf16 copies of p, same order: made once per step, read-only */
  tr_bf16 *act16;             /* bf16_elems' act elements, this micro-batch's own (64-byte
                                 aligned): what forward converts and backward reads again */
  tr_bf16 *scratch16;         /* bf16_elems' scratch elements, shared like scratch */
  /* The layer's tensor group (l->parts > 1): its collectives; NULL for a layer held whole. */
  const tr_tensor_comm *tensor;
} tr_layer_ctx;

typedef struct tr_tensor_list tr_tensor_list;

/* A kind's table: one constant object, its address the kind's identity. Slots marked
 * OPTIONAL may be NULL. Functions return 0 or a negative TR_E... status. */
struct tr_layer_type {
  const char *name;           /* "linear": in error messages */
  int token_input;            /* 1: reads int32 tokens (B,T) in [0, vocab), not floats; only
                                 as a model's first layer */
  /* OPTIONAL: whether the spec makes sense given `in`, the width arriving (already checked:
   * l->in == in > 0, l->out > 0). On failure writes what is wrong to err (the caller names
   * the layer) and returns TR_EINVAL. */
  int (*check)(const tr_layer_spec *l, int in, char *err, size_t err_size);
  /* OPTIONAL (none): declares the parameter tensors, in the order ctx->p lists them, with
   * tr_tensor_list_add (as many as it likes). T: the model's rows per sample. */
  int (*tensors)(const tr_layer_spec *l, int T, tr_tensor_list *t);
  /* OPTIONAL (N*out, the output alone): floats of ctx->act per micro-batch. */
  size_t (*act_floats)(const tr_layer_spec *l, int B, int T);
  /* OPTIONAL (0): floats of ctx->scratch. */
  size_t (*scratch_floats)(const tr_layer_spec *l, int B, int T);
  /* ctx->x -> the output at ctx->act[0] */
  int (*forward)(const tr_layer_ctx *c);
  /* dout (N, out), the gradient of the output -> dinp (N, in) OVERWRITTEN, unless NULL (the
   * model's first layer: not wanted), and the parameter gradients ctx->g ADDED to. ctx->x and
   * ctx->act hold what forward had and left; dout does not overlap dinp and is not to be
   * written. */
  int (*backward)(const tr_layer_ctx *c, const float *dout, float *dinp);
  /* OPTIONAL (0): forward FLOPs per sample, counting matrix products only (2 per multiply-
   * add); element-wise work counts 0. Cutting balances them; training counts 3 times. */
  double (*flops)(const tr_layer_spec *l, int T);
  /* OPTIONAL, both or neither: backward in two halves, for zero-bubble schedules, which run
   * the input's gradient (B) on the pipeline's critical path and the weights' (W) later, in
   * what would be idle time. backward_input writes dinp as backward does (NULL: not wanted)
   * and leaves in ctx->keep whatever the other half needs; backward_weight, called later
   * with the same ctx->x, ctx->act, ctx->keep and dout (kept for it), ADDS the parameter
   * gradients. Together they give backward's results bitwise. A kind without them runs
   * backward whole as its B half (layernorm: its parameters' gradients come out of the
   * same pass over the rows as the input's), and has nothing left for W. */
  int (*backward_input)(const tr_layer_ctx *c, const float *dout, float *dinp);
  int (*backward_weight)(const tr_layer_ctx *c, const float *dout);
  /* OPTIONAL (0): floats of ctx->keep per micro-batch. */
  size_t (*keep_floats)(const tr_layer_spec *l, int B, int T);
  /* OPTIONAL (none: the kind computes in fp32 whatever the precision): under
   * TR_PRECISION_BF16, the bf16 elements of ctx->act16 per micro-batch (its products' inputs,
   * converted in forward and kept for backward) and of ctx->scratch16. */
  void (*bf16_elems)(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch);
  /* OPTIONAL (0): 1 when forward or backward in training read ctx->first_sample (masks drawn
   * per sample, as dropout's), so that the same micro-batch slot queues other arguments
   * each step. A stage replays its passes from CUDA graphs (tr_stage_config.graphs), whose
   * arguments are those of the step captured, only while none of its layers draws. A kind
   * that reads first_sample must say so here. */
  int (*draws)(const tr_layer_spec *l);
  /* OPTIONAL (none: the layer is held whole by every member, which all compute it alike):
   * member `part` of `parts`'s spec of the layer, split `how`; it sets member->part and
   * ->parts, and the member's kind (often another table: a column-parallel linear) declares
   * its tensors as parts of the whole ones (tr_tensor_list_add_part). TR_EINVAL, with err
   * saying what does not divide ("64 output features across 3 members"), when it cannot. */
  int (*shard)(const tr_layer_spec *l, tr_split how, int part, int parts, tr_layer_spec *member,
               char *err, size_t err_size);
};

/* How a tensor starts (PyTorch's defaults: Linear uniform in +-1/sqrt(in), Embedding
 * normal(0,1), LayerNorm ones and zeros); from the stage's seed and each element's place in
 * the model, so a model cut anywhere holds the same values. */
typedef enum tr_init_kind {
  TR_INIT_UNIFORM, /* uniform in [-scale, scale) */
  TR_INIT_NORMAL,  /* normal, mean 0, standard deviation scale */
  TR_INIT_ONES,
  TR_INIT_ZEROS
} tr_init_kind;

/* Declares the next tensor of the layer: shape (d0) when d1 == 0, else (d0,d1); `name`
 * without the layer's prefix ("weight"). TR_EINVAL for a bad shape or a full name longer
 * than tr_tensor_info's; TR_ENOMEM. */
TR_API int tr_tensor_list_add(tr_tensor_list *t, const char *name, int64_t d0, int64_t d1,
                       tr_init_kind init, float scale);
/* A split layer's part of a tensor (tensor parallelism): shape (d0) or (d0, d1) is the
 * part's; the whole tensor is `parts` parts side by side along `axis` (0: rows, 1: columns;
 * a vector's is 0), taken in `groups` equal blocks along that axis each split alike (a
 * fused q, k, v weight: 3; else 1), this member holding part `part` of each block. The part
 * starts as its elements of the whole tensor do under the same seed, and checkpoints hold
 * the whole tensor under `name`, as a model held whole names it. */
TR_API int tr_tensor_list_add_part(tr_tensor_list *t, const char *name, int64_t d0, int64_t d1,
                                   tr_init_kind init, float scale, int axis, int groups,
                                   int part, int parts);
/* For composites: declares inner layer l's tensors, named "<prefix>.<name>". */
TR_API int tr_tensor_list_add_layer(tr_tensor_list *t, const char *prefix, const tr_layer_spec *l,
                             int T);

/* ---- for stages and composites: the table's slots with their defaults ---------------------- */

/* Checks layers[0..n) in order, as a chain fed `in` wide floats (or tokens, when `tokens`):
 * a kind, positive widths, each taking what the one before gives, a token_input kind only
 * on tokens, then each kind's check. err: "layer 2 (relu): <what>". */
TR_API int tr_layers_check(int n, const tr_layer_spec *layers, int in, int tokens, char *err,
                    size_t err_size);
TR_API int tr_layer_tensor_count(const tr_layer_spec *l, int T);
TR_API size_t tr_layer_act_floats(const tr_layer_spec *l, int B, int T);
TR_API size_t tr_layer_scratch_floats(const tr_layer_spec *l, int B, int T);
TR_API void tr_layer_bf16_elems(const tr_layer_spec *l, int B, int T, size_t *act, size_t *scratch);
TR_API double tr_layer_flops(const tr_layer_spec *l, int T);
TR_API size_t tr_layer_keep_floats(const tr_layer_spec *l, int B, int T);
/* The slot `draws` with its default (0). */
TR_API int tr_layer_draws(const tr_layer_spec *l);
/* Whether the kind's backward splits (it has backward_weight). */
TR_API int tr_layer_splits(const tr_layer_spec *l);
/* The halves of a split backward with their defaults: backward whole, then nothing. */
TR_API int tr_layer_backward_input(const tr_layer_ctx *c, const float *dout, float *dinp);
TR_API int tr_layer_backward_weight(const tr_layer_ctx *c, const float *dout);
/* The random key of the layer at `index` under `seed` (a stage: its seed and the layer's
 * index in the model; a composite: its own key and the inner layer's index). */
TR_API uint64_t tr_layer_seed(uint64_t seed, uint64_t index);
/* Writes "what" into ctx->err for the stage's message, and returns rc. */
TR_API int tr_layer_fail(const tr_layer_ctx *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
