#!/usr/bin/env bash
# train_outputs.sh TROUPE — `troupe train`'s outputs (--checkpoint, --trace) never destroy:
# a device, FIFO or socket there is refused (exit 2) and left as it was; a symlink is written
# through and stays a link; an output that is an input or the other output is refused; a
# rewrite keeps the file's mode, owner and group; a path changed during the run is left as
# it is and the checkpoint kept beside it (exit 1, naming both); one run at a time writes a
# checkpoint (a second is refused naming the first's pid, a killed one leaves no stale lock),
# while others may resume from it.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-outputs-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
umask 022
failed=0

fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }

# expect WHAT STATUS PATTERN -- ARGS: `troupe train ARGS` exits STATUS within 20 s, its stderr
# matching PATTERN (grep -E)
expect() {
  local what=$1 status=$2 pattern=$3
  shift 4
  local err rc
  err=$(timeout 20 "$troupe" train --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 124 ]]; then
    fail "$what: still running after 20 s"
  elif [[ $rc -ne $status ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$what: exit $rc, stderr: $err"
  else
    ok "$what: ${err:-(nothing)}"
  fi
}

# what FILE: its kind, as stat names it ("fifo", "regular file", "symbolic link", ...)
kind() { stat -c %F "$1" 2>/dev/null | tr A-Z a-z; }

long=(--steps 100000000)

# Not a regular file: refused before anything runs, and left as it was.
mkfifo fifo
expect "a FIFO as the checkpoint" 2 "^troupe: --checkpoint 'fifo': a FIFO, not a regular file" -- \
  "${long[@]}" --checkpoint fifo
expect "a FIFO as the trace" 2 "^troupe: --trace 'fifo': a FIFO, not a regular file" -- \
  "${long[@]}" --trace fifo
[[ $(kind fifo) == fifo ]] || fail "the FIFO was replaced: $(kind fifo)"
ln -s fifo to-fifo
expect "a symlink to a FIFO" 2 "^troupe: --checkpoint 'to-fifo': a FIFO, not a regular file" -- \
  "${long[@]}" --checkpoint to-fifo
if python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")' 2>/dev/null; then
  expect "a socket as the checkpoint" 2 "^troupe: --checkpoint 'sock': a socket, not a regular file" -- \
    "${long[@]}" --checkpoint sock
  [[ $(kind sock) == socket ]] || fail "the socket was replaced: $(kind sock)"
else
  echo "skip a socket: python3 cannot make one here"
fi
# A character device of our own (1,3 is null's), never the system's /dev/null.
if mknod null c 1 3 2>/dev/null; then
  expect "a character device as the checkpoint" 2 \
    "^troupe: --checkpoint 'null': a character device, not a regular file" -- \
    "${long[@]}" --checkpoint null
  expect "a character device as the trace" 2 \
    "^troupe: --trace 'null': a character device, not a regular file" -- \
    "${long[@]}" --trace null
  [[ $(kind null) == "character special file" ]] || fail "the device was replaced: $(kind null)"
else
  echo "skip a character device: mknod is not permitted here"
fi

# A symlink is written through: its target gets the file, the link stays a link. A dangling
# link makes its target; a relative link is read from the link's directory.
mkdir out
ln -s real.st out/link.st
ln -s out/t-real.json t-link.json
expect "a checkpoint and a trace through symlinks" 0 "" -- --steps 2 --checkpoint out/link.st \
  --trace t-link.json
if [[ $(kind out/link.st) != "symbolic link" || $(kind out/real.st) != "regular file" ||
  ! -s out/real.st ]]; then
  fail "the checkpoint's symlink: link $(kind out/link.st), target $(kind out/real.st)"
elif [[ $(kind t-link.json) != "symbolic link" || ! -s out/t-real.json ]]; then
  fail "the trace's symlink: link $(kind t-link.json), target $(kind out/t-real.json)"
else
  ok "symlinks written through, links kept"
fi
expect "resuming through the link" 0 "" -- --steps 4 --resume out/link.st --checkpoint out/link.st
[[ $(kind out/link.st) == "symbolic link" ]] || fail "the link was replaced when rewritten"

# An output is no input, nor the other output: by inode where the files exist (a hard link
# too), by where they would be made where they do not.
head -c 256 /dev/urandom >x.npy
head -c 256 /dev/urandom >y.npy
ln x.npy hard.npy
expect "the checkpoint over the data" 2 "^troupe: --checkpoint 'x.npy': the same file as --data 'x.npy'" -- \
  --data x.npy --labels y.npy --steps 2 --checkpoint x.npy
expect "the checkpoint over the data by a hard link" 2 \
  "^troupe: --checkpoint 'hard.npy': the same file as --data 'x.npy'" -- \
  --data x.npy --labels y.npy --steps 2 --checkpoint hard.npy
expect "the trace over the labels" 2 "^troupe: --trace './y.npy': the same file as --labels 'y.npy'" -- \
  --data x.npy --labels y.npy --steps 2 --trace ./y.npy
expect "the trace over the checkpoint resumed" 2 \
  "^troupe: --trace 'out/link.st': the same file as --resume 'out/real.st'" -- \
  --steps 8 --resume out/real.st --trace out/link.st
expect "the trace over the checkpoint, neither there yet" 2 \
  "^troupe: --trace 'out/../new.st': the same file as --checkpoint 'new.st'" -- \
  --steps 2 --checkpoint new.st --trace out/../new.st
[[ -e new.st ]] && fail "the refused run wrote new.st"
cmp -s x.npy hard.npy && [[ $(stat -c %s x.npy) == 256 ]] || fail "the data was changed"

# The mode is kept across rewrites (the umask would make 644).
expect "a first checkpoint" 0 "" -- --steps 2 --checkpoint m.st --trace m.json
chmod 600 m.st
chmod 640 m.json
expect "a rewrite" 0 "" -- --steps 2 --checkpoint m.st --trace m.json
if [[ $(stat -c %a m.st) != 600 || $(stat -c %a m.json) != 640 ]]; then
  fail "modes after a rewrite: checkpoint $(stat -c %a m.st) (was 600), trace $(stat -c %a m.json) (was 640)"
else
  ok "modes kept: checkpoint 600, trace 640"
fi

# The owner and group are kept across rewrites too (as root, which may give a file to anyone).
if [[ $(id -u) == 0 ]]; then
  chown 4321:4322 m.st m.json
  expect "a rewrite of another user's files" 0 "" -- --steps 2 --checkpoint m.st --trace m.json
  if [[ $(stat -c %u:%g m.st) != 4321:4322 || $(stat -c %u:%g m.json) != 4321:4322 ]]; then
    fail "owners after a rewrite: checkpoint $(stat -c %u:%g m.st), trace $(stat -c %u:%g m.json) (were 4321:4322)"
  else
    ok "owner and group kept: 4321:4322"
  fi
else
  echo "skip owners kept: not root"
fi

# A path changed during the run is checked again at each write: a FIFO, a symlink to another
# file or a device moved over the checkpoint after its first write is left as it is; the run
# ends (exit 1) naming it and the file the checkpoint was kept in, which resumes.
# moved WHAT PATTERN MAKE...: MAKE builds "new", which is moved over ck-moved.st once written
moved() {
  local what=$1 pattern=$2
  shift 2
  rm -f ck-moved.st ck-moved.st.troupe-saved-* new
  "$troupe" train --quiet --seconds 30 --checkpoint ck-moved.st --checkpoint-every 1 2>moved.txt &
  local pid=$! i rc
  for ((i = 0; i < 3000; i++)); do [[ -s ck-moved.st ]] && break; sleep 0.01; done
  "$@"
  mv -T new ck-moved.st
  for ((i = 0; i < 2000; i++)); do kill -0 $pid 2>/dev/null || break; sleep 0.01; done
  kill -9 $pid 2>/dev/null && fail "$what: still running 20 s after"
  wait $pid
  rc=$?
  local saved
  saved=$(ls ck-moved.st.troupe-saved-* 2>/dev/null)
  if [[ $rc -ne 1 ]] || ! grep -qE -- "^troupe: .*--checkpoint 'ck-moved.st': $pattern: left as it is; the checkpoint of step [0-9]+ is in '$saved'" moved.txt; then
    fail "$what: exit $rc, stderr: $(cat moved.txt)"
  elif ! "$troupe" train --quiet --seconds 0.2 --resume "$saved" 2>&1; then
    fail "$what: the checkpoint kept in $saved does not resume"
  else
    ok "$what: $(cat moved.txt)"
  fi
}
echo "the user's" >theirs.txt
moved "a FIFO moved over the checkpoint" "became a FIFO during the run" mkfifo new
[[ -p ck-moved.st ]] || fail "the FIFO was replaced: $(kind ck-moved.st)"
moved "a symlink to another file moved over the checkpoint" \
  "became a symbolic link to 'theirs.txt' during the run" ln -s theirs.txt new
[[ -L ck-moved.st && $(cat theirs.txt) == "the user's" ]] || fail "the link's target was written"
if mknod probe-node c 1 3 2>/dev/null; then
  rm probe-node
  moved "a device moved over the checkpoint" "became a character device during the run" \
    mknod new c 1 3
  [[ -c ck-moved.st ]] || fail "the device was replaced: $(kind ck-moved.st)"
else
  echo "skip a device moved over the checkpoint: mknod is not permitted here"
fi
rm -f ck-moved.st ck-moved.st.troupe-saved-*

# The names troupe derives follow the rules of the names given: the checkpoint's lock file
# is no trace (the trace's rename would take the lock from under the run).
expect "the trace over the checkpoint's lock file" 2 \
  "^troupe: --checkpoint 'lk.st': its lock file '.lk.st.troupe-lock': the same file as --trace '.lk.st.troupe-lock'" -- \
  --steps 2 --checkpoint lk.st --trace .lk.st.troupe-lock
[[ -e lk.st || -e .lk.st.troupe-lock ]] && fail "the refused run wrote lk.st or its lock"

# One writer per checkpoint. The first run holds .ck.st.troupe-lock; a second writer is refused
# naming it, by the path or through a link; readers resume from the checkpoint it keeps
# rewriting. Killed, it leaves no lock that stops the next run.
"$troupe" train --quiet "${long[@]}" --checkpoint ck.st --checkpoint-every 1 2>first.txt &
first=$!
for ((i = 0; i < 3000; i++)); do [[ -s ck.st && -s .ck.st.troupe-lock ]] && break; sleep 0.01; done
if [[ ! -s .ck.st.troupe-lock ]] || ! kill -0 $first 2>/dev/null; then
  fail "the first writer holds no lock: $(cat first.txt)"
else
  expect "a second writer" 2 "^troupe: --checkpoint 'ck.st': another run \(pid $first\) writes it" -- \
    --steps 2 --checkpoint ck.st
  ln -s ck.st ck-link.st
  expect "a second writer through a link" 2 \
    "^troupe: --checkpoint 'ck-link.st': another run \(pid $first\) writes it" -- \
    --steps 2 --checkpoint ck-link.st
  for k in 1 2 3; do
    expect "a reader while it writes ($k)" 0 "" -- --seconds 0.3 --resume ck.st
  done
fi
kill -9 $first
wait $first 2>/dev/null
[[ -e .ck.st.troupe-lock ]] || fail "no lock file left by the killed writer (the case is not tested)"
expect "a writer after the first was killed" 0 "" -- --steps 2 --checkpoint ck.st
[[ -e .ck.st.troupe-lock ]] && fail ".ck.st.troupe-lock is left after a run that ended"

# A lock file of the user's is not troupe's: `flake.lock` (Nix's, Cargo's) beside a checkpoint
# `flake` stays as it was; what sits at troupe's own lock name without being its lock file
# refuses the run at once, naming it, and stays.
printf '{"nodes":{}}\n' >flake.lock
expect "a checkpoint beside the user's flake.lock" 0 "" -- --steps 2 --checkpoint flake
[[ $(cat flake.lock) == '{"nodes":{}}' ]] || fail "flake.lock was changed: $(ls -l flake.lock)"
mkfifo .fifo-ck.troupe-lock
expect "a FIFO at the lock file's name" 2 \
  "^troupe: --checkpoint 'fifo-ck': its lock file '.fifo-ck.troupe-lock' is a FIFO: it is left as it is" \
  -- --steps 2 --checkpoint fifo-ck
[[ -p .fifo-ck.troupe-lock ]] || fail "the FIFO at the lock file's name is gone"
exit $failed
