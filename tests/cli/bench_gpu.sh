#!/usr/bin/env bash
# bench_gpu.sh TROUPE — `troupe bench gpu` without the GPU it asks for says so and measures
# nothing, in text and in JSON, exiting 0 (GPU 255 exists nowhere, so this runs the same on
# every machine, in a build with or without CUDA); --json and --cuda-graphs of `troupe train`
# record the setting; a bad setting is a usage error naming the flag; --json's data_on says
# where the samples were made (auto leaves host devices to the loader).
set -u
troupe=$1
failed=0
fail() { echo "FAIL: $*"; failed=1; }

err=$("$troupe" bench gpu --gpu 255 2>&1 >/dev/null); rc=$?
((rc == 0)) || fail "bench gpu without the GPU exited $rc"
[[ $err == *"bench gpu: skipped"* ]] || fail "bench gpu did not say it skipped: $err"
out=$("$troupe" bench gpu --gpu 255 --json 2>/dev/null)
[[ $out == '{"skipped":'* ]] || fail "bench gpu --json: $out"

for g in on off; do
  out=$("$troupe" train --model simplenet --devices host:1 --steps 3 --cuda-graphs $g --json 2>/dev/null)
  [[ $out == *"\"cuda_graphs\":{\"mode\":\"$g\",\"captures\":0,\"launches\":0,\"note\":\"\"}"* ]] ||
    fail "train --cuda-graphs $g --json: $out"
done
for w in auto:host host:host device:device; do
  out=$("$troupe" train --model simplenet --devices host:1 --steps 2 --data-on ${w%:*} --json 2>/dev/null)
  [[ $out == *"\"data_on\":\"${w#*:}\""* ]] || fail "train --data-on ${w%:*} --json: $out"
done
err=$("$troupe" train --model simplenet --steps 1 --cuda-graphs sometimes 2>&1); rc=$?
((rc == 2)) && [[ $err == *"--cuda-graphs"* ]] || fail "a bad --cuda-graphs: exit $rc, '$err'"
exit $failed
