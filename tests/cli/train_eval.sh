#!/usr/bin/env bash
# train_eval.sh TROUPE [CASE] — `troupe train`'s held-out evaluation flags (--eval-data,
# --eval-labels, --eval-split, --eval-every, --eval-samples).
#
#   refusals (the default)  what cannot be evaluated exits 2 naming the flag, before training:
#                           a fraction not strictly between 0 and 1, a split beside --eval-data, a
#                           split of gpt's endless bytes or of the generated data, a part of
#                           no rows, an eval file that is an output, labels alone, held-out
#                           features or labels (files, or a split's rows) holding NaN or an
#                           infinity (naming the file's row and column); .npy data split or
#                           held-out files given train to the end (exit 0)
#   json                    --eval-split 0.2 --eval-every 5 --json: an "eval" object whose
#                           loss is finite, of the held-out rows' count, after the last step
# The .npy files are written by python3 (no NumPy needed); without it the test skips (77).
set -u
troupe=$(realpath "$1")
self=$(realpath "$0") # a byte file for gpt
case_=${2:-refusals}
command -v python3 >/dev/null || { echo "skip: python3 writes the .npy files"; exit 77; }
work=$(mktemp -d /tmp/troupe-eval-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }

# npy ROWS SEED PREFIX: PREFIX-x.npy (ROWS, 10) float32 and PREFIX-y.npy (ROWS, 1) float32,
# y a fixed linear function of x (simplenet's sizes)
npy() {
  python3 - "$@" <<'EOF'
import random, struct, sys
rows, seed, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
def save(path, shape, values):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
        f.write(struct.pack("<%df" % len(values), *values))
x = [rng.gauss(0, 1) for _ in range(rows * 10)]
y = [sum(x[r * 10 + k] * (k - 4.5) / 10 for k in range(10)) for r in range(rows)]
save(prefix + "-x.npy", (rows, 10), x)
save(prefix + "-y.npy", (rows, 1), y)
EOF
}

# poison FILE ROW COLUMN VALUE: a copy of FILE (a 2-D float32 .npy) as nan-FILE with the
# value at (ROW, COLUMN) replaced by VALUE ("nan", "inf", "-inf"); ROW "all": in every row
poison() {
  python3 - "$@" <<'EOF'
import struct, sys
path, row, col, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
b = bytearray(open(path, "rb").read())
start = 10 + struct.unpack("<H", b[8:10])[0]
rows, cols = (int(v) for v in b[10:start].decode().split("(")[1].split(")")[0].split(",")[:2])
for r in range(rows) if row == "all" else [int(row)]:
    struct.pack_into("<f", b, start + 4 * (r * cols + col), value)
open("nan-" + path, "wb").write(b)
EOF
}

# expect WHAT STATUS PATTERN -- ARGS: `troupe train ARGS` exits STATUS within 60 s, its stderr
# matching PATTERN (grep -E)
expect() {
  local what=$1 status=$2 pattern=$3
  shift 4
  local err rc
  err=$(timeout 60 "$troupe" train --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$what: exit $rc, stderr: $err"
  else
    ok "$what: ${err:-(nothing)}"
  fi
}

npy 200 1 train || { echo "FAIL python3 could not write the .npy files"; exit 1; }
npy 50 2 held || exit 1
npy 3 3 tiny || exit 1
poison held-x.npy 17 3 nan && poison held-y.npy 7 0 inf && poison train-x.npy all 2 -inf || exit 1
held_sum=$(cat held-x.npy held-y.npy | md5sum)
data=(--model simplenet --devices host:1 --data train-x.npy --labels train-y.npy)

case $case_ in
refusals)
  for f in 1.5 1 0 nan; do # 0 would hold nothing out: a split asked for is never silently none
    expect "a fraction of $f" 2 "^troupe: --eval-split: '$f' is not a fraction between 0 and 1, both excluded" -- \
      "${data[@]}" --eval-split "$f" --steps 2
  done
  expect "a split beside held-out files" 2 '^troupe: --eval-split and --eval-data: give one of them' -- \
    "${data[@]}" --eval-split 0.2 --eval-data held-x.npy --eval-labels held-y.npy --steps 2
  expect "a split of gpt's bytes" 2 "^troupe: --eval-split 0.2: data '.*train_eval.sh': an endless source cannot be split" -- \
    --model gpt --devices host:1 --data "$self" --eval-split 0.2 --steps 2
  expect "a split of gpt's generated corpus" 2 "^troupe: --eval-split 0.2: data 'arithmetic': an endless source" -- \
    --model gpt --devices host:1 --eval-split 0.2 --steps 2
  expect "a split of the generated data" 2 "^troupe: --eval-split 0.5: data 'teacher': an endless source" -- \
    --model simplenet --devices host:1 --eval-split 0.5 --steps 2
  expect "a split leaving no held-out row" 2 "^troupe: --eval-split 0.1: data 'tiny-x.npy': held_out 0.1 of 3 rows leaves the held-out part no rows" -- \
    --model simplenet --devices host:1 --data tiny-x.npy --labels tiny-y.npy --eval-split 0.1 --steps 2
  expect "held-out features the checkpoint" 2 "^troupe: --checkpoint 'held-x.npy': the same file as --eval-data 'held-x.npy'" -- \
    "${data[@]}" --eval-data held-x.npy --eval-labels held-y.npy --checkpoint held-x.npy --steps 2
  expect "held-out labels the trace" 2 "^troupe: --trace 'held-y.npy': the same file as --eval-labels 'held-y.npy'" -- \
    "${data[@]}" --eval-data held-x.npy --eval-labels held-y.npy --trace held-y.npy --steps 2
  expect "held-out labels alone" 2 '^troupe: --eval-labels needs --eval-data' -- \
    "${data[@]}" --eval-labels held-y.npy --steps 2
  expect "held-out features without labels" 2 "^troupe: --eval-labels: model 'simplenet' reads floats: its held-out samples are two .npy files, features \\(--eval-data\\) and labels \\(--eval-labels\\)" -- \
    "${data[@]}" --eval-data held-x.npy --steps 2
  expect "held-out labels for tokens" 2 "^troupe: --eval-labels: model 'gpt' reads tokens" -- \
    --model gpt --devices host:1 --eval-data "$self" --eval-labels held-y.npy --steps 2
  expect "held-out files of other sizes" 2 "^troupe: --eval-data: data 'held-y.npy': 4 bytes of inputs per sample, model 'simplenet' wants 40" -- \
    "${data[@]}" --eval-data held-y.npy --eval-labels held-y.npy --steps 2
  # held-out values that are not finite: no gradient would catch them (a ReLU makes NaN 0)
  expect "held-out features holding NaN" 2 "^troupe: --eval-data: nan-held-x.npy: row 17, column 3 holds NaN: " -- \
    "${data[@]}" --eval-data nan-held-x.npy --eval-labels held-y.npy --steps 2
  expect "held-out labels holding +Inf" 2 "^troupe: --eval-data: nan-held-y.npy: row 7 holds \\+Inf: " -- \
    "${data[@]}" --eval-data held-x.npy --eval-labels nan-held-y.npy --steps 2
  expect "a split's held-out rows holding -Inf" 2 "^troupe: --eval-split 0.2: nan-train-x.npy: row [0-9]+, column 2 holds -Inf: " -- \
    --model simplenet --devices host:1 --data nan-train-x.npy --labels train-y.npy --eval-split 0.2 --steps 2
  expect "evaluation of an asynchronous run" 2 '^troupe: --eval-split: applies to' -- \
    "${data[@]}" --strategy async --devices host:2 --eval-split 0.2 --steps 2
  # what can be evaluated trains to its end (the evaluation itself: CASE json)
  expect "a split of .npy data trains" 0 '' -- "${data[@]}" --eval-split 0.2 --steps 3
  expect "held-out files train" 0 '' -- "${data[@]}" --eval-data held-x.npy --eval-labels held-y.npy \
    --eval-every 2 --steps 3
  [[ $(cat held-x.npy held-y.npy | md5sum) == "$held_sum" ]] || fail "the held-out files were changed"
  ;;
json)
  out=$(timeout 60 "$troupe" train --quiet "${data[@]}" --eval-split 0.2 --eval-every 5 --steps 10 --json)
  rc=$?
  [[ $rc -eq 0 ]] || fail "--eval-split 0.2 --json: exit $rc"
  # 200 rows, 40 held out (round(0.2 x 200)): each once, after step 10, the run's end
  check='
import json, math, sys
e = json.load(sys.stdin).get("eval")
assert isinstance(e, dict), "no eval object: %r" % e
assert isinstance(e.get("loss"), (int, float)) and math.isfinite(e["loss"]), "loss %r" % e.get("loss")
assert e.get("samples") == 40, "samples %r, not the 40 held-out rows" % e.get("samples")
assert e.get("step") == 10, "step %r, not the last" % e.get("step")
assert isinstance(e.get("count"), int) and e["count"] >= 2, "count %r: every 5 steps of 10" % e.get("count")
assert "accuracy" in e, "no accuracy key (null for MSE)"
print("eval", e)
'
  if msg=$(python3 -c "$check" <<<"$out" 2>&1); then ok "--eval-split 0.2 --json: $msg"
  else fail "--eval-split 0.2 --json: $msg: $out"
  fi
  ;;
*) echo "unknown case $case_"; exit 1 ;;
esac
exit $failed
