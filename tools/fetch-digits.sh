#!/usr/bin/env bash
# fetch-digits.sh — scikit-learn's handwritten digits (digits.csv.gz: 1,797 8×8 images of
# ten classes, 64 pixel values 0..16 then the class per line) into DIR (default: data), for
# examples/digits.c. The file ships in Debian's python3-sklearn; the package is downloaded
# and unpacked, never installed (none of its dependencies is needed):
#
#   tools/fetch-digits.sh [DIR]    # prints the file's path; exit 1 saying why when it cannot
#
# Where the package is installed already, its copy is used. Needs apt-get (a Debian package
# archive) and dpkg-deb.
set -euo pipefail

dir=${1:-data}
file=sklearn/datasets/data/digits.csv.gz
installed=/usr/lib/python3/dist-packages/$file
say() { printf 'fetch-digits: %s\n' "$*" >&2; }

mkdir -p "$dir"
if [[ -f $dir/digits.csv.gz ]]; then
  echo "$dir/digits.csv.gz"
  exit 0
fi
if [[ -f $installed ]]; then
  cp "$installed" "$dir/digits.csv.gz.tmp" && mv "$dir/digits.csv.gz.tmp" "$dir/digits.csv.gz"
  echo "$dir/digits.csv.gz"
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { say "needs $tool (a Debian system)"; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download writes into the current directory; as root it warns that the _apt user
# cannot write there, which is harmless.
if ! (cd "$work" && timeout 120 apt-get download -q python3-sklearn >/dev/null 2>"$work/log"); then
  say "apt-get download python3-sklearn failed: $(tail -1 "$work/log")"
  say "(run 'apt-get update' first, or give the file's path to the example)"
  exit 1
fi
dpkg-deb -x "$work"/python3-sklearn_*.deb "$work/x"
if [[ ! -f $work/x/usr/lib/python3/dist-packages/$file ]]; then
  say "python3-sklearn holds no $file"
  exit 1
fi
cp "$work/x/usr/lib/python3/dist-packages/$file" "$dir/digits.csv.gz.tmp"
mv "$dir/digits.csv.gz.tmp" "$dir/digits.csv.gz"
echo "$dir/digits.csv.gz"
