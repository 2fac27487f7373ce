#!/usr/bin/env bash
# train_streams.sh TROUPE — `troupe train` and its standard streams: closed ones (`<&- >&-
# 2>&-`) do not end the run at its end (libuv once took their descriptors for its own and
# aborted, exit 134); --json that cannot be written (`>/dev/full`) fails with a message.
set -u
troupe=$(realpath "$1")
work=$(mktemp -d /tmp/troupe-streams-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0
fail() { printf 'FAIL %s\n' "$*"; failed=1; }
ok() { printf 'ok   %s\n' "$*"; }
run=(train --model simplenet --steps 20)

# every stream closed, and each alone; the checkpoint shows the run went to its end
for closed in all stdin stdout stderr; do
  rm -f ck.st
  case $closed in
    all) "$troupe" "${run[@]}" --json --checkpoint ck.st <&- >&- 2>&- ;;
    stdin) "$troupe" "${run[@]}" --json --checkpoint ck.st <&- >/dev/null 2>&1 ;;
    stdout) "$troupe" "${run[@]}" --json --checkpoint ck.st >&- 2>/dev/null ;;
    stderr) "$troupe" "${run[@]}" --json --checkpoint ck.st 2>&- >/dev/null ;;
  esac
  rc=$?
  if [[ $rc -ne 0 ]]; then fail "$closed closed: exit $rc"
  elif [[ ! -s ck.st ]]; then fail "$closed closed: no checkpoint written"
  else ok "$closed closed: exit 0, checkpoint written"
  fi
done

# --json on a full device: non-zero, and stderr says what could not be written
if [[ -w /dev/full ]]; then
  "$troupe" "${run[@]}" --quiet --json >/dev/full 2>err.txt
  rc=$?
  if [[ $rc -eq 0 ]]; then fail "--json >/dev/full: exit 0"
  elif ! grep -q '^troupe: --json: writing the figures to standard output failed: ' err.txt; then
    fail "--json >/dev/full: exit $rc without the message: $(cat err.txt)"
  else ok "--json >/dev/full: exit $rc: $(cat err.txt)"
  fi
else
  ok "--json >/dev/full: skipped (no /dev/full here)"
fi
exit $failed
