#!/usr/bin/env bash
# train_local.sh TROUPE — `troupe train --strategy local`: its flags refused by name where they
# do not apply or hold what cannot be (exit 2, before training), and a run's --json saying
# sync_every, warmup_sync and outer (null in a run of another strategy).
set -u
troupe=$1
failed=0

# expect WHAT PATTERN -- ARGS...: exit status 2 and stderr matching PATTERN (grep -E)
expect() {
  local what=$1 pattern=$2
  shift 3
  local err rc
  err=$("$troupe" train --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]] || ! grep -qE -- "$pattern" <<<"$err"; then
    printf 'FAIL %s: exit %d, stderr: %s\n' "$what" "$rc" "$err"
    failed=1
  else
    printf 'ok   %s: %s\n' "$what" "$err"
  fi
}

for flag in "--sync-every 4" "--warmup-sync 2" "--outer nesterov" "--outer-lr 0.5" \
            "--outer-momentum 0.5"; do
  # shellcheck disable=SC2086
  expect "$flag without local" "^troupe: ${flag%% *}: applies to --strategy local only \(not dp\)" -- \
    --strategy dp --devices host:2 $flag --steps 2
done
expect "H 0" "^troupe: --sync-every: '0' is not a whole number from 1" -- \
  --strategy local --devices host:2 --sync-every 0 --steps 2
expect "K < 0" "^troupe: --warmup-sync: '-1' is not a whole number from 0" -- \
  --strategy local --devices host:2 --warmup-sync -1 --steps 2
expect "outer lr 0" "^troupe: --outer-lr: '0' is not a number from" -- \
  --strategy local --devices host:2 --outer nesterov --outer-lr 0 --steps 2
expect "outer lr < 0" "^troupe: --outer-lr: '-0.5' is not a number from" -- \
  --strategy local --devices host:2 --outer nesterov --outer-lr -0.5 --steps 2
expect "outer lr with average" "^troupe: --outer-lr 0.5: .*--outer average has none" -- \
  --strategy local --devices host:2 --outer-lr 0.5 --steps 2
expect "an unknown outer step" "^troupe: --outer: 'adam' is not average or nesterov" -- \
  --strategy local --devices host:2 --outer adam --steps 2
expect "zero" "^troupe: --zero: applies to --strategy dp or hybrid only \(not local\)" -- \
  --strategy local --devices host:2 --zero 1 --steps 2

# --json: the settings that ran (H defaults to 8), null in a dp run
json=$("$troupe" train --quiet --json --model mlp --strategy local --devices host:2 --steps 10 \
       --warmup-sync 2 --outer nesterov) || { echo "FAIL local run: exit $?"; failed=1; }
for want in '"sync_every":8' '"warmup_sync":2' '"outer":"nesterov"' '"strategy":"local"'; do
  if grep -qF -- "$want" <<<"$json"; then echo "ok   --json says $want"
  else echo "FAIL --json lacks $want: $json"; failed=1; fi
done
json=$("$troupe" train --quiet --json --model mlp --strategy dp --devices host:2 --steps 2) ||
  { echo "FAIL dp run: exit $?"; failed=1; }
for want in '"sync_every":null' '"warmup_sync":null' '"outer":null'; do
  if grep -qF -- "$want" <<<"$json"; then echo "ok   dp's --json says $want"
  else echo "FAIL dp's --json lacks $want: $json"; failed=1; fi
done
# --print-plan (on stderr) says the period and what a sync does
plan=$("$troupe" train --quiet --print-plan --model mlp --strategy local --devices host:2 \
       --steps 1 --sync-every 4 --warmup-sync 3 2>&1) || { echo "FAIL local plan: exit $?"; failed=1; }
want="local SGD: the replicas' parameters averaged every 4 steps, after 3 steps of dp"
if grep -qF -- "$want" <<<"$plan"; then echo "ok   --print-plan says the period"
else echo "FAIL --print-plan lacks '$want': $plan"; failed=1; fi
exit $failed
