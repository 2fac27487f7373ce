/* policy_frozen.h — a test's own step policy (policy_frozen.c). */
#ifndef POLICY_FROZEN_H
#define POLICY_FROZEN_H

#include "step_policy.h"

extern const tr__policy_row policy_frozen;

#endif
