#!/usr/bin/env bash
# plan_concurrent.sh TROUPE — `troupe plan` processes at once on one file of costs keep every
# entry: each adds what it measured under troupe's lock file beside the file, reading it again
# and merging what the others added meanwhile (three at once lost entries in 3 of 3 tries:
# each wrote back the file it had read before measuring). Afterwards each plan again finds
# all its costs: the file is not written again. The lock file is gone when they are.
set -u
troupe=$1
failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TROUPE_COSTS=$dir/costs.safetensors

# three batches: three sets of micro-batches, most of their entries each one's own
batches=(16 32 64)
pids=()
for b in "${batches[@]}"; do
  "$troupe" plan --model simplenet --devices host:1 --batch "$b" >"$dir/plan.$b" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || fail "plan --batch ${batches[$i]}: exit $?: $(cat "$dir/plan.${batches[$i]}")"
done
[[ -s $TROUPE_COSTS ]] || fail "the plans kept nothing in \$TROUPE_COSTS"
[[ -e $dir/.costs.safetensors.troupe-lock ]] && fail "the lock file was left behind"

# every entry kept: planned again, one at a time, nothing is measured (the file, replaced
# by a rename on every write, is the same inode)
before=$(stat -c %i "$TROUPE_COSTS")
for b in "${batches[@]}"; do
  "$troupe" plan --model simplenet --devices host:1 --batch "$b" >"$dir/again.$b" 2>&1 ||
    fail "plan --batch $b again: exit $?: $(cat "$dir/again.$b")"
  [[ $(stat -c %i "$TROUPE_COSTS") == "$before" ]] ||
    fail "plan --batch $b measured again: its entries were lost to the others"
  before=$(stat -c %i "$TROUPE_COSTS")
done
exit $failed
