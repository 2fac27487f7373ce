#!/usr/bin/env bash
# timeline.sh TROUPE — `troupe timeline` draws the trace of a real run as well-formed SVG (an
# XML parser reads it back), a lane per device named by its device, a rectangle per forward
# and backward of every micro-batch; slices it does not know get the neutral colour and a
# legend entry; a zb1 trace shows B and W apart and an interleaved one both chunks; bad input
# exits 2 with a message naming the file and the problem.
set -u
troupe=$1
if ! command -v xmllint >/dev/null; then
  echo "skip: xmllint (Debian: libxml2-utils) is not installed"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
check() { # check WHAT COMMAND...: the command succeeds
  local what=$1
  shift
  if "$@"; then printf 'ok   %s\n' "$what"; else printf 'FAIL %s\n' "$what"; failed=1; fi
}
count() { grep -o -- "$1" "$2" | wc -l; }

# draw NAME TRAIN-OPTIONS...: trains 8 steps with --trace, draws step 3, reads the SVG back
draw() {
  local name=$1
  shift
  "$troupe" train --quiet --steps 8 --trace "$dir/$name.json" "$@" ||
    { printf 'FAIL %s: training\n' "$name"; failed=1; return 1; }
  "$troupe" timeline "$dir/$name.json" -o "$dir/$name.svg" --steps 3:4 --title "$name" 2>"$dir/err" ||
    { printf 'FAIL %s: %s\n' "$name" "$(cat "$dir/err")"; failed=1; return 1; }
  check "$name: well-formed SVG" xmllint --noout "$dir/$name.svg"
  check "$name: the bubble in the title" grep -qE '<text class="title"[^>]*>'"$name"' — bubble [0-9]+\.[0-9]%' "$dir/$name.svg"
  check "$name: two device lanes" test "$(count '<g class="lane device">' "$dir/$name.svg")" -eq 2
  check "$name: lanes named host:0 and host:1" \
    test "$(grep -cE '<text class="dev"[^>]*>host:[01]</text>' "$dir/$name.svg")" -eq 2
}

# every micro-batch of step 3: one forward and one backward rectangle on each device lane
# (the window may also show a stage already busy with step 4, or still with step 2)
for schedule in 1f1b gpipe; do
  if draw "$schedule" --strategy pipeline --devices host:2 --microbatches 4 --schedule "$schedule"; then
    for mb in 0 1 2 3; do
      for kind in fwd:forward bwd:backward; do
        check "$schedule: ${kind#*:} of micro-batch $mb on both stages" test \
          "$(count "<rect class=\"${kind%:*}\"[^>]*><title>${kind#*:} · micro-batch $mb · [^<]* · step 3<" "$dir/$schedule.svg")" -eq 2
      done
    done
    check "$schedule: of the other 7 steps, only what overlaps step 3" test \
      "$(count '<rect class="fwd"[^>]*><title>forward · micro-batch [0-9] · [^<]* · step [^3]<' "$dir/$schedule.svg")" -lt 8
  fi
done
# zero-bubble: each micro-batch's backward in its two halves, B and W, on each stage
if draw zb1 --strategy pipeline --devices host:2 --microbatches 4 --schedule zb1; then
  for mb in 0 1 2 3; do
    for kind in fwd:forward bwdB:"backward input" bwdW:"backward weight"; do
      check "zb1: ${kind#*:} of micro-batch $mb on both stages" test \
        "$(count "<rect class=\"${kind%:*}\"[^>]*><title>${kind#*:} · micro-batch $mb · [^<]* · step 3<" "$dir/zb1.svg")" -eq 2
    done
  done
fi
# interleaved: two chunks on each device, so each micro-batch passes each lane twice each way
if draw interleaved --model mlp --strategy pipeline --devices host:2 --microbatches 4 --schedule interleaved; then
  for mb in 0 1 2 3; do
    for kind in fwd:forward bwd:backward; do
      check "interleaved: ${kind#*:} of micro-batch $mb in both chunks of both devices" test \
        "$(count "<rect class=\"${kind%:*}\"[^>]*><title>${kind#*:} · micro-batch $mb · [^<]* · step 3<" "$dir/interleaved.svg")" -eq 4
    done
  done
fi
if draw dp --strategy dp --devices host:2; then
  # a replica done with its update may start the next step while the other is not
  check "dp: a forward per replica" test "$(count '<rect class="fwd"' "$dir/dp.svg")" -ge 2
  check "dp: a backward per replica" test "$(count '<rect class="bwd"' "$dir/dp.svg")" -ge 2
  check "dp: the all-reduce drawn" grep -q '<rect class="allreduce"' "$dir/dp.svg"
fi

# a zero-bubble trace: B and W apart, and a slice of a kind the timeline does not know
cat >"$dir/zb.json" <<'EOF'
{"traceEvents":[
{"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{"name":"stage0 (cuda:0)","label":"cuda:0"}},
{"ph":"X","pid":1,"tid":1,"ts":0,"dur":10,"name":"F","args":{"actor":"stage0","arg":0}},
{"ph":"X","pid":1,"tid":1,"ts":10,"dur":10,"name":"bwd B","args":{"actor":"stage0","arg":0}},
{"ph":"X","pid":1,"tid":1,"ts":25,"dur":10,"name":"bwd W","args":{"actor":"stage0","arg":0}},
{"ph":"X","pid":1,"tid":1,"ts":35,"dur":10,"name":"gather <x> & y","args":{"actor":"stage0"}},
{"ph":"X","pid":1,"tid":1,"ts":45,"dur":5,"name":"update","args":{"actor":"stage0"}}
]}
EOF
check "zero-bubble: drawn" "$troupe" timeline "$dir/zb.json" -o "$dir/zb.svg" --title zb
check "zero-bubble: well-formed SVG" xmllint --noout "$dir/zb.svg"
check "zero-bubble: B and W apart, W hatched" grep -q '<rect class="bwdB".*<rect class="bwdW".*url(#hatch)' <(tr -d '\n' <"$dir/zb.svg")
check "zero-bubble: the unknown slice in the legend" grep -q '>other: gather &lt;x&gt; &amp; y</text>' "$dir/zb.svg"
check "zero-bubble: 5 µs idle of 50" grep -q 'bubble 10.0%' "$dir/zb.svg"
check "zero-bubble: its one step" grep -q '>steps 0:1 of 1 ·' "$dir/zb.svg"

# expect WHAT PATTERN -- ARGS...: exit status 2 and stderr matching PATTERN (grep -E)
expect() {
  local what=$1 pattern=$2
  shift 3
  local err rc
  err=$(timeout 10 "$troupe" timeline "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 124 ]]; then
    printf 'FAIL %s: still running after 10 s\n' "$what"
    failed=1
  elif [[ $rc -ne 2 ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    printf 'FAIL %s: exit %d, stderr: %s\n' "$what" "$rc" "$err"
    failed=1
  else
    printf 'ok   %s: %s\n' "$what" "$err"
  fi
}
echo '{"traceEvents": [' >"$dir/cut.json"
echo '{"displayTimeUnit": "ns"}' >"$dir/other.json"
echo '{"traceEvents": [{"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{"name":"a"}}]}' >"$dir/empty.json"
echo '{"traceEvents": [{"ph":"X","tid":1,"ts":1,"dur":0,"name":"forward"}]}' >"$dir/instant.json"
echo '{"traceEvents": [{"ph":"X","tid":1,"dur":3,"name":"forward"}]}' >"$dir/nots.json"
expect "a missing file" "^troupe: timeline: $dir/none.json: cannot open: No such file or directory" -- "$dir/none.json"
expect "not JSON" "^troupe: timeline: $dir/cut.json: not JSON \(at byte [0-9]+\)" -- "$dir/cut.json"
expect "no traceEvents" "^troupe: timeline: $dir/other.json: no \"traceEvents\" array" -- "$dir/other.json"
expect "no slices" "^troupe: timeline: $dir/empty.json: no slices" -- "$dir/empty.json"
expect "nothing lasts" "^troupe: timeline: $dir/instant.json: nothing to draw" -- "$dir/instant.json"
expect "a slice without ts" "^troupe: timeline: $dir/nots.json: event 0: a slice needs a name, a ts and a dur" -- "$dir/nots.json"
expect "steps past the end" "^troupe: --steps 7:9: $dir/1f1b.json has 8 steps \(0:8\)" -- "$dir/1f1b.json" --steps 7:9
expect "steps without updates" "^troupe: --steps: $dir/instant.json has no \"update\" slices" -- "$dir/instant.json" --steps 0:1
expect "steps not A:B" "^troupe: --steps: '4:2' is not A:B" -- "$dir/1f1b.json" --steps 4:2
expect "no trace" "^troupe: timeline: which trace" --
expect "an unknown option" "^troupe: timeline: unknown option '--colour'" -- "$dir/1f1b.json" --colour red

# The input and the output go through the rules of `troupe train`'s files: a FIFO as the
# input is refused without waiting for a writer; the output is never the input, never a
# FIFO or a device (refused and left as they are, without waiting for a reader), and is
# written whole, through a temporary file of troupe's own.
cp "$dir/zb.json" "$dir/zb-before.json"
expect "the output onto its input" "^troupe: timeline: --output '$dir/zb.json': the same file as the trace '$dir/zb.json'" -- \
  "$dir/zb.json" -o "$dir/zb.json"
ln -s zb.json "$dir/zb-link.json"
expect "the output onto its input through a link" "^troupe: timeline: --output '$dir/zb-link.json': the same file as the trace" -- \
  "$dir/zb.json" -o "$dir/zb-link.json"
check "the input left as it was" cmp -s "$dir/zb.json" "$dir/zb-before.json"
mkfifo "$dir/fifo.json" "$dir/fifo.svg"
expect "a FIFO as the input" "^troupe: timeline: $dir/fifo.json: a FIFO, not a regular file" -- "$dir/fifo.json"
expect "a FIFO as the output" "^troupe: timeline: --output '$dir/fifo.svg': a FIFO, not a regular file" -- \
  "$dir/zb.json" -o "$dir/fifo.svg"
check "the FIFO left as it was" test -p "$dir/fifo.svg"
if mknod "$dir/null.svg" c 1 3 2>/dev/null; then
  expect "a character device as the output" "^troupe: timeline: --output '$dir/null.svg': a character device, not a regular file" -- \
    "$dir/zb.json" -o "$dir/null.svg"
  check "the device left as it was" test -c "$dir/null.svg"
else
  echo "skip a character device: mknod is not permitted here"
fi
check "no temporary file left" test -z "$(find "$dir" -name '.*.tmp.*')"
exit $failed
