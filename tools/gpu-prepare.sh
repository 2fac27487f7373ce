#!/usr/bin/env bash
# gpu-prepare.sh — makes, on a machine without a GPU, everything tools/gpu-check.sh needs on a
# GPU machine that has nvcc, meson and ninja but no package registry and none of troupe's
# dev packages: one compressed archive, build-gpu-check/carry/gpu-check.tar.xz, holding
#
#   bin/     test_cuda_ops, test_cuda_devices, test_cuda_train, test_cuda_nccl, test_cuda_data,
#            test_cuda_vocab_ops, test_replay, test_profile (with the NVTX
#            recorder libnvtx_recorder.so it loads) and troupe, built here with
#            libuv, jemalloc and OpenBLAS linked statically (cmocka and cJSON ship no archive: their .so go
#            along);
#   deps/    those libraries with their headers and pkg-config files (paths relative to the
#            files, so the folder can move), plus pkgconf itself: with them gpu-check.sh
#            rebuilds there when these binaries do not run or the sources have changed;
#   MANIFEST the hash of the sources the binaries were built from, and how.
#
#   tools/gpu-prepare.sh                 # then call the device tool as it prints at the end
#   GPU_ARCHS=80,90 tools/gpu-prepare.sh # compute capabilities (default 90: H100/H200)
#
# Only those programs are built (and libtroupe.a): Debian's libuv_a.a is not
# position-independent, so libtroupe.so could not link it. OpenBLAS built for every x86 CPU
# (DYNAMIC_ARCH) adds about 25 MB to each program; xz with a 64 MiB window stores the
# copies once, which keeps the archive (about 6 MiB) far inside the device tool's 64 MiB.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPU_CHECK_BUILD:-build-gpu-check}
archs=${GPU_ARCHS:-90}
cd "$root"

say() { printf 'gpu-prepare: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

command -v nvcc >/dev/null || export PATH="${CUDA_PATH:-/usr/local/cuda}/bin:$PATH"
for t in nvcc meson ninja pkg-config xz tar; do
  command -v "$t" >/dev/null || die "$t not found"
done

deps=$build/deps
stage=$build/stage
mkdir -p "$build"
rm -rf "$deps" "$stage" "$build/carry"
mkdir -p "$deps/lib/pkgconfig" "$deps/include" "$deps/bin" "$stage/bin" "$build/carry"

pcvar() { pkg-config --variable="$2" "$1"; }
# The folder holding library file $2 of package $1: its .pc's libdir or -L, else the loader's.
libdir_of() {
  local d
  for d in "$(pcvar "$1" libdir)" $(pkg-config --libs-only-L "$1" | sed 's/-L//g'); do
    [[ -n $d && -e $d/$2 ]] && { echo "${d%/}"; return; }
  done
  d=$(ldconfig -p | awk -v f="$2" '$1 == f {print $NF; exit}')
  [[ -n $d ]] || die "cannot find $2 (package $1)"
  dirname "$d"
}
# cp -L: symbolic links would travel as links, pointing at nothing on the other machine
put() { cp -L "$1" "$2"; }

# ---- the libraries, their headers and pkg-config files ------------------------------------

uv_lib=$(libdir_of libuv libuv_a.a) uv_inc=$(pcvar libuv includedir) uv_ver=$(pkg-config --modversion libuv)
put "$uv_lib/libuv_a.a" "$deps/lib/libuv_a.a"
cp -rL "$uv_inc/uv.h" "$uv_inc/uv" "$deps/include/"

je_lib=$(libdir_of jemalloc libjemalloc_pic.a) je_inc=$(pcvar jemalloc includedir) je_ver=$(pkg-config --modversion jemalloc)
[[ -f $je_lib/libjemalloc_pic.a ]] || die "no $je_lib/libjemalloc_pic.a (libjemalloc-dev)"
put "$je_lib/libjemalloc_pic.a" "$deps/lib/libjemalloc_pic.a"
cp -rL "$je_inc/jemalloc" "$deps/include/"

ob_lib=$(libdir_of openblas libopenblas.a) ob_inc=$(pcvar openblas includedir) ob_ver=$(pkg-config --modversion openblas)
[[ -f $ob_lib/libopenblas.a ]] || die "no $ob_lib/libopenblas.a (libopenblas-pthread-dev)"
put "$ob_lib/libopenblas.a" "$deps/lib/libopenblas.a"
for h in cblas.h openblas_config.h; do put "$ob_inc/$h" "$deps/include/$h"; done

cm_lib=$(libdir_of cmocka libcmocka.so.0) cm_ver=$(pkg-config --modversion cmocka)
cm_inc=$(pkg-config --cflags-only-I cmocka | sed -n 's/^-I\([^ ]*\).*/\1/p')
put "$cm_lib/libcmocka.so.0" "$deps/lib/libcmocka.so.0"
put "$cm_lib/libcmocka.so.0" "$deps/lib/libcmocka.so"
put "${cm_inc:-/usr/include}/cmocka.h" "$deps/include/cmocka.h"

# liburcu's wait-free queue: the reference row of `troupe bench mailbox` (the command only)
ur_lib=$(libdir_of liburcu-cds liburcu-cds.a) ur_inc=$(pcvar liburcu-cds includedir)
ur_ver=$(pkg-config --modversion liburcu-cds)
for a in liburcu-cds.a liburcu-common.a; do # the queue itself is in -common
  [[ -f $ur_lib/$a ]] || die "no $ur_lib/$a (liburcu-dev)"
  put "$ur_lib/$a" "$deps/lib/$a"
done
cp -rL "$ur_inc/urcu" "$deps/include/"

# cJSON (checkpoint headers, models/): no archive either
cj_lib=$(libdir_of libcjson libcjson.so.1) cj_ver=$(pkg-config --modversion libcjson)
cj_inc=$(pcvar libcjson includedir)
put "$cj_lib/libcjson.so.1" "$deps/lib/libcjson.so.1"
put "$cj_lib/libcjson.so.1" "$deps/lib/libcjson.so"
mkdir -p "$deps/include/cjson"
put "$cj_inc/cjson/cJSON.h" "$deps/include/cjson/cJSON.h"

# pkgconf, for the rebuild there (machines without dev packages often lack it too)
pkgconf=$(readlink -f "$(command -v pkg-config)")
put "$pkgconf" "$deps/bin/pkg-config"
libpkgconf=$(ldd "$pkgconf" | awk '/libpkgconf/ {print $3}')
[[ -n $libpkgconf ]] && put "$libpkgconf" "$deps/lib/$(basename "$libpkgconf")"

pc() { # name version libs [extra cflags]
  cat >"$deps/lib/pkgconfig/$1.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $1
Description: $1, as gpu-prepare.sh copied it
Version: $2
Libs: $3
Cflags: -I\${includedir}${4:-}
EOF
}
pc libuv "$uv_ver" '${libdir}/libuv_a.a -lpthread -ldl -lrt'
pc jemalloc "$je_ver" '${libdir}/libjemalloc_pic.a -lpthread -ldl -lm'
pc openblas "$ob_ver" '${libdir}/libopenblas.a -lpthread -lm'
pc cmocka "$cm_ver" '-L${libdir} -lcmocka'
pc libcjson "$cj_ver" '-L${libdir} -lcjson' ' -I${includedir}/cjson'
pc liburcu-cds "$ur_ver" '${libdir}/liburcu-cds.a ${libdir}/liburcu-common.a -lpthread'

# ---- the build -----------------------------------------------------------------------------

# OpenBLAS for the host GEMM (oneDNN is Debian's shared library only, and over the carry's
# size), no MPI (one GPU: one rank; the machine has no Open MPI); NCCL linked dynamically
# against the toolkit's libnccl (lib64, which the GPU machine's toolkit has too: not carried)
opts=(-Dpkg_config_path="$root/$deps/lib/pkgconfig" -Dcuda=enabled -Dgpu_archs="$archs"
      -Dblas=openblas -Dmpi=disabled -Dnccl=enabled
      -Dbuildtype=release -Db_ndebug=false -Dtests=true)
if [[ -f $build/meson-private/coredata.dat ]]; then
  # meson caches the libraries it found, even across --reconfigure: forget them first
  meson configure --clearcache "$build" >/dev/null
  meson setup --reconfigure "$build" "${opts[@]}" >/dev/null
else
  meson setup "$build" "${opts[@]}" >/dev/null
fi
targets=(tests/gpu/cuda/test_cuda_ops tests/gpu/cuda/test_cuda_devices tests/gpu/cuda/test_cuda_train
         tests/gpu/cuda/test_cuda_nccl tests/gpu/cuda/test_cuda_data tests/gpu/cuda/test_cuda_vocab_ops
         tests/models/test_replay tests/profiling/test_profile tests/profiling/libnvtx_recorder.so
         tools/troupe)
say "building ${targets[*]} for sm_${archs//,/, sm_}"
ninja -C "$build" "${targets[@]}"

for t in "${targets[@]}"; do
  put "$build/$t" "$stage/bin/$(basename "$t")"
  strip --strip-debug "$stage/bin/$(basename "$t")"
done
cp -r "$deps" "$stage/deps"

# What the programs load besides the C/C++ runtime and CUDA: only what deps/lib holds.
extra=$(for b in "$stage"/bin/*; do ldd "$b"; done | awk '$2 == "=>" {print $1}' | sort -u |
        grep -vE '^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux.*|linux-vdso)\.so' |
        grep -vE '^lib(cudart|cublas|cublasLt|nccl)\.so' || true)
for l in $extra; do
  [[ -f $stage/deps/lib/$l ]] || die "the programs need $l, which deps/lib does not hold"
done

hash=$(tools/gpu-check.sh --source-hash)
cat >"$stage/MANIFEST" <<EOF
source_hash=$hash
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo +changes)
gpu_archs=$archs
built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(gcc --version | head -1), $(nvcc --version | grep -o 'release [0-9.]*')
libs=libuv $uv_ver, jemalloc $je_ver, OpenBLAS $ob_ver (static); cmocka $cm_ver, cJSON $cj_ver (shared)
EOF

say "compressing (xz, 64 MiB window: the OpenBLAS copies in each program are stored once)"
XZ_OPT='-9 -T1' tar -C "$stage" -cJf "$build/carry/gpu-check.tar.xz" bin deps MANIFEST
rm -rf "$stage"
size=$(du -m "$build/carry/gpu-check.tar.xz" | cut -f1)
say "$build/carry/gpu-check.tar.xz: ${size} MiB"
((size < 48)) || die "the archive is too large for the device tool's 64 MiB"

cat <<EOF

Run the check on a GPU machine (device tool):
  run(command="tools/gpu-check.sh", carry=["$build/carry"], timeout_s=420)
It ends in about 5 minutes (6 if it must rebuild there) and writes six files under \$OUT:
gpu-check.log, tests.txt, results.json, bench.md, sanitizer.txt, summary.txt.
EOF
