#!/usr/bin/env bash
# memory.sh TROUPE — long runs in bounded memory: the resident set of `troupe train`, after
# its warm-up, stays within 1 MiB for as long as it trains, beyond what the final loss needs
# (the last 1% of the steps' losses, 8 bytes per 100 steps, twice that while it grows),
# simplenet (the most steps per second) and async (the most messages per step). TR_TEST_SCALE stretches the runs: 1 is a
# few seconds each; the stress suite's 10 is half a minute, some hundreds of thousands of
# steps. Not a benchmark: the number of steps is whatever the machine does in that time.
set -u
troupe=$(realpath "$1")
scale=${TR_TEST_SCALE:-1}
seconds=$((3 * scale + 2))
limit_kb=1024
warmup=$(awk -v s="$seconds" 'BEGIN { w = s / 4; print (w < 1.5 ? 1.5 : w) }')
failed=0

# The process's anonymous resident memory: what it allocated. File-backed pages (the CUDA
# libraries' 50 MB and more, mapped at load) come and go with the page cache and with how
# long the loader took, and say nothing of growth.
rss_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

# measure WHAT ARGS: the resident set after the warm-up (a quarter of the run, at least 1.5 s:
# a cold machine loads the libraries slowly), then its most until the end
measure() {
  local what=$1
  shift
  local out
  out=$(mktemp)
  "$troupe" train --quiet --seconds "$seconds" --json "$@" >"$out" &
  local pid=$! warm=0 most=0 rss
  sleep "$warmup"
  warm=$(rss_kb $pid)
  most=$warm
  while rss=$(rss_kb $pid) && [[ -n $rss ]]; do
    ((rss > most)) && most=$rss
    sleep 0.2
  done
  wait $pid
  local rc=$? steps
  steps=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['steps'])" "$out" 2>/dev/null)
  steps=${steps:-0}
  rm -f "$out"
  if [[ $rc -ne 0 || -z $warm ]]; then
    printf 'FAIL %s: exit %d\n' "$what" "$rc"
    failed=1
  elif ((most - warm > limit_kb + steps * 16 / 100 / 1024)); then
    printf 'FAIL %s: %d steps, resident %d kB after the warm-up, %d kB at most (+%d kB)\n' \
      "$what" "$steps" "$warm" "$most" $((most - warm))
    failed=1
  else
    printf 'ok   %s: %d steps, resident %d kB after the warm-up, %d kB at most (+%d kB)\n' \
      "$what" "$steps" "$warm" "$most" $((most - warm))
  fi
}

measure "simplenet" --model simplenet --devices host:1
measure "async, 2 workers" --model simplenet --strategy async --devices host:2
exit $failed
