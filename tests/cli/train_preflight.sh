#!/usr/bin/env bash
# train_preflight.sh TROUPE — everything a run of `troupe train` will need is checked before
# its first step: the checkpoint's and the trace's writes are tried in place (a directory
# where nothing may be made: /proc, /sys, a read-only mount; a name over 255 bytes; another
# user's file in a sticky directory), and the run's memory against what the machine has (a
# batch far too large). Each is refused at once with exit 2 and a message naming the flag and the cause, with no
# step run and nothing left behind; the refused run's existing checkpoint is untouched.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-preflight-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }

# expect WHAT PATTERN -- ARGS: `troupe train ARGS` (steps enough for hours) exits 2 within
# 10 s, prints nothing on stdout (no step ran, no summary) and says PATTERN (grep -E) on stderr
expect() {
  local what=$1 pattern=$2
  shift 3
  local out rc start=$SECONDS
  out=$(timeout 10 "$troupe" train --steps 100000000 "$@" 2>"$work/err")
  rc=$?
  local err
  err=$(cat "$work/err")
  if [[ $rc -eq 124 ]]; then
    fail "$what: still running after 10 s (it trained)"
  elif [[ $rc -ne 2 ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$what: exit $rc, stderr: $err"
  elif [[ -n $out ]] || grep -q "step" <<<"$err"; then
    fail "$what: steps ran before the refusal: $out $err"
  else
    ok "$what ($((SECONDS - start)) s): $err"
  fi
}

# the outputs' writes, tried where they will be made
expect "a checkpoint under /proc" \
  "^troupe: --checkpoint '/proc/ck.st': cannot create a file in directory '/proc': " -- \
  --checkpoint /proc/ck.st
expect "a trace under /proc" "^troupe: --trace '/proc/t.json': cannot create a file in directory" \
  -- --trace /proc/t.json
if [[ -d /sys/kernel ]] && ! touch /sys/kernel/troupe-probe 2>/dev/null; then
  expect "a checkpoint under /sys" "^troupe: --checkpoint '/sys/kernel/ck.st': cannot create" -- \
    --checkpoint /sys/kernel/ck.st
fi
long=$(printf 'c%.0s' {1..300})
expect "a checkpoint name of 300 bytes" \
  "^troupe: --checkpoint '$long': a name of 300 bytes: File name too long" -- --checkpoint "$long"
expect "a trace name of 300 bytes" "^troupe: --trace '$long': a name of 300 bytes" -- \
  --trace "$long"
[[ -z $(ls -A "$work" | grep -v '^err$') ]] || fail "the refusals left files: $(ls -A "$work")"

# A read-only mount, in a mount namespace of the test's own (root, where unshare may).
mkdir ro
if unshare -m sh -c 'mount -t tmpfs -o ro,size=1m tmpfs ro' 2>/dev/null; then
  err=$(timeout 10 unshare -m sh -c 'mount -t tmpfs -o ro,size=1m tmpfs ro && exec "$0" train \
    --steps 100000000 --checkpoint ro/ck.st' "$troupe" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]] ||
    ! grep -q "^troupe: --checkpoint 'ro/ck.st': .*directory 'ro'.*: Read-only file system" <<<"$err"; then
    fail "a checkpoint on a read-only mount: exit $rc, stderr: $err"
  else
    ok "a checkpoint on a read-only mount: $err"
  fi
else
  echo "skip a read-only mount: this user cannot mount one in a namespace of its own"
fi
rmdir ro

# Another user's file in a sticky directory: the rename could not replace it. Only root can
# make the case (a file of another user, a run as nobody); as root itself the rename works.
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null &&
  setpriv --reuid=65534 --regid=65534 --clear-groups "$troupe" --help >/dev/null 2>&1; then
  chmod 755 "$work"
  mkdir -m 1777 sticky && chmod 1777 sticky
  echo theirs >sticky/theirs.st && chown 1:1 sticky/theirs.st
  nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  err=$(timeout 10 "${nobody[@]}" "$troupe" train --steps 100000000 --checkpoint \
    sticky/theirs.st 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]] ||
    ! grep -q "directory 'sticky' is sticky and the file is another user's" <<<"$err"; then
    fail "another user's checkpoint in a sticky directory: exit $rc, stderr: $err"
  elif [[ $(cat sticky/theirs.st) != theirs ]]; then
    fail "another user's checkpoint in a sticky directory was changed"
  else
    ok "another user's checkpoint in a sticky directory: $err"
  fi
  if ! timeout 60 "${nobody[@]}" "$troupe" train --quiet --steps 2 --checkpoint \
    sticky/mine.st || [[ ! -s sticky/mine.st ]]; then
    fail "a checkpoint of one's own in a sticky directory was not written"
  fi
else
  echo "skip a sticky directory: only root can make another user's file and run as nobody"
fi

# Memory: a batch no machine here holds is refused at once, with the figure, what there is,
# and a batch that fits; a checkpoint already there is left as it was.
echo "an earlier run's" >ck.st
expect "gpt with a batch of 1048576" \
  "^troupe: --batch 1048576: needs [0-9.]+ GiB on host:0 \(parameters .*activations .* at 1 micro-batch.*\), it has [0-9.]+ [GM]iB; the largest batch that fits with 10% to spare is [0-9]+$" \
  -- --model gpt --batch 1048576 --checkpoint ck.st
[[ $(cat ck.st) == "an earlier run's" ]] || fail "the refused run changed the checkpoint there"
[[ $(ls -A | grep -vE '^(err|ck.st|sticky)$') == "" ]] || fail "files left behind: $(ls -A)"
# mlp's largest batch the command takes, where the host has less than it needs (it would
# run where it has more): 76 GiB of activations and two prefetched batches of 8 GiB
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if [[ -n $avail_kb && $avail_kb -lt $((80 * 1024 * 1024)) ]]; then
  expect "mlp with a batch of 1048576" \
    "^troupe: --batch 1048576: needs 92.1 GiB on host:0 \(parameters 32.0 MiB, gradients 32.0 MiB, optimizer state 32.0 MiB, activations 76.0 GiB at 1 micro-batch, loader buffers 16.0 GiB\), it has [0-9.]+ [GM]iB; the largest batch that fits with 10% to spare is [0-9]+$" \
    -- --model mlp --batch 1048576
else
  echo "skip mlp with a batch of 1048576: this host has room for it"
fi
# all four host devices share the host's memory: summed, not each against all of it
expect "dp on host:4, gpt with a batch of 1048576" \
  "^troupe: --batch 1048576: needs [0-9.]+ GiB on host:0..host:3 together \(" -- \
  --model gpt --strategy dp --devices host:4 --batch 1048576
exit $failed
