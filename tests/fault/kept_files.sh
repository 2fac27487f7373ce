#!/usr/bin/env bash
# kept_files.sh TROUPE — the files troupe keeps between runs are replaced only when they are
# troupe's: `TROUPE_GEMM_CHOICES=ck.st troupe train` exited 0 with the checkpoint rewritten as
# a file of choices, a text of 5,000 lines cut to 4,096, mode 600 made 644. Now a path that
# holds anything else (a checkpoint, a text, a FIFO) is left exactly as it was, the run goes
# on (exit 0) measuring without keeping its choices, and stderr says so once, naming the
# variable and the file; a file of choices of troupe's keeps its mode when a line is added.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-kept-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }

export TROUPE_GEMM=auto # every shape measured, and kept
export TROUPE_COSTS=$work/costs.safetensors
run() { timeout 60 "$troupe" train --model simplenet --steps 1 --quiet "$@"; }

# left PATH WHAT: a run with TROUPE_GEMM_CHOICES=PATH leaves it as it was and says so once
left() {
  local path=$1 what=$2 before after err rc
  before=$(stat -c '%F %a %s %i %Y' "$path")
  [[ -f $path ]] && cp -p "$path" "$path.orig"
  err=$(TROUPE_GEMM_CHOICES=$path run 2>&1 >/dev/null)
  rc=$?
  after=$(stat -c '%F %a %s %i %Y' "$path")
  if ((rc != 0)); then
    fail "$what: exit $rc: $err"
  elif [[ $after != "$before" ]] || { [[ -f $path.orig ]] && ! cmp -s "$path" "$path.orig"; }; then
    fail "$what: changed: was $before, is $after"
  elif [[ $(grep -c "TROUPE_GEMM_CHOICES '$path'.*none kept" <<<"$err") != 1 ]]; then
    fail "$what: stderr did not say once that no choices are kept: $err"
  else
    ok "$what: $err"
  fi
}

run --checkpoint ck.st >/dev/null 2>&1 || fail "the checkpoint to start from: exit $?"
chmod 600 ck.st
left ck.st "a checkpoint, mode 600"
for i in $(seq 5000); do echo "line $i of my notes"; done >notes
chmod 600 notes
left notes "a text of 5,000 lines, mode 600"
mkfifo fifo
left fifo "a FIFO" # a run that waited on it would time out

# a file of choices of troupe's: a line added, its mode kept
printf '# troupe gemm-choices 1\n' >mine
chmod 600 mine
err=$(TROUPE_GEMM_CHOICES=mine run 2>&1 >/dev/null) || fail "a file of choices: exit $?: $err"
if [[ $(stat -c %a mine) != 600 || $(wc -l <mine) -lt 2 || $(head -1 mine) != "# troupe gemm-choices 1" ]]; then
  fail "a file of choices: mode $(stat -c %a mine), $(wc -l <mine) lines: $(head -3 mine)"
else
  ok "a file of choices: $(wc -l <mine) lines, mode 600"
fi
exit $failed
