#!/usr/bin/env bash
# train_errors.sh TROUPE — `troupe train` with bad options exits 2 and names the flag at fault
# (the library names the field; the command maps it to its flag), before training anything.
set -u
troupe=$1
failed=0

# expect WHAT PATTERN -- ARGS...: exit status 2 and stderr matching PATTERN (grep -E)
expect() {
  local what=$1 pattern=$2
  shift 3
  local err rc
  err=$("$troupe" train --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    printf 'FAIL %s: exit %d, stderr: %s\n' "$what" "$rc" "$err"
    failed=1
  else
    printf 'ok   %s: %s\n' "$what" "$err"
  fi
}

expect "batch not divisible" '^troupe: --batch 48: .*micro-batches' -- \
  --strategy pipeline --devices host:2 --microbatches 5 --batch 48 --steps 2
expect "hybrid on 3 devices" '^troupe: --devices: 3 devices .*\(--stages\)' -- \
  --strategy hybrid --devices host:3 --steps 2
expect "too many workers" '^troupe: --workers 3: give 1 to 2' -- \
  --strategy async --devices host:2 --workers 3 --steps 2
expect "hogwild with a bound" '^troupe: --hogwild: .*--staleness, --dc-lambda' -- \
  --strategy async --devices host:2 --hogwild --staleness 1 --steps 2
expect "cuts for another layout" '^troupe: --cuts: 1 boundaries given, 4 stages need 3' -- \
  --model mlp --strategy pipeline --devices host:4 --cuts 3 --steps 2
expect "mp with micro-batches" '^troupe: --microbatches 4: mp trains one' -- \
  --strategy mp --devices host:2 --microbatches 4 --steps 2
expect "an unknown model" "^troupe: --model 'resnet'" -- --model resnet --steps 2
expect "labels without data" '^troupe: --labels needs --data' -- --labels y.npy --steps 2
expect "a profile window ending first" "^troupe: --profile-steps: '5:3' is not A:B" -- \
  --profile-steps 5:3 --steps 2
expect "an unknown data placement" "^troupe: --data-on: 'gpu' is not auto, host or device" -- \
  --data-on gpu --steps 2
expect "a file generated on a device" "^troupe: --data-on device: data '.*' cannot be generated" -- \
  --model gpt --data "$0" --data-on device --devices host:1 --steps 2
expect "zero with async" '^troupe: --zero: applies to --strategy dp or hybrid only \(not async\)' -- \
  --strategy async --devices host:2 --zero 1 --steps 2
expect "allreduce nccl of host devices" '^troupe: --allreduce: nccl asked, but host:0 is a host device' -- \
  --strategy dp --devices host:2 --allreduce nccl --steps 2
expect "allreduce without a group" '^troupe: --allreduce: applies to --strategy dp, hybrid or local only \(not single\)' -- \
  --strategy single --devices host:1 --allreduce nccl --steps 2
expect "allreduce nccl without a group" '^troupe: --allreduce nccl: dp has no replica group' -- \
  --strategy dp --devices host:1 --allreduce nccl --steps 2
expect "an unknown allreduce" "^troupe: --allreduce: 'ring' is not auto, peer or nccl" -- \
  --strategy dp --devices host:2 --allreduce ring --steps 2
expect "zero on one device" '^troupe: --zero 1: ZeRO shards .* replicas .*has 1 replica' -- \
  --strategy dp --devices host:1 --zero 1 --steps 2
expect "zero without replicas" '^troupe: --zero: applies to --strategy dp or hybrid only \(not single\)' -- \
  --strategy single --zero 1 --steps 2
expect "zero on a pipeline" '^troupe: --zero: applies to --strategy dp or hybrid only \(not pipeline\)' -- \
  --strategy pipeline --devices host:2 --zero 1 --steps 2
expect "zero stage 2" "^troupe: --zero: '2' is not" -- --strategy dp --devices host:2 --zero 2 --steps 2
expect "chunks without interleaving" '^troupe: --chunks 3: only the interleaved schedule' -- \
  --model mlp --strategy pipeline --devices host:2 --chunks 3 --steps 2
expect "interleaving one chunk" '^troupe: --chunks 1: the interleaved schedule puts 2 or more' -- \
  --model mlp --strategy pipeline --devices host:2 --schedule interleaved --chunks 1 --steps 2
expect "an unknown schedule" "^troupe: --schedule: 'zigzag' is not gpipe, 1f1b, interleaved or zb1" -- \
  --strategy pipeline --devices host:2 --schedule zigzag --steps 2
expect "interleaving replicas" '^troupe: --schedule: interleaved runs one replica' -- \
  --model mlp --strategy hybrid --devices host:4 --schedule interleaved --steps 2
expect "interleaving one device" '^troupe: --schedule: interleaved needs 2 or more stages' -- \
  --model mlp --schedule interleaved --steps 2
expect "more pieces than layers" "^troupe: --chunks: 2 stages × 2 chunks are 4 pieces, but model 'simplenet' has 3" -- \
  --strategy pipeline --devices host:2 --schedule interleaved --steps 2
expect "cuts for interleaving" '^troupe: --cuts: 1 boundaries given, 2 stages × 2 chunks need 3' -- \
  --model mlp --strategy pipeline --devices host:2 --schedule interleaved --cuts 4 --steps 2
expect "no chunks" "^troupe: --chunks: '0' is not" -- --chunks 0 --steps 2
expect "zb1 in bf16" '^troupe: --schedule zb1: its backward in two halves runs in fp32 only, not with --precision bf16' -- \
  --model mlp --strategy pipeline --devices host:2 --schedule zb1 --precision bf16 --steps 2
expect "a missing value" '^troupe: --steps needs a value' -- --steps
expect "an async flag on dp" '^troupe: --hogwild: applies to --strategy async only \(not dp\)' -- \
  --strategy dp --devices host:2 --hogwild --steps 2
expect "stages without hybrid" '^troupe: --stages: applies to --strategy hybrid or local only \(not pipeline\)' -- \
  --strategy pipeline --devices host:2 --stages 2 --steps 2
expect "steps and seconds" '^troupe: --steps and --seconds: give one of them' -- --seconds 1 --steps 2
expect "an unknown option" "^troupe: train: unknown option '--colour' \(see troupe train --help\)" -- \
  --colour red
exit $failed
