#!/usr/bin/env bash
# train_local_elastic.sh TROUPE — `troupe train --strategy local --elastic`: a replica whose
# device dies leaves and the others finish (exit 0, replicas_left and replicas_alive in
# --json, stderr naming it, the samples it did not train not counted), at random steps of
# several seeds; all but one leaving finishes; every one leaving fails naming each; a
# failure inside a sync's sum fails the run saying why; a checkpoint written after a
# departure resumes; dp refuses --elastic.
set -u
troupe=$1
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf '%s %s\n' "$1" "$2"; [[ $1 == FAIL ]] && failed=1; }

common=(--strategy local --elastic --batch 48 --sync-every 4 --steps 24 --quiet)
for seed in 1 2 3; do
  at=$(( (seed * 7) % 20 + 2 ))  # the loss backward the replica dies at: 9, 16, 3
  "$troupe" train "${common[@]}" --seed "$seed" --json \
    --devices "fault(host:3;dev=1,op=mse_b,from=$at)" >"$tmp/run.json" 2>"$tmp/err"
  rc=$?
  step=$((at - 1))
  if [[ $rc -eq 0 ]] && grep -q "^troupe: replica 1 (host:1) left at step $step: host:1: mse_backward" "$tmp/err" &&
     python3 - "$tmp/run.json" "$step" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); step = int(sys.argv[2])
assert d["replicas_alive"] == 2, d["replicas_alive"]
assert d["replicas_left"] == "1@%d" % step, d["replicas_left"]
assert d["samples"] == 24 * 48 - (24 - step) * 16, d["samples"]
assert d["final_loss"] == d["final_loss"] and d["final_loss"] < d["initial_loss"], d["final_loss"]
PY
  then say ok "seed $seed: replica 1 left at step $step, the others finished"
  else say FAIL "seed $seed: exit $rc: $(cat "$tmp/err")"; fi
done

"$troupe" train "${common[@]}" --json \
  --devices 'fault(host:3;dev=0,op=mse_b,from=5;dev=2,op=mse_b,from=9)' >"$tmp/run.json" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 0 ]] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
    assert d['replicas_alive']==1 and d['replicas_left']=='0@4,2@8', d" "$tmp/run.json"; then
  say ok "all but one left: finished"
else say FAIL "all but one left: exit $rc: $(cat "$tmp/err")"; fi

"$troupe" train "${common[@]}" \
  --devices 'fault(host:3;dev=0,op=mse_b,from=5;dev=1,op=mse_b,from=7;dev=2,op=mse_b,from=9)' 2>"$tmp/err"
rc=$?
if [[ $rc -ne 0 ]] && grep -q "every replica left, none is left to train: replica 0 (host:0) at step 4: host:0: mse_backward: .*; replica 1 (host:1) at step 6: .*; replica 2 (host:2) at step 8: host:2: mse_backward" "$tmp/err"; then
  say ok "every replica left: failed naming each"
else say FAIL "every replica left: exit $rc: $(cat "$tmp/err")"; fi

# tr_add runs in a sync's sum only (member 1 owns a chunk and adds member 0's to it)
"$troupe" train "${common[@]}" --devices 'fault(host:3;dev=1,op=add,from=1)' 2>"$tmp/err"
rc=$?
if [[ $rc -ne 0 ]] && grep -q "replica 1 (host:1) failed at step 3 .*cannot leave consistently" "$tmp/err"; then
  say ok "a failure inside a sync: failed saying why"
else say FAIL "a failure inside a sync: exit $rc: $(cat "$tmp/err")"; fi

# a checkpoint after replica 1 left (mid-period: the replicas differ), then a resume to the end
"$troupe" train "${common[@]}" --steps 14 --checkpoint "$tmp/ck.safetensors" \
  --devices 'fault(host:3;dev=1,op=mse_b,from=5)' 2>"$tmp/err"
rc=$?
"$troupe" train "${common[@]}" --resume "$tmp/ck.safetensors" --json --devices host:3 \
  >"$tmp/run.json" 2>>"$tmp/err"
rc2=$?
if [[ $rc -eq 0 && $rc2 -eq 0 ]] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
    assert d['first_step']==14 and d['steps']==24 and d['replicas_alive']==3, d" "$tmp/run.json"; then
  say ok "a checkpoint after a departure resumes"
else say FAIL "checkpoint and resume: exit $rc, $rc2: $(cat "$tmp/err")"; fi

err=$("$troupe" train --quiet --strategy dp --elastic --devices host:2 --steps 2 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--elastic: applies to --strategy async or local only (not dp)" <<<"$err"; then
  say ok "dp refuses --elastic"
else say FAIL "dp + elastic: exit $rc: $err"; fi
exit $failed
