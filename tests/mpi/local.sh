#!/usr/bin/env bash
# local.sh TROUPE PARAMS_DIFF — local SGD across two MPI ranks, a replica on each (the replica
# group's sum of the parameters crossing through the transport), checked against the same
# training in one process (within 1e-5: the ranks' sum is in another order), DiLoCo after
# warm-up steps of dp; the same with --elastic, whose sums are gathered to rank 0 (bitwise);
# and a run checkpointed mid-period across the ranks and resumed there
# is bitwise the uninterrupted run (every replica's part, and the outer state, crossing to
# the coordinator's rank).
set -u
troupe=$(realpath "$1") params_diff=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
common=(--model simplenet --quiet --deterministic --strategy local --sync-every 4 --warmup-sync 2
        --outer nesterov --outer-lr 0.7)

fail() { printf 'FAIL local across ranks: %s\n' "$*"; exit 1; }

"$troupe" train "${common[@]}" --steps 21 --devices host:2 --checkpoint one.ckpt ||
  fail "the run in one process"
timeout 120 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --steps 21 --devices host:1 \
  --checkpoint ranks.ckpt >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
"$params_diff" ranks.ckpt one.ckpt 1e-5 || fail "parameters differ from one process's"
printf 'ok   local SGD (DiLoCo) across two ranks is the run in one process\n'

# --elastic: the replica group's sums gathered to rank 0 and summed there (dist/collective.c, so
# that they outlive a rank), in the order the peer sum in one process takes for two
"$troupe" train "${common[@]}" --elastic --steps 21 --devices host:2 --checkpoint one-elastic.ckpt ||
  fail "the elastic run in one process"
timeout 120 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --elastic --steps 21 \
  --devices host:1 --checkpoint ranks-elastic.ckpt >out.txt 2>err.txt ||
  fail "elastic: mpirun exit $?: $(cat err.txt)"
"$params_diff" ranks-elastic.ckpt one-elastic.ckpt 0 ||
  fail "elastic: parameters differ from one process's"
printf 'ok   elastic local SGD across two ranks (its sums gathered) is bitwise the run in one process\n'

timeout 120 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --steps 11 --devices host:1 \
  --checkpoint half.ckpt >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
timeout 120 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --steps 21 --devices host:1 \
  --resume half.ckpt --checkpoint resumed.ckpt >out.txt 2>err.txt ||
  fail "resumed: mpirun exit $?: $(cat err.txt)"
cmp -s resumed.ckpt ranks.ckpt || fail "resumed at step 11 (mid-period) differs from the uninterrupted run"
printf 'ok   resumed mid-period across two ranks is bitwise the uninterrupted run\n'
