/* run_metrics.h — the run's figures, once: one table of run metrics (key, unit, how the
 * sources' values combine, scope, where the deprecated tr_train_result view holds it, how
 * --json and the CLI's summary write it), the (key, value) pairs the parts send, and their
 * generic reduction.
 *
 * The parts that measure (every stage, the asynchronous server) put their figures into a
 * tr__figures, a flat list of pairs that a message carries as it is (across processes
 * too), and send it to the coordinator at the end of the run:
 *
 *   tr__figures f = {0};
 *   tr__figures_int(&f, TR__M_PEAK_MICROBATCHES, a->peak);
 *   tr__figures_real(&f, TR__M_STALENESS_MEAN, mean);
 *   tr__figures_text(&f, TR__M_GRAPHS_NOTE, note);
 *
 * The coordinator shifts the times in them onto its clock (tr__figures_shift_clock), then
 * reduces every source's by each row's combine rule (tr__metrics_reduce) and writes what was
 * measured into the run's tr_result (tr__metrics_apply; result_impl.h); the figures
 * docs/WORKLOADS.md defines from others (rates, utilization, bubbles) it computes from the
 * reduced measures. The result holds a value of every row, for any number of devices; the
 * library reads them by key (tr_result_real), writes its JSON (tr_result_json) and the CLI's
 * summary (tr_result_summary) from the same rows: a new figure is a new row.
 */
#ifndef TR_RUN_METRICS_H
#define TR_RUN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tr_train.h"

/* How the sources' values of a key combine into the run's. */
typedef enum tr__combine {
  TR__COMBINE_SETTING, /* not measured: the run's configuration, filled in by the coordinator */
  TR__COMBINE_CALLER,  /* given by the caller after the run (tr_result_set_real) */
  TR__COMBINE_DERIVED, /* computed from other figures (docs/WORKLOADS.md's definitions) */
  TR__COMBINE_SUM,     /* added up, in source order (each device's sum kept too) */
  TR__COMBINE_MAX,     /* the largest (reals: of those that are numbers) */
  TR__COMBINE_MIN,     /* the smallest (the steps every stage ran) */
  TR__COMBINE_MEAN,    /* the mean of the values sent (reals that are numbers) */
  TR__COMBINE_FIRST,   /* the lowest source's (text: the first that is not empty) */
  TR__COMBINE_DEVICE,  /* kept per device (the source's number, replica × stages + stage) */
  TR__COMBINE_REPLICA, /* per device, and summed over each replica's stages */
  TR__COMBINE_BINS,    /* a histogram: summed bin by bin (a pair's index is its bin) */
} tr__combine;

/* Where a figure applies; outside it, --json writes null. */
typedef enum tr__scope {
  TR__SCOPE_RUN,    /* every run */
  TR__SCOPE_DEVICE, /* every run, one value per device */
  TR__SCOPE_ASYNC,  /* asynchronous runs only */
  TR__SCOPE_RANKS,  /* runs whose pipeline edges crossed processes */
  TR__SCOPE_MEASURE, /* a measure figures are derived from: not in the result's JSON */
  TR__SCOPE_PREDICTED /* runs troupe plan predicted ("predicted.samples_per_s" > 0) */
} tr__scope;

typedef enum tr__type { TR__INT, TR__REAL, TR__TEXT } tr__type;

/* How --json writes a row (its type's way unless said), and how the result reads it. */
typedef enum tr__json {
  TR__JSON_NONE,   /* not written */
  TR__JSON_VALUE,  /* an integer, a real as %.9g (null when not a number), a string */
  TR__JSON_REAL4,  /* a real as %.4f */
  TR__JSON_REAL6,  /* a real as %.6g */
  TR__JSON_BOOL,   /* an int as true or false */
  TR__JSON_NAME,   /* the row's `name` function's text, null where it gives NULL (read as
                      text, whatever the type it is kept as) */
  TR__JSON_FN,     /* the row's `real` function's value, as %.9g (null: not a number) */
  TR__JSON_CUTS,   /* the cut's layer indices, null for one piece */
  TR__JSON_BINS,   /* a histogram's bins up to its last that is not 0 */
} tr__json;

/* Where the deprecated view, tr_train_result, holds a row's value (tr__result_view). */
#define TR__AT(f) .at = offsetof(tr_train_result, f), .size = sizeof(((tr_train_result *)0)->f)
#define TR__EACH(f) TR__AT(f), .stride = sizeof(((tr_train_result *)0)->f[0])
#define TR__MEMORY(f)                                                                      \
  .at = offsetof(tr_train_result, memory.devices[0].f), .stride = sizeof(tr_memory_figures), \
  .replica_at = offsetof(tr_train_result, memory.replicas[0].f)
#define TR__NOWHERE .at = -1 /* in the result only */
#define TR__IDLE(f) TR__AT(idle[0].f), .stride = sizeof(tr_idle_figures)

/* The table, in --json's order (a key "a.b" is member b of --json's object a; consecutive
 * rows of one object make it, written null where its first member is). Units: "clock" is a
 * time on the sender's monotonic clock (ns), which the coordinator reads on its own. A row
 * of scope DEVICE, or that a part sends per device (DEVICE, REPLICA), has a value per device
 * of the run; CUTS and BINS rows are lists; every other row one value.
 *   X(id, key, unit, combine, scope, type, where, json, name/real function, summary)
 * The summary's format takes the value (reals as double, integers as long long); rows
 * without one are not in it.
 *
 * Communication: COMM_BYTES is a measure every part that sends tensors adds to its figures
 * (a stage's tensor edges, its policy's parts through the policy's figures op, the
 * asynchronous server), the bytes it sent over the whole run, counted where the sender sends
 * them (what the algorithm sends from it, in a process or across ranks alike; a held-out
 * pass's activations too); several pairs of one source add up. Not in it: what the loader
 * feeds the stages, and the reports to the coordinator (losses, checkpoint parts, figures).
 * comm_bytes_per_step is the bytes every sender of the run sent per step, together (every
 * device's, and the asynchronous server's): the sum of the measure over the sources ÷ the
 * steps the run took (steps − first_step; async: the server's updates).
 * comm_bytes_per_step_device[i] is device i's own part of it (the server, no device of the
 * layout, is in the total only). tr__metrics_apply derives both. */
#define TR__RUN_METRICS(X)                                                                         \
  X(MODEL, "model", "", SETTING, RUN, TEXT, TR__AT(model), VALUE, NULL, "%s")                      \
  X(STRATEGY, "strategy", "", SETTING, RUN, TEXT, TR__AT(strategy), VALUE, NULL, "%s")             \
  X(DEVICES, "devices", "", SETTING, RUN, TEXT, TR__AT(devices), VALUE, NULL, "%s")                \
  X(DEVICES_NOTE, "devices_note", "", SETTING, RUN, TEXT, TR__AT(devices_note), VALUE, NULL,        \
    "uses %s")                                                                                     \
  X(FIRST_STEP, "first_step", "step", SETTING, RUN, INT, TR__AT(first_step), VALUE, NULL,          \
    "from step %lld")                                                                              \
  X(STEPS, "steps", "step", MIN, RUN, INT, TR__AT(steps), VALUE, NULL, "to step %lld")             \
  X(SAMPLES, "samples", "samples", DERIVED, RUN, INT, TR__AT(samples), VALUE, NULL, NULL)          \
  X(SECONDS, "seconds", "s", DERIVED, RUN, REAL, TR__AT(seconds), VALUE, NULL, "%.3g s measured")  \
  X(SAMPLES_PER_S, "samples_per_s", "samples/s", DERIVED, RUN, REAL, TR__AT(samples_per_s), VALUE, \
    NULL, "%.0f samples/s")                                                                        \
  X(STEPS_PER_S, "steps_per_s", "steps/s", DERIVED, RUN, REAL, TR__AT(steps_per_s), VALUE, NULL,   \
    "%.0f steps/s")                                                                                \
  X(INITIAL_LOSS, "initial_loss", "", DERIVED, RUN, REAL, TR__AT(initial_loss), VALUE, NULL,       \
    "initial loss %.4g")                                                                           \
  X(FINAL_LOSS, "final_loss", "", DERIVED, RUN, REAL, TR__AT(final_loss), VALUE, NULL,             \
    "final loss %.4g")                                                                             \
  X(UTILIZATION, "utilization", "fraction", DERIVED, DEVICE, REAL, TR__EACH(utilization), REAL4,   \
    NULL, "utilization %.2f")                                                                      \
  X(RANKS, "ranks", "processes", SETTING, RUN, INT, TR__AT(ranks), VALUE, NULL, NULL)              \
  X(RANK, "rank", "", SETTING, DEVICE, INT, TR__EACH(rank), VALUE, NULL, NULL)                     \
  X(IDLE_EDGE, "idle_breakdown.edge", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(edge), REAL4,    \
    NULL, NULL)                                                                                    \
  X(IDLE_CREDIT, "idle_breakdown.credit", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(credit),     \
    REAL4, NULL, NULL)                                                                             \
  X(IDLE_LOADER, "idle_breakdown.loader", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(loader),     \
    REAL4, NULL, NULL)                                                                             \
  X(IDLE_STEP, "idle_breakdown.step", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(step), REAL4,    \
    NULL, NULL)                                                                                    \
  X(IDLE_HANDOVER, "idle_breakdown.handover", "fraction", DERIVED, DEVICE, REAL,                   \
    TR__IDLE(handover), REAL4, NULL, NULL)                                                         \
  X(IDLE_HANDLING, "idle_breakdown.handling", "fraction", DERIVED, DEVICE, REAL,                   \
    TR__IDLE(handling), REAL4, NULL, NULL)                                                         \
  X(IDLE_OS, "idle_breakdown.os", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(os), REAL4, NULL,    \
    NULL)                                                                                          \
  X(IDLE_OTHER, "idle_breakdown.other", "fraction", DERIVED, DEVICE, REAL, TR__IDLE(other), REAL4, \
    NULL, NULL)                                                                                    \
  X(BUBBLE_FRACTION, "bubble_fraction", "fraction", DERIVED, RUN, REAL, TR__AT(bubble_fraction),   \
    VALUE, NULL, "bubble %.3f")                                                                    \
  X(BUBBLE_THEORY, "bubble_theory", "fraction", SETTING, RUN, REAL, TR__AT(bubble_theory), VALUE,  \
    NULL, "%.3f in theory")                                                                        \
  X(BUBBLE_SCHEDULE, "bubble_schedule", "fraction", DERIVED, RUN, REAL, TR__AT(bubble_schedule),   \
    VALUE, NULL, "%.3f at the run's own costs")                                                    \
  X(REPLICAS, "replicas", "", SETTING, RUN, INT, TR__AT(replicas), VALUE, NULL, NULL)              \
  X(STAGES, "stages", "", SETTING, RUN, INT, TR__AT(stages), VALUE, NULL, NULL)                    \
  X(TENSOR, "tensor", "", SETTING, RUN, INT, TR__AT(tensor), VALUE, NULL, NULL)                    \
  X(TENSOR_GROUPS, "tensor_groups", "", DERIVED, RUN, REAL, TR__NOWHERE, NONE, tr__metric_tensor, \
    "tensor groups of %.0f")                                                                       \
  X(MICROBATCHES, "microbatches", "", SETTING, RUN, INT, TR__AT(microbatches), VALUE, NULL, NULL)  \
  X(CHUNKS, "chunks", "", SETTING, RUN, INT, TR__AT(chunks), VALUE, NULL, NULL)                    \
  X(RECOMPUTE, "recompute", "", SETTING, RUN, INT, TR__AT(recompute), BOOL, NULL, NULL)            \
  X(SCHEDULE, "schedule", "", SETTING, RUN, TEXT, TR__AT(schedule), NAME, tr__metric_schedule,     \
    "schedule %s")                                                                                 \
  X(CUTS, "cuts", "layer", SETTING, RUN, INT, TR__EACH(cuts), CUTS, NULL, NULL)                    \
  X(ZERO, "zero", "", SETTING, RUN, INT, TR__AT(zero), VALUE, NULL, "ZeRO %lld")                   \
  X(ALLREDUCE, "allreduce", "", SETTING, RUN, INT, TR__AT(allreduce), NAME, tr__metric_allreduce,  \
    "summed by %s")                                                                                \
  X(BATCHES_MADE, "batches_made", "edges", SETTING, MEASURE, INT, TR__AT(batches_made), NONE,      \
    NULL, NULL)                                                                                    \
  X(BATCHES_LOADED, "batches_loaded", "edges", SETTING, MEASURE, INT, TR__AT(batches_loaded), NONE, \
    NULL, NULL)                                                                                    \
  X(DATA_ON, "data_on", "", DERIVED, RUN, TEXT, TR__NOWHERE, NAME, tr__metric_data_on,             \
    "samples made on %s")                                                                          \
  X(EDGES_NCCL, "edges_across_ranks.nccl", "edges", SETTING, RANKS, INT, TR__AT(edges_nccl), VALUE, \
    NULL, "%lld edges between ranks by NCCL")                                                      \
  X(EDGES_MPI, "edges_across_ranks.mpi", "edges", SETTING, RANKS, INT, TR__AT(edges_mpi), VALUE,   \
    NULL, "%lld by MPI")                                                                           \
  X(MEMORY_PARAMS, "memory.params", "bytes", REPLICA, DEVICE, INT, TR__MEMORY(params), VALUE,      \
    NULL, NULL)                                                                                    \
  X(MEMORY_GRADS, "memory.grads", "bytes", REPLICA, DEVICE, INT, TR__MEMORY(grads), VALUE, NULL,   \
    NULL)                                                                                          \
  X(MEMORY_STATE, "memory.optimizer_state", "bytes", REPLICA, DEVICE, INT,                         \
    TR__MEMORY(optimizer_state), VALUE, NULL, NULL)                        \
  X(PEAK_ACTIVATION_BYTES, "memory.peak_activation_bytes", "bytes", DEVICE, DEVICE, INT,           \
    TR__EACH(peak_activation_bytes), VALUE, NULL, NULL)                                            \
  X(STALENESS_MEAN, "staleness.mean", "updates", MEAN, ASYNC, REAL, TR__AT(staleness_mean), REAL6, \
    NULL, "staleness mean %.2f")                                                                   \
  X(STALENESS_MAX, "staleness.max", "updates", MAX, ASYNC, REAL, TR__AT(staleness_max), REAL6,     \
    NULL, "max %.0f")                                                                              \
  X(STALENESS_HIST, "staleness.histogram", "updates", BINS, ASYNC, INT, TR__EACH(staleness_hist),  \
    BINS, NULL, NULL)                                                                              \
  X(WORKERS, "workers", "", SETTING, ASYNC, INT, TR__AT(workers), VALUE, NULL, "%lld workers")     \
  X(CLOCK_GAP_MAX, "clock_gap_max", "pushes", MAX, ASYNC, INT, TR__AT(clock_gap_max), VALUE, NULL, \
    "clock gap max %lld")                                                                          \
  X(MOMENTUM, "momentum", "", SETTING, ASYNC, REAL, TR__AT(momentum), VALUE, NULL,                 \
    "momentum %.3g")                                                                               \
  X(SERVER_UTILIZATION, "server_utilization", "fraction", DERIVED, ASYNC, REAL,                    \
    TR__AT(server_utilization), VALUE, NULL, "server busy %.2f")                                   \
  X(CONSISTENCY, "consistency", "", MEAN, RUN, REAL, TR__AT(consistency), VALUE, NULL,             \
    "replicas differ by %.3g")                                                                     \
  X(GFLOPS, "gflops", "GFLOP/s", DERIVED, RUN, REAL, TR__AT(gflops), VALUE, NULL, "%.1f GFLOP/s")  \
  X(TOKENS_PER_S, "tokens_per_s", "tokens/s", DERIVED, RUN, REAL, TR__AT(tokens_per_s), VALUE,     \
    NULL, "%.0f tokens/s")                                                                         \
  X(SGEMM_GFLOPS, "sgemm_gflops", "GFLOP/s", CALLER, RUN, REAL, TR__AT(sgemm_gflops), FN,          \
    tr__metric_sgemm, "single-thread sgemm 2048² %.1f GFLOP/s")                                   \
  X(SKIPPED_STEPS, "skipped_steps", "updates", MAX, RUN, INT, TR__AT(skipped_steps), VALUE, NULL,  \
    "%lld updates skipped (gradient norm not finite)")                                             \
  X(GRAPHS, "cuda_graphs.mode", "", SETTING, RUN, INT, TR__AT(graphs), NAME, tr__metric_graphs,    \
    NULL)                                                                                          \
  X(GRAPH_CAPTURES, "cuda_graphs.captures", "passes", SUM, RUN, INT, TR__AT(graph_captures), VALUE, \
    NULL, "%lld CUDA graphs captured")                                                             \
  X(GRAPH_LAUNCHES, "cuda_graphs.launches", "passes", SUM, RUN, INT, TR__AT(graph_launches), VALUE, \
    NULL, "%lld passes replayed")                                                                  \
  X(GRAPHS_NOTE, "cuda_graphs.note", "", FIRST, RUN, TEXT, TR__AT(graphs_note), VALUE, NULL,       \
    "CUDA graphs: %s")                                                                             \
  X(SIGNAL, "signal", "", SETTING, RUN, INT, TR__AT(signal), NAME, tr__metric_signal,              \
    "stopped by %s")                                                                               \
  X(HARDWARE_FRACTION, "hardware_fraction", "fraction", DERIVED, RUN, REAL, TR__NOWHERE, FN,       \
    tr__metric_hardware_fraction, "%.2f of the devices' sgemm")                                    \
  X(EVAL_STEP, "eval.step", "step", SETTING, RUN, INT, TR__AT(eval_step), FN,                     \
    tr__metric_eval_step, NULL)                                                                    \
  X(EVAL_SAMPLES, "eval.samples", "samples", SETTING, RUN, INT, TR__AT(eval_samples), VALUE, NULL, \
    NULL)                                                                                          \
  X(EVAL_LOSS, "eval.loss", "", SETTING, RUN, REAL, TR__AT(eval_loss), VALUE, NULL,                \
    "held-out loss %.4g")                                                                          \
  X(EVAL_ACCURACY, "eval.accuracy", "fraction", SETTING, RUN, REAL, TR__AT(eval_accuracy), VALUE,  \
    NULL, NULL)                                                                                    \
  X(EVAL_COUNT, "eval.count", "evaluations", SETTING, RUN, INT, TR__AT(eval_count), VALUE, NULL,   \
    NULL)                                                                                          \
  X(EVAL_PERCENT, "eval_accuracy_percent", "%", DERIVED, RUN, REAL, TR__NOWHERE, NONE,             \
    tr__metric_eval_percent, "accuracy %.1f%%")                                                    \
  X(PEAK_MICROBATCHES, "peak_microbatches", "micro-batches", DEVICE, DEVICE, INT,                  \
    TR__EACH(peak_microbatches), NONE, NULL, NULL)                                                 \
  X(WINDOW_STEPS, "window_steps", "steps", MIN, MEASURE, INT, TR__AT(window_steps), NONE, NULL,    \
    NULL)                                                                                          \
  X(WINDOW_PUSHES, "window_pushes", "pushes", SUM, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)    \
  X(WINDOW_START, "window_start", "clock", MIN, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)       \
  X(WINDOW_END, "window_end", "clock", MAX, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)           \
  X(BUSY_NS, "busy_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)                 \
  X(ASIDE_NS, "aside_ns", "ns", MAX, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)                   \
  /* work by what a schedule's simulation costs, in metrics.h's order (tr__busy's work_ns[]) */   \
  X(WORK_F_NS, "work_f_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)             \
  X(WORK_B_NS, "work_b_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)             \
  X(WORK_W_NS, "work_w_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)             \
  X(WORK_STEP_NS, "work_step_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)       \
  /* idle time by kind, in idle.h's order (tr__idle's ns[]) */                                     \
  X(IDLE_EDGE_NS, "idle_edge_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)       \
  X(IDLE_CREDIT_NS, "idle_credit_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)   \
  X(IDLE_LOADER_NS, "idle_loader_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)   \
  X(IDLE_STEP_NS, "idle_step_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)       \
  X(IDLE_HANDOVER_NS, "idle_handover_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL,     \
    NULL)                                                                                          \
  X(IDLE_HANDLING_NS, "idle_handling_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL,     \
    NULL)                                                                                          \
  X(IDLE_OS_NS, "idle_os_ns", "ns", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)           \
  X(SERVER_BUSY_NS, "server_busy_ns", "ns", SUM, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)  \
  X(WORKERS_ALIVE, "workers_alive", "", FIRST, ASYNC, INT, TR__AT(workers_alive), VALUE, NULL,     \
    NULL)                                                                                          \
  X(WORKERS_LEFT, "workers_left", "", FIRST, ASYNC, TEXT, TR__AT(workers_left), VALUE, NULL,       \
    "workers left (worker@step): %s")                                                              \
  X(WORKERS_GONE, "workers_gone", "", FIRST, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)      \
  X(WORKERS_JOINED, "workers_joined", "", FIRST, ASYNC, TEXT, TR__AT(workers_joined), VALUE, NULL, \
    "workers joined (worker@step): %s")                                                            \
  X(COMM_BYTES, "comm_bytes", "bytes", SUM, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL)      \
  X(COMM_BYTES_PER_STEP, "comm_bytes_per_step", "bytes", DERIVED, RUN, REAL,                     \
    TR__AT(comm_bytes_per_step), VALUE, NULL, "%.4g bytes sent a step")                         \
  X(COMM_BYTES_DEVICE, "comm_bytes_per_step_device", "bytes", DERIVED, DEVICE, REAL,             \
    TR__EACH(comm_bytes_device), VALUE, NULL, NULL)                                                 \
  X(SYNC_EVERY, "sync_every", "steps", SETTING, RUN, INT, TR__AT(sync_every), FN,                  \
    tr__metric_sync_every, "parameters averaged every %.0f steps")                                 \
  X(WARMUP_SYNC, "warmup_sync", "steps", SETTING, RUN, INT, TR__AT(warmup_sync), FN,               \
    tr__metric_warmup_sync, "after %.0f dp steps")                                                 \
  X(OUTER, "outer", "", SETTING, RUN, TEXT, TR__AT(outer), NAME, tr__metric_outer, "outer step %s") \
  X(REPLICAS_ALIVE, "replicas_alive", "", SETTING, RUN, INT, TR__AT(replicas_alive), FN,           \
    tr__metric_replicas_alive, NULL)                                                               \
  X(REPLICAS_LEFT, "replicas_left", "", SETTING, RUN, TEXT, TR__AT(replicas_left), NAME,           \
    tr__metric_replicas_left, "replicas left (replica@step): %s")                                  \
  X(REPLICA_LEFT_AT, "replica_left_at", "step", DEVICE, MEASURE, INT, TR__NOWHERE, NONE, NULL, NULL) \
  X(REPLICA_LEFT_WHY, "replica_left_why", "", FIRST, MEASURE, TEXT, TR__NOWHERE, NONE, NULL, NULL) \
  X(LAYOUT_CHOICE, "layout_choice", "", SETTING, RUN, TEXT, TR__AT(layout_choice), NAME,           \
    tr__metric_layout_choice, "%s")                                                                \
  X(PREDICTED_SAMPLES_PER_S, "predicted.samples_per_s", "samples/s", SETTING, PREDICTED, REAL,     \
    TR__AT(predicted.samples_per_s), REAL6, NULL, NULL)                                            \
  X(PREDICTED_STEP_SECONDS, "predicted.step_seconds", "s", SETTING, PREDICTED, REAL,               \
    TR__AT(predicted.step_seconds), REAL6, NULL, NULL)                                             \
  X(PREDICTED_ERROR, "predicted.error", "fraction", DERIVED, PREDICTED, REAL,                      \
    TR__AT(predicted.error), REAL4, NULL, NULL)                                                    \
  X(PREDICTED_PEAK, "predicted.peak_activation_bytes", "bytes", SETTING, DEVICE, INT,              \
    TR__EACH(predicted.peak_activation_bytes), VALUE, NULL, NULL)                                  \
  X(PREDICTED_PEAK_ERROR, "predicted.peak_activation_error", "fraction", DERIVED, PREDICTED, REAL, \
    TR__AT(predicted.peak_error), REAL4, NULL, NULL)                                               \
  X(PREDICTION_OFF, "prediction_off", "%", DERIVED, PREDICTED, REAL, TR__NOWHERE, NONE,            \
    tr__metric_prediction_off, "troupe plan %+.0f%% off")

typedef enum tr__metric_id {
#define TR__METRIC_ENUM(id, ...) TR__M_##id,
  TR__RUN_METRICS(TR__METRIC_ENUM)
#undef TR__METRIC_ENUM
  TR__METRIC_COUNT
} tr__metric_id;

typedef struct tr__metric {
  const char *key, *unit;
  tr__combine combine;
  tr__scope scope;
  tr__type type;
  ptrdiff_t at;          /* in tr_train_result; -1: not there */
  size_t size, stride;   /* the field's bytes; per device (and replica): from one to the next */
  ptrdiff_t replica_at;  /* TR__COMBINE_REPLICA: the replicas' sums (0: none) */
  tr__json json;
  const char *(*name)(const tr_result *r); /* TR__JSON_NAME */
  double (*real)(const tr_result *r);      /* TR__JSON_FN, and NONE rows' of the summary */
  const char *summary;
} tr__metric;

extern const tr__metric tr__metrics[TR__METRIC_COUNT];

/* A row's shape in the result (tr_result.h): one value, one per device, a list. */
static inline tr_figure_shape tr__metric_shape(const tr__metric *m) {
  if (m->json == TR__JSON_CUTS || m->json == TR__JSON_BINS) return TR_FIGURE_LIST;
  return m->scope == TR__SCOPE_DEVICE || m->combine == TR__COMBINE_DEVICE ||
                 m->combine == TR__COMBINE_REPLICA
             ? TR_FIGURE_DEVICES
             : TR_FIGURE_ONE;
}

/* ---- pairs ---------------------------------------------------------------------------- */

enum { TR__FIGURES_PAIRS = 64, TR__FIGURES_TEXT = 256 };

typedef union tr__value {
  int64_t i;  /* TR__INT; TR__TEXT: the text's offset in tr__figures.text */
  double f;   /* TR__REAL */
} tr__value;

typedef struct tr__pair {
  uint16_t key, index; /* index: a histogram's bin, else 0 */
  tr__value v;
} tr__pair;

/* A part's figures: flat, so that a message carries it byte for byte. */
typedef struct tr__figures {
  int n, text_used;
  tr__pair pairs[TR__FIGURES_PAIRS];
  char text[TR__FIGURES_TEXT];
} tr__figures;

/* Adds a pair of the key's type (a bin's index for TR__COMBINE_BINS). A part sends a
 * bounded set: more than TR__FIGURES_PAIRS pairs, or text, is a programming error. */
void tr__figures_int(tr__figures *f, tr__metric_id key, int64_t v);
void tr__figures_bin(tr__figures *f, tr__metric_id key, int bin, int64_t v);
void tr__figures_real(tr__figures *f, tr__metric_id key, double v);
void tr__figures_text(tr__figures *f, tr__metric_id key, const char *text);
/* Adds `offset` to every time on the sender's clock (unit "clock"). */
void tr__figures_shift_clock(tr__figures *f, int64_t offset);

/* ---- the reduction ---------------------------------------------------------------------- */

/* Every source's figures combined by the table's rules, for any number of devices. */
typedef struct tr__reduced {
  int ndevices;
  int64_t count[TR__METRIC_COUNT];  /* the sources that sent the key */
  tr__value v[TR__METRIC_COUNT];    /* SUM, MAX, MIN, MEAN, FIRST; DEVICE: their sum */
  const char *text[TR__METRIC_COUNT]; /* FIRST text (in a source's figures) */
  tr__value *device;                /* [device × TR__METRIC_COUNT + key]: DEVICE, REPLICA, SUM */
  bool *sent;                       /* as device: whether the device sent the key */
  int64_t bins[TR__METRIC_COUNT][TR_TRAIN_STALENESS_BINS]; /* BINS */
} tr__reduced;

/* The figures of `n` sources: source i < ndevices is device i (replica × stages + stage),
 * the others (the server) have no device. Pairs that are not the table's (bytes from
 * another process may be anything) are left out. Text stays in the sources' figures.
 * 0, or TR_ENOMEM; tr__reduced_free frees what it holds (of a zeroed one too). */
int tr__metrics_reduce(tr__reduced *out, const tr__figures *const *sources, int n, int ndevices);
void tr__reduced_free(tr__reduced *red);
/* Device d's values, indexed by key. */
static inline const tr__value *tr__reduced_device(const tr__reduced *red, int d) {
  return red->device + (size_t)d * TR__METRIC_COUNT;
}
/* The reduced value of a scalar key (NaN, or 0 for integers, where none was sent). */
double tr__reduced_real(const tr__reduced *red, tr__metric_id key);
int64_t tr__reduced_int(const tr__reduced *red, tr__metric_id key);
/* Every measured row's value into the result (those sent only: per device, those of the
 * devices that sent it), and the figures derived from the measures alone
 * (comm_bytes_per_step: "first_step" and "steps" are in the result before). The result has
 * its devices (tr__result_set_devices) first. 0, or TR_ENOMEM. */
int tr__metrics_apply(const tr__reduced *red, tr_result *r);

/* The rows' functions: a text, or a value, read from the result's other rows. */
const char *tr__metric_schedule(const tr_result *r);
const char *tr__metric_allreduce(const tr_result *r);
const char *tr__metric_data_on(const tr_result *r);
const char *tr__metric_graphs(const tr_result *r);
const char *tr__metric_signal(const tr_result *r);
double tr__metric_sgemm(const tr_result *r);
/* The prediction's error of samples/s in percent where it is over 10% (the summary says so),
 * else NaN. */
double tr__metric_prediction_off(const tr_result *r);
/* layout.automatic's choice, or NULL (JSON null). */
const char *tr__metric_layout_choice(const tr_result *r);
double tr__metric_hardware_fraction(const tr_result *r);
/* The held-out evaluation's step (NaN: none ran, and --json's "eval" is null). */
double tr__metric_eval_step(const tr_result *r);
/* Local SGD's settings: null outside strategy local. */
double tr__metric_sync_every(const tr_result *r);
/* The members of a tensor group, for the summary (NaN: none, 1) */
double tr__metric_tensor(const tr_result *r);
double tr__metric_warmup_sync(const tr_result *r);
const char *tr__metric_outer(const tr_result *r);
double tr__metric_eval_percent(const tr_result *r); /* the summary's accuracy in % */
/* Local SGD's elastic replicas (tr_async_config.elastic): those alive at the end (NaN
 * outside an elastic local run), and those that left as "replica@step,..." (NULL: none) */
double tr__metric_replicas_alive(const tr_result *r);
const char *tr__metric_replicas_left(const tr_result *r);

#endif
