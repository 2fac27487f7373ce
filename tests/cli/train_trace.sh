#!/usr/bin/env bash
# train_trace.sh TROUPE — `troupe train --trace` takes bounded memory however long the run:
# 3,000 tiny steps under --trace-budget 1 keep at most 1 MiB of events, the file holds the
# last steps (the last update is there, the first steps are not) and says in its metadata
# which were dropped; `troupe timeline` draws it and repeats the note; a short run drops
# nothing; --profile-steps still selects its window.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-trace-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0
fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }
check() { # check WHAT COMMAND...: the command succeeds
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then ok "$what"; else fail "$what"; fi
}
field() { grep -o "\"$1\":[0-9]*" "$2" | tail -1 | cut -d: -f2; } # the last number named $1

if ! timeout 60 "$troupe" train --quiet --steps 3000 --trace long.json --trace-budget 1; then
  fail "a 3000-step run with --trace-budget 1"
else
  budget=$(field budget_bytes long.json) peak=$(field peak_bytes long.json)
  events=$(field events long.json) first=$(field first_step long.json)
  check "the budget is 1 MiB" test "$budget" -eq 1048576
  check "the events never took more than the budget ($peak bytes)" test "$peak" -le "$budget"
  check "at most a MiB's worth of events kept ($events)" test "$events" -le $((1048576 / 80))
  check "the first steps were dropped (kept from step $first)" test "$first" -gt 100
  check "the note says so" grep -q "\"note\":\"events before step $first were dropped: " long.json
  check "the last step's update is in the file" grep -q '"name":"update",[^}]*"step":2999,' long.json
  check "step 0's update is not" bash -c "! grep -q '\"name\":\"update\",[^}]*\"step\":0,' long.json"
  check "the file is bounded too ($(stat -c %s long.json) bytes)" test "$(stat -c %s long.json)" -lt 4000000
  if "$troupe" timeline long.json -o long.svg 2>err; then
    check "timeline repeats the note" grep -q "long.json: events before step $first were dropped" err
  else
    fail "timeline of the trace with dropped steps: $(cat err)"
  fi
fi

if timeout 60 "$troupe" train --quiet --steps 8 --trace short.json; then
  check "a short run drops nothing" grep -q '"first_step":0,"dropped_events":0,"lost_events":0}' short.json
  check "... under the default budget of 64 MiB" grep -q '"budget_bytes":67108864,' short.json
else
  fail "an 8-step run with --trace"
fi

if timeout 60 "$troupe" train --quiet --steps 3000 --trace window.json --trace-budget 1 \
  --profile-steps 20:30; then
  check "a window keeps its steps whole" grep -q '"name":"update",[^}]*"step":20,' window.json
  check "... to its last" grep -q '"name":"update",[^}]*"step":29,' window.json
  check "... and nothing after it" bash -c "! grep -q '\"name\":\"update\",[^}]*\"step\":30,' window.json"
  check "... nothing dropped" grep -q '"dropped_events":0,' window.json
else
  fail "a window with a budget"
fi

out=$("$troupe" train --quiet --steps 2 --trace-budget 1 2>&1)
check "--trace-budget without --trace is refused ($out)" grep -q -- "--trace" <<<"$out"
exit $failed
