#!/usr/bin/env bash
# mpi.sh CASE TROUPE PARAMS_DIFF — one job across two MPI ranks (Open MPI, oversubscribed on
# a small machine), checked against the same training in one process or for how it fails.
#
#   dp, gpipe, 1f1b, zb1 (recomputing), interleaved, hybrid, async
#                                   final parameters within 1e-5 of one device's
#   killed                          a rank killed mid-run (--enable-recovery): the job ends
#                                   within seconds (the watchdog a minute: its lifeline told),
#                                   the other rank saying it died and what it ran; the last
#                                   periodic checkpoint resumes
#   died                            a pipeline across three ranks under plain mpirun, the
#                                   middle one killed: the others say it died, naming its
#                                   stage
#   stopped                         a rank stopped (SIGSTOP): the same, within the watchdog
#   waiting                         a rank that waits over a second for the other's slow
#                                   stage (a fault device) is not taken for a quiet graph
#   mismatch                        ranks given different options (steps, model, precision,
#                                   on-nonfinite, data-on, watchdog, data, eval): refused before
#                                   training, naming the option and the rank
#   zero                            --zero 1 with replicas in two ranks: refused, naming the
#                                   flag; with every replica in rank 1 (rank 0 coordinates):
#                                   the checkpoint of one process, bitwise (the shards of the
#                                   optimizer state crossing to the coordinator)
#   predicted                       with the layers' costs in the file (troupe plan), dp (twice)
#                                   and 1f1b across two ranks say what was predicted of them:
#                                   their activations exactly; the links between the ranks
#                                   timed by the first run into the file, read by the second
#   carries (test_world two)        a type with its own codec on an untyped edge that says
#                                   it carries it, a flat type on its own edge, between ranks
#   refused (test_world refused)    a type the untyped edge does not carry: the run fails,
#                                   naming the edge and the type
#   outputs                         the names a rank derives are held to the rules of the
#                                   names given: rank 1's trace "t.rank1.txt" is refused where
#                                   it is the data (both ranks end, the data as it was), and
#                                   where it is the checkpoint that rank 0 writes
#   nccl                            1f1b on two GPUs, one per rank: the edges' tensors by
#                                   NCCL (--json says so), parameters within 1e-5 of one
#                                   GPU's; skipped (77) without two GPUs or NCCL in the build
#                                   (tools/gpu-check.sh runs it where there are two)
set -u
case_=$1 troupe=$(realpath "$2") params_diff=$(realpath "$3")
world=${4:+$(realpath "$4")} # test_world, for carries and refused
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
steps=30
common=(--model simplenet --steps $steps --quiet --deterministic)

fail() { printf 'FAIL %s: %s\n' "$case_" "$*"; exit 1; }

# process_of RANK MARK: the pid of this job's rank RANK, whose arguments hold MARK
process_of() {
  local pid
  for pid in $(ps -eo pid,args | awk -v t="$troupe" -v m="$2" '$2 == t && index($0, m) {print $1}'); do
    grep -qz "^OMPI_COMM_WORLD_RANK=$1\$" /proc/"$pid"/environ 2>/dev/null && echo "$pid" && return 0
  done
  return 1
}

# same_as_single MPIRUN_ARGS...: the run's checkpoint against one device's
same_as_single() {
  "$troupe" train "${common[@]}" --checkpoint single.ckpt || fail "the single-device run"
  timeout 120 "${mpirun[@]}" "$@" >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
  "$params_diff" run.ckpt single.ckpt 1e-5 || fail "parameters differ from one device's"
  printf 'ok   %s\n' "$case_"
}

case $case_ in
  carries)
    timeout 60 "${mpirun[@]}" -np 2 "$world" two >out.txt 2>err.txt ||
      fail "mpirun exit $?: $(cat err.txt)"
    printf 'ok   %s\n' "$case_" ;;
  refused)
    timeout 60 "${mpirun[@]}" -np 2 "$world" refused >out.txt 2>err.txt &&
      fail "a type the edge does not carry crossed"
    grep -q "edge 'blobs' from 'a' to 'b' on rank 1: a 'note_msg' cannot cross processes" err.txt ||
      fail "the error does not name the edge and the type: $(cat err.txt)"
    printf 'ok   %s: %s\n' "$case_" "$(grep -m1 -o "edge 'blobs'.*" err.txt)" ;;
  dp)     same_as_single -np 2 "$troupe" train "${common[@]}" --strategy dp --devices host:1 --checkpoint run.ckpt ;;
  gpipe)  same_as_single -np 2 "$troupe" train "${common[@]}" --strategy pipeline --schedule gpipe --devices host:1 --checkpoint run.ckpt ;;
  1f1b)   same_as_single -np 2 "$troupe" train "${common[@]}" --strategy pipeline --schedule 1f1b --devices host:1 --checkpoint run.ckpt ;;
  zb1)    same_as_single -np 2 "$troupe" train "${common[@]}" --strategy pipeline --schedule zb1 --recompute --devices host:1 --checkpoint run.ckpt ;;
  interleaved) # 2 ranks × 2 chunks: the mlp's 15 layers in 4 pieces, the last rank's chunk 0 on to rank 0's chunk 1
    common=(--model mlp --batch 16 --steps 3 --quiet --deterministic)
    same_as_single -np 2 "$troupe" train "${common[@]}" --strategy pipeline --schedule interleaved --microbatches 4 --devices host:1 --checkpoint run.ckpt ;;
  hybrid) same_as_single -np 2 "$troupe" train "${common[@]}" --strategy hybrid --devices host:2 --checkpoint run.ckpt ;;
  async)  # rank 0 serves (no devices of its own), the worker lives on rank 1
    same_as_single -np 1 "$troupe" train "${common[@]}" --strategy async --devices none --checkpoint run.ckpt \
      : -np 1 "$troupe" train "${common[@]}" --strategy async --devices host:1 --checkpoint run.ckpt ;;
  waiting) # rank 1's loss passes sleep 1.5 s each: rank 0's actors wait for its gradients
    timeout 120 "${mpirun[@]}" \
      -np 1 "$troupe" train --model simplenet --steps 2 --quiet --strategy pipeline --microbatches 1 \
        --devices host:1 \
      : -np 1 "$troupe" train --model simplenet --steps 2 --quiet --strategy pipeline --microbatches 1 \
        --devices 'fault(host:1;op=mse_b,us=1500000)' >out.txt 2>err.txt ||
      fail "mpirun exit $?: $(cat err.txt)"
    printf 'ok   %s\n' "$case_" ;;
  killed|stopped)
    # killed: the watchdog a minute, so that only rank 1's lifeline closing can tell rank 0
    # within seconds; stopped: a rank that hangs is told by its silence, the watchdog's 2 s
    watchdog=$([[ $case_ == killed ]] && echo 60000 || echo 2000)
    args=(train --model simplenet --seconds 60 --quiet --strategy dp --devices host:1
          --checkpoint run.ckpt --checkpoint-every 20 --watchdog $watchdog)
    # killed: --enable-recovery, so that mpirun leaves the surviving rank to find out for
    # itself. stopped: mpirun cannot see a stopped rank, and without --enable-recovery it
    # ends the job cleanly when rank 0 aborts (with it, Open MPI 4.1 sometimes garbles that
    # abort and leaves the stopped rank and itself waiting for ever)
    recovery=()
    [[ $case_ == killed ]] && recovery=(--enable-recovery)
    timeout 120 "${mpirun[@]}" "${recovery[@]}" -np 2 sh -c \
      '"$0" "$@"; echo $? > rc.$OMPI_COMM_WORLD_RANK' \
      "$troupe" "${args[@]}" >out.txt 2>err.txt &
    job=$!
    for _ in $(seq 200); do [[ -s run.ckpt ]] && break; sleep 0.05; done
    [[ -s run.ckpt ]] || fail "no periodic checkpoint appeared: $(cat err.txt)"
    victim=$(process_of 1 "--watchdog $watchdog") || fail "rank 1's process not found"
    t0=$(date +%s%N)
    if [[ $case_ == killed ]]; then kill -KILL "$victim"; else kill -STOP "$victim"; fi
    wait $job
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    [[ $case_ == stopped ]] && kill -KILL "$victim" 2>/dev/null
    if [[ $case_ == killed ]]; then
      said='rank 1 died (it ran .*replica1.*): its process ended'
    else
      said='rank 1 has not been heard from .* (it runs .*replica1'
    fi
    grep -q "$said" err.txt || fail "rank 0 did not name rank 1 and what it runs: $(cat err.txt)"
    # rank 0's status: its own, or (when its MPI_Abort ended the wrapper first) the one it
    # asked mpirun for. Open MPI 4.1's mpirun sometimes crashes while handling that abort
    # under --enable-recovery, taking the banner with it: then rank 0's failure line (printed
    # just before it aborts, only when its run failed) is what is left to go by.
    if [[ -f rc.0 ]]; then
      [[ $(cat rc.0) -ne 0 ]] || fail "rank 0 exited 0"
    elif ! grep -q 'MPI_ABORT was invoked on rank 0 .* with errorcode 1' err.txt; then
      grep -q '^troupe: rank 0: ' err.txt || fail "rank 0 left no exit status: $(cat err.txt)"
    fi
    (( took < 10000 )) || fail "the job took ${took} ms to end (watchdog $watchdog ms)"
    "$params_diff" run.ckpt run.ckpt 0 >/dev/null || fail "the last periodic checkpoint is damaged"
    step=$(grep -ao '"step":"[0-9]*"' run.ckpt | head -1 | tr -dc 0-9)
    "$troupe" train --model simplenet --resume run.ckpt --steps $((step + 10)) --quiet ||
      fail "the last periodic checkpoint (step $step) does not resume"
    printf 'ok   %s: ended %d ms after rank 1 was %s; %s\n' "$case_" "$took" \
      "$([[ $case_ == killed ]] && echo killed || echo stopped)" "$(grep -o "$said" err.txt)" ;;
  died)
    # a pipeline across three ranks under plain mpirun, its middle stage's rank killed: the
    # ranks left say so (read from the lifeline, the watchdog a minute) before mpirun ends
    # the job (one of them may already be gone by then: mpirun kills them, racing)
    args=(train --model simplenet --seconds 60 --strategy pipeline --microbatches 4
          --devices host:1 --quiet --checkpoint run.ckpt --checkpoint-every 20 --watchdog 60001)
    timeout 120 "${mpirun[@]}" -np 3 "$troupe" "${args[@]}" >out.txt 2>err.txt &
    job=$!
    for _ in $(seq 400); do [[ -s run.ckpt ]] && break; sleep 0.05; done
    [[ -s run.ckpt ]] || fail "no periodic checkpoint appeared: $(cat err.txt)"
    victim=$(process_of 1 "--watchdog 60001") || fail "rank 1's process not found"
    t0=$(date +%s%N)
    kill -KILL "$victim"
    wait $job && fail "mpirun exited 0 though rank 1 was killed"
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    said="rank [02]: .*rank 1 died (it ran 'stage1'.*): its process ended"
    grep -q "$said" err.txt || fail "no rank said rank 1 died, naming its stage: $(cat err.txt)"
    (( took < 10000 )) || fail "the job took ${took} ms to end (watchdog 60001 ms)"
    printf 'ok   %s: ended %d ms after rank 1 was killed; %s\n' "$case_" "$took" \
      "$(grep -o "rank 1 died.*" err.txt | head -1)" ;;
  mismatch)
    timeout 60 "${mpirun[@]}" -np 1 "$troupe" train "${common[@]}" --strategy dp --devices host:1 \
      : -np 1 "$troupe" train --model simplenet --steps 31 --quiet --deterministic --strategy dp --devices host:1 \
      >out.txt 2>err.txt && fail "ranks with different --steps trained"
    grep -q 'rank 0: options: the steps, seconds, seed, batch or deterministic on rank 1 differ' err.txt ||
      fail "the error does not name the option and the rank: $(cat err.txt)"
    timeout 60 "${mpirun[@]}" -np 1 "$troupe" train "${common[@]}" --strategy dp --devices host:1 \
      : -np 1 "$troupe" train "${common[@]}" --model mlp --strategy dp --devices host:1 \
      >out.txt 2>err.txt && fail "ranks with different models trained"
    grep -q 'model on rank 1 differ' err.txt || fail "a different model was not named: $(cat err.txt)"
    # every option that changes the result, not only the steps: each named on its own
    refused_apart() { # NAME RANK0_ARGS... -- RANK1_ARGS...
      local name=$1 a=() b=()
      shift
      while [[ $1 != -- ]]; do a+=("$1"); shift; done
      shift
      b=("$@")
      timeout 60 "${mpirun[@]}" -np 1 "$troupe" train "${common[@]}" --strategy dp --devices host:1 "${a[@]}" \
        : -np 1 "$troupe" train "${common[@]}" --strategy dp --devices host:1 "${b[@]}" \
        >out.txt 2>err.txt && fail "ranks with different $name trained"
      grep -q "rank 0: options: the $name on rank 1 differ" err.txt ||
        fail "a different $name was not named: $(cat err.txt)"
    }
    refused_apart precision -- --precision bf16
    refused_apart on-nonfinite -- --on-nonfinite skip
    refused_apart data-on -- --data-on host
    refused_apart watchdog -- --watchdog 5000
    refused_apart 'eval-data, eval-labels, eval-split, eval-every or eval-samples' -- --eval-every 5
    seq 1 30000 >a.txt
    seq 2 30001 >b.txt
    refused_apart 'data or labels' --model gpt --data a.txt -- --model gpt --data b.txt
    refused_apart 'data or labels' --model gpt --data a.txt -- --model gpt
    printf 'ok   %s: %s\n' "$case_" "$(grep -m1 'rank 0' err.txt)" ;;
  zero)
    timeout 60 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --strategy dp --devices host:1 \
      --zero 1 >out.txt 2>err.txt && fail "--zero 1 trained with replicas in two ranks"
    grep -q 'rank 0: --zero 1: the replicas of stage 0 live in ranks 0 and 1' err.txt ||
      fail "the error does not name --zero and the ranks: $(cat err.txt)"
    z=("${common[@]}" --optimizer momentum --strategy dp --zero 1 --checkpoint run.ckpt)
    timeout 120 "${mpirun[@]}" -np 1 "$troupe" train "${z[@]}" --devices none \
      : -np 1 "$troupe" train "${z[@]}" --devices host:2 >out.txt 2>err.txt ||
      fail "mpirun exit $?: $(cat err.txt)"
    mv run.ckpt ranks.ckpt
    "$troupe" train "${z[@]}" --devices host:2 || fail "the run in one process"
    cmp -s ranks.ckpt run.ckpt || fail "the checkpoint differs from one process's"
    printf 'ok   %s\n' "$case_" ;;
  predicted)
    export TROUPE_COSTS=$PWD/costs.safetensors
    "$troupe" plan --model simplenet --devices host:2 --top 1 >/dev/null 2>&1 || fail "troupe plan"
    for layout in "dp" "dp" "pipeline --schedule 1f1b"; do
      timeout 60 "${mpirun[@]}" -np 2 "$troupe" train --model simplenet --steps 40 --json \
        --strategy $layout --devices host:1 >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
      python3 -c '
import json, sys
r = json.load(open("out.txt"))
p = r["predicted"]
assert p and p["samples_per_s"] > 0 and p["peak_activation_error"] == 0, p
' || fail "$layout across ranks: no prediction: $(cat out.txt err.txt)"
      if [[ -z ${before-} ]]; then # the first: the links kept
        grep -qa 'ranks 2 on 1 machines: a message, a sum' "$TROUPE_COSTS" ||
          fail "the links were not kept in the file of costs"
        before=$(stat -c %Y.%s "$TROUPE_COSTS")
        sleep 1
      elif [[ $layout == dp ]]; then # the second: read, the file as it was
        [[ $(stat -c %Y.%s "$TROUPE_COSTS") == "$before" ]] || fail "the links were timed again"
      fi
    done
    printf 'ok   %s\n' "$case_" ;;
  nccl)
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if (( gpus < 2 )); then printf 'SKIP nccl: %d GPU(s) here; NCCL between ranks takes one GPU each\n' "$gpus"; exit 77; fi
    "$troupe" devices 2>&1 | grep -q '^NCCL: [0-9]' || { printf 'SKIP nccl: built without NCCL\n'; exit 77; }
    common=(--model simplenet --steps $steps --quiet --deterministic)
    "$troupe" train "${common[@]}" --devices cuda:0 --checkpoint single.ckpt || fail "the single-GPU run"
    timeout 120 "${mpirun[@]}" -np 2 sh -c '"$0" "$@" --devices cuda:$OMPI_COMM_WORLD_RANK' \
      "$troupe" train "${common[@]}" --strategy pipeline --schedule 1f1b --checkpoint run.ckpt --json \
      >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
    grep -q '"edges_across_ranks":{"nccl":2,"mpi":0}' out.txt ||
      fail "the edges did not go through NCCL: $(grep -o '"edges_across_ranks":[^}]*}' out.txt) $(cat err.txt)"
    "$params_diff" run.ckpt single.ckpt 1e-5 || fail "parameters differ from one GPU's"
    printf 'ok   %s\n' "$case_" ;;
  outputs)
    seq 1 30000 >t.rank1.txt
    cp t.rank1.txt before.txt
    timeout 60 "${mpirun[@]}" -np 2 "$troupe" train --model gpt --steps 2 --quiet --strategy dp \
      --devices host:1 --data t.rank1.txt --trace t.txt >out.txt 2>err.txt &&
      fail "rank 1's trace over the data trained"
    grep -q "rank 1: --trace 't.txt': rank 1's trace 't.rank1.txt': the same file as --data 't.rank1.txt'" err.txt ||
      fail "the error does not name rank 1's trace and the data: $(cat err.txt)"
    cmp -s t.rank1.txt before.txt || fail "the data was changed"
    [[ -e t.txt ]] && fail "rank 0 wrote its trace although the job was refused"
    timeout 60 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --strategy dp --devices host:1 \
      --checkpoint ck.rank1.json --trace ck.json >out.txt 2>err.txt &&
      fail "rank 1's trace over rank 0's checkpoint trained"
    grep -q "rank 1: --trace 'ck.json': rank 1's trace 'ck.rank1.json': the same file as --checkpoint 'ck.rank1.json'" err.txt ||
      fail "the error does not name rank 1's trace and the checkpoint: $(cat err.txt)"
    printf 'ok   %s\n' "$case_" ;;
  *) fail "no such case" ;;
esac
