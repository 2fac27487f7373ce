#!/usr/bin/env bash
# run-digests.sh BUILD_DIR — digests of a layout matrix, for comparing two builds (A/B).
#
#   tools/run-digests.sh build-before > before.txt
#   tools/run-digests.sh build-after  > after.txt
#   diff before.txt after.txt          # nothing: the change moved no bit
#
# A developer's tool, not a test: a refactoring that must change no numerics (issue 38's
# steps, docs/ARCHITECTURE.md "Refactoring safely") runs it on the build before and the
# build after, on one machine, and the two outputs must be identical. For each row of the
# matrix below it runs `troupe train ROW --steps 6 --deterministic --checkpoint`, then the
# same run stopped at step 3 and resumed to step 6, and prints for each of the two:
#   - the final loss, as the hexadecimal of the double --json prints;
#   - the --json document less its timing-dependent keys (TIMED below);
#   - the checkpoint's metadata, and each tensor's name, dtype, shape and sha256;
#   - whether the resumed run's tensors are bitwise the uninterrupted run's.
# A row troupe refuses or fails prints its exit status and the first line of its stderr.
# Async with two workers is not deterministic (who pushes first is up to the threads): its
# rows print their shape only (the --json keys, the tensors' names and shapes).
#
# The GEMM is pinned, so that two builds cannot choose differently: TROUPE_GEMM=onednn unless
# the environment sets it (a build without oneDNN: TROUPE_GEMM=openblas), with TROUPE_COSTS
# and TROUPE_GEMM_CHOICES in a private temporary folder (nothing in ~/.cache is read or
# written). The pin is the output's first line, so outputs made under different pins differ.
# Two runs of one build print the same bytes; the whole matrix takes about a minute on two
# busy cores (mlp at batch 16, simplenet where a row needs .npy data). Exit status: 0, or 1
# when a row failed (its lines say which), 2 on a bad argument.
set -u
if [[ $# -ne 1 || ! -x "$1/tools/troupe" ]]; then
  echo "usage: $0 BUILD_DIR  (BUILD_DIR/tools/troupe must exist: ninja -C BUILD_DIR)" >&2
  exit 2
fi
troupe=$(realpath "$1/tools/troupe")
command -v python3 >/dev/null || { echo "$0: python3 is needed (standard library only)" >&2; exit 2; }
work=$(mktemp -d /tmp/troupe-digests-XXXXXX) || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
export TROUPE_GEMM=${TROUPE_GEMM:-onednn}
export TROUPE_COSTS=$work/costs.safetensors TROUPE_GEMM_CHOICES=$work/gemm-choices

# Keys of --json whose values come from clocks (and the async rows' scheduling), dropped.
TIMED='seconds samples_per_s steps_per_s tokens_per_s utilization idle_breakdown bubble_fraction
bubble_schedule gflops sgemm_gflops hardware_fraction server_utilization'

# simplenet's .npy data for --eval-split: 200 rows of 10 features, y a fixed linear function.
python3 - <<'EOF' || exit 2
import random, struct
rng = random.Random(1)
def save(path, shape, values):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
        f.write(struct.pack("<%df" % len(values), *values))
rows = 200
x = [rng.gauss(0, 1) for _ in range(rows * 10)]
y = [sum(x[r * 10 + k] * (k - 4.5) / 10 for k in range(10)) for r in range(rows)]
save("x.npy", (rows, 10), x)
save("y.npy", (rows, 1), y)
EOF

# digest MODE LABEL JSON CHECKPOINT [REFERENCE]: prints what one run left (MODE bits or
# shape); REFERENCE, a checkpoint the same tensors should equal.
digest() {
  python3 - "$@" <<'EOF'
import hashlib, json, os, struct, sys
mode, label, json_path, ck_path = sys.argv[1:5]
ref = sys.argv[5] if len(sys.argv) > 5 else None
timed = set(os.environ["TIMED"].split())

def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", None) or {}
    data = b[8 + n:]
    out = []
    for name in sorted(head):
        t = head[name]
        lo, hi = t["data_offsets"]
        out.append((name, t["dtype"], t["shape"], hashlib.sha256(data[lo:hi]).hexdigest()))
    return meta, out

def keys(d, prefix=""):
    for k, v in d.items():
        yield prefix + k
        if isinstance(v, dict):
            yield from keys(v, prefix + k + ".")

doc = json.load(open(json_path))
for k in timed:
    doc.pop(k, None)
try:
    meta, ts = tensors(ck_path)
except (OSError, ValueError, KeyError, struct.error) as e:
    meta, ts = None, None
    print(f"{label} checkpoint unreadable: {type(e).__name__}")
if mode == "shape":
    print(f"{label} json keys {' '.join(keys(doc))}")
    for name, dtype, shape, _ in ts or []:
        print(f"{label} tensor {name} {dtype} {shape}")
    sys.exit(0)
loss = doc.get("final_loss")
print(f"{label} final_loss {float(loss).hex() if isinstance(loss, (int, float)) else loss}")
print(f"{label} json {json.dumps(doc, separators=(',', ':'))}")
if ts is None:
    sys.exit(0)
print(f"{label} metadata {json.dumps(meta, sort_keys=True, separators=(',', ':'))}")
for name, dtype, shape, sha in ts:
    print(f"{label} tensor {name} {dtype} {shape} {sha}")
if ref:
    same = ts == tensors(ref)[1]
    print(f"{label} tensors {'bitwise the uninterrupted run' if same else 'DIFFER from the uninterrupted run'}")
EOF
}

# train NAME ARGS...: one run of troupe train, its --json (if asked) in NAME.json; 0, or its
# failure printed
train() {
  local name=$1
  shift
  "$troupe" train "$@" --deterministic --quiet >"$name.json" 2>"$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || echo "  exit $rc: $(head -n 1 "$name.err")"
  return $rc
}

# run_row MODE NAME ARGS...: the row's uninterrupted run, and the same stopped at step 3 and
# resumed; its lines on stdout, NAME.failed left when a run failed.
run_row() {
  local mode=$1 name=$2
  shift 2
  echo "== $name: troupe train $*"
  if train "$name.full" "$@" --steps 6 --json --checkpoint "$name.full.st"; then
    digest "$mode" "  full   " "$name.full.json" "$name.full.st"
  else
    touch "$name.failed"
  fi
  if train "$name.half" "$@" --steps 3 --checkpoint "$name.half.st" &&
    train "$name.resumed" "$@" --steps 6 --json --resume "$name.half.st" \
      --checkpoint "$name.resumed.st"; then
    digest "$mode" "  resumed" "$name.resumed.json" "$name.resumed.st" "$name.full.st"
  else
    touch "$name.failed"
  fi
  rm -f "$name".*.st
}

# row MODE NAME ARGS...: run_row in the background, at most $jobs at once (each row's files
# are its own, and its lines are printed in the matrix's order at the end).
jobs=$(nproc 2>/dev/null || echo 2)
order=()
row() {
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  run_row "$@" >"$2.out" 2>&1 &
  order+=("$2")
}

export TIMED
echo "# run-digests: TROUPE_GEMM=$TROUPE_GEMM"
mlp=(--model mlp --batch 16)
row bits single "${mlp[@]}" --devices host:1 --strategy single
row bits dp "${mlp[@]}" --devices host:4 --strategy dp
row bits dp-zero1 "${mlp[@]}" --devices host:4 --strategy dp --zero 1
row bits mp "${mlp[@]}" --devices host:4 --strategy mp
for s in gpipe 1f1b interleaved zb1; do
  row bits "pipeline-$s" "${mlp[@]}" --devices host:4 --strategy pipeline --schedule "$s"
done
row bits hybrid "${mlp[@]}" --devices host:4 --strategy hybrid
row bits tp "${mlp[@]}" --devices host:4 --strategy tp
row bits tp-gpt --model gpt --batch 2 --devices host:4 --strategy tp
row bits dp-tensor2 "${mlp[@]}" --devices host:4 --strategy dp --tensor 2
row bits async-1 "${mlp[@]}" --devices host:1 --strategy async --workers 1
row shape async-2 "${mlp[@]}" --devices host:2 --strategy async --workers 2 --staleness 1
row bits local "${mlp[@]}" --devices host:4 --strategy local --sync-every 2
row bits local-nesterov "${mlp[@]}" --devices host:4 --strategy local --sync-every 2 --outer nesterov
# replica 1's device fails its second loss backward: it leaves at step 1 (and, resumed from
# step 3 with all four back, at step 4)
row bits local-elastic "${mlp[@]}" --devices 'fault(host:4;dev=1,op=mse_b,from=2)' \
  --strategy local --sync-every 2 --elastic
row bits eval-split --model simplenet --devices host:2 --strategy dp --data x.npy --labels y.npy \
  --eval-split 0.25 --eval-every 2
wait
failed=0
for name in "${order[@]}"; do
  cat "$name.out"
  [[ -e $name.failed ]] && failed=1
done
exit $failed
