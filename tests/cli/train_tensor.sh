#!/usr/bin/env bash
# train_tensor.sh TROUPE — `troupe train --tensor T` and `--strategy tp`: tp trains what
# single trains (the same final loss), --json says "tensor" (members per group), the plan
# names each member of the tensor groups, and the layouts groups do not fit exit 2 naming
# the flag.
set -u
troupe=$1
failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}
json() { # the value of key $1 in the JSON object $2
  python3 -c 'import json,sys; v=json.loads(sys.argv[2])[sys.argv[1]]; print(v)' "$1" "$2"
}
run() { "$troupe" train --model mlp --steps 3 --deterministic --quiet "$@"; }

single=$(run --json) || fail "single: exit $?"
tp=$(run --strategy tp --devices host:2 --json) || fail "tp: exit $?"
dptp=$(run --strategy dp --tensor 2 --devices host:4 --json) || fail "dp --tensor 2: exit $?"
if ((!failed)); then
  [[ $(json tensor "$single") == 1 ]] || fail "single's --json says tensor $(json tensor "$single")"
  [[ $(json tensor "$tp") == 2 ]] || fail "tp's --json says tensor $(json tensor "$tp")"
  [[ $(json strategy "$tp") == tp ]] || fail "tp's --json says strategy $(json strategy "$tp")"
  [[ $(json tensor "$dptp") == 2 && $(json replicas "$dptp") == 2 ]] ||
    fail "dp --tensor 2 on host:4: tensor $(json tensor "$dptp"), replicas $(json replicas "$dptp")"
  a=$(json final_loss "$single") b=$(json final_loss "$tp")
  python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(abs(a-b) > 1e-5*abs(a))' "$a" "$b" ||
    fail "tp's final loss $b, single's $a"
fi

out=$(run --strategy pipeline --tensor 2 --devices host:4 --print-plan 2>&1) ||
  fail "pipeline --tensor 2 --print-plan: exit $?: $out"
for want in "plan: pipeline of mlp, 1 replica(s) x 2 stage(s) x 2 tensor member(s)" \
            "stage 'stage0.t1' on host:1 (rank 0), policy sync (member 1 of a tensor group)" \
            "stage 'stage1.t0' on host:2" \
            "act     -> 'stage1.t1'" \
            "targets <- 'loader.t1'"; do
  [[ $out == *"$want"* ]] || fail "the plan lacks \"$want\": $out"
done

refused() { # the exit status 2 and the flag $1 in the message of the run of the rest
  local flag=$1
  shift
  out=$(run "$@" 2>&1)
  local rc=$?
  ((rc == 2)) || fail "$*: exit $rc, not 2: $out"
  [[ $out == *"$flag"* ]] || fail "$*: the message does not name $flag: $out"
}
refused --tensor --strategy dp --tensor 3 --devices host:4
refused --tensor --strategy async --tensor 2 --devices host:2
refused --tensor --strategy tp --tensor 2 --devices host:4
refused --tensor --strategy single --tensor 2
refused "1024 output features across 3 members" --strategy tp --devices host:3
# tp's T is the devices, not a --tensor the user typed: the message names --strategy
[[ $out == *"--strategy tp: one tensor group of the 3 devices"* && $out != *"--tensor"* ]] ||
  fail "tp on host:3 names a flag the user never gave: $out"
((failed)) || echo "ok: tp trains as single, --json says tensor, the plan names the members"
exit $failed
