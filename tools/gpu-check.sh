#!/usr/bin/env bash
# gpu-check.sh — verifies the CUDA backend on a GPU machine in about five minutes: the CUDA
# test programs (every op against the host backend; streams, events, peer copies between
# logical devices; training on cuda:0 against host:1 and every strategy on logical devices
# of one GPU against single; NCCL: a communicator of one member, logical devices of one GPU
# refused and summed with peer, dp through NCCL where there are two GPUs, and the row of
# `troupe bench nccl`, which says why it skipped on one GPU), the profiling test on logical devices of one GPU (NVTX ranges
# through the recorder, the Chrome trace; tests/profiling), `nsys profile -t cuda,nvtx,osrt`
# of a pipeline where Nsight Systems is installed, `troupe devices`, `troupe train` of each
# workload on cuda:0, mlp on cuda:0 with its data made by the loader and on the GPU
# (--data-on host, device), a gpt pipeline's held-out evaluation on logical devices of
# cuda:0 against host:2, tensor parallelism (gpt tp, mlp dp x tp), DiLoCo and an elastic
# async run with a failing worker on logical devices of cuda:0 (against host devices), `troupe bench gpu` (mlp and gpt in fp32/TF32/bf16 against
# cuBLAS's peak, the pipeline with CUDA graphs off and on), the CUDA graphs test on the
# GPU (test_replay), `troupe bench ops` on cuda:0, `troupe bench` of the strategies on cuda:0,cuda:0 (and four
# logical devices), `nvidia-smi topo -m` and compute-sanitizer's memcheck where they exist,
# with a short table last.
#
# The machine needs nvcc, meson and ninja, and nothing else of troupe's: tools/gpu-prepare.sh
# made build-gpu-check/carry/gpu-check.tar.xz beforehand on a machine without a GPU (the
# programs, and the libraries with headers). This script runs those programs when they start
# and were built from the sources present here; otherwise it rebuilds them here against the
# libraries in the archive (the sources changed since, or the programs do not load).
#
#   tools/gpu-check.sh                  # device tool: carry ["build-gpu-check/carry"]
#   GPU_CHECK_REBUILD=1 tools/gpu-check.sh   # always rebuild here
#   GPU_CHECK_REBUILD=never ...         # run the carried programs even if the sources changed
#   GPU_CHECK_SECONDS=240 ...           # the time the optional steps must end by (default
#                                       # 330 s from the start; tests still get 30 s each)
#   GPU_CHECK_SKIP="ops memcheck" ...   # leave out `troupe bench ops` and/or memcheck (a rerun);
#                                       # "gpu" leaves out `troupe bench gpu`
#   GPU_CHECK_GPU_SECONDS=2 ...         # each training run of `troupe bench gpu`
#   tools/gpu-check.sh --source-hash    # the hash gpu-prepare.sh records (no GPU needed)
#
# Output: progress and every program's output on stdout/stderr, the summary last. Under $OUT
# (or /tmp/gpu-check-out), seven files: gpu-check.log (all of stdout and stderr), tests.txt
# (the test programs' output), results.json (`troupe devices`, `troupe train` of each
# workload and `troupe bench ops`, as their JSON), bench.md (the strategy tables),
# sanitizer.txt (memcheck's report), nsys.txt (Nsight Systems' NVTX summary) and
# summary.txt (the table printed last). Exit 0 when every check passed, 1 otherwise; a
# missing nvidia-smi topo, compute-sanitizer or nsys is noted, not failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

# The sources that make the programs (every folder libtroupe, troupe, the tests and the
# examples are built from): hashed the same way here and by gpu-prepare.sh.
source_hash() {
  find meson.build meson_options.txt runtime gpu models actors include tools examples tests -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name meson.build -o -name meson_options.txt \) \
    -not -path '*/build*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ ${1:-} == --source-hash ]]; then
  source_hash
  exit 0
fi

out=${OUT:-/tmp/gpu-check-out}
work=${GPU_CHECK_WORK:-/tmp/troupe-gpu-check}
archive=${GPU_CHECK_ARCHIVE:-build-gpu-check/carry/gpu-check.tar.xz}
mkdir -p "$out"
t_start=$(date +%s)
deadline=$((t_start + ${GPU_CHECK_SECONDS:-300}))

say() { printf '\n== %s (%ds)\n' "$*" $(($(date +%s) - t_start)); }
summary=()
failed=0
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }
# Time: the tests always run (30 s at least each, even past the deadline); a later step runs
# only while `needs` seconds are left before it, so that the summary is printed well inside
# the device tool's limit even when something hangs (worst case: deadline + 3 x 30 s).
left() { echo $((deadline - $(date +%s))); }
# Seconds a step may take: what it asks for, cut to the time left, and never under `floor`.
allow() {
  local want=$1 floor=${2:-30} left
  left=$(left)
  ((left < want)) && want=$left
  ((want < floor)) && want=$floor
  echo "$want"
}
# late NAME NEEDS: true (and NAME noted as skipped) when fewer than NEEDS seconds are left.
late() {
  (($(left) >= $2)) && return 1
  note "$1" "SKIPPED: out of time (GPU_CHECK_SECONDS)"
  return 0
}
# What an exit status says, for the summary.
exit_says() {
  case $1 in
    124 | 137) echo "TIMED OUT after ${2}s" ;;
    *) echo "exit $1" ;;
  esac
}

main() {
rm -rf "$work"
mkdir -p "$work/json"
: >"$out/tests.txt"
: >"$out/bench.md"

# ---- the machine ---------------------------------------------------------------------------

say "machine"
export PATH="/usr/local/cuda/bin:${CUDA_PATH:+$CUDA_PATH/bin:}$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -5
echo "compute capability $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>&1 | head -1)"
nvcc --version 2>&1 | tail -2
# meson and ninja may be Python packages whose scripts are not on PATH (only needed to rebuild)
command -v meson >/dev/null || meson() { python3 -m mesonbuild.mesonmain "$@"; }
if ! command -v ninja >/dev/null; then
  d=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && PATH="$d:$PATH"
fi
echo "meson $(meson --version 2>&1), ninja $(ninja --version 2>&1), $(gcc --version 2>&1 | head -1), $(nproc) CPUs"

# cuBLAS and cudart: the toolkit's lib folder, else the wheels PyTorch brought
cuda_libs=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cublas", "cuda_runtime")))' 2>/dev/null); do
  [[ -e $d/libcublas.so.13 || -e $d/libcudart.so.13 ]] && cuda_libs+="$d:"
done
echo "CUDA libraries: ${cuda_libs:-none besides the loader path}"

# the GPUs' links (NVLink, PCIe), for reading peer-copy figures; optional
echo
if timeout 20 nvidia-smi topo -m 2>&1; then
  note "nvidia-smi topo -m" "ok (in the log)"
else
  note "nvidia-smi topo -m" "not available (noted, not failed)"
fi

# ---- the programs: the carried ones, or rebuilt here ----------------------------------------

targets=(tests/gpu/cuda/test_cuda_devices tests/gpu/cuda/test_cuda_ops tests/gpu/cuda/test_cuda_train
         tests/gpu/cuda/test_cuda_nccl tests/gpu/cuda/test_cuda_data tests/gpu/cuda/test_cuda_vocab_ops
         tests/models/test_replay tests/profiling/test_profile tests/profiling/libnvtx_recorder.so tools/troupe)
programs=("${targets[@]##*/}")
say "unpacking $archive"
if [[ ! -f $archive ]]; then
  echo "no $archive: run tools/gpu-prepare.sh first, and name build-gpu-check/carry in carry"
  note "programs" "FAILED: no $archive"
  return 1
fi
tar -C "$work" -xJf "$archive" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$work" ||
  { echo "cannot unpack $archive"; note "programs" "FAILED: cannot unpack $archive"; return 1; }
cat "$work/MANIFEST"
deps=$work/deps
export LD_LIBRARY_PATH="$deps/lib:$cuda_libs${LD_LIBRARY_PATH:-}"
bin=$work/bin

now=$(source_hash)
built_from=$(sed -n 's/^source_hash=//p' "$work/MANIFEST")
why=
missing=$(for p in "${programs[@]}"; do [[ -x $bin/$p ]] || printf ' %s' "$p"; done)
if [[ ${GPU_CHECK_REBUILD:-0} == 1 ]]; then
  why="asked to (GPU_CHECK_REBUILD=1)"
elif [[ $now != "$built_from" && ${GPU_CHECK_REBUILD:-} != never ]]; then
  why="the sources changed since gpu-prepare.sh built the programs ($built_from -> $now)"
elif [[ -n $missing ]]; then
  why="the archive lacks$missing (made by an older gpu-prepare.sh)"
elif ! "$bin/troupe" devices >"$work/devices.txt" 2>&1; then
  why="the carried programs do not run here: $(head -3 "$work/devices.txt")"
fi

if [[ -n $why ]]; then
  say "rebuilding here: $why"
  archs=$(sed -n 's/^gpu_archs=//p' "$work/MANIFEST")
  nvidia_cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [[ -n $nvidia_cc ]] && archs=$nvidia_cc
  # the carried pkgconf, looking at the carried .pc files only (the machine has none of
  # these libraries, and may have no pkg-config)
  export PKG_CONFIG="$deps/bin/pkg-config" PKG_CONFIG_LIBDIR="$deps/lib/pkgconfig"
  t0=$(date +%s)
  if ! meson setup "$work/build" "$root" -Dpkg_config_path="$deps/lib/pkgconfig" -Dcuda=enabled \
         -Dnccl=enabled -Dblas=openblas -Dmpi=disabled -Dgpu_archs="${archs:-90}" -Dbuildtype=release -Db_ndebug=false -Dtests=true ||
     ! timeout 300 ninja -C "$work/build" "${targets[@]}"; then
    note "build" "FAILED ($why)"
    return 1
  fi
  bin=$work/bin-here
  mkdir -p "$bin"
  cp "${targets[@]/#/$work/build/}" "$bin/"
  note "programs" "rebuilt here (sm_${archs:-90}, $(($(date +%s) - t0))s): $why"
else
  note "programs" "carried ($(sed -n 's/^commit=//p' "$work/MANIFEST"), built from these sources)"
fi

# ---- checks ----------------------------------------------------------------------------------

say "troupe devices"
if "$bin/troupe" devices && "$bin/troupe" devices --json >"$work/json/devices.json"; then
  note "troupe devices" "ok"
else
  note "troupe devices" "FAILED"
  failed=1
fi

# each program's output: in the log, in tests.txt, and its failures in the summary.
# test_replay is the models' test of CUDA graphs (two stages trained with graphs on, off
# and with a failed capture, bitwise alike), on cuda:0 through TR_TEST_DEVICE, which the
# CUDA test programs do not read.
export TR_TEST_DEVICE=cuda:0
for t in test_cuda_devices:120 test_cuda_ops:300 test_cuda_train:300 test_cuda_nccl:90 test_cuda_data:90 \
         test_cuda_vocab_ops:60 test_replay:60; do
  limit=$(allow "${t#*:}")
  t=${t%:*}
  say "$t (at most ${limit}s)"
  t0=$(date +%s)
  timeout -k 10 "$limit" "$bin/$t" 2>&1 | tee "$work/$t.txt"
  rc=${PIPESTATUS[0]}
  dt=$(($(date +%s) - t0))
  { printf '==== %s: exit %d after %ds\n' "$t" "$rc" "$dt"; cat "$work/$t.txt"; echo; } >>"$out/tests.txt"
  counts=$(grep -oE '^\[  (PASSED|FAILED)  \] [0-9]+' "$work/$t.txt" | awk '{print tolower($2), $4}' | paste -sd, -)
  case $rc in
    0) note "$t" "passed (${counts:-?}; ${dt}s)" ;;
    77) note "$t" "SKIPPED: no GPU seen (${dt}s)"; failed=1 ;;
    124 | 137) note "$t" "TIMED OUT after ${dt}s (${counts:-no count} before)"; failed=1 ;;
    *) note "$t" "FAILED, exit $rc (${counts:-no count}; ${dt}s)"; failed=1 ;;
  esac
done


# ---- NCCL (about 20 s on one GPU) -----------------------------------------------------------
# test_cuda_nccl ran above: a communicator of one member on cuda:0 (ncclAllReduce, ncclReduce,
# ncclBroadcast in and out of place, a bad root refused), cuda:0,cuda:0 refused as one GPU
# twice, dp there summing with peer under auto and a forced nccl refused. What one GPU cannot
# run: dp through NCCL against single (it needs two GPUs: the test says so and skips that
# case), the leaders' ncclAllReduce across ranks (one rank per GPU; no MPI here) and NCCL
# across processes in general. The bench row says why it skipped where it did.
if ! late "troupe bench nccl" 20; then
  limit=$(allow 90 20)
  say "troupe bench nccl (at most ${limit}s)"
  timeout -k 5 "$limit" "$bin/troupe" bench nccl --seconds 3 --repeats 3 --json >"$work/json/bench_nccl.json"
  rc=$?
  cat "$work/json/bench_nccl.json"
  if ((rc != 0)); then
    note "troupe bench nccl" "FAILED: $(exit_says $rc "$limit")"
    failed=1
  elif grep -q '"skipped"' "$work/json/bench_nccl.json"; then
    note "troupe bench nccl" "skipped: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["skipped"])' "$work/json/bench_nccl.json" 2>/dev/null)"
  else
    note "troupe bench nccl" "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("NCCL %.0f vs peer %.0f samples/s (%.2fx)" % (r["nccl_samples_per_s"], r["peer_samples_per_s"], r["ratio"]))' "$work/json/bench_nccl.json" 2>/dev/null)"
  fi
fi

# What a profiler sees on a GPU: the profiling test with the NVTX recorder in Nsight's place
# (tests/profiling/test_profile.c), its runs on logical devices of cuda:0.
limit=$(allow 180)
say "test_profile on cuda (NVTX recorder; at most ${limit}s)"
t0=$(date +%s)
NVTX_INJECTION64_PATH="$bin/libnvtx_recorder.so" TR_PROFILE_DEVICES=cuda \
  timeout -k 10 "$limit" "$bin/test_profile" 2>&1 | tee "$work/test_profile.txt"
rc=${PIPESTATUS[0]}
dt=$(($(date +%s) - t0))
{ printf '==== %s: exit %d after %ds\n' test_profile "$rc" "$dt"; cat "$work/test_profile.txt"; echo; } >>"$out/tests.txt"
counts=$(grep -oE '^\[  (PASSED|FAILED)  \] [0-9]+' "$work/test_profile.txt" | awk '{print tolower($2), $4}' | paste -sd, -)
skips=$(grep -c '^\[  SKIPPED \]' "$work/test_profile.txt")
case $rc in
  0) note "test_profile (cuda)" "passed (${counts:-?}; $skips skipped; ${dt}s)"
     ((skips)) && failed=1 ;; # on CUDA the NVTX tests must run
  124 | 137) note "test_profile (cuda)" "TIMED OUT after ${dt}s"; failed=1 ;;
  *) note "test_profile (cuda)" "FAILED, exit $rc (${counts:-no count}; ${dt}s)"; failed=1 ;;
esac

# Nsight Systems itself, where it is installed: a pipeline on two logical devices, steps 5 to
# 15 captured (cudaProfilerStart/Stop), and its NVTX summary, which must list the ranges.
nsys=
for n in "$(command -v nsys)" /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
  [[ -n $n && -x $n ]] && { nsys=$n; break; }
done
if [[ -z $nsys ]]; then
  note "nsys profile" "not available (noted, not failed)"
  echo "no nsys on this machine" >"$out/nsys.txt"
elif ! late "nsys profile" 40; then
  limit=$(allow 90 40)
  say "nsys profile -t cuda,nvtx,osrt troupe train (at most ${limit}s)"
  timeout -k 10 "$limit" "$nsys" profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi \
    --force-overwrite=true -o "$work/profile" "$bin/troupe" train --model gpt --strategy pipeline \
    --devices cuda:0,cuda:0 --steps 20 --profile-steps 5:15 --quiet >"$out/nsys.txt" 2>&1
  rc=$?
  report=$(ls "$work"/profile.nsys-rep 2>/dev/null)
  # the report's name before nsys 2023.4 was nvtxsum
  [[ -n $report ]] && { timeout 60 "$nsys" stats --report nvtx_sum "$report" ||
                        timeout 60 "$nsys" stats --report nvtxsum "$report"; } >>"$out/nsys.txt" 2>&1
  tail -30 "$out/nsys.txt"
  if ((rc == 0)) && grep -q 'forward' "$out/nsys.txt" && grep -q 'backward' "$out/nsys.txt"; then
    note "nsys profile" "ok (forward and backward ranges in nvtx_sum)"
  else
    note "nsys profile" "FAILED: $(exit_says $rc "$limit"), ranges $(grep -c forward "$out/nsys.txt") forward lines"
    failed=1
  fi
fi

# the workloads on one GPU, with their figures
for m in "mlp --seconds 3" "gpt --seconds 3" "simplenet --steps 20000"; do
  name=${m%% *}
  late "troupe train $name" 15 && continue
  limit=$(allow 60 15)
  say "troupe train --model $m --devices cuda:0 --json (at most ${limit}s)"
  # shellcheck disable=SC2086 # $m is the model and its length, split on purpose
  timeout -k 5 "$limit" "$bin/troupe" train --model $m --devices cuda:0 --json \
    >"$work/json/train_$name.json"
  rc=$?
  cat "$work/json/train_$name.json"
  if ((rc == 0)); then
    note "troupe train $name" "ok"
  else
    note "troupe train $name" "FAILED: $(exit_says $rc "$limit")"
    failed=1
  fi
done

# ---- data made on the GPU (issue 12): mlp on cuda:0 fed by the loader's one thread
# (--data-on host) against its samples made on the GPU (--data-on device); about 15 s.
# Figures in the summary's train table (mlp_data_host, mlp_data_device) and this note.
if ! late "mlp --data-on host vs device" 25; then
  for on in host device; do
    limit=$(allow 30 15)
    say "troupe train --model mlp --devices cuda:0 --data-on $on --seconds 3 --json (at most ${limit}s)"
    timeout -k 5 "$limit" "$bin/troupe" train --model mlp --devices cuda:0 --data-on "$on" \
      --seconds 3 --json >"$work/json/train_mlp_data_$on.json"
    rc=$?
    cat "$work/json/train_mlp_data_$on.json"
    ((rc == 0)) || { note "mlp --data-on $on" "FAILED: $(exit_says $rc "$limit")"; failed=1; }
  done
  figures=$(python3 - "$work/json" <<'PY' 2>/dev/null
import json, sys
r = {on: json.load(open(f"{sys.argv[1]}/train_mlp_data_{on}.json")) for on in ("host", "device")}
h, d = r["host"]["samples_per_s"], r["device"]["samples_per_s"]
u = lambda x: ",".join(f"{v:.2f}" for v in x.get("utilization") or [])
print(f"host {h:.0f} samples/s (util {u(r['host'])}), device {d:.0f} (util {u(r['device'])}): {d / h:.2f}x")
PY
  )
  [[ -n $figures ]] && note "mlp --data-on host vs device" "$figures"
fi

# ---- held-out evaluation on the GPU (issue 21): a gpt pipeline on two logical devices of
# cuda:0 evaluates 64 held-out samples of a byte file every 5 steps (its losses and outputs
# copied to the host by the last stage), against the same run on host:2; about 10 s.
if ! late "held-out evaluation" 20; then
  for devs in cuda:0,cuda:0 host:2; do
    limit=$(allow 40 15)
    say "troupe train --model gpt --strategy pipeline --devices $devs --eval-data README.md --eval-every 5 (at most ${limit}s)"
    timeout -k 5 "$limit" "$bin/troupe" train --model gpt --strategy pipeline --devices "$devs" \
      --steps 10 --deterministic --eval-data README.md --eval-samples 64 --eval-every 5 --json \
      >"$work/json/train_eval_${devs%%:*}.json"
    rc=$?
    ((rc == 0)) || { note "held-out evaluation $devs" "FAILED: $(exit_says $rc "$limit")"; failed=1; }
  done
  figures=$(python3 - "$work/json" <<'PY' 2>/dev/null
import json, math, sys
c, h = (json.load(open(f"{sys.argv[1]}/train_eval_{d}.json"))["eval"] for d in ("cuda", "host"))
ok = c["count"] == 2 and c["samples"] == 64 and math.isclose(c["loss"], h["loss"], rel_tol=1e-3)
print(("ok" if ok else "FAILED") + f": cuda loss {c['loss']:.6f} accuracy {c['accuracy']:.4f}, "
      f"host {h['loss']:.6f} {h['accuracy']:.4f}, {c['count']} evaluations")
PY
  )
  note "held-out evaluation" "${figures:-FAILED: no eval object in the JSON}"
  [[ $figures == ok* ]] || failed=1
fi

# ---- issue 22's strategies on logical devices of cuda:0 against the same runs on host
# devices: mlp and gpt split across a tensor group of two (--strategy tp: the members'
# collectives by peer copies, gpt's vocabulary-parallel embedding and loss by their ops), mlp dp x tp on four, DiLoCo (--strategy local --outer nesterov) on two,
# and elastic async with worker 1's device failing from its 5th loss backward (the run goes
# on with the others, exit 0, workers_alive 2); about 30 s.
if ! late "tp, local, elastic" 40; then
  runs=("tp_mlp|--model mlp --strategy tp|2|--steps 6"
        "tp_gpt|--model gpt --strategy tp|2|--steps 6"
        "dptp_mlp|--model mlp --strategy dp --tensor 2|4|--steps 6"
        "local_mlp|--model mlp --strategy local --sync-every 3 --outer nesterov|2|--steps 9")
  for r in "${runs[@]}"; do
    IFS='|' read -r name args n steps <<<"$r"
    cuda=$(printf 'cuda:0,%.0s' $(seq "$n")); cuda=${cuda%,}
    for devs in "$cuda" "host:$n"; do
      limit=$(allow 40 15)
      say "troupe train $args --devices $devs $steps (at most ${limit}s)"
      # shellcheck disable=SC2086 # $args and $steps are flags, split on purpose
      timeout -k 5 "$limit" "$bin/troupe" train $args --devices "$devs" $steps --deterministic \
        --json >"$work/json/i22_${name}_${devs%%:*}.json"
      rc=$?
      ((rc == 0)) || { note "$name on $devs" "FAILED: $(exit_says $rc "$limit")"; failed=1; }
    done
  done
  limit=$(allow 40 15)
  say "troupe train --model simplenet --strategy async --elastic, worker 1 failing (at most ${limit}s)"
  timeout -k 5 "$limit" "$bin/troupe" train --model simplenet --strategy async --elastic \
    --devices 'fault(cuda:0,cuda:0,cuda:0;dev=1,op=mse_b,from=5)' --steps 60 --json \
    >"$work/json/i22_elastic_cuda.json"
  rc=$?
  ((rc == 0)) || { note "elastic async on cuda:0" "FAILED: $(exit_says $rc "$limit")"; failed=1; }
  figures=$(python3 - "$work/json" <<'PY' 2>/dev/null
import json, math, sys
d = sys.argv[1]
out, ok = [], True
for name in ("tp_mlp", "tp_gpt", "dptp_mlp", "local_mlp"):
    c, h = (json.load(open(f"{d}/i22_{name}_{k}.json")) for k in ("cuda", "host"))
    same = math.isclose(c["final_loss"], h["final_loss"], rel_tol=1e-3)
    ok &= same
    out.append(f"{name} {c['final_loss']:.5f}/{h['final_loss']:.5f}"
               f" {c['samples_per_s']:.0f} samples/s {c['comm_bytes_per_step']:.3g} B/step")
e = json.load(open(f"{d}/i22_elastic_cuda.json"))
ok &= e["workers_alive"] == 2 and e["workers_left"].startswith("1@")
out.append(f"elastic left {e['workers_left']} alive {e['workers_alive']}")
print(("ok: " if ok else "FAILED: ") + "; ".join(out))
PY
  )
  note "tp, local, elastic (cuda vs host)" "${figures:-FAILED: a run left no JSON}"
  [[ $figures == ok* ]] || failed=1
fi

# ---- issue 23's planner on the GPU: gpt's table on two logical devices of cuda:0 predicted
# and its best two run beside the prediction (costs measured on the GPU, kept under $work);
# about 40 s.
if ! late "plan" 50; then
  limit=$(allow 60 20)
  say "troupe plan --model gpt --devices cuda:0,cuda:0 --verify 2 (at most ${limit}s)"
  TROUPE_COSTS="$work/costs.safetensors" timeout -k 5 "$limit" "$bin/troupe" plan --model gpt \
    --devices cuda:0,cuda:0 --verify 2 --seconds 3 --json >"$work/json/i23_plan.json"
  rc=$?
  figures=$(python3 - "$work/json/i23_plan.json" <<'PY' 2>/dev/null
import json, sys
p = json.load(open(sys.argv[1]))
v = [l for l in p["layouts"] if l.get("measured")]
print(("ok: " if v else "FAILED: nothing verified: ") + "; ".join(
    f"{l['label']} predicted {l['predicted']['samples_per_s']:.0f} measured "
    f"{l['measured']['samples_per_s']:.0f} ({100 * l['measured']['error']:+.0f}%)" for l in v))
PY
  )
  ((rc == 0)) || figures="FAILED: $(exit_says $rc "$limit")"
  note "plan (gpt, cuda:0 x2)" "${figures:-FAILED: no JSON}"
  [[ $figures == ok* ]] || failed=1
fi

skipped() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }

# ---- `troupe bench gpu`: mlp and gpt in fp32, TF32 and bf16 against cuBLAS's own GEMM peak
# measured in the same run, and gpt's pipeline on cuda:0,cuda:0 with CUDA graphs off and on
# (10 training runs of GPU_CHECK_GPU_SECONDS each, default 2, plus start-up: about a
# minute). The table goes to bench.md and the summary, the JSON to results.json.
if ! skipped gpu && ! late "troupe bench gpu" 45; then
  limit=$(allow 120 45)
  say "troupe bench gpu --seconds ${GPU_CHECK_GPU_SECONDS:-2} (at most ${limit}s)"
  printf '\n## troupe bench gpu --seconds %s\n\n' "${GPU_CHECK_GPU_SECONDS:-2}" >>"$out/bench.md"
  timeout -k 5 "$limit" "$bin/troupe" bench gpu --seconds "${GPU_CHECK_GPU_SECONDS:-2}" \
    >"$work/bench_gpu.txt"
  rc=$?
  tee -a "$out/bench.md" <"$work/bench_gpu.txt"
  bad=$(grep -c '| failed:' "$work/bench_gpu.txt")
  if ((rc == 0 && bad == 0)); then
    note "troupe bench gpu" "ok (table in bench.md and below)"
  else
    note "troupe bench gpu" "FAILED: $(exit_says $rc "$limit"), $bad run(s) failed"
    failed=1
  fi
fi
# ---- end of bench gpu

if ! skipped ops && ! late "troupe bench ops" 20; then
  limit=$(allow 60 20)
  say "troupe bench ops --devices cuda:0 (at most ${limit}s)"
  # 256 MiB buffers: several times the L2 (60 MB on an H200), so GB/s are HBM's
  timeout -k 5 "$limit" "$bin/troupe" bench ops --devices cuda:0 \
    --seconds "${GPU_CHECK_BENCH_SECONDS:-0.05}" --size "${GPU_CHECK_BENCH_SIZE:-67108864}" \
    --json >"$work/json/bench_ops.json"
  rc=$?
  if ((rc == 0)); then
    note "troupe bench ops" "ok"
  else
    note "troupe bench ops" "FAILED: $(exit_says $rc "$limit")"
    failed=1
  fi
fi

# Every strategy against single (9 rows on two devices with the async ones, 10 on four),
# each S seconds after a warm-up of 3 steps: about a minute for the three tables. A table is
# printed when its last row has run, so a bench cut short leaves none.
for b in "mlp 2 cuda:0,cuda:0 45" "gpt 1 cuda:0,cuda:0 35" "mlp 1 cuda:0,cuda:0,cuda:0,cuda:0 40"; do
  read -r model secs devices want <<<"$b"
  label="troupe bench $model on $(tr , '\n' <<<"$devices" | wc -l) x ${devices%%,*}"
  late "$label" 20 && continue
  limit=$(allow "$want" 20)
  say "troupe bench --model $model --devices $devices --seconds $secs (at most ${limit}s)"
  printf '\n## troupe bench --model %s --devices %s --seconds %s\n\n' "$model" "$devices" "$secs" \
    >>"$out/bench.md"
  timeout -k 5 "$limit" "$bin/troupe" bench --model "$model" --devices "$devices" \
    --seconds "$secs" --format md >"$work/bench.txt"
  rc=$?
  tee -a "$out/bench.md" <"$work/bench.txt"
  bad=$(grep -c '| failed:' "$work/bench.txt")
  if ((rc == 0 && bad == 0)); then
    note "$label" "ok"
  else
    note "$label" "FAILED: $(exit_says $rc "$limit"), $bad strategy row(s) failed"
    failed=1
  fi
done

# memcheck on the device layer's tests: slow (every access checked), so last and optional.
# API errors are not reported: test_cuda_devices provokes some on purpose.
san=
for s in "$(command -v compute-sanitizer)" /usr/local/cuda/bin/compute-sanitizer \
         /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -n $s && -x $s ]] && { san=$s; break; }
done
if skipped memcheck; then
  echo "left out (GPU_CHECK_SKIP)" >"$out/sanitizer.txt"
elif [[ -z $san ]]; then
  note "compute-sanitizer memcheck" "not available (noted, not failed)"
  echo "no compute-sanitizer on this machine" >"$out/sanitizer.txt"
elif ! late "compute-sanitizer memcheck" 30; then
  limit=$(allow 120)
  say "compute-sanitizer --tool memcheck test_cuda_devices (at most ${limit}s)"
  timeout -k 10 "$limit" "$san" --tool memcheck --report-api-errors no --error-exitcode 99 \
    "$bin/test_cuda_devices" >"$out/sanitizer.txt" 2>&1
  rc=$?
  tail -40 "$out/sanitizer.txt"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/sanitizer.txt" | grep -oE '[0-9]+$' | tail -1)
  case $rc in
    0) note "compute-sanitizer memcheck" "clean (${errors:-0} errors)" ;;
    99) note "compute-sanitizer memcheck" "FAILED: ${errors:-some} memory errors"; failed=1 ;;
    124 | 137) note "compute-sanitizer memcheck" "timed out after ${limit}s (noted, not failed)" ;;
    *) note "compute-sanitizer memcheck" "the test failed under it, exit $rc, ${errors:-?} memory errors (noted)" ;;
  esac
fi
return 0
}

# ---- the summary: printed last (the device tool returns the end of the output) --------------

report() {
python3 - "$work/json" "$out/results.json" <<'PY' || true
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
bundle = {}
for f in sorted(os.listdir(src)) if os.path.isdir(src) else []:
    text = open(os.path.join(src, f)).read()
    try:
        bundle[f[:-5]] = json.loads(text)
    except ValueError:
        bundle[f[:-5]] = {"unparsed": text[-4000:]}
json.dump(bundle, open(dst, "w"), indent=1)

ops = bundle.get("bench_ops", {}).get("rows", [])
if ops:
    print(f"\n{'op':<22} {'shape':<20} {'speed':>16}   vs reference")
    for r in ops:
        ref = f"{r['ratio']:.2f}x {r['reference']} {r['reference_value']:.0f}" if r.get("ratio") else ""
        print(f"{r['op'][:22]:<22} {r['shape'][:20]:<20} {r['value']:>9.1f} {r['unit']:<7} {ref}")

def fmt(v, f):
    return format(v, f) if isinstance(v, (int, float)) else "-"
rows = [(k[6:], v) for k, v in bundle.items() if k.startswith("train_")]
if rows:
    print(f"\n{'train on cuda:0':<16} {'steps':>6} {'samples/s':>10} {'GFLOP/s':>8} {'tokens/s':>9} "
          f"{'util':>5} {'loss first -> final':>22}")
    for name, r in rows:
        if "unparsed" in r:
            print(f"{name:<16} (no JSON: {r['unparsed'][-80:]!r})")
            continue
        u = ",".join(fmt(x, ".2f") for x in r.get("utilization") or [])
        print(f"{name:<16} {r.get('steps', '-'):>6} {fmt(r.get('samples_per_s'), '.0f'):>10} "
              f"{fmt(r.get('gflops'), '.1f'):>8} {fmt(r.get('tokens_per_s'), '.0f'):>9} {u:>5} "
              f"{fmt(r.get('initial_loss'), '.4g'):>10} -> {fmt(r.get('final_loss'), '.4g'):<8}")
PY
if [[ -s $out/bench.md ]]; then
  echo
  grep -E '^\| |^## |^BLAS' "$out/bench.md" | grep -v '^|---'
fi
# what failed in the tests, at most 30 lines (all of it is in tests.txt)
fails=$(grep -E 'FAIL|ERROR|error|TIMED OUT|Segmentation|Assertion|abort|^==== ' "$out/tests.txt" |
        grep -vE '^\[  (FAILED|PASSED)  \] [0-9]+ test|^\[==========\]|\(expected\)' |
        grep -vE '^==== .*: exit 0 ' | cut -c1-160)
if [[ -n $fails ]]; then
  printf '\nfrom the tests (%d lines; all in tests.txt):\n' "$(wc -l <<<"$fails")"
  head -30 <<<"$fails"
fi
echo
printf '%s\n' "${summary[@]}"
printf '\ngpu-check: %s in %ds\n' "$( ((failed)) && echo FAILED || echo passed)" $(($(date +%s) - t_start))
}

{
  main
  rc=$?
  ((rc)) && failed=1
  say "summary"
  report | tee "$out/summary.txt"
  exit "$failed"
} 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
