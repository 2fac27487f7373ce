#!/usr/bin/env bash
# fuzz.sh — builds the checkpoint reader's libFuzzer target with clang (in build-fuzz) and
# runs it for a bounded time, starting from the seed files in tests/fuzz/corpus.
#
#   tools/fuzz.sh            # 60 seconds
#   tools/fuzz.sh 600        # ten minutes
#   FUZZ_JOBS=2 tools/fuzz.sh 300   # two fuzzing processes sharing one corpus
#
# Exits non-zero when the fuzzer finds a crash, a leak, a timeout or undefined behaviour;
# the input that caused it is left in build-fuzz/fuzz-artifacts/ (replay it with
# `build-fuzz/tests/models/fuzz_checkpoint FILE`). New inputs the fuzzer finds go to
# build-fuzz/fuzz-corpus/, which later runs resume from; the checked-in seeds stay as they
# are.
set -euo pipefail

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: tools/fuzz.sh [SECONDS]" >&2; exit 2; }
jobs=${FUZZ_JOBS:-1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-fuzz
cd "$root"

command -v clang >/dev/null || { echo "fuzz: clang is needed (tools/setup.sh installs it)" >&2; exit 1; }
# The target brings its own sanitizers; the library is plain, without jemalloc (ASan must
# see every allocation) or CUDA (not reached by the reader).
if [[ ! -f $build/meson-private/coredata.dat ]]; then
  CC=clang meson setup "$build" -Dbuildtype=debugoptimized -Dallocator=libc -Dcuda=disabled \
    -Dtests=true >/dev/null
fi
ninja -C "$build" tests/models/fuzz_checkpoint

mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb bounds memory (2 GB).
# Both corpus folders are read; new inputs are written to the first. Several jobs write
# their logs (fuzz-N.log) to the working directory: build-fuzz.
parallel=()
((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
cd "$build"
./tests/models/fuzz_checkpoint fuzz-corpus "$root/tests/fuzz/corpus" \
  -dict="$root/tests/fuzz/checkpoint.dict" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix=fuzz-artifacts/ \
  "${parallel[@]}"
