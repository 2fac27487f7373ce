#!/usr/bin/env bash
# signals.sh TROUPE — `troupe train` and signals: the first SIGINT, SIGTERM, SIGHUP, SIGQUIT,
# SIGUSR1 or SIGUSR2 ends the run in order (the step in flight, the checkpoint, the figures)
# within seconds and exits 128 + its number: 130, 143, 129, 131, 138, 140 (SIGHUP ignored, as
# under nohup, stays ignored); a SIGINT during start-up ends
# it there, saying so; a second one ends the process at once; a process killed during its checkpoint writes
# leaves a valid checkpoint, and its temporary file goes at the next successful write.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-signals-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
# waits (at most 60 s) until FILE exists, or the process PID is gone
wait_for() {
  local i
  for ((i = 0; i < 6000; i++)); do
    [[ -e $1 ]] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}
json() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

# The first signal: the run ends after its step, writes its checkpoint and its figures, and
# exits as the signal would have. The checkpoint resumes. SIGQUIT (whose default is a core
# dump) and SIGUSR1/SIGUSR2 (a batch scheduler's warning before its time limit) too.
for sig in INT TERM HUP QUIT USR1 USR2; do
  want=$((128 + $(kill -l $sig)))
  rm -f ck.st out.json err.txt
  "$troupe" train --model simplenet --steps 100000000 --checkpoint ck.st --checkpoint-every 100 \
    --json >out.json 2>err.txt &
  pid=$!
  wait_for ck.st $pid || fail "SIG$sig: the run never wrote its first checkpoint"
  t0=$(now)
  kill -$sig $pid
  for ((i = 0; i < 3000 && $(kill -0 $pid 2>/dev/null; echo $?) == 0; i++)); do sleep 0.01; done
  kill -9 $pid 2>/dev/null && ignored=1 || ignored=0 # a run that went on 30 s
  wait $pid
  rc=$?
  took=$(elapsed "$t0" "$(now)")
  if ((ignored)); then
    fail "SIG$sig: the run went on $took s after it (killed): $(cat err.txt)"
  elif [[ $rc -ne $want ]]; then
    fail "SIG$sig: exit $rc, expected $want: $(cat err.txt)"
  elif ! python3 -c "import sys; sys.exit(float(sys.argv[1]) > 5)" "$took"; then
    fail "SIG$sig: the run ended $took s after the signal"
  elif ! grep -q "stopped by SIG$sig after step [0-9]* (checkpoint ck.st written)" err.txt; then
    fail "SIG$sig: stderr does not say where it stopped: $(cat err.txt)"
  elif [[ $(json out.json signal) != SIG$sig ]]; then
    fail "SIG$sig: --json does not name the signal: $(cat out.json)"
  else
    steps=$(json out.json steps)
    "$troupe" train --model simplenet --steps $((steps + 3)) --resume ck.st --json --quiet \
      >resumed.json 2>err.txt
    if [[ $? -ne 0 || $(json resumed.json first_step) != "$steps" ]]; then
      fail "SIG$sig: the checkpoint of step $steps does not resume: $(cat err.txt)"
    else
      ok "SIG$sig: exit $rc $took s after the signal, at step $steps, checkpoint resumed"
    fi
  fi
done

# SIGHUP ignored when the run began (nohup) stays ignored: the run goes on, SIGTERM ends it.
rm -f ck.st
(trap '' HUP; exec "$troupe" train --model simplenet --steps 100000000 --checkpoint ck.st \
  --checkpoint-every 100 --quiet 2>err.txt) &
pid=$!
if wait_for ck.st $pid; then
  kill -HUP $pid
  sleep 1
  if ! kill -0 $pid 2>/dev/null; then
    wait $pid
    fail "SIGHUP ignored (nohup): the run ended, exit $?: $(cat err.txt)"
  else
    kill -TERM $pid
    wait $pid
    rc=$?
    [[ $rc -eq 143 ]] && ok "SIGHUP ignored (nohup): the run went on; SIGTERM ended it (143)" ||
      fail "SIGHUP ignored (nohup): then SIGTERM: exit $rc: $(cat err.txt)"
  fi
else
  fail "SIGHUP ignored (nohup): the run never wrote its first checkpoint: $(cat err.txt)"
fi

# A SIGINT during start-up (a gpt pipeline measures its layers for seconds before its first
# step) is not lost: the run ends there, saying so, and exits 130. Sent once the process
# catches it (/proc: its SigCgt has SIGINT's bit), which is before it opens anything.
"$troupe" train --model gpt --strategy pipeline --devices host:2 --steps 100000000 --quiet \
  2>err.txt &
pid=$!
for ((i = 0; i < 1000; i++)); do
  cgt=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null)
  [[ -n $cgt ]] && (( (16#$cgt >> 1) & 1 )) && break
  sleep 0.005
done
t0=$(now)
kill -INT $pid
for ((i = 0; i < 3000 && $(kill -0 $pid 2>/dev/null; echo $?) == 0; i++)); do sleep 0.01; done
kill -9 $pid 2>/dev/null
wait $pid
rc=$?
took=$(elapsed "$t0" "$(now)")
if [[ $rc -ne 130 ]]; then
  fail "SIGINT during start-up: exit $rc ($took s after it), expected 130: $(cat err.txt)"
elif ! grep -q '^troupe: stopped by SIGINT during start-up, before the first step' err.txt; then
  fail "SIGINT during start-up: stderr does not say so: $(cat err.txt)"
else
  ok "SIGINT during start-up: exit 130, $took s after it"
fi

# A second signal ends the process at once, whatever the step in flight (gpt steps of 64
# sequences take a second or more on a host device).
rm -f ck.st
"$troupe" train --model gpt --batch 64 --steps 100000000 --checkpoint ck.st --checkpoint-every 1 \
  --quiet 2>err.txt &
pid=$!
if wait_for ck.st $pid; then
  kill -INT $pid
  sleep 0.3
  t0=$(now)
  kill -INT $pid
  wait $pid
  rc=$?
  took=$(elapsed "$t0" "$(now)")
  if [[ $rc -ne 130 ]]; then
    fail "a second SIGINT: exit $rc, expected 130: $(cat err.txt)"
  elif ! python3 -c "import sys; sys.exit(float(sys.argv[1]) > 2)" "$took"; then
    fail "a second SIGINT: the process ended $took s after it"
  else
    ok "a second SIGINT: exit 130, $took s after it"
  fi
else
  fail "gpt never wrote its first checkpoint: $(cat err.txt)"
fi

# kill -9 while checkpoints are written: the checkpoint left is valid, and the temporary file
# the killed writer leaves goes at the next successful write of that checkpoint.
leftover=
for attempt in 1 2 3 4 5 6 7 8; do
  rm -f ck.st .ck.st.tmp.*
  "$troupe" train --model gpt --batch 1 --steps 100000000 --checkpoint ck.st \
    --checkpoint-every 1 --quiet 2>/dev/null &
  pid=$!
  wait_for ck.st $pid
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 $pid
  wait $pid 2>/dev/null
  leftover=$(ls -A | grep '^\.ck\.st\.tmp\.' | head -1)
  [[ -n $leftover ]] && break
done
if [[ -z $leftover ]]; then # never caught mid-write: leave one the way a killed writer does
  leftover=.ck.st.tmp.0123456789abcdef
  head -c 1000 ck.st >"$leftover"
fi
sleep 2.5 # older than a writer just starting
"$troupe" train --model gpt --batch 1 --seconds 1 --resume ck.st --checkpoint ck.st --quiet \
  2>err.txt
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "the checkpoint a killed writer left does not resume: exit $rc: $(cat err.txt)"
elif [[ -e $leftover ]]; then
  fail "the killed writer's $leftover is still there after the next write"
else
  ok "kill -9 during checkpoint writes: the checkpoint resumed, $leftover removed"
fi
exit $failed
