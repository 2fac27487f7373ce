/* troupe.h — the whole public API of troupe.
 *
 * Build against the installed library with `pkg-config --cflags --libs troupe`, then
 * `#include <troupe.h>`. Each module's header says what it is for and how to use it:
 *
 *   tr_base.h     status codes, assertions, clocks
 *   tr_msg.h      messages and message types
 *   tr_mailbox.h  the lock-free MPSC queue under every actor
 *   tr_system.h   actors (pinned to a thread, or on the libuv loop) and the system
 *   tr_trace.h    per-thread tracing and Chrome trace output
 *   tr_file.h     the files a run is given, checked before the work that needs them
 *   tr_device.h   devices (host CPUs, CUDA GPUs): memory, streams, events, copies
 *   tr_ops.h      what they compute on a stream: GEMM, kernels, optimizers' updates
 *   tr_checkpoint.h  safetensors checkpoints, written atomically, read with validation
 *   tr_layers.h   layers with explicit forward and backward
 *   tr_layer_type.h  layer kinds as tables of operations: the built-in ones, and your own
 *   tr_model.h    models: layers, loss, parameters, cuts; optimizers
 *   tr_stage.h    a model's layers on one device: forward, backward, the optimizer's step
 *   tr_optim.h    optimizer kinds as tables: the built-in ones, and your own
 *   tr_loss.h     losses as tables: the built-in ones, and your own
 *   tr_data.h     the workloads' data: synthetic generators and byte files
 *   tr_train.h    training runs: a model, a strategy, devices, and the run's figures
 *   tr_schedule.h pipeline schedules (GPipe, 1F1B, interleaved, ZB-H1) as per-stage action lists
 *   tr_plan.h     a layout's step predicted from costs, through the schedules' own lists
 *   tr_graph.h    training graphs: actors, typed edges that carry credits, steps, the end
 *   tr_job.h      the built-in training actors (loader, stage, coordinator) and their edges
 *   tr_result.h   what a training run measured, each figure by its key (tr_result)
 *   tr_allreduce.h  how replica groups sum and what carries edges between processes
 */
#ifndef TROUPE_H
#define TROUPE_H

#include "tr_base.h"
#include "tr_checkpoint.h"
#include "tr_data.h"
#include "tr_device.h"
#include "tr_file.h"
#include "tr_graph.h"
#include "tr_allreduce.h"
#include "tr_job.h"
#include "tr_layer_type.h"
#include "tr_layers.h"
#include "tr_mailbox.h"
#include "tr_loss.h"
#include "tr_model.h"
#include "tr_optim.h"
#include "tr_msg.h"
#include "tr_ops.h"
#include "tr_plan.h"
#include "tr_result.h"
#include "tr_schedule.h"
#include "tr_stage.h"
#include "tr_system.h"
#include "tr_trace.h"
#include "tr_train.h"

#endif
