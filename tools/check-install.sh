#!/usr/bin/env bash
# check-install.sh — checks that an installed troupe is usable the way the README says:
# installs a configured build into a scratch folder (meson install --destdir), then builds
# tests/install/hello.c, tests/install/figures.c (a run's figures by key) and
# examples/custom_pipeline.c against it through the installed troupe.pc, once against the
# shared library and once against the static one, and runs them. Checks that the shared library exports the public API alone (no tr__ name) and that
# `pkg-config --cflags troupe` names troupe's headers alone. Also runs the installed `troupe`.
#
#   tools/check-install.sh [BUILD_DIR]      # default: build
#
# The .pc file names the configured prefix (/usr/local); the copy in the scratch folder has
# its prefix rewritten to point there, which is what pkg-config users of a relocated install
# do too.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-build}
cc=${CC:-cc}
say() { printf 'check-install: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

cd "$root"
[[ -f $build_dir/meson-private/coredata.dat ]] || fail "$build_dir is not a configured build"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/troupe-install.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
destdir=$scratch/dest

meson install -C "$build_dir" --destdir "$destdir" --quiet

prefix=$(meson introspect "$build_dir" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
pcfile=$(find "$destdir" -name troupe.pc -print -quit)
[[ -n $pcfile ]] || fail "no troupe.pc was installed"
grep -q "^prefix=$prefix\$" "$pcfile" || fail "$pcfile does not set prefix=$prefix"
sed -i "s|^prefix=.*|prefix=$destdir$prefix|" "$pcfile"
export PKG_CONFIG_PATH=$(dirname "$pcfile")

includedir=$(pkg-config --variable=includedir troupe)
libdir=$(pkg-config --variable=libdir troupe)
[[ -f $includedir/troupe/troupe.h ]] || fail "troupe.h is not in $includedir/troupe"
[[ -f $libdir/libtroupe.a ]] || fail "no static library in $libdir"
ls "$libdir"/libtroupe.so* >/dev/null 2>&1 || fail "no shared library in $libdir"
if internal=$(find "$destdir" -name '*_impl.h' | grep .); then
  fail "internal headers were installed: $internal"
fi
say "installed $(pkg-config --modversion troupe) under $destdir$prefix"

# A user's compile sees troupe's headers and nothing else: the public headers include only
# the C standard's, so no dependency's include folder (cJSON's, MPI's) belongs in --cflags.
cflags_pc=$(pkg-config --cflags troupe | xargs)
[[ $cflags_pc == "-I$includedir/troupe" ]] ||
  fail "pkg-config --cflags troupe names more than troupe's headers: $cflags_pc"

# The shared library exports the public API and nothing else (TR_API, runtime/tr_api.h):
# no internal tr__ name, and every function and object the installed headers mark TR_API.
so=$(ls "$libdir"/libtroupe.so.*.*.* 2>/dev/null | head -n 1)
[[ -n $so ]] || so=$libdir/libtroupe.so
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort -u)
if leaked=$(grep '^tr__' <<<"$exported" | grep .); then
  fail "libtroupe.so exports $(wc -l <<<"$leaked") internal names, e.g. $(head -n 3 <<<"$leaked" | tr '\n' ' ')"
fi
declared=$(cat "$includedir"/troupe/tr_*.h | sed -n 's/^\(TR_NORETURN \)*TR_API.*[ *]\(tr_[a-z0-9_]*\) *[(;,\[].*/\2/p' | sort -u)
[[ -n $declared ]] || fail "the installed headers declare nothing with TR_API"
if missing=$(comm -23 <(echo "$declared") <(echo "$exported") | grep .); then
  fail "libtroupe.so does not export what the headers declare: $(tr '\n' ' ' <<<"$missing")"
fi
say "libtroupe.so exports $(wc -l <<<"$exported") names, none internal"

# Strict C11 with warnings as errors: the public headers must not lean on _GNU_SOURCE or
# on warnings being tolerated in users' builds. Three programs: the README's hello, a run's
# figures read by key (tr_result.h), and the example that composes a graph of its own parts
# (they write their data under $scratch).
cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -O1)
static_libs=$(pkg-config --static --libs troupe)
static_libs=${static_libs/-ltroupe/$libdir/libtroupe.a}
for src in tests/install/hello.c tests/install/figures.c examples/custom_pipeline.c; do
  name=$(basename "$src" .c)
  say "shared: $cc $name.c \$(pkg-config --cflags --libs troupe)"
  # shellcheck disable=SC2046  # pkg-config output is a list of words
  "$cc" "${cflags[@]}" "$src" -o "$scratch/$name-shared" $(pkg-config --cflags --libs troupe) \
    -lm -Wl,-rpath,"$libdir" || fail "$name.c does not build against the shared library"
  "$scratch/$name-shared" "$scratch" >/dev/null || fail "$name (shared) exited $?"
  ldd "$scratch/$name-shared" | grep "$libdir/libtroupe.so" >/dev/null ||
    fail "$name (shared) did not load libtroupe from $libdir"

  say "static: $cc $name.c \$(pkg-config --cflags --static --libs troupe), libtroupe.a"
  # shellcheck disable=SC2046,SC2086
  "$cc" "${cflags[@]}" "$src" -o "$scratch/$name-static" $(pkg-config --cflags troupe) \
    $static_libs || fail "$name.c does not build against the static library with: $static_libs"
  "$scratch/$name-static" "$scratch" >/dev/null || fail "$name (static) exited $?"
done

troupe_bin=$destdir$prefix/bin/troupe
[[ -x $troupe_bin ]] || fail "the troupe executable was not installed"
"$troupe_bin" --version >/dev/null || fail "installed troupe --version failed"

say "ok"
