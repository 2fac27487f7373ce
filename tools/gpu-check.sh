#!/usr/bin/env bash
# gpu-check.sh — verifies the CUDA backend on a GPU machine in a few minutes: the CUDA test
# suite (every op against the host backend, streams, events, peer copies between logical
# devices), `troupe devices`, then `troupe bench ops` on cuda:0, with a short table last.
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
#   tools/gpu-check.sh --source-hash    # the hash gpu-prepare.sh records (no GPU needed)
#
# Output: progress and every program's output on stdout/stderr; the same log, the tests'
# output and the benchmark's JSON under $OUT (or /tmp/gpu-check-out). Exit 0 when every
# check passed, 1 otherwise.
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

say() { printf '\n== %s (%ds)\n' "$*" $(($(date +%s) - t_start)); }
summary=()
failed=0
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }

main() {
# ---- the machine ---------------------------------------------------------------------------

say "machine"
export PATH="/usr/local/cuda/bin:${CUDA_PATH:+$CUDA_PATH/bin:}$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -5
nvcc --version 2>&1 | tail -2
# meson and ninja may be Python packages whose scripts are not on PATH (only needed to rebuild)
command -v meson >/dev/null || meson() { python3 -m mesonbuild.mesonmain "$@"; }
if ! command -v ninja >/dev/null; then
  d=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && PATH="$d:$PATH"
fi
echo "meson $(meson --version 2>&1), ninja $(ninja --version 2>&1), $(gcc --version 2>&1 | head -1)"

# cuBLAS and cudart: the toolkit's lib folder, else the wheels PyTorch brought
cuda_libs=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cublas", "cuda_runtime")))' 2>/dev/null); do
  [[ -e $d/libcublas.so.13 || -e $d/libcudart.so.13 ]] && cuda_libs+="$d:"
done
echo "CUDA libraries: ${cuda_libs:-none besides the loader path}"

# ---- the programs: the carried ones, or rebuilt here ----------------------------------------

rm -rf "$work"
mkdir -p "$work"
say "unpacking $archive"
if [[ ! -f $archive ]]; then
  echo "no $archive: run tools/gpu-prepare.sh first, and name build-gpu-check/carry in carry"
  return 1
fi
tar -C "$work" -xJf "$archive" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$work" ||
  { echo "cannot unpack $archive"; return 1; }
cat "$work/MANIFEST"
deps=$work/deps
export LD_LIBRARY_PATH="$deps/lib:$cuda_libs${LD_LIBRARY_PATH:-}"
bin=$work/bin

now=$(source_hash)
built_from=$(sed -n 's/^source_hash=//p' "$work/MANIFEST")
why=
if [[ ${GPU_CHECK_REBUILD:-0} == 1 ]]; then
  why="asked to (GPU_CHECK_REBUILD=1)"
elif [[ $now != "$built_from" && ${GPU_CHECK_REBUILD:-} != never ]]; then
  why="the sources changed since gpu-prepare.sh built the programs ($built_from -> $now)"
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
  if ! meson setup "$work/build" "$root" -Dpkg_config_path="$deps/lib/pkgconfig" -Dcuda=enabled \
         -Dgpu_archs="${archs:-90}" -Dbuildtype=release -Db_ndebug=false -Dtests=true ||
     ! ninja -C "$work/build" tests/gpu/cuda/test_cuda_ops tests/gpu/cuda/test_cuda_devices tools/troupe; then
    note "build" "FAILED"
    printf '\n%s\n' "${summary[@]}"
    return 1
  fi
  bin=$work/bin-here
  mkdir -p "$bin"
  cp "$work/build/tests/gpu/cuda/test_cuda_ops" "$work/build/tests/gpu/cuda/test_cuda_devices" \
     "$work/build/tools/troupe" "$bin/"
  note "programs" "rebuilt here (sm_${archs:-90})"
else
  note "programs" "carried ($(sed -n 's/^commit=//p' "$work/MANIFEST"), built from these sources)"
fi

# ---- checks ----------------------------------------------------------------------------------

say "troupe devices"
if "$bin/troupe" devices && "$bin/troupe" devices --json >"$out/devices.json"; then
  note "troupe devices" "ok"
else
  note "troupe devices" "FAILED"
  failed=1
fi

for t in test_cuda_devices test_cuda_ops; do
  say "$t"
  t0=$(date +%s)
  timeout 300 "$bin/$t" >"$out/$t.txt" 2>&1
  rc=$?
  cat "$out/$t.txt"
  dt=$(($(date +%s) - t0))
  case $rc in
    0) note "$t" "passed (${dt}s)" ;;
    77) note "$t" "SKIPPED: no GPU seen (${dt}s)"; failed=1 ;;
    124) note "$t" "TIMED OUT (${dt}s)"; failed=1 ;;
    *) note "$t" "FAILED, exit $rc (${dt}s)"; failed=1 ;;
  esac
done

say "troupe bench ops --devices cuda:0"
# 256 MiB buffers: several times the L2 (60 MB on an H200), so GB/s are HBM's
if "$bin/troupe" bench ops --devices cuda:0 --seconds "${GPU_CHECK_BENCH_SECONDS:-0.05}" \
     --size "${GPU_CHECK_BENCH_SIZE:-67108864}" --json >"$out/bench_ops.json"; then
  note "troupe bench ops" "ok"
else
  note "troupe bench ops" "FAILED"
  failed=1
fi

# ---- the table --------------------------------------------------------------------------------

say "summary"
printf '%s\n' "${summary[@]}"
python3 - "$out/bench_ops.json" <<'PY' || true
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception as e:
    sys.exit(f"(no benchmark table: {e})")
print(f"\n{'device':<8} {'op':<22} {'shape':<18} {'speed':>16}   {'vs reference':<28}")
for r in rows:
    ref = f"{r['ratio']:.2f}x {r['reference']} {r['reference_value']:.0f}" if r.get("ratio") else ""
    print(f"{r['device']:<8} {r['op']:<22} {r['shape']:<18} {r['value']:>10.1f} {r['unit']:<7} {ref}")
PY
printf '\ngpu-check: %s in %ds\n' "$( ((failed)) && echo FAILED || echo passed)" $(($(date +%s) - t_start))
return "$failed"
}

main 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
