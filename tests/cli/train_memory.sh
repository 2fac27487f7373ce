#!/usr/bin/env bash
# train_memory.sh TROUPE — `troupe train --json` reports the bytes each device's stage holds,
# per device and per replica. simplenet's tensors (0.weight 1000 floats at 0, 0.bias 100 at
# 1008, 2.weight 100 at 1120, 2.bias 1 at 1232, each on a 16-float boundary) span 1248 floats,
# 4992 bytes, of parameters and of gradients; momentum's state is as large, AdamW's twice,
# and under --zero 1 each replica holds one shard of it (a multiple of 16 floats, the last
# one shorter). Each device also reports its peak activation bytes.
set -u
troupe=$1
if ! command -v python3 >/dev/null; then
  echo "skip: python3 reads the JSON"
  exit 77
fi
failed=0
check='
import json, sys
zero, state = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
r = json.load(sys.stdin)
mem = r["memory"]
assert r["zero"] == zero, r["zero"]
want = [{"params": 4992, "grads": 4992, "optimizer_state": s} for s in state]
allocated = [{k: d[k] for k in ("params", "grads", "optimizer_state")} for d in mem["devices"]]
assert allocated == want, mem["devices"]
assert all(d["peak_activation_bytes"] > 0 for d in mem["devices"]), mem["devices"]
assert mem["replicas"] == want, mem["replicas"]
'

# expect WHAT ZERO STATE-BYTES -- ARGS...: STATE-BYTES (one per device) of optimizer state
expect() {
  local what=$1 zero=$2 state=$3
  shift 4
  local out
  if ! out=$("$troupe" train --quiet --json --model simplenet --steps 1 "$@"); then
    printf 'FAIL %s: the run failed\n' "$what"
    failed=1
  elif python3 -c "$check" "$zero" "$state" <<<"$out"; then
    printf 'ok   %s\n' "$what"
  else
    printf 'FAIL %s: %s\n' "$what" "$out"
    failed=1
  fi
}

expect "single, sgd" 0 0 -- --strategy single --devices host:1
expect "single, momentum" 0 4992 -- --strategy single --devices host:1 --optimizer momentum
expect "dp, momentum" 0 4992,4992 -- --strategy dp --devices host:2 --optimizer momentum
expect "dp --zero 1, momentum" 1 2496,2496 -- --strategy dp --devices host:2 --zero 1 \
  --optimizer momentum
expect "dp --zero 1 on 4, AdamW" 1 2560,2560,2560,2304 -- --strategy dp --devices host:4 \
  --zero 1 --optimizer adamw
exit $failed
