#!/usr/bin/env bash
# setup.sh — installs the Debian packages troupe needs (only those missing), then configures
# and builds it. Safe to run again: with everything in place it only lets ninja check the build.
#
#   tools/setup.sh                      # packages, then `meson setup build` once, then ninja
#   tools/setup.sh -Dcuda=disabled      # options go to meson (applied to an existing build too)
#   BUILD_DIR=build-rel tools/setup.sh -Dbuildtype=release
#   TROUPE_SETUP_NO_BUILD=1 tools/setup.sh   # packages only
#
# As root it runs `apt-get update && apt-get install`; otherwise it prints that command and
# exits 1. CUDA is not a Debian package here: when /usr/local/cuda (or $CUDA_PATH) has nvcc
# and cuBLAS, the `cuda` meson option (auto) builds the CUDA backend.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-build}

# libc6-dev and libclang-rt-dev are only Recommends of gcc and clang; we install without
# recommends, so they are named here (headers, and clang's sanitizer runtimes).
# libgfortran-12-dev: openblas.pc's Libs.private names -lgfortran, so linking troupe
# statically (`pkg-config --static --libs troupe`) needs it. libdnnl-dev: oneDNN, the host
# backend's GEMM (OpenBLAS stays, for -Dblas=openblas and as the benchmarks' reference).
# Open MPI: jobs across processes (`mpirun -np N troupe train ...`) and their tests.
# libxml2-utils: xmllint, with which the test of `troupe timeline` reads its SVG back (the
# test skips without it). liburcu-dev: `troupe bench mailbox` measures the mailbox against
# liburcu's wait-free queue. zlib1g-dev: examples/digits.c reads its data set's .csv.gz.
packages=(
  meson ninja-build pkg-config gcc libc6-dev clang libclang-rt-dev
  libuv1-dev libjemalloc-dev libcmocka-dev libopenblas-dev libgfortran-12-dev libcjson-dev
  libdnnl-dev openmpi-bin libopenmpi-dev libxml2-utils liburcu-dev zlib1g-dev
)

say() { printf 'setup: %s\n' "$*" >&2; }

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if ((EUID != 0)); then
    say "missing Debian packages: ${missing[*]}"
    say "install them as root, then run this script again:"
    printf '  %s\n' "$cmd" >&2
    exit 1
  fi
  say "installing: ${missing[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

[[ ${TROUPE_SETUP_NO_BUILD:-0} == 1 ]] && exit 0

cd "$root"
if [[ -f $build_dir/meson-private/coredata.dat ]]; then
  # Already configured: ninja re-runs meson by itself when a meson.build changed. Options
  # given here go through `meson configure`, which keeps the ones set before (meson 1.0's
  # `setup --reconfigure` silently drops changes to b_* options such as b_sanitize).
  if (($#)); then
    meson configure "$build_dir" "$@"
  fi
else
  meson setup "$build_dir" "$@"
fi
ninja -C "$build_dir"
