#!/usr/bin/env bash
# files.sh TROUPE — `troupe train` and the files it is given: paths checked before the work
# (exit 2 naming the path, never a hang on a FIFO, never a failure after the run), a data
# file cut short during the run (a message, not SIGBUS), a run that diverges (no JSON of a
# success), a checkpoint beyond ulimit -f (a message, not SIGXFSZ), memory it cannot have
# (the bytes named).
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-files-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }

# expect WHAT STATUS PATTERN -- ARGS: `troupe train ARGS` exits STATUS within 10 s, its stderr
# matching PATTERN (grep -E)
expect() {
  local what=$1 status=$2 pattern=$3
  shift 4
  local err rc
  err=$(timeout 10 "$troupe" train --quiet "$@" 2>&1 >out.txt)
  rc=$?
  if [[ $rc -eq 124 ]]; then
    fail "$what: still running after 10 s"
  elif [[ $rc -ne $status ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$what: exit $rc, stderr: $err"
  else
    ok "$what: $err"
  fi
}

mkfifo fifo
mkdir adir
long=(--steps 100000000)
expect "a FIFO to resume from" 2 "^troupe: --resume: fifo: a FIFO, not a regular file" -- --resume fifo
expect "a FIFO of data" 2 "^troupe: --data 'fifo': a FIFO, not a regular file" -- \
  --model gpt --data fifo
expect "a directory of data" 2 "^troupe: --data 'adir': a directory, not a regular file" -- \
  --model gpt --data adir
expect "missing data" 1 "^troupe: --data 'nothing': cannot open: No such file" -- \
  --model gpt --data nothing
expect "a checkpoint in no directory" 2 \
  "^troupe: --checkpoint 'nodir/ck.st': directory 'nodir' does not exist" -- \
  "${long[@]}" --checkpoint nodir/ck.st
expect "an empty checkpoint path" 2 "^troupe: --checkpoint: an empty path" -- \
  "${long[@]}" --checkpoint ""
expect "a checkpoint that is a directory" 2 "^troupe: --checkpoint 'adir': a directory, not a file" -- \
  "${long[@]}" --checkpoint adir
expect "a trace in no directory" 2 "^troupe: --trace 'nodir/t.json': directory 'nodir' does not exist" -- \
  "${long[@]}" --trace nodir/t.json
expect "an unknown policy" 2 "^troupe: --on-nonfinite: 'ignore' is not stop or skip" -- \
  --on-nonfinite ignore

# A run that diverges stops naming the step and the stage; skipping every update of its end
# is no success either. Neither prints the JSON of a success.
for policy in stop skip; do
  expect "a diverging run (--on-nonfinite $policy)" 1 \
    "^troupe: .*(step [0-9]+, stage 0 of replica 0 on host:0: the gradient norm is NaN|final loss is nan)" -- \
    --lr 100000 --steps 300 --json --on-nonfinite $policy
  [[ -s out.txt ]] && fail "a diverging run (--on-nonfinite $policy) printed JSON: $(cat out.txt)"
done

# A data file cut short under the run: a message naming it, exit 1, not SIGBUS (135).
head -c 4000000 /dev/urandom >big.bin
"$troupe" train --quiet --model gpt --batch 1 --data big.bin --steps 100000000 \
  --checkpoint ck.st --checkpoint-every 1 2>err.txt &
pid=$!
for ((i = 0; i < 6000; i++)); do [[ -e ck.st ]] && break; sleep 0.01; done
truncate -s 0 big.bin
wait $pid
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "data 'big.bin': ends at 0 bytes.*it changed (was truncated)" err.txt; then
  fail "a data file cut short: exit $rc, stderr: $(cat err.txt)"
else
  ok "a data file cut short: $(cat err.txt)"
fi

# A checkpoint larger than the process may write (ulimit -f, in blocks of 1024 bytes): exit
# 1 naming the file and the limit, not SIGXFSZ (exit 153), and no temporary file left.
err=$( (ulimit -f 2 && timeout 20 "$troupe" train --quiet --model mlp --steps 2 --checkpoint fsize.st) 2>&1)
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "^troupe: .*--checkpoint 'fsize.st': writing the temporary file: File too large: this process may write files of 2048 bytes at most (ulimit -f)" <<<"$err"; then
  fail "a checkpoint beyond ulimit -f: exit $rc, stderr: $err"
elif compgen -G '.fsize.st.tmp.*' >/dev/null || [[ -e fsize.st ]]; then
  fail "a checkpoint beyond ulimit -f left $(ls -A | grep fsize)"
else
  ok "a checkpoint beyond ulimit -f: $err"
fi

# Memory it cannot have: exit 1 naming the bytes (under a limit of 4 GB of address space;
# sanitizers reserve far more than that for themselves).
if [[ ${TR_SANITIZED:-0} == 1 ]]; then
  echo "skip memory exhaustion: a sanitized build"
else
  err=$( (ulimit -v 4000000 && "$troupe" train --quiet --model mlp --batch 200000 --steps 2) 2>&1)
  rc=$?
  if [[ $rc -ne 1 ]] || ! grep -qE "[0-9]+ bytes asked for: out of memory" <<<"$err"; then
    fail "memory exhaustion: exit $rc, stderr: $err"
  else
    ok "memory exhaustion: $err"
  fi
fi
exit $failed
