#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets with clang (in build-fuzz) and runs each in turn for
# an equal share of a bounded time, starting from its seed files in tests/fuzz:
#
#   checkpoint   the checkpoint reader (seeds: tests/fuzz/corpus, checkpoint.dict)
#   npy          the .npy header parser (seeds: tests/fuzz/npy-corpus, npy.dict)
#   codec        the decoders of messages between processes (seeds: tests/fuzz/codec-corpus)
#
#   tools/fuzz.sh            # 60 seconds in all: 20 each
#   tools/fuzz.sh 600        # ten minutes
#   FUZZ_JOBS=2 tools/fuzz.sh 300   # two fuzzing processes per target sharing one corpus
#
# Exits non-zero when a fuzzer finds a crash, a leak, a timeout or undefined behaviour (the
# other targets still run); the input that caused it is left in build-fuzz/fuzz-artifacts/,
# named after its target (replay it with `build-fuzz/tests/models/fuzz_TARGET FILE`). New
# inputs the fuzzers find go to build-fuzz/fuzz-corpus/TARGET/, which later runs resume
# from; the checked-in seeds stay as they are.
set -euo pipefail

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: tools/fuzz.sh [SECONDS]" >&2; exit 2; }
jobs=${FUZZ_JOBS:-1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-fuzz
cd "$root"

# target, seed folder, dictionary, largest input (a checkpoint carries tensors; a .npy
# header is at most a few hundred bytes before its data)
targets=(
  "checkpoint tests/fuzz/corpus tests/fuzz/checkpoint.dict 65536"
  "npy tests/fuzz/npy-corpus tests/fuzz/npy.dict 4096"
  "codec tests/fuzz/codec-corpus tests/fuzz/codec.dict 4096"
)

command -v clang >/dev/null || { echo "fuzz: clang is needed (tools/setup.sh installs it)" >&2; exit 1; }
# The targets bring their own sanitizers; the library is plain, without jemalloc (ASan must
# see every allocation) or CUDA (not reached by the code fuzzed).
if [[ ! -f $build/meson-private/coredata.dat ]]; then
  CC=clang meson setup "$build" -Dbuildtype=debugoptimized -Dallocator=libc -Dcuda=disabled \
    -Dtests=true >/dev/null
fi
names=()
for t in "${targets[@]}"; do
  read -r name _ <<<"$t"
  names+=("tests/models/fuzz_$name")
done
ninja -C "$build" "${names[@]}"

# Each target's share, a second at least: -max_total_time=0 would mean no limit.
share=$((seconds / ${#targets[@]}))
((share > 0)) || share=1
mkdir -p "$build/fuzz-artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb bounds memory (2 GB).
# Both corpus folders are read; new inputs are written to the first. Several jobs write
# their logs (fuzz-N.log) to the working directory: build-fuzz.
parallel=()
((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
cd "$build"
status=0
for t in "${targets[@]}"; do
  read -r name seeds dict max_len <<<"$t"
  echo "fuzz: $name for $share s"
  mkdir -p "fuzz-corpus/$name"
  ./tests/models/fuzz_"$name" "fuzz-corpus/$name" "$root/$seeds" \
    -dict="$root/$dict" -max_total_time="$share" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$max_len" -print_final_stats=1 -artifact_prefix="fuzz-artifacts/$name-" \
    "${parallel[@]}" || status=$?
done
exit "$status"
