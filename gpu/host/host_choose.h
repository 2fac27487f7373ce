/* host_choose.h — which library of host_blas.h's table serves a host GEMM.
 *
 * The policy is TROUPE_GEMM (read as each host device opens; unset or empty: the build's,
 * meson's option `blas`):
 *
 *   auto      every library that fits the product is timed on its first use (the caller's
 *             own buffers, C kept and restored; a few rounds, candidates interleaved, each
 *             one's median) and the fastest serves it from then on, in every device of the
 *             process: replicas and stages multiply a shape alike, so runs that tests
 *             compare bitwise stay so. A library whose rows vary with the rows around them
 *             (OpenBLAS: host_blas.h's rows_vary) is a candidate only where op(A) is A
 *             transposed (weight gradients: rows that are features, never a batch's), so
 *             micro-batches and replicas still see the whole batch's activations;
 *   fastest   as auto, every library a candidate for every product (OpenBLAS's speed on
 *             AVX2 for the forward products too; a pipeline or dp run then differs from
 *             single in the last bits of activations, which training can grow);
 *   onednn, openblas   that library serves every product but the smallest (at most
 *             TR__HOST_TINY_MNK multiply-adds, which the direct path takes), as before.
 *
 * A choice is made for the key (opa, opb, N, K, batch, bf16): not M, which is the rows of a
 * micro-batch, so a row of op(A) op(B) is the same bits however many rows come with it (a
 * batch split into micro-batches or replicas sees the activations of the whole), nor the
 * leading dimensions, strides, alpha and beta. It is measured on the first M met; where
 * the row chosen cannot serve a product (the direct path, past its reach at a larger M), the
 * first row of the table that can serves it.
 *
 * Choices are kept in a small text file (host_choices_file.c; $TROUPE_GEMM_CHOICES, else
 * gemm-choices beside the planner's file of costs: the folder of $TROUPE_COSTS, else
 * ~/.cache/troupe), one line per key and machine, so that a later process decides alike
 * without measuring; the file is locked while a key is decided, so processes that run at
 * once (ranks, a test and its resumption) decide alike too. A path that holds anything but
 * such a file (its first line says so) is left as it is: the choices are measured and none
 * kept, and stderr says so once. */
#ifndef TR_HOST_CHOOSE_H
#define TR_HOST_CHOOSE_H

#include "host_blas.h"

/* Reads TROUPE_GEMM for a device being opened: 0, or TR_EINVAL with d's error naming the
 * variable and the values it may take. */
int tr__host_gemm_policy_open(tr_device *d);
/* The index in tr__host_libs of the pinned library, or -1 under auto or fastest; the
 * policy's word ("auto", "fastest", "onednn", ...). */
int tr__host_gemm_pinned(void);
const char *tr__host_gemm_policy_name(void);
/* "auto (measured per shape, kept in PATH)", "onednn (pinned by TROUPE_GEMM)", ... */
void tr__host_gemm_policy_describe(char *out, size_t n);

/* Runs row (index i of the table the choice was made from) on g: host_gemm.c's, which
 * widens bf16 operands for a row that cannot multiply them. */
typedef int (*tr__gemm_run_fn)(tr_stream *s, const tr__host_lib *row, int i,
                               const tr__gemm_args *g);

/* The row to serve g (K > 0, alpha != 0): *row and its index *i. Under auto, the first call
 * of a key reads the file of choices or times the candidates with `run` on g's buffers (C
 * as it was when it returns). 0, or a failure recorded on the stream's device. */
int tr__host_gemm_choose(tr_stream *s, const tr__gemm_args *g, tr__gemm_run_fn run,
                         const tr__host_lib **row, int *i);

/* The name of the row that serves (or last served) this shape in this process: the rule's
 * when pinned, the choice under auto, NULL when none is made yet. For `troupe bench ops`. */
const char *tr__host_gemm_served(tr_op opa, tr_op opb, int M, int N, int K, int batch, int bf16);

/* The medians the choice was made on, in ns, by row of tr__host_libs (0: not timed): 1 when
 * the key was measured in this process, else 0. */
int tr__host_gemm_timings(tr_op opa, tr_op opb, int N, int K, int batch, int bf16,
                          double ns[TR__HOST_LIBS_MAX]);

/* ---- for tests --------------------------------------------------------------------------- */

/* Candidates in place of tr__host_libs (rows without state; NULL restores the build's), and
 * every choice in memory forgotten. Call only while no device computes. */
void tr__host_gemm_test_libs(const tr__host_lib *const *libs, int n);
/* Every choice in memory forgotten (as a fresh process: the file is read again). */
void tr__host_gemm_forget(void);
/* Keys measured in this process so far. */
long tr__host_gemm_measurements(void);

#endif
