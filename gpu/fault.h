/* fault.h — devices that are slow or fail on purpose, for tests (private to gpu/).
 *
 * A device spec `fault(SPEC;RULE)` opens the devices SPEC names, each behind a decorator
 * backend (fault.c) that wraps its backend's table: the ops RULE selects sleep after they
 * run, or one of them fails instead of running. The devices keep their names and kinds, so
 * a run on them reads as a run on SPEC; only their timing and the injected failure differ.
 * That is how tests slow a stage down or make a worker fail, by composition, with nothing
 * in the actors that knows. `fault(SPEC;RULE;RULE...)` applies several rules, each counting
 * its own calls (up to 8: one worker dies at one step, another at another). RULE is
 * key=value pairs separated by commas:
 *
 *   dev=I     the device of the list it applies to (its index); default: every device
 *   op=NAME   the calls it counts: the kernels (TR__OP_MAP), gemm (every GEMM entry) and
 *             capture (ending a capture) whose name begins with NAME; default: every one
 *   us=U      each counted call sleeps U microseconds once it has run...
 *   grow=G    ...and G more for every `every` counted calls before it on that device
 *   every=E   (default 1): how steps that slow down as a run goes on are made
 *   fail=N    the N-th counted call (from 1) on each device it applies to fails instead of
 *             running (TR_EDEVICE, "an injected failure"); a capture ends dropped
 *   from=N    the N-th counted call and every one after it fail: a device that died
 *
 * A rule that could never fire is refused (TR_EINVAL naming it and the fix), not kept as a
 * silent no-op: one given none of us, grow, fail and from, an empty `op=`, or an op no device
 * it applies to makes (op=capture on host devices).
 *
 *   fault(host:2;dev=1,op=mse,us=3000)          host:1 sleeps 3 ms after each loss pass
 *   fault(host:1;op=mse,us=50000,grow=50000,every=2)   50 ms more each step
 *   fault(host:2;dev=1,op=mse_b,fail=5)  host:1's fifth loss backward fails
 *   fault(cuda:0;op=capture,fail=1)             the first capture of each device fails
 *   fault(host:3;dev=1,op=mse_b,from=5;dev=2,op=mse_b,from=9)  host:1 dies at its fifth
 *                                               loss backward, host:2 at its ninth
 */
#ifndef TR_FAULT_H
#define TR_FAULT_H

#include <stdbool.h>
#include <stddef.h>

#include "tr_device.h"

/* Whether spec is a fault(...) spec. */
bool tr__fault_spec(const char *spec);
/* tr_device_list_open for a fault(...) spec: the devices of its SPEC, decorated by its RULE;
 * TR_EINVAL naming the part of the rule at fault. */
int tr__fault_list_open(tr_device_list **out, const char *spec, char *err, size_t err_size);

#endif
