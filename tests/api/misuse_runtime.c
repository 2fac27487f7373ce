/* misuse_runtime.c — hostile calls to the runtime (misuse.h): systems, actors, messages,
 * mailboxes, traces, files and worlds. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "misuse.h"

typedef struct {
  tr_msg hdr;
  int x;
} probe_msg;
TR_MSGTYPE_DEFINE(probe_type, probe_msg);

static int nothing_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour nothing = {.name = "nothing", .receive = nothing_receive};

static int stop_start(tr_actor *self) {
  tr_system_stop(tr_actor_system(self), 0);
  return 0;
}
static const tr_behaviour stopper = {.name = "stopper", .start = stop_start,
                                     .receive = nothing_receive};

static tr_actor *spawned(tr_system *s, const tr_behaviour *b) {
  tr_actor *a = NULL;
  if (tr_actor_spawn(s, &(tr_actor_config){.name = "a", .kind = TR_ACTOR_LOOP, .behaviour = b},
                     &a))
    _exit(120);
  return a;
}

/* ---- base ------------------------------------------------------------------------------- */

MISUSE(errorf_null_err, "tr_errorf(NULL, 0, TR_EINVAL, ...)", TR_EINVAL, NULL, NULL) {
  return tr_errorf(NULL, 0, TR_EINVAL, "%s", "nowhere to go");
}

MISUSE(errorf_zero_size, "tr_errorf(buf, 0, TR_EINVAL, ...)", TR_EINVAL, NULL, NULL) {
  char buf[1] = {'x'};
  const int rc = tr_errorf(buf, 0, TR_EINVAL, "%s", "nowhere to go");
  return buf[0] == 'x' ? rc : 0;
}

MISUSE(strerror_unknown, "tr_strerror(12345)", MISUSE_DEFINED, NULL, NULL) {
  const char *s = tr_strerror(12345);
  return s && *s ? 0 : 1;
}

/* ---- systems and actors ------------------------------------------------------------------ */

MISUSE(system_new_null_out, "tr_system_new(NULL, NULL)", TR_EINVAL, "tr_system_new", "out") {
  return tr_system_new(NULL, NULL);
}

MISUSE(system_new_negative_batch, "tr_system_new(&s, {.turn_batch = -1})", TR_EINVAL,
       "tr_system_new", "turn_batch") {
  tr_system *s;
  return tr_system_new(&s, &(tr_system_config){.turn_batch = -1});
}

MISUSE(system_new_negative_watchdog, "tr_system_new(&s, {.watchdog_ms = -5})", TR_EINVAL,
       "tr_system_new", "watchdog_ms") {
  tr_system *s;
  return tr_system_new(&s, &(tr_system_config){.watchdog_ms = -5});
}

MISUSE(system_new_negative_spin, "tr_system_new(&s, {.spin_us = -3})", TR_EINVAL,
       "tr_system_new", "spin_us") {
  tr_system *s;
  return tr_system_new(&s, &(tr_system_config){.spin_us = -3});
}

MISUSE(spawn_null_system, "tr_actor_spawn(NULL, &c, &a)", TR_EINVAL, "tr_actor_spawn", "sys") {
  tr_actor *a;
  return tr_actor_spawn(NULL, &(tr_actor_config){.behaviour = &nothing}, &a);
}

MISUSE(spawn_null_config, "tr_actor_spawn(s, NULL, &a)", TR_EINVAL, "tr_actor_spawn", "config") {
  tr_actor *a;
  return tr_actor_spawn(system_new(), NULL, &a);
}

MISUSE(spawn_null_out, "tr_actor_spawn(s, &c, NULL)", TR_EINVAL, "tr_actor_spawn", "out") {
  return tr_actor_spawn(system_new(), &(tr_actor_config){.behaviour = &nothing}, NULL);
}

MISUSE(spawn_null_behaviour, "tr_actor_spawn(s, {.behaviour = NULL}, &a)", TR_EINVAL,
       "tr_actor_spawn", "behaviour") {
  tr_actor *a;
  return tr_actor_spawn(system_new(), &(tr_actor_config){.name = "x"}, &a);
}

MISUSE(spawn_no_receive, "tr_actor_spawn(s, {.behaviour = {no receive}}, &a)", TR_EINVAL,
       "tr_actor_spawn", "receive") {
  static const tr_behaviour deaf = {.name = "deaf"};
  tr_actor *a;
  return tr_actor_spawn(system_new(), &(tr_actor_config){.behaviour = &deaf}, &a);
}

MISUSE(spawn_bad_kind, "tr_actor_spawn(s, {.kind = 7}, &a)", TR_EINVAL, "tr_actor_spawn",
       "kind") {
  tr_actor *a;
  return tr_actor_spawn(system_new(),
                        &(tr_actor_config){.kind = (tr_actor_kind)7, .behaviour = &nothing}, &a);
}

MISUSE(spawn_bad_spin, "tr_actor_spawn(s, {.spin_us = -9}, &a)", TR_EINVAL, "tr_actor_spawn",
       "spin_us") {
  tr_actor *a;
  return tr_actor_spawn(system_new(), &(tr_actor_config){.behaviour = &nothing, .spin_us = -9},
                        &a);
}

MISUSE(system_run_null, "tr_system_run(NULL)", TR_EINVAL, "tr_system_run", "sys") {
  return tr_system_run(NULL);
}

MISUSE(system_run_twice, "tr_system_run(s) twice", TR_ESTATE, "tr_system_run", "once") {
  tr_system *s = system_new();
  spawned(s, &stopper);
  if (tr_system_run(s)) return 1;
  const int rc = tr_system_run(s);
  return said(msg, n, rc, tr_system_error(s));
}

MISUSE(system_stop_null, "tr_system_stop(NULL, 0)", MISUSE_DEFINED, "tr_system_stop", "sys") {
  tr_system_stop(NULL, 0);
  return 0;
}

MISUSE(system_error_null, "tr_system_error(NULL)", MISUSE_DEFINED, NULL, NULL) {
  const char *s = tr_system_error(NULL);
  return s ? 0 : 1;
}

MISUSE(system_free_null, "tr_system_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_free(NULL);
  return 0;
}

MISUSE(system_report_null, "tr_system_report(NULL, buf, n)", MISUSE_DEFINED, NULL, NULL) {
  char buf[64];
  tr_system_report(NULL, buf, sizeof buf);
  return 0;
}

MISUSE(system_report_null_buf, "tr_system_report(s, NULL, 64)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_report(system_new(), NULL, 64);
  return 0;
}

MISUSE(system_loop_null, "tr_system_loop(NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_system_loop(NULL) == NULL ? 0 : 1;
}

MISUSE(system_signal_null, "tr_system_signal(NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_system_signal(NULL) == 0 ? 0 : 1;
}

MISUSE(system_watchdog_null, "tr_system_set_watchdog_ms(NULL, 5)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_set_watchdog_ms(NULL, 5);
  return tr_system_watchdog_ms(NULL) == 0 ? 0 : 1;
}

MISUSE(send_null_actor, "tr_actor_send(NULL, m)", MISUSE_DEFINED, "tr_actor_send", "to") {
  tr_actor_send(NULL, tr_msg_new(&probe_type));
  return 0;
}

MISUSE(send_null_msg, "tr_actor_send(a, NULL)", MISUSE_DEFINED, "tr_actor_send", "msg") {
  tr_actor_send(spawned(system_new(), &nothing), NULL);
  return 0;
}

MISUSE(send_ctl_null_actor, "tr_actor_send_ctl(NULL, m)", MISUSE_DEFINED, "tr_actor_send_ctl",
       "to") {
  tr_actor_send_ctl(NULL, tr_msg_new(&probe_type));
  return 0;
}

MISUSE(send_ctl_null_msg, "tr_actor_send_ctl(a, NULL)", MISUSE_DEFINED, "tr_actor_send_ctl",
       "msg") {
  tr_actor_send_ctl(spawned(system_new(), &nothing), NULL);
  return 0;
}

MISUSE(send_after_run, "tr_actor_send(a, m) after the system stopped", MISUSE_DEFINED, NULL,
       NULL) {
  tr_system *s = system_new();
  tr_actor *a = spawned(s, &stopper);
  if (tr_system_run(s)) return 1;
  tr_actor_send(a, tr_msg_new(&probe_type)); /* accepted, freed with the system */
  tr_system_free(s);
  return 0;
}

MISUSE(timer_start_null, "tr_actor_timer_start(NULL, 1, 0, 0)", TR_EINVAL,
       "tr_actor_timer_start", "a") {
  return tr_actor_timer_start(NULL, 1, 0, 0);
}

MISUSE(timer_stop_null, "tr_actor_timer_stop(NULL, 0)", TR_EINVAL, "tr_actor_timer_stop", "a") {
  return tr_actor_timer_stop(NULL, 0);
}

MISUSE(actor_fail_null, "tr_actor_fail(NULL, TR_EIO, ...)", TR_EIO, "tr_actor_fail", "self") {
  return tr_actor_fail(NULL, TR_EIO, "%s", "lost");
}

MISUSE(actor_getters_null, "tr_actor_name/_state/_system(NULL)", MISUSE_DEFINED, NULL, NULL) {
  return tr_actor_name(NULL) && !tr_actor_state(NULL) && !tr_actor_system(NULL) ? 0 : 1;
}

MISUSE(signal_name_unknown, "tr_signal_name(-1)", MISUSE_DEFINED, NULL, NULL) {
  return tr_signal_name(-1) ? 0 : 1;
}

/* ---- messages and mailboxes --------------------------------------------------------------- */

MISUSE(msg_new_null_type, "tr_msg_new(NULL)", MISUSE_DEFINED, "tr_msg_new", "type") {
  return tr_msg_new(NULL) == NULL ? 0 : 1;
}

MISUSE(msg_new_size_small, "tr_msg_new_size(&t, 3)", MISUSE_DEFINED, "tr_msg_new_size", "size") {
  return tr_msg_new_size(&probe_type, 3) == NULL ? 0 : 1;
}

MISUSE(msg_new_size_null_type, "tr_msg_new_size(NULL, 64)", MISUSE_DEFINED, "tr_msg_new_size",
       "type") {
  return tr_msg_new_size(NULL, 64) == NULL ? 0 : 1;
}

MISUSE(msg_free_null, "tr_msg_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_msg_free(NULL);
  return 0;
}

MISUSE(msg_pool_free_null, "tr_msg_pool_free(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_msg_pool_free(NULL);
  return 0;
}

MISUSE(mailbox_init_null, "tr_mailbox_init(NULL)", MISUSE_DEFINED, "tr_mailbox_init", "q") {
  tr_mailbox_init(NULL);
  return 0;
}

MISUSE(mailbox_drain_null, "tr_mailbox_drain(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_mailbox_drain(NULL);
  return 0;
}

/* ---- traces -------------------------------------------------------------------------------- */

MISUSE(trace_write_null_system, "tr_system_trace_write(NULL, path)", TR_EINVAL,
       "tr_system_trace_write", "sys") {
  return tr_system_trace_write(NULL, scratch_path("t.json"));
}

MISUSE(trace_write_null_path, "tr_system_trace_write(s, NULL)", TR_EINVAL,
       "tr_system_trace_write", "path") {
  return tr_system_trace_write(system_new(), NULL);
}

MISUSE(trace_stats_null, "tr_system_trace_stats(s, NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_trace_stats(system_new(), NULL);
  tr_trace_stats st;
  tr_system_trace_stats(NULL, &st);
  return 0;
}

MISUSE(trace_visit_null, "tr_system_trace_visit(s, NULL, NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_trace_visit(system_new(), NULL, NULL);
  return tr_system_trace_count(NULL) == 0 ? 0 : 1;
}

MISUSE(trace_window_null, "tr_system_trace_window(NULL, 0, 5)", MISUSE_DEFINED, NULL, NULL) {
  tr_system_trace_window(NULL, 0, 5);
  tr_system_trace_step(NULL, 1);
  tr_system_trace_budget(NULL, 1 << 20);
  tr_system_trace_classify(NULL, NULL);
  return 0;
}

MISUSE(trace_window_backwards, "tr_system_trace_window(s, 5, 2)", MISUSE_DEFINED,
       "tr_system_trace_window", "to") {
  tr_system_trace_window(system_new(), 5, 2);
  return 0;
}

MISUSE(trace_counter_null, "tr_trace_counter(NULL, 1)", MISUSE_DEFINED, NULL, NULL) {
  tr_trace_counter(NULL, 1);
  return 0;
}

MISUSE(trace_flow_null, "tr_trace_flow(NULL, \"e\")", MISUSE_DEFINED, NULL, NULL) {
  tr_trace_flow(NULL, "e");
  return 0;
}

MISUSE(trace_actor_null, "tr_trace_enabled/_record/_label(NULL, ...)", MISUSE_DEFINED, NULL,
       NULL) {
  tr_trace_record(NULL, "x", 0, 1, -1);
  tr_trace_label(NULL, "host:0");
  return tr_trace_enabled(NULL) == 0 && tr_trace_wants(NULL, 0) == 0 ? 0 : 1;
}

/* ---- files --------------------------------------------------------------------------------- */

MISUSE(file_check_null_path, "tr_file_check_output(NULL, \"out\", err, n)", TR_EINVAL,
       "tr_file_check_output", "path") {
  return tr_file_check_output(NULL, "out", msg, n);
}

MISUSE(file_check_empty_no_err, "tr_file_check_output(\"\", \"out\", NULL, 0)", TR_EINVAL, NULL,
       NULL) {
  return tr_file_check_output("", "out", NULL, 0);
}

MISUSE(file_check_null_what, "tr_file_check_output(dir, NULL, err, n)", TR_EINVAL, NULL, NULL) {
  return tr_file_check_output(scratch_path(""), NULL, msg, n);
}

MISUSE(file_probe_null_path, "tr_file_probe_output(NULL, \"out\", err, n)", TR_EINVAL,
       "tr_file_probe_output", "path") {
  return tr_file_probe_output(NULL, "out", msg, n);
}

MISUSE(file_target_null_path, "tr_file_output_target(NULL, &p)", TR_EINVAL,
       "tr_file_output_target", "path") {
  char *p;
  return tr_file_output_target(NULL, &p);
}

MISUSE(file_target_null_out, "tr_file_output_target(path, NULL)", TR_EINVAL,
       "tr_file_output_target", "out") {
  return tr_file_output_target(scratch_path("x"), NULL);
}

MISUSE(file_lock_null_path, "tr_file_lock_output(NULL, \"out\", &l, err, n)", TR_EINVAL,
       "tr_file_lock_output", "path") {
  tr_file_lock *l;
  return tr_file_lock_output(NULL, "out", &l, msg, n);
}

MISUSE(file_lock_null_out, "tr_file_lock_output(path, \"out\", NULL, err, n)", TR_EINVAL,
       "tr_file_lock_output", "out") {
  return tr_file_lock_output(scratch_path("locked"), "out", NULL, msg, n);
}

MISUSE(file_unlock_null, "tr_file_unlock(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_file_unlock(NULL);
  return 0;
}

MISUSE(file_open_null_path, "tr_file_open_regular(NULL, \"data\", &fd, &size, err, n)",
       TR_EINVAL, "tr_file_open_regular", "path") {
  int fd;
  uint64_t size;
  return tr_file_open_regular(NULL, "data", &fd, &size, msg, n);
}

MISUSE(file_open_null_fd, "tr_file_open_regular(path, \"data\", NULL, &size, err, n)",
       TR_EINVAL, "tr_file_open_regular", "fd") {
  uint64_t size;
  return tr_file_open_regular("/dev/null", "data", NULL, &size, msg, n);
}

MISUSE(file_read_null_buf, "tr_file_read_at(fd, NULL, 4, 0, ...)", TR_EINVAL, "tr_file_read_at",
       "buf") {
  return tr_file_read_at(0, NULL, 4, 0, "data", "f", msg, n);
}

MISUSE(file_read_bad_fd, "tr_file_read_at(-1, buf, 4, 0, ...)", MISUSE_REFUSED, NULL, NULL) {
  char buf[4];
  return tr_file_read_at(-1, buf, 4, 0, "data", "f", msg, n);
}

MISUSE(file_distinct_null, "tr_file_check_distinct(NULL, ...)", MISUSE_DEFINED, NULL, NULL) {
  return tr_file_check_distinct(NULL, "trace", "x", "data", NULL, 0) == 0 ? 0 : 1;
}

/* ---- worlds ------------------------------------------------------------------------------- */

MISUSE(world_open_null_out, "tr_world_open(NULL, err, n)", TR_EINVAL, "tr_world_open", "out") {
  return tr_world_open(NULL, msg, n);
}

MISUSE(world_open_twice, "tr_world_open(&w, err, n) twice", TR_EINVAL, "world", "open") {
  tr_world *w;
  if (tr_world_open(&w, msg, n)) return 1;
  return tr_world_open(&w, msg, n);
}

MISUSE(world_close_null, "tr_world_close(NULL)", MISUSE_DEFINED, NULL, NULL) {
  tr_world_close(NULL);
  return tr_world_rank(NULL) == 0 && tr_world_size(NULL) == 1 && tr_world_kind(NULL) ? 0 : 1;
}

MISUSE(world_allgather_null, "tr_world_allgather(NULL, mine, 4, all)", TR_EINVAL,
       "tr_world_allgather", "w") {
  int mine = 1, all = 0;
  return tr_world_allgather(NULL, &mine, sizeof mine, &all);
}

MISUSE(world_allgather_null_buffers, "tr_world_allgather(w, NULL, 4, NULL)", TR_EINVAL,
       "tr_world_allgather", "mine") {
  tr_world *w;
  if (tr_world_open(&w, NULL, 0)) return 1;
  return tr_world_allgather(w, NULL, 4, NULL);
}

MISUSE(world_agree_null, "tr_world_agree(NULL, \"x\", mine, 4, err, n)", TR_EINVAL,
       "tr_world_agree", "w") {
  int mine = 1;
  return tr_world_agree(NULL, "x", &mine, sizeof mine, msg, n);
}

MISUSE(world_devices_null, "tr_world_devices(NULL, \"host:1\", &l, err, n)", TR_EINVAL,
       "tr_world_devices", "w") {
  tr_device_list *l;
  return tr_world_devices(NULL, "host:1", &l, msg, n);
}

MISUSE(world_devices_null_out, "tr_world_devices(w, \"host:1\", NULL, err, n)", TR_EINVAL,
       "tr_world_devices", "out") {
  tr_world *w;
  if (tr_world_open(&w, NULL, 0)) return 1;
  return tr_world_devices(w, "host:1", NULL, msg, n);
}
