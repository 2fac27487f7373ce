#!/usr/bin/env bash
# train_plan.sh TROUPE — `troupe train --print-plan` prints the job's plan before the run:
# each stage with its device, its step policy and that policy's parts, each edge with the
# actor at its other end and its credits; and the run goes on as without it.
set -u
troupe=$1
failed=0
out=$("$troupe" train --model simplenet --strategy hybrid --devices host:4 --stages 2 \
  --steps 4 --clip 1 --print-plan --quiet 2>&1)
rc=$?
if ((rc != 0)); then
  echo "FAIL: exit $rc: $out"
  exit 1
fi
for want in "plan: hybrid of simplenet, 2 replica(s) x 2 stage(s)" \
            "stage 'r0.stage0' on host:0 (rank 0), policy sync (a replica group, the norm exchange)" \
            "stage 'r1.stage1' on host:3" \
            "act     -> 'r0.stage1' (2 credits)" \
            "grad    <- 'r1.stage1' (2 credits)" \
            "targets <- 'loader1'" \
            "report  -> 'coordinator' (4 credits)"; do
  if [[ $out != *"$want"* ]]; then
    echo "FAIL: the plan lacks \"$want\":"
    echo "$out"
    failed=1
  fi
done
# async: the workers' policy, and the server's edges
out=$("$troupe" train --model simplenet --strategy async --devices host:2 --steps 4 \
  --print-plan --quiet 2>&1)
if [[ $out != *"stage 'worker1' on host:1 (rank 0), policy async (pushes to the server)"* ]]; then
  echo "FAIL: the async plan: $out"
  failed=1
fi
((failed)) || echo "ok: the plan names every stage, its policy and its edges"
exit $failed
