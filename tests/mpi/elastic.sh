#!/usr/bin/env bash
# elastic.sh CASE TROUPE — training across ranks with --elastic, a rank of it killed mid-run
# under mpirun --enable-recovery (Open MPI keeps the other ranks running when one dies):
#
#   async   first a worker of rank 1 whose device fails (the fault decorator) leaves, and
#           the job finishes with the other. Then rank 2 of three, which holds only a worker
#           and its loader, is killed mid-run: the job finishes with the two ranks left, each
#           exiting 0, rank 0 saying which worker left at which step (stderr and the
#           figures), and the final checkpoint holds every update the server applied and
#           resumes
#   local   local SGD's replicas (--strategy local), rank 2's killed mid-run: the two left
#           go on summing their parameters between them to the run's end, each exiting 0,
#           rank 0 saying which replica left at which step, and the final checkpoint resumes
#
# In both the death is told by rank 2's lifeline within seconds (the watchdog is a minute,
# so that its silence cannot be what told it), and the ranks left never wait 5 s between
# two updates (their traces say).
set -u
case_=$1 troupe=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { printf 'FAIL elastic %s: %s\n' "$case_" "$*"; exit 1; }

# killed ARGS...: the run across three ranks, rank 2 killed once a periodic checkpoint is
# on disk. Sets told (ms from the kill to the line saying who left, matching $left_line).
killed() {
  timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none --enable-recovery -np 3 \
    sh -c '"$0" "$@" > out.$OMPI_COMM_WORLD_RANK; echo $? > rc.$OMPI_COMM_WORLD_RANK' \
    "$troupe" "$@" --checkpoint run.ckpt --watchdog 60000 --trace run.json 2>err.txt &
  local job=$! victim= pid t0
  for _ in $(seq 400); do [[ -s run.ckpt ]] && break; sleep 0.05; done
  [[ -s run.ckpt ]] || fail "no periodic checkpoint appeared: $(cat err.txt)"
  for pid in $(ps -eo pid,args | awk -v t="$troupe" '$2 == t && /--watchdog 60000/ {print $1}'); do
    grep -qz '^OMPI_COMM_WORLD_RANK=2$' /proc/"$pid"/environ 2>/dev/null && victim=$pid
  done
  [[ -n $victim ]] || fail "rank 2's process not found"
  t0=$(date +%s%N)
  kill -KILL "$victim"
  told=
  while kill -0 $job 2>/dev/null; do
    [[ -z $told ]] && grep -q "$left_line" err.txt && told=$(( ($(date +%s%N) - t0) / 1000000 ))
    sleep 0.02
  done
  wait $job
  for r in 0 1; do
    [[ -f rc.$r ]] || fail "rank $r left no exit status: $(cat err.txt)"
    [[ $(cat rc.$r) -eq 0 ]] || fail "rank $r exited $(cat rc.$r): $(cat err.txt)"
  done
  grep -q "$left_line" err.txt || fail "no line says rank 2's left, its rank dead: $(cat err.txt)"
  [[ -n $told ]] && (( told < 5000 )) ||
    fail "rank 2's leaving was told ${told:-never} ms after its rank was killed (watchdog 60 s)"
}

# longest_wait TRACE THREAD: the longest a thread named THREAD... waited between two updates
longest_wait() {
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
tid = [e["tid"] for e in ev if e.get("name") == "thread_name" and e["args"]["name"].startswith(sys.argv[2])]
ts = sorted(e["ts"] for e in ev if e.get("ph") == "X" and e.get("name") == "update" and e["tid"] in tid)
print(int(max(b - a for a, b in zip(ts, ts[1:])) / 1000))' "$1" "$2" ||
    fail "the trace $1 could not be read"
}

case $case_ in
  async)
    # a device that fails on rank 1: its leave, and the server's word that the run is over,
    # cross between the ranks
    common=(train --model simplenet --strategy async --elastic --steps 80 --staleness 2 --json
            --quiet)
    timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none \
      -np 1 "$troupe" "${common[@]}" --devices host:1 \
      : -np 1 "$troupe" "${common[@]}" --devices 'fault(host:1;op=mse_b,from=6)' \
      >device.json 2>device.txt || fail "a worker's device failing on rank 1: $(cat device.txt)"
    grep -q 'worker 1 (host:0@r1) left at step [0-9]*: .*injected failure' device.txt ||
      fail "no line says worker 1 left: $(cat device.txt)"
    grep -q '"workers_alive":1' device.json || fail "workers_alive is not 1: $(cat device.json)"

    # each step slowed (2 ms a loss pass) so that the run outlasts the kill and its noticing
    left_line='worker 2 (.*) left at step [0-9]*: its rank 2 died (its process ended'
    killed train --model simplenet --strategy async --elastic --steps 3000 --quiet --json \
      --devices 'fault(host:1;op=mse,us=2000)' --checkpoint-every 100
    line=$(grep -o "$left_line.*" err.txt)
    left=$(sed 's/.*left at step \([0-9]*\).*/\1/' <<<"$line")
    json=$(cat out.0)
    grep -q '"workers_alive":2' <<<"$json" || fail "workers_alive is not 2: $json"
    grep -q "\"workers_left\":\"2@$left\"" <<<"$json" || fail "workers_left is not 2@$left: $json"
    steps=$(grep -o '"steps":[0-9]*' <<<"$json" | tr -dc 0-9)
    (( steps >= 2990 && steps <= 3000 )) || fail "the run reached step $steps of 3000"
    gap=$(longest_wait run.json server)
    (( gap < 5000 )) || fail "the server waited ${gap} ms between two updates"
    step=$(grep -ao '"step":"[0-9]*"' run.ckpt | head -1 | tr -dc 0-9)
    [[ $step == "$steps" ]] || fail "the final checkpoint is of step $step, the run's $steps"
    "$troupe" train --model simplenet --strategy async --devices host:2 --resume run.ckpt \
      --steps $((steps + 10)) --quiet || fail "the final checkpoint (step $step) does not resume"
    printf 'ok   elastic async: %s, told %d ms after the kill; the server waited %d ms at most; the run reached step %d\n' \
      "$line" "$told" "$gap" "$steps" ;;
  local)
    # a timed run: it ends on time with the two replicas left (each of their steps slowed
    # by 2 ms, so that the kill comes mid-run)
    left_line='replica 2 (host:0@r2) left at step [0-9]*: its rank 2 died (its process ended'
    t0=$(date +%s%N)
    killed train --model simplenet --strategy local --elastic --sync-every 4 --batch 96 \
      --seconds 8 --quiet --json --devices 'fault(host:1;op=mse,us=2000)' --checkpoint-every 50
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    line=$(grep -o "$left_line.*" err.txt)
    left=$(sed 's/.*left at step \([0-9]*\).*/\1/' <<<"$line")
    json=$(cat out.0)
    grep -q '"replicas_alive":2' <<<"$json" || fail "replicas_alive is not 2: $json"
    grep -q "\"replicas_left\":\"2@$left\"" <<<"$json" || fail "replicas_left is not 2@$left: $json"
    # the 8-s run, its start and its end: well within a minute, never the watchdog's
    (( took < 30000 )) || fail "the 8-s run took ${took} ms"
    gap0=$(longest_wait run.json replica0) gap1=$(longest_wait run.rank1.json replica1)
    (( gap0 < 5000 && gap1 < 5000 )) ||
      fail "the replicas left waited ${gap0} and ${gap1} ms between two updates"
    steps=$(grep -o '"steps":[0-9]*' <<<"$json" | tr -dc 0-9)
    step=$(grep -ao '"step":"[0-9]*"' run.ckpt | head -1 | tr -dc 0-9)
    [[ $step == "$steps" ]] || fail "the final checkpoint is of step $step, the run's $steps"
    "$troupe" train --model simplenet --strategy local --sync-every 4 --batch 96 --devices host:3 \
      --resume run.ckpt --steps $((steps + 8)) --quiet ||
      fail "the final checkpoint (step $step) does not resume"
    printf 'ok   elastic local: %s, told %d ms after the kill; the replicas left waited %d and %d ms at most; the 8-s run took %d ms and reached step %d\n' \
      "$line" "$told" "$gap0" "$gap1" "$took" "$steps" ;;
esac
